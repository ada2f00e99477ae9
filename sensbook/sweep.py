"""Sweeps: a list of configurations, each run once and stored on disk.

A *sweep* is data: a name, a list of JSON-able configuration dicts and the (importable)
function that runs one configuration. :func:`run_sweep`

* stores each finished configuration as one JSON file under ``out/<sweep>/``, named by its
  :func:`key`: a hash of the configuration, the package version and a fingerprint of the
  source files that compute results (so changed code never reads stale results);
* writes atomically (a temporary file in the same folder, flushed and fsynced, then
  ``os.replace``), so a killed run leaves either the whole file or none;
* skips what is already stored (re-running a finished sweep computes nothing) and so resumes
  an interrupted sweep without losing finished work;
* fans out over processes with :class:`concurrent.futures.ProcessPoolExecutor` (``workers``);
  each worker stores its own result as soon as it finishes.

A stored file holds its configuration and version; :meth:`Store.load` returns it only when both
match exactly, so a result is never shown for a configuration other than the one asked for.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import pathlib
import shutil
import signal
import socket
import tempfile
import threading
import time
import uuid
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

# Source files that never compute a result (the command line, the cluster executors, the
# published-store reader); every other module of the
# package is part of every key, so a change to any code that computes a result recomputes it,
# while a change to a chapter (a caption, a plot) does not.
_NOT_FINGERPRINTED = ("cli.py", "executors.py", "published.py")


def fingerprinted_files() -> list:
    """The package's source files whose content is part of every key (sorted)."""
    here = pathlib.Path(__file__).resolve().parent
    return sorted(p for p in here.glob("*.py") if p.name not in _NOT_FINGERPRINTED)


def version() -> str:
    """The package version plus a fingerprint of the code that computes results."""
    from . import __version__

    h = hashlib.sha256()
    for path in fingerprinted_files():
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return f"{__version__}+{h.hexdigest()[:10]}"


def canonical(config) -> str:
    """The configuration as canonical JSON (sorted keys, no spaces); ValueError if not JSON-able."""
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"config must be JSON-serialisable (dicts, lists, str, int, finite float): {e}") from None


def key(config, version_: str | None = None) -> str:
    """A 20-hex-digit key of (configuration, version): changes when either changes."""
    v = version() if version_ is None else version_
    return hashlib.sha256(f"{v}\n{canonical(config)}".encode()).hexdigest()[:20]


def results_dir() -> pathlib.Path:
    """Where results live: ``$SENSBOOK_RESULTS`` if set, else ``results/`` in the book's root.

    The book's root is the nearest folder at or above the working directory holding
    ``_toc.yml`` (so a chapter executed in ``book/`` and ``sensbook sweep`` run at the root use
    the same, git-ignored, ``results/``); elsewhere (e.g. Colab) ``./results``.
    """
    env = os.environ.get("SENSBOOK_RESULTS")
    if env:
        return pathlib.Path(env)
    here = pathlib.Path.cwd()
    for d in (here, *here.parents):
        if (d / "_toc.yml").is_file():
            return d / "results"
    return here / "results"


#: Seconds between heartbeats of a claim (its file's mtime is touched while computing).
CLAIM_HEARTBEAT = 10.0
#: A claim whose heartbeat is older than this (or whose process, on this host, is gone) is
#: stale: another runner takes the configuration over.
CLAIM_STALE = 120.0
#: Seconds between looks at configurations claimed by another runner.
CLAIM_POLL = 1.0
#: A leftover ``.tmp`` file (a write interrupted by a kill) older than this is deleted.
TMP_STALE = 600.0
#: The least free space (bytes) a results folder must have before anything is computed.
MIN_FREE_BYTES = 1 << 20


def _checksum(rec: dict) -> str:
    """sha256 of the canonical JSON of what a record stores (version, key, config, result);
    ``meta`` (where and how long it ran) is not part of it, so the same result computed on
    two machines has the same checksum."""
    body = {k: rec[k] for k in ("version", "key", "config", "result")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                     allow_nan=False).encode()).hexdigest()


def _record_problem(rec) -> str | None:
    """Why a parsed file is not a stored record, else None."""
    if not isinstance(rec, dict):
        return f"holds a JSON {type(rec).__name__}, not a record"
    missing = [k for k in ("version", "key", "config", "result", "meta", "sha256") if k not in rec]
    if missing:
        return f"has no {', '.join(repr(k) for k in missing)}"
    if rec["result"] is None:
        return "has a null result"
    try:
        if rec["sha256"] != _checksum(rec):
            return "fails its checksum (edited or damaged)"
    except (TypeError, ValueError) as e:
        return f"is not standard JSON ({e})"
    return None


def _pid_alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True
    return True


class Claim:
    """A claim on one configuration: the file ``<key>.claim`` beside its result, created
    exclusively (``O_EXCL``), holding its owner (host, pid, a random tag, start time), with a
    heartbeat (the file's mtime, touched every ``CLAIM_HEARTBEAT`` seconds by a thread while
    the configuration is computed). Another runner skips a claimed configuration and waits for
    its result; a stale claim (no heartbeat for ``CLAIM_STALE`` seconds, or its process gone
    on this host) is taken over. Two runners can at worst both compute a configuration after
    a simultaneous takeover (the same result, written atomically), never lose it."""

    def __init__(self, path: pathlib.Path, owner: str):
        self.path, self.owner = path, owner
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._beat.start()

    @staticmethod
    def info(path: pathlib.Path):
        """(owner dict or {}, mtime) of a claim file, or None when there is none."""
        try:
            mtime = path.stat().st_mtime
            text = path.read_text()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, UnicodeDecodeError):
            return {}, time.time()
        try:
            owner = json.loads(text)
        except ValueError:                     # being written right now: not stale by content
            owner = {}
        return (owner if isinstance(owner, dict) else {}), mtime

    @staticmethod
    def stale(owner: dict, mtime: float) -> bool:
        if time.time() - mtime > CLAIM_STALE:
            return True
        return owner.get("host") == socket.gethostname() and not _pid_alive(owner.get("pid"))

    @classmethod
    def take(cls, path: pathlib.Path):
        """``(Claim, None)`` when this process now holds the claim, else ``(None, owner)``."""
        tag = uuid.uuid4().hex[:12]
        owner = {"owner": f"{socket.gethostname()}:{os.getpid()}:{tag}", "host": socket.gethostname(),
                 "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        for _ in range(3):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                info = cls.info(path)
                if info is None:
                    continue                                   # released meanwhile: try again
                held, mtime = info
                if not cls.stale(held, mtime):
                    return None, held.get("owner", "?")
                again = cls.info(path)                         # still the same stale claim?
                if again is not None and again[0].get("owner") == held.get("owner"):
                    try:
                        os.unlink(path)                        # take it over
                    except FileNotFoundError:
                        pass
                continue
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(owner))
            return cls(path, owner["owner"]), None
        return None, "?"

    def _mine(self) -> bool:
        info = self.info(self.path)
        return info is not None and info[0].get("owner") == self.owner

    def _heartbeat(self):
        while not self._stop.wait(CLAIM_HEARTBEAT):
            try:
                if not self._mine():
                    return
                os.utime(self.path)
            except OSError:
                pass

    def release(self):
        """Stop the heartbeat and delete the claim if it is still this process's."""
        self._stop.set()
        try:
            if self._mine():
                self.path.unlink()
        except OSError:
            pass


@dataclass(frozen=True)
class Claimed:
    """What :func:`_run_one` returns when another live runner holds the configuration."""

    owner: str


@dataclass
class Store:
    """One JSON file per finished configuration, under ``root/<sweep name>/``.

    A stored record holds ``version``, ``key``, ``config``, ``result``, ``meta`` and the
    ``sha256`` of the first four, and is standard JSON (no NaN or Infinity). A file at a result's
    path that is not such a record (unreadable, not JSON, null, a list, a directory, no
    result, a failed checksum) is named in a warning, moved aside to ``<name>.bad-<time>`` and
    read as missing, so its configuration is computed again.
    """

    root: pathlib.Path
    name: str
    version: str = field(default_factory=version)

    def __post_init__(self):
        self.root = pathlib.Path(self.root)
        if not isinstance(self.name, str) or not self.name or any(c in self.name for c in "/\\") \
                or self.name.startswith("."):
            raise ValueError(f"name must be a plain folder name, got {self.name!r}")

    @property
    def folder(self) -> pathlib.Path:
        return self.root / self.name

    def path(self, config) -> pathlib.Path:
        return self.folder / f"{key(config, self.version)}.json"

    def claim_path(self, config) -> pathlib.Path:
        return self.folder / f"{key(config, self.version)}.claim"

    def _set_aside(self, p: pathlib.Path, problem: str):
        aside = p.with_name(f"{p.name}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}")
        try:
            os.replace(p, aside)
            where = f"moved aside to {aside.name}"
        except FileNotFoundError:
            return                                              # another reader moved it
        except OSError as e:
            where = f"could not be moved aside ({e})"
        warnings.warn(f"stored result {p} {problem}; {where}; its configuration will be computed "
                      "again", stacklevel=3)

    def record(self, config):
        """The whole stored record (``config``, ``result``, ``meta``: device, seconds, ...) of
        exactly this configuration and version, else None (a malformed file is moved aside)."""
        p = self.path(config)
        if not os.path.lexists(p):
            return None
        try:
            if p.is_dir():
                raise IsADirectoryError("is a directory")
            rec = json.loads(p.read_bytes().decode("utf-8"))
            problem = _record_problem(rec)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            problem = f"is unreadable or not JSON ({type(e).__name__}: {e})"
        if problem is None and (rec["version"] != self.version or rec["key"] != p.stem
                                or canonical(rec["config"]) != canonical(config)):
            problem = "belongs to another configuration or version"
        if problem is not None:
            self._set_aside(p, problem)
            return None
        return rec

    def load(self, config):
        """The stored result of exactly this configuration and version, else None."""
        rec = self.record(config)
        return None if rec is None else rec["result"]

    def done(self, config) -> bool:
        return self.load(config) is not None

    def check_writable(self):
        """Before computing anything: the folder can be created and written (a probe file is
        written, fsynced and deleted) and has at least ``MIN_FREE_BYTES`` free."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".probe.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write("probe")
                    fh.flush()
                    os.fsync(fh.fileno())
            finally:
                pathlib.Path(tmp).unlink(missing_ok=True)
            free = shutil.disk_usage(self.folder).free
        except OSError as e:
            raise OSError(f"the results folder {self.folder} is not writable ({e}); nothing was "
                          "computed") from None
        if free < MIN_FREE_BYTES:
            raise OSError(f"the results folder {self.folder} is full ({free} bytes free); nothing "
                          "was computed")

    def clean_tmp(self, older_than: float | None = None) -> list:
        """Delete leftover temporary files (``.*.tmp``, from a write a kill interrupted) older
        than ``older_than`` seconds (default ``TMP_STALE``); returns their names."""
        age = TMP_STALE if older_than is None else older_than
        gone = []
        for t in self.folder.glob(".*.tmp"):
            try:
                if time.time() - t.stat().st_mtime > age:
                    t.unlink()
                    gone.append(t.name)
            except OSError:
                pass
        return gone

    def save(self, config, result, meta: dict | None = None) -> pathlib.Path:
        """Write atomically: temp file in the same folder, fsync, then ``os.replace``.
        ``meta`` (device, seconds, ...) is stored beside the result, with a checksum. The
        result must be standard JSON (no NaN or Infinity: encode them, e.g. as None)."""
        if result is None:
            raise ValueError(f"{self.name}: the result of config {canonical(config)} is None; a "
                             "runner must return a JSON-able result (None reads as missing)")
        p = self.path(config)
        p.parent.mkdir(parents=True, exist_ok=True)
        rec = {"version": self.version, "key": p.stem, "config": config, "result": result,
               "meta": dict(meta or {})}
        try:
            rec["sha256"] = _checksum(rec)
            text = json.dumps(rec, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{self.name}: the result of config {canonical(config)} is not "
                             f"standard JSON ({e}); return lists, dicts, str, int, finite floats, "
                             "and encode NaN/inf, e.g. as None or strings") from None
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, p)
        except BaseException:
            pathlib.Path(tmp).unlink(missing_ok=True)
            raise
        return p


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

    from .scale import device

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
        meta = {"device": os.environ.get("SENSBOOK_DEVICE") or str(device()),
                "seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                "threads": torch.get_num_threads(), "host": platform.node(),
                "torch": torch.__version__, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        store.save(config, result, meta)
        return "computed", result
    finally:
        claim.release()


def _run_one(root, name, version_, runner, config, kwargs):
    """Compute one configuration and store it with the device it ran on and the seconds it took
    (runs in a worker process, in-process, or as a cluster job). Returns the result: the stored
    one if there is one; else it claims the configuration (see :class:`Claim`), computes and
    stores it; a :class:`Claimed` when another live runner holds the claim (its result will be
    stored by that runner)."""
    return _attempt(root, name, version_, runner, config, kwargs)[1]


@dataclass
class Sweep:
    """A named list of configurations and the runner (``"module:function"``) of one."""

    name: str
    configs: list
    runner: str

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
    from .scale import progress as _progress

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    devices = list(devices or [])
    if devices and (workers < 2 or not all(isinstance(d, str) and d for d in devices)):
        raise ValueError(f"devices must be non-empty device names and needs workers >= 2, got "
                         f"devices={devices!r}, workers={workers!r}")
    store = Store(results_dir() if out is None else out, sweep.name)
    kwargs = dict(runner_kwargs or {})
    results = [store.load(c) for c in sweep.configs]
    todo = [i for i, r in enumerate(results) if r is None]
    stats = {"stored": len(results) - len(todo), "computed": 0, "missing": 0}
    if not compute:
        stats["missing"] = len(todo)
        return results, stats
    if todo:
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
    pending = []

    def take(i, outcome):
        how, value = outcome
        if how == "claimed":
            pending.append(i)
            return
        results[i] = value
        stats[how] += 1
        bar.update(1)

    try:
        if workers == 1 or (len(todo) <= 1 and not devices):
            for i in todo:
                take(i, _attempt(*args(i)))
        else:
            import multiprocessing as mp
            ctx = mp.get_context(mp_context or "spawn")
            threads = max(1, (os.cpu_count() or 1) // workers)
            init = (threads, ctx.Value("i", 0) if devices else None, devices or None, os.getpid())
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                                     initargs=init) as ex:
                futures = {ex.submit(_attempt, *args(i)): i for i in todo}
                for fut in as_completed(futures):
                    take(futures[fut], fut.result())
        while pending:                      # held by other runners: wait, or take over if stale
            time.sleep(CLAIM_POLL)
            waiting, pending[:] = list(pending), []
            for i in waiting:
                take(i, _attempt(*args(i)))
    finally:
        bar.close()
    return results, stats
