"""What the profiler returns, and what a researcher does with it afterwards.

:class:`Profile` holds a sensitivity profile (exact or sampled) with where it came from
(``meta``: the classifier and how it was read, margin, seed, torch and sensbook versions;
saved files are checked by :mod:`sensbook.saved`). This module keeps,
compares and shows profiles:

* uncertainty: :meth:`Profile.interval` (Wilson intervals of :math:`K_k / 2^N`, honest where a
  k was never or always seen), :meth:`Profile.average_sensitivity_interval`;
* keeping: ``==``, :meth:`Profile.to_dict` / :meth:`Profile.from_dict`, :meth:`Profile.save` /
  :meth:`Profile.load` (JSON);
* comparing: :func:`compare_profiles`, a two-sample test between two sampled profiles;
* showing: :func:`plot_profile`, :math:`K_k / 2^N` with Wilson bands, several profiles
  overlaid, in the book's figure style (:data:`sensbook.pages.STYLE`).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from .saved import check_saved, checksum, write_atomic
from .settings import VERSION

__all__ = ["Profile", "wilson_interval", "compare_profiles", "plot_profile", "provenance"]

#: The ``format`` field of a saved profile; :meth:`Profile.from_dict` refuses others.
FORMAT = "sensbook.Profile/1"
_TENSORS = ("counts", "undecided", "nonfinite", "incomplete", "accepted")


def wilson_interval(k, n, z: float = 1.96):
    r"""Wilson score interval for a binomial proportion ``k / n``.

    Parameters
    ----------
    k : int or array-like
        Successes, ``0 <= k <= n``.
    n : int or array-like
        Trials, > 0 (broadcast against ``k``).
    z : float
        The standard normal quantile (1.96 for 95 %).

    Returns
    -------
    tuple of numpy.ndarray
        ``(lo, hi)``, within [0, 1].

    Notes
    -----
    Valid also for ``k = 0`` (``lo = 0``, :math:`hi \approx z^2/n`) where the normal interval
    collapses.
    """
    k, n = np.asarray(k, float), np.asarray(n, float)
    if (n <= 0).any() or (k < 0).any() or (k > n).any():
        raise ValueError("need 0 <= k <= n and n > 0")
    p = k / n
    den = 1 + z**2 / n
    c = (p + z**2 / (2 * n)) / den
    h = z * np.sqrt(np.maximum(p * (1 - p) / n + z**2 / (4 * n**2), 0)) / den
    return np.clip(c - h, 0, 1), np.clip(c + h, 0, 1)


def _check_z(z):
    if isinstance(z, bool) or not isinstance(z, (int, float)) or not (math.isfinite(z) and z > 0):
        raise ValueError(f"z must be a finite number > 0 (1.96 for 95 %), got {z!r}")
    return float(z)


def provenance(classifier, **extra) -> dict:
    """Where a profile came from: the classifier's name, the torch and sensbook versions.

    Parameters
    ----------
    classifier : callable
        The classifier profiled: named by its ``repr`` for the adapters and the book's models,
        else by its type or function name.
    **extra
        More fields to record (margin, seed).

    Returns
    -------
    dict
        ``classifier``, ``torch``, ``sensbook``, an adapter's reading (``reading``) and
        ``extra``.
    """
    kind = type(classifier)
    if kind.__repr__ is not object.__repr__ and not callable(getattr(classifier, "forward", None)):
        name = repr(classifier)
    else:
        name = getattr(classifier, "__qualname__", None) or kind.__qualname__
    if hasattr(classifier, "P") and hasattr(classifier, "D"):          # sb.Recognizer & co.
        name = f"{kind.__qualname__}(P={classifier.P}, D={classifier.D})"
    return dict(classifier=name[:200], torch=torch.__version__, sensbook=VERSION,
                **reading(classifier), **extra)


def _plain(v):
    """A JSON value: tensors and numpy values as lists and numbers, callables by name."""
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    if callable(v):
        return getattr(v, "__qualname__", None) or repr(v)[:80]
    return v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)[:80]


def reading(classifier) -> dict:
    """How an adapter reads the model (:class:`sensbook.TorchClassifier`: ``tokens``, ``prefix``,
    ``suffix``, ``sep``, ``output``, ``positive``, ``threshold``; :class:`sensbook.SklearnClassifier`:
    ``method``, ``positive``, ``threshold``), as JSON values; ``{}`` for other classifiers."""
    if not (hasattr(classifier, "model") or hasattr(classifier, "estimator")):
        return {}
    own = getattr(classifier, "__dict__", {})
    return {name: _plain(own[name]) for name in ("tokens", "prefix", "suffix", "sep", "output",
                                                 "method", "positive", "threshold") if name in own}


def measurement(classifier, *, margin, seed=None, bits=None, sampler=None) -> dict:
    """The ``meta`` of a profile: :func:`provenance` with the margin, the seed, the positions
    flipped (``bits``, 1-based, as flipped; None: all) and the sampler's name (None: uniform)."""
    return provenance(classifier, margin=margin, seed=seed,
                      bits=None if bits is None else [int(b) for b in bits],
                      sampler=None if sampler is None else
                      getattr(sampler, "__qualname__", None) or type(sampler).__qualname__)


@dataclass(eq=False)
class Profile:
    """A sensitivity profile, exact (all :math:`2^N` strings) or sampled; leading axes are the
    population.

    Parameters
    ----------
    N : int
        The string length.
    exact : bool
        True: all :math:`2^N` strings; False: sampled.
    n_strings : int
        The strings profiled (:math:`2^N`, or the number sampled).
    counts : torch.Tensor
        int64 ``(..., N + 1)``: ``counts[..., k]`` is :math:`K_k` when ``exact``, else the
        number of sampled strings with ``s = k``; only complete strings count.
    undecided : torch.Tensor
        Strings whose score is within the margin, per model.
    nonfinite : torch.Tensor
        Strings whose score is NaN or infinite, per model.
    incomplete : torch.Tensor
        Decided strings with an undecided or non-finite neighbour, per model.
    accepted : torch.Tensor
        Strings accepted, per model.
    meta : dict
        Where it came from and how it was measured (:func:`sensbook.profiles.provenance`:
        classifier, an adapter's reading (tokens, prefix, suffix, sep, output, threshold),
        margin, seed, ``bits`` flipped, ``sampler``, torch and sensbook versions), set by the
        profilers.

    Notes
    -----
    A string is *complete* when it and its N neighbours are all decided and finite; for each
    model ``counts.sum(-1) + undecided + nonfinite + incomplete == n_strings``. Two profiles
    are ``==`` when their counts are equal, whatever their ``meta``.
    """

    N: int
    exact: bool
    n_strings: int
    counts: torch.Tensor
    undecided: torch.Tensor
    nonfinite: torch.Tensor
    incomplete: torch.Tensor
    accepted: torch.Tensor
    meta: dict = field(default_factory=dict)

    @property
    def K(self) -> torch.Tensor:
        r"""Exact :math:`K_0, \dots, K_N` (exhaustive profiles only)."""
        if not self.exact:
            raise ValueError("this profile is sampled: use .fractions and .interval() (estimates "
                             "of K_k / 2^N with their Wilson intervals)")
        return self.counts

    @property
    def K0(self) -> torch.Tensor:
        """:math:`K_0`: the number of zero-sensitivity strings (exhaustive profiles only)."""
        return self.K[..., 0]

    @property
    def fractions(self) -> torch.Tensor:
        """:math:`K_k / 2^N` (exact) or its unbiased estimate (sampled)."""
        return self.counts.double() / self.n_strings

    @property
    def stderr(self) -> torch.Tensor:
        """Plug-in standard error of :attr:`fractions` (0 for exact profiles). It is 0 too for a
        k never (or always) seen in a sample, which says nothing: use :meth:`interval`."""
        if self.exact:
            return torch.zeros_like(self.fractions)
        p = self.fractions
        return (p * (1 - p) / self.n_strings).sqrt()

    def interval(self, z: float = 1.96) -> tuple[torch.Tensor, torch.Tensor]:
        """Wilson score intervals of each :math:`K_k / 2^N` (:func:`wilson_interval`).

        Parameters
        ----------
        z : float
            The standard normal quantile (1.96 for 95 %).

        Returns
        -------
        tuple of torch.Tensor
            ``(lo, hi)``, the shape of :attr:`fractions`: of nonzero width also for a k never or
            always seen; an exact profile's are its fractions.
        """
        z = _check_z(z)
        if self.exact:
            return self.fractions, self.fractions
        lo, hi = wilson_interval(self.counts.cpu().numpy(), self.n_strings, z)
        return torch.from_numpy(lo), torch.from_numpy(hi)

    @property
    def complete(self) -> torch.Tensor:
        """True for models with no undecided, non-finite or incomplete string."""
        return (self.undecided + self.nonfinite + self.incomplete) == 0

    @property
    def is_constant(self) -> torch.Tensor:
        """Complete and every string has s = 0 (for exact profiles: a constant function)."""
        return self.complete & (self.counts[..., 0] == self.n_strings)

    @property
    def average_sensitivity(self) -> torch.Tensor:
        """Mean of s over complete strings (NaN where there are none)."""
        k = torch.arange(self.N + 1, dtype=torch.float64, device=self.counts.device)
        c = self.counts.double()
        return (c * k).sum(-1) / c.sum(-1)

    def average_sensitivity_interval(self, z: float = 1.96) -> tuple[torch.Tensor, torch.Tensor]:
        r"""An interval for the average sensitivity.

        Parameters
        ----------
        z : float
            The standard normal quantile (1.96 for 95 %).

        Returns
        -------
        tuple of torch.Tensor
            ``(lo, hi)`` per model; exact profiles: the value itself; NaN where no string is
            complete.

        Notes
        -----
        Sampled: the normal interval :math:`m \pm z\, sd / \sqrt{n}` with the sample standard
        deviation of s over the n complete strings; where every sampled string has the same s
        (sd 0: that interval collapses to a point), N times the Wilson interval of the mean of
        s / N, which is valid for any variable in [0, 1] (its variance is at most
        :math:`m (1 - m)`) and has nonzero width.
        """
        z = _check_z(z)
        avg = self.average_sensitivity
        if self.exact:
            return avg, avg
        c = self.counts.double().cpu()
        n = c.sum(-1)
        k = torch.arange(self.N + 1, dtype=torch.float64)
        m = avg.cpu()
        var = (c * (k - m.unsqueeze(-1)) ** 2).sum(-1) / (n - 1).clamp_min(1)
        half = z * (var / n.clamp_min(1)).sqrt()
        wlo, whi = wilson_interval((m / self.N).clamp(0, 1).nan_to_num(0).numpy() *
                                   n.numpy(), n.clamp_min(1).numpy(), z)
        same = var == 0
        lo = torch.where(same, torch.from_numpy(np.asarray(wlo)) * self.N, m - half)
        hi = torch.where(same, torch.from_numpy(np.asarray(whi)) * self.N, m + half)
        nan = torch.full_like(lo, math.nan)
        return torch.where(n > 0, lo.clamp_min(0), nan), torch.where(n > 0, hi.clamp_max(self.N), nan)

    @property
    def max_sensitivity(self) -> torch.Tensor:
        """Largest s over complete strings (-1 where there are none)."""
        k = torch.arange(self.N + 1, device=self.counts.device)
        return torch.where(self.counts > 0, k, -1).max(-1).values

    def __eq__(self, other) -> bool:
        """Same N, kind, number of strings and every count (``meta`` aside)."""
        if not isinstance(other, Profile):
            return NotImplemented
        return (self.N, self.exact, self.n_strings) == (other.N, other.exact, other.n_strings) \
            and all(torch.equal(getattr(self, t).cpu(), getattr(other, t).cpu()) for t in _TENSORS)

    __hash__ = None                                           # mutable, like its tensors

    def to_dict(self) -> dict:
        """A JSON-able dict: N, exact, n_strings, every count as (nested) lists, ``meta``, and
        ``checksum`` (sha256 of the counts' fields: :meth:`from_dict` refuses an edited count)."""
        d = dict(format=FORMAT, N=self.N, exact=self.exact, n_strings=self.n_strings,
                 meta=dict(self.meta))
        d.update({t: getattr(self, t).cpu().tolist() for t in _TENSORS})
        d["checksum"] = checksum(d, _TENSORS)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        """The profile :meth:`to_dict` wrote (counts as int64 CPU tensors), every field checked.

        Parameters
        ----------
        d : dict
            A dict from :meth:`to_dict` (or its JSON), with ``format`` ``FORMAT``.

        Notes
        -----
        Refused, naming the field: a ``format`` other than ``FORMAT``; N or ``n_strings`` not an
        integer >= 1; ``exact`` not a bool; an exact profile whose ``n_strings`` is not
        :math:`2^N`; counts that are not non-negative integers, of the wrong shape (``counts``
        ``(..., N + 1)``, the others its leading shape), that do not sum to ``n_strings`` per
        model (complete + undecided + non-finite + incomplete), or more accepted strings than
        decided ones; ``meta`` not a dict; a ``checksum`` that does not match (an edited file).
        """
        N, exact, n, meta, t = check_saved(d, FORMAT, _TENSORS)
        return cls(N, exact, n, meta=meta, **t)

    def save(self, path, **meta) -> None:
        """Write the profile as JSON (:meth:`to_dict`).

        Parameters
        ----------
        path : str or os.PathLike
            The file: written through a temporary file of a unique name in its folder, then
            renamed over it, so a reader sees the old file or the new one, never a part; the
            temporary file is removed on every error. A path that exists and is not a regular
            file (a folder, a device, a FIFO) is refused.
        **meta
            Fields added to the saved ``meta`` (e.g. the model's name or checkpoint).
        """
        d = self.to_dict()
        d["meta"].update(meta)
        write_atomic(path, json.dumps(d, indent=1))      # a value JSON cannot hold: no file

    @classmethod
    def load(cls, path) -> "Profile":
        """The profile :meth:`save` wrote.

        Parameters
        ----------
        path : str or os.PathLike
            The JSON file (checked as :meth:`from_dict` checks a dict).
        """
        with open(path) as f:
            try:
                d = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{os.fspath(path)} is not JSON ({e})") from None
        return cls.from_dict(d)

    def __repr__(self):
        if self.counts.dim() == 1:
            K = self.counts.tolist()
            body = str(K)
            if len(K) > 17:                               # N + 1 numbers: the nonzero ones
                seen = [(k, c) for k, c in enumerate(K) if c]
                shown = ", ".join(f"{k}: {c}" for k, c in seen[:8])
                body = f"{{{shown}{', ...' if len(seen) > 8 else ''}}} (nonzero of {len(K)})"
            extra = [f"{n}={int(getattr(self, n))}" for n in ("undecided", "nonfinite", "incomplete")
                     if int(getattr(self, n))]
        else:
            body, extra = f"<{tuple(self.counts.shape[:-1])} models>", []
        kind = "exact" if self.exact else f"sampled n={self.n_strings}"
        return f"Profile(N={self.N}, {kind}, K={body}{', ' + ', '.join(extra) if extra else ''})"


def _one_model(p, argument):
    if not isinstance(p, Profile):
        raise TypeError(f"{argument} must be a sensbook Profile, got {type(p).__name__}")
    if p.counts.dim() != 1:
        raise ValueError(f"{argument} holds {tuple(p.counts.shape[:-1])} models: select one "
                         f"model's profile (e.g. sb.Profile of one Recognizer, P = 1)")
    return p


#: The smallest expected count per cell of :func:`compare_profiles`' chi-square table:
#: adjacent values of s are pooled until every cell expects at least this many strings.
MIN_EXPECTED = 5.0


#: The fields of ``meta`` that say what was measured: profiles that differ in one of them are
#: different measurements (:func:`compare_profiles`).
MEASUREMENT = ("bits", "sampler", "margin")


def _log_q(a: float, x: float) -> float:
    r"""The natural log of the regularized upper incomplete gamma function Q(a, x), accurate
    where Q underflows to 0 (series for :math:`x < a + 1`, else Lentz's continued fraction)."""
    if x <= 0:
        return 0.0
    lead = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:                                          # P by its series; Q = 1 - P
        term = total = 1.0 / a
        ap = a
        for _ in range(10000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-17:
                break
        return math.log1p(-min(math.exp(lead + math.log(total)), 1.0)) if total > 0 else 0.0
    tiny = 1e-300
    b, c, dd = x + 1 - a, 1 / tiny, 1 / (x + 1 - a)
    h = dd
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        dd = an * dd + b
        dd = tiny if abs(dd) < tiny else dd
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        dd = 1 / dd
        step = dd * c
        h *= step
        if abs(step - 1) < 1e-16:
            break
    return lead + math.log(h)


def compare_profiles(a: Profile, b: Profile, *, check_meta: bool = True) -> dict:
    """Two-sample test: do two sampled profiles (two models, or one model twice) come from the
    same distribution of the sensitivity s over complete strings?

    Parameters
    ----------
    a, b : Profile
        Sampled profiles of one model each, at the same N.
    check_meta : bool
        True (default): refuse profiles that are different measurements by their ``meta``
        (``MEASUREMENT``: flipped positions ``bits``, a ``sampler`` against the uniform
        strings, the ``margin``), naming the difference; False: compare them anyway.

    Returns
    -------
    dict
        ``statistic``, ``df``, ``p_value`` (small: the profiles differ; the true value down to
        about 1e-308, not rounded to 0), ``log10_p_value`` (finite also below that), the
        difference of average sensitivities ``a - b`` and its normal 95 % interval
        ``difference_interval`` (from the two samples' variances of s).

    Notes
    -----
    A chi-square test of homogeneity on the ``2 x (N + 1)`` table of counts, with adjacent
    values of s pooled until every cell expects at least ``MIN_EXPECTED`` strings (the
    chi-square approximation's usual condition).
    """
    a, b = _one_model(a, "a"), _one_model(b, "b")
    if not isinstance(check_meta, bool):
        raise ValueError(f"check_meta must be True or False, got {check_meta!r}")
    if check_meta:
        differ = [f"{k}: {a.meta.get(k)!r} against {b.meta.get(k)!r}" for k in MEASUREMENT
                  if a.meta.get(k) != b.meta.get(k)]
        if differ:
            raise ValueError("the profiles are different measurements (" + "; ".join(differ) +
                             "): their distributions of s differ whatever the models; pass "
                             "check_meta=False to compare them anyway")
    if a.exact or b.exact:
        raise ValueError("compare_profiles tests sampled profiles; exact profiles are compared "
                         "with ==")
    if a.N != b.N:
        raise ValueError(f"the profiles have different lengths (N={a.N} and N={b.N}): s is "
                         "counted out of N, so only profiles at the same N are compared")
    table = np.stack([a.counts.cpu().numpy(), b.counts.cpu().numpy()]).astype(float)
    if (table.sum(1) == 0).any():
        raise ValueError("a profile has no complete string: there is nothing to compare")
    cols, cur = [], np.zeros(2)
    rows, total = table.sum(1), table.sum()
    for k in range(table.shape[1]):                       # pool adjacent s until E >= 5
        cur = cur + table[:, k]
        if (cur.sum() * rows / total).min() >= MIN_EXPECTED:
            cols.append(cur)
            cur = np.zeros(2)
    if cur.sum() > 0:
        if cols:
            cols[-1] = cols[-1] + cur
        else:
            cols.append(cur)
    obs = np.stack(cols, axis=1)
    exp = np.outer(rows, obs.sum(0)) / total
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = obs.shape[1] - 1
    log_p = 0.0 if df == 0 else min(_log_q(df / 2, stat / 2), 0.0)
    k = np.arange(a.N + 1)
    means, vars_ = [], []
    for row in table:
        n = row.sum()
        m = (row * k).sum() / n
        means.append(m)
        vars_.append(((row * (k - m) ** 2).sum() / max(n - 1, 1)) / n)
    diff = means[0] - means[1]
    half = 1.96 * math.sqrt(vars_[0] + vars_[1])
    return dict(statistic=stat, df=df, p_value=math.exp(log_p),
                log10_p_value=log_p / math.log(10), difference=float(diff),
                difference_interval=(float(diff - half), float(diff + half)))


def _short(name: str, width: int = 18) -> str:
    """A classifier's name for a legend: an adapter by its model's class, a long name cut
    between words (at a space or punctuation, or where CamelCase starts a word) with an
    ellipsis, at most ``width`` characters."""
    name = str(name)
    if name.startswith(("TorchClassifier(", "SklearnClassifier(")):
        name = name[name.index("(") + 1:].split(",")[0].rstrip(")")
    if len(name) <= width:
        return name
    cuts = [i for i in range(1, width) if name[i] in " ,(.=_<>" or
            (name[i].isupper() and name[i - 1].islower())]
    cut = max(cuts, default=width - 1)
    return name[:cut].rstrip(" ,(.=_<>") + "\u2026"


def plot_profile(profiles, labels: Sequence[str] | None = None, *, ax: Any = None,
                 z: float = 1.96, x: str | None = None):
    """:math:`K_k / 2^N` against k for one profile or several overlaid (models, or lengths),
    with Wilson bands (:meth:`Profile.interval`) for sampled ones, in the book's figure style.

    Parameters
    ----------
    profiles : Profile or sequence of Profile
        Profiles of one model each (a population's profile: select one model).
    labels : sequence of str, optional
        One legend entry per profile (default: the classifier's name from ``meta``, an
        adapter's by its model's class, at most 18 characters cut between words, and N on a
        second line, so that it fits a subplot);
        profiles with the same label share a colour.
    ax : matplotlib.axes.Axes, optional
        The axes to draw on (default: a new figure).
    z : float
        The standard normal quantile of the bands (1.96 for 95 %).
    x : {"k", "k/N"}, optional
        The horizontal axis (default ``"k"`` when every profile has the same N, else
        ``"k/N"``, so lengths overlay on [0, 1]).

    Returns
    -------
    matplotlib.axes.Axes

    Notes
    -----
    Exact profiles are drawn as a solid line, sampled ones as dots and a band.
    """
    import matplotlib.pyplot as plt

    from .pages import STYLE

    if isinstance(profiles, Profile):
        profiles = [profiles]
    profiles = [_one_model(p, f"profiles[{i}]") for i, p in enumerate(profiles)]
    if not profiles:
        raise ValueError("profiles must hold at least one Profile")
    if labels is not None and len(labels) != len(profiles):
        raise ValueError(f"labels must have one entry per profile ({len(profiles)}), got "
                         f"{len(labels)}")
    if x is None:
        x = "k" if len({p.N for p in profiles}) == 1 else "k/N"
    if x not in ("k", "k/N"):
        raise ValueError(f"x must be 'k' or 'k/N', got {x!r}")
    z = _check_z(z)
    with plt.rc_context(STYLE):
        if ax is None:
            _, ax = plt.subplots(figsize=(6.4, 3.6))
        colours = {}
        for i, p in enumerate(profiles):
            k = np.arange(p.N + 1) / (p.N if x == "k/N" else 1)
            frac = p.fractions.cpu().numpy()
            kind = "exact" if p.exact else f"{p.n_strings} strings"
            name = labels[i] if labels is not None else (
                f"{_short(p.meta.get('classifier', 'profile'))}\nN = {p.N}")
            colour = colours.setdefault(name, f"C{len(colours) % 10}")   # one colour a label
            line, = ax.plot(k, frac, "-" if p.exact else "o:", ms=3, lw=1.2 if p.exact else 1,
                            color=colour, label=f"{name} ({kind})" if labels is not None
                            else f"{name}, {kind}")
            if not p.exact:
                lo, hi = p.interval(z)
                ax.fill_between(k, lo.numpy(), hi.numpy(), color=line.get_color(), alpha=0.2,
                                lw=0)
        ax.set_xlabel("sensitivity $k$" if x == "k" else "$k / N$")
        ax.set_ylabel(r"$K_k / 2^N$ (band: Wilson 95 %)" if z == 1.96 else r"$K_k / 2^N$")
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
    return ax
