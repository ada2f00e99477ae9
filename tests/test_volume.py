"""Basins, the affine census and the parameter-function map, against independent facts."""
import itertools

import numpy as np
import pytest
import torch

import sensbook as sb
from tests.test_model import one, reference


def test_perturb_noise_has_the_stated_law():
    m = sb.first_transformer()
    assert torch.equal(sb.perturb(m, 0.0, 3).flat(), m.flat().expand(3, -1))
    d = sb.perturb(m, 0.1, 200, kind="uniform", seed=1).flat() - m.flat()
    assert d.abs().max() <= 0.1 and d.abs().max() > 0.099
    assert abs(d.std().item() - 0.1 / np.sqrt(3)) < 0.002            # uniform: sigma / sqrt(3)
    d = sb.perturb(m, 0.1, 200, kind="gaussian", seed=1).flat() - m.flat()
    assert abs(d.std().item() - 0.1) < 0.002
    with pytest.raises(ValueError):
        sb.perturb(m, 0.1, 2, kind="cauchy")
    with pytest.raises(ValueError):
        sb.perturb(sb.perturb(m, 0.1, 2), 0.1, 2)


def test_agreement_exact_negated_and_by_weight():
    m = sb.majority_transformer()
    ag = sb.agreement(m, sb.MAJORITY, 7)
    assert ag.exact.all() and ag.accuracy.item() == 1
    assert ag.strings_by_weight.tolist() == [1, 7, 21, 35, 35, 21, 7, 1]
    neg = m.like()
    neg.set_flat(m.flat())
    with torch.no_grad():
        neg.w.neg_()
    ag = sb.agreement(neg, sb.MAJORITY, 7)
    assert ag.accuracy.item() == 0 and torch.equal(ag.errors_by_weight[0], ag.strings_by_weight)
    ags = sb.agreement(m, sb.MAJORITY, 31, n_samples=300, seed=2)
    assert ags.exact.all() and ags.n_strings == 300 and ags.strings_by_weight.sum() == 300


def test_basin_small_sigma_is_exact_and_large_sigma_is_chance():
    r = sb.basin_curve(sb.parity_transformer(), sb.PARITY, 6, [1e-6, 3.0], 40, progress=False)
    assert r["p_exact"][0] == 1 and r["p_exact"][1] == 0
    # at sigma = 3 the model is unrelated to PARITY: mean accuracy 1/2 within 4 standard errors
    # (each model's accuracy lies in [0, 1], so its sd is at most 1/2)
    assert abs(r["accuracy"][1] - 0.5) < 4 * 0.5 / np.sqrt(40)


def test_critical_sigma_interpolates_in_log_sigma():
    s = np.array([1e-3, 1e-2, 1e-1, 1.0])
    assert np.isclose(sb.critical_sigma(s, [1, 0.75, 0.25, 0]), np.sqrt(1e-2 * 1e-1))
    assert np.isclose(sb.critical_sigma(s, [1, 1, 0.5, 0]), 1e-1)
    assert np.isnan(sb.critical_sigma(s, [1, 1, 1, 1]))
    with pytest.raises(ValueError):
        sb.critical_sigma(s[::-1], [1, 1, 0, 0])


def test_fit_power_recovers_an_exponent():
    N = np.array([4, 8, 16, 32])
    b, se, a = sb.fit_power(N, 3 * N**-1.5)
    assert np.isclose(b, -1.5) and np.isclose(a, np.log(3)) and se < 1e-10


def brute_affine(N):
    """Every affine function c xor parity_S as a truth table, with |S|."""
    x = sb.strings(N).long()
    out = {}
    for S in itertools.product([0, 1], repeat=N):
        for c in (0, 1):
            t = ((x * torch.tensor(S)).sum(-1) % 2) ^ c
            out[tuple(t.tolist())] = sum(S)
    return out


def test_affine_class_against_brute_force_on_all_functions_of_3_bits():
    N = 3
    aff = brute_affine(N)
    tables = sb.ids_to_tables(torch.arange(2 ** 2 ** N), N)
    m, S = sb.affine_class(tables)
    assert (m >= 0).sum() == 2 ** (N + 1) == len(aff)
    for t, mi in zip(tables.tolist(), m.tolist()):
        assert aff.get(tuple(t), -1) == mi
    assert (S.sum(-1)[m >= 0] == m[m >= 0]).all()
    tab = sb.PARITY(sb.strings(5)).to(torch.int8)
    tab[3] = -1                                              # undecided: not affine
    assert sb.affine_class(tab)[0].item() == -1


def test_table_ids_roundtrip():
    ids = torch.tensor([0, 1, 77, 2**32 - 1])
    t = sb.ids_to_tables(ids, 5)
    assert torch.equal(sb.table_ids(t), ids)
    t[1, 0] = -1
    assert sb.table_ids(t)[1] == -1


def test_wilson_interval_known_values_and_coverage():
    lo, hi = sb.wilson_interval(0, 100)
    assert lo == 0 and np.isclose(hi, 1.96**2 / (100 + 1.96**2))
    # coverage: 2000 binomial(200, 0.03) draws; a 95% interval misses about 5% of the time
    rng = np.random.default_rng(0)
    k = rng.binomial(200, 0.03, size=2000)
    lo, hi = sb.wilson_interval(k, 200)
    miss = ((lo > 0.03) | (hi < 0.03)).mean()
    assert miss < 0.05 + 4 * np.sqrt(0.05 * 0.95 / 2000)


def test_census_of_uniform_random_tables_recovers_p_equal_one_sixteenth():
    """Independent law: a uniformly random function on 2 bits is each of the 16 w.p. 1/16."""
    g = torch.Generator().manual_seed(0)
    tables = torch.randint(0, 2, (16000, 4), generator=g).to(torch.int8)
    c = sb.census_from_ids(sb.table_ids(tables), 2)
    assert len(c.ids) == 16 and c.n_models == 16000
    for f in range(16):
        lo, hi = c.interval(f, z=4.4)           # two-sided miss probability ~1e-5 per function
        assert lo <= 1 / 16 <= hi


def test_parameter_function_map_matches_the_reference_forward_pass():
    """The census of 40 random models agrees with the numpy reference, model by model."""
    N, n = 3, 40
    c = sb.parameter_function_map(N, n, D=6, L=1, batch=16, seed=5, progress=False)
    ids = []
    for j, a in enumerate(range(0, n, 16)):
        m = sb.Recognizer.random(min(16, n - a), 6, 1, seed=5 + j, dtype=torch.float32)
        for i in range(m.P):
            p = one(m, i)
            t = [reference(p, sb.index_to_strings(torch.tensor(b), N).long().tolist(), 1, 0.0)[0] > 0
                 for b in range(2**N)]
            ids.append(sum(int(v) << b for b, v in enumerate(t)))
    u, k = np.unique(ids, return_counts=True)
    assert c.n_undecided == 0
    assert dict(zip(c.ids.tolist(), c.counts.tolist())) == dict(zip(u.tolist(), k.tolist()))
    assert np.isclose(sum(c.probability(f) for f in c.ids), 1)


def test_theorem45_bound():
    assert np.isclose(sb.theorem45_bound(64, 64, 2), 64 ** (63 / 4 - 5))


def test_theorem45_width_condition_counts_layer_norms():
    # positive exponent iff D >= 10 n + 2, n the number of layer norms
    for n in (1, 2, 4):
        assert not sb.theorem45_applies(10 * n + 1, n) and sb.theorem45_applies(10 * n + 2, n)
    # the book's post-LN recognizer with L = 2 has n = 4: D = 16 is outside, D = 42 inside
    assert not sb.theorem45_applies(16, 4) and sb.theorem45_applies(42, 4)
    with pytest.raises(ValueError, match="n_norms"):
        sb.theorem45_exponent(16, 0)


# ---- chapter 5's experiments ------------------------------------------------------------




def test_t_quantile_against_closed_forms_and_tables():
    # df = 1 (Cauchy): tan(pi (p - 1/2)); df = 2: t = (2p - 1) sqrt(2 / (1 - (2p - 1)^2))
    import math
    for p in (0.6, 0.9, 0.975, 0.995):
        assert sb.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-5)
        a = 2 * p - 1
        assert sb.t_quantile(p, 2) == pytest.approx(a * math.sqrt(2 / (1 - a * a)), rel=1e-6)
    assert sb.t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)      # "+- 4.3 se"
    assert sb.t_quantile(0.975, 10) == pytest.approx(2.228139, abs=1e-5)
    assert sb.t_quantile(0.975, 1e6) == pytest.approx(1.959966, abs=1e-4)    # the normal
    assert sb.t_quantile(0.025, 4) == pytest.approx(-sb.t_quantile(0.975, 4))
    with pytest.raises(ValueError, match="df must be"):
        sb.t_quantile(0.975, 0)


def test_table_instruments_compute_on_the_tables_device():
    """A table on the GPU stays there (an H200 run of ch5.pf_map failed: a CPU arange met a CUDA
    table). The meta device stands in for CUDA on a machine without one: mixing devices fails
    on it the same way."""
    t = torch.zeros(3, 8, dtype=torch.int8, device="meta")
    assert sb.table_ids(t).device.type == "meta"
    m, S = sb.affine_class(t)
    assert m.device.type == S.device.type == "meta"
