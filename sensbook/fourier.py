"""The Fourier (Walsh–Hadamard) view of a Boolean function's truth table.

Write F(x) = (-1)^f(x) in {-1, +1} and chi_S(x) = (-1)^(sum_{i in S} x_i) for S a subset
of the N positions. Every F is a unique combination F = sum_S f^(S) chi_S with f^(S) =
2^-N sum_x F(x) chi_S(x), and sum_S f^(S)^2 = 1 (Parseval). The spectral weight at
degree k is W_k(f) = sum_{|S| = k} f^(S)^2, a probability distribution over k = 0..N.

The fact this module is for (O'Donnell 2014, chapter 2): the influence of bit i,
Pr_x[f(x) != f(x xor e_i)], is sum_{S containing i} f^(S)^2, so the total influence
sum_i Inf_i = sum_k k W_k(f) equals the average sensitivity E_x[s(f, x)] of chapter 1.

A set S is indexed like a string (:mod:`sensbook.boolean`): bit n-1 of the index says
whether position n is in S. The transform runs on the device of the table, batched over
leading axes, in integers (exact up to N = 24: every partial sum is at most 2^24 in
size).
"""
from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import torch

from .boolean import (MAX_EXHAUSTIVE_N, BooleanFunction, Constant, Majority, Parity,
                      check_n)


def _signs(table):
    """(-1)^f as int32 (*pop, 2^N) and N, from a 0/1 (or bool) table; undecided (-1) or
    non-finite (-2) labels are refused, never counted as a class."""
    if not isinstance(table, torch.Tensor):
        table = torch.as_tensor(np.asarray(table))
    if table.dim() < 1:
        raise ValueError("table must be a tensor of shape (..., 2^N)")
    size = table.shape[-1]
    N = size.bit_length() - 1
    if size != 2**N or not 1 <= N <= MAX_EXHAUSTIVE_N:
        raise ValueError(f"table must have 2^N entries in its last axis, 1 <= N <= "
                         f"{MAX_EXHAUSTIVE_N}; got {size}")
    if table.dtype != torch.bool:
        bad = (table != 0) & (table != 1)
        if bad.any():
            v = table[bad].flatten()[0].item()
            raise ValueError(f"table must hold labels 0/1 only; found {v!r} "
                             f"(undecided = -1 and non-finite = -2 have no Fourier "
                             f"expansion: drop those models)")
    return 1 - 2 * table.to(torch.int32), N


def walsh_hadamard(table) -> torch.Tensor:
    r"""The unnormalised Walsh–Hadamard spectrum of truth tables.

    Parameters
    ----------
    table : torch.Tensor or array-like
        Labels 0/1 (or bool) of shape ``(..., 2**N)``, ``1 <= N <= 24`` (e.g.
        :func:`sensbook.truth_table`); entry ``i`` is the label of the string of index
        ``i = sum_n x_n 2^(n-1)``; undecided or non-finite labels are refused.

    Returns
    -------
    torch.Tensor
        int32 of the same shape, on the same device: the coefficients ``c[S]`` of Notes. The
        set S is indexed like the strings: bit ``n - 1`` of the output's index says whether
        position ``n`` is in S.

    Notes
    -----
    .. math:: c[S] = \sum_x (-1)^{f(x) + \sum_{i \in S} x_i} = 2^N \hat f(S)

    The fast transform: ``N`` butterfly passes of :math:`O(2^N)` each, in integers.
    """
    F, N = _signs(table)
    pop = F.shape[:-1]
    F = F.reshape(-1, 2**N)
    for b in range(N):                 # pair the strings that differ in bit b
        F = F.reshape(F.shape[0], 2 ** (N - b - 1), 2, 2**b)
        lo, hi = F[:, :, 0], F[:, :, 1]
        F = torch.stack((lo + hi, lo - hi), dim=2)
    return F.reshape(*pop, 2**N)


def degrees(N: int, *, device=None) -> torch.Tensor:
    """The size :math:`|S|` of every set ``S``, by index ``0..2**N - 1``.

    Parameters
    ----------
    N : int
        The number of positions, 1 to 24.
    device : torch.device or str or None
        Where the tensor is made.

    Returns
    -------
    torch.Tensor
        int64, shape ``(2**N,)``.
    """
    N = check_n(N, maximum=MAX_EXHAUSTIVE_N)
    deg = torch.zeros(1, dtype=torch.int64, device=device)
    for _ in range(N):           # indices with bit b set: the previous block, plus one
        deg = torch.cat([deg, deg + 1])
    return deg


def spectral_weights(table) -> torch.Tensor:
    r"""The spectral weight by degree, :math:`W_k(f) = \sum_{|S| = k} \hat f(S)^2`.

    Parameters
    ----------
    table : torch.Tensor or array-like
        Labels 0/1 of shape ``(..., 2**N)``, as for :func:`walsh_hadamard`.

    Returns
    -------
    torch.Tensor
        float64, shape ``(..., N + 1)``: :math:`W_0, \dots, W_N`; each row sums to 1.

    Notes
    -----
    Exact: the squares are summed as integers and divided by :math:`4^N` (a power of two).
    """
    c = walsh_hadamard(table)
    N = c.shape[-1].bit_length() - 1
    pop = c.shape[:-1]
    c = c.reshape(-1, 2**N).to(torch.int64)
    W = torch.zeros(c.shape[0], N + 1, dtype=torch.int64, device=c.device)
    W.index_add_(1, degrees(N, device=c.device), c * c)
    return (W.double() / 4.0**N).reshape(*pop, N + 1)


def total_influence(W) -> torch.Tensor:
    r"""The total influence :math:`\sum_k k W_k`, which equals the average sensitivity.

    Parameters
    ----------
    W : torch.Tensor or array-like
        Spectral weights of shape ``(..., N + 1)`` (:func:`spectral_weights`).

    Returns
    -------
    torch.Tensor
        float64, shape ``(...)``.
    """
    W = torch.as_tensor(W, dtype=torch.float64)
    return (W * torch.arange(W.shape[-1], dtype=torch.float64, device=W.device)).sum(-1)


def random_function_weights(N: int) -> np.ndarray:
    r"""The expected spectral weights of a uniformly random function,
    :math:`E[W_k] = \binom{N}{k} / 2^N`.

    Parameters
    ----------
    N : int
        The string length.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(N + 1,)``.

    Notes
    -----
    Each :math:`\hat f(S)` is an average of :math:`2^N` independent signs, so
    :math:`E[\hat f(S)^2] = 2^{-N}` for every ``S``.
    """
    N = check_n(N)
    return np.array([comb(N, k) for k in range(N + 1)], dtype=np.float64) / 2.0**N


def closed_form_weights(f: BooleanFunction, N: int) -> np.ndarray:
    """The spectral weights :math:`W_0, \\dots, W_N` of the book's families, in closed form.

    Parameters
    ----------
    f : BooleanFunction
        A constant, PARITY, FIRST, DICTATOR, sparse PARITY, or MAJORITY or sparse MAJORITY on
        an odd number of bits.
    N : int
        The string length.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(N + 1,)``.

    Notes
    -----
    * a constant: all weight at 0;
    * PARITY / m-sparse PARITY: f = XOR of m bits is -chi_S up to sign, all weight at m
      (FIRST and DICTATOR: m = 1);
    * MAJORITY on m bits, m odd (O'Donnell 2014, section 5.3): for odd k, f^(S) =
      (-1)^((k-1)/2) C((m-1)/2, (k-1)/2) / C(m-1, k-1) * 2 C(m-1, (m-1)/2) / 2^m for
      each of the C(m, k) sets |S| = k; even degrees carry nothing.
    """
    N = check_n(N, maximum=62)
    if not isinstance(f, BooleanFunction):
        raise ValueError(f"f must be a sensbook BooleanFunction, got {f!r}")
    f._check_n(N)
    W = np.zeros(N + 1)
    if isinstance(f, Constant):
        W[0] = 1.0
        return W
    if isinstance(f, (Parity, Majority)):
        m = N if f.S is None else len(f.S)
        if isinstance(f, Parity):
            W[m] = 1.0
            return W
        if m % 2 == 0:
            raise ValueError(f"closed form for MAJORITY needs an odd number of bits, "
                             f"got {m}")
        h = (m - 1) // 2
        for k in range(1, m + 1, 2):
            coef = Fraction(comb(h, (k - 1) // 2), comb(m - 1, k - 1)) \
                * Fraction(2 * comb(m - 1, h), 2**m)
            W[k] = float(comb(m, k) * coef * coef)
        return W
    raise ValueError(f"no closed form for {f!r}; allowed: constants, PARITY, FIRST, "
                     f"DICTATOR, sparse PARITY, MAJORITY and sparse MAJORITY on an odd "
                     f"number of bits")
