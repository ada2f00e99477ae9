"""Chapter 6's rival explanations of PARITY's training cost (book/ch6_explanations.md):
sharpness and basins of the trained solutions, sparse PARITY (``ch6.rivals``), and the
gradient signal on the loss plateau. The training runs themselves are
:mod:`sensbook.experiments.ch6_training`'s.
"""
from __future__ import annotations

import math

import numpy as np

from ..settings import check_scale, scale as current_scale
from ..survival import fit_aft, heldout_loglik, profile_interval
from ..volume import critical_sigma, least_squares, t_quantile
from . import Experiment, ch5, get, register, run_experiment
from .ch6_training import (SIZES, _censored_data, configs, cost, plateau_exit, sweep)

def rival_configs(scale: str) -> list:
    """The configurations of ``ch6.rivals``: sparse PARITY at the lengths of
    ``SIZES[scale]["rivals"]`` that ``ch6.training`` does not train already (ch6's protocol,
    budget and seeds, no sharpness or basin), sparse PARITY on the spread support
    (``spread``: its targets, lengths and seeds), and ``ch6.training``'s PARITY cell at
    ``control_N`` trained again with the gradient-signal logging off (the last)."""
    s = SIZES[check_scale(scale, "scale")]
    rv = s["rivals"]
    have = {(c["target"], c["N"]): c for c in sweep(scale).configs}
    cells = configs(**{**s, "targets": [], "sparse": rv}, sharpness=None, basin=None,
                    mechanism=None)
    sp = rv["spread"]
    cells += configs(**{**s, "targets": [], "seeds": sp["seeds"], "sparse": sp},
                     sharpness=None, basin=None, mechanism=None)
    return ([c for c in cells if (c["target"], c["N"]) not in have]
            + [dict(have[("PARITY", rv["control_N"])], signal=None, sharpness=None, basin=None,
                    mechanism=None)])


register(Experiment("ch6.rivals", rival_configs, "sensbook.experiments.ch6_training:run_config", cost,
                    doc="sparse PARITY at more lengths, and a PARITY cell without the "
                        "gradient-signal logging (chapter 6, the rival explanations)"))


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
                            run_experiment("ch5.basin", sc, report=False))
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
