"""Chapter 7's architectures: each population call against a loop over single modules,
and the single modules against independent implementations (the Recognizer, nn.LSTM)."""
import numpy as np
import pytest
import torch
from torch import nn

import sensbook as sb
from sensbook import controls as C

N = 6
X = sb.strings(N)


@pytest.mark.parametrize("arch", C.ARCHS)
@pytest.mark.parametrize("init", ["uniform", "xavier_normal"])
def test_population_call_equals_a_loop_over_single_models(arch, init):
    seeds = [3, 1, 4]
    pop = C.control_population(arch, seeds, N=N, init=init, dtype=torch.float64)
    T = pop(X.double())
    assert T.shape == (3, 2**N)
    for p, s in enumerate(seeds):
        one = C.single_model(arch, s, N=N, init=init).double()
        ref = one(X.double())[0] if arch == "post-LN" else one(X.double())
        assert torch.allclose(T[p], ref, atol=1e-10), (arch, p)
    # per-model strings (P, B, N): model p reads its own batch
    xs = torch.stack([X[:5], X[5:10], X[10:15]]).double()
    T3 = pop(xs)
    assert torch.allclose(T3[1], T[1, 5:10], atol=1e-10)
    if arch != "post-LN":
        assert torch.allclose(pop.member(2)(X.double()), T[2], atol=1e-12)


def test_post_norm_transformer_is_the_recognizer_and_the_others_differ():
    rec = sb.Recognizer.random(1, 16, 2, 2, eps=1e-5, init="gaussian", seed=7,
                               dtype=torch.float64)
    outs = {}
    for norm in ("post", "pre", "none", "rms"):
        m = C.Transformer(16, 2, 2, norm=norm, eps=1e-5).double()
        with torch.no_grad():
            for name, t in m.named_parameters():
                t.copy_(dict(rec.named_parameters())[name][0])
        outs[norm] = m(X.double())
    assert torch.allclose(outs["post"], rec(X.double())[0], atol=1e-10)
    for norm in ("pre", "none", "rms"):
        assert (outs[norm] - outs["post"]).abs().max() > 1e-3, norm
    # the transformer variants of a seed carry exactly the Recognizer's theta
    pre = C.single_model("pre-LN", 7, init="gaussian", eps=1e-5)
    rec7 = sb.Recognizer.random(1, 16, 2, 2, init="gaussian", seed=7)
    flat = torch.cat([p.reshape(-1) for p in pre.parameters()])
    assert torch.equal(flat, rec7.flat()[0])


def test_norms_follow_their_definitions():
    m = C.Transformer(4, 1, 1, norm="rms", eps=0.5)
    d = torch.tensor([[1.0, -2.0, 3.0, 0.0]])
    assert torch.allclose(m._norm(d), d / torch.sqrt((d * d).mean() + 0.5))
    m.norm = "post"
    c = d - d.mean()
    assert torch.allclose(m._norm(d), c / torch.sqrt((c * c).mean() + 0.5))


def test_lstm_equals_torch_lstm():
    one = C.single_model("LSTM", 5, init="gaussian", scale=0.5).double()
    ref = nn.LSTM(16, 16, batch_first=True).double()
    with torch.no_grad():
        ref.weight_ih_l0.copy_(one.W_ih.T)
        ref.weight_hh_l0.copy_(one.W_hh.T)
        ref.bias_ih_l0.copy_(one.b_ih)
        ref.bias_hh_l0.copy_(one.b_hh)
    x = X.double()
    e = one.tok[0] + x.unsqueeze(-1) * (one.tok[1] - one.tok[0])
    h, _ = ref(e)
    assert torch.allclose(one(x), h[:, -1] @ one.w + one.omega, atol=1e-12)


def test_mlp_equals_its_formula_and_refuses_another_length():
    m = C.single_model("MLP", 2, N=N, init="uniform").double()
    x = X.double()
    h = torch.relu(torch.relu(x @ m.W1 + m.b1) @ m.W2 + m.b2)
    assert torch.allclose(m(x), h @ m.w + m.omega)
    with pytest.raises(ValueError, match="N=6"):
        m(sb.strings(5).double())


def test_draw_rule_is_the_recognizers_rule():
    # _draw on a module shaped like the Recognizer reproduces Recognizer.random exactly
    for init in sb.INITS:
        m = C.Transformer(16, 2, 2)
        C._draw(m, init, 1.0, torch.Generator().manual_seed(11), 16)
        got = torch.cat([p.detach().reshape(-1) for p in m.parameters()])
        want = sb.Recognizer.random(1, 16, 2, 2, init=init, seed=11).flat()[0]
        assert torch.equal(got, want), init


def test_profiler_and_trainer_accept_populations():
    for arch in ("no-LN", "LSTM", "MLP"):
        pop = C.control_population(arch, [0, 1], N=N, init="xavier_normal")
        prof = sb.sensitivity_profile(pop, N, progress=False)
        table = sb.truth_table(pop, N, progress=False)
        for p in range(2):
            one = sb.truth_table(pop.member(p), N, progress=False)
            one = sb.profile_from_table(one)
            assert torch.equal(prof.counts[p], one.counts), arch
        assert torch.equal(prof.counts, sb.profile_from_table(table).counts)
        before = [t.detach().clone() for t in pop.parameters()]
        pr = sb.Protocol(steps=3, batch=8)
        sb.train_population(pop, sb.PARITY, N, [0, 1], pr, progress=False)
        after = list(pop.parameters())
        assert all((a != b.detach()).any() for a, b in zip(before, after)), arch


def test_training_models_are_independent():
    # population training equals training each seed alone (Adam is element-wise)
    pr = sb.Protocol(steps=5, batch=16, eps=1e-5)
    pop = C.control_population("RMS", [0, 1], N=N, init="xavier_normal", eps=1e-5)
    sb.train_population(pop, sb.FIRST, N, [0, 1], pr, progress=False)
    one = C.control_population("RMS", [1], N=N, init="xavier_normal", eps=1e-5)
    sb.train_population(one, sb.FIRST, N, [1], pr, progress=False)
    assert torch.allclose(pop(X)[1], one(X)[0], atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="arch="):
        C.control_population("GRU", [0])
    with pytest.raises(ValueError, match="init="):
        C.control_population("LSTM", [0], init="orthogonal")
    with pytest.raises(ValueError, match="pass N"):
        C.control_population("MLP", [0])
    pop = C.control_population("LSTM", [0, 1])
    with pytest.raises(ValueError, match="P=2"):
        pop(torch.zeros(3, 4, N))


