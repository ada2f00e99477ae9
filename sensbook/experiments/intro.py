"""The introduction's experiment: the figure on its first screen.

``intro.basin``: :func:`sensbook.experiments.ch5.basin_one` (ch5_basins' basins) for the
PARITY construction and the hard-attention FIRST under uniform noise, at ``ch5.basin``'s sizes
(the same configurations) except at ``paper`` scale, where it stops at N = 12 with 96 copies
per sigma: minutes of CPU, so a reader who sets ``paper`` sees the first page at once (the
lengths beyond are ``ch5.basin``'s, in ch5_basins).
"""
from __future__ import annotations

import numpy as np

from ..settings import scale as current_scale
from . import Experiment, pick, register
from .ch5 import _basin_cost, sizes as ch5_sizes


def basin_sizes(scale: str | None = None) -> dict:
    """The sizes of the figure: ``ch5.sizes("basin")`` at ``ci`` and ``book``; smaller at
    ``paper`` (N <= 12, P = 96, the same 25-point sigma grid)."""
    scale = current_scale() if scale is None else scale
    return pick(scale, ci=ch5_sizes("basin", "ci"), book=ch5_sizes("basin", "book"),
                paper=dict(Ns=[4, 6, 8, 10, 12], n_sigma=25, P=96, max_strings=4096, chunk=25,
                           hard_Ns=[64], hard_strings=64))


def basin_sigmas(scale: str | None = None) -> np.ndarray:
    """The sigma grid of the figure: log-spaced on [1e-4, 1], as ``ch5.basin_sigmas``."""
    return np.logspace(-4, 0, basin_sizes(scale)["n_sigma"])


def _basin_configs(scale):
    s = basin_sizes(scale)
    sig = [float(v) for v in basin_sigmas(scale)]
    sampled = lambda N, k: None if 2**N <= s["max_strings"] else k
    chunks = lambda a0: range(a0, len(sig), s["chunk"])
    return [dict(name="PARITY", kind="uniform", N=N, sigmas=sig[a:a + s["chunk"]], first=a,
                 P=s["P"], seed=N, n_samples=sampled(N, s["max_strings"]))
            for N in s["Ns"] for a in chunks(0)] + [
        # the hard FIRST: its long lengths on sampled strings and the upper half of the grid
        # (its sigma* is flat, above it), as in ch5.basin
        dict(name="FIRST_HARD", kind="uniform", N=N, sigmas=sig[a:], first=a, P=s["P"], seed=N,
             n_samples=sampled(N, s["max_strings"] if N in s["Ns"] else s["hard_strings"]))
        for N in s["Ns"] + s["hard_Ns"] for a in [0 if N in s["Ns"] else len(sig) // 2]]


register(Experiment("intro.basin", _basin_configs, "sensbook.experiments.ch5:basin_one",
                    _basin_cost, doc="the introduction's figure: ch5.basin's PARITY and hard "
                    "FIRST under uniform noise, to N = 12 at paper scale"))
