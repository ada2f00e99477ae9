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
  scalar, so its sign is decided by the form :math:`w \cdot c` alone (:func:`_readout`).

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

from .certify import Bounds, _checked, _radius, certify, output_bounds
from .model import EOS, Recognizer, positional_features

__all__ = ["Affine", "affine_bounds", "tight_bounds", "grow_box"]


class Affine:
    r"""An affine form :math:`c + G \epsilon + [-e, e]` per entry, :math:`\epsilon \in [-1, 1]^M`.

    Parameters
    ----------
    c : torch.Tensor
        The centre, shape X.
    G : torch.Tensor
        The generators, shape X + (M,).
    e : torch.Tensor
        The error half-width (>= 0), shape X.
    """

    def __init__(self, c, G, e):
        self.c, self.G, self.e = c, G, e

    def rad(self):
        """R = sum_i |G_i| + e: the form lies in [c - R, c + R]."""
        return self.G.abs().sum(-1) + self.e

    def bounds(self):
        """(lo, hi) of the form over the box."""
        R = self.rad()
        return self.c - R, self.c + R

    def __add__(self, o):
        a, b = _same(self.G, o.G)
        return Affine(self.c + o.c, a + b, self.e + o.e)

    def shift(self, t):
        """z + t for a constant t (exact)."""
        return Affine(self.c + t, self.G, self.e)

    def map(self, fn):
        """A reshaping or indexing ``fn`` of the entries (exact), written with negative axes and
        ``...`` (the generators carry M in front of X while it acts)."""
        return Affine(fn(self.c), _gmap(fn, self.G), fn(self.e))

    def linear(self, A):
        """z @ A along the last axis, A a constant (Din, Dout) matrix (exact)."""
        return Affine(self.c @ A, (self.G.transpose(-1, -2) @ A).transpose(-1, -2),
                      self.e @ A.abs())

    def sum(self, dim):
        """Sum over an axis of X (dim < 0 counts from the end of X)."""
        return Affine(self.c.sum(dim), self.G.sum(dim - 1), self.e.sum(dim))

    def scale(self, k):
        """k z for a constant k broadcast over X (exact)."""
        return Affine(self.c * k, self.G * k.unsqueeze(-1) if isinstance(k, torch.Tensor)
                      else self.G * k, self.e * (k.abs() if isinstance(k, torch.Tensor)
                                                 else abs(k)))


def _pad(G, m):
    """G with its generators widened to the first m noise symbols (zeros appended)."""
    return G if G.shape[-1] >= m else torch.nn.functional.pad(G, (0, m - G.shape[-1]))


def _same(a, b):
    """Two generator tensors widened to the same number of symbols."""
    m = max(a.shape[-1], b.shape[-1])
    return _pad(a, m), _pad(b, m)


def _gmap(fn, G):
    """Apply an entry map ``fn`` written for X to the generators X + (M,)."""
    return fn(G.movedim(-1, 0)).movedim(0, -1)


def mul(a: Affine, b: Affine) -> Affine:
    r"""The product of two forms, entrywise (broadcast): :math:`|\delta_a \delta_b| \le R_a R_b`."""
    Ga, Gb = _same(a.G, b.G)
    G = a.c.unsqueeze(-1) * Gb + b.c.unsqueeze(-1) * Ga
    e = a.c.abs() * b.e + b.c.abs() * a.e + a.rad() * b.rad()
    return Affine(a.c * b.c, G, e)


def _matmul(a: Affine, b: Affine, spec: str) -> Affine:
    r"""A contraction of two forms (einsum ``spec`` on the entries, e.g. q k^T or p v): the
    product rule summed, :math:`\sum |\delta_a \delta_b| \le \sum R_a R_b`."""
    ins, out = spec.split("->")
    sa, sb = ins.split(",")
    Ga, Gb = _same(a.G, b.G)
    G = (torch.einsum(f"{sa},{sb}m->{out}m", a.c, Gb)
         + torch.einsum(f"{sa}m,{sb}->{out}m", Ga, b.c))
    e = (torch.einsum(spec, a.c.abs(), b.e) + torch.einsum(spec, a.e, b.c.abs())
         + torch.einsum(spec, a.rad(), b.rad()))
    return Affine(torch.einsum(spec, a.c, b.c), G, e)


def _convex(z: Affine, f, df, d2f_max, floor=None) -> Affine:
    """f(z) for a convex f with f'' >= 0: Taylor at c, the remainder in [0, K R^2 / 2], K the
    largest f'' between c and every value z takes; ``floor`` (optional) is a lower bound on
    those values known otherwise, which narrows the range K is taken over."""
    R = z.rad()
    lo = z.c - R if floor is None else torch.maximum(z.c - R, floor)
    lo = torch.minimum(lo, z.c)
    k = d2f_max(lo, z.c + R) * R * R / 4
    g = df(z.c)
    return Affine(f(z.c) + k, z.G * g.unsqueeze(-1), z.e * g.abs() + k)


def exp(z: Affine) -> Affine:
    """exp of a form (K = exp(upper end))."""
    return _convex(z, torch.exp, torch.exp, lambda lo, hi: torch.exp(hi))


def reciprocal(z: Affine, floor) -> Affine:
    """1 / z where every value is >= ``floor`` > 0 and c > 0 (K = 2 / lo^3); entries where
    that fails are the caller's to mark."""
    return _convex(z, lambda v: 1 / v, lambda v: -1 / (v * v), lambda lo, hi: 2 / lo ** 3,
                   floor)


def rsqrt(z: Affine, floor) -> Affine:
    """z^(-1/2) where every value is >= ``floor`` > 0 and c > 0 (K = 3/4 lo^(-5/2))."""
    return _convex(z, torch.rsqrt, lambda v: -0.5 * v ** -1.5,
                   lambda lo, hi: 0.75 * lo ** -2.5, floor)


def square(z: Affine) -> Affine:
    """z^2 (K = 2): c^2 + 2 c (z - c) + [0, R^2]."""
    return _convex(z, lambda v: v * v, lambda v: 2 * v, lambda lo, hi: torch.full_like(lo, 2.0))


def relu(z: Affine) -> Affine:
    """ReLU by the chord on [l, u] where it straddles 0 (identity above, 0 below)."""
    lo, hi = z.bounds()
    lam = torch.where(lo >= 0, torch.ones_like(lo),
                      torch.where(hi <= 0, torch.zeros_like(lo), hi / (hi - lo)))
    mu = torch.where((lo < 0) & (hi > 0), -lam * lo / 2, torch.zeros_like(lo))
    return Affine(z.c * lam + mu, z.G * lam.unsqueeze(-1), z.e * lam + mu)


def tighten(z: Affine, lo, hi, factor: float = 1.0) -> Affine:
    """Of two enclosures of the same quantity, entrywise: the interval [lo, hi] as a form
    without generators where its half-width is below ``factor`` times the form's range, else
    the form. Both enclose every value, so either is sound; the form keeps the first-order
    dependence on the parameters, so it is given up only where the interval is much narrower
    (``factor`` < 1: a saturated softmax)."""
    keep = z.rad() * factor <= (hi - lo) / 2
    return Affine(torch.where(keep, z.c, (lo + hi) / 2),
                  torch.where(keep.unsqueeze(-1), z.G, 0.0),
                  torch.where(keep, z.e, (hi - lo) / 2))


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


def _norm_range(cen: Affine, eps):
    r"""Over the box, of the centred form c (X + (D,)): (n0, rho, nlo, nhi, u0) with
    :math:`n_0 = \lVert (c_0, \kappa) \rVert`, :math:`\kappa^2 = D\varepsilon`, rho a bound
    on :math:`\lVert h \rVert`, :math:`h = c - c_0` (the smaller of :math:`\lVert R \rVert_2`
    and :math:`\sum_i \lVert G_i \rVert_2 + \lVert e \rVert_2`), and bounds
    :math:`n_{lo} \le \lVert (c, \kappa) \rVert \le n_{hi}`:
    :math:`\lVert (c, \kappa) \rVert \ge u_0 \cdot c + \kappa^2 / n_0 = n_0 + u_0 \cdot h`
    (Cauchy-Schwarz with the unit vector :math:`(c_0, \kappa) / n_0`, whose least value over
    the box is read off the form exactly), :math:`\ge n_0 - \rho` and :math:`\ge \kappa`;
    :math:`\lVert (c, \kappa) \rVert^2 = n_0^2 + 2 c_0 \cdot h + \lVert h \rVert^2`."""
    D = cen.c.shape[-1]
    c0 = cen.c
    n0 = (c0.square().sum(-1) + D * eps).sqrt()
    rho = torch.minimum(cen.rad().square().sum(-1).sqrt(),
                        cen.G.square().sum(-2).sqrt().sum(-1) + cen.e.square().sum(-1).sqrt())
    u0 = torch.where((n0 > 0).unsqueeze(-1), c0 / n0.clamp_min(1e-300).unsqueeze(-1), 0.0)
    # the largest |u0 . h| over the box: its generators exactly, its error terms by |u0|
    dev = torch.einsum("...j,...jm->...m", u0, cen.G).abs().sum(-1) + (u0.abs() * cen.e).sum(-1)
    nlo = torch.maximum(torch.maximum(n0 - rho, n0 - dev), torch.full_like(n0, math.sqrt(D * eps)))
    nhi = torch.minimum(n0 + rho, (n0 * n0 + 2 * n0 * dev + rho * rho).sqrt())
    return n0, rho, nlo, nhi, u0


def _layer_norm_direct(cen: Affine, eps):
    r"""(LN_eps, bad) of the centred form ``cen`` = c as one map (the book's lemma, from the
    module docstring's layer-norm rule; its constant is checked against brute force in
    ``tests/test_zonotope.py``): with :math:`\kappa^2 = D\varepsilon`,
    :math:`\mathrm{LN}(d) = \sqrt D\, u(c)`, :math:`u(c) = c / \lVert (c, \kappa) \rVert`,
    the first D coordinates of the unit vector of :math:`(c, \kappa)`. Its Jacobian at the
    centre is :math:`(I - u_0 u_0^\top) / n_0`, :math:`n_0 = \lVert (c_0, \kappa) \rVert`,
    and its second derivative obeys :math:`\lVert D^2 u(c)[h, h] \rVert \le (2/\sqrt 3)
    \lVert h \rVert^2 / \lVert (c, \kappa) \rVert^2` (the maximum over the angle of h to
    c of :math:`\sqrt{(1 - a^2)(1 + 3 a^2)}`), so where :math:`\lVert (c, \kappa) \rVert \ge
    n_{lo} > 0` on the whole box and :math:`\lVert c - c_0 \rVert \le \rho`
    (:func:`_norm_range`), Taylor's integral remainder has norm at most
    :math:`\rho^2 / (\sqrt 3\, n_{lo}^2)`, a bound on every coordinate. bad (X[:-1]) marks
    positions where :math:`n_{lo} \le 0` (at eps = 0 some theta of the box may have LN_0
    undefined there)."""
    D = cen.c.shape[-1]
    c0 = cen.c
    n0, rho, nlo, _, u0 = _norm_range(cen, eps)
    bad = ~(nlo > 0)
    n = torch.where(bad, 1.0, n0).unsqueeze(-1)
    u0 = torch.where(bad.unsqueeze(-1), 0.0, u0)                          # X
    k = math.sqrt(D) / n                                                  # X[:-1] + (1,)
    J = k.unsqueeze(-1) * (torch.eye(D, dtype=c0.dtype, device=c0.device)
                           - u0.unsqueeze(-1) * u0.unsqueeze(-2))         # X + (D,)
    G = torch.einsum("...jk,...km->...jm", J, cen.G)
    rem = math.sqrt(D) * rho.square() / (math.sqrt(3) * nlo.clamp_min(1e-300).square())
    e = torch.einsum("...jk,...k->...j", J.abs(), cen.e) + torch.where(bad, 0.0, rem).unsqueeze(-1)
    out = Affine(math.sqrt(D) * u0, torch.where(bad[..., None, None], 0.0, G),
                 torch.where(bad.unsqueeze(-1), 0.0, e))
    return out, bad


def _layer_norm(d: Affine, eps, cen: Affine | None = None):
    r"""(LN_eps(d), bad): per entry the narrower of :func:`_layer_norm_direct`'s and
    :func:`_layer_norm_parts`' forms (each entry's form holds for every theta of the box,
    whichever rule made it), then the interval :math:`[-\sqrt D, \sqrt D]` where narrower;
    bad where neither rule knows the norm positive. ``cen``: d already centred."""
    D = d.c.shape[-1]
    cen = _centred(d) if cen is None else cen
    out, bad = _layer_norm_direct(cen, eps)
    c0 = out.c
    parts, bad2 = _layer_norm_parts(cen, eps)
    take = (bad & ~bad2).unsqueeze(-1) | (~bad2.unsqueeze(-1) & (parts.rad() < out.rad()))
    out = Affine(torch.where(take, parts.c, out.c), torch.where(take.unsqueeze(-1), parts.G, out.G),
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
    :math:`\rho \ge n_0`. The bounds through :func:`_layer_norm` are intersected with
    these."""
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
    _, _, nlo, nhi, _ = _norm_range(cen, eps)
    lo2 = torch.where(alo >= 0, alo / nhi, alo / nlo) + (om0 - rom)
    hi2 = torch.where(ahi <= 0, ahi / nhi, ahi / nlo) + (om0 + rom)
    defined = (nlo > 0) | (alo > 0) | (ahi < 0)
    lo2 = torch.where(defined & ~torch.isnan(lo2), lo2, -torch.inf)
    hi2 = torch.where(defined & ~torch.isnan(hi2), hi2, torch.inf)
    return torch.maximum(lo1, lo2), torch.minimum(hi1, hi2), bad_ln & ~defined


def _bytes_per_string(model, N):
    """Bytes one string costs at once: the generators (M float64 per entry) of the attention's
    (H, S, S, D/H) products, counted four times, dominate."""
    S = N + 1
    return 8 * model.M * (4 * S * S * model.D + 12 * S * (model.D + model.F))


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
            h = res + _attention(h, lay, model.H, last, M)
            h, z = _layer_norm(h, model.eps)
            bad |= z.any(-1)
            u = relu(_param_affine(h, lay["W1"], lay["b1"], M))
            h = h + _param_affine(u, lay["W2"], lay["b2"], M)
            if last:
                break
            h, z = _layer_norm(h, model.eps)
            bad |= z.any(-1)
        lo, hi, z = _readout(h.map(lambda t: t[..., -1, :]), P, model.eps)
        bad |= z
        bad_out = bad | ~(torch.isfinite(lo) & torch.isfinite(hi))    # overflow: no bound
        lo, hi = torch.where(bad_out, -torch.inf, lo), torch.where(bad_out, torch.inf, hi)
        out[0].append(torch.where(bad, -torch.inf, lo))
        out[1].append(torch.where(bad, torch.inf, hi))
        out[2].append(bad)
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
