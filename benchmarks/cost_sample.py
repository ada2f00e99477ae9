"""The cost models against this machine: `python benchmarks/cost_sample.py [--scale paper]`.

Every experiment's cost model predicts the seconds of one configuration on one CPU thread of
the reference machine (the 2-core development machine; `sensbook list`). This script runs a
sample of configurations here, on ``sensbook.device()`` (CUDA when present; chapters 1 and 6
compute on the CPU by design), one configuration per child process with one torch thread, and
prints each one's measured seconds beside the prediction. A configuration whose process (its
imports included) does not finish within ``--limit`` seconds is reported as censored
(``> limit``), never dropped; one that fails is reported with its error.

The sample, per experiment: the configuration at the cost-weighted median (half the
experiment's predicted time lies in cheaper configurations), or, when that one is predicted
above ``--cap`` CPU-seconds, the most expensive configuration below the cap. The speed-up of an
experiment is the prediction over the measurement of its sampled configuration; a chapter's
time here is the sum over its experiments of their predicted time over their speed-up (an
extrapolation from one configuration an experiment: it says so where it is printed).

``--json FILE`` also writes every measurement (with the device, torch and date) to FILE.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)

CHILD = r"""
import json, sys, time, torch
import sensbook as sb
from sensbook.experiments import get
from sensbook.runtime.sweep import resolve
torch.set_num_threads(1)
name, i, scale = sys.argv[1], int(sys.argv[2]), sys.argv[3]
exp = get(name)
config = exp.configs(scale)[i]
dev = sb.device()
if dev.type == "cuda":                                # start CUDA outside the timed call
    torch.ones(1, device=dev).sum().item()
t0 = time.perf_counter()
resolve(exp.runner)(config)
if dev.type == "cuda":
    torch.cuda.synchronize(dev)
print(json.dumps({"seconds": time.perf_counter() - t0, "device": str(dev)}))
"""


def pick(costs: list, cap: float) -> int:
    """The index of the cost-weighted median configuration, or the costliest under ``cap``."""
    order = sorted(range(len(costs)), key=costs.__getitem__)
    total, acc = sum(costs), 0.0
    for i in order:
        acc += costs[i]
        if acc >= total / 2:
            break
    if costs[i] <= cap:
        return i
    under = [j for j in order if costs[j] <= cap]
    return under[-1] if under else order[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", default="paper", help="ci, book or paper (default paper)")
    ap.add_argument("--cap", type=float, default=300.0,
                    help="largest predicted CPU-seconds of a sampled configuration (default 300)")
    ap.add_argument("--limit", type=float, default=60.0,
                    help="seconds after which a configuration is censored (default 60)")
    ap.add_argument("--budget", type=float, default=None,
                    help="stop sampling (saying so) once this many seconds have passed")
    ap.add_argument("--experiments", default="all", help="comma-separated names, or all")
    ap.add_argument("--json", default=None, help="also write the measurements to this file")
    args = ap.parse_args()

    import torch

    import sensbook as sb
    from sensbook.experiments import registry

    exps = registry()
    if args.experiments == "all":              # the costliest first: they decide the totals
        names = sorted(exps, key=lambda n: -exps[n].predicted_seconds(args.scale))
    else:
        names = args.experiments.split(",")
        unknown = [n for n in names if n not in exps]
        if unknown:
            ap.error(f"--experiments: unknown {unknown}; known: {', '.join(exps)}")
    dev = sb.device()
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    print(f"## cost models against {where} (torch {torch.__version__}), scale {args.scale}\n")
    print("| experiment | configurations | predicted, all (h) | sampled config predicted (s) "
          "| measured here (s) | speed-up |\n|---|---|---|---|---|---|", flush=True)
    t_start, rows = time.perf_counter(), []
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    for name in names:
        left = None if args.budget is None else args.budget - (time.perf_counter() - t_start)
        if left is not None and left < 5:
            print(f"| {name} | not sampled: the --budget of {args.budget:g} s ran out | | | | |")
            continue
        exp = exps[name]
        configs = exp.configs(args.scale)
        costs = [float(exp.cost(c)) for c in configs]
        i = pick(costs, args.cap)
        limit = args.limit if left is None else min(args.limit, left)
        row = dict(experiment=name, configurations=len(configs), predicted_total=sum(costs),
                   index=i, predicted=costs[i])
        try:
            out = subprocess.run([sys.executable, "-c", CHILD, name, str(i), args.scale], env=env,
                                 capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            out = None
        if out is not None and out.returncode != 0:         # a failure is a finding: shown
            err = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "no message"
            rows.append(dict(row, error=err))
            print(f"| {name} | {len(configs)} | {sum(costs) / 3600:.2f} | {costs[i]:.1f} "
                  f"| failed: {err[:200]} | |", flush=True)
            continue
        seconds = limit if out is None else json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
        censored = out is None                              # stopped at the limit
        row.update(seconds=seconds, censored=censored)
        rows.append(row)
        speed = f"< {costs[i] / seconds:.2g}" if censored else f"{costs[i] / seconds:.3g}"
        shown = f"> {seconds:.0f}" if censored else f"{seconds:.2f}"
        print(f"| {name} | {len(configs)} | {sum(costs) / 3600:.2f} | {costs[i]:.1f} | {shown} "
              f"| {speed} |", flush=True)

    by_chapter = {}
    for r in rows:
        if "error" in r:
            continue
        ch = r["experiment"].split(".")[0]
        t = r["predicted_total"] * r["seconds"] / max(r["predicted"], 1e-9)
        p, h, c = by_chapter.get(ch, (0.0, 0.0, False))
        by_chapter[ch] = (p + r["predicted_total"], h + t, c or r["censored"])
    print("\n| chapter | predicted, one CPU thread (h) | extrapolated here (h) |\n|---|---|---|")
    for ch, (p, h, c) in by_chapter.items():
        print(f"| {ch} | {p / 3600:.2f} | {'> ' if c else ''}{h / 3600:.2f} |")
    print("\n(extrapolated: each experiment's predicted time over the speed-up of its one sampled "
          "configuration; '>' where a sample was censored)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=where, torch=torch.__version__, scale=args.scale,
                           date=time.strftime("%Y-%m-%d"), cap=args.cap, limit=args.limit,
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
