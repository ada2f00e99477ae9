"""Chapter 3's experiments (sensbook/experiments/ch3.py)."""
import numpy as np
import pytest

import sensbook as sb
from sensbook.experiments import ch3


def test_recognition_runner_splits_models_consistently():
    c = dict(eps=0.1, N=4, P=60, margin=0.02, seed=3, **ch3.ARCH)
    r = ch3.recognition_one(c)
    dec_, non, con, sign = (
        np.array(r[k], bool)
        for k in ("decided", "nonconstant", "constant", "sign_nonconstant")
    )
    assert np.array_equal(non, dec_ & sign) and np.array_equal(con, dec_ & ~sign)
    m = sb.Recognizer.random(60, 16, 2, 2, eps=0.1, init="xavier_uniform", seed=3)
    T = sb.output_table(m, 4)
    assert np.array_equal(sign, ((T > 0).any(-1) & (T < 0).any(-1)).numpy())
    assert np.allclose(r["influence"], sb.exhaustive_influence(m, 4).numpy())
    assert r["distinct"] == sb.distinct_functions(sb.classify(T, 0.02))


def test_worst_influence_runner_starts_from_the_construction():
    c = dict(eps=0.0, N=8, start="FIRST", P=1, K=4, steps=3, lr=[0.05, 1e-4], seed=8,
             **ch3.WORST_ARCH)
    r = ch3.worst_influence_one(c)
    per_bit = np.array(r["per_bit"])[0]
    assert per_bit[0] == pytest.approx(2.0) and np.abs(per_bit[1:]).max() < 1e-12
    assert r["start"][0] == pytest.approx(2.0) and np.isfinite(r["end"]).all()
