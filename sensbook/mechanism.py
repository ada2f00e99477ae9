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

import torch

from .model import Recognizer
from .settings import LONG_N, progress


def eos_mechanism(model: Recognizer, x, *, chunk: int = 4096) -> dict:
    r"""The layer-norm variances, blowup and attention at eos, per model, over a set of strings.

    Parameters
    ----------
    model : Recognizer
        A population of P models.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    chunk : int
        Strings processed at a time; the statistics are over all of them.

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
          points to most often (0-based: 0 is :math:`x_1`, N is eos) and ``att_share``
          ``(P, L, H)``: on what share of the strings it points there.
    """
    if not isinstance(model, Recognizer):
        raise TypeError(f"model must be a Recognizer, got {type(model).__name__}")
    x = torch.as_tensor(x)
    if x.dim() != 2 or len(x) == 0:
        raise ValueError(f"x must be a non-empty (B, N) batch of strings, got shape "
                         f"{tuple(x.shape)}")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk must be a positive int, got {chunk!r}")
    var, beta, wmax, where = [], [], [], []
    for a in range(0, len(x), chunk):
        xs = x[a:a + chunk]
        _, tr = model.trace(xs)
        var.append(tr.variances[..., -1].double().cpu())         # (P, b, 2L): eos
        beta.append(tr.beta.double().cpu())
        w = model.eos_attention(xs)[1].double().cpu()             # (P, b, L, H, N+1)
        m, i = w.max(-1)
        wmax.append(m)
        where.append(i)
    var, beta = torch.cat(var, 1), torch.cat(beta, 1)
    wmax, where = torch.cat(wmax, 1), torch.cat(where, 1)         # (P, B, L, H)
    S = x.shape[1] + 1
    counts = torch.nn.functional.one_hot(where, S).sum(1)         # (P, L, H, S)
    top, pos = counts.max(-1)
    return dict(var_median=var.median(1).values.numpy(), var_min=var.amin(1).numpy(),
                beta_median=beta.median(1).values.numpy(),
                att_max=wmax.median(1).values.numpy(), att_where=pos.numpy(),
                att_share=(top.double() / len(x)).numpy())


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
