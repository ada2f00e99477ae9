"""The hinge between blowup and sensitivity: Lemma 2.9, Cor. 3.3 and Cor. 4.3 measured.

The argument of Kövér et al. (2026) goes from "the blowup beta is small" to "a flip moves T
little" (Lemma 2.9: |T(x) - T(x xor e_i)| <= C beta(x) beta(x xor e_i) / N) and from there to
"x has sensitivity 0" (Cor. 3.3 / 3.4 for eps > 0, Cor. 4.3 for eps = 0). This module measures
that hinge for populations of :class:`sensbook.Recognizer` models:

* :func:`flip_hinge`: T on x and on x xor e_i, the flip sizes |Delta T_i| and the blowup product
  beta(x) beta(x xor e_i) of Lemma 2.9, in one traced pass;
* :func:`lemma29_ratio`: N |Delta T_i| / (beta(x) beta(x xor e_i)), whose supremum is the
  constant C of Lemma 2.9;
* :func:`lemma29_slope`: Lemma 2.9 as a relation: the log-log slope of N |Delta T_i| on
  beta(x) beta(x xor e_i) (least squares, or of an upper quantile), with a bootstrap interval;
* :func:`flip_sensitivity`: the number of flipped bits whose label (margin xi) differs from
  that of x (the sensitivity of x restricted to those bits);
* :func:`maximise_influence`: the worst case over theta in a box of the largest flip,
  max_i |T(x) - T(x xor e_i)|, by gradient ascent (what Cor. 3.3/3.4 bound for every theta);
* :func:`converged_influence`: that search repeated with doubled step counts until doubling
  changes the best flip found by less than 10 % (or a cap is reached: censored).
"""
from __future__ import annotations


import numpy as np
import torch

from .boolean import check_memory_mb
from .geometry import ascend_in_box, check_bits, with_flips
from .labels import ACCEPT, REJECT, classify
from .model import Recognizer
from .settings import progress

__all__ = ["flip_hinge", "lemma29_ratio", "lemma29_slope", "flip_sensitivity",
           "maximise_influence", "converged_influence"]


def _check_model(model):
    if not isinstance(model, Recognizer):
        raise ValueError(f"model must be a sensbook.Recognizer, got {type(model).__name__}: "
                         "the hinge reads its layer norms' blowups; for any classifier use "
                         "sb.flip_influence or sb.sensitivity_profile")
    return model


@torch.no_grad()
def flip_hinge(model: Recognizer, x, bits=None, *, chunk: int | None = None,
               blowups: bool = True, memory_mb: float = 1024):
    """T(x), T(x xor e_i) and the blowups of Lemma 2.9, for each model, string and bit.

    ``x`` (B, N); ``bits`` positions (default all N). Returns a dict of tensors: ``T`` (P, B),
    ``T_flip`` (P, B, k), ``dT`` = |T_flip - T| (P, B, k) and, with ``blowups``,
    ``beta_pair`` = beta(x) beta(x xor e_i) (P, B, k) (+inf where a layer-norm input has
    variance exactly 0 at eps = 0). Each forward pass evaluates as many strings with their
    flips as fit ``memory_mb`` by the model's :meth:`~sensbook.Recognizer.memory_per_string`
    (at most ``chunk`` strings when given); when one string with all its flips does not fit,
    its flips are evaluated in groups (all N flips at N = 1024 would take ~70 GiB for 9 models).

    Time: quadratic in N for each of the B (1 + k) strings; on one CPU thread about 2 s per
    string at N = 16,000 for a model of D = 12, L = 2, H = 1, so about a minute per string at
    N = 10^5 (times P, L, H). A progress bar counts the forward passes (shown after a second).
    """
    model = _check_model(model)
    x = torch.as_tensor(x).float()
    if x.dim() != 2:
        raise ValueError(f"x must have shape (B, N), got {tuple(x.shape)}")
    bits = torch.arange(x.shape[1]) if bits is None else check_bits(bits, x.shape[1])
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ValueError(f"chunk must be None or an integer >= 1, got {chunk!r}")
    rows = max(2, int(check_memory_mb(memory_mb) * 2**20 // model.memory_per_string(x.shape[1])))
    k = len(bits)
    b = max(1, rows // (1 + k) if chunk is None else min(chunk, rows // (1 + k)))
    group = k if b * (1 + k) <= rows else rows - 1           # flips of one string per pass
    Ts, Bs = [], []
    starts, groups = range(0, max(x.shape[0], 1), b), range(0, max(k, 1), max(group, 1))
    bar = progress(total=len(starts) * len(groups), desc=f"flip_hinge N={x.shape[1]}")
    for a in starts:                                                # B = 0: empty tensors
        parts_T, parts_B = [], []
        for g in groups:
            xs = with_flips(x[a:a + b], bits[g:g + group])          # (b, 1+k', N): x first
            n, k1, N = xs.shape
            if blowups:
                T, tr = model.trace(xs.reshape(n * k1, N))
                parts_B.append(tr.beta.reshape(model.P, n, k1)[..., (g > 0):])
            else:
                T = model(xs.reshape(n * k1, N))
            parts_T.append(T.reshape(model.P, n, k1)[..., (g > 0):])  # T(x) from the first group
            bar.update(1)
        Ts.append(torch.cat(parts_T, 2))
        if blowups:
            Bs.append(torch.cat(parts_B, 2))
    bar.close()
    T = torch.cat(Ts, 1)
    out = {"T": T[..., 0], "T_flip": T[..., 1:], "dT": (T[..., 1:] - T[..., :1]).abs()}
    if blowups:
        beta = torch.cat(Bs, 1)
        out["beta_pair"] = beta[..., :1] * beta[..., 1:]
    return out


def lemma29_ratio(N: int, dT, beta_pair) -> np.ndarray:
    """N |Delta T_i| / (beta(x) beta(x xor e_i)): the constant Lemma 2.9 needs for this flip.

    Lemma 2.9 says this is at most C for every theta, x, i and N; its largest value over a
    sample is a lower bound on C. Non-finite blowups give ratio 0 (the bound is vacuous)."""
    dT = np.asarray(dT, dtype=float)
    bp = np.asarray(beta_pair, dtype=float)
    if dT.shape != bp.shape:
        raise ValueError(f"dT and beta_pair must have the same shape, got {dT.shape}, {bp.shape}")
    if not np.isfinite(dT).all():
        raise ValueError("dT must be finite (a NaN output is never a flip size)")
    return np.where(np.isfinite(bp), N * dT / bp, 0.0)


def lemma29_slope(n_dT, beta_pair, *, q: float | None = None, bins: int = 10,
                  n_boot: int = 400, level: float = 0.95, seed: int = 0) -> tuple:
    """Lemma 2.9 as a relation: the slope of log N |Delta T_i| on log beta(x) beta(x xor e_i).

    Lemma 2.9 bounds a flip by C beta beta' / N: the upper envelope of log N |Delta T| can
    rise at most with slope 1 in log beta beta' (a slope below 1 means large blowups buy less
    than the bound allows). ``n_dT``, ``beta_pair``: (P, k), P models (or points of a ball)
    and k flips each. ``q=None``: the least-squares slope over all flips; ``q`` in (0, 1): the
    slope of the envelope: the flips are cut into ``bins`` equal-count bins of log beta beta',
    and the ``q``-quantile of log N |Delta T| in each bin is fitted against the bin's median
    log beta beta'. Rows (models) are resampled with replacement (their k flips stay
    together); the interval is the central ``level`` range of the refitted slopes. Flips
    with a non-finite blowup or N |Delta T| = 0 are left out. Returns (slope, lo, hi)."""
    y = np.asarray(n_dT, dtype=float)
    b = np.asarray(beta_pair, dtype=float)
    if y.ndim != 2 or y.shape != b.shape:
        raise ValueError(f"n_dT and beta_pair must be (P, k) arrays of one shape, got "
                         f"{y.shape} and {b.shape}")
    if q is not None and not 0 < q < 1:
        raise ValueError(f"q must be None (least squares) or in (0, 1), got {q!r}")
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
        raise ValueError(f"bins must be an integer >= 2, got {bins!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    ok = np.isfinite(b) & (b > 0) & np.isfinite(y) & (y > 0)
    if ok.sum() < 2 * bins:
        raise ValueError(f"need at least {2 * bins} flips with a finite blowup and a nonzero "
                         f"flip, got {int(ok.sum())}")

    def ls(u, v):
        u = u - u.mean()
        return float(u @ (v - v.mean()) / (u @ u))

    def slope(rows):
        lx, ly = np.log(b[rows][ok[rows]]), np.log(y[rows][ok[rows]])
        if q is None:
            return ls(lx, ly)
        order = np.argsort(lx)
        parts = np.array_split(order, bins)
        return ls(np.array([np.median(lx[p]) for p in parts]),
                  np.array([np.quantile(ly[p], q) for p in parts]))

    g = np.random.default_rng(seed)
    P = len(y)
    boot = [slope(g.integers(0, P, P)) for _ in range(int(n_boot))]
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return float(slope(np.arange(P))), float(lo), float(hi)


def flip_sensitivity(T, T_flip, margin: float = 0.0) -> torch.Tensor:
    r"""How many of the flipped bits change the label of x (Cor. 4.3's k bits).

    Parameters
    ----------
    T : torch.Tensor
        Scores of the strings, ``(P, B)``.
    T_flip : torch.Tensor
        Scores of their flips, ``(P, B, k)`` (e.g. ``sensbook.geometry.with_flips``).
    margin : float
        The margin the labels are read with (:func:`sensbook.classify`).

    Returns
    -------
    torch.Tensor
        Shape ``(P, B)``: a flip counts when :math:`x` and :math:`x \oplus e_i` are both
        decided and differ. NaN outputs are an error, never a label.
    """
    T, T_flip = torch.as_tensor(T), torch.as_tensor(T_flip)
    if torch.isnan(T).any() or torch.isnan(T_flip).any():
        raise ValueError("T holds NaN: a zero-variance layer norm at eps = 0")
    lx, lf = classify(T, margin).unsqueeze(-1), classify(T_flip, margin)
    decided = lambda lab: (lab == ACCEPT) | (lab == REJECT)
    return (decided(lx) & decided(lf) & (lx != lf)).sum(-1)


def maximise_influence(model: Recognizer, x, bits, *, steps: int = 150,
                       lr: tuple = (0.05, 1e-4), box: float = 1.0):
    """Gradient ascent over theta in the box [-box, box]^M on the largest flip of one string.

    Objective: log max_i |T(theta, x) - T(theta, x xor e_i)| over the positions ``bits``, for
    the one string ``x`` (shape (1, N)); the P models are P independent starts, changed in
    place. Adam with a step size decaying geometrically from ``lr[0]`` to ``lr[1]``, every
    parameter clipped to the box after each step. Returns (start, end): the largest flip over
    *all* N bits of x, per start, before and after the search (float64 numpy, shape (P,)).
    Cor. 3.3 says that with eps > 0 the end value is at most C(Theta, eps) / N for every theta.
    """
    model = _check_model(model)
    x = torch.as_tensor(x).to(model.dtype)
    if x.dim() != 2 or x.shape[0] != 1:
        raise ValueError(f"x must have shape (1, N), got {tuple(x.shape)}")
    allbits = torch.arange(x.shape[1])
    largest = lambda: flip_hinge(model, x, allbits, blowups=False)["dT"].amax((1, 2))
    bits = check_bits(bits, x.shape[1])
    if not len(bits):
        raise ValueError("bits must name at least one position to flip (the objective is the "
                         "largest flip over them), got none")
    xs = with_flips(x, bits)[0].to(model.device)                      # (1+k, N)

    def log_flip():
        T = model(xs)                                                 # (P, 1+k)
        d = (T[:, 1:] - T[:, :1]).abs().amax(-1)
        return torch.log(d + 1e-300)

    starts = []
    ascend_in_box(model, log_flip, steps=steps, lr=lr, box=box,
                  before_step=lambda t: starts.append(largest()) if t == 0 else None)
    start = starts[0].double().cpu().numpy()
    return start, largest().double().cpu().numpy()


def converged_influence(make, x, bits, *, steps: int, cap: int, lr: tuple = (0.5, 0.01),
                        box: float = 1.0, tol: float = 0.1) -> dict:
    r"""``sensbook.hinge.maximise_influence`` run to convergence, doubling its steps.

    Parameters
    ----------
    make : callable
        ``make()`` builds the starts afresh, a :class:`~sensbook.Recognizer` population.
    x : torch.Tensor
        The one string, ``(1, N)``.
    bits : sequence of int
        The 1-based positions whose flips are maximised.
    steps : int
        The first run's step count.
    cap : int
        The largest step count allowed, at least ``2 steps``.
    lr : tuple of float
        Adam's step size, decaying geometrically from ``lr[0]`` to ``lr[1]``.
    box : float
        Parameters stay in :math:`[-\mathrm{box}, \mathrm{box}]^M`.
    tol : float
        The relative change below which a doubling has converged, in (0, 1).

    Returns
    -------
    dict
        ``steps`` (the step counts run), ``start`` ``(P,)``, ``ends`` (one ``(P,)`` array per
        step count), ``best`` (one float per step count), ``converged`` and ``model`` (the
        last run's end points).

    Notes
    -----
    From the same starts with ``steps``, ``2 steps``, ``4 steps``, ... until doubling the step
    count changes the best flip (the largest over the starts of their start and end values:
    every :math:`\theta` evaluated is a lower bound on the worst case) by less than ``tol`` of
    the larger of the two, or until the next doubling would pass ``cap``: then the cell is
    *censored* (``converged`` False) and must not be read as the worst case.
    """
    steps, cap = (int(v) for v in (steps, cap))
    if steps < 1 or cap < 2 * steps:
        raise ValueError(f"steps must be >= 1 and cap >= 2 steps (one doubling), got steps={steps}, "
                         f"cap={cap}")
    if not 0 < tol < 1:
        raise ValueError(f"tol must be in (0, 1), got {tol!r}")
    out = {"steps": [], "ends": [], "best": [], "converged": False}
    s = steps
    while s <= cap:
        model = make()
        start, end = maximise_influence(model, x, bits, steps=s, lr=lr, box=box)
        out["steps"].append(s)
        out["start"] = start
        out["ends"].append(end)
        out["best"].append(float(max(start.max(), end.max())))
        out["model"] = model
        if len(out["best"]) > 1:
            a, b = out["best"][-2:]
            if a == b or abs(b - a) < tol * max(a, b):
                out["converged"] = True
                break
        s *= 2
    return out
