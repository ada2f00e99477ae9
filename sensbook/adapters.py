"""Adapters: a researcher's own model as the batched Boolean classifier the instruments take.

The profiler (:func:`sensbook.sensitivity_profile`) calls a classifier on 0/1 strings of shape
``(B, N)`` and reads what it returns as labels (bool) or as scores ``T`` whose **sign is the
label** (``T > 0`` accepts). Models written elsewhere want something else: token ids, an
attention mask, a ``ModelOutput`` with two-class ``.logits``, probabilities, ``eval()`` mode.
:class:`TorchClassifier` does that glue for any ``torch.nn.Module`` (Hugging Face sequence
classifiers included), :class:`SklearnClassifier` for a fitted scikit-learn estimator::

    clf = sb.TorchClassifier(bert, tokens=(3, 4), prefix=[2])     # [CLS]=2, bit 0 -> 3, 1 -> 4
    sb.sensitivity_profile(clf, 12)

Both measure what one string costs in memory (:meth:`TorchClassifier.memory_per_string`), so
the profiler's ``memory_mb`` budget holds for models the package has never seen.
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from numbers import Real
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import nn

from .memory import (PROBE_FACTOR, PROBE_STRINGS, RESIDENT_FACTOR, SKLEARN_PROBE_STRINGS,
                     callable_bytes, measure_peak_bytes, measure_resident_bytes, probe_bytes,
                     trim_memory)
from .settings import check_device

__all__ = ["Classifier", "TorchClassifier", "SklearnClassifier", "measure_peak_bytes",
           "measure_resident_bytes"]

#: The type of what the instruments take: any callable on strings (B, N) returning labels or
#: scores (B,) or (*pop, B): a function, a ``torch.nn.Module``, a :class:`TorchClassifier`, a
#: :class:`SklearnClassifier`, a :class:`sensbook.Recognizer`.
Classifier = Callable[[torch.Tensor], Any]

#: Modules whose output depends on train/eval mode: a model holding one in training mode would
#: be profiled with dropout on (a different random function at every call) or batch statistics.
#: Attention and stacked recurrent layers drop out too when built with ``dropout > 0``
#: (:func:`mode_dependent`); a forward that calls ``F.dropout(x, p, self.training)`` is seen
#: only by calling it twice (:meth:`TorchClassifier.__call__`, :func:`check_repeatable`).
MODE_DEPENDENT = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase)

#: Hugging Face model types that pool a first ([CLS]) token, so ``pad_token_id`` never decides
#: which position is read (decoder classifiers such as GPT-2 read the last non-pad token).
ENCODERS = {"bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2",
            "xlm-roberta", "camembert", "mpnet", "modernbert"}


def check_threshold(threshold) -> float:
    """A probability threshold: a real number (Python or numpy) strictly between 0 and 1."""
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, Real) \
            or not 0 < float(threshold) < 1:
        raise ValueError(f"threshold must be a probability in (0, 1), got {threshold!r}")
    return float(threshold)


def check_probabilities(out: torch.Tensor) -> None:
    """``output="probability"``: refuse values outside [0, 1] (logits?) and two-class rows that
    do not sum to 1 (up to the dtype's rounding)."""
    finite = out[torch.isfinite(out)]
    if finite.numel() and (float(finite.min()) < 0 or float(finite.max()) > 1):
        raise ValueError(f"output='probability' needs probabilities in [0, 1]; the model returned "
                         f"values in [{float(finite.min()):.4g}, {float(finite.max()):.4g}]: for "
                         "logits use output='logits' (the default)")
    if out.dim() == 2 and out.shape[1] == 2 and out.is_floating_point():
        sums = out.double().sum(1)
        off = (sums - 1).abs().nan_to_num(0)                          # NaN rows: non-finite
        if float(off.max()) > max(1e-5, 16 * torch.finfo(out.dtype).eps):
            raise ValueError(f"output='probability' with two columns needs rows summing to 1 "
                             f"(softmax); a row sums to {float(sums[off.argmax()]):.4g}: for "
                             "logits use output='logits' (the default)")


def user_stacklevel() -> int:
    """The ``stacklevel`` of a warning that points at the first caller outside sensbook and
    torch (the line of the reader's code that asked for the profile)."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    skip = (here, os.path.dirname(os.path.abspath(torch.__file__)))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skip):
        frame, level = frame.f_back, level + 1
    return level


def check_not_meta(model, argument: str = "model") -> None:
    """Refuse, at once, a module whose parameters or buffers are on the ``meta`` device (shapes
    without values: nothing can be computed)."""
    if isinstance(model, nn.Module) and any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        raise ValueError(f"{argument} has parameters on the 'meta' device (shapes without "
                         "values: nothing can be computed); load its weights first, e.g. "
                         "model.to_empty(device='cpu') then model.load_state_dict(...)")


def mode_dependent(model: nn.Module) -> list:
    """Names of the submodules of ``model`` in training mode whose output depends on the mode
    (dropout, batch norm, ``nn.MultiheadAttention(dropout > 0)``, ``nn.LSTM/GRU/RNN`` with
    ``num_layers > 1`` and ``dropout > 0``): empty when none is known to depend on it."""
    return [n or type(m).__name__ for n, m in model.named_modules()
            if m.training and (isinstance(m, MODE_DEPENDENT)
                               or isinstance(m, nn.MultiheadAttention) and m.dropout > 0
                               or isinstance(m, nn.RNNBase) and m.dropout > 0 and m.num_layers > 1)]


def same_outputs(a, b) -> bool:
    """Two outputs of one call on the same strings are equal (NaN equals NaN)."""
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return bool((a == b).all())
    return bool(((a == b) | (a.isnan() & b.isnan())).all())


class TorchClassifier:
    """A ``torch.nn.Module`` as a batched Boolean classifier: strings (B, N) -> scores (B,).

    Parameters
    ----------
    model : torch.nn.Module
        Any module; a Hugging Face ``*ForSequenceClassification`` works as it is.
    tokens : (int, int) or (sequence of int, sequence of int), optional
        Token ids of bit 0 and bit 1, or two words of ids of equal length w (a bit that the
        tokenizer writes as several tokens, e.g. ``tokens=(ids("zero"), ids("one"))``). Given,
        the model receives ``torch.long`` ids of shape
        (B, len(prefix) + N w + (N - 1) len(sep) + len(suffix)); else it receives the 0/1
        strings as floats of ``dtype`` (shape (B, N)).
    prefix, suffix : sequence of int
        Token ids put before / after every string (e.g. ``[CLS]``, an end-of-sequence token).
        Together they are the template of a sentence with the bits inside it:
        ``prefix=ids("[CLS] the bits"), suffix=ids("are accepted [SEP]")``.
    sep : sequence of int
        Token ids put between consecutive bits (e.g. a space or a comma); default none.
    attention_mask : bool, optional
        Pass ``attention_mask=`` (all ones, ``torch.long``, the shape of the ids, or (B, N) for
        float inputs) to the model; default: when ``tokens`` are given and the model's
        ``forward`` takes an ``attention_mask``.
    output : {"logits", "probability"} or callable
        How to read the model's output (after taking ``.logits`` of a ``ModelOutput``, or the
        first element of a tuple): ``"logits"`` (default) reads one logit per string (shape (B,)
        or (B, 1)) as the score, and two-class logits (B, 2) as the logit difference
        ``logits[:, positive] - logits[:, 1 - positive]``; ``"probability"`` reads
        probabilities in [0, 1] as ``p - threshold``; a callable maps the output to scores (B,).
    positive : {0, 1}
        Which of two classes accepts (default 1).
    threshold : float
        The probability above which a string is accepted (``output="probability"``; default 0.5).
    device, dtype : optional
        Where the inputs go and their float dtype (default: where the model's parameters are
        at each call, and their dtype). Strings are made on that device, so a model on a GPU
        is profiled there; in half precision pass an explicit ``margin`` on the scale of its
        scores (``margin="auto"`` is refused for float16 outputs)::

            clf = sb.TorchClassifier(bert.half().to("cuda"), tokens=(3, 4), prefix=[2])
            sb.sensitivity_profile(clf, 16, margin=1e-2)
    train : {"eval", "error"}
        A model in training mode whose output depends on it (dropout, batch norm, attention or
        recurrent dropout, or a forward that gives two different outputs on the same strings,
        as ``F.dropout(x, p, self.training)`` does: checked on the first call): ``"eval"``
        (default) switches it to ``eval()`` with a warning, ``"error"`` refuses it. Either way
        it is never profiled in training mode (three runs of a BERT in train mode give three
        different profiles).

    Notes
    -----
    Calls run under ``torch.no_grad()``. The scores keep the model's output dtype, so
    ``margin="auto"`` sees a half-precision output for what it is (and refuses it:
    :func:`sensbook.rounding_margin`). :meth:`memory_per_string` measures the memory of one
    string on a probe of one string, then ``PROBE_STRINGS``, so ``memory_mb`` budgets hold.
    ``output="probability"`` refuses values outside [0, 1] and two-class rows that do not sum
    to 1 (logits read as probabilities).
    A Hugging Face decoder classifier (GPT-2) reads the last token that is not
    ``config.pad_token_id``: when that is unset, it is set to an id the strings never use.
    """

    def __init__(self, model: nn.Module, *,
                 tokens: Sequence[int] | Sequence[Sequence[int]] | None = None,
                 prefix: Sequence[int] = (), suffix: Sequence[int] = (), sep: Sequence[int] = (),
                 attention_mask: bool | None = None, output: str | Callable = "logits",
                 positive: int = 1, threshold: float = 0.5, device=None, dtype=None,
                 train: str = "eval"):
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}; a plain "
                            "callable (B, N) -> scores needs no adapter: pass it to the profiler")
        check_not_meta(model)
        if train not in ("eval", "error"):
            raise ValueError(f"train must be 'eval' or 'error', got {train!r}")
        if not (callable(output) or output in ("logits", "probability")):
            raise ValueError(f"output must be 'logits', 'probability' or a callable, got {output!r}")
        if positive not in (0, 1) or isinstance(positive, bool):
            raise ValueError(f"positive must be 0 or 1 (the class that accepts), got {positive!r}")
        threshold = check_threshold(threshold)
        self.model, self.output, self.positive, self.threshold = model, output, positive, threshold
        self.train = train
        self._device = None if device is None else check_device(device)
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"dtype must be a floating torch dtype (the dtype of float inputs; "
                             f"token ids are always torch.long), got {dtype!r}")
        self._dtype = dtype
        if tokens is None:
            if prefix or suffix:
                raise ValueError("prefix and suffix are token ids: pass tokens=(id of 0, id of 1) too")
            self.tokens = None
        else:
            words = self._words(tokens)
            self.tokens = torch.tensor(words, dtype=torch.long)                      # (2, w)
        self.sep = torch.tensor([self._id(t, "sep") for t in sep], dtype=torch.long)
        if len(self.sep) and self.tokens is None:
            raise ValueError("sep holds token ids: pass tokens=(id of 0, id of 1) too")
        self.prefix = torch.tensor([self._id(t, "prefix") for t in prefix], dtype=torch.long)
        self.suffix = torch.tensor([self._id(t, "suffix") for t in suffix], dtype=torch.long)
        if attention_mask is None:
            try:
                params = inspect.signature(model.forward).parameters
            except (TypeError, ValueError):
                params = {}
            attention_mask = self.tokens is not None and "attention_mask" in params
        self.attention_mask = bool(attention_mask)
        self._check_pad()
        self._estimates, self._repeatable = {}, None
        self._check_mode(at_init=True)

    @property
    def device(self) -> torch.device:
        """Where the inputs go: ``device`` if given, else where the model's parameters are now
        (so ``model.to("cuda")`` after wrapping it moves the strings too)."""
        if self._device is not None:
            return self._device
        p = next(iter(self.model.parameters()), None)
        return p.device if p is not None else torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of float inputs: ``dtype`` if given, else the model's first floating
        parameter's now, else float32."""
        if self._dtype is not None:
            return self._dtype
        p = next((p for p in self.model.parameters() if p.is_floating_point()), None)
        return p.dtype if p is not None else torch.float32

    def _words(self, tokens):
        """The two words (bit 0, bit 1) as equal-length lists of ids: an id or a sequence."""
        if isinstance(tokens, (torch.Tensor, np.ndarray)) and tokens.ndim in (1, 2) \
                and not (tokens.dtype.is_floating_point if isinstance(tokens, torch.Tensor)
                         else tokens.dtype.kind == "f"):
            tokens = tokens.tolist()             # ids as a tensor or array: (2,) or (2, w)
        if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__len__") or len(tokens) != 2:
            raise ValueError(f"tokens must be two ids or two words of ids (bit 0, bit 1), got "
                             f"{tokens!r}")
        words = [[self._id(t, "tokens")] if getattr(t, "ndim", 1) == 0 or not hasattr(t, "__len__") else
                 [self._id(i, "tokens") for i in t] for t in tokens]
        if not words[0] or len(words[0]) != len(words[1]):
            raise ValueError(f"the two words of tokens must have the same number of ids (>= 1), "
                             f"got {tokens!r}: pad the shorter one with an id of your own so "
                             "that every string has the same length")
        if words[0] == words[1]:
            raise ValueError(f"tokens must be two different ids or words (bit 0, bit 1), got "
                             f"{tokens!r}")
        return words

    def _id(self, t, argument):
        """A token id: an integer in [0, config.vocab_size) (below 2^63 without a config)."""
        vocab = getattr(getattr(self.model, "config", None), "vocab_size", None)
        top = vocab if isinstance(vocab, int) and vocab > 0 else 2**63
        if isinstance(t, (torch.Tensor, np.ndarray)) and t.ndim == 0 and not (
                t.dtype == torch.bool or t.dtype.is_floating_point if isinstance(t, torch.Tensor)
                else t.dtype.kind in "bfc"):
            t = t.item()                          # a 0-d integer tensor or array
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < top:
            allowed = f"< config.vocab_size = {vocab}" if top == vocab else "< 2^63"
            raise ValueError(f"each of {argument} must be a token id, an integer >= 0 and "
                             f"{allowed}, got {t!r}")
        return int(t)

    def _used_ids(self) -> set:
        if self.tokens is None:
            return set()
        return (set(self.tokens.flatten().tolist()) | set(self.prefix.tolist())
                | set(self.suffix.tolist()) | set(self.sep.tolist()))

    def _check_pad(self):
        """A decoder classifier reads the last token that is not the pad token: set an unused
        pad id when there is none; refuse a pad id that the strings use."""
        cfg = getattr(self.model, "config", None)
        if cfg is None or not hasattr(cfg, "pad_token_id") or self.tokens is None:
            return
        used = self._used_ids()
        if getattr(cfg, "model_type", None) in ENCODERS:
            return
        if cfg.pad_token_id is None:
            vocab = getattr(cfg, "vocab_size", max(used) + 2)
            free = [i for i in range(vocab - 1, -1, -1) if i not in used]
            if not free:
                raise ValueError("the model has no config.pad_token_id and every id is used by "
                                 "the strings: set model.config.pad_token_id yourself")
            cfg.pad_token_id = free[0]
        elif cfg.pad_token_id in used:
            raise ValueError(f"config.pad_token_id={cfg.pad_token_id} is one of the ids the "
                             f"strings use ({sorted(used)}): a decoder classifier would read "
                             "the wrong position; map the bits to other ids (tokens=...) or set "
                             "model.config.pad_token_id to an unused id")

    def _check_mode(self, at_init=False, repeated=False):
        """Switch a model in training mode whose output depends on it to ``eval()`` with a
        warning (at init, or when two calls on the same strings differ), else refuse it."""
        active = ["forward"] if repeated else mode_dependent(self.model)
        if not active:
            return
        what = (f"{len(active)} dropout/batch-norm module(s), e.g. {active[0]!r}" if not repeated
                else "two calls on the same strings gave different outputs: dropout in forward?")
        if self.train == "eval" and (at_init or repeated):
            warnings.warn(f"the model is in training mode ({what}); switched to model.eval() so "
                          "that it computes one deterministic function", stacklevel=user_stacklevel())
            self.model.eval()
            return
        raise ValueError(f"the model is in training mode ({what}): its profile would change from "
                         "call to call. Call model.eval() first (sb.TorchClassifier(..., "
                         "train='eval') does it for you)")

    def inputs(self, x: torch.Tensor) -> tuple:
        """What the model receives for the 0/1 strings ``x``: ``(args, kwargs)``.

        Parameters
        ----------
        x : torch.Tensor
            0/1 strings of shape ``(B, N)``.

        Returns
        -------
        tuple
            ``(args, kwargs)`` of the model's call: the ids (or the floats) and, where used,
            ``attention_mask``.
        """
        if self.tokens is None:
            x = x.to(device=self.device, dtype=self.dtype)
            kw = {"attention_mask": torch.ones(x.shape, dtype=torch.long, device=x.device)} \
                if self.attention_mask else {}
            return (x,), kw
        dev = self.device
        bits = x.to(device=dev).long()
        ids = self.tokens.to(dev)[bits]                          # (B, N, w): each bit a word
        B, N = bits.shape
        sep = self.sep.to(dev)
        if len(sep):                                             # sep after every word but the last
            ids = torch.cat([ids, sep.expand(B, N, -1)], dim=2)
        ids = ids.reshape(B, -1)[:, :ids.shape[1] * ids.shape[2] - len(sep)]
        ids = torch.cat([self.prefix.to(dev).expand(B, -1), ids,
                         self.suffix.to(dev).expand(B, -1)], dim=1)
        kw = {"attention_mask": torch.ones_like(ids)} if self.attention_mask else {}
        return (ids,), kw

    def scores(self, out) -> torch.Tensor:
        """Scores ``(B,)`` from the model's raw output, read as ``output`` says.

        Parameters
        ----------
        out : torch.Tensor or tuple
            What the model returned for a batch of ``B`` strings (or a ``ModelOutput``).

        Returns
        -------
        torch.Tensor
            Shape ``(B,)``, in the output's dtype; positive accepts.
        """
        if hasattr(out, "logits"):
            out = out.logits
        elif isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
            out = out[0]
        if callable(self.output):
            return self.output(out)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"the model returned {type(out).__name__}, not a tensor, a ModelOutput "
                            "with .logits or a tuple of tensors: pass output=callable mapping it "
                            "to scores (B,)")
        if self.output == "probability":
            check_probabilities(out)
        if out.dim() == 2 and out.shape[1] == 1:
            out = out[:, 0]
        if out.dim() == 2 and out.shape[1] == 2:
            if self.output == "probability":
                return out[:, self.positive] - self.threshold
            return out[:, self.positive] - out[:, 1 - self.positive]
        if out.dim() != 1:
            raise ValueError(f"the model's output has shape {tuple(out.shape)}: a Boolean classifier "
                             "needs one score (B,), one logit (B, 1) or two classes (B, 2); pass "
                             "output=callable to pick the score of another output")
        return out - self.threshold if self.output == "probability" else out

    def _forward(self, x):
        args, kw = self.inputs(x)
        return self.scores(self.model(*args, **kw))

    @torch.no_grad()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Scores T (B,) of the strings ``x`` (B, N): positive accepts. The first call with
        some module in training mode runs the model twice: two different outputs on the same
        strings (dropout in its ``forward``) switch it to ``eval()`` (or refuse, ``train``)."""
        self._check_mode()
        out = self._forward(x)
        state = tuple(m.training for m in self.model.modules())
        if any(state) and state != self._repeatable:
            if not same_outputs(out, self._forward(x)):
                self._check_mode(repeated=True)
                return self._forward(x)
            self._repeatable = state
        return out

    def memory_per_string(self, N: int, limit: int | None = None) -> int:
        """Bytes one string of length ``N`` costs in a call, measured; cached per ``N``.

        Parameters
        ----------
        N : int
            The string length.
        limit : int, optional
            Bytes the probe may use: it runs on fewer strings when ``PROBE_STRINGS`` would not
            fit.

        Returns
        -------
        int
            Bytes a string; the profilers size their chunks by it.

        Notes
        -----
        ``sensbook.memory.probe_bytes`` runs one string, then ``PROBE_STRINGS``, and takes the
        larger of the peak of the tensors the forward pass allocates (times ``PROBE_FACTOR``)
        and the memory the call adds at its peak (times ``RESIDENT_FACTOR``: fused kernels
        such as PyTorch's encoder fast path allocate buffers no tensor count sees).
        """
        if N not in self._estimates:
            self._estimates[N] = probe_bytes(self, N, device=self.device, limit=limit)
        return self._estimates[N]

    def __repr__(self):
        words = None if self.tokens is None else self.tokens.tolist()
        how = "floats" if words is None else \
            f"tokens={[w[0] if len(w) == 1 else w for w in words]}"
        return f"TorchClassifier({type(self.model).__name__}, {how}, output={self.output!r})"


#: The score of a tie (a leaf with p = threshold, a decision function of exactly 0), signed
#: toward ``classes_[0]`` as scikit-learn's ``predict`` decides it: the smallest normal float64.
TIE = float(np.finfo(np.float64).tiny)


class SklearnClassifier:
    """A fitted scikit-learn classifier as a batched Boolean classifier (strings as features).

    Parameters
    ----------
    estimator
        A fitted binary classifier (``classes_`` of length 2).
    method : {"auto", "decision_function", "predict_proba", "predict"}
        ``decision_function`` scores (sign = label), ``predict_proba`` probabilities read as
        ``p(positive) - threshold``, or ``predict`` labels; ``"auto"`` (default): the first the
        estimator has, in that order.
    positive : optional
        The class that accepts (default ``classes_[1]``, which ``decision_function`` favours).
    threshold : float
        The probability above which a string is accepted (``predict_proba``; default 0.5).

    Notes
    -----
    Ties are broken as scikit-learn's ``predict`` breaks them (toward ``classes_[0]``), so a
    decision tree's leaf with p = 0.5 is a label, not an undecided string; with a margin > 0
    such strings are undecided, and the profiler warns about any undecided string an adapter
    yields.
    """

    METHODS = ("decision_function", "predict_proba", "predict")

    def __init__(self, estimator, *, method: str = "auto", positive=None, threshold: float = 0.5):
        classes = getattr(estimator, "classes_", None)
        if classes is None:
            fitted = any(k.endswith("_") and not k.startswith("_") for k in getattr(estimator, "__dict__", {}))
            raise ValueError(f"estimator must be a fitted classifier (with classes_); "
                             f"{type(estimator).__name__} " + (
                                 "is fitted but has no classes_: a regressor? fit a classifier "
                                 "(e.g. LogisticRegression)" if fitted else
                                 "is not fitted: call .fit(X, y) first"))
        if len(classes) != 2:
            raise ValueError(f"a Boolean classifier has two classes; {type(estimator).__name__} "
                             f"has {len(classes)}: {list(classes)[:5]}")
        if method == "auto":
            method = next(m for m in self.METHODS if hasattr(estimator, m))
        if method not in self.METHODS or not hasattr(estimator, method):
            raise ValueError(f"method must be one of {self.METHODS} that the estimator has, got {method!r}")
        if positive is None:
            positive = classes[1]
        if positive not in list(classes):
            raise ValueError(f"positive must be one of the classes {list(classes)}, got {positive!r}")
        if method == "decision_function" and positive != classes[1]:
            raise ValueError("decision_function scores favour classes_[1]; with another positive "
                             "class use method='predict_proba'")
        self.estimator, self.method, self.positive, self.threshold = (
            estimator, method, positive, check_threshold(threshold))
        self.column, self._estimates = list(classes).index(positive), {}

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Scores (B,) (float64; positive accepts) or labels (bool) of the strings ``x``.

        A tie (a probability equal to the threshold, a decision function of 0) goes to
        ``classes_[0]``, as scikit-learn's ``predict`` breaks it: its score is the smallest
        normal float64 with that label's sign (``TIE``), so it is decided at ``margin=0`` and
        undecided at any margin > 0."""
        X = x.detach().cpu().double().numpy()
        out = getattr(self.estimator, self.method)(X)
        if self.method == "predict":
            return torch.as_tensor(np.asarray(out) == self.positive)
        if self.method == "predict_proba":
            out = np.asarray(out, dtype=np.float64)[:, self.column] - self.threshold
        else:
            out = np.asarray(out, dtype=np.float64).reshape(len(X))
        tie = TIE if self.column == 0 else -TIE           # ties go to classes_[0]
        return torch.as_tensor(np.where(out == 0, tie, out))

    def memory_per_string(self, N: int, limit: int | None = None) -> int:
        """Bytes one string of length ``N`` costs in a call, measured; cached per ``N``.

        Parameters
        ----------
        N : int
            The string length.
        limit : int, optional
            Bytes the probe may use: it runs on fewer strings when ``SKLEARN_PROBE_STRINGS``
            would not fit.

        Returns
        -------
        int
            Bytes a string; the profilers size their chunks by it.

        Notes
        -----
        The memory the call adds at its peak (``sensbook.memory.probe_bytes``, times
        ``RESIDENT_FACTOR``; an ``MLPClassifier`` of width 4,096 needs 32 KiB a string), and at
        least its float64 features and a few copies of them, ``32 (N + 1)`` bytes.
        """
        if N not in self._estimates:
            self._estimates[N] = max(4 * 8 * (N + 1), probe_bytes(
                self, N, limit=limit, count=False, strings=SKLEARN_PROBE_STRINGS))
        return self._estimates[N]

    def __repr__(self):
        return f"SklearnClassifier({type(self.estimator).__name__}, method={self.method!r})"


#: The adapters: their ``memory_per_string`` takes a ``limit`` (bytes) that bounds the probe.
ADAPTERS = (TorchClassifier, SklearnClassifier)


# ---- the profiler's boundary: errors that name the fix ---------------------------------------
def check_mode(classifier) -> None:
    """Refuse a module in training mode with dropout or batch norm (it would be profiled as a
    different function at every call), naming the fix."""
    if not isinstance(classifier, nn.Module):
        return
    check_not_meta(classifier, "the classifier")
    active = mode_dependent(classifier)
    if active:
        raise ValueError(
            f"the classifier is a module in training mode with {len(active)} dropout/batch-norm "
            f"module(s) (e.g. {active[0]!r}): its profile would change from call to call. Call "
            "model.eval() first, or wrap it: sb.TorchClassifier(model) switches it to eval()")


def repeat_needed(classifier) -> bool:
    """Whether :class:`sensbook.labels.Evaluator` checks that calls repeat
    (:func:`check_repeatable`): for any classifier but the adapters (the torch adapter checks its model itself), the book's
    own models (:class:`sensbook.model.ScoreModule`: no dropout, one function in either mode)
    and a module none of whose submodules is in training mode."""
    from .model import ScoreModule

    if isinstance(classifier, ADAPTERS + (ScoreModule,)):
        return False
    return not isinstance(classifier, nn.Module) or any(m.training for m in classifier.modules())


def check_repeatable(first: torch.Tensor, again: torch.Tensor) -> None:
    """Refuse a classifier whose outputs (scores or labels; NaN equals NaN) on the same strings
    differ between two calls: a module in training mode with dropout in its forward, or a
    function wrapping one (:class:`sensbook.labels.Evaluator`)."""
    if not same_outputs(first, again):
        a, b = torch.as_tensor(first), torch.as_tensor(again)
        n = "all" if a.shape != b.shape else int(((a != b) & ~(a.isnan() & b.isnan())).sum())
        raise ValueError(
            f"classifier gave different outputs on two calls on the same {first.shape[-1]} "
            f"strings ({n} differ): it must compute one function. Call model.eval() on the "
            "module it runs (dropout in training mode?), or pass the module as "
            "sb.TorchClassifier(model), which does it")


def check_one_function(model, x: torch.Tensor) -> None:
    """The checks of :class:`sensbook.labels.Evaluator` for an instrument that differentiates
    a model (:func:`sensbook.top_hessian_eigenvalue`) on the strings ``x``: an adapter is called
    once (it checks its model itself); a module is refused as the Evaluator refuses it."""
    with torch.no_grad():
        if isinstance(model, TorchClassifier):
            model(x)
            return
        check_mode(model)
        if repeat_needed(model):
            check_repeatable(model(x), model(x))


@contextlib.contextmanager
def explain_call(classifier, x):
    """Re-raise the error of a module that embeds token ids and was given 0/1 floats, with the
    adapter that fixes it."""
    try:
        yield
    except (RuntimeError, TypeError, IndexError) as e:
        if "meta" in str(e) and not isinstance(classifier, nn.Module):
            raise type(e)(f"{e}\n(the classifier runs a module on the 'meta' device, shapes "
                          "without values: load its weights first)") from e
        if isinstance(classifier, nn.Module) and any(
                isinstance(m, nn.Embedding) for m in classifier.modules()):
            raise type(e)(f"{e}\n(the profiler passes 0/1 strings of shape (B, N) as {x.dtype}; "
                          "a model that embeds token ids wants ids: wrap it in "
                          "sb.TorchClassifier(model, tokens=(id of 0, id of 1)))") from e
        raise


def explain_output(out, B: int) -> None:
    """Refuse, naming the fix, what a model returns that is not scores or labels (B,): a
    ``ModelOutput``, a tuple, one logit (B, 1), two-class logits (B, 2), C classes."""
    if hasattr(out, "logits") and not isinstance(out, torch.Tensor):
        raise TypeError(f"the classifier returned a {type(out).__name__} (a Hugging Face "
                        "ModelOutput?): return its scores, e.g. `out.logits[:, 1] - "
                        "out.logits[:, 0]`, or wrap the model in sb.TorchClassifier(model)")
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        raise TypeError(f"the classifier returned a {type(out).__name__} of tensors: return one "
                        "tensor of scores (e.g. `out[0]`), or wrap the model in "
                        "sb.TorchClassifier(model), which reads the first")
    if isinstance(out, torch.Tensor) and out.dim() == 2 and out.shape[0] == B != out.shape[1]:
        C = out.shape[1]
        fix = ("one logit per string: return `out[:, 0]`" if C == 1 else
               "two-class logits? return the logit difference `out[:, 1] - out[:, 0]` (its sign "
               "is the label), or `out.argmax(-1) == 1` as bool labels" if C == 2 else
               f"{C} classes: a Boolean classifier needs one score per string")
        raise ValueError(f"the classifier returned shape {tuple(out.shape)} for B={B} strings: "
                         f"{fix}; sb.TorchClassifier(model) does this for torch models")
