"""sensbook.geometry: each measurement against an independent computation or a
theorem."""

import math

import numpy as np
import pytest
import torch

import sensbook as sb


def small(P=5, D=8, L=2, eps=0.1, seed=0, **kw):
    return sb.Recognizer.random(
        P=P,
        D=D,
        L=L,
        H=2,
        eps=eps,
        init="xavier_uniform",
        seed=seed,
        dtype=torch.float64,
        **kw,
    )


def test_blowup_bound_formula_and_that_it_holds_for_every_model_and_string():
    assert sb.blowup_bound(1.0, 2) == 16.0
    assert sb.blowup_bound(0.0, 1) == math.inf
    for eps in (1e-4, 1e-2, 1.0):
        for scale in (1.0, 1e-3):  # a tiny scale drives every first-LN variance to ~0
            m = small(P=16, L=2, eps=eps, scale=scale)
            beta = sb.blowup(m, sb.random_strings(6, 8, seed=1))
            assert (beta <= sb.blowup_bound(eps, 2) * (1 + 1e-12)).all()


def test_blowup_bound_is_attained_factor_by_factor_when_variances_vanish():
    # every parameter ~ 1e-6: the first LN input has variance ~1e-12 << eps, so its
    # factor
    # max_n (1 + z) is within 1e-6 of the cap 1 + 1/sqrt(eps)
    eps = 1e-2
    m = small(P=4, L=1, eps=eps, scale=1e-6)
    _, tr = m.trace(sb.random_strings(5, 3, seed=2))
    cap = 1 + 1 / math.sqrt(eps)
    assert torch.allclose(
        tr.tau[..., 0], torch.full_like(tr.tau[..., 0], cap), rtol=1e-6
    )


def test_with_flips_flips_exactly_one_bit():
    x = sb.random_strings(7, 3, seed=0)
    bits = torch.tensor([0, 3, 6])
    xs = sb.with_flips(x, bits)
    assert xs.shape == (3, 4, 7)
    assert torch.equal(xs[:, 0], x)
    diff = xs[:, 1:] != x.unsqueeze(1)
    assert (diff.sum(-1) == 1).all()
    assert torch.equal(diff.float().argmax(-1), bits.expand(3, 3))


def test_flip_bits_covers_ends_and_both_parities():
    b = sb.flip_bits(100, 8)
    assert b[0] == 0 and b[-1] == 99 and (b[1:] > b[:-1]).all()
    assert {int(i) % 2 for i in b} == {0, 1}
    assert torch.equal(sb.flip_bits(5, 10), torch.arange(5))


def test_sampled_influence_on_all_strings_equals_the_exhaustive_table():
    m = small(P=4, L=2)
    N = 6
    allx = sb.index_to_strings(torch.arange(2**N), N, dtype=torch.float32)
    sampled = sb.flip_influence(m, allx, chunk=13).amax((1, 2))  # (P,)
    exhaustive = sb.exhaustive_influence(m, N)
    assert torch.allclose(sampled, exhaustive, atol=1e-12)


def test_influence_matches_a_one_string_at_a_time_computation():
    m = small(P=2, L=1)
    x = sb.random_strings(9, 2, seed=3)
    inf = sb.flip_influence(m, x, [2, 5])
    for b in range(2):
        for j, i in enumerate([2, 5]):
            y = x[b].clone()
            y[i] = 1 - y[i]
            want = (m(x[b : b + 1]) - m(y.unsqueeze(0))).abs()[:, 0]
            assert torch.allclose(inf[:, b, j], want, atol=1e-12)


def test_output_table_and_recognition_agree_with_the_profiler():
    m = small(P=6, L=2)
    N, xi = 5, 0.02
    r = sb.recognition(m, N, xi, chunk=7)
    assert torch.equal(r.table, sb.truth_table(m, N, margin=xi, progress=False))
    assert torch.allclose(
        r.T,
        m(sb.index_to_strings(torch.arange(2**N), N, dtype=torch.float64)),
        atol=1e-12,
    )
    prof = sb.profile_from_table(r.table)
    assert torch.equal(r.recognises, (prof.undecided + prof.nonfinite) == 0)
    assert torch.equal(r.constant, prof.is_constant)
    assert not (r.constant & r.nonconstant).any()


def test_recognising_a_nonconstant_function_needs_a_flip_of_at_least_two_margins():
    # Cor. 3.4's mechanism, on many models and lengths
    m = sb.Recognizer.random(P=300, D=8, L=1, eps=0.1, init="xavier_uniform", seed=4)
    seen = 0
    for N in (1, 2, 3, 4):
        r = sb.recognition(m, N, 0.02)
        seen += int(r.nonconstant.sum())
        assert (r.influence[r.nonconstant] >= 2 * 0.02).all()
    assert seen > 0


def test_distinct_functions_counts_unique_fully_decided_rows():
    t = torch.tensor(
        [[0, 1, 1, 0], [0, 1, 1, 0], [1, 1, 1, 1], [0, -1, 1, 0], [0, 0, 0, 0]],
        dtype=torch.int8,
    )
    assert sb.distinct_functions(t) == 3
    assert sb.distinct_functions(t[3:4]) == 0
    with pytest.raises(ValueError, match="table"):
        sb.distinct_functions(t[0])


def test_lipschitz_gradient_predicts_finite_differences():
    m = small(P=3, L=2, eps=0.05)
    x = sb.random_strings(6, 2, seed=5)
    theta = m.flat()
    g = torch.Generator().manual_seed(0)
    u = torch.randn(theta.shape, generator=g, dtype=torch.float64)
    h = 1e-6
    plus = m.like().set_flat(theta + h * u)
    minus = m.like().set_flat(theta - h * u)
    fd = (plus(x) - minus(x)) / (2 * h)  # directional derivatives
    # the same derivative from autograd, and the dual-norm bound |grad . u| <=
    # ||grad||_1 ||u||_inf
    params = list(m.parameters())
    for b in range(2):
        grads = torch.autograd.grad(m(x[b : b + 1]).sum(), params)
        gr = torch.cat([q.reshape(3, -1) for q in grads], 1)
        assert torch.allclose((gr * u).sum(1), fd[:, b].detach(), rtol=1e-5, atol=1e-8)
    lip1 = sb.lipschitz_theta(m, x, norm=1)
    assert (
        (fd.detach().abs() <= lip1 * u.abs().amax(1, keepdim=True) * (1 + 1e-6))
    ).all()
    lip2 = sb.lipschitz_theta(m, x, norm=2)
    M = theta.shape[1]
    assert (lip2 <= lip1 + 1e-12).all() and (
        lip1 <= math.sqrt(M) * lip2 * (1 + 1e-12)
    ).all()


@pytest.mark.parametrize("a", [0.5, 1.5, 3.0])
def test_small_ball_exponent_recovers_a_known_exponent(a):
    # v = U^(1/a) has P(v < t) = t^a exactly: the Hill estimate is within 4 standard
    # errors
    rng = np.random.default_rng(0)
    v = rng.random(200_000) ** (1 / a)
    est, se, t0, k = sb.small_ball_exponent(v, k=2000)
    assert abs(est - a) < 4 * se and se == pytest.approx(est / math.sqrt(2000))
    p, pse = sb.small_ball_cdf(v, [t0])
    assert abs(p[0] - t0**a) < 4 * pse[0] + 1e-12


def test_variance_of_centred_gaussians_has_exponent_d_minus_one_over_two():
    # var of D i.i.d. N(0,1) coordinates is chi^2_{D-1} / D: P(var < t) ~ c t^((D-1)/2)
    rng = np.random.default_rng(1)
    for D in (2, 3, 5):
        d = rng.standard_normal((300_000, D))
        v = d.var(1)
        est, se, _, _ = sb.small_ball_exponent(v, k=1000)
        assert abs(est - (D - 1) / 2) < 4 * se


def test_layer_norm_variances_match_the_trace_and_chunking_is_seeded():
    v = sb.layer_norm_variances(3, 10, chunk=4, seed=7, progress=False)
    x = sb.random_strings(4, 1, seed=7)
    parts = [
        sb.Recognizer.random(n, 3, 1, 1, seed=7 + j, dtype=torch.float64)
        .trace(x)[1]
        .variances[:, 0, 0, -1]
        for j, n in enumerate((4, 4, 2))
    ]
    assert torch.allclose(v, torch.cat(parts))
    with pytest.raises(ValueError, match="which"):
        sb.layer_norm_variances(3, 10, which=2, progress=False)


def test_danger_center_has_zero_eos_variance_and_the_ball_is_an_linf_ball():
    N = 8
    c = sb.danger_center(N, D=4, L=1, seed=3)
    x = sb.random_strings(N, 3, seed=0)
    _, tr = c.trace(x)
    assert (tr.variances[0, :, 0, -1] < 1e-25).all()  # zero up to rounding, any string
    assert (
        tr.variances[0, :, 0, :-1] > 1e-6
    ).all()  # only the eos position is in danger
    c.eps = 1e-2
    assert (c.trace(x)[1].beta <= sb.blowup_bound(1e-2, 1)).all()
    ball = sb.perturb(c, 0.1, 50, kind="uniform", seed=1)
    d = ball.flat() - c.flat()
    assert d.abs().max() <= 0.1 and d.abs().max() > 0.09 and ball.eps == c.eps


def test_exceedance_and_errors():
    p, se = sb.exceedance(torch.arange(10.0), [4.5, 100])
    assert p.tolist() == [0.5, 0.0] and se[0] == pytest.approx(math.sqrt(0.25 / 10))
    with pytest.raises(ValueError, match="eps"):
        sb.blowup_bound(-1, 2)
    with pytest.raises(TypeError, match="model"):
        sb.flip_influence("not a model", torch.zeros(1, 3))
    with pytest.raises(ValueError, match="margin"):
        sb.recognition(small(P=1), 3, 0.0)


def test_power_slope_interval_recovers_an_exact_power_and_brackets_a_noisy_one():
    Ns = np.array([8, 16, 32, 64, 128])
    a = np.random.default_rng(0).uniform(0.5, 2.0, size=(30, 1))
    sl, lo, hi = sb.geometry.power_slope_interval(Ns, a * Ns**-1.0, n_boot=200)
    assert (
        sl == pytest.approx(-1.0)
        and lo == pytest.approx(-1.0)
        and hi == pytest.approx(-1.0)
    )
    noisy = a * Ns**-0.5 * np.random.default_rng(1).lognormal(0, 0.3, size=(30, 5))
    sl, lo, hi = sb.geometry.power_slope_interval(Ns, noisy, n_boot=500)
    assert lo < sl < hi and lo < -0.5 < hi and hi - lo < 0.3
    with pytest.raises(ValueError, match="samples"):
        sb.geometry.power_slope_interval(Ns, noisy[:, :3])
    with pytest.raises(ValueError, match="positive"):
        sb.geometry.power_slope_interval(Ns, -noisy)


def test_log_blowup_is_the_log_of_the_traced_blowup():
    m = small(P=3, L=2, eps=0.01)
    x = sb.random_strings(7, 4, seed=2)
    got = sb.geometry._log_blowup(m, x).detach()
    assert torch.allclose(got, torch.log(sb.blowup(m, x)), rtol=1e-12)


def test_maximise_blowup_stays_in_the_box_and_under_the_cap_and_passes_it_at_eps_zero():
    x = sb.random_strings(4, 1, seed=4)
    best = {}
    for eps in (0.0, 1e-2):
        m = sb.Recognizer.random(
            2, 4, 1, 1, eps=eps, init="uniform", seed=1, dtype=torch.float64
        )
        steps, beta = sb.geometry.maximise_blowup(
            m, x, steps=150, lr=(0.05, 1e-6), every=50
        )
        assert steps.tolist() == [0, 50, 100, 150] and beta.shape == (4, 2, 1)
        assert m.flat().abs().max() <= 1.0  # the box
        assert np.allclose(
            beta[-1], sb.blowup(m, x).numpy()
        )  # the last record is theta's
        assert (beta[-1] > beta[0]).all()  # ascent
        best[eps] = beta.max()
        if eps > 0:
            assert (beta <= sb.blowup_bound(eps, 1) * (1 + 1e-12)).all()
    assert best[0.0] > sb.blowup_bound(1e-2, 1)  # eps = 0: past the eps = 1e-2 cap
    with pytest.raises(ValueError, match="lr"):
        sb.geometry.maximise_blowup(m, x, lr=(1e-3, 1e-2))


