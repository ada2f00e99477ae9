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


def experiments() -> dict:
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
    exps = experiments()
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
    exps = experiments()
    if name not in exps:
        raise ValueError(f"experiment={name!r} is unknown; known: {', '.join(exps)}")
    return exps[name]


def run_experiment(name: str, scale: str | None = None, out=None, *, workers: int = 1,
                   progress: bool = True, compute: bool = True, report: bool = True):
    """Results of experiment ``name`` at ``scale`` (default: the current scale), in the order of
    its configurations: stored ones read from ``out`` (default :func:`~sensbook.sweep.results_dir`),
    missing ones computed now and stored. With ``report``, prints one line saying how many came
    from the store and how many were computed now (so the page says which is which)."""
    from .scale import scale as current_scale
    from .sweep import results_dir, run_sweep

    exp = get(name)
    sc = current_scale() if scale is None else scale
    sweep = exp.sweep(sc)
    results, stats = run_sweep(sweep, results_dir() if out is None else out, workers=workers,
                               progress=progress, compute=compute)
    if report:
        print(f"[{name} @ {sc}: {len(results)} configurations, {stats['stored']} read from the "
              f"store, {stats['computed']} computed now]")
    return results
