"""Chapter 6's mechanism (book/ch6_mechanism.md): what decides each target's labels, by
intervention (``ch6.interventions``): chapter 6's targets trained with the book's protocol,
then layer norms frozen, attention fixed and activations patched on all 2^N strings; the layer
norms against the danger threshold; the tables the page prints. The training runs' own
mechanism probe is :mod:`sensbook.experiments.ch6_explanations`' (``mechanism_rows``).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..boolean import Dictator, strings
from ..interventions import effect, fix_attention, freeze_norms, patch, scores, variance_summary
from ..pages import html_table
from ..settings import check_scale
from ..train import Protocol, eval_schedule, init_population, learn, target
from ..volume import t_quantile
from . import Experiment, register
from .ch6_training import cost


#: ``ch6.interventions``: chapter 6's targets (``INTERVENTION_TARGETS``) trained with the book's
#: protocol (batch 64, lr 1e-3, eps 1e-5) at ``Ns``, ``seeds`` models each (one population), at
#: most ``budget`` steps; then every intervention of :mod:`sensbook.interventions` on all 2^N
#: strings, patching at the flipped bits x_1, x_2, x_ceil(N/2), x_N, and the layer norms'
#: variances against the danger threshold :func:`danger_threshold`.
INTERVENTION_SIZES = {
    "ci": dict(Ns=[5, 7], seeds=8, budget=1500),
    "book": dict(Ns=[5, 7, 9], seeds=8, budget=3000),
    "paper": dict(Ns=[5, 7, 9, 11, 13], seeds=16, budget=10000),
}
#: PARITY, FIRST (the dictator on the marked x_1) and MAJORITY; 2- and 3-sparse PARITY on
#: {1, 2} and {1, 2, 3}; ``DICTATOR_MID``, the dictator on the interior, unmarked x_ceil(N/2).
INTERVENTION_TARGETS = ("PARITY", "FIRST", "MAJORITY", "SPARSE_PARITY_2", "SPARSE_PARITY_3",
                        "DICTATOR_MID")


def intervention_target(name: str, N: int):
    """The target a name of ``INTERVENTION_TARGETS`` stands for at length N: ``DICTATOR_MID``
    is the dictator :math:`x_{\\lceil N/2 \\rceil}`, every other name
    :func:`sensbook.train.target`'s."""
    return Dictator(-(-int(N) // 2)) if name == "DICTATOR_MID" else target(name, N)


def danger_threshold(N: int, eps: float) -> float:
    """The layer-norm input variance below which a string is in the danger zone at length N.

    Parameters
    ----------
    N : int
        The length.
    eps : float
        The layer norm's epsilon.

    Returns
    -------
    float
        :math:`v_N = 1/N - \\varepsilon`: there :math:`z = 1/\\sqrt{\\mathrm{var} + \\varepsilon}
        > \\sqrt N`.

    Notes
    -----
    The book's reading, with the paper's constants set to one: by Lemma 2.9 a flip moves T by
    at most :math:`C \\beta(x) \\beta(x \\oplus e_i) / N`, so one layer norm alone makes a flip
    of order one only where :math:`(1 + z)^2 \\gtrsim N`, i.e. :math:`z \\gtrsim \\sqrt N`;
    and Lemma 4.2's blowup :math:`O(N^{\\zeta/2})`, :math:`\\zeta < 1`, stays below it.
    """
    v = 1 / int(N) - float(eps)
    if not v > 0:
        raise ValueError(f"eps must be below 1/N = {1 / int(N):g} for a danger threshold, "
                         f"got eps={eps!r}")
    return v


def intervention_configs(scale: str) -> list:
    """One configuration per (target, N) of ``INTERVENTION_SIZES[scale]`` and
    ``INTERVENTION_TARGETS``, with chapter 6's accuracy checks (criterion 0.99 on all 2^N
    strings) and the danger threshold ``v_N`` (:func:`danger_threshold`)."""
    s = INTERVENTION_SIZES[check_scale(scale, "scale")]
    pr = Protocol(steps=int(s["budget"]), batch=64, lr=1e-3)
    return [dict(target=t, N=int(N), seeds=list(range(int(s["seeds"]))), protocol=pr.to_dict(),
                 criterion=0.99, eval_every=5, eval_growth=0.05,
                 v_N=danger_threshold(N, pr.eps))
            for t in INTERVENTION_TARGETS for N in s["Ns"]]


def interventions_of(L: int, N: int) -> dict:
    """The interventions the runner applies, by name: (kind, arguments) for a model of L
    layers at length N (layer norm j = 2l after layer l's attention, 2l + 1 after its FFN)."""
    out = {"last LN at eos": ("norm", dict(norms=2 * L - 1, positions=[N]))}
    out.update({f"LN {j}": ("norm", dict(norms=j)) for j in range(2 * L)})
    out["layer-1 LNs"] = ("norm", dict(norms=[0, 1]))
    out["all LNs"] = ("norm", dict(norms=None))
    for l in range(L):
        out[f"uniform attention, layer {l + 1}"] = ("attention", dict(layer=l))
        out[f"mean attention, layer {l + 1}"] = ("attention", dict(layer=l, pattern="mean"))
    return out


def patched_bits(N: int) -> list:
    """The flipped bits the runner patches, 0-based: x_1, x_2, x_ceil(N/2) and x_N (the
    support of 2- and 3-sparse PARITY begins at x_1, ``DICTATOR_MID`` reads x_ceil(N/2))."""
    return sorted({0, 1, (N - 1) // 2, N - 1})


def _layer_norms(model, x, v_N: float) -> dict:
    """The layer norms of ``intervention_one``: variances against ``v_N``, tau_j and beta."""
    vs = variance_summary(model, x, v_N)
    tr = model.trace(x)[1]
    tau, beta = tr.tau.double(), tr.beta.double()                   # (P, B, 2L), (P, B)
    return dict(var_median=vs["median"].tolist(), var_min=vs["minimum"].tolist(),
                below=vs["below"].tolist(), tau_median=tau.median(1).values.tolist(),
                tau_max=tau.amax(1).tolist(), beta=beta.median(1).values.tolist(),
                beta_max=beta.amax(1).tolist())


def intervention_one(config: dict) -> dict:
    """Train as ``ch6.training`` does (:func:`sensbook.train.learn`), then intervene on all
    2^N strings. Per seed: ``steps`` (None: censored), ``accuracy`` and ``margin``
    (:func:`sensbook.interventions.effect`) and ``agree`` (the share of strings whose label
    the intervention leaves as the trained model has it) under each intervention of
    :func:`interventions_of` and ``trained``; ``patch``: for each flipped bit b of
    :func:`patched_bits`, layer l below the last and place (``"bit"``: position b,
    ``"eos"``), keyed ``"b l place"``, the share of the strings whose label the flip changes
    on which patching layer l's output there from the flipped run carries the flipped label
    (the last layer's output at eos is all T reads: patching it carries every flip), and
    ``flips[b]``, the share of strings whose label the flip changes; per layer norm and
    position, shape (seeds, 2L, N+1), ``var_median``, ``var_min`` and ``below`` (the share of
    strings with variance below ``v_N``, :func:`sensbook.interventions.variance_summary`);
    per layer norm, shape (seeds, 2L), Lemma 2.9's blowup :math:`\\tau_j = \\max_n (1 + z)`
    (``tau_median``, ``tau_max`` over strings); ``beta`` and ``beta_max`` (the cumulative
    blowup's median and maximum over strings); ``theta_norm``, ``theta_max`` (the parameters'
    Euclidean norm and largest entry, the box the model needs) and ``theta_norm0``,
    ``theta_max0`` at initialisation; ``before``: the layer norms' values at initialisation
    (``var_median`` ... ``beta_max``)."""
    N, seeds = int(config["N"]), list(config["seeds"])
    f, pr = intervention_target(config["target"], N), Protocol.from_dict(config["protocol"])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = init_population(seeds, pr)
        theta0 = model.flat().double()
        x = strings(N)
        before = _layer_norms(model, x, float(config["v_N"]))
        run = learn(model, f, N, seeds, pr, criterion=float(config["criterion"]),
                    checks=eval_schedule(pr.steps, config["eval_every"], config["eval_growth"]),
                    drop_learned=True)
        with torch.no_grad():
            T0 = scores(model, x)
            out = dict(steps=run["steps"], budget=pr.steps, accuracy={}, margin={}, agree={})
            build = dict(norm=lambda **a: freeze_norms(model, x, **a),
                         attention=lambda **a: fix_attention(model, x, **a))
            todo = {"trained": None}
            todo.update({k: build[kind](**a) for k, (kind, a) in
                         interventions_of(model.L, N).items()})
            for name, edits in todo.items():
                T = scores(model, x, edits)
                e = effect(T, f, x)
                out["accuracy"][name] = e["accuracy"].tolist()
                out["margin"][name] = e["margin"].tolist()
                same = torch.isfinite(T) & ((T > 0) == (T0 > 0))
                out["agree"][name] = same.double().mean(1).tolist()
            out["patch"], out["flips"] = {}, {}
            for b in patched_bits(N):
                xf = x.clone()
                xf[:, b] = 1 - xf[:, b]
                Tf = scores(model, xf)
                moved = (Tf > 0) != (T0 > 0)
                out["flips"][str(b)] = moved.double().mean(1).tolist()
                for l in range(model.L - 1):              # the output of each lower layer
                    for place, pos in (("bit", [b]), ("eos", [N])):
                        Tp = patch(model, x, b, 2 * l + 1, pos)
                        hit = (((Tp > 0) == (Tf > 0)) & moved).double().sum(1)
                        share = hit / moved.double().sum(1).clamp(min=1)
                        out["patch"][f"{b} {l + 1} {place}"] = share.tolist()
            out.update(_layer_norms(model, x, float(config["v_N"])))
            out["before"] = before
            theta = model.flat().double()
            out.update(theta_norm=theta.norm(dim=1).tolist(),
                       theta_max=theta.abs().amax(1).tolist(),
                       theta_norm0=theta0.norm(dim=1).tolist(),
                       theta_max0=theta0.abs().amax(1).tolist())
    finally:
        torch.set_num_threads(threads)
    return out


def intervention_cost(config: dict) -> float:
    """Predicted CPU-seconds (one thread): ``ch6.training``'s cost model for the training
    (no probes), plus ``INTERVENTION_FORWARDS`` forward passes over all 2^N strings."""
    c = dict(config, exhaustive_max=11, n_test=2048, sharpness=None, basin=None,
             signal=None, mechanism=None)
    P, N = len(config["seeds"]), config["N"]
    if config["target"] == "DICTATOR_MID":     # unknown to ch6.training's: its steps here
        a, b = _DICTATOR_STEPS
        pr = config["protocol"]
        c["protocol"] = dict(pr, steps=int(min(pr["steps"], 2 ** (a + b * N))))
    return cost(c) + INTERVENTION_FORWARDS * 1e-6 * P * 2**N * (N + 1)


#: forward passes of the interventions, per string and model (fitted on ci runs: 40, and
#: 6 more for the fourth patched bit and the layer norms traced before training)
INTERVENTION_FORWARDS = 46
#: log2(steps) = a + b N of the interior dictator's slowest of 8 seeds (a rough fit to
#: ch3.dictators' x_7 at N = 13 and x_17 at N = 33), used only to predict cost
_DICTATOR_STEPS = (6.5, 0.05)


register(Experiment("ch6.interventions", intervention_configs,
                    "sensbook.experiments.ch6_mechanism:intervention_one", intervention_cost,
                    doc="what decides each target's labels: layer norms frozen, attention "
                        "fixed, activations patched, in trained models (chapter 6)"))


def mean_interval(v) -> tuple:
    """Mean of the per-seed values ``v`` and its 95% t-interval over the seeds."""
    v = np.asarray(v, dtype=float)
    m = float(v.mean())
    if len(v) < 2:
        return m, -math.inf, math.inf
    half = t_quantile(0.975, len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return m, m - half, m + half


#: A mean share of moved labels (over seeds) whose whole 95% interval lies above this is an
#: intervention that changes the labels; below it, one that does not; else undecided.
MOVES = 0.02


def intervention_effects(configs, results) -> list:
    """One row per (target, N, intervention) of ``ch6.interventions``: ``moved`` (mean over
    seeds of the share of strings whose label the intervention changes, with its 95%
    t-interval ``moved_low``, ``moved_high``), ``drop`` (mean accuracy drop against the
    target, with its interval), ``accuracy`` (per seed), ``margin`` (median over seeds of the
    median margin, intervened over trained) and ``verdict``: ``"labels"`` (the interval of
    ``moved`` above ``MOVES``), ``"margin only"`` (below it, and the margin changed by more
    than 10 %), ``"neither"`` (below it, margin within 10 %) or ``"undecided"``."""
    rows = []
    for c, r in zip(configs, results):
        acc0, m0 = np.asarray(r["accuracy"]["trained"]), np.asarray(r["margin"]["trained"])
        for name in r["accuracy"]:
            if name == "trained":
                continue
            mv = mean_interval(1 - np.asarray(r["agree"][name]))
            dr = mean_interval(acc0 - np.asarray(r["accuracy"][name]))
            ratio = float(np.median(np.asarray(r["margin"][name]) / m0))
            verdict = ("labels" if mv[1] > MOVES else "undecided" if mv[2] >= MOVES
                       else "margin only" if abs(ratio - 1) > 0.1 else "neither")
            rows.append(dict(target=c["target"], N=int(c["N"]), intervention=name,
                             moved=mv[0], moved_low=mv[1], moved_high=mv[2], drop=dr[0],
                             drop_low=dr[1], drop_high=dr[2], margin=ratio, verdict=verdict,
                             accuracy=np.asarray(r["accuracy"][name]),
                             seeds=len(acc0), learned=sum(s is not None for s in r["steps"])))
    return rows


def pooled_moved(configs, results, target_name: str, name: str) -> tuple:
    """The share of labels intervention ``name`` moves, per seed, pooled over the lengths of
    ``target_name``: its mean and 95% t-interval over all those seeds."""
    v = [1 - np.asarray(r["agree"][name]) for c, r in zip(configs, results)
         if c["target"] == target_name]
    return mean_interval(np.concatenate(v))


def intervention_table(rows, names) -> str:
    """HTML: per (target, N) and each intervention of ``names``, the mean share of labels it
    moves with its 95% interval over seeds, and the verdict."""
    head = ("target", "N", "learned") + tuple(names)
    by = {(r["target"], r["N"], r["intervention"]): r for r in rows}
    out = []
    for t, N in sorted({(r["target"], r["N"]) for r in rows}, key=lambda k: (k[0], k[1])):
        first = by[t, N, names[0]]
        cells = [t, N, f"{first['learned']}/{first['seeds']}"]
        for n in names:
            r = by[t, N, n]
            cells.append(f"{r['moved']:.3f} [{max(r['moved_low'], 0):.3f}, "
                         f"{r['moved_high']:.3f}] {r['verdict']}")
        out.append(cells)
    return html_table(head, out, prose=True)      # its cells wrap: the page's width


def target_map(configs, results, names) -> tuple:
    """Per target, pooled over its lengths (:func:`pooled_moved`), the share of labels each
    intervention of ``names`` moves: ``(pool, html)``, ``pool[target, name]`` its mean and
    95% t-interval over all seeds, ``html`` a table with the verdict of each (``"decides"``:
    the interval above ``MOVES``; ``"not"``: below it; else ``"undecided"``)."""
    targets = list(dict.fromkeys(c["target"] for c in configs))
    pool = {(t, n): pooled_moved(configs, results, t, n) for t in targets for n in names}
    word = lambda lo, hi: "decides" if lo > MOVES else "not" if hi < MOVES else "undecided"
    out = []
    for t in targets:
        steps = [s for c, r in zip(configs, results) if c["target"] == t for s in r["steps"]]
        Ns = sorted({c["N"] for c in configs if c["target"] == t})
        out.append([t, f"{Ns[0]}-{Ns[-1]}", f"{sum(s is not None for s in steps)}/{len(steps)}"]
                   + [f"{m:.3f} [{max(lo, 0):.3f}, {hi:.3f}] {word(lo, hi)}"
                      for n in names for m, lo, hi in [pool[t, n]]])
    return pool, html_table(("target", "N", "learned") + tuple(names), out, prose=True)


#: The flipped bits of :func:`patched_bits`, by role (0-based index at length N).
BIT_ROLES = {"x<sub>1</sub>": lambda N: 0, "x<sub>2</sub>": lambda N: 1,
             "x<sub>⌈N/2⌉</sub>": lambda N: (N - 1) // 2, "x<sub>N</sub>": lambda N: N - 1}


def patch_table(configs, results, min_flips: float = 0.1) -> str:
    """HTML: per target and flipped bit (by role, :data:`BIT_ROLES`), the mean over the
    (length, seed) models whose label the flip changes on more than ``min_flips`` of the
    strings of the share of those label flips that patching layer 1's output carries, at the
    flipped position / at eos ("-": the flip changes no label)."""
    acc = {}
    for c, r in zip(configs, results):
        N = int(c["N"])
        for role, at in BIT_ROLES.items():
            b = at(N)
            ok = np.asarray(r["flips"][str(b)]) > min_flips
            own, eos = (np.asarray(r["patch"][f"{b} 1 {p}"])[ok] for p in ("bit", "eos"))
            a = acc.setdefault((c["target"], role), ([], []))
            a[0].extend(own)
            a[1].extend(eos)
    targets = list(dict.fromkeys(c["target"] for c in configs))
    cell = lambda a: f"{np.mean(a[0]):.2f} / {np.mean(a[1]):.2f}" if a[0] else "-"
    return html_table(("target",) + tuple(BIT_ROLES),
                      [[t] + [cell(acc[t, role]) for role in BIT_ROLES] for t in targets],
                      prose=True)


def reaches_t(L: int, N: int) -> np.ndarray:
    """Bool (2L, N+1): the (layer norm, position) sites whose output reaches T (every position
    below the last layer; the last layer's two layer norms at eos only)."""
    m = np.ones((2 * L, N + 1), dtype=bool)
    m[2 * L - 2:, :N] = False
    return m


def danger_rows(configs, results) -> list:
    """One row per (target, N): ``v_N``; per layer norm j (arrays over j, medians over
    seeds), ``below``: the share of strings with input variance below ``v_N`` at the site of
    :func:`reaches_t` where it is largest (``below0``: at initialisation); ``var_median``: the
    median over strings of the variance at that layer norm's eos; ``tau`` (``tau0``): Lemma
    2.9's :math:`\\tau_j`, median over strings; and per seed ``beta`` (``beta0``, median over
    strings), ``theta_norm`` (over its initial value), ``theta_max`` and ``theta_max0`` (the
    largest parameter, after and before training)."""
    def worst(below):
        below = np.asarray(below)                               # (P, 2L, S)
        reach = reaches_t(below.shape[1] // 2, below.shape[2] - 1)
        return np.where(reach, below, -1).max(2)                # (P, 2L)
    rows = []
    for c, r in zip(configs, results):
        b0 = r["before"]
        rows.append(dict(target=c["target"], N=int(c["N"]), v_N=float(c["v_N"]),
                         below=np.median(worst(r["below"]), 0),
                         below0=np.median(worst(b0["below"]), 0), below_seeds=worst(r["below"]),
                         var_median=np.median(np.asarray(r["var_median"])[:, :, -1], 0),
                         tau=np.median(np.asarray(r["tau_median"]), 0),
                         tau0=np.median(np.asarray(b0["tau_median"]), 0),
                         beta=np.asarray(r["beta"]), beta0=np.asarray(b0["beta"]),
                         theta_norm=np.asarray(r["theta_norm"]) / np.asarray(r["theta_norm0"]),
                         theta_max=np.asarray(r["theta_max"]),
                         theta_max0=np.asarray(r["theta_max0"])))
    return rows


def danger_table(rows, norms=None) -> str:
    """HTML: per (target, N) of :func:`danger_rows`, v_N and per layer norm j of ``norms``
    (None: all) the largest share of strings below it after (before) training / the median
    variance at eos / the median blowup tau_j after (before) training."""
    js = range(len(rows[0]["below"])) if norms is None else norms
    head = ("target", "N", "v<sub>N</sub>") + tuple(
        f"LN {j + 1}: share below v<sub>N</sub> / median var at eos / τ<sub>{j + 1}</sub>"
        for j in js)
    out = [[r["target"], r["N"], f"{r['v_N']:.3f}"]
           + [f"{r['below'][j]:.2f} ({r['below0'][j]:.2f}) / {r['var_median'][j]:.2f} / "
              f"{r['tau'][j]:.1f} ({r['tau0'][j]:.1f})" for j in js]
           for r in rows]
    return html_table(head, out, prose=True)


def deciders(pool, target_name: str, names) -> list:
    """What decides ``target_name``'s labels: the interventions of ``names`` whose pooled
    share of moved labels (``pool`` of :func:`target_map`) has its 95% interval above
    ``MOVES``, largest first, as ``(name, mean, low, high)``."""
    got = [(n, *pool[target_name, n]) for n in names if pool[target_name, n][1] > MOVES]
    return sorted(got, key=lambda g: -g[1])
