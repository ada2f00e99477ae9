"""The hinge instruments (sensbook/hinge.py): Lemma 2.9's two sides, the sensitivity of x
through k bits, the worst-case search of the flip."""
import numpy as np
import pytest
import torch

import sensbook as sb


@pytest.fixture(scope="module")
def pop():
    return sb.Recognizer.random(5, 8, 2, 2, init="xavier_uniform", seed=4, dtype=torch.float64)


def test_flip_hinge_equals_flip_influence_and_independent_blowups(pop):
    x = sb.random_strings(7, 3, seed=1)
    bits = torch.tensor([0, 3, 6])
    h = sb.flip_hinge(pop, x, bits, chunk=2)
    assert torch.allclose(h["dT"], sb.flip_influence(pop, x, bits).to(h["dT"].dtype))
    for j, i in enumerate(bits):
        y = x.clone()
        y[:, i] = 1 - y[:, i]
        assert torch.allclose(h["beta_pair"][..., j], sb.blowup(pop, x) * sb.blowup(pop, y))
        assert torch.allclose(h["T_flip"][..., j], pop(y))
    assert torch.allclose(h["T"], pop(x))


def test_flip_hinge_passes_fit_the_budget_and_change_nothing(pop, monkeypatch):
    """Each forward pass holds at most the strings the budget allows; one string whose flips
    do not fit has them evaluated in groups (paper scale: N = 1024 asked 72 GiB of an H200)."""
    x = sb.random_strings(7, 5, seed=2)
    whole = sb.flip_hinge(pop, x)                                # 1 GiB: one pass
    sizes, trace = [], pop.trace
    monkeypatch.setattr(pop, "trace", lambda xs: (sizes.append(len(xs)), trace(xs))[1])
    for rows in (3, 8, 20):                  # a group of 2 flips; whole strings; several strings
        sizes.clear()
        mb = rows * pop.memory_per_string(7) / 2**20
        h = sb.flip_hinge(pop, x, memory_mb=mb)
        assert max(sizes) <= rows and sum(sizes) >= 5 * 8, (rows, sizes)
        for k in whole:
            assert torch.allclose(h[k], whole[k], rtol=1e-12, atol=0), (rows, k)
    assert sizes == [16, 16, 8]                     # rows 20: two strings (with 7 flips) a pass


def test_flip_sensitivity_is_the_profilers_sensitivity_over_all_bits(pop):
    N = 5
    x = sb.strings(N)
    h = sb.flip_hinge(pop, x, blowups=False)
    s = sb.flip_sensitivity(h["T"], h["T_flip"], 0.0)           # (P, 2^N)
    counts = torch.stack([torch.bincount(r, minlength=N + 1) for r in s])
    prof = sb.sensitivity_profile(pop, N, margin=0.0, progress=False)
    assert torch.equal(counts, prof.counts)


def test_flip_sensitivity_refuses_nan():
    with pytest.raises(ValueError, match="NaN"):
        sb.flip_sensitivity(torch.tensor([[float("nan")]]), torch.zeros(1, 1, 2))


def test_lemma29_ratio_and_its_errors():
    r = sb.lemma29_ratio(10, np.array([0.1, 0.2]), np.array([2.0, np.inf]))
    assert np.allclose(r, [0.5, 0.0])
    with pytest.raises(ValueError, match="same shape"):
        sb.lemma29_ratio(10, np.zeros(2), np.zeros(3))


def test_construction_flips_by_two_through_bit_one():
    m = sb.first_transformer()
    x = sb.random_strings(9, 1, seed=2).double()
    dT = sb.flip_hinge(m, x, blowups=False)["dT"][0, 0]
    assert abs(dT[0].item() - 2) < 1e-12 and dT[1:].abs().max() < 1e-12
    start, end = sb.maximise_influence(m, x, sb.flip_bits(9, 4), steps=5)
    assert start[0] == pytest.approx(2.0) and np.isfinite(end).all()


def test_search_raises_the_flip_of_random_starts():
    m = sb.Recognizer.random(2, 6, 1, 1, init="uniform", seed=0, dtype=torch.float64)
    x = sb.random_strings(8, 1, seed=0)
    start, end = sb.maximise_influence(m, x, sb.flip_bits(8, 4), steps=40)
    assert (end > 2 * start).all(), (start, end)
    for p in m.parameters():
        assert p.abs().max() <= 1.0


@pytest.mark.parametrize("kw, match", [({"steps": 0}, "steps"), ({"box": 0.0}, "box"),
                                       ({"lr": (1e-3, 1e-2)}, "lr")])
def test_search_rejects_bad_arguments(kw, match):
    m = sb.Recognizer.random(1, 4, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=match):
        sb.maximise_influence(m, sb.random_strings(4, 1), [0], **kw)


# ---- issue 30: what is not a string, a bit position or a step size is refused
@pytest.mark.parametrize("call, match", [
    (lambda m, x: sb.flip_hinge(m, x, bits=[1.7]), "bits must be .*integer positions"),
    (lambda m, x: sb.flip_hinge(m, x, bits=torch.tensor([True, False, True, False])),
     "not a mask"),
    (lambda m, x: sb.flip_hinge(m, x, bits=[4]), "positions in 0..3"),
    (lambda m, x: sb.flip_hinge(m, 2 * x, bits=[0]), "x must be binary"),
    (lambda m, x: sb.flip_hinge(m, -x, bits=[0]), "x must be binary"),
    (lambda m, x: sb.flip_influence(m, 2 * x, bits=[0]), "x must be binary"),
    (lambda m, x: sb.maximise_influence(m, x[:1], bits=[1.7], steps=2), "bits must be"),
    (lambda m, x: sb.maximise_influence(m, x[:1], bits=[], steps=2), "at least one position"),
    (lambda m, x: sb.maximise_influence(m, x[:1], [0], steps=2, lr=(float("inf"), 1e-4)),
     "lr\\[0\\] must be a finite number"),
    (lambda m, x: sb.maximise_influence(m, x[:1], [0], steps=2, lr=0.05), "lr must be a pair"),
    (lambda m, x: sb.geometry.maximise_blowup(m, x[:1], steps=2, lr=(0.05, float("nan"))),
     "lr\\[1\\]"),
])
def test_the_flip_instruments_refuse_what_is_not_a_string_a_bit_or_a_step(call, match):
    m = sb.Recognizer.random(2, 4, 1, 1, seed=0, dtype=torch.float64)
    x = sb.random_strings(4, 3, seed=1).double()
    with pytest.raises((TypeError, ValueError), match=match):
        call(m, x)


def test_flip_hinge_of_no_strings_is_empty_and_min_margin_of_none_an_error():
    m = sb.Recognizer.random(2, 4, 1, 1, seed=0, dtype=torch.float64)
    h = sb.flip_hinge(m, torch.zeros(0, 5), bits=[0, 4])
    assert h["T"].shape == (2, 0) and h["dT"].shape == h["beta_pair"].shape == (2, 0, 2)
    # the same positions as a numpy array or an integer tensor give the same flips
    x = sb.random_strings(5, 2, seed=3)
    a = sb.flip_hinge(m, x, bits=np.array([0, 4]))["dT"]
    assert torch.equal(a, sb.flip_hinge(m, x, bits=torch.tensor([0, 4]))["dT"])
    with pytest.raises(ValueError, match="at least one string"):
        sb.min_margin(m, torch.zeros(0, 5))


def test_lemma29_slope_recovers_a_known_power_and_its_envelope():
    # flips N |dT| = c (beta beta')^s U: least squares finds s (log U has mean -1 for U
    # uniform, a shift only), the 99% envelope the slope of the upper edge, s as well
    from sensbook.hinge import lemma29_slope
    rng = np.random.default_rng(0)
    for s in (0.3, 0.7, 1.0):
        bb = np.exp(rng.uniform(3, 11, (600, 8)))
        y = 0.01 * bb**s * rng.uniform(0, 1, bb.shape)
        ls, lo, hi = lemma29_slope(y, bb, n_boot=100)
        assert lo < s < hi and abs(ls - s) < 0.03, (s, ls, lo, hi)
        env = lemma29_slope(y, bb, q=0.99, n_boot=100)
        assert abs(env[0] - s) < 0.05 and env[1] < s < env[2] + 0.02, (s, env)
    # an envelope that bends (slope 1 below beta beta' = e^7, flat above): slope between
    bb = np.exp(rng.uniform(3, 11, (600, 8)))
    y = np.minimum(bb, np.exp(7)) * rng.uniform(0, 1, bb.shape)
    assert 0.2 < lemma29_slope(y, bb, q=0.99, n_boot=50)[0] < 0.8
    with pytest.raises(ValueError, match="q must be None"):
        lemma29_slope(y, bb, q=1.5)
    with pytest.raises(ValueError, match="one shape"):
        lemma29_slope(y[:, :3], bb)


# ---- issue 34: the search run to convergence ------------------------------------------------
def test_converged_influence_doubles_until_the_best_flip_settles():
    """From the danger-zone threshold at eps = 0 the best flip is the ceiling 2 B D from the
    start: the first doubling changes nothing and the search stops there; the random starts
    still moved (different end points for different step counts)."""
    N, B = 12, 0.1
    x = sb.random_strings(N, 1, seed=1).double()
    start = sb.count_threshold_transformer(int(x.sum()), N, B=B)
    rnd = sb.Recognizer.random(2, 12, 2, 1, 8, init="uniform", scale=B, seed=0,
                               dtype=torch.float64)
    make = lambda: rnd.like(3).set_flat(torch.cat([start.flat(), rnd.flat()]))
    r = sb.converged_influence(make, x, sb.flip_bits(N, 4), steps=5, cap=40,
                               lr=(0.5 * B, 0.01 * B), box=B)
    assert r["steps"] == [5, 10] and r["converged"]
    assert r["best"] == pytest.approx([2 * B * 12] * 2, rel=1e-9)
    assert not np.array_equal(r["ends"][0][1:], r["ends"][1][1:])
    assert np.array_equal(r["start"], sb.flip_hinge(make(), x, blowups=False)["dT"].amax((1, 2))
                          .numpy())


def test_converged_influence_censors_at_the_cap():
    """A few-step search of random starts (the flip still grows several-fold per doubling)
    reaches the cap unconverged: every step count up to the cap is run, none beyond."""
    m = lambda: sb.Recognizer.random(2, 6, 1, 1, init="uniform", seed=0, dtype=torch.float64)
    x = sb.random_strings(8, 1, seed=0)
    r = sb.converged_influence(m, x, sb.flip_bits(8, 4), steps=1, cap=4, lr=(0.05, 1e-4))
    assert r["steps"] == [1, 2, 4] and len(r["ends"]) == 3
    b = r["best"]
    assert r["converged"] == (abs(b[-1] - b[-2]) < 0.1 * max(b[-2:]))


@pytest.mark.parametrize("kw, match", [(dict(steps=0, cap=4), "steps must"),
                                       (dict(steps=4, cap=7), "cap"),
                                       (dict(steps=2, cap=4, tol=1.0), "tol")])
def test_converged_influence_rejects_bad_arguments(kw, match):
    m = lambda: sb.Recognizer.random(1, 4, 1, dtype=torch.float64)
    with pytest.raises(ValueError, match=match):
        sb.converged_influence(m, sb.random_strings(4, 1), [0], **kw)
