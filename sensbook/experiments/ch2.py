"""Chapter 2's experiment E1: the sensitivity profiles of random transformers.

Kövér et al. (2026), experiments: random transformers (four initialisations, many
architectures) put most of their strings at sensitivity 0 and have zero-sensitivity strings,
while a uniformly random Boolean function has one only with probability about 1 - 1/e.

* ``ch2.e1``: exact profiles of random recognizers, one configuration per (initialisation,
  architecture, block of models). A random recognizer is rebuilt from its row:
  ``Recognizer.random(P, D, L, H, eps=eps, init=init, seed=seed).select(member)``;
* ``ch2.control``: the random-function control at chapter 2's N (chapter 1's runner).
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from ..model import INITS, Recognizer
from ..profile import profile_from_table, truth_table
from ..settings import device
from . import Experiment, register
from .ch1 import blocks, merge_random_functions, random_function_cost  # noqa: F401 (the control)

#: Chapter 2's E1 sizes: length ``N``, models ``P`` per (init, architecture) cell, split into
#: configurations of ``block`` models; ``control`` random functions in blocks of ``block_f``.
SIZES = {
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
    s = SIZES[scale]
    out = []
    for c, ((D, L, H), init) in enumerate(itertools.product(s["archs"], INITS)):
        cell = dict(N=s["N"], D=D, L=L, H=H, init=init, eps=0.0, margin=0.0)
        block = s["block"]
        while block > 1 and e1_cost({**cell, "P": block}) > E1_MAX_SECONDS:
            block //= 2                      # a configuration stays a few CPU-minutes
        out += [{**cell, "P": size, "seed": 1000 * c + b}
                for b, (_, size) in enumerate(blocks(s["P"], block))]
    return out


#: The ablation of the positional feature 1[n = 1] (``ch2.e1_unmarked``): the E1 cells of these
#: architectures, the same seeds (so the same theta), with ``mark_first=False``.
E1_UNMARKED_ARCHS = [(8, 1, 1), (16, 2, 2)]


def e1_unmarked_configs(scale: str) -> list:
    """The configurations of :func:`e1_configs` whose architecture is in
    ``E1_UNMARKED_ARCHS``, with ``mark_first=False``: the same models without 1[n = 1]."""
    return [{**c, "mark_first": False} for c in e1_configs(scale)
            if (c["D"], c["L"], c["H"]) in E1_UNMARKED_ARCHS]


def e1_control_configs(scale: str) -> list:
    """The random-function control at chapter 2's N (seeds disjoint from chapter 1's)."""
    s = SIZES[scale]
    return [dict(N=s["N"], n=size, seed=10**6 + i)
            for i, (_, size) in enumerate(blocks(s["control"], s["block_f"]))]


def e1_model(row: dict, device_=None) -> Recognizer:
    """The population of an E1 configuration (or one model: a row with ``member``)."""
    model = Recognizer.random(row["P"], row["D"], row["L"], row["H"], eps=row["eps"],
                              init=row["init"], seed=row["seed"], device=device_,
                              mark_first=bool(row.get("mark_first", True)))
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


register(Experiment("ch2.e1", e1_configs, "sensbook.experiments.ch2:e1_cell", e1_cost,
                    doc="E1: exact profiles of random transformers, per init x architecture "
                        "(chapter 2)"))
register(Experiment("ch2.e1_unmarked", e1_unmarked_configs, "sensbook.experiments.ch2:e1_cell",
                    e1_cost, doc="E1 without the positional feature 1[n = 1] (chapter 2)"))
register(Experiment("ch2.control", e1_control_configs, "sensbook.experiments.ch1:random_function_block",
                    random_function_cost,
                    doc="E1's control: random Boolean functions at chapter 2's N"))
