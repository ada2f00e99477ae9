r"""The sensitivity profiler: one entry point for any batched Boolean classifier.

A *classifier* is any callable mapping strings of shape ``(B, N)`` (0/1 floats) to either

* a bool (or 0/1 integer) tensor of shape ``(B,)`` or ``(*pop, B)``: decided labels; or
* a real tensor of the same shapes: scores T, read with a margin :math:`\xi \ge 0` as in the
  paper's recognizers (:mod:`sensbook.labels`): accept when :math:`T \ge \xi` (and T > 0),
  reject when :math:`T \le -\xi` (and T < 0), otherwise **undecided**; NaN/inf scores are
  **non-finite**.

``*pop`` are leading population axes (P independent models evaluated together, as
:class:`sensbook.Recognizer` does). Undecided and non-finite strings are never counted as a
class: they are reported separately, and so are decided strings whose sensitivity is unknown
because some Hamming neighbour is undecided or non-finite ("incomplete").

Exhaustive profiles (N <= 24) evaluate each of the :math:`2^N` strings once, in chunks sized to
a memory budget, and find neighbours by XOR on the string index. Sampled profiles (any N) draw
uniform strings and evaluate each with its N neighbours, giving unbiased estimates of
:math:`K_k / 2^N` with Wilson intervals (:meth:`sensbook.Profile.interval`).
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import torch

from .adapters import Classifier, SklearnClassifier, TorchClassifier, explain_call
from .adapters import ADAPTERS, callable_bytes, trim_memory, user_stacklevel
from .boolean import (MAX_EXHAUSTIVE_N, MAX_MEMORY_MB, _check_positions, _positions, check_int,
                      check_memory_mb, check_n, check_seed, index_to_strings)
from .profiles import Profile, measurement, provenance  # noqa: F401  (provenance was here)
from .labels import ACCEPT, NONFINITE, UNDECIDED, Evaluator, _check_margin, classify
from .labels import LABELS, REJECT, ROUNDING_ULPS, rounding_margin  # noqa: F401  (were here)
from .settings import check_device, default_memory_mb, progress as _progress

INT_INPUTS = (torch.int64, torch.int32)         # input dtypes for 0/1 ids


def _where(classifier, device, dtype):
    """Device and input dtype for a classifier: explicit, else its own, else CPU float32."""
    if dtype is not None and not (isinstance(dtype, torch.dtype)
                                  and (dtype.is_floating_point or dtype in INT_INPUTS)):
        raise ValueError(f"dtype must be a floating torch dtype (e.g. torch.float64) or torch."
                         f"long/int32 for 0/1 ids, got {dtype!r}; for other token ids use "
                         "sb.TorchClassifier(model, tokens=(id0, id1))")
    if device is None or dtype is None:
        p = None
        if isinstance(classifier, torch.nn.Module):
            p = next(iter(classifier.parameters()), None)
        dev = getattr(classifier, "device", None) or (p.device if p is not None else None)
        dt = getattr(classifier, "dtype", None) or (p.dtype if p is not None else None)
        device = device or dev or "cpu"
        dtype = dtype or (dt if isinstance(dt, torch.dtype) and dt.is_floating_point else torch.float32)
    return check_device(device), dtype


#: Positions x models per forward call that keep a recognizer's activations cache-sized: larger
#: chunks only add memory traffic (measured by benchmarks/bench.py); the budget caps them too.
CACHE_ROWS = 16384

#: Bytes per (string, model) of the table profiler's working arrays (see profile_from_table).
TABLE_BYTES = 64


def _population(classifier) -> int:
    P = getattr(classifier, "P", None)
    return P if isinstance(P, int) and not isinstance(P, bool) and P >= 1 else 1


def _string_bytes(classifier, N, dtype=torch.float32, device=None, limit=None) -> int:
    """Bytes one string costs in a classifier call: the classifier's activations by its
    ``memory_per_string(N)`` estimate, plus the profiler's own arrays (index, bits, the input in
    ``dtype``, the output and its labels per model). Without an estimate: what a call costs,
    measured (:func:`sensbook.memory.callable_bytes`), and at least 64 (N+1) bytes."""
    est = getattr(classifier, "memory_per_string", None)
    if not callable(est):
        measured = callable_bytes(classifier, N, dtype, device, limit)
        if measured is None:                # the probe failed: never read as free
            x = torch.zeros(1, N, dtype=dtype, device=device)
            with torch.no_grad(), explain_call(classifier, x):
                classifier(x)               # the classifier's own error, at once
            measured = MAX_MEMORY_MB * 2**20 if limit is None else limit   # one string a call
        return max(64 * (N + 1), int(measured))
    elt = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 8
    est = est(N, limit=limit) if isinstance(classifier, ADAPTERS) else est(N)
    return int(est) + 16 + (8 + elt) * N + _population(classifier) * (2 * elt + 16)


def plan_chunk(classifier, N, memory_mb=256, chunk_size=None, per_item=1, dtype=None):
    """Strings per classifier call: ``chunk_size`` if given, else the largest number of items
    (a string, or a string with its N flips when ``per_item = N + 1``) whose activations fit
    ``memory_mb`` by the classifier's ``memory_per_string(N)`` estimate plus the profiler's own
    arrays per string (input in ``dtype``, default the classifier's), and, for a
    population classifier (with attribute ``P``) that does not tile its own forward into
    cache-sized pieces (a ``tile`` method, as :class:`sensbook.Recognizer` has), at most
    ``CACHE_ROWS`` positions x models. Without an estimate: 64 (N+1) bytes per string, and at
    most 2^16 strings. The chunk never depends on 2^N, so memory beyond the output does not grow
    with it; it never changes a result either. (The profilers also check that the chunk fits:
    :func:`check_budget`, which measures what a call of a classifier without an estimate costs.)
    """
    if chunk_size is not None:
        return check_int(chunk_size, "chunk_size", minimum=1)
    memory_mb = check_memory_mb(memory_mb)
    est = getattr(classifier, "memory_per_string", None)
    if callable(est):
        if dtype is None:
            dt = getattr(classifier, "dtype", None)
            dtype = dt if isinstance(dt, torch.dtype) and dt.is_floating_point else torch.float32
        step = int(memory_mb * 2**20 // (_string_bytes(classifier, N, dtype) * per_item))
        P = getattr(classifier, "P", None)
        if isinstance(P, int) and P >= 1 and not callable(getattr(classifier, "tile", None)):
            step = min(step, CACHE_ROWS // (P * (N + 1) * per_item))
        return max(1, step)
    return max(1, min(int(memory_mb * 2**20 // (64 * (N + 1) * per_item)), 2**16 // per_item))


def _mib(b) -> str:
    return f"{b / 2**20:,.1f} MiB" if b < 2**30 else f"{b / 2**30:,.2f} GiB"


def check_budget(classifier, N, memory_mb, chunk_size, dtype, *, extra_per_string=0, device=None) -> int:
    """Strings per classifier call within ``memory_mb`` (see :func:`plan_chunk`), or, at once,
    an error with the memory the request would need: when one string (or the explicit
    ``chunk_size``) does not fit the budget."""
    memory_mb = check_memory_mb(memory_mb)
    budget = memory_mb * 2**20
    elt = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 8
    if elt * N > budget:                    # before any allocation: the input alone
        raise ValueError(f"memory_mb={memory_mb:g} is too small: one string of length N={N} "
                         f"alone needs {_mib(elt * N)} as {dtype} ({elt} bytes a bit), before "
                         f"the classifier runs; raise memory_mb above {elt * N / 2**20:,.1f} "
                         "or use a smaller N")
    one = _string_bytes(classifier, N, dtype, device, limit=budget) + extra_per_string
    if one > budget:
        raise ValueError(f"memory_mb={memory_mb:g} is too small: one string of length N={N} needs "
                         f"about {_mib(one)} (the classifier's memory_per_string estimate plus "
                         f"the profiler's arrays); raise memory_mb to at least {one / 2**20:,.1f}")
    if chunk_size is not None:
        chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
        if chunk_size * one > budget:
            raise ValueError(f"chunk_size={chunk_size} strings of length N={N} need about "
                             f"{_mib(chunk_size * one)}, over memory_mb={memory_mb:g}: lower "
                             f"chunk_size to at most {int(budget // one)} or raise memory_mb")
        return chunk_size
    return max(1, min(plan_chunk(classifier, N, memory_mb, dtype=dtype), int(budget // one)))


def _check_table_fits(nbytes, device):
    """The output table must fit this machine's memory (CPU) or the device's free memory."""
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        where = f"the free memory of {device}"
    else:
        try:
            free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):          # pragma: no cover - not POSIX
            return
        where = "this machine's memory"
    if nbytes > free:
        raise ValueError(f"the truth table needs {_mib(nbytes)} (one byte per string and model), "
                         f"more than {where} ({_mib(free)}); use fewer models, a smaller N, or "
                         "n_samples")


@torch.no_grad()
def _evaluate(evaluator: Evaluator, x, margin):
    """Labels of the strings ``x`` through the boundary every instrument shares."""
    return classify(evaluator(x), margin)


@torch.no_grad()
def truth_table(classifier: Classifier, N: int, *, margin: float | str = 0.0, device=None,
                dtype=None, memory_mb: float | None = None, chunk_size: int | None = None,
                progress: bool = True):
    """Labels of the classifier on all :math:`2^N` strings.

    Parameters
    ----------
    classifier : callable
        A batched Boolean classifier, as for :func:`sensitivity_profile`.
    N : int
        The string length, 1 to 24.
    margin : float or "auto"
        How scores are read (:func:`classify`).
    device : torch.device or str, optional
        Where the strings are made (default: the classifier's device, else the CPU).
    dtype : torch.dtype, optional
        The strings' dtype (default: the classifier's float dtype, else float32).
    memory_mb : float, optional
        MiB the classifier calls may use beyond the table (default:
        ``sensbook.settings.default_memory_mb``).
    chunk_size : int, optional
        Strings a call, instead of the budget's number.
    progress : bool
        Show a progress bar.

    Returns
    -------
    torch.Tensor
        int8 of shape ``(*pop, 2**N)``: entry ``i`` is the label of the string of index ``i``
        (:mod:`sensbook.boolean`): 0 reject, 1 accept, -1 undecided, -2 non-finite.

    Notes
    -----
    Memory: the table (one byte per string and model) plus at most ``memory_mb`` for the
    classifier calls, by its ``memory_per_string`` estimate; a request that cannot fit is
    refused before any work.
    """
    N = check_n(N, maximum=MAX_EXHAUSTIVE_N)
    margin = _check_margin(margin)
    ev = Evaluator(classifier)
    device, dtype = _where(classifier, device, dtype)
    memory_mb = default_memory_mb(device) if memory_mb is None else memory_mb
    _check_table_fits(_population(classifier) * 2**N, device)
    step = check_budget(classifier, N, memory_mb, chunk_size, dtype, device=device)
    table = None
    starts = range(0, 2**N, step)
    for a in _progress(starts, desc=f"truth table N={N}", disable=not progress):
        idx = torch.arange(a, min(a + step, 2**N), device=device)
        lab = _evaluate(ev, index_to_strings(idx, N, dtype=dtype), margin)
        if table is None:                   # one allocation: no list of parts, no copy at the end
            _check_table_fits(lab[..., :1].numel() * 2**N, device)
            table = torch.empty((*lab.shape[:-1], 2**N), dtype=torch.int8, device=lab.device)
        table[..., a:a + len(idx)] = lab
    ev.check()
    return table


def _bincount(s, valid, N):
    """Per-model histogram of s over valid entries; s, valid of shape (*pop, n). Invalid
    entries go to one extra bin (no boolean indexing: that would cost 24 bytes per entry)."""
    pop = s.shape[:-1]
    flat_s = s.reshape(-1, s.shape[-1])
    flat_v = valid.reshape(-1, s.shape[-1])
    R = flat_s.shape[0]
    offset = torch.arange(R, device=s.device).unsqueeze(-1) * (N + 1)
    if flat_s.dtype == torch.int64:
        key = flat_s + offset
    else:                                    # one int64 array, whatever dtype s has
        key = flat_s.to(torch.int64)
        key += offset
    key.masked_fill_(~flat_v, R * (N + 1))
    h = torch.bincount(key.reshape(-1), minlength=R * (N + 1) + 1)[:R * (N + 1)]
    return h.reshape(*pop, N + 1)


def _check_table(table):
    """A label table: a bool or integer tensor (..., 2^N) with entries in {-2, -1, 0, 1}."""
    if not isinstance(table, torch.Tensor) or table.dim() < 1:
        raise ValueError("table must be a tensor of shape (..., 2^N)")
    if table.is_floating_point() or table.is_complex():
        raise ValueError(f"table must hold labels (bool or integers -2, -1, 0, 1 as from "
                         f"truth_table or classify), got dtype {table.dtype}: turn scores into "
                         "labels with sb.classify(scores, margin) first")
    if table.numel() and table.dtype != torch.bool:
        lo, hi = torch.aminmax(table)
        if int(lo) < NONFINITE or int(hi) > ACCEPT:
            bad = int(lo) if int(lo) < NONFINITE else int(hi)
            raise ValueError(f"table entries must be labels -2 (non-finite), -1 (undecided), "
                             f"0 (reject) or 1 (accept); found {bad}")
    size = table.shape[-1]
    N = size.bit_length() - 1
    if size != 2**N or N < 1:
        raise ValueError(f"table must have 2^N entries in its last axis (N >= 1), got {size}")
    return N


def profile_from_table(table: torch.Tensor, *, chunk: int = 1 << 16,
                       memory_mb: float | None = None) -> Profile:
    r"""The exact profile of a truth table of labels from :func:`truth_table`.

    Parameters
    ----------
    table : torch.Tensor
        Labels of shape ``(*pop, 2**N)``: bool, or integers in {-2, -1, 0, 1}; scores are
        refused (use :func:`classify`).
    chunk : int
        The largest block of strings worked on at once.
    memory_mb : float, optional
        MiB the work may use; caps the block further.

    Returns
    -------
    Profile
        Exact (``exact=True``), with the population axes of ``table``.

    Notes
    -----
    Works over aligned blocks of :math:`2^c \le` ``chunk`` strings, so extra memory is
    ``O(pop x chunk)`` (about ``TABLE_BYTES`` per string and model). In a block, the neighbour
    across bit :math:`b < c` is the other half of a pair of runs of :math:`2^b` (a reshape, no
    index arrays); across bit :math:`b \ge c` it is the aligned block ``start ^ 2**b`` (a
    slice).
    """
    N = _check_table(table)
    size = table.shape[-1]
    chunk = check_int(chunk, "chunk", minimum=1)
    rows = max(1, table[..., 0].numel())
    if memory_mb is not None:
        memory_mb = check_memory_mb(memory_mb)
        fit = int(memory_mb * 2**20 // (TABLE_BYTES * rows))
        if fit < 2:
            raise ValueError(f"memory_mb={memory_mb:g} is too small to profile {rows} models: "
                             f"it needs at least {_mib(2 * TABLE_BYTES * rows)}")
        chunk = min(chunk, fit)
    table = table.to(torch.int8)
    pop = table.shape[:-1]
    table = table.reshape(-1, size)
    dev = table.device
    c = max(min(chunk.bit_length() - 1, N), 0)             # blocks of 2^c strings
    step = 1 << c
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
            del nb
        decided = lab >= 0
        bad_nb &= decided                                    # now: decided with a bad neighbour
        inc += bad_nb.sum(-1)
        counts += _bincount(s, decided & ~bad_nb, N)
        del s, bad_nb, decided
        und += (lab == UNDECIDED).sum(-1)
        nonf += (lab == NONFINITE).sum(-1)
        acc += (lab == ACCEPT).sum(-1)
    r = lambda t: t.reshape(pop + t.shape[1:])
    return _warn_if_mostly_undecided(Profile(N, True, size, r(counts), r(und), r(nonf), r(inc), r(acc)))


def _warn_if_mostly_undecided(p: Profile) -> Profile:
    """Say so when most strings of some model are undecided or non-finite, or none is complete:
    its profile counts only the few complete strings (a float 0/1 output read as scores, a
    margin too wide, or a model whose outputs are NaN or inf, look like this)."""
    bad = (p.undecided * 2 > p.n_strings) | (p.nonfinite * 2 > p.n_strings) | \
        ((p.undecided + p.nonfinite + p.incomplete) * 2 > p.n_strings) | (p.counts.sum(-1) == 0)
    if bool(bad.any()):
        n, tot = int(bad.sum()), bad.numel()
        f = lambda t: f"{t.flatten()[:5].tolist()}{' ...' if tot > 5 else ''}"
        warnings.warn(
            f"{'the classifier' if tot == 1 else f'{n} of {tot} models'}: most of the "
            f"{p.n_strings} strings are undecided, non-finite or incomplete, so the profile counts "
            f"only the few (or no) complete ones (undecided: {f(p.undecided)}, non-finite: "
            f"{f(p.nonfinite)}, incomplete: {f(p.incomplete)}). Check the margin, return bool "
            "labels if the output is 0/1, or why the outputs are NaN or inf.",
            stacklevel=user_stacklevel())
    return p


@torch.no_grad()
def sampled_profile(classifier: Classifier, N: int, n_samples: int, *,
                    margin: float | str = 0.0, seed: int = 0, device=None, dtype=None,
                    memory_mb: float | None = None, chunk_size: int | None = None,
                    progress: bool = True, sampler=None, bits=None) -> Profile:
    """Estimate the profile from ``n_samples`` uniform strings, each evaluated with its N flips.

    Parameters
    ----------
    classifier : callable
        A batched Boolean classifier, as for :func:`sensitivity_profile`.
    N : int
        The string length, any.
    n_samples : int
        The number of strings drawn.
    margin : float or "auto"
        How scores are read (:func:`classify`).
    seed : int
        The seed of the draw; the strings depend on it only, never on the chunking.
    device, dtype, memory_mb, chunk_size, progress
        As for :func:`truth_table`; ``memory_mb`` bounds the whole run.
    sampler : callable, optional
        ``sampler(n, generator)`` returns ``n`` strings ``(n, N)`` of 0/1 from another
        distribution than the uniform one, e.g. a data set's (see Notes).
    bits : sequence of int, optional
        Flip only these 1-based positions (``m`` of them; default all ``N``).

    Returns
    -------
    Profile
        Sampled (``exact=False``); ``counts[..., k]`` counts drawn strings with ``k`` label
        changes among the flips made (with ``bits``, bins above ``m`` stay 0).

    Notes
    -----
    Streams: each classifier call evaluates at most ``chunk_size`` (else a budget-sized number
    of) strings, which may be part of one sampled string's N + 1, and only the counts are
    kept, so memory is bounded by ``memory_mb`` whatever N and ``n_samples`` (a request whose
    single string does not fit is refused at once, with the memory it would need). With
    ``bits`` each string costs ``m + 1`` evaluations instead of ``N + 1``.

    ``sampler`` is called with a seeded CPU ``torch.Generator``:
    ``lambda n, g: data[torch.randint(len(data), (n,), generator=g)]`` draws rows of
    ``data``. The fractions then estimate :math:`P(s(x) = k)` for x from that distribution,
    not :math:`K_k / 2^N`.
    """
    N = check_n(N)
    n_samples = check_int(n_samples, "n_samples", minimum=1)
    margin = _check_margin(margin)
    seed = check_seed(seed)
    # no Python list of N positions (N = 10**9 is refused by its memory, not by a MemoryError)
    cols = None if bits is None else _positions(_check_positions(bits, "bits"), N)
    m = N if cols is None else len(cols)
    ev = Evaluator(classifier)
    device, dtype = _where(classifier, device, dtype)
    memory_mb = default_memory_mb(device) if memory_mb is None else memory_mb
    P = _population(classifier)
    # per string also: its item's share of the drawn block (int64 randint) and the label buffer
    step = check_budget(classifier, N, memory_mb, chunk_size, dtype, device=device,
                        extra_per_string=8 + P)
    block = max(1, step // (m + 1))                         # sampled strings drawn at once
    g = torch.Generator(device="cpu").manual_seed(seed)
    counts = und = nonf = inc = acc = 0
    # column flipped by row j of an item: -1 for the string itself, then the m positions
    col = torch.arange(-1, N, device=device) if cols is None else \
        torch.tensor([-1] + cols, device=device)
    for a in _progress(range(0, n_samples, block), desc=f"sampled profile N={N}", disable=not progress):
        n = min(block, n_samples - a)
        x = torch.randint(0, 2, (n, N), generator=g) if sampler is None else _drawn(sampler, n, N, g)
        x = x.to(device=device, dtype=dtype)
        labs = None
        total = n * (m + 1)
        for r0 in range(0, total, step):                  # strings r = item * (m+1) + j
            r = torch.arange(r0, min(r0 + step, total), device=device)
            c = col[r % (m + 1)]
            xs = x[r // (m + 1)]
            rows, cc = torch.arange(len(r), device=device), c.clamp(min=0)
            v = xs[rows, cc]
            xs[rows, cc] = torch.where(c >= 0, 1 - v, v)  # flip without a mask (no host sync)
            lab = _evaluate(ev, xs, margin)
            del xs
            if labs is None:
                labs = torch.empty((*lab.shape[:-1], total), dtype=torch.int8, device=lab.device)
            labs[..., r0:r0 + len(r)] = lab
            del lab
        labs = labs.reshape(*labs.shape[:-1], n, m + 1)
        base, nbs = labs[..., 0], labs[..., 1:]
        s = (nbs != base.unsqueeze(-1)).sum(-1)
        decided, bad_nb = base >= 0, (nbs < 0).any(-1)
        counts = counts + _bincount(s, decided & ~bad_nb, N)
        und = und + (base == UNDECIDED).sum(-1)
        nonf = nonf + (base == NONFINITE).sum(-1)
        inc = inc + (decided & bad_nb).sum(-1)
        acc = acc + (base == ACCEPT).sum(-1)
        del labs, base, nbs, s
    ev.check()
    p = Profile(N, False, n_samples, counts, und, nonf, inc, acc, meta=measurement(
        classifier, margin=margin, seed=seed, bits=None if bits is None else [c + 1 for c in cols],
        sampler=sampler))
    return _warn_if_mostly_undecided(p)


def _drawn(sampler, n, N, g) -> torch.Tensor:
    """``n`` strings from a user's sampler, checked: shape (n, N), entries 0/1."""
    if not callable(sampler):
        raise TypeError(f"sampler must be a callable (n, generator) -> strings (n, N), got "
                        f"{type(sampler).__name__}")
    out = sampler(n, g)
    try:
        x = None if out is None or isinstance(out, (str, bytes)) else torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError):
        x = None
    if x is None or x.is_complex():
        raise TypeError(f"sampler must return {n} strings of 0/1 as a tensor or array of shape "
                        f"({n}, {N}); it returned {type(out).__name__}: {str(out)[:40]!r}")
    if x.shape != (n, N) or (x.numel() and not bool(((x == 0) | (x == 1)).all())):
        raise ValueError(f"sampler must return {n} strings of 0/1 of shape ({n}, {N}); it "
                         f"returned shape {tuple(x.shape)}"
                         f"{'' if x.shape != (n, N) else ' with entries other than 0 and 1'}")
    return x.cpu()


def sensitivity_profile(classifier: Classifier, N: int, *, margin: float | str = 0.0,
                        n_samples: int | None = None, **kwargs) -> Profile:
    r"""The sensitivity profile :math:`K_0, \dots, K_N` of any batched Boolean classifier.

    Parameters
    ----------
    classifier : callable
        Maps 0/1 strings ``(B, N)`` to bool labels (True accepts) or real scores T of shape
        ``(B,)`` or ``(*pop, B)`` whose sign is the label (:math:`T > 0` accepts). A module
        that wants token ids, a Hugging Face model or a scikit-learn estimator: wrap it in
        :class:`sensbook.TorchClassifier` or :class:`sensbook.SklearnClassifier`.
    N : int
        The string length: at most 24 for an exhaustive profile, any when sampled.
    margin : float or "auto"
        How scores are read (:func:`classify`): 0 (default) decides every nonzero score by its
        sign, ``"auto"`` leaves outputs within rounding of 0 undecided.
    n_samples : int, optional
        None (default): exhaustive over all :math:`2^N` strings; else the number of uniform
        strings sampled (:func:`sampled_profile`).
    **kwargs
        ``device``, ``dtype``, ``memory_mb``, ``chunk_size``, ``progress``
        (:func:`truth_table`) and, when sampling, ``seed``, ``sampler``, ``bits``.

    Returns
    -------
    Profile
        With the classifier's population axes; ``meta`` records its provenance.

    Notes
    -----
    Definitions: Section 2 of Kövér et al. (2026),
    :math:`s(f, x) = \#\{i : f(x) \ne f(x \oplus e_i)\}` and
    :math:`K_k = \#\{x : s(f, x) = k\}`. Undecided and non-finite strings are never counted as
    a class; a profile in which most strings are undecided or non-finite, or none is complete,
    comes with a warning.

    The strings arrive as 0/1 in ``dtype`` (default: the classifier's float dtype, else
    float32) on ``device``. Probabilities need their threshold subtracted (an output all in
    [0, 1] warns, unless the classifier has ``returns_scores = True``, as sensbook's models
    do). A classifier must compute one function: a module in training mode with dropout is
    refused, and a classifier that may be random is called twice on the same strings (the
    first chunk, and the first strings of chunks 1, 2, 4, 8, ...) and refused when its outputs
    differ (:class:`sensbook.labels.Evaluator` says exactly what this check can miss).

    Memory: at most ``memory_mb`` (default 256) beyond the truth table of an exhaustive
    profile; requests that cannot fit are refused before any work. The strings per call are
    sized by the classifier's ``memory_per_string(N)`` when it has one, as the adapters do;
    else by what a call on a probe of a few strings costs, measured (at least
    ``64 (N + 1)`` bytes a string). The budget bounds what is allocated at once; glibc's
    ``malloc`` can keep more resident (``MALLOC_MMAP_THRESHOLD_=131072`` makes the resident
    peak follow the budget).
    """
    if n_samples is None:
        if kwargs.get("bits") is not None:
            raise ValueError("bits= flips only some positions of sampled strings: pass n_samples "
                             "as well (an exhaustive profile flips every bit)")
        if kwargs.get("sampler") is not None:
            raise ValueError("sampler= draws the strings of a sampled profile: pass n_samples as "
                             "well (an exhaustive profile reads all 2^N strings)")
        kwargs.pop("bits", None), kwargs.pop("sampler", None)
        N = check_n(N)
        if N > MAX_EXHAUSTIVE_N:
            raise ValueError(f"N={N} is too large for an exhaustive profile (allowed N <= "
                             f"{MAX_EXHAUSTIVE_N}); pass n_samples to estimate it")
        seed = kwargs.pop("seed", None)
        if seed is not None:
            check_seed(seed)
        table = truth_table(classifier, N, margin=margin, **kwargs)
        trim_memory()
        device = kwargs.get("device") or getattr(table, "device", None)
        mb = kwargs.get("memory_mb")
        p = profile_from_table(table, memory_mb=default_memory_mb(device) if mb is None else mb)
    else:
        p = sampled_profile(classifier, N, n_samples, margin=margin, **kwargs)
    if n_samples is None:
        p.meta.update(measurement(classifier, margin=margin))
    if isinstance(classifier, (TorchClassifier, SklearnClassifier)) and bool(p.undecided.any()):
        warnings.warn(f"{classifier!r} left {int(p.undecided.sum())} of {p.n_strings} strings "
                      f"undecided (|T| <= margin={margin}); they and their "
                      f"{int(p.incomplete.sum())} decided neighbours are not counted, so the "
                      "fractions sum to less than 1", stacklevel=user_stacklevel())
    return p


def zero_sensitivity_count(classifier: Classifier, N: int, *, margin: float | str = 0.0, **kwargs) -> torch.Tensor:
    """:math:`K_0(N)`, the number of strings all of whose neighbours share their label (exact).

    Parameters
    ----------
    classifier : callable
        A batched Boolean classifier, as for :func:`sensitivity_profile`.
    N : int
        The string length, 1 to 24.
    margin : float or "auto"
        How scores are read (:func:`classify`).
    **kwargs
        Passed to :func:`sensitivity_profile`.

    Returns
    -------
    torch.Tensor
        int64, the classifier's population shape.

    Notes
    -----
    Theorem 4.5 of Kövér et al. (2026) lower-bounds it for almost every random transformer.
    """
    return sensitivity_profile(classifier, N, margin=margin, **kwargs).K0
