"""The mechanism probe (sensbook/mechanism.py) against independent computations."""
import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.mechanism import eos_mechanism


def test_layer_norm_statistics_are_those_of_the_traced_inputs_per_string():
    m = sb.Recognizer.random(P=3, D=8, L=2, H=2, eps=1e-5, seed=4, dtype=torch.float64)
    x = sb.strings(6)
    got = eos_mechanism(m, x, chunk=7)                        # blocks that do not divide 2^6
    _, tr = m.trace(x, inputs=True)
    d = tr.inputs[:, :, :, -1]                                # (P, B, 2L, D) at eos
    var = d.var(-1, unbiased=False)                           # from the inputs themselves
    np.testing.assert_allclose(got["var_min"], var.amin(1).numpy(), rtol=1e-10)
    np.testing.assert_allclose(got["var_median"], var.median(1).values.numpy(), rtol=1e-10)
    # beta from the variances (Lemma 2.9's definition), string by string
    z = 1 / torch.sqrt(tr.variances + 1e-5)
    beta = (1 + z).amax(-1).prod(-1)
    np.testing.assert_allclose(got["beta_median"], beta.median(1).values.numpy(), rtol=1e-10)
    assert got["var_min"].shape == (3, 4) and got["att_max"].shape == (3, 2, 2)


def test_attention_reads_where_the_eos_query_points():
    N = 9
    m = sb.first_hard_transformer(N, eps=1e-5)
    got = eos_mechanism(m, sb.strings(N))
    _, w = m.eos_attention(sb.strings(N))                      # (1, B, L, H, N+1)
    top = w[0, :, -1, 0]                                       # last layer, its one head
    assert got["att_where"][0, -1, 0] == int(top.argmax(-1).mode().values)
    assert got["att_where"][0, -1, 0] == 0                     # x_1: hard attention on the mark
    assert got["att_max"][0, -1, 0] == pytest.approx(float(top.amax(-1).median()), abs=1e-12)
    assert got["att_max"][0, -1, 0] > 0.9 and got["att_share"][0, -1, 0] == 1.0
    # a uniform attention (all scores equal: zero query weights) points nowhere in particular
    u = sb.Recognizer.random(P=1, D=8, L=1, H=1, seed=0, dtype=torch.float64)
    with torch.no_grad():
        u.layers[0].Wq.zero_(), u.layers[0].bq.zero_()
    np.testing.assert_allclose(eos_mechanism(u, sb.strings(5))["att_max"], 1 / 6, rtol=1e-12)


def test_bad_input_is_named():
    m = sb.Recognizer.random(P=1, D=8, L=1, H=1, seed=0)
    with pytest.raises(ValueError, match="x must be"):
        eos_mechanism(m, torch.zeros(3))
    with pytest.raises(ValueError, match="chunk"):
        eos_mechanism(m, sb.strings(3), chunk=0)
    with pytest.raises(TypeError, match="Recognizer"):
        eos_mechanism(object(), sb.strings(3))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_regime_names_the_constructions_by_the_mechanism_they_are_built_with(eps):
    """The hard FIRST holds x_1 by attention (weight 1 on one position, every layer norm below
    its cap); the uniform FIRST and PARITY constructions average (weights 1/(N+1)) and amplify
    through their last layer norm at eos, at the cap 1/sqrt(eps) (at eps = 0: z above 10)."""
    N = 64
    x = sb.random_strings(N, 2, seed=N).double()
    hard = sb.eos_regime(sb.first_hard_transformer(eps=eps), x)
    assert hard["regime"] == ["attention focus"]
    assert hard["att"][0, -1] == pytest.approx(1.0, abs=1e-9)
    for m in (sb.first_transformer(eps=eps), sb.parity_transformer(N, eps=eps)):
        got = sb.eos_regime(m, x)
        assert got["regime"] == ["layer norm at cap"], got
        assert got["att"].max() < 2 / (N + 1)                    # near-uniform attention
    # the numbers are those of the trace and the attention, read independently
    m = sb.parity_transformer(N, eps=eps)
    _, tr = m.trace(x, inputs=True)
    var = tr.inputs[0, :, :, -1].var(-1, unbiased=False)          # (B, 2L) at eos
    got = sb.eos_regime(m, x)
    np.testing.assert_allclose(got["z"][0], (1 / torch.sqrt(var + eps)).amax(0).numpy(),
                               rtol=1e-9)
    _, w = m.eos_attention(x)
    np.testing.assert_allclose(got["att"][0], w[0].amax(-1).amax(-1).amax(0).numpy())
    if eps > 0:
        assert got["z_cap"] == pytest.approx(eps ** -0.5)
        assert (got["z"] <= got["z_cap"] * (1 + 1e-12)).all()    # Lemma 3.2
        # the thresholds decide: the hard FIRST's first layer norm is at 0.61 of its cap
        assert sb.eos_regime(sb.first_hard_transformer(eps=eps), x, at_cap=0.6)["regime"] == [
            "both"]
        assert sb.eos_regime(sb.first_transformer(eps=eps), x, at_cap=1.0)["regime"] == [
            "neither"]


def test_regime_refuses_bad_thresholds():
    m = sb.first_hard_transformer(eps=0.1)
    with pytest.raises(ValueError, match="focus"):
        sb.eos_regime(m, sb.strings(3), focus=0.0)
    with pytest.raises(ValueError, match="at_cap"):
        sb.eos_regime(m, sb.strings(3), at_cap=1.5)
    with pytest.raises(ValueError, match="x must be"):
        sb.eos_regime(m, torch.zeros(3))
