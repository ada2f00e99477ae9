"""Memory a call needs, measured: the budget ``memory_mb`` of the profilers holds for models
the package has never seen because what one string costs is measured on a probe (the peak of the
tensors a call allocates, and the rise of the resident set or the CUDA allocator's peak).
Used by the adapters (:mod:`sensbook.adapters`) and the profilers (:mod:`sensbook.profile`).
"""
from __future__ import annotations

import weakref
from typing import Callable

import torch

#: Strings per memory probe, and the factors the measured peaks are multiplied by: the tensor
#: count misses the allocator's rounding and fragmentation, the resident size its noise.
PROBE_STRINGS, PROBE_FACTOR, RESIDENT_FACTOR = 8, 3, 2

#: Strings of the larger probe of a scikit-learn estimator: its memory is seen only as the rise
#: of the resident set, which a few strings' arrays (reused heap) hide: 8 strings read 11-41 KiB
#: a string for an MLPClassifier of width 4,096, 256 strings its 32 KiB.
SKLEARN_PROBE_STRINGS = 256

class _OverBudget(Exception):
    """Raised by a probe as soon as the tensors it counts pass its limit (bytes: args[0])."""


class _PeakTensors(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the bytes of the tensors every operation allocates, while they live: the peak of
    that count is the memory a forward pass needs beyond its inputs and parameters (any device)."""

    def __init__(self, limit=None):
        super().__init__()
        self.live = self.peak = 0
        self.seen, self.limit = {}, limit

    def _free(self, key):
        entry = self.seen[key]
        entry[1] -= 1
        if entry[1] == 0:                   # the last tensor on this storage is gone
            self.live -= entry[0]
            del self.seen[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.numel():
                key = (t.device, t.untyped_storage().data_ptr())
                if key not in self.seen:
                    self.seen[key] = [t.untyped_storage().nbytes(), 0]
                    self.live += self.seen[key][0]
                    self.peak = max(self.peak, self.live)
                    if self.limit is not None and self.peak > self.limit:
                        raise _OverBudget(self.peak)
                self.seen[key][1] += 1      # views share the storage: freed with the last
                weakref.finalize(t, self._free, key)
        return out


def trim_memory() -> None:
    """Give memory freed by earlier calls back to the system (glibc ``malloc_trim``): else the
    allocator keeps it resident and the next phase adds to it, not reuses it."""
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):                            # pragma: no cover - not glibc
        pass


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))


def measure_resident_bytes(fn: Callable, *args, device=None) -> int:
    """What one call ``fn(*args)`` adds at its peak to the memory in use, measured: on CUDA the
    allocator's peak above its start; on Linux the rise of the process's peak resident set
    size, which sees the buffers of fused kernels that no tensor count does; 0 where neither
    can be read. Call it after a warm-up call.

    Side effect, on Linux: the process's peak resident size (``VmHWM``) is reset to the current
    resident size first (``/proc/self/clear_refs``), so a caller that reads ``VmHWM`` across a
    profile sees the peak since that reset. A side-effect-free reading (polling ``VmRSS`` in a
    thread while the call runs) was tried and missed the peak of a scikit-learn probe when the
    cores were busy (129 MiB used against a 32 MiB budget), so the exact reading is kept. On
    CUDA the allocator's peak statistics are reset (as ``torch.cuda.reset_peak_memory_stats``
    does)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn(*args)
        torch.cuda.synchronize(device)
        return max(0, torch.cuda.max_memory_allocated(device) - base)
    try:
        trim_memory()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")                                # the peak RSS := the current RSS
        base = _kib("VmRSS")
        fn(*args)
        return max(0, (_kib("VmHWM") - base) * 1024)
    except (OSError, StopIteration, ValueError):           # not Linux, or not allowed
        return 0


def probe_bytes(fn: Callable, N: int, *, dtype=torch.float32, device=None, limit=None,
                count: bool = True, strings: int = PROBE_STRINGS) -> int:
    """Bytes one string of length N costs in a call ``fn(x)``, measured on one string first and
    then on ``strings`` strings (fewer when that many would not fit ``limit`` bytes, so a
    model too large for the budget is refused from one string): the larger of the peak of the
    tensors the call allocates (:func:`measure_peak_bytes`, times ``PROBE_FACTOR``; with
    ``count``) and the memory it adds at its peak (:func:`measure_resident_bytes`, times
    ``RESIDENT_FACTOR``)."""
    def per_string(k):
        x = torch.zeros(k, N, dtype=dtype, device=device)
        x[::2] = 1
        try:                                 # also the warm-up call; stopped past the limit
            counted = PROBE_FACTOR * measure_peak_bytes(
                fn, x, limit=None if limit is None or not count else limit / PROBE_FACTOR)
        except _OverBudget as e:             # at least this much: over the limit, refused
            return int(PROBE_FACTOR * e.args[0] / k) + 1
        resident = RESIDENT_FACTOR * measure_resident_bytes(fn, x, device=device)
        return int(max(counted if count else 0, resident) / k) + 1

    one = per_string(1)
    if limit is not None and one > limit:
        return one
    k = strings if limit is None else min(strings, int(limit // one))
    return one if k <= 1 else per_string(k)


_MEASURED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _out_of_memory(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or isinstance(e, RuntimeError) and (
        "out of memory" in str(e) or "can't allocate memory" in str(e))


def callable_bytes(classifier, N: int, dtype=torch.float32, device=None,
                   limit=None) -> int | None:
    """What one string costs in a call of a classifier without ``memory_per_string`` (a plain
    function, a module), measured by :func:`probe_bytes` once per classifier and N.

    A failed probe is never read as free: a probe that runs out of memory is a ValueError
    (one string does not fit); one that fails otherwise returns None, and the caller
    (``sensbook.profile``) calls the classifier on one string, so that its own error is
    raised at once, or, when that call succeeds (only the measuring failed), takes one string
    to cost the whole budget."""
    try:
        cache = _MEASURED.setdefault(classifier, {})
    except TypeError:                                   # not weakly referable: not cached
        cache = {}
    k = (N, dtype, str(device))
    if k not in cache:
        try:
            with torch.no_grad():
                cache[k] = probe_bytes(classifier, N, dtype=dtype, device=device, limit=limit)
        except Exception as e:                          # noqa: BLE001 - told apart below
            if _out_of_memory(e):
                raise ValueError(f"one string of length N={N} does not fit in memory: the "
                                 f"classifier ran out of memory on a probe of one string "
                                 f"({type(e).__name__}: {str(e)[:120]})") from None
            return None
    return cache[k]


def measure_peak_bytes(fn: Callable, *args, limit: float | None = None) -> int:
    """The peak bytes of the tensors ``fn(*args)`` allocates while they are alive.

    Parameters
    ----------
    fn : callable
        The computation to measure, e.g. a classifier.
    *args
        Its arguments, e.g. a batch of strings.
    limit : float, optional
        Bytes: the call is stopped (an internal exception) as soon as the tensors alive pass
        it, so a probe never runs a call far past a budget.

    Returns
    -------
    int
        The peak, in bytes, of the tensors alive at once during the call.

    Notes
    -----
    Counted per operation through a dispatch mode, on any device; parameters and inputs are
    not counted.
    """
    counter = _PeakTensors(limit)
    with counter:
        out = fn(*args)
    del out
    return counter.peak
