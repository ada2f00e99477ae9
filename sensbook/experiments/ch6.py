"""Chapter 6's experiment: steps to learn PARITY, FIRST and MAJORITY against N.

Each configuration trains several seeds of one (target, N) as one population
(:func:`sensbook.train_population`) for at most a step budget; a seed that never reaches the
accuracy criterion is *censored*.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from ..boolean import check_n
from ..runtime.sweep import Sweep
from ..settings import check_scale, device as device_
from ..train import (Protocol, _check_seeds, accuracy, curve_schedule, eval_schedule,
                     init_population, target, train_population)
from . import Experiment, register

CONFIG_KEYS = ("target", "N", "seeds", "protocol", "criterion", "eval_every", "eval_growth",
               "exhaustive_max", "n_test", "curve_points", "dtype")


def run_config(config: dict, *, device=None, progress: bool = False) -> dict:
    """Steps to learn: train ``seeds`` models on ``target`` at length ``N`` for at most
    ``protocol["steps"]`` steps (the budget) and record, per seed, the first checked step at
    which its accuracy reaches ``criterion``; a seed that never does is *censored* (None).

    The accuracy is checked at :func:`eval_schedule` (``eval_every``, ``eval_growth``) on all
    2^N strings when N <= ``exhaustive_max``, else on ``n_test`` held-out uniform strings (the
    same ones at every check). Training stops once every seed has met the criterion (later
    steps cannot change a first-passage time). Results (JSON-ready): ``steps`` (per seed, int
    or None), ``budget``, ``steps_run``, the loss curve (``curve_steps``, ``curve``: mean loss
    per window of :func:`curve_schedule`, per seed), the checked accuracies (``eval_steps``,
    ``eval_accuracy``), ``accuracy_strings``, ``cpu_seconds`` and ``device``.
    """
    missing = [k for k in CONFIG_KEYS if k not in config]
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if missing or unknown:
        raise ValueError(f"config is missing {missing} / has unknown keys {unknown}; "
                         f"expected exactly {list(CONFIG_KEYS)}")
    N = check_n(config["N"])
    f = target(config["target"], N)
    seeds = _check_seeds(config["seeds"])
    pr = Protocol.from_dict(config["protocol"])
    crit = config["criterion"]
    if not (isinstance(crit, float) and 0.5 < crit <= 1):
        raise ValueError(f"criterion must be an accuracy in (0.5, 1], got {crit!r}")
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    if config["dtype"] not in dtypes:
        raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {config['dtype']!r}")
    dev = torch.device(device) if device is not None else device_()

    threads = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(1)   # tiny matrices: one thread is fastest; parallelise with workers
    try:
        return _steps_to_learn(config, N, f, seeds, pr, crit, dev, dtypes[config["dtype"]],
                               progress)
    finally:
        torch.set_num_threads(threads)


def _steps_to_learn(config, N, f, seeds, pr, crit, dev, dtype, progress):
    c0 = time.process_time()
    n_test = None if N <= int(config["exhaustive_max"]) else int(config["n_test"])
    checks = set(eval_schedule(pr.steps, config["eval_every"], config["eval_growth"]))
    log_steps = curve_schedule(pr.steps, config["curve_points"])
    model = init_population(seeds, pr, device=dev, dtype=dtype)
    first = [None] * len(seeds)
    eval_steps, eval_acc, done = [], [], [0]

    def until(step):
        done[0] = step
        if step not in checks:
            return False
        acc = accuracy(model, f, N, n_test=n_test)
        model.train()
        eval_steps.append(step)
        eval_acc.append(acc.tolist())
        for p, a in enumerate(acc):
            if first[p] is None and a >= crit:
                first[p] = step
        return all(s is not None for s in first)

    curve = train_population(model, f, N, seeds, pr, log_steps=log_steps, until=until,
                             progress=progress)
    return {
        "name": str(f),
        "steps": first,
        "budget": pr.steps,
        "steps_run": done[0],
        "curve_steps": [s for s in log_steps if s < done[0]] + [done[0]],
        "curve": curve.tolist(),
        "eval_steps": eval_steps,
        "eval_accuracy": eval_acc,
        "accuracy_strings": 2**N if n_test is None else n_test,
        "cpu_seconds": time.process_time() - c0,
        "device": str(dev),
    }


TARGETS = ("PARITY", "FIRST", "MAJORITY")

#: Sizes of chapter 6 at each scale: the one place they live (the chapter, the experiment
#: registry and the CLI read them). ``Ns``: lengths (odd, so MAJORITY has no ties);
#: ``seeds``: models per (target, N), trained as one population; ``budget``: the step budget;
#: ``batch``, ``lr``: the protocol's; ``criterion``: the accuracy that counts as learned,
#: checked every ``eval_every`` steps (and every ``eval_growth`` x the step count later on),
#: on all 2^N strings up to ``exhaustive_max``, above it on ``n_test`` held-out strings;
#: ``curve_points``: points of the stored loss curve.
SIZES = {
    "ci": dict(Ns=[3, 5, 7, 9], seeds=4, budget=1500, batch=64, lr=1e-3,
               targets=list(TARGETS)),
    "book": dict(Ns=[5, 7, 9, 11, 13], seeds=6, budget=3000, batch=64, lr=1e-3,
                 targets=list(TARGETS)),
    "paper": dict(Ns=[5, 7, 9, 11, 13, 15, 17, 19], seeds=8, budget=10000, batch=64, lr=1e-3,
                  targets=list(TARGETS) + ["SPARSE_PARITY_2", "SPARSE_PARITY_3"]),
}
EVAL = dict(criterion=0.99, eval_every=5, eval_growth=0.05, exhaustive_max=11, n_test=2048,
                curve_points=60, dtype="float32")


def configs(Ns, seeds, budget, batch, lr, targets=TARGETS, **evaluation) -> list:
    """The configurations of chapter 6: one per (target, N), ``seeds`` models each."""
    ev = {**EVAL, **evaluation}
    pr = Protocol(steps=int(budget), batch=int(batch), lr=float(lr)).to_dict()
    return [dict(target=t, N=int(N), seeds=list(range(int(seeds))), protocol=pr, **ev)
            for t in targets for N in Ns]


def sweep(scale: str, **overrides):
    """Chapter 6's sweep at a scale (``SIZES``; ``overrides`` change single sizes)."""
    sizes = {**SIZES[check_scale(scale, "scale")], **overrides}
    return Sweep("ch6.training", configs(**sizes), "sensbook.experiments.ch6:run_config")


#: Steps a configuration runs (until its slowest seed learns, at most the budget),
#: log2(steps) = a + b N, per target: a rough fit to measured ci and book runs, used only to
#: predict cost (other targets are predicted at the full budget).
_COST_STEPS = {"PARITY": (5.1, 0.6), "FIRST": (4.9, 0.07), "MAJORITY": (4.0, 0.15)}


def cost(config: dict) -> float:
    """Predicted CPU-seconds (one thread) of one configuration: steps x (a per-step overhead
    + seeds x batch x (N+1) positions) plus the accuracy checks (seeds x strings x (N+1)),
    with the steps from ``_COST_STEPS``; constants fitted on measured ci runs."""
    pr, N, P = config["protocol"], config["N"], len(config["seeds"])
    a, b = _COST_STEPS.get(config["target"], (math.log2(pr["steps"]), 0.0))
    steps = min(pr["steps"], 2 ** (a + b * N))
    checks = sum(1 for s in eval_schedule(pr["steps"], config["eval_every"], config["eval_growth"])
                 if s <= steps)
    strings = 2**N if N <= config["exhaustive_max"] else config["n_test"]
    return 0.05 + steps * (8e-3 + 3e-6 * P * pr["batch"] * (N + 1)) \
        + 1.5e-6 * checks * P * strings * (N + 1)


register(Experiment("ch6.training", lambda scale: sweep(scale).configs,
                    "sensbook.experiments.ch6:run_config", cost,
                    doc="steps to learn each target at each N, several seeds (chapter 6)"))


# ---- chapter 6: analysis ------------------------------------------------------------------
def times(configs, results) -> list:
    """One row per (target, N): the per-seed steps to learn as an array with ``inf`` for
    censored seeds, the budget, and counts (None results are skipped)."""
    rows = []
    for c, r in zip(configs, results):
        if r is None:
            continue
        t = np.array([np.inf if s is None else s for s in r["steps"]], dtype=float)
        rows.append(dict(target=c["target"], name=r["name"], N=int(c["N"]), steps=t,
                         budget=int(r["budget"]), learned=int(np.isfinite(t).sum()),
                         seeds=len(t), steps_run=int(r["steps_run"]),
                         curve_steps=np.asarray(r["curve_steps"]), curve=np.asarray(r["curve"])))
    return rows


def plateau_exit(row, drop: float = 0.1) -> np.ndarray:
    """Per seed, the first logged step at which the window-mean training loss is below
    log 2 - ``drop`` (log 2 is the loss of the output T = 0, i.e. of a model that has not yet
    found any signal); ``inf`` if it never is. Resolution: the windows of :func:`curve_schedule`."""
    below = row["curve"] < math.log(2) - drop                       # (windows, seeds)
    hit = below.any(0)
    return np.where(hit, row["curve_steps"][below.argmax(0)], np.inf)


def growth_rate(rows, target_name: str, *, n_boot: int = 2000, seed: int = 0,
                level: float = 0.95) -> dict:
    """Fitted growth of the steps to learn with N: the least-squares slope b of
    log2(steps) = a + b N over every seed at every N of ``target_name``, with censored seeds
    counted at the budget (which understates them), and a bootstrap interval (seeds resampled
    within each N). Returns ``slope``, ``low``, ``high``, ``censored`` (count) and ``n``."""
    rs = [r for r in rows if r["target"] == target_name]
    if len({r["N"] for r in rs}) < 2:
        raise ValueError(f"target_name={target_name!r}: need at least two lengths, got "
                         f"{sorted(r['N'] for r in rs)}")
    Ns = [np.full(r["seeds"], r["N"], dtype=float) for r in rs]
    ys = [np.log2(np.minimum(r["steps"], r["budget"])) for r in rs]
    slope = lambda x, y: np.polyfit(x, y, 1)[0]
    b = slope(np.concatenate(Ns), np.concatenate(ys))
    rng = np.random.default_rng(seed)
    boot = [slope(np.concatenate(Ns), np.concatenate([y[rng.integers(0, len(y), len(y))]
                                                      for y in ys])) for _ in range(n_boot)]
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return dict(target=target_name, slope=float(b), low=float(lo), high=float(hi),
                censored=int(sum(np.isinf(r["steps"]).sum() for r in rs)),
                n=int(sum(r["seeds"] for r in rs)), level=level)


def table(rows) -> str:
    """The results as an HTML table (for ``IPython.display.HTML``): one row per (target, N)."""
    head = ("target", "N", "learned within budget", "steps to learn: median [min, max]",
            "budget")
    cell = lambda v: f"<td>{v}</td>"
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>",
           "<tbody>"]
    for r in rows:
        t = r["steps"]
        fin = t[np.isfinite(t)]
        med = np.median(t)          # inf when more than half are censored
        span = (f"{med:.0f}" if np.isfinite(med) else f"&gt; {r['budget']}") + (
            f" [{fin.min():.0f}, " + (f"{t.max():.0f}]" if np.isfinite(t.max()) else "censored]")
            if fin.size else "")
        out.append("<tr>" + "".join(cell(v) for v in (
            r["name"], r["N"], f"{r['learned']}/{r['seeds']}", span, r["budget"])) + "</tr>")
    return "\n".join(out + ["</tbody>", "</table>"])
