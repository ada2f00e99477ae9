"""Censored times: Kaplan-Meier curves and accelerated-failure-time models.

Chapter 6 records, per seed, the steps it took to learn a target, or that it had not learned
at the step budget (*right-censored*: all we know is T > budget). Two estimators use the
censored seeds instead of counting them at the budget:

* :func:`kaplan_meier`: the product-limit estimate S(t) = prod_{t_i <= t} (1 - d_i / n_i) of
  Pr[T > t] (Kaplan & Meier, 1958), with Greenwood's variance
  Var S(t) = S(t)^2 sum_{t_i <= t} d_i / (n_i (n_i - d_i)), and the median where S falls to 1/2;
* :func:`fit_aft`: an accelerated-failure-time model log2 T = a + b x + sigma e, with e
  standard normal (``log-normal``) or standard minimum-extreme-value (``weibull``), fitted by
  maximum likelihood: a learned seed contributes the density of its log time, a censored one
  the survival at the budget. :func:`profile_interval` gives a profile-likelihood interval for
  b, :func:`heldout_loglik` compares covariates (x = N against x = log N) by the likelihood of
  lengths left out of the fit;
* :func:`logrank` and :func:`censored_contrast`: two groups compared as censored samples (the
  log-rank test, stratified where asked; the AFT factor between them with its interval), which
  compares two populations without counting seeds at the budget's edge (issue 43).

Everything is float64 (torch for the optimisation, no other dependency).
"""
from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["kaplan_meier", "km_median", "AFT_DISTS", "aft_loglik", "fit_aft",
           "profile_interval", "heldout_loglik", "logrank", "censored_contrast"]

AFT_DISTS = ("log-normal", "weibull")
_CHI2_1_95 = 3.841458820694124          # the 95% quantile of chi^2 with one degree of freedom


def _times(times, observed):
    t = np.asarray(times, dtype=float)
    d = np.asarray(observed)
    if t.ndim != 1 or t.shape != d.shape or not len(t):
        raise ValueError("times and observed must be non-empty 1-D arrays of one length, got "
                         f"shapes {np.shape(times)} and {np.shape(observed)}")
    if d.dtype != bool:
        raise ValueError(f"observed must be a bool array (True: the event was seen, False: "
                         f"censored at that time), got dtype {d.dtype}")
    if not np.isfinite(t).all() or (t <= 0).any():
        raise ValueError("times must be finite and > 0 (a censored time is the budget it "
                         "reached, not inf)")
    return t, d


def kaplan_meier(times, observed, z: float = 1.96) -> dict:
    """The Kaplan-Meier estimate of :math:`S(t) = \\Pr[T > t]` from right-censored times.

    Parameters
    ----------
    times : array-like
        Shape ``(n,)``, finite and > 0: each event time, or the censoring time where
        ``observed`` is False.
    observed : array-like of bool
        Shape ``(n,)``: True where the event was seen, False where the time is censored.
    z : float
        The normal quantile of the pointwise band (1.96: 95 %).

    Returns
    -------
    dict
        Arrays over the distinct event times ``t``: ``at_risk``, ``events``, ``S`` (the
        estimate just after each time), ``se`` (Greenwood), ``low`` and ``high`` (``S``
        plus or minus ``z * se``, clipped to [0, 1]); and ``median``, ``n``, ``censored``,
        ``last``.

    Notes
    -----
    A censored subject is still at risk at its own censoring time: ties of events and
    censorings put the events first, the usual convention. ``median`` is the smallest ``t``
    with :math:`S(t) \\le 1/2`, inf when ``S`` stays above 1/2 (the median is then not defined
    by the data, only bounded below by the last time).
    """
    t, d = _times(times, observed)
    # O(n log n): the at-risk count n_i = #{t >= t_i} from one sort and a binary search
    ev, events = np.unique(t[d], return_counts=True)
    events = events.astype(float)
    at_risk = (len(t) - np.searchsorted(np.sort(t), ev, side="left")).astype(float)
    S = np.cumprod(1 - events / at_risk)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(at_risk > events, events / (at_risk * (at_risk - events)), np.inf)
    with np.errstate(invalid="ignore"):
        se = np.where(S == 0, 0.0, S * np.sqrt(np.cumsum(terms)))
    return dict(t=ev, at_risk=at_risk, events=events, S=S, se=se,
                low=np.clip(S - z * se, 0, 1), high=np.clip(S + z * se, 0, 1),
                median=km_median(ev, S), n=len(t), censored=int((~d).sum()),
                last=float(t.max()))


MEDIAN_TOL = 1e-9


def km_median(t, S, tol: float = MEDIAN_TOL) -> float:
    """The smallest event time at which the Kaplan-Meier curve is at most 1/2 (inf if none).

    Parameters
    ----------
    t : array-like
        The distinct event times, increasing.
    S : array-like
        The curve just after each time (:func:`kaplan_meier`'s ``S``).
    tol : float
        Rounding tolerance, in [0, 0.5) (see Notes).

    Notes
    -----
    S is a floating-point product: where the exact curve is 1/2 (n uncensored times, n even;
    24 seeds of which 12 learned) ``np.cumprod`` can give 0.5000000000000013, and a strict
    comparison would return the *next* event time (or inf). So S <= 1/2 + ``tol`` counts as
    reaching 1/2: the product's rounding is a few ulps per factor (about 1e-12 after
    thousands of factors), far below ``tol``; a curve that truly ends within ``tol`` above 1/2
    is read as reaching it."""
    if not 0 <= tol < 0.5:
        raise ValueError(f"tol must be in [0, 0.5), got {tol!r}")
    below = np.flatnonzero(np.asarray(S) <= 0.5 + tol)
    return float(np.asarray(t)[below[0]]) if below.size else math.inf


# ---- accelerated failure time -------------------------------------------------------------
def _check_dist(dist):
    if dist not in AFT_DISTS:
        raise ValueError(f"dist={dist!r} is unknown; allowed: {', '.join(AFT_DISTS)}")


def _logpdf_logsf(z, dist):
    """log density and log survival of the standardised error e at z (torch, float64)."""
    if dist == "log-normal":
        logpdf = -0.5 * z * z - 0.5 * math.log(2 * math.pi)
        logsf = torch.special.log_ndtr(-z)
    else:                                 # minimum extreme value: S(z) = exp(-e^z)
        logpdf = z - torch.exp(z)
        logsf = -torch.exp(z)
    return logpdf, logsf


def _logcdf(z, dist):
    """log Pr[e <= z] of the standardised error (torch, float64)."""
    if dist == "log-normal":
        return torch.special.log_ndtr(z)
    return torch.log(-torch.expm1(-torch.exp(z)))         # 1 - exp(-e^z)


def aft_loglik(params, x, y, observed, dist: str = "log-normal", ylow=None):
    """The log-likelihood of :math:`\\log_2 T = a + b x + \\sigma e` (see :func:`fit_aft`).

    Parameters
    ----------
    params : torch.Tensor
        ``(a, b, log sigma)``, float64.
    x : array-like
        The covariate, shape ``(n,)``.
    y : array-like
        :math:`\\log_2` of the times, shape ``(n,)``.
    observed : array-like of bool
        True where the event was seen.
    dist : str
        ``"log-normal"`` or ``"weibull"``.
    ylow : array-like or None
        :math:`\\log_2` of the interval-censoring lower bounds (see Notes).

    Notes
    -----
    The sum over observed times of log density of y = log2 T, plus over censored ones of log Pr[Y > y]
    (a float64 torch scalar, differentiable in ``params``). With ``ylow`` (log2 of the last
    time the event was known *not* to have happened, -inf for none) an observed time is
    interval-censored: it contributes log(F(y) - F(ylow)) instead of the density."""
    _check_dist(dist)
    a, b, log_s = params[0], params[1], params[2]
    x = torch.as_tensor(x, dtype=torch.float64)
    y = torch.as_tensor(y, dtype=torch.float64)
    obs = torch.as_tensor(observed, dtype=torch.bool)
    z = (y - a - b * x) / torch.exp(log_s)
    logpdf, logsf = _logpdf_logsf(z, dist)
    if ylow is None:
        return torch.where(obs, logpdf - log_s, logsf).sum()
    yl = torch.as_tensor(ylow, dtype=torch.float64)[obs]
    fin = torch.isfinite(yl)                               # lower = 0: log F(zu) alone
    yl = torch.where(fin, yl, y[obs] - 1)                  # (a finite stand-in, unused)
    zl = (yl - a - b * x[obs]) / torch.exp(log_s)
    zu = z[obs]
    # log(F(zu) - F(zl)) on the observed rows only, from whichever tail avoids cancellation:
    # log S(zl) + log(1 - S(zu)/S(zl)) above the median, log F(zu) + log(1 - F(zl)/F(zu))
    # below it (the other branch's value is never used, and its inputs are kept finite)
    upper = (zu + zl) > 0
    hi_u, hi_l = torch.where(upper, zu, 0.0), torch.where(upper, zl, -1.0)
    lo_u, lo_l = torch.where(upper, 1.0, zu), torch.where(upper, 0.0, zl)
    sf_u, sf_l = _logpdf_logsf(hi_u, dist)[1], _logpdf_logsf(hi_l, dist)[1]
    cdf_u, cdf_l = _logcdf(lo_u, dist), _logcdf(lo_l, dist)
    interval = torch.where(upper, sf_l + torch.log(-torch.expm1(sf_u - sf_l)),
                           cdf_u + torch.log(-torch.expm1(cdf_l - cdf_u)))
    interval = torch.where(fin, interval, _logcdf(torch.where(fin, 0.0, zu), dist))
    return interval.sum() + logsf[~obs].sum()


def _maximise(x, y, d, dist, fixed_b=None, start=None, ylow=None):
    """(params, loglik) maximising the likelihood, with b held at ``fixed_b`` if given."""
    if start is None:
        A = np.stack([np.ones_like(x), x], 1)
        coef = np.linalg.lstsq(A, y, rcond=None)[0]
        resid = y - A @ coef
        start = [coef[0], coef[1], math.log(max(resid.std(), 0.1))]
    p = torch.tensor(start, dtype=torch.float64)
    if fixed_b is not None:
        p[1] = fixed_b
    free = torch.tensor([0, 2] if fixed_b is not None else [0, 1, 2])
    q = p[free].clone().requires_grad_(True)
    opt = torch.optim.LBFGS([q], lr=1, max_iter=500, tolerance_grad=1e-10,
                            tolerance_change=1e-14, line_search_fn="strong_wolfe")

    def full():
        return p.index_put((free,), q)

    def closure():
        opt.zero_grad()
        nll = -aft_loglik(full(), x, y, d, dist, ylow)
        nll.backward()
        return nll

    opt.step(closure)
    with torch.no_grad():
        theta = full()
        ll = float(aft_loglik(theta, x, y, d, dist, ylow))
    return theta.numpy().copy(), ll


def _lower(lower, t, d):
    """log2 of the interval-censoring lower bounds (None: exact times): -inf where 0."""
    if lower is None:
        return None
    lo = np.asarray(lower, dtype=float)
    if lo.shape != t.shape or not np.isfinite(lo).all() or (lo < 0).any() \
            or (lo[d] >= t[d]).any():
        raise ValueError("lower must be finite, >= 0, of the shape of times, and below each "
                         "observed time (the last check at which the event had not happened)")
    with np.errstate(divide="ignore"):
        return np.where(d, np.log2(lo), -np.inf)


def fit_aft(x, times, observed, dist: str = "log-normal", lower=None) -> dict:
    """Maximum-likelihood fit of :math:`\\log_2 T = a + b x + \\sigma e` to right-censored times.

    Parameters
    ----------
    x : array-like
        Shape ``(n,)``, finite: the covariate (``N``, or ``log N``).
    times : array-like
        Shape ``(n,)``, finite and > 0: steps to learn, or the budget where ``observed`` is
        False.
    observed : array-like of bool
        Shape ``(n,)``: True where the event was seen, False where the time is censored.
    dist : str
        The law of T: ``"log-normal"`` or ``"weibull"`` (``AFT_DISTS``).
    lower : array-like or None
        Shape ``(n,)``: for each observed time, the last time the event was known not to have
        happened (interval censoring; see Notes). Default None: exact event times.

    Returns
    -------
    dict
        ``a``, ``b``, ``sigma``, ``loglik``, ``se_b`` (from the observed information: the
        inverse Hessian of the negative log-likelihood), ``n``, ``censored``, ``dist``,
        ``params``, ``interval_censored``.

    Notes
    -----
    With ``lower``, an observed event lies in ``(lower, time]`` (the previous check of an
    evaluation grid, 0 for none) and contributes :math:`\\log(F(\\mathrm{time}) -
    F(\\mathrm{lower}))` instead of the density; ``lower`` is ignored for censored times.
    With no censoring the log-normal fit is least squares (``sigma^2`` = mean squared
    residual). A fit needs at least two distinct x among the observed times, and spread
    about a line: where the observed log times lie exactly on a line in x (tied seeds at
    each of two lengths, say) and no censored time pulls the line away, sigma's maximum-
    likelihood estimate is 0 and the likelihood is unbounded; that is a ``ValueError``
    naming what the data lack, never a fit with sigma ~ 0 and an arbitrary log-likelihood.
    """
    _check_dist(dist)
    t, d = _times(times, observed)
    x = np.asarray(x, dtype=float)
    if x.shape != t.shape or not np.isfinite(x).all():
        raise ValueError(f"x must be finite and of the shape of times {t.shape}, got {x.shape}")
    if len(np.unique(x[d])) < 2:
        raise ValueError("fit_aft needs observed (uncensored) times at two or more distinct "
                         f"x, got x = {sorted(set(x[d].tolist()))}")
    y = np.log2(t)
    lack = ("the observed log2 times lie on a line in x (no spread: tied times at every x, "
            "or one time at each of two x), so sigma's maximum-likelihood estimate is 0 and "
            "the likelihood is unbounded; the data lack spread within a length (need at "
            "least two different times at some x, or three x not on a line)")
    A = np.stack([np.ones(d.sum()), x[d]], 1)
    resid = y[d] - A @ np.linalg.lstsq(A, y[d], rcond=None)[0]
    ylow = _lower(lower, t, d)
    if ylow is None and d.all() and np.abs(resid).max() <= 1e-9 * (1 + np.abs(y).max()):
        raise ValueError(f"fit_aft: {lack}")
    theta, ll = _maximise(x, y, d, dist, ylow=ylow)
    if not (math.isfinite(ll) and np.isfinite(theta).all()
            and math.exp(theta[2]) > 1e-6 * (1 + np.ptp(y))):
        raise ValueError(f"fit_aft: the fit did not converge to sigma > 0 "
                         f"(sigma = {math.exp(min(theta[2], 700)):.3g}, loglik = {ll:.3g}): {lack}")
    p = torch.tensor(theta, dtype=torch.float64)
    H = torch.autograd.functional.hessian(lambda q: -aft_loglik(q, x, y, d, dist, ylow), p)
    cov = torch.linalg.pinv(H).numpy()
    return dict(a=float(theta[0]), b=float(theta[1]), sigma=float(math.exp(theta[2])),
                loglik=ll, se_b=float(math.sqrt(max(cov[1, 1], 0.0))), n=len(t),
                censored=int((~d).sum()), dist=dist, params=theta.tolist(),
                interval_censored=ylow is not None)


def profile_interval(x, times, observed, dist: str = "log-normal", level: float = 0.95,
                     fit: dict | None = None, lower=None) -> tuple:
    """The profile-likelihood interval for the slope ``b`` of :func:`fit_aft`.

    Parameters
    ----------
    x, times, observed, dist, lower
        As for :func:`fit_aft`.
    level : float
        The confidence level; only 0.95.
    fit : dict or None
        :func:`fit_aft`'s result on the same data (default: fitted here).

    Returns
    -------
    tuple of float
        ``(low, high)``: a bound not reached within 50 standard errors of the estimate is
        -inf or inf.

    Notes
    -----
    The ``b`` with :math:`2(\\max \\ell - \\max_{a, \\sigma} \\ell(a, b, \\sigma))` at most the
    :math:`\\chi^2_1` quantile.
    """
    if level != 0.95:
        raise ValueError(f"level must be 0.95, got {level!r}")
    t, d = _times(times, observed)
    x = np.asarray(x, dtype=float)
    y = np.log2(t)
    ylow = _lower(lower, t, d)
    fit = fit or fit_aft(x, t, d, dist, lower=lower)
    b0, ll0 = fit["b"], fit["loglik"]
    step = max(fit["se_b"], 1e-3)
    start = fit["params"]
    gap = lambda b: 2 * (ll0 - _maximise(x, y, d, dist, fixed_b=b, start=start,
                                         ylow=ylow)[1]) - _CHI2_1_95

    def bound(sign):
        lo, hi = b0, b0 + sign * step
        while gap(hi) < 0:
            lo, hi = hi, hi + sign * 2 * abs(hi - b0)
            if abs(hi - b0) > 50 * step:
                return sign * math.inf
        for _ in range(40):                       # bisection: gap(lo) < 0 <= gap(hi)
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
            if abs(hi - lo) < 1e-4 * step:
                break
        return (lo + hi) / 2

    return bound(-1), bound(+1)


def heldout_loglik(Ns, times, observed, transform, dist: str = "log-normal",
                   lower=None) -> dict:
    """Leave-one-length-out predictive log-likelihood of :math:`\\log_2 T = a + b\\, g(N) +
    \\sigma e`.

    Parameters
    ----------
    Ns : array-like
        Shape ``(n,)``: each seed's length ``N``.
    times, observed, dist, lower
        As for :func:`fit_aft`.
    transform : callable
        ``g``: the covariate as a function of ``N`` (e.g. ``numpy.log``), applied to arrays.

    Returns
    -------
    dict
        ``total`` and ``per_N`` (length -> log-likelihood of its seeds).

    Notes
    -----
    For each distinct length N0: fit on the other lengths (:func:`fit_aft` with covariate
    ``transform(N)``) and add the log-likelihood of the seeds at N0 under that fit (density
    for learned seeds, survival for censored ones). Returns ``total`` and ``per_N``. Compare
    two transforms by their totals: the difference is a log-likelihood ratio on data neither
    fit has seen. ``lower``: interval censoring, as in :func:`fit_aft`.
    """
    Ns = np.asarray(Ns, dtype=float)
    t, d = _times(times, observed)
    if Ns.shape != t.shape or not np.isfinite(Ns).all():
        raise ValueError(f"Ns must be finite and of the shape of times {t.shape} (one length "
                         f"per seed), got shape {Ns.shape}")
    g = np.asarray(transform(Ns), dtype=float)
    ylow = _lower(lower, t, d)
    lo = None if lower is None else np.asarray(lower, dtype=float)
    per = {}
    for N0 in np.unique(Ns):
        out = Ns == N0
        try:
            fit = fit_aft(g[~out], t[~out], d[~out], dist,
                          lower=None if lo is None else lo[~out])
        except ValueError as e:
            raise ValueError(f"heldout_loglik: leaving out N = {N0:g}, the fit on the other "
                             f"lengths fails: {e}") from None
        per[float(N0)] = float(aft_loglik(torch.tensor(fit["params"]), g[out],
                                          np.log2(t[out]), d[out], dist,
                                          None if ylow is None else ylow[out]))
    return dict(total=float(sum(per.values())), per_N=per)


def logrank(times, observed, group, strata=None) -> dict:
    """The log-rank test of two groups' right-censored times, stratified where asked.

    Parameters
    ----------
    times : array-like
        Shape ``(n,)``: event times, or the budget where ``observed`` is False.
    observed : array-like of bool
        Shape ``(n,)``: True where the event was seen.
    group : array-like
        Shape ``(n,)``: 0 or 1 per run, both present.
    strata : array-like or None
        Shape ``(n,)``: a label per run (e.g. the length N); observed minus expected and the
        variance are summed over the strata, each run compared only within its own.

    Returns
    -------
    dict
        ``z`` = (observed - expected events of group 1) / sd, negative when group 1 fails
        (here: learns) later; ``p``, two-sided, from the normal law.

    Notes
    -----
    Ties by the hypergeometric variance (Mantel, 1966).
    """
    t, d, g = (np.asarray(v, dtype=float) for v in (times, observed, group))
    if set(np.unique(g)) != {0.0, 1.0}:
        raise ValueError(f"group must hold both 0 and 1, got {sorted(set(g.tolist()))}")
    k = np.zeros(len(t)) if strata is None else np.asarray(strata)
    if k.shape != t.shape:
        raise ValueError(f"strata must hold one label per run ({len(t)}), got shape {k.shape}")
    o_e = var = 0.0
    for one in np.unique(k):
        ts, ds, gs = t[k == one], d[k == one], g[k == one]
        for s in np.unique(ts[ds > 0]):
            at = ts >= s
            n, n1 = at.sum(), (at & (gs == 1)).sum()
            e, e1 = ((ts == s) & (ds > 0)).sum(), ((ts == s) & (ds > 0) & (gs == 1)).sum()
            o_e += e1 - e * n1 / n
            var += e * (n1 / n) * (1 - n1 / n) * (n - e) / max(n - 1, 1)
    z = float(o_e / math.sqrt(var)) if var > 0 else 0.0
    return dict(z=z, p=math.erfc(abs(z) / math.sqrt(2)))


def censored_contrast(times, observed, group, lower=None, dist: str = "log-normal") -> dict:
    """Two groups of censored times compared as samples: the factor on the time and a test.

    Parameters
    ----------
    times, observed, group
        As for :func:`logrank` (group 1 against group 0).
    lower : array-like or None
        The interval-censoring lower bounds of :func:`fit_aft` (None: exact times).
    dist : str
        The AFT model's law (``AFT_DISTS``).

    Returns
    -------
    dict
        :func:`logrank`'s ``z`` and ``p``; ``factor`` = :math:`2^b` of the AFT model
        :math:`\\log_2 T = a + b\\, 1[\\text{group } 1] + \\sigma e` (:func:`fit_aft`): how many
        times longer group 1 takes, with its 95% profile-likelihood interval ``low``,
        ``high`` (:func:`profile_interval`); ``b``, ``b_low``, ``b_high`` on the log2 scale.
        The AFT entries are None where a group has no observed time (no finite fit).
    """
    t, d = _times(times, observed)
    g = np.asarray(group, dtype=float)
    out = dict(logrank(t, d, g), factor=None, low=None, high=None, b=None, b_low=None,
               b_high=None)
    if d[g == 0].any() and d[g == 1].any():
        fit = fit_aft(g, t, d, dist, lower=lower)
        lo, hi = profile_interval(g, t, d, dist, fit=fit, lower=lower)
        out.update(b=fit["b"], b_low=lo, b_high=hi, factor=2.0 ** fit["b"], low=2.0 ** lo,
                   high=2.0 ** hi)
    return out
