import pytest
import torch

import sensbook as sb


def test_random_function_k0_matches_truth_table_profiles():
    # Same seed stream as random_function_k0 (one chunk): each row's K0 from the numpy path.
    k0 = sb.random_function_k0(7, 50, seed=3)
    g = torch.Generator().manual_seed(3)
    tables = torch.randint(0, 2, (50, 2**7), generator=g, dtype=torch.int8)
    assert k0.tolist() == [sb.TruthTable(t).K0(7) for t in tables]


def test_survey_rows_rebuild_from_their_seeds():
    s = sb.random_transformer_survey(6, inits=("gaussian", "xavier_uniform"),
                                     archs=((8, 1, 1), (8, 2, 2)), P=5, seed=2)
    assert len(s["K"]) == 2 * 2 * 5 and (s["K"].sum(1) == 2**6).all()
    for i in [0, 7, 13, 19]:
        m = sb.Recognizer.random(5, int(s["D"][i]), int(s["L"][i]), int(s["H"][i]),
                                 init=str(s["init"][i]), seed=int(s["seed"][i])).select(int(s["member"][i]))
        prof = sb.sensitivity_profile(m, 6, progress=False)
        assert (prof.K[0].numpy() == s["K"][i]).all()
    assert (s["constant"] == (s["K"][:, 0] == 2**6)).all()


def test_survey_bad_input():
    with pytest.raises(ValueError, match="init='he'"):
        sb.random_transformer_survey(4, inits=("he",))
    with pytest.raises(ValueError, match="n_functions"):
        sb.random_function_k0(4, 0)
