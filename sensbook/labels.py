r"""Reading a classifier's output as labels: accept, reject, undecided, non-finite.

A real score T is read with a margin :math:`\xi \ge 0` as the paper's recognizers are: accept
when :math:`T \ge \xi` (and T > 0), reject when :math:`T \le -\xi` (and T < 0), otherwise
undecided; NaN/inf scores are non-finite. Neither is ever counted as a class
(:mod:`sensbook.profile`).
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from .adapters import (check_mode, check_not_meta, check_repeatable, explain_call, explain_output,
                       repeat_needed, user_stacklevel)
from .boolean import check_real

REJECT, ACCEPT, UNDECIDED, NONFINITE = 0, 1, -1, -2
LABELS = (NONFINITE, UNDECIDED, REJECT, ACCEPT)

#: Units in the last place of the output's dtype that ``margin="auto"`` treats as "could be
#: rounding": strings with |T| below ``ROUNDING_ULPS * finfo(dtype).eps`` are undecided.
ROUNDING_ULPS = 1024


def rounding_margin(dtype) -> float:
    """The dtype-aware tolerance of ``margin="auto"``: ``ROUNDING_ULPS * finfo(dtype).eps``.

    Parameters
    ----------
    dtype : torch.dtype
        The classifier output's floating dtype; float16 and bfloat16 are refused.

    Returns
    -------
    float
        float32: 1.2e-4, float64: 2.3e-13.

    Notes
    -----
    A heuristic, not a bound: an output this close to 0 could take either sign under a
    different summation order, so it is reported undecided.
    """
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating torch dtype, got {dtype!r}")
    eps = torch.finfo(dtype).eps
    if eps > 1e-6:
        raise ValueError(
            f"margin='auto' is not defined for {dtype} outputs: {ROUNDING_ULPS} ulps of "
            f"{dtype} is {ROUNDING_ULPS * eps:g}, a fixed threshold whatever the output's scale "
            "(in float16 it left most strings undecided). Pass an explicit margin on the scale "
            "of your scores (e.g. margin=1e-3 * typical |T|), or return float32 scores")
    return ROUNDING_ULPS * eps


def classify(out: torch.Tensor, margin: float | str = 0.0) -> torch.Tensor:
    r"""Labels from a classifier's output: 0/1, UNDECIDED (-1) or NONFINITE (-2).

    Parameters
    ----------
    out : torch.Tensor
        Bool or 0/1 integer labels, or real scores T, of any shape.
    margin : float or "auto"
        The margin :math:`\xi \ge 0` scores are read with: accept when :math:`T > 0` and
        :math:`T \ge \xi`, reject when :math:`T < 0` and :math:`T \le -\xi`, else undecided;
        ``"auto"``: :func:`rounding_margin` of the output's dtype.

    Returns
    -------
    torch.Tensor
        int8, the shape of ``out``.

    Notes
    -----
    The default :math:`\xi = 0` decides every nonzero T by its sign, including a float32 T
    within rounding of 0 that another summation order (device, chunk, dtype) could flip;
    ``margin="auto"`` reports such strings undecided. A float output whose values are only 0.0
    and 1.0 is refused (labels written as floats would be read as scores, 0.0 = undecided):
    return a bool tensor for labels. The profilers apply this check to everything a classifier
    returns over all its calls, not to one call.
    """
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor of labels or scores, got {type(out).__name__}")
    if out.is_complex():
        raise ValueError(f"the classifier output is complex ({out.dtype}); return real scores T "
                         "or bool labels")
    if out.dtype == torch.bool:
        return out.to(torch.int8)
    if not out.is_floating_point():
        if out.numel() and not ((out == 0) | (out == 1)).all():
            raise ValueError("an integer classifier output must be 0/1; use a float output for scores")
        return out.to(torch.int8)
    margin = _check_margin(margin, out.dtype)
    if out.numel() > 1 and bool((out == 1).any()) and bool((out == 0).any()) \
            and bool(((out == 0) | (out == 1) | ~torch.isfinite(out)).all()):   # NaN aside
        raise ValueError(_FLOAT_LABELS)
    lab = torch.full(out.shape, UNDECIDED, dtype=torch.int8, device=out.device)
    lab.masked_fill_((out > 0) & (out >= margin), ACCEPT)         # masked_fill_: no host sync
    lab.masked_fill_((out < 0) & (out <= -margin), REJECT)
    lab.masked_fill_(~torch.isfinite(out), NONFINITE)
    return lab


_FLOAT_LABELS = (
    "the classifier returned float values that are all 0.0 or 1.0 (NaN and inf aside): "
    "these look like labels, but a float output is read as scores T (0.0 = undecided). "
    "Return labels as a bool tensor (e.g. `(x.sum(-1) % 2) == 1` or `out.bool()`), or scores T "
    "whose sign is the label (e.g. `2 * out - 1`)")


class _FloatLabels:
    """Labels written as floats, seen across all the calls of one profile: a float output
    whose finite values, over every call, are only 0.0 and 1.0 (both) is refused (a NaN or an
    inf does not hide them), whatever values one
    call (one chunk of strings) happens to hold; :func:`classify` checks a single output."""

    def __init__(self):
        self.only01, self.zero, self.one = True, False, False
        self.lo, self.hi = math.inf, -math.inf

    def see(self, out: torch.Tensor):
        out = out.detach()
        if out.is_floating_point() and out.numel():
            lo, hi = (float(v) for v in torch.aminmax(out))
            if not (math.isfinite(lo) and math.isfinite(hi)):     # rare: NaN/inf outputs
                finite = out[torch.isfinite(out)]
                lo, hi = (float(v) for v in torch.aminmax(finite)) if finite.numel() else (0, 0)
            self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        if not self.only01:
            return
        if not out.is_floating_point() or not bool(((out == 0) | (out == 1)
                                                    | ~torch.isfinite(out)).all()):
            self.only01 = False
            return
        self.zero = self.zero or bool((out == 0).any())
        self.one = self.one or bool((out == 1).any())

    def check(self, classifier):
        if self.only01 and self.zero and self.one:
            raise ValueError(_FLOAT_LABELS)
        if 0 <= self.lo and 0 < self.hi <= 1 and not getattr(classifier, "returns_scores", False):
            warnings.warn(_PROBABILITIES.format(lo=self.lo, hi=self.hi),
                          stacklevel=user_stacklevel())


_PROBABILITIES = (
    "every score the classifier returned lies in [{lo:.3g}, {hi:.3g}], inside [0, 1], so every "
    "string with a nonzero score is accepted: the sign of a score is its label. If these are "
    "probabilities (softmax, sigmoid, predict_proba), subtract the threshold (`p - 0.5`), return "
    "logits, or use sb.TorchClassifier(model, output='probability') / sb.SklearnClassifier(est)")


def _check_margin(margin, dtype=None):
    """A margin: a finite real >= 0, or "auto" (resolved by ``dtype`` when given)."""
    if isinstance(margin, str):
        if margin != "auto":
            raise ValueError(f"margin must be a finite number >= 0 or 'auto', got {margin!r}")
        return margin if dtype is None else rounding_margin(dtype)
    return check_real(margin, "margin", minimum=0)


#: Strings of the later calls that :class:`Evaluator` evaluates twice (calls 1, 2, 4, 8, ...).
REPEAT_STRINGS = 16


class Evaluator:
    """The one boundary between every instrument and a classifier: what each instrument that
    evaluates one (the profilers, :func:`sensbook.accuracy`, :func:`sensbook.min_margin`,
    :func:`sensbook.output_table`, :func:`sensbook.flip_influence`, :func:`sensbook.agreement`)
    calls instead of calling it, with the same checks and the same errors.

    Parameters
    ----------
    classifier : callable
        Strings (B, N) to labels or scores (B,) or ``(*pop, B)``.
    argument : str
        The argument's name in the errors.

    Notes
    -----
    At once: a callable; a ``torch.nn.Module`` in training mode with dropout or batch norm is
    refused (``sb.TorchClassifier`` switches it to ``eval()`` with a warning). On every call:
    the output is a tensor (or array) of labels or real scores of shape (B,) or (..., B); a
    ``ModelOutput``, a tuple, (B, 1), (B, 2) or (B, C) is refused naming the fix. Over all
    calls (:meth:`check`): float outputs that are only 0.0 and 1.0 are refused, outputs all
    in [0, 1] (probabilities read as scores) warned about. The repeat check, for a classifier
    that may be random (any but the adapters, sensbook's own models, and modules none of whose
    submodules is in training mode): the first call is made twice and its outputs compared
    exactly (scores, not labels: NaN equals NaN), and so are two calls on the first
    ``REPEAT_STRINGS`` strings of calls 1, 2, 4, 8, ...; two different outputs are refused.
    What it can miss: randomness that leaves those outputs bit-identical (a random branch that
    these strings never take, a tiny dropout rate on a few units, a function that changes only
    after some call that is not checked).
    """

    def __init__(self, classifier, argument: str = "classifier"):
        if not callable(classifier):
            raise TypeError(f"{argument} must be a classifier (a callable on 0/1 strings (B, N) "
                            f"returning labels or scores: a function, a torch.nn.Module, "
                            f"sb.TorchClassifier, sb.SklearnClassifier, sb.Recognizer), got "
                            f"{type(classifier).__name__}")
        check_not_meta(classifier, argument)
        check_mode(classifier)
        self.classifier, self.calls, self.seen = classifier, 0, _FloatLabels()
        self.repeat = repeat_needed(classifier)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The checked output (*pop, B) on the strings ``x`` (B, N)."""
        out = self._call(x)
        if self.repeat and self.calls & (self.calls - 1) == 0:    # calls 0, 1, 2, 4, 8, ...
            if self.calls == 0:
                check_repeatable(out, self._call(x))
            else:
                k = min(len(x), REPEAT_STRINGS)
                check_repeatable(self._call(x[:k]), self._call(x[:k]))
        self.calls += 1
        self.seen.see(out)
        return out

    def _call(self, x):
        B = x.shape[0]
        with explain_call(self.classifier, x):
            out = self.classifier(x)
        if not isinstance(out, torch.Tensor):
            explain_output(out, B)
            arr = None if out is None or isinstance(out, (str, bytes)) else np.asarray(out)
            if arr is None or arr.dtype.kind not in "biuf":
                raise TypeError(
                    f"the classifier must return a tensor (or array) of labels (bool, 0/1 "
                    f"integers) or real scores, of shape (B,) or (..., B); it returned "
                    f"{type(out).__name__}{'' if arr is None else f' of dtype {arr.dtype}'}: "
                    f"{str(out)[:60]!r}")
            out = torch.as_tensor(arr)
        explain_output(out, B)
        if out.dim() == 0 or out.shape[-1] != B:
            raise ValueError(f"the classifier must map strings of shape (B, N) to outputs of "
                             f"shape (B,) or (..., B); got {tuple(out.shape)} for B={B}")
        return out

    def check(self) -> None:
        """After the last call: refuse float labels, warn about probabilities (all calls)."""
        self.seen.check(self.classifier)
