r"""Affine arithmetic: forms :math:`c + G \epsilon + [-e, e]` in noise symbols, and the rules
that carry them through elementwise functions (de Figueiredo & Stolfi 2004, *Affine
arithmetic*; the zonotope domain of Singh et al. 2018).

The lemmas behind each rule, and how :mod:`sensbook.zonotope` uses them to bound a
recognizer's output over a box of parameters, are stated in that module's docstring. Here:
the form (:class:`Affine`), its extent over the noise set (box symbols in [-1, 1], and
symbols registered as unit l2 balls in ``_BALLS``), products, smooth convex functions by
Taylor's theorem with the Lagrange remainder, ReLU by its chord, and the choice between two
enclosures of one quantity (:func:`tighten`). Nothing here knows the model.
"""
from __future__ import annotations

import contextvars
import functools

import torch

__all__ = ["Affine"]

#: The noise symbols constrained to unit l2 balls instead of [-1, 1] each, in the current
#: :func:`sensbook.zonotope.affine_bounds` call (set and reset there): (first symbol, number
#: of balls, symbols per ball). A layer norm's Taylor remainder is bounded in norm, so a ball
#: holds it exactly where a box of the same radius per coordinate is sqrt(D) wider.
_BALLS: contextvars.ContextVar = contextvars.ContextVar("sensbook_zonotope_balls", default=())


@functools.lru_cache(maxsize=64)
def _ball_columns(balls: tuple, width: int) -> dict:
    """Per ball size k, the indices of the symbols of every ball within ``width`` symbols,
    ball by ball (a long tensor of n * k)."""
    out = {}
    for s, n, k in balls:
        if s + n * k <= width:
            out.setdefault(k, []).append(torch.arange(s, s + n * k))
    return {k: torch.cat(v) for k, v in out.items()}


def _ball_blocks(G):
    """The generators of each ball, X + (number of balls, k), one tensor per ball size k."""
    for k, idx in _ball_columns(_BALLS.get(), G.shape[-1]).items():
        yield G[..., idx.to(G.device)].reshape(*G.shape[:-1], -1, k)


def _extent(G):
    """max |G eps| over the noise set per entry: |G_i| summed over box symbols, the l2 norm
    of G's entries over each ball."""
    out = G.abs().sum(-1)
    for blk in _ball_blocks(G):
        out = out + blk.norm(dim=-1).sum(-1) - blk.abs().sum((-1, -2))
    return out


def _vector_extent(G):
    """A bound on max ||G eps||_2 over the noise set, G of shape X + (D, M): the column norms
    summed over box symbols, each ball's Frobenius norm (>= its operator norm)."""
    out = G.square().sum(-2).sqrt().sum(-1)
    for blk in _ball_blocks(G):
        out = out + (blk.square().sum((-3, -1)).sqrt().sum(-1)
                     - blk.square().sum(-3).sqrt().sum((-1, -2)))
    return out


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
        return _extent(self.G) + self.e

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

    def fresh(self, start: int) -> "Affine":
        r"""The same set with its error box made generators: entry j of X[1:] (X[0] the strings,
        each its own computation) gets the noise symbol ``start + j`` with
        :math:`G = e_j`, and e = 0. Exact (a box is a zonotope); later linear maps then act on
        it with their signs, :math:`|w^\top A| e` rather than :math:`|w|^\top |A| e`. Symbols
        from ``start`` on must be unused by every form this one meets."""
        B, n = self.e.shape[0], self.e[0].numel()
        G = _pad(self.G, max(start, self.G.shape[-1]))
        box = torch.diag_embed(self.e.reshape(B, n)).reshape(*self.e.shape, n)
        return Affine(self.c, torch.cat([G, box], -1), torch.zeros_like(self.e))

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


def _cube_norm(G, top: int = 256):
    r"""A bound on :math:`\max_{\epsilon \in [-1, 1]^M} \lVert G \epsilon \rVert_2` per vector,
    G of shape X + (D, M): over the ``top`` columns of largest norm (a set T),
    :math:`\epsilon^\top G_T^\top G_T \epsilon \le \sum_{i, k \in T} |G_i \cdot G_k|`
    (exact for orthogonal columns, at most their column norms summed: Cauchy-Schwarz on every
    term), plus :math:`\sum_{i \notin T} \lVert G_i \rVert_2` (the triangle inequality).
    Symbols of a ball count as box symbols here: a unit ball lies in the cube."""
    norms = G.square().sum(-2).sqrt()                                  # X + (M,)
    if G.shape[-1] > top:
        norms, idx = norms.sort(-1, descending=True)
        G = torch.gather(G, -1, idx[..., :top].unsqueeze(-2).expand(*G.shape[:-1], top))
        rest = norms[..., top:].sum(-1)
    else:
        rest = norms.sum(-1) * 0
    gram = torch.einsum("...jm,...jk->...mk", G, G).abs().sum((-1, -2))
    return gram.sqrt() + rest
