"""Chapter 6's rival explanations of PARITY's training cost (book/ch6_explanations.md):
sharpness and basins of the trained solutions, sparse PARITY (``ch6.rivals``), and the
gradient signal on the loss plateau; where the support lies (``ch6.supports``). The training
runs themselves are :mod:`sensbook.experiments.ch6_training`'s; what decides the labels, by
intervention, is :mod:`sensbook.experiments.ch6_mechanism`'s.
"""
from __future__ import annotations

import math

import numpy as np

from ..boolean import sparse_parity
from ..pages import html_table
from ..settings import check_scale, scale as current_scale
from ..survival import censored_contrast, fit_aft, heldout_loglik, profile_interval
from ..volume import critical_sigma, least_squares, t_quantile
from . import Experiment, ch5, get, register, run_experiment
from .ch6_training import (SIZES, _censored_data, configs, cost, plateau_exit, run_config, sweep,
                           times)


def rival_configs(scale: str) -> list:
    """The configurations of ``ch6.rivals``: sparse PARITY at the lengths of
    ``SIZES[scale]["rivals"]`` that ``ch6.training`` does not train already (ch6's protocol
    and budget, ``rivals["seeds"]`` seeds, no sharpness or basin), and ``ch6.training``'s
    PARITY cell at ``control_N`` trained again with the gradient-signal logging off (the
    last, its whole loss curve kept; the sparse cells stop each seed at its first passage,
    ``drop_learned``)."""
    s = SIZES[check_scale(scale, "scale")]
    rv = s["rivals"]
    have = {(c["target"], c["N"]): c for c in sweep(scale).configs}
    cells = configs(**{**s, "targets": [], "sparse": rv, "seeds": rv["seeds"]},
                    sharpness=None, basin=None, mechanism=None)
    return ([dict(c, drop_learned=True) for c in cells if (c["target"], c["N"]) not in have]
            + [dict(have[("PARITY", rv["control_N"])], signal=None, sharpness=None, basin=None,
                    mechanism=None)])


register(Experiment("ch6.rivals", rival_configs, "sensbook.experiments.ch6_training:run_config", cost,
                    doc="sparse PARITY at more lengths, and a PARITY cell without the "
                        "gradient-signal logging (chapter 6, the rival explanations)"))


# ---- where the support lies: edge, interior, marked (ch6.supports) --------------------------
#: ``ch6.supports``: 3-sparse PARITY on each support of :data:`SUPPORTS` at the lengths
#: ``Ns``, ``seeds`` models each (one population a cell), chapter 6's protocol and budget.
SUPPORT_SIZES = {"ci": dict(Ns=[7], seeds=8), "book": dict(Ns=[9], seeds=8),
                 "paper": dict(Ns=[9, 13, 17, 21], seeds=16)}
#: The supports, by name: ``first`` {1, 2, 3} (an edge, holding the marked x_1), ``second``
#: {2, 3, 4} (the same edge, unmarked), ``last`` {N-2, N-1, N} (the other edge, unmarked),
#: ``spread`` {ceil(N/3), ceil(2N/3), N} (two interior positions and N, unmarked).
SUPPORTS = ("first", "second", "last", "spread")


def support_positions(kind: str, N: int) -> list:
    """The 1-based positions of support ``kind`` (:data:`SUPPORTS`) at length ``N`` >= 4."""
    if kind not in SUPPORTS:
        raise ValueError(f"kind={kind!r} is not a support; allowed: {', '.join(SUPPORTS)}")
    if isinstance(N, bool) or not isinstance(N, (int, np.integer)) or N < 4:
        raise ValueError(f"N must be an integer >= 4 (four supports of 3 bits), got {N!r}")
    N = int(N)
    return {"first": [1, 2, 3], "second": [2, 3, 4], "last": [N - 2, N - 1, N],
            "spread": sorted({-(-N // 3), -(-2 * N // 3), N})}[kind]


def support_configs(scale: str) -> list:
    """One configuration per (support, N) of ``SUPPORT_SIZES[scale]``: ``ch6.training``'s
    (:func:`~sensbook.experiments.ch6_training.configs`, no sharpness, basin or probe) with
    ``support`` naming the positions (:func:`support_positions`); each seed stops at its
    first passage (``drop_learned``)."""
    s, z = SIZES[check_scale(scale, "scale")], SUPPORT_SIZES[scale]
    base = configs(**{**s, "Ns": z["Ns"], "seeds": z["seeds"], "targets": ["SPARSE_PARITY_3"],
                      "sparse": None}, sharpness=None, basin=None, mechanism=None)
    return [dict(c, support=k, drop_learned=True) for k in SUPPORTS for c in base]


def support_one(config: dict) -> dict:
    """Train 3-sparse PARITY on ``config["support"]``'s positions as
    :func:`~sensbook.experiments.ch6_training.run_config` trains a target (the same result
    keys; ``name`` says the positions)."""
    c = {k: v for k, v in config.items() if k != "support"}
    f = sparse_parity(support_positions(config["support"], int(c["N"])))
    return run_config(c, target_function=f)


#: log2 of the steps a ``ch6.supports`` cell runs (its slowest seed), a + b N, per support:
#: rough fits to measured runs (8 seeds at N = 9: 831, 1012, 717 steps and the budget), used
#: only to predict cost.
_SUPPORT_STEPS = {"first": (6.1, 0.4), "second": (6.4, 0.4), "last": (6.4, 0.4),
                  "spread": (6.2, 0.6)}


def support_cost(config: dict) -> float:
    """Predicted CPU-seconds: ``ch6.training``'s cost model with the steps of
    ``_SUPPORT_STEPS``."""
    a, b = _SUPPORT_STEPS[config["support"]]
    steps = min(config["protocol"]["steps"], 2 ** (a + b * config["N"]))
    c = {k: v for k, v in config.items() if k != "support"}
    c.update(target=f"SUPPORT_{config['support']}",        # not in ch6's own step model
             protocol=dict(c["protocol"], steps=max(1, int(steps))))
    return cost(c)


register(Experiment("ch6.supports", support_configs,
                    "sensbook.experiments.ch6_explanations:support_one", support_cost,
                    doc="3-sparse PARITY on four supports: edge or interior, marked or not "
                        "(chapter 6)"))


def cell_contrast(ra: dict, rb: dict) -> dict:
    """Cell ``rb`` against cell ``ra`` (:func:`~sensbook.experiments.ch6_training.times`
    rows: ``steps``, inf where censored, ``budget``, ``checked_before``) as censored samples
    (:func:`sensbook.survival.censored_contrast`, interval-censored on the check grid):
    log-rank ``z`` (< 0: b learns later) and ``p``, the factor 2^b on b's steps to learn and
    its 95% interval (``low``, ``high``; None where a cell has no learned seed); and the
    ``learned`` and ``seeds`` of each."""
    rs = (ra, rb)
    out = censored_contrast(
        np.concatenate([np.minimum(r["steps"], r["budget"]) for r in rs]),
        np.concatenate([np.isfinite(r["steps"]) for r in rs]),
        np.concatenate([np.full(len(r["steps"]), float(i)) for i, r in enumerate(rs)]),
        lower=np.concatenate([r["checked_before"] for r in rs]))
    return dict(out, learned=tuple(r["learned"] for r in rs), seeds=tuple(r["seeds"] for r in rs))


#: The contrasts ``ch6.supports`` decides: (name, support a, support b, what differs).
SUPPORT_CONTRASTS = (("mark", "first", "second", "marked x_1 against unmarked, one edge"),
                     ("edges", "second", "last", "one edge against the other, unmarked"),
                     ("interior", "last", "spread", "edge against interior, unmarked"),
                     ("confounded", "first", "spread", "the old contrast: both at once"))


def support_rows(configs_, results) -> dict:
    """{(support, N): :func:`~sensbook.experiments.ch6_training.times` row} of
    ``ch6.supports``."""
    done = [(c, r) for c, r in zip(configs_, results) if r is not None]
    rows = times([c for c, _ in done], [r for _, r in done])
    return {(c["support"], c["N"]): row for (c, _), row in zip(done, rows)}
def log_slope(rows, target_name: str, key: str, *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Least-squares slope of log2(``key``) against N over the seeds of ``target_name`` where
    ``key`` is finite (e.g. ``sharpness``, ``sigma99`` of learned seeds), with a 95% bootstrap
    interval (seeds resampled within each N), and the t-interval of the least-squares slope
    (``t_low``, ``t_high``, ``df`` = points - 2 degrees of freedom). Also the median per N."""
    rs = [r for r in rows if r["target"] == target_name]
    xs, ys = [], []
    for r in rs:
        v = np.asarray(r[key], dtype=float)
        ok = np.isfinite(v) & (v > 0)
        if ok.any():
            xs.append(np.full(ok.sum(), r["N"], dtype=float))
            ys.append(np.log2(v[ok]))
    if len(xs) < 2:
        raise ValueError(f"{target_name}: {key} is finite at fewer than two lengths")
    x = np.concatenate(xs)
    b, se, _ = least_squares(x, np.concatenate(ys))
    rng = np.random.default_rng(seed)
    boot = [least_squares(x, np.concatenate([y[rng.integers(0, len(y), len(y))]
                                             for y in ys]))[0] for _ in range(n_boot)]
    lo, hi = np.quantile(boot, [0.025, 0.975])
    # beside the bootstrap (narrow with a few seeds per length): the t-interval of the
    # least-squares slope, n - 2 degrees of freedom
    df = len(x) - 2
    t_half = t_quantile(0.975, df) * se if df > 0 else math.nan
    return dict(slope=float(b), low=float(lo), high=float(hi),
                t_low=float(b - t_half), t_high=float(b + t_half), df=df,
                Ns=[int(x[0]) for x in xs], median=[float(2 ** np.median(y)) for y in ys])


# ---- chapter 6: the rival explanations ------------------------------------------------------
def power_growth(rows, target_name: str, dist: str = "log-normal") -> dict:
    """steps ~ N^k: the censored accelerated-failure-time model log2 steps = a + k log2 N +
    sigma e (:func:`sensbook.survival.fit_aft`) and k's 95% profile-likelihood interval."""
    N, t, d, lower = _censored_data(rows, target_name)     # interval-censored, as growth
    fit = fit_aft(np.log2(N), t, d, dist, lower=lower)
    low, high = profile_interval(np.log2(N), t, d, dist, fit=fit, lower=lower)
    return dict(target=target_name, dist=dist, exponent=fit["b"], low=low, high=high,
                censored=int((~d).sum()), n=len(t))


def plateau_signal(row, start: int = 10, tol: float = 0.01) -> dict:
    """Per seed of a cell whose gradient signal was logged (``ch6.training``'s PARITY cells):
    ``exit`` (:func:`plateau_exit`, inf if the loss never left log 2), ``time`` (the exit, or
    the steps run where it never left: then ``left`` is False, a censored time), ``at``: the
    first logged step of its plateau (>= ``start``, before the exit, the loss on all strings
    within ``tol`` of log 2), and there ``grad_norm`` (||grad L|| on all strings), ``coef``
    (|degree-N Fourier coefficient of T|), ``weight`` (coef^2 / mean T^2) and
    ``batch_grad_norm`` (the minibatch gradient's): what the plateau starts with, measured
    before the escape; NaN for a seed with no logged step on its plateau."""
    sig, ex = row["signal"], plateau_exit(row)
    at = np.asarray(sig["steps"], dtype=float)[:, None]
    on = (at >= start) & (at < ex) & (np.abs(np.asarray(sig["loss"]) - math.log(2)) < tol)
    i, has = on.argmax(0), on.any(0)
    pick = lambda v: np.where(has, np.asarray(v, dtype=float)[i, np.arange(len(i))], np.nan)
    c = np.asarray(sig["parity_coef"])
    return dict(grad_norm=pick(sig["grad_norm"]), coef=pick(np.abs(c)),
                weight=pick(c * c / np.asarray(sig["mean_square"])),
                batch_grad_norm=pick(sig["batch_grad_norm"]), at=pick(np.repeat(at, len(i), 1)),
                exit=ex, time=np.minimum(ex, row["steps_run"]), left=np.isfinite(ex))


def parity_sigma_star(Ns, scale: str | None = None) -> np.ndarray:
    """sigma* of chapter 5's exact PARITY construction under uniform noise (where P(exact)
    falls to 1/2; ``ch5.basin``'s stored results at ``scale``) at each length of ``Ns``:
    linear in (log N, log sigma*) between ch5's lengths, extrapolated from the end ones."""
    sc = current_scale() if scale is None else check_scale(scale, "scale")
    basin = ch5.basin_merge(get("ch5.basin").configs(sc),
                            run_experiment("ch5.basin", sc))
    n5 = ch5.basin_lengths("PARITY", sc)
    s5 = [critical_sigma(ch5.basin_sigmas(sc), basin["uniform", "PARITY", N]["p_exact"])
          for N in n5]
    if not np.isfinite(s5).all():
        raise ValueError(f"sigma* is undefined at some of ch5's lengths {n5}: {s5}")
    lx, ly, q = np.log(n5), np.log(s5), np.log(np.asarray(Ns, dtype=float))
    i = np.clip(np.searchsorted(lx, q), 1, len(lx) - 1)
    return np.exp(ly[i - 1] + (q - lx[i - 1]) / (lx[i] - lx[i - 1]) * (ly[i] - ly[i - 1]))


def exit_fit(rows, covariate: str, dist: str = "log-normal", sigma_star=None,
             start: int = 10) -> dict:
    """How PARITY's plateau exit follows a covariate c across lengths and seeds: log2 exit =
    a + k log2 c + sigma e, censored where the loss never left the plateau, fitted by
    maximum likelihood; k with its 95% profile interval, and the leave-one-length-out
    held-out log-likelihood (:func:`sensbook.survival.heldout_loglik`). c is per seed
    ``grad_norm``, ``coef`` or ``weight`` (:func:`plateau_signal`), or ``sigma_star``: one
    value per length (``sigma_star``: {N: sigma*}). Every covariate uses the same seeds: those
    with a logged step on their plateau."""
    N, t, d, c = [], [], [], []
    for r in rows:
        if r["target"] != "PARITY" or not r.get("signal"):
            continue
        ps = plateau_signal(r, start)
        ok = np.isfinite(ps["grad_norm"])
        v = np.full(r["seeds"], sigma_star[r["N"]]) if covariate == "sigma_star" \
            else ps[covariate]
        N += [r["N"]] * int(ok.sum())
        t, d, c = t + list(ps["time"][ok]), d + list(ps["left"][ok]), c + list(v[ok])
    N, t, d, x = np.array(N, float), np.array(t), np.array(d, bool), np.log2(c)
    fit = fit_aft(x, t, d, dist)
    low, high = profile_interval(x, t, d, dist, fit=fit)
    held = heldout_loglik(N, t, d, lambda _: x, dist)["total"] if len(set(N)) >= 3 else None
    return dict(covariate=covariate, dist=dist, exponent=fit["b"], low=low, high=high,
                heldout=held, n=len(t), censored=int((~d).sum()), lengths=sorted(set(N)))


def within_length_tau(rows, covariate: str = "grad_norm", n_perm: int = 2000,
                      seed: int = 0) -> dict:
    """Does the signal order the seeds of one length (sigma*, one value a length, cannot)?
    Kendall's tau between ``covariate`` (:func:`plateau_signal`) and the plateau exit over
    the seed pairs of each PARITY length whose order is known (a censored exit is later than
    every exit before it), pooled, with a one-sided permutation p-value for tau < 0 (larger
    signal, earlier exit) from shuffling the covariate within each length."""
    groups = [(ps[covariate][ok], ps["time"][ok], ps["left"][ok]) for ps, ok in (
        (ps, np.isfinite(ps[covariate])) for ps in (
            plateau_signal(r) for r in rows if r["target"] == "PARITY" and r.get("signal")))
        if ok.sum() >= 2]

    def tau(gs):
        num = den = 0
        for c, t, d in gs:
            i, j = np.triu_indices(len(c), 1)
            known = (d[i] & (t[i] < t[j])) | (d[j] & (t[j] < t[i]))   # which left first
            s = np.sign(c[i] - c[j]) * np.sign(t[i] - t[j])
            num, den = num + s[known].sum(), den + known.sum()
        return num / den if den else np.nan

    rng, obs = np.random.default_rng(seed), tau(groups)
    perm = [tau([(rng.permutation(c), t, d) for c, t, d in groups]) for _ in range(n_perm)]
    return dict(tau=float(obs), p=float((1 + np.sum(np.array(perm) <= obs)) / (1 + n_perm)))


# ---- what the trained models use (the mechanism probe of ch6.training) ----------------------
def mechanism_rows(configs, results) -> list:
    """One row per ``ch6.training`` cell that carries the mechanism probe: ``target``, ``N``,
    ``learned`` (per seed), and for ``before`` and ``after`` the arrays of
    :func:`sensbook.mechanism.eos_mechanism` (per seed); ``along`` (PARITY's cells, where the
    signal is logged): the logged ``steps`` and, per step and seed, ``loss``, ``coef``
    (|degree-N Fourier coefficient of T|) and the probe's arrays; ``exit``
    (:func:`plateau_exit`) and ``steps_run``."""
    rows = []
    arr = lambda d: {k: np.asarray(v, dtype=float) for k, v in d.items()}
    for c, r in zip(configs, results):
        if r is None or "mechanism" not in r["before"]:
            continue
        row = dict(target=c["target"], N=int(c["N"]), learned=np.array(
            [s is not None for s in r["steps"]]), before=arr(r["before"]["mechanism"]),
            after=arr(r["after"]["mechanism"]), steps_run=int(r["steps_run"]), along=None)
        sig = r.get("signal")
        if sig and "var_min" in sig:
            row["along"] = dict(steps=np.asarray(sig["steps"], dtype=float),
                                loss=np.asarray(sig["loss"]),
                                coef=np.abs(np.asarray(sig["parity_coef"])),
                                **{k: np.asarray(sig[k], dtype=float) for k in (
                                    "var_median", "var_min", "beta_median", "att_max")})
            row["exit"] = plateau_exit(dict(curve=np.asarray(r["curve"]),
                                            curve_steps=np.asarray(r["curve_steps"])))
        rows.append(row)
    return rows


def mechanism_table(mrows, which: int = -1) -> str:
    """Per (target, N), HTML: learned seeds, and before -> after training the medians over
    seeds of layer norm ``which``'s eos input variance (median over strings, and min over
    strings), of beta, and of the largest eos attention weight (over layers and heads), with
    the share of seeds whose largest weight points at x_1."""
    head = ("target", "N", "learned", "LN var at eos, median over strings",
            "LN var at eos, min over strings", "β (median)", "largest eos weight",
            "seeds attending x₁")
    out = []
    for r in mrows:
        b, a = r["before"], r["after"]
        two = lambda k, f=".3g": (f"{np.median(b[k][:, which]):{f}} → "
                                  f"{np.median(a[k][:, which]):{f}}")
        top = lambda m: m["att_max"].reshape(len(m["att_max"]), -1)
        first = (np.take_along_axis(a["att_where"].reshape(len(top(a)), -1),
                                    top(a).argmax(1)[:, None], 1)[:, 0] == 0).mean()
        cells = (r["target"], r["N"], f"{r['learned'].sum()}/{len(r['learned'])}",
                 two("var_median"), two("var_min"),
                 f"{np.median(b['beta_median']):.0f} → {np.median(a['beta_median']):.0f}",
                 f"{np.median(top(b).max(1)):.2f} → {np.median(top(a).max(1)):.2f}",
                 f"{first:.2f}")
        out.append(cells)
    return html_table(head, out)


def variance_slope(mrows, target_name: str = "PARITY", key: str = "var_min",
                   which: int = -1, learned_only: bool = True) -> dict:
    """How the trained models' eos layer-norm input variance (``key`` of layer norm
    ``which``, per seed) scales with N: the least-squares slope k of log var = a + k log N
    over the seeds (learned ones only, by default) of ``target_name``, its standard error and
    95% t-interval (``df`` = points - 2), and how many standard errors it lies from the
    construction's -4 and from -2 (``z4``, ``z2``); ``Ns`` and the ``median`` per N."""
    xs, ys, Ns, med = [], [], [], []
    for r in mrows:
        if r["target"] != target_name:
            continue
        v = r["after"][key][:, which]
        keep = r["learned"] if learned_only else np.ones(len(v), bool)
        keep = keep & (v > 0)
        if keep.any():
            xs += [math.log(r["N"])] * int(keep.sum())
            ys += list(np.log(v[keep]))
            Ns.append(r["N"])
            med.append(float(np.median(v[keep])))
    if len(Ns) < 2:
        raise ValueError(f"{target_name}: {key} at fewer than two lengths")
    b, se, a = least_squares(xs, ys)
    df = len(xs) - 2
    half = t_quantile(0.975, df) * se if df > 0 else math.nan
    return dict(slope=b, se=se, low=b - half, high=b + half, df=df, a=a, n=len(xs),
                z4=(b + 4) / se, z2=(b + 2) / se, Ns=Ns, median=med)


def _on_plateau(al, exit_, start: int, tol: float) -> np.ndarray:
    """(steps, seeds): the logged steps on a seed's plateau (as :func:`plateau_signal`)."""
    at = al["steps"][:, None]
    return (at >= start) & (at < exit_) & (np.abs(al["loss"] - math.log(2)) < tol)


def plateau_walk(mrow, which: int = -1, key: str = "var_min", start: int = 10,
                 tol: float = 0.01) -> dict:
    """Along one PARITY cell's logged steps, per seed, layer norm ``which``'s eos variance
    (``key``): ``initial`` (the first logged step), ``plateau_low`` (its smallest value on
    the seed's plateau, :func:`plateau_signal`'s steps; NaN with none logged there),
    ``after_exit`` (the first logged step at or after the exit, NaN if none) and ``final``
    (the trained model's); ``exit`` (inf where the loss never left log 2)."""
    al, ex = mrow["along"], mrow["exit"]
    v = al[key][..., which]                                           # (steps, seeds)
    on = _on_plateau(al, ex, start, tol)
    low = np.where(on.any(0), np.where(on, v, np.inf).min(0), np.nan)
    post = al["steps"][:, None] >= ex
    after = np.where(post.any(0), v[post.argmax(0), np.arange(v.shape[1])], np.nan)
    return dict(initial=v[0], plateau_low=low, after_exit=after,
                final=mrow["after"][key][:, which], exit=ex, n_plateau=on.sum(0))


def escape_rates(mrow, start: int = 10, tol: float = 0.01, min_points: int = 3) -> dict:
    """Per seed of a PARITY cell: the escape rate ``lam`` (per step) fitted by least squares
    to log|c(t)| = log|c_0| + lam t over the logged steps on its plateau (:func:`plateau_signal`'s
    steps; NaN with fewer than ``min_points``), its standard error ``se``, ``c0`` (|c| at the
    first of them, at step ``t0``) and the measured ``exit`` (inf: never left). In sample: the
    rate against N; the exit is forecast out of sample by :func:`escape_forecast`."""
    al, ex = mrow["along"], mrow["exit"]
    on = _on_plateau(al, ex, start, tol)
    P = on.shape[1]
    lam, se, c0, t0 = (np.full(P, np.nan) for _ in range(4))
    for p in range(P):
        t = al["steps"][on[:, p]]
        if len(t) >= min_points:
            y = np.log(al["coef"][on[:, p], p])
            lam[p], se[p], _ = least_squares(t, y)
            c0[p], t0[p] = math.exp(y[0]), t[0]
    return dict(lam=lam, se=se, c0=c0, t0=t0, exit=ex, N=mrow["N"],
                n_points=on.sum(0))


def rate_against_n(rates, key: str = "lam") -> dict:
    """log ``key`` (per seed, positive and finite) against N across PARITY's lengths
    (``rates``: :func:`escape_rates` per length): the least-squares slope per unit N with
    its 95% t-interval, and the median per N."""
    xs, ys, med = [], [], {}
    for r in rates:
        v = np.asarray(r[key], dtype=float)
        ok = np.isfinite(v) & (v > 0)
        if ok.any():
            xs += [r["N"]] * int(ok.sum())
            ys += list(np.log(v[ok]))
            med[r["N"]] = float(np.median(v[ok]))
    if len(med) < 2:
        return dict(slope=math.nan, low=math.nan, high=math.nan, df=0, median=med, n=len(xs))
    b, se, _ = least_squares(xs, ys)
    df = len(xs) - 2
    half = t_quantile(0.975, df) * se if df > 0 else math.nan
    return dict(slope=b, low=b - half, high=b + half, df=df, median=med, n=len(xs))


def exit_coefficient(drop: float = 0.1) -> float:
    """The |c| that the plateau exit (:func:`plateau_exit`: loss below log 2 - ``drop``)
    needs: c* = -log(2 e^-drop - 1) (0.211 for drop 0.1).

    PARITY's labels are y = -chi, so E[y T] = -c and, the logistic loss being convex in y T,
    Jensen gives L >= log(1 + e^(-|c|)) whatever else T computes: the loss is below
    log 2 - drop only once |c| >= c*, with equality when T is a multiple of chi."""
    if not 0 < drop < math.log(2):
        raise ValueError(f"drop must lie in (0, log 2), got {drop!r}")
    return -math.log(2 * math.exp(-drop) - 1)


def _line(x, y):
    """Least-squares line y = a + b x: (a, b, residual sum of squares)."""
    b, _, a = least_squares(x, y)
    r = np.asarray(y, float) - a - b * np.asarray(x, float)
    return a, b, float(r @ r)


#: The two growth laws of |c(t)| on the plateau: log|c| linear in t (a saddle escape,
#: exponential) or in log t (a power of t: a constant drift, k = 1, or a diffusion, k = 1/2).
GROWTH_LAWS = {"exponential": lambda t: t, "power": np.log}


def plateau_logs(mrow) -> tuple:
    """A PARITY row of :func:`mechanism_rows` as the arguments of :func:`escape_forecast` and
    :func:`growth_heldout`: (logged steps, |c| per step and seed, exit per seed, steps run)."""
    return mrow["along"]["steps"], mrow["along"]["coef"], mrow["exit"], mrow["steps_run"]


def plateau_halves(steps, coef, exit_, end, start: int = 10) -> list:
    """Per seed, the logged steps of its plateau, start <= t < its exit (``exit_``; where it
    never left, t <= ``end``, the steps run), split at the plateau's middle (start + exit) / 2:
    dicts ``t``, ``y`` (log|c|), ``first`` (a boolean mask: t below the middle), ``exit``."""
    steps = np.asarray(steps, float)
    out = []
    for p, ex in enumerate(np.asarray(exit_, float)):
        stop = ex if np.isfinite(ex) else float(end)
        on = (steps >= start) & ((steps < stop) | (~np.isfinite(ex) & (steps == stop)))
        t = steps[on]
        out.append(dict(t=t, y=np.log(np.abs(np.asarray(coef, float)[on, p])),
                        first=t < (start + stop) / 2, exit=float(ex)))
    return out


def escape_forecast(steps, coef, exit_, end, start: int = 10, drop: float = 0.1,
                    fit_on: str = "first half", law: str = "exponential") -> dict:
    """Each seed's plateau exit predicted out of sample, from a saddle escape
    |c(t)| = |c_0| e^(lam t) (Fukumizu & Amari's escape from a saddle, linearised).

    ``fit_on="first half"``: lam and the intercept fitted by least squares to log|c| over the
    logged steps of the first half of the seed's own plateau (:func:`plateau_halves`; at
    least two); ``"other seeds"``: lam the median of the other seeds' rates (each fitted to
    their whole plateau), the intercept through this seed's first plateau step;
    ``"all"``: lam fitted to the whole plateau, the scored part included (in sample: what a
    test that cannot lose does). ``law="power"``: the rival |c(t)| = |c_1| t^lam instead
    (log|c| linear in log t, :data:`GROWTH_LAWS`). The predicted exit is when the line
    reaches :func:`exit_coefficient` (``drop``); inf where lam <= 0 (a failed prediction: the
    seed stays in the denominator). Returns per seed ``lam``, ``predicted``, ``exit`` (inf:
    never left within ``end`` steps), ``ratio`` = exit / predicted (0 where lam <= 0 and the
    seed left; for a seed that never left, the lower bound end / predicted) and ``fitted``
    (False: too few logged steps to fit)."""
    if fit_on not in ("first half", "other seeds", "all"):
        raise ValueError(f"fit_on must be 'first half', 'other seeds' or 'all', got {fit_on!r}")
    if law not in GROWTH_LAWS:
        raise ValueError(f"law must be one of {sorted(GROWTH_LAWS)}, got {law!r}")
    g = GROWTH_LAWS[law]
    halves = [dict(h, t=g(h["t"])) for h in plateau_halves(steps, coef, exit_, end, start)]
    P, target_y = len(halves), math.log(exit_coefficient(drop))
    whole = np.array([_line(h["t"], h["y"])[1] if len(h["t"]) >= 2 else np.nan
                      for h in halves])
    lam, a = np.full(P, np.nan), np.full(P, np.nan)
    for p, h in enumerate(halves):
        if fit_on == "other seeds":
            others = np.delete(whole, p)
            if len(h["t"]) and np.isfinite(others).any():
                lam[p] = np.nanmedian(others)
                a[p] = h["y"][0] - lam[p] * h["t"][0]
            continue
        m = h["first"] if fit_on == "first half" else np.ones(len(h["t"]), bool)
        if m.sum() >= 2:
            a[p], lam[p], _ = _line(h["t"][m], h["y"][m])
    fitted = np.isfinite(lam)
    ok = fitted & (lam > 0)
    pred = np.where(ok, (target_y - a) / np.where(ok, lam, 1.0), np.inf)
    pred = np.exp(pred) if law == "power" else pred
    ex = np.array([h["exit"] for h in halves])
    seen = np.where(np.isfinite(ex), ex, float(end))
    ratio = np.where(fitted, np.where(ok, seen / pred, np.where(np.isfinite(ex), 0.0, np.nan)),
                     np.nan)
    return dict(lam=lam, predicted=pred, exit=ex, ratio=ratio, fitted=fitted, fit_on=fit_on,
                law=law)


def forecast_summary(forecasts, n_boot: int = 2000, seed: int = 0) -> dict:
    """The exit / predicted ratios of :func:`escape_forecast` pooled over ``forecasts`` (one
    per length): ``median`` with a 95% bootstrap interval over seeds (``low``, ``high``;
    a seed with lam <= 0 counts as ratio 0, a seed that never left at its lower bound),
    ``within2`` (share within a factor 2), ``n`` (seeds fitted), ``failed`` (lam <= 0),
    ``unfitted`` (too few logged plateau steps) and ``ratios``."""
    r = np.concatenate([f["ratio"][f["fitted"]] for f in forecasts])
    r = r[~np.isnan(r)]                      # a seed that never left, predicted never: no ratio
    n_fit = sum(int(f["fitted"].sum()) for f in forecasts)
    if not len(r):
        raise ValueError("no seed has a fitted forecast")
    med = lambda v: float(np.quantile(v, 0.5, method="inverted_cdf"))
    rng = np.random.default_rng(seed)
    boot = [med(r[rng.integers(0, len(r), len(r))]) for _ in range(n_boot)]
    lo, hi = (float(np.quantile(boot, q, method="inverted_cdf")) for q in (0.025, 0.975))
    return dict(median=med(r), low=lo, high=hi, within2=float(np.mean((r > 0.5) & (r < 2))),
                n=len(r), failed=int(np.sum(r == 0)),
                unfitted=sum(int((~f["fitted"]).sum()) for f in forecasts), ratios=r,
                fitted=n_fit)


def growth_heldout(cells, start: int = 10) -> list:
    """Exponential against power-law growth of |c(t)| on each seed's plateau, by held-out
    likelihood: per law (:data:`GROWTH_LAWS`), log|c| = a + b g(t) + sigma e fitted by least
    squares on the first half of each plateau (:func:`plateau_halves`), sigma pooled over
    the fit residuals of every seed of ``cells`` (each a tuple of :func:`plateau_logs`), and
    the Gaussian log-likelihood of the second half's logged steps. Returns, per cell,
    ``seeds`` (those scored: two fitted steps and one scored at least), per law ``loglik``
    (per seed) and ``sigma``, and ``diff`` = exponential minus power (per seed)."""
    halves = [plateau_halves(*c, start=start) for c in cells]
    use = [[p for p, h in enumerate(hs) if h["first"].sum() >= 2 and (~h["first"]).any()]
           for hs in halves]
    out = [dict(seeds=u) for u in use]
    for law, g in GROWTH_LAWS.items():
        fits = [[_line(g(hs[p]["t"][hs[p]["first"]]), hs[p]["y"][hs[p]["first"]]) for p in u]
                for hs, u in zip(halves, use)]
        dof = sum(int(hs[p]["first"].sum()) - 2 for hs, u in zip(halves, use) for p in u)
        if dof <= 0:
            raise ValueError("too few logged plateau steps to estimate sigma")
        sigma = math.sqrt(sum(f[2] for fs in fits for f in fs) / dof)
        for o, hs, u, fs in zip(out, halves, use, fits):
            ll = []
            for p, (a, b, _) in zip(u, fs):
                h = hs[p]
                r = (h["y"][~h["first"]] - a - b * g(h["t"][~h["first"]])) / sigma
                ll.append(float(np.sum(-0.5 * r * r - math.log(sigma * math.sqrt(2 * math.pi)))))
            o[law] = dict(loglik=np.array(ll), sigma=sigma)
    for o in out:
        o["diff"] = o["exponential"]["loglik"] - o["power"]["loglik"]
    return out


def pooled_preference(diffs, n_boot: int = 2000, seed: int = 0) -> dict:
    """The held-out log-likelihood difference (exponential minus power, :func:`growth_heldout`)
    summed over the seeds of ``diffs`` (one array per length): ``total``, its 95% bootstrap
    interval over seeds (``low``, ``high``), ``n`` seeds and ``prefer``: ``"exponential"``
    (interval above 0), ``"power"`` (below) or ``"cannot tell"``."""
    d = np.concatenate([np.asarray(x, float) for x in diffs])
    if not len(d):
        raise ValueError("no seed was scored")
    rng = np.random.default_rng(seed)
    boot = [d[rng.integers(0, len(d), len(d))].sum() for _ in range(n_boot)]
    lo, hi = np.quantile(boot, [0.025, 0.975])
    prefer = "exponential" if lo > 0 else "power" if hi < 0 else "cannot tell"
    return dict(total=float(d.sum()), low=float(lo), high=float(hi), n=len(d), prefer=prefer)


#: The three verdicts a row of the chapter's table can carry.
VERDICTS = ("decided", "consistent, does not discriminate", "rejected")


def verdict(seen: bool, against: bool, shared: bool = False) -> str:
    """A prediction's verdict from what was measured: ``"rejected"`` when the measurement
    resolves the opposite (``against``); ``"decided"`` when it resolves the prediction
    (``seen``) and the rival explanations do not predict it too (``shared`` False); else
    ``"consistent, does not discriminate"`` (seen but shared, or not resolved either way)."""
    if seen and against:
        raise ValueError("a measurement cannot both resolve a prediction and its opposite")
    return VERDICTS[2] if against else VERDICTS[0] if seen and not shared else VERDICTS[1]


# ---- how chapter 6's pages print numbers (tables: sensbook.pages.html_table) -------------
def listed(values, fmt: str = ".3g", missing: str = "not learned") -> str:
    """``values`` as readable text, ``"0.021, 0.15, not learned"``: each number formatted
    with ``fmt``, and ``None``, inf or NaN written as ``missing`` (a censored seed, a seed
    with no plateau step)."""
    out = []
    for v in values:
        ok = v is not None and np.isfinite(float(v))
        out.append(f"{float(v):{fmt}}" if ok else missing)
    return ", ".join(out)


#: How a growth verdict of :func:`~sensbook.experiments.ch6_training.preferred_growth` reads.
GROWTH_WORDS = {"N": "exponential in N", "log N": "a power of N", "cannot tell": "cannot tell"}


def support_contrasts(srows: dict) -> list:
    """Each contrast of :data:`SUPPORT_CONTRASTS` at each length of ``srows``
    (:func:`support_rows`): :func:`cell_contrast` of support b against support a, with
    ``name``, ``N``, ``a``, ``b`` (the supports' names: the AFT's coefficient is
    log2 ``factor``) and ``what``."""
    return [dict(cell_contrast(srows[a, N], srows[b, N]), name=n, N=N, a=a, b=b, what=w)
            for N in sorted({N for _, N in srows}) for n, a, b, w in SUPPORT_CONTRASTS]
