"""Training populations of recognizers, and chapter 6's steps-to-learn experiment.

The book's training protocol (every number lives in :class:`Protocol`, one place to change):

* **Model**: :class:`sensbook.Recognizer` (post-LN, no LN gain/bias), D = 16, L = 2, H = 2,
  F = 4D, layer-norm eps = 1e-5 (PyTorch's default; with eps > 0 Lemma 3.2 bounds the blowup,
  (1 + 1/sqrt(eps))^(2L), far above what N <= 21 needs, so it does not constrain training here).
* **Initialisation**: Xavier normal (one of the four schemes of experiment E1), one seed per
  model: model p is ``Recognizer.random(1, ..., seed=seeds[p])``.
* **Data**: fresh uniform samples of {0,1}^N at every step (no training set is reused); model
  p draws its own batch from its own generator seeded with ``seeds[p] + DATA_SEED_OFFSET``.
* **Loss**: logistic loss on T(theta, x) with labels y = +-1, ``softplus(-y T)``, mean over the
  batch; the population's loss is the *sum* over models, so each model's gradient is its own.
* **Optimizer**: AdamW, lr 1e-3, weight decay 0 (betas 0.9/0.999), constant learning rate.
  Adam's update is element-wise, so one optimizer over the population trains P independent
  models: population training equals training each seed alone (``tests/test_train.py``).
* **Steps, batch**: the step budget and batch per scale live in ``CH6_SIZES``.
* **Evaluation**: labels are sign(T) (margin xi = 0, the function the model computes); a model
  has *learned* f once its accuracy reaches ``criterion`` (0.99), on all 2^N strings when
  N <= ``exhaustive_max``, else on a fixed held-out uniform sample; steps to learn are the first
  checked step at which it does (:func:`run_config`), censored at the budget.

Seeds train together: everything is one batched computation over the population axis, on
whatever device the model is on (CPU or CUDA); no per-seed Python loop touches the model.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
import torch
import torch.nn.functional as Fn

from .boolean import FIRST, MAJORITY, PARITY, BooleanFunction, check_n, index_to_strings
from .experiments import Experiment, register
from .model import INITS, Recognizer

DATA_SEED_OFFSET = 1_000_003          # data generator of seed s: s + this (init uses s itself)
TEST_SEED_OFFSET = 2_000_003          # held-out test strings
LOSSES = ("logistic", "mse")


# ---- targets ------------------------------------------------------------------------------
def target(name: str, N: int) -> BooleanFunction:
    """The Boolean function a name stands for, at length N.

    ``PARITY``, ``FIRST``, ``MAJORITY`` (odd N: at even N a tie would be rejected, so the book
    trains MAJORITY at odd N only), ``SPARSE_PARITY_m`` and ``SPARSE_MAJORITY_m`` (m = 2..N) on
    the first m positions {1, ..., m} (a CHOICE: any fixed m positions would do; the first ones
    are where the positional feature 1[n=1] and n/(N+1) give the model a handle).
    """
    N = check_n(N)
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, got {name!r}")
    if name == "PARITY":
        return PARITY
    if name == "FIRST":
        return FIRST
    if name == "MAJORITY":
        if N % 2 == 0:
            raise ValueError(f"name='MAJORITY' needs odd N (no ties), got N={N}")
        return MAJORITY
    for kind, cls in (("SPARSE_PARITY_", "parity"), ("SPARSE_MAJORITY_", "majority")):
        if name.startswith(kind):
            try:
                m = int(name[len(kind):])
            except ValueError:
                raise ValueError(f"name={name!r}: expected {kind}m with an integer m") from None
            if not 2 <= m <= N:
                raise ValueError(f"name={name!r}: m must be in 2..N={N}, got m={m}")
            from .boolean import sparse_majority, sparse_parity
            return (sparse_parity if cls == "parity" else sparse_majority)(range(1, m + 1))
    raise ValueError(f"name={name!r} is not a target; allowed: PARITY, FIRST, MAJORITY, "
                     f"SPARSE_PARITY_m, SPARSE_MAJORITY_m")


# ---- protocol -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Protocol:
    """Every setting of a training run (see the module docstring for the reasons)."""

    D: int = 16
    L: int = 2
    H: int = 2
    F: int | None = None
    eps: float = 1e-5
    init: str = "xavier_normal"
    init_scale: float = 1.0
    loss: str = "logistic"
    lr: float = 1e-3
    weight_decay: float = 0.0
    steps: int = 1000
    batch: int = 128

    def __post_init__(self):
        for name in ("D", "L", "H", "steps", "batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.init not in INITS:
            raise ValueError(f"init={self.init!r} is unknown; allowed: {', '.join(INITS)}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss={self.loss!r} is unknown; allowed: {', '.join(LOSSES)}")
        for name in ("lr", "init_scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        for name in ("eps", "weight_decay"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Protocol":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"protocol has unknown settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**d)

    def replace(self, **kw) -> "Protocol":
        return replace(self, **kw)


def _check_seeds(seeds):
    seeds = list(seeds)
    if not seeds or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0
                        for s in seeds):
        raise ValueError(f"seeds must be a non-empty list of integers >= 0, got {seeds!r}")
    return [int(s) for s in seeds]


def init_population(seeds, protocol: Protocol = Protocol(), *, device=None,
                    dtype=torch.float32) -> Recognizer:
    """P = len(seeds) models; model p is exactly ``Recognizer.random(1, ..., seed=seeds[p])``.

    (``Recognizer.random(P, seed=s)`` draws all P models from one generator, so its model p
    depends on P; here each model depends on its own seed only.)
    """
    seeds = _check_seeds(seeds)
    pr = protocol
    one = lambda s: Recognizer.random(1, pr.D, pr.L, pr.H, pr.F, pr.eps, init=pr.init,
                                      scale=pr.init_scale, seed=s, dtype=dtype)
    theta = torch.cat([one(s).flat() for s in seeds])
    model = Recognizer(len(seeds), pr.D, pr.L, pr.H, pr.F, pr.eps, dtype=dtype)
    return model.set_flat(theta).to(device if device is not None else "cpu")


def _batch(gens, B, N, device, dtype):
    """One fresh uniform batch per model, from that model's own generator: (P, B, N)."""
    x = torch.stack([torch.randint(0, 2, (B, N), generator=g) for g in gens])
    return x.to(device=device, dtype=dtype)


def population_loss(model: Recognizer, x, y, loss: str = "logistic") -> torch.Tensor:
    """Per-model mean loss, shape (P,): ``softplus(-y T)`` (logistic) or ``(T - y)^2`` (mse).

    y in {0, 1} is mapped to -1/+1. The training objective is the sum over models, whose
    gradient with respect to model p's parameters is the gradient of model p's own loss.
    """
    T = model(x)
    s = 2 * y.to(T.dtype) - 1
    if loss == "logistic":
        per = Fn.softplus(-s * T)
    elif loss == "mse":
        per = (T - s) ** 2
    else:
        raise ValueError(f"loss={loss!r} is unknown; allowed: {', '.join(LOSSES)}")
    return per.mean(-1)


def train_population(model: Recognizer, f: BooleanFunction, N: int, seeds,
                     protocol: Protocol = Protocol(), *, log_every: int | None = None,
                     log_steps=None, until=None, progress: bool = True) -> np.ndarray:
    """Train the P models of ``model`` on f at length N, in place, as one batched computation.

    Model p sees fresh uniform strings from its own generator (seed ``seeds[p] +
    DATA_SEED_OFFSET``). One AdamW optimizer over the whole module: its update is element-wise
    and the objective is the sum of per-model losses, so the P models do not interact.

    Returns the loss curve, shape (n_logged, P): row i is each model's mean training loss over
    the steps since the previous logged step, up to step ``log_steps[i]`` (1-based counts;
    default every ``log_every`` steps, default steps/50, and the last step). ``until(step)``, if
    given, is called after every step with the number of steps done; training stops early when
    it returns True (the curve then ends with the window that contains that step).
    """
    from .scale import progress as _progress

    N = check_n(N)
    seeds = _check_seeds(seeds)
    if len(seeds) != model.P:
        raise ValueError(f"seeds must have one entry per model (P={model.P}), got {len(seeds)}")
    pr = protocol
    if log_steps is None:
        every = log_every or max(1, pr.steps // 50)
        log_steps = sorted(set(range(every, pr.steps + 1, every)) | {pr.steps})
    log_at = {int(s) for s in log_steps}
    if not log_at or min(log_at) < 1 or max(log_at) > pr.steps:
        raise ValueError(f"log_steps must lie in 1..steps={pr.steps}, got {sorted(log_at)[:5]}...")
    gens = [torch.Generator().manual_seed(s + DATA_SEED_OFFSET) for s in seeds]
    opt = torch.optim.AdamW(model.parameters(), lr=pr.lr, weight_decay=pr.weight_decay)
    curve, window, n_window = [], torch.zeros(model.P, dtype=torch.float64), 0
    model.train()
    for step in _progress(range(1, pr.steps + 1), desc=f"train {f} N={N}", disable=not progress):
        x = _batch(gens, pr.batch, N, model.device, model.dtype)
        per = population_loss(model, x, f(x), pr.loss)
        opt.zero_grad(set_to_none=True)
        per.sum().backward()
        opt.step()
        window += per.detach().double().cpu()
        n_window += 1
        stop = until is not None and bool(until(step))
        if step in log_at or stop:
            curve.append((window / n_window).numpy())
            window, n_window = torch.zeros_like(window), 0
        if stop:
            break
    model.eval()
    return np.stack(curve)


# ---- measurements -------------------------------------------------------------------------
@torch.no_grad()
def accuracy(model: Recognizer, f: BooleanFunction, N: int, *, n_test: int | None = None,
             seed: int = 0, chunk: int = 4096) -> np.ndarray:
    """Fraction of strings where sign(T) agrees with f (accept when T > 0), per model: (P,).

    On all 2^N strings when ``n_test`` is None, else on ``n_test`` uniform held-out strings
    (generator seed ``seed + TEST_SEED_OFFSET``; the same strings for every model).
    A NaN or infinite output is an error (ValueError naming the models), never a class.
    """
    N = check_n(N)
    if n_test is None:
        total, idx_all = 2**N, torch.arange(2**N)
        xs = lambda a, b: index_to_strings(idx_all[a:b], N)
    else:
        if isinstance(n_test, bool) or not isinstance(n_test, (int, np.integer)) or n_test < 1:
            raise ValueError(f"n_test must be None or an integer >= 1, got {n_test!r}")
        g = torch.Generator().manual_seed(seed + TEST_SEED_OFFSET)
        pool = torch.randint(0, 2, (int(n_test), N), generator=g).float()
        total = int(n_test)
        xs = lambda a, b: pool[a:b]
    right = torch.zeros(model.P, dtype=torch.float64)
    bad = torch.zeros(model.P, dtype=torch.int64)
    for a in range(0, total, chunk):
        x = xs(a, min(a + chunk, total)).to(model.device, model.dtype)
        T = model(x)
        bad += (~torch.isfinite(T)).sum(-1).cpu()
        right += ((T > 0) == f(x).unsqueeze(0)).sum(-1).double().cpu()
    if bad.any():
        which = {int(p): int(bad[p]) for p in torch.nonzero(bad).flatten()}
        raise ValueError(f"model output is NaN or infinite (model: number of strings) {which}; "
                         f"accuracy is undefined there")
    return (right / total).numpy()


def eval_schedule(budget: int, every: int, growth: float) -> list:
    """The steps at which the criterion is checked: every ``every`` steps, and once the step
    count t is large, every ``ceil(growth * t)`` steps (a relative resolution ``growth``);
    always at the budget itself, so a run that has not met the criterion there is censored."""
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"eval_every must be an integer >= 1, got {every!r}")
    if not (isinstance(growth, (int, float)) and 0 <= growth <= 1):
        raise ValueError(f"eval_growth must be a number in [0, 1], got {growth!r}")
    out, t = [], every
    while t < budget:
        out.append(t)
        t += max(every, math.ceil(growth * t))
    return out + [budget]


def curve_schedule(budget: int, points: int) -> list:
    """Logged steps of the loss curve: about ``points`` geometrically spaced steps in 1..budget
    (dense early, where the easy targets learn; sparse late, along a plateau)."""
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise ValueError(f"curve_points must be an integer >= 2, got {points!r}")
    return sorted({int(round(s)) for s in np.geomspace(1, budget, points)})


# ---- chapter 6: steps to learn ------------------------------------------------------------
CONFIG_KEYS = ("target", "N", "seeds", "protocol", "criterion", "eval_every", "eval_growth",
               "exhaustive_max", "n_test", "curve_points", "dtype")


def run_config(config: dict, *, device=None, progress: bool = False) -> dict:
    """Steps to learn: train ``seeds`` models on ``target`` at length ``N`` for at most
    ``protocol["steps"]`` steps (the budget) and record, per seed, the first checked step at
    which its accuracy reaches ``criterion``; a seed that never does is *censored* (None).

    The accuracy is checked at :func:`eval_schedule` (``eval_every``, ``eval_growth``) on all
    2^N strings when N <= ``exhaustive_max``, else on ``n_test`` held-out uniform strings (the
    same ones at every check). Training stops once every seed has met the criterion (later
    steps cannot change a first-passage time). Results (JSON-ready): ``steps`` (per seed, int
    or None), ``budget``, ``steps_run``, the loss curve (``curve_steps``, ``curve``: mean loss
    per window of :func:`curve_schedule`, per seed), the checked accuracies (``eval_steps``,
    ``eval_accuracy``), ``accuracy_strings``, ``cpu_seconds`` and ``device``.
    """
    from .scale import device as _default_device

    missing = [k for k in CONFIG_KEYS if k not in config]
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if missing or unknown:
        raise ValueError(f"config is missing {missing} / has unknown keys {unknown}; "
                         f"expected exactly {list(CONFIG_KEYS)}")
    N = check_n(config["N"])
    f = target(config["target"], N)
    seeds = _check_seeds(config["seeds"])
    pr = Protocol.from_dict(config["protocol"])
    crit = config["criterion"]
    if not (isinstance(crit, float) and 0.5 < crit <= 1):
        raise ValueError(f"criterion must be an accuracy in (0.5, 1], got {crit!r}")
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    if config["dtype"] not in dtypes:
        raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {config['dtype']!r}")
    dev = torch.device(device) if device is not None else _default_device()

    threads = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(1)   # tiny matrices: one thread is fastest; parallelise with workers
    try:
        return _steps_to_learn(config, N, f, seeds, pr, crit, dev, dtypes[config["dtype"]],
                               progress)
    finally:
        torch.set_num_threads(threads)


def _steps_to_learn(config, N, f, seeds, pr, crit, dev, dtype, progress):
    c0 = time.process_time()
    n_test = None if N <= int(config["exhaustive_max"]) else int(config["n_test"])
    checks = set(eval_schedule(pr.steps, config["eval_every"], config["eval_growth"]))
    log_steps = curve_schedule(pr.steps, config["curve_points"])
    model = init_population(seeds, pr, device=dev, dtype=dtype)
    first = [None] * len(seeds)
    eval_steps, eval_acc, done = [], [], [0]

    def until(step):
        done[0] = step
        if step not in checks:
            return False
        acc = accuracy(model, f, N, n_test=n_test)
        model.train()
        eval_steps.append(step)
        eval_acc.append(acc.tolist())
        for p, a in enumerate(acc):
            if first[p] is None and a >= crit:
                first[p] = step
        return all(s is not None for s in first)

    curve = train_population(model, f, N, seeds, pr, log_steps=log_steps, until=until,
                             progress=progress)
    return {
        "name": str(f),
        "steps": first,
        "budget": pr.steps,
        "steps_run": done[0],
        "curve_steps": [s for s in log_steps if s < done[0]] + [done[0]],
        "curve": curve.tolist(),
        "eval_steps": eval_steps,
        "eval_accuracy": eval_acc,
        "accuracy_strings": 2**N if n_test is None else n_test,
        "cpu_seconds": time.process_time() - c0,
        "device": str(dev),
    }


CH6_TARGETS = ("PARITY", "FIRST", "MAJORITY")

#: Sizes of chapter 6 at each scale: the one place they live (the chapter, the experiment
#: registry and the CLI read them). ``Ns``: lengths (odd, so MAJORITY has no ties);
#: ``seeds``: models per (target, N), trained as one population; ``budget``: the step budget;
#: ``batch``, ``lr``: the protocol's; ``criterion``: the accuracy that counts as learned,
#: checked every ``eval_every`` steps (and every ``eval_growth`` x the step count later on),
#: on all 2^N strings up to ``exhaustive_max``, above it on ``n_test`` held-out strings;
#: ``curve_points``: points of the stored loss curve.
CH6_SIZES = {
    "ci": dict(Ns=[3, 5, 7, 9], seeds=4, budget=1500, batch=64, lr=1e-3,
               targets=list(CH6_TARGETS)),
    "book": dict(Ns=[5, 7, 9, 11, 13], seeds=6, budget=3000, batch=64, lr=1e-3,
                 targets=list(CH6_TARGETS)),
    "paper": dict(Ns=[5, 7, 9, 11, 13, 15, 17, 19], seeds=8, budget=10000, batch=64, lr=1e-3,
                  targets=list(CH6_TARGETS) + ["SPARSE_PARITY_2", "SPARSE_PARITY_3"]),
}
CH6_EVAL = dict(criterion=0.99, eval_every=5, eval_growth=0.05, exhaustive_max=11, n_test=2048,
                curve_points=60, dtype="float32")


def ch6_configs(Ns, seeds, budget, batch, lr, targets=CH6_TARGETS, **evaluation) -> list:
    """The configurations of chapter 6: one per (target, N), ``seeds`` models each."""
    ev = {**CH6_EVAL, **evaluation}
    pr = Protocol(steps=int(budget), batch=int(batch), lr=float(lr)).to_dict()
    return [dict(target=t, N=int(N), seeds=list(range(int(seeds))), protocol=pr, **ev)
            for t in targets for N in Ns]


def ch6_sweep(scale: str, **overrides):
    """Chapter 6's sweep at a scale (``CH6_SIZES``; ``overrides`` change single sizes)."""
    from .scale import _check
    from .sweep import Sweep

    sizes = {**CH6_SIZES[_check(scale, "scale")], **overrides}
    return Sweep("ch6.training", ch6_configs(**sizes), "sensbook.train:run_config")


#: Steps a configuration runs (until its slowest seed learns, at most the budget),
#: log2(steps) = a + b N, per target: a rough fit to measured ci and book runs, used only to
#: predict cost (other targets are predicted at the full budget).
_COST_STEPS = {"PARITY": (5.1, 0.6), "FIRST": (4.9, 0.07), "MAJORITY": (4.0, 0.15)}


def ch6_cost(config: dict) -> float:
    """Predicted CPU-seconds (one thread) of one configuration: steps x (a per-step overhead
    + seeds x batch x (N+1) positions) plus the accuracy checks (seeds x strings x (N+1)),
    with the steps from ``_COST_STEPS``; constants fitted on measured ci runs."""
    pr, N, P = config["protocol"], config["N"], len(config["seeds"])
    a, b = _COST_STEPS.get(config["target"], (math.log2(pr["steps"]), 0.0))
    steps = min(pr["steps"], 2 ** (a + b * N))
    checks = sum(1 for s in eval_schedule(pr["steps"], config["eval_every"], config["eval_growth"])
                 if s <= steps)
    strings = 2**N if N <= config["exhaustive_max"] else config["n_test"]
    return 0.05 + steps * (8e-3 + 3e-6 * P * pr["batch"] * (N + 1)) \
        + 1.5e-6 * checks * P * strings * (N + 1)


register(Experiment("ch6.training", lambda scale: ch6_sweep(scale).configs,
                    "sensbook.train:run_config", ch6_cost,
                    doc="steps to learn each target at each N, several seeds (chapter 6)"))


# ---- chapter 6: analysis ------------------------------------------------------------------
def ch6_times(configs, results) -> list:
    """One row per (target, N): the per-seed steps to learn as an array with ``inf`` for
    censored seeds, the budget, and counts (None results are skipped)."""
    rows = []
    for c, r in zip(configs, results):
        if r is None:
            continue
        t = np.array([np.inf if s is None else s for s in r["steps"]], dtype=float)
        rows.append(dict(target=c["target"], name=r["name"], N=int(c["N"]), steps=t,
                         budget=int(r["budget"]), learned=int(np.isfinite(t).sum()),
                         seeds=len(t), steps_run=int(r["steps_run"]),
                         curve_steps=np.asarray(r["curve_steps"]), curve=np.asarray(r["curve"])))
    return rows


def plateau_exit(row, drop: float = 0.1) -> np.ndarray:
    """Per seed, the first logged step at which the window-mean training loss is below
    log 2 - ``drop`` (log 2 is the loss of the output T = 0, i.e. of a model that has not yet
    found any signal); ``inf`` if it never is. Resolution: the windows of :func:`curve_schedule`."""
    below = row["curve"] < math.log(2) - drop                       # (windows, seeds)
    hit = below.any(0)
    return np.where(hit, row["curve_steps"][below.argmax(0)], np.inf)


def growth_rate(rows, target_name: str, *, n_boot: int = 2000, seed: int = 0,
                level: float = 0.95) -> dict:
    """Fitted growth of the steps to learn with N: the least-squares slope b of
    log2(steps) = a + b N over every seed at every N of ``target_name``, with censored seeds
    counted at the budget (which understates them), and a bootstrap interval (seeds resampled
    within each N). Returns ``slope``, ``low``, ``high``, ``censored`` (count) and ``n``."""
    rs = [r for r in rows if r["target"] == target_name]
    if len({r["N"] for r in rs}) < 2:
        raise ValueError(f"target_name={target_name!r}: need at least two lengths, got "
                         f"{sorted(r['N'] for r in rs)}")
    Ns = [np.full(r["seeds"], r["N"], dtype=float) for r in rs]
    ys = [np.log2(np.minimum(r["steps"], r["budget"])) for r in rs]
    slope = lambda x, y: np.polyfit(x, y, 1)[0]
    b = slope(np.concatenate(Ns), np.concatenate(ys))
    rng = np.random.default_rng(seed)
    boot = [slope(np.concatenate(Ns), np.concatenate([y[rng.integers(0, len(y), len(y))]
                                                      for y in ys])) for _ in range(n_boot)]
    lo, hi = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2])
    return dict(target=target_name, slope=float(b), low=float(lo), high=float(hi),
                censored=int(sum(np.isinf(r["steps"]).sum() for r in rs)),
                n=int(sum(r["seeds"] for r in rs)), level=level)


def ch6_table(rows) -> str:
    """The results as an HTML table (for ``IPython.display.HTML``): one row per (target, N)."""
    head = ("target", "N", "learned within budget", "steps to learn: median [min, max]",
            "budget")
    cell = lambda v: f"<td>{v}</td>"
    out = ["<table>", "<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>",
           "<tbody>"]
    for r in rows:
        t = r["steps"]
        fin = t[np.isfinite(t)]
        med = np.median(t)          # inf when more than half are censored
        span = (f"{med:.0f}" if np.isfinite(med) else f"&gt; {r['budget']}") + (
            f" [{fin.min():.0f}, " + (f"{t.max():.0f}]" if np.isfinite(t.max()) else "censored]")
            if fin.size else "")
        out.append("<tr>" + "".join(cell(v) for v in (
            r["name"], r["N"], f"{r['learned']}/{r['seeds']}", span, r["budget"])) + "</tr>")
    return "\n".join(out + ["</tbody>", "</table>"])
