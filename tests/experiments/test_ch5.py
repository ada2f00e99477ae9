"""Chapter 5's experiments (sensbook/experiments/ch5.py)."""
import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.experiments import ch5
from tests.test_constructions import BUILD, TOL


def _k0_config(members, N, n_samples=None):
    return dict(D=8, L=1, P=24, seed=3, margin=0.01, N0=4, members=members, N=N,
                n_samples=n_samples)


@pytest.mark.parametrize("n_samples", [None, 16])
def test_k0_blocks_merge_exactly_into_the_whole_population(n_samples):
    """Blocks of a population give exactly the whole population's result, and the fixed set
    is the population's models decided and non-constant at N0 (an independent profile)."""
    whole = _k0_config([0, 24], 7, n_samples)
    parts = [_k0_config([0, 10], 7, n_samples), _k0_config([10, 24], 7, n_samples)]
    mw = ch5.k0_merge([whole], [ch5.k0_growth_one(whole)])[8, 1, 7]
    mp = ch5.k0_merge(parts, [ch5.k0_growth_one(c) for c in parts[::-1]][::-1])[8, 1, 7]
    for k in ("members", "counts", "k0", "unknown", "constant"):
        assert np.array_equal(mw[k], mp[k]), k
    pop = sb.Recognizer.random(24, 8, 1, seed=3)
    p4 = sb.sensitivity_profile(pop, 4, margin=0.01, progress=False)
    want = torch.nonzero(p4.complete & ~p4.is_constant).flatten().tolist()
    assert mw["members"].tolist() == want and len(want) > 2
    # the stored profile is the profile of those models at N; unknown strings are separate
    pr = sb.sensitivity_profile(pop.select(want), 7, margin=0.01, n_samples=n_samples,
                                seed=7, progress=False)
    assert np.array_equal(mw["counts"], pr.counts.numpy())
    unk = (pr.undecided + pr.nonfinite + pr.incomplete).numpy() / pr.n_strings
    assert np.allclose(mw["unknown"], unk) and np.allclose(mw["k0"], pr.fractions[:, 0])
    if n_samples is None:
        tab = sb.truth_table(pop.select(want), 7, margin=0.01, progress=False)
        assert np.array_equal(mw["affine"], sb.affine_class(tab)[0].numpy())


def test_pf_chunks_merge_exactly_into_one_census():
    """Two chunks with seeds seed0 and seed0 + chunk/batch equal one run of both."""
    cfg = [dict(N=3, D=6, L=1, n_models=32, seed=10 + 2 * j, batch=16) for j in range(2)]
    merged = ch5.pf_merge(cfg, [ch5.pf_map_one(c) for c in cfg])[3]
    whole = sb.parameter_function_map(3, 64, D=6, L=1, batch=16, seed=10, progress=False)
    assert merged.n_models == 64 and merged.n_undecided == whole.n_undecided
    assert np.array_equal(merged.ids, whole.ids)
    assert np.array_equal(merged.counts, whole.counts)


def test_basin_one_is_json_and_round_trips_to_basin_curve():
    import json

    cfg = dict(name="MAJORITY", kind="uniform", N=5, sigmas=[1e-3, 0.3, 3.0], P=6, seed=5,
               n_samples=8)          # 8 strings of 6 layers: some layers are empty (None)
    res = ch5.basin_one(cfg)
    json.dumps(res, allow_nan=False)
    arr = ch5.basin_arrays(res)
    ref = sb.basin_curve(sb.majority_transformer(), sb.MAJORITY, 5, cfg["sigmas"], 6,
                         n_samples=8, seed=5, progress=False)
    for k in ("p_exact", "accuracy", "accuracy_sd"):
        assert np.allclose(arr[k], ref[k]), k
    assert np.allclose(arr["errors_by_weight"], ref["errors_by_weight"], equal_nan=True)
    assert arr["p_exact"][0] == 1 and arr["p_exact"][-1] < 1


def test_chapter5_experiments_fit_their_book_budget():
    """All of chapter 5's experiments at book scale: at most 440 CPU-seconds (one thread)."""
    per = {n: e.predicted_seconds("book") for n, e in sb.registry().items()
           if e.chapter == "ch5"}
    assert set(per) == {"ch5.exact", "ch5.basin", "ch5.k0_growth", "ch5.pf_map", "ch5.drift",
                        "ch5.k0_band", "ch5.intro_basin"}
    assert sum(per.values()) <= 440, per


def test_ch5_sizes_reject_unknown_names():
    with pytest.raises(ValueError, match="what="):
        ch5.sizes("nope")
    with pytest.raises(ValueError, match="scale="):
        ch5.sizes("basin", "huge")


def test_basin_pieces_of_the_sigma_grid_merge_exactly():
    base = dict(name="PARITY", kind="gaussian", N=4, P=5, seed=4, n_samples=None)
    sig = [1e-3, 1e-2, 0.1]
    whole = dict(base, sigmas=sig, first=0)
    parts = [dict(base, sigmas=sig[:2], first=0), dict(base, sigmas=sig[2:], first=2)]
    a = ch5.basin_merge([whole], [ch5.basin_one(whole)])["gaussian", "PARITY", 4]
    b = ch5.basin_merge(parts[::-1], [ch5.basin_one(c) for c in parts[::-1]])
    b = b["gaussian", "PARITY", 4]
    assert np.array_equal(a["sigmas"], sig) and np.array_equal(b["sigmas"], sig)
    for k in ("p_exact", "accuracy", "accuracy_sd", "errors_by_weight"):
        assert np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("name", BUILD)
def test_exact_check_experiment_and_a_broken_weight(name, monkeypatch):
    """The ch5.exact runner reports a correct construction, and a construction with one
    weight changed (the readout of the output coordinate negated) as incorrect."""
    N = 7
    r = ch5.exact_check(dict(name=name, N=N, n_samples=None))
    assert r["correct"] and abs(r["min_abs_T"] - 1) < TOL and r["n_strings"] == 2**N
    params, H = sb.construction_parameters(name)
    params["w"] = params["w"].copy()
    params["w"][np.flatnonzero(params["w"])[0]] *= -1        # one weight changed
    broken = lambda device=None: sb.Recognizer.from_parameters(params, H=H, device=device)
    monkeypatch.setitem(sb.constructions.BUILDERS, name, broken)
    assert not ch5.exact_check(dict(name=name, N=N, n_samples=None))["correct"]


def test_k0_census_at_eps_follows_the_same_models_and_counts_changed_labels():
    """eps > 0 profiles the fixed models chosen at eps = 0, at eps; ``changed`` is the number
    of labels that differ from eps = 0 (an independent truth table at each eps)."""
    base = _k0_config([0, 24], 6)
    c0, c1 = base, dict(base, eps=0.5)
    m0 = ch5.k0_merge([c0, c1], [ch5.k0_growth_one(c0), ch5.k0_growth_one(c1)])[8, 1, 6]
    m1 = ch5.k0_merge([c0, c1], [ch5.k0_growth_one(c0), ch5.k0_growth_one(c1)],
                      eps=0.5)[8, 1, 6]
    assert np.array_equal(m0["members"], m1["members"]) and m0["changed"] is None
    sub = sb.Recognizer.random(24, 8, 1, seed=3).select(m1["members"].tolist())
    t0 = sb.truth_table(sub, 6, margin=0.01, progress=False)
    sub.eps = 0.5
    t1 = sb.truth_table(sub, 6, margin=0.01, progress=False)
    assert np.array_equal(m1["changed"], (t0 != t1).sum(-1).numpy())
    assert m1["changed"].sum() > 0
    assert np.array_equal(m1["counts"], sb.profile_from_table(t1).counts.numpy())


def test_k0_fixed_models_drop_undecided_models_without_the_profilers_warning():
    """A model whose output is 0 everywhere is undecided on every string: the profiler warns of
    it, but the K_0 census drops it by design (no warning into the main job's log)."""
    import warnings

    pop = sb.Recognizer.random(24, 8, 1, seed=3)
    with torch.no_grad():
        pop.w[2].zero_()
        pop.omega[2] = 0.0
    with pytest.warns(UserWarning, match=r"\d+ of 24 models: most of the 16 strings"):
        sb.sensitivity_profile(pop, 4, margin=0.01, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed = ch5.k0_fixed_models(_k0_config([0, 24], 4), pop)
    assert 2 not in fixed and len(fixed) > 2


def test_k0_growth_records_unknown_strings_without_the_profilers_warning():
    """At N a fixed model may leave most strings undecided or incomplete (its margin at N0 says
    nothing of N): the census records them as ``unknown``, so the profiler's warning, meant
    for a caller who would otherwise read a profile of a few strings, stays out of the main
    job's log. A block whose models are all dropped at N0 returns before profiling."""
    import warnings

    # a block of the book's census (D = 16) in which one fixed model leaves most of the 64
    # strings at N = 6 unknown: the profiler warns of it there (checked below)
    c = dict(D=16, L=1, P=96, seed=1601, margin=0.01, N0=4, members=[0, 48], N=6,
             n_samples=None)
    fixed = ch5.k0_fixed_models(c)
    sub = sb.Recognizer.random(96, 16, 1, seed=1601).select(fixed)
    with pytest.warns(UserWarning, match="of 14 models: most of the 64 strings"):
        sb.sensitivity_profile(sub, 6, margin=0.01, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = ch5.k0_growth_one(c)
    assert r["members"] and len(r["unknown"]) == len(r["members"])
    assert all(sum(k) + u == 2**6 for k, u in zip(r["counts"], r["unknown"]))
    assert max(r["unknown"]) > 32                     # the model the profiler warned of
