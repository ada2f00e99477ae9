"""Training populations of recognizers (chapter 6's experiments are in
``experiments/ch6_training.py``).

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
* **Steps, batch**: the step budget and batch per scale live in
  ``sensbook.experiments.ch6_training.SIZES``.
* **Evaluation**: labels are sign(T) (margin xi = 0, the function the model computes); a model
  has *learned* f once its accuracy reaches ``criterion`` (0.99), on all 2^N strings when
  N <= ``exhaustive_max``, else on a fixed held-out uniform sample; steps to learn are the first
  checked step at which it does (``sensbook.experiments.ch6_training.run_config``), censored at the
  budget.

Seeds train together: everything is one batched computation over the population axis, on
whatever device the model is on (CPU or CUDA); no per-seed Python loop touches the model.
"""
from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
import torch
import torch.nn.functional as Fn

from .boolean import (MAX_EXHAUSTIVE_N, PARITY, BooleanFunction, check_int, check_n, check_real,
                      index_to_strings)
from .boolean import target  # noqa: F401  (the chapters import it from here)
from .adapters import Classifier
from .labels import Evaluator
from .model import INITS, Recognizer
from .settings import check_device

DATA_SEED_OFFSET = 1_000_003          # data generator of seed s: s + this (init uses s itself)
TEST_SEED_OFFSET = 2_000_003          # held-out test strings
LOSSES = ("logistic", "mse")


# ---- protocol -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Protocol:
    r"""Every setting of a training run (``sensbook.train``'s docstring gives the reasons).

    Parameters
    ----------
    D, L, H, F : int
        The model's width, layers, heads and feed-forward width (None: ``4 D``), as for
        :class:`sensbook.Recognizer`.
    eps : float
        The layer norms' :math:`\varepsilon` (PyTorch's default 1e-5).
    init : {"uniform", "gaussian", "xavier_uniform", "xavier_normal"}
        The initialisation (:meth:`sensbook.Recognizer.random`).
    init_scale : float
        Its scale, > 0.
    loss : {"logistic", "mse"}
        The training loss (:func:`population_loss`).
    lr, weight_decay : float
        AdamW's constant learning rate (> 0) and its weight decay (>= 0).
    steps, batch : int
        The step budget, and the fresh uniform strings a step sees, per model.
    """

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
        # numpy scalars are numbers (stored as Python ones: a protocol is JSON); bools are not
        for name in ("D", "L", "H", "steps", "batch"):
            object.__setattr__(self, name, check_int(getattr(self, name), name, minimum=1))
        if self.init not in INITS:
            raise ValueError(f"init={self.init!r} is unknown; allowed: {', '.join(INITS)}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss={self.loss!r} is unknown; allowed: {', '.join(LOSSES)}")
        for name in ("lr", "init_scale", "eps", "weight_decay"):
            v = check_real(getattr(self, name), name, minimum=0, strict=name in ("lr", "init_scale"))
            object.__setattr__(self, name, v)

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


def population_loss(model: Classifier, x, y, loss: str = "logistic") -> torch.Tensor:
    """Per-model mean loss: ``softplus(-y T)`` (logistic) or ``(T - y) ** 2`` (mse).

    Parameters
    ----------
    model : callable
        A population returning scores ``(P, B)`` (or one model, ``(B,)``).
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    y : torch.Tensor
        Their labels in {0, 1}, mapped to -1/+1.
    loss : {"logistic", "mse"}
        The loss.

    Returns
    -------
    torch.Tensor
        Shape ``(P,)``. The training objective is the sum over models, whose gradient with
        respect to model p's parameters is the gradient of model p's own loss.
    """
    T = scores_like(model(x), y)
    s = 2 * y.to(T.dtype) - 1
    if loss == "logistic":
        per = Fn.softplus(-s * T)
    elif loss == "mse":
        per = (T - s) ** 2
    else:
        raise ValueError(f"loss={loss!r} is unknown; allowed: {', '.join(LOSSES)}")
    return per.mean(-1)


def scores_like(T, y) -> torch.Tensor:
    """A model's output as scores matching the labels ``y`` (B,) or (P, B): one logit per
    string, (B, 1) (an ``nn.Linear(D, 1)`` head), is read as (B,); any other shape whose last
    axis is not the B strings is refused (it would broadcast against the labels into a B x B
    loss)."""
    if not isinstance(T, torch.Tensor):
        raise TypeError(f"the model returned {type(T).__name__}, not a tensor of scores: wrap it "
                        "in sb.TorchClassifier(model), which reads a ModelOutput's .logits")
    B = y.shape[-1]
    if T.dim() == 2 and T.shape == (B, 1) and y.dim() == 1:
        T = T[:, 0]
    if T.dim() == 0 or T.shape[-1] != B or T.dim() > max(y.dim(), 2):
        raise ValueError(f"the model returned shape {tuple(T.shape)} for B={B} strings: a loss "
                         "needs one score per string, (B,) or (P, B), or one logit (B, 1); "
                         "for two-class logits (B, 2) wrap the model in sb.TorchClassifier(model) "
                         "(the logit difference)")
    return T


def subpopulation(model, idx):
    """Models ``idx`` (a list of indices) of a population whose parameters carry the population
    axis first, as a new population of the same class (copies of their parameters)."""
    sub = copy.deepcopy(model)
    with torch.no_grad():
        for p in sub.parameters():
            p.data = p.data[idx].clone()
    sub.P = len(idx)
    return sub


def _narrowed(work, opt, keep, protocol):
    """The population ``work`` and its AdamW ``opt`` restricted to the models ``keep``: the
    optimizer's state (moments, step count) sliced, so each kept model's next update is the one
    it would have had in the full population (Adam is element-wise)."""
    sub = subpopulation(work, keep)
    new = torch.optim.AdamW(sub.parameters(), lr=protocol.lr, weight_decay=protocol.weight_decay)
    for old, p in zip(work.parameters(), sub.parameters()):
        new.state[p] = {k: (v[keep].clone() if torch.is_tensor(v) and v.dim() else
                            v.clone() if torch.is_tensor(v) else v)
                        for k, v in opt.state.get(old, {}).items()}
    return sub, new


def train_population(model: Recognizer, f: BooleanFunction, N: int, seeds,
                     protocol: Protocol = Protocol(), *, log_every: int | None = None,
                     log_steps=None, until=None, drop=None,
                     progress: bool = True) -> np.ndarray:
    """Train the P models of ``model`` on f at length N, in place, as one batched computation.

    Parameters
    ----------
    model : Recognizer
        The population (e.g. ``sensbook.train.init_population``), trained in place.
    f : BooleanFunction
        The target.
    N : int
        The string length.
    seeds : sequence of int
        One seed per model: model p's data come from seed ``seeds[p] + DATA_SEED_OFFSET``.
    protocol : Protocol
        The settings (loss, learning rate, steps, batch).
    log_every : int, optional
        Log every this many steps (default ``steps / 50``), and the last step.
    log_steps : sequence of int, optional
        The 1-based steps at which to log instead.
    until : callable, optional
        ``until(step)`` is called after every step with the number of steps done; training
        stops early when it returns True.
    drop : callable, optional
        ``drop(step)`` is called after ``until`` and returns the indices of models whose
        training is over: they leave the batch, and their parameters stay as they are from then
        on. The others train as before (each model's batches come from its own generator,
        and every operation acts on each model alone), so a population that drops its
        finished models costs only what its unfinished ones do. In the book's widths (D = 16)
        they train number for number as before (measured on the default, avx2 and AVX-512
        kernel paths; ``tests/test_train.py`` checks the machine's own; the population keeps
        at least two models: one alone takes other kernels); in other
        shapes a smaller batch of models can take a kernel that rounds otherwise (at D = 8,
        the positional vectors' gradient), the difference another CPU makes.
    progress : bool
        Show a progress bar.

    Returns
    -------
    numpy.ndarray
        The loss curve ``(n_logged, P)``: row i is each model's mean training loss over the
        steps since the previous logged step (with ``until``, the curve ends with the window
        that contains the last step); a dropped model's mean is over the steps it trained in
        that window, NaN after it.
    """
    from .settings import progress as _progress

    if _population_axis(model) is None:
        raise ValueError(f"model must be a population whose parameters carry the population axis "
                         f"first (sb.Recognizer, sb.control_population), got "
                         f"{type(model).__name__}: train one model of your own with your own loop, "
                         "then measure it (sb.accuracy, sb.top_hessian_eigenvalue, profiles)")
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
    P, work = model.P, model
    active = members = list(range(P))     # models training; work's models (>= 2, see below)
    curve, window, n_window = [], torch.zeros(P, dtype=torch.float64), torch.zeros(P)
    model.train()
    for step in _progress(range(1, pr.steps + 1), desc=f"train {f} N={N}", disable=not progress):
        x = _batch([gens[p] for p in members], pr.batch, N, model.device, model.dtype)
        per = population_loss(work, x, f(x), pr.loss)
        opt.zero_grad(set_to_none=True)
        per.sum().backward()
        opt.step()
        rows = [members.index(p) for p in active]
        window[active] += per.detach().double().cpu()[rows]
        n_window[active] += 1
        if work is not model:                   # the full population holds every model's state
            with torch.no_grad():
                for full, t in zip(model.parameters(), work.parameters()):
                    full[active] = t[rows]
        stop = until is not None and bool(until(step))
        if step in log_at or stop:
            curve.append((window / n_window).numpy())   # 0/0 = NaN: a model dropped earlier
            window, n_window = torch.zeros_like(window), torch.zeros_like(n_window)
        if stop:
            break
        gone = set() if drop is None else {int(p) for p in drop(step)} & set(active)
        if not gone:
            continue
        active = [p for p in active if p not in gone]
        if not active:
            if n_window.any():
                curve.append((window / n_window).numpy())
            break
        # work keeps at least two models: a vmapped population of one computes in other
        # kernels (other rounding) than the same model among others; a dropped model rides
        # along then, its parameters never written back
        ride = [p for p in members if p not in active][:max(0, 2 - len(active))]
        keep = [members.index(p) for p in sorted(active + ride)]
        if len(keep) < len(members):
            work, opt = _narrowed(work, opt, keep, pr)
            members = sorted(active + ride)
    model.eval()
    return np.stack(curve)


# ---- measurements -------------------------------------------------------------------------
@torch.no_grad()
def held_out_strings(N: int, n_test: int, *, seed: int = 0) -> torch.Tensor:
    """The ``n_test`` uniform held-out strings of :func:`accuracy` (generator seed
    ``seed + TEST_SEED_OFFSET``; the same strings for every model), float32 (n_test, N)."""
    g = torch.Generator().manual_seed(seed + TEST_SEED_OFFSET)
    return torch.randint(0, 2, (n_test, check_n(N)), generator=g).float()


def accuracy(model: Classifier, f: BooleanFunction, N: int, *, n_test: int | None = None,
             seed: int = 0, chunk: int = 4096) -> np.ndarray:
    """Fraction of strings where sign(T) agrees with f (accept when T > 0), per model.

    Parameters
    ----------
    model : callable
        A population returning scores ``(P, B)`` (or one model, ``(B,)``).
    f : BooleanFunction
        The target.
    N : int
        The string length.
    n_test : int, optional
        None: all :math:`2^N` strings; else this many uniform held-out strings, the same for
        every model.
    seed : int
        Their generator's seed is ``seed + TEST_SEED_OFFSET``.
    chunk : int
        Strings evaluated at a time.

    Returns
    -------
    numpy.ndarray
        Shape ``(P,)``. A NaN or infinite output is an error (ValueError naming the models),
        never a class.
    """
    N = check_n(N)
    if n_test is None and N > MAX_EXHAUSTIVE_N:
        raise ValueError(f"N={N}: accuracy on all 2^N strings needs N <= {MAX_EXHAUSTIVE_N}; "
                         "pass n_test (an integer >= 1) to measure it on held-out strings")
    if n_test is None:
        total, idx_all = 2**N, torch.arange(2**N)
        xs = lambda a, b: index_to_strings(idx_all[a:b], N)
    else:
        if isinstance(n_test, bool) or not isinstance(n_test, (int, np.integer)) or n_test < 1:
            raise ValueError(f"n_test must be None or an integer >= 1, got {n_test!r}")
        pool = held_out_strings(N, int(n_test), seed=seed)
        total = int(n_test)
        xs = lambda a, b: pool[a:b]
    P, ev, chunk = _population_axis(model) or 1, Evaluator(model, "model"), check_int(chunk, "chunk", minimum=1)
    (dev, dt), right, bad = _where(model), torch.zeros(P, dtype=torch.float64), torch.zeros(P).long()
    for a in range(0, total, chunk):
        x = xs(a, min(a + chunk, total)).to(dev, dt)
        T = ev(x).reshape(P, -1)
        bad += (~torch.isfinite(T.float())).sum(-1).cpu()
        right += ((T > 0) == f(x).unsqueeze(0)).sum(-1).double().cpu()
    ev.check()
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


# ---- steps to learn, and the trained model ------------------------------------------------
def learn(model, f: BooleanFunction, N: int, seeds, protocol: Protocol = Protocol(), *,
          criterion: float = 0.99, checks=None, n_test: int | None = None, log_steps=None,
          signal_steps=None, signal_strings=None, signal_probe=None,
          drop_learned: bool = False, progress: bool = False) -> dict:
    """Train until every seed has learned f or the budget ``protocol.steps`` is spent.

    Parameters
    ----------
    model : Recognizer or sensbook.controls.Population
        Any population whose parameters carry the population axis first; trained in place.
    f : BooleanFunction
        The target.
    N : int
        The string length.
    seeds : sequence of int
        One seed per model, as for :func:`train_population`.
    protocol : Protocol
        The settings; ``protocol.steps`` is the budget.
    criterion : float
        The accuracy that counts as learned.
    checks : sequence of int, optional
        The steps at which accuracy is checked (default: every step).
    n_test : int, optional
        Held-out strings for the accuracy (default: all :math:`2^N`).
    log_steps : sequence of int, optional
        The steps of the loss curve (:func:`train_population`).
    signal_steps : sequence of int, optional
        Steps after which the gradient signal is recorded (Notes).
    signal_strings : torch.Tensor, optional
        The strings x of ``gradient_signal``.
    signal_probe : callable, optional
        A function of the model returning a dict of ``(P, ...)`` arrays (e.g.
        :func:`sensbook.eos_mechanism` on fixed strings), recorded at the same steps.
    drop_learned : bool
        Stop training each seed at its first passage (``train_population``'s ``drop``) instead
        of when the last seed learns. Steps to learn and the trained parameters are the same
        (number for number in the book's widths: ``train_population``); the loss curve ends for
        a seed at its first passage (NaN after it), its later ``eval_accuracy`` entries repeat
        its accuracy then (its parameters no longer change), and only unfinished seeds are
        evaluated. Not with ``signal_steps``.
    progress : bool
        Show a progress bar.

    Returns
    -------
    dict
        ``steps`` (per seed; None if censored), ``steps_run``, ``curve`` (window-mean losses at
        ``log_steps``), ``eval_steps``, ``eval_accuracy`` and, with ``signal_steps``,
        ``signal``.

    Notes
    -----
    Seed p has *learned* f at the first step in ``checks`` at which its :func:`accuracy` is
    at least ``criterion``; a seed that never is, is *censored*. Training stops once every
    seed has learned (later steps cannot change a first passage).

    On return ``model`` holds each seed's **trained parameters**: those at its first passage
    for a learned seed, those at the last step run for a censored one (one definition for
    everything measured on "the trained model": profiles, margins, sharpness, basins).

    With ``signal_steps``, after each of those steps it also records the gradient signal of every model
    (``gradient_signal``) and the norm of the minibatch gradient that step's update used:
    ``signal`` = {``steps``, and per key of ``gradient_signal`` plus ``batch_grad_norm``
    a list (one row of P per recorded step)}. The logging reads the model and never writes it
    (its gradients are taken with ``torch.autograd.grad``, not accumulated), so training is
    the same with it or without it (``tests/test_train.py``). ``signal_probe`` is recorded
    beside it, under its own keys; it too must only read the model.
    """
    if not (isinstance(criterion, float) and 0.5 < criterion <= 1):
        raise ValueError(f"criterion must be an accuracy in (0.5, 1], got {criterion!r}")
    seeds = _check_seeds(seeds)
    checks = set(range(1, protocol.steps + 1) if checks is None else checks)
    first, snap = [None] * len(seeds), [None] * len(seeds)
    eval_steps, eval_acc, done = [], [], [0]
    sig_at = set() if signal_steps is None else {int(s) for s in signal_steps}
    if sig_at and signal_strings is None:
        raise ValueError("signal_steps needs signal_strings (the strings the gradient signal "
                         "is measured on)")
    signal = {"steps": []}
    if drop_learned and sig_at:
        raise ValueError("drop_learned=True stops training seeds that learned, so the gradient "
                         "signal after their first passage would be that of frozen models: "
                         "pass signal_steps only with drop_learned=False")
    acc = np.full(len(seeds), np.nan)

    def until(step):
        done[0] = step
        if step in sig_at:
            signal["steps"].append(step)
            rec = gradient_signal(model, f, signal_strings, loss=protocol.loss)
            rec["batch_grad_norm"] = _grad_norms(model)
            if signal_probe is not None:
                rec.update(signal_probe(model))
            for k, v in rec.items():
                signal.setdefault(k, []).append(v.tolist())
        if step not in checks:
            return False
        todo = [p for p, s in enumerate(first) if s is None] if drop_learned else None
        if todo is None:
            acc[:] = accuracy(model, f, N, n_test=n_test)
        else:                                   # a learned seed's accuracy no longer changes
            acc[todo] = accuracy(subpopulation(model, todo), f, N, n_test=n_test)
        model.train()
        eval_steps.append(step)
        eval_acc.append(acc.tolist())
        for p, a in enumerate(acc):
            if first[p] is None and a >= criterion:
                first[p] = step
                snap[p] = [t[p].detach().clone() for t in model.parameters()]
        return all(s is not None for s in first)

    drop = (lambda step: [p for p, s in enumerate(first) if s is not None]) \
        if drop_learned else None
    curve = train_population(model, f, N, seeds, protocol, log_steps=log_steps, until=until,
                             drop=drop, progress=progress)
    with torch.no_grad():
        for p, saved in enumerate(snap):
            if saved is not None:
                for t, v in zip(model.parameters(), saved):
                    t[p] = v
    return dict(steps=first, steps_run=done[0], curve=curve, eval_steps=eval_steps,
                eval_accuracy=eval_acc, signal=signal if sig_at else None)


def _grad_norms(model) -> np.ndarray:
    """Per model, the Euclidean norm of the gradients its parameters hold now: (P,)."""
    sq = sum(p.grad.detach().reshape(p.shape[0], -1).double().pow(2).sum(1)
             for p in model.parameters() if p.grad is not None)
    return torch.sqrt(torch.as_tensor(sq)).cpu().numpy()


def gradient_signal(model, f: BooleanFunction, x, *, loss: str = "logistic",
                    chunk: int = 1024) -> dict:
    """What the gradient carries, per model: (P,) arrays on the strings ``x`` (B, N).

    On all 2^N strings this is the *expected* (population) quantity under the uniform
    training distribution, with no minibatch noise. ``loss``: the mean training loss L
    (:func:`population_loss`); ``grad_norm``: ||grad_theta L||, the Euclidean norm over all
    of the model's parameters; ``parity_coef``: the degree-N Fourier coefficient of the
    output, mean_x T(x) chi(x) with chi(x) = (-1)^(x_1 + ... + x_N) the full parity
    character (O'Donnell 2014, ch. 1); ``mean_square``: mean_x T(x)^2, so that
    ``parity_coef**2 / mean_square`` is the share of T's Fourier weight on chi. Gradients are
    taken with ``torch.autograd.grad`` (in blocks of ``chunk`` strings, summed): nothing is
    accumulated in the parameters' ``.grad``.
    """
    x = torch.as_tensor(x).to(device=model.device, dtype=model.dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    n = len(x)
    tot = {k: torch.zeros(model.P, dtype=torch.float64) for k in ("loss", "coef", "sq")}
    grads = None
    for a in range(0, n, chunk):
        xs = x[a:a + chunk]
        T = model(xs)                                               # (P, b)
        part = population_loss(lambda _: T, xs, f(xs), loss) * (len(xs) / n)
        g = torch.autograd.grad(part.sum(), params)
        grads = g if grads is None else [u + v for u, v in zip(grads, g)]
        chi = 1 - 2 * PARITY(xs).double()
        T = T.detach().double()
        tot["loss"] += part.detach().double().cpu()
        tot["coef"] += ((T * chi).sum(-1) / n).cpu()
        tot["sq"] += ((T * T).sum(-1) / n).cpu()
    sq = sum(g.reshape(g.shape[0], -1).double().pow(2).sum(1) for g in grads)
    return dict(loss=tot["loss"].numpy(), grad_norm=sq.sqrt().cpu().numpy(),
                parity_coef=tot["coef"].numpy(), mean_square=tot["sq"].numpy())


def _population_axis(model) -> int | None:
    """P when ``model`` is a population whose every parameter carries the population axis first
    (a :class:`Recognizer`, a :class:`sensbook.controls.Population`), else None (one model)."""
    P = getattr(model, "P", None)
    if not isinstance(P, int) or isinstance(P, bool) or P < 1:
        return None
    ok = all(t.dim() >= 1 and t.shape[0] == P for t in model.parameters())
    return P if ok else None


def _where(model):
    """Device and float dtype of a model: its own attributes, else its first parameter's (a
    classifier that is not a module, e.g. an adapter: its attributes, else CPU float32)."""
    if not isinstance(model, torch.nn.Module):
        if not callable(model):
            raise TypeError(f"model must be a classifier (a torch.nn.Module, an adapter such as "
                            f"sb.TorchClassifier, or a callable on strings (B, N)), got "
                            f"{type(model).__name__}")
        dt = getattr(model, "dtype", None)
        return (getattr(model, "device", None) or torch.device("cpu"),
                dt if isinstance(dt, torch.dtype) and dt.is_floating_point else torch.float32)
    p = next(iter(model.parameters()), None)
    dev = getattr(model, "device", None) or (p.device if p is not None else torch.device("cpu"))
    dt = getattr(model, "dtype", None) or (p.dtype if p is not None else torch.float32)
    return check_device(str(dev), "model's device"), dt


@torch.no_grad()
def min_margin(model: Classifier, x) -> np.ndarray:
    r"""The smallest :math:`|T(x)|` over the strings ``x``, per model.

    Parameters
    ----------
    model : callable
        A population returning scores ``(P, B)`` (or one model, ``(B,)``).
    x : torch.Tensor
        0/1 strings ``(B, N)``.

    Returns
    -------
    numpy.ndarray
        Shape ``(P,)``. With labels sign(T), the smallest output a string gets; Cor. 3.4
        bounds it by :math:`O(1/N)` at :math:`\varepsilon > 0` for weights in a fixed box.
    """
    x = torch.as_tensor(x)
    if x.dim() < 2 or x.shape[-2] == 0:
        raise ValueError(f"x must hold at least one string, shape (B, N) with B >= 1, got "
                         f"{tuple(x.shape)}: the smallest |T| over no strings is undefined")
    (dev, dt), ev = _where(model), Evaluator(model, "model")
    T = ev(x := x.to(device=dev, dtype=dt))
    ev.check()
    if not T.is_floating_point():
        raise ValueError("the model returned labels, not scores: a margin needs scores T (e.g. "
                         "sb.SklearnClassifier(est, method='decision_function') or "
                         "'predict_proba', not 'predict')")
    T = T.reshape(-1, x.shape[0])
    if not torch.isfinite(T).all():
        raise ValueError("model output is NaN or infinite; the margin is undefined")
    return T.abs().amin(-1).double().cpu().numpy()
