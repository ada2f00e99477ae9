r"""Tighter certified bounds of T(theta, x) over a box of parameters: affine arithmetic.

Interval arithmetic (:mod:`sensbook.certify`) forgets that one parameter enters many
operations: at a small radius r its bounds widen like (number of paths) x r although the
output moves like :math:`\sum_i |\partial_i T|\, r_i`. Here every quantity of the forward pass is
an *affine form* (a zonotope) in the M parameter noise symbols
:math:`\epsilon \in [-1, 1]^M`, :math:`\theta = \theta_0 + r \odot \epsilon`:

.. math:: z = c + \sum_{i=1}^M G_i\, \epsilon_i + [-e, e], \qquad e \ge 0,

which encloses every value z takes over the box (the error term e collects what is not
linear in :math:`\epsilon`). Let :math:`R(z) = \sum_i |G_i| + e`, so z lies in
:math:`[c - R, c + R]`. The rules (de Figueiredo & Stolfi 2004, *Affine arithmetic*; the
zonotope domain of Singh et al. 2018), each a lemma that holds for every point of the box:

* **affine maps** with constant weights are exact (the error term maps through :math:`|A|`);
* **products** :math:`a b = c_a c_b + c_a \delta_b + c_b \delta_a + \delta_a \delta_b` with
  :math:`|\delta_a \delta_b| \le R_a R_b`: the linear part is kept, the product of the
  deviations goes to e. A parameter matrix is the affine form :math:`W_0 + r_W \epsilon_W`,
  so :math:`hW` keeps :math:`\delta_h W_0 + c_h r_W \epsilon_W` and puts
  :math:`e_h |W_0| + R_h r_W` in e. Attention scores :math:`q \cdot k` and weights times
  values :math:`p\, v` are products of two forms;
* **smooth convex functions** (exp, 1/v and :math:`v^{-1/2}` on v > 0) by Taylor's theorem
  with the Lagrange remainder: :math:`f(z) = f(c) + f'(c)(z - c) + \tfrac12 f''(\zeta)(z - c)^2`
  with :math:`0 \le f''(\zeta) \le K = \max_{[c-R, c+R]} f''` (at an end: f'' is monotone),
  so the remainder lies in :math:`[0, K R^2 / 2]`: its midpoint goes to c, its half-width to
  e. The square (the variance) is the same rule with K = 2;
* **ReLU** by its chord on :math:`[l, u] \ni 0`: :math:`\lambda z + [0, -\lambda l]`,
  :math:`\lambda = u / (u - l)` (identity or 0 when [l, u] does not straddle 0);
* **softmax** as :math:`E_j \cdot (\sum_k E_k)^{-1}`, :math:`E_k = \exp(s_k - t)` with a
  constant t (exact shift): the first-order dependence between :math:`E_j` and the sum is
  kept in the forms;
* **layer norm** two ways, per entry the narrower: by its parts,
  :math:`c_j \cdot (\mathrm{mean}(c^2) + \varepsilon)^{-1/2}` with the exact linear centring
  (:func:`_layer_norm_parts`), and as one map :math:`\sqrt D\, c / \lVert (c, \kappa)
  \rVert`, :math:`\kappa^2 = D \varepsilon`, whose Jacobian is exact and whose Taylor
  remainder is bounded by the norm of its second derivative, at most
  :math:`(2/\sqrt 3) \lVert h \rVert^2 / \lVert (c, \kappa) \rVert^2`
  (:func:`_layer_norm_direct`). A norm whose lower bound reaches 0 makes the string
  **uncertifiable**, as in :mod:`sensbook.certify`;
* **the last layer norm and the read-out** together: :math:`T - \omega = \sqrt D\,
  (w \cdot c) / \lVert (c, \kappa) \rVert` is a product of two forms over a positive
  scalar, so its sign is decided by the form :math:`w \cdot c` alone, and the ratio is
  bounded with the first order that :math:`w \cdot c` and the norm share
  (:func:`_readout`, :func:`_ratio_lo`).

Three devices keep the remainders from compounding from layer to layer (the book's; what
each gains is measured in ``benchmarks/zonotope_bench.py``):

* **fresh symbols**: after each attention, layer norm and feed-forward block the error term
  becomes generators of new noise symbols, one per entry of the stream (:meth:`Affine.fresh`:
  a box is a zonotope, so this is exact). Later linear maps then act on it with their signs,
  :math:`|w^\top A| e` instead of :math:`|w|^\top |A| e`;
* **balls**: a layer norm's Taylor remainder is bounded in l2 norm, so it enters as D new
  symbols per vector constrained to a unit ball (``_BALLS``), not as the same bound on each
  of the D coordinates (a box :math:`\sqrt D` times wider). A ball's extent along a row g is
  :math:`\lVert g \rVert_2` (:func:`_extent`);
* **a Gram bound** on :math:`\max \lVert G \epsilon \rVert` at the last layer's norms
  (one vector per string there, :func:`_cube_norm`).

The remainders are second order in r, so at small radius the bound is
:math:`T(\theta_0) - \sum_i |\partial_i T(\theta_0)|\, r_i - O(r^2)`: the first-order
(mean-value) form, with its remainder bounded soundly. :func:`affine_bounds` has the
signature of :func:`sensbook.output_bounds` and is passed to
:func:`sensbook.certify.certified_radius` as ``bounds=``. Valid up to float64 rounding, as
the interval bounds.
"""
from __future__ import annotations

import math

import torch

from .affine import (_BALLS, Affine, _cube_norm, _extent, _pad, _same, _vector_extent, exp,
                     mul, _matmul, reciprocal, relu, rsqrt, square, tighten)
from .certify import Bounds, _checked, _radius, certify, output_bounds
from .model import EOS, Recognizer, positional_features

__all__ = ["Affine", "affine_bounds", "tight_bounds", "grow_box"]


class _Params:
    """Every parameter's centre, radius and first index among the M noise symbols."""

    def __init__(self, model, radius):
        r = _radius(model, radius).to(model.device)
        self.M, self.p, i = model.M, {}, 0
        for name, t in model.named_parameters():
            t = t.detach()[0].to(torch.float64)
            n = t.numel()
            self.p[name] = (t, r[i:i + n].reshape(t.shape), i)
            i += n

    def layer(self, l):
        return {k.split(".")[-1]: v for k, v in self.p.items() if k.startswith(f"layers.{l}.")}


def _param_affine(z: Affine, W, b, M) -> Affine:
    r"""z @ W + b with W, b parameters (centre, radius, first index): the product rule with
    :math:`\delta_W = r_W \epsilon_W` (one noise symbol per entry)."""
    W0, rW, iW = W
    b0, rb, ib = b
    Din, Dout = W0.shape
    out = z.linear(W0)
    c, G = out.c + b0, _pad(out.G, max(iW + Din * Dout, ib + Dout))
    batch = z.c.shape[:-1]
    Gw = torch.zeros(*batch, Dout, Din, Dout, dtype=G.dtype, device=G.device)
    torch.diagonal(Gw, dim1=-3, dim2=-1).copy_(z.c.unsqueeze(-1) * rW)
    G[..., iW:iW + Din * Dout] += Gw.reshape(*batch, Dout, Din * Dout)
    torch.diagonal(G[..., ib:ib + Dout], dim1=-2, dim2=-1).add_(rb)
    return Affine(c, G, out.e + z.rad() @ rW)


def _centred(d: Affine) -> Affine:
    """d minus its mean over the last axis (exact: a constant linear map)."""
    D = d.c.shape[-1]
    return d.linear(torch.eye(D, dtype=d.c.dtype, device=d.c.device) - 1.0 / D)


def _layer_norm_parts(cen: Affine, eps):
    """(LN_eps, bad) of the centred form ``cen`` by the rules of its parts: the variance
    (square), its inverse square root and their product with ``cen``. bad (X[:-1]) marks
    positions where no positive lower bound on the variance is known."""
    D = cen.c.shape[-1]
    var = square(cen).sum(-1).scale(1.0 / D).shift(eps)
    cl, ch = cen.bounds()                     # var >= mean of the least square of each c_j
    sq = torch.where((cl <= 0) & (ch >= 0), 0.0, torch.minimum(cl * cl, ch * ch))
    floor = torch.maximum(sq.mean(-1) + eps, var.c - var.rad())
    bad = (floor <= 0) | (var.c <= 0)
    safe = Affine(torch.where(bad, 1.0, var.c), torch.where(bad.unsqueeze(-1), 0.0, var.G),
                  torch.where(bad, 0.0, var.e))
    inv = rsqrt(safe, torch.where(bad, 1.0, floor)).map(lambda t: t.unsqueeze(-1))
    return mul(cen, inv), bad


def _norm_range(cen: Affine, eps, gram: bool = False):
    r"""Over the box, of the centred form c (X + (D,)): (n0, rho, nlo, nhi, u0, dev) with
    :math:`n_0 = \lVert (c_0, \kappa) \rVert`, :math:`\kappa^2 = D\varepsilon`, rho a bound
    on :math:`\lVert h \rVert`, :math:`h = c - c_0` (the smaller of :math:`\lVert R \rVert_2`
    and :func:`_vector_extent` + :math:`\lVert e \rVert_2`; with ``gram`` also
    :func:`_cube_norm` + :math:`\lVert e \rVert_2`), dev the largest
    :math:`|u_0 \cdot h|`, :math:`u_0 = c_0 / n_0`, and bounds
    :math:`n_{lo} \le \lVert (c, \kappa) \rVert \le n_{hi}`:
    :math:`\lVert (c, \kappa) \rVert \ge u_0 \cdot c + \kappa^2 / n_0 = n_0 + u_0 \cdot h`
    (Cauchy-Schwarz with the unit vector :math:`(c_0, \kappa) / n_0`, whose least value over
    the box is read off the form exactly), :math:`\ge n_0 - \rho` and :math:`\ge \kappa`;
    :math:`\lVert (c, \kappa) \rVert^2 = n_0^2 + 2 c_0 \cdot h + \lVert h \rVert^2`."""
    D = cen.c.shape[-1]
    c0 = cen.c
    n0 = (c0.square().sum(-1) + D * eps).sqrt()
    rho = torch.minimum(cen.rad().square().sum(-1).sqrt(),
                        _vector_extent(cen.G) + cen.e.square().sum(-1).sqrt())
    if gram:
        rho = torch.minimum(rho, _cube_norm(cen.G) + cen.e.square().sum(-1).sqrt())
    u0 = torch.where((n0 > 0).unsqueeze(-1), c0 / n0.clamp_min(1e-300).unsqueeze(-1), 0.0)
    # the largest |u0 . h| over the box: its generators exactly, its error terms by |u0|
    dev = _extent(torch.einsum("...j,...jm->...m", u0, cen.G)) + (u0.abs() * cen.e).sum(-1)
    nlo = torch.maximum(torch.maximum(n0 - rho, n0 - dev), torch.full_like(n0, math.sqrt(D * eps)))
    nhi = torch.minimum(n0 + rho, (n0 * n0 + 2 * n0 * dev + rho * rho).sqrt())
    return n0, rho, nlo, nhi, u0, dev


def _remainder_weight(n0, b, nlo):
    r""":math:`\int_0^1 (1 - s) / n(s)^2\, ds` bounded above, for a norm along the segment
    with :math:`n(s) \ge n_0 - s b` and :math:`n(s) \ge n_{lo} > 0`: where
    :math:`n_0 - b > 0` it is at most :math:`(\log(n_0 / (n_0 - b)) - b / n_0) / b^2`
    (the integral itself; its limit 1 / (2 n_0^2) as b -> 0), and always at most
    :math:`1 / (2 n_{lo}^2)`."""
    nb = n0 - b
    ok = nb > 0
    tiny = b <= 1e-6 * n0
    safe_b = torch.where(ok & ~tiny, b, 1.0)
    exact = (torch.log(n0 / torch.where(ok, nb, 1.0)) - safe_b / n0.clamp_min(1e-300)) / safe_b ** 2
    exact = torch.where(tiny, 0.5 / torch.where(ok, nb, 1.0) ** 2, exact)
    exact = torch.where(ok, exact, torch.inf)
    return torch.minimum(exact, 0.5 / nlo.clamp_min(1e-300).square())


def _layer_norm_direct(cen: Affine, eps, ball: int | None = None, gram: bool = False):
    r"""(LN_eps, bad) of the centred form ``cen`` = c as one map (the book's lemma, from the
    module docstring's layer-norm rule; its constant is checked against brute force in
    ``tests/test_zonotope.py``): with :math:`\kappa^2 = D\varepsilon`,
    :math:`\mathrm{LN}(d) = \sqrt D\, u(c)`, :math:`u(c) = c / \lVert (c, \kappa) \rVert`,
    the first D coordinates of the unit vector of :math:`(c, \kappa)`. Its Jacobian at the
    centre is :math:`(I - u_0 u_0^\top) / n_0`, :math:`n_0 = \lVert (c_0, \kappa) \rVert`,
    and its second derivative obeys :math:`\lVert D^2 u(c)[h, h] \rVert \le (2/\sqrt 3)
    \lVert h \rVert^2 / \lVert (c, \kappa) \rVert^2` (the maximum over the angle of h to
    c of :math:`\sqrt{(1 - a^2)(1 + 3 a^2)}`). Along the segment
    :math:`\lVert (c_0 + s h, \kappa) \rVert \ge n_0 - s \min(\rho, \mathrm{dev})`
    (Cauchy-Schwarz with :math:`u_0`; :func:`_norm_range`), so Taylor's integral remainder
    :math:`\int_0^1 (1 - s) D^2 u[h, h]\, ds` has norm at most
    :math:`(2/\sqrt 3) \rho^2` times :func:`_remainder_weight`, at most
    :math:`\rho^2 / (\sqrt 3\, n_{lo}^2)`. That bounds the remainder vector's l2 norm: with
    ``ball`` (the first symbol free for new ones) it is kept as a ball of D new symbols per
    vector (registered in ``_BALLS``), else as the same bound on every coordinate. bad (X[:-1])
    marks positions where :math:`n_{lo} \le 0` (at eps = 0 some theta of the box may have
    LN_0 undefined there). ``gram``: :func:`_norm_range`'s Gram bound on rho."""
    D = cen.c.shape[-1]
    c0 = cen.c
    n0, rho, nlo, _, u0, dev = _norm_range(cen, eps, gram)
    bad = ~(nlo > 0)
    n = torch.where(bad, 1.0, n0).unsqueeze(-1)
    u0 = torch.where(bad.unsqueeze(-1), 0.0, u0)                          # X
    k = math.sqrt(D) / n                                                  # X[:-1] + (1,)
    J = k.unsqueeze(-1) * (torch.eye(D, dtype=c0.dtype, device=c0.device)
                           - u0.unsqueeze(-1) * u0.unsqueeze(-2))         # X + (D,)
    G = torch.einsum("...jk,...km->...jm", J, cen.G)
    rem = math.sqrt(D) * 2 / math.sqrt(3) * rho.square() * _remainder_weight(
        n0, torch.minimum(rho, dev), nlo)
    rem = torch.where(bad, 0.0, rem)
    e = torch.einsum("...jk,...k->...j", J.abs(), cen.e)
    if ball is None:
        e = e + rem.unsqueeze(-1)
    else:                      # vector v's remainder: rem_v times D new symbols in a ball
        X, n = cen.c.shape, cen.c[0].numel() // D
        G = _pad(G, max(ball, G.shape[-1]))
        start = G.shape[-1]
        eye = torch.eye(D, dtype=G.dtype, device=G.device)
        blk = torch.zeros(X[0], n, D, n, D, dtype=G.dtype, device=G.device)
        v = torch.arange(n, device=G.device)
        blk[:, v, :, v, :] = rem.reshape(X[0], n).T[..., None, None] * eye
        G = torch.cat([G, blk.reshape(*X, n * D)], -1)
        _BALLS.set(_BALLS.get() + ((start, n, D),))
    out = Affine(math.sqrt(D) * u0, torch.where(bad[..., None, None], 0.0, G),
                 torch.where(bad.unsqueeze(-1), 0.0, e))
    return out, bad


def _layer_norm(d: Affine, eps, cen: Affine | None = None, ball: int | None = None,
                gram: bool = False):
    r"""(LN_eps(d), bad): per entry the narrower of :func:`_layer_norm_direct`'s and
    :func:`_layer_norm_parts`' forms (each entry's form holds for every theta of the box,
    whichever rule made it), then the interval :math:`[-\sqrt D, \sqrt D]` where narrower;
    bad where neither rule knows the norm positive. ``cen``: d already centred."""
    D = d.c.shape[-1]
    cen = _centred(d) if cen is None else cen
    out, bad = _layer_norm_direct(cen, eps, ball, gram)
    c0 = out.c
    parts, bad2 = _layer_norm_parts(cen, eps)
    take = (bad & ~bad2).unsqueeze(-1) | (~bad2.unsqueeze(-1) & (parts.rad() < out.rad()))
    pG, oG = _same(parts.G, out.G)
    out = Affine(torch.where(take, parts.c, out.c), torch.where(take.unsqueeze(-1), pG, oG),
                 torch.where(take, parts.e, out.e))
    # every coordinate of LN lies in [-sqrt(D), sqrt(D)] (|c_j| <= |c|): where that is narrower
    return (tighten(out, torch.full_like(c0, -math.sqrt(D)), torch.full_like(c0, math.sqrt(D))),
            bad & bad2)


def _attention(h: Affine, lay, H, last_only, M):
    """Multi-head softmax attention on forms; h of shape (B, S, D)."""
    B, S, D = h.c.shape
    dh = D // H
    hq = h.map(lambda t: t[..., -1:, :]) if last_only else h
    heads = lambda t: t.reshape(t.shape[0], t.shape[1], H, dh, *t.shape[3:]).transpose(1, 2)
    split = lambda z: Affine(heads(z.c), heads(z.G), heads(z.e))           # (B, H, s, dh)
    q = split(_param_affine(hq, lay["Wq"], lay["bq"], M))
    k = split(_param_affine(h, lay["Wk"], lay["bk"], M))
    v = split(_param_affine(h, lay["Wv"], lay["bv"], M))
    scores = _matmul(q, k, "bhsd,bhtd->bhst").scale(1 / math.sqrt(dh))     # (B, H, s, S)
    top = scores.c.amax(-1, keepdim=True)
    E = exp(scores.shift(-top))
    # every E_k > exp(lower end of s_k - top): a positive floor for their sum
    floor = torch.exp(scores.c - scores.rad() - top).sum(-1, keepdim=True)
    Z = E.sum(-1).map(lambda t: t.unsqueeze(-1))
    p = mul(E, reciprocal(Z, floor))
    # the interval softmax bound of the same weights (as in sensbook.certify), from the
    # forms' score ranges: where attention is saturated it is the narrower one
    sl, sh = scores.bounds()
    El, Eh = torch.exp(sl - top), torch.exp(sh - top)
    rest_h = (Eh.sum(-1, keepdim=True) - Eh).clamp_min(0)
    rest_l = (El.sum(-1, keepdim=True) - El).clamp_min(0)
    p = tighten(p, (El / (El + rest_h)).clamp(0, 1), (Eh / (Eh + rest_l)).clamp(0, 1), 0.5)
    a = _matmul(p, v, "bhst,bhtd->bhsd")
    merge = lambda t: t.transpose(1, 2).reshape(B, t.shape[2], D, *t.shape[4:])
    a = Affine(merge(a.c), merge(a.G), merge(a.e))
    return _param_affine(a, lay["Wo"], lay["bo"], M)


def _readout(d: Affine, P, eps):
    r"""(lo, hi, bad) of :math:`T = w \cdot \mathrm{LN}_\varepsilon(d) + \omega` at eos, d of
    shape (B, D): the last layer norm and the read-out as one map.

    With the centring c of d and :math:`\kappa^2 = D\varepsilon`,
    :math:`T - \omega = \sqrt D\, a / \lVert (c, \kappa) \rVert`, :math:`a = w \cdot c`:
    a product of two forms, so an affine form with a second-order remainder, and the norm a
    positive scalar. So :math:`T - \omega \ge \sqrt D\, a_{lo} / n_{hi}` where
    :math:`a_{lo} \ge 0` (else :math:`a_{lo} / n_{lo}`), with :math:`n_{lo} \le \lVert (c,
    \kappa) \rVert \le n_{hi}` over the box (:func:`_norm_range`), and symmetrically above. The sign of :math:`T - \omega` is then decided by the form a alone,
    without the layer norm's remainder; and where :math:`a_{lo} > 0` (or :math:`a_{hi} < 0`)
    c is never 0 in the box, so :math:`\mathrm{LN}_0` is defined there even when
    :math:`\rho \ge n_0`. Third, the ratio itself (:func:`_ratio_lo`), where a and the norm
    share their first order :math:`t = u_0 \cdot h`, for a and for
    :math:`a_0 = w_0 \cdot c` with :math:`|\delta w \cdot c| / n \le \lVert r_w \rVert`
    (no second-order term). The three bounds are intersected (each holds on the box)."""
    D = d.c.shape[-1]
    w0, rw, iw = P.p["w"]
    om0, rom, iom = P.p["omega"]
    zero = torch.zeros(1, dtype=d.c.dtype, device=d.c.device)
    cen = _centred(d)
    # the path through the layer norm's own rule
    y, bad_ln = _layer_norm(d.map(lambda t: t.unsqueeze(-2)), eps,
                            cen.map(lambda t: t.unsqueeze(-2)))
    T = _param_affine(y.map(lambda t: t[..., 0, :]), (w0[:, None], rw[:, None], iw),
                      (om0.reshape(1), rom.reshape(1), iom), P.M).map(lambda t: t[..., 0])
    lo1, hi1 = T.bounds()
    bad_ln = bad_ln[..., 0]
    lo1, hi1 = torch.where(bad_ln, -torch.inf, lo1), torch.where(bad_ln, torch.inf, hi1)
    # the homogeneous path: a = w . c over ||(c, kappa)||
    a = _param_affine(cen, (w0[:, None], rw[:, None], iw), (zero, zero, iom),
                      P.M).map(lambda t: t[..., 0])
    alo, ahi = (t * math.sqrt(D) for t in a.bounds())
    n0, rho, nlo, nhi, u0, _ = _norm_range(cen, eps, gram=True)
    lo2 = torch.where(alo >= 0, alo / nhi, alo / nlo) + (om0 - rom)
    hi2 = torch.where(ahi <= 0, ahi / nhi, ahi / nlo) + (om0 + rom)
    defined = (nlo > 0) | (alo > 0) | (ahi < 0)
    lo2 = torch.where(defined & ~torch.isnan(lo2), lo2, -torch.inf)
    hi2 = torch.where(defined & ~torch.isnan(hi2), hi2, torch.inf)
    # the ratio: a and n move together (t = u0 . h), n0 + t <= n <= n0 + t + rho^2 / 2 n0
    t = Affine(torch.zeros_like(n0), torch.einsum("...j,...jm->...m", u0, cen.G),
               (u0.abs() * cen.e).sum(-1))
    q = rho * rho / (2 * n0.clamp_min(1e-300))
    W = float((w0.abs() + rw).square().sum().sqrt())                 # |a / n| <= ||w|| <= W
    pos = nlo > 0
    a0 = cen.linear(w0[:, None]).map(lambda t: t[..., 0])        # |(w - w0) . c| / n <= ||r_w||
    rwn = float(rw.square().sum().sqrt())
    Ga, Ga0 = _same(a.G, a0.G)
    four = Affine(torch.stack([a.c, a0.c, -a.c, -a0.c]), torch.stack([Ga, Ga0, -Ga, -Ga0]),
                  torch.stack([a.e, a0.e, a.e, a0.e]))
    r4 = _ratio_lo(four, t, n0, q, W) - torch.tensor([0.0, rwn, 0.0, rwn],
                                                      dtype=n0.dtype, device=n0.device)[:, None]
    lo3, hi3 = torch.maximum(r4[0], r4[1]), -torch.maximum(r4[2], r4[3])
    lo3, hi3 = torch.where(pos, lo3, -torch.inf), torch.where(pos, hi3, torch.inf)
    lo3, hi3 = math.sqrt(D) * lo3 + (om0 - rom), math.sqrt(D) * hi3 + (om0 + rom)
    return (torch.maximum(torch.maximum(lo1, lo2), lo3),
            torch.minimum(torch.minimum(hi1, hi2), hi3), bad_ln & ~defined)


def _ratio_lo(a: Affine, t: Affine, n0, q, W: float, points: int = 32, rounds: int = 3):
    r"""A lower bound on :math:`a / n` over the box, n the norm :math:`\lVert (c, \kappa)
    \rVert > 0` with :math:`n_0 + t \le n \le n_0 + t + q` (t the form :math:`u_0 \cdot h`,
    :math:`q = \rho^2 / 2 n_0`; the upper end because :math:`(n_0 + t + \lVert h \rVert^2 /
    2 n_0)^2 - n^2 = (t + \lVert h \rVert^2 / 2 n_0)^2 \ge 0`) and :math:`|a / n| \le W`.
    For every m, :math:`a - m n \ge F(m) = \min [a - m (n_0 + t)] - \max(m, 0)\, q`, the
    least value of one affine form, so :math:`a / n \ge m` wherever F(m) >= 0. F is concave
    (minus convex functions of m), so the m with F(m) >= 0 form an interval; its upper
    end is found on a grid of ``points`` over [-W, W], refined ``rounds`` times between the
    last point found and the next (-inf where no point has F(m) >= 0). Unlike
    :math:`a_{lo} / n_{hi}` it keeps what a and n share: a radial move of c changes neither
    a / n nor the bound's first order. The extent of a form is :func:`_extent` (balls)."""
    Ga, Gt = _same(a.G, t.G)

    def F(m):
        g = _extent(Ga - m.unsqueeze(-1) * Gt)
        return a.c - m * n0 - g - a.e - m.abs() * t.e - m.clamp_min(0) * q

    best = torch.full_like(a.c, -torch.inf)
    lo, step = torch.full_like(a.c, -W), torch.full_like(a.c, 2 * W / (points - 1))
    grid = torch.arange(points, dtype=a.c.dtype, device=a.c.device).reshape(-1, *[1] * a.c.dim())
    for _ in range(rounds):          # the largest grid point with F >= 0, then a finer grid
        m = lo + grid * step                                          # (points,) + X
        good = F(m) >= 0
        top = torch.where(good, m, -torch.inf).amax(0)
        found = torch.isfinite(top)
        best = torch.where(found, torch.maximum(best, top), best)
        lo = torch.where(found, top, lo)
        step = torch.where(found, step / (points - 1), step)
    return best


def _bytes_per_string(model, N):
    """Bytes one string costs at once: the generators (M float64 per entry, plus the symbols
    made per layer: at most six per entry of the stream) of the attention's (H, S, S, D/H)
    products, counted four times, dominate."""
    S = N + 1
    m = model.M + 6 * model.L * S * model.D
    return 8 * m * (4 * S * S * model.D + 12 * S * (model.D + model.F))


def affine_bounds(model: Recognizer, x, radius, *, chunk: int = 4096,
                  memory_mb: float | None = None) -> Bounds:
    r"""Bounds of :math:`T(\theta, x)` over the box :math:`|\theta - \theta_0| \le r` by affine
    arithmetic (the module's lemmas).

    Parameters
    ----------
    model : Recognizer
        One model (P = 1): :math:`\theta_0`, its :math:`\varepsilon` and positional features.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    radius : float or sequence of float
        The box's half-width r: a number, or M numbers (one per parameter, in the order of
        :meth:`Recognizer.flat`).
    chunk : int
        Strings processed at a time, at most (cut to what ``memory_mb`` holds).
    memory_mb : float or None
        The working budget in MiB (None: ``settings.default_memory_mb``); one that cannot
        hold one string (about :math:`32 M (N+1)^2 D` bytes) is refused.

    Returns
    -------
    sensbook.certify.Bounds
        The same fields as :func:`sensbook.output_bounds`.
    """
    x, N, chunk = _checked(model, x, chunk, memory_mb, _bytes_per_string, "affine bounds")
    P = _Params(model, radius)
    M, dev, f64 = P.M, model.device, torch.float64
    tok0, rtok, itok = P.p["tok"]
    pos0, rpos, ipos = P.p["pos"]
    D = model.D
    phi = positional_features(N, mark_first=model.mark_first, device=dev, dtype=f64)  # (S, 3)
    S = N + 1
    out = [], [], []
    for a in range(0, len(x), chunk):
        token = _BALLS.set(())          # this chunk's balls only, forgotten however it ends
        try:
            xb = x[a:a + chunk].to(dev).long()
            ids = torch.cat([xb, torch.full((len(xb), 1), EOS, device=dev)], 1)     # (B, S)
            Bc = len(xb)
            # generators only for the symbols that can move a quantity so far (named_parameters:
            # tok, pos, w, omega, then layer 0, 1, ...: a prefix, widened layer by layer)
            G = torch.zeros(Bc, S, D, max(itok, ipos) + 3 * D, dtype=f64, device=dev)
            # tok[ids]: entry (b, s, d) moves with symbol itok + ids[b, s] * D + d
            idx = (itok + ids.unsqueeze(-1) * D + torch.arange(D, device=dev)).unsqueeze(-1)
            G.scatter_add_(-1, idx, rtok[ids].unsqueeze(-1))
            # phi @ pos: entry (s, d) moves with symbol ipos + f * D + d by phi[s, f] r_pos[f, d]
            gp = phi.unsqueeze(-1) * rpos                                      # (S, 3, D)
            G[..., ipos:ipos + 3 * D] += _pos_gens(gp)
            h = Affine(tok0[ids] + phi @ pos0, G, torch.zeros(Bc, S, D, dtype=f64, device=dev))
            bad = torch.zeros(Bc, dtype=torch.bool, device=dev)
            for l in range(model.L):
                lay = P.layer(l)
                last = l == model.L - 1
                res = h.map(lambda t: t[..., -1:, :]) if last else h
                h = (res + _attention(h, lay, model.H, last, M)).fresh(M)
                h, z = _layer_norm(h, model.eps, ball=M, gram=last)
                bad |= z.any(-1)
                h = h.fresh(M)
                u = relu(_param_affine(h, lay["W1"], lay["b1"], M))
                h = (h + _param_affine(u, lay["W2"], lay["b2"], M)).fresh(M)
                if last:
                    break
                h, z = _layer_norm(h, model.eps, ball=M)
                bad |= z.any(-1)
                h = h.fresh(M)
            lo, hi, z = _readout(h.map(lambda t: t[..., -1, :]), P, model.eps)
            bad |= z
            bad_out = bad | ~(torch.isfinite(lo) & torch.isfinite(hi))    # overflow: no bound
            lo, hi = torch.where(bad_out, -torch.inf, lo), torch.where(bad_out, torch.inf, hi)
            out[0].append(torch.where(bad, -torch.inf, lo))
            out[1].append(torch.where(bad, torch.inf, hi))
            out[2].append(bad)
        finally:
            _BALLS.reset(token)
    return Bounds(*(torch.cat(o).cpu() for o in out))


def tight_bounds(model: Recognizer, x, radius, *, chunk: int = 4096,
                 memory_mb: float | None = None) -> Bounds:
    r"""The intersection of :func:`affine_bounds` and interval arithmetic
    (:func:`sensbook.output_bounds`): both enclose T over the box, so does their
    intersection; a string is uncertifiable only when both say so.

    Parameters
    ----------
    model, x, radius, chunk, memory_mb
        As for :func:`affine_bounds`.

    Returns
    -------
    sensbook.certify.Bounds
    """
    a = affine_bounds(model, x, radius, chunk=chunk, memory_mb=memory_mb)
    i = output_bounds(model, x, radius, chunk=chunk, memory_mb=memory_mb)
    return Bounds(torch.maximum(a.lo, i.lo), torch.minimum(a.hi, i.hi),
                  a.uncertifiable & i.uncertifiable)


def _pos_gens(gp):
    """(S, D, 3 D): entry (s, d) has phi[s, f] r_pos[f, d] at column f * D + d."""
    S, F3, D = gp.shape
    out = torch.zeros(S, D, F3, D, dtype=gp.dtype, device=gp.device)
    torch.diagonal(out, dim1=1, dim2=3).copy_(gp)
    return out.reshape(S, D, F3 * D)


def grow_box(model: Recognizer, x, labels, radius: float, *, margin: float = 0.0,
             factors=(4.0, 2.0), bounds=None, chunk: int = 4096) -> dict:
    r"""A box shaped per parameter tensor, grown greedily from a certified cube.

    Starting from the cube of half-width ``radius`` (which must certify), each parameter
    tensor in turn (in the order of ``named_parameters``) has its half-width multiplied by the first of ``factors`` at which the whole
    box still certifies (``sensbook.certify.certify``, margin ``margin``), or is left as
    it is. Every box kept was certified, so the result is: a search for a larger certified
    volume, not an optimum.

    Parameters
    ----------
    model : Recognizer
        One model (P = 1).
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    labels : array-like of bool
        The label each string must keep, ``(B,)``.
    radius : float
        The certified cube's half-width (> 0).
    margin : float
        The label margin, as for ``sensbook.certify.certify``.
    factors : sequence of float
        The growth factors tried per tensor, in order (each > 1).
    bounds : callable or None
        The bound (None: :func:`tight_bounds`).
    chunk : int
        Strings processed at a time.

    Returns
    -------
    dict
        ``radii`` (float64 ``(M,)``, the box's half-widths), ``grown`` (tensor name ->
        factor kept) and ``evaluations`` (bounds computed).
    """
    bounds = tight_bounds if bounds is None else bounds
    run = lambda rad: certify(model, x, labels, rad, margin=margin, chunk=chunk,
                              bounds=bounds)["certified"]
    rad = torch.full((model.M,), float(radius), dtype=torch.float64)
    if not radius > 0 or not run(rad):
        raise ValueError(f"radius={radius!r} must be > 0 and certify the cube")
    grown, evals, i = {}, 1, 0
    for name, p in model.named_parameters():
        n = p[0].numel()
        for f in factors:
            trial = rad.clone()
            trial[i:i + n] *= f
            evals += 1
            if run(trial):
                rad, grown[name] = trial, f
                break
        i += n
    return {"radii": rad, "grown": grown, "evaluations": evals}
