import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook import survey
from sensbook.experiments import get


def test_random_function_profiles_match_truth_table_profiles():
    # Same seed stream as random_function_profiles (one chunk); each row from the numpy path.
    K = sb.random_function_profiles(7, 50, seed=3)
    g = torch.Generator().manual_seed(3)
    tables = torch.randint(0, 2, (50, 2**7), generator=g, dtype=torch.int8)
    assert K.tolist() == [sb.TruthTable(t).profile(7).tolist() for t in tables]


def test_random_function_blocks_merge_exactly():
    blocks = [dict(N=6, n=40, seed=1), dict(N=6, n=25, seed=2), dict(N=5, n=30, seed=3)]
    merged = sb.merge_random_functions([survey.random_function_block(c) for c in blocks])
    K = np.concatenate([sb.random_function_profiles(6, 40, seed=1),
                        sb.random_function_profiles(6, 25, seed=2)])
    m = merged[6]
    assert m["n"] == 65 and sorted(merged) == [5, 6]
    assert np.allclose(m["mean_K"], K.mean(0))
    assert np.allclose(m["se_K"], K.std(0, ddof=1) / np.sqrt(65))
    assert m["K0_counts"].tolist() == np.bincount(K[:, 0]).tolist()


def test_e1_cell_rows_rebuild_from_their_seeds(monkeypatch):
    monkeypatch.setenv("SENSBOOK_DEVICE", "cpu")        # rebuilt below on the same device
    configs = [dict(N=6, D=8, L=1, H=1, init=init, eps=0.0, margin=0.0, P=24, seed=s)
               for s, init in enumerate(("gaussian", "xavier_uniform"))]
    s = sb.e1_merge(configs, [survey.e1_cell(c) for c in configs])
    assert len(s["K"]) == 48 and (s["K"].sum(1) == 2**6).all() and s["complete"].all()
    assert (s["constant"] == (s["K"][:, 0] == 2**6)).all()
    for i in range(0, 48, 5):
        row = {k: s[k][i].item() for k in ("P", "D", "L", "H", "eps", "seed", "member")}
        model = sb.e1_model({**row, "init": str(s["init"][i])})
        table = sb.truth_table(model, 6, progress=False)[0]
        assert (sb.profile_from_table(table).K.numpy() == s["K"][i]).all()
    # The stored tables are exactly the non-constant models without a zero-sensitivity string.
    odd = np.flatnonzero(~s["constant"] & (s["K"][:, 0] == 0))
    assert sorted(s["tables"]) == odd.tolist() and len(odd) > 0
    for i in odd:
        assert (sb.profile_from_table(s["tables"][i]).K.numpy() == s["K"][i]).all()


def test_experiment_configs_are_distinct_and_cover_every_cell():
    for scale in sb.SCALES:
        sizes = survey.E1_SIZES[scale]
        configs = survey.e1_configs(scale)
        per_cell = {}
        for c in configs:
            cell = (c["init"], (c["D"], c["L"], c["H"]))
            per_cell[cell] = per_cell.get(cell, 0) + c["P"]
            assert survey.e1_cost(c) <= survey.E1_MAX_SECONDS or c["P"] == 1
        assert len(per_cell) == len(sb.INITS) * len(sizes["archs"])
        assert set(per_cell.values()) == {sizes["P"]}
        for name in ("ch1.random_functions", "ch2.e1", "ch2.control"):
            sweep = get(name).sweep(scale)
            assert len({sb.key(c, "v") for c in sweep.configs}) == len(sweep.configs)
            assert len({c["seed"] for c in sweep.configs}) == len(sweep.configs)


def test_survey_bad_input():
    with pytest.raises(ValueError, match="n_functions"):
        sb.random_function_profiles(4, 0)
    with pytest.raises(ValueError, match="init='he'"):
        sb.e1_model(dict(P=2, D=8, L=1, H=1, eps=0.0, init="he", seed=0))
    with pytest.raises(ValueError, match="table"):
        survey.table_to_string([0, 1, -1, 1])
