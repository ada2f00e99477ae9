"""Every expensive computation of the book is an *experiment* with stored results.

An experiment is data plus two pure functions:

* ``configs(scale)``: the list of JSON-able configurations at a scale (``ci``, ``book``,
  ``paper``); each configuration is minutes of work at most, so a cluster or a pool of processes
  can spread them, and large computations are split (by models, by string blocks) into
  configurations whose results merge exactly;
* ``runner(config)``: computes one configuration and returns a JSON-able result;
* ``cost(config)``: the predicted seconds of one configuration on the reference machine
  (2 CPU cores, one thread per worker), a formula whose constant was fitted on the experiment's
  ``ci`` runs (``sensbook calibrate NAME`` prints measured against predicted).

Each module that defines experiments registers them with :func:`register`; this module imports
those modules on first use, so ``EXPERIMENTS`` (name -> :class:`Experiment`) is the one list the
chapters, the command line (``sensbook list``, ``sensbook sweep``) and the tests read.

A chapter calls :func:`run_experiment` (``results = sb.run_experiment("ch5.k0_growth")``): stored
results are read, missing ones computed and stored (see :mod:`sensbook.sweep`), and the chapter
only analyses and plots. Every stored result records the device and the seconds it took.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

# Modules that register experiments (imported on first use of the registry).
_MODULES = ("sensbook.survey", "sensbook.geometry", "sensbook.volume", "sensbook.train",
            "sensbook.controls")

#: The reference machine's budget for the book's experiments at ``book`` scale (seconds of the
#: 25-minute ``make book`` budget left after kernels start and the chapters' own light cells).
BOOK_BUDGET_SECONDS = 17 * 60


@dataclass(frozen=True)
class Experiment:
    """One experiment: ``name`` (``"<chapter>.<what>"``), its configurations per scale, the
    ``runner`` that computes one configuration (``"module:function"``, importable by worker
    processes and cluster jobs), and the ``cost`` model (seconds of one configuration)."""

    name: str
    configs: Callable[[str], list]
    runner: str
    cost: Callable[[dict], float]
    doc: str = ""
    chapter: str = field(init=False)

    def __post_init__(self):
        chapter, _, what = self.name.partition(".")
        if not chapter or not what or not chapter.isidentifier():
            raise ValueError(f"name must be '<chapter>.<what>', got {self.name!r}")
        object.__setattr__(self, "chapter", chapter)

    def sweep(self, scale: str):
        """The :class:`~sensbook.sweep.Sweep` of this experiment at ``scale``."""
        from .scale import _check
        from .sweep import Sweep

        return Sweep(self.name, list(self.configs(_check(scale, "scale"))), self.runner)

    def predicted_seconds(self, scale: str) -> float:
        """Sum of the cost model over the configurations at ``scale``."""
        return float(sum(self.cost(c) for c in self.configs(scale)))


EXPERIMENTS: dict = {}
_loaded = False


def register(exp: Experiment) -> Experiment:
    """Add an experiment to :data:`EXPERIMENTS` (a module-level call in the defining module)."""
    old = EXPERIMENTS.get(exp.name)
    if old is not None and old.runner != exp.runner:
        raise ValueError(f"experiment {exp.name!r} is registered twice")
    EXPERIMENTS[exp.name] = exp
    return exp


def registry() -> dict:
    """All registered experiments, by name (imports the defining modules once)."""
    global _loaded
    if not _loaded:
        for m in _MODULES:
            importlib.import_module(m)
        _loaded = True
    return dict(sorted(EXPERIMENTS.items()))


def select(name: str) -> list:
    """Experiments named by ``name``: one experiment (``ch5.k0_growth``), every experiment of a
    chapter (``ch5``), or ``all``. ValueError listing the known names otherwise."""
    exps = registry()
    if name == "all":
        return list(exps.values())
    if name in exps:
        return [exps[name]]
    chosen = [e for e in exps.values() if e.chapter == name]
    if not chosen:
        known = sorted({e.chapter for e in exps.values()}) + sorted(exps)
        raise ValueError(f"experiment={name!r} is unknown; known: all, {', '.join(known)}")
    return chosen


def get(name: str) -> Experiment:
    """The experiment called ``name`` (exactly one)."""
    exps = registry()
    if name not in exps:
        raise ValueError(f"experiment={name!r} is unknown; known: {', '.join(exps)}")
    return exps[name]


def run_experiment(name: str, scale: str | None = None, out=None, *, workers: int = 1,
                   progress: bool = True, compute: bool = True, report: bool = True):
    """Results of experiment ``name`` at ``scale`` (default: the current scale), in the order of
    its configurations: stored ones read from ``out`` (default :func:`~sensbook.sweep.results_dir`),
    missing ones computed now and stored. In Colab (or with ``$SENSBOOK_PUBLISHED``) results the
    published book stored are fetched first (:mod:`sensbook.published`). With ``report``, prints
    one line saying how many came from the store, from the published store, and how many were
    computed now (so the page says which is which)."""
    from .published import fetch_missing
    from .scale import scale as current_scale
    from .sweep import results_dir, run_sweep

    exp = get(name)
    sc = current_scale() if scale is None else scale
    sweep = exp.sweep(sc)
    out = results_dir() if out is None else out
    # In Colab (or with $SENSBOOK_PUBLISHED): results the published book computed, never in CI
    published, site = fetch_missing(sweep, out)
    results, stats = run_sweep(sweep, out, workers=workers, progress=progress, compute=compute)
    if report:
        from_site = f"{published} from the published store ({site}), " if site else ""
        print(f"[{name} @ {sc}: {len(results)} configurations, {stats['stored'] - published} read "
              f"from the store, {from_site}{stats['computed']} computed now]")
    return results


def run_all(exps, scale: str, out=None, *, workers: int = 1, progress: bool = True) -> dict:
    """Compute every missing configuration of several experiments in ONE pool of ``workers``
    processes (one thread each), longest predicted first, so that two workers stay busy across
    experiments; returns ``{name: (stored, computed)}``. What ``make book`` runs first. The
    store's guarantees are :func:`~sensbook.sweep.run_sweep`'s: each configuration is claimed
    while computed, workers die with this process, a killed run resumes."""
    import multiprocessing as mp
    import os
    import time
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from .scale import progress as _progress
    from .sweep import CLAIM_POLL, Store, _attempt, _init_worker, canonical, results_dir

    out = results_dir() if out is None else out
    todo, counts = [], {}
    for e in exps:
        sweep = e.sweep(scale)
        store = Store(out, sweep.name)
        missing = [c for c in sweep.configs if not store.done(c)]
        counts[e.name] = [len(sweep.configs) - len(missing), 0]
        if missing:
            store.check_writable()
            store.clean_tmp()
        todo += [(e.cost(c), e.name, (store.root, store.name, store.version, e.runner, c, {}))
                 for c in missing]
    todo.sort(key=lambda t: -t[0])
    bar = _progress(total=len(todo), desc=f"experiments @ {scale}", disable=not progress)
    pending = []

    def take(name, args, outcome):
        how = outcome[0]
        if how == "claimed":                # another runner holds it: wait for it below
            pending.append((name, args))
            return
        counts[name][0 if how == "stored" else 1] += 1
        bar.update(1)

    failed = []                             # one failing configuration stops no other

    def attempt_here(name, args):
        try:
            take(name, args, _attempt(*args))
        except Exception as err:            # noqa: BLE001 - reported with its configuration
            failed.append((name, args[4], err))

    try:
        if workers == 1 or len(todo) <= 1:
            for _, name, args in todo:
                attempt_here(name, args)
        else:
            ctx = mp.get_context("spawn")
            threads = max(1, (os.cpu_count() or 1) // workers)
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx,
                                     initializer=_init_worker,
                                     initargs=(threads, None, None, os.getpid())) as ex:
                futs = {ex.submit(_attempt, *args): (name, args) for _, name, args in todo}
                for f in as_completed(futs):
                    try:
                        take(*futs[f], f.result())
                    except Exception as err:    # noqa: BLE001
                        failed.append((futs[f][0], futs[f][1][4], err))
        while pending:
            time.sleep(CLAIM_POLL)
            waiting, pending[:] = list(pending), []
            for name, args in waiting:
                attempt_here(name, args)
    finally:
        bar.close()
    if failed:
        lines = [f"{name} {canonical(c)}: {type(e).__name__}: {e}" for name, c, e in failed]
        raise RuntimeError(f"{len(failed)} configuration(s) failed (the others are stored):\n"
                           + "\n".join(lines))
    return {k: tuple(v) for k, v in counts.items()}
