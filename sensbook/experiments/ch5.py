"""Chapter 5's experiments: the exact constructions (expressivity) and the measure-zero side.

* ``ch5.exact``: the PARITY/FIRST/MAJORITY constructions on every string, and at large N;
* ``ch5.basin``: perturbed constructions, P(exact) and accuracy per noise scale sigma;
  ``ch5.intro_basin``, the introduction's figure: the same for PARITY and the hard FIRST;
* ``ch5.k0_growth``: K_0(N) of one fixed set of random models followed across N;
* ``ch5.pf_map``: the parameter-function map P(f) at N = 3, 4, 5;
* ``ch5.drift``: the MAJORITY construction perturbed by a fixed sigma, its error on
  the two middle Hamming layers and its accuracy at N up to a few thousand (Conjecture 5.5);
* ``ch5.k0_band``: where the census's fixed models are sensitive, by Hamming layer.
"""
from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import torch

from ..boolean import check_n, strings
from ..constructions import BUILDERS, target
from ..model import Recognizer
from ..profile import profile_from_table, sensitivity_profile, truth_table
from ..settings import check_scale, device, scale as current_scale
from ..volume import (FunctionCensus, affine_class, basin_curve, parameter_function_map)
from . import Experiment, pick, register

# Sizes per scale in one place; the chapters print them. ``book`` fits chapter 5's budget of
# 420 CPU-seconds (one thread) for all six experiments (measured: 310 s on one book run for
# the first four, predicted about 340 s; ``ch5.drift`` and ``ch5.k0_band`` measured 2 s and
# 44 s, predicted 3 s and 60 s); ``paper`` is for a GPU.

SIZES = {
    "exact": dict(ci=dict(N_exh=10, N_big=100, n_big=500),
                  book=dict(N_exh=14, N_big=300, n_big=2000),
                  paper=dict(N_exh=18, N_big=1000, n_big=10_000)),
    "basin": dict(ci=dict(Ns=[4, 6, 8, 10], n_sigma=13, P=24, max_strings=1024, chunk=13,
                          hard_Ns=[32], hard_strings=64),
                  book=dict(Ns=[4, 6, 8, 10, 12], n_sigma=13, P=40, max_strings=1024,
                        chunk=13, hard_Ns=[64, 256], hard_strings=64),
                  paper=dict(Ns=[4, 6, 8, 10, 12, 14, 16, 20], n_sigma=25, P=256,
                         max_strings=16384, chunk=5, hard_Ns=[64, 256],
                         hard_strings=256)),
    "k0": dict(ci=dict(P=32, block=32, Ns=[4, 6, 8, 10], sampled=[16], n_samples=48),
               book=dict(P=96, block=48, Ns=[4, 6, 8, 10, 12, 14], sampled=[16, 20, 28],
                     n_samples=128),
               paper=dict(P=512, block=32, Ns=[4, 6, 8, 10, 12, 14, 16, 18, 20],
                      sampled=[32, 64, 128], n_samples=1024)),
    "variance": dict(ci=dict(Ns=[9, 17, 33, 65, 129], n=64),
                     book=dict(Ns=[9, 17, 33, 65, 129, 257, 513], n=128),
                     paper=dict(Ns=[9, 17, 33, 65, 129, 257, 513, 1025], n=256)),
    "pf": dict(ci=dict(n_models=16384, chunk=16384), book=dict(n_models=49152, chunk=16384),
               paper=dict(n_models=4_915_200, chunk=163_840)),
}
#: The random populations of the K_0 census: (D, L). Counting the 2L layer norms of the
#: post-LN recognizer (:func:`sensbook.theorem45_exponent`), only (24, 1) satisfies the
#: book's reading of Theorem 4.5's width condition, D >= 10 (2L) + 2.
K0_ARCHS = [(8, 1), (16, 1), (24, 1), (24, 2), (32, 2)]
K0_MARGIN, K0_N0 = 0.01, 4          # margin of the census; the length that fixes the models
#: The census is also run at this eps > 0 on the same theta, at the exhaustive lengths up to
#: ``K0_EPS_NMAX`` (the fixed models are chosen at eps = 0 either way).
K0_EPS, K0_EPS_NMAX = 0.1, 12
PF_ARCH, PF_NS, PF_BATCH = (8, 2), [3, 4, 5], 4096
BASIN_NOISE = ("uniform", "gaussian")


def sizes(what: str, scale: str | None = None) -> dict:
    """The sizes of chapter 5's part ``what`` (exact, variance, basin, k0, pf) at ``scale``."""
    if what not in SIZES:
        raise ValueError(f"what={what!r} is unknown; allowed: {', '.join(SIZES)}")
    return dict(SIZES[what][check_scale(current_scale() if scale is None else scale, "scale")])


def basin_lengths(name: str, scale: str | None = None) -> list:
    """The lengths of the basin experiment for one construction (odd ones for MAJORITY; the
    hard-attention FIRST also at the long sampled lengths ``hard_Ns``)."""
    return _lengths(name, sizes("basin", scale))


def _lengths(name: str, s: dict) -> list:
    return [N + (name == "MAJORITY") for N in s["Ns"]] + (
        s["hard_Ns"] if name == "FIRST_HARD" else [])


def _sigma_grid(s: dict) -> np.ndarray:
    """The noise scales of a basin experiment with sizes ``s``: log-spaced on [1e-4, 1]."""
    return np.logspace(-4, 0, s["n_sigma"])


def basin_sigmas(scale: str | None = None) -> np.ndarray:
    """The sigma grid of the basin experiment: log-spaced on [1e-4, 1]."""
    return _sigma_grid(sizes("basin", scale))


def _exact_configs(scale):
    s = sizes("exact", scale)
    out = []
    for name in ("PARITY", "FIRST", "MAJORITY"):
        out += [dict(name=name, N=N, n_samples=None) for N in range(1, s["N_exh"] + 1)
                if name != "MAJORITY" or N % 2]
        out.append(dict(name=name, N=s["N_big"] + (name == "MAJORITY"),
                    n_samples=s["n_big"], seed=0))
    return out


# CPU-seconds (one thread) per (string x position) of a float64 forward pass, and per (model
# x string x position) of a float32 population, fitted on measured ci runs and checked on a
# book run (basin 65.5 s measured / 66.8 s predicted; ``sensbook calibrate ch5``).
_UNIT = {"PARITY": 1.25e-6, "FIRST": 0.8e-6, "MAJORITY": 0.2e-6, "FIRST_HARD": 0.8e-6}


def _exact_cost(c):
    n = 2 ** c["N"] if c["n_samples"] is None else c["n_samples"]
    return 0.02 + 0.8 * _UNIT[c["name"]] * n * (c["N"] + 1) * (1 + (c["N"] + 1) / 256)


@torch.no_grad()
def exact_check(config: dict) -> dict:
    """Experiment ``ch5.exact``: one construction at one length, float64, eps = 0.

    ``config``: ``name``, ``N`` and ``n_samples`` (``None``: all 2^N strings, else that many
    uniform strings drawn with ``seed``). Returns ``correct`` (every sign right), ``min_abs_T``
    and ``max_abs_T`` (the achieved margin and its largest value), ``n_strings``.
    """
    name, N = config["name"], check_n(config["N"])
    if name == "MAJORITY" and N % 2 == 0:
        raise ValueError(f"N={N}: MAJORITY is built for odd N only")
    model = BUILDERS[name](device=device())
    f = target(name)
    n = config.get("n_samples")
    if n is None:
        x = strings(N, dtype=torch.float64)
    else:
        g = torch.Generator().manual_seed(int(config.get("seed", 0)))
        x = torch.randint(0, 2, (int(n), N), generator=g).double()
    step = max(1, 2**22 // (N + 1) ** 2)
    T = torch.cat([model(x[a:a + step].to(model.device))[0].cpu()
                   for a in range(0, len(x), step)])
    finite = bool(torch.isfinite(T).all())          # NaN/inf never counted as a sign
    return {"correct": finite and bool(torch.equal(T > 0, f(x))),
            "min_abs_T": float(T.abs().min()) if finite else None,
            "max_abs_T": float(T.abs().max()) if finite else None, "n_strings": len(x)}


def _basin_configs(scale, s=None, names=("PARITY", "FIRST", "MAJORITY"), kinds=BASIN_NOISE):
    """The pieces of ``ch5.basin`` at ``scale`` (sizes ``s``: default ``sizes("basin")``;
    ``ch5.intro_basin`` passes its own, PARITY only, uniform noise only)."""
    s = sizes("basin", scale) if s is None else s
    sig = [float(v) for v in _sigma_grid(s)]
    return [dict(name=name, kind=kind, N=N, sigmas=sig[a:a + s["chunk"]], first=a, P=s["P"],
                 seed=N, n_samples=None if 2**N <= s["max_strings"] else s["max_strings"])
            for kind in kinds for name in names
            for N in _lengths(name, s) for a in range(0, len(sig), s["chunk"])] + [
        # the hard-attention FIRST: uniform noise; at the long lengths on hard_strings
        # sampled strings and the upper half of the sigma grid (its sigma* is flat, above it)
        dict(name="FIRST_HARD", kind="uniform", N=N, sigmas=sig[a:], first=a, P=s["P"],
             seed=N, n_samples=(None if 2**N <= s["max_strings"] else
                                s["max_strings"] if N in s["Ns"] else s["hard_strings"]))
        for N in _lengths("FIRST_HARD", s)
        for a in [0 if N in s["Ns"] else len(sig) // 2]]


def _basin_cost(c):
    n = 2 ** c["N"] if c["n_samples"] is None else c["n_samples"]
    attention = 1 + max(0, c["N"] - 20) / 100    # the (N+1)^2 of attention, at long N
    return 0.05 + _UNIT[c["name"]] * len(c["sigmas"]) * c["P"] * n * (c["N"] + 1) * attention


def _nan_to_none(a):
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(a, float).ravel()]


def basin_one(config: dict) -> dict:
    """Experiment ``ch5.basin``: :func:`basin_curve` of one construction at one N and noise law.

    ``config``: ``name``, ``kind``, ``N``, ``sigmas`` (a piece of the grid starting at index
    ``first``), ``P``, ``seed``, ``n_samples`` (None: all 2^N strings). JSON-able result:
    lists over sigmas; ``errors_by_weight`` is a list of rows of length N+1 with ``None`` for
    Hamming layers no sampled string fell on. Pieces merge exactly (:func:`basin_merge`).
    """
    model = BUILDERS[config["name"]](device=device())
    r = basin_curve(model, target(config["name"]), config["N"], config["sigmas"], config["P"],
                    kind=config["kind"], n_samples=config["n_samples"], seed=config["seed"],
                    progress=False, first_index=config.get("first", 0))
    return {"p_exact": r["p_exact"].tolist(), "accuracy": r["accuracy"].tolist(),
            "accuracy_sd": r["accuracy_sd"].tolist(),
            "errors_by_weight": [_nan_to_none(row) for row in r["errors_by_weight"]]}


def basin_merge(configs, results) -> dict:
    """Merge :func:`basin_one` pieces by (kind, name, N) in grid order: numpy arrays as in
    :func:`basin_arrays`, plus ``sigmas``."""
    groups = {}
    for c, r in sorted(zip(configs, results), key=lambda cr: cr[0].get("first", 0)):
        g = groups.setdefault((c["kind"], c["name"], c["N"]), {"sigmas": []})
        g["sigmas"] += list(c["sigmas"])
        for k, v in r.items():
            g.setdefault(k, []).extend(v)
    out = {}
    for key_, g in groups.items():
        sig = g.pop("sigmas")
        out[key_] = basin_arrays(g)
        out[key_]["sigmas"] = np.array(sig, dtype=float)
    return out


def basin_arrays(result: dict) -> dict:
    """A stored :func:`basin_one` result as numpy arrays (``None`` back to NaN), plus ``se``."""
    out = {k: np.array(v, dtype=float) for k, v in result.items() if k != "errors_by_weight"}
    out["errors_by_weight"] = np.array([[np.nan if v is None else v for v in row]
                                    for row in result["errors_by_weight"]], dtype=float)
    return out


def _k0_configs(scale):
    s = sizes("k0", scale)
    out = []
    for D, L in K0_ARCHS:
        for a in range(0, s["P"], s["block"]):
            base = dict(D=D, L=L, P=s["P"], seed=100 * D + L, margin=K0_MARGIN, N0=K0_N0,
                    members=[a, min(a + s["block"], s["P"])])
            out += [dict(base, N=N, n_samples=None) for N in s["Ns"]]
            out += [dict(base, N=N, n_samples=s["n_samples"]) for N in s["sampled"]]
            out += [dict(base, N=N, n_samples=None, eps=K0_EPS) for N in s["Ns"]
                    if N <= K0_EPS_NMAX]
    return out


# Fraction of a population that is complete and non-constant at N0 (measured on the book's
# populations: 118 of 384) and CPU-seconds per (model x string x position) by depth L
# (book run: 203 s measured; L = 1 14 s, L = 2 190 s).
_K0_KEEP, _K0_UNIT = 0.31, {1: 0.12e-6, 2: 1.72e-6}


def _k0_cost(c):
    N, n = c["N"], c["n_samples"]
    evals = 2**N if n is None else n * (N + 1)
    models = _K0_KEEP * (c["members"][1] - c["members"][0])
    twice = 2 if c.get("eps") else 1                 # eps > 0: also the eps = 0 labels
    return 0.1 + twice * _K0_UNIT[c["L"]] * models * evals * (N + 1) * (1 + (N + 1) / 128)


@contextlib.contextmanager
def _unknown_is_recorded():
    """The profiler's warning that most strings are not counted, silenced where the census
    records those strings itself (``unknown``) or drops their models by design."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*most of the .* strings are undecided")
        yield


def k0_fixed_models(config: dict, model: Recognizer | None = None) -> list:
    """The fixed models of a K_0 block: members (population indices) that are decided on every
    string and non-constant at length ``N0`` (one definition, chosen once for every N)."""
    a, b = config["members"]
    if model is None:
        model = Recognizer.random(config["P"], config["D"], config["L"],
                              seed=config["seed"]).select(slice(a, b))
    with _unknown_is_recorded():      # the models it warns of are the ones dropped below
        pr = sensitivity_profile(model, config["N0"], margin=config["margin"], progress=False)
    keep = (pr.complete & ~pr.is_constant).cpu()
    return [a + int(i) for i in torch.nonzero(keep).flatten()]


@torch.no_grad()
def k0_growth_one(config: dict) -> dict:
    """Experiment ``ch5.k0_growth``: profiles at length ``N`` of one block of a fixed set.

    ``config``: ``D``, ``L``, ``P`` and ``seed`` (the population ``Recognizer.random(P, D, L,
    seed=seed)``), ``members`` [a, b) (the block), ``margin``, ``N0`` (see
    :func:`k0_fixed_models`), ``N`` and ``n_samples`` (None: exhaustive; else that many uniform
    strings, seed N, the same for every model), and ``eps`` (default 0; the fixed models are
    chosen at eps = 0 whatever it is, so both eps follow the same theta; with eps > 0,
    exhaustive only, also ``changed``: per model, the strings whose label differs from their
    label at eps = 0). Per fixed model: ``counts`` (complete strings
    by sensitivity), ``unknown`` (undecided, non-finite or incomplete strings, never counted as
    a class), ``constant`` (complete and constant at N); when exhaustive also ``affine`` and
    ``reads_x1`` (:func:`affine_class` of the truth table); and ``n_strings``, ``exact``.
    Blocks of one population merge exactly (concatenate in order of ``members``).
    """
    a, b = config["members"]
    pop = Recognizer.random(config["P"], config["D"], config["L"], seed=config["seed"])
    block = pop.select(slice(a, b))
    fixed = k0_fixed_models(config, block)
    out = {"members": fixed, "n_strings": 2 ** config["N"] if config["n_samples"] is None
           else int(config["n_samples"]), "exact": config["n_samples"] is None,
           "counts": [], "unknown": [], "constant": []}
    if not fixed:
        return out
    sub = pop.select(fixed).to(device())
    eps = config.get("eps", 0.0)
    if eps:
        if config["n_samples"] is not None:
            raise ValueError("the eps > 0 census is exhaustive only (n_samples=None)")
        table0 = truth_table(sub, config["N"], margin=config["margin"], progress=False).cpu()
    sub.eps = eps
    with _unknown_is_recorded():     # a fixed model may leave most strings unknown at N
        pr = _k0_profile(config, sub, out, table0 if eps else None)
    out["counts"] = pr.counts.cpu().tolist()
    out["unknown"] = (pr.undecided + pr.nonfinite + pr.incomplete).cpu().tolist()
    out["constant"] = pr.is_constant.cpu().tolist()
    return out


def _k0_profile(config, sub, out, table0):
    """The profile of the fixed models ``sub`` at ``config["N"]`` (exhaustive: also their
    affine class, and the labels changed from ``table0``)."""
    if config["n_samples"] is None:
        table = truth_table(sub, config["N"], margin=config["margin"], progress=False).cpu()
        if table0 is not None:
            out["changed"] = (table != table0).sum(-1).tolist()
        m, S = affine_class(table)
        out["affine"], out["reads_x1"] = m.tolist(), S[:, 0].tolist()
        return profile_from_table(table)
    return sensitivity_profile(sub, config["N"], margin=config["margin"],
                               n_samples=config["n_samples"], seed=config["N"], progress=False)


def k0_merge(configs, results, eps: float = 0.0) -> dict:
    """Merge the :func:`k0_growth_one` results at ``eps`` by (D, L, N): the fixed models of
    every block in order, with numpy arrays ``members``, ``counts``, ``k0`` (K_0/2^N over all
    strings, or its sampled estimate), ``unknown`` (fraction of strings with undecided or
    incomplete sensitivity), ``constant``, ``affine`` and ``reads_x1`` (exhaustive only, else
    None), ``changed`` (eps > 0: strings whose label differs from eps = 0, else None); and
    ``exact``, ``n_strings``."""
    merged = {}
    pairs = [(c, r) for c, r in zip(configs, results) if c.get("eps", 0.0) == eps]
    for c, r in sorted(pairs, key=lambda cr: cr[0]["members"][0]):
        m = merged.setdefault((c["D"], c["L"], c["N"]), {"members": [], "counts": [],
                                                     "unknown": [], "constant": [],
                                                     "exact": r["exact"],
                                                     "n_strings": r["n_strings"]})
        for k in ("members", "counts", "unknown", "constant", "affine", "reads_x1", "changed"):
            m.setdefault(k, [])
            m[k] += r.get(k, [])
    out = {}
    for key_, m in merged.items():
        n = m["n_strings"]
        counts = np.array(m["counts"], dtype=float).reshape(len(m["members"]), -1)
        out[key_] = {"members": np.array(m["members"], dtype=int), "exact": m["exact"],
                     "n_strings": n, "k0": counts[:, 0] / n if len(counts) else np.zeros(0),
                     "unknown": np.array(m["unknown"], dtype=float) / n,
                     "constant": np.array(m["constant"], dtype=bool),
                     "counts": counts.astype(np.int64),
                     "affine": np.array(m["affine"], dtype=int) if m["exact"] else None,
                     "reads_x1": np.array(m["reads_x1"], dtype=bool) if m["exact"] else None,
                     "changed": np.array(m["changed"], dtype=int) if eps else None}
    return out


def _pf_configs(scale):
    s = sizes("pf", scale)
    if s["chunk"] % PF_BATCH or s["n_models"] % s["chunk"]:
        raise ValueError("pf sizes: chunk must divide n_models and be a multiple of the batch")
    D, L = PF_ARCH
    per = s["chunk"] // PF_BATCH
    return [dict(N=N, D=D, L=L, n_models=s["chunk"], seed=1000 * N + j * per, batch=PF_BATCH)
            for N in PF_NS for j in range(s["n_models"] // s["chunk"])]


def _pf_cost(c):
    return 0.3 + 2.15e-6 * c["n_models"] * 2 ** c["N"] * (c["N"] + 1)


def pf_map_one(config: dict) -> dict:
    """Experiment ``ch5.pf_map``: :func:`parameter_function_map` of one chunk of models.

    Chunks with seeds ``seed0 + j * (chunk / batch)`` merge exactly (:func:`pf_merge`) into
    ``parameter_function_map(N, total, seed=seed0)``."""
    c = parameter_function_map(config["N"], config["n_models"], D=config["D"], L=config["L"],
                           batch=config["batch"], seed=config["seed"], progress=False,
                           device=device())
    return {"ids": c.ids.tolist(), "counts": c.counts.tolist(), "n_undecided": c.n_undecided,
            "n_models": c.n_models}


def pf_merge(configs, results) -> dict:
    """Merge :func:`pf_map_one` chunks into one :class:`FunctionCensus` per N."""
    acc = {}
    for c, r in zip(configs, results):
        a = acc.setdefault(c["N"], {"counts": {}, "und": 0, "n": 0})
        for i, k in zip(r["ids"], r["counts"]):
            a["counts"][i] = a["counts"].get(i, 0) + k
        a["und"] += r["n_undecided"]
        a["n"] += r["n_models"]
    out = {}
    for N, a in sorted(acc.items()):
        ids = np.array(sorted(a["counts"]), dtype=np.int64)
        out[N] = FunctionCensus(N, a["n"], ids,
                            np.array([a["counts"][i] for i in ids], dtype=np.int64), a["und"])
    return out


# ---- Conjecture 5.5 read to the end: MAJORITY under a fixed perturbation -------------------
def _drift_configs(scale):
    Ns, P, n = pick(scale, ci=([11, 51, 201, 801], 12, 48), book=([11, 51, 201, 801, 3201], 16, 64),
                    paper=([11, 51, 201, 801, 3201, 12801], 64, 256))
    return [dict(N=N, sigma=sg, P=P, n=n, seed=N) for sg in (1e-3, 1e-2) for N in Ns]


def _drift_cost(c):       # CPU-s per (copy x string x position), measured at book (N <= 3201)
    return 0.05 + 1.5e-7 * c["P"] * 2 * c["n"] * (c["N"] + 1)


@torch.no_grad()
def majority_drift_one(config: dict) -> dict:
    """Experiment ``ch5.drift``: ``P`` copies of the MAJORITY construction (float32,
    eps = 0) perturbed uniformly by ``sigma`` (:func:`sensbook.perturb`, every parameter), at
    odd length ``N``: ``middle_error`` per copy, the error rate (margin 0) on ``n`` uniform
    strings of the two middle Hamming layers (N -+ 1)/2, and ``accuracy`` per copy on ``n``
    uniform strings of length N. NaN outputs count as errors (never as a label)."""
    from ..volume import perturb
    N, n = check_n(config["N"]), int(config["n"])
    if N % 2 == 0:
        raise ValueError(f"N={N}: MAJORITY is built for odd N only")
    g = torch.Generator().manual_seed(int(config["seed"]))
    ones = torch.randint(0, 2, (n,), generator=g) + (N - 1) // 2          # |x| = (N -+ 1)/2
    mid = (torch.rand(n, N, generator=g).argsort(1) < ones[:, None]).float()
    uni = torch.randint(0, 2, (n, N), generator=g).float()
    pop = perturb(BUILDERS["MAJORITY"](device=device()), float(config["sigma"]), config["P"],
                  seed=int(config["seed"]), dtype=torch.float32)
    out = {}
    for key, x in (("middle_error", mid), ("accuracy", uni)):
        T = pop(x.to(pop.device)).cpu()
        right = ((T > 0) == (2 * x.sum(1) > N)) & torch.isfinite(T)
        out[key] = (1 - right.double().mean(1) if key == "middle_error"
                    else right.double().mean(1)).tolist()
    return out


# ---- the census's meaning: where the fixed models are sensitive ----------------------------
def _band_configs(scale):
    Ns1, Ns2 = pick(scale, ci=([6, 8, 10], [6, 8, 10]), book=([8, 10, 12, 14, 16], [8, 10, 12]),
                    paper=([8, 10, 12, 14, 16, 18], [8, 10, 12, 14, 16]))
    s = sizes("k0", scale)
    return [dict(D=D, L=L, P=s["P"], seed=100 * D + L, margin=K0_MARGIN, N0=K0_N0, N=N)
            for D, L in K0_ARCHS for N in (Ns1 if L == 1 else Ns2)]


def _band_cost(c):                 # the census's forward pass, plus the neighbour table
    models = _K0_KEEP * c["P"]
    return 0.1 + models * 2 ** c["N"] * (c["N"] + 1) * (
        _K0_UNIT[c["L"]] * (1 + (c["N"] + 1) / 128) + 2.5e-7)


@torch.no_grad()
def k0_band_one(config: dict) -> dict:
    """Experiment ``ch5.k0_band``: the census's fixed models (:func:`k0_fixed_models` of the
    whole population) on all 2^N strings, by Hamming layer w = |x|. Per model:
    ``layer_share``, the share of the variance of T over the strings explained by the layer
    means (1: T is a function of |x|); ``sensitive`` (N+1,) the complete strings of s > 0
    per layer; ``complete`` (N+1,) the complete strings per layer; ``layer_mean`` (N+1,) the
    mean of T per layer. Labels with margin ``margin``; a string is complete when it and its
    N neighbours are decided (undecided strings are never counted as a class)."""
    N = check_n(config["N"])
    P = config["P"]
    pop = Recognizer.random(P, config["D"], config["L"], seed=config["seed"])
    fixed = k0_fixed_models(dict(config, members=[0, P]), pop)
    out = {"members": fixed, "layer_share": [], "sensitive": [], "complete": [],
           "layer_mean": []}
    if not fixed:
        return out
    sub = pop.select(fixed).to(device())
    x = strings(N)
    step = max(1, 2**20 // (N + 1) ** 2)
    T = torch.cat([sub(x[a:a + step].to(sub.device)).cpu() for a in range(0, len(x), step)], 1)
    T = T.double()
    w = x.sum(1).long()
    idx = torch.arange(2**N)
    lab = torch.where(T >= config["margin"], 1, torch.where(T <= -config["margin"], 0, -1))
    lab = lab.to(torch.int8)                      # (P, 2^N); -1 undecided (NaN included)
    nbs = torch.stack([lab[:, idx ^ (1 << b)] for b in range(N)], -1)     # (P, 2^N, N)
    complete = (lab >= 0) & (nbs >= 0).all(-1)
    sens = complete & (nbs != lab.unsqueeze(-1)).any(-1)
    onehot = torch.nn.functional.one_hot(w, N + 1).double()                 # (2^N, N+1)
    size = onehot.sum(0)
    mean = (T @ onehot) / size
    fitted = mean[:, w]
    var = T.var(1, unbiased=False)
    out["layer_share"] = (1 - ((T - fitted) ** 2).mean(1) / var).tolist()
    out["sensitive"] = (sens.double() @ onehot).long().tolist()
    out["complete"] = (complete.double() @ onehot).long().tolist()
    out["layer_mean"] = mean.tolist()
    return out


register(Experiment("ch5.exact", _exact_configs, "sensbook.experiments.ch5:exact_check",
                    _exact_cost, doc="the constructions on every string / at large N"))
register(Experiment("ch5.basin", _basin_configs, "sensbook.experiments.ch5:basin_one", _basin_cost,
                    doc="perturbed constructions: P(exact), accuracy per sigma"))
# ---- the introduction's figure ----------------------------------------------------------
def intro_basin_sizes(scale: str | None = None) -> dict:
    """The sizes of the introduction's figure (``ch5.intro_basin``): ``sizes("basin")`` at
    ``ci`` and ``book`` (the same configurations as ``ch5.basin``); at ``paper`` N <= 12 and
    96 copies per sigma on the same 25-point grid, minutes of CPU, so a reader who sets
    ``paper`` sees the first page at once (the longer lengths are ch5_basins')."""
    sc = check_scale(current_scale() if scale is None else scale, "scale")
    return sizes("basin", sc) if sc != "paper" else dict(
        Ns=[4, 6, 8, 10, 12], n_sigma=25, P=96, max_strings=4096, chunk=25, hard_Ns=[64],
        hard_strings=64)


def intro_basin_sigmas(scale: str | None = None) -> np.ndarray:
    """The sigma grid of the introduction's figure: log-spaced on [1e-4, 1]."""
    return _sigma_grid(intro_basin_sizes(scale))


def _intro_basin_configs(scale):
    """PARITY and the hard FIRST under uniform noise, pieced as ``ch5.basin``'s."""
    return _basin_configs(scale, intro_basin_sizes(scale), ("PARITY",), ("uniform",))


register(Experiment("ch5.intro_basin", _intro_basin_configs, "sensbook.experiments.ch5:basin_one",
                    _basin_cost, doc="the introduction's figure: ch5.basin's PARITY and hard "
                    "FIRST under uniform noise, to N = 12 at paper scale"))
register(Experiment("ch5.k0_growth", _k0_configs, "sensbook.experiments.ch5:k0_growth_one",
                    _k0_cost, doc="K_0(N) of a fixed set of random models"))
register(Experiment("ch5.pf_map", _pf_configs, "sensbook.experiments.ch5:pf_map_one", _pf_cost,
                    doc="the parameter-function map P(f) at N = 3, 4, 5"))
register(Experiment("ch5.drift", _drift_configs,
                    "sensbook.experiments.ch5:majority_drift_one", _drift_cost,
                    doc="MAJORITY perturbed by a fixed sigma: middle-layer error, accuracy"))
register(Experiment("ch5.k0_band", _band_configs, "sensbook.experiments.ch5:k0_band_one",
                    _band_cost, doc="the census's fixed models: sensitivity by Hamming layer"))
