"""The ``sensbook`` command: list the book's experiments, run any of them at any scale, and
profile a model of your own.

    sensbook list                                               # every experiment, sizes, cost
    sensbook list --scale book --measured results               # stored CPU seconds vs the cost models
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
    ls.add_argument("--measured", default=None, metavar="STORE", help="with --scale: the CPU "
                    "seconds STORE's results took, and their factor over the cost model")
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
        "sb.TorchClassifier with the token options; a fitted scikit-learn classifier, wrapped "
        "in sb.SklearnClassifier; or any classifier callable on (B, N) 0/1 strings) at length "
        "N, exactly (N <= 24) or from --samples strings, print a summary and save it as JSON "
        "(sb.Profile.load reads it back; its meta records these options).")
    p.add_argument("target", help="MODULE:FACTORY, e.g. mymodels:build_bert (MODULE importable "
                   "from the current folder, or a path to a .py file)")
    p.add_argument("--N", required=True, help="string length")
    p.add_argument("--samples", default=None,
                   help="sample this many uniform strings (default: all 2^N)")
    p.add_argument("--seed", default="0", help="seed of the sampled strings (default 0)")
    p.add_argument("--bits", default=None, help="flip only these 1-based positions, e.g. 1,2,5 "
                   "(with --samples; default all N)")
    p.add_argument("--tokens", default=None, help="ids of bit 0 and bit 1, e.g. 3,4 (a word of "
                   "several ids: 5+6,7+8); default: the model receives float strings")
    for name, what in (("prefix", "before the bits, e.g. [CLS]"), ("suffix", "after the bits"),
                       ("sep", "between consecutive bits")):
        p.add_argument(f"--{name}", default="", help=f"comma-separated token ids {what}")
    p.add_argument("--output", choices=("logits", "probability"), default="logits",
                   help="how the output is read: logits (a score whose sign is the label; two "
                   "classes: l1 - l0; a scikit-learn estimator: its decision function) or "
                   "probability (p - threshold; scikit-learn: predict_proba)")
    p.add_argument("--threshold", default=None, help="accept when the score exceeds it (logits; "
                   "default 0) or the probability does (probability; default 0.5)")
    p.add_argument("--margin", default="0", help="scores with |T - threshold| below it are "
                   "undecided (default 0)")
    p.add_argument("--memory-mb", default="256", help="memory budget (default 256)")
    p.add_argument("--device", default=None, help="torch device for a torch.nn.Module "
                   "(default: its own)")
    p.add_argument("--out", required=True, help="the JSON file to write (checked before "
                   "anything is computed)")


class _Refused(ValueError):
    """A command-line option that cannot be used: one line, rc 2."""


def _number(text, option, kind=int, minimum=None):
    try:
        v = kind(text)
    except (TypeError, ValueError):
        raise _Refused(f"--{option} must be {'an integer' if kind is int else 'a number'}, got "
                       f"{text!r}") from None
    if kind is float and v != v:
        raise _Refused(f"--{option} must be a number, got {text!r}")
    if minimum is not None and v < minimum:
        raise _Refused(f"--{option} must be >= {minimum}, got {text!r}")
    return v


def _ids(text, option, sep=","):
    try:
        ids = [int(t) for t in text.split(sep) if t.strip()]
    except ValueError:
        raise _Refused(f"--{option} must be comma-separated token ids (integers >= 0), got "
                       f"{text!r}") from None
    if any(i < 0 for i in ids):
        raise _Refused(f"--{option} must be token ids >= 0, got {text!r}")
    return ids


def _tokens(text):
    try:
        words = [_ids(w, "tokens", "+") for w in text.split(",")]
    except _Refused:
        words = []
    if len(words) != 2 or not all(words):
        raise _Refused(f"--tokens must be the ids of bit 0 and bit 1, e.g. 3,4 (a word of several "
                       f"ids: 5+6,7+8), got {text!r}")
    return [w[0] if len(w) == 1 else w for w in words]


def _load_factory(target):
    import importlib
    import importlib.util

    module, sep, name = target.rpartition(":")
    if not sep or not module or not name:
        raise _Refused(f"the target must be MODULE:FACTORY, got {target!r}")
    if module.endswith(".py"):
        spec = importlib.util.spec_from_file_location(os.path.basename(module)[:-3], module)
        if spec is None or not os.path.exists(module):
            raise _Refused(f"no such file: {module}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        sys.path.insert(0, os.getcwd())
        mod = importlib.import_module(module)
    factory = getattr(mod, name, None)
    if not callable(factory):
        raise _Refused(f"{module} has no callable {name!r}")
    return factory


class _Above:
    """``output=`` of a TorchClassifier read as logits and thresholded: score - threshold."""

    def __init__(self, reader, threshold):
        self.reader, self.threshold = reader, threshold

    def __call__(self, out):
        return self.reader.scores(out) - self.threshold

    def __repr__(self):
        return f"logits - {self.threshold!r}"


class _Shifted:
    """A classifier's scores minus a threshold (a plain function, a scikit-learn estimator)."""

    def __init__(self, clf, threshold):
        self.clf, self.threshold = clf, threshold
        if callable(getattr(clf, "memory_per_string", None)):
            self.memory_per_string = lambda N, limit=None: clf.memory_per_string(N, limit=limit)

    def __call__(self, x):
        import torch

        return torch.as_tensor(self.clf(x)) - self.threshold

    def __repr__(self):
        return f"{self.clf!r} - {self.threshold!r}"


def _options(args) -> dict:
    """The options of ``sensbook profile``, checked (each error names its option)."""
    from .boolean import MAX_EXHAUSTIVE_N

    o = dict(N=_number(args.N, "N", minimum=1), margin=_number(args.margin, "margin", float, 0),
             memory_mb=_number(args.memory_mb, "memory-mb", float),
             samples=None if args.samples is None else _number(args.samples, "samples", minimum=1),
             seed=_number(args.seed, "seed", minimum=0), output=args.output,
             prefix=_ids(args.prefix, "prefix"), suffix=_ids(args.suffix, "suffix"),
             sep=_ids(args.sep, "sep"), tokens=None if args.tokens is None else _tokens(args.tokens),
             bits=None if args.bits is None else _ids(args.bits, "bits"))
    if not o["memory_mb"] > 0 or o["memory_mb"] == float("inf"):
        raise _Refused(f"--memory-mb must be a number > 0, got {args.memory_mb!r}")
    if o["samples"] is None and o["N"] > MAX_EXHAUSTIVE_N:
        raise _Refused(f"--N {o['N']} is too long for an exhaustive profile (N <= "
                       f"{MAX_EXHAUSTIVE_N}): pass --samples to sample strings")
    if o["bits"] is not None:
        if o["samples"] is None:
            raise _Refused("--bits flips only some positions of sampled strings: pass --samples")
        if not o["bits"] or min(o["bits"]) < 1 or max(o["bits"]) > o["N"]:
            raise _Refused(f"--bits must be positions from 1 to --N {o['N']}, got {args.bits!r}")
    if o["tokens"] is None and (o["prefix"] or o["suffix"] or o["sep"]):
        raise _Refused("--prefix/--suffix/--sep are token ids: pass --tokens as well")
    t = args.threshold
    if o["output"] == "probability":
        o["threshold"] = 0.5 if t is None else _number(t, "threshold", float)
        if not 0 < o["threshold"] < 1:
            raise _Refused(f"--threshold with --output probability must be in (0, 1), got {t!r}")
    else:
        o["threshold"] = 0.0 if t is None else _number(t, "threshold", float)
        if abs(o["threshold"]) == float("inf"):
            raise _Refused(f"--threshold must be finite, got {t!r}")
    w = 1 if o["tokens"] is None else (len(o["tokens"][0]) if isinstance(o["tokens"][0], list) else 1)
    one = 4 * o["N"] if o["tokens"] is None else 8 * (
        len(o["prefix"]) + len(o["suffix"]) + o["N"] * w + (o["N"] - 1) * len(o["sep"]))
    if one > o["memory_mb"] * 2**20:
        raise _Refused(f"--N {o['N']}: one string alone takes {one / 2**30:,.2f} GiB as the "
                       f"model's input, over --memory-mb {args.memory_mb}")
    return o


def _classifier(model, o, device):
    """The model wrapped as the options say."""
    import copy

    import torch

    from .adapters import SklearnClassifier, TorchClassifier

    kind = type(model).__name__
    if device is not None and not isinstance(model, torch.nn.Module):
        raise _Refused(f"--device {device} would be ignored: the factory returned a {kind}, not a "
                       "torch.nn.Module (it runs where it computes); drop --device")
    if isinstance(model, torch.nn.Module):
        _check_ids(model, o)
        if device is not None:
            model = model.to(device)
        tok = dict(tokens=o["tokens"], prefix=o["prefix"], suffix=o["suffix"], sep=o["sep"])
        if o["output"] == "probability":
            return TorchClassifier(model, output="probability", threshold=o["threshold"], **tok)
        clf = TorchClassifier(model, **tok)
        if o["threshold"]:
            clf.output = _Above(copy.copy(clf), o["threshold"])
        return clf
    if o["tokens"] is not None:
        raise _Refused(f"--tokens/--prefix/--suffix/--sep wrap a torch.nn.Module; the factory "
                       f"returned a {kind}")
    if hasattr(model, "fit") and hasattr(model, "predict"):      # a scikit-learn estimator
        if o["output"] == "probability":
            return SklearnClassifier(model, method="predict_proba", threshold=o["threshold"])
        clf = SklearnClassifier(model)
    elif callable(model):
        clf = model
    else:
        raise _Refused(f"the factory returned a {kind}: a torch.nn.Module, a fitted scikit-learn "
                       "classifier or a callable (B, N) -> scores is needed")
    return _Shifted(clf, o["threshold"]) if o["threshold"] else clf


def _check_ids(model, o):
    """Token ids the model's embeddings or config cannot take, and strings longer than its
    position embeddings, refused before anything is computed."""
    import torch

    if o["tokens"] is None:
        return
    cfg = getattr(model, "config", None)
    vocab = getattr(cfg, "vocab_size", None)
    try:
        emb = model.get_input_embeddings()                         # Hugging Face models
    except (AttributeError, NotImplementedError):
        emb = None
    top = vocab if isinstance(vocab, int) and vocab > 0 else getattr(emb, "num_embeddings", None)
    if isinstance(top, int):
        _ids_below(o, top, "the model's")
    positions = getattr(cfg, "max_position_embeddings", None)
    w = 1 if not isinstance(o["tokens"][0], list) else len(o["tokens"][0])
    length = len(o["prefix"]) + o["N"] * w + (o["N"] - 1) * len(o["sep"]) + len(o["suffix"])
    if isinstance(positions, int) and length > positions:
        raise _Refused(f"--N {o['N']}: the model takes at most {positions} positions "
                       f"(config.max_position_embeddings), the strings need {length}")


def _ids_below(o, top, whose):
    """Refuse the first option holding a token id >= top."""
    flat = [i for w in o["tokens"] or () for i in (w if isinstance(w, list) else [w])]
    for option, ids in (("tokens", flat), ("prefix", o["prefix"]), ("suffix", o["suffix"]),
                        ("sep", o["sep"])):
        if ids and max(ids) >= top:
            raise _Refused(f"--{option}: token id {max(ids)} is beyond {whose} {top} embeddings "
                           f"(ids 0 to {top - 1})")


def _diagnose(model, o, e) -> str:
    """One line on a model that failed while computing: the first embedding's size when a token
    id is beyond it, else the error and the options that shape the input."""
    import torch

    first = next((m for m in getattr(model, "modules", lambda: ())()
                  if isinstance(m, torch.nn.Embedding)), None)
    if first is not None and isinstance(e, IndexError):
        try:
            _ids_below(o, first.num_embeddings, "the first embedding's")
        except _Refused as r:
            return str(r)
    msg = str(e).splitlines()[0] if str(e) else ""
    return (f"the model failed on strings of --N {o['N']} ({type(e).__name__}: {msg}): is it "
            "built for this length (its positions) and these --tokens?")


def _summary(prof) -> list:
    """A few lines on a profile of one model: accepted, the k seen, the intervals."""
    if prof.counts.dim() != 1:
        return [repr(prof)]
    n, acc = prof.n_strings, int(prof.accepted)
    what = "strings" if prof.exact else "sampled strings"
    lines = [repr(prof), f"accepted: {acc} of {n} {what} ({acc / n:.3f})"]
    seen = prof.counts.nonzero().flatten().tolist()
    lo, hi = prof.interval()
    kind = "K_k / 2^N" if prof.exact else "fraction [95 % Wilson interval]"
    cells = [f"{k}: {float(prof.fractions[k]):.3f}" + (
        "" if prof.exact else f" [{float(lo[k]):.3f}, {float(hi[k]):.3f}]") for k in seen[:8]]
    lines.append(f"k seen ({kind}): " + "; ".join(cells) +
                 (f"; ... and {len(seen) - 8} more" if len(seen) > 8 else ""))
    a_lo, a_hi = prof.average_sensitivity_interval()
    avg = float(prof.average_sensitivity)
    lines.append(f"average sensitivity {avg:.3f}" + (
        "" if prof.exact else f", 95 % interval [{float(a_lo):.3f}, {float(a_hi):.3f}]"))
    return lines


def _profile(args) -> int:
    import json

    from .profile import sensitivity_profile
    from .saved import check_writable
    from .settings import check_device

    computing = False
    try:
        o = _options(args)
        device = None if args.device is None else check_device(args.device, "--device")
        try:
            check_writable(args.out)
        except (ValueError, OSError) as e:
            raise _Refused(f"--out: {e}") from None
        model = _load_factory(args.target)()
        clf = _classifier(model, o, device)
        kw = dict(n_samples=o["samples"], memory_mb=o["memory_mb"], progress=True)
        if o["samples"] is not None:
            kw.update(seed=o["seed"], bits=o["bits"])
        computing = True
        prof = sensitivity_profile(clf, o["N"], margin=o["margin"], **kw)
        computing = False
    except KeyboardInterrupt:
        print("\nsensbook: interrupted; nothing was saved", file=sys.stderr)
        return 130
    except MemoryError:
        return _fail(f"out of memory at --N {args.N}: lower --memory-mb, --N or --samples")
    except (ValueError, TypeError, ImportError, OSError, RuntimeError, IndexError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if computing and not isinstance(e, ValueError):
            msg = _diagnose(model, o, e)
        return _fail(msg)
    for line in _summary(prof):
        print(line)
    decided = prof.n_strings - prof.undecided - prof.nonfinite
    if prof.counts.dim() == 1 and int(decided) > 0 and int(prof.accepted) in (0, int(decided)):
        print(f"sensbook: warning: every one of the {int(decided)} decided strings got one label "
              f"({'accepted' if int(prof.accepted) else 'rejected'}): the model is constant on "
              "them, so the profile says only k = 0. Is it read right (--output, --threshold)?",
              file=sys.stderr)
    command = dict(o, target=args.target, device=args.device)
    try:
        prof.save(args.out, model=args.target, command=command)
    except (ValueError, OSError, TypeError, KeyboardInterrupt) as e:
        why = "interrupted" if isinstance(e, KeyboardInterrupt) else str(e)
        print(f"sensbook: the profile was computed but could not be saved to {args.out} ({why}); "
              "it follows as JSON (sensbook.Profile.from_dict reads it)", file=sys.stderr)
        d = prof.to_dict()
        d["meta"].update(model=args.target, command=command)
        print(json.dumps(d))
        return 130 if isinstance(e, KeyboardInterrupt) else 1
    print(f"saved to {args.out} (sensbook.Profile.load reads it back)")
    return 0


def _fail(message: str) -> int:
    """A bad argument: one line on stderr, exit status 2."""
    print(f"sensbook: {message}", file=sys.stderr)
    return 2


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
        return _fail(str(e))
    if args.command == "list" and args.measured is not None:
        if args.scale is None:
            return _fail("--measured needs --scale (the scale the stored results are of)")
        from .experiments import measured
        print(f"{'experiment':28s} {'stored':>9s} {'predicted':>10s} {'measured':>10s} factor")
        for r in measured(exps, args.scale, results_dir(args.measured)):
            f = "-" if r["factor"] is None else f"{r['factor']:.2f}"
            print(f"{r['name']:28s} {r['stored']:>4d}/{r['configs']:<4d} "
                  f"{r['predicted']:10.1f} {r['cpu_seconds']:10.1f} {f:>6s}")
        return 0
    if args.command == "list":
        scales = [args.scale] if args.scale else list(SCALES)
        print(f"{'experiment':28s} " + " ".join(f"{s + ' (configs, predicted)':>26s}" for s in scales))
        for e in exps:
            cells = [f"{len(e.configs(s)):>5d}, {_fmt_seconds(e.predicted_seconds(s)):>19s}"
                     for s in scales]
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
        return _fail("--workers must be >= 1")
    try:
        scale = _scale(args)
        devices = _devices(args)
        if args.device is None:
            from .settings import device

            device()                                   # $SENSBOOK_DEVICE, checked here
    except ValueError as e:
        return _fail(str(e))
    out = results_dir(args.out)                        # a relative --out: as $SENSBOOK_RESULTS
    if args.device:
        os.environ["SENSBOOK_DEVICE"] = args.device      # workers inherit it
    workers = max(args.workers, len(devices)) if devices else args.workers
    try:
        executor = _cluster_executor(args)
    except ValueError as e:
        return _fail(str(e))
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
