r"""Small volumes by subset simulation (multilevel splitting): the solution set measured down
to :math:`10^{-30}` and below.

:math:`V = \mathrm{Leb}\{\theta \in [-B, B]^M : S(\theta) > 0\} / (2B)^M` for a score
:math:`S`; for recognition (:func:`recognition_score`)
:math:`S > 0` exactly where every string's signed output :math:`s(x)\,T(\theta, x)` exceeds
the margin :math:`\xi` ("recognises f with margin :math:`\xi`"); below 0 it counts the
strings still wrong, then their total shortfall.
Plain Monte Carlo resolves V only above about 10/n; subset simulation (Au & Beck 2001) writes

.. math:: V = P(S > c_1) \prod_k P(S > c_{k+1} \mid S > c_k)

with levels :math:`c_k` chosen so that each factor is about ``p0`` (the ``p0`` quantile of the
current population), and samples each conditional by Markov chains started from the points
above the level: a random walk with step ``scale`` times the spread of those points per
coordinate, reflected at the box's faces (a symmetric kernel, so uniform on the box stays
invariant) and kept only where S stays above the level. Every chain of a level moves at once:
S is evaluated on the recognizer's population axis. A level reached by fewer than ``p0 n``
points stops the descent: the last factor is the fraction above 0.

The estimate is the log of the mean of ``runs`` independent repetitions' V, and its interval
the t interval of that mean by the delta method, :math:`\pm t\,\mathrm{CV}/\sqrt{runs}`
(the chains make one run's own binomial errors correlated; independent runs do not). Each
run's V is close to unbiased; the mean of their logs is not: it is low by about half their
variance (measured: 0.24 nats on PARITY at N = 2 with :class:`ReadoutScore`).
A set in separated pieces or with dead ends (local maxima of S below 0, as PARITY's) is
checked for: runs that disagree are all repeated with twice the points, and the estimate is
refused (an upper bound only) when they still disagree at the cap.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .boolean import check_int, check_real, check_seed, check_strings
from .model import Recognizer
from .volume import t_quantile

__all__ = ["recognition_score", "ReadoutScore", "subset_volume"]


def recognition_score(model: Recognizer, x, labels, *, margin: float = 0.0):
    r"""A score of a recognizer's architecture, as a function of a batch of parameter
    vectors, whose positive set is "recognises f with margin :math:`\xi`".

    With :math:`m_x(\theta) = s(x)\,T(\theta, x) - \xi` and :math:`k` the number of strings
    with :math:`m_x \le 0`:

    .. math:: S(\theta) = \min_x m_x \quad (k = 0), \qquad
              S(\theta) = -k + \tfrac12\, \frac{q}{1 + |q|}, \quad
              q = \sum_x \min(m_x, 0) \quad (k \ge 1).

    So :math:`S > 0` exactly where every :math:`m_x > 0` (where :math:`k \ge 1`,
    :math:`S \le -1`), and subset simulation (:func:`subset_volume`) measures the same
    volume with it as with :math:`\min_x m_x`. Its levels count the strings still wrong
    first, then their total shortfall: a point with fewer wrong strings always scores
    higher. With :math:`\min_x m_x` alone, PARITY's score has local maxima below 0 (dead
    ends) where a few strings are far from their label, and the runs disagree; by the
    number of wrong strings the levels stay connected to the set (measured:
    ``benchmarks/volume_bench.py``, the two scores' runs on PARITY).

    Parameters
    ----------
    model : Recognizer
        The architecture (its D, L, H, F, eps, positional features and dtype); its parameters
        are not used.
    x : torch.Tensor
        0/1 strings ``(B, N)``, all :math:`2^N` for exact recognition.
    labels : array-like of bool
        The function's value on each string, ``(B,)``.
    margin : float
        :math:`\xi \ge 0`.

    Returns
    -------
    callable
        ``score(theta)`` for ``theta`` of shape ``(P, M)``: float64 ``(P,)``, ``-inf`` where
        some :math:`T(\theta, x)` is not finite (no label).
    """
    if not isinstance(model, Recognizer):
        raise ValueError(f"model must be a sensbook.Recognizer, got {model!r}")
    x = check_strings(x)
    if x.dim() != 2 or len(x) == 0:
        raise ValueError(f"x must have shape (B, N) with B >= 1 strings, got {tuple(x.shape)}")
    s = torch.as_tensor(np.asarray(labels)).flatten()
    if s.shape != (len(x),):
        raise ValueError(f"labels must have one entry per string ({len(x)}), got {tuple(s.shape)}")
    s = s.bool().to(model.dtype) * 2 - 1
    margin = check_real(margin, "margin", minimum=0)
    x = x.to(model.dtype)

    @torch.no_grad()
    def score(theta):
        pop = model.like(theta.shape[0]).set_flat(theta.to(model.dtype))
        return _score(pop(x), s, margin)

    return score


def _score(T, s, margin, finite=None):
    """recognition_score's formula over the last axis (the strings) of the outputs ``T``;
    ``finite``, where given, is ``isfinite(T).all(-1)`` already known."""
    m = (T * s).double() - margin
    wrong = (m <= 0).sum(-1).double()
    q = m.clamp(max=0).sum(-1)
    g = torch.where(wrong == 0, m.amin(-1), -wrong + 0.5 * q / (1 + q.abs()))
    return torch.where(torch.isfinite(T).all(-1) if finite is None else finite, g, -torch.inf)


class ReadoutScore:
    r"""Recognition with the read-out integrated out (conditional Monte Carlo): a score over
    :math:`\varphi`, the parameters other than the read-out :math:`r = (w, \omega)`, for
    :func:`subset_volume`.

    :math:`T(\theta, x) = h_\varphi(x) \cdot w + \omega` is linear in :math:`r`
    (:meth:`Recognizer.features`), so with :math:`\theta = (\varphi, r)` uniform on the box

    .. math:: V = \mathbb{E}_\varphi\, v(\varphi), \qquad
              v(\varphi) = P_r\big(s(x)\,(h_\varphi(x) \cdot w + \omega) > \xi
              \ \text{for every } x\big),

    the fraction of the read-out's box inside a polytope. For a fixed :math:`w` the
    :math:`\omega` that recognise form an interval, of length :math:`\ell(\varphi, w)`
    (exact). With ``readouts`` = K vectors :math:`w_1 \dots w_K` drawn uniformly (new ones
    each run: :meth:`resample`), :math:`\hat v(\varphi) = \frac1K \sum_k \ell(\varphi,
    w_k) / 2B` (:meth:`weight`) is unbiased for :math:`v(\varphi)`, and it is > 0 exactly
    where the score :math:`\max_k S(\varphi, w_k, \omega_k) > 0` (:math:`S`:
    :func:`recognition_score`'s formula, :math:`\omega_k` the middle of the interval,
    clipped to the box; :meth:`complete` assembles that :math:`\theta`).
    Subset simulation over :math:`\varphi` measures :math:`P(\text{score} > 0)`; its last
    population, uniform on that set, measures :math:`\mathbb{E}[\hat v \mid \text{score} >
    0]`; their product is :math:`\mathbb{E}\,\hat v = V` (the book's construction, not the
    paper's). The search no longer has to find a read-out by chance: for PARITY at N = 3 the
    runs then agree where over all of :math:`\theta` they did not
    (``benchmarks/volume_bench.py``), and at N = 4 with ``ch5_certified``'s sizes.

    Parameters
    ----------
    model, x, labels, margin
        As for :func:`recognition_score`.
    readouts : int
        K, the vectors w drawn per run (>= 1).
    box : float
        B, the half-width of the read-out's box (the same as :func:`subset_volume`'s).
    """

    def __init__(self, model: Recognizer, x, labels, *, margin: float = 0.0,
                 readouts: int = 4096, box: float = 1.0):
        recognition_score(model, x, labels, margin=margin)               # validates them
        self.model, self.x = model, check_strings(x).to(model.dtype)
        self.s = torch.as_tensor(np.asarray(labels)).flatten().bool().to(model.dtype) * 2 - 1
        self.margin, self.K = float(margin), check_int(readouts, "readouts", minimum=1)
        self.box = check_real(box, "box", minimum=0, strict=True)
        self.mask = torch.cat([torch.full((p[0].numel(),), n in ("w", "omega"))
                               for n, p in model.named_parameters()])     # r's place in theta
        self.M = int((~self.mask).sum())
        self.resample(torch.Generator().manual_seed(0))

    #: The (P, K, B) outputs are scored about 2^CHUNK_BITS at a time: they then stay in the
    #: cache through the score's passes (``benchmarks/volume_bench.py --chunks``: 2 to 3
    #: times faster than 2^22 on the AMD EPYC, the same scores bit for bit).
    CHUNK_BITS = 18

    def resample(self, g: torch.Generator) -> None:
        """Draw the K read-out vectors w anew.

        Parameters
        ----------
        g : torch.Generator
            Where they come from (:func:`subset_volume` passes each run's own).
        """
        self.W = (torch.rand(self.K, self.model.D, generator=g, dtype=self.model.dtype) * 2 - 1
                  ) * self.box

    def _features(self, phi):
        """The read-out's input h ``(P, B, D)`` of each phi."""
        if phi.dim() != 2 or phi.shape[1] != self.M:
            raise ValueError(f"phi must have shape (P, {self.M}) (every parameter but the "
                             f"read-out), got {tuple(phi.shape)}")
        theta = torch.zeros(len(phi), len(self.mask), dtype=self.model.dtype)
        theta[:, ~self.mask] = phi.to(self.model.dtype)
        return self.model.like(len(phi)).set_flat(theta).features(self.x)

    def _omega(self, h):
        """For each phi (its features h) and read-out w_k: the best omega (the middle of the
        interval of omega that recognises, clipped to the box) and that interval's length,
        both ``(P, K)``, the outputs ``(P, K, B)`` at the best omega, and whether they are
        finite ``(P, 1)``."""
        hw = (h @ self.W.T).transpose(1, 2)                                  # (P, K, B)
        pos, B = self.s > 0, self.box
        # max_x (xi - hw) = xi - min_x hw, exactly (rounding is monotone), without the
        # (P, K, B) difference; likewise min_x (-xi - hw)
        lo = self.margin - hw[..., pos].amin(-1) if pos.any() else hw.new_full(hw.shape[:2], -B)
        hi = -self.margin - hw[..., ~pos].amax(-1) if (~pos).any() else \
            hw.new_full(hw.shape[:2], B)
        lo, hi = lo.clamp(min=-B), hi.clamp(max=B)                         # omega in (lo, hi)
        omega = ((lo + hi) / 2).clamp(-B, B)
        # a string's outputs are finite for every w exactly where its features are (an
        # infinite or NaN feature gives an infinite or NaN h . w, whatever w)
        finite = torch.isfinite(h).all(-1).all(-1)[:, None]                  # (P, 1)
        return omega, (hi - lo).clamp(min=0).nan_to_num(0.0), hw + omega[..., None], finite

    def _best(self, phi):
        """_omega's four, in chunks of models: the forward pass about 2^22 outputs at a
        time, the (P, K, B) outputs about 2^CHUNK_BITS (they then stay in the cache through
        the score's several passes)."""
        per = self.K * len(self.x)
        big, small = max(1, (1 << 22) // per), max(1, (1 << self.CHUNK_BITS) // per)
        for i in range(0, len(phi), big):
            h = self._features(phi[i:i + big])
            for j in range(0, len(h), small):
                yield self._omega(h[j:j + small])

    @torch.no_grad()
    def __call__(self, phi: torch.Tensor) -> torch.Tensor:
        """The score of each phi: the best of the K read-outs.

        Parameters
        ----------
        phi : torch.Tensor
            ``(P, M)``: every parameter but the read-out, in :meth:`Recognizer.flat`'s order.

        Returns
        -------
        torch.Tensor
            ``(P,)`` float64.
        """
        return torch.cat([_score(T, self.s, self.margin, fin).amax(1)
                          for _, _, T, fin in self._best(phi)])

    @torch.no_grad()
    def weight(self, phi: torch.Tensor) -> torch.Tensor:
        r""":math:`\hat v(\varphi)`: the mean over the K vectors w of the fraction of
        omega's range that recognises.

        Parameters
        ----------
        phi : torch.Tensor
            ``(P, M)``, as for calling the score.

        Returns
        -------
        torch.Tensor
            ``(P,)`` in [0, 1].
        """
        return torch.cat([length.mean(1) / (2 * self.box) for _, length, _, _ in self._best(phi)])

    @torch.no_grad()
    def complete(self, phi: torch.Tensor) -> torch.Tensor:
        """The whole theta of one phi, with its best w of the K drawn last (:meth:`resample`)
        and that w's omega. A point :func:`subset_volume` found was scored with its own run's
        read-outs: its ``best_theta`` is that point completed with them.

        Parameters
        ----------
        phi : torch.Tensor
            ``(M,)``, one point.

        Returns
        -------
        torch.Tensor
            ``(M_all,)``: :meth:`Recognizer.set_flat` takes it (with a leading axis).
        """
        omega, _, T, fin = next(self._best(phi[None]))
        k = int(_score(T, self.s, self.margin, fin)[0].argmax())
        theta = torch.zeros(len(self.mask), dtype=self.model.dtype)
        theta[~self.mask] = phi.to(self.model.dtype)
        theta[self.mask] = torch.cat([self.W[k], omega[0, k:k + 1]])
        return theta


def _completed(score, point):
    """The whole theta of a score with ``complete`` (:class:`ReadoutScore`), taken in the run
    that found the point: the next run draws other read-outs."""
    return score.complete(point) if hasattr(score, "complete") else None


def _one_run(score, M, B, n, p0, moves, scale, max_levels, g):
    if hasattr(score, "resample"):                         # ReadoutScore: new read-outs
        score.resample(g)
    theta = (torch.rand(n, M, generator=g, dtype=torch.float64) * 2 - 1) * B
    S = score(theta)
    keep = max(2, int(round(p0 * n)))
    log_v, levels, evals, acc, hist = 0.0, 0, n, [], []
    while True:
        order = torch.argsort(S, descending=True)
        c = float(S[order[keep - 1]])                      # the keep-th largest score
        hist.append(c)
        stalled = levels >= 10 and c - hist[-11] <= 1e-9 * (1 + abs(c))
        if c >= 0 or levels >= max_levels or stalled:      # the target level, or no further
            frac = float((S > 0).sum()) / n
            if hasattr(score, "weight") and frac > 0:      # E[v | S > 0], ReadoutScore's
                frac *= float(score.weight(theta[S > 0]).mean())
            v = log_v + math.log(frac) if frac > 0 else -math.inf
            j = int(torch.argmax(S))
            return v, levels, evals, acc, log_v, theta[j], float(S[j]), \
                _completed(score, theta[j])                         # log_v: P(S > c)
        above = S > c
        k = int(above.sum())
        if k == 0:                                         # ties at the level: use >=
            above, k = S >= c, int((S >= c).sum())
            if k == n:
                j = int(torch.argmax(S))                   # no progress: a flat score
                return -math.inf, levels, evals, acc, log_v, theta[j], float(S[j]), \
                    _completed(score, theta[j])
        log_v += math.log(k / n)
        levels += 1
        seeds, sS = theta[above], S[above]
        pick = torch.randint(0, k, (n,), generator=g)
        theta, S = seeds[pick].clone(), sS[pick].clone()
        spread = seeds.std(0) if k > 1 else torch.full((M,), 2.0 * B)
        step = scale * spread.clamp_min(1e-12 * B)
        moved = 0
        for _ in range(moves):
            prop = theta + step * torch.randn(n, M, generator=g, dtype=torch.float64)
            prop = torch.remainder(prop + B, 4 * B)        # reflect into [-B, B]
            prop = torch.where(prop > 2 * B, 4 * B - prop, prop) - B
            Sp = score(prop)
            evals += n
            ok = Sp > c
            theta[ok], S[ok] = prop[ok], Sp[ok]
            moved += int(ok.sum())
        acc.append(moved / (n * moves) if moves else 0.0)


def subset_volume(score, M: int, *, box: float = 1.0, n: int = 1000, p0: float = 0.1,
                  moves: int = 20, scale: float = 0.5, runs: int = 6, max_levels: int = 200,
                  level: float = 0.95, seed: int = 0, max_spread: float = 4.0,
                  n_max: int | None = None) -> dict:
    r"""The fraction of the box :math:`[-B, B]^M` where ``score > 0``, by subset simulation,
    with an interval from independent runs.

    Parameters
    ----------
    score : callable
        ``score(theta)`` for ``theta`` float64 ``(P, M)`` returns ``(P,)``: the set is
        ``score > 0``; ``-inf`` is allowed (e.g. :func:`recognition_score`). A score with
        ``resample(generator)`` (:class:`ReadoutScore`) is resampled at the start of each run,
        and one with ``weight(theta)`` has the last factor, the fraction above 0, replaced by
        the mean of ``weight`` over the points above 0 (times that fraction).
    M : int
        The dimension.
    box : float
        B > 0, the half-width of the box.
    n : int
        Points per level (>= 20).
    p0 : float
        The conditional probability aimed at per level, in (0, 0.5].
    moves : int
        Markov-chain steps of every point per level (>= 1).
    scale : float
        The random walk's step, a multiple of the per-coordinate spread of the points above
        the level (> 0).
    runs : int
        Independent runs (>= 2): the interval is the t interval of their mean V, on log V.
    max_levels : int
        The most levels a run descends (V down to about ``p0 ** max_levels``).
    level : float
        The interval's coverage, in (0, 1).
    seed : int
        Run j uses the seed ``seed + j``.
    max_spread : float
        The mixing check: the runs agree when every run reached the set and their log V
        differ by at most this many nats (> 0).
    n_max : int or None
        When the runs disagree, all of them are repeated with twice the points per level (new
        seeds), up to this many (default ``8 n``); at the cap the estimate is refused.

    Returns
    -------
    dict
        ``log_volume`` (natural log of the mean of the runs' V), ``interval`` (lower, upper ends of
        log V), ``volume`` (exp of ``log_volume``), ``runs`` (each run's log V), ``levels``
        (per run), ``evaluations`` (score evaluations, all runs), ``acceptance`` (the
        mean fraction of accepted moves), ``best`` (the point of highest score in the last
        populations, ``(M,)``), ``best_score``, ``best_theta`` (for a score with
        ``complete``, :class:`ReadoutScore`: the whole theta of ``best``, completed with the
        read-outs of the run that found it; None otherwise), ``mixed`` (the runs agree) and
        ``n`` (the points per level of the runs reported).

    Notes
    -----
    A run that ends at no point above 0 (after ``max_levels`` levels, or when the level has
    not moved in 10 levels: the score's supremum may be below 0) gives log V = -inf. A set
    in separated pieces, or a score with local maxima below 0 (dead ends: PARITY's), splits a
    run's chains between pieces in proportion to their mass at each level; a piece with less
    than about one point's share is lost, and that run's chains then climb a dead end: its
    log V is far below the others' or -inf. So the runs are compared (``max_spread``) and,
    when they disagree, all are repeated with twice the points (a piece's share of points
    doubles); the runs of one size are reported together, never a selection of them. If
    they still disagree at ``n_max``, ``mixed`` is False, ``log_volume`` and the interval's
    lower end are -inf and its upper end is the largest log P(S > last level) of the runs.
    That bounds log V only where the runs' chains sampled each level faithfully, which a
    trapped run does not (measured: on all of theta, the random function's at N = 3 came out
    7 nats below the estimate :class:`ReadoutScore` later gave); bound V otherwise, e.g. by
    plain Monte Carlo, as ``ch5_certified`` does.
    """
    if not callable(score):
        raise TypeError(f"score must be a callable of theta (P, M), got {score!r}")
    M = check_int(M, "M", minimum=1)
    B = check_real(box, "box", minimum=0, strict=True)
    n = check_int(n, "n", minimum=20)
    p0 = check_real(p0, "p0", minimum=0, strict=True)
    if p0 > 0.5:
        raise ValueError(f"p0 must be in (0, 0.5], got {p0!r}")
    moves = check_int(moves, "moves", minimum=1)
    scale = check_real(scale, "scale", minimum=0, strict=True)
    runs = check_int(runs, "runs", minimum=2)
    max_levels = check_int(max_levels, "max_levels", minimum=1)
    level = check_real(level, "level", minimum=0, strict=True)
    if level >= 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    seed = check_seed(seed)
    max_spread = check_real(max_spread, "max_spread", minimum=0, strict=True)
    n_max = 8 * n if n_max is None else check_int(n_max, "n_max", minimum=n)
    evals, attempt = 0, 0
    while True:
        out = [_one_run(score, M, B, n, p0, moves, scale, max_levels,
                        torch.Generator().manual_seed(seed + j + 1000 * attempt))
               for j in range(runs)]
        logs = np.array([o[0] for o in out])
        evals += sum(o[2] for o in out)
        mixed = bool(np.isfinite(logs).all() and np.ptp(logs) <= max_spread)
        if mixed or 2 * n > n_max:
            break
        n, attempt = 2 * n, attempt + 1
    acc = [a for o in out for a in o[3]]
    if not mixed:
        # the runs disagree (or some found no point above 0) at the largest size: V is below
        # what these sizes resolve, and each run's last level bounds it from above,
        # V <= P(S > c_last) (a noisy bound)
        bound = [o[4] if not math.isfinite(o[0]) else max(o[0], o[4]) for o in out]
        mean, lo, hi = -math.inf, -math.inf, float(np.max(bound))
    else:
        w = np.exp(logs - logs.max())                      # the runs' V, rescaled
        mean = float(logs.max() + math.log(w.mean()))      # log of their mean
        half = t_quantile(0.5 + level / 2, runs - 1) * float(w.std(ddof=1) / w.mean()) \
            / math.sqrt(runs)                              # delta method: t * CV / sqrt(runs)
        lo, hi = mean - half, mean + half
    j = int(np.argmax([o[6] for o in out]))
    return {"log_volume": mean, "interval": (lo, hi), "volume": math.exp(mean),
            "best": out[j][5], "best_score": out[j][6], "best_theta": out[j][7],
            "runs": logs.tolist(), "levels": [o[1] for o in out], "mixed": mixed, "n": n,
            "evaluations": evals,
            "acceptance": float(np.mean(acc)) if acc else math.nan}
