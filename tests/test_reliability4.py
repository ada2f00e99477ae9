"""Issue 38 (reliability, round 4) and issue 37 items 3, 4 and 8: each case is a reproduction
from the issues that used to give a silent wrong answer, a memory use over the budget, a
traceback or a confusing error."""
import json
import os
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import sensbook as sb
from tests.test_boolean import brute_profile

ROOT = pathlib.Path(__file__).resolve().parents[1]


# ---- 38.1 and 37.3: every kind of mode-dependent behaviour ------------------------------------
class Head(nn.Module):
    """0/1 strings (B, N) -> one score per string, through a layer that may drop out."""

    def __init__(self, kind, N=8, D=16):
        super().__init__()
        torch.manual_seed(2 if kind == "rnn" else 0)               # seeds of non-constant functions
        self.kind, self.inp, self.pos = kind, nn.Linear(1, D), nn.Parameter(torch.randn(N, D))
        if kind == "mha":
            self.layer = nn.MultiheadAttention(D, 2, dropout=0.5, batch_first=True)
        elif kind in ("lstm", "gru", "rnn"):
            cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
            self.layer = cls(D, D, num_layers=2, dropout=0.5, batch_first=True)
        self.out, self.sign = nn.Linear(D, 1), torch.tensor([1.0, -1.0] * (N // 2))

    def forward(self, x):
        h = self.inp(x.unsqueeze(-1)) + self.pos
        if self.kind == "mha":
            h = self.layer(h, h, h)[0]
        elif self.kind == "functional":
            h = F.dropout(torch.tanh(h), 0.5, self.training)
        else:
            h = self.layer(h)[0]
        return self.out(h)[..., 0] @ self.sign          # + - + - ...: no constant function


KINDS = ["mha", "lstm", "gru", "rnn", "functional"]


@pytest.mark.parametrize("kind", KINDS)
def test_38_1_the_adapter_switches_every_kind_of_dropout_to_eval(kind):
    model = Head(kind)
    ref = Head(kind).eval()
    truth = brute_profile(lambda x: bool(ref(x[None].float()) > 0), 8)
    with pytest.warns(UserWarning, match=r"training mode .* switched to model\.eval\(\)") as w:
        clf = sb.TorchClassifier(model)
        runs = {tuple(sb.sensitivity_profile(clf, 8, progress=False).K.tolist()) for _ in range(3)}
    assert len(w) == 1 and w[0].filename == __file__            # points at the reader's line
    assert not model.training and runs == {tuple(truth.tolist())} and truth[0] < 2**8
    with pytest.raises(ValueError, match=r"training mode .* model\.eval\(\)"):
        sb.TorchClassifier(Head(kind), train="error")(torch.ones(64, 8))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("wrap", ["module", "function"])
def test_38_1_37_3_the_profilers_refuse_a_module_or_function_in_training_mode(kind, wrap):
    model = Head(kind)
    clf = model if wrap == "module" else (lambda x: model(x))      # "a plain function is enough"
    for kw in ({}, {"n_samples": 40}):
        with pytest.raises(ValueError, match=r"(training mode|two calls on the same).*model\.eval"):
            sb.sensitivity_profile(clf, 8, progress=False, **kw)
    model.eval()
    assert sb.sensitivity_profile(clf, 8, progress=False).K.tolist() == \
        brute_profile(lambda x: bool(model(x[None].float()) > 0), 8).tolist()


def test_38_1_a_deterministic_module_in_training_mode_is_profiled_as_it_is():
    torch.manual_seed(0)
    clf = sb.TorchClassifier(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                           # no warning, no eval() needed
        p = sb.sensitivity_profile(clf, 8, progress=False)
    assert clf.model.training and int(p.K.sum()) == 256
