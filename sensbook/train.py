"""Training populations of recognizers, and the measurements chapter 6 reports.

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
* **Steps, batch**: chosen per scale by the chapter (``sb.pick``), stated there.
* **Evaluation**: labels are sign(T) (margin xi = 0, the function the model computes);
  accuracy and profiles on all 2^N strings when N <= ``exhaustive_max``, else on a held-out
  uniform sample (accuracy) and a sampled profile (each sampled string with its N neighbours).

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
from .profile import sensitivity_profile

DATA_SEED_OFFSET = 1_000_003          # data generator of seed s: s + this (init uses s itself)
TEST_SEED_OFFSET = 2_000_003          # held-out test strings
PROFILE_SEED_OFFSET = 3_000_017       # sampled profiles
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
                     progress: bool = True) -> np.ndarray:
    """Train the P models of ``model`` on f at length N, in place, as one batched computation.

    Model p sees fresh uniform strings from its own generator (seed ``seeds[p] +
    DATA_SEED_OFFSET``). One AdamW optimizer over the whole module: its update is element-wise
    and the objective is the sum of per-model losses, so the P models do not interact.
    Returns the loss curve, shape (n_logged, P) (every ``log_every`` steps, default steps/50).
    """
    from .scale import progress as _progress

    N = check_n(N)
    seeds = _check_seeds(seeds)
    if len(seeds) != model.P:
        raise ValueError(f"seeds must have one entry per model (P={model.P}), got {len(seeds)}")
    pr = protocol
    log_every = log_every or max(1, pr.steps // 50)
    gens = [torch.Generator().manual_seed(s + DATA_SEED_OFFSET) for s in seeds]
    opt = torch.optim.AdamW(model.parameters(), lr=pr.lr, weight_decay=pr.weight_decay)
    curve = []
    model.train()
    for step in _progress(range(pr.steps), desc=f"train {f} N={N}", disable=not progress):
        x = _batch(gens, pr.batch, N, model.device, model.dtype)
        per = population_loss(model, x, f(x), pr.loss)
        opt.zero_grad(set_to_none=True)
        per.sum().backward()
        opt.step()
        if step % log_every == 0 or step == pr.steps - 1:
            curve.append(per.detach().cpu().numpy())
    model.eval()
    return np.stack(curve)


# ---- measurements -------------------------------------------------------------------------
def profile_tv(fractions, target_fractions) -> np.ndarray:
    """Total-variation distance between profiles: (1/2) sum_k |p_k - q_k|, in [0, 1].

    Profiles are normalised (K_k / 2^N). Between a target f and a constant function it is
    1 - K_0(f)/2^N: 1 for PARITY, FIRST and sparse PARITY, and 2 C(N,(N-1)/2)/2^N for MAJORITY.
    """
    p = np.asarray(fractions, dtype=np.float64)
    q = np.asarray(target_fractions, dtype=np.float64)
    return 0.5 * np.abs(p - q).sum(-1)


@torch.no_grad()
def accuracy(model: Recognizer, f: BooleanFunction, N: int, *, n_test: int | None = None,
             seed: int = 0, chunk: int = 4096) -> np.ndarray:
    """Fraction of strings where sign(T) agrees with f, per model: (P,).

    On all 2^N strings when ``n_test`` is None, else on ``n_test`` uniform held-out strings
    (generator seed ``seed + TEST_SEED_OFFSET``; the same strings for every model).
    NaN outputs count as errors.
    """
    N = check_n(N)
    if n_test is None:
        total, idx_all = 2**N, torch.arange(2**N)
        xs = lambda a, b: index_to_strings(idx_all[a:b], N)
    else:
        g = torch.Generator().manual_seed(seed + TEST_SEED_OFFSET)
        pool = torch.randint(0, 2, (int(n_test), N), generator=g).float()
        total = int(n_test)
        xs = lambda a, b: pool[a:b]
    right = torch.zeros(model.P, dtype=torch.float64)
    for a in range(0, total, chunk):
        x = xs(a, min(a + chunk, total)).to(model.device, model.dtype)
        T = model(x)
        right += ((T > 0) == f(x).unsqueeze(0)).sum(-1).double().cpu()
    return (right / total).numpy()


def _profile(model, N, exhaustive_max, n_profile, seed):
    if N <= exhaustive_max:
        return sensitivity_profile(model, N, progress=False)
    return sensitivity_profile(model, N, n_samples=int(n_profile), seed=seed + PROFILE_SEED_OFFSET,
                               progress=False)


def _summary(prof):
    """JSON-ready numbers of a population's profile."""
    return {
        "exact": bool(prof.exact),
        "n_strings": int(prof.n_strings),
        "counts": prof.counts.cpu().tolist(),
        "fractions": prof.fractions.cpu().tolist(),
        "stderr": prof.stderr.cpu().tolist(),
        "undecided": prof.undecided.cpu().tolist(),
        "nonfinite": prof.nonfinite.cpu().tolist(),
        "incomplete": prof.incomplete.cpu().tolist(),
        "average_sensitivity": prof.average_sensitivity.cpu().tolist(),
    }


def run_config(config: dict, *, device=None, progress: bool = False) -> dict:
    """Run one configuration of a training sweep and return its results (JSON-ready).

    ``config``: ``target`` (a name for :func:`target`), ``N``, ``seeds``, ``protocol`` (a
    :class:`Protocol` as dict), ``exhaustive_max`` (largest N measured on all 2^N strings),
    ``n_test`` and ``n_profile`` (held-out strings for accuracy and sampled strings for the
    profile above ``exhaustive_max``), ``dtype`` (``float32`` or ``float64``).
    Results: per-seed ``accuracy``, profiles ``before`` and ``after`` training, the target's
    exact ``target_fractions``, ``tv_before``/``tv_after`` (:func:`profile_tv`), the loss
    curve, and timings.
    """
    from .scale import device as _default_device

    need = ("target", "N", "seeds", "protocol", "exhaustive_max", "n_test", "n_profile", "dtype")
    missing = [k for k in need if k not in config]
    if missing:
        raise ValueError(f"config is missing {missing}")
    N = check_n(config["N"])
    f = target(config["target"], N)
    seeds = _check_seeds(config["seeds"])
    pr = Protocol.from_dict(config["protocol"])
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    if config["dtype"] not in dtypes:
        raise ValueError(f"dtype must be one of {sorted(dtypes)}, got {config['dtype']!r}")
    dev = torch.device(device) if device is not None else _default_device()

    threads = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(1)   # tiny matrices: one thread is fastest; parallelise with workers
    try:
        return _run(config, N, f, seeds, pr, dev, dtypes[config["dtype"]], progress)
    finally:
        torch.set_num_threads(threads)


def _run(config, N, f, seeds, pr, dev, dtype, progress):
    exmax, n_prof = int(config["exhaustive_max"]), int(config["n_profile"])
    n_test = None if N <= exmax else int(config["n_test"])
    t0, c0 = time.time(), time.process_time()
    model = init_population(seeds, pr, device=dev, dtype=dtype)
    before = _profile(model, N, exmax, n_prof, seed=0)
    acc0 = accuracy(model, f, N, n_test=n_test)
    t1 = time.time()
    curve = train_population(model, f, N, seeds, pr, progress=progress)
    t2 = time.time()
    after = _profile(model, N, exmax, n_prof, seed=0)
    acc = accuracy(model, f, N, n_test=n_test)
    tfrac = (f.profile(N) / 2.0**N).tolist()
    return {
        "name": str(f),
        "accuracy_before": acc0.tolist(),
        "accuracy": acc.tolist(),
        "accuracy_strings": 2**N if n_test is None else n_test,
        "before": _summary(before),
        "after": _summary(after),
        "target_fractions": tfrac,
        "tv_before": profile_tv(before.fractions.cpu().numpy(), tfrac).tolist(),
        "tv_after": profile_tv(after.fractions.cpu().numpy(), tfrac).tolist(),
        "loss_curve": curve.tolist(),
        "final_loss": curve[-1].tolist(),
        "seconds_train": t2 - t1,
        "seconds_total": time.time() - t0,
        "cpu_seconds": time.process_time() - c0,
        "device": str(dev),
    }


# ---- chapter 6: the sweep and its analysis -------------------------------------------------
CH6_TARGETS = ("PARITY", "FIRST", "MAJORITY", "SPARSE_PARITY_2", "SPARSE_PARITY_3",
               "SPARSE_PARITY_4", "SPARSE_MAJORITY_2", "SPARSE_MAJORITY_3", "SPARSE_MAJORITY_4")

#: Sizes of chapter 6 at each scale (the one place they live; the chapter and the CLI read it).
#: ``Ns``: lengths (MAJORITY is trained at N+1 when N is even); ``seeds``: models per cell;
#: ``exhaustive_max``: largest N measured on all 2^N strings; above it accuracy uses ``n_test``
#: held-out strings and the profile ``n_profile`` sampled strings (each with its N neighbours).
#: N <= 61: the exact target profiles (int64 closed forms) stop at N = 62.
CH6_SIZES = {
    "ci": dict(Ns=[5, 10, 15], seeds=3, steps=300, batch=64, exhaustive_max=12, n_test=4096,
               n_profile=500, dtype="float32"),
    "book": dict(Ns=[5, 10, 15, 20], seeds=4, steps=300, batch=64, exhaustive_max=15,
                 n_test=8192, n_profile=1000, dtype="float32"),
    "paper": dict(Ns=[5, 10, 15, 20, 25, 30, 40, 50, 60], seeds=16, steps=3000, batch=256,
                  exhaustive_max=20, n_test=65536, n_profile=4000, dtype="float32"),
}


def ch6_length(name: str, N: int) -> int:
    """The length a target is trained at for grid value N (MAJORITY needs odd N: N or N+1)."""
    return N + 1 if name == "MAJORITY" and N % 2 == 0 else N


def ch6_configs(Ns, seeds, steps, batch, exhaustive_max, n_test, n_profile, dtype="float32",
                targets=CH6_TARGETS, protocol: Protocol | None = None) -> list:
    """The configurations of chapter 6: one per (target, N), ``seeds`` models each."""
    pr = (protocol or Protocol()).replace(steps=int(steps), batch=int(batch))
    return [dict(target=t, N=ch6_length(t, N), seeds=list(range(int(seeds))), protocol=pr.to_dict(),
                 exhaustive_max=int(exhaustive_max), n_test=int(n_test), n_profile=int(n_profile),
                 dtype=dtype)
            for N in Ns for t in targets]


def ch6_sweep(scale: str, **overrides):
    """Chapter 6's sweep at a scale (``CH6_SIZES``; ``overrides`` change single sizes)."""
    from .sweep import Sweep

    if scale not in CH6_SIZES:
        raise ValueError(f"scale={scale!r} is not a scale; allowed: {', '.join(CH6_SIZES)}")
    sizes = {**CH6_SIZES[scale], **overrides}
    return Sweep("ch6.training", ch6_configs(**sizes), "sensbook.train:run_config")


def ch6_cost(config: dict) -> float:
    """Predicted seconds of one chapter-6 configuration on the reference machine: training
    (seeds x steps x batch strings, each N+1 positions) plus evaluation (fitted on ci runs)."""
    pr = config["protocol"]
    width = pr["D"] ** 2 * pr["L"]
    train = len(config["seeds"]) * pr["steps"] * pr["batch"] * (config["N"] + 1) * width
    evals = len(config["seeds"]) * min(2 ** config["N"], config["n_profile"] * (config["N"] + 1)) \
        * (config["N"] + 1) * width
    return 2.0 + 1.5e-8 * train + 2e-9 * evals


register(Experiment("ch6.training", lambda scale: ch6_sweep(scale).configs,
                    "sensbook.train:run_config", ch6_cost,
                    doc="training each target at each N, several seeds (chapter 6)"))


def reference_distance(target_fractions) -> float:
    """R(f) = 1 - K_0(f)/2^N: the profile distance (TV) from target f to a constant function.

    The book's thresholds are halfway points between the target and a constant function (the
    low-sensitivity default): a model has *learned* f when its accuracy exceeds 1 - R/2 (what
    a function gets that is right on all of f's zero-sensitivity strings and at chance on the
    others) and its profile is within R/2 of f's.
    """
    return 1.0 - float(np.asarray(target_fractions)[0])


def analyse(config: dict, result: dict, z: float = 3.0) -> dict:
    """Per-seed numbers of one cell, with z-standard-error margins for sampled estimates.

    Returns arrays over seeds: ``accuracy``, ``acc_se`` (binomial, 0 when exhaustive),
    ``tv``, ``tv_margin`` (z/2 sum_k stderr_k, 0 when exact), ``avg_sens``, ``avg_sens_se``,
    ``k0_frac`` (K_0/2^N or its estimate), ``k0_witnessed`` (a zero-sensitivity string was
    found), ``learned`` (the criterion of :func:`reference_distance`, on point estimates), and
    the target's ``R``, ``target_avg_sens``, ``target_k0_frac``.
    """
    N = int(config["N"])
    a = result["after"]
    acc = np.asarray(result["accuracy"])
    n_acc = result["accuracy_strings"]
    exact_acc = n_acc == 2**N
    acc_se = np.zeros_like(acc) if exact_acc else np.sqrt(acc * (1 - acc) / n_acc)
    frac, se = np.asarray(a["fractions"]), np.asarray(a["stderr"])
    tfrac = np.asarray(result["target_fractions"])
    k = np.arange(N + 1)
    n_complete = np.asarray(a["counts"]).sum(-1)
    avg = (frac * k).sum(-1) / np.maximum(frac.sum(-1), 1e-300)
    var = (frac * k**2).sum(-1) / np.maximum(frac.sum(-1), 1e-300) - avg**2
    avg_se = np.zeros_like(avg) if a["exact"] else np.sqrt(np.maximum(var, 0) / np.maximum(n_complete, 1))
    R = reference_distance(tfrac)
    tv = np.asarray(result["tv_after"])
    learned = (acc > 1 - R / 2) & (tv < R / 2)
    return dict(N=N, target=config["target"], name=result["name"], seeds=len(acc), accuracy=acc,
                acc_se=acc_se, tv=tv, tv_margin=z / 2 * se.sum(-1), tv_before=np.asarray(result["tv_before"]),
                avg_sens=avg, avg_sens_se=avg_se, k0_frac=frac[:, 0],
                k0_frac_before=np.asarray(result["before"]["fractions"])[:, 0],
                k0_witnessed=np.asarray(a["counts"])[:, 0] > 0, exact=bool(a["exact"]),
                learned=learned, R=R, target_avg_sens=float((tfrac * k).sum()),
                target_k0_frac=float(tfrac[0]), z=z)


def ch6_rows(sweep, results) -> list:
    """:func:`analyse` of every finished cell of a chapter-6 sweep (None results skipped)."""
    return [analyse(c, r) for c, r in zip(sweep.configs, results) if r is not None]


def ch6_table(rows) -> str:
    """The results table as Markdown: one row per (target, N)."""
    head = ("| target | N | learned | accuracy mean [min, max] | K_0/2^N learned (target) "
            "| as learned (target) | TV to target: before → after |\n|---|---|---|---|---|---|---|")
    out = [head]
    for a in rows:
        acc = a["accuracy"]
        out.append(
            f"| {a['name']} | {a['N']} | {int(a['learned'].sum())}/{a['seeds']} "
            f"| {acc.mean():.3f} [{acc.min():.3f}, {acc.max():.3f}] "
            f"| {a['k0_frac'].mean():.3f} ({a['target_k0_frac']:.3f}) "
            f"| {a['avg_sens'].mean():.2f} ({a['target_avg_sens']:.2f}) "
            f"| {a['tv_before'].mean():.2f} → {a['tv'].mean():.2f} |")
    return "\n".join(out)
