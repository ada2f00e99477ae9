"""Issue 37: the package for researchers, round 2. Each silent wrong answer of the issue is
reproduced here against an independent computation (a dense Hessian, scikit-learn's own
``predict``, the true fractions of a closed form)."""
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import sensbook as sb
from tests.test_boolean import brute_profile

sklearn_tree = pytest.importorskip("sklearn.tree")


def dense_sharpness(module, x, y, read=lambda out: out):
    """The largest-magnitude eigenvalue of the dense Hessian of the mean logistic loss."""
    names = [n for n, _ in module.named_parameters()]
    shapes = [p.shape for p in module.parameters()]
    flat = torch.cat([p.detach().flatten() for p in module.parameters()])
    s = 2 * y.double() - 1

    def loss(theta):
        ps, a = {}, 0
        for n, sh in zip(names, shapes):
            ps[n] = theta[a:a + sh.numel()].reshape(sh)
            a += sh.numel()
        T = read(torch.func.functional_call(module, ps, (x,)))
        return nn.functional.softplus(-s * T).mean()

    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):                # the fused kernel has no double backward
        ev = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, flat))
    return float(ev[ev.abs().argmax()])


# ---- item 1: one logit per string, (B, 1) ---------------------------------------------------
def test_item1_sharpness_of_a_one_logit_head_is_the_dense_hessians():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 1)).double()   # (B, 1)
    x = sb.random_strings(6, 64, seed=0).double()
    got = sb.top_hessian_eigenvalue(net, sb.PARITY, x, iters=500, tol=1e-10)
    want = dense_sharpness(net, x, sb.PARITY(x), read=lambda out: out[:, 0])
    assert bool(got["converged"][0]) and got["lam"][0] == pytest.approx(want, rel=1e-6)
    # the loss reads (B, 1) as (B,): the same number as the module's squeezed output
    loss = sb.population_loss(net, x, sb.PARITY(x))
    with torch.no_grad():
        direct = nn.functional.softplus(-(2 * sb.PARITY(x).double() - 1) * net(x)[:, 0]).mean()
    assert loss.shape == () and float(loss.detach()) == pytest.approx(float(direct), rel=1e-12)


@pytest.mark.parametrize("width", [2, 3])
def test_item1_other_output_shapes_are_refused_not_broadcast(width):
    net = nn.Linear(6, width).double()
    x = sb.random_strings(6, 16, seed=0).double()
    with pytest.raises(ValueError, match=r"shape \(16, %d\) for B=16 strings" % width):
        sb.top_hessian_eigenvalue(net, sb.PARITY, x, iters=3)
    with pytest.raises(ValueError, match="one score per string"):
        sb.population_loss(net, x, sb.PARITY(x))


# ---- item 2: ties of scikit-learn models --------------------------------------------------------
def tree_with_ties(N=12):
    X = sb.strings(N).numpy()
    y = sb.random_function(N, seed=3)(sb.strings(N)).numpy()
    return sklearn_tree.DecisionTreeClassifier(max_depth=8, random_state=0).fit(X, y), X


def test_item2_a_tree_with_tied_leaves_is_profiled_as_its_predict():
    tree, X = tree_with_ties()
    proba = tree.predict_proba(X)[:, 1]
    assert (proba == 0.5).sum() > 50                      # the case: leaves with p = 0.5
    by_predict = torch.as_tensor(tree.predict(X) == 1)    # scikit-learn's own labels
    auto = sb.SklearnClassifier(tree)
    assert auto.method == "predict_proba"
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # no undecided string, no warning
        p = sb.sensitivity_profile(auto, 12, progress=False)
        q = sb.sensitivity_profile(sb.SklearnClassifier(tree, method="predict"), 12,
                                   progress=False)
    assert torch.equal(sb.truth_table(auto, 12, progress=False).bool(), by_predict)
    assert p.K.tolist() == q.K.tolist() == sb.profile_from_table(by_predict).K.tolist()
    assert bool(p.complete) and int(p.K.sum()) == 2**12
    # the other class as positive: ties go to classes_[0], which now accepts
    neg = sb.SklearnClassifier(tree, positive=0)
    assert torch.equal(sb.truth_table(neg, 12, progress=False).bool(), ~by_predict)


def test_item2_an_adapter_that_leaves_strings_undecided_says_so():
    tree, _ = tree_with_ties()
    with pytest.warns(UserWarning, match=r"left \d+ of 4096 strings undecided"):
        p = sb.sensitivity_profile(sb.SklearnClassifier(tree), 12, margin=1e-3, progress=False)
    assert int(p.undecided) > 50


# ---- item 6: every instrument that can run on any classifier takes the adapters --------------
def test_item6_accuracy_margin_agreement_and_sharpness_take_the_adapters():
    from tests.test_adapters import CLS, ONE, ZERO, EncoderCLS, tiny_bert

    enc = EncoderCLS().eval().double()
    clf = sb.TorchClassifier(enc, tokens=(ZERO, ONE), prefix=[CLS])
    N, X = 6, sb.strings(6)
    with torch.no_grad():
        T = torch.stack([enc(torch.tensor([[CLS] + [ONE if b else ZERO for b in x.tolist()]]))[0, 0]
                         for x in X])                                  # one string at a time
    truth = sb.PARITY(X)
    assert sb.accuracy(clf, sb.PARITY, N)[0] == pytest.approx(float(((T > 0) == truth).double().mean()))
    assert sb.min_margin(clf, X)[0] == pytest.approx(float(T.abs().min()))
    agr = sb.agreement(clf, sb.PARITY, N)
    assert float(agr.accuracy[0]) == pytest.approx(float(((T > 0) == truth).double().mean()))
    # the Hessian over the adapter's module's parameters, through the token ids
    torch.manual_seed(0)
    small = nn.Sequential(nn.Embedding(8, 3), nn.Tanh(), nn.Flatten(1), nn.Linear(21, 1)).double()
    x = X[:24]
    ids = torch.cat([torch.full((24, 1), CLS), torch.where(x.bool(), ONE, ZERO)], 1)

    class OnIds(nn.Module):                       # the same loss, ids written by hand
        def __init__(self):
            super().__init__()
            self.small = small

        def forward(self, _):
            return self.small(ids)

    got = sb.top_hessian_eigenvalue(sb.TorchClassifier(small, tokens=(ZERO, ONE), prefix=[CLS]),
                                    sb.PARITY, x, iters=800, tol=1e-10)
    want = dense_sharpness(OnIds(), x, sb.PARITY(x), read=lambda out: out[:, 0])
    assert got["lam"][0] == pytest.approx(want, rel=1e-5)
    # a fitted scikit-learn model: accuracy is its predict's; no parameters, no margin of labels
    tree, Xs = tree_with_ties(8)
    sk = sb.SklearnClassifier(tree)
    want = float((tree.predict(Xs) == sb.PARITY(sb.strings(8)).numpy()).mean())
    assert sb.accuracy(sk, sb.PARITY, 8)[0] == pytest.approx(want)
    with pytest.raises(ValueError, match="labels, not scores"):
        sb.min_margin(sb.SklearnClassifier(tree, method="predict"), Xs[:4])
    with pytest.raises(TypeError, match="sb.TorchClassifier"):
        sb.perturb(clf, 0.1, 2)
    # the raw Hugging Face model: the error names the adapter
    bert = tiny_bert().eval()
    for bad in (lambda: sb.output_table(bert, 4),
                lambda: sb.top_hessian_eigenvalue(bert, sb.PARITY, sb.strings(4), iters=2)):
        with pytest.raises((RuntimeError, TypeError, IndexError), match=r"sb\.TorchClassifier"):
            bad()


# ---- item 9: attention_mask for float inputs ---------------------------------------------------
def test_item9_attention_mask_reaches_a_model_on_float_inputs():
    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.linspace(-1, 1, 5))

        def forward(self, x, attention_mask):
            assert attention_mask.shape == x.shape and bool((attention_mask == 1).all())
            return (x * attention_mask) @ self.w - 0.1

    m = Masked()
    clf = sb.TorchClassifier(m, attention_mask=True)
    p = sb.sensitivity_profile(clf, 5, progress=False)
    want = brute_profile(lambda x: bool(x.float() @ m.w.detach() - 0.1 > 0), 5)
    assert p.K.tolist() == want.tolist()


# ---- item 14: bits as words, a sentence around them, strings from a data set ---------------
def test_item14_multi_token_words_and_separators_are_the_ids_written_by_hand():
    class Ids(nn.Module):                          # records what it receives; scores from ids
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.linspace(-1, 1, 40).double())
            self.seen = None

        def forward(self, ids):
            self.seen = ids
            return (ids.double() * self.w[: ids.shape[1]]).sum(-1) - 3.1

    m = Ids()
    clf = sb.TorchClassifier(m, tokens=((5, 6), (7, 8)), prefix=[1, 2], suffix=[9], sep=[0])
    x = torch.tensor([[0, 1, 1], [1, 0, 0]])
    clf(x)
    assert m.seen.tolist() == [[1, 2, 5, 6, 0, 7, 8, 0, 7, 8, 9], [1, 2, 7, 8, 0, 5, 6, 0, 5, 6, 9]]

    def one(bits):                                 # the sentence written by hand
        ids = [1, 2]
        for i, b in enumerate(bits.tolist()):
            ids += ([7, 8] if b else [5, 6]) + ([0] if i < len(bits) - 1 else [])
        return bool(m(torch.tensor([ids + [9]]))[0] > 0)

    p = sb.sensitivity_profile(clf, 5, progress=False)
    assert p.K.tolist() == brute_profile(one, 5).tolist()
    with pytest.raises(ValueError, match="same number of ids"):
        sb.TorchClassifier(m, tokens=((5, 6), (7,)))


def test_item14_a_sampler_of_strings_profiles_a_data_set():
    """Strings drawn from a data set: the estimate of P(s = k) under the data set's
    distribution, against the exact fractions over that data set's strings."""
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, 2, (40, 10), generator=g)
    data[:, :3] = 1                                            # a skewed data set
    f = lambda x: x[:, :4].sum(-1) - 2.5                       # 3-of-first-4
    exact = sb.profile_from_table(sb.truth_table(f, 10, progress=False)[None]).K[0]
    X = sb.strings(10)
    s_all = torch.zeros(2**10, dtype=torch.long)
    lab = f(X) > 0
    for i in range(10):
        Y = X.clone()
        Y[:, i] = 1 - Y[:, i]
        s_all += (f(Y) > 0) != lab
    idx = sb.strings_to_index(data)
    want = torch.bincount(s_all[idx], minlength=11).double() / len(data)
    draw = lambda n, gen: data[torch.randint(len(data), (n,), generator=gen)]
    p = sb.sensitivity_profile(f, 10, n_samples=4000, sampler=draw, seed=1, progress=False)
    lo, hi = p.interval(z=4)
    assert bool(((lo <= want) & (want <= hi)).all()), (p.fractions, want)
    assert not torch.allclose(want, exact.double() / 2**10, atol=0.05)   # not the uniform one
    with pytest.raises(ValueError, match=r"sampler must return"):
        sb.sensitivity_profile(f, 10, n_samples=5, sampler=lambda n, gen: data[:3],
                               progress=False)


# ---- item 13: sensbook profile MODULE:FACTORY ----------------------------------------------------
def test_item13_the_command_line_profiles_a_factory_and_saves_its_json(tmp_path):
    import subprocess
    import sys

    (tmp_path / "mymodels.py").write_text(
        "import torch\nfrom torch import nn\n\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return nn.Sequential(nn.Embedding(6, 4), nn.Flatten(1), nn.Linear(4 * 7, 2))\n")
    cmd = [sys.executable, "-m", "sensbook.cli", "profile", "mymodels:build", "--tokens", "3,4",
           "--prefix", "2", "--N", "6", "--out", "p.json"]
    import os
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(__import__("pathlib").Path(
        sb.__file__).parents[1])]), SENSBOOK_PROGRESS="1")
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    import importlib.util
    spec = importlib.util.spec_from_file_location("mymodels", tmp_path / "mymodels.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    want = sb.sensitivity_profile(sb.TorchClassifier(mod.build().eval(), tokens=(3, 4), prefix=[2]),
                                  6, progress=False)
    got = sb.Profile.load(tmp_path / "p.json")
    assert got == want and got.meta["model"] == "mymodels:build" and got.meta["seed"] is None
    sampled = subprocess.run(cmd[:-2] + ["--samples", "50", "--out", "s.json"], cwd=tmp_path,
                             capture_output=True, text=True, env=env, timeout=300)
    assert sampled.returncode == 0, sampled.stderr
    s = sb.Profile.load(tmp_path / "s.json")
    assert s.n_strings == 50 and s.meta["seed"] == 0 and s.meta["torch"] == torch.__version__
    bad = subprocess.run(cmd[:4] + ["mymodels"] + cmd[5:], cwd=tmp_path, capture_output=True,
                         text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "MODULE:FACTORY" in bad.stderr


# ---- item 16: the strings go where the model is -----------------------------------------------
def test_item16_the_adapter_follows_the_models_device_and_dtype():
    net = nn.Sequential(nn.Embedding(6, 4), nn.Flatten(1), nn.Linear(4 * 4, 1))
    clf = sb.TorchClassifier(net, tokens=(3, 4), prefix=[2], suffix=[5])
    x = sb.strings(3)
    assert clf.inputs(x)[0][0].device.type == "cpu"
    net.to("meta")                                    # moved after wrapping (as .to("cuda"))
    (ids,), _ = clf.inputs(x)
    assert ids.device.type == "meta" and ids.shape == (8, 5)
    flt = nn.Linear(3, 1)
    fclf = sb.TorchClassifier(flt)
    flt.double()
    assert fclf.dtype == torch.float64 and fclf.inputs(x)[0][0].dtype == torch.float64
    assert sb.TorchClassifier(flt, device="cpu", dtype=torch.float32).inputs(x)[0][0].dtype \
        == torch.float32


# ---- item 10: the API reference resolves every reference it makes -----------------------------
def test_item10_the_site_build_checks_every_sensbook_reference():
    """`make book`/`make book-ci` build with -n -W: a reference that does not resolve fails the
    build unless nitpick_ignore_regex excuses it. It excuses types named in words only, never
    a sensbook name or a bare class name (the six references the issue found unresolved)."""
    import pathlib
    import re

    import yaml

    root = pathlib.Path(sb.__file__).parents[1]
    cfg = yaml.safe_load((root / "_config.yml").read_text())["sphinx"]["config"]
    ignored = lambda role, name: any(r == role and re.fullmatch(rx, name)
                                     for r, rx in cfg["nitpick_ignore_regex"])
    for role, name in [("py:mod", "sensbook.boolean"), ("py:mod", "sensbook.model"),
                       ("py:class", "Trace"), ("py:class", "sensbook.controls.Population"),
                       ("py:func", "sensbook.runtime.store.results_dir"),
                       ("py:mod", "sensbook.runtime.published"), ("py:class", "Recognizer")]:
        assert not ignored(role, name), (role, name)
    assert ignored("py:class", "torch.Tensor") and ignored("py:class", "optional")
    api = (root / "book" / "api.md").read_text()
    for name in ("sensbook.boolean", "sensbook.model", "sensbook.Trace",
                 "sensbook.controls.Population", "results_dir", "sensbook.runtime.published",
                 "flip_sensitivity", "distinct_functions", "sensbook.Protocol", "sensbook.PARITY",
                 "sensbook.MAJORITY", "compare_profiles", "plot_profile"):
        assert name in api, name
    for f in (sb.truth_table, sb.strings, sb.walsh_hadamard):
        assert "2^(n-1)" in f.__doc__ or "sensbook.boolean" in f.__doc__, f.__name__
