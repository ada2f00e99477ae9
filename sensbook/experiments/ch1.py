"""Chapter 1's experiment: sensitivity profiles of uniformly random Boolean functions.

A uniformly random function has E[K_0] = 1 and K_0 close to Poisson(1)
(:func:`sensbook.poisson_tv_bound`). Random functions are summarised by sums that merge exactly
over blocks (the count of functions, the sums of K_k and K_k^2, the histogram of K_0).
"""
from __future__ import annotations

import numpy as np

from ..volume import random_function_profiles
from . import Experiment, register


def random_function_block(config: dict) -> dict:
    """Runner: summary of ``config["n"]`` random functions at ``config["N"]`` (``seed``).

    Returns ``N``, ``n``, ``sum_K`` and ``sum_K2`` (sums of K_k and K_k^2 over the functions,
    k = 0..N) and ``K0_counts`` (entry j: how many functions have K_0 = j); all merge exactly
    by addition (:func:`merge_random_functions`)."""
    K = random_function_profiles(config["N"], config["n"], seed=config["seed"])
    return dict(N=int(config["N"]), n=int(len(K)), sum_K=K.sum(0).tolist(),
                sum_K2=(K * K).sum(0).tolist(), K0_counts=np.bincount(K[:, 0]).tolist())


def merge_random_functions(results) -> dict:
    """Merge :func:`random_function_block` results by N: ``{N: dict(n, mean_K, se_K, K0_counts)}``
    with ``mean_K`` (the sample mean of each K_k), ``se_K`` (its standard error) and
    ``K0_counts`` (numpy arrays)."""
    acc = {}
    for r in results:
        a = acc.setdefault(r["N"], dict(n=0, s=0, s2=0, h=np.zeros(1, dtype=np.int64)))
        a["n"] += r["n"]
        a["s"] = a["s"] + np.asarray(r["sum_K"], dtype=np.float64)
        a["s2"] = a["s2"] + np.asarray(r["sum_K2"], dtype=np.float64)
        h = np.asarray(r["K0_counts"], dtype=np.int64)
        size = max(len(a["h"]), len(h))
        a["h"] = np.pad(a["h"], (0, size - len(a["h"]))) + np.pad(h, (0, size - len(h)))
    out = {}
    for N, a in sorted(acc.items()):
        n = a["n"]
        mean = a["s"] / n
        var = np.maximum(a["s2"] - n * mean**2, 0) / max(n - 1, 1)
        out[N] = dict(n=n, mean_K=mean, se_K=np.sqrt(var / n), K0_counts=a["h"])
    return out


def blocks(n: int, block: int):
    """(start, size) of the blocks of ``n`` items, ``block`` at a time."""
    return [(a, min(block, n - a)) for a in range(0, n, block)]


#: Chapter 1's sizes per scale (the one place they live): ``N``, the length of the chapter's
#: exact profiles (odd, so that MAJORITY has no ties); random functions at N = 4..``N_max``,
#: ``n`` functions per N, ``block`` per configuration.
SIZES = {
    "ci": dict(N=9, N_max=12, n=600, block=600),
    "book": dict(N=11, N_max=14, n=3000, block=3000),
    "paper": dict(N=15, N_max=18, n=20000, block=2000),
}


def ch1_configs(scale: str) -> list:
    """Chapter 1's random-function configurations at ``scale`` (seed = 1000 N + block)."""
    s = SIZES[scale]
    return [dict(N=N, n=size, seed=1000 * N + i)
            for N in range(4, s["N_max"] + 1)
            for i, (_, size) in enumerate(blocks(s["n"], s["block"]))]


def random_function_cost(config: dict) -> float:
    """Predicted CPU-seconds (one thread): n 2^N N table comparisons (fitted on ci runs,
    7.4e-9 s each at N = 12; 9e-9 measured at book's N = 14)."""
    return 0.005 + 9e-9 * config["n"] * 2 ** config["N"] * config["N"]


register(Experiment("ch1.random_functions", ch1_configs,
                    "sensbook.experiments.ch1:random_function_block", random_function_cost,
                    doc="profiles of uniformly random Boolean functions, N = 4..N_max (chapter 1)"))
