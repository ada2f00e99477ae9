"""How much parameter space each Boolean function occupies: basins, K_0 growth, P(f).

Three measurements for the measure-zero theorem (Theorem 4.5, Cor. 5.1-5.4, Conjecture 5.5 of
Kövér et al., 2026):

* **Basins** (:func:`perturb`, :func:`agreement`, :func:`basin_curve`, :func:`critical_sigma`):
  perturb an exact construction (:mod:`sensbook.constructions`) by noise of scale sigma and
  measure how often it still recognises its function exactly, its accuracy, and in which
  Hamming layers its errors fall.
* **Function census** (:func:`affine_class`): which random models compute an affine function
  (PARITY, m-sparse PARITY, DICTATOR/FIRST, constants, and their negations): Cor. 5.1-5.4
  predict that these vanish as N grows.
* **The parameter-function map** (:func:`parameter_function_map`, :func:`table_ids`,
  :func:`wilson_interval`): the probability P(f) that a random transformer computes f
  (Valle-Pérez et al., 2019), estimated by sampling with confidence intervals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .boolean import MAX_EXHAUSTIVE_N, check_n, index_to_strings, strings
from .model import Recognizer
from .labels import Evaluator
from .profile import classify, profile_from_table, truth_table
from .profiles import wilson_interval
from .settings import progress as _progress

__all__ = ["perturb", "Agreement", "agreement", "basin_curve", "critical_sigma", "fit_power",
           "t_quantile",
           "affine_class", "table_ids", "ids_to_tables", "wilson_interval",
           "parameter_function_map", "census_from_ids", "FunctionCensus", "theorem45_bound",
           "theorem45_exponent", "theorem45_applies"]

NOISE = ("uniform", "gaussian")


def _check_pos_int(v, name, lo=1):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    return int(v)


def perturb(model: Recognizer, sigma: float, P: int, *, kind: str = "uniform", seed: int = 0,
            dtype=None) -> Recognizer:
    """``P`` copies of a single model, every parameter perturbed by independent noise.

    Parameters
    ----------
    model : Recognizer
        A population of one model (``P = 1``).
    sigma : float
        The noise scale, finite and >= 0.
    P : int
        The number of perturbed copies.
    kind : str
        ``"uniform"`` (uniform on :math:`[-\\sigma, \\sigma]`) or ``"gaussian"``
        (:math:`N(0, \\sigma^2)`).
    seed : int
        The seed of the noise.
    dtype : torch.dtype or None
        The copies' dtype (default: the model's).

    Returns
    -------
    Recognizer
        A population of ``P`` models.

    Notes
    -----
    Uniform noise fills an :math:`\\ell_\\infty` ball of radius :math:`\\sigma` (standard
    deviation :math:`\\sigma/\\sqrt{3}`). All M parameters are perturbed, the zero ones too: token and positional embeddings, attention, feed-forward
    and readout (the model has no layer-norm gain or bias, so there are none of those).
    """
    if not isinstance(model, Recognizer):
        raise TypeError(f"model must be a sb.Recognizer (perturb rebuilds one from its flat "
                        f"parameters), got {type(model).__name__}: for a model of your own, add "
                        "the noise to its parameters yourself (torch.nn.utils.parameters_to_vector"
                        " / vector_to_parameters) and measure each copy through "
                        "sb.TorchClassifier")
    if model.P != 1:
        raise ValueError(f"model must hold a single model (P = 1), got P={model.P}")
    if kind not in NOISE:
        raise ValueError(f"kind={kind!r} is unknown; allowed: {', '.join(NOISE)}")
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma >= 0):
        raise ValueError(f"sigma must be a finite number >= 0, got {sigma!r}")
    P = _check_pos_int(P, "P")
    g = torch.Generator().manual_seed(int(seed))
    theta = model.flat().double().cpu()
    noise = (torch.rand(P, model.M, generator=g, dtype=torch.float64) * 2 - 1 if kind == "uniform"
             else torch.randn(P, model.M, generator=g, dtype=torch.float64))
    out = Recognizer(P, model.D, model.L, model.H, model.F, model.eps,
                     mark_first=model.mark_first, device=model.device, dtype=dtype or model.dtype)
    return out.set_flat((theta + sigma * noise).to(device=model.device, dtype=dtype or model.dtype))


@dataclass
class Agreement:
    """How a population of models agrees with a target function f at length N.

    Parameters
    ----------
    N : int
        The length.
    exhaustive : bool
        Every string evaluated (else a uniform sample).
    n_strings : int
        The strings evaluated.
    exact : torch.Tensor
        ``(P,)`` bool: every evaluated string decided and correct.
    accuracy : torch.Tensor
        ``(P,)``: the fraction of strings correct (undecided and non-finite count as wrong).
    errors_by_weight : torch.Tensor
        ``(P, N+1)``: wrong strings of each Hamming weight.
    strings_by_weight : torch.Tensor
        ``(N+1,)``: evaluated strings of each weight.
    """

    N: int
    exhaustive: bool
    n_strings: int
    exact: torch.Tensor
    accuracy: torch.Tensor
    errors_by_weight: torch.Tensor
    strings_by_weight: torch.Tensor

    @property
    def error_fraction_by_weight(self) -> torch.Tensor:
        """Errors per Hamming layer / size of the layer (NaN for empty layers): (P, N+1)."""
        return self.errors_by_weight.double() / self.strings_by_weight.double()


@torch.no_grad()
def agreement(model, f, N: int, *, margin: float = 0.0, n_samples: int | None = None,
              seed: int = 0, chunk_size: int = 1024) -> Agreement:
    """Compare each model of a population with a Boolean function, string by string.

    Parameters
    ----------
    model : Recognizer or classifier
        A population of ``P`` models, or any classifier (one model: an adapter, a function).
    f : BooleanFunction
        The function to compare with.
    N : int
        The string length.
    margin : float
        The recognition margin of the labels (:func:`sensbook.classify`).
    n_samples : int or None
        None: all :math:`2^N` strings (``N <= 24``); else that many uniform strings, the same for
        every model.
    seed : int
        The seed of the sampled strings.
    chunk_size : int
        Strings evaluated at once.

    Returns
    -------
    Agreement
        Per model: exact agreement, accuracy, and errors per Hamming weight.

    Notes
    -----
    A string counts as correct only when its label equals :math:`f(x)`; an undecided or
    non-finite label is an error.
    """
    N = check_n(N)
    chunk_size = _check_pos_int(chunk_size, "chunk_size")
    ev = Evaluator(model, "model")
    dev = getattr(model, "device", None) or "cpu"
    dt = getattr(model, "dtype", None)
    dt = dt if isinstance(dt, torch.dtype) and dt.is_floating_point else torch.float32
    if n_samples is None:
        if N > 24:
            raise ValueError(f"N={N} is too large for an exhaustive comparison; pass n_samples")
        total = 2**N
        make = lambda a, b: strings(N, a, b, dtype=dt)
    else:
        total = _check_pos_int(n_samples, "n_samples")
        g = torch.Generator().manual_seed(int(seed))
        xs = torch.randint(0, 2, (total, N), generator=g).to(dt)
        make = lambda a, b: xs[a:b]
    wrong_w = None
    count_w = torch.zeros(N + 1, dtype=torch.int64)
    for a in range(0, total, chunk_size):
        x = make(a, min(a + chunk_size, total))
        lab = classify(ev(x.to(dev)), margin).cpu().reshape(-1, len(x))
        if wrong_w is None:                                               # (P, B), P = 1 too
            wrong_w = torch.zeros(lab.shape[0], N + 1, dtype=torch.int64)
        want = f(x).to(torch.int8)                                        # (B,)
        bad = (lab != want).to(torch.int64)
        w = x.sum(-1).round().to(torch.int64)
        wrong_w.index_add_(1, w, bad)
        count_w += torch.bincount(w, minlength=N + 1)
    ev.check()
    wrong = wrong_w.sum(-1)
    return Agreement(N, n_samples is None, total, wrong == 0, 1 - wrong.double() / total,
                     wrong_w, count_w)


def basin_curve(model, f, N, sigmas, P, *, kind="uniform", margin=0.0, n_samples=None, seed=0,
                dtype=torch.float32, progress=True, first_index=0):
    """Exact-recognition probability and mean accuracy of perturbed copies, per noise scale.

    Parameters
    ----------
    model : Recognizer
        A population of one model (``P = 1``), the construction to perturb.
    f : BooleanFunction
        The function it should recognise.
    N : int
        The string length.
    sigmas : array-like
        The noise scales, 1-D, each >= 0.
    P : int
        Perturbed copies per scale.
    kind, margin, n_samples, seed
        As for :func:`perturb` and :func:`agreement`.
    dtype : torch.dtype
        The copies' dtype.
    progress : bool
        Show a progress bar.
    first_index : int
        The offset of this grid in a larger one (see Notes).

    Returns
    -------
    dict
        Numpy arrays over ``sigmas``; see Notes.

    Notes
    -----
    Returns a dict of numpy arrays over ``sigmas``: ``p_exact`` (fraction of the P perturbed
    models that recognise f exactly), ``se`` (its binomial standard error), ``accuracy`` (mean
    accuracy), ``errors_by_weight`` (len(sigmas), N+1: mean error fraction per Hamming layer).
    The perturbation at ``sigmas[i]`` is drawn with seed ``seed + 7919 (first_index + i)``, so
    a grid split into pieces (``first_index`` = the piece's offset) gives the same curve.
    """
    sig = np.asarray(sigmas, dtype=float)
    if sig.ndim != 1 or not len(sig) or (sig < 0).any():
        raise ValueError("sigmas must be a non-empty 1-D sequence of numbers >= 0")
    out = {k: [] for k in ("p_exact", "accuracy", "accuracy_sd", "errors_by_weight")}
    for i, s in enumerate(_progress(sig, desc=f"basin N={N}", disable=not progress)):
        pop = perturb(model, float(s), P, kind=kind, seed=seed + 7919 * (first_index + i),
                      dtype=dtype)
        ag = agreement(pop, f, N, margin=margin, n_samples=n_samples, seed=seed)
        out["p_exact"].append(ag.exact.double().mean().item())
        out["accuracy"].append(ag.accuracy.mean().item())
        out["accuracy_sd"].append(ag.accuracy.std().item() if P > 1 else 0.0)
        out["errors_by_weight"].append(ag.error_fraction_by_weight.mean(0).numpy())
    res = {k: np.array(v) for k, v in out.items()}
    res["se"] = np.sqrt(res["p_exact"] * (1 - res["p_exact"]) / P)
    res["sigmas"] = sig
    return res


def critical_sigma(sigmas, p_exact, level: float = 0.5) -> float:
    """The noise scale :math:`\\sigma^*` where the exact-recognition probability first falls to
    ``level``.

    Parameters
    ----------
    sigmas : array-like
        The noise scales: positive, increasing, 1-D.
    p_exact : array-like
        The exact-recognition probability at each scale.
    level : float
        The probability that defines :math:`\\sigma^*`.

    Returns
    -------
    float

    Notes
    -----
    Linear interpolation in (log sigma, p) between the last grid point with p >= level and the
    next one. NaN when p never reaches ``level`` on the grid (or starts below it).
    """
    s, p = np.asarray(sigmas, float), np.asarray(p_exact, float)
    if s.shape != p.shape or s.ndim != 1 or (s <= 0).any() or (np.diff(s) <= 0).any():
        raise ValueError("sigmas must be positive, increasing and the same length as p_exact")
    below = np.nonzero(p < level)[0]
    if not len(below) or below[0] == 0:
        return float("nan")
    j = below[0]
    t = (p[j - 1] - level) / (p[j - 1] - p[j])
    return float(np.exp(np.log(s[j - 1]) + t * (np.log(s[j]) - np.log(s[j - 1]))))


def t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t distribution.

    Parameters
    ----------
    p : float
        The probability, in (0, 1).
    df : float
        The degrees of freedom, finite and > 0.

    Returns
    -------
    float

    Notes
    -----
    Numerical (Simpson's rule on the density, then bisection), accurate to 1e-6. The 95% interval of a least-squares slope
    from n points is b +- t_quantile(0.975, n - 2) se: with 4 points (2 degrees of freedom)
    that is +- 4.30 se, not +- 1.96 se."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if not (isinstance(df, (int, float, np.integer, np.floating)) and df > 0
            and np.isfinite(df)):
        raise ValueError(f"df must be a finite number > 0, got {df!r}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t):                                   # 1/2 + integral of the density on [0, t]
        u = np.linspace(0, t, 4001)
        f = np.exp(logc - (df + 1) / 2 * np.log1p(u * u / df))
        return 0.5 + (u[1] - u[0]) / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    hi = 1.0
    while cdf(hi) < p:
        hi *= 2
    lo = 0.0
    while hi - lo > 1e-7 * max(1.0, hi):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def fit_power(x, y):
    """Least-squares fit of :math:`\\log y = a + b \\log x`.

    Parameters
    ----------
    x : array-like
        Positive values.
    y : array-like
        Positive values, as many as ``x`` (at least 2).

    Returns
    -------
    tuple of float
        ``(b, se, a)``: the standard error ``se`` of ``b`` has ``n - 2`` degrees of freedom,
        so a 95% interval is ``b +- t_quantile(0.975, n - 2) * se``.
    """
    x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(x) < 2 or x.shape != y.shape or not np.isfinite(y).all():
        raise ValueError("x and y must be equal-length, with >= 2 finite positive values")
    return least_squares(x, y)


def least_squares(x, y):
    """Least-squares line y = a + b x: (b, stderr of b with n - 2 degrees of freedom, a);
    the stderr is nan with two points."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    A = np.stack([np.ones_like(x), x], 1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    dof = len(x) - 2
    if dof > 0:
        resid = y - A @ coef
        cov = (resid @ resid / dof) * np.linalg.inv(A.T @ A)
        se = float(np.sqrt(cov[1, 1]))
    else:
        se = float("nan")
    return float(coef[1]), se, float(coef[0])


def theorem45_exponent(D: int, n_norms: int) -> float:
    """The exponent :math:`(D - 1)/(2n) - 5` of Theorem 4.5's bound.

    Parameters
    ----------
    D : int
        The model width.
    n_norms : int
        ``n``, the number of layer norms (``2L`` for the book's post-LN recognizer).

    Notes
    -----
    **CHOICE (the count).** The theorem's exponent spends one small-ball factor
    P(var < t) ~ t^((D-1)/2) per normalisation the blowup beta multiplies over (Lemma 4.2
    bounds each of them by N^(zeta/(2n))), and the paper's notation has one coefficient z per
    layer and position, i.e. one layer norm per layer: its L counts normalisations. So for a
    model with two layer norms per layer, as the book's post-LN recognizer, n = 2L: the same
    count Lemma 3.2's cap (1 + 1/sqrt(eps))^(2L) uses (:func:`sensbook.blowup_bound`).
    This count is the book's reading: the paper's full text could not be consulted, only the
    exponent (D - 1)/(2n) - 5 is known, so its exact hypotheses are unknown here.
    """
    for name, v in (("D", D), ("n_norms", n_norms)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return (D - 1) / (2 * n_norms) - 5


def theorem45_applies(D: int, n_norms: int) -> bool:
    """Whether Theorem 4.5's exponent is positive: the book's reading of its width condition,
    :math:`D \\ge 10 n + 2`.

    Parameters
    ----------
    D, n_norms
        As for :func:`theorem45_exponent`.

    Notes
    -----
    The D at which its exponent (:func:`theorem45_exponent`) is positive. Whether the paper states a width
    hypothesis at all is unknown here (its full text could not be consulted); without one, the
    bound K_0 >= N^a still forces K_0 >= 1 (an integer) for a <= 0."""
    return theorem45_exponent(D, n_norms) > 0


def theorem45_bound(N, D: int, n_norms: int):
    """Theorem 4.5's lower bound :math:`N^{(D-1)/(2n) - 5}` on :math:`K_0`.

    Parameters
    ----------
    N : int or array-like
        String lengths.
    D, n_norms
        As for :func:`theorem45_exponent`.

    Returns
    -------
    numpy.ndarray

    Notes
    -----
    Constants unknown; asymptotic; with margin :math:`\\xi > 0` and :math:`\\varepsilon = 0`;
    in its recognition form: for almost every theta at all large N, either some string is
    undecided at margin xi or K_0 is at least this."""
    return np.asarray(N, float) ** theorem45_exponent(D, n_norms)


def affine_class(table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Which truth tables are affine, :math:`f(x) = c \\oplus \\bigoplus_{i \\in S} x_i`.

    Parameters
    ----------
    table : torch.Tensor
        Labels of shape ``(..., 2**N)``: 0/1 (any other entry makes the row non-affine).

    Returns
    -------
    tuple of torch.Tensor
        ``(m, S_mask)``; see Notes.

    Notes
    -----
    Returns (m, S_mask): m = |S| for affine rows (0 = constant, 1 = DICTATOR or its negation, N =
    PARITY or its negation) and -1 otherwise; S_mask (*pop, N) bool, the variables read.
    Test: f is affine iff f(x) xor f(0) = xor_i x_i (f(e_i) xor f(0)) on every string.
    """
    size = table.shape[-1]
    N = size.bit_length() - 1
    if size != 2**N or N < 1:
        raise ValueError("table must have 2^N entries in its last axis")
    t = table.to(torch.int64)
    valid = ((t == 0) | (t == 1)).all(-1)
    f0 = t[..., :1]
    S = (t[..., [1 << i for i in range(N)]] ^ f0).clamp(0, 1)                 # (*pop, N)
    bits = index_to_strings(torch.arange(size, device=t.device), N, dtype=torch.int64)
    pred = ((bits * S.unsqueeze(-2)).sum(-1) % 2) ^ f0                        # (*pop, 2^N)
    affine = valid & (pred == t).all(-1)
    m = torch.where(affine, S.sum(-1), torch.full_like(S.sum(-1), -1))
    return m, S.bool() & affine.unsqueeze(-1)


def table_ids(table: torch.Tensor) -> torch.Tensor:
    """Each decided truth table as one integer, :math:`\\sum_j f(x_j) 2^j`.

    Parameters
    ----------
    table : torch.Tensor
        Labels of shape ``(..., 2**N)``, ``N <= 5``.

    Returns
    -------
    torch.Tensor
        int64 ids, shape ``(...)``; a row with an undecided or non-finite entry gets -1.
    """
    size = table.shape[-1]
    N = size.bit_length() - 1
    if size != 2**N or not 1 <= N <= 5:
        raise ValueError("table must have 2^N entries, 1 <= N <= 5, in its last axis")
    t = table.to(torch.int64)
    ok = ((t == 0) | (t == 1)).all(-1)
    ids = (t.clamp(0, 1) << torch.arange(size, device=t.device)).sum(-1)
    return torch.where(ok, ids, torch.full_like(ids, -1))


def ids_to_tables(ids, N: int) -> torch.Tensor:
    """The truth tables of ids: the inverse of :func:`table_ids`.

    Parameters
    ----------
    ids : array-like of int
        Function ids.
    N : int
        The string length.

    Returns
    -------
    torch.Tensor
        int8 0/1, shape ``(len(ids), 2**N)``.
    """
    N = check_n(N, maximum=5)
    ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1, 1)
    return ((ids >> torch.arange(2**N)) & 1).to(torch.int8)


@dataclass
class FunctionCensus:
    """Counts of the functions computed by n_models random models at length N.

    ``ids`` and ``counts``: each distinct function (see :func:`table_ids`) and how many models
    computed it; ``n_undecided``: models with some undecided or non-finite string (excluded
    from ``ids``, but counted in ``n_models``, so P(f) = count / n_models).
    """

    N: int
    n_models: int
    ids: np.ndarray
    counts: np.ndarray
    n_undecided: int

    def probability(self, fid) -> float:
        """Estimated P(f) for the function with id ``fid`` (0 if never seen)."""
        hit = np.nonzero(self.ids == int(fid))[0]
        return float(self.counts[hit[0]]) / self.n_models if len(hit) else 0.0

    def count(self, fid) -> int:
        hit = np.nonzero(self.ids == int(fid))[0]
        return int(self.counts[hit[0]]) if len(hit) else 0

    def interval(self, fid, z: float = 1.96):
        """Wilson interval for P(f)."""
        return wilson_interval(self.count(fid), self.n_models, z)


@torch.no_grad()
def parameter_function_map(N: int, n_models: int, *, D: int = 8, L: int = 2, H: int = 1,
                           F: int | None = None, init: str = "uniform", scale: float = 1.0,
                           eps: float = 0.0, margin: float = 0.0, batch: int = 4096,
                           seed: int = 0, progress: bool = True,
                           device=None) -> FunctionCensus:
    """Sample random transformers and count the Boolean function each computes.

    Parameters
    ----------
    N : int
        The string length, 1 to 5.
    n_models : int
        The number of models.
    D, L, H, F, init, scale, eps
        The recognizer and its initialisation (:meth:`sensbook.Recognizer.random`).
    margin : float
        The recognition margin.
    batch : int
        Models evaluated together.
    seed : int
        The first model's seed (then ``seed + 1``, ...).
    progress : bool
        Show a progress bar.
    device : torch.device or str or None
        Where the models run (default the CPU).

    Returns
    -------
    FunctionCensus

    Notes
    -----
    Populations of ``batch`` models (seeds seed, seed+1, ...) are evaluated together on all 2^N
    strings (N <= 5), on ``device`` (default the CPU). This is the parameter-function map of
    Valle-Pérez et al. (2019) for the recognizer of :mod:`sensbook.model`:
    P(f) = Pr_theta[model(theta) computes f].
    """
    N = check_n(N, maximum=5)
    n_models = _check_pos_int(n_models, "n_models")
    batch = _check_pos_int(batch, "batch")
    ids = []
    starts = list(range(0, n_models, batch))
    for j, a in enumerate(_progress(starts, desc=f"P(f) N={N}", disable=not progress)):
        P = min(batch, n_models - a)
        model = Recognizer.random(P, D, L, H, F, eps, init=init, scale=scale, seed=seed + j,
                                  device=device)
        tab = truth_table(model, N, margin=margin, progress=False)
        ids.append(table_ids(tab).cpu())
    return census_from_ids(torch.cat(ids), N)


def census_from_ids(ids, N: int) -> FunctionCensus:
    """Count function ids (from :func:`table_ids`; -1 = some string undecided)."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if not len(ids):
        raise ValueError("ids must be non-empty")
    und = int((ids < 0).sum())
    u, c = np.unique(ids[ids >= 0], return_counts=True)
    return FunctionCensus(check_n(N, maximum=5), len(ids), u, c, und)


# ---- random functions (experiment E1's control; moved from profile.py) -------------------
def random_function_profiles(N: int, n_functions: int, *, seed: int = 0,
                             chunk: int = 256) -> np.ndarray:
    """Exact profiles K_0..K_N of ``n_functions`` uniformly random Boolean functions on
    {0,1}^N: int64 array (n_functions, N+1), seeded, batched."""
    N = check_n(N, maximum=MAX_EXHAUSTIVE_N)
    if isinstance(n_functions, bool) or not isinstance(n_functions, (int, np.integer)) \
            or n_functions < 1:
        raise ValueError(f"n_functions must be an integer >= 1, got {n_functions!r}")
    g = torch.Generator().manual_seed(seed)
    out = []
    for a in _progress(range(0, n_functions, chunk), desc=f"random functions N={N}"):
        n = min(chunk, n_functions - a)
        tables = torch.randint(0, 2, (n, 2**N), generator=g, dtype=torch.int8)
        out.append(profile_from_table(tables).K.numpy())
    return np.concatenate(out)
