"""Interval bounds of T over a box of parameters (sensbook/certify.py) against sampled models,
the exact forward pass, and a fine grid."""
import itertools
import math
import signal

import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.certify import certified_radius, certify, interval_matmul, output_bounds
from sensbook.constructions import BUILDERS, target
from sensbook.controls import Transformer


def _in_box(model, radius, P, seed):
    """P models in the box: half uniform inside, half at random corners."""
    g = torch.Generator().manual_seed(seed)
    theta = model.flat().double()
    u = torch.rand(P, model.M, generator=g, dtype=torch.float64) * 2 - 1
    u[P // 2:] = torch.sign(u[P // 2:])
    pop = sb.Recognizer(P, model.D, model.L, model.H, model.F, model.eps,
                        mark_first=model.mark_first, dtype=torch.float64)
    return pop.set_flat(theta + u * radius)


def _radius(model, kind, r, g):
    if kind == "scalar":
        return r
    rad = torch.zeros(model.M, dtype=torch.float64)
    names = [n for n, _ in model.named_parameters()]
    sizes = [p[0].numel() for _, p in model.named_parameters()]
    starts = np.cumsum([0] + sizes)
    if kind == "one-layer":                      # only the parameters of one layer move
        l = int(torch.randint(model.L, (1,), generator=g))
        for n, a, b in zip(names, starts[:-1], starts[1:]):
            if n.startswith(f"layers.{l}."):
                rad[a:b] = r
    else:                                        # a random subset, random radii
        mask = torch.rand(model.M, generator=g) < 0.3
        rad[mask] = r * torch.rand(int(mask.sum()), generator=g, dtype=torch.float64)
    return rad


CASES = [(D, L, H, eps, init, kind)
         for (D, L, H), eps, init, kind in itertools.product(
             [(2, 1, 1), (3, 2, 1), (4, 1, 2), (4, 2, 2), (6, 2, 3)], [0.0, 0.01, 0.5],
             ["uniform", "xavier_normal"], ["scalar", "one-layer", "subset"])]


@pytest.mark.parametrize("D,L,H,eps,init,kind", CASES)
def test_no_sampled_model_in_the_box_leaves_the_bounds(D, L, H, eps, init, kind):
    seed = hash((D, L, H, eps, init, kind)) % 10_000
    g = torch.Generator().manual_seed(seed)
    model = sb.Recognizer.random(1, D, L, H, eps=eps, init=init, seed=seed, dtype=torch.float64)
    x = sb.strings(3).double()
    for r in (1e-4, 1e-2, 0.2):
        rad = _radius(model, kind, r, g)
        b = output_bounds(model, x, rad)
        T = _in_box(model, rad, 64, seed + 1)(x)                          # (P, B)
        finite = torch.isfinite(T)
        # a sampled NaN (zero-variance layer norm at eps = 0) only where it is uncertifiable
        assert b.uncertifiable[(~finite).any(0)].all()
        tol = 1e-9 * (1 + T.abs())
        assert ((T >= b.lo - tol) | ~finite).all() and ((T <= b.hi + tol) | ~finite).all()
        assert (b.lo <= b.hi).all()


@pytest.mark.parametrize("name", ["FIRST_HARD", "FIRST", "MAJORITY", "PARITY"])
def test_constructions_stay_in_their_bounds_and_r0_is_exact(name):
    model = BUILDERS[name]()
    x = sb.strings(5).double()
    T = model(x)[0]
    b = output_bounds(model, x, 0.0)
    assert not b.uncertifiable.any()
    assert torch.allclose(b.lo, T, atol=1e-12) and torch.allclose(b.hi, T, atol=1e-12)
    for r in (1e-6, 1e-4, 1e-3):
        b = output_bounds(model, x, r)
        Ts = _in_box(model, r, 64, 3)(x)
        ok = torch.isfinite(Ts)
        assert b.uncertifiable[(~ok).any(0)].all()
        assert ((Ts >= b.lo - 1e-9) | ~ok).all() and ((Ts <= b.hi + 1e-9) | ~ok).all()


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_radius_zero_gives_T_exactly(eps):
    for seed in range(6):
        m = sb.Recognizer.random(1, 4, 2, 2, eps=eps, seed=seed, dtype=torch.float64)
        x = sb.strings(4).double()
        T = m(x)[0]
        b = output_bounds(m, x, 0.0)
        ok = torch.isfinite(T)
        assert torch.allclose(b.lo[ok], T[ok], rtol=1e-10, atol=1e-12)
        assert torch.allclose(b.hi[ok], T[ok], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("eps", [0.0, 0.05])
def test_bounds_widen_monotonically_in_r(eps):
    m = sb.Recognizer.random(1, 6, 2, 2, eps=eps, init="xavier_normal", seed=4,
                             dtype=torch.float64)
    x = sb.strings(4).double()
    prev = output_bounds(m, x, 0.0)
    for r in np.logspace(-6, -0.5, 12):
        b = output_bounds(m, x, float(r))
        assert (b.lo <= prev.lo + 1e-12).all() and (b.hi >= prev.hi - 1e-12).all()
        assert (b.uncertifiable >= prev.uncertifiable).all()
        prev = b


def _no_ln(model, theta, x):
    """T of the no-LN control (sensbook.controls, norm='none') with the parameters theta."""
    m = model.like().set_flat(theta[None])
    ctl = Transformer(model.D, 1, 1, model.F, norm="none").double()
    with torch.no_grad():
        for (n, p), (n2, q) in zip(m.named_parameters(), ctl.named_parameters()):
            assert n == n2
            q.copy_(p[0])
    return ctl(x)


def _index(model, name, idx):
    """The position in Recognizer.flat() of parameter ``name`` at ``idx``."""
    i = 0
    for n, p in model.named_parameters():
        if n == name:
            return i + int(np.ravel_multi_index(idx, p.shape[1:]))
        i += p[0].numel()
    raise KeyError(name)


@pytest.mark.parametrize("seed", range(2))
def test_one_layer_without_layer_norm_contains_the_exact_range_on_a_grid(seed):
    m = sb.Recognizer.random(1, 3, 1, 1, F=4, seed=seed, dtype=torch.float64)
    x = sb.strings(3).double()
    theta0 = m.flat()[0]
    b0 = output_bounds(m, x, 0.0, layer_norm=False)
    assert torch.allclose(b0.lo, _no_ln(m, theta0, x), atol=1e-12)   # the control's network
    r = 0.3
    for pair in ((("layers.0.Wq", (0, 1)), ("layers.0.W1", (2, 0))),
                 (("tok", (1, 0)), ("layers.0.Wv", (1, 2))), (("pos", (0, 2)),)):
        idx = [_index(m, n, i) for n, i in pair]
        rad = torch.zeros(m.M, dtype=torch.float64)
        rad[idx] = r
        b = output_bounds(m, x, rad, layer_norm=False)
        grid = np.linspace(-r, r, 41)
        Ts = []
        for deltas in itertools.product(grid, repeat=len(idx)):
            th = theta0.clone()
            th[idx] += torch.tensor(deltas, dtype=torch.float64)
            Ts.append(_no_ln(m, th, x))
        Ts = torch.stack(Ts)
        assert (Ts.amin(0) >= b.lo - 1e-12).all() and (Ts.amax(0) <= b.hi + 1e-12).all()
    # the read-out enters T once, linearly: there the bounds are the exact range
    idx = [_index(m, "w", (1,)), _index(m, "omega", ())]
    rad = torch.zeros(m.M, dtype=torch.float64)
    rad[idx] = r
    b = output_bounds(m, x, rad, layer_norm=False)
    corners = []
    for s1, s2 in itertools.product((-r, r), repeat=2):
        th = theta0.clone()
        th[idx] += torch.tensor([s1, s2], dtype=torch.float64)
        corners.append(_no_ln(m, th, x))
    corners = torch.stack(corners)
    assert torch.allclose(b.lo, corners.amin(0), atol=1e-12)
    assert torch.allclose(b.hi, corners.amax(0), atol=1e-12)


def test_interval_matmul_is_the_exact_termwise_range():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        hl = torch.randn(5, 4, generator=g, dtype=torch.float64)
        hh = hl + torch.rand(5, 4, generator=g, dtype=torch.float64)
        W0 = torch.randn(4, 3, generator=g, dtype=torch.float64)
        W0[0, 0] = 0.0
        r = torch.rand((), generator=g, dtype=torch.float64)
        lo, hi = interval_matmul(hl, hh, W0 - r, W0 + r)
        c = torch.stack([a[..., None] * w for a in (hl, hh) for w in (W0 - r, W0 + r)])
        assert torch.allclose(lo, c.amin(0).sum(1)) and torch.allclose(hi, c.amax(0).sum(1))


def test_zero_variance_at_eps_zero_is_uncertifiable_not_certified():
    # MAJORITY at even N: a tie string has a zero eos vector (LN_0 undefined)
    model = BUILDERS["MAJORITY"]()
    x = sb.strings(4).double()
    b = output_bounds(model, x, 0.0)
    tie = x.sum(1) == 2
    assert torch.equal(b.uncertifiable, tie)
    assert torch.isinf(b.lo[tie]).all() and torch.isinf(b.hi[tie]).all()
    res = certify(model, x, target("MAJORITY")(x), 0.0)
    assert not res["certified"] and res["n_uncertifiable"] == int(tie.sum())
    model.eps = 0.1                                    # eps > 0: never uncertifiable
    assert not output_bounds(model, x, 1e-3).uncertifiable.any()


def test_certified_radius_is_a_radius_where_sampled_models_are_exact():
    model = BUILDERS["MAJORITY"]()
    N = 5
    x = sb.strings(N).double()
    res = certified_radius(model, x, target("MAJORITY")(x))
    r = res["radius"]
    assert 0 < r < res["upper"] <= r * 1.011
    assert certify(model, x, target("MAJORITY")(x), r)["certified"]
    assert not certify(model, x, target("MAJORITY")(x), res["upper"])["certified"]
    ag = sb.agreement(_in_box(model, r, 200, 5), sb.MAJORITY, N)
    assert ag.exact.all()


def test_bad_arguments_are_named():
    m = sb.first_hard_transformer()
    x = sb.strings(3).double()
    with pytest.raises(ValueError, match="radius"):
        output_bounds(m, x, -1.0)
    with pytest.raises(ValueError, match="radius"):
        output_bounds(m, x, torch.zeros(3))
    with pytest.raises(ValueError, match="P = 1"):
        output_bounds(sb.Recognizer.random(2, 4, 1), x, 0.0)
    with pytest.raises(ValueError, match="r_min"):
        certified_radius(m, x, target("FIRST")(x), r_min=0.0)


# ---- issue 48, items 4, 10 and 13: certificates refuse what they cannot mean ------------
def _maj5():
    m = BUILDERS["MAJORITY"]()
    x = sb.strings(5).double()
    return m, x, target("MAJORITY")(x)


@pytest.mark.parametrize("margin", [-10.0, float("nan"), float("inf")])
def test_margin_must_be_finite_and_nonnegative(margin):
    m, x, y = _maj5()
    with pytest.raises(ValueError, match="margin"):
        certify(m, x, y, 0.5, margin=margin)
    with pytest.raises(ValueError, match="margin"):
        certified_radius(m, x, y, margin=margin)


@pytest.mark.parametrize("pad", [-1.0, float("nan")])
def test_pad_must_be_finite_and_nonnegative(pad):
    m, x, y = _maj5()
    with pytest.raises(ValueError, match="pad"):
        certify(m, x, y, 0.0, pad=pad)


def test_nan_bounds_count_as_failed_never_certified():
    m, x, y = _maj5()
    res = certify(m, x, y, 1e300)                         # inf - inf inside: NaN bounds
    assert not res["certified"] and res["n_failed"] == len(x)
    bad = m.like()
    theta = m.flat().clone()
    theta[0, 0] = float("nan")
    bad.set_flat(theta)
    res = certify(bad, x, y, 0.0)
    assert not res["certified"] and res["n_failed"] > 0 and math.isnan(res["min_margin"])
    assert certified_radius(bad, x, y)["radius"] == 0.0


def _within(seconds, fn):
    """fn() or TimeoutError after ``seconds`` (the old bisection never returned)."""
    def stop(*a):
        raise TimeoutError("did not return")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        return fn()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("rtol", [0.0, -0.5, float("nan"), float("inf")])
def test_rtol_is_checked(rtol):
    m, x, y = _maj5()
    with pytest.raises(ValueError, match="rtol"):
        _within(20, lambda: certified_radius(m, x, y, rtol=rtol))


def test_bisection_stops_when_the_midpoint_stops_moving():
    m, x, y = _maj5()
    res = _within(30, lambda: certified_radius(m, x, y, rtol=1e-17))
    assert 0 < res["radius"] < res["upper"] and res["steps"] < 200
    assert res["upper"] <= math.nextafter(math.nextafter(res["radius"], 2), 2)


def test_numbers_of_every_kind_are_accepted_and_others_named():
    m, x, y = _maj5()
    ref = output_bounds(m, x, 1e-3)
    for r in (np.float32(1e-3), np.float64(1e-3), np.array(1e-3), torch.tensor(1e-3)):
        b = output_bounds(m, x, r)
        assert torch.allclose(b.lo, ref.lo, rtol=1e-5) and torch.allclose(b.hi, ref.hi, rtol=1e-5)
    assert torch.equal(output_bounds(m, x, 1e-3, chunk=np.int64(7)).lo, ref.lo)
    for chunk in (0, -1, 1.5, True):
        with pytest.raises((TypeError, ValueError), match="chunk"):
            output_bounds(m, x, 1e-3, chunk=chunk)
    with pytest.raises(ValueError, match="r_max"):
        certified_radius(m, x, y, r_max=float("inf"))
    with pytest.raises(ValueError, match="strings"):
        output_bounds(m, x[:0], 1e-3)
    res = certified_radius(m, x, y, margin=np.float32(0.0), r_max=np.float64(1.0),
                           rtol=np.float32(0.05), chunk=np.int64(8))
    assert res["radius"] > 0


def test_output_bounds_keep_to_the_memory_budget_and_refuse_one_that_cannot_hold_a_string():
    """Issue 48 item 11: the attention's (chunk, H, S, S) interval corners grow past any budget
    at long N; output_bounds cuts its chunk to ``memory_mb`` (same bounds, chunk by chunk) and
    refuses, before allocating, a budget below one string."""
    from sensbook.certify import _bytes_per_string
    m = sb.Recognizer.random(1, 8, 2, 2, eps=0.1, seed=0, dtype=torch.float64)
    x = sb.strings(6)
    whole = sb.output_bounds(m, x, 1e-3)
    one = _bytes_per_string(m, 6) / 2**20
    cut = sb.output_bounds(m, x, 1e-3, memory_mb=3 * one)           # three strings at a time
    # the same bounds (to float64 rounding: a batched product's order depends on the batch)
    assert torch.allclose(whole.lo, cut.lo, rtol=1e-12, atol=1e-12)
    assert torch.allclose(whole.hi, cut.hi, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="memory_mb=.* cannot hold the bounds of one string"):
        sb.output_bounds(m, x, 1e-3, memory_mb=0.5 * one)
    # at N = 2000 one string's corners alone are about 3 GiB: refused, never attempted
    with pytest.raises(ValueError, match="memory_mb"):
        sb.output_bounds(m, torch.zeros(1, 2000, dtype=torch.long), 1e-3, memory_mb=64)
