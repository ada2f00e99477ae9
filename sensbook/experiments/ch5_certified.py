"""Experiments of the chapter "The size of the solution set, certified" (after ch5_measure_zero).

* ``ch5_certified.radius``: the certified radius r(N) of the hard-attention FIRST, the uniform
  FIRST, MAJORITY and PARITY constructions (:func:`sensbook.certify.certified_radius`): the
  largest l-infinity radius around the construction inside which every theta recognises the
  function on every string of length N (margin :data:`MARGIN`), and the certified lower bound
  on the log-volume of the solution set inside the box Theta = [-B, B]^M;
* ``ch5_certified.attack``: r_up, the smallest radius at which a projected sign-gradient
  attack (:func:`sensbook.attack.attack_radius`) finds a theta in the box that breaks a label,
  beside the certified r of the same construction and N (r <= true radius <= r_up);
* ``ch5_certified.log_volume``: the exact-recognition volume log V_f(N) itself, by subset
  simulation (:func:`sensbook.splitting.subset_volume`) in a small space, per target against
  N, beside plain Monte Carlo and a certified box; :func:`growth_laws` compares exponential,
  polynomial and flat laws of it by held-out likelihood;
* ``ch5_certified.volume``: the approximate-solution volume (Conjecture 5.5's form): random
  theta (uniform in the box, and the book's initialisation) and their accuracy on all 2^N
  strings against MAJORITY and PARITY.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..attack import attack, attack_radius
from ..boolean import MAJORITY, PARITY, check_n, strings
from ..certify import certified_radius
from ..zonotope import grow_box, tight_bounds
from ..splitting import ReadoutScore, recognition_score, subset_volume
from ..constructions import BUILDERS, construction_parameters, target
from ..model import Recognizer
from ..profile import truth_table
from ..profiles import wilson_interval
from ..settings import device
from . import Experiment, pick, register
from .ch5 import K0_MARGIN

NAMES = ("FIRST_HARD", "FIRST", "MAJORITY", "PARITY")
#: The label margin xi of the certificate: ch5_measure_zero's xi (the census margin 0.01), so
#: the certified set is the set A_N of Theorem 4.5's statement, not the sign-correct set.
MARGIN = K0_MARGIN
#: The box Theta = [-B, B]^M of the theorem (the uniform initialisation's box).
BOX = 1.0
#: Bisection stops when the smallest failed radius is within this factor of the largest
#: certified one.
RTOL = 0.01


def radius_lengths(name: str, scale: str) -> list:
    """The lengths of the certified radius: N = 2 .. N_max (odd N only for MAJORITY: even N
    has tie strings, where the construction's layer norm is undefined)."""
    top = pick(scale, ci=8, book=11, paper=16)
    return [N for N in range(2, top + 1) if name != "MAJORITY" or N % 2]


def boxed_construction(name: str) -> Recognizer:
    """The construction scaled into the box [-1, 1]^M where needed (float64, eps = 0).

    Only PARITY has entries outside (2 and -2 in its first feed-forward block, the bump
    relu(a + u) - 2 relu(a) + relu(a - u)). Its ReLUs are positively homogeneous: halving the
    first unit's input weights and the bump's output weights of the other two units writes
    the bump at half its height, b -> b/2, which only rescales what layer 2 reads (the sign of
    the two heads' difference is unchanged; the erasure of b in layer 2 is exact at any scale).
    """
    if name != "PARITY":
        return BUILDERS[name]()
    params, H = construction_parameters(name)
    params = {k: np.array(v, dtype=float) for k, v in params.items()}
    params["layers.0.W1"][:, 0] *= 0.5
    params["layers.0.W2"][1:3] *= 0.5
    return Recognizer.from_parameters(params, H=H, dtype=torch.float64)


def log_volume_bound(theta0: torch.Tensor, r, B: float = BOX) -> float:
    """log of a lower bound on Leb(A_N cap Theta) / Leb(Theta), Theta = [-B, B]^M, when the
    box of half-width r around theta0 (a number: the l-infinity ball; or M numbers, a box
    shaped per parameter) lies in A_N: the log-volume of (box cap Theta) over (2B)^M,
    sum_i log(len_i / 2B), len_i the length of [theta0_i - r_i, theta0_i + r_i] cap [-B, B].
    Equal to M log(r/B) when a ball is inside Theta; -inf when some r_i = 0."""
    r = torch.as_tensor(r, dtype=torch.float64)
    if (r <= 0).any():
        return -math.inf
    t = theta0.double().flatten()
    if (t.abs() > B).any():
        raise ValueError(f"theta0 must lie in the box [-{B}, {B}]^M")
    length = torch.clamp(t + r, max=B) - torch.clamp(t - r, min=-B)
    return float(torch.log(length / (2 * B)).sum())


def _radius_configs(scale):
    return [dict(name=name, N=N, margin=MARGIN, rtol=RTOL) for name in NAMES
            for N in radius_lengths(name, scale)]


# CPU-seconds per string x (N+1)^3 for the whole bisection (about 15 bound evaluations; the
# attention's (N+1)^2 scores and the chunked layers make it steeper than one forward pass),
# fitted on the ci runs and the book run's N = 9..12 (measured 76 s at book).
_RADIUS_UNIT = {"FIRST_HARD": 1.35e-6, "FIRST": 1.35e-6, "MAJORITY": 0.2e-6, "PARITY": 2.8e-6}


def _radius_cost(c):
    return 0.08 + _RADIUS_UNIT[c["name"]] * 2 ** c["N"] * (c["N"] + 1) ** 3


def radius_one(config: dict) -> dict:
    """Experiment ``ch5_certified.radius``: :func:`certified_radius` of one construction
    (:func:`boxed_construction`) on all 2^N strings, margin ``margin``, bisection to ``rtol``.

    Returns ``radius``, ``upper`` (the smallest radius found not certified), ``steps``,
    ``n_uncertifiable`` (strings whose layer-norm variance interval reached 0 at ``upper``),
    ``M``, ``theta_max`` (|theta0|_inf) and ``log_volume`` (:func:`log_volume_bound` at
    ``radius``, None when the radius is 0)."""
    name, N = config["name"], check_n(config["N"])
    model = boxed_construction(name)
    x = strings(N, dtype=torch.float64)
    res = certified_radius(model, x, target(name)(x), margin=config["margin"],
                           rtol=config["rtol"], r_max=BOX)
    theta0 = model.flat()[0]
    lv = log_volume_bound(theta0, res["radius"])
    return {**res, "upper": None if math.isinf(res["upper"]) else res["upper"], "M": model.M,
            "theta_max": float(theta0.abs().max()),
            "log_volume": None if math.isinf(lv) else lv}


# ---- the attack: an upper bound r_up on the largest radius ------------------------------
#: The attack's search per radius tried, by scale: starts (the centre and uniform points of
#: the box), random corners, sign-gradient steps; bisection to ATTACK_RTOL.
ATTACK_SEARCH = dict(ci=dict(starts=16, corners=64, steps=30),
                     book=dict(starts=16, corners=64, steps=30),
                     paper=dict(starts=48, corners=256, steps=60))
ATTACK_RTOL = 0.1
#: The tighter certificate (:func:`sensbook.zonotope.tight_bounds`: affine arithmetic
#: intersected with the intervals) at the attack's lengths up to this N, by scale (its
#: bounds cost about 20 times the intervals'), bisected to TIGHT_RTOL between the interval
#: radius r and TIGHT_SPAN r; the box shaped per parameter tensor
#: (:func:`sensbook.zonotope.grow_box`) at the shortest length.
TIGHT_NMAX = dict(ci=3, book=5, paper=8)
TIGHT_RTOL, TIGHT_SPAN = 0.02, 64.0


def attack_lengths(name: str, scale: str) -> list:
    """The lengths of the attack (odd only for MAJORITY): fewer than the certificate's, its
    search costs a few hundred forward and backward passes per radius tried."""
    top = pick(scale, ci=5, book=6, paper=8)
    return [N for N in range(3, top + 1) if name != "MAJORITY" or N % 2]


def _attack_configs(scale):
    top = TIGHT_NMAX[scale]
    return [dict(name=name, N=N, margin=MARGIN, rtol=ATTACK_RTOL, seed=7, tight=N <= top,
                 grow=N == attack_lengths(name, scale)[0], **ATTACK_SEARCH[scale])
            for name in NAMES for N in attack_lengths(name, scale)]


# CPU-seconds per (model evaluation x string x position^2 x parameter) of the attack (about
# ten radii tried), fitted on the book runs at N = 5, 6 (measured 3.3 to 7.0 s at N = 6).
_ATTACK_UNIT = 0.45e-7


# CPU-seconds of one tight bound: a fixed part and one per (string x position^2 x
# parameter), fitted on PARITY and the FIRSTs at N = 3..6 before the fresh symbols and balls;
# the bisection takes about 11 bounds (to 2 % in [r, 64 r]), grow_box about one per
# parameter tensor. Measured since (book, AMD EPYC): PARITY's cells cost up to 3.6 times
# this, the FIRSTs' and MAJORITY's less; not refitted.
_TIGHT_FIXED, _TIGHT_UNIT = 0.15, 3.5e-7


def _attack_cost(c):
    per_radius = (c["starts"] * (c["steps"] + 1) * 3 + c["corners"]) * 2 ** c["N"] * (c["N"] + 1) ** 2
    model = boxed_construction(c["name"])
    cost = 0.5 + _ATTACK_UNIT * 10 * per_radius * model.M / 1000
    one = _TIGHT_FIXED + _TIGHT_UNIT * 2 ** c["N"] * (c["N"] + 1) ** 2 * model.M
    if c.get("tight"):
        cost += 11 * one + _ATTACK_UNIT * per_radius * model.M / 1000
    if c.get("grow"):
        cost += (1 + 16 * model.L + 4) * one
    return cost


def attack_one(config: dict) -> dict:
    """Experiment ``ch5_certified.attack``: the certified radius r (rtol 0.01, as
    ``radius_one``) and :func:`sensbook.attack.attack_radius` from r (doubling, then bisection
    to ``rtol``) of one construction on all 2^N strings with margin ``margin``; with
    ``tight``, the tighter certified radius of :func:`sensbook.zonotope.tight_bounds`; with
    ``grow``, the box grown per parameter tensor from it (:func:`sensbook.zonotope.grow_box`).

    Returns ``radius``, ``r_up`` (None when no violation up to the box B), ``r_ok`` (the
    largest radius where the attack found none), ``worst_at_r`` (the attack's smallest
    min_x s(x) T at r), ``t0`` (min_x s(x) T at theta_0) and ``tries``; with ``tight``,
    ``r_tight`` (bisected to TIGHT_RTOL in [r, TIGHT_SPAN r]), ``worst_at_tight`` (the
    attack at r_tight), ``lv_cube`` and ``lv_tight`` (:func:`log_volume_bound` of the two
    cubes); with ``grow``, ``lv_grown`` and ``grown`` (tensor -> factor kept)."""
    name, N = config["name"], check_n(config["N"])
    model = boxed_construction(name)
    x = strings(N, dtype=torch.float64)
    y = target(name)(x)
    search = {k: config[k] for k in ("starts", "corners", "steps", "seed")}
    r = certified_radius(model, x, y, margin=config["margin"], rtol=RTOL, r_max=BOX)["radius"]
    up = attack_radius(model, x, y, margin=config["margin"], r_start=max(r, 1e-9), r_max=BOX,
                       rtol=config["rtol"], **search)
    at_r = attack(model, x, y, r, margin=config["margin"], **search)
    with torch.no_grad():
        t0 = float((model(x)[0] * (y.double() * 2 - 1)).min())
    out = {"radius": r, "r_up": None if math.isinf(up["r_up"]) else up["r_up"],
           "r_ok": up["r_ok"], "worst_at_r": at_r["worst"], "t0": t0, "tries": up["tries"]}
    if config.get("tight"):
        theta0 = model.flat()[0]
        rt = certified_radius(model, x, y, margin=config["margin"], rtol=TIGHT_RTOL,
                              r_min=r, r_max=TIGHT_SPAN * r, bounds=tight_bounds)["radius"]
        out.update(r_tight=rt, lv_cube=log_volume_bound(theta0, r),
                   lv_tight=log_volume_bound(theta0, rt),
                   worst_at_tight=attack(model, x, y, rt, margin=config["margin"],
                                         **search)["worst"])
        if config.get("grow"):
            g = grow_box(model, x, y, rt, margin=config["margin"], factors=(4.0,))
            out.update(lv_grown=log_volume_bound(theta0, g["radii"]), grown=g["grown"])
    return out


# ---- the exact-recognition volume V_f(N), by subset simulation -------------------------
#: The architectures of the MAJORITY and the PARITY constructions: the two spaces of the
#: approximate-solution volume, and the PARITY one the second space of V_f(N).
SPACES = {"MAJORITY": dict(D=8, L=1, H=1, F=6), "PARITY": dict(D=18, L=2, H=2, F=16)}
#: The small space of the volume curves (float64, eps = 0) and the targets: the hard FIRST's
#: target is FIRST itself, so in one space its volume is FIRST's; CONSTANT accepts every
#: string; RANDOM is a balanced function with a fixed random table per N.
VOL_SPACE = dict(D=4, L=1, H=1, F=4)
#: The spaces of log V_f(N): the small one (M = 149), and the PARITY construction's
#: architecture (M = 4083), where an exact PARITY transformer exists at every N.
VOL_SPACES = {"small": VOL_SPACE, "PARITY": SPACES["PARITY"]}
VOL_TARGETS = ("CONSTANT", "FIRST", "MAJORITY", "PARITY", "RANDOM")


def vol_sizes(scale: str) -> dict:
    """Lengths per target and the estimator's sizes (points per level, runs, moves, the walk's
    step, the most levels, the most points per level after the mixing check's doublings,
    the read-outs w per run) by scale. ``ci`` runs fewer lengths with fewer points and runs
    (PARITY's runs agree there at N = 2 and 3). Over phi the walk's step is 0.25 of the spread
    (measured on PARITY at N = 4, 12 runs: the runs' spread 1.4 nats, 1.85 at the default
    0.5). The random function is refused at N = 4 (its runs end at no point, at 150 CPU s),
    so it stops at 3; PARITY at N = 4 is at the edge of what ``book``'s sizes resolve.
    ``spaces``: the lengths per target in the PARITY construction's space, where a point costs
    more (measured: the constant at N = 6 took 21 CPU s there, MAJORITY at N = 5 54 and at
    N = 7 336); there PARITY at N = 4 was refused with ``book``'s points (4 runs: -21.8,
    -23.5, -27.8 and no point; 46 CPU s), and estimated with ``paper``'s (n = 1000, 20
    moves, 1024 read-outs; 4 runs from -20.0 to -23.9: -21.1 [-23.2, -19.0], 313 CPU s);
    ``book``'s 6 runs with 20 moves give -23.5 [-24.4, -22.6] in 123 CPU s, with 1024
    read-outs -22.7 [-23.9, -21.4] in 331 (at n = 800). ``paper``'s lengths of PARITY and
    the random function stop two or three past ``book``'s: such a cell is priced as refused
    (:func:`_vol_cost`), 0.5 to 3 CPU hours each, and a longer one would cost more
    than it could resolve."""
    big = lambda **kw: {"PARITY": {t: kw.get(t, kw["Ns"]) for t in VOL_TARGETS}}
    return pick(scale,
                ci=dict(Ns=[2, 3, 4], PARITY=[2, 3], RANDOM=[2, 3], MAJORITY=[3, 5, 7], n=200,
                        runs=4, moves=10, step=0.25, max_levels=20, n_max=400, readouts=256,
                        spaces=big(Ns=[2, 3], MAJORITY=[3])),
                book=dict(Ns=[2, 3, 4, 5, 6], PARITY=[2, 3, 4], RANDOM=[2, 3],
                          MAJORITY=[3, 5, 7], n=400, runs=6, moves=10, step=0.25,
                          max_levels=20, n_max=800, readouts=256,
                          spaces=big(Ns=[2, 3, 4], PARITY=[2, 3], RANDOM=[2, 3],
                                     MAJORITY=[3])),
                paper=dict(Ns=list(range(2, 13)), PARITY=list(range(2, 7)),
                           RANDOM=list(range(2, 6)), MAJORITY=[3, 5, 7, 9, 11], n=1000,
                           runs=6, moves=20, step=0.25, max_levels=60, n_max=4000,
                           readouts=1024,
                           spaces=big(Ns=list(range(2, 9)), PARITY=list(range(2, 6)),
                                      RANDOM=list(range(2, 6)), MAJORITY=[3, 5, 7])))


def vol_lengths(name: str, scale: str, space: str = "small") -> list:
    """The lengths of one target's volume curve at ``scale`` in ``space`` (a key of
    :data:`VOL_SPACES`; :func:`vol_sizes`)."""
    s = vol_sizes(scale)
    if space not in VOL_SPACES:
        raise ValueError(f"space must be one of {sorted(VOL_SPACES)}, got {space!r}")
    return s.get(name, s["Ns"]) if space == "small" else s["spaces"][space][name]


_HARD = ("PARITY", "RANDOM")


def vol_labels(name: str, N: int) -> torch.Tensor:
    """The target's labels on all 2^N strings (bool)."""
    x = strings(N)
    if name == "CONSTANT":
        return torch.ones(len(x), dtype=torch.bool)
    if name == "RANDOM":
        g = torch.Generator().manual_seed(1000 + N)
        y = torch.zeros(len(x), dtype=torch.bool)
        y[torch.randperm(len(x), generator=g)[: len(x) // 2]] = True
        return y
    return target(name)(x).bool()


def _vol_configs(scale):
    s = vol_sizes(scale)
    return [dict(target=t, N=N, margin=MARGIN, seed=17, space=sp, **VOL_SPACES[sp],
                 attack=ATTACK_SEARCH[scale] if sp == "small" else None,
                 **{k: s[k] for k in ("n", "runs", "moves", "step", "max_levels", "n_max",
                                      "readouts")})
            for sp in VOL_SPACES for t in VOL_TARGETS for N in vol_lengths(t, scale, sp)]


# CPU-seconds per (model x string x position^2), and per (phi x read-out w x string): fitted
# to the 18 configurations at book on the AMD EPYC (84 s measured, 76 predicted)
_VOL_UNIT, _READOUT_UNIT = 0.6e-7, 1.0e-8
#: per space: seconds per configuration, and the cost per unit of the small space's (the
#: PARITY construction's: its 11 configurations at book measured 48 s, predicted 48)
_VOL_SPACE_COST = {"small": (0.2, 1.0), "PARITY": (2.5, 2.0)}
#: per space: the certificates and attack around the best point, seconds a cell and per
#: (string x position^2) (book, AMD EPYC: they added 20 s to the small space's 18 cells,
#: 58 s to the construction's 11, 2 s at N = 2 to 13 s at N = 4 there)
_VOL_CERT_COST = {"small": (0.6, 2e-4), "PARITY": (1.0, 0.032)}
#: Plain Monte Carlo's points beside each estimate: as many as the estimator evaluated, at
#: least VOL_MC_MIN and at most VOL_MC_MAX (it resolves V down to about 10 / VOL_MC_MAX).
VOL_MC_MIN, VOL_MC_MAX = 20_000, 50_000


def _vol_mc(evaluations):
    return min(max(evaluations, VOL_MC_MIN), VOL_MC_MAX)


def _vol_cost(c):
    # levels over phi (measured at book): none for the constant, FIRST and MAJORITY up to
    # N = 5 (their read-out alone makes a tenth of phi recognise), one at N = 7; PARITY and
    # RANDOM about 2 (N - 2) + 1, and their first size is sometimes refused (twice the points).
    # Beyond book's lengths a hard cell is priced as refused (PARITY at N = 5 with paper's
    # sizes ran past 40 CPU min, priced at 507 s as resolved): every size from n to n_max,
    # each run climbing until its level stalls (10 levels more, at most max_levels).
    hard = c["target"] in _HARD
    levels = 2 * (c["N"] - 2) + 1 if hard else int(c["N"] >= 7)
    sizes = 1.5 if hard else 1
    if hard and c["N"] > max(vol_lengths(c["target"], "book", c.get("space", "small"))):
        levels = min(levels + 10, c["max_levels"])
        sizes = sum(2 ** k for k in range(int(math.log2(c["n_max"] / c["n"])) + 1))
    evals = c["runs"] * c["n"] * (1 + levels * c["moves"]) * sizes
    fwd = _VOL_UNIT * 2 ** c["N"] * (c["N"] + 1) ** 2
    base, unit = _VOL_SPACE_COST[c.get("space", "small")]
    cert, per = _VOL_CERT_COST[c.get("space", "small")]
    return (base + cert + per * 2 ** c["N"] * (c["N"] + 1) ** 2
            + unit * (fwd * (evals + _vol_mc(evals))
                      + _READOUT_UNIT * c["readouts"] * 2 ** c["N"] * evals))


def vol_one(config: dict) -> dict:
    """Experiment ``ch5_certified.log_volume``: log V_f(N), the fraction of theta in
    [-1, 1]^M (the space ``D, L, H, F``, eps = 0, float64) that recognises the target on all
    2^N strings with margin ``margin``, by :func:`sensbook.splitting.subset_volume` over the
    parameters other than the read-out, the read-out integrated out
    (:class:`sensbook.splitting.ReadoutScore`, ``readouts`` vectors w per run); and a plain
    Monte Carlo count over all of theta (the check of both).

    Returns ``log_volume``, ``interval``, ``runs`` (-inf, a run that found no point above 0,
    as None, like the other infinite values), ``levels``, ``evaluations``, ``M``,
    ``mc_hits`` and ``mc_n`` (plain Monte Carlo over all of theta on as many uniform points
    as the estimator evaluated, within :data:`VOL_MC_MIN` and :data:`VOL_MC_MAX`),
    ``mixed`` and ``n`` (the mixing check, the points per level reported) and ``certified``
    (:func:`log_volume_bound` of the certified box around the best point the estimator
    found, by :func:`sensbook.zonotope.tight_bounds`, bisected to TIGHT_RTOL; None when it
    found none) beside ``certified_interval`` (the cube of interval arithmetic alone,
    :func:`sensbook.certified_radius`), ``r_tight`` (that radius); with ``attack`` (the
    search, as ``ATTACK_SEARCH``; the small space only: in the construction's space it
    costs about as much again as the estimate, measured at book), ``r_up``
    (:func:`sensbook.attack.attack_radius` from ``r_tight`` to ATTACK_RTOL: the smallest
    radius at which the attack broke a label;
    None where it broke none up to the box, or no cube was certified or no attack run) and
    ``cube_upper`` (:func:`log_volume_bound` at ``r_up``: no cube around the point that
    keeps every label is larger). Where the estimate is refused, the interval's upper end
    is plain Monte Carlo's 95 % Wilson upper end (a bound that holds), and ``split_bound`` the
    splitting's own (the runs' last level: no bound where their chains were trapped)."""
    N = check_n(config["N"])
    model = Recognizer(1, config["D"], config["L"], config["H"], config["F"],
                       dtype=torch.float64)
    x = strings(N, dtype=torch.float64)
    y = vol_labels(config["target"], N)
    phi = ReadoutScore(model, x, y, margin=config["margin"], readouts=config["readouts"])
    res = subset_volume(phi, phi.M, n=config["n"], runs=config["runs"],
                        moves=config["moves"], scale=config["step"],
                        max_levels=config["max_levels"],
                        n_max=config["n_max"], seed=config["seed"])
    score = recognition_score(model, x, y, margin=config["margin"])
    cert = {"interval": -math.inf, "tight": -math.inf}    # a cube around the best point found
    r, r_up, cube_up = 0.0, math.inf, math.inf
    if res["best_score"] > 0:
        best = res["best_theta"]                # completed with its own run's read-outs
        m0 = model.like().set_flat(best[None])
        for kind, bounds, rtol in (("interval", None, RTOL),
                                   ("tight", tight_bounds, TIGHT_RTOL)):
            r = certified_radius(m0, x, y, margin=config["margin"], rtol=rtol, r_max=BOX,
                                 bounds=bounds)["radius"]
            cert[kind] = log_volume_bound(best, r)
        # r is now the affine (tight) radius, the last one bisected
        if r > 0 and config.get("attack"):        # how far the tight cube is from the largest
            r_up = attack_radius(m0, x, y, margin=config["margin"], r_start=r, r_max=BOX,
                                 rtol=ATTACK_RTOL, seed=config["seed"],
                                 **config["attack"])["r_up"]
            cube_up = log_volume_bound(best, min(r_up, 2 * BOX))
    g = torch.Generator().manual_seed(config["seed"] + 7)
    hits, mc_n = 0, 0
    while mc_n < _vol_mc(res["evaluations"]):
        th = torch.rand(5000, model.M, generator=g, dtype=torch.float64) * 2 - 1
        hits += int((score(th) > 0).sum())
        mc_n += len(th)
    log_v, interval = res["log_volume"], list(res["interval"])
    if not res["mixed"]:
        interval[1] = math.log(wilson_interval(hits, mc_n)[1])
    return {"log_volume": None if math.isinf(log_v) else log_v,
            "interval": [None if math.isinf(v) else v for v in interval],
            "split_bound": None if res["mixed"] else res["interval"][1],
            "runs": [None if math.isinf(v) else v for v in res["runs"]],
            "levels": res["levels"], "evaluations": res["evaluations"],
            "M": model.M, "mc_hits": hits, "mc_n": mc_n, "mixed": res["mixed"], "n": res["n"],
            "r_tight": r, "r_up": None if math.isinf(r_up) else r_up,
            "cube_upper": None if math.isinf(cube_up) else cube_up,
            **{k: None if math.isinf(v) else v
               for k, v in (("certified", cert["tight"]),
                            ("certified_interval", cert["interval"]))}}


def _cv(logs):
    """The coefficient of variation of the runs' V from their logs (the se of log mean V
    times sqrt(runs), by the delta method: :func:`sensbook.splitting.subset_volume`)."""
    w = np.exp(logs - logs.max())
    return float(w.std(ddof=1) / w.mean())


def vol_curves(configs, results, space: str = "small") -> dict:
    """target -> the curve of ``ch5_certified.log_volume`` in ``space`` (a configuration
    without ``space`` is the small one) over N: arrays ``N``, ``log_v``
    (the estimate; for a refused one, its upper bound), ``se`` (the standard error of the
    log of the runs' mean V; 0 where refused), ``censored`` (refused: only the upper bound),
    ``lo``, ``hi`` (the interval), ``mc_upper`` (log of plain Monte Carlo's 95 % Wilson upper
    end at equal evaluations: its floor) and ``certified`` (-inf where none)."""
    out = {}
    for c, r in sorted(zip(configs, results), key=lambda cr: (cr[0]["target"], cr[0]["N"])):
        if c.get("space", "small") != space:
            continue
        runs = np.array([-np.inf if v is None else v for v in r["runs"]])
        refused = r["log_volume"] is None
        row = dict(N=c["N"], censored=refused,
                   log_v=r["interval"][1] if refused else r["log_volume"],
                   se=0.0 if refused else _cv(runs) / math.sqrt(len(runs)),
                   lo=-np.inf if refused else r["interval"][0], hi=r["interval"][1],
                   mc_upper=math.log(wilson_interval(r["mc_hits"], r["mc_n"])[1]),
                   certified=-np.inf if r["certified"] is None else r["certified"])
        d = out.setdefault(c["target"], {k: [] for k in row})
        for k, v in row.items():
            d[k].append(v)
    return {t: {k: np.array(v) for k, v in d.items()} for t, d in out.items()}


# ---- the approximate-solution volume ----------------------------------------------------
VOLUME_INITS = ("uniform", "xavier_normal")      # the box [-1, 1]^M; the book's initialisation
VOLUME_NS = [3, 5, 7, 9, 11]                     # odd: MAJORITY has no ties


def volume_sizes(scale: str) -> dict:
    """Models per (space, initialisation) and per configuration."""
    return pick(scale, ci=dict(MAJORITY=400, PARITY=100, block=100),
                book=dict(MAJORITY=3000, PARITY=600, block=300),
                paper=dict(MAJORITY=100_000, PARITY=20_000, block=2000))


def _volume_configs(scale):
    s = volume_sizes(scale)
    return [dict(space=sp, init=init, N=VOLUME_NS, members=[a, min(a + s["block"], s[sp])],
                 seed=1000 * j + a)
            for j, (sp, init) in enumerate((sp, i) for sp in SPACES for i in VOLUME_INITS)
            for a in range(0, s[sp], s["block"])]


# CPU-seconds per (model x string x position), by space, fitted on the ci runs and checked on
# the book runs (measured 67 s and 72 s at book).
_VOLUME_UNIT = {"MAJORITY": 0.2e-6, "PARITY": 0.9e-6}


def _volume_cost(c):
    n = c["members"][1] - c["members"][0]
    return 0.1 + _VOLUME_UNIT[c["space"]] * n * sum(2**N * (N + 1) for N in c["N"])


@torch.no_grad()
def volume_one(config: dict) -> dict:
    """Experiment ``ch5_certified.volume``: a block of random models of one space and
    initialisation (model j of the block: ``Recognizer.random(1, ..., seed=seed + j)``, eps =
    0, float32), labelled with margin 0 on all 2^N strings at each N of ``N``. Returns, per N,
    the number of strings each model gets right against MAJORITY and PARITY (``majority``,
    ``parity``: lists over N of lists over models; undecided and non-finite labels are wrong)
    and ``n_strings`` (2^N per N). Blocks merge by concatenation."""
    sp = SPACES[config["space"]]
    a, b = config["members"]
    theta = torch.cat([Recognizer.random(1, sp["D"], sp["L"], sp["H"], sp["F"],
                                         init=config["init"], seed=config["seed"] + j).flat()
                       for j in range(b - a)])
    pop = Recognizer(b - a, sp["D"], sp["L"], sp["H"], sp["F"]).set_flat(theta).to(device())
    out = {"majority": [], "parity": [], "n_strings": []}
    for N in config["N"]:
        N = check_n(N)
        table = truth_table(pop, N, margin=0.0, progress=False).cpu()
        x = strings(N)
        for key, f in (("majority", MAJORITY), ("parity", PARITY)):
            want = f(x).to(torch.int8)
            out[key].append((table == want).sum(-1).tolist())
        out["n_strings"].append(2**N)
    return out


def volume_merge(configs, results) -> dict:
    """(space, init, function, N) -> accuracies (models,) over the merged blocks."""
    acc = {}
    for c, r in sorted(zip(configs, results), key=lambda cr: cr[0]["members"][0]):
        for fn in ("majority", "parity"):
            for N, right, n in zip(c["N"], r[fn], r["n_strings"]):
                acc.setdefault((c["space"], c["init"], fn.upper(), N), []).extend(
                    np.asarray(right, float) / n)
    return {k: np.array(v) for k, v in acc.items()}


register(Experiment("ch5_certified.radius", _radius_configs,
                    "sensbook.experiments.ch5_certified:radius_one", _radius_cost,
                    doc="certified l-inf radius of the constructions, and the volume bound"))
register(Experiment("ch5_certified.attack", _attack_configs,
                    "sensbook.experiments.ch5_certified:attack_one", _attack_cost,
                    doc="r_up: the smallest radius at which an attack breaks a label, beside r"))
register(Experiment("ch5_certified.log_volume", _vol_configs,
                    "sensbook.experiments.ch5_certified:vol_one", _vol_cost,
                    doc="log V_f(N): the exact-recognition volume by subset simulation"))
register(Experiment("ch5_certified.volume", _volume_configs,
                    "sensbook.experiments.ch5_certified:volume_one", _volume_cost,
                    doc="the approximate-solution volume: accuracy >= 1 - delta of random theta"))


# ---- growth laws of log V_f(N) ------------------------------------------------------------
#: The laws compared: log V = a + b g(N) with g(N) = N (exponential in N), log N (a power of
#: N), or a = log V (flat).
GROWTH_LAWS = {"exponential": lambda N: N, "polynomial": np.log, "flat": None}
#: Held-out log-likelihood units by which a law must beat every other to be named.
LAW_MARGIN = 2.0
#: The least misfit a law is allowed, in nats: a law fitted to two lengths fits them exactly,
#: and with precise estimates (the read-out integrated out: se 0.05 nats) its held-out
#: prediction would then be judged at that se. Laws are compared at about 30 % in V.
LAW_MISFIT_FLOOR = 0.3


def _law_nll(p, g, y, se, cens):
    a, b, log_s = p[0], p[1], p[2]
    mu = a + b * g
    sd = torch.sqrt(se**2 + torch.exp(2 * log_s))
    z = (y - mu) / sd
    ll = torch.where(cens, torch.special.log_ndtr(z),
                     -0.5 * z**2 - torch.log(sd) - 0.5 * math.log(2 * math.pi))
    return -ll.sum()


def _fit_law(g, y, se, cens, flat):
    g, y, se = (torch.as_tensor(v, dtype=torch.float64) for v in (g, y, se))
    cens = torch.as_tensor(cens, dtype=torch.bool)
    p = torch.tensor([float(y[~cens].mean()) if (~cens).any() else float(y.mean()), 0.0, -1.0],
                     dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([1.0, 0.0 if flat else 1.0, 1.0], dtype=torch.float64)
    opt = torch.optim.LBFGS([p], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        q = p * mask
        loss = _law_nll(torch.stack([q[0], q[1], p[2].clamp(_LOG_FLOOR, 5)]), g, y, se, cens)
        loss.backward()
        return loss
    opt.step(closure)
    return (p * mask).detach().clone().requires_grad_(False), p[2].detach().clamp(_LOG_FLOOR, 5)


_LOG_FLOOR = math.log(LAW_MISFIT_FLOOR)


def growth_laws(Ns, log_v, se, censored) -> dict:
    """Exponential, polynomial and flat laws for log V_f(N), compared by held-out likelihood.

    Parameters
    ----------
    Ns : array-like
        The lengths, ``(n,)``.
    log_v : array-like
        log V at each length; for a censored length, an upper bound on it.
    se : array-like
        Each estimate's standard error (its reported interval's half-width over 1.96).
    censored : array-like of bool
        True where only the upper bound is known (the estimator refused).

    Returns
    -------
    dict
        ``heldout`` (law -> the sum over lengths of the log-likelihood of each length's value
        under the law fitted to the other lengths: density, or the probability of lying below
        the bound for a censored one), ``verdict`` (the law that beats every other by at least
        :data:`LAW_MARGIN`, else ``"cannot tell"``), ``rate`` and ``rate_se`` (the
        exponential law's slope b in nats per unit of N, fitted on every length, and its
        standard error from the observed information), ``power`` and ``power_se`` (the
        polynomial law's exponent).

    Notes
    -----
    The model: log V(N) ~ Normal(a + b g(N), se_N^2 + s^2), s fitted (the laws' own misfit,
    at least :data:`LAW_MISFIT_FLOOR`), with the upper bounds entering as left-censored
    values. Needs at least three lengths with
    at least two uncensored values.
    """
    Ns, y, se = (np.asarray(v, dtype=float) for v in (Ns, log_v, se))
    cens = np.asarray(censored, dtype=bool)
    if not (len(Ns) == len(y) == len(se) == len(cens)) or len(Ns) < 3 or (~cens).sum() < 2:
        raise ValueError(f"growth_laws needs >= 3 lengths (Ns, log_v, se, censored of one "
                         f"length) with >= 2 uncensored values, got {len(Ns)} and "
                         f"{int((~cens).sum())}")
    out = {"heldout": {}}
    for law, fn in GROWTH_LAWS.items():
        g = np.zeros_like(Ns) if fn is None else fn(Ns)
        total = 0.0
        for i in range(len(Ns)):
            keep = np.arange(len(Ns)) != i
            p, log_s = _fit_law(g[keep], y[keep], se[keep], cens[keep], fn is None)
            total -= float(_law_nll(torch.stack([p[0], p[1], log_s]),
                                    torch.tensor(g[i:i + 1]), torch.tensor(y[i:i + 1]),
                                    torch.tensor(se[i:i + 1]), torch.tensor(cens[i:i + 1])))
        out["heldout"][law] = total
        if fn is not None:
            p, log_s = _fit_law(g, y, se, cens, False)
            h = torch.autograd.functional.hessian(
                lambda q: _law_nll(q, torch.tensor(g), torch.tensor(y), torch.tensor(se),
                                   torch.tensor(cens)), torch.stack([p[0], p[1], log_s]))
            cov = torch.linalg.pinv(h)
            key = "rate" if law == "exponential" else "power"
            out[key], out[key + "_se"] = float(p[1]), float(cov[1, 1].clamp_min(0).sqrt())
    ll = out["heldout"]
    best = max(ll, key=ll.get)
    out["verdict"] = best if all(ll[best] - v >= LAW_MARGIN for k, v in ll.items()
                                 if k != best) else "cannot tell"
    return out
