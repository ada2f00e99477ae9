"""Issue 38 (reliability, round 4) and issue 37 items 3, 4 and 8: each case is a reproduction
from the issues that used to give a silent wrong answer, a memory use over the budget, a
traceback or a confusing error."""
import json
import os
import pathlib
import subprocess
import sys
import warnings

import numpy as np
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
    model.eval()                                   # the adapter's test compares with a brute force
    assert sb.sensitivity_profile(clf, 8, progress=False).K.tolist() == \
        sb.sensitivity_profile(sb.TorchClassifier(model), 8, progress=False).K.tolist()


def test_38_1_a_deterministic_module_in_training_mode_is_profiled_as_it_is():
    torch.manual_seed(0)
    clf = sb.TorchClassifier(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")                           # no warning, no eval() needed
        p = sb.sensitivity_profile(clf, 8, progress=False)
    assert clf.model.training and int(p.K.sum()) == 256


# ---- 38.4: a profile of non-finite or incomplete strings says so ------------------------------
def test_38_4_nan_or_incomplete_profiles_warn_with_the_counts():
    nan = lambda x: torch.full(x.shape[:1], float("nan"))
    half = lambda x: torch.where(x[:, 0] > 0, float("inf"), x.sum(-1) - 2.5)   # none complete
    for clf, counts in ((nan, r"non-finite: \[64\], incomplete: \[0\]"),
                        (half, r"non-finite: \[32\], incomplete: \[32\]")):
        with pytest.warns(UserWarning, match=r"most of the 64 strings are undecided, non-finite "
                                             r"or incomplete,.*" + counts) as w:
            assert int(sb.zero_sensitivity_count(clf, 6, progress=False)) == 0
        assert w[0].filename == __file__
        with pytest.warns(UserWarning, match="non-finite or incomplete"):
            p = sb.sensitivity_profile(clf, 6, n_samples=50, progress=False)
        assert int(p.counts.sum()) == 0


# ---- 38.5, 38.2, 37.8: the memory budget holds for every classifier --------------------------
def test_38_5_one_string_is_probed_first_and_refused_from_it():
    seen = []

    class Quadratic(nn.Module):                  # N^2 floats a string: 64 MiB at N = 4096
        def forward(self, x):
            seen.append(x.shape[0])
            return (x.unsqueeze(-1) * x.unsqueeze(-2)).sum((-1, -2)) - 1.5

    clf = sb.TorchClassifier(Quadratic().eval())
    with pytest.raises(ValueError, match=r"memory_mb=16 is too small: one string of length N=4096"):
        sb.sensitivity_profile(clf, 4096, n_samples=4, memory_mb=16, progress=False)
    assert max(seen) == 1
    seen.clear()                   # 12 MiB a string: a budget of 40 fits 3, not the probe of 8
    assert 1 < clf.memory_per_string(1024, limit=40 * 2**20) / (1024**2 * 4) < 4
    assert max(seen) == 3 < sb.adapters.PROBE_STRINGS


MEASURE = r"""
import json, sys, warnings, torch, sensbook as sb
from sensbook.memory import trim_memory
warnings.simplefilter("ignore")
torch.set_num_threads(1)
a = json.loads(sys.argv[1])
def kib(k):
    for line in open("/proc/self/status"):
        if line.startswith(k):
            return int(line.split()[1])
if a["kind"] == "mlp":
    import numpy as np
    from sklearn.neural_network import MLPClassifier
    X = np.random.RandomState(0).randint(0, 2, (64, a["N"])).astype(float)
    est = MLPClassifier(hidden_layer_sizes=(4096,), max_iter=3).fit(X, X[:, 0] > 0)
    clf = sb.SklearnClassifier(est)
else:
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=8, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64,
                                  max_position_embeddings=600, attn_implementation="eager")
    bert = transformers.BertForSequenceClassification(cfg).eval()
    def clf(x):                                  # a plain function: no memory_per_string
        ids = torch.cat([torch.full((len(x), 1), 2), x.long() + 3], 1)
        out = bert(ids).logits
        return out[:, 1] - out[:, 0]
kw = dict(memory_mb=a["mb"], progress=False, n_samples=a.get("n"))
sb.sensitivity_profile(clf, a["N"], n_samples=1, memory_mb=a["mb"], progress=False)  # warm-up
trim_memory()
open("/proc/self/clear_refs", "w").write("5")
base = kib("VmRSS")
p = sb.sensitivity_profile(clf, a["N"], **kw)
print(json.dumps({"peak_mib": (kib("VmHWM") - base) / 1024, "counted": int(p.counts.sum())}))
"""


@pytest.mark.skipif(not pathlib.Path("/proc/self/clear_refs").exists(),
                    reason="needs Linux /proc to reset and read the peak RSS")
@pytest.mark.parametrize("case", [
    dict(kind="mlp", N=12, mb=32),                     # 38.2: 32 KiB a string, not 32 (N + 1) B
    dict(kind="bert", N=128, n=2, mb=16),              # 37.8: a plain function around BERT
], ids=lambda c: c["kind"])
def test_38_2_37_8_the_budget_holds_for_estimators_and_plain_functions(case):
    pytest.importorskip("sklearn" if case["kind"] == "mlp" else "transformers")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "MALLOC_MMAP_THRESHOLD_": "131072"}           # as tests/test_memory.py
    out = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(case)], capture_output=True,
                         text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["counted"] > 0
    assert got["peak_mib"] <= case["mb"], got


# ---- 37.4: probabilities asked of logits ------------------------------------------------------
def test_37_4_probability_output_refuses_logits_and_rows_not_summing_to_one():
    torch.manual_seed(0)
    logits = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)).eval()
    x = sb.strings(6)
    with pytest.raises(ValueError, match=r"output='probability' needs probabilities in \[0, 1\]"):
        sb.TorchClassifier(logits, output="probability")(x)
    sig = nn.Sequential(logits, nn.Sigmoid())                   # in [0, 1], rows not summing to 1
    with pytest.raises(ValueError, match=r"rows summing to 1 .* output='logits'"):
        sb.sensitivity_profile(sb.TorchClassifier(sig, output="probability"), 6, progress=False)
    soft = sb.TorchClassifier(nn.Sequential(logits, nn.Softmax(-1)), output="probability")
    one = sb.TorchClassifier(nn.Sequential(nn.Linear(6, 1), nn.Sigmoid()).eval(),
                             output="probability", threshold=np.float32(0.3))        # 38.8
    assert sb.sensitivity_profile(soft, 6, progress=False).K.tolist() == \
        sb.sensitivity_profile(sb.TorchClassifier(logits), 6, progress=False).K.tolist()
    assert one.threshold == pytest.approx(0.3) and int(sb.sensitivity_profile(
        one, 6, progress=False).K.sum()) == 64


# ---- 38.8: errors that name the argument and what is allowed ---------------------------------
def test_38_8_unclear_errors_name_the_argument():
    transformers = pytest.importorskip("transformers")
    from sklearn.linear_model import LinearRegression
    cfg = transformers.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=16)
    bert = transformers.BertForSequenceClassification(cfg).eval()
    with pytest.raises(ValueError, match=r"each of tokens must be a token id, .* < config\."
                                         r"vocab_size = 8, got 9"):
        sb.TorchClassifier(bert, tokens=(3, 9))
    with pytest.raises(ValueError, match=r"each of prefix must be .* got 8"):
        sb.TorchClassifier(bert, tokens=(3, 4), prefix=[8])
    with pytest.raises(ValueError, match=r"each of tokens must be a token id, .* < 2\^63"):
        sb.TorchClassifier(nn.Embedding(4, 1), tokens=(3, 2**63))
    X = sb.strings(4).double().numpy()
    with pytest.raises(ValueError, match=r"estimator must be a fitted classifier .* a regressor"):
        sb.SklearnClassifier(LinearRegression().fit(X, X[:, 0]))
    with pytest.raises(ValueError, match=r"estimator must be a fitted classifier .* not fitted"):
        sb.SklearnClassifier(LinearRegression())
    m = sb.Recognizer.random(D=4, L=1, seed=0)
    with pytest.raises(ValueError, match=r"bits must be a 1-d collection of integer positions"):
        sb.flip_hinge(m, torch.zeros(2, 6), bits=5)
    meta = nn.Linear(4, 1).to("meta")
    for call in (lambda: sb.min_margin(meta, torch.zeros(3, 4)),
                 lambda: sb.top_hessian_eigenvalue(meta, sb.PARITY, torch.zeros(3, 4)),
                 lambda: sb.accuracy(m.to("meta"), sb.PARITY, 4)):
        # issue 48 item 13: at once, naming the argument (the profiler's boundary, or the device)
        with pytest.raises(ValueError, match=r"^model('s device='meta': .* allowed here: cpu"
                                             r"| has parameters on the 'meta' device)"):
            call()


# ---- 38.9: long strings show a bar ------------------------------------------------------------
def test_38_9_score_gap_blowup_and_flip_hinge_show_a_bar_on_long_strings(monkeypatch):
    bars, real = [], sb.settings.progress

    def spy(iterable=None, **kw):
        bars.append(kw.get("desc"))
        return real(iterable, **kw)
    import sensbook.constructions as cons
    import sensbook.hinge as hinge
    import sensbook.mechanism as mechanism              # where sb.blowup lives
    for mod in (cons, hinge, mechanism):
        monkeypatch.setattr(mod, "progress", spy)
        monkeypatch.setattr(mod, "LONG_N", 64, raising=False)
    m = sb.first_hard_transformer(eps=0.1)
    x = sb.random_strings(64, 3, seed=0).to(m.dtype)
    long = sb.blowup(m, x)
    short = m.trace(x)[1].beta                                   # all at once: the same values
    assert torch.allclose(long, short, rtol=1e-12)
    gap = cons.score_gap(m, 64)
    assert gap.shape == (1, 1) and float(gap) > 0
    sb.flip_hinge(m, x[:1], bits=[0, 5])
    assert bars == ["blowup N=64", "score gap N=64", "flip_hinge N=64"]


# ---- 38.6: one rule for a relative --out and a relative SENSBOOK_RESULTS ----------------------
def test_38_6_a_relative_out_is_the_store_a_relative_results_variable_names(tmp_path, monkeypatch):
    import sensbook.cli as cli
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    (tmp_path / "book").mkdir()
    monkeypatch.chdir(tmp_path / "book")                   # where the chapters' kernels run
    monkeypatch.setenv("SENSBOOK_RESULTS", "paper-results")
    seen = {}
    monkeypatch.setattr(cli, "_sweep", lambda args, exps, scale, out, *a: seen.update(out=out) or 0)
    for command in (["sweep", "ch1", "--out", "paper-results"], ["sweep", "ch1"]):
        assert cli.main(command) == 0
        assert pathlib.Path(seen["out"]).resolve() == sb.results_dir().resolve() \
            == (tmp_path / "paper-results").resolve()
    monkeypatch.chdir(tmp_path)
    assert sb.results_dir("x") == tmp_path / "x" and sb.results_dir(tmp_path / "y") == tmp_path / "y"


# ---- 38.7: the publish step's index: one line, written whole ---------------------------------
def index_command(folder):
    return subprocess.run([sys.executable, "-m", "sensbook.runtime", "index", str(folder)],
                          capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_38_7_the_index_command_says_what_is_wrong_in_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    for folder, why in ((tmp_path / "missing", "is missing"), (tmp_path / "file", "is a file")):
        done = index_command(folder)
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1 and why in done.stderr and "DIR=" in done.stderr


def test_38_7_a_store_that_cannot_be_written_is_one_line(tmp_path, monkeypatch, capsys):
    import errno
    import tempfile

    from sensbook.runtime.__main__ import main

    def read_only(*a, **k):                  # what a read-only store answers (even to root)
        raise PermissionError(errno.EACCES, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert main(["index", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write index.json (Permission denied)" in err
    assert not (tmp_path / "index.json").exists()


def test_38_7_a_full_disk_keeps_the_old_index_whole(tmp_path, monkeypatch):
    import errno

    from sensbook.runtime import published
    (tmp_path / "ch1.x").mkdir()
    (tmp_path / "ch1.x" / ("a" * 20 + ".json")).write_text("{}")
    old = published.write_index(tmp_path).read_bytes()
    (tmp_path / "ch1.x" / ("b" * 20 + ".json")).write_text("{}")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(ValueError, match=r"cannot write index.json \(No space left on device\)"):
        published.write_index(tmp_path)
    assert (tmp_path / "index.json").read_bytes() == old
    assert json.loads(old)["experiments"] == {"ch1.x": ["a" * 20]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ch1.x", "index.json"]   # no debris
