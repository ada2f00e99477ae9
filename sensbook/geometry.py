"""Parameter-space geometry: influence, blowup, recognition, packing, small balls,
danger zones.

The measurements behind chapters 3 (eps > 0) and 4 (eps = 0) of the book, for
populations of :class:`sensbook.Recognizer` models (P parameter draws evaluated at
once). Numbering of the results follows ``paper-notes.md`` (Kövér et al., 2026):

* Lemma 2.9 / Cor. 3.3: :func:`flip_influence`, :func:`exhaustive_influence` (|T(x) -
  T(x xor e_i)|);
* Lemma 3.2: :func:`blowup_bound` ((1 + 1/sqrt(eps))^(2L): this model has 2L layer
  norms);
* Cor. 3.4: :func:`recognition` (constant / non-constant / not recognised with margin
  xi);
* Prop. 3.5: :func:`distinct_functions` (packing) and :func:`lipschitz_theta` (Lemma
  3.1);
* Section 4 (small-ball heuristic): :func:`layer_norm_variances`,
  :func:`small_ball_cdf`, :func:`small_ball_exponent` (Hill estimator);
* Lemma 4.2 (danger zones): :func:`danger_center`, :func:`exceedance` (the l-infinity
  ball around a centre is :func:`sensbook.perturb` with ``kind='uniform'``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .adapters import Classifier
from .boolean import check_n, check_real, check_strings, index_to_strings
from .labels import ACCEPT, REJECT, Evaluator, classify
from .model import Recognizer, positional_features
from .settings import progress as _progress

__all__ = [
    "blowup_bound",
    "flip_bits",
    "with_flips",
    "flip_influence",
    "output_table",
    "exhaustive_influence",
    "Recognition",
    "recognition",
    "distinct_functions",
    "lipschitz_theta",
    "layer_norm_variances",
    "small_ball_cdf",
    "small_ball_exponent",
    "danger_center",
    "exceedance",
    "random_strings",
]


def _check_model(model):
    if not isinstance(model, Recognizer):
        raise ValueError(
            f"model must be a sensbook.Recognizer, got {type(model).__name__}: this "
            "instrument reads the recognizer's parameters or layer norms; for any classifier "
            "use sb.flip_influence, sb.output_table or sb.sensitivity_profile"
        )
    return model


def _outputs(ev, x) -> torch.Tensor:
    """T of a classifier on ``x`` (B, N) through the boundary every instrument shares
    (:class:`sensbook.labels.Evaluator` ``ev``), as (P, B) (P = 1 for a single model)."""
    dt, dev = getattr(ev.classifier, "dtype", None), getattr(ev.classifier, "device", None)
    dt = dt if isinstance(dt, torch.dtype) and dt.is_floating_point else torch.float32
    dev = dev if isinstance(dev, (torch.device, str)) else None
    return ev(x.to(device=dev, dtype=dt)).reshape(-1, len(x))


def _check_int(name, v, lo=1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def _check_pos(name, v, allow_zero=False):
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(
            f"{name} must be a finite number {'>=' if allow_zero else '>'} 0, got {v!r}"
        )
    return float(v)


# ---- Lemma 3.2 -----------------------------------------------------------------------
def blowup_bound(eps: float, L: int) -> float:
    r"""Lemma 3.2 for this model: :math:`\beta^L \le (1 + 1/\sqrt{\varepsilon})^{2L}` for
    every :math:`\theta`, x and N.

    Parameters
    ----------
    eps : float
        The layer norms' :math:`\varepsilon \ge 0`; 0 gives +inf.
    L : int
        The number of layers.

    Notes
    -----
    Each layer norm has :math:`z = 1/\sqrt{\mathrm{var} + \varepsilon} \le 1/\sqrt{\varepsilon}`,
    and the model has 2L of them (post-LN after attention and after the feed-forward block),
    so the product of the 2L factors :math:`\max_n (1 + z_n)` is at most
    :math:`(1 + 1/\sqrt{\varepsilon})^{2L}`.
    """
    eps = _check_pos("eps", eps, allow_zero=True)
    L = _check_int("L", L)
    return math.inf if eps == 0 else (1 + 1 / math.sqrt(eps)) ** (2 * L)


# ---- strings and flips ---------------------------------------------------------------
def random_strings(N: int, B: int, *, seed: int = 0) -> torch.Tensor:
    """B uniform strings of length N (float 0/1, shape (B, N)), seeded."""
    N, B = check_n(N), _check_int("B", B)
    g = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, 2, (B, N), generator=g).float()


def flip_bits(N: int, k: int) -> torch.Tensor:
    """k bit positions (0-based) spread evenly over 0..N-1, in adjacent pairs (both
    parities).

    The positional features (n/(N+1), (-1)^n, 1[n=1]) make a bit's influence depend
    smoothly on n/N and on the parity of n, so pairs (i, i+1) at evenly spaced i, always
    including the first and the last bit, see every kind of position. Returns all N bits
    when k >= N.
    """
    N, k = check_n(N), _check_int("k", k)
    if k >= N:
        return torch.arange(N)
    base = torch.linspace(0, N - 2, max(1, k // 2)).round().long()
    return torch.unique(torch.cat([base, base + 1, torch.tensor([0, N - 1])]))


def check_bits(bits, N: int, argument: str = "bits") -> torch.Tensor:
    """Bit positions as a 1-d int64 tensor: integers in 0..N-1 (0-based columns), from a
    list, an array or an integer tensor. A boolean mask, floats (``1.7``) or positions
    out of range are an error naming ``argument``, never rounded or read as 0/1 positions."""
    allowed = f"a 1-d collection of integer positions in 0..{N - 1}"
    try:
        b = bits if isinstance(bits, torch.Tensor) else torch.as_tensor(np.asarray(bits))
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{argument} must be {allowed}, got {bits!r}") from None
    if b.numel() == 0 and b.dim() == 1:
        return b.to(torch.long)
    if b.dtype == torch.bool or b.is_floating_point() or b.is_complex():
        raise TypeError(f"{argument} must be {allowed} (not a mask, not floats); got "
                        f"dtype {b.dtype}")
    if b.dim() != 1 or b.min() < 0 or b.max() >= N:
        raise ValueError(f"{argument} must be {allowed}; got {b.tolist()!r}"[:300])
    return b.to(torch.long)


def with_flips(x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """(B, 1 + k, N): each string x followed by x xor e_i for each i in ``bits``.

    ``x``: 0/1 strings (:func:`sensbook.check_strings`; a 2 or a -1 is an error, never
    reduced mod 2); ``bits``: positions (:func:`check_bits`)."""
    x = check_strings(x)
    if x.dim() != 2:
        raise ValueError(f"x must have shape (B, N), got {tuple(x.shape)}")
    bits = check_bits(bits, x.shape[1])
    B, N = x.shape
    flips = torch.zeros(len(bits) + 1, N, dtype=x.dtype)
    flips[torch.arange(1, len(bits) + 1), bits] = 1
    return (x.unsqueeze(1) + flips) % 2


@torch.no_grad()
def flip_influence(
    model: Classifier, x: torch.Tensor, bits=None, *, chunk: int = 64
) -> torch.Tensor:
    r"""The change of the score under one flip, :math:`|T(\theta, x) - T(\theta, x \oplus e_i)|`
    for each model, string and bit.

    Parameters
    ----------
    model : callable
        A :class:`sensbook.Recognizer` or any classifier returning scores ``(B,)`` or ``(P, B)``.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    bits : sequence of int, optional
        The 1-based positions flipped (default all N).
    chunk : int
        Strings evaluated at a time, each with its flips.

    Returns
    -------
    torch.Tensor
        Shape ``(P, B, k)`` for ``k`` positions (P = 1 for a single model).

    Notes
    -----
    Lemma 2.9 bounds it by :math:`C \beta(x) \beta(x \oplus e_i) / N`; with
    :math:`\varepsilon > 0` the blowups are bounded (Lemma 3.2), so it is :math:`O(1/N)`
    (Cor. 3.3).
    """
    x = torch.as_tensor(x).float()
    if x.dim() != 2 or not len(x):
        raise ValueError(f"x must have shape (B, N) with B >= 1 strings, got {tuple(x.shape)}")
    bits = torch.arange(x.shape[1]) if bits is None else torch.as_tensor(bits)
    chunk, ev, out = _check_int("chunk", chunk), Evaluator(model, "model"), []
    for a in range(0, x.shape[0], chunk):
        xs = with_flips(x[a : a + chunk], bits)  # (b, 1+k, N)
        b, k1, N = xs.shape
        T = _outputs(ev, xs.reshape(b * k1, N)).reshape(-1, b, k1)
        out.append((T[..., 1:] - T[..., :1]).abs())
    ev.check()
    return torch.cat(out, dim=1)


@torch.no_grad()
def output_table(
    model: Classifier, N: int, *, chunk: int | None = None
) -> torch.Tensor:
    r""":math:`T(\theta, x)` on all :math:`2^N` strings, in index order.

    Parameters
    ----------
    model : callable
        Any classifier returning scores ``(B,)`` or ``(P, B)``.
    N : int
        The string length, at most 20.
    chunk : int, optional
        Strings per call (default: about 256 MB of activations, by ``memory_per_string``).

    Returns
    -------
    torch.Tensor
        Shape ``(P, 2**N)`` (P = 1 for a single model).
    """
    N, ev = check_n(N, maximum=20), Evaluator(model, "model")
    if chunk is None:
        est = getattr(model, "memory_per_string", None)
        chunk = max(1, int(256 * 2**20 // (est(N) if callable(est) else 64 * (N + 1))))
    chunk = _check_int("chunk", chunk)
    parts = []
    for a in range(0, 2**N, chunk):
        idx = torch.arange(a, min(a + chunk, 2**N))
        parts.append(_outputs(ev, index_to_strings(idx, N)))
    ev.check()
    return torch.cat(parts, dim=-1)


def exhaustive_influence(
    model: Classifier, N: int, *, table: torch.Tensor | None = None
) -> torch.Tensor:
    r"""The largest change of the score under one flip, over all strings and bits.

    Parameters
    ----------
    model : callable
        Any classifier returning scores ``(B,)`` or ``(P, B)``.
    N : int
        The string length.
    table : torch.Tensor, optional
        Its :func:`output_table`, if already computed.

    Returns
    -------
    torch.Tensor
        Shape ``(P,)``: :math:`\max_{x, i} |T(x) - T(x \oplus e_i)|`, each string evaluated
        once (the flip of index ``j`` is index ``j ^ (1 << i)``).
    """
    T = output_table(model, N) if table is None else table
    N = T.shape[-1].bit_length() - 1
    idx = torch.arange(2**N, device=T.device)
    best = torch.zeros(T.shape[:-1], dtype=T.dtype, device=T.device)
    for i in range(N):
        best = torch.maximum(best, (T - T[..., idx ^ (1 << i)]).abs().amax(-1))
    return best


# ---- Cor. 3.4 and Prop. 3.5 ----------------------------------------------------------
@dataclass
class Recognition:
    """What each of P models recognises at length N with margin xi (bool tensors of
    shape (P,)).

    ``recognises``: every string accepted (T >= xi) or rejected (T <= -xi), none
    undecided or non-finite; ``constant`` / ``nonconstant``: recognises, with one label
    / with both labels. ``T``: outputs (P, 2^N); ``table``: int8 labels (P, 2^N) as
    :func:`sensbook.truth_table`'s; ``influence``: max over strings and bits of |T(x) -
    T(x xor e_i)| (P,).
    """

    N: int
    margin: float
    T: torch.Tensor
    table: torch.Tensor
    recognises: torch.Tensor
    constant: torch.Tensor
    nonconstant: torch.Tensor
    influence: torch.Tensor


def recognition(
    model: Recognizer, N: int, margin: float, *, chunk: int | None = None
) -> Recognition:
    """Classify each model's behaviour on all 2^N strings with margin xi (Cor. 3.4).

    A model recognises a non-constant function only if some string is accepted and some
    is rejected; on a path of single flips between them some flip moves T from >= xi to
    <= -xi, i.e. by at least 2 xi, which Cor. 3.3 forbids for large N when eps > 0. So
    ``nonconstant`` implies ``influence >= 2 margin``.
    """
    margin = _check_pos("margin", margin)
    T = output_table(model, N, chunk=chunk)
    table = classify(T, margin)
    rec = ((table == ACCEPT) | (table == REJECT)).all(-1)
    acc, rej = (table == ACCEPT).any(-1), (table == REJECT).any(-1)
    return Recognition(
        int(N),
        margin,
        T,
        table,
        rec,
        rec & ~(acc & rej),
        rec & acc & rej,
        exhaustive_influence(model, N, table=T),
    )


def distinct_functions(table: torch.Tensor) -> int:
    r"""The number of distinct Boolean functions among the fully decided rows of a label table.

    Parameters
    ----------
    table : torch.Tensor
        Labels ``(P, 2**N)``: 0/1 decided, negative undecided or non-finite.

    Notes
    -----
    Rows with any undecided or non-finite entry do not recognise a function and are ignored
    (Prop. 3.5 counts functions recognised with margin :math:`\xi`).
    """
    if not isinstance(table, torch.Tensor) or table.dim() != 2:
        raise ValueError("table must be a (P, 2^N) tensor of labels")
    ok = (table >= 0).all(-1)
    if not ok.any():
        return 0
    return int(torch.unique(table[ok].to(torch.int8), dim=0).shape[0])


def lipschitz_theta(
    model: Recognizer, x: torch.Tensor, *, norm: float = 1
) -> torch.Tensor:
    """The local Lipschitz constant of T in theta, ||grad_theta T(theta, x)||_norm:
    shape (P, B).

    Lemma 3.1: for eps > 0, T is Lipschitz in theta with a constant independent of x and
    N. ``norm = 1`` (default) is the dual of the l-infinity norm, so |T(theta') -
    T(theta, x)| <= (this) * ||theta' - theta||_inf to first order: the right constant
    for covering the box Theta by cubes (Prop. 3.5). Each model's gradient is its own
    (the P models share no parameter).
    """
    model = _check_model(model)
    x = torch.as_tensor(x).float()
    if x.dim() != 2:
        raise ValueError(f"x must have shape (B, N), got {tuple(x.shape)}")
    if norm not in (1, 2, math.inf):
        raise ValueError(f"norm must be 1, 2 or inf, got {norm!r}")
    params = list(model.parameters())
    out = torch.zeros(model.P, x.shape[0], dtype=torch.float64)
    with torch.enable_grad():
        for b in range(x.shape[0]):
            T = model(x[b : b + 1]).sum()  # sum over models: gradients separate
            grads = torch.autograd.grad(T, params)
            g = torch.cat([gr.reshape(model.P, -1) for gr in grads], dim=1).double()
            out[:, b] = torch.linalg.vector_norm(g, ord=norm, dim=1).cpu()
    return out


# ---- Section 4: the small-ball law ---------------------------------------------------
@torch.no_grad()
def layer_norm_variances(
    D: int,
    n_models: int,
    *,
    N: int = 4,
    L: int = 1,
    which: int = 0,
    position: int = -1,
    init: str = "uniform",
    scale: float = 1.0,
    seed: int = 0,
    chunk: int = 20000,
    x=None,
    progress: bool = True,
    dtype=torch.float64,
) -> torch.Tensor:
    """var(d) of one layer-norm input d in R^D under random parameters: shape
    (n_models,).

    ``which`` picks the layer norm (0..2L-1: two per layer), ``position`` the position
    (-1 = eos); the string ``x`` defaults to the first of :func:`random_strings`. Models
    are drawn in chunks (seeds ``seed``, ``seed + 1``, ...) so millions fit in memory.
    The small-ball heuristic of Section 4: d has a bounded density and its centred part
    lives in a (D-1)-dim subspace, so P(var(d) < t) ~ c t^((D-1)/2) as t -> 0.
    """
    D, n_models = _check_int("D", D, 2), _check_int("n_models", n_models)
    L, chunk = _check_int("L", L), _check_int("chunk", chunk)
    if not 0 <= which < 2 * L:
        raise ValueError(
            f"which must be a layer-norm index in 0..{2 * L - 1}, got {which!r}"
        )
    x = (
        random_strings(N, 1, seed=seed)
        if x is None
        else torch.as_tensor(x).float().reshape(1, -1)
    )
    out = []
    starts = list(range(0, n_models, chunk))
    for j, a in enumerate(
        _progress(starts, desc=f"LN variances D={D}", disable=not progress)
    ):
        P = min(chunk, n_models - a)
        m = Recognizer.random(
            P, D, L, 1, eps=0.0, init=init, scale=scale, seed=seed + j, dtype=dtype
        )
        out.append(m.trace(x)[1].variances[:, 0, which, position])
    return torch.cat(out)


def small_ball_cdf(samples, t) -> tuple[np.ndarray, np.ndarray]:
    """Empirical P(var < t) for each t, with its binomial standard error."""
    v = np.sort(np.asarray(samples, dtype=float).ravel())
    if v.size == 0:
        raise ValueError("samples must be non-empty")
    t = np.asarray(t, dtype=float)
    p = np.searchsorted(v, t, side="left") / v.size
    return p, np.sqrt(p * (1 - p) / v.size)


def small_ball_exponent(samples, *, k: int | None = None, quantile: float = 0.01):
    """Hill (maximum-likelihood) estimate of a in P(v < t) ~ c t^a from the k smallest
    samples.

    If P(v < t) = c t^a exactly for t <= t0, the samples below t0, divided by t0, are
    i.i.d. with P(u < s) = s^a, so -log u is exponential with rate a: the MLE is a_hat =
    k / sum_i log(t0 / v_(i)) over the k smallest v (t0 = v_(k+1)), with standard error
    a_hat / sqrt(k). Default k = ``quantile`` * n. Returns (a_hat, stderr, t0, k).
    """
    v = np.sort(np.asarray(samples, dtype=float).ravel())
    if v.size < 3 or (v <= 0).any():
        raise ValueError("samples must hold at least 3 positive numbers")
    if k is None:
        if not 0 < quantile < 1:
            raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
        k = max(2, int(quantile * v.size))
    k = _check_int("k", k, 2)
    if k >= v.size:
        raise ValueError(
            f"k must be smaller than the number of samples ({v.size}), got {k}"
        )
    t0 = v[k]
    a = k / np.log(t0 / v[:k]).sum()
    return float(a), float(a / math.sqrt(k)), float(t0), k


# ---- Lemma 4.2: danger zones ---------------------------------------------------------
@torch.no_grad()
def danger_center(
    N: int,
    *,
    D: int = 4,
    L: int = 1,
    H: int = 1,
    init: str = "uniform",
    seed: int = 0,
    dtype=torch.float64,
) -> Recognizer:
    """A random model moved to the centre of a danger zone: the first layer norm's input
    at eos has variance exactly 0 (on every string of length N with the same parity of
    N).

    Starting from ``Recognizer.random(1, D, L, H, init=init, seed=seed)``, the first
    attention block's output map (Wo, bo) is set to 0 and the eos token embedding to c 1
    - phi(N+1) P_pos, so the LN input tok[eos] + phi(N+1) P_pos + attention = c 1 is
    constant (c = mean of the old embedding). With eps = 0 this model's output is NaN
    and its blowup infinite; Lemma 4.2 says that a random point of a small ball around
    it is still safe with high probability.
    """
    N = check_n(N)
    m = Recognizer.random(1, D, L, H, eps=0.0, init=init, seed=seed, dtype=dtype)
    lay = m.layers[0]
    lay.Wo.zero_()
    lay.bo.zero_()
    phi = positional_features(N, dtype=dtype)[-1]  # eos features (1, +-1, 0)
    shift = phi @ m.pos[0]  # (D,)
    c = m.tok[0, 2].mean()
    m.tok[0, 2] = c - shift
    return m


@torch.no_grad()
def exceedance(values, thresholds):
    """For each threshold b: the fraction of ``values`` above b and its standard
    error."""
    v = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    b = torch.as_tensor(thresholds, dtype=torch.float64).reshape(-1)
    if v.numel() == 0:
        raise ValueError("values must be non-empty")
    p = (v.unsqueeze(0) > b.unsqueeze(1)).double().mean(1)
    return p.numpy(), (p * (1 - p) / v.numel()).sqrt().numpy()


# ---- uncertainty of a fitted rate ----------------------------------------------------
def power_slope_interval(
    Ns,
    samples,
    *,
    q: float = 0.5,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
):
    """Log-log slope of the ``q``-quantile over models against N, with a bootstrap
    interval.

    ``samples``: (P, len(Ns)), one row per model followed across every N (the same
    models at each N). Models are resampled with replacement (rows, so the dependence
    between the points of one model is kept); the interval is the central ``level``
    range of the refitted slopes. Returns (slope, lo, hi).
    """
    s = np.asarray(samples, dtype=float)
    x = np.log(np.asarray(Ns, dtype=float))
    if s.ndim != 2 or s.shape[1] != x.size or x.size < 2:
        raise ValueError("samples must have shape (P, len(Ns)) with len(Ns) >= 2")
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError("samples must be finite and positive")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    slope = lambda rows: np.polyfit(x, np.log(np.quantile(rows, q, axis=0)), 1)[0]
    g = np.random.default_rng(seed)
    boot = [slope(s[g.integers(0, len(s), len(s))]) for _ in range(int(n_boot))]
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return float(slope(s)), float(lo), float(hi)


# ---- the worst case over theta: maximise the blowup ----------------------------------
def _log_blowup(model: Recognizer, x: torch.Tensor) -> torch.Tensor:
    """log beta(theta, x) = sum over layer norms of log max_n (1 + z_n), differentiable:
    (P, B)."""
    rec = []
    model._run(x, rec)
    var = torch.stack([v for v, _ in rec], dim=2)  # (P, B, 2L, S)
    return torch.log1p(1 / torch.sqrt(var + model.eps)).amax(-1).sum(-1)


def check_lr(lr, argument: str = "lr") -> tuple:
    """A step-size schedule ``(start, end)``: two finite numbers with 0 < end <= start."""
    allowed = "a pair (start, end) of finite numbers with 0 < end <= start, e.g. (0.05, 1e-4)"
    if isinstance(lr, (str, bytes)) or not hasattr(lr, "__len__") or len(lr) != 2:
        raise TypeError(f"{argument} must be {allowed}, got {lr!r}")
    start, end = (check_real(v, f"{argument}[{i}]", minimum=0, strict=True)
                  for i, v in enumerate(lr))
    if end > start:
        raise ValueError(f"{argument} must be {allowed}, got {lr!r}")
    return start, end


def ascend_in_box(model, log_objective, *, steps: int, lr: tuple, box: float = 1.0,
                  before_step=None) -> None:
    """Gradient ascent over theta in the box [-box, box]^M, in place, on ``log_objective()``
    (a tensor with the population axis first: each of the P models is its own start).

    Adam, with a step size decaying geometrically from ``lr[0]`` to ``lr[1]``; every parameter
    is clipped to the box before the first step and after each one. A non-finite objective or
    gradient (a layer-norm input of variance 0 at eps = 0) contributes nothing, so that start
    stays where it is. ``before_step(t)`` is called before step t = 0, ..., ``steps`` (the last
    call after the final step). The one search behind :func:`maximise_blowup` and
    :func:`sensbook.hinge.maximise_influence`.
    """
    steps = _check_int("steps", steps)
    box = _check_pos("box", box)
    lr = check_lr(lr)
    params = list(model.parameters())

    def clip():
        with torch.no_grad():
            for p in params:
                p.clamp_(-box, box)

    clip()
    opt = torch.optim.Adam(params, lr=lr[0])
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, (lr[1] / lr[0]) ** (1 / steps))
    for t in range(steps + 1):
        if before_step is not None:
            before_step(t)
        if t == steps:
            break
        with torch.enable_grad():
            val = log_objective()
            loss = -torch.where(torch.isfinite(val), val, torch.zeros_like(val)).sum()
            opt.zero_grad()
            loss.backward()
        for p in params:
            if p.grad is not None:
                p.grad.nan_to_num_(0.0, 0.0, 0.0)
        opt.step()
        sched.step()
        clip()


def maximise_blowup(
    model: Recognizer,
    x: torch.Tensor,
    *,
    steps: int = 300,
    lr: tuple = (0.05, 1e-7),
    every: int = 10,
    box: float = 1.0,
):
    """Gradient ascent on log beta(theta, x) over theta in the box [-box, box]^M (in
    place).

    Adam, with a step size decaying geometrically from ``lr[0]`` to ``lr[1]``, each
    parameter clipped to the box after every step; the P models are P independent
    starts. With eps > 0 Lemma 3.2 caps beta at (1 + 1/sqrt(eps))^(2L) whatever the
    optimiser does; with eps = 0 the ascent drives layer-norm input variances towards 0
    and beta grows as far as the step size lets the variances shrink. Returns (steps
    recorded, beta (len, P, B) as float64 numpy; +inf where a variance reached exactly
    0).
    """
    model = _check_model(model)
    steps, every = _check_int("steps", steps), _check_int("every", every)
    x = torch.as_tensor(x).float()
    done, hist = [], []

    def record(t):
        if t % every == 0 or t == steps:
            done.append(t)
            hist.append(model.trace(x)[1].beta.double().cpu().numpy())

    ascend_in_box(model, lambda: _log_blowup(model, x), steps=steps, lr=lr, box=box,
                  before_step=record)
    return np.array(done), np.stack(hist)
