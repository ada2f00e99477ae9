"""Chapter 1's experiment (sensbook/experiments/ch1.py)."""
import numpy as np

import sensbook as sb
from sensbook.experiments import ch1


def test_random_function_blocks_merge_exactly():
    blocks = [dict(N=6, n=40, seed=1), dict(N=6, n=25, seed=2), dict(N=5, n=30, seed=3)]
    merged = ch1.merge_random_functions([ch1.random_function_block(c) for c in blocks])
    K = np.concatenate([sb.random_function_profiles(6, 40, seed=1),
                        sb.random_function_profiles(6, 25, seed=2)])
    m = merged[6]
    assert m["n"] == 65 and sorted(merged) == [5, 6]
    assert np.allclose(m["mean_K"], K.mean(0))
    assert np.allclose(m["se_K"], K.std(0, ddof=1) / np.sqrt(65))
    assert m["K0_counts"].tolist() == np.bincount(K[:, 0]).tolist()
