import numpy as np
import pytest

import sensbook as sb
from sensbook.experiments import ch2
from sensbook.experiments import get


def test_e1_cell_rows_rebuild_from_their_seeds(monkeypatch):
    monkeypatch.setenv("SENSBOOK_DEVICE", "cpu")        # rebuilt below on the same device
    configs = [dict(N=6, D=8, L=1, H=1, init=init, eps=0.0, margin=0.0, P=24, seed=s)
               for s, init in enumerate(("gaussian", "xavier_uniform"))]
    s = ch2.e1_merge(configs, [ch2.e1_cell(c) for c in configs])
    assert len(s["K"]) == 48 and (s["K"].sum(1) == 2**6).all() and s["complete"].all()
    assert (s["constant"] == (s["K"][:, 0] == 2**6)).all()
    for i in range(0, 48, 5):
        row = {k: s[k][i].item() for k in ("P", "D", "L", "H", "eps", "seed", "member")}
        model = ch2.e1_model({**row, "init": str(s["init"][i])})
        table = sb.truth_table(model, 6, progress=False)[0]
        assert (sb.profile_from_table(table).K.numpy() == s["K"][i]).all()
    # The stored tables are exactly the non-constant models without a zero-sensitivity string.
    odd = np.flatnonzero(~s["constant"] & (s["K"][:, 0] == 0))
    assert sorted(s["tables"]) == odd.tolist() and len(odd) > 0
    for i in odd:
        assert (sb.profile_from_table(s["tables"][i]).K.numpy() == s["K"][i]).all()


def test_experiment_configs_are_distinct_and_cover_every_cell():
    for scale in sb.SCALES:
        sizes = ch2.SIZES[scale]
        configs = ch2.e1_configs(scale)
        per_cell = {}
        for c in configs:
            cell = (c["init"], (c["D"], c["L"], c["H"]))
            per_cell[cell] = per_cell.get(cell, 0) + c["P"]
            assert ch2.e1_cost(c) <= ch2.E1_MAX_SECONDS or c["P"] == 1
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
        ch2.e1_model(dict(P=2, D=8, L=1, H=1, eps=0.0, init="he", seed=0))
    with pytest.raises(ValueError, match="table"):
        ch2.table_to_string([0, 1, -1, 1])
