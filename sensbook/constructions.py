"""Exact transformers for PARITY, FIRST and MAJORITY inside :class:`sensbook.Recognizer`.

After Chiang & Cholak (2022): layer norm with eps = 0 turns an O(1/N) (or O(1/N^2)) difference
at the eos position into a constant +-1 output. These are the book's evidence of
*expressivity* (the first half of Cor. 5.1-5.4: the parameter sets are non-empty), checked on
every string at the lengths the chapter runs, not proved for every N; Theorem 4.5 says the
parameters doing so at all large N are Lebesgue-null, under its hypotheses. The parameters are rebuilt from the description in ``shared/constructions.md``,
adapted to this package's model, and do not depend on N (the positional features n/(N+1),
(-1)^n and 1[n=1] carry the length); ``N`` is only validated.

**The mirror trick.** Every vector written into the residual stream is ``[v, -v]`` (coordinate
j and j + m), so each layer-norm input has mean exactly 0 and LN_eps(d) = d / sqrt(var(d) + eps)
is a *positive multiple* of d, for every eps >= 0. Every feed-forward block has no bias, so it
is positively homogeneous, and every construction below only needs per-position positive
rescalings to leave signs (and the positions of zeros) unchanged. The final layer norm maps the
eos vector ``a (e_o - e_o')`` to ``sign(a) sqrt(D/2) (e_o - e_o')`` when eps = 0, and the
readout gives T = sign(a) exactly: margin 1 at every N. With eps > 0 the same parameters give
T = a / sqrt(2 a^2 / D + eps) (times sqrt(2/D)), which keeps its sign but shrinks with |a|.

Exact float64 evaluation: the erasures (``u + W2 relu(W1 u)``) cancel coordinates exactly in
IEEE arithmetic (x + (-x) = 0), so rounding enters only through the O(1)-sized attention
averages, at the 1e-16 level, against signals of order 1/N (FIRST, MAJORITY) or 1/N^2 (PARITY).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .boolean import check_n
from .model import Recognizer
from .settings import LONG_N, progress

__all__ = ["parity_transformer", "first_transformer", "first_hard_transformer",
           "majority_transformer", "count_threshold_transformer", "construction_parameters", "score_gap", "CONSTRUCTIONS",
           "BUILDERS", "target"]


class _Builder:
    """Parameter arrays of a mirrored model with m named coordinates (D = 2m)."""

    def __init__(self, names, L, H, F):
        self.ix = {n: i for i, n in enumerate(names)}
        self.m = len(names)
        D = self.D = 2 * self.m
        self.H, self.F = H, F
        self.p = {"tok": np.zeros((3, D)), "pos": np.zeros((3, D)), "w": np.zeros(D),
                  "omega": np.zeros(())}
        for l in range(L):
            for k in ("Wq", "Wk", "Wv", "Wo"):
                self.p[f"layers.{l}.{k}"] = np.zeros((D, D))
            for k in ("bq", "bk", "bv", "bo", "b2"):
                self.p[f"layers.{l}.{k}"] = np.zeros(D)
            self.p[f"layers.{l}.W1"] = np.zeros((D, F))
            self.p[f"layers.{l}.b1"] = np.zeros(F)
            self.p[f"layers.{l}.W2"] = np.zeros((F, D))

    def write(self, key, row, coord, value):
        """Write +value into coordinate ``coord`` and -value into its mirror."""
        j = self.ix[coord]
        self.p[key][row, j] += value
        self.p[key][row, j + self.m] -= value

    def read(self, key, coord, col, value=1.0):
        """Read coordinate ``coord`` (first half only) into column ``col``."""
        self.p[key][self.ix[coord], col] += value

    def erase(self, l, coords, start):
        """FFN hidden units start.. that cancel ``coords`` exactly: u + W2 relu(W1 u) = 0 there.

        Each coordinate uses relu(c) and relu(-c), so it is cancelled whatever its sign.
        """
        j = start
        for c in coords:
            for s in (1.0, -1.0):
                self.read(f"layers.{l}.W1", c, j, s)
                self.write(f"layers.{l}.W2", j, c, -s)
                j += 1
        return j

    def readout(self):
        # The final LN maps a (e_o - e_o') to sign(a) sqrt(D/2) (e_o - e_o'): T = sign(a).
        j = self.ix["o"]
        self.p["w"][j] = 0.5 / math.sqrt(self.D / 2)
        self.p["w"][j + self.m] = -0.5 / math.sqrt(self.D / 2)


def _parity_params(gamma: float = 1.0):
    """PARITY: D = 18, L = 2, H = 2, F = 16.

    Coordinates: t0, t1, te (token one-hots), r = (-1)^n, p = n/(N+1), c, u (layer-1 averages),
    b (the bump), o (output).

    * Layer 1 attention, zero queries (uniform over the N+1 positions): c = k/(N+1) (k = number
      of ones) and u = 1/(N+1) (the eos indicator, averaged).
    * Layer 1 FFN: with a = c + u - p = (k + 1 - n)/(N+1), the three ReLUs
      relu(a + u) - 2 relu(a) + relu(a - u) = u 1[n = k + 1] write the bump b at the one
      position n = k + 1 (positions are 1..N+1, so k = 0..N always has one). It also erases
      p, c, u, so every position has the same norm except the bump position: the layer norm
      then scales all positions alike.
    * Layer 2 attention, two heads from eos: queries gamma * te, keys +r and -r, values b.
      Head 1 puts weight e^{+lam} on even positions, head 2 on odd ones; their difference at the
      bump position is > 0 iff n = k + 1 is even iff k is odd (checked on every string at the
      lengths the chapter runs, not proved here), of size about 2 tanh(lam) u / (N+1) ~ 1/N^2.
    * Layer 2 FFN erases te, r, b: at eos only o is left (t0 = t1 = 0 there), and the final LN
      (eps = 0) makes T = +-1. Other positions keep their token coordinate, so no layer-norm
      input anywhere has zero variance and the blowup beta (:meth:`Recognizer.trace`) is finite.
    """
    B = _Builder(["t0", "t1", "te", "r", "p", "c", "u", "b", "o"], L=2, H=2, F=16)
    for row, c in enumerate(("t0", "t1", "te")):
        B.write("tok", row, c, 1.0)
    B.write("pos", 0, "p", 1.0)          # n/(N+1)
    B.write("pos", 1, "r", 1.0)          # (-1)^n
    # layer 1: uniform attention (Wq = Wk = 0); head 1 values: col 0 = t1, col 1 = te
    B.read("layers.0.Wv", "t1", 0); B.read("layers.0.Wv", "te", 1)
    B.write("layers.0.Wo", 0, "c", 1.0); B.write("layers.0.Wo", 1, "u", 1.0)
    # layer 1 FFN: the bump (units 0-2) and erasure of p, c, u (units 3-8)
    W1 = "layers.0.W1"
    for j, (cc, uu) in enumerate(((1, 2), (1, 1), (1, 0))):     # a + u, a, a - u with a = c + u - p
        B.read(W1, "c", j, cc); B.read(W1, "u", j, uu); B.read(W1, "p", j, -1.0)
    for j, wgt in enumerate((1.0, -2.0, 1.0)):
        B.write("layers.0.W2", j, "b", wgt)
    B.erase(0, ["p", "c", "u"], 3)
    # layer 2: head 1 = columns 0..8, head 2 = columns 9..17 (d_head = 9)
    dh = B.D // 2
    for h, sign in ((0, 1.0), (1, -1.0)):
        B.read("layers.1.Wq", "te", h * dh, gamma)
        B.read("layers.1.Wk", "r", h * dh, sign)
        B.read("layers.1.Wv", "b", h * dh + 1)
        B.write("layers.1.Wo", h * dh + 1, "o", sign)
    B.erase(1, ["te", "r", "b"], 0)      # t0 = t1 = 0 at eos; kept elsewhere
    B.readout()
    return B.p, 2


def _first_params():
    """FIRST (= x_1): D = 12, L = 2, H = 1, F = 8.

    Coordinates t0, t1, te, f = 1[n = 1], s, o.

    * Layer 1 attention: none (zero values). The FFN, positively homogeneous, writes
      s = relu(f - t0 - te) - relu(f - t1 - te) = 1[n = 1] (2 x_1 - 1) (times that position's
      layer-norm scale): +-1 at position 1, exactly 0 elsewhere.
    * Layer 2 attention: zero queries (uniform); the value s gives +-g/(N+1) at eos in o.
    * Layer 2 FFN erases te (only o is left at eos); the final LN (eps = 0) makes T = 2 x_1 - 1 = +-1.
    """
    B = _Builder(["t0", "t1", "te", "f", "s", "o"], L=2, H=1, F=8)
    for row, c in enumerate(("t0", "t1", "te")):
        B.write("tok", row, c, 1.0)
    B.write("pos", 2, "f", 1.0)          # 1[n = 1]
    W1 = "layers.0.W1"
    B.read(W1, "f", 0); B.read(W1, "t0", 0, -1.0); B.read(W1, "te", 0, -1.0)
    B.read(W1, "f", 1); B.read(W1, "t1", 1, -1.0); B.read(W1, "te", 1, -1.0)
    B.write("layers.0.W2", 0, "s", 1.0); B.write("layers.0.W2", 1, "s", -1.0)
    B.read("layers.1.Wv", "s", 0)
    B.write("layers.1.Wo", 0, "o", 1.0)
    B.erase(1, ["te"], 0)                # t0 = t1 = f = s = 0 at eos
    B.readout()
    return B.p, 1


def _first_hard_params():
    """FIRST by hard attention: D = 12, L = 2, H = 1, F = 8, every parameter in [-1, 1].

    The same architecture and coordinates as :func:`_first_params` (chapter 3's worst-case
    search runs in it), but no O(1/N) signal and no need for eps = 0. Layer 1 does nothing (zero
    weights: y^1 = LN(y^0)). Layer 2 attention, from eos: the query reads the eos token
    (W_q rows te, te' = +-1 in every column, b_q = 1), the key reads the feature 1[n = 1]
    (W_k rows f, f' = +-1 in every column). Position 1 gets the score
    d_head (2 sqrt6 + 1) 2 sqrt3 / sqrt(d_head) ~ 71 (times the layer-norm scales at eps > 0),
    every other position 0 (:func:`score_gap`): softmax puts weight 1 - O(N e^-71) on position
    1 (hard attention) for every N far below e^71. The value reads t1 - t0 there, +-2 sqrt3 by
    the sign of 2 x_1 - 1, into o; the layer-2 FFN erases te; the final LN and the readout give
    T = 2 x_1 - 1 at eps = 0 (exactly, up to rounding and the e^-71 weights), and at eps > 0 a
    T of the same sign whose size does not depend on N. Without the feature 1[n = 1]
    (``mark_first=False``) every score is 0 and this is the uniform average.
    """
    B = _Builder(["t0", "t1", "te", "f", "s", "o"], L=2, H=1, F=8)
    for row, c in enumerate(("t0", "t1", "te")):
        B.write("tok", row, c, 1.0)
    B.write("pos", 2, "f", 1.0)          # 1[n = 1]
    Wq, Wk = B.p["layers.1.Wq"], B.p["layers.1.Wk"]
    te, f, m = B.ix["te"], B.ix["f"], B.m
    Wq[te], Wq[te + m] = 1.0, -1.0       # q = (2 sqrt6 + 1) in every column at eos
    B.p["layers.1.bq"][:] = 1.0
    Wk[f], Wk[f + m] = 1.0, -1.0         # k = 2 sqrt3 in every column at position 1, else 0
    B.read("layers.1.Wv", "t1", 0, 1.0); B.read("layers.1.Wv", "t0", 0, -1.0)
    B.write("layers.1.Wo", 0, "o", 1.0)
    B.erase(1, ["te"], 0)                # only o is left at eos
    B.readout()
    return B.p, 1


def _majority_params():
    """MAJORITY (N odd): D = 8, L = 1, H = 1, F = 6.

    Coordinates t0, t1, te, o. One layer: uniform attention averages the value t1 - t0, giving
    (2k - N)/(N+1) at eos (never 0 for odd N: ties exist only for even N); the FFN erases te
    (only o is left at eos) and the final LN (eps = 0) makes T = sign(2k - N) = +-1.
    """
    B = _Builder(["t0", "t1", "te", "o"], L=1, H=1, F=6)
    for row, c in enumerate(("t0", "t1", "te")):
        B.write("tok", row, c, 1.0)
    B.read("layers.0.Wv", "t1", 0, 1.0); B.read("layers.0.Wv", "t0", 0, -1.0)
    B.write("layers.0.Wo", 0, "o", 1.0)
    B.erase(0, ["te"], 0)                # t0 = t1 = 0 at eos
    B.readout()
    return B.p, 1


CONSTRUCTIONS = {"PARITY": _parity_params, "FIRST": _first_params, "MAJORITY": _majority_params,
                 "FIRST_HARD": _first_hard_params}


def construction_parameters(name: str) -> tuple[dict, int]:
    """The parameters of a named construction.

    Parameters
    ----------
    name : str
        One of ``CONSTRUCTIONS``: ``PARITY``, ``FIRST``, ``MAJORITY``, ``FIRST_HARD``.

    Returns
    -------
    tuple
        ``(params, H)``: the parameter dict for :meth:`Recognizer.from_parameters` and the
        number of heads.
    """
    if name not in CONSTRUCTIONS:
        raise ValueError(f"name={name!r} is unknown; allowed: {', '.join(CONSTRUCTIONS)}")
    return CONSTRUCTIONS[name]()


def _build(name, N, eps, dtype, device, mark_first=True):
    if N is not None:
        check_n(N)
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    params, H = construction_parameters(name)
    return Recognizer.from_parameters(params, eps=eps, H=H, mark_first=mark_first, dtype=dtype,
                                      device=device)


def parity_transformer(N: int | None = None, *, eps: float = 0.0, dtype=torch.float64,
                       device=None) -> Recognizer:
    """An exact PARITY recognizer (accept iff the number of ones is odd).

    Parameters
    ----------
    N : int or None
        The string length, only validated: the parameters are the same for every ``N``.
    eps : float
        The layer norms' :math:`\\varepsilon`, finite and >= 0.
    dtype : torch.dtype
        The parameters' dtype (default float64).
    device : torch.device or str or None
        Where the model is made.

    Returns
    -------
    Recognizer
        One model, :math:`T = \\pm 1` at :math:`\\varepsilon = 0`.

    Notes
    -----
    Chiang & Cholak (2022), rebuilt for this model (see ``_parity_params``): D = 18, L = 2,
    H = 2.
    """
    return _build("PARITY", N, eps, dtype, device)


def first_transformer(N: int | None = None, *, eps: float = 0.0, dtype=torch.float64,
                      device=None) -> Recognizer:
    """An exact FIRST recognizer (accept iff :math:`x_1 = 1`); D = 12, L = 2, H = 1.

    Parameters
    ----------
    N : int or None
        The string length, only validated: the parameters are the same for every ``N``.
    eps : float
        The layer norms' :math:`\\varepsilon`, finite and >= 0.
    dtype : torch.dtype
        The parameters' dtype (default float64).
    device : torch.device or str or None
        Where the model is made.

    Returns
    -------
    Recognizer
        One model, :math:`T = \\pm 1` at :math:`\\varepsilon = 0`.
    """
    return _build("FIRST", N, eps, dtype, device)


def first_hard_transformer(N: int | None = None, *, eps: float = 0.0, dtype=torch.float64,
                           device=None, mark_first: bool = True) -> Recognizer:
    """FIRST by hard attention on the marked position: D = 12, L = 2, H = 1, every parameter
    in [-1, 1].

    Parameters
    ----------
    N : int or None
        The string length, only validated: the parameters are the same for every ``N``.
    eps : float
        The layer norms' :math:`\\varepsilon`, finite and >= 0.
    dtype : torch.dtype
        The parameters' dtype (default float64).
    device : torch.device or str or None
        Where the model is made.
    mark_first : bool
        Whether the first position carries its marker (the construction reads it).

    Returns
    -------
    Recognizer
        One model: :math:`T = 2 x_1 - 1` at :math:`\\varepsilon = 0`, a margin independent of
        ``N`` at :math:`\\varepsilon > 0`, for every ``N`` far below :math:`e^{\\text{score gap}}`
        (:func:`score_gap`).
    """
    return _build("FIRST_HARD", N, eps, dtype, device, mark_first)


def score_gap(model: Recognizer, N: int) -> torch.Tensor:
    """How far the last layer's eos attention score of position 1 leads the others.

    Parameters
    ----------
    model : Recognizer
        A population of ``P`` models.
    N : int
        The string length.

    Returns
    -------
    torch.Tensor
        Shape ``(P, H)``: on the all-zeros and all-ones strings, (score at position 1) minus
        (the largest score at positions 2 to N+1), the smaller of the two.

    Notes
    -----
    Softmax puts weight at least :math:`1 / (1 + N e^{-\\text{gap}})` on position 1.

    Time: quadratic in N; on one CPU thread about 1.7 s at N = 16,000 for
    :func:`first_hard_transformer` (D = 12, L = 2), so about a minute at N = 10^5. From
    N = ``LONG_N`` (10^5) on, the two strings go one at a time behind a progress bar.
    """
    check_n(N)
    if not isinstance(model, Recognizer):
        raise ValueError(f"model must be a sensbook.Recognizer, got {type(model).__name__}")
    x = torch.stack([torch.zeros(N), torch.ones(N)]).to(model.dtype)
    parts = x.split(1 if N >= LONG_N else 2)
    s = torch.cat([model.eos_attention(p)[0][:, :, -1] for p in progress(
        parts, desc=f"score gap N={N}", disable=len(parts) == 1)], 1)   # (P, 2, H, S): last layer
    return (s[..., 0] - s[..., 1:].amax(-1)).amin(1)


def majority_transformer(N: int | None = None, *, eps: float = 0.0, dtype=torch.float64,
                         device=None) -> Recognizer:
    """An exact MAJORITY recognizer for odd ``N`` (accept iff more ones than zeros); D = 8,
    L = 1, H = 1.

    Parameters
    ----------
    N : int or None
        The string length, only validated: the parameters are the same for every ``N``.
    eps : float
        The layer norms' :math:`\\varepsilon`, finite and >= 0.
    dtype : torch.dtype
        The parameters' dtype (default float64).
    device : torch.device or str or None
        Where the model is made.

    Returns
    -------
    Recognizer
        One model, :math:`T = \\pm 1` at :math:`\\varepsilon = 0`; for even ``N`` a tie string
        gives a zero eos vector, so T is NaN there.
    """
    return _build("MAJORITY", N, eps, dtype, device)


def count_threshold_transformer(k: int, N: int, *, B: float = 1.0, eps: float = 0.0,
                                dtype=torch.float64, device=None) -> Recognizer:
    """A danger-zone theta inside the box [-B, B]^M (0 < B <= 1) whose largest flip on a string
    with ``k`` ones of length ``N`` is 2 B D, the most any theta of the box allows, at eps = 0.

    The worst-case architecture (D = 12, L = 2, H = 1, F = 8). The tokens are 0 and B v
    (v = (1, -1, 1, ...), mean 0, variance 1), eos and the positional map 0; layer 1 attends
    uniformly (zero queries and keys), W_v = W_o = B I and b_o = -B^3 t / (N + 1) v with the
    threshold t = k + 1/2 (k - 1/2 when k = N), so the first layer norm's input at eos is
    B^3 (k' - t) / (N + 1) v for a string with k' ones: variance of order (B^3 / N)^2, a danger
    zone that layer norm with eps = 0 maps to sign(k' - t) v exactly. Everything else is 0 except
    the readout w = B v, so T = B D sign(k' - t): flipping a bit that moves k' across t moves T
    by 2 B D, and |T(x) - T(x')| <= B ||y - y'||_1 <= 2 B D for every theta of the box (a layer
    norm's output has ||y||_2^2 <= D). With eps > 0 each of the four layer norms amplifies
    the small input by at most 1/sqrt(eps) (Lemma 3.2), so in a small box the same theta's
    flip falls like 1/N: the start the search needs at eps = 0."""
    check_n(N)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= N:
        raise ValueError(f"k must be an integer in [0, N={N}], got {k!r}")
    if not (isinstance(B, (int, float)) and 0 < B <= 1):
        raise ValueError(f"B must be a number in (0, 1], got {B!r}")
    D, F = 12, 8
    v = torch.tensor([(-1.0) ** j for j in range(D)], dtype=torch.float64)
    t = k + 0.5 if k < N else k - 0.5
    p = {"tok": torch.stack([0 * v, B * v, 0 * v]),
         "layers.0.Wv": B * torch.eye(D, dtype=torch.float64),
         "layers.0.Wo": B * torch.eye(D, dtype=torch.float64),
         "layers.0.bo": -B**3 * t / (N + 1) * v,
         "layers.1.W1": torch.zeros(D, F, dtype=torch.float64),
         "layers.0.W1": torch.zeros(D, F, dtype=torch.float64),
         "w": B * v}
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return Recognizer.from_parameters(p, eps=eps, H=1, dtype=dtype, device=device)


BUILDERS = {"PARITY": parity_transformer, "FIRST": first_transformer,
            "MAJORITY": majority_transformer, "FIRST_HARD": first_hard_transformer}


def target(name: str):
    """The Boolean function a named construction recognises.

    Parameters
    ----------
    name : str
        One of ``CONSTRUCTIONS``.
    """
    from .boolean import FIRST, MAJORITY, PARITY

    if name not in CONSTRUCTIONS:
        raise ValueError(f"name={name!r} is unknown; allowed: {', '.join(CONSTRUCTIONS)}")
    return {"PARITY": PARITY, "FIRST": FIRST, "MAJORITY": MAJORITY, "FIRST_HARD": FIRST}[name]
