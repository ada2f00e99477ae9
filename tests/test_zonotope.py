"""Affine-arithmetic bounds of T over a box of parameters (sensbook/zonotope.py): sound against
sampled models and an attack, exact at r = 0, first-order exact against autograd, tighter than
the intervals, and the grown box certified."""
import math

import pytest
import torch

import sensbook as sb
from sensbook.attack import attack
from sensbook.certify import certified_radius, certify, output_bounds
from sensbook.constructions import BUILDERS, target
from sensbook.zonotope import Affine, affine_bounds, grow_box, tight_bounds
import sensbook.zonotope as zz


def _in_box(model, radius, P, seed):
    """P models in the box: half uniform inside, half at random corners."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(P, model.M, generator=g, dtype=torch.float64) * 2 - 1
    u[P // 2:] = torch.sign(u[P // 2:])
    pop = sb.Recognizer(P, model.D, model.L, model.H, model.F, model.eps,
                        mark_first=model.mark_first, dtype=torch.float64)
    return pop.set_flat(model.flat().double() + u * radius)


def _contains(b, T, tol=1e-9):
    finite = torch.isfinite(T)
    assert b.uncertifiable[(~finite).any(0)].all()
    slack = tol * (1 + T.abs())
    return bool((((T >= b.lo - slack) & (T <= b.hi + slack)) | ~finite).all())


@pytest.mark.parametrize("D,L,H,eps", [(2, 1, 1, 0.0), (4, 1, 2, 0.0), (4, 2, 2, 0.0),
                                       (4, 2, 2, 0.5), (6, 2, 3, 0.01), (3, 2, 1, 0.1)])
@pytest.mark.parametrize("per_parameter", [False, True])
def test_no_sampled_model_in_the_box_leaves_the_affine_bounds(D, L, H, eps, per_parameter):
    seed = 11 * D + 7 * L + H + int(100 * eps) + per_parameter
    model = sb.Recognizer.random(1, D, L, H, eps=eps, seed=seed, dtype=torch.float64)
    x = sb.strings(3).double()
    g = torch.Generator().manual_seed(seed)
    for r in (1e-6, 1e-4, 1e-2, 0.1):
        rad = r * torch.rand(model.M, generator=g, dtype=torch.float64) if per_parameter else r
        T = _in_box(model, rad, 128, seed)(x)
        for bounds in (affine_bounds, tight_bounds):
            b = bounds(model, x, rad)
            assert (b.lo <= b.hi).all()
            assert _contains(b, T), (bounds.__name__, r)


@pytest.mark.parametrize("name", ["FIRST_HARD", "FIRST", "MAJORITY", "PARITY"])
def test_constructions_exact_at_zero_and_contained_near_their_radius(name):
    model = BUILDERS[name]()
    x = sb.strings(3).double()
    T0 = model(x)[0]
    b = affine_bounds(model, x, 0.0)
    assert torch.allclose(b.lo, T0, atol=1e-12) and torch.allclose(b.hi, T0, atol=1e-12)
    for r in (1e-5, 1e-4, 1e-3):
        assert _contains(affine_bounds(model, x, r), _in_box(model, r, 96, 5)(x))


def test_first_order_exact_against_autograd():
    """At a small radius the lower bound is T(theta_0) - sum_i |dT/dtheta_i| r + O(r^2): the
    gap divided by r matches the gradient's l1 norm (autograd, an independent computation),
    within O(r), while the interval bound's gap is several times larger."""
    model = sb.Recognizer.random(1, 4, 2, 2, eps=0.5, seed=3, dtype=torch.float64)
    x = sb.strings(3).double()
    m = sb.Recognizer(1, 4, 2, 2, eps=0.5, dtype=torch.float64).set_flat(model.flat())
    for p in m.parameters():
        p.requires_grad_(True)
    T = m(x)[0]
    l1 = torch.stack([sum(g.abs().sum() for g in torch.autograd.grad(T[j], list(m.parameters()),
                                                                     retain_graph=True))
                      for j in range(len(x))]).detach()
    T = T.detach()
    gap = {}
    for r in (1e-7, 1e-8, 1e-9):
        b = affine_bounds(model, x, r)
        gap[r] = ((T - b.lo) / r / l1, (b.hi - T) / r / l1)
    # the excess over the first-order term falls like r (second order), to 1 + O(1e-3)
    for side in (0, 1):
        assert (gap[1e-9][side] >= 1 - 1e-6).all() and (gap[1e-9][side] < 1.002).all()
        assert ((gap[1e-8][side] - 1) < 0.2 * (gap[1e-7][side] - 1)).all()
    r = 1e-9
    bi = output_bounds(model, x, r)
    assert ((T - bi.lo) / r > 2 * l1).all()


def test_one_moving_readout_is_exact():
    """Only w and omega move: T = w . h + omega is linear in them, so the bounds are the closed
    form T_0 -+ r (sum_j |h_j| + 1), with h the eos activation (no remainder)."""
    model = sb.Recognizer.random(1, 4, 1, 1, eps=0.1, seed=9, dtype=torch.float64)
    x = sb.strings(3).double()
    rad = torch.zeros(model.M, dtype=torch.float64)
    i = 0
    for name, p in model.named_parameters():
        if name in ("w", "omega"):
            rad[i:i + p[0].numel()] = 0.01
        i += p[0].numel()
    assert int((rad > 0).sum()) == model.D + 1
    T0 = model(x)[0].detach()
    w = model.w[0].detach()
    # h at eos from the definition: the forward pass without the read-out
    with torch.no_grad():
        hs = model._embed(x)
        for i, lay in enumerate(model.layers):
            a = model._attention(hs, lay, False)
            hs = model._ln(hs + a, None, 2 * i, None)
            u = torch.relu(model._affine(hs, lay.W1, lay.b1))
            hs = model._ln(hs + model._affine(u, lay.W2, lay.b2), None, 2 * i + 1, None)
    heos = hs[0, :, -1]
    assert torch.allclose(heos @ w + model.omega[0], T0, atol=1e-12)
    width = 0.01 * (heos.abs().sum(-1) + 1)
    b = affine_bounds(model, x, rad)
    assert torch.allclose(b.lo, T0 - width, atol=1e-12)
    assert torch.allclose(b.hi, T0 + width, atol=1e-12)


def test_product_and_convex_rules_enclose_exact_ranges():
    """Each rule against the exact range of a one-symbol form on a fine grid."""
    eps_grid = torch.linspace(-1, 1, 20001, dtype=torch.float64)
    for c, g, e in [(0.3, 0.2, 0.0), (1.5, -0.7, 0.1), (-0.2, 0.5, 0.05)]:
        z = Affine(torch.tensor([c], dtype=torch.float64),
                   torch.tensor([[g]], dtype=torch.float64),
                   torch.tensor([e], dtype=torch.float64))
        for sgn in (-1, 0, 1):                              # the error term at its ends
            vals = c + g * eps_grid + sgn * e
            for rule, f in ((zz.exp, torch.exp), (zz.square, lambda v: v * v), (zz.relu, torch.relu)):
                lo, hi = rule(z).bounds()
                assert float(lo) <= float(f(vals).min()) + 1e-12
                assert float(hi) >= float(f(vals).max()) - 1e-12
            if c - abs(g) - e > 0:
                floor = torch.tensor([c - abs(g) - e], dtype=torch.float64)
                for rule, f in ((zz.reciprocal, lambda v: 1 / v), (zz.rsqrt, torch.rsqrt)):
                    lo, hi = rule(z, floor).bounds()
                    assert float(lo) <= float(f(vals).min()) + 1e-12
                    assert float(hi) >= float(f(vals).max()) - 1e-12
            w = Affine(torch.tensor([0.5], dtype=torch.float64),
                       torch.tensor([[-0.4]], dtype=torch.float64),
                       torch.tensor([0.0], dtype=torch.float64))
            lo, hi = zz.mul(z, w).bounds()
            prod = (c + g * eps_grid + sgn * e) * (0.5 - 0.4 * eps_grid)
            assert float(lo) <= float(prod.min()) + 1e-12 and float(hi) >= float(prod.max()) - 1e-12


@pytest.mark.parametrize("name,N", [("FIRST_HARD", 3), ("PARITY", 3), ("MAJORITY", 3)])
def test_tighter_radius_is_sound_under_attack_and_beats_intervals(name, N):
    from sensbook.experiments.ch5_certified import boxed_construction
    model = boxed_construction(name)
    x = sb.strings(N, dtype=torch.float64)
    y = target(name)(x)
    r = certified_radius(model, x, y, margin=0.01, rtol=0.05)["radius"]
    rt = certified_radius(model, x, y, margin=0.01, rtol=0.05, r_min=r, r_max=16 * r,
                          bounds=tight_bounds)["radius"]
    assert rt >= r
    assert certify(model, x, y, rt, margin=0.01, bounds=tight_bounds)["certified"]
    a = attack(model, x, y, rt, margin=0.01, starts=16, corners=64, steps=30, seed=1)
    assert not a["violated"]
    T = _in_box(model, rt, 128, 2)(x)
    s = y.double() * 2 - 1
    assert ((T * s).amin(-1) > 0.01).all()
    if name != "MAJORITY":
        assert rt > 1.8 * r


def test_grown_box_certifies_and_contains_its_samples():
    from sensbook.experiments.ch5_certified import boxed_construction, log_volume_bound
    model = boxed_construction("FIRST_HARD")
    x = sb.strings(3, dtype=torch.float64)
    y = target("FIRST_HARD")(x)
    rt = 0.004
    assert certify(model, x, y, rt, margin=0.01, bounds=tight_bounds)["certified"]
    g = grow_box(model, x, y, rt, margin=0.01, factors=(4.0,))
    assert g["grown"] and (g["radii"] >= rt).all()
    assert certify(model, x, y, g["radii"], margin=0.01, bounds=tight_bounds)["certified"]
    T = _in_box(model, g["radii"], 128, 4)(x)
    assert ((T * (y.double() * 2 - 1)).amin(-1) > 0.01).all()
    th = model.flat()[0]
    assert log_volume_bound(th, g["radii"]) > log_volume_bound(th, rt) + 100
    with pytest.raises(ValueError, match="radius"):
        grow_box(model, x, y, 0.5, margin=0.01)


def test_bad_input_is_refused():
    model = sb.Recognizer.random(1, 4, 1, 1, seed=0, dtype=torch.float64)
    x = sb.strings(3).double()
    with pytest.raises(ValueError, match="P = 1"):
        affine_bounds(sb.Recognizer.random(2, 4, 1, 1, seed=0), x, 0.1)
    with pytest.raises(ValueError, match="memory_mb"):
        affine_bounds(model, x, 0.1, memory_mb=1e-4)
    with pytest.raises(ValueError, match="radius"):
        affine_bounds(model, x, [0.1, 0.2])
    with pytest.raises(ValueError, match="shape"):
        certified_radius(model, x, torch.ones(8, dtype=torch.bool), shape=[1.0, 2.0])
    assert math.isfinite(float(affine_bounds(model, x, 0.0).lo[0]))


def _random_form(B, D, m, scale, seed, e_scale=0.3):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(B, D, generator=g, dtype=torch.float64)
    G = torch.randn(B, D, m, generator=g, dtype=torch.float64) * scale / m
    e = torch.rand(B, D, generator=g, dtype=torch.float64) * scale * e_scale
    return Affine(c, G, e), g


def _samples(form, g, K):
    """K points (eps, value) of the form: eps at corners and inside, the error term anywhere
    in [-e, e] (independently of eps, which the form's meaning allows)."""
    m = form.G.shape[-1]
    eps = torch.rand(K, m, generator=g, dtype=torch.float64) * 2 - 1
    eps[: K // 2] = torch.sign(eps[: K // 2])
    eta = (torch.rand(K, *form.e.shape, generator=g, dtype=torch.float64) * 2 - 1) * form.e
    eta[: K // 4] = torch.sign(eta[: K // 4]) * form.e
    return eps, form.c + torch.einsum("...m,km->k...", form.G, eps) + eta


def _ln(v, eps):
    c = v - v.mean(-1, keepdim=True)
    return c / (c.square().mean(-1, keepdim=True) + eps).sqrt()


@pytest.mark.parametrize("eps", [0.0, 0.05])
@pytest.mark.parametrize("rule", ["_layer_norm_direct", "_layer_norm_parts", "_layer_norm"])
def test_each_layer_norm_rule_encloses_the_map_with_the_same_noise(rule, eps):
    """The affine relation itself, not only the range: for sampled eps (corners, inside) and
    error terms, LN(d) lies within c + G eps +- e of the rule's form, at perturbations from
    small to near where the norm may vanish (the remainder of the direct rule is what keeps
    it sound there)."""
    fn = getattr(zz, rule)
    for k, scale in enumerate((1e-3, 0.05, 0.3, 0.8)):
        d, g = _random_form(6, 5, 7, scale, 100 * k + int(eps * 100))
        out, bad = fn(d, eps) if rule == "_layer_norm" else fn(zz._centred(d), eps)
        eps_s, vals = _samples(d, g, 4000)
        y = _ln(vals, eps)
        pred = out.c + torch.einsum("...m,km->k...", out.G, eps_s)
        inside = (y - pred).abs() <= out.e + 1e-9 * (1 + y.abs())
        assert (inside | bad.unsqueeze(-1)).all(), (rule, scale, (y - pred).abs().amax(0), out.e)
        if scale == 1e-3:
            assert not bad.any()


@pytest.mark.parametrize("eps", [0.0, 0.05])
@pytest.mark.parametrize("rule", ["_layer_norm_direct", "_layer_norm"])
def test_the_layer_norm_remainder_kept_as_a_ball_encloses_the_map(rule, eps):
    """With ``ball``, each vector's remainder is D new symbols in a unit ball (registered in
    _BALLS), diagonal in the output: for sampled eps and error terms, LN(d) minus the form's
    part in d's own symbols is b * eta + [-e, e] for some |eta| <= 1. The least such eta has
    |eta_j| = max(|r_j| - e_j, 0) / b_j, so its norm must be at most 1 (the Minkowski sum of
    a ball and a box, checked exactly)."""
    fn = getattr(zz, rule)
    for k, scale in enumerate((1e-3, 0.05, 0.3, 0.8)):
        d, g = _random_form(6, 5, 7, scale, 300 + 100 * k + int(eps * 100))
        token = zz._BALLS.set(())
        try:
            out, bad = fn(d, eps, ball=7) if rule == "_layer_norm" else fn(zz._centred(d), eps,
                                                                          ball=7)
            assert zz._BALLS.get() == ((7, 1, 5),)
        finally:
            zz._BALLS.reset(token)
        B = out.G[..., 7:12]                                  # (6, 5, 5): diagonal per string
        b = torch.diagonal(B, dim1=-2, dim2=-1)
        assert torch.equal(B, torch.diag_embed(b)) and (b >= 0).all()
        eps_s, vals = _samples(d, g, 4000)
        r = (_ln(vals, eps) - out.c - torch.einsum("...m,km->k...", out.G[..., :7], eps_s)).abs()
        excess = (r - out.e - 1e-9 * (1 + r)).clamp_min(0)
        need = torch.where(b > 0, excess / b.clamp_min(1e-300), excess * torch.inf)
        need = torch.where(excess > 0, need, 0.0).square().sum(-1)
        ok = (need <= 1 + 1e-9) | bad
        assert ok.all(), (rule, scale, need.amax(0))
        if scale == 1e-3:
            assert not bad.any()
        if rule == "_layer_norm_direct" and scale >= 0.3:       # the ball is what holds it
            assert ((r - out.e).clamp_min(0).square().sum(-1) > 0).any()


def test_the_layer_norm_ball_is_nearly_filled_at_the_worst_angle():
    """One generator h at the angle to c0 where |D^2 u[h, h]| is largest (cos^2 = 1/3) and
    small: the true remainder at eps = +-1 fills at least 95 % of the ball's radius, so a
    ball half as wide (an unsound rule) is caught, which random forms do not show."""
    D = 4
    c0 = torch.tensor([1.5, -0.5, -0.5, -0.5], dtype=torch.float64)
    p = torch.tensor([0.0, 1.0, -1.0, 0.0], dtype=torch.float64) / math.sqrt(2)
    for size in (1e-3, 1e-2):
        h = size * float(c0.norm()) * (c0 / c0.norm() / math.sqrt(3) + p * math.sqrt(2 / 3))
        cen = Affine(c0[None], h[None, :, None], torch.zeros(1, D, dtype=torch.float64))
        token = zz._BALLS.set(())
        try:
            out, bad = zz._layer_norm_direct(cen, 0.0, ball=1)
        finally:
            zz._BALLS.reset(token)
        b = torch.diagonal(out.G[0, :, 1:], dim1=-2, dim2=-1)
        fill = max(float(((_ln(c0 + k * h, 0.0) - out.c[0] - k * out.G[0, :, 0]) / b).norm())
                   for k in (-1.0, 1.0))
        assert not bad.any() and 0.95 <= fill <= 1.0, (size, fill)


def test_the_direct_rule_remainder_is_needed_and_its_constant_is_the_maximum():
    """The second-derivative constant 2/sqrt(3) of u(c) = c/|c| against brute force (random
    directions, a fine second difference), and a form where the linear part alone would
    leave the map: so the test above would catch a rule without its remainder."""
    g = torch.Generator().manual_seed(3)
    u = lambda c: c / c.norm(dim=-1, keepdim=True)
    c = torch.randn(20000, 4, generator=g, dtype=torch.float64)
    h = torch.randn(20000, 4, generator=g, dtype=torch.float64)
    h = h / h.norm(dim=-1, keepdim=True)
    t = 1e-4
    d2 = (u(c + t * h) - 2 * u(c) + u(c - t * h)) / t ** 2
    ratio = d2.norm(dim=-1) * c.norm(dim=-1) ** 2
    assert ratio.max() <= 2 / math.sqrt(3) + 1e-4 and ratio.max() > 0.98 * 2 / math.sqrt(3)
    d, g = _random_form(6, 5, 7, 0.3, 7)
    cen = zz._centred(d)
    out, bad = zz._layer_norm_direct(cen, 0.0)
    n0, rho, nlo, _, _, dev = zz._norm_range(cen, 0.0)
    rem = math.sqrt(5) * 2 / math.sqrt(3) * rho ** 2 * zz._remainder_weight(
        n0, torch.minimum(rho, dev), nlo)
    first_order = out.e - rem.unsqueeze(-1)
    eps_s, vals = _samples(d, g, 4000)
    lin = out.c + torch.einsum("...m,km->k...", out.G, eps_s)
    assert not bad.any() and ((_ln(vals, 0.0) - lin).abs() > first_order).any()


@pytest.mark.parametrize("eps", [0.0, 0.05])
def test_the_homogeneous_readout_encloses_T(eps):
    """_readout's bounds of w . LN(d) + omega hold for sampled d, w and omega of the box, and
    where it calls the position defined no sampled centred d is 0."""
    for k, scale in enumerate((1e-3, 0.1, 0.5, 1.5)):
        model = sb.Recognizer.random(1, 5, 1, 1, eps=eps, seed=k, dtype=torch.float64)
        # d's noise symbols are the first 30 (tok, pos); w's and omega's come after them
        d, g = _random_form(8, 5, 30, scale, 50 + k)
        P = zz._Params(model, scale / 20)
        lo, hi, bad = zz._readout(d, P, eps)
        w0, rw, iw = P.p["w"]
        om0, rom, iom = P.p["omega"]
        K = 3000
        eps_s, vals = _samples(d, g, K)
        sw = torch.sign(torch.rand(K, 5, generator=g, dtype=torch.float64) - 0.5)
        so = torch.sign(torch.rand(K, generator=g, dtype=torch.float64) - 0.5)
        T = (_ln(vals, eps) * (w0 + rw * sw).unsqueeze(1)).sum(-1) + (om0 + rom * so).unsqueeze(1)
        assert iw >= 30 and iom >= 30
        ok = ((T >= lo - 1e-9) & (T <= hi + 1e-9)) | bad
        assert ok.all(), (scale, T.amin(0), lo, T.amax(0), hi)
        if scale == 1e-3:
            assert not bad.any() and (hi - lo < 0.1).all()


def test_the_remainder_weight_is_the_integral_and_never_above_the_lagrange_one():
    """_remainder_weight against the integral of (1 - s) / (n0 - s b)^2 by quadrature, below
    1 / (2 nlo^2) everywhere, and that bound where n0 - b <= 0 (where the integral diverges)."""
    n0 = torch.tensor([2.0, 2.0, 2.0, 1.0, 3.0, 1.0], dtype=torch.float64)
    b = torch.tensor([0.0, 1e-9, 0.5, 0.9, 2.9, 1.5], dtype=torch.float64)
    nlo = torch.tensor([2.0, 2.0, 1.5, 0.1, 0.1, 0.2], dtype=torch.float64)
    w = zz._remainder_weight(n0, b, nlo)
    s = torch.linspace(0, 1, 200001, dtype=torch.float64)
    for i in range(5):
        quad = torch.trapezoid((1 - s) / (n0[i] - s * b[i]) ** 2, s)
        assert abs(float(w[i] - quad)) <= 1e-6 * float(quad), (i, w[i], quad)
    assert (w <= 0.5 / nlo ** 2 + 1e-15).all() and float(w[5]) == 0.5 / 0.2 ** 2
    assert float(w[2]) < 0.5 / 1.5 ** 2


def test_fresh_symbols_keep_the_set_and_let_signs_cancel():
    """Affine.fresh is exact (the same range per entry, e moved into new columns after the
    given start), and z - z cancels its error once it has symbols (a box cannot)."""
    d, _ = _random_form(3, 4, 5, 0.5, 21)
    f = d.fresh(9)
    assert f.G.shape[-1] == 9 + 4 and (f.e == 0).all()
    assert torch.equal(f.G[..., :5], d.G) and (f.G[..., 5:9] == 0).all()
    assert torch.allclose(f.rad(), d.rad()) and torch.allclose(f.c, d.c)
    diff = lambda z: z + z.scale(-1.0)                   # z - z: 0, once e has symbols
    assert (diff(f).rad() < 1e-12).all() and (diff(d).rad() > 1e-3).all()


def test_a_ball_extent_is_the_largest_value_over_the_ball():
    """With symbols registered as balls, _extent is max |g . eta| over the ball (reached at
    eta = g / |g|, never exceeded by sampled points), _vector_extent bounds |G eta|, and
    _cube_norm bounds |G eps| over the cube (corners sampled) below the column norms."""
    g = torch.Generator().manual_seed(4)
    G = torch.randn(7, 3, 10, generator=g, dtype=torch.float64)
    token = zz._BALLS.set(((4, 2, 3),))                       # symbols 4-6 and 7-9: two balls
    try:
        ext, vext = zz._extent(G), zz._vector_extent(G)
    finally:
        zz._BALLS.reset(token)
    K = 20000
    eps = torch.sign(torch.rand(K, 10, generator=g, dtype=torch.float64) - 0.5)
    for s in (4, 7):
        eta = torch.randn(K, 3, generator=g, dtype=torch.float64)
        eps[:, s:s + 3] = eta / eta.norm(dim=-1, keepdim=True)
    vals = torch.einsum("vjm,km->kvj", G, eps)
    assert (vals.abs().amax(0) <= ext + 1e-12).all()
    best = G[..., :4].abs().sum(-1) + G[..., 4:7].norm(dim=-1) + G[..., 7:].norm(dim=-1)
    assert torch.allclose(ext, best)
    assert (vals.norm(dim=-1).amax(0) <= vext + 1e-12).all()
    cube = torch.sign(torch.rand(K, 10, generator=g, dtype=torch.float64) - 0.5)
    norms = torch.einsum("vjm,km->kvj", G, cube).norm(dim=-1).amax(0)
    for top in (3, 10):
        cn = zz._cube_norm(G, top)
        assert (norms <= cn + 1e-12).all() and (cn <= G.norm(dim=-2).sum(-1) + 1e-12).all()


def test_the_read_out_ratio_holds_where_the_norm_grows_sideways():
    """T = sqrt(D) w . c / |c| with c = c0 + s eps1 v, v orthogonal to c0 and w along c0: a
    is constant, the norm grows with |eps1| and T falls to sqrt(D) |c0| / sqrt(|c0|^2 + s^2)
    at the corners. The read-out's lower bound must stay below that (the ratio's upper end of
    the norm, n0 + t + rho^2 / 2 n0, is what holds it) and be within 25 % of it."""
    model = sb.Recognizer.random(1, 3, 1, 1, eps=0.0, seed=0, dtype=torch.float64)
    c0 = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64)
    v = torch.tensor([1.0, 1.0, -2.0], dtype=torch.float64) / math.sqrt(6)
    with torch.no_grad():
        model.w[0] = c0 / c0.norm()
        model.omega[0] = 0.0
    P = zz._Params(model, 1e-12)
    for s in (0.3, 1.0, 2.0):
        G = torch.zeros(1, 3, 40, dtype=torch.float64)        # d's symbols come before w's
        G[0, :, 0] = s * v
        d = Affine(c0[None], G, torch.zeros(1, 3, dtype=torch.float64))
        lo, hi, bad = zz._readout(d, P, 0.0)
        worst = math.sqrt(3) * float(c0.norm()) / math.sqrt(float(c0.norm()) ** 2 + s * s)
        assert not bad.any() and float(hi) >= math.sqrt(3) - 1e-9
        assert worst - 0.25 * worst <= float(lo) <= worst + 1e-9, (s, float(lo), worst)
