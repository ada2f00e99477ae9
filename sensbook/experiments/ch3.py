"""Chapter 3's experiments: eps > 0 (Lemma 3.2, Cor. 3.3/3.4, Lemma 3.1 + Prop. 3.5).

The worst case over theta of the blowup, the largest one-flip influence against N, what random
models recognise on all 2^N strings, and the Lipschitz constant in theta; at eps = 0 beside
eps > 0 on the same models.
"""
from __future__ import annotations

import numpy as np
import torch

from ..constructions import first_hard_transformer, first_transformer, score_gap
from ..geometry import (distinct_functions, flip_bits, lipschitz_theta, maximise_blowup,
                        random_strings, recognition)
from ..hinge import flip_hinge, lemma29_ratio, maximise_influence
from ..model import Recognizer
from ..settings import device
from . import Experiment, dec, enc, pick, register  # noqa: F401 (dec: for the chapter)

#: The chapter-3 architecture (Xavier init for typical theta; the box [-1, 1]^M for
#: worst case).
ARCH = dict(D=16, L=2, H=2)
EPS = [0.0, 0.1]  # typical theta: the same models at eps = 0 and eps > 0
#: Sizes of the chapter's own cells: ``P_blow`` models per (eps, L) for Lemma 3.2.
SIZES = dict(ci=dict(P_blow=64), book=dict(P_blow=256), paper=dict(P_blow=2048))


def _model(c, P, seed, init="xavier_uniform", dtype=torch.float32):
    return Recognizer.random(
        P,
        ARCH["D"],
        ARCH["L"],
        ARCH["H"],
        eps=c["eps"],
        init=init,
        seed=seed,
        dtype=dtype,
        device=device(),
    )


def worst_blowup_one(c: dict) -> dict:
    """One start block of the worst-case search: ``c["P"]`` models uniform on the box,
    blowup on one string of length ``c["N"]`` maximised by :func:`maximise_blowup`."""
    m = _model(c, c["P"], c["seed"], init="uniform", dtype=torch.float64)
    x = random_strings(c["N"], 1, seed=c["N"])
    steps, beta = maximise_blowup(m, x, steps=c["steps"], lr=tuple(c["lr"]))
    return {"steps": steps.tolist(), "beta": enc(beta[:, :, 0])}


def influence_one(c: dict) -> dict:
    """Max over ``c["B"]`` strings and ``c["K"]`` bits of one flip's influence, per
    model; and for every (model, string, bit) the two sides of Lemma 2.9: ``n_dT`` =
    N |T(x) - T(x xor e_i)| and ``beta_pair`` = beta(x) beta(x xor e_i), shape (P, B, k)."""
    m = _model(c, c["P"], c["seed"])
    x = random_strings(c["N"], c["B"], seed=c["N"])
    h = flip_hinge(m, x, flip_bits(c["N"], c["K"]))        # passes sized to 1 GiB
    dT = h["dT"].double().cpu().numpy()
    return {"max_influence": enc(dT.max((1, 2))), "n_dT": enc(c["N"] * dT),
            "beta_pair": enc(h["beta_pair"].double().cpu().numpy())}


#: The worst case of the influence is searched in the FIRST construction's architecture
#: (D = 12, L = 2, H = 1, F = 8), so that the construction is one of the starts.
WORST_ARCH = dict(D=12, L=2, H=1, F=8)


def worst_influence_one(c: dict) -> dict:
    """Gradient ascent on the largest flip of one string (:func:`maximise_influence`) over
    theta in the box [-1, 1]^M at length ``c["N"]``: from the exact FIRST construction
    (``c["start"] == "FIRST"``) or from ``c["P"]`` uniform random points of the box.
    Returns per start: ``start`` and ``end``, max over all N bits of |T(x) - T(x xor e_i)|
    before and after the search, ``per_bit`` (P, N): each bit's |Delta T_i| before, and
    ``end_ratio``: max over the N bits of Lemma 2.9's ratio N |Delta T_i| / (beta(x)
    beta(x xor e_i)) at the end, with the measured blowups (a lower bound on C)."""
    if c["start"] == "FIRST":
        m = first_transformer(eps=c["eps"], device=device())
    else:
        m = Recognizer.random(c["P"], eps=c["eps"], init="uniform", seed=c["seed"],
                              dtype=torch.float64, device=device(), **WORST_ARCH)
    x = random_strings(c["N"], 1, seed=c["N"]).double()
    per_bit = flip_hinge(m, x, blowups=False)["dT"][:, 0].double().cpu().numpy()
    start, end = maximise_influence(m, x, flip_bits(c["N"], c["K"]), steps=c["steps"],
                                    lr=tuple(c["lr"]), box=1.0)
    h = flip_hinge(m, x)
    ratio = lemma29_ratio(c["N"], h["dT"][:, 0].double().cpu().numpy(),
                          h["beta_pair"][:, 0].double().cpu().numpy()).max(-1)
    return {"start": enc(start), "end": enc(end), "per_bit": enc(per_bit),
            "end_ratio": enc(ratio)}


def box_scan_one(c: dict) -> dict:
    """The box scan: :func:`maximise_influence` over theta in [-B, B]^M (``c["B"]``) at length
    ``c["N"]`` and layer-norm ``c["eps"]``, in the worst-case architecture. Starts: the
    hard-attention FIRST construction scaled by B (start 0; its scores scale by B^2) and
    ``c["P"]`` uniform points of the box; step sizes ``c["lr"]`` times B. Without the feature
    1[n = 1] (``c["mark_first"]`` False) the construction is no start (it then averages
    uniformly, and a balanced string gives a zero-variance layer norm). Returns ``start``,
    ``end`` (max over all N bits of |Delta T|, per start) and ``gap``: the construction's
    score gap (:func:`score_gap`) at B (0 without the feature)."""
    B = c["B"]
    hard = first_hard_transformer(eps=c["eps"], device=device(), mark_first=c["mark_first"])
    rnd = Recognizer.random(c["P"], eps=c["eps"], init="uniform", scale=B, seed=c["seed"],
                            dtype=torch.float64, device=device(), mark_first=c["mark_first"],
                            **WORST_ARCH)
    if c["mark_first"]:
        m = rnd.like(c["P"] + 1).set_flat(torch.cat([B * hard.flat(), rnd.flat()]))
        gap = score_gap(m.select([0]), c["N"]).item()
    else:
        m, gap = rnd, 0.0
    x = random_strings(c["N"], 1, seed=c["N"]).double()
    start, end = maximise_influence(m, x, flip_bits(c["N"], c["K"]), steps=c["steps"],
                                    lr=(c["lr"][0] * B, c["lr"][1] * B), box=B)
    return {"start": enc(start), "end": enc(end), "gap": gap}


def recognition_one(c: dict) -> dict:
    """What each of ``c["P"]`` models computes on all 2^N strings (0/1 lists, one per
    model): ``decided`` (every |T| >= margin), ``nonconstant`` / ``constant``
    (recognised with margin, both labels / one), ``sign_nonconstant`` (both signs of T
    occur: margin 0, where no string can be undecided); ``influence``: max over all
    strings and bits of one flip's effect on T; ``distinct``: the number of distinct
    functions recognised with margin."""
    m = _model(c, c["P"], c["seed"])
    r = recognition(m, c["N"], c["margin"])
    T = r.T
    if not torch.isfinite(T).all():
        raise ValueError("non-finite output: a layer-norm input of variance 0")
    as01 = lambda b: b.int().cpu().tolist()
    return {
        "decided": as01(r.recognises),
        "nonconstant": as01(r.nonconstant),
        "constant": as01(r.constant),
        "sign_nonconstant": as01((T > 0).any(-1) & (T < 0).any(-1)),
        "influence": enc(r.influence.double().cpu().numpy()),
        "distinct": distinct_functions(r.table.cpu()),
    }


def lipschitz_one(c: dict) -> dict:
    """Max over ``c["B"]`` strings of ||grad_theta T||_1, per model (Lemma 3.1)."""
    m = _model(c, c["P"], c["seed"])
    lip = lipschitz_theta(m, random_strings(c["N"], c["B"], seed=c["N"])).amax(1)
    return {"lipschitz": enc(lip.cpu().numpy())}


def _ch3_worst_configs(scale):
    P, steps, seeds = pick(
        scale, ci=(2, 200, 1), book=(4, 300, 2), paper=(16, 1000, 4)
    )
    return [
        dict(eps=e, P=P, steps=steps, N=16, lr=[0.05, 1e-7], seed=s, **ARCH)
        for e in (0.0, 1e-4, 1e-2, 1e-1)
        for s in range(seeds)
    ]


def _ch3_worst_influence_configs(scale):
    Ns, P = pick(scale, ci=([8, 32, 128], 3), book=([8, 32, 128, 256], 3),
                 paper=([8, 32, 128, 256, 512, 1024], 8))
    return [
        dict(eps=e, N=N, start=st, P=1 if st == "FIRST" else P, K=8, steps=150,
             lr=[0.05, 1e-4], seed=N, **WORST_ARCH)
        for e in EPS
        for N in Ns
        for st in ("FIRST", "random")
    ]


#: The box scan: half-widths B of the box, layer-norm eps and lengths N per scale.
BOX = dict(
    ci=dict(B=[0.03, 0.125, 1.0], eps=[0.0, 0.1], Ns=[8, 32, 128], P=2, steps=40),
    book=dict(B=[0.03, 0.06, 0.125, 0.25, 0.5, 1.0], eps=[0.0, 0.01, 0.1, 1.0],
              Ns=[8, 32, 128, 256], P=3, steps=60),
    paper=dict(B=[0.03, 0.045, 0.06, 0.09, 0.125, 0.18, 0.25, 0.35, 0.5, 0.7, 1.0],
               eps=[0.0, 0.01, 0.1, 1.0], Ns=[8, 32, 128, 256, 512, 1024], P=8, steps=300),
)


def _ch3_box_configs(scale):
    """Every (B, eps, N) of ``BOX`` with the feature 1[n = 1]; and without it (its ablation)
    in the box [-1, 1]^M at eps = 0 and 0.1."""
    s = pick(scale, **BOX)
    one = lambda B, e, N, mark: dict(B=B, eps=e, N=N, P=s["P"], K=4, steps=s["steps"],
                                     lr=[0.05, 1e-4], seed=N, mark_first=mark, **WORST_ARCH)
    return ([one(B, e, N, True) for B in s["B"] for e in s["eps"] for N in s["Ns"]]
            + [one(1.0, e, N, False) for e in EPS for N in s["Ns"]])


def box_curves(configs, results) -> dict:
    """The box scan as {(B, eps, mark_first): (Ns, best, starts)}: ``best`` (len(Ns),) the
    largest flip max_i |Delta T_i| found over all starts at each N, ``starts`` (len(Ns), P+1)
    each start's (the scaled construction first, where it is a start)."""
    cells = {}
    for c, r in zip(configs, results):
        cells.setdefault((c["B"], c["eps"], c["mark_first"]), []).append((c["N"], dec(r["end"])))
    out = {}
    for k, rows in cells.items():
        rows.sort(key=lambda t: t[0])
        ends = np.stack([e for _, e in rows])
        out[k] = (np.array([n for n, _ in rows]), ends.max(1), ends)
    return out


def crossover(Ns, starts) -> float:
    """N*: where the hard-attention line through the shortest length (N |Delta T| growing
    like N from its value there) reaches the value at the longest length,
    N_max best(N_max) / best(N_min). A lower bound on the length where the 1/N regime
    begins; it brackets that length only when it lies strictly between N_min and N_max."""
    best = starts.max(1)
    return float(Ns[-1] * best[-1] / best[0])


def crossover_fit(curves, eps, n_boot=400, seed=0):
    """Least-squares fit of log N* = a + b B^2 over the B whose N* (:func:`crossover`, mark
    on) lies strictly inside (2 N_min, N_max / 2) at ``eps``; a 95% bootstrap interval of b
    (the starts resampled at each N). None when fewer than three B qualify."""
    pts = []
    for (B, e, mark), (Ns, _, st) in sorted(curves.items()):
        if e == eps and mark and 2 * Ns[0] < crossover(Ns, st) < Ns[-1] / 2:
            pts.append((B, Ns, st))
    if len(pts) < 3:
        return None
    x = np.array([B**2 for B, _, _ in pts])
    fit = lambda ys: np.polyfit(x, np.log(ys), 1)[0]
    b = fit([crossover(Ns, st) for _, Ns, st in pts])
    rng = np.random.default_rng(seed)
    boot = [fit([crossover(Ns, st[:, rng.integers(0, st.shape[1], st.shape[1])])
                 for _, Ns, st in pts]) for _ in range(n_boot)]
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return dict(B=[B for B, _, _ in pts], N_star=[crossover(Ns, st) for _, Ns, st in pts],
                slope=float(b), low=float(lo), high=float(hi))


N_INF = dict(
    ci=[16, 32, 64, 128, 256, 512, 1024],
    book=[16, 32, 64, 128, 256, 512, 1024, 2048],
    paper=[16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
)
N_LIP = dict(
    ci=[8, 32, 128, 512],
    book=[8, 32, 128, 512, 1024],
    paper=[8, 32, 128, 512, 2048, 8192],
)


def _ch3_influence_configs(scale):
    P, B, K = pick(scale, ci=(16, 2, 8), book=(24, 2, 8), paper=(128, 8, 32))
    return [
        dict(eps=e, N=N, P=P, B=B, K=K, seed=0, **ARCH)
        for e in EPS
        for N in N_INF[scale]
    ]


def _ch3_recognition_configs(scale):
    P, N_max = pick(scale, ci=(400, 9), book=(1000, 10), paper=(20000, 13))
    return [
        dict(eps=e, N=N, P=P, margin=0.02, seed=3, **ARCH)
        for e in EPS
        for N in range(1, N_max + 1)
    ]


def _ch3_lipschitz_configs(scale):
    P, B = pick(scale, ci=(16, 2), book=(24, 2), paper=(128, 8))
    return [
        dict(eps=e, N=N, P=P, B=B, seed=5, **ARCH)
        for e in EPS
        for N in N_LIP[scale]
    ]


# cost models: CPU-seconds of one thread, constants fitted on ci runs (`sensbook
# calibrate`)
def _work(c, S):
    """Forward work of one string of S positions for one model of the chapter-3
    architecture."""
    return S * (S + 8 * c["D"]) * c["D"] * c["L"]


def _worst_cost(c):
    return 0.2 + 5.0e-8 * c["P"] * c["steps"] * _work(c, c["N"] + 1)


def _worst_influence_cost(c):
    strings = 2 + len(flip_bits(c["N"], c["K"]))
    return 0.6 + 5.0e-10 * c["P"] * c["steps"] * strings * _work(c, c["N"] + 1)


def _box_cost(c):
    strings = 2 + len(flip_bits(c["N"], c["K"]))
    return 0.3 + 5.0e-10 * (c["P"] + 1) * c["steps"] * strings * _work(c, c["N"] + 1)


def _influence_cost(c):
    strings = c["B"] * (1 + len(flip_bits(c["N"], c["K"])))
    return 0.02 + 1.0e-10 * c["P"] * strings * _work(c, c["N"] + 1)


def _recognition_cost(c):
    return 0.05 + 4.0e-10 * c["P"] * 2 ** c["N"] * _work(c, c["N"] + 1)


def _lipschitz_cost(c):
    return 0.02 + 4.0e-10 * c["P"] * c["B"] * _work(c, c["N"] + 1)


register(
    Experiment(
        "ch3.worst_blowup",
        _ch3_worst_configs,
        "sensbook.experiments.ch3:worst_blowup_one",
        _worst_cost,
        doc="worst case over theta: gradient ascent on the blowup",
    )
)
register(
    Experiment(
        "ch3.worst_influence",
        _ch3_worst_influence_configs,
        "sensbook.experiments.ch3:worst_influence_one",
        _worst_influence_cost,
        doc="worst case over theta of the largest flip, eps = 0 and > 0",
    )
)
register(
    Experiment(
        "ch3.box_scan",
        _ch3_box_configs,
        "sensbook.experiments.ch3:box_scan_one",
        _box_cost,
        doc="worst case of the flip over the box [-B, B]^M, per B, eps and N",
    )
)
register(
    Experiment(
        "ch3.influence",
        _ch3_influence_configs,
        "sensbook.experiments.ch3:influence_one",
        _influence_cost,
        doc="max one-flip influence against N, eps = 0 and > 0",
    )
)
register(
    Experiment(
        "ch3.recognition",
        _ch3_recognition_configs,
        "sensbook.experiments.ch3:recognition_one",
        _recognition_cost,
        doc="what random models recognise on all 2^N strings, eps = 0 and > 0",
    )
)
register(
    Experiment(
        "ch3.lipschitz",
        _ch3_lipschitz_configs,
        "sensbook.experiments.ch3:lipschitz_one",
        _lipschitz_cost,
        doc="Lipschitz constant in theta against N",
    )
)
