"""The recognizer against an independent, one-string-at-a-time reference implementation."""
import math

import numpy as np
import pytest
import torch

import sensbook as sb


def reference(params, x, H, eps):
    """Textbook post-LN transformer in numpy float64, one model, one string, explicit loops."""
    p = {k: v.detach().double().numpy() for k, v in params.items()}
    N = len(x)
    S, D = N + 1, p["tok"].shape[1]
    phi = np.array([[n / (N + 1), (-1) ** n, float(n == 1)] for n in range(1, S + 1)])
    h = np.stack([p["tok"][t] for t in list(x) + [2]]) + phi @ p["pos"]
    var_log = []

    def ln(d):
        out = np.zeros_like(d)
        for n in range(S):
            mu, var = d[n].mean(), ((d[n] - d[n].mean()) ** 2).mean()
            var_log.append(var)
            out[n] = (d[n] - mu) / math.sqrt(var + eps)
        return out

    l = 0
    while f"layers.{l}.Wq" in p:
        g = lambda name: p[f"layers.{l}.{name}"]
        dh = D // H
        q, k, v = h @ g("Wq") + g("bq"), h @ g("Wk") + g("bk"), h @ g("Wv") + g("bv")
        heads = []
        for j in range(H):
            sl = slice(j * dh, (j + 1) * dh)
            sc = q[:, sl] @ k[:, sl].T / math.sqrt(dh)
            w = np.exp(sc - sc.max(1, keepdims=True)); w /= w.sum(1, keepdims=True)
            heads.append(w @ v[:, sl])
        h = ln(h + np.concatenate(heads, 1) @ g("Wo") + g("bo"))
        h = ln(h + np.maximum(h @ g("W1") + g("b1"), 0) @ g("W2") + g("b2"))
        l += 1
    T = h[-1] @ p["w"] + p["omega"]
    var = np.array(var_log).reshape(-1, S)                  # (2L, S)
    return T, var


def one(model, i):
    return {k: v[i] for k, v in model.named_parameters()}


@pytest.mark.parametrize("D,L,H,eps", [(8, 1, 1, 0.0), (12, 2, 3, 1e-3), (6, 3, 2, 0.5)])
def test_forward_and_trace_match_reference(D, L, H, eps):
    m = sb.Recognizer.random(P=3, D=D, L=L, H=H, eps=eps, init="gaussian", scale=0.7, seed=11,
                             dtype=torch.float64)
    x = torch.randint(0, 2, (5, 6), generator=torch.Generator().manual_seed(0))
    T = m(x)
    T2, tr = m.trace(x)
    assert T.shape == (3, 5) and torch.allclose(T, T2, atol=1e-10)
    for i in range(3):
        for b in range(5):
            Tr, var = reference(one(m, i), x[b].tolist(), H, eps)
            assert abs(T[i, b].item() - Tr) < 1e-9
            assert np.allclose(tr.variances[i, b].numpy(), var, rtol=1e-9, atol=1e-12)
            tau = (1 + 1 / np.sqrt(var + eps)).max(1)
            assert np.isclose(tr.beta[i, b].item(), np.prod(tau))
    assert torch.equal(sb.blowup(m, x), tr.beta)


def test_features_are_the_readouts_input():
    """T = features . w + omega for every model and string; features depend on no read-out
    parameter; each is a layer norm's output (mean 0 over D, variance var/(var + eps) <= 1)."""
    m = sb.Recognizer.random(P=3, D=6, L=2, H=2, eps=0.1, init="gaussian", scale=0.7, seed=5,
                             dtype=torch.float64)
    x = sb.strings(4)
    h = m.features(x)
    assert h.shape == (3, 16, 6)
    with torch.no_grad():
        assert torch.allclose((h * m.w[:, None]).sum(-1) + m.omega[:, None],
                              m(x), atol=1e-12, rtol=0)
        m.w.mul_(-3.0).add_(1.0)
        m.omega.add_(2.0)
    assert torch.equal(m.features(x), h)
    assert h.mean(-1).abs().max() < 1e-12 and (h.var(-1, unbiased=False) <= 1 + 1e-12).all()


def test_per_model_strings_and_float32():
    m = sb.Recognizer.random(P=2, D=8, L=2, H=2, seed=3)
    x = torch.randint(0, 2, (2, 4, 5), generator=torch.Generator().manual_seed(1)).float()
    T = m(x)
    for i in range(2):
        assert torch.allclose(T[i], m.select(i)(x[i])[0], atol=1e-5)
        Tr, _ = reference(one(m, i), x[i, 0].long().tolist(), 2, 0.0)
        assert abs(T[i, 0].item() - Tr) < 1e-3


@pytest.mark.parametrize("L", [1, 2, 3])
def test_lemma_3_2_blowup_bound_for_positive_eps(L):
    eps = 0.01
    m = sb.Recognizer.random(P=16, D=8, L=L, H=2, eps=eps, seed=4)
    _, tr = m.trace(sb.strings(8))
    assert float(tr.z.max()) <= 1 / math.sqrt(eps) + 1e-4
    assert float(tr.beta.max()) <= (1 + 1 / math.sqrt(eps)) ** (2 * L) * (1 + 1e-5)


def test_zero_variance_at_eps_zero_is_nan_and_counted_as_nonfinite():
    m = sb.Recognizer(P=1, D=4, L=1)          # all parameters 0: every LN input is constant
    T, tr = m.trace(sb.strings(3))
    assert torch.isnan(T).all() and torch.isinf(tr.beta).all()
    p = sb.sensitivity_profile(m, 3, progress=False)
    assert int(p.nonfinite) == 8 and int(p.K.sum()) == 0
    m.eps = 1e-6                               # with eps > 0 the same parameters give T = 0
    assert (m(sb.strings(3)) == 0).all()


def test_parameter_count_and_flat_roundtrip():
    for D, L, H, F in [(4, 1, 1, None), (8, 2, 2, 5), (12, 3, 4, 48)]:
        m = sb.Recognizer.random(P=2, D=D, L=L, H=H, F=F, seed=0)
        assert sum(p[0].numel() for p in m.parameters()) == sb.num_parameters(D, L, H, F) == m.M
        theta = m.flat()
        m2 = m.like().set_flat(theta)
        assert torch.equal(m2.flat(), theta)
        x = sb.strings(4)
        assert torch.equal(m2(x), m(x))


def test_initialisations_are_seeded_and_have_the_stated_laws():
    a = sb.Recognizer.random(P=2, D=32, L=2, init="xavier_normal", seed=7)
    b = sb.Recognizer.random(P=2, D=32, L=2, init="xavier_normal", seed=7)
    assert torch.equal(a.flat(), b.flat())
    u = sb.Recognizer.random(P=4, D=16, L=2, init="uniform", scale=0.5, seed=1).flat()
    assert float(u.abs().max()) <= 0.5 and abs(float(u.std()) - 0.5 / math.sqrt(3)) < 0.01
    g = sb.Recognizer.random(P=4, D=16, L=2, init="gaussian", scale=2.0, seed=1).flat()
    assert abs(float(g.std()) - 2.0) < 0.05
    xu = sb.Recognizer.random(P=8, D=32, L=1, F=32, init="xavier_uniform", seed=1)
    W = xu.layers[0].Wq.detach()
    assert float(W.abs().max()) <= math.sqrt(6 / 64) and abs(float(W.std()) - math.sqrt(2 / 64)) < 0.01
    xn = sb.Recognizer.random(P=8, D=32, L=1, F=32, init="xavier_normal", seed=1)
    assert abs(float(xn.layers[0].W1.detach().std()) - math.sqrt(2 / 64)) < 0.01


def test_from_parameters_builds_exact_models():
    m = sb.Recognizer.random(P=1, D=6, L=2, H=2, seed=9, dtype=torch.float64)
    params = {k: v[0].detach() for k, v in m.named_parameters()}
    m2 = sb.Recognizer.from_parameters(params, H=2)
    assert torch.equal(m2(sb.strings(5)), m(sb.strings(5)))
    with pytest.raises(ValueError, match="unknown parameter"):
        sb.Recognizer.from_parameters({**params, "nope": torch.zeros(1)}, H=2)
    with pytest.raises(ValueError, match="shape"):
        sb.Recognizer.from_parameters({**params, "w": torch.zeros(5)}, H=2)


def test_training_gradients_flow_and_models_stay_independent():
    m = sb.Recognizer.random(P=3, D=8, L=2, H=2, eps=1e-5, seed=0)
    x = sb.strings(5)
    loss = m(x)[1].pow(2).mean()             # depends on model 1 only
    loss.backward()
    g = m.layers[0].Wq.grad
    assert g[1].abs().sum() > 0 and g[0].abs().sum() == 0 and g[2].abs().sum() == 0


@pytest.mark.parametrize("bad, match", [
    (lambda: sb.Recognizer(D=6, H=4), "divisible"),
    (lambda: sb.Recognizer(eps=-1e-3), "eps"),
    (lambda: sb.Recognizer(eps=float("nan")), "eps"),
    (lambda: sb.Recognizer(P=0), "P must"),
    (lambda: sb.Recognizer.random(init="he"), "init='he'"),
    (lambda: sb.Recognizer.random(scale=0), "scale"),
    (lambda: sb.Recognizer(P=2)(torch.zeros(3, 2, 4)), "shape"),
    (lambda: sb.Recognizer()(torch.full((2, 4), 3.0)), "binary"),
    (lambda: sb.Recognizer().set_flat(torch.zeros(1, 3)), "shape"),
])
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()
