"""Chapter 7's experiments (sensbook/experiments/ch7.py)."""
import numpy as np
import pytest

import sensbook as sb
from sensbook.experiments import ch7


def test_survey_runner_is_the_profile_of_the_rebuilt_models():
    cfg = dict(arch="pre-LN", init="uniform", N=5, seeds=[0, 1, 2], eps=0.0, D=16, L=2,
               H=2)
    r = ch7.survey_one(cfg)
    pop = sb.control_population("pre-LN", [0, 1, 2], N=5)
    table = sb.truth_table(pop, 5, progress=False)
    assert r["K"] == sb.profile_from_table(table).counts.tolist()
    W = sb.spectral_weights(table)
    assert np.allclose([w for w in r["W"]], W.numpy())


def test_rank_correlation():
    a = np.arange(20.0)
    r, lo, hi = ch7.rank_correlation(a, a**3)          # monotone: exactly 1
    assert r == pytest.approx(1) and hi == pytest.approx(1)
    r, lo, hi = ch7.rank_correlation(a, -np.exp(a))
    assert r == pytest.approx(-1)
    g = np.random.default_rng(0)
    x = g.normal(size=400)
    r, lo, hi = ch7.rank_correlation(x, x + g.normal(size=400))
    assert lo < r < hi and lo > 0.5                 # Pearson 0.71: Spearman about 0.69
    # ties get average ranks: identical to the correlation of average ranks
    r, _, _ = ch7.rank_correlation([1, 1, 2, 3], [1, 2, 2, 3])
    assert r == pytest.approx(np.corrcoef([0.5, 0.5, 2, 3], [0, 1.5, 1.5, 3])[0, 1])


def test_training_uses_chapter_6s_protocol_and_records_censoring():
    from sensbook.experiments import ch6_training

    for scale in sb.SCALES:
        for c in ch7.ch7_train_configs(scale):
            pr = c["protocol"]
            assert pr["steps"] == ch6_training.SIZES[scale]["budget"]
            assert (pr["batch"], pr["lr"]) == (ch6_training.SIZES[scale]["batch"], ch6_training.SIZES[scale]["lr"])
            assert c["criterion"] == ch6_training.EVAL["criterion"]
    c = dict(arch="MLP", target="MAJORITY", N=5, seeds=[0, 1],
             protocol=sb.Protocol(steps=60, batch=32, lr=3e-3, D=8, L=1, H=2).to_dict(),
             criterion=0.9, eval_every=5, eval_growth=0.05)
    r = ch7.train_one(c)
    acc = np.array(r["after"]["accuracy"])
    for s, a in zip(r["steps"], acc):
        assert (s is not None) == (a >= 0.9), (r["steps"], acc)   # trained model at passage
    assert r["steps_run"] == (max(r["steps"]) if None not in r["steps"] else 60)
    pop = sb.control_population("MLP", [0, 1], N=5, D=8, L=1, H=2, eps=1e-5,
                                init="xavier_normal")
    assert r["before"]["accuracy"] == pytest.approx(sb.accuracy(pop, sb.MAJORITY, 5).tolist())


def test_post_ln_training_is_chapter_6s_training():
    from sensbook.experiments import ch6_training

    pr = sb.Protocol(steps=60, batch=32, lr=3e-3, D=16, L=2, H=2).to_dict()
    ev = dict(criterion=0.9, eval_every=5, eval_growth=0.05)
    r7 = ch7.train_one(dict(arch="post-LN", target="MAJORITY", N=5, seeds=[0, 1],
                            protocol=pr, **ev))
    c6 = dict(target="MAJORITY", N=5, seeds=[0, 1], protocol=pr,
              **{**ch6_training.EVAL, **ev, "sharpness": None, "basin": None})
    r6 = ch6_training.run_config(c6, device="cpu")
    assert r7["steps"] == r6["steps"] and r7["after"]["K"] == r6["after"]["K"]


def test_noise_configs_train_the_same_cell_one_ulp_away():
    """ch7.noise: the PARITY cell of NOISE_ARCH with ``perturb`` = 1 (the same seeds and
    protocol), and ``perturb`` moves the run: a tiny run's final losses differ from the drawn
    one's, and with perturb 0 they are the drawn ones."""
    for scale in sb.SCALES:
        (n,) = ch7.ch7_noise_configs(scale)
        (d,) = [c for c in ch7.ch7_train_configs(scale)
                if c["arch"] == ch7.NOISE_ARCH and c["target"] == "PARITY"]
        assert n == dict(d, perturb=1)
    c = dict(arch="pre-LN", target="PARITY", N=5, seeds=[0, 1],
             protocol=sb.Protocol(steps=30, batch=16, lr=3e-3, D=8, L=1, H=2).to_dict(),
             criterion=0.99, eval_every=5, eval_growth=0.05)
    drawn = ch7.train_one(c)
    assert ch7.train_one(dict(c, perturb=0))["final_loss"] == drawn["final_loss"]
    assert ch7.train_one(dict(c, perturb=1))["final_loss"] != drawn["final_loss"]
