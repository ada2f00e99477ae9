"""Growth laws of log V_f(N) (sensbook.experiments.ch5_certified.growth_laws): each law is
recovered from data it generated, with its rate inside the reported interval, and an upper
bound (a refused estimate) enters as a censored value, not as a number."""
import numpy as np
import pytest

from sensbook.experiments.ch5_certified import LAW_MARGIN, growth_laws

N = np.arange(2, 10, dtype=float)


@pytest.mark.parametrize("seed", range(3))
def test_each_law_is_named_from_the_data_it_generated(seed):
    rng = np.random.default_rng(seed)
    se = np.full(len(N), 0.3)
    noise = rng.normal(0, 0.3, len(N))
    exp = growth_laws(N, -1.0 - 2.5 * N + noise, se, np.zeros(len(N), bool))
    assert exp["verdict"] == "exponential", exp
    assert abs(exp["rate"] + 2.5) < 3 * exp["rate_se"] and exp["rate_se"] < 0.2, exp
    poly = growth_laws(N, -1.0 - 9.0 * np.log(N) + noise, se, np.zeros(len(N), bool))
    assert poly["verdict"] == "polynomial", poly
    assert abs(poly["power"] + 9.0) < 3 * poly["power_se"], poly
    flat = growth_laws(N, -4.0 + noise, se, np.zeros(len(N), bool))
    assert flat["verdict"] in ("flat", "cannot tell"), flat
    assert abs(flat["rate"]) < 3 * flat["rate_se"], flat
    for r in (exp, poly):                       # the margin is met by the named law
        best = r["heldout"][r["verdict"]]
        assert all(best - v >= LAW_MARGIN for k, v in r["heldout"].items() if k != r["verdict"])


def test_upper_bounds_enter_as_censored_values():
    y = -2.0 * N
    cens = N >= 8
    loose = y + np.where(cens, 30.0, 0.0)        # bounds far above the line: no information
    r = growth_laws(N, loose, np.full(len(N), 0.2), cens)
    assert r["verdict"] == "exponential" and abs(r["rate"] + 2.0) < 0.1, r
    # read as numbers, the same bounds would bend the line
    wrong = growth_laws(N, loose, np.full(len(N), 0.2), np.zeros(len(N), bool))
    assert abs(wrong["rate"] + 2.0) > 0.5, wrong
    # a bound below the line contradicts it: the held-out likelihood falls
    tight = growth_laws(N, y - np.where(cens, 10.0, 0.0), np.full(len(N), 0.2), cens)
    assert tight["heldout"]["exponential"] < r["heldout"]["exponential"] - 10


def test_too_few_lengths_are_refused():
    with pytest.raises(ValueError, match="growth_laws"):
        growth_laws([2, 3], [-1, -2], [0.1, 0.1], [False, False])
    with pytest.raises(ValueError, match="uncensored"):
        growth_laws([2, 3, 4], [-1, -2, -3], [0.1] * 3, [False, True, True])


def test_vol_curves_keeps_refused_estimates_as_upper_bounds():
    from sensbook.experiments.ch5_certified import vol_curves
    cfg = [dict(target="PARITY", N=3), dict(target="PARITY", N=2)]
    res = [dict(log_volume=None, interval=[None, -12.0], runs=[None, -13.0], mc_hits=0,
                mc_n=1000, certified=None),
           dict(log_volume=-5.0, interval=[-6.0, -4.0], runs=[-5.5, -4.5], mc_hits=10,
                mc_n=1000, certified=-900.0)]
    d = vol_curves(cfg, res)["PARITY"]
    assert d["N"].tolist() == [2, 3]                            # sorted by N
    assert d["censored"].tolist() == [False, True]
    assert d["log_v"].tolist() == [-5.0, -12.0]                 # the bound, not a number
    v = np.exp([-5.5, -4.5])                    # the se of log of the runs' mean V (delta)
    assert abs(d["se"][0] - v.std(ddof=1) / v.mean() / np.sqrt(2)) < 1e-12
    assert d["certified"][1] == -np.inf and d["certified"][0] == -900.0
    assert d["mc_upper"][1] > np.log(1 / 1000) and d["mc_upper"][0] > np.log(10 / 1000)


def test_a_law_fitted_to_two_precise_lengths_is_not_judged_at_their_se():
    """With se 0.01 nats, a law fitted to two lengths fits them exactly; without the misfit
    floor its held-out prediction of a third would be judged at se 0.01 and every law would
    lose hundreds of units. With it, the held-out scores stay of the order of the data's
    misfit, and an exponential fall of 2 nats per N with 0.2 nats of scatter is named."""
    from sensbook.experiments.ch5_certified import LAW_MISFIT_FLOOR
    N = np.array([2, 3, 4, 5, 6])
    y = -1.0 - 2.0 * N + np.array([0.2, -0.2, 0.1, -0.1, 0.0])
    r = growth_laws(N, y, np.full(len(N), 0.01), np.zeros(len(N), bool))
    assert r["verdict"] == "exponential", r
    assert r["heldout"]["exponential"] > -5 * len(N) and LAW_MISFIT_FLOOR > 0.05, r


def test_the_second_volume_space_is_the_parity_constructions_architecture():
    """log V_f(N) runs in two spaces; the second is the one where the exact PARITY transformer
    lives (same shapes, so the same M), and every configuration names its space."""
    import sensbook as sb
    from sensbook.experiments import ch5_certified as cc
    big = cc.VOL_SPACES["PARITY"]
    m = sb.Recognizer(1, big["D"], big["L"], big["H"], big["F"])
    assert m.M == sb.parity_transformer().M
    for scale in ("ci", "book", "paper"):
        cfg = cc._vol_configs(scale)
        assert {c["space"] for c in cfg} == set(cc.VOL_SPACES)
        for c in cfg:
            assert {k: c[k] for k in "DLHF"} == cc.VOL_SPACES[c["space"]]
        # PARITY at N = 2 and 3 in both spaces: the chapter's step from 2 to 3 reads them
        for sp in cc.VOL_SPACES:
            assert {2, 3} <= set(cc.vol_lengths("PARITY", scale, sp))
    with pytest.raises(ValueError, match="space must be one of"):
        cc.vol_lengths("PARITY", "book", "huge")


def test_vol_curves_keeps_the_spaces_apart():
    from sensbook.experiments.ch5_certified import vol_curves
    cfg = [dict(target="FIRST", N=2, space="small"), dict(target="FIRST", N=2, space="PARITY"),
           dict(target="FIRST", N=3)]                         # no space: the small one
    res = [dict(log_volume=v, interval=[v - 1, v + 1], runs=[v, v], mc_hits=5, mc_n=100,
                certified=None) for v in (-4.0, -3.0, -5.0)]
    assert vol_curves(cfg, res)["FIRST"]["log_v"].tolist() == [-4.0, -5.0]
    assert vol_curves(cfg, res, "PARITY")["FIRST"]["log_v"].tolist() == [-3.0]


def test_the_volume_certificates_are_ordered_and_the_attack_brackets_the_cube():
    """vol_one's certificates around the best point: the affine cube at least the interval
    one (up to the bisections' tolerances), the attack's breaking radius above the affine
    radius (the cube is sound against it), and the cube at r_up at least the certified one;
    in the construction's space no attack runs."""
    import math

    from sensbook.experiments import ch5_certified as cc
    sizes = dict(n=60, runs=2, moves=3, step=0.25, max_levels=6, n_max=120, readouts=32)
    for space, attack in (("small", cc.ATTACK_SEARCH["ci"]), ("PARITY", None)):
        c = dict(target="FIRST", N=2, margin=cc.MARGIN, seed=3, space=space,
                 **cc.VOL_SPACES[space], attack=attack, **sizes)
        r = cc.vol_one(c)
        assert r["r_tight"] > 0 and r["certified"] is not None, r
        if r["certified_interval"] is not None:
            slack = r["M"] * math.log(1 + cc.TIGHT_RTOL)
            assert r["certified"] >= r["certified_interval"] - slack, r
        if attack is None:
            assert r["r_up"] is None and r["cube_upper"] is None, r
        else:
            assert r["r_up"] is None or r["r_up"] > r["r_tight"], r
            assert r["cube_upper"] >= r["certified"], r
