"""Issue 29: the hand-written statistics against the libraries that define them (test-only
dependencies: scipy, statsmodels). Each estimator is computed twice, here by sensbook and by an
independent implementation, on data where the two could disagree (ties, censoring, k = 0)."""
import math

import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.experiments.ch7 import rank_correlation

stats = pytest.importorskip("scipy.stats")
optimize = pytest.importorskip("scipy.optimize")
linalg = pytest.importorskip("scipy.sparse.linalg")
sm_survival = pytest.importorskip("statsmodels.duration.survfunc")
sm_proportion = pytest.importorskip("statsmodels.stats.proportion")


def censored_times(seed=0, n=60, budget=40.0):
    """Log-normal times with ties (rounded) and a budget: censored at the budget, and some
    censored earlier (at a tie with an event)."""
    rng = np.random.default_rng(seed)
    x = rng.choice([4.0, 6.0, 8.0, 10.0], n)
    t = np.round(2 ** (1.0 + 0.35 * x + 0.6 * rng.standard_normal(n)))
    t = np.maximum(t, 1.0)
    observed = t < budget
    t = np.minimum(t, budget)
    early = rng.random(n) < 0.15
    observed &= ~early
    return x, t, observed


# ---- Kaplan-Meier and Greenwood ------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:The confidence interval is undefined")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kaplan_meier_and_greenwood_against_scipy_and_statsmodels(seed):
    _, t, d = censored_times(seed)
    km = sb.kaplan_meier(t, d)
    # scipy: the survival function at each distinct event time, and Greenwood's linear band
    res = stats.ecdf(stats.CensoredData.right_censored(t, ~d))
    S_scipy = res.sf.evaluate(km["t"])
    assert np.allclose(km["S"], S_scipy, rtol=0, atol=1e-12)
    band = res.sf.confidence_interval(0.95, method="linear")
    lo, hi = band.low.evaluate(km["t"]), band.high.evaluate(km["t"])
    z = stats.norm.ppf(0.975)
    ours = sb.kaplan_meier(t, d, z=z)
    finite = np.isfinite(lo) & np.isfinite(hi)
    assert np.allclose(ours["low"][finite], np.clip(lo[finite], 0, 1), atol=1e-9)
    assert np.allclose(ours["high"][finite], np.clip(hi[finite], 0, 1), atol=1e-9)
    # statsmodels: estimate and Greenwood standard error at its event times
    sf = sm_survival.SurvfuncRight(t, d.astype(int))
    assert np.allclose(sf.surv_times, km["t"])
    assert np.allclose(sf.surv_prob, km["S"], atol=1e-12)
    keep = km["S"] > 0
    assert np.allclose(sf.surv_prob_se[keep], km["se"][keep], rtol=1e-9)
    assert np.allclose(sf.n_risk, km["at_risk"]) and np.allclose(sf.n_events, km["events"])


# ---- the accelerated-failure-time fit ---------------------------------------------------------
def scipy_aft(x, t, d, dist, fixed_b=None):
    """An independent MLE of log2 T = a + b x + sigma e (scipy densities and optimiser)."""
    y = np.log2(t)
    law = stats.norm if dist == "log-normal" else stats.gumbel_l

    def nll(q):
        a, b, log_s = (q[0], fixed_b, q[1]) if fixed_b is not None else q
        s = math.exp(log_s)
        zz = (y - a - b * x) / s
        return -(np.where(d, law.logpdf(zz) - log_s, law.logsf(zz))).sum()

    A = np.stack([np.ones_like(x), x], 1)
    a0, b0 = np.linalg.lstsq(A, y, rcond=None)[0]
    start = [a0, 0.0] if fixed_b is not None else [a0, b0, 0.0]
    r = optimize.minimize(nll, start, method="Nelder-Mead",
                          options=dict(xatol=1e-10, fatol=1e-12, maxiter=40000, maxfev=40000))
    return r.x, -r.fun


@pytest.mark.parametrize("dist", ["log-normal", "weibull"])
def test_aft_fit_and_profile_interval_against_a_scipy_mle(dist):
    x, t, d = censored_times(4, n=80)
    fit = sb.fit_aft(x, t, d, dist)
    theta, ll = scipy_aft(x, t, d, dist)
    assert fit["loglik"] == pytest.approx(ll, abs=1e-6)
    assert [fit["a"], fit["b"], math.log(fit["sigma"])] == pytest.approx(list(theta), abs=1e-4)
    lo, hi = sb.profile_interval(x, t, d, dist, fit=fit)
    assert lo < fit["b"] < hi
    chi2 = stats.chi2.ppf(0.95, 1)
    for b in (lo, hi):                                # each bound: the profile deviance = chi2
        _, ll_b = scipy_aft(x, t, d, dist, fixed_b=b)
        assert 2 * (ll - ll_b) == pytest.approx(chi2, abs=2e-3)


# ---- Wilson, Spearman, Hill ---------------------------------------------------------------------
def test_wilson_interval_against_statsmodels():
    k = np.array([0, 1, 5, 17, 50, 99, 100])
    n = np.array([100, 100, 40, 17, 120, 100, 100])
    lo, hi = sb.wilson_interval(k, n)
    want_lo, want_hi = sm_proportion.proportion_confint(k, n, alpha=0.05, method="wilson")
    z = 1.96 / stats.norm.ppf(0.975)                    # the package's z is 1.96 exactly
    lo2, hi2 = sb.wilson_interval(k, n, z=stats.norm.ppf(0.975))
    assert np.allclose(lo2, want_lo, atol=1e-12) and np.allclose(hi2, want_hi, atol=1e-12)
    assert abs(z - 1) < 1e-4 and np.allclose(lo, want_lo, atol=1e-4)


def test_spearman_against_scipy_with_ties():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 6, 40).astype(float)             # many ties
    b = a + rng.integers(0, 4, 40)
    r, lo, hi = rank_correlation(a, b)
    assert r == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert lo < r < hi


def test_hill_estimator_against_a_scipy_mle():
    """Below t0 the samples / t0 follow P(u < s) = s^a: scipy's power-law MLE on them."""
    rng = np.random.default_rng(5)
    v = rng.random(5000) ** (1 / 2.5)                    # P(v < t) = t^2.5 on (0, 1)
    a, se, t0, k = sb.small_ball_exponent(v, k=400)
    u = np.sort(v)[:k] / t0
    a_scipy, _, _ = stats.powerlaw.fit(u, floc=0, fscale=1)
    assert a == pytest.approx(a_scipy, rel=1e-6)
    assert abs(a - 2.5) < 4 * se


# ---- sharpness -----------------------------------------------------------------------------
def hvp_operator(model, f, x):
    """The Hessian of the mean logistic loss of one model, as a scipy LinearOperator built
    from torch Hessian-vector products."""
    names = [n for n, _ in model.named_parameters()]
    shapes = [p.shape for p in model.parameters()]
    flat = torch.cat([p.detach().flatten() for p in model.parameters()]).double()
    y = 2 * f(x).double() - 1

    def loss(theta):
        ps, a = {}, 0
        for n, s in zip(names, shapes):
            ps[n] = theta[a:a + s.numel()].reshape(s)
            a += s.numel()
        T = torch.func.functional_call(model, ps, (x,)).reshape(-1)
        return torch.nn.functional.softplus(-y * T).mean()

    def mv(v):
        v = torch.as_tensor(np.asarray(v).ravel(), dtype=torch.float64)
        return torch.autograd.functional.hvp(loss, flat, v)[1].numpy()

    return linalg.LinearOperator((flat.numel(),) * 2, matvec=mv, dtype=np.float64)


def test_sharpness_against_eigsh_on_hessian_vector_products():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = sb.Recognizer.random(P=2, D=4, L=1, eps=0.1, seed=3, dtype=torch.float64)
    x = sb.random_strings(5, 32, seed=1).double()
    got = sb.top_hessian_eigenvalue(model, sb.PARITY, x, iters=3000, tol=1e-10)
    for p in range(2):
        one = model.select(p)
        with sdpa_kernel(SDPBackend.MATH):
            ev = linalg.eigsh(hvp_operator(one, sb.PARITY, x), k=1, which="LM",
                              return_eigenvectors=False, tol=1e-10)[0]
        assert got["lam"][p] == pytest.approx(ev, rel=1e-5), p
