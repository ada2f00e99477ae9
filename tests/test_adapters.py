"""Issue 29: a researcher's own models profiled in two lines, with no silent wrong answers.

The five models of the issue (a tiny Hugging Face BERT and GPT-2 from a config, an
``nn.TransformerEncoder`` with a CLS head, a scikit-learn decision tree and a logistic
regression) go through the adapters and must equal a brute force that calls each model on one
string at a time, written without the adapter. Then items 1-8 of the issue, one test each.
"""
import json
import os
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

import sensbook as sb
from sensbook.controls import MLP
from tests.test_boolean import brute_profile

transformers = pytest.importorskip("transformers")
sklearn_tree = pytest.importorskip("sklearn.tree")
from sklearn.linear_model import LogisticRegression  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
N = 7
CLS, ZERO, ONE, EOS = 2, 3, 4, 5


def tiny_bert(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.BertConfig(vocab_size=8, hidden_size=16, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=32,
                                  max_position_embeddings=300, initializer_range=0.5)
    return transformers.BertForSequenceClassification(cfg)


def tiny_gpt2(seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=8, n_embd=16, n_layer=2, n_head=2, n_positions=300,
                                  initializer_range=0.5, bos_token_id=None, eos_token_id=None)
    return transformers.GPT2ForSequenceClassification(cfg)


class EncoderCLS(nn.Module):
    """An nn.TransformerEncoder reading token ids with a CLS token and a one-logit head."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(8, 16)
        self.pos = nn.Parameter(torch.randn(300, 16))
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 1)

    def forward(self, ids):
        h = self.enc(self.emb(ids) + self.pos[: ids.shape[1]])
        return self.head(h[:, 0])


def fitted(kind):
    X = sb.random_strings(N, 200, seed=1).numpy()
    y = (X[:, :3].sum(1) >= 2).astype(int) ^ (X[:, 5] > 0).astype(int)
    est = sklearn_tree.DecisionTreeClassifier(random_state=0) if kind == "tree" \
        else LogisticRegression()
    return est.fit(X, y)


def models():
    """(name, the adapter in one line, a brute-force label of one string without the adapter)."""
    bert, gpt, enc = tiny_bert(), tiny_gpt2(), EncoderCLS()
    tree, logreg = fitted("tree"), fitted("logreg")
    with pytest.warns(UserWarning, match="training mode"):
        adapted = [sb.TorchClassifier(bert, tokens=(ZERO, ONE), prefix=[CLS]),
                   sb.TorchClassifier(gpt, tokens=(ZERO, ONE), suffix=[EOS]),
                   sb.TorchClassifier(enc, tokens=(ZERO, ONE), prefix=[CLS])]
    adapted += [sb.SklearnClassifier(tree), sb.SklearnClassifier(logreg)]

    def hf(m, pre, post):
        def one(x):
            ids = torch.tensor([pre + [ONE if b else ZERO for b in x.tolist()] + post])
            logits = m(ids).logits[0]
            return bool(logits[1] > logits[0])
        return one

    brute = [hf(bert, [CLS], []), hf(gpt, [], [EOS]),
             lambda x: bool(enc(torch.tensor([[CLS] + [ONE if b else ZERO for b in x.tolist()]])) > 0),
             lambda x: bool(tree.predict(x.double().numpy()[None])[0] == 1),
             lambda x: bool(logreg.decision_function(x.double().numpy()[None])[0] > 0)]
    return list(zip(["bert", "gpt2", "encoder", "tree", "logreg"], adapted, brute))


@torch.no_grad()
def test_the_five_models_through_the_adapters_equal_a_brute_force():
    seen = set()
    for name, clf, one in models():
        p = sb.sensitivity_profile(clf, N, progress=False)
        want = brute_profile(one, N)
        assert p.K.tolist() == want.tolist(), name
        assert bool(p.complete), name
        seen.add(int(p.K0) < 2**N)                       # not every model is a constant
        s = sb.sensitivity_profile(clf, N, n_samples=30, seed=1, progress=False)
        assert int(s.counts.sum()) == 30
    assert True in seen


def test_a_sampled_profile_agrees_with_the_exact_one_within_its_standard_errors():
    with pytest.warns(UserWarning, match="training mode"):
        clf = sb.TorchClassifier(tiny_bert(3), tokens=(ZERO, ONE), prefix=[CLS])
    exact = sb.sensitivity_profile(clf, 8, progress=False).fractions
    s = sb.sensitivity_profile(clf, 8, n_samples=400, seed=2, progress=False)
    z = (s.fractions - exact).abs() / torch.clamp(s.stderr, min=1 / 400)
    assert float(z.max()) < 4.5, (s.fractions, exact)


# ---- item 1: train mode -----------------------------------------------------------------------
def test_item1_a_model_in_train_mode_is_never_profiled_silently():
    bert = tiny_bert()
    assert bert.training
    ids = lambda x: (x.long() + ZERO)
    with pytest.raises(ValueError, match=r"training mode .* model\.eval\(\)"):
        sb.sensitivity_profile(lambda_module(bert, ids), 5, progress=False)
    with pytest.raises(ValueError, match="training mode"):
        sb.TorchClassifier(bert, tokens=(ZERO, ONE), train="error")
    with pytest.warns(UserWarning, match=r"switched to model\.eval\(\)"):
        clf = sb.TorchClassifier(bert, tokens=(ZERO, ONE), prefix=[CLS])
    assert not bert.training
    runs = {tuple(sb.sensitivity_profile(clf, 6, progress=False).K.tolist()) for _ in range(3)}
    assert len(runs) == 1
    bert.train()                                         # switched back by the user: refused
    with pytest.raises(ValueError, match="training mode"):
        clf(torch.zeros(2, 6))


class lambda_module(nn.Module):
    """A module (in train mode) whose forward maps 0/1 strings to scores: profiled directly."""

    def __init__(self, model, ids):
        super().__init__()
        self.model, self.ids = model, ids

    def forward(self, x):
        out = self.model(self.ids(x)).logits
        return out[:, 1] - out[:, 0]


# ---- item 2: probabilities -------------------------------------------------------------------
def test_item2_probabilities_warn_and_read_with_their_threshold():
    w = torch.linspace(-1, 1, 6)
    logit = lambda x: x[:, :6] @ w - 0.1
    with pytest.warns(UserWarning, match=r"inside \[0, 1\].*threshold"):
        p = sb.sensitivity_profile(lambda x: torch.sigmoid(logit(x)), 6, progress=False)
    assert int(p.accepted) == 64                          # the silent wrong answer it warns of
    with pytest.warns(UserWarning, match=r"inside \[0, 1\]"):
        sb.sensitivity_profile(lambda x: torch.sigmoid(logit(x)), 30, n_samples=20, progress=False)
    want = sb.sensitivity_profile(logit, 6, progress=False)
    model = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
    with torch.no_grad():
        model[0].weight.copy_(w[None]), model[0].bias.fill_(-0.1)
    got = sb.sensitivity_profile(sb.TorchClassifier(model, output="probability"), 6, progress=False)
    assert got.K.tolist() == want.K.tolist() and int(got.accepted) == int(want.accepted) < 64
    logreg = fitted("logreg")
    proba = sb.SklearnClassifier(logreg, method="predict_proba")
    dec = sb.SklearnClassifier(logreg, method="decision_function")
    lab = sb.SklearnClassifier(logreg, method="predict")
    profiles = [sb.sensitivity_profile(c, N, progress=False).K.tolist() for c in (proba, dec, lab)]
    assert profiles[0] == profiles[1] == profiles[2]
    with pytest.warns(UserWarning, match=r"inside \[0, 1\]"):
        sb.sensitivity_profile(lambda x: torch.as_tensor(logreg.predict_proba(x.numpy())[:, 1]), N,
                               progress=False)


def test_item2_models_that_return_scores_are_not_asked_about_probabilities():
    """A random transformer's scores can all lie in [0, 1] (w = 0, omega = 0.5 here): sensbook's
    models say ``returns_scores``, so the profiler does not warn; the same outputs from a
    callable that says nothing do warn."""
    m = sb.Recognizer.random(P=2, D=4, L=1, seed=0)
    with torch.no_grad():
        m.w.zero_(), m.omega.fill_(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = sb.sensitivity_profile(m, 6, progress=False)
        mlps = [MLP(6, width=4) for _ in range(2)]          # zero weights: T = omega
        for mlp in mlps:
            nn.init.constant_(mlp.omega, 0.5)
        sb.sensitivity_profile(sb.Population(mlps), 6, progress=False)
    assert p.accepted.tolist() == [64, 64]
    with pytest.warns(UserWarning, match=r"inside \[0, 1\]"):
        sb.sensitivity_profile(lambda x: m(x), 6, progress=False)


# ---- item 3: errors that name the fix -----------------------------------------------------------
def test_item3_every_error_names_the_fix():
    bert = tiny_bert().eval()
    with pytest.raises((RuntimeError, TypeError, IndexError), match=r"sb\.TorchClassifier\(model, tokens="):
        sb.sensitivity_profile(bert, 5, progress=False)
    ids = lambda x: x.long() + ZERO
    with pytest.raises(TypeError, match=r"ModelOutput.*out\.logits"):
        sb.sensitivity_profile(lambda x: bert(ids(x)), 5, progress=False)
    with pytest.raises(ValueError, match=r"logit difference `out\[:, 1\] - out\[:, 0\]`"):
        sb.sensitivity_profile(lambda x: bert(ids(x)).logits, 5, progress=False)
    with pytest.raises(ValueError, match=r"one logit per string: return `out\[:, 0\]`"):
        sb.sensitivity_profile(lambda x: x.sum(-1, keepdim=True) - 2.5, 5, progress=False)
    with pytest.raises(TypeError, match=r"tuple of tensors"):
        sb.sensitivity_profile(lambda x: (x.sum(-1) - 2.5, None), 5, progress=False)
    # integer inputs are allowed (0/1 ids), and the adapter maps bits to any ids
    p = sb.sensitivity_profile(lambda x: bert(x + ZERO).logits @ torch.tensor([-1.0, 1.0]), 5,
                               dtype=torch.long, progress=False)
    q = sb.sensitivity_profile(sb.TorchClassifier(bert, tokens=(ZERO, ONE)), 5, progress=False)
    assert p.K.tolist() == q.K.tolist()
    with pytest.raises(ValueError, match=r"shape \(4, 3\).*two classes \(B, 2\)"):
        sb.TorchClassifier(nn.Linear(5, 3).eval())(torch.zeros(4, 5))
    gpt = tiny_gpt2().eval()
    gpt.config.pad_token_id = ONE
    with pytest.raises(ValueError, match="pad_token_id=4 is one of the ids"):
        sb.TorchClassifier(gpt, tokens=(ZERO, ONE))
    with pytest.raises(ValueError, match="not fitted"):
        sb.SklearnClassifier(LogisticRegression())


# ---- item 4: memory -----------------------------------------------------------------------------
MEASURE = r"""
import json, sys, torch, transformers, sensbook as sb
from sensbook.memory import _kib as kib, trim_memory as _trim
from tests.test_adapters import EncoderCLS
torch.set_num_threads(1)
a = json.loads(sys.argv[1])
torch.manual_seed(0)
if a["model"] == "gpt2":
    cfg = transformers.GPT2Config(vocab_size=8, n_embd=32, n_layer=2, n_head=2, n_positions=600,
                                  bos_token_id=None, eos_token_id=None)
    model, pre = transformers.GPT2ForSequenceClassification(cfg), []
elif a["model"] == "encoder":
    model, pre = EncoderCLS(), [2]
else:
    cfg = transformers.BertConfig(vocab_size=8, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64,
                                  max_position_embeddings=600, attn_implementation=a["attn"])
    model, pre = transformers.BertForSequenceClassification(cfg), [2]
clf = sb.TorchClassifier(model.eval(), tokens=(3, 4), prefix=pre)
kw = dict(memory_mb=a["mb"]) if a["mb"] else {}
sb.sensitivity_profile(clf, a["N"], n_samples=1, progress=False, **kw)       # warm-up
_trim()
open("/proc/self/clear_refs", "w").write("5")
base = kib("VmRSS")
p = sb.sensitivity_profile(clf, a["N"], n_samples=a["n"], progress=False, **kw)
print(json.dumps({"peak_mib": (kib("VmHWM") - base) / 1024, "counted": int(p.counts.sum()),
                  "per_string": clf.memory_per_string(a["N"])}))
"""


@pytest.mark.skipif(not pathlib.Path("/proc/self/clear_refs").exists(),
                    reason="needs Linux /proc to reset and read the peak RSS")
@pytest.mark.parametrize("case", [
    dict(model="bert", attn="eager", N=256, n=2, mb=64),
    dict(model="bert", attn="sdpa", N=256, n=2, mb=None),     # the issue: the default 256 MiB
    dict(model="gpt2", N=256, n=2, mb=None),
    dict(model="encoder", N=256, n=2, mb=32),                 # PyTorch's fused fast path
], ids=lambda c: f"{c['model']}-{c.get('attn', '')}-N{c['N']}")
def test_item4_the_memory_budget_holds_for_transformers_models(case):
    # glibc raises its mmap threshold as large blocks are freed; after that, freed activations
    # stay in a fragmented heap and the resident peak is the allocator's history, not the
    # budget's (bert-eager at 64 MiB: 24-44 MiB here, 65 and 72 MiB on CI). Fixing the threshold
    # at glibc's default start (128 KiB) makes the resident peak follow what the profiler
    # allocates (21 MiB, run to run within 0.2), which is what this test checks.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(case)], capture_output=True,
                         text=True, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["counted"] > 0
    assert got["per_string"] > 64 * (case["N"] + 1) * 5    # measured, not the generic guess
    assert got["peak_mib"] <= (case["mb"] or 256), got


def test_item4_memory_per_string_is_the_peak_of_a_forward_pass():
    """The probe counts what a forward pass allocates: a known activation is found in it."""
    big = lambda x: (x.unsqueeze(-1).expand(-1, -1, 1000).clone() * 2).sum((-1, -2)) - 1
    peak = sb.measure_peak_bytes(big, torch.zeros(8, 50))
    assert 2 * 8 * 50 * 1000 * 4 <= peak <= 3 * 8 * 50 * 1000 * 4


# ---- item 5 and 6: instruments on any model --------------------------------------------------------
def test_item5_sharpness_of_a_single_module_is_the_dense_hessians():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 1), nn.Flatten(0)).double()
    x = sb.random_strings(6, 64, seed=0).double()
    got = sb.top_hessian_eigenvalue(mlp, sb.PARITY, x, iters=500, tol=1e-10)
    names = [n for n, _ in mlp.named_parameters()]
    shapes = [p.shape for p in mlp.parameters()]
    flat = torch.cat([p.detach().flatten() for p in mlp.parameters()])

    def loss(theta):
        ps, a = {}, 0
        for n, s in zip(names, shapes):
            ps[n] = theta[a:a + s.numel()].reshape(s)
            a += s.numel()
        T = torch.func.functional_call(mlp, ps, (x,))
        return torch.nn.functional.softplus(-(2 * sb.PARITY(x).double() - 1) * T).mean()

    H = torch.autograd.functional.hessian(loss, flat)
    ev = torch.linalg.eigvalsh(H)
    want = float(ev[ev.abs().argmax()])
    assert got["lam"].shape == (1,) and bool(got["converged"][0])
    assert got["lam"][0] == pytest.approx(want, rel=1e-6)
    assert sb.min_margin(mlp, x).shape == (1,)
    acc = sb.accuracy(mlp, sb.PARITY, 6)
    with torch.no_grad():
        want = float(((mlp(sb.strings(6).double()) > 0) == sb.PARITY(sb.strings(6))).double().mean())
    assert acc.shape == (1,) and acc[0] == pytest.approx(want)
    with pytest.raises(ValueError, match="population axis first"):   # training needs a population
        sb.train_population(mlp, sb.PARITY, 6, [0])


def test_item6_instruments_take_any_classifier_or_say_what_they_need():
    clf = sb.TorchClassifier(EncoderCLS().eval(), tokens=(ZERO, ONE), prefix=[CLS])
    x = sb.random_strings(6, 5, seed=0)
    infl = sb.flip_influence(clf, x)
    T = clf(x)
    for i in range(6):
        y = x.clone()
        y[:, i] = 1 - y[:, i]
        assert torch.allclose(infl[0, :, i], (clf(y) - T).abs(), atol=1e-6)
    table = sb.output_table(clf, 6)
    assert table.shape == (1, 64)
    assert float(sb.exhaustive_influence(clf, 6)[0]) == pytest.approx(float(
        max((table[0] - table[0][torch.arange(64) ^ (1 << i)]).abs().max() for i in range(6))))
    W = sb.spectral_weights(sb.truth_table(clf, 6, progress=False))
    assert float(W.sum()) == pytest.approx(1.0)
    for bad in (lambda: sb.blowup(clf, x), lambda: sb.flip_hinge(clf, x),
                lambda: sb.lipschitz_theta(clf, x)):
        with pytest.raises((ValueError, TypeError), match=r"sensbook\.Recognizer"):
            bad()


# ---- item 7 and 8 ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_item7_auto_margin_in_half_precision_is_refused_with_a_message(dtype):
    w = torch.linspace(-1, 1, 8)
    with pytest.raises(ValueError, match=r"margin='auto' is not defined for torch\.(b?float16).*explicit margin"):
        sb.sensitivity_profile(lambda x: (x.float() @ w - 0.05).to(dtype), 8, margin="auto",
                               progress=False)
    p = sb.sensitivity_profile(lambda x: (x.float() @ w - 0.05).to(dtype), 8, margin=1e-3,
                               progress=False)
    assert int(p.counts.sum()) + int(p.undecided) + int(p.incomplete) == 256


def test_item8_the_docs_say_what_a_classifier_receives_and_which_sign_accepts():
    doc = sb.sensitivity_profile.__doc__
    assert "sign is the label" in doc and "(B, N)" in doc and "TorchClassifier" in doc
    assert "memory_per_string" in doc
    assert (ROOT / "sensbook" / "py.typed").is_file()
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## The package", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    exec(compile(block.replace("10_000", "50").replace("200,", "40,"), "README", "exec"), {})
