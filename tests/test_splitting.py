"""Small volumes by subset simulation (sensbook/splitting.py), validated before believed:
(a) plain Monte Carlo where it resolves the volume, (b) exact volumes in closed form down to
1e-30, (c) never below the certified lower bound, (d) repeated runs inside the interval."""
import math

import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.certify import certified_radius
from sensbook.experiments.ch5_certified import log_volume_bound
from sensbook.splitting import ReadoutScore, recognition_score, subset_volume


def _inside(v, res, slack=0.0):
    lo, hi = res["interval"]
    return lo - slack <= v <= hi + slack


@pytest.mark.parametrize("D,N,f", [(4, 2, "FIRST"), (4, 2, "MAJORITY"), (2, 3, "MAJORITY")])
def test_a_equals_plain_monte_carlo_where_it_resolves_the_volume(D, N, f):
    model = sb.Recognizer(1, D, 1, 1, D, dtype=torch.float64)
    x = sb.strings(N, dtype=torch.float64)
    score = recognition_score(model, x, getattr(sb, f)(x), margin=0.01)
    res = subset_volume(score, model.M, n=400, runs=6, moves=10, seed=3)
    g = torch.Generator().manual_seed(11)
    n_mc, k = 40_000, 0
    for _ in range(4):
        th = torch.rand(n_mc // 4, model.M, generator=g, dtype=torch.float64) * 2 - 1
        k += int((score(th) > 0).sum())
    lo, hi = sb.wilson_interval(k, n_mc)
    assert k / n_mc >= 1e-3                                  # Monte Carlo resolves it
    assert res["levels"][0] >= 1                             # and splitting used levels
    # the two intervals overlap (log scale)
    assert res["interval"][0] <= math.log(hi) and math.log(lo) <= res["interval"][1], (
        res, k / n_mc)


def test_a_on_parity_whose_min_score_has_dead_ends():
    """PARITY at N = 2 in the chapter's small space (V about 1e-4, from 2e5 uniform points):
    the score that counts wrong strings first gives runs that agree, and an interval that
    overlaps Monte Carlo's."""
    model = sb.Recognizer(1, 4, 1, 1, 4, dtype=torch.float64)
    x = sb.strings(2, dtype=torch.float64)
    score = recognition_score(model, x, sb.PARITY(x), margin=0.01)
    res = subset_volume(score, model.M, n=400, runs=4, moves=10, n_max=400, seed=17)
    g = torch.Generator().manual_seed(23)
    k, n_mc = 0, 200_000
    for _ in range(10):
        k += int((score(torch.rand(n_mc // 10, model.M, generator=g, dtype=torch.float64)
                        * 2 - 1) > 0).sum())
    lo, hi = sb.wilson_interval(k, n_mc)
    assert k >= 10 and res["mixed"] and res["levels"][0] >= 2, (k, res)
    assert res["interval"][0] <= math.log(hi) and math.log(lo) <= res["interval"][1], (
        res, k / n_mc)


def test_the_recognition_score_is_positive_exactly_on_recognition_and_counts_wrong_strings():
    """Against the margins computed here: S > 0 iff every s(x) T > xi; S = min margin there;
    with k >= 1 wrong strings S lies in (-k - 1/2, -k] (so fewer wrong strings score higher);
    a theta with an undefined output (all zero: LN_0 of 0) scores -inf."""
    model = sb.Recognizer(1, 2, 1, 1, 2, dtype=torch.float64)
    x = sb.strings(3, dtype=torch.float64)
    y = sb.PARITY(x).bool()
    score = recognition_score(model, x, y, margin=0.01)
    g = torch.Generator().manual_seed(4)
    th = torch.rand(4000, model.M, generator=g, dtype=torch.float64) * 2 - 1
    th[0] = 0.0
    S = score(th)
    with torch.no_grad():
        T = model.like(len(th)).set_flat(th)(x)
    m = T * (y.double() * 2 - 1) - 0.01
    k = (m <= 0).sum(-1)
    ok = torch.isfinite(T).all(-1)
    assert not ok[0] and S[0] == -math.inf and ok[1:].all()
    assert torch.equal((S > 0)[ok], (m > 0).all(-1)[ok])
    assert torch.equal(S[ok & (k == 0)], m.amin(-1)[ok & (k == 0)])
    w = ok & (k > 0)
    assert ((S[w] <= -k[w]) & (S[w] > -k[w] - 0.5)).all()
    assert len(set(k[w].tolist())) >= 3           # several counts of wrong strings were seen


@pytest.mark.parametrize("kind,M,a,exact", [
    ("cube", 30, 0.1, 30 * math.log(0.1)),                   # product of intervals: 1e-30
    ("cube", 12, 0.3, 12 * math.log(0.3)),
    ("simplex", 15, 1.0, -math.lgamma(16)),                  # the corner simplex: 1 / 15!
    ("slab", 40, 0.0, math.log(0.5)),                        # a half-space through 0
])
def test_b_equals_the_exact_volume_of_closed_form_sets(kind, M, a, exact):
    score = {"cube": lambda th: a - th.abs().amax(1),
             "simplex": lambda th: a - ((1 + th) / 2).sum(1),
             "slab": lambda th: th.sum(1)}[kind]
    res = subset_volume(score, M, n=1000, runs=6, seed=5)
    assert _inside(exact, res), (kind, exact, res)
    # the estimate is informative: its interval is within a factor e^1.5 of V
    assert res["interval"][1] - res["interval"][0] < 3.0, res


@pytest.mark.parametrize("seed", range(3))
def test_c_never_below_the_certified_lower_bound(seed):
    model = sb.Recognizer.random(1, 2, 1, 1, 2, eps=0.1, seed=seed, dtype=torch.float64)
    x = sb.strings(3, dtype=torch.float64)
    with torch.no_grad():
        y = model(x)[0] > 0
    theta0 = model.flat()[0].clamp(-0.99, 0.99)
    model.set_flat(theta0[None])
    with torch.no_grad():
        y = model(x)[0] > 0
    r = certified_radius(model, x, y, margin=0.01, rtol=0.01)["radius"]
    assert r > 0
    bound = log_volume_bound(theta0, r)
    score = recognition_score(model, x, y, margin=0.01)
    res = subset_volume(score, model.M, n=500, runs=4, moves=5, seed=seed)
    assert res["interval"][1] >= bound and res["log_volume"] >= bound, (bound, res)


def test_d_repeated_runs_are_inside_the_reported_interval():
    M, a = 20, 0.2
    exact = M * math.log(a)
    score = lambda th: a - th.abs().amax(1)
    reps = [subset_volume(score, M, n=500, runs=6, seed=100 * j) for j in range(4)]
    for r in reps:
        assert _inside(exact, r), (exact, r)
    # every repetition's estimate lies inside every other's interval widened by its own
    # half-width (the intervals overlap), and the spread of the estimates is no wider than
    # the widest interval
    est = np.array([r["log_volume"] for r in reps])
    widest = max(r["interval"][1] - r["interval"][0] for r in reps)
    assert est.max() - est.min() <= widest, (est, widest)
    for r in reps:
        for q in reps:
            assert r["interval"][0] <= q["interval"][1] and q["interval"][0] <= r["interval"][1]


def test_a_flat_or_impossible_score_gives_minus_infinity_not_a_number():
    res = subset_volume(lambda th: torch.full((len(th),), -1.0, dtype=torch.float64), 5,
                        n=50, runs=2)
    assert res["log_volume"] == -math.inf and res["volume"] == 0.0


def test_bad_arguments_are_named():
    score = lambda th: th.sum(1)
    for kw, arg in ((dict(n=5), "n"), (dict(p0=0.9), "p0"), (dict(p0=0.0), "p0"),
                    (dict(runs=1), "runs"), (dict(moves=0), "moves"), (dict(box=-1.0), "box"),
                    (dict(level=1.0), "level"), (dict(scale=float("nan")), "scale"),
                    (dict(max_spread=0.0), "max_spread"), (dict(n=50, n_max=20), "n_max")):
        with pytest.raises((TypeError, ValueError), match=arg):
            subset_volume(score, 3, **kw)
    with pytest.raises(TypeError, match="score"):
        subset_volume(3.0, 3)
    model = sb.Recognizer(1, 2, 1, 1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="labels"):
        recognition_score(model, sb.strings(2), [True])
    with pytest.raises(ValueError, match="margin"):
        recognition_score(model, sb.strings(2), [True] * 4, margin=-1.0)


def _two_pieces_and_a_dead_end(M, a, lam=0.4, dead=0.05):
    """A live box of half-width a around +0.5 (V = a^M) beside a wide dead end around -0.5
    whose score peaks at -dead < 0: at low levels the dead end holds most of the mass."""
    def score(th):
        live = a - (th - 0.5).abs().amax(1)
        return torch.maximum(live, -dead - lam * (th + 0.5).abs().amax(1))
    return score, M * math.log(a)


def test_disconnected_union_of_separated_boxes_equals_its_exact_volume():
    M, a, c = 12, 0.2, 0.6
    score = lambda th: torch.maximum(a - (th - c).abs().amax(1), a - (th + c).abs().amax(1))
    exact = math.log(2) + M * math.log(a)                    # two disjoint boxes
    res = subset_volume(score, M, n=500, runs=6, seed=2)
    assert res["mixed"] and _inside(exact, res), (exact, res)
    assert res["interval"][1] - res["interval"][0] < 3.0, res


def test_a_dead_end_is_caught_by_the_mixing_check_and_resolved_by_more_points():
    M, a = 14, 0.2
    score, exact = _two_pieces_and_a_dead_end(M, a)
    # at one size the runs lose the live piece (some climb the dead end: -inf, or far apart):
    # the estimate is refused, with an upper end that still bounds V
    one = subset_volume(score, M, n=500, n_max=500, runs=6, seed=3)
    assert not one["mixed"] and one["log_volume"] == -math.inf, one
    assert one["interval"][1] >= exact, (exact, one)
    assert not all(math.isfinite(v) for v in one["runs"]) or np.ptp(one["runs"]) > 4.0
    # doubling the points until the runs agree gives the exact volume inside the interval
    res = subset_volume(score, M, n=500, runs=6, seed=3)
    assert res["mixed"] and res["n"] > 500 and _inside(exact, res), (exact, res)
    assert res["evaluations"] > one["evaluations"]            # both sizes' cost is counted


def test_the_mixing_check_refuses_when_runs_disagree_at_the_cap():
    # a spread of 0 nats is never met by independent runs: refused, never a silent mean
    res = subset_volume(lambda th: 0.3 - th.abs().amax(1), 6, n=100, runs=3, max_spread=1e-9,
                        n_max=200, seed=1)
    assert not res["mixed"] and res["n"] == 200 and res["log_volume"] == -math.inf, res
    assert res["interval"][1] >= 6 * math.log(0.3) - 1.0, res


# ---- the read-out integrated out (ReadoutScore) -----------------------------------------
def _phi_and_full(f, N, P, seed, D=4):
    model = sb.Recognizer(1, D, 1, 1, D, dtype=torch.float64)
    x = sb.strings(N, dtype=torch.float64)
    y = getattr(sb, f)(x).bool() if f != "ZERO" else torch.zeros(len(x), dtype=torch.bool)
    rs = ReadoutScore(model, x, y, margin=0.01, readouts=64)
    rs.resample(torch.Generator().manual_seed(seed))
    phi = torch.rand(P, rs.M, generator=torch.Generator().manual_seed(seed + 1),
                     dtype=torch.float64) * 2 - 1
    return model, x, y, rs, phi


@pytest.mark.parametrize("f,N", [("FIRST", 3), ("PARITY", 2), ("ZERO", 3)])
def test_readout_score_is_the_full_score_at_its_best_readout_and_positive_where_its_weight_is(
        f, N):
    """complete(phi) puts the best w of the K and the middle of omega's interval into theta:
    the full model's recognition score there equals the read-out score (so S > 0 is the same
    set), and the weight is > 0 exactly where the score is."""
    model, x, y, rs, phi = _phi_and_full(f, N, 300, seed=4)
    full = recognition_score(model, x, y, margin=0.01)
    S, v = rs(phi), rs.weight(phi)
    theta = torch.stack([rs.complete(p) for p in phi])
    assert torch.allclose(full(theta), S, atol=1e-9, rtol=0)
    assert ((S > 0) == (v > 0)).all() and (S > 0).any()
    # a constant is recognised by some omega whatever phi is; the others are not always
    assert (S > 0).all() if f == "ZERO" else (S <= 0).any()
    assert ((v >= 0) & (v <= 1)).all()


def test_readout_weight_is_the_fraction_of_readouts_that_recognise_by_brute_force():
    """v(phi) against an independent count: (w, omega) drawn uniformly from the read-out's
    box, put into theta, and the full model run on every string."""
    model, x, y, rs, phi = _phi_and_full("FIRST", 3, 400, seed=7)
    rs.K = 20_000
    rs.resample(torch.Generator().manual_seed(8))
    v = rs.weight(phi)
    full = recognition_score(model, x, y, margin=0.01)
    g = torch.Generator().manual_seed(9)
    picked = torch.argsort(v, descending=True)[:3]         # the phi with the largest v
    for j in picked:
        n = 20_000
        theta = torch.zeros(n, model.M, dtype=torch.float64)
        theta[:, ~rs.mask] = phi[j]
        theta[:, rs.mask] = torch.rand(n, 5, generator=g, dtype=torch.float64) * 2 - 1
        k = int((full(theta) > 0).sum())
        lo, hi = sb.wilson_interval(k, n, 3.3)            # 99.9 %
        assert k >= 50 and lo <= float(v[j]) <= hi, (k / n, float(v[j]))


@pytest.mark.parametrize("f,N,n_mc", [("FIRST", 3, 40_000), ("PARITY", 2, 200_000)])
def test_a_readout_score_volume_equals_plain_monte_carlo_over_all_of_theta(f, N, n_mc):
    model = sb.Recognizer(1, 4, 1, 1, 4, dtype=torch.float64)
    x = sb.strings(N, dtype=torch.float64)
    y = getattr(sb, f)(x).bool()
    rs = ReadoutScore(model, x, y, margin=0.01, readouts=256)
    res = subset_volume(rs, rs.M, n=400, runs=6, moves=10, seed=3)
    full = recognition_score(model, x, y, margin=0.01)
    g = torch.Generator().manual_seed(11)
    k = sum(int((full(torch.rand(n_mc // 10, model.M, generator=g, dtype=torch.float64)
                      * 2 - 1) > 0).sum()) for _ in range(10))
    lo, hi = sb.wilson_interval(k, n_mc)
    assert k >= 10 and res["mixed"], (k, res)
    assert res["interval"][0] <= math.log(hi) and math.log(lo) <= res["interval"][1], (
        res, k / n_mc)


@pytest.mark.parametrize("f", ["ZERO", "FIRST"])
def test_the_best_point_is_completed_with_the_read_outs_of_its_own_run(f):
    """Each run draws new read-outs, so the best point of an earlier run completed with the
    last run's would be another theta; best_theta is completed in the run that found it: the
    full model's score there is the best score (the certificate is computed around it)."""
    model, x, y, rs, _ = _phi_and_full(f, 2, 1, seed=2)
    res = subset_volume(rs, rs.M, n=100, runs=4, moves=2, seed=5)
    full = recognition_score(model, x, y, margin=0.01)
    assert res["best_theta"].shape == (model.M,) and res["best_score"] > 0, res
    assert abs(float(full(res["best_theta"][None])[0]) - res["best_score"]) < 1e-9
    assert subset_volume(lambda th: 0.5 - th.abs().amax(1), 3, n=50, runs=2)["best_theta"] \
        is None


def test_readout_score_names_bad_arguments():
    model = sb.Recognizer(1, 2, 1, 1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="readouts"):
        ReadoutScore(model, sb.strings(2), [True] * 4, readouts=0)
    with pytest.raises(ValueError, match="labels"):
        ReadoutScore(model, sb.strings(2), [True])
    with pytest.raises(ValueError, match="box"):
        ReadoutScore(model, sb.strings(2), [True] * 4, box=0.0)
    rs = ReadoutScore(model, sb.strings(2), [True] * 4)
    with pytest.raises(ValueError, match="phi"):
        rs(torch.zeros(3, rs.M + 5, dtype=torch.float64))


def test_readout_score_is_the_same_in_any_chunks_and_minus_infinity_where_a_feature_is_not_finite():
    """The (P, K, B) outputs are scored in cache-sized chunks of models: any chunk size gives
    the same scores and weights, bit for bit; a phi whose features are NaN (a NaN parameter)
    scores -inf, never a class, and weighs 0."""
    model, x, y, rs, phi = _phi_and_full("FIRST", 3, 300, seed=5)
    phi[7, 0] = math.nan
    S, v = rs(phi), rs.weight(phi)
    rs.CHUNK_BITS = 9                                   # 1 model a chunk (K B = 512)
    assert torch.equal(rs(phi), S) and torch.equal(rs.weight(phi), v)
    assert S[7] == -math.inf and v[7] == 0 and torch.isfinite(S[:7]).all()
