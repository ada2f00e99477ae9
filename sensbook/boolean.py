"""Boolean functions on {0,1}^N as batched callables, with exact sensitivity profiles.

A string ``x`` is a tensor of shape ``(..., N)`` with entries 0/1 (any dtype). Position ``n``
of the paper (1-based) is column ``n - 1``. The index of a string is
``sum_n x_n 2^(n-1)``, so flipping bit ``n`` is ``index ^ (1 << (n-1))``: this is how the
profiler finds Hamming neighbours without building them.

Every function here knows its exact profile ``K_k(N) = #{x : s(f, x) = k}`` in closed form
(Section 2 of Kövér et al., 2026); the tests check each against brute force.
"""
from __future__ import annotations

from math import comb, isfinite
from numbers import Integral, Real

import numpy as np
import torch

#: The largest N for which exhaustive work over all 2^N strings is allowed.
MAX_EXHAUSTIVE_N = 24


def check_int(value, argument, *, minimum=None, maximum=None) -> int:
    """An integral scalar (Python or numpy int, never bool or a float such as 2.0) in
    ``[minimum, maximum]``, as a Python int; otherwise an error naming ``argument``."""
    lo = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Integral):
        raise TypeError(f"{argument} must be an integer{lo}, got {value!r} ({type(value).__name__})")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{argument} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{argument}={value} is too large here: allowed {argument} <= {maximum}")
    return value


def check_real(value, argument, *, minimum=None, strict=False) -> float:
    """A finite real scalar (Python or numpy int/float, never bool) ``>= minimum`` (``>`` when
    ``strict``), as a Python float; otherwise an error naming ``argument``."""
    rel = ">" if strict else ">="
    lo = "" if minimum is None else f" {rel} {minimum}"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, Real):
        raise TypeError(f"{argument} must be a finite number{lo}, got {value!r} ({type(value).__name__})")
    value = float(value)
    if not isfinite(value) or (minimum is not None and (value <= minimum if strict else value < minimum)):
        raise ValueError(f"{argument} must be a finite number{lo}, got {value!r}")
    return value


#: The largest memory budget accepted (MiB): 1 PiB, more than any machine has; a larger
#: ``memory_mb`` is a unit mistake, and its bytes would overflow the chunk arithmetic.
MAX_MEMORY_MB = float(2**30)


def check_memory_mb(memory_mb, argument="memory_mb") -> float:
    """A memory budget in MiB: a finite number > 0 and at most ``MAX_MEMORY_MB``."""
    memory_mb = check_real(memory_mb, argument, minimum=0, strict=True)
    if memory_mb > MAX_MEMORY_MB:
        raise ValueError(f"{argument}={memory_mb:g} is more than any machine has: a budget in MiB "
                         f"must be > 0 and at most {MAX_MEMORY_MB:.0f} (1 PiB), e.g. 256")
    return memory_mb


def check_seed(seed, argument="seed") -> int:
    """A seed: an integer in [0, 2^63) (what ``torch.Generator.manual_seed`` keeps exactly)."""
    return check_int(seed, argument, minimum=0, maximum=2**63 - 1)


def check_n(N, *, argument="N", maximum=None) -> int:
    """Validate a string length: an integer >= 1 (and <= ``maximum`` when given)."""
    return check_int(N, argument, minimum=1, maximum=maximum)


def check_strings(x, N=None, *, argument="x") -> torch.Tensor:
    """Validate a batch of binary strings: a tensor of shape (..., N) with entries in {0, 1}."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"{argument} must have shape (..., N) with N >= 1, got {tuple(x.shape)}")
    if N is not None and x.shape[-1] != N:
        raise ValueError(f"{argument} has length {x.shape[-1]} in its last axis, expected N={N}")
    if x.is_floating_point() and not torch.isfinite(x).all():
        raise ValueError(f"{argument} must be binary (0/1); it has non-finite entries")
    if x.numel() and not ((x == 0) | (x == 1)).all():
        bad = x[(x != 0) & (x != 1)].flatten()[0].item()
        raise ValueError(f"{argument} must be binary (entries 0 or 1); found {bad!r}")
    return x


def strings(N: int, start: int = 0, stop: int | None = None, *, device=None, dtype=torch.float32):
    """The strings with indices ``start..stop-1`` (default: all 2^N), shape (stop-start, N);
    ``0 <= start <= stop <= 2^N``. The index of a string is ``sum_n x_n 2^(n-1)``: column 0
    (the paper's position 1) is the lowest bit, so row i of ``strings(N)`` has index i."""
    N = check_n(N, maximum=62)
    stop = 2**N if stop is None else check_int(stop, "stop", minimum=0, maximum=2**N)
    start = check_int(start, "start", minimum=0, maximum=stop)
    idx = torch.arange(start, stop, device=device, dtype=torch.int64)
    return index_to_strings(idx, N, dtype=dtype)


def index_to_strings(idx: torch.Tensor, N: int, *, dtype=torch.float32) -> torch.Tensor:
    """Bits of integer indices: ``x[..., n-1] = (idx >> (n-1)) & 1``."""
    shifts = torch.arange(N, device=idx.device, dtype=torch.int64)
    return ((idx.unsqueeze(-1) >> shifts) & 1).to(dtype)


def strings_to_index(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`index_to_strings` (int64; N <= 62)."""
    x = check_strings(x)
    if x.shape[-1] > 62:
        raise ValueError(f"x has length {x.shape[-1]}: an int64 index holds strings of length <= 62")
    w = 2 ** torch.arange(x.shape[-1], device=x.device, dtype=torch.int64)
    return (x.to(torch.int64) * w).sum(-1)


def _check_positions(S, argument="S") -> tuple:
    """A non-empty set of 1-based positions (integers >= 1), sorted."""
    try:
        items = list(S)
    except TypeError:
        raise TypeError(f"{argument} must be a non-empty collection of positions >= 1, got {S!r}") from None
    if not items:
        raise ValueError(f"{argument} must be a non-empty set of positions >= 1, got {S!r}")
    return tuple(sorted({check_int(s, f"each position in {argument}", minimum=1) for s in items}))


def _positions(S, N) -> list[int]:
    """1-based positions S as 0-based columns, checked against N."""
    cols = [s - 1 for s in S]
    if N is not None and max(S) > N:
        raise ValueError(f"this function reads position {max(S)}, so it needs N >= {max(S)}; got N={N}")
    return cols


class BooleanFunction:
    """A Boolean function on {0,1}^N for every N it is defined on.

    Call it on strings of shape (..., N) to get a bool tensor of shape (...).
    :meth:`profile` gives the exact sensitivity profile K_0..K_N.
    """

    name = "f"

    def __call__(self, x) -> torch.Tensor:
        x = check_strings(x)
        self._check_n(x.shape[-1])
        return self._eval(x)

    def _check_n(self, N):
        check_n(N)

    def _eval(self, x):  # pragma: no cover - abstract
        raise NotImplementedError

    def profile(self, N: int) -> np.ndarray:
        """Exact profile ``K[k] = #{x in {0,1}^N : s(f, x) = k}``, k = 0..N (int64)."""
        N = check_n(N, maximum=62)
        self._check_n(N)
        return self._profile(N)

    def K0(self, N: int) -> int:
        """Number of zero-sensitivity strings, K_0(N)."""
        return int(self.profile(N)[0])

    def average_sensitivity(self, N: int) -> float:
        """as(f) = sum_k k K_k / 2^N."""
        K = self.profile(N)
        return float(np.dot(np.arange(N + 1), K) / 2.0**N)

    def max_sensitivity(self, N: int) -> int:
        K = self.profile(N)
        return int(np.nonzero(K)[0].max())

    def __repr__(self):
        return self.name


def _junta_profile(N, m, small):
    """Profile of a function reading m of N bits, from its profile `small` on those m bits."""
    K = np.zeros(N + 1, dtype=np.int64)
    K[: m + 1] = np.asarray(small, dtype=np.int64) * 2 ** (N - m)
    return K


def _threshold_profile(m, t):
    """Profile of x -> [|x| >= t] on m bits, 1 <= t <= m.

    Weight t: flipping any of its t ones drops below t, s = t. Weight t-1: flipping any of its
    m-t+1 zeros reaches t, s = m-t+1. Every other weight has s = 0.
    """
    K = np.zeros(m + 1, dtype=np.int64)
    K[t] += comb(m, t)
    K[m - t + 1] += comb(m, t - 1)
    K[0] += 2**m - comb(m, t) - comb(m, t - 1)
    return K


class Parity(BooleanFunction):
    """PARITY (S = None: all bits) or m-SPARSE PARITY on the 1-based positions S.

    f(x) = sum_{n in S} x_n mod 2. Every string has s = ``|S|``, so ``K_{|S|} = 2^N`` and
    K_0 = 0. DICTATOR and FIRST are the case ``|S| = 1`` (see :class:`sensbook.boolean.Dictator`).
    """

    def __init__(self, S=None, name=None):
        self.S = None if S is None else _check_positions(S)
        self.name = name or ("PARITY" if S is None else f"{len(self.S)}-SPARSE PARITY{list(self.S)}")

    def _check_n(self, N):
        check_n(N)
        if self.S is not None:
            _positions(self.S, N)

    def _eval(self, x):
        cols = slice(None) if self.S is None else _positions(self.S, None)
        return (x[..., cols].to(torch.int64).sum(-1) % 2) == 1

    def _profile(self, N):
        m = N if self.S is None else len(self.S)
        small = np.zeros(m + 1, dtype=np.int64)
        small[m] = 2**m
        return _junta_profile(N, m, small)


class Dictator(Parity):
    """DICTATOR x_i (1-based i); FIRST is DICTATOR(1). s = 1 everywhere, so K_0 = 0."""

    def __init__(self, i: int, name=None):
        if check_int(i, "i (a position)") < 1:
            raise ValueError(f"i must be a position >= 1, got {i!r}")
        i = int(i)
        super().__init__((i,), name=name or ("FIRST" if i == 1 else f"DICTATOR({i})"))


class Majority(BooleanFunction):
    """MAJORITY (S = None: all bits) or m-SPARSE MAJORITY on the 1-based positions S.

    f(x) = 1 iff strictly more than half of the read bits are 1, i.e. weight >= t with
    t = floor(m/2) + 1. For odd m this is the usual majority; for even m a tie (weight m/2)
    is rejected (our convention). Odd N: K_0 = 2^N - 2 C(N, (N-1)/2).
    """

    def __init__(self, S=None, name=None):
        self.S = None if S is None else _check_positions(S)
        self.name = name or ("MAJORITY" if S is None else f"{len(self.S)}-SPARSE MAJORITY{list(self.S)}")

    _check_n = Parity._check_n

    def _eval(self, x):
        cols = slice(None) if self.S is None else _positions(self.S, None)
        bits = x[..., cols].to(torch.int64)
        m = bits.shape[-1]
        return bits.sum(-1) >= m // 2 + 1

    def _profile(self, N):
        m = N if self.S is None else len(self.S)
        return _junta_profile(N, m, _threshold_profile(m, m // 2 + 1))


class Constant(BooleanFunction):
    """The constant function (value 0 or 1): s = 0 everywhere, K_0 = 2^N."""

    def __init__(self, value: int):
        if isinstance(value, (float, np.floating)) or value not in (0, 1):
            raise ValueError(f"value must be 0 or 1, got {value!r}")
        self.value = bool(value)
        self.name = f"CONSTANT {int(value)}"

    def _eval(self, x):
        return torch.full(x.shape[:-1], self.value, dtype=torch.bool, device=x.device)

    def _profile(self, N):
        K = np.zeros(N + 1, dtype=np.int64)
        K[0] = 2**N
        return K


class TruthTable(BooleanFunction):
    """An arbitrary function on {0,1}^N given by its table ``table[index] in {0, 1}``.

    Its profile is computed exactly from the table (no closed form exists).
    """

    def __init__(self, table, name="TRUTH TABLE"):
        t = torch.as_tensor(np.asarray(table) if not isinstance(table, torch.Tensor) else table)
        n = int(t.numel()).bit_length() - 1
        if t.dim() != 1 or t.numel() != 2**n or n < 1:
            raise ValueError(f"table must be 1-D of length 2^N with N >= 1, got shape {tuple(t.shape)}")
        self.table = check_strings(t, argument="table").to(torch.bool).cpu()
        self.N = n
        self.name = name

    def _check_n(self, N):
        if N != self.N:
            raise ValueError(f"this truth table is defined for N={self.N} only, got N={N}")

    def _eval(self, x):
        return self.table.to(x.device)[strings_to_index(x)]

    def _profile(self, N):
        t = self.table.numpy()
        idx = np.arange(2**N)
        s = sum((t != t[idx ^ (1 << b)]).astype(np.int64) for b in range(N))
        return np.bincount(s, minlength=N + 1).astype(np.int64)


def random_function(N: int, seed: int = 0) -> TruthTable:
    """A uniformly random Boolean function on {0,1}^N (seeded), N <= 24."""
    N = check_n(N, maximum=MAX_EXHAUSTIVE_N)
    g = torch.Generator().manual_seed(check_seed(seed))
    return TruthTable(torch.randint(0, 2, (2**N,), generator=g), name=f"RANDOM(seed={seed})")


def random_function_expected_profile(N: int) -> np.ndarray:
    """E[K_k] = C(N, k) for a uniformly random function (each neighbour differs w.p. 1/2).

    In particular E[K_0] = 1 for every N, and K_0 is approximately Poisson(1), so
    P(K_0 >= 1) -> 1 - 1/e ~ 0.632.
    """
    N = check_n(N)
    return np.array([comb(N, k) for k in range(N + 1)], dtype=np.float64)


def poisson_tv_bound(N: int) -> float:
    """Chen–Stein bound on d_TV(K_0, Poisson(1)) for a uniformly random function on {0,1}^N.

    The event "x has s = 0" depends only on the labels of x and its N neighbours, so events
    of strings more than 2 apart are independent (dependency neighbourhood: the 1 + N + C(N,2)
    strings within distance 2). Each event has probability 2^-N, and two distinct events in a
    neighbourhood hold together with probability 2^-(2N-1) (2N labels must agree). The
    Arratia–Goldstein–Gordon (1989) theorem with lambda = E[K_0] = 1 gives
    d_TV <= b1 + b2 = (1 + N + C(N,2)) / 2^N + 2 (N + C(N,2)) / 2^N.
    """
    N = check_n(N)
    return (1 + 3 * N + 3 * comb(N, 2)) / 2.0**N


PARITY = Parity()
MAJORITY = Majority()
FIRST = Dictator(1)


def sparse_parity(S) -> Parity:
    """m-SPARSE PARITY on the 1-based positions S."""
    return Parity(S)


def sparse_majority(S) -> Majority:
    """m-SPARSE MAJORITY on the 1-based positions S."""
    return Majority(S)
