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
import tempfile
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


@dataclass
class Store:
    """One JSON file per finished configuration, under ``root/<sweep name>/``."""

    root: pathlib.Path
    name: str
    version: str = field(default_factory=version)

    def __post_init__(self):
        self.root = pathlib.Path(self.root)
        if not self.name or any(c in self.name for c in "/\\") or self.name.startswith("."):
            raise ValueError(f"name must be a plain folder name, got {self.name!r}")

    @property
    def folder(self) -> pathlib.Path:
        return self.root / self.name

    def path(self, config) -> pathlib.Path:
        return self.folder / f"{key(config, self.version)}.json"

    def record(self, config):
        """The whole stored record (``config``, ``result``, ``meta``: device, seconds, ...) of
        exactly this configuration and version, else None."""
        p = self.path(config)
        try:
            rec = json.loads(p.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if rec.get("version") != self.version or canonical(rec.get("config")) != canonical(config):
            return None
        return rec

    def load(self, config):
        """The stored result of exactly this configuration and version, else None."""
        rec = self.record(config)
        return None if rec is None else rec["result"]

    def done(self, config) -> bool:
        return self.load(config) is not None

    def save(self, config, result, meta: dict | None = None) -> pathlib.Path:
        """Write atomically: temp file in the same folder, fsync, then ``os.replace``.
        ``meta`` (device, seconds, ...) is stored beside the result."""
        p = self.path(config)
        p.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"version": self.version, "key": p.stem, "config": config,
                           "result": result, "meta": dict(meta or {})}, sort_keys=True)
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


def _init_worker(threads, counter=None, devices=None):
    """Worker start-up: a share of the cores each (no oversubscription), and, when ``devices``
    is given, the next device in turn (worker i uses ``devices[i % len(devices)]``)."""
    import torch

    torch.set_num_threads(threads)
    if devices:
        with counter.get_lock():
            i = counter.value
            counter.value += 1
        os.environ["SENSBOOK_DEVICE"] = devices[i % len(devices)]


def _run_one(root, name, version_, runner, config, kwargs):
    """Compute one configuration and store it with the device it ran on and the seconds it took
    (runs in a worker process or in-process)."""
    import platform
    import time

    import torch

    from .scale import device

    t0, c0 = time.perf_counter(), time.process_time()
    result = resolve(runner)(config, **kwargs)
    meta = {"device": os.environ.get("SENSBOOK_DEVICE") or str(device()), "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0, "threads": torch.get_num_threads(),
            "host": platform.node(), "torch": torch.__version__,
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    Store(root, name, version_).save(config, result, meta)
    return result


@dataclass
class Sweep:
    """A named list of configurations and the runner (``"module:function"``) of one."""

    name: str
    configs: list
    runner: str

    def __post_init__(self):
        keys = [canonical(c) for c in self.configs]
        if len(set(keys)) != len(keys):
            raise ValueError("configs contains duplicates")
        resolve(self.runner)


def run_sweep(sweep: Sweep, out=None, *, workers: int = 1, progress: bool = True,
              compute: bool = True, runner_kwargs: dict | None = None, mp_context=None,
              devices=None, executor=None):
    """Results of every configuration of ``sweep``, in order: stored ones read, others computed.

    Returns ``(results, stats)`` with ``stats = {"stored": k, "computed": m, "missing": j}``.
    With ``compute=False`` nothing is computed and missing results are None. ``workers > 1``
    runs missing configurations in a :class:`~concurrent.futures.ProcessPoolExecutor`
    (``mp_context``, default "spawn", safe with torch and CUDA); each is stored as soon as it
    finishes, so killing the sweep loses only the configurations in flight. ``devices`` (e.g.
    ``["cuda:0", "cuda:1"]``, with ``workers > 1``) spreads the workers over several devices.
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
    try:
        if workers == 1 or (len(todo) <= 1 and not devices):
            for i in todo:
                results[i] = _run_one(*args(i))
                stats["computed"] += 1
                bar.update(1)
        else:
            import multiprocessing as mp
            ctx = mp.get_context(mp_context or "spawn")
            threads = max(1, (os.cpu_count() or 1) // workers)
            init = (threads, ctx.Value("i", 0), devices) if devices else (threads,)
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                                     initargs=init) as ex:
                futures = {ex.submit(_run_one, *args(i)): i for i in todo}
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    stats["computed"] += 1
                    bar.update(1)
    finally:
        bar.close()
    return results, stats


