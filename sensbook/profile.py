"""The sensitivity profiler: one entry point for any batched Boolean classifier.

A *classifier* is any callable mapping strings of shape (B, N) (0/1 floats) to either

* a bool (or 0/1 integer) tensor of shape (B,) or (*pop, B): decided labels; or
* a real tensor of the same shapes: scores T, read with a margin xi >= 0 as in the paper's
  recognizers: accept when T >= xi (and T > 0), reject when T <= -xi (and T < 0), otherwise
  **undecided**; NaN/inf scores are **non-finite**.

``*pop`` are leading population axes (P independent models evaluated together, as
:class:`sensbook.Recognizer` does). Undecided and non-finite strings are never counted as a
class: they are reported separately, and so are decided strings whose sensitivity is unknown
because some Hamming neighbour is undecided or non-finite ("incomplete").

Exhaustive profiles (N <= 24) evaluate each of the 2^N strings once, in chunks sized to a memory
budget, and find neighbours by XOR on the string index. Sampled profiles (any N) draw uniform
strings and evaluate each with its N neighbours, giving unbiased estimates of K_k / 2^N with
standard errors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .boolean import MAX_EXHAUSTIVE_N, check_n, index_to_strings
from .scale import progress as _progress

REJECT, ACCEPT, UNDECIDED, NONFINITE = 0, 1, -1, -2


def classify(out: torch.Tensor, margin: float = 0.0) -> torch.Tensor:
    """Labels (int8) from a classifier's output: 0/1, UNDECIDED (-1) or NONFINITE (-2)."""
    margin = _check_margin(margin)
    if out.dtype == torch.bool:
        return out.to(torch.int8)
    if not out.is_floating_point():
        if out.numel() and not ((out == 0) | (out == 1)).all():
            raise ValueError("an integer classifier output must be 0/1; use a float output for scores")
        return out.to(torch.int8)
    lab = torch.full(out.shape, UNDECIDED, dtype=torch.int8, device=out.device)
    lab[(out > 0) & (out >= margin)] = ACCEPT
    lab[(out < 0) & (out <= -margin)] = REJECT
    lab[~torch.isfinite(out)] = NONFINITE
    return lab


def _check_margin(margin):
    if not (isinstance(margin, (int, float)) and np.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    return float(margin)


def _where(classifier, device, dtype):
    """Device and input dtype for a classifier: explicit, else its own, else CPU float32."""
    if device is None or dtype is None:
        p = None
        if isinstance(classifier, torch.nn.Module):
            p = next(iter(classifier.parameters()), None)
        dev = getattr(classifier, "device", None) or (p.device if p is not None else None)
        dt = getattr(classifier, "dtype", None) or (p.dtype if p is not None else None)
        device = device or dev or "cpu"
        dtype = dtype or (dt if isinstance(dt, torch.dtype) and dt.is_floating_point else torch.float32)
    return torch.device(device), dtype


#: Positions x models per forward call that keep a recognizer's activations cache-sized: larger
#: chunks only add memory traffic (measured by benchmarks/bench.py); the budget caps them too.
CACHE_ROWS = 16384


def plan_chunk(classifier, N, memory_mb=256, chunk_size=None, per_item=1):
    """Strings per classifier call: ``chunk_size`` if given, else the largest number of items
    (a string, or a string with its N flips when ``per_item = N + 1``) whose activations fit
    ``memory_mb`` by the classifier's ``memory_per_string(N)`` estimate, and, for a
    :class:`sensbook.Recognizer`-like classifier (with attribute ``P``), at most
    ``CACHE_ROWS`` positions x models. Without an estimate: 64 (N+1) bytes per string, and at
    most 2^16 strings. The chunk never depends on 2^N, so memory beyond the output does not grow
    with it; it never changes a result either.
    """
    if chunk_size is not None:
        if isinstance(chunk_size, bool) or int(chunk_size) < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size!r}")
        return int(chunk_size)
    if not memory_mb > 0:
        raise ValueError(f"memory_mb must be > 0, got {memory_mb!r}")
    est = getattr(classifier, "memory_per_string", None)
    if callable(est):
        step = int(memory_mb * 2**20 // (est(N) * per_item))
        P = getattr(classifier, "P", None)
        if isinstance(P, int) and P >= 1:
            step = min(step, CACHE_ROWS // (P * (N + 1) * per_item))
        return max(1, step)
    return max(1, min(int(memory_mb * 2**20 // (64 * (N + 1) * per_item)), 2**16 // per_item))


_chunk = plan_chunk


@torch.no_grad()
def _evaluate(classifier, x, margin, B):
    out = classifier(x)
    if not isinstance(out, torch.Tensor):
        out = torch.as_tensor(np.asarray(out))
    if out.dim() == 0 or out.shape[-1] != B:
        raise ValueError(
            f"the classifier must map strings of shape (B, N) to outputs of shape (B,) or (..., B); "
            f"got {tuple(out.shape)} for B={B}"
        )
    return classify(out, margin)


@torch.no_grad()
def truth_table(classifier, N: int, *, margin: float = 0.0, device=None, dtype=None,
                memory_mb: float = 256, chunk_size: int | None = None, progress: bool = True):
    """Labels of the classifier on all 2^N strings: int8 tensor (*pop, 2^N).

    Entry ``index`` is the label of the string with that index (see :mod:`sensbook.boolean`):
    0 reject, 1 accept, -1 undecided, -2 non-finite.
    """
    N = check_n(N, maximum=MAX_EXHAUSTIVE_N)
    margin = _check_margin(margin)
    device, dtype = _where(classifier, device, dtype)
    step = _chunk(classifier, N, memory_mb, chunk_size)
    parts = []
    starts = range(0, 2**N, step)
    for a in _progress(starts, desc=f"truth table N={N}", disable=not progress):
        idx = torch.arange(a, min(a + step, 2**N), device=device)
        parts.append(_evaluate(classifier, index_to_strings(idx, N, dtype=dtype), margin, len(idx)))
    return torch.cat(parts, dim=-1)


@dataclass
class Profile:
    """A sensitivity profile, exact (all 2^N strings) or sampled; leading axes = population.

    ``counts[..., k]``: exact K_k when ``exact``, else the number of sampled strings with s = k.
    Only *complete* strings count (the string and its N neighbours all decided and finite);
    ``undecided``, ``nonfinite`` and ``incomplete`` count the others, so for each model
    ``counts.sum(-1) + undecided + nonfinite + incomplete == n_strings``.
    """

    N: int
    exact: bool
    n_strings: int
    counts: torch.Tensor
    undecided: torch.Tensor
    nonfinite: torch.Tensor
    incomplete: torch.Tensor
    accepted: torch.Tensor

    @property
    def K(self) -> torch.Tensor:
        """Exact K_0..K_N (exhaustive profiles only)."""
        if not self.exact:
            raise ValueError("this profile is sampled: use .fractions and .stderr (estimates of K_k / 2^N)")
        return self.counts

    @property
    def K0(self) -> torch.Tensor:
        """K_0: the number of zero-sensitivity strings (exhaustive profiles only)."""
        return self.K[..., 0]

    @property
    def fractions(self) -> torch.Tensor:
        """K_k / 2^N (exact) or its unbiased estimate (sampled)."""
        return self.counts.double() / self.n_strings

    @property
    def stderr(self) -> torch.Tensor:
        """Standard error of :attr:`fractions` (0 for exact profiles)."""
        if self.exact:
            return torch.zeros_like(self.fractions)
        p = self.fractions
        return (p * (1 - p) / self.n_strings).sqrt()

    @property
    def complete(self) -> torch.Tensor:
        """True for models with no undecided, non-finite or incomplete string."""
        return (self.undecided + self.nonfinite + self.incomplete) == 0

    @property
    def is_constant(self) -> torch.Tensor:
        """Complete and every string has s = 0 (for exact profiles: a constant function)."""
        return self.complete & (self.counts[..., 0] == self.n_strings)

    @property
    def average_sensitivity(self) -> torch.Tensor:
        """Mean of s over complete strings (NaN where there are none)."""
        k = torch.arange(self.N + 1, dtype=torch.float64, device=self.counts.device)
        c = self.counts.double()
        return (c * k).sum(-1) / c.sum(-1)

    @property
    def max_sensitivity(self) -> torch.Tensor:
        """Largest s over complete strings (-1 where there are none)."""
        k = torch.arange(self.N + 1, device=self.counts.device)
        return torch.where(self.counts > 0, k, -1).max(-1).values

    def __repr__(self):
        if self.counts.dim() == 1:
            body = self.counts.tolist()
            extra = [f"{n}={int(getattr(self, n))}" for n in ("undecided", "nonfinite", "incomplete")
                     if int(getattr(self, n))]
        else:
            body, extra = f"<{tuple(self.counts.shape[:-1])} models>", []
        kind = "exact" if self.exact else f"sampled n={self.n_strings}"
        return f"Profile(N={self.N}, {kind}, K={body}{', ' + ', '.join(extra) if extra else ''})"


def _bincount(s, valid, N):
    """Per-model histogram of s over valid entries; s, valid of shape (*pop, n)."""
    pop = s.shape[:-1]
    flat_s = s.reshape(-1, s.shape[-1])
    flat_v = valid.reshape(-1, s.shape[-1])
    rows = torch.arange(flat_s.shape[0], device=s.device).unsqueeze(-1).expand_as(flat_s)
    key = (rows * (N + 1) + flat_s)[flat_v]
    h = torch.bincount(key, minlength=flat_s.shape[0] * (N + 1))
    return h.reshape(*pop, N + 1)


def profile_from_table(table: torch.Tensor, *, chunk: int = 1 << 16) -> Profile:
    """The exact profile of a truth table (*pop, 2^N) of labels from :func:`truth_table`.

    Works over aligned blocks of 2^c <= ``chunk`` strings, so extra memory is O(pop x chunk).
    In a block, the neighbour across bit b < c is the other half of a pair of runs of 2^b (a
    reshape, no index arrays); across bit b >= c it is the aligned block ``start ^ 2^b`` (a
    slice).
    """
    if not isinstance(table, torch.Tensor) or table.dim() < 1:
        raise ValueError("table must be a tensor of shape (..., 2^N)")
    size = table.shape[-1]
    N = size.bit_length() - 1
    if size != 2**N or N < 1:
        raise ValueError(f"table must have 2^N entries in its last axis (N >= 1), got {size}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk must be an integer >= 1, got {chunk!r}")
    table = table.to(torch.int8)
    pop = table.shape[:-1]
    table = table.reshape(-1, size)
    dev = table.device
    c = min(chunk.bit_length() - 1, N)                     # blocks of 2^c strings
    c = max(c, 0)
    step = 1 << c
    rows = table.shape[0]
    counts = torch.zeros(rows, N + 1, dtype=torch.int64, device=dev)
    z = lambda: torch.zeros(rows, dtype=torch.int64, device=dev)
    und, nonf, inc, acc = z(), z(), z(), z()
    for a in range(0, size, step):
        lab = table[:, a:a + step]
        s = torch.zeros(lab.shape, dtype=torch.int16, device=dev)
        bad_nb = torch.zeros(lab.shape, dtype=torch.bool, device=dev)
        for b in range(N):
            if b < c:
                nb = lab.reshape(rows, step >> (b + 1), 2, 1 << b).flip(2).reshape(rows, step)
            else:
                o = a ^ (1 << b)
                nb = table[:, o:o + step]
            s += nb != lab
            bad_nb |= nb < 0
        decided = lab >= 0
        complete = decided & ~bad_nb
        counts += _bincount(s.to(torch.int64), complete, N)
        und += (lab == UNDECIDED).sum(-1)
        nonf += (lab == NONFINITE).sum(-1)
        inc += (decided & bad_nb).sum(-1)
        acc += (lab == ACCEPT).sum(-1)
    r = lambda t: t.reshape(pop + t.shape[1:])
    return Profile(N, True, size, r(counts), r(und), r(nonf), r(inc), r(acc))


@torch.no_grad()
def sampled_profile(classifier, N: int, n_samples: int, *, margin: float = 0.0, seed: int = 0,
                    device=None, dtype=None, memory_mb: float = 256, chunk_size: int | None = None,
                    progress: bool = True) -> Profile:
    """Estimate the profile from ``n_samples`` uniform strings, each evaluated with its N flips."""
    N = check_n(N)
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise ValueError(f"n_samples must be an integer >= 1, got {n_samples!r}")
    margin = _check_margin(margin)
    device, dtype = _where(classifier, device, dtype)
    g = torch.Generator(device="cpu").manual_seed(seed)
    step = _chunk(classifier, N, memory_mb, chunk_size, per_item=N + 1)
    flips = torch.cat([torch.zeros(1, N), torch.eye(N)]).to(device=device, dtype=torch.bool)  # (N+1, N)
    results = []
    for a in _progress(range(0, n_samples, step), desc=f"sampled profile N={N}", disable=not progress):
        n = min(step, n_samples - a)
        x = torch.randint(0, 2, (n, N), generator=g).to(device=device, dtype=torch.bool)
        xs = (x.unsqueeze(1) ^ flips).reshape(n * (N + 1), N).to(dtype)   # each string, then its flips
        lab = _evaluate(classifier, xs, margin, n * (N + 1))
        results.append(lab.reshape(*lab.shape[:-1], n, N + 1))
    lab = torch.cat(results, dim=-2)                       # (*pop, n, N+1)
    base, nbs = lab[..., 0], lab[..., 1:]
    s = (nbs != base.unsqueeze(-1)).sum(-1)
    decided, bad_nb = base >= 0, (nbs < 0).any(-1)
    return Profile(N, False, n_samples, _bincount(s, decided & ~bad_nb, N),
                   (base == UNDECIDED).sum(-1), (base == NONFINITE).sum(-1),
                   (decided & bad_nb).sum(-1), (base == ACCEPT).sum(-1))


def sensitivity_profile(classifier, N: int, *, margin: float = 0.0, n_samples: int | None = None,
                        **kwargs) -> Profile:
    """The sensitivity profile K_0..K_N of any batched Boolean classifier at length N.

    Exhaustive over all 2^N strings when ``n_samples`` is None (N <= 24), else sampled from
    ``n_samples`` uniform strings (any N). ``kwargs``: ``device``, ``dtype``, ``memory_mb``,
    ``chunk_size``, ``progress`` and, when sampling, ``seed``. Definitions: Section 2 of
    Kövér et al. (2026); s(f, x) = #{i : f(x) != f(x xor e_i)}.
    """
    if n_samples is None:
        N = check_n(N)
        if N > MAX_EXHAUSTIVE_N:
            raise ValueError(f"N={N} is too large for an exhaustive profile (allowed N <= "
                             f"{MAX_EXHAUSTIVE_N}); pass n_samples to estimate it")
        kwargs.pop("seed", None)
        return profile_from_table(truth_table(classifier, N, margin=margin, **kwargs))
    return sampled_profile(classifier, N, n_samples, margin=margin, **kwargs)


def zero_sensitivity_count(classifier, N: int, *, margin: float = 0.0, **kwargs) -> torch.Tensor:
    """K_0(N), the number of strings all of whose neighbours share their label (exact).

    Theorem 4.5 of Kövér et al. (2026) lower-bounds it for almost every random transformer.
    """
    return sensitivity_profile(classifier, N, margin=margin, **kwargs).K0
