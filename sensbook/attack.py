"""Attacks on a box of parameters: the worst theta a search finds, and the radius it breaks at.

:mod:`sensbook.certify` proves that *every* theta with ``|theta - theta_0|_inf <= r`` keeps every
label (a lower bound on the largest such radius). This module searches for a theta in the box
that does *not* (an upper bound): projected sign-gradient descent of the worst signed output

.. math:: g(\\theta) = \\min_x s(x)\\, T(\\theta, x), \\qquad s(x) = \\pm 1 \\text{ (the label)},

inside the box, from many starts at once on the recognizer's population axis (the centre,
uniform points of the box), plus random corners of the box evaluated once, on all the strings
given. A theta with ``g(theta) <= margin`` (or a non-finite T on some string: the layer norm
undefined, no label) is a *violation*. :func:`attack_radius` doubles r until the attack finds
one, then bisects: ``r_up``, the smallest radius at which it found one. Every certified radius
r satisfies ``r <= r_up`` (tests/test_attack.py checks it); the ratio ``r_up / r`` says how
loose the certificate can at most be. A search is a lower bound on the worst case, so ``r_up``
is an upper bound on the true largest radius, not the radius itself.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .boolean import check_int, check_real, check_seed, check_strings
from .model import Recognizer

__all__ = ["attack", "attack_radius"]


def _signs(labels, B):
    s = torch.as_tensor(np.asarray(labels)).flatten()
    if s.shape != (B,):
        raise ValueError(f"labels must have one entry per string ({B}), got {tuple(s.shape)}")
    return s.bool().to(torch.float64) * 2 - 1


def _worst(model, x, s):
    """min_x s(x) T(theta, x) per model (P,), -inf where some T is not finite."""
    T = model(x).to(torch.float64)
    g = (T * s).amin(-1)
    return torch.where(torch.isfinite(T).all(-1), g, -torch.inf)


def attack(model: Recognizer, x, labels, radius, *, margin: float = 0.0, starts: int = 48,
           corners: int = 256, steps: int = 60, seed: int = 0) -> dict:
    r"""The worst signed output a projected sign-gradient search finds inside the box
    :math:`|\theta - \theta_0|_\infty \le r`.

    Parameters
    ----------
    model : Recognizer
        One model (P = 1): :math:`\theta_0`.
    x : torch.Tensor
        0/1 strings ``(B, N)`` (all :math:`2^N` for a statement about recognition).
    labels : array-like of bool
        The label each string must keep, ``(B,)``.
    radius : float
        The box's half-width r >= 0 (every parameter moves).
    margin : float
        A violation is :math:`\min_x s(x) T(\theta, x) \le` ``margin`` (>= 0).
    starts : int
        Gradient starts: the centre and ``starts - 1`` uniform points of the box.
    corners : int
        Random corners of the box, evaluated without gradient steps.
    steps : int
        Sign-gradient steps per start; the step falls linearly from r / 2 to r / (2 steps).
    seed : int
        Seeds the starts and the corners.

    Returns
    -------
    dict
        ``worst`` (the smallest :math:`\min_x s(x) T` found, -inf when some T was not
        finite), ``violated`` (``worst <= margin``), ``theta`` (the worst point, ``(M,)``
        float64) and ``evaluations`` (models evaluated on all strings).
    """
    if not isinstance(model, Recognizer) or model.P != 1:
        raise ValueError(f"model must be a sensbook.Recognizer holding one model (P = 1), got {model!r}")
    x = check_strings(x)
    if x.dim() != 2 or len(x) == 0:
        raise ValueError(f"x must have shape (B, N) with B >= 1 strings, got {tuple(x.shape)}")
    x = x.to(torch.float64)
    s = _signs(labels, len(x))
    r = check_real(radius, "radius", minimum=0)
    margin = check_real(margin, "margin", minimum=0)
    starts = check_int(starts, "starts", minimum=1)
    corners = check_int(corners, "corners", minimum=0)
    steps = check_int(steps, "steps", minimum=0)
    g = torch.Generator().manual_seed(check_seed(seed))
    theta0 = model.flat().to(torch.float64).cpu()                            # (1, M)
    M = theta0.shape[1]
    pop = Recognizer(starts, model.D, model.L, model.H, model.F, model.eps,
                     mark_first=model.mark_first, dtype=torch.float64)
    u = torch.rand(starts, M, generator=g, dtype=torch.float64) * 2 - 1
    u[0] = 0
    theta = theta0 + r * u
    best, arg = torch.tensor(math.inf, dtype=torch.float64), theta0[0].clone()
    evals = 0

    def keep(th, val):
        nonlocal best, arg
        j = int(torch.argmin(val))
        if val[j] < best:
            best, arg = val[j].clone(), th[j].detach().clone()

    for t in range(steps + 1):
        pop.set_flat(theta)
        pop.zero_grad(set_to_none=True)
        with torch.enable_grad():
            for p in pop.parameters():
                p.requires_grad_(True)
            T = pop(x)
            val = (T * s).amin(-1)
            val = torch.where(torch.isfinite(T).all(-1), val, -torch.inf)
            keep(theta, val.detach())
            evals += starts
            if t == steps or r == 0:
                break
            finite = torch.isfinite(val)
            if not finite.any():
                break
            val[finite].sum().backward()
        grad = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(starts, -1)
                          for p in pop.parameters()], 1)
        for p in pop.parameters():
            p.requires_grad_(False)
        alpha = 0.5 * r * (1 - t / steps) + 0.5 * r / steps
        theta = theta - alpha * torch.sign(torch.nan_to_num(grad))
        theta = torch.minimum(torch.maximum(theta, theta0 - r), theta0 + r)
    if corners and r > 0:
        c = torch.randint(0, 2, (corners, M), generator=g, dtype=torch.float64) * 2 - 1
        th = theta0 + r * c
        with torch.no_grad():
            val = _worst(pop.like(corners).set_flat(th), x, s)
        keep(th, val)
        evals += corners
    worst = float(best)
    return {"worst": worst, "violated": not worst > margin, "theta": arg, "evaluations": evals}


def attack_radius(model: Recognizer, x, labels, *, margin: float = 0.0, r_start: float = 1e-3,
                  r_max: float = 1.0, rtol: float = 0.1, starts: int = 48, corners: int = 256,
                  steps: int = 60, seed: int = 0) -> dict:
    r"""``r_up``: the smallest radius at which :func:`attack` finds a violation, by doubling
    from ``r_start`` and then bisecting on log r.

    Parameters
    ----------
    model, x, labels, margin, starts, corners, steps, seed
        As for :func:`attack` (each radius tried uses the same seed).
    r_start : float
        The first radius tried (> 0); halved until no violation is found.
    r_max : float
        The largest radius tried (> ``r_start``); ``r_up`` is inf when none is found there.
    rtol : float
        Bisection stops when ``r_up / r_ok <= 1 + rtol`` (> 0).

    Returns
    -------
    dict
        ``r_up`` (inf when even ``r_max`` shows no violation; 0 when theta_0 itself is one),
        ``r_ok`` (the largest radius tried at which none was found), ``worst_at_ok`` (the
        attack's worst signed output there), ``tries``.

    Notes
    -----
    An upper bound on the largest radius inside which every theta recognises the function:
    a longer search may find a violation at a smaller radius. Lemma-free: it is a search.
    """
    r_start = check_real(r_start, "r_start", minimum=0, strict=True)
    r_max = check_real(r_max, "r_max", minimum=r_start, strict=True)
    rtol = check_real(rtol, "rtol", minimum=0, strict=True)
    kw = dict(margin=margin, starts=starts, corners=corners, steps=steps, seed=seed)
    tries = 1
    at0 = attack(model, x, labels, 0.0, **kw)
    if at0["violated"]:
        return {"r_up": 0.0, "r_ok": 0.0, "worst_at_ok": at0["worst"], "tries": tries}
    run = lambda r: attack(model, x, labels, r, **kw)
    r, res = r_start, None
    res = run(r); tries += 1
    if res["violated"]:
        hi, lo, worst = r, 0.0, at0["worst"]
        while lo == 0.0 and hi > 1e-12:
            r = hi / 2
            res = run(r); tries += 1
            if res["violated"]:
                hi = r
            else:
                lo, worst = r, res["worst"]
        if lo == 0.0:
            return {"r_up": hi, "r_ok": 0.0, "worst_at_ok": worst, "tries": tries}
    else:
        lo, worst, hi = r, res["worst"], None
        while hi is None:
            r = min(2 * lo, r_max)
            res = run(r); tries += 1
            if res["violated"]:
                hi = r
            elif r >= r_max:
                return {"r_up": math.inf, "r_ok": r, "worst_at_ok": res["worst"], "tries": tries}
            else:
                lo, worst = r, res["worst"]
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:
            break
        res = run(mid); tries += 1
        if res["violated"]:
            hi = mid
        else:
            lo, worst = mid, res["worst"]
    return {"r_up": hi, "r_ok": lo, "worst_at_ok": worst, "tries": tries}
