"""Every expensive computation of the book is an *experiment* with stored results.

An experiment is data plus two pure functions:

* ``configs(scale)``: the list of JSON-able configurations at a scale (``ci``, ``book``,
  ``paper``); each configuration is minutes of work at most, so a cluster or a pool of processes
  can spread them, and large computations are split (by models, by string blocks) into
  configurations whose results merge exactly;
* ``runner(config)``: computes one configuration and returns a JSON-able result;
* ``cost(config)``: the predicted seconds of one configuration on the reference machine
  (2 CPU cores, one thread per worker), a formula whose constant was fitted on the experiment's
  ``ci`` runs (``sensbook calibrate NAME`` prints measured against predicted; ``sensbook list --scale book
  --measured results`` the factor of each model over a stored build, :data:`COST_CALIBRATION`).

Each chapter's experiments live in one module, ``sensbook/experiments/chN.py``: the chapter's
sizes per scale (the one place they live), configurations, runners, cost models and the helpers
that merge and tabulate its results. Each registers its experiments with :func:`register`;
:func:`registry` imports them on first use, so ``EXPERIMENTS`` (name -> :class:`Experiment`) is
the one list the chapters, the command line (``sensbook list``, ``sensbook sweep``) and the
tests read. This package imports the instruments and :mod:`sensbook.runtime`, never the
reverse.

A chapter calls :func:`run_experiment` (``results = sb.run_experiment("ch5.k0_growth")``): stored
results are read, missing ones computed and stored (see :mod:`sensbook.sweep`), and the chapter
only analyses and plots. Every stored result records the device and the seconds it took.

To add an experiment, see the README ("How to add an experiment").
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ..pages import use_style
from ..runtime.published import fetch_missing, in_colab, published_keys, published_url
from ..runtime.store import Store, key, results_dir, where_computed
from ..runtime.sweep import Sweep, run_pool, run_sweep
from ..settings import check_scale, device, scale as current_scale

#: The chapters' experiment modules (imported on first use of the registry).
CHAPTERS = ("ch1", "ch2", "ch3", "ch4", "ch5", "ch5_certified", "ch6_training", "ch6_mechanism",
            "ch6_explanations", "ch7")

#: The reference machine's budget for the book's experiments at ``book`` scale: seconds of the
#: 25-minute ``make book`` left after setup and the self-hosted JavaScript (about 2 min) and
#: the build that executes and renders the notebooks (about 3 min), against the calibrated
#: cost models' sum over two workers (:data:`COST_CALIBRATION`: measured CPU seconds). The
#: README's fresh-clone measurement is the real check.
BOOK_BUDGET_SECONDS = 20 * 60

#: Each cost model's measured CPU seconds over its prediction, per experiment: the sum of
#: ``meta.cpu_seconds`` over the ``book``-scale results of one ``make book`` from a fresh
#: clone, over the model's sum (``sensbook list --scale book --measured results`` prints both), measured
#: 2026-12-05 on the 2-core reference machine (an Intel Xeon, torch's AVX-512 path). The
#: models come from ``ci`` runs and are off by a factor per experiment (0.19 to 6.1): an
#: experiment's ``cost`` is its model times this factor, so the budget test, the progress
#: bar and ``sensbook list`` read measured seconds. Absent: 1. The four ``ch5_certified``
#: models were refitted after that (issue 45): their factors were measured on 2026-12-07 on
#: the 2-core AMD EPYC (AVX2; a fresh-clone ``make book`` of 49d846a, and ``log_volume`` again
#: after the read-out score's chunking) and divided by 1.09: on that build every other
#: experiment took 1.09 times the CPU seconds these factors predict.
COST_CALIBRATION = {
    "ch1.random_functions": 0.37, "ch2.control": 0.35, "ch2.e1": 0.56, "ch2.e1_unmarked": 0.47,
    "ch3.box_scan": 0.65, "ch3.dictators": 0.97, "ch3.influence": 1.93, "ch3.lipschitz": 0.47,
    "ch3.recognition": 0.40, "ch3.worst_blowup": 0.19, "ch4.all_strings": 0.69,
    "ch4.cor43": 6.13, "ch4.danger_zone": 0.36, "ch4.eps_cmp": 0.56, "ch4.small_ball": 0.50,
    "ch5.basin": 0.51, "ch5.drift": 0.35, "ch5.exact": 0.86, "ch5.k0_band": 0.29,
    "ch5.k0_growth": 0.53, "ch5.pf_map": 0.26, "ch5_certified.attack": 0.93,
    "ch5_certified.log_volume": 0.83, "ch5_certified.radius": 0.66,
    "ch5_certified.volume": 0.72, "ch6.first_mechanism": 0.54, "ch6.interventions": 0.85,
    "ch6.long": 1.02, "ch6.noise": 0.44, "ch6.rivals": 0.76, "ch6.supports": 0.63,
    "ch6.training": 0.80, "ch7.noise": 3.88, "ch7.survey": 0.59, "ch7.training": 1.54,
    "ch7.worst_flip": 0.69,
}


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
        factor, model = COST_CALIBRATION.get(self.name, 1.0), self.cost
        if factor != 1.0:                  # the model times its measured factor
            object.__setattr__(self, "cost", lambda config: factor * model(config))

    def sweep(self, scale: str):
        """The :class:`~sensbook.runtime.sweep.Sweep` of this experiment at ``scale``."""
        return Sweep(self.name, list(self.configs(check_scale(scale, "scale"))), self.runner)

    def predicted_seconds(self, scale: str) -> float:
        """Sum of the cost model over the configurations at ``scale``."""
        return float(sum(self.cost(c) for c in self.configs(scale)))


def measured(exps, scale: str, root) -> list:
    """Per experiment of ``exps``, what its results stored under ``root`` at ``scale`` took:
    ``stored`` of ``configs``, ``predicted`` (the calibrated cost at ``scale``),
    ``cpu_seconds`` (their ``meta.cpu_seconds``, summed) and ``factor``, those seconds over
    the uncalibrated model of the same configurations (what :data:`COST_CALIBRATION` holds;
    None when nothing is stored). ``sensbook list --scale S --measured STORE`` prints it."""
    rows = []
    for e in exps:
        sw = e.sweep(scale)
        st = Store(root, sw.name, sw.version)
        done = [(c, r) for c in sw.configs if (r := st.record(c)) is not None]
        cpu = float(sum(r["meta"].get("cpu_seconds", 0.0) for _, r in done))
        model = sum(e.cost(c) for c, _ in done) / COST_CALIBRATION.get(e.name, 1.0)
        rows.append(dict(name=e.name, stored=len(done), configs=len(sw.configs),
                         predicted=e.predicted_seconds(scale), cpu_seconds=cpu,
                         factor=cpu / model if done and model > 0 else None))
    return rows


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
        for m in CHAPTERS:
            importlib.import_module(f"{__name__}.{m}")
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
    """Results of an experiment, in the order of its configurations: stored ones read, missing
    ones computed now and stored.

    Parameters
    ----------
    name : str
        The experiment, e.g. ``"ch5.exact"`` (``sensbook list`` shows them all).
    scale : {"ci", "book", "paper"}, optional
        Default: the current scale (:func:`sensbook.set_scale`).
    out : str or os.PathLike, optional
        The store (default :func:`~sensbook.runtime.store.results_dir`).
    workers : int
        One-thread processes that compute the missing configurations.
    progress : bool
        Show a progress bar.
    compute : bool
        False: only read what is stored (a missing configuration's result is None).
    report : bool
        Print one line saying how many came from the store, from the published store, and how
        many were computed now (so the page says which is which).

    Returns
    -------
    list
        One result a configuration, in the order of its configurations.

    Notes
    -----
    In Colab (or with ``$SENSBOOK_PUBLISHED``) results the published book stored are fetched
    first (:mod:`sensbook.runtime.published`).
    """
    exp = get(name)
    sc = current_scale() if scale is None else scale
    sweep = exp.sweep(sc)
    out = results_dir() if out is None else out
    # In Colab (or with $SENSBOOK_PUBLISHED): results the published book computed, never in CI
    published, site, refused, absent = fetch_missing(sweep, out)
    if compute and in_colab():
        _check_colab_lifetime(exp, sweep, out)
    results, stats = run_sweep(sweep, out, workers=workers, progress=progress, compute=compute)
    if report:
        from_site = f"{published} from the published store ({site}), " if site else ""
        bad = f"; {refused} published record(s) refused" if refused else ""
        bad += (f"; {absent} listed in the published index but not on the site, computed here"
                if absent else "")
        print(f"[{name} @ {sc}: {len(results)} configurations, {stats['stored'] - published} read "
              f"from the store, {from_site}{stats['computed']} computed now{bad}]")
    return results


def run_all(exps, scale: str, out=None, *, workers: int = 1, progress: bool = True) -> dict:
    """Compute every missing configuration of the experiments ``exps`` at ``scale`` in one
    pool of ``workers`` one-thread processes (:func:`~sensbook.runtime.sweep.run_pool`);
    returns ``{name: (stored, computed)}``. What ``make book`` runs first."""
    return run_pool([(e.sweep(scale), e.cost) for e in exps], out, workers=workers,
                    progress=progress, desc=f"experiments @ {scale}")


#: A Colab runtime's lifetime (at most 12 hours, often less): Run all stops, with a message,
#: before an experiment predicted to take longer, unless ``$SENSBOOK_LONG_RUNS=1``.
COLAB_LIFETIME_SECONDS = 12 * 3600


class TooLongForColab(RuntimeError):
    """A computation refused in Colab (longer than a runtime lives). A notebook shows its
    message alone, not the traceback of the library calls that reached it (IPython prints
    what ``_render_traceback_`` returns)."""

    def _render_traceback_(self):
        return [f"{type(self).__name__}: {self}"]


def _check_colab_lifetime(exp, sweep, out):
    """In Colab, refuse to start computing what cannot finish in one runtime (``paper`` scale)."""
    import os

    store = Store(out, exp.name, sweep.version)
    seconds = sum(exp.cost(c) for c in sweep.configs if not store.done(c))
    if seconds > COLAB_LIFETIME_SECONDS and os.environ.get("SENSBOOK_LONG_RUNS") != "1":
        raise TooLongForColab(
            f"{exp.name}: the configurations left to compute are predicted to take about "
            f"{_minutes(seconds)} on one CPU core, longer than a Colab runtime lives "
            f"({COLAB_LIFETIME_SECONDS // 3600} h). Compute them on a GPU machine or a cluster "
            "(`sensbook sweep`) and keep the store on a drive (the introduction, 'At paper "
            "scale'), or set os.environ['SENSBOOK_LONG_RUNS'] = '1' to compute here anyway.")


#: Predicted computing time past which the banner points to a GPU, a cluster and a kept store.
BANNER_LONG_SECONDS = 30 * 60


def banner(*names: str) -> str:
    """The lines a notebook prints first: scale, device, torch version and what the experiments
    it reads need here.

    Parameters
    ----------
    *names : str
        Experiment names such as ``"ch5.exact"``, or a chapter such as ``"ch3"`` for all of
        that chapter's experiments.

    Returns
    -------
    str

    Notes
    -----
    For the experiments named, in this order: how many configurations are stored here (and
    on which kernel path and CPU they were computed: their records' ``meta``,
    ``sensbook.runtime.store.where_computed``, and this machine's path), how many the published store holds (Colab, or
    ``$SENSBOOK_PUBLISHED``; by its index, which a fetch has not confirmed yet: what does not
    arrive or fails a check is computed, and :func:`run_experiment` says how many) and the
    predicted time of the rest (the cost models: one CPU core; on a GPU each experiment is
    faster by its own factor: the introduction's table, measured on one H200).

    It also sets up the notebook: the book's figure style (``sensbook.pages.use_style``)
    and one torch thread for the rest of the session (said on its first line). The book's
    computations are small matrices, which more threads only slow down: with Colab's two
    threads chapter 1 ran in 66 s against 17 s in one (issue 28).
    """
    use_style()
    torch.set_num_threads(1)
    sc = current_scale()
    line = f"sensbook scale={sc!r} device={device()} torch={torch.__version__} threads=1"
    if not names:
        return line
    exps = {e.name: e for n in names for e in select(n)}
    base = published_url()
    index = published_keys(base) if base else None
    n = here = site = todo = 0
    seconds = site_seconds = 0.0
    paths = {}                          # where the stored results were computed: their count
    for e in exps.values():
        sweep = e.sweep(sc)
        st = Store(results_dir(), e.name, sweep.version)
        held = (index or {}).get(e.name, ())
        for c in sweep.configs:
            n += 1
            rec = st.record(c)
            if rec is not None:
                here += 1
                m = rec["meta"]
                w = f"{m.get('kernel', 'path not recorded')}, {m.get('cpu', 'CPU not recorded')}"
                paths[w] = paths.get(w, 0) + 1
            elif key(c, sweep.version) in held:
                site += 1
                site_seconds += e.cost(c)
            else:
                todo += 1
                seconds += e.cost(c)
    what = (f"this notebook reads {len(exps)} experiment{'s' if len(exps) > 1 else ''} "
            f"({n} configurations at this scale): {', '.join(exps)}")
    if base is None:
        where = f"{here} stored here"
    elif index is None:
        where = f"{here} stored here, the published store ({base}) unreadable"
    else:
        where = f"{here} stored here, {site} in the published store ({base})"
    cost = "nothing to compute" if todo == 0 else f"about {_minutes(seconds)} on one CPU core"
    lines = [line, what, f"{where}, {todo} to compute: {cost}"]
    if site:               # what the index lists is not yet fetched, nor checked
        lines.append(f"(not yet fetched: any that fails to arrive is computed here, at most "
                     f"{_minutes(site_seconds)})")
    if paths:              # float32 training's outcomes depend on the kernel path (issue 43)
        here_path = where_computed(str(device()))["kernel"]
        lines.append("stored results computed on kernel path, CPU: " + "; ".join(
            f"{w} ({k})" for w, k in sorted(paths.items())) + f" (this machine: {here_path})")
    if seconds > BANNER_LONG_SECONDS:
        lines += ["too long for one notebook session: compute them on a GPU or a cluster and",
                  "keep the store on a drive (the introduction, 'At paper scale')"]
    return "\n".join(lines)


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


# ---- stored arrays -----------------------------------------------------------------------
def enc(a):
    """A float array as nested lists for a stored result, +inf as None (JSON has no inf; NaN is
    an error)."""
    a = np.asarray(a, dtype=float)
    if np.isnan(a).any():
        raise ValueError("result holds NaN")
    return np.where(np.isinf(a), None, a).tolist() if np.isinf(a).any() else a.tolist()


def dec(v) -> np.ndarray:
    """Inverse of :func:`enc` for stored results: a float array, None entries -> +inf."""
    a = np.array(v, dtype=object)
    a[np.equal(a, None)] = np.inf
    return a.astype(float)


def pick(scale: str, **sizes):
    """``sizes[scale]`` for an explicit ``scale`` (a configuration function's argument); the
    chapters use :func:`sensbook.pick`, which reads the current scale."""
    if scale not in sizes:
        raise ValueError(f"scale={scale!r} is not one of {', '.join(sizes)}")
    return sizes[scale]
