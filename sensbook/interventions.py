r"""Interventions on the recognizer's forward pass: what its labels depend on.

A mechanism is what an intervention changes. Three of them, on every model of a population at
once and on a set of strings (e.g. all :math:`2^N`), each through the hook points of the one
forward pass (``sensbook.Recognizer._run``, its ``edits``):

* ``freeze_norms``: layer norm ``j``'s normaliser :math:`z = 1/\sqrt{\mathrm{var} +
  \varepsilon}` replaced by a constant, its median over the strings, per model and position.
  The amplifier of Lemma 2.9 and Theorem 4.5 is a layer norm whose :math:`z` grows on some
  strings; frozen, the layer norm still subtracts the mean but amplifies every string alike.
* ``fix_attention``: a head's attention weights replaced by the uniform pattern or by
  their mean pattern over the strings (per model, query and key position).
* ``patch``: run x and :math:`x \oplus e_i`, and replace the output of one sublayer (its
  layer norm's output, the residual stream after it) at chosen positions by the other run's.
  Where patching carries the flipped run's label, the flip of bit i travels through there.

Sites, as the forward names them: layer norm ``j = 0 .. 2L-1`` (``2l`` after layer l's
attention, ``2l + 1`` after its feed-forward block, as in :class:`sensbook.Trace`); positions
``0 .. N`` (0 is :math:`x_1`, N is eos). In the last layer only eos reaches T, and the forward
computes only eos there: an edit at another position of the last layer changes nothing.

``effect`` reports accuracy against a target and the margin, per model. A frozen normaliser
of the *last* layer norm at eos multiplies the eos vector by a positive factor before the linear
read-out: it rescales :math:`T - \omega` and cannot move a label when :math:`\omega = 0`
(tests/test_interventions.py checks on random models).
"""
from __future__ import annotations

import torch

from .boolean import BooleanFunction, check_int, check_strings
from .model import Recognizer

PATTERNS = ("uniform", "mean")


def _check(model, x):
    if not isinstance(model, Recognizer):
        raise ValueError(f"model must be a sensbook.Recognizer, got {type(model).__name__}")
    x = check_strings(x)
    if x.dim() != 2 or len(x) == 0:
        raise ValueError(f"x must be a non-empty (B, N) batch of strings, got shape "
                         f"{tuple(x.shape)}")
    return x


def _norms(model, norms):
    allowed = f"layer-norm indices 0 .. {2 * model.L - 1} (two per layer)"
    norms = range(2 * model.L) if norms is None else [norms] if isinstance(norms, int) else norms
    out = [check_int(j, "norms", minimum=0, maximum=2 * model.L - 1) for j in norms]
    if not out:
        raise ValueError(f"norms must name at least one of the {allowed}, got {norms!r}")
    return out


def _mask(positions, s, S, device):
    """Bool (s,) over the s positions a site holds (the last s of the S = N+1): the chosen ones.
    ``positions`` None means all; indices are 0 .. N (0 is x_1, N is eos)."""
    if positions is None:
        return torch.ones(s, dtype=torch.bool, device=device)
    m = torch.zeros(S, dtype=torch.bool, device=device)
    idx = [check_int(p, "positions", minimum=0, maximum=S - 1) for p in positions]
    m[idx] = True
    return m[S - s:]


@torch.no_grad()
def scores(model: Recognizer, x, edits: dict | None = None) -> torch.Tensor:
    """T for every model and string under the edits (none: the model's own forward).

    Parameters
    ----------
    model : Recognizer
        A population of P models.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    edits : dict, optional
        Site to function, as ``freeze_norms``, ``fix_attention`` and ``patch``
        build them: ``("norm", j)`` rewrites layer norm j's :math:`\\sqrt{var + \\varepsilon}`
        ``(P, B, s, 1)``, ``("out", j)`` its output ``(P, B, s, D)``, ``("scores", l)`` layer
        l's attention scores ``(P, B, H, s, N+1)`` (s = N+1, or 1 at the last layer: eos).

    Returns
    -------
    torch.Tensor
        Shape ``(P, B)``. Without edits this is ``model(x)``, bit for bit.
    """
    x = _check(model, x)
    return model(x) if not edits else model._run(x, edits=dict(edits))


def _record(model, x, sites):
    """The tensors at ``sites`` on the unedited forward (explicit attention where recorded)."""
    got = {}
    keep = lambda site: (lambda t: got.__setitem__(site, t) or t)
    scores(model, x, {site: keep(site) for site in sites})
    return got


def freeze_norms(model: Recognizer, x, norms=None, positions=None) -> dict:
    r"""Edits that freeze layer norms' normalisers to their median over the strings.

    Parameters
    ----------
    model : Recognizer
        A population of P models.
    x : torch.Tensor
        0/1 strings ``(B, N)``: the medians are taken over them.
    norms : int or sequence of int, optional
        Layer norms ``j`` (default: all 2L).
    positions : sequence of int, optional
        Positions ``0 .. N`` where the normaliser is frozen (default: all; N is eos).

    Returns
    -------
    dict
        Edits for ``scores``: at each chosen layer norm and position,
        :math:`z = 1/\sqrt{\mathrm{var} + \varepsilon}` is the per-model, per-position median
        of z over ``x`` instead of a function of the string.

    Notes
    -----
    Lemma 2.9 bounds a flip's effect on T by the blowups :math:`\beta = \prod_j \max_n
    (1 + z_{j,n})`, and Theorem 4.5's danger zone is where some z is large; a frozen z keeps
    the layer norm's mean subtraction and removes its string-dependent amplification.
    """
    x = _check(model, x)
    norms = _norms(model, norms)
    rec = _record(model, x, [("norm", j) for j in norms])
    S = x.shape[1] + 1
    edits = {}
    for j in norms:
        s = rec[("norm", j)]                                      # (P, B, s, 1)
        const = 1 / (1 / s).median(1, keepdim=True).values        # 1 / median z
        m = _mask(positions, s.shape[2], S, s.device)[:, None]
        edits[("norm", j)] = lambda t, c=const, m=m: torch.where(m, c.expand_as(t), t)
    return edits


def fix_attention(model: Recognizer, x, layer: int, heads=None, pattern: str = "uniform") -> dict:
    """Edits that fix heads' attention weights to the uniform or the mean pattern.

    Parameters
    ----------
    model : Recognizer
        A population of P models.
    x : torch.Tensor
        0/1 strings ``(B, N)``: the mean pattern is taken over them.
    layer : int
        The layer, ``0 .. L-1``.
    heads : sequence of int, optional
        The heads (default: all H).
    pattern : {"uniform", "mean"}
        Every query's weights 1/(N+1) on every position, or the weights averaged over the
        strings, per model, head, query and key position.

    Returns
    -------
    dict
        Edits for ``scores``.

    Notes
    -----
    Hard attention on one position is how a transformer keeps a flip's effect on T of order one
    at eps > 0 (chapter 3; the score gap of ``sensbook.score_gap``); uniform attention
    averages, so one bit moves the eos query's read-out by O(1/N) (Lemma 2.9's 1/N).
    """
    x = _check(model, x)
    layer = check_int(layer, "layer", minimum=0, maximum=model.L - 1)
    if pattern not in PATTERNS:
        raise ValueError(f"pattern={pattern!r} is unknown; allowed: {', '.join(PATTERNS)}")
    heads = range(model.H) if heads is None else heads
    m = torch.zeros(model.H, dtype=torch.bool, device=model.device)
    m[[check_int(h, "heads", minimum=0, maximum=model.H - 1) for h in heads]] = True
    m = m[:, None, None]
    if pattern == "uniform":
        fixed = lambda t: torch.where(m, torch.zeros_like(t), t)
    else:
        s = _record(model, x, [("scores", layer)])[("scores", layer)]
        logw = torch.log(torch.softmax(s, -1).mean(1, keepdim=True))  # (P, 1, H, s, S)
        fixed = lambda t: torch.where(m, logw.expand_as(t), t)
    return {("scores", layer): fixed}


def patch(model: Recognizer, x, bit: int, norm: int, positions) -> torch.Tensor:
    r"""T on x with layer norm ``norm``'s output at ``positions`` taken from the run on
    :math:`x \oplus e_{bit}`.

    Parameters
    ----------
    model : Recognizer
        A population of P models.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    bit : int
        The flipped position, ``0 .. N-1`` (0 is :math:`x_1`).
    norm : int
        The sublayer, by the layer norm ``j = 0 .. 2L-1`` that ends it.
    positions : sequence of int
        Positions ``0 .. N`` patched (N is eos).

    Returns
    -------
    torch.Tensor
        Shape ``(P, B)``. Patching every position of layer norm 0's output gives T of the
        flipped strings; patching none gives T of x (bit for bit).

    Notes
    -----
    Lemma 2.9 follows a flip's effect through the layers: at most :math:`1/N` of it enters
    through averaging attention, amplified by the blowups. Patching measures where it actually
    travels in a given model: the labels that patching at ``positions`` carries over.
    """
    x = _check(model, x)
    N = x.shape[1]
    bit = check_int(bit, "bit", minimum=0, maximum=N - 1)
    norm = _norms(model, norm)[0]
    flipped = x.clone()
    flipped[:, bit] = 1 - flipped[:, bit]
    other = _record(model, flipped, [("out", norm)])[("out", norm)]
    m = _mask(positions, other.shape[2], N + 1, other.device)[:, None]
    return scores(model, x, {("out", norm): lambda t: torch.where(m, other, t)})


def effect(T: torch.Tensor, f: BooleanFunction, x) -> dict:
    """Accuracy against a target and the margin, per model.

    Parameters
    ----------
    T : torch.Tensor
        Scores ``(P, B)`` on the strings ``x`` (e.g. from ``scores``).
    f : BooleanFunction
        The target.
    x : torch.Tensor
        0/1 strings ``(B, N)``.

    Returns
    -------
    dict
        numpy arrays of shape ``(P,)``: ``accuracy`` (the share of strings where T > 0 agrees
        with f; a zero, NaN or infinite T counts as wrong, never as a class) and ``margin``
        (the median over strings of the signed margin :math:`(2 f(x) - 1) T`, NaN if any T
        is not finite).
    """
    x = check_strings(x)
    T = torch.as_tensor(T)
    if T.dim() != 2 or T.shape[1] != len(x):
        raise ValueError(f"T must have shape (P, B) with B = {len(x)} strings, got "
                         f"{tuple(T.shape)}")
    y = f(x).to(T.device)
    ok = torch.isfinite(T) & (T != 0) & ((T > 0) == y)
    signed = (2 * y.to(T.dtype) - 1) * T
    margin = torch.where(torch.isfinite(T).all(1), signed.median(1).values, torch.nan)
    return dict(accuracy=ok.double().mean(1).cpu().numpy(),
                margin=margin.double().cpu().numpy())


@torch.no_grad()
def variance_summary(model: Recognizer, x, threshold: float) -> dict:
    """Per layer norm and position, the median input variance and the share below a threshold.

    Parameters
    ----------
    model : Recognizer
        A population of P models.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    threshold : float
        The variance counted as small.

    Returns
    -------
    dict
        numpy arrays of shape ``(P, 2L, N+1)``: ``median``, ``minimum`` and ``below`` (the
        share of strings whose layer-norm input variance is below ``threshold``).

    Notes
    -----
    Theorem 4.5's amplification must hold at every string; a minimum over strings says where
    one string is, the median and the share below the threshold where the strings are.
    """
    x = _check(model, x)
    v = model.trace(x)[1].variances                              # (P, B, 2L, S)
    return dict(median=v.median(1).values.double().cpu().numpy(),
                minimum=v.amin(1).double().cpu().numpy(),
                below=(v < threshold).double().mean(1).cpu().numpy())
