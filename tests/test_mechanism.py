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
