"""Experiment E1: the sensitivity profiles of random transformers and of random functions.

Kövér et al. (2026), experiments: random transformers (four initialisations, many
architectures) put most of their strings at sensitivity 0 and have zero-sensitivity strings,
while a uniformly random Boolean function has one only with probability about 1 - 1/e (its K_0
is close to Poisson(1); see :func:`sensbook.poisson_tv_bound`).

Three experiments are registered here (see :mod:`sensbook.experiments`):

* ``ch1.random_functions``: profiles of uniformly random functions at each N (chapter 1);
* ``ch2.e1``: exact profiles of random recognizers, one configuration per (initialisation,
  architecture, block of models) (chapter 2);
* ``ch2.control``: the random-function control at chapter 2's N.

Random functions are summarised by sums that merge exactly over blocks (the count of
functions, the sums of K_k and K_k^2, the histogram of K_0). A random recognizer is rebuilt from
its row: ``Recognizer.random(P, D, L, H, eps=eps, init=init, seed=seed).select(member)``.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from .boolean import MAX_EXHAUSTIVE_N, check_n
from .experiments import Experiment, register
from .model import INITS, Recognizer
from .profile import profile_from_table, truth_table
from .scale import device, progress

# ---- random functions ------------------------------------------------------------------------


def random_function_profiles(N: int, n_functions: int, *, seed: int = 0,
                             chunk: int = 256) -> np.ndarray:
    """Exact profiles K_0..K_N of ``n_functions`` uniformly random Boolean functions on
    {0,1}^N: int64 array (n_functions, N+1), seeded, batched."""
    N = check_n(N, maximum=MAX_EXHAUSTIVE_N)
    if isinstance(n_functions, bool) or not isinstance(n_functions, (int, np.integer)) \
            or n_functions < 1:
        raise ValueError(f"n_functions must be an integer >= 1, got {n_functions!r}")
    g = torch.Generator().manual_seed(seed)
    out = []
    for a in progress(range(0, n_functions, chunk), desc=f"random functions N={N}"):
        n = min(chunk, n_functions - a)
        tables = torch.randint(0, 2, (n, 2**N), generator=g, dtype=torch.int8)
        out.append(profile_from_table(tables).K.numpy())
    return np.concatenate(out)


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


def _blocks(n: int, block: int):
    """(start, size) of the blocks of ``n`` items, ``block`` at a time."""
    return [(a, min(block, n - a)) for a in range(0, n, block)]


#: Chapter 1: random functions at N = 4..N_max, ``n`` functions per N, ``block`` per config.
RANDOM_FUNCTION_SIZES = {
    "ci": dict(N_max=12, n=600, block=600),
    "book": dict(N_max=14, n=3000, block=3000),
    "paper": dict(N_max=18, n=20000, block=2000),
}


def ch1_configs(scale: str) -> list:
    """Chapter 1's random-function configurations at ``scale`` (seed = 1000 N + block)."""
    s = RANDOM_FUNCTION_SIZES[scale]
    return [dict(N=N, n=size, seed=1000 * N + i)
            for N in range(4, s["N_max"] + 1)
            for i, (_, size) in enumerate(_blocks(s["n"], s["block"]))]


def random_function_cost(config: dict) -> float:
    """Predicted CPU-seconds (one thread): n 2^N N table comparisons (fitted on ci runs,
    7.4e-9 s each at N = 12; 9e-9 measured at book's N = 14)."""
    return 0.005 + 9e-9 * config["n"] * 2 ** config["N"] * config["N"]


# ---- random transformers -----------------------------------------------------------------------

#: Chapter 2's E1 sizes: length ``N``, models ``P`` per (init, architecture) cell, split into
#: configurations of ``block`` models; ``control`` random functions in blocks of ``block_f``.
E1_SIZES = {
    "ci": dict(N=8, P=32, block=32, archs=[(8, 1, 1), (16, 2, 2)], control=2000,
               block_f=2000),
    "book": dict(N=10, P=128, block=128, archs=[(8, 1, 1), (16, 2, 2), (32, 2, 4), (32, 4, 4)],
                 control=5000, block_f=5000),
    "paper": dict(N=14, P=1024, block=128,
                  archs=[(8, 1, 1), (16, 2, 2), (32, 2, 4), (32, 4, 4), (64, 4, 4), (128, 6, 8)],
                  control=20000, block_f=5000),
}


#: The largest predicted CPU-seconds of one E1 configuration (bigger blocks are halved).
E1_MAX_SECONDS = 240


def e1_configs(scale: str) -> list:
    """One configuration per (init, architecture, block of models): a population of ``P``
    models drawn with its own ``seed`` (so a block's models depend on nothing else). Blocks
    are halved until a configuration is predicted to take at most ``E1_MAX_SECONDS``."""
    s = E1_SIZES[scale]
    out = []
    for c, ((D, L, H), init) in enumerate(itertools.product(s["archs"], INITS)):
        cell = dict(N=s["N"], D=D, L=L, H=H, init=init, eps=0.0, margin=0.0)
        block = s["block"]
        while block > 1 and e1_cost({**cell, "P": block}) > E1_MAX_SECONDS:
            block //= 2                      # a configuration stays a few CPU-minutes
        out += [{**cell, "P": size, "seed": 1000 * c + b}
                for b, (_, size) in enumerate(_blocks(s["P"], block))]
    return out


def e1_control_configs(scale: str) -> list:
    """The random-function control at chapter 2's N (seeds disjoint from chapter 1's)."""
    s = E1_SIZES[scale]
    return [dict(N=s["N"], n=size, seed=10**6 + i)
            for i, (_, size) in enumerate(_blocks(s["control"], s["block_f"]))]


def e1_model(row: dict, device_=None) -> Recognizer:
    """The population of an E1 configuration (or one model: a row with ``member``)."""
    model = Recognizer.random(row["P"], row["D"], row["L"], row["H"], eps=row["eps"],
                              init=row["init"], seed=row["seed"], device=device_)
    return model if "member" not in row else model.select(int(row["member"]))


def table_to_string(table) -> str:
    """A 0/1 truth table as a string of '0' and '1' (JSON-able, exact)."""
    t = np.asarray(table)
    if ((t != 0) & (t != 1)).any():
        raise ValueError("table must hold decided labels 0/1 only")
    return "".join("1" if v else "0" for v in t.tolist())


def string_to_table(s: str) -> torch.Tensor:
    """Inverse of :func:`table_to_string` (int8 tensor)."""
    return torch.tensor([c == "1" for c in s], dtype=torch.int8)


@torch.no_grad()
def e1_cell(config: dict) -> dict:
    """Runner: exact profiles of the configuration's ``P`` random recognizers on all 2^N
    strings, read with margin ``margin``, on :func:`sensbook.device`.

    Returns ``K`` (P lists of N+1 counts), ``undecided``, ``nonfinite``, ``incomplete``
    (per model), ``device``, and ``tables``: for each non-constant complete model without a
    zero-sensitivity string, its truth table (``{member: '0101...'}``), so that the chapter can
    name the function and rebuild the model."""
    dev = device()
    model = e1_model(config, dev)
    table = truth_table(model, config["N"], margin=config["margin"], progress=False)
    prof = profile_from_table(table)
    K = prof.counts.cpu().numpy()
    complete = prof.complete.cpu().numpy()
    odd = np.flatnonzero(complete & (K[:, 0] == 0))
    return dict(K=K.tolist(), undecided=prof.undecided.cpu().tolist(),
                nonfinite=prof.nonfinite.cpu().tolist(),
                incomplete=prof.incomplete.cpu().tolist(), device=str(dev),
                tables={str(i): table_to_string(table[i].cpu()) for i in odd})


def e1_merge(configs, results) -> dict:
    """One row per model: numpy arrays ``init``, ``D``, ``L``, ``H``, ``P``, ``seed``,
    ``member``, ``eps``, ``K`` (models, N+1), ``complete``, ``constant``, ``device``, and
    ``tables`` ({row index: 0/1 table} for the non-constant models with K_0 = 0)."""
    rows = {k: [] for k in ("init", "D", "L", "H", "P", "seed", "member", "eps", "device")}
    K, bad, tables = [], [], {}
    for c, r in zip(configs, results):
        for m in range(c["P"]):
            for k in ("init", "D", "L", "H", "P", "seed", "eps"):
                rows[k].append(c[k])
            rows["member"].append(m)
            rows["device"].append(r["device"])
            if str(m) in r["tables"]:
                tables[len(K)] = string_to_table(r["tables"][str(m)])
            K.append(r["K"][m])
            bad.append(r["undecided"][m] + r["nonfinite"][m] + r["incomplete"][m])
    out = {k: np.asarray(v) for k, v in rows.items()}
    out["K"] = np.asarray(K, dtype=np.int64)
    out["complete"] = np.asarray(bad) == 0
    out["constant"] = out["complete"] & (out["K"][:, 0] == 2 ** configs[0]["N"])
    out["tables"] = tables
    return out


def e1_cost(config: dict) -> float:
    """Predicted CPU-seconds (one thread) of one E1 configuration: P 2^N strings of N+1
    positions through L layers of width D, at a cost per position and layer linear in D up to
    D ~ 180 and quadratic beyond (fitted on ci runs, checked against book's D = 32)."""
    S, D = config["N"] + 1, config["D"]
    return 0.01 + 2.3e-10 * config["P"] * 2 ** config["N"] * S * config["L"] * D * (D + 180)


register(Experiment("ch1.random_functions", ch1_configs, "sensbook.survey:random_function_block",
                    random_function_cost,
                    doc="profiles of uniformly random Boolean functions, N = 4..N_max (chapter 1)"))
register(Experiment("ch2.e1", e1_configs, "sensbook.survey:e1_cell", e1_cost,
                    doc="E1: exact profiles of random transformers, per init x architecture "
                        "(chapter 2)"))
register(Experiment("ch2.control", e1_control_configs, "sensbook.survey:random_function_block",
                    random_function_cost,
                    doc="E1's control: random Boolean functions at chapter 2's N"))
