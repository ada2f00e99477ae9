"""Chapter 6's training experiments (book/ch6_training.md): how long training takes, and what
it produces.

* ``ch6.training``: PARITY, FIRST and MAJORITY (and sparse variants) against N. Each
  configuration trains several seeds of one (target, N) as one population for at most a step
  budget (:func:`sensbook.train.learn`); a seed that never reaches the accuracy criterion is
  *censored*. Per seed it also records the sensitivity profile before and after training
  (E2/E3), and for learned seeds the sharpness and basin radius of the trained solution.
* ``ch6.long``: FIRST and MAJORITY at long inputs, at two layer-norm eps, with the margin of
  the learned models.
* ``ch6.first_mechanism``: what trained FIRST uses at long N, and FIRST without 1[n = 1].

The rival explanations of the training cost (book/ch6_explanations.md) are in
:mod:`sensbook.experiments.ch6_explanations`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..boolean import TruthTable, check_n, strings
from ..mechanism import eos_mechanism
from ..pages import html_table
from ..profile import sensitivity_profile, truth_table
from ..runtime.sweep import Sweep
from ..settings import check_scale, device as device_
from ..survival import fit_aft, heldout_loglik, kaplan_meier, logrank, profile_interval
from ..sharpness import top_hessian_eigenvalue
from ..train import (Protocol, _check_seeds, accuracy, curve_schedule, eval_schedule,
                     held_out_strings, init_population, learn, min_margin, target)
from ..volume import basin_curve, critical_sigma
from . import Experiment, register

CONFIG_KEYS = ("target", "N", "seeds", "protocol", "criterion", "eval_every", "eval_growth",
               "exhaustive_max", "n_test", "curve_points", "dtype", "n_profile", "sharpness",
               "basin", "signal", "mechanism")
SAMPLE_SEED = 17                       # the fixed strings of sharpness and basins


def run_config(config: dict, *, device=None, progress: bool = False,
               target_function=None) -> dict:
    """Steps to learn, and the trained models: train ``seeds`` models on ``target`` at length
    ``N`` for at most ``protocol["steps"]`` steps (the budget) and record, per seed, the first
    checked step at which its accuracy reaches ``criterion``; a seed that never does is
    *censored* (None). See :func:`sensbook.train.learn`: the *trained model* of a seed is its
    parameters at that first passage, or at the budget if censored.

    The accuracy is checked at :func:`eval_schedule` (``eval_every``, ``eval_growth``) on all
    2^N strings when N <= ``exhaustive_max``, else on ``n_test`` held-out uniform strings (the
    same ones at every check). Results (JSON-ready): ``steps`` (per seed, int or None),
    ``budget``, ``steps_run``, the loss curve (``curve_steps``, ``curve``; None where a
    ``drop_learned`` seed has stopped), the checked
    accuracies (``eval_steps``, ``eval_accuracy``), ``accuracy_strings``, and

    * ``before`` / ``after``: per seed the sensitivity profile counts ``K`` (exhaustive up to
      ``exhaustive_max``, else over ``n_profile`` sampled strings: ``profile_strings``) of the
      initial and of the trained model, and ``accuracy``; ``after`` also ``margin`` (min |T|
      over the accuracy strings) and ``theta_norm`` (Euclidean norm of theta);
    * ``sharpness`` (if configured: ``n_strings``, ``iters``, ``tol``): per learned seed the
      top Hessian eigenvalue of the training loss on all strings or a fixed sample
      (:func:`sensbook.sharpness.top_hessian_eigenvalue`), None for censored seeds;
    * ``basin`` (if configured: ``sigmas``, ``copies``, ``n_strings``): per learned seed the
      mean agreement of ``copies`` uniformly perturbed copies with the trained model's own
      function, per sigma (:func:`sensbook.basin_curve`), and ``sigma99``, where it falls
      to 0.99 (:func:`sensbook.critical_sigma`; None where the grid does not bracket it);
    * ``signal`` (if configured: ``points``, ``max_strings``): the gradient signal along
      training (:func:`sensbook.train.gradient_signal` on all 2^N strings, or a fixed sample
      of ``max_strings``, and the minibatch gradient's norm) at ``points`` geometric steps
      (:func:`sensbook.train.curve_schedule`), logged by :func:`sensbook.train.learn` without
      changing what it trains;
    * ``mechanism`` (if configured: ``max_strings``): what the models use to decide
      (:func:`sensbook.mechanism.eos_mechanism` on all 2^N strings, or a fixed sample of
      ``max_strings``): in ``before`` and ``after``, and, where the signal is logged, in
      ``signal`` at the same steps (keys ``var_median``, ``var_min``, ``beta_median``,
      ``att_max``, ``att_where``, ``att_share``).

    An optional ``perturb`` = 1 moves every initial parameter one unit in the last place
    before anything is measured (:func:`one_ulp`: training's own noise); ``drop_learned`` =
    True stops each seed at its first passage (:func:`sensbook.train.learn`; the curve ends).
    ``target_function`` (a :class:`sensbook.boolean.BooleanFunction`) is trained in place of
    ``target``'s (the sparse supports of ``ch6.supports``).

    The result holds no timing and no device (the store's ``meta`` records both), so two runs
    of one configuration store the same result, with the same checksum.
    """
    missing = [k for k in CONFIG_KEYS if k not in config]
    unknown = sorted(set(config) - set(CONFIG_KEYS) - {"perturb", "drop_learned"})
    if missing or unknown:
        raise ValueError(f"config is missing {missing} / has unknown keys {unknown}; "
                         f"expected exactly {list(CONFIG_KEYS)}")
    N = check_n(config["N"])
    f = target(config["target"], N) if target_function is None else target_function
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


def one_ulp(model) -> int:
    """Move every parameter of ``model`` one unit in the last place, towards +inf
    (``torch.nextafter``), in place; returns how many moved (all of them). The same on every
    CPU: what the book's noise sections perturb to measure how much of a training outcome is
    rounding (issue 43)."""
    moved = 0
    with torch.no_grad():
        for p in model.parameters():
            q = torch.nextafter(p, torch.full_like(p, math.inf))
            moved += int((q != p).sum())
            p.copy_(q)
    return moved


def _profiles(model, f, N, config, n_test):
    """Profile counts and accuracy of every model of the population (JSON-ready)."""
    kw = dict(progress=False)
    if N > int(config["exhaustive_max"]):
        kw.update(n_samples=int(config["n_profile"]), seed=SAMPLE_SEED)
    prof = sensitivity_profile(model, N, **kw)
    return dict(K=prof.counts.tolist(), profile_strings=int(prof.n_strings),
                accuracy=accuracy(model, f, N, n_test=n_test).tolist())


def _listed(d: dict) -> dict:
    return {k: v.tolist() for k, v in d.items()}


def _sample(N, n, dtype):
    """All 2^N strings if there are at most n, else n fixed uniform strings."""
    if 2**N <= n:
        return strings(N).to(dtype)
    g = torch.Generator().manual_seed(SAMPLE_SEED)
    return torch.randint(0, 2, (n, N), generator=g).to(dtype)


def _steps_to_learn(config, N, f, seeds, pr, crit, dev, dtype, progress):
    n_test = None if N <= int(config["exhaustive_max"]) else int(config["n_test"])
    model = init_population(seeds, pr, device=dev, dtype=dtype)
    if int(config.get("perturb", 0)):
        one_ulp(model)
    before = _profiles(model, f, N, config, n_test)
    mech = config["mechanism"]
    xm = _sample(N, int(mech["max_strings"]), dtype) if mech else None
    probe = (lambda m: eos_mechanism(m, xm)) if mech else None
    if mech:
        before["mechanism"] = _listed(probe(model))
    log_steps = curve_schedule(pr.steps, config["curve_points"])
    sig = config["signal"]
    run = learn(model, f, N, seeds, pr, criterion=crit, n_test=n_test, log_steps=log_steps,
                checks=eval_schedule(pr.steps, config["eval_every"], config["eval_growth"]),
                signal_steps=curve_schedule(pr.steps, int(sig["points"])) if sig else None,
                signal_strings=_sample(N, int(sig["max_strings"]), dtype) if sig else None,
                signal_probe=probe, drop_learned=bool(config.get("drop_learned")),
                progress=progress)
    done = run["steps_run"]
    after = _profiles(model, f, N, config, n_test)
    xs = _sample(N, 2**N, dtype) if n_test is None else held_out_strings(N, n_test).to(dtype)
    after["margin"] = min_margin(model, xs).tolist()
    after["theta_norm"] = model.flat().double().norm(dim=1).tolist()
    if mech:
        after["mechanism"] = _listed(probe(model))
    learned = [p for p, s in enumerate(run["steps"]) if s is not None]
    out = {
        "name": str(f),
        "steps": run["steps"],
        "budget": pr.steps,
        "steps_run": done,
        "curve_steps": [s for s in log_steps if s < done] + [done],
        "curve": [[None if math.isnan(v) else v for v in w] for w in run["curve"].tolist()],
        "eval_steps": run["eval_steps"],
        "eval_accuracy": run["eval_accuracy"],
        "accuracy_strings": 2**N if n_test is None else n_test,
        "before": before,
        "after": after,
        "sharpness": None,
        "basin": None,
        "signal": run["signal"],
    }
    if config["sharpness"] and learned:
        sh = config["sharpness"]
        res = top_hessian_eigenvalue(model.select(learned), f,
                                     _sample(N, int(sh["n_strings"]), dtype),
                                     loss=pr.loss, iters=int(sh["iters"]), tol=float(sh["tol"]))
        lam = [None] * len(seeds)
        for p, v in zip(learned, res["lam"].tolist()):
            lam[p] = v
        out["sharpness"] = dict(lam=lam, iterations=res["iterations"],
                                converged=bool(res["converged"].all()))
    if config["basin"] and learned:
        b = config["basin"]
        sig = [float(s) for s in b["sigmas"]]
        n = None if 2**N <= int(b["n_strings"]) else int(b["n_strings"])
        agree, s99 = [None] * len(seeds), [None] * len(seeds)
        for p in learned:
            one = model.select([p])
            own = TruthTable(truth_table(one, N, progress=False)[0] == 1)
            curve = basin_curve(one, own, N, sig, int(b["copies"]), n_samples=n,
                                seed=SAMPLE_SEED + p, dtype=dtype, progress=False)
            agree[p] = curve["accuracy"].tolist()
            v = critical_sigma(sig, curve["accuracy"], level=0.99)
            s99[p] = v if math.isfinite(v) else None     # NaN: not bracketed by the grid
        out["basin"] = dict(sigmas=sig, agreement=agree, sigma99=s99)
    return out


TARGETS = ("PARITY", "FIRST", "MAJORITY")

#: Sizes of chapter 6 at each scale: the one place they live (the chapter, the experiment
#: registry and the CLI read them). ``Ns``: lengths (odd, so MAJORITY has no ties);
#: ``seeds``: models per (target, N), trained as one population; ``budget``: the step budget;
#: ``batch``, ``lr``: the protocol's; ``sparse``: sparse targets and the lengths they are
#: trained at; ``long``: FIRST and MAJORITY at long lengths (``Ns``), at each layer-norm eps
#: (``eps``), ``seeds`` each, ``budget`` steps, accuracy on ``n_test`` held-out strings;
#: ``rivals``: the sparse PARITY cells of ``ch6.rivals`` (``targets`` x ``Ns``, less those
#: ``sparse`` already trains, ``seeds`` each), and the length of its PARITY cell trained
#: without logging (the supports of 3-sparse PARITY: ``ch6_explanations.SUPPORT_SIZES``).
SIZES = {
    "ci": dict(Ns=[3, 5, 7, 9], seeds=4, budget=1500, batch=64, lr=1e-3,
               targets=list(TARGETS),
               sparse=dict(targets=["SPARSE_PARITY_3", "SPARSE_MAJORITY_3"], Ns=[5, 7, 9]),
               long=dict(Ns=[17, 33], eps=[1e-5, 0.1], seeds=3, budget=600, n_test=512),
               rivals=dict(targets=["SPARSE_PARITY_2"], Ns=[5, 7, 9], control_N=5, seeds=4)),
    "book": dict(Ns=[5, 7, 9, 11, 13], seeds=6, budget=3000, batch=64, lr=1e-3,
                 targets=list(TARGETS),
                 sparse=dict(targets=["SPARSE_PARITY_3", "SPARSE_MAJORITY_3"], Ns=[5, 9, 13]),
                 long=dict(Ns=[17, 33, 65], eps=[1e-5, 0.1], seeds=3, budget=1000,
                           n_test=512),
                 rivals=dict(targets=["SPARSE_PARITY_2", "SPARSE_PARITY_3"], Ns=[5, 9, 13, 21],
                             control_N=5, seeds=8)),
    "paper": dict(Ns=[5, 7, 9, 11, 13, 15, 17, 19], seeds=8, budget=10000, batch=64, lr=1e-3,
                  targets=list(TARGETS),
                  sparse=dict(targets=["SPARSE_PARITY_2", "SPARSE_PARITY_3",
                                       "SPARSE_MAJORITY_3"], Ns=[5, 7, 9, 11, 13, 15, 17, 19]),
                  long=dict(Ns=[33, 65, 129, 257, 513], eps=[1e-5, 0.1], seeds=8,
                            budget=5000, n_test=2048),
                  rivals=dict(targets=["SPARSE_PARITY_2", "SPARSE_PARITY_3"], Ns=[21],
                              control_N=7, seeds=8)),
}
#: When a model counts as having learned f (``criterion``, checked every ``eval_every`` steps
#: and later every ``eval_growth`` x the step count, on all 2^N strings up to
#: ``exhaustive_max``, above it on ``n_test`` held-out strings); ``curve_points`` of the stored
#: loss curve; ``n_profile``: sampled strings of a profile above ``exhaustive_max``;
#: ``sharpness`` and ``basin``: how the trained solutions are probed (on all strings or a
#: fixed sample of ``n_strings``; power iteration to a relative ``tol``; ``copies`` perturbed
#: copies per noise scale in ``sigmas``); ``mechanism``: the eos layer norms and attention of
#: the initial and trained models (and along PARITY's runs, with the signal) on all 2^N
#: strings up to ``max_strings`` (every book length).
EVAL = dict(criterion=0.99, eval_every=5, eval_growth=0.05, exhaustive_max=11, n_test=2048,
            curve_points=60, dtype="float32", n_profile=512,
            sharpness=dict(n_strings=256, iters=60, tol=1e-3),
            basin=dict(sigmas=[float(s) for s in np.geomspace(1e-4, 0.3, 13).round(6)],
                       copies=8, n_strings=256),
            signal=None, mechanism=dict(max_strings=8192))
#: The gradient signal logged along PARITY's runs (``ch6.training``'s PARITY cells only): at
#: ``points`` geometric steps, on all 2^N strings up to ``max_strings`` (every book length).
SIGNAL = dict(points=12, max_strings=8192)


def configs(Ns, seeds, budget, batch, lr, targets=TARGETS, sparse=None, long=None,
            rivals=None, **evaluation) -> list:
    """The configurations of ``ch6.training``: one per (target, N), ``seeds`` models each
    (the sparse targets at their own lengths)."""
    ev = {**EVAL, **evaluation}
    pr = Protocol(steps=int(budget), batch=int(batch), lr=float(lr)).to_dict()
    cells = [(t, N) for t in targets for N in Ns]
    if sparse:
        cells += [(t, N) for t in sparse["targets"] for N in sparse["Ns"]]
    return [dict(target=t, N=int(N), seeds=list(range(int(seeds))), protocol=pr,
                 **{**ev, "signal": SIGNAL if t == "PARITY" else ev["signal"]})
            for t, N in cells]


def long_configs(scale: str) -> list:
    """The configurations of ``ch6.long``: FIRST and MAJORITY at each long N (odd, for
    MAJORITY) and layer-norm eps, and PARITY at the shortest of them (eps = 1e-5);
    accuracy on held-out strings, profiles sampled, no sharpness or basin; each seed stops
    at its first passage (``drop_learned``: its steps are the same, its curve ends)."""
    s = SIZES[check_scale(scale, "scale")]
    lg = s["long"]
    ev = {**EVAL, "n_test": int(lg["n_test"]), "eval_every": 10, "eval_growth": 0.1,
          "n_profile": 128, "sharpness": None, "basin": None, "mechanism": None}
    cells = [(t, N, eps) for eps in lg["eps"] for t in ("FIRST", "MAJORITY") for N in lg["Ns"]]
    cells.append(("PARITY", min(lg["Ns"]), min(lg["eps"])))
    return [dict(target=t, N=int(N), seeds=list(range(int(lg["seeds"]))),
                 protocol=Protocol(steps=int(lg["budget"]), batch=int(s["batch"]),
                                   lr=float(s["lr"]), eps=float(eps)).to_dict(), **ev,
                 drop_learned=True)
            for t, N, eps in cells]


def sweep(scale: str, **overrides):
    """Chapter 6's sweep at a scale (``SIZES``; ``overrides`` change single sizes)."""
    sizes = {**SIZES[check_scale(scale, "scale")], **overrides}
    return Sweep("ch6.training", configs(**sizes), "sensbook.experiments.ch6_training:run_config")


#: Steps a configuration runs (until its slowest seed learns, at most the budget),
#: log2(steps) = a + b N (N capped at 21), per target: a rough fit to measured ci and book
#: runs, used only to predict cost (other targets are predicted at the full budget).
_COST_STEPS = {"PARITY": (5.1, 0.6), "FIRST": (4.9, 0.07), "MAJORITY": (4.0, 0.15),
               "SPARSE_PARITY_2": (6.3, 0.14), "SPARSE_PARITY_3": (6.6, 0.25),
               "SPARSE_MAJORITY_3": (6.0, 0.2)}


#: a mechanism probe's cost per string, relative to one forward and backward pass (``fb``)
MECHANISM_COST = 1.0


def cost(config: dict) -> float:
    """Predicted CPU-seconds (one thread) of one configuration: steps x (a per-step overhead
    + seeds x batch x (N+1) positions, more for long N where attention's (N+1)^2 shows)
    plus the accuracy checks (seeds x strings x (N+1)) and the probes of the trained models
    (about 15 Hessian-vector products; a basin curve), with the steps from
    ``_COST_STEPS``; constants fitted on measured ci and book runs (``sensbook calibrate``)."""
    pr, N, P = config["protocol"], config["N"], len(config["seeds"])
    a, b = _COST_STEPS.get(config["target"], (math.log2(pr["steps"]), 0.0))
    steps = min(pr["steps"], 2 ** (a + b * min(N, 21)))
    checks = sum(1 for s in eval_schedule(pr["steps"], config["eval_every"], config["eval_growth"])
                 if s <= steps)
    strings = 2**N if N <= config["exhaustive_max"] else config["n_test"]
    probe = 0.0
    if config["sharpness"]:
        probe += 3e-6 * 15 * P * min(2**N, config["sharpness"]["n_strings"]) * (N + 1)
    if config["basin"]:
        bs = config["basin"]
        probe += P * (0.05 + 1e-6 * len(bs["sigmas"]) * bs["copies"]
                      * min(2**N, bs["n_strings"]) * (N + 1))
    fb = 2.5e-6 * P * (N + 1) * (1 + (N + 1) / 100)      # forward and backward, one string
    n_signal = 0
    if config["signal"]:
        sg = config["signal"]
        n_signal = sum(1 for s in curve_schedule(pr["steps"], sg["points"]) if s <= steps)
        probe += fb * min(2**N, sg["max_strings"]) * n_signal
    if config.get("mechanism"):         # two forward passes per string, before, after, logged
        probe += MECHANISM_COST * fb * min(2**N, config["mechanism"]["max_strings"]) * (
            2 + n_signal)
    return 0.05 + steps * (5e-3 + fb * pr["batch"]) + 1e-6 * checks * P * strings * (N + 1) \
        + probe


register(Experiment("ch6.training", lambda scale: sweep(scale).configs,
                    "sensbook.experiments.ch6_training:run_config", cost,
                    doc="steps to learn each target at each N, several seeds, and what the "
                        "trained models compute (chapter 6)"))
register(Experiment("ch6.long", long_configs, "sensbook.experiments.ch6_training:run_config", cost,
                    doc="FIRST and MAJORITY at long inputs, two layer-norm eps (chapter 6)"))


#: ``ch6.noise``: the first ``seeds`` seeds of every PARITY, FIRST and MAJORITY cell of
#: ``ch6.training`` trained again one ulp away (:func:`one_ulp`), nothing probed: how far the
#: growth exponents move under rounding (a subset, for the cost).
NOISE_SEEDS = 2


def noise_configs(scale: str) -> list:
    """The configurations of ``ch6.noise``: ``ch6.training``'s main cells (:data:`TARGETS` at
    every N) with their first :data:`NOISE_SEEDS` seeds, ``perturb`` = 1, and no sharpness,
    basin, signal or mechanism probes (training and its profiles only); each seed stops at
    its first passage (``drop_learned``)."""
    return [dict(c, seeds=c["seeds"][:NOISE_SEEDS], perturb=1, sharpness=None, basin=None,
                 signal=None, mechanism=None, drop_learned=True)
            for c in sweep(scale).configs if c["target"] in TARGETS]


register(Experiment("ch6.noise", noise_configs, "sensbook.experiments.ch6_training:run_config",
                    cost, doc="ch6.training's first seeds again, one ulp away (chapter 6)"))


# ---- chapter 6: analysis ------------------------------------------------------------------
def times(configs, results) -> list:
    """One row per configuration: the per-seed steps to learn as an array with ``inf`` for
    censored seeds, the budget, counts, the loss curve, layer-norm ``eps``, and the trained
    models' measurements: ``before`` / ``after`` profile fractions (seeds, N+1) with their
    ``profile_strings``, ``accuracy``, ``margin``, ``theta_norm``, ``sharpness``, ``sigma99``
    (NaN for censored seeds) and the logged ``signal`` (or None). None results are skipped."""
    rows = []
    nan = lambda v: np.array([np.nan if a is None else a for a in v], dtype=float)
    for c, r in zip(configs, results):
        if r is None:
            continue
        t = np.array([np.inf if s is None else s for s in r["steps"]], dtype=float)
        row = dict(target=c["target"], name=r["name"], N=int(c["N"]), steps=t,
                   budget=int(r["budget"]), learned=int(np.isfinite(t).sum()),
                   seeds=len(t), steps_run=int(r["steps_run"]), eps=c["protocol"]["eps"],
                   curve_steps=np.asarray(r["curve_steps"]),
                   curve=np.asarray(r["curve"], dtype=float))           # None: NaN
        for when in ("before", "after"):
            K = np.asarray(r[when]["K"], dtype=float)
            row[when] = K / K.sum(1, keepdims=True)
            row[when + "_strings"] = K.sum(1)
            row[when + "_accuracy"] = np.asarray(r[when]["accuracy"])
        row["accuracy_strings"] = int(r["accuracy_strings"])
        # the check before each learned seed's step: it learned in (checked_before, step]
        ev = np.asarray(r["eval_steps"], dtype=float)
        row["checked_before"] = np.array([ev[ev < s].max(initial=0.0) if np.isfinite(s)
                                          else 0.0 for s in t])
        row["exhaustive"] = row["N"] <= c["exhaustive_max"]
        row["margin"] = np.asarray(r["after"]["margin"])
        row["theta_norm"] = np.asarray(r["after"]["theta_norm"])
        row["sharpness"] = nan(r["sharpness"]["lam"]) if r["sharpness"] else np.full(len(t), np.nan)
        row["sigma99"] = nan(r["basin"]["sigma99"]) if r["basin"] else np.full(len(t), np.nan)
        row["signal"] = r.get("signal")
        rows.append(row)
    return rows


def plateau_exit(row, drop: float = 0.1) -> np.ndarray:
    """Per seed, the first logged step at which the window-mean training loss is below
    log 2 - ``drop`` (log 2 is the loss of the output T = 0, i.e. of a model that has not yet
    found any signal); ``inf`` if it never is. Resolution: the windows of :func:`curve_schedule`."""
    below = row["curve"] < math.log(2) - drop                       # (windows, seeds)
    hit = below.any(0)
    return np.where(hit, row["curve_steps"][below.argmax(0)], np.inf)


def target_profile(name: str, N: int) -> np.ndarray:
    """The profile fractions K_k / 2^N (k = 0..N) of the target itself."""
    K = np.asarray(target(name, N).profile(N), dtype=float)
    return K / K.sum()


def profile_distance(fractions, reference) -> np.ndarray:
    """Total-variation distance between profile fractions (..., N+1) and a reference profile:
    half the l1 distance, the share of strings that would have to change sensitivity."""
    return 0.5 * np.abs(np.asarray(fractions) - np.asarray(reference)).sum(-1)


def accuracy_bound(N: int, accuracy: float) -> float:
    """The largest profile distance from f of a model that agrees with f on a share
    ``accuracy`` of {0,1}^N: (N + 1)(1 - accuracy).

    A string's sensitivity can differ between g and f only if the string or one of its N
    neighbours is an error (g != f there); each of the (1 - accuracy) 2^N errors touches
    N + 1 strings, so at most (N + 1)(1 - accuracy) 2^N strings change sensitivity, and the
    total-variation distance of the profiles is at most that share."""
    return min(1.0, (N + 1) * (1 - accuracy))


def learned_tolerance(row, criterion: float, z: float = 3.0) -> float:
    """The profile distance a learned seed of ``row`` can have from its target:
    :func:`accuracy_bound` at the criterion when the accuracy is exact (all 2^N strings);
    when it is measured on held-out strings, at the criterion lowered by ``z`` binomial
    standard errors of that measurement."""
    acc = criterion
    if not row["exhaustive"]:
        acc -= z * math.sqrt(criterion * (1 - criterion) / row["accuracy_strings"])
    return accuracy_bound(row["N"], acc)


def profile_se(row, distance) -> np.ndarray:
    """Standard error of a profile distance measured on sampled strings (0 when the profile
    is exact): the binomial error of the share of strings ``distance`` stands for."""
    d = np.asarray(distance, dtype=float)
    if row["exhaustive"]:
        return np.zeros_like(d)
    return np.sqrt(d * (1 - d) / row["after_strings"])


def profile_table(rows, criterion: float) -> str:
    """Per target (HTML): models, the share with K_0 >= 1 before and after training, and the
    mean profile distance from the target after training for learned and censored seeds,
    with the bound (N+1)(1 - criterion) at the target's largest N."""
    head = ("target", "lengths", "seeds", "K<sub>0</sub> ≥ 1 before", "K<sub>0</sub> ≥ 1 after",
            "distance after: learned", "distance after: censored", "bound at largest N")
    out = []
    for t in dict.fromkeys(r["target"] for r in rows):
        rs = [r for r in rows if r["target"] == t]
        dist = np.concatenate([profile_distance(r["after"], target_profile(t, r["N"]))
                               for r in rs])
        ok = np.concatenate([np.isfinite(r["steps"]) for r in rs])
        k0 = lambda w: np.mean(np.concatenate([r[w][:, 0] > 0 for r in rs]))
        mean = lambda m: f"{dist[m].mean():.3f} ({m.sum()})" if m.any() else "–"
        cells = (rs[0]["name"], ", ".join(str(r["N"]) for r in rs), len(ok),
                 f"{k0('before'):.2f}", f"{k0('after'):.2f}", mean(ok), mean(~ok),
                 f"{accuracy_bound(max(r['N'] for r in rs), criterion):.2f}")
        out.append(cells)
    return html_table(head, out)


def long_table(rows) -> str:
    """The long-input results (HTML): per (target, eps, N) learned seeds, steps to learn,
    the margin min |T| and the parameter norm of the trained models (medians)."""
    head = ("target", "eps", "N", "learned", "steps: median [max]", "margin: median [min]",
            "norm of θ: median")
    out = []
    for r in rows:
        t = np.minimum(r["steps"], r["budget"])
        mx = f"{t.max():.0f}" if np.isfinite(r["steps"]).all() else "censored"
        cells = (r["name"], f"{r['eps']:g}", r["N"], f"{r['learned']}/{r['seeds']}",
                 f"{np.median(t):.0f} [{mx}]",
                 f"{np.median(r['margin']):.3f} [{r['margin'].min():.3f}]",
                 f"{np.median(r['theta_norm']):.1f}")
        out.append(cells)
    return html_table(head, out)


def survival(rows, target_name: str) -> dict:
    """Kaplan-Meier curve of the steps to learn per N of ``target_name`` ({N: km dict},
    :func:`sensbook.survival.kaplan_meier`); censored seeds are at risk up to the budget."""
    return {r["N"]: kaplan_meier(np.minimum(r["steps"], r["budget"]), np.isfinite(r["steps"]))
            for r in rows if r["target"] == target_name}


def _censored_data(rows, target_name):
    rs = [r for r in rows if r["target"] == target_name]
    if len({r["N"] for r in rs}) < 2:
        raise ValueError(f"target_name={target_name!r}: need at least two lengths, got "
                         f"{sorted(r['N'] for r in rs)}")
    N = np.concatenate([np.full(r["seeds"], r["N"], dtype=float) for r in rs])
    t = np.concatenate([np.minimum(r["steps"], r["budget"]) for r in rs])
    d = np.concatenate([np.isfinite(r["steps"]) for r in rs])
    # rows without the evaluation grid (hand-made) are fitted with exact times
    low = (np.concatenate([r["checked_before"] for r in rs])
           if all("checked_before" in r for r in rs) else None)
    return N, t, d, low


def growth(rows, target_name: str, dist: str = "log-normal") -> dict:
    """How the steps to learn grow with N, censoring included: the accelerated-failure-time
    model log2 steps = a + b N + sigma e fitted by maximum likelihood
    (:func:`sensbook.survival.fit_aft`), b's 95% profile-likelihood interval, and the same
    model with log N in place of N (``slope_logN``). ``heldout`` (three lengths or more):
    the leave-one-length-out predictive log-likelihood of each covariate (``N``, ``logN``).
    A learned seed is known only to have learned between two checks of the evaluation grid,
    so its steps are interval-censored: it contributes log(F(step) - F(previous check));
    ``slope_exact`` is b with the steps read as exact times, for comparison."""
    N, t, d, low = _censored_data(rows, target_name)
    fit = fit_aft(N, t, d, dist, lower=low)
    low_b, high_b = profile_interval(N, t, d, dist, fit=fit, lower=low)
    fit_log = fit_aft(np.log(N), t, d, dist, lower=low)
    held = None
    if len(np.unique(N)) >= 3:
        held = {"N": heldout_loglik(N, t, d, lambda n: n, dist, lower=low)["total"],
                "logN": heldout_loglik(N, t, d, np.log, dist, lower=low)["total"]}
    return dict(target=target_name, dist=dist, slope=fit["b"], low=low_b, high=high_b,
                sigma=fit["sigma"], a=fit["a"], slope_logN=fit_log["b"], heldout=held,
                censored=int((~d).sum()), n=len(t),
                slope_exact=fit_aft(N, t, d, dist)["b"])


def preferred_growth(fits, margin: float = 2.0) -> str:
    """Which covariate the held-out lengths prefer, over several error laws (``fits``: results
    of :func:`growth` for one target): ``"N"`` (exponential in N) or ``"log N"`` (a power of
    N) when every law prefers it by more than ``margin`` log-likelihood units (a likelihood
    ratio above e^2, about 7), else ``"cannot tell"``."""
    diffs = [g["heldout"]["N"] - g["heldout"]["logN"] for g in fits if g["heldout"]]
    return prefer(diffs, ("N", "log N"), margin)


def prefer(diffs, names, margin: float = 2.0) -> str:
    """``names[0]`` if every held-out log-likelihood difference (first minus second, one per
    error law) is above ``margin``, ``names[1]`` if every one is below -``margin``, else
    ``"cannot tell"`` (also when there is none)."""
    diffs = list(diffs)
    if diffs and all(x > margin for x in diffs):
        return names[0]
    if diffs and all(x < -margin for x in diffs):
        return names[1]
    return "cannot tell"


def growth_noise(rows, noise_rows, dists=("log-normal", "weibull")) -> dict:
    """The growth exponents one ulp away: per target of ``noise_rows`` (:func:`times` of
    ``ch6.noise``) and error law, :func:`growth` on ``rows`` as drawn (``drawn``) and with the
    perturbed seeds' runs in place of the same seeds' (``perturbed``), and ``inside``: each
    slope within the other's 95% interval. ``seeds``: per seed and cell, the steps to learn as
    drawn (``t0``) and one ulp away (``t1``), inf where censored."""
    mixed, t0, t1 = [], [], []
    by = {(r["target"], r["N"]): r for r in noise_rows}
    for r in rows:
        q = by.get((r["target"], r["N"]))
        if q is None:
            continue
        k = q["seeds"]
        m = dict(r, steps=np.r_[q["steps"], r["steps"][k:]],
                 checked_before=np.r_[q["checked_before"], r["checked_before"][k:]])
        mixed.append(m)
        t0.append(r["steps"][:k]); t1.append(q["steps"])
    out = {}
    for t in dict.fromkeys(q["target"] for q in noise_rows):
        for d in dists:
            a, b = growth(rows, t, d), growth(mixed, t, d)
            out[t, d] = dict(drawn=a, perturbed=b, inside=bool(
                a["low"] <= b["slope"] <= a["high"] and b["low"] <= a["slope"] <= b["high"]))
    return dict(fits=out, mixed=mixed, t0=np.concatenate(t0), t1=np.concatenate(t1))


def table(rows) -> str:
    """The results as an HTML table (for ``IPython.display.HTML``): one row per (target, N),
    with the Kaplan-Meier median of the steps to learn (:func:`survival`)."""
    head = ("target", "N", "learned within budget", "steps to learn: median [min, max]",
            "budget")
    out = []
    for r in rows:
        t = r["steps"]
        fin = t[np.isfinite(t)]
        # the Kaplan-Meier median (inf when S stays above 1/2: more than half censored)
        med = kaplan_meier(np.minimum(t, r["budget"]), np.isfinite(t))["median"]
        span = (f"{med:.0f}" if np.isfinite(med) else f"&gt; {r['budget']}") + (
            f" [{fin.min():.0f}, " + (f"{t.max():.0f}]" if np.isfinite(t.max()) else "censored]")
            if fin.size else "")
        out.append((r["name"], r["N"], f"{r['learned']}/{r['seeds']}", span, r["budget"]))
    return html_table(head, out)


# ---- chapter 6: what trained FIRST uses at long N, and the ablation of 1[n = 1] ------------
#: ``ch6.first_mechanism``: FIRST as in ``ch6.long`` (same seeds, protocol and checks), with the
#: positional feature 1[n = 1] (``mark_first``) at the longest length and both eps; and at the
#: ``ablation`` lengths (eps = the smallest of ``long``'s) ``seeds`` seeds with and without it,
#: ``ablation_budget`` steps, once as drawn and once with every float32 initial parameter moved
#: one unit in the last place (``perturb``: training's own noise); the trained models are probed
#: on ``probe`` held-out strings. N = 129 and beyond only at paper scale (the cost).
MECHANISM = dict(ci=dict(ablation=[17], ablation_budget=300, seeds=8, probe=64),
                 book=dict(ablation=[17, 65], ablation_budget=500, seeds=8, probe=128),
                 paper=dict(ablation=[33, 65, 129, 257], ablation_budget=2000, seeds=8,
                            probe=512))


def mechanism_configs(scale: str) -> list:
    """FIRST at long N: the ``ch6.long`` configuration at its largest N (both eps) with the
    feature 1[n = 1]; at each ablation length the same seeds with (``mark_first``) and without
    it, each as drawn (``perturb`` 0) and one ulp away (``perturb`` 1)."""
    m = MECHANISM[check_scale(scale, "scale")]
    long = {(c["N"], c["protocol"]["eps"]): c for c in long_configs(scale)
            if c["target"] == "FIRST"}
    N_max, eps_min = max(n for n, _ in long), min(e for _, e in long)
    out = [dict(long[N_max, e], mark_first=True, perturb=0, role="probe") for n, e in sorted(long)
           if n == N_max]
    for N in m["ablation"]:
        base = dict(long[N, eps_min], seeds=list(range(int(m["seeds"]))))
        base["protocol"] = {**base["protocol"], "steps": int(m["ablation_budget"])}
        out += [dict(base, mark_first=mark, perturb=u, role="ablation") for u in (0, 1)
                for mark in (True, False)]
    for c in out:
        c["probe"] = m["probe"]
    return out


def later(first, second, first_times=None, second_times=None) -> dict:
    """Does ``second`` take longer than ``first``? Two lists of rows of :func:`times`, paired
    by length (one row of each per N): the log-rank test stratified by N (:func:`logrank`,
    group 1 = ``second``; censored seeds at their budget), ``z`` < 0 when ``second`` learns
    later, ``p``, and ``n``, the runs a side; at one length also the log-normal AFT coefficient
    ``b`` of ``second`` (log2 of the factor on the time) and its 95% profile-likelihood
    interval (``low``, ``high``), as :func:`ablation_effect`. ``*_times`` replace a row's steps to learn by
    another per-seed time (inf: not reached within the run, e.g. :func:`plateau_exit`)."""
    if [r["N"] for r in first] != [r["N"] for r in second]:
        raise ValueError(f"first and second must hold one row per N, in the same order, got "
                         f"{[r['N'] for r in first]} and {[r['N'] for r in second]}")
    t, d, g, k = [], [], [], []
    for j, (rows, own) in enumerate(((first, first_times), (second, second_times))):
        for i, r in enumerate(rows):
            s = np.asarray(r["steps"] if own is None else own[i], dtype=float)
            t.append(np.minimum(s, r["budget"] if own is None else r["steps_run"]))
            d.append(np.isfinite(s)); g.append(np.full(len(s), j)); k.append(np.full(len(s), r["N"]))
    t, d, g, k = (np.concatenate(v) for v in (t, d, g, k))
    out = dict(logrank(t, d, g, strata=k), n=int((g == 1).sum()), b=None, low=None, high=None)
    if len(first) == 1 and d[g == 1].any():      # one length: the log-normal AFT factor 2^b
        fit = fit_aft(g, t, d)
        out.update(zip(("low", "high"), profile_interval(g, t, d, fit=fit)), b=fit["b"])
    return out


def slowest_share(row) -> float:
    """The share of its step budget the slowest seed of ``row`` needed to learn (inf when a
    seed is censored). "Every seed learns" is asserted as "the slowest seed needed at most a
    stated share of the budget": a last-bit change moves a seed's steps by a fraction, and so
    flips a seed at the budget's edge, not one far inside it."""
    return float(np.max(row["steps"]) / row["budget"])


def ablation_effect(rows) -> dict:
    """FIRST without 1[n = 1] against with it, on one length's ablation runs (``rows``: the
    results of one ``perturb``, ``mark_first`` True and False, the same seeds): the log-rank
    test (:func:`logrank`, group 1 = without) and the log-normal AFT coefficient ``b`` of
    "without" (log2 of the factor on the steps to learn; censored runs at the budget,
    :func:`sensbook.survival.fit_aft`) with its 95% profile-likelihood interval (``low``,
    ``high``; None where every run without the feature is censored: no finite MLE)."""
    t = np.concatenate([np.minimum(r["steps"], r["budget"]) for r in rows])
    d = np.concatenate([np.isfinite(r["steps"]) for r in rows])
    g = np.concatenate([np.full(len(r["steps"]), 0.0 if r["mark_first"] else 1.0)
                        for r in rows])
    out = dict(logrank(t, d, g), b=None, low=None, high=None)
    if d[g == 1].any():
        fit = fit_aft(g, t, d)
        out["b"] = fit["b"]
        out["low"], out["high"] = profile_interval(g, t, d, fit=fit)
    return out


def ablation(configs, results) -> dict:
    """``ch6.first_mechanism``'s ablation runs, per (N, perturb): ``with`` and ``without`` (the
    results with and without 1[n = 1], ``steps`` as floats, inf = censored), ``budget``,
    ``seeds`` and their comparison (:func:`ablation_effect`)."""
    out = {}
    for c, r in zip(configs, results):
        if c["role"] == "ablation":
            r = dict(r, steps=np.array([np.inf if s is None else s for s in r["steps"]]))
            a = out.setdefault((c["N"], c["perturb"]), dict(budget=r["budget"],
                                                            seeds=len(c["seeds"])))
            a["with" if c["mark_first"] else "without"] = r
    for a in out.values():
        a.update(ablation_effect([a["with"], a["without"]]))
    return dict(sorted(out.items()))


def rounding_noise(abl: dict) -> dict:
    """Training's own noise, per ablation length N and arm (``with``, ``without``): the runs as
    drawn against the runs one ulp away (:func:`ablation`'s perturb 0 and 1, the same seeds):
    ``diff``, per seed the |difference| of the steps to learn where both learned; ``changed``,
    the fraction of seeds whose outcome (learned within the budget or not) differs; and
    ``inside``: whether each run's AFT coefficient lies inside the other's 95% interval
    (None where one has no finite fit)."""
    out = {}
    for N in sorted({n for n, _ in abl}):
        a0, a1 = abl[N, 0], abl[N, 1]
        row = {}
        for arm in ("with", "without"):
            t0, t1 = a0[arm]["steps"], a1[arm]["steps"]
            both = np.isfinite(t0) & np.isfinite(t1)
            row[arm] = dict(diff=np.abs(t0 - t1)[both], changed=float(np.mean(
                np.isfinite(t0) != np.isfinite(t1))), t0=t0, t1=t1)
        fits = [a0, a1]
        row["inside"] = None if any(f["b"] is None for f in fits) else bool(all(
            f["low"] <= g["b"] <= f["high"] for f, g in (fits, fits[::-1])))
        out[N] = row
    return out


def first_mechanism_one(config: dict) -> dict:
    """Train FIRST as :func:`run_config` does (``mark_first`` on or off), then probe the trained
    models on ``probe`` held-out strings: per model ``w_first`` (L, H), the eos query's mean
    attention weight on position 1 per layer and head (:meth:`Recognizer.eos_attention`);
    ``var_eos`` (2L,), the median variance of each layer norm's input at eos; ``beta``, the
    median cumulative blowup; ``flip_first`` and ``flip_other``: mean |Delta T| of flipping
    bit 1, and the largest mean over bits 2, N/2 and N; plus ``steps``, ``accuracy`` and
    ``margin`` (min |T| over the probe strings). ``perturb`` = 1 moves every float32 initial
    parameter one unit in the last place (``torch.nextafter`` towards +inf) before training:
    ``moved`` counts the parameters that changed."""
    from ..hinge import flip_hinge

    N = check_n(config["N"])
    f = target(config["target"], N)
    seeds, pr = _check_seeds(config["seeds"]), Protocol.from_dict(config["protocol"])
    dev = device_()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = init_population(seeds, pr, device=dev)
        moved = one_ulp(model) if int(config.get("perturb", 0)) else 0
        model.mark_first = bool(config["mark_first"])
        n_test = None if N <= int(config["exhaustive_max"]) else int(config["n_test"])
        run = learn(model, f, N, seeds, pr, criterion=config["criterion"], n_test=n_test,
                    checks=eval_schedule(pr.steps, config["eval_every"], config["eval_growth"]),
                    drop_learned=True)
        x = held_out_strings(N, int(config["probe"]), seed=SAMPLE_SEED)
        with torch.no_grad():
            _, w = model.eos_attention(x)                       # (P, B, L, H, N+1)
            T, tr = model.trace(x)
            h = flip_hinge(model, x[:16], [0, 1, N // 2, N - 1], blowups=False)["dT"].mean(1)
    finally:
        torch.set_num_threads(threads)
    med = lambda t: t.double().median(1).values.cpu().numpy().tolist()
    return dict(steps=run["steps"], budget=pr.steps, mark_first=bool(config["mark_first"]),
                perturb=int(config.get("perturb", 0)), moved=moved,
                accuracy=accuracy(model, f, N, n_test=n_test).tolist(),
                margin=T.abs().amin(1).double().cpu().numpy().tolist(),
                w_first=w[..., 0].mean(1).double().cpu().numpy().tolist(),
                var_eos=med(tr.variances[..., -1]),
                beta=med(tr.beta), flip_first=h[:, 0].double().cpu().numpy().tolist(),
                flip_other=h[:, 1:].amax(-1).double().cpu().numpy().tolist())


def _mechanism_cost(config: dict) -> float:
    c = {k: v for k, v in config.items() if k not in ("mark_first", "probe", "perturb")}
    if not config["mark_first"]:                     # assume the whole budget is spent
        c["target"] = "UNMARKED"
    return cost(c) + 1e-7 * config["probe"] * (config["N"] + 1) ** 2


register(Experiment("ch6.first_mechanism", mechanism_configs,
                    "sensbook.experiments.ch6_training:first_mechanism_one", _mechanism_cost,
                    doc="what trained FIRST uses at long N, and FIRST without the feature "
                        "1[n = 1] (chapter 6)"))

