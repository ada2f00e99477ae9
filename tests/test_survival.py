"""Censored-time estimators (sensbook/survival.py) against independent computations."""
import math

import numpy as np
import pytest
import torch

from sensbook.survival import (aft_loglik, censored_contrast, fit_aft, heldout_loglik,
                               kaplan_meier, profile_interval)


def redistribute_to_the_right(t, d):
    """Efron's (1967) redistribute-to-the-right: each censored subject hands its mass in
    equal parts to everyone later; the mass left on events is the Kaplan-Meier jump."""
    order = np.lexsort((~d, t))                      # events before censorings at ties
    t, d = t[order], d[order]
    w = np.full(len(t), 1 / len(t))
    for i in range(len(t)):
        if not d[i]:
            if i + 1 < len(t):
                w[i + 1:] += w[i] / (len(t) - i - 1)
            w[i] = 0
    return t, w


def test_kaplan_meier_equals_redistribute_to_the_right_on_random_tiny_data():
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 10))
        t = rng.integers(1, 6, n).astype(float)
        d = rng.random(n) < 0.6
        if not d.any():
            continue
        km = kaplan_meier(t, d)
        tt, w = redistribute_to_the_right(t, d)
        for u, S in zip(km["t"], km["S"]):
            assert S == pytest.approx(1 - w[tt <= u].sum(), abs=1e-12), (t, d)


def test_kaplan_meier_by_hand_with_greenwood():
    # times 2, 3+, 4, 4, 5+ (+: censored): at 2, 5 at risk, 1 event; at 4, 3 at risk, 2 events
    km = kaplan_meier([2, 3, 4, 4, 5], np.array([True, False, True, True, False]))
    np.testing.assert_array_equal(km["t"], [2, 4])
    np.testing.assert_array_equal(km["at_risk"], [5, 3])
    np.testing.assert_allclose(km["S"], [4 / 5, 4 / 5 * 1 / 3])
    g = [1 / (5 * 4), 1 / (5 * 4) + 2 / (3 * 1)]
    np.testing.assert_allclose(km["se"], np.array(km["S"]) * np.sqrt(g))
    assert km["median"] == 4 and km["censored"] == 2


def test_kaplan_meier_without_censoring_is_the_empirical_survival():
    t = np.random.default_rng(1).exponential(size=40) + 0.1
    km = kaplan_meier(t, np.ones(40, bool))
    S = 1 - np.arange(1, 41) / 40
    np.testing.assert_allclose(km["S"], S)
    np.testing.assert_allclose(km["se"][:-1], np.sqrt(S * (1 - S) / 40)[:-1])  # binomial
    assert km["median"] == np.sort(t)[19]
    # all censored beyond the first half: median undefined
    assert math.isinf(kaplan_meier([1, 5, 5, 5], np.array([True, False, False, False]))["median"])


def test_uncensored_log_normal_fit_is_least_squares():
    rng = np.random.default_rng(2)
    x = rng.integers(3, 12, 50).astype(float)
    y = 2 + 0.4 * x + 0.7 * rng.standard_normal(50)
    f = fit_aft(x, 2**y, np.ones(50, bool))
    b, a = np.polyfit(x, y, 1)
    resid = y - a - b * x
    assert f["a"] == pytest.approx(a, abs=1e-6) and f["b"] == pytest.approx(b, abs=1e-6)
    assert f["sigma"] == pytest.approx(np.sqrt(np.mean(resid**2)), rel=1e-6)
    A = np.stack([np.ones_like(x), x], 1)
    assert f["se_b"] == pytest.approx(f["sigma"] * np.sqrt(np.linalg.inv(A.T @ A)[1, 1]),
                                      rel=1e-5)
    # the profile-likelihood interval of an uncensored normal regression: where
    # n log(RSS(b) / RSS(b_hat)) = chi2_1(0.95), RSS(b) minimised over a at fixed b
    lo, hi = profile_interval(x, 2**y, np.ones(50, bool), fit=f)
    rss = lambda bb: ((y - bb * x) - (y - bb * x).mean()) @ ((y - bb * x) - (y - bb * x).mean())
    for bound in (lo, hi):
        assert 50 * math.log(rss(bound) / rss(b)) == pytest.approx(3.841458820694124, abs=1e-3)
    assert lo < b < hi


def test_log_likelihood_terms_by_hand():
    p = torch.tensor([1.0, 0.5, math.log(0.8)], dtype=torch.float64)
    x, y, d = np.array([2.0, 4.0]), np.array([2.5, 3.5]), np.array([True, False])
    z = (y - 1 - 0.5 * x) / 0.8
    norm_pdf = math.exp(-z[0]**2 / 2) / math.sqrt(2 * math.pi) / 0.8
    norm_sf = 0.5 * math.erfc(z[1] / math.sqrt(2))
    assert float(aft_loglik(p, x, y, d, "log-normal")) == pytest.approx(
        math.log(norm_pdf) + math.log(norm_sf), rel=1e-12)
    # minimum extreme value: density e^z exp(-e^z) / sigma, survival exp(-e^z)
    gum = math.exp(z[0]) * math.exp(-math.exp(z[0])) / 0.8
    assert float(aft_loglik(p, x, y, d, "weibull")) == pytest.approx(
        math.log(gum) - math.exp(z[1]), rel=1e-12)


@pytest.mark.parametrize("dist", ["log-normal", "weibull"])
def test_censored_fit_recovers_the_slope_where_the_budget_summary_does_not(dist):
    rng = np.random.default_rng(3)
    n = 4000
    x = rng.integers(3, 14, n).astype(float)
    e = rng.standard_normal(n) if dist == "log-normal" else np.log(rng.exponential(size=n))
    y = 3 + 0.5 * x + 0.6 * e
    budget = 7.0                                  # log2: most long-N runs hit it
    d = y < budget
    t = 2 ** np.minimum(y, budget)
    f = fit_aft(x, t, d, dist)
    assert abs(f["b"] - 0.5) < 4 * f["se_b"] and abs(f["sigma"] - 0.6) < 0.05
    assert np.polyfit(x, np.log2(t), 1)[0] < 0.35        # counting at the budget: too low
    assert f["censored"] == int((~d).sum()) > n / 3


def test_heldout_loglik_is_the_fit_without_that_length():
    rng = np.random.default_rng(4)
    N = np.repeat([5.0, 7.0, 9.0], 6)
    t = 2 ** (2 + 0.5 * N + 0.3 * rng.standard_normal(18))
    d = np.ones(18, bool)
    d[-2:] = False
    h = heldout_loglik(N, t, d, lambda n: n)
    rest = N != 7
    f = fit_aft(N[rest], t[rest], d[rest])
    want = aft_loglik(torch.tensor(f["params"]), N[~rest], np.log2(t[~rest]), d[~rest])
    assert h["per_N"][7.0] == pytest.approx(float(want)) and len(h["per_N"]) == 3


def test_bad_input_raises():
    with pytest.raises(ValueError, match="observed must be a bool"):
        kaplan_meier([1, 2], [1, 0])
    with pytest.raises(ValueError, match="times must be finite"):
        kaplan_meier([1, np.inf], np.array([True, False]))
    with pytest.raises(ValueError, match="dist="):
        fit_aft([1, 2], [3, 4], np.array([True, True]), "gamma")
    with pytest.raises(ValueError, match="two or more distinct"):
        fit_aft([1, 1, 2], [3, 4, 5], np.array([True, True, False]))


def exact_km_median(t, d):
    """The Kaplan-Meier median in exact rational arithmetic (events before censorings)."""
    from fractions import Fraction
    S = Fraction(1)
    for u in sorted(set(t[d].tolist())):
        n_u = int((t >= u).sum())
        S *= Fraction(n_u - int(((t == u) & d).sum()), n_u)
        if S <= Fraction(1, 2):
            return u
    return math.inf


def test_km_median_is_exact_where_the_curve_is_one_half():
    # issue 30, 3 / issue 26, 6: n uncensored times, exact S = 1/2 after the (n/2)-th; the
    # floating product is 0.5000000000000013 at n = 24 and a strict <= took the next time
    t = np.arange(1, 25, dtype=float)
    km = kaplan_meier(t, np.ones(24, bool))
    assert km["S"][11] != 0.5 and km["median"] == 12.0          # the case that failed
    # 24 seeds, 12 learned at distinct steps, 12 censored at the budget: median 12, not inf
    d = np.arange(24) < 12
    assert kaplan_meier(np.where(d, t, 100.0), d)["median"] == 12.0
    # the probe's grid: every even n to 200 uncensored, and n seeds with k learned (k <= n)
    wrong = []
    for n in range(2, 201, 2):
        tt = np.arange(1, n + 1, dtype=float)
        if kaplan_meier(tt, np.ones(n, bool))["median"] != n // 2:
            wrong.append((n, n))
    rng = np.random.default_rng(3)
    for n in range(2, 41):
        for k in range(1, n + 1):
            d = np.arange(n) < k
            tt = np.where(d, np.arange(1, n + 1), 10 * n).astype(float)
            tt[rng.random(n) < 0.3] = rng.integers(1, n + 1)       # ties and early censoring
            d = d & (rng.random(n) < 0.9)
            if not d.any():
                continue
            if kaplan_meier(tt, d)["median"] != exact_km_median(tt, d):
                wrong.append((n, k))
    assert not wrong, wrong


def test_kaplan_meier_on_200000_distinct_times():
    # issue 30, 10: the at-risk count was recomputed per event time (quadratic: hours here);
    # one sort and a binary search give the closed form S_i = 1 - i/n at once
    n = 200_000
    t = np.random.default_rng(4).permutation(n) + 1.0
    km = kaplan_meier(t, np.ones(n, bool))
    np.testing.assert_allclose(km["S"], 1 - np.arange(1, n + 1) / n, atol=1e-9)
    np.testing.assert_array_equal(km["at_risk"], n - np.arange(n))
    assert km["median"] == n / 2
    d = t % 3 != 0                                                 # a third censored
    km = kaplan_meier(t, d)
    some = np.arange(0, len(km["t"]), 997)                         # the plain count, sampled
    np.testing.assert_array_equal(km["at_risk"][some], [(t >= u).sum() for u in km["t"][some]])
    assert (km["events"] == 1).all() and len(km["t"]) == d.sum()


@pytest.mark.parametrize("times", [np.repeat([100.0, 200.0, 400.0], 4),    # on a line in N
                                   np.repeat([100.0, 150.0, 400.0], 4)])   # not on a line
def test_degenerate_survival_data_get_an_error_naming_what_they_lack(times):
    # issue 30, 15: tied seeds at three lengths; every held-out fit sees two lengths of tied
    # times, which a line fits exactly (sigma -> 0): it raised a LinAlgError (SVD of inf)
    N = np.repeat([5.0, 7.0, 9.0], 4)
    obs = np.ones(12, bool)
    with pytest.raises(ValueError, match="leaving out N = 5.*lack spread within a length"):
        heldout_loglik(N, times, obs, lambda n: n)
    if times[4] == 200.0:                       # exactly on a line: fit_aft itself refuses
        with pytest.raises(ValueError, match="sigma's maximum-likelihood estimate is 0"):
            fit_aft(N, times, obs)
        obs[-1] = False                         # a censored seed below the line: still 0
        with pytest.raises(ValueError, match="did not converge to sigma > 0"):
            fit_aft(N, np.r_[times[:-1], 50.0], obs)
        f = fit_aft(N, np.r_[times[:-1], 1000.0], obs)   # censored above the line: defined
        assert f["sigma"] > 0.1 and math.isfinite(f["loglik"])
    else:                                       # spread about the line: a defined fit
        f = fit_aft(N, times, obs)
        assert f["sigma"] > 0.05 and math.isfinite(f["se_b"])
    with pytest.raises(ValueError, match="Ns must be .* of the shape of times"):
        heldout_loglik(N[:-1], times, np.ones(12, bool), lambda n: n)


def test_interval_censored_loglik_is_the_probability_of_the_interval():
    # log(F(u) - F(l)) by the error function, for both laws, at arbitrary parameters
    rng = np.random.default_rng(5)
    x = rng.integers(3, 12, 30).astype(float)
    u = 2 ** (1 + 0.3 * x + 0.5 * rng.standard_normal(30))
    lo = u * rng.uniform(0.5, 0.95, 30)
    lo[:3] = 0.0                                        # no earlier check: log F(u)
    d = rng.random(30) < 0.8
    a, b, s = 0.7, 0.25, 0.6
    F = {"log-normal": lambda z: 0.5 * math.erfc(-z / math.sqrt(2)),
         "weibull": lambda z: 1 - math.exp(-math.exp(z))}
    for dist, cdf in F.items():
        want = 0.0
        for xi, ui, li, di in zip(x, u, lo, d):
            zu = (math.log2(ui) - a - b * xi) / s
            if di:
                zl = -math.inf if li == 0 else (math.log2(li) - a - b * xi) / s
                want += math.log(cdf(zu) - (0.0 if zl == -math.inf else cdf(zl)))
            else:
                want += math.log(1 - cdf(zu))
        with np.errstate(divide="ignore"):
            ylow = np.where(d, np.log2(lo), -np.inf)
        got = aft_loglik(torch.tensor([a, b, math.log(s)], dtype=torch.float64), x,
                         np.log2(u), d, dist, ylow)
        assert float(got) == pytest.approx(want, rel=1e-9), dist
        # finite gradients everywhere, no earlier check and deep tails included
        for shift in (0.0, 40.0, -40.0):
            q = torch.tensor([a + shift, b, math.log(s)], dtype=torch.float64,
                             requires_grad=True)
            ll = aft_loglik(q, x, np.log2(u), d, dist, ylow)
            ll.backward()
            assert torch.isfinite(q.grad).all() and torch.isfinite(ll), (dist, shift, ll)
    # narrow intervals: the interval-censored fit tends to the exact-time fit
    exact = fit_aft(x, u, d)
    narrow = fit_aft(x, u, d, lower=u * (1 - 1e-7))
    assert narrow["b"] == pytest.approx(exact["b"], abs=1e-4) and narrow["interval_censored"]
    assert narrow["sigma"] == pytest.approx(exact["sigma"], rel=1e-3)
    lo_i, hi_i = profile_interval(x, u, d, lower=u * (1 - 1e-7))
    lo_e, hi_e = profile_interval(x, u, d, fit=exact)
    assert lo_i == pytest.approx(lo_e, abs=1e-3) and hi_i == pytest.approx(hi_e, abs=1e-3)
    with pytest.raises(ValueError, match="below each observed time"):
        fit_aft(x, u, d, lower=u)
    # an evaluation grid coarser than the spread: steps read off the grid move b, and the
    # interval fit recovers the slope of the continuous times better than the exact-time fit
    grid = 2.0 ** np.arange(0, 30)                      # checks at powers of 2 (very coarse)
    xs = np.repeat(np.arange(4.0, 14.0), 40)
    t = 2 ** (2 + 0.37 * xs + 0.3 * np.random.default_rng(6).standard_normal(len(xs)))
    seen = grid[np.searchsorted(grid, t)]               # the first check at or after t
    prev = seen / 2
    obs = np.ones(len(xs), bool)
    b_int = fit_aft(xs, seen, obs, lower=prev)["b"]
    assert abs(b_int - 0.37) < 0.03, b_int
    # held out with intervals: each length scored by the probability of its intervals (< 0)
    h = heldout_loglik(xs[::8], seen[::8], obs[::8], lambda n: n, lower=prev[::8])
    assert len(h["per_N"]) == 10 and all(-50 < v < 0 for v in h["per_N"].values()), h


def test_censored_contrast_recovers_a_known_factor_and_says_when_it_has_none():
    """Two log-normal samples, the second 3 times slower and censored at a budget: the AFT
    factor's interval holds 3 and not 1, the log-rank test agrees (scipy's, independent);
    with no factor the interval holds 1; a group with no event has no finite fit."""
    from scipy.stats import CensoredData, logrank as scipy_logrank

    rng = np.random.default_rng(11)
    a = 100 * 2 ** (0.4 * rng.standard_normal(40))
    b = 3 * 100 * 2 ** (0.4 * rng.standard_normal(40))
    t, d = np.minimum(np.r_[a, b], 400), np.r_[a, b] < 400
    g = np.r_[np.zeros(40), np.ones(40)]
    c = censored_contrast(t, d, g)
    assert c["low"] < 3 < c["high"] and c["low"] > 2 and c["factor"] == 2 ** c["b"]
    ref = scipy_logrank(CensoredData(uncensored=t[(g == 0) & d], right=t[(g == 0) & ~d]),
                        CensoredData(uncensored=t[(g == 1) & d], right=t[(g == 1) & ~d]))
    assert c["p"] == pytest.approx(ref.pvalue, rel=1e-6) and c["z"] < 0
    same = censored_contrast(np.r_[a, a[::-1] * 1.01], np.ones(80, bool), g)
    assert same["low"] < 1 < same["high"] and same["p"] > 0.5
    none = censored_contrast(np.r_[a, np.full(40, 400.0)], np.r_[np.ones(40, bool),
                                                                   np.zeros(40, bool)], g)
    assert none["factor"] is None and none["low"] is None and none["p"] < 1e-6
