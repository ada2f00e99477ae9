"""What the profiler returns, and what a researcher does with it afterwards.

:class:`Profile` holds a sensitivity profile (exact or sampled) with where it came from
(``meta``: the classifier, margin, seed, torch and sensbook versions). This module keeps,
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
        ``classifier``, ``torch``, ``sensbook`` and ``extra``.
    """
    kind = type(classifier)
    if kind.__repr__ is not object.__repr__ and not callable(getattr(classifier, "forward", None)):
        name = repr(classifier)
    else:
        name = getattr(classifier, "__qualname__", None) or kind.__qualname__
    if hasattr(classifier, "P") and hasattr(classifier, "D"):          # sb.Recognizer & co.
        name = f"{kind.__qualname__}(P={classifier.P}, D={classifier.D})"
    return dict(classifier=name[:200], torch=torch.__version__, sensbook=VERSION, **extra)


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
        Where it came from (:func:`sensbook.profiles.provenance`: classifier, margin, seed,
        torch and sensbook versions), set by :func:`sensbook.sensitivity_profile`.

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
        """A JSON-able dict: N, exact, n_strings, every count as (nested) lists, ``meta``."""
        d = dict(format=FORMAT, N=self.N, exact=self.exact, n_strings=self.n_strings,
                 meta=dict(self.meta))
        d.update({t: getattr(self, t).cpu().tolist() for t in _TENSORS})
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Profile":
        """The profile :meth:`to_dict` wrote (counts as int64 CPU tensors).

        Parameters
        ----------
        d : dict
            A dict from :meth:`to_dict` (or its JSON), with ``format`` ``FORMAT``.
        """
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError(f"not a saved profile: expected a dict with format={FORMAT!r}, got "
                             f"{d.get('format') if isinstance(d, dict) else type(d).__name__!r}")
        missing = [k for k in ("N", "exact", "n_strings", *_TENSORS) if k not in d]
        if missing:
            raise ValueError(f"the saved profile lacks {missing}")
        tensors = {t: torch.tensor(d[t], dtype=torch.int64) for t in _TENSORS}
        p = cls(int(d["N"]), bool(d["exact"]), int(d["n_strings"]), meta=dict(d.get("meta", {})),
                **tensors)
        if p.counts.shape[-1] != p.N + 1:
            raise ValueError(f"the saved counts have {p.counts.shape[-1]} entries, not N + 1 = "
                             f"{p.N + 1}")
        return p

    def save(self, path, **meta) -> None:
        """Write the profile as JSON (:meth:`to_dict`).

        Parameters
        ----------
        path : str or os.PathLike
            The file, written atomically.
        **meta
            Fields added to the saved ``meta`` (e.g. the model's name or checkpoint).
        """
        d = self.to_dict()
        d["meta"].update(meta)
        tmp = f"{os.fspath(path)}.tmp"
        with open(tmp, "w") as f:
            json.dump(d, f, indent=1)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path) -> "Profile":
        """The profile :meth:`save` wrote.

        Parameters
        ----------
        path : str or os.PathLike
            The JSON file.
        """
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def __repr__(self):
        if self.counts.dim() == 1:
            body = self.counts.tolist()
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


def compare_profiles(a: Profile, b: Profile) -> dict:
    """Two-sample test: do two sampled profiles (two models, or one model twice) come from the
    same distribution of the sensitivity s over complete strings?

    Parameters
    ----------
    a, b : Profile
        Sampled profiles of one model each, at the same N.

    Returns
    -------
    dict
        ``statistic``, ``df``, ``p_value`` (small: the profiles differ), the difference of
        average sensitivities ``a - b`` and its normal 95 % interval ``difference_interval``
        (from the two samples' variances of s).

    Notes
    -----
    A chi-square test of homogeneity on the ``2 x (N + 1)`` table of counts, with adjacent
    values of s pooled until every cell expects at least ``MIN_EXPECTED`` strings (the
    chi-square approximation's usual condition).
    """
    a, b = _one_model(a, "a"), _one_model(b, "b")
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
    pval = 1.0 if df == 0 else float(torch.special.gammaincc(
        torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))
    k = np.arange(a.N + 1)
    means, vars_ = [], []
    for row in table:
        n = row.sum()
        m = (row * k).sum() / n
        means.append(m)
        vars_.append(((row * (k - m) ** 2).sum() / max(n - 1, 1)) / n)
    diff = means[0] - means[1]
    half = 1.96 * math.sqrt(vars_[0] + vars_[1])
    return dict(statistic=stat, df=df, p_value=pval, difference=float(diff),
                difference_interval=(float(diff - half), float(diff + half)))


def plot_profile(profiles, labels: Sequence[str] | None = None, *, ax: Any = None,
                 z: float = 1.96, x: str | None = None):
    """:math:`K_k / 2^N` against k for one profile or several overlaid (models, or lengths),
    with Wilson bands (:meth:`Profile.interval`) for sampled ones, in the book's figure style.

    Parameters
    ----------
    profiles : Profile or sequence of Profile
        Profiles of one model each (a population's profile: select one model).
    labels : sequence of str, optional
        One legend entry per profile (default: the classifier's name from ``meta``, and N);
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
            name = labels[i] if labels is not None else (
                f"{p.meta.get('classifier', 'profile')[:40]}, N = {p.N}")
            kind = "exact" if p.exact else f"{p.n_strings} strings"
            colour = colours.setdefault(name, f"C{len(colours) % 10}")   # one colour a label
            line, = ax.plot(k, frac, "-" if p.exact else "o:", ms=3, lw=1.2 if p.exact else 1,
                            color=colour, label=f"{name} ({kind})")
            if not p.exact:
                lo, hi = p.interval(z)
                ax.fill_between(k, lo.numpy(), hi.numpy(), color=line.get_color(), alpha=0.2,
                                lw=0)
        ax.set_xlabel("sensitivity $k$" if x == "k" else "$k / N$")
        ax.set_ylabel(r"$K_k / 2^N$ (band: Wilson 95 %)" if z == 1.96 else r"$K_k / 2^N$")
        ax.set_ylim(bottom=0)
        ax.legend(loc="best")
    return ax
