r"""What a recognizer uses to decide, read at the eos position over a set of strings.

Theorem 4.5 and Lemma 2.9 name two amplifiers a transformer can use to make one bit move its
output at large N: a layer norm whose input variance at eos is small (its factor
:math:`1/\sqrt{\mathrm{var} + \varepsilon}` large; the blowup :math:`\beta`), and attention scores spread so widely that the eos
query's softmax puts nearly all its weight on one position (hard attention).
:func:`eos_mechanism` measures both for every model of a population, from one
:meth:`~sensbook.model.Recognizer.trace` and one
:meth:`~sensbook.model.Recognizer.eos_attention` over the strings (e.g. all :math:`2^N`).
"""
from __future__ import annotations

import numpy as np
import torch

from .adapters import check_not_meta
from .boolean import check_int, check_memory_mb, check_strings
from .model import Recognizer
from .settings import LONG_N, default_memory_mb, progress


def _kept_bytes(model: Recognizer) -> int:
    """Bytes kept per string of ``x`` over the whole call: float64 variances (2L), beta, the
    largest attention weight and where it points (L H each), for every model."""
    return model.P * (2 * model.L + 1 + 2 * model.L * model.H) * 8


def _chunk_bytes(model: Recognizer, N: int) -> int:
    """Bytes one string costs while its chunk is processed: the forward's activations
    (:meth:`Recognizer.memory_per_string`), the trace's variances and z (P, 2L, N+1) and the
    eos attention's scores, weights and their float64 copy (P, L, H, N+1)."""
    S = N + 1
    return model.memory_per_string(N) + model.P * S * (4 * model.L + 4 * model.L * model.H) * 8


def eos_mechanism(model: Recognizer, x, *, chunk: int | None = None,
                  memory_mb: float | None = None) -> dict:
    r"""The layer-norm variances, blowup and attention at eos, per model, over a set of strings.

    Parameters
    ----------
    model : Recognizer
        A population of P models.
    x : torch.Tensor
        0/1 strings ``(B, N)``, B >= 1.
    chunk : int, optional
        The most strings processed at a time (also capped by ``memory_mb``); the statistics
        are over all of them.
    memory_mb : float, optional
        MiB the call may use (default: ``sensbook.settings.default_memory_mb``): what is kept
        per string of ``x`` (``_kept_bytes``) plus one chunk's work; a request that cannot
        fit is refused before any work, naming what it needs.

    Returns
    -------
    dict
        numpy arrays:

        * ``var_median``, ``var_min`` ``(P, 2L)``: the median and the minimum over strings of
          the variance of each layer norm's input at eos (layer norm ``j = 0 .. 2L-1``, two
          per layer, in the order the forward pass applies them; the last is the one T reads);
        * ``beta_median`` ``(P,)``: the median cumulative blowup :math:`\beta` (Lemma 2.9);
        * ``att_max`` ``(P, L, H)``: the median over strings of the eos query's largest
          attention weight, per layer and head; ``att_where`` ``(P, L, H)``: the position it
          points to most often (0-based: 0 is :math:`x_1`, N is eos; -1 when it points to
          none) and ``att_share`` ``(P, L, H)``: on what share of all the strings it points
          there. A string points to a position only when that position's weight is finite and
          larger than every other: a row of NaN weights (a zero-variance layer norm at
          :math:`\varepsilon = 0`) or a tie (uniform attention) points nowhere.
    """
    if not isinstance(model, Recognizer):
        raise TypeError(f"model must be a Recognizer, got {type(model).__name__}")
    check_not_meta(model)
    x = check_strings(torch.as_tensor(x))
    if x.dim() != 2 or len(x) == 0:
        raise ValueError(f"x must be a non-empty (B, N) batch of strings, got shape "
                         f"{tuple(x.shape)}")
    B, N = x.shape
    budget = check_memory_mb(default_memory_mb(model.device) if memory_mb is None else memory_mb)
    budget *= 2**20
    kept, one = _kept_bytes(model) * B, _chunk_bytes(model, N)
    if kept + one > budget:
        raise ValueError(f"memory_mb={budget / 2**20:g} is too small: eos_mechanism keeps "
                         f"{kept / 2**20:,.1f} MiB for B={B} strings and needs "
                         f"{one / 2**20:,.3f} MiB more a string at work; raise memory_mb to at "
                         f"least {(kept + one) / 2**20:,.1f} or pass fewer strings")
    fit = int((budget - kept) // one)
    chunk = fit if chunk is None else min(check_int(chunk, "chunk", minimum=1), fit)
    S, P, L, H = N + 1, model.P, model.L, model.H
    var, beta, wmax = [], [], []
    counts = torch.zeros(P * L * H * (S + 1), dtype=torch.int64)
    slot = torch.arange(P * L * H).reshape(P, 1, L, H) * (S + 1)
    for a in range(0, B, chunk):
        xs = x[a:a + chunk]
        _, tr = model.trace(xs)
        var.append(tr.variances[..., -1].double().cpu())         # (P, b, 2L): eos
        beta.append(tr.beta.double().cpu())
        del tr
        w = model.eos_attention(xs)[1].double().cpu()             # (P, b, L, H, S)
        m, i = w.max(-1)
        second = w.topk(2, -1).values[..., 1]                     # S >= 2
        # a position is pointed to only by a finite weight above every other (no tie, no NaN)
        ok = torch.isfinite(m) & (m > second)
        i = torch.where(ok, i, S)                                 # S: "nowhere"
        counts += torch.bincount((slot + i).flatten(), minlength=len(counts))
        wmax.append(m)
        del w
    var, beta, wmax = torch.cat(var, 1), torch.cat(beta, 1), torch.cat(wmax, 1)
    counts = counts.reshape(P, L, H, S + 1)[..., :S]              # (P, L, H, S)
    top, pos = counts.max(-1)
    pos = torch.where(top > 0, pos, -1)
    return dict(var_median=var.median(1).values.numpy(), var_min=var.amin(1).numpy(),
                beta_median=beta.median(1).values.numpy(),
                att_max=wmax.median(1).values.numpy(), att_where=pos.numpy(),
                att_share=(top.double() / B).numpy())



#: The names :func:`eos_regime` gives a model, by what it uses at eos.
REGIMES = ("attention focus", "layer norm at cap", "both", "neither")
#: Thresholds of :func:`eos_regime`: attention is *focused* when the eos query puts at least
#: ``focus`` of its weight on one position in some layer; a layer norm is *at its cap* when
#: its eos coefficient z reaches ``at_cap`` of :math:`1/\sqrt{\varepsilon}` (Lemma 3.2), or,
#: at :math:`\varepsilon = 0` (no cap), reaches ``z_eps0`` (the cap of eps = 0.01).
REGIME_THRESHOLDS = dict(focus=0.5, at_cap=0.9, z_eps0=10.0)


@torch.no_grad()
def eos_regime(model: Recognizer, x, *, focus: float = REGIME_THRESHOLDS["focus"],
               at_cap: float = REGIME_THRESHOLDS["at_cap"],
               z_eps0: float = REGIME_THRESHOLDS["z_eps0"]) -> dict:
    r"""What each model uses at eos on a few strings: attention focus, a layer norm at its cap.

    Parameters
    ----------
    model : Recognizer
        A population of P models (its ``eps`` sets the cap).
    x : torch.Tensor
        0/1 strings ``(B, N)`` (e.g. a string and its flip); the largest value over them is read.
    focus : float
        The eos attention weight on one position, in (0, 1], from which attention is focused.
    at_cap : float
        The share of the cap :math:`1/\sqrt{\varepsilon}`, in (0, 1], from which a layer norm
        is at its cap (for :math:`\varepsilon > 0`).
    z_eps0 : float
        The z from which a layer norm counts as at its cap when :math:`\varepsilon = 0`.

    Returns
    -------
    dict
        ``att`` ``(P, L)``: the largest eos attention weight per layer (over heads, positions
        and strings; uniform attention gives :math:`1/(N+1)`); ``z`` ``(P, 2L)``: the largest
        eos coefficient :math:`z = 1/\sqrt{\mathrm{var} + \varepsilon}` of each layer norm;
        ``z_cap`` (float, inf at :math:`\varepsilon = 0`); ``z_share`` ``(P, 2L)``: z over
        the cap (0 at :math:`\varepsilon = 0`); ``regime``: one of ``REGIMES`` per model
        ("neither" also for a model with a non-finite z or weight).

    Notes
    -----
    The two amplifiers of a flip at large N (chapter 3): a score range wide enough for the eos
    softmax to hold one position (its weight then does not fall like 1/N), and layer norms,
    whose factor z is at most :math:`1/\sqrt{\varepsilon}` (Lemma 3.2; the blowup
    :math:`\beta` of Lemma 2.9 is the product over layer norms of :math:`\max_n (1 + z)`).
    """
    if not isinstance(model, Recognizer):
        raise TypeError(f"model must be a Recognizer, got {type(model).__name__}")
    for name, v, hi in (("focus", focus, 1.0), ("at_cap", at_cap, 1.0), ("z_eps0", z_eps0, None)):
        if not (isinstance(v, (int, float)) and v > 0 and (hi is None or v <= hi)):
            raise ValueError(f"{name} must be a number in (0, {hi or 'inf'}], got {v!r}")
    x = check_strings(torch.as_tensor(x))
    if x.dim() != 2 or len(x) == 0:
        raise ValueError(f"x must be a non-empty (B, N) batch of strings, got shape "
                         f"{tuple(x.shape)}")
    x = x.to(model.dtype)
    _, tr = model.trace(x)
    z = tr.z[..., -1].double().amax(1).cpu().numpy()               # (P, 2L): eos, over strings
    att = model.eos_attention(x)[1].double().amax((1, 3, 4)).cpu().numpy()   # (P, L)
    eps = float(model.eps)
    cap = eps ** -0.5 if eps > 0 else float("inf")
    share = z / cap
    uses_att = att.max(1) >= focus
    uses_ln = (share.max(1) >= at_cap) if eps > 0 else (z.max(1) >= z_eps0)
    finite = np.isfinite(z).all(1) & np.isfinite(att).all(1)
    regime = [REGIMES[3] if not ok else REGIMES[2] if a and n else REGIMES[0] if a
              else REGIMES[1] if n else REGIMES[3]
              for ok, a, n in zip(finite, uses_att, uses_ln)]
    return dict(att=att, z=z, z_cap=cap, z_share=share, regime=regime)


def blowup(model: Recognizer, x) -> torch.Tensor:
    r"""The cumulative blowup :math:`\beta^L(\theta, x) = \prod_j \max_n (1 + z_{j,n})`
    over the layer norms.

    Parameters
    ----------
    model : Recognizer
        The population.
    x : torch.Tensor
        0/1 strings ``(B, N)`` or ``(P, B, N)``.

    Returns
    -------
    torch.Tensor
        Shape ``(P, B)``; +inf where a layer norm at :math:`\varepsilon = 0` has zero variance.

    Notes
    -----
    Lemma 2.9: flipping one bit moves T by at most :math:`C \beta(x) \beta(x \oplus e_n) / N`.
    Lemma 3.2: for :math:`\varepsilon > 0`, :math:`\beta \le (1 + 1/\sqrt{\varepsilon})^{2L}`
    here (2L layer norms).

    Time: quadratic in N; on one CPU thread about 1.6 s per string at N = 16,000 for a model of
    D = 12, L = 2, H = 1, so about a minute per string at :math:`N = 10^5` (times P, L, H).
    From N = ``LONG_N`` (:math:`10^5`) on, the strings go one at a time behind a progress bar.
    """
    if not isinstance(model, Recognizer):
        raise ValueError(f"model must be a sensbook.Recognizer, got {type(model).__name__}: the "
                         "blowup is defined through the recognizer's layer norms")
    x = torch.as_tensor(x)
    if x.dim() == 2 and x.shape[1] >= LONG_N:
        return torch.cat([model.trace(s)[1].beta for s in progress(
            x.split(1), desc=f"blowup N={x.shape[1]}")], 1)
    return model.trace(x)[1].beta
