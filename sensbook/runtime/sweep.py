"""Sweeps: a list of configurations, each run once and stored (:mod:`sensbook.runtime.store`).

A *sweep* is data: a name, a list of JSON-able configuration dicts and the (importable)
function that runs one configuration. :func:`run_sweep`

* skips what is already stored (re-running a finished sweep computes nothing) and so resumes
  an interrupted sweep without losing finished work;
* fans out over processes with :class:`concurrent.futures.ProcessPoolExecutor` (``workers``);
  each worker stores its own result as soon as it finishes, and dies with the sweep;
* or hands the missing configurations to an executor (:mod:`sensbook.runtime.executors`: local
  processes, Slurm job arrays).

:func:`run_all` runs the missing configurations of several sweeps in one pool (what
``make book`` does first). Imports nothing of sensbook but :mod:`sensbook.settings` and the
store; runners are resolved by name (``"module:function"``).
"""
from __future__ import annotations

import contextlib
import importlib
import os
import pathlib
import signal
import sys
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass

from ..settings import device, one_thread, progress as _progress
from . import store as _store
from .store import Claim, Claimed, Store, canonical, results_dir, version


def resolve(runner: str):
    """``"package.module:function"`` -> the function (so workers can import it by name)."""
    if not isinstance(runner, str) or ":" not in runner:
        raise ValueError(f"runner must be 'module:function', got {runner!r}")
    mod, fn = runner.split(":", 1)
    return getattr(importlib.import_module(mod), fn)


def _die_with_parent(parent: int):
    """Make this worker exit when its parent does (even by SIGKILL): the kernel's parent-death
    signal on Linux, and everywhere a thread that watches the parent's pid."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):                                          # pragma: no cover
        pass
    if os.getppid() != parent:                  # the parent died before the signal was armed
        os._exit(1)

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="sensbook-parent-watch").start()


def _init_worker(threads, counter=None, devices=None, parent=None):
    """Worker start-up: die with the parent (``parent``: its pid), a share of the cores each
    (no oversubscription), and, when ``devices`` is given, the next device in turn (worker i
    uses ``devices[i % len(devices)]``)."""
    import torch

    if parent is not None:
        _die_with_parent(parent)
    # Ctrl-C in a terminal reaches every process of the group: the sweep (the parent) stops
    # its workers itself (see _pool), so a worker ignores it rather than half-report it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the sweep's own bar reports progress; a runner's inner bars (one per worker, written to
    # the same terminal) would interleave with it, so workers run without them
    os.environ["SENSBOOK_PROGRESS"] = "0"
    torch.set_num_threads(threads)
    if devices:
        with counter.get_lock():
            i = counter.value
            counter.value += 1
        os.environ["SENSBOOK_DEVICE"] = devices[i % len(devices)]


def _attempt(root, name, version_, runner, config, kwargs):
    """``("stored", result)`` when already stored, ``("computed", result)`` after computing and
    storing it under a claim, ``("claimed", Claimed)`` when another live runner holds it."""
    import platform

    import torch

    store = Store(root, name, version_)
    rec = store.record(config)
    if rec is not None:
        return "stored", rec["result"]
    store.folder.mkdir(parents=True, exist_ok=True)
    claim, owner = Claim.take(store.claim_path(config))
    if claim is None:
        return "claimed", Claimed(owner)
    try:
        rec = store.record(config)                 # finished by another runner meanwhile?
        if rec is not None:
            return "stored", rec["result"]
        t0, c0 = time.perf_counter(), time.process_time()
        result = resolve(runner)(config, **kwargs)
        if result is None:
            raise ValueError(f"runner {runner} returned None for config {canonical(config)} of "
                             f"{name}: it must return a JSON-able result (None reads as missing)")
        meta = {"device": str(device()),              # $SENSBOOK_DEVICE, checked
                "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                "threads": torch.get_num_threads(), "host": platform.node(),
                "torch": torch.__version__, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        store.save(config, result, meta)
        return "computed", result
    finally:
        claim.release()


def _run_one(root, name, version_, runner, config, kwargs):
    """Compute one configuration and store it with the device it ran on and the seconds it took
    (what a cluster job runs). Returns the result: the stored one if there is one; else it
    claims the configuration (see :class:`~sensbook.runtime.store.Claim`), computes and stores
    it. A configuration another live runner holds is waited for (saying so once, in the job's
    log) until that runner stores it, or taken over when it stops: a job never ends without
    the result stored."""
    said = False
    while True:
        how, value = _attempt(root, name, version_, runner, config, kwargs)
        if how != "claimed":
            return value
        if not said:
            print(f"[{name}: config {canonical(config)} is being computed by another runner "
                  f"({value.owner}); waiting for its result]", file=sys.stderr, flush=True)
            said = True
        time.sleep(_store.CLAIM_POLL)


#: Memory one worker process needs: torch and the package (about 220 MB resident) plus the
#: instruments' default working budget (``memory_mb=256``); bounds the number of workers.
WORKER_MB = 512


def _available_mb() -> float:
    """Memory available to new processes here (``MemAvailable``, else physical memory), MiB."""
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):                  # pragma: no cover
        return float("inf")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):                               # pragma: no cover
        return os.cpu_count() or 1


def bound_workers(workers: int, devices=(), what: str | None = None) -> int:
    """``workers`` cut to what this machine holds: at most one per core (or per accelerator
    entry, when ``devices`` name GPUs: ``cpu`` entries add no core) and at most one per
    ``WORKER_MB`` of available memory; a ``UserWarning`` says so when the request is cut
    (``what``: how it names the request, default ``workers=N``)."""
    cores, mem = _cores(), _available_mb()
    by_mem = max(1, int(mem // WORKER_MB))
    gpus = [d for d in devices if not str(d).strip().lower().startswith("cpu")]
    limit = min(max(cores, len(gpus)), by_mem)
    if workers <= limit:
        return workers
    why = (f"{cores} core(s)" if limit < by_mem else
           f"{mem / 1024:.1f} GiB of memory available ({WORKER_MB} MB per worker)")
    warnings.warn(f"{what or f'workers={workers}'} cut to {limit}: this machine has {why}",
                  stacklevel=3)
    return limit


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while the pool starts its workers (on submit): a started process keeps an
    ignored signal (across exec, and Python keeps an inherited SIG_IGN), so a worker that is
    still importing when Ctrl-C reaches the process group cannot print a KeyboardInterrupt
    traceback above the sweep's one line (``_init_worker`` ignores it too, for ``fork``).
    Ctrl-C in this short window is lost; outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep: what is stored is kept, its claims are released; running the
    same sweep again resumes it."""


def _pool(jobs, take, *, workers, devices=None, mp_context=None, stores=()):
    """Run ``_attempt(*args)`` for each ``(tag, args)`` of ``jobs`` in a process pool,
    calling ``take(tag, future)`` as each finishes. On Ctrl-C (or any interrupt) the workers
    are killed at once, not waited for, their claims in ``stores`` released, and
    :class:`Interrupted` raised; after another error the other configurations still finish
    (and are stored) before it is raised."""
    import multiprocessing as mp

    ctx = mp.get_context(mp_context or "spawn")
    threads = max(1, _cores() // workers)
    init = (threads, ctx.Value("i", 0) if devices else None, devices or None, os.getpid())
    ex = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                             initargs=init)
    try:
        with _sigint_ignored():             # the workers start (on submit) ignoring Ctrl-C
            futures = {ex.submit(_attempt, *args): tag for tag, args in jobs}
        for fut in as_completed(futures):
            take(futures[fut], fut)
    except (KeyboardInterrupt, SystemExit) as stop:
        procs = list((getattr(ex, "_processes", None) or {}).values())   # no public accessor
        manager = getattr(ex, "_executor_manager_thread", None)   # shutdown() forgets it
        for proc in procs:
            proc.kill()
        ex.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            proc.join(5)
        # let the pool's manager thread see its dead workers and close its wakeup pipe now:
        # left running, it races the interpreter's exit hook, which writes to that pipe
        # (a "Bad file descriptor" traceback after the interrupt message; CPython gh-125451
        # gives the pipe its own lock in later releases, not in 3.11.7)
        if manager is not None:
            manager.join(10)
        for st in stores:
            st.release_claims(proc.pid for proc in procs)
        if isinstance(stop, SystemExit):
            raise
        raise Interrupted("interrupted: the workers were stopped; what is stored is kept and "
                          "their claims released: run the same sweep again to resume") from None
    except BaseException:
        ex.shutdown(wait=True)
        raise
    ex.shutdown(wait=True)


def _say_waiting(name, waiting, said):
    """One line per holder (not per poll) saying what a sweep waits for."""
    by = {}
    for config, claimed in waiting:
        if canonical(config) not in said:
            said.add(canonical(config))
            by.setdefault(claimed.owner.split(",")[0], []).append(claimed.owner)
    for who, owners in by.items():
        print(f"[{name}: waiting for {len(owners)} configuration(s) another runner is computing "
              f"({owners[0]}); taken over if it stops: no heartbeat for "
              f"{_store.CLAIM_STALE:.0f} s, or its process gone]", file=sys.stderr, flush=True)


@dataclass
class Sweep:
    """A named list of configurations and the runner (``"module:function"``) of one."""

    name: str
    configs: list
    runner: str
    #: the key version of its results (default: :func:`~sensbook.runtime.store.version` of
    #: the runner: the instruments plus the runner's module)
    version: str = None

    def __post_init__(self):
        seen, dups = {}, []
        for i, c in enumerate(self.configs):
            k = canonical(c)
            if k in seen:
                dups.append(f"#{seen[k]} and #{i} are both {k}")
            seen.setdefault(k, i)
        if dups:
            raise ValueError(f"configs contains duplicates: {'; '.join(dups[:5])}"
                             f"{' ...' if len(dups) > 5 else ''}")
        resolve(self.runner)
        if self.version is None:
            self.version = version(self.runner)


def run_sweep(sweep: Sweep, out=None, *, workers: int = 1, progress: bool = True,
              compute: bool = True, runner_kwargs: dict | None = None, mp_context=None,
              devices=None, executor=None):
    """Results of every configuration of ``sweep``, in order: stored ones read, others computed.

    Returns ``(results, stats)`` with ``stats = {"stored": k, "computed": m, "missing": j}``.
    With ``compute=False`` nothing is computed and missing results are None. ``workers > 1``
    runs missing configurations in a :class:`~concurrent.futures.ProcessPoolExecutor`
    (``mp_context``, default "spawn", safe with torch and CUDA); each is stored as soon as it
    finishes, so killing the sweep loses only the configurations in flight, and the workers
    die with the sweep. ``devices`` (e.g. ``["cuda:0", "cuda:1"]``, with ``workers > 1``)
    spreads the workers over several devices.

    Before computing anything the results folder must be writable (else an error, nothing
    lost); stale temporary files are deleted. Each configuration is claimed while it is
    computed (:class:`Claim`), so several sweeps (or cluster jobs) on one folder split the
    work: a configuration another runner holds is waited for, and taken over if that runner
    dies; those results count as ``stored``.
    ``executor`` (e.g. :class:`sensbook.executors.SubmititExecutor`, a Slurm job array) runs the
    missing configurations instead: each job runs :func:`_run_one`; what they stored is read back.
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    devices = list(devices or [])
    if devices and (workers < 2 or not all(isinstance(d, str) and d for d in devices)):
        raise ValueError(f"devices must be non-empty device names and needs workers >= 2, got "
                         f"devices={devices!r}, workers={workers!r}")
    store = Store(results_dir() if out is None else out, sweep.name, sweep.version)
    kwargs = dict(runner_kwargs or {})
    results = [store.load(c) for c in sweep.configs]
    todo = [i for i, r in enumerate(results) if r is None]
    stats = {"stored": len(results) - len(todo), "computed": 0, "missing": 0}
    if not compute:
        stats["missing"] = len(todo)
        return results, stats
    if todo:
        device()                                   # a bad $SENSBOOK_DEVICE fails here, not later
        store.check_writable()
        store.clean_tmp()
    if executor is not None:
        executor.run([(store.root, store.name, store.version, sweep.runner, sweep.configs[i], kwargs)
                      for i in todo])
        results = [store.load(c) for c in sweep.configs]
        stats["computed"] = sum(results[i] is not None for i in todo)
        stats["missing"] = len(todo) - stats["computed"]
        return results, stats
    bar = _progress(total=len(sweep.configs), desc=f"sweep {sweep.name}", disable=not progress)
    bar.update(stats["stored"])
    args = lambda i: (store.root, store.name, store.version, sweep.runner, sweep.configs[i], kwargs)
    pending, said = [], set()

    def take(i, outcome):
        how, value = outcome
        if how == "claimed":
            pending.append((i, value))
            return
        results[i] = value
        stats[how] += 1
        bar.update(1)

    try:
        if workers > 1 and (len(todo) > 1 or devices):
            workers = min(bound_workers(workers, devices), max(len(todo), len(devices)))
        if workers == 1 or (len(todo) <= 1 and not devices):
            with one_thread():
                for i in todo:
                    take(i, _attempt(*args(i)))
        else:
            _pool([(i, args(i)) for i in todo], lambda i, fut: take(i, fut.result()),
                  workers=workers, devices=devices, mp_context=mp_context, stores=[store])
        while pending:                      # held by other runners: wait, or take over if stale
            _say_waiting(sweep.name, [(sweep.configs[i], c) for i, c in pending], said)
            time.sleep(_store.CLAIM_POLL)
            waiting, pending[:] = list(pending), []
            with one_thread():
                for i, _ in waiting:
                    take(i, _attempt(*args(i)))
    finally:
        bar.close()
    return results, stats


def run_pool(sweeps, out=None, *, workers: int = 1, progress: bool = True,
             desc: str = "sweeps") -> dict:
    """Compute every missing configuration of several sweeps in ONE pool of ``workers``
    processes (one thread each), longest predicted first, so that the workers stay busy across
    sweeps. ``sweeps``: ``(Sweep, cost)`` pairs, ``cost(config)`` the predicted seconds.
    The progress bar counts those predicted seconds, not configurations (the long ones run
    first, so a count of configurations would promise hours at the start), and estimates the
    time left from the average rate since the start.
    Returns ``{name: (stored, computed)}``. The store's guarantees are :func:`run_sweep`'s:
    each configuration is claimed while computed, workers die with this process, a killed run
    resumes; a failing configuration stops no other (all failures are reported at the end)."""
    out = results_dir() if out is None else out
    todo, counts, stores = [], {}, {}
    for sweep, cost in sweeps:
        store = stores[sweep.name] = Store(out, sweep.name, sweep.version)
        missing = [c for c in sweep.configs if not store.done(c)]
        counts[sweep.name] = [len(sweep.configs) - len(missing), 0]
        if missing:
            store.check_writable()
            store.clean_tmp()
        todo += [(cost(c), sweep.name, (store.root, store.name, store.version, sweep.runner, c,
                                        {}))
                 for c in missing]
    todo.sort(key=lambda t: -t[0])
    if todo:
        device()                                   # a bad $SENSBOOK_DEVICE fails here, not later
    weight = {id(args): max(float(c), 1e-3) for c, _, args in todo}     # predicted seconds
    bar = _progress(total=sum(weight.values()), desc=desc, disable=not progress, smoothing=0,
                    bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} predicted "
                               "CPU s [{elapsed}<{remaining}]")
    pending, said = [], set()

    def take(name, args, outcome):
        how = outcome[0]
        if how == "claimed":                # another runner holds it: wait for it below
            pending.append((name, args, outcome[1]))
            return
        counts[name][0 if how == "stored" else 1] += 1
        bar.update(weight[id(args)])

    failed = []                             # one failing configuration stops no other

    def attempt_here(name, args):
        try:
            with one_thread():
                take(name, args, _attempt(*args))
        except Exception as err:            # noqa: BLE001 - reported with its configuration
            failed.append((name, args[4], err))

    def take_future(tag, fut):
        name, args = tag
        try:
            take(name, args, fut.result())
        except Exception as err:            # noqa: BLE001
            failed.append((name, args[4], err))

    try:
        if workers > 1 and len(todo) > 1:
            workers = min(bound_workers(workers), len(todo))
        if workers == 1 or len(todo) <= 1:
            for _, name, args in todo:
                attempt_here(name, args)
        else:
            _pool([((name, args), args) for _, name, args in todo], take_future,
                  workers=workers, stores=stores.values())
        while pending:
            for name in {n for n, _, _ in pending}:
                _say_waiting(name, [(a[4], c) for n, a, c in pending if n == name], said)
            time.sleep(_store.CLAIM_POLL)
            waiting, pending[:] = list(pending), []
            for name, args, _ in waiting:
                attempt_here(name, args)
    finally:
        bar.close()
    if failed:
        lines = [f"{name} {canonical(c)}: {type(e).__name__}: {e}" for name, c, e in failed]
        raise RuntimeError(f"{len(failed)} configuration(s) failed (the others are stored):\n"
                           + "\n".join(lines))
    return {k: tuple(v) for k, v in counts.items()}
