"""Chapter 4's experiments: eps = 0, where the blowup is unbounded but rare (Lemma 4.2, 4.4).

The small-ball law of a layer-norm input variance, the blowup in a danger-zone ball around
:func:`sensbook.danger_center` on one string, its neighbours, and all strings, and eps = 0
against eps > 0 on the same random models (their labels, K_0).
"""
from __future__ import annotations

import numpy as np
import torch

from ..boolean import index_to_strings
from ..geometry import (danger_center, flip_bits, layer_norm_variances, output_table,
                        random_strings, with_flips)
from ..hinge import flip_hinge, flip_sensitivity
from ..mechanism import blowup
from ..model import Recognizer
from ..profile import classify, profile_from_table
from ..settings import device
from ..volume import perturb
from . import Experiment, dec, enc, pick, register  # noqa: F401 (dec: for the chapter)

#: The danger zone of chapter 4: D = 4, L = 1, H = 1, a ball of l-inf radius 0.1 (box
#: [-1, 1]).
ZONE = dict(D=4, L=1, r=0.1)
#: Sizes of the chapter's own cells: the eps comparison's models ``P_cmp`` and length ``N_cmp``.
SIZES = dict(ci=dict(P_cmp=200, N_cmp=8), book=dict(P_cmp=400, N_cmp=10),
             paper=dict(P_cmp=2000, N_cmp=12))
#: The eps of the comparison on random models, and the models each configuration computes.
EPS_CMP = [0.0, 1e-4, 1e-2, 1e-1, 1.0]
EPS_CMP_BLOCK = 100
SMALL_BALL_GRID = np.logspace(-14, 2, 161)  # thresholds t of the stored P(var < t)


def small_ball_one(c: dict) -> dict:
    """One block of ``c["n"]`` layer-norm input variances (:func:`layer_norm_variances`,
    seeds from ``c["seed"]``): the ``c["keep"]`` smallest, sorted, and the counts below
    each t of :data:`SMALL_BALL_GRID`. Blocks of one D merge exactly
    (:func:`merge_small_ball`).
    """
    v = layer_norm_variances(c["D"], c["n"], seed=c["seed"], progress=False).numpy()
    v.sort()
    return {
        "n": int(v.size),
        "smallest": v[: c["keep"]].tolist(),
        "below": np.searchsorted(v, SMALL_BALL_GRID, side="left").tolist(),
    }


def merge_small_ball(results) -> dict:
    """Blocks of :func:`small_ball_one` -> n, the ``keep`` smallest variances, P(var <
    t) on :data:`SMALL_BALL_GRID` (``t``, ``p``, binomial ``se``)."""
    n = sum(r["n"] for r in results)
    keep = min(len(r["smallest"]) for r in results)
    smallest = np.sort(np.concatenate([r["smallest"] for r in results]))[:keep]
    p = np.sum([r["below"] for r in results], axis=0) / n
    return {
        "n": n,
        "smallest": smallest,
        "t": SMALL_BALL_GRID.copy(),
        "p": p,
        "se": np.sqrt(p * (1 - p) / n),
    }


def _zone_ball(c, n, seed=1):
    center = danger_center(c["N"], D=c["D"], L=c["L"], seed=0)
    return perturb(center, c["r"], n, kind="uniform", seed=seed).to(device())


@torch.no_grad()
def _max_blowup(model, xs, chunk_bytes=2**27):
    """max over the strings ``xs`` (B, N) of beta, per model: (P,). Models and strings
    are taken in chunks of about ``chunk_bytes`` of activations (see
    :meth:`Recognizer.memory_per_string`), so any P and B fit in memory."""
    per_pair = max(1, model.memory_per_string(xs.shape[1]) // model.P)
    pm = int(min(model.P, max(1, chunk_bytes // per_pair)))
    ps = int(max(1, chunk_bytes // (pm * per_pair)))
    out = []
    for a in range(0, model.P, pm):
        part = model if pm >= model.P else model.select(slice(a, a + pm))
        best = None
        for b in range(0, xs.shape[0], ps):
            v = blowup(part, xs[b : b + ps]).amax(1)
            best = v if best is None else torch.maximum(best, v)
        out.append(best)
    return torch.cat(out)


def danger_zone_one(c: dict) -> dict:
    """Points of the ball around the danger centre (:func:`danger_center`), the same
    points at every N (seeded): ``beta``: beta(theta, x) for ``c["n_ball"]`` points and
    one string x; ``beta_nb``: max of beta over x and its N neighbours x xor e_i for the
    first ``c["n_nb"]`` points (what Lemma 4.2 needs)."""
    ball = _zone_ball(c, c["n_ball"])
    x = random_strings(c["N"], 1, seed=c["N"])
    beta = _max_blowup(ball, x)
    beta_nb = []
    if c["n_nb"]:
        nb = ball.select(slice(0, c["n_nb"]))
        beta_nb = _max_blowup(nb, with_flips(x, torch.arange(c["N"]))[0]).double().cpu()
    return {
        "beta": enc(beta.double().cpu().numpy()),
        "beta_nb": enc(np.asarray(beta_nb)),
    }


def all_strings_one(c: dict) -> dict:
    """For the first ``c["n_pts"]`` points of the same ball: beta on the fixed string x
    and the max of beta over all 2^N strings (Lemma 4.4 globalises over strings)."""
    ball = _zone_ball(c, c["n_pts"])
    x = random_strings(c["N"], 1, seed=c["N"])
    allx = index_to_strings(torch.arange(2 ** c["N"]), c["N"], dtype=ball.dtype)
    return {
        "beta": enc(_max_blowup(ball, x).double().cpu().numpy()),
        "beta_all": enc(_max_blowup(ball, allx).double().cpu().numpy()),
    }


def eps_cmp_one(c: dict) -> dict:
    """Models ``c["start"]:c["stop"]`` of the random population ``Recognizer.random(c["P"],
    c["D"], c["L"], c["H"], init=c["init"], seed=c["seed"])`` (eps = 0), at each eps of
    ``c["eps"]``: how many labels (margin 0, all 2^N strings) equal those at eps = 0, the sum
    over models of K_0/2^N, and the non-finite outputs. Blocks merge exactly
    (:func:`eps_cmp_rows`)."""
    model = Recognizer.random(c["P"], c["D"], c["L"], c["H"], init=c["init"], seed=c["seed"])
    model = model.select(slice(c["start"], c["stop"])).to(device())
    T0 = output_table(model, c["N"])
    rows = []
    for e in c["eps"]:
        model.eps = e
        T = output_table(model, c["N"])
        prof = profile_from_table(classify(T, 0.0))
        rows.append(dict(eps=e, agree=int(((T > 0) == (T0 > 0)).sum()),
                         k0=float(prof.fractions[:, 0].double().sum()),
                         nonfinite=int(prof.nonfinite.sum())))
    return dict(models=c["stop"] - c["start"], strings=2 ** c["N"], rows=rows)


def eps_cmp_rows(results) -> list:
    """Blocks of :func:`eps_cmp_one` -> ``(eps, fraction of labels equal to eps = 0, mean
    K_0/2^N, non-finite outputs)`` per eps, over all models."""
    models = sum(r["models"] for r in results)
    cells = sum(r["models"] * r["strings"] for r in results)
    out = []
    for j, first in enumerate(results[0]["rows"]):
        rows = [r["rows"][j] for r in results]
        out.append((first["eps"], sum(r["agree"] for r in rows) / cells,
                    sum(r["k0"] for r in rows) / models, sum(r["nonfinite"] for r in rows)))
    return out


def _ch4_eps_cmp_configs(scale):
    P, N = SIZES[scale]["P_cmp"], SIZES[scale]["N_cmp"]
    return [dict(P=P, N=N, D=16, L=2, H=2, init="uniform", seed=7, eps=EPS_CMP,
                 start=a, stop=min(P, a + EPS_CMP_BLOCK)) for a in range(0, P, EPS_CMP_BLOCK)]


def _eps_cmp_cost(c):
    return 0.1 + 1.55e-6 * (c["stop"] - c["start"]) * 2 ** c["N"] * (c["N"] + 1) * len(c["eps"])


def cor43_one(c: dict) -> dict:
    """Cor. 4.3 in the danger-zone ball: for ``c["n_pts"]`` points of the ball (the same
    points at every N) and one string x of length ``c["N"]``, the flips of the bits
    ``flip_bits(N, c["K"])``: ``max_dT`` (max_i |T(x) - T(x xor e_i)|), ``s_k`` (how many of
    those flips change the label of x, margin 0) and ``abs_T`` (|T(x)|), per point. For the
    first ``c["n_beta"]`` points also both sides of Lemma 2.9 per bit: ``n_dT`` (N |Delta
    T_i|) and ``beta_pair`` (beta(x) beta(x xor e_i)), shape (n_beta, k)."""
    ball = _zone_ball(c, c["n_pts"])
    x = random_strings(c["N"], 1, seed=c["N"])
    bits = flip_bits(c["N"], c["K"])
    h = flip_hinge(ball, x, bits, blowups=False)
    s_k = flip_sensitivity(h["T"], h["T_flip"], 0.0)[:, 0]
    hb = flip_hinge(ball.select(slice(0, c["n_beta"])), x, bits)
    as_np = lambda t: t.double().cpu().numpy()
    return {"max_dT": enc(as_np(h["dT"][:, 0].amax(-1))), "s_k": s_k.cpu().tolist(),
            "abs_T": enc(as_np(h["T"][:, 0].abs())),
            "n_dT": enc(c["N"] * as_np(hb["dT"][:, 0])),
            "beta_pair": enc(as_np(hb["beta_pair"][:, 0]))}


def _ch4_cor43_configs(scale):
    Ns, n_pts, n_beta = pick(scale, ci=([16, 32, 64, 128], 4000, 400),
                             book=([16, 32, 64, 128], 10_000, 1000),
                             paper=([16, 32, 64, 128, 256, 512, 1024], 40_000, 2000))
    return [dict(N=N, n_pts=n_pts, n_beta=n_beta, K=8, **ZONE) for N in Ns]


def _cor43_cost(c):
    k = len(flip_bits(c["N"], c["K"]))
    return 0.4 + 2.2e-10 * (c["n_pts"] + 2 * c["n_beta"]) * (1 + k) * _zone_work(
        c, c["N"] + 1)


def _ch4_small_ball_configs(scale):
    Ds, n, blocks = pick(
        scale,
        ci=([2, 3, 4, 5], 100_000, 1),
        book=([2, 3, 4, 5, 6, 7], 400_000, 1),
        paper=([2, 3, 4, 5, 6, 7, 8], 1_000_000, 10),
    )
    return [
        dict(D=D, n=n, keep=2000, seed=100 * D + 10**6 * b)
        for D in Ds
        for b in range(blocks)
    ]


N_ZONE = dict(
    ci=[8, 16, 32, 64, 128],
    book=[8, 16, 32, 64, 128, 256, 512],
    paper=[8, 16, 32, 64, 128, 256, 512, 1024, 2048],
)


def _ch4_zone_configs(scale):
    n_ball, n_nb, N_nb = pick(
        scale, ci=(4000, 400, 128), book=(10000, 400, 256), paper=(100_000, 1000, 512)
    )
    return [
        dict(N=N, n_ball=n_ball, n_nb=n_nb if N <= N_nb else 0, **ZONE)
        for N in N_ZONE[scale]
    ]


def _ch4_all_configs(scale):
    Ns, n_pts = pick(
        scale,
        ci=([4, 6, 8, 10], 200),
        book=([4, 6, 8, 10, 12], 400),
        paper=([4, 6, 8, 10, 12, 14, 16], 2000),
    )
    return [dict(N=N, n_pts=n_pts, **ZONE) for N in Ns]


def _small_ball_cost(c):
    return 0.05 + c["n"] * (3.0e-6 + 2.5e-6 * c["D"])


def _zone_work(c, S):
    return S * (S + 8 * c["D"]) * c["D"]


def _zone_cost(c):
    S = c["N"] + 1
    return 0.05 + 2.0e-9 * (c["n_ball"] + c["n_nb"] * c["N"]) * _zone_work(c, S)


def _all_cost(c):
    return 0.05 + 3.5e-9 * c["n_pts"] * 2 ** c["N"] * _zone_work(c, c["N"] + 1)


register(
    Experiment(
        "ch4.small_ball",
        _ch4_small_ball_configs,
        "sensbook.experiments.ch4:small_ball_one",
        _small_ball_cost,
        doc="small-ball law of a layer-norm input variance, per D",
    )
)
register(
    Experiment(
        "ch4.danger_zone",
        _ch4_zone_configs,
        "sensbook.experiments.ch4:danger_zone_one",
        _zone_cost,
        doc="blowup in a danger-zone ball: one string, its neighbours",
    )
)
register(
    Experiment(
        "ch4.cor43",
        _ch4_cor43_configs,
        "sensbook.experiments.ch4:cor43_one",
        _cor43_cost,
        doc="Cor. 4.3 and Lemma 2.9 in the danger-zone ball: flips and sensitivity of x",
    )
)
register(
    Experiment(
        "ch4.all_strings",
        _ch4_all_configs,
        "sensbook.experiments.ch4:all_strings_one",
        _all_cost,
        doc="blowup in the danger-zone ball, max over all strings",
    )
)
register(
    Experiment(
        "ch4.eps_cmp",
        _ch4_eps_cmp_configs,
        "sensbook.experiments.ch4:eps_cmp_one",
        _eps_cmp_cost,
        doc="eps = 0 against eps > 0 on the same random models: labels, K0, non-finite",
    )
)
