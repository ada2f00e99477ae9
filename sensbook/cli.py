"""The ``sensbook`` command: run a chapter's sweep at any scale, with a progress bar.

    sensbook sweep ch6 --scale paper --out results/            # compute what is missing
    sensbook sweep ch6 --scale paper --out results/ --workers 4 # four processes
    sensbook sweep ch6 --scale paper --devices cuda:0,cuda:1   # one worker per GPU
    sensbook sweep ch6 --scale book --status                    # what is stored, nothing run
    sensbook list                                               # the chapters with a sweep

Finished configurations are stored under ``OUT/<chapter>/`` as they finish; rerunning skips
them, so an interrupted sweep resumes. Build the book from them with
``SENSBOOK_RESULTS=OUT SENSBOOK_SCALE=<scale> make book``.
"""
from __future__ import annotations

import argparse
import os
import sys


def _parser():
    from .scale import SCALES
    from .sweep import SWEEPS

    p = argparse.ArgumentParser(prog="sensbook", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep", help="run (or resume) a chapter's sweep")
    s.add_argument("chapter", choices=sorted(SWEEPS))
    s.add_argument("--scale", choices=SCALES, default="book")
    s.add_argument("--out", default=None, help="results folder (default $SENSBOOK_RESULTS or results/)")
    s.add_argument("--workers", type=int, default=1, help="processes (concurrent.futures)")
    s.add_argument("--device", default=None, help="torch device, e.g. cpu, cuda, cuda:1 "
                                                   "(default $SENSBOOK_DEVICE, else CUDA if available)")
    s.add_argument("--devices", default=None,
                   help="comma-separated devices to spread the workers over, e.g. cuda:0,cuda:1")
    s.add_argument("--status", action="store_true", help="report what is stored; compute nothing")
    sub.add_parser("list", help="chapters that have a sweep")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from .sweep import SWEEPS, Store, get_sweep, results_dir, run_sweep

    if args.command == "list":
        for name in sorted(SWEEPS):
            print(name)
        return 0
    if args.workers < 1:
        print("sensbook: --workers must be >= 1", file=sys.stderr)
        return 2
    sweep = get_sweep(args.chapter, args.scale)
    out = args.out or results_dir()
    store = Store(out, sweep.name)
    if args.status:
        done = sum(store.done(c) for c in sweep.configs)
        print(f"{sweep.name} @ {args.scale}: {done}/{len(sweep.configs)} stored in {store.folder} "
              f"(version {store.version})")
        return 0
    kwargs = {}
    if args.device:
        os.environ["SENSBOOK_DEVICE"] = args.device      # workers inherit it
    devices = [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else None
    workers = max(args.workers, len(devices)) if devices else args.workers
    _, stats = run_sweep(sweep, out, workers=workers, progress=True, runner_kwargs=kwargs,
                         devices=devices)
    print(f"{sweep.name} @ {args.scale}: {stats['stored']} already stored, {stats['computed']} "
          f"computed; results in {store.folder}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
