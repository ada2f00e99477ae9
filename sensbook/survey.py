"""Experiment E1: the sensitivity profiles of random transformers and of random functions.

Kövér et al. (2026), experiments: random transformers (four initialisations, many
architectures) put most of their strings at sensitivity 0, and every one of them has a
zero-sensitivity string, while a uniformly random Boolean function has one only with
probability about 1 - 1/e (its K_0 is close to Poisson(1); see :func:`sensbook.poisson_tv_bound`).
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from .boolean import MAX_EXHAUSTIVE_N, check_n
from .model import INITS, Recognizer
from .profile import profile_from_table, sensitivity_profile
from .scale import progress


def random_function_k0(N: int, n_functions: int, *, seed: int = 0, chunk: int = 256) -> np.ndarray:
    """K_0 of ``n_functions`` uniformly random Boolean functions on {0,1}^N (exact, batched)."""
    N = check_n(N, maximum=MAX_EXHAUSTIVE_N)
    if n_functions < 1:
        raise ValueError(f"n_functions must be >= 1, got {n_functions!r}")
    g = torch.Generator().manual_seed(seed)
    out = []
    for a in progress(range(0, n_functions, chunk), desc=f"random functions N={N}"):
        n = min(chunk, n_functions - a)
        tables = torch.randint(0, 2, (n, 2**N), generator=g, dtype=torch.int8)
        out.append(profile_from_table(tables).K0.numpy())
    return np.concatenate(out)


def random_transformer_survey(N: int, *, inits=INITS, archs=((16, 2, 2),), P: int = 64,
                              eps: float = 0.0, margin: float = 0.0, scale: float = 1.0,
                              seed: int = 0, device=None) -> dict:
    """Exact profiles of P random recognizers for every (init, (D, L, H)) pair.

    Returns a dict of numpy arrays with one row per model: ``init``, ``D``, ``L``, ``H``,
    ``K`` (n_models, N+1), ``complete`` (no undecided or non-finite string), ``constant``, and
    ``seed``, ``member``: model ``i`` is ``Recognizer.random(P, D, L, H, eps=eps, init=init,
    scale=scale, seed=seed[i]).select(member[i])``.
    """
    for init in inits:
        if init not in INITS:
            raise ValueError(f"init={init!r} is unknown; allowed: {', '.join(INITS)}")
    rows = {k: [] for k in ("init", "D", "L", "H", "seed", "member", "K", "complete", "constant")}
    cells = list(itertools.product(inits, archs))
    for i, (init, (D, L, H)) in enumerate(progress(cells, desc="random transformers")):
        cell_seed = seed * 1000 + i
        model = Recognizer.random(P, D, L, H, eps=eps, init=init, scale=scale,
                                  seed=cell_seed, device=device)
        prof = sensitivity_profile(model, N, margin=margin, progress=False)
        rows["init"] += [init] * P
        rows["D"] += [D] * P
        rows["L"] += [L] * P
        rows["H"] += [H] * P
        rows["seed"] += [cell_seed] * P
        rows["member"] += list(range(P))
        rows["K"].append(prof.counts.cpu().numpy())
        rows["complete"].append(prof.complete.cpu().numpy())
        rows["constant"].append(prof.is_constant.cpu().numpy())
    out = {k: np.asarray(v) for k, v in rows.items() if k not in ("K", "complete", "constant")}
    out.update(K=np.concatenate(rows["K"]), complete=np.concatenate(rows["complete"]),
               constant=np.concatenate(rows["constant"]))
    return out
