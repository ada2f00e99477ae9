"""The ``sensbook`` command: list the book's experiments, run any of them at any scale, and
profile a model of your own.

    sensbook list                                               # every experiment, sizes, cost
    sensbook sweep ch5 --scale paper --out results/             # all of chapter 5's experiments
    sensbook sweep ch5.k0_growth --scale paper --workers 4      # one experiment, four processes
    sensbook sweep all --scale book --workers 2                 # everything `make book` needs
    sensbook sweep ch6 --scale paper --devices cuda:0,cuda:1    # one worker per GPU
    sensbook sweep ch6 --scale book --status                    # stored/queued/running/failed
    sensbook sweep all --scale paper --out /shared/results --executor slurm --partition gpu \
        --gpus-per-task 1 --time 120 --no-wait                  # a Slurm job array (submitit)
    sensbook calibrate ch5                                      # cost model vs a measured ci run
    sensbook profile mymodels:build --tokens 3,4 --prefix 2 --N 12 --out p.json   # your model

Finished configurations are stored under ``OUT/<experiment>/`` as they finish; rerunning skips
them, so an interrupted sweep resumes. Build the book from them with
``SENSBOOK_RESULTS=OUT SENSBOOK_SCALE=<scale> make book``. ``--scale`` defaults to
``$SENSBOOK_SCALE``, else ``book``.
"""
from __future__ import annotations

import argparse
import os
import sys


def _parser():
    from .settings import SCALES

    p = argparse.ArgumentParser(prog="sensbook", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("sweep", help="run (or resume) experiments: a name, a chapter, or all")
    s.add_argument("experiment", help="an experiment (ch5.k0_growth), a chapter (ch5), or all")
    s.add_argument("--scale", choices=SCALES, default=None,
                   help="default: $SENSBOOK_SCALE, else book")
    s.add_argument("--out", default=None, help="results folder (default $SENSBOOK_RESULTS or results/; "
                   "relative to the book's root, as $SENSBOOK_RESULTS)")
    s.add_argument("--workers", type=int, default=1, help="processes (concurrent.futures)")
    s.add_argument("--device", default=None, help="torch device, e.g. cpu, cuda, cuda:1 "
                                                   "(default $SENSBOOK_DEVICE, else CUDA if available)")
    s.add_argument("--devices", default=None,
                   help="comma-separated devices to spread the workers over, e.g. cuda:0,cuda:1")
    s.add_argument("--status", action="store_true", help="report what is stored, queued, running "
                   "and failed (with each failed job's error); compute nothing")
    _cluster_options(s)
    _profile_options(sub)
    ls = sub.add_parser("list", help="every experiment: configurations and predicted cost per scale")
    ls.add_argument("--scale", choices=SCALES, default=None, help="only this scale")
    c = sub.add_parser("calibrate", help="run an experiment's ci configurations and compare the "
                                         "measured seconds with its cost model")
    c.add_argument("experiment")
    c.add_argument("--out", default=None, help="also keep the computed results in this store "
                   "(they are always computed in a scratch store: reading a stored result "
                   "measures nothing)")
    return p


# --- cluster executors (sensbook/executors.py: Slurm or local jobs through submitit) ----------
def _cluster_options(s):
    g = s.add_argument_group(
        "executor", "--executor slurm submits the missing configurations as one Slurm job array "
        "through submitit (one array task per configuration; --out must be a folder every node "
        "sees); --executor submitit-local runs the same jobs as local subprocesses. Job logs and "
        "ids: OUT/.submitit/<experiment>/. Rerunning submits only what is neither stored nor "
        "queued/running, so failed or cancelled configurations are recomputed, nothing else.")
    g.add_argument("--executor", choices=("local", "slurm", "submitit-local"), default="local",
                   help="local: processes of this machine (--workers; default); slurm: a job "
                        "array; submitit-local: submitit's local executor")
    g.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's)")
    g.add_argument("--time", type=int, default=60, metavar="MINUTES",
                   help="time limit of one configuration's job (default 60)")
    g.add_argument("--cpus-per-task", type=int, default=1, help="CPUs per job (default 1)")
    g.add_argument("--gpus-per-task", type=int, default=0, help="GPUs per job (default 0)")
    g.add_argument("--mem", type=int, default=None, metavar="GB",
                   help="memory per job in GB (default: the cluster's)")
    g.add_argument("--array-parallelism", type=int, default=64,
                   help="jobs of the array running at once (default 64)")
    g.add_argument("--no-wait", action="store_true",
                   help="return right after submitting (check with --status)")


def _cluster_executor(args):
    """The executor the options ask for (None: the local process pool), or ValueError."""
    if args.executor == "local":
        return None
    from .runtime.executors import SubmititExecutor

    return SubmititExecutor("slurm" if args.executor == "slurm" else "local",
                            partition=args.partition, time=args.time,
                            cpus_per_task=args.cpus_per_task, gpus_per_task=args.gpus_per_task,
                            mem_gb=args.mem, array_parallelism=args.array_parallelism,
                            wait=not args.no_wait)


def _status(sweep, out, scale, store) -> list:
    """Print the state of every configuration of ``sweep``; returns what could not be read
    (also printed): a status is always printed."""
    from .runtime.executors import describe, status, summary

    problems = []
    states = status(out, sweep.name, store.version, sweep.configs, problems)
    stored = sum(s.state == "stored" for s in states)
    print(f"{sweep.name} @ {scale}: {stored}/{len(states)} stored in {store.folder} (version "
          f"{store.version}); {summary(states)}")
    for s in states:
        if s.state == "failed":
            print(describe(s))
    for p in problems:
        print(f"  could not read: {p}")
    return problems
# --- end of cluster executors -------------------------------------------------------------


def _fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else (f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h")


def _scale(args):
    from .settings import scale

    return args.scale or scale()


def _devices(args):
    """``--device`` checked, and ``--devices`` as a list of device names (None when absent):
    an empty entry (``--devices ,`` or ``cuda:0,,cuda:1``) or a name torch does not know is an
    error naming the option."""
    from .settings import check_device

    if args.device is not None:
        check_device(args.device, "--device")
    if args.devices is None:
        return None
    names = [d.strip() for d in args.devices.split(",")]
    if not any(names) or not all(names):
        raise ValueError(f"--devices={args.devices!r} must be comma-separated device names "
                         "(e.g. cuda:0,cuda:1) with no empty entry")
    for d in names:
        check_device(d, "--devices")
    return names


# --- sensbook profile: a model of your own, from the command line ------------------------------
def _profile_options(sub):
    p = sub.add_parser(
        "profile", help="the sensitivity profile of your own model, saved as JSON",
        description="Profile MODULE:FACTORY (FACTORY() returns a torch.nn.Module, wrapped in "
        "sb.TorchClassifier with the token options, or any classifier callable on (B, N) 0/1 "
        "strings) at length N, exactly (N <= 24) or from --samples strings, and save it as "
        "JSON (sb.Profile.load reads it back).")
    p.add_argument("target", help="MODULE:FACTORY, e.g. mymodels:build_bert (MODULE importable "
                   "from the current folder, or a path to a .py file)")
    p.add_argument("--N", type=int, required=True, help="string length")
    p.add_argument("--samples", type=int, default=None,
                   help="sample this many uniform strings (default: all 2^N)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled strings (default 0)")
    p.add_argument("--tokens", default=None, help="ids of bit 0 and bit 1, e.g. 3,4 (a word of "
                   "several ids: 5+6,7+8); default: the model receives float strings")
    for name, what in (("prefix", "before the bits, e.g. [CLS]"), ("suffix", "after the bits"),
                       ("sep", "between consecutive bits")):
        p.add_argument(f"--{name}", default="", help=f"comma-separated token ids {what}")
    p.add_argument("--margin", type=float, default=0.0, help="scores with |T| below it are "
                   "undecided (default 0)")
    p.add_argument("--memory-mb", type=float, default=256, help="memory budget (default 256)")
    p.add_argument("--device", default=None, help="torch device for the model (default: its own)")
    p.add_argument("--out", required=True, help="the JSON file to write")


def _ids(text, option):
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"--{option} must be comma-separated token ids, got {text!r}") from None


def _load_factory(target):
    import importlib
    import importlib.util

    module, sep, name = target.rpartition(":")
    if not sep or not module or not name:
        raise ValueError(f"the target must be MODULE:FACTORY, got {target!r}")
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location(os.path.basename(module)[:-3], module)
        if spec is None or not os.path.exists(module):
            raise ValueError(f"no such file: {module}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        sys.path.insert(0, os.getcwd())
        mod = importlib.import_module(module)
    factory = getattr(mod, name, None)
    if not callable(factory):
        raise ValueError(f"{module} has no callable {name!r}")
    return factory


def _profile(args) -> int:
    import torch

    from .adapters import TorchClassifier
    from .profile import sensitivity_profile

    try:
        model = _load_factory(args.target)()
        if args.device is not None and isinstance(model, torch.nn.Module):
            model = model.to(args.device)
        opts = dict(prefix=_ids(args.prefix, "prefix"), suffix=_ids(args.suffix, "suffix"),
                    sep=_ids(args.sep, "sep"))
        if args.tokens is not None:
            words = [[int(i) for i in w.split("+")] for w in args.tokens.split(",")]
            opts["tokens"] = words
        if isinstance(model, torch.nn.Module):
            clf = TorchClassifier(model, **opts)
        elif any(opts.values()):
            raise ValueError("--tokens/--prefix/--suffix/--sep wrap a torch.nn.Module; the "
                             f"factory returned a {type(model).__name__}")
        else:
            clf = model
        kw = dict(n_samples=args.samples, memory_mb=args.memory_mb, progress=True)
        if args.samples is not None:
            kw["seed"] = args.seed
        prof = sensitivity_profile(clf, args.N, margin=args.margin, **kw)
        prof.save(args.out, model=args.target)
    except (ValueError, TypeError, ImportError, OSError) as e:
        print(f"sensbook: {e}", file=sys.stderr)
        return 2
    print(prof)
    print(f"saved to {args.out} (sensbook.Profile.load reads it back)")
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "profile":
        return _profile(args)
    from .experiments import select
    from .settings import SCALES
    from .runtime.store import Store, results_dir

    try:
        exps = select(getattr(args, "experiment", "all"))
    except ValueError as e:
        print(f"sensbook: {e}", file=sys.stderr)
        return 2
    if args.command == "list":
        scales = [args.scale] if args.scale else list(SCALES)
        print(f"{'experiment':28s} " + " ".join(f"{s + ' (configs, predicted)':>26s}" for s in scales))
        for e in exps:
            cells = []
            for s in scales:
                cells.append(f"{len(e.configs(s)):>5d}, {_fmt_seconds(e.predicted_seconds(s)):>19s}")
            print(f"{e.name:28s} " + " ".join(f"{c:>26s}" for c in cells))
        print("predicted: CPU time of one thread on the reference machine (a 2-core CPU); "
              "--workers 2 takes about half of that in wall time")
        return 0
    if args.command == "calibrate":
        try:
            return _calibrate(exps, None if args.out is None else results_dir(args.out))
        except OSError as e:                 # a store that cannot be written: one line
            print(f"sensbook: {e}", file=sys.stderr)
            return 1
    if args.workers < 1:
        print("sensbook: --workers must be >= 1", file=sys.stderr)
        return 2
    try:
        scale = _scale(args)
        devices = _devices(args)
        if args.device is None:
            from .settings import device

            device()                                   # $SENSBOOK_DEVICE, checked here
    except ValueError as e:
        print(f"sensbook: {e}", file=sys.stderr)
        return 2
    out = results_dir(args.out)                        # a relative --out: as $SENSBOOK_RESULTS
    if args.device:
        os.environ["SENSBOOK_DEVICE"] = args.device      # workers inherit it
    workers = max(args.workers, len(devices)) if devices else args.workers
    try:
        executor = _cluster_executor(args)
    except ValueError as e:
        print(f"sensbook: {e}", file=sys.stderr)
        return 2
    try:
        return _sweep(args, exps, scale, out, workers, devices, executor)
    except OSError as e:                     # a store that cannot be written: one line
        print(f"sensbook: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        stored = total = 0
        for e in exps:
            sweep = e.sweep(scale)
            st = Store(out, sweep.name, sweep.version)
            total += len(sweep.configs)
            stored += sum(st.path(c).is_file() for c in sweep.configs)
        print(f"\nsensbook: interrupted; the workers were stopped and their claims released. "
              f"{stored} of {total} configurations are stored in {out} and kept: run the same "
              "command again to resume (what is stored is not computed again)", file=sys.stderr)
        return 130


def _calibrate(exps, keep=None) -> int:
    """``sensbook calibrate``: each ``ci`` configuration computed in a fresh scratch store (never
    read from a store: reading is not computing), its runner's seconds against the cost model;
    with ``keep`` (``--out``) the computed records are also kept in that store."""
    import dataclasses
    import tempfile

    from .runtime.store import Store, canonical
    from .runtime.sweep import run_sweep

    if keep is not None:                     # before computing anything
        for e in exps:
            sw = e.sweep("ci")
            Store(keep, sw.name, sw.version).check_writable()
    for e in exps:
        sw = e.sweep("ci")
        for c in sw.configs:
            one = dataclasses.replace(sw, configs=[c])
            with tempfile.TemporaryDirectory(prefix="sensbook-calibrate-") as scratch:
                _, stats = run_sweep(one, scratch, progress=False)
                rec = Store(scratch, sw.name, sw.version).record(c)
            if stats["computed"] != 1 or rec is None or "seconds" not in rec["meta"]:
                print(f"{e.name}: measured nothing for {canonical(c)} (it was not computed)")
                continue
            print(f"{e.name}: measured {rec['meta']['seconds']:8.2f} s, "
                  f"predicted {e.cost(c):8.2f} s")
            if keep is not None:
                st = Store(keep, sw.name, sw.version)
                if st.record(c) is None:
                    st.put(rec)
    return 0


def _sweep(args, exps, scale, out, workers, devices, executor) -> int:
    """``sensbook sweep`` once its options are checked."""
    from .runtime.store import Store
    from .runtime.sweep import run_sweep

    if not args.status and len(exps) > 1 and workers > 1 and not devices \
            and executor is None:
        from .experiments import run_all

        for name, (stored, computed) in run_all(exps, scale, out, workers=workers).items():
            print(f"{name} @ {scale}: {stored} already stored, {computed} computed")
        print(f"results in {out}")
        return 0
    failed, first = 0, {}
    if executor is not None and executor.wait and not args.status and len(exps) > 1 \
            and executor.kind == "slurm":    # local jobs: one experiment's waves at a time
        executor.wait = False      # submit every experiment's job array first, then wait for all
        for e in exps:
            _, st = run_sweep(e.sweep(scale), out, progress=False, executor=executor)
            first[e.name] = (st["stored"], executor.submitted, executor.in_flight)
        executor.wait = True
    for e in exps:
        sweep = e.sweep(scale)
        store = Store(out, sweep.name, sweep.version)
        if args.status:
            failed += bool(_status(sweep, out, scale, store))
            continue
        try:
            _, stats = run_sweep(sweep, out, workers=workers, progress=True, devices=devices,
                                 executor=executor)
        except RuntimeError as err:           # executors.SweepFailed: each failed job's error
            if executor is None:
                raise
            print(f"sensbook: {err}", file=sys.stderr)
            failed += 1
            continue
        if sweep.name in first:    # counted when submitted, not after waiting for the others
            stored, executor.submitted, executor.in_flight = first[sweep.name]
            stats["computed"] += stats["stored"] - stored
            stats["stored"] = stored
        line = (f"{sweep.name} @ {scale}: {stats['stored']} already stored, {stats['computed']} "
                f"computed; results in {store.folder}")
        if executor is not None and (executor.submitted or executor.in_flight):
            line += (f" ({len(executor.submitted)} jobs submitted, {len(executor.in_flight)} "
                     f"already queued or running" + ("; see --status)" if args.no_wait else ")"))
        if executor is not None and executor.deferred:
            line += (f"; {len(executor.deferred)} not submitted (no more local jobs at once than "
                     "this machine holds): run the same command again when these finish")
        print(line)
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
