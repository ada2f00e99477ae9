"""Certified bounds of T(theta, x) over a box of parameters: interval bound propagation.

For one recognizer theta_0 (:class:`sensbook.Recognizer`, P = 1) and a radius r (a number, or
one radius per parameter in the order of :meth:`Recognizer.flat`), :func:`output_bounds` gives
lower and upper bounds of T(theta, x) over *every* theta with |theta - theta_0| <= r
coordinatewise, for every string x at once. Every operation of the forward pass
(:mod:`sensbook.model`) is replaced by one on intervals [lo, hi] that contains every value the
operation can take when its inputs range over their intervals independently:

* sums and affine maps with interval weights: each product h_i W_ij is bounded *exactly*
  (min and max of its four corners), summed over i; the corners are written as matrix products
  by the signs of the weight intervals (:func:`interval_matmul`), so no (strings x D x D) array
  is ever formed;
* attention scores q.k and weights times values: exact corners per product, summed;
* softmax: the standard bounds exp(l_j) / (exp(l_j) + sum_{k != j} exp(u_k)) and
  exp(u_j) / (exp(u_j) + sum_{k != j} exp(l_k));
* layer norm: the centred coordinates c_j = d_j - mean(d) as the exact range of that linear
  map, the variance as the mean of the intervals of c_j^2, then c_j / sqrt(var + eps) as an
  interval product with [1/sqrt(var_hi + eps), 1/sqrt(var_lo + eps)]. At eps = 0 a variance
  interval that reaches 0 means some theta in the box may have a zero-variance layer norm
  (LN_0 undefined there): the string is **uncertifiable**, its bounds are (-inf, +inf) and it
  is reported as such, never certified;
* ReLU monotone; the read-out an interval dot product.

The bounds are valid up to float64 rounding (no directed rounding; :func:`certify` asks for a
margin ``pad`` above it). They are exact at r = 0 and grow with r (interval arithmetic is
inclusion-monotone). :func:`certified_radius` bisects on r for the largest radius at which
every string keeps its label with margin xi: the whole box then lies in the solution set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np
import torch

from .boolean import check_int, check_memory_mb, check_n, check_real, check_strings
from .model import EOS, Recognizer, positional_features
from .settings import default_memory_mb

__all__ = ["Bounds", "output_bounds", "certify", "certified_radius", "interval_matmul"]


# ---- interval primitives (lo, hi tensors) ------------------------------------------------
def _mul(al, ah, bl, bh):
    """Exact product of intervals, elementwise (broadcast): min and max of the four corners."""
    c = torch.stack(torch.broadcast_tensors(al * bl, al * bh, ah * bl, ah * bh))
    return c.amin(0), c.amax(0)


def interval_matmul(hl, hh, Wl, Wh):
    """The interval of h @ W over h in [hl, hh] (..., Din) and W in [Wl, Wh] (Din, Dout), every
    entry independent: sum over i of the exact range (four corners) of h_i W_ij.

    By the sign class of each weight interval: W >= 0 (max h_i W = h_hi^+ W_hi - h_hi^- W_lo),
    W <= 0, W symmetric around 0 (max = r max(h_hi^+, h_lo^-)), and the few others, which
    straddle 0 unevenly, term by term."""
    relu = torch.relu
    pos, neg = Wl >= 0, Wh <= 0
    mid = ~(pos | neg)
    sym = mid & (Wl == -Wh)
    odd = mid & ~sym
    z = torch.zeros((), dtype=Wl.dtype, device=Wl.device)
    m = lambda mask, W: torch.where(mask, W, z)
    hup, hun, hlp, hln = relu(hh), relu(-hh), relu(hl), relu(-hl)
    mag = torch.maximum(hup, hln)
    hi = (hup @ m(pos, Wh) - hun @ m(pos, Wl) + hlp @ m(neg, Wh) - hln @ m(neg, Wl)
          + mag @ m(sym, Wh))
    lo = (hlp @ m(pos, Wl) - hln @ m(pos, Wh) + hup @ m(neg, Wl) - hun @ m(neg, Wh)
          + mag @ m(sym, Wl))
    if odd.any():
        i, j = torch.nonzero(odd, as_tuple=True)
        tl, th = _mul(hl[..., i], hh[..., i], Wl[i, j], Wh[i, j])
        lo = lo.index_add(-1, j, tl)
        hi = hi.index_add(-1, j, th)
    return lo, hi


def _affine(h, W, b):
    lo, hi = interval_matmul(h[0], h[1], W[0], W[1])
    return lo + b[0], hi + b[1]


def _add(a, b):
    return a[0] + b[0], a[1] + b[1]


def _layer_norm(d, eps):
    """LN_eps of an interval (..., D): (lo, hi, zero) where ``zero`` (...) marks positions whose
    variance interval reaches 0 at eps = 0 (their outputs are set to 0, a placeholder)."""
    dl, dh = d
    D = dl.shape[-1]
    # c_j = (1 - 1/D) d_j - (1/D) sum_{k != j} d_k: the exact range of this linear map
    cl = dl - (dh.sum(-1, keepdim=True) - dh + dl) / D
    ch = dh - (dl.sum(-1, keepdim=True) - dl + dh) / D
    sq_hi = torch.maximum(cl * cl, ch * ch)
    sq_lo = torch.where((cl <= 0) & (ch >= 0), torch.zeros_like(cl), torch.minimum(cl * cl, ch * ch))
    vl, vh = sq_lo.mean(-1, keepdim=True) + eps, sq_hi.mean(-1, keepdim=True) + eps
    zero = (vl <= 0).squeeze(-1)
    inv_l, inv_h = 1 / torch.sqrt(vh), 1 / torch.sqrt(vl.clamp_min(torch.finfo(vl.dtype).tiny))
    lo, hi = _mul(cl, ch, inv_l, inv_h)
    # |LN(d)_j| <= sqrt(D - 1) for every d (sum_j c_j = 0): a valid tightening
    cap = math.sqrt(D - 1)
    lo, hi = lo.clamp(-cap, cap), hi.clamp(-cap, cap)
    keep = ~zero.unsqueeze(-1)
    return torch.where(keep, lo, 0.0), torch.where(keep, hi, 0.0), zero


def _attention(h, lay, H, last_only):
    """Interval multi-head softmax attention; h = (lo, hi) of shape (B, S, D)."""
    B, S, D = h[0].shape
    dh = D // H
    hq = (h[0][:, -1:], h[1][:, -1:]) if last_only else h
    heads = lambda t: t.reshape(B, t.shape[1], H, dh).transpose(1, 2)       # (B, H, s, dh)
    q = [heads(t) for t in _affine(hq, lay["Wq"], lay["bq"])]
    k = [heads(t) for t in _affine(h, lay["Wk"], lay["bk"])]
    v = [heads(t) for t in _affine(h, lay["Wv"], lay["bv"])]
    sl, sh = _mul(q[0].unsqueeze(-2), q[1].unsqueeze(-2), k[0].unsqueeze(-3), k[1].unsqueeze(-3))
    sl, sh = sl.sum(-1) / math.sqrt(dh), sh.sum(-1) / math.sqrt(dh)          # (B, H, s, S)
    top = sh.amax(-1, keepdim=True)
    El, Eh = torch.exp(sl - top), torch.exp(sh - top)
    rest_h = (Eh.sum(-1, keepdim=True) - Eh).clamp_min(0)
    rest_l = (El.sum(-1, keepdim=True) - El).clamp_min(0)
    pl, ph = El / (El + rest_h), Eh / (Eh + rest_l)
    pl, ph = pl.clamp(0, 1), ph.clamp(0, 1)
    # p >= 0: max p v = p_hi v_hi^+ - p_lo v_hi^-, min p v = p_lo v_lo^+ - p_hi v_lo^-
    relu = torch.relu
    ah = ph @ relu(v[1]) - pl @ relu(-v[1])
    al = pl @ relu(v[0]) - ph @ relu(-v[0])
    merge = lambda t: t.transpose(1, 2).reshape(B, hq[0].shape[1], D)
    return _affine((merge(al), merge(ah)), lay["Wo"], lay["bo"])


@dataclass
class Bounds:
    r"""Bounds of T over the box, per string.

    Parameters
    ----------
    lo, hi : torch.Tensor
        float64 ``(B,)``: the lower and upper bounds of T.
    uncertifiable : torch.Tensor
        bool ``(B,)``: a layer-norm variance interval reached 0 at :math:`\varepsilon = 0`
        (then ``lo = -inf``, ``hi = +inf``).
    """

    lo: torch.Tensor
    hi: torch.Tensor
    uncertifiable: torch.Tensor


def _radius(model, radius):
    if isinstance(radius, torch.Tensor) and radius.dim() == 0:
        radius = radius.item()
    elif isinstance(radius, np.ndarray) and radius.ndim == 0:
        radius = radius.item()
    if isinstance(radius, (bool, np.bool_)):
        raise TypeError(f"radius must be a finite number >= 0, got {radius!r}")
    if isinstance(radius, Real):                        # Python, numpy and 0-d numbers
        radius = check_real(radius, "radius", minimum=0)
        return torch.full((model.M,), radius, dtype=torch.float64)
    r = torch.as_tensor(np.asarray(radius, dtype=np.float64)).flatten()
    if r.shape != (model.M,) or not torch.isfinite(r).all() or (r < 0).any():
        raise ValueError(f"radius must be a number >= 0 or M = {model.M} finite numbers >= 0 "
                         f"(one per parameter, in the order of Recognizer.flat()), got "
                         f"shape {tuple(np.shape(radius))}")
    return r


def _boxes(model: Recognizer, radius) -> dict:
    """name -> (lo, hi) of every parameter over the box, float64, without the P axis."""
    r = _radius(model, radius)
    out, i = {}, 0
    for name, p in model.named_parameters():
        t = p.detach()[0].to(torch.float64)
        n = t.numel()
        rad = r[i:i + n].reshape(t.shape).to(t.device)
        out[name] = (t - rad, t + rad)
        i += n
    return out


def _layer(boxes, l):
    return {k.split(".")[-1]: v for k, v in boxes.items() if k.startswith(f"layers.{l}.")}


@torch.no_grad()
def _checked(model, x, chunk, memory_mb, per_string, what: str) -> tuple:
    """The argument checks of :func:`output_bounds` and of the affine ``what`` bounds
    (:mod:`sensbook.zonotope`): one model, strings of shape (B, N), and ``chunk`` cut to the
    strings ``memory_mb`` holds at ``per_string(model, N)`` bytes each. Returns (x, N, chunk)."""
    if not isinstance(model, Recognizer) or model.P != 1:
        raise ValueError("model must be a sensbook.Recognizer holding one model (P = 1), got "
                         f"{model!r}")
    chunk = check_int(chunk, "chunk", minimum=1)
    x = check_strings(x)
    if x.dim() != 2 or len(x) == 0:
        raise ValueError(f"x must have shape (B, N) with B >= 1 strings, got {tuple(x.shape)}")
    N = check_n(x.shape[-1])
    memory_mb = check_memory_mb(default_memory_mb(model.device) if memory_mb is None
                                else memory_mb)
    one = per_string(model, N)
    fits = int(memory_mb * 2**20 // one)
    if fits < 1:
        raise ValueError(f"memory_mb={memory_mb:g} cannot hold the {what} of one string at N={N}"
                         f" ({one / 2**20:.1f} MiB for this model): give memory_mb >= "
                         f"{math.ceil(one / 2**20)}")
    return x, N, min(chunk, fits)


def _bytes_per_string(model: Recognizer, N: int) -> int:
    """Bytes one string costs in :func:`output_bounds` at once: the attention's corner
    products, six float64 tensors of (H, S, S, D/H) per layer (S = N + 1), dominate; the
    (S, D) and (S, F) intervals and their sign parts are counted 16 times over."""
    S = N + 1
    return 8 * (6 * S * S * model.D + 16 * S * (model.D + model.F))


def output_bounds(model: Recognizer, x, radius, *, layer_norm: bool = True,
                  chunk: int = 4096, memory_mb: float | None = None) -> Bounds:
    r"""Bounds of :math:`T(\theta, x)` over every :math:`\theta` in the box
    :math:`|\theta - \theta_0| \le r`.

    Parameters
    ----------
    model : Recognizer
        One model (P = 1): :math:`\theta_0`, its :math:`\varepsilon` and positional features.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    radius : float or sequence of float
        The box's half-width r: a number, or M numbers (per parameter, in the order of
        :meth:`Recognizer.flat`).
    layer_norm : bool
        False bounds the same network with every layer norm removed (the no-LN control of
        ``sensbook.controls``).
    chunk : int
        Strings processed at a time, at most (cut to what ``memory_mb`` holds).
    memory_mb : float or None
        The working budget in MiB (None: ``settings.default_memory_mb`` of the model's
        device). A budget that cannot hold one string (the attention's interval corners,
        about :math:`48 (N+1)^2 D` bytes) is refused before anything is allocated.

    Returns
    -------
    Bounds
    """
    x, N, chunk = _checked(model, x, chunk, memory_mb, _bytes_per_string, "bounds")
    boxes = _boxes(model, radius)
    phi = positional_features(N, mark_first=model.mark_first, device=model.device,
                              dtype=torch.float64)
    pos = interval_matmul(phi, phi, *boxes["pos"])                        # (S, D)
    tok = boxes["tok"]
    out = [], [], []
    for a in range(0, len(x), chunk):
        xb = x[a:a + chunk].to(model.device).long()
        ids = torch.cat([xb, torch.full((len(xb), 1), EOS, device=xb.device)], 1)
        h = (tok[0][ids] + pos[0], tok[1][ids] + pos[1])                 # (B, S, D)
        bad = torch.zeros(len(xb), dtype=torch.bool, device=xb.device)
        for l in range(model.L):
            lay = _layer(boxes, l)
            last = l == model.L - 1
            res = (h[0][:, -1:], h[1][:, -1:]) if last else h
            h = _add(res, _attention(h, lay, model.H, last))
            if layer_norm:
                *h, z = _layer_norm(h, model.eps)
                bad |= z.any(-1)
            hid = _affine(h, lay["W1"], lay["b1"])
            f = _affine((torch.relu(hid[0]), torch.relu(hid[1])), lay["W2"], lay["b2"])
            h = _add(h, f)
            if layer_norm:
                *h, z = _layer_norm(h, model.eps)
                bad |= z.any(-1)
        w = boxes["w"]
        lo, hi = interval_matmul(h[0][:, -1], h[1][:, -1], w[0][:, None], w[1][:, None])
        lo, hi = lo[:, 0] + boxes["omega"][0], hi[:, 0] + boxes["omega"][1]
        out[0].append(torch.where(bad, -torch.inf, lo))
        out[1].append(torch.where(bad, torch.inf, hi))
        out[2].append(bad)
    return Bounds(*(torch.cat(o).cpu() for o in out))


def certify(model: Recognizer, x, labels, radius, *, margin: float = 0.0,
            pad: float = 1e-9, chunk: int = 4096, bounds=None) -> dict:
    """Whether every string keeps its label over the whole box.

    Parameters
    ----------
    model, x, radius, chunk
        As for :func:`output_bounds`.
    labels : array-like of bool
        The label each string must keep, ``(B,)``.
    margin, pad : float
        Finite numbers >= 0: accepted strings (label 1) need lo > margin + pad, rejected
        ones hi < -(margin + pad). Uncertifiable strings and strings whose bound is NaN
        never pass.
    bounds : callable or None
        The bound to certify with, called as ``bounds(model, x, radius, chunk=chunk)`` and
        returning :class:`Bounds`: None is :func:`output_bounds` (interval arithmetic);
        :func:`sensbook.affine_bounds` is the tighter affine-arithmetic one.

    Returns
    -------
    dict
        ``certified`` (bool), ``n_failed``, ``n_uncertifiable`` and ``min_margin`` (the
        smallest of lo - margin, -hi - margin over the strings; NaN when a bound is NaN).
    """
    margin = check_real(margin, "margin", minimum=0)
    pad = check_real(pad, "pad", minimum=0)
    labels = torch.as_tensor(np.asarray(labels)).bool().flatten()
    b = (output_bounds if bounds is None else bounds)(model, x, radius, chunk=chunk)
    if labels.shape != b.lo.shape:
        raise ValueError(f"labels must have one entry per string ({len(b.lo)}), got {tuple(labels.shape)}")
    slack = torch.where(labels, b.lo, -b.hi) - margin
    ok = slack > pad                                  # NaN slack is never > pad: failed
    nan = torch.isnan(slack)
    return {"certified": bool(ok.all()), "n_failed": int((~ok).sum()),
            "n_uncertifiable": int(b.uncertifiable.sum()),
            "min_margin": math.nan if bool(nan.any()) else float(slack.min())}


def certified_radius(model: Recognizer, x, labels, *, margin: float = 0.0, r_max: float = 1.0,
                     r_min: float = 1e-9, rtol: float = 0.01, chunk: int = 4096,
                     bounds=None, shape=None) -> dict:
    r"""The largest certified radius, by bisection on log r inside ``[r_min, r_max]``.

    Parameters
    ----------
    model : Recognizer
        One model (P = 1), as for :func:`output_bounds`.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    labels : array-like of bool
        The label each string must keep over the box, ``(B,)``.
    margin : float
        A finite number >= 0: accepted strings need ``lo > margin``, rejected ones
        ``hi < -margin`` (plus a 1e-9 pad); uncertifiable strings never pass.
    r_max, r_min : float
        The bisection's bounds, finite, ``0 < r_min < r_max``.
    rtol : float
        A finite number > 0: it stops when ``upper / radius <= 1 + rtol``, or when the
        midpoint no longer moves in float64 (an rtol below float64's resolution).
    chunk : int
        Strings processed at a time.
    bounds : callable or None
        The bound to certify with, called as ``bounds(model, x, radius, chunk=chunk)``:
        None is :func:`output_bounds` (interval arithmetic); :func:`sensbook.tight_bounds`
        the tighter one (affine arithmetic intersected with intervals).
    shape : array-like or None
        M weights > 0 (one per parameter, in the order of :meth:`Recognizer.flat`): the box
        certified at r is then :math:`|\theta_i - \theta_{0,i}| \le r\, w_i` (a box shaped
        per parameter); None is the cube.

    Returns
    -------
    dict
        ``radius`` (the largest r found certified; 0 when even ``r_min`` fails, ``r_max`` when
        it passes), ``upper`` (the smallest r found not certified, inf if none), ``steps``
        and, at ``upper``, ``n_uncertifiable`` (strings whose layer-norm variance interval
        reached 0 there).

    Notes
    -----
    Bisection assumes certification is monotone in r, which holds for interval arithmetic
    (inclusion-monotone). For another bound the radius returned is still one at which the
    box was certified (each step certifies its own box), so it is sound either way; only
    its being the largest depends on monotonicity.
    """
    margin = check_real(margin, "margin", minimum=0)
    r_max = check_real(r_max, "r_max", minimum=0, strict=True)
    r_min = check_real(r_min, "r_min", minimum=0, strict=True)
    if not r_min < r_max:
        raise ValueError(f"need 0 < r_min < r_max, got r_min={r_min!r}, r_max={r_max!r}")
    rtol = check_real(rtol, "rtol", minimum=0, strict=True)
    chunk = check_int(chunk, "chunk", minimum=1)
    if shape is not None:
        shape = torch.as_tensor(np.asarray(shape, dtype=np.float64)).flatten()
        if shape.shape != (model.M,) or not (torch.isfinite(shape) & (shape > 0)).all():
            raise ValueError(f"shape must be M = {model.M} finite weights > 0, got shape "
                             f"{tuple(shape.shape)}")
    box = (lambda r: r) if shape is None else (lambda r: r * shape)
    run = lambda r: certify(model, x, labels, box(r), margin=margin, chunk=chunk,
                            bounds=bounds)
    if not run(0.0)["certified"]:
        return {"radius": 0.0, "upper": 0.0, "steps": 1, "n_uncertifiable": 0}
    top = run(r_max)
    if top["certified"]:
        return {"radius": r_max, "upper": math.inf, "steps": 2, "n_uncertifiable": 0}
    bottom = run(r_min)
    if not bottom["certified"]:
        return {"radius": 0.0, "upper": r_min, "steps": 3,
                "n_uncertifiable": bottom["n_uncertifiable"]}
    lo, hi, steps, unc = r_min, r_max, 3, top["n_uncertifiable"]
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:                         # the midpoint stopped moving
            break
        res = run(mid)
        steps += 1
        if res["certified"]:
            lo = mid
        else:
            hi, unc = mid, res["n_uncertifiable"]
    return {"radius": lo, "upper": hi, "steps": steps, "n_uncertifiable": unc}
