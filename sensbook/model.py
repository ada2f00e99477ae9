r"""The paper's transformer recognizer, for a population of P parameter draws at once.

Input :math:`x \in \{0,1\}^N`, then an end token ``eos`` at position :math:`N+1`. With
:math:`S = N+1` positions:

.. math::

    \begin{aligned}
    y^0_n &= E[x_n] + \phi(n) P_{pos} && \text{embedding + fixed positional features}\\
    a &= \mathrm{MHA}(y^{l-1})
        && \text{$H$ heads of softmax attention, scores} / \sqrt{D/H}\\
    u &= \mathrm{LN}_\varepsilon(y^{l-1} + a) && \text{post-LN after attention ...}\\
    y^l &= \mathrm{LN}_\varepsilon(u + W_2 \mathrm{ReLU}(W_1 u + b_1) + b_2)
        && \text{... and after the feed-forward block}\\
    T &= w \cdot y^L_{N+1} + \omega && \text{scalar output read at eos}\\
    \mathrm{LN}_\varepsilon(d) &= (d - \mathrm{mean}(d)) / \sqrt{\mathrm{var}(d) + \varepsilon}
        && \text{var over the $D$ coordinates}
    \end{aligned}

Accept when :math:`T \ge \xi`, reject when :math:`T \le -\xi` (see :func:`sensbook.classify`).

The modelling CHOICES (``paper-notes.md``), each made here once:

* **Layer norm**: post-LN after every sublayer (two per layer), as in Chiang & Cholak (2022),
  whose exact PARITY/FIRST transformers this model holds; no learnable gain or bias (a gain
  would be absorbed by the next affine map). All 2L layer norms count in the blowup.
* :math:`\varepsilon = 0` **on a zero-variance input**: :math:`\mathrm{LN}_0` is undefined
  there; we let IEEE arithmetic say so (``0 * inf = NaN``). The coefficient
  :math:`z = 1/\sqrt{\mathrm{var} + \varepsilon}` is +inf and so is the blowup. T is
  NaN, and the profiler counts that string as *non-finite*, never as a class, whenever the NaN
  reaches the eos output: a zero-variance layer norm at eos, or at any position of a layer
  below the last (attention spreads it to every position). A zero-variance layer norm only at
  non-eos positions of the last layer (e.g. L = 1) never reaches T: T is finite and decided
  while the blowup is +inf (:meth:`sensbook.Recognizer.trace`).
* **Positional features** :math:`\phi(n) = (n/(N+1), (-1)^n, 1[n=1])`, bounded in n, mapped
  to :math:`\mathbb{R}^D` by a learned 3 x D matrix: the features the constructions use.
  ``mark_first=False`` (an ablation, chapters 2, 3 and 6) sets the third feature to 0 at every
  position: no position is marked.
* **Heads** H with d_head = D/H; attention and FFN have biases; FFN width F (default 4D).

Shapes: every parameter carries a leading population axis P; ``x`` is ``(B, N)`` (the same
strings for every model) or ``(P, B, N)``; the output is ``(P, B)``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as Fn
from torch import nn

from .boolean import check_int, check_n, check_real, check_seed, check_strings
from .settings import check_device

INITS = ("uniform", "gaussian", "xavier_uniform", "xavier_normal")

#: Bytes of activations per tile of a gradient-free CPU forward (:meth:`Recognizer.tile`): the
#: FFN's hidden layer and the projections of a tile stay in the L2/L3 cache between kernels.
#: Measured by benchmarks/bench.py (2-core EPYC, 1 MiB L2 per core, 32 MiB L3).
TILE_BYTES = 4 << 20
#: Positions per model in a tile: enough rows for an efficient matmul, few enough to leave
#: room for several models.
TILE_ROWS = 1024
#: The fewest rows of any matmul in a gradient-free CPU forward: MKL multiplies 1-3 rows, or
#: matrices of at most ``SMALL_GEMM`` multiply-adds, with other kernels (other rounding), so
#: smaller batches are padded and no tile is smaller (:meth:`Recognizer.min_rows`).
MIN_ROWS, SMALL_GEMM = 4, 384
EOS = 2  # token ids: 0, 1, eos


def positional_features(N: int, *, mark_first: bool = True, device=None,
                        dtype=torch.float32) -> torch.Tensor:
    """phi(n) = (n/(N+1), (-1)^n, 1[n=1]) for n = 1..N+1: shape (N+1, 3), bounded in n.

    ``mark_first=False``: the third feature is 0 everywhere (the ablation of 1[n=1]; the shape,
    and so the parameter layout, is unchanged)."""
    if not isinstance(mark_first, bool):
        raise ValueError(f"mark_first must be True or False, got {mark_first!r}")
    n = torch.arange(1, N + 2, device=device, dtype=dtype)
    first = (n == 1).to(dtype) if mark_first else torch.zeros_like(n)
    return torch.stack([n / (N + 1), 1 - 2 * (n % 2), first], dim=-1)


def num_parameters(D: int, L: int, H: int = 1, F: int | None = None) -> int:
    """M, the dimension of parameter space (H does not change it: d_head = D/H).

    M = 3D (tokens 0, 1, eos) + 3D (positional map) + L (4D^2 + 4D + 2DF + F + D) + D + 1.
    """
    F = 4 * D if F is None else F
    return 6 * D + L * (4 * D * D + 4 * D + 2 * D * F + F + D) + D + 1


@dataclass
class Trace:
    r"""The internals the theory talks about, for each model and string.

    Parameters
    ----------
    variances : torch.Tensor
        Shape ``(P, B, 2L, N+1)``: ``variances[..., j, n]`` is the variance of the input of
        layer norm ``j`` (``j = 0 .. 2L-1``, two per layer) at position ``n``.
    z : torch.Tensor
        The layer-norm coefficients :math:`z = 1/\sqrt{\mathrm{var} + \varepsilon}`, the shape
        of ``variances``.
    tau : torch.Tensor
        Shape ``(P, B, 2L)``: the per-layer-norm blowup :math:`\tau_j = \max_n (1 + z_{j,n})`.
    beta : torch.Tensor
        Shape ``(P, B)``: the cumulative blowup :math:`\beta = \prod_j \tau_j` of Lemma 2.9.
    inputs : torch.Tensor or None
        The layer-norm inputs themselves, shape ``(P, B, 2L, N+1, D)``, when asked for.
    """

    variances: torch.Tensor
    z: torch.Tensor
    tau: torch.Tensor
    beta: torch.Tensor
    inputs: torch.Tensor | None = None


def add_parameters(module: nn.Module, D: int, L: int, F: int, zeros) -> None:
    """The recognizer's parameters, by name, on ``module``: ``tok``, ``pos`` (3 x D), per layer
    ``Wq Wk Wv Wo`` (D x D), ``bq bk bv bo b2`` (D), ``W1`` (D x F), ``b1`` (F), ``W2`` (F x D),
    and the readout ``w`` (D), ``omega``; ``zeros(*shape)`` makes each one (with any leading
    population axis). One layout for :class:`Recognizer` and the controls of chapter 7."""
    module.tok, module.pos = zeros(3, D), zeros(3, D)
    module.layers = nn.ModuleList()
    for _ in range(L):
        layer = nn.Module()
        for m in ("Wq", "Wk", "Wv", "Wo"):
            setattr(layer, m, zeros(D, D))
        for b in ("bq", "bk", "bv", "bo", "b2"):
            setattr(layer, b, zeros(D))
        layer.W1, layer.b1, layer.W2 = zeros(D, F), zeros(F), zeros(F, D)
        module.layers.append(layer)
    module.w, module.omega = zeros(D), zeros()


class _Slice:
    """A layer's parameters restricted to a slice of the population axis (views, no copies)."""

    def __init__(self, layer, models):
        self._layer, self._models = layer, models

    def __getattr__(self, name):
        return getattr(self._layer, name)[self._models]


class ScoreModule(nn.Module):
    """A module whose outputs are scores T (sign = label), never probabilities: the book's
    recognizer and its controls. The profiler does not ask whether such scores, when they
    happen to lie in [0, 1], are probabilities (:func:`sensbook.truth_table`)."""

    returns_scores = True


class Recognizer(ScoreModule):
    r"""P independent transformer recognizers (:mod:`sensbook.model` gives the equations).

    Parameters
    ----------
    P, D, L, H : int
        Models (the population axis), width (>= 2, divisible by H), layers, heads a layer.
    F : int, optional
        The feed-forward width (default ``4 D``).
    eps : float
        The layer norms' :math:`\varepsilon \ge 0`.
    mark_first : bool
        Whether the positional feature ``1[n=1]`` is on (False: its ablation).
    device, dtype : optional
        Where the parameters live, and their floating dtype (default float32).

    Notes
    -----
    The constructor makes zero parameters: build a random population with :meth:`random`, or
    explicit parameters with :meth:`from_parameters`. ``model(x)`` gives T of shape
    ``(P, B)``; :meth:`trace` also returns layer-norm variances and blowups.
    """

    def __init__(self, P: int = 1, D: int = 16, L: int = 2, H: int = 1, F: int | None = None,
                 eps: float = 0.0, *, mark_first: bool = True, device=None,
                 dtype=torch.float32):
        super().__init__()
        P, D, L, H = (check_int(v, name, minimum=lo)
                      for name, v, lo in (("P", P, 1), ("D", D, 2), ("L", L, 1), ("H", H, 1)))
        if D % H:
            raise ValueError(f"D={D} must be divisible by the number of heads H={H}")
        F = 4 * D if F is None else check_int(F, "F", minimum=1)
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"dtype must be a floating torch dtype (float32, float64, ...), got {dtype!r}")
        if device is not None:
            device = check_device(device, "device")
        self.P, self.D, self.L, self.H, self.F = P, D, L, H, F
        self.eps = eps
        self.mark_first = mark_first
        kw = dict(device=device, dtype=dtype)
        add_parameters(self, D, L, F, lambda *s: nn.Parameter(torch.zeros(P, *s, **kw)))

    # ---- parameters -----------------------------------------------------------------------
    @property
    def eps(self) -> float:
        return self._eps

    @eps.setter
    def eps(self, value):
        self._eps = check_real(value, "eps", minimum=0)

    @property
    def mark_first(self) -> bool:
        """Whether the positional feature 1[n=1] is on (False: its ablation)."""
        return self._mark_first

    @mark_first.setter
    def mark_first(self, value):
        if not isinstance(value, bool):
            raise ValueError(f"mark_first must be True or False, got {value!r}")
        self._mark_first = value

    @property
    def device(self):
        return self.w.device

    @property
    def dtype(self):
        return self.w.dtype

    @property
    def M(self) -> int:
        return num_parameters(self.D, self.L, self.H, self.F)

    def flat(self) -> torch.Tensor:
        r""":math:`\theta` as a ``(P, M)`` tensor (a copy), in the order of ``named_parameters``.

        Returns
        -------
        torch.Tensor
            Shape ``(P, M)``, the model's dtype and device.
        """
        return torch.cat([p.detach().reshape(self.P, -1) for p in self.parameters()], dim=1)

    @torch.no_grad()
    def set_flat(self, theta: torch.Tensor) -> "Recognizer":
        r"""Load :math:`\theta` (the inverse of :meth:`flat`).

        Parameters
        ----------
        theta : torch.Tensor
            Shape ``(P, M)``, in the order of :meth:`flat`.

        Returns
        -------
        Recognizer
            The model itself.
        """
        if tuple(theta.shape) != (self.P, self.M):
            raise ValueError(f"theta must have shape (P, M) = {(self.P, self.M)}, got {tuple(theta.shape)}")
        i = 0
        for p in self.parameters():
            n = p[0].numel()
            p.copy_(theta[:, i:i + n].reshape(p.shape))
            i += n
        return self

    def like(self, P: int | None = None) -> "Recognizer":
        """A zero-initialised population with the same architecture, eps, positional features,
        device and dtype."""
        return Recognizer(self.P if P is None else P, self.D, self.L, self.H, self.F, self.eps,
                          mark_first=self.mark_first, device=self.device, dtype=self.dtype)

    def select(self, idx) -> "Recognizer":
        """The sub-population ``idx`` (an index, list, slice or bool mask) as a new model."""
        theta = self.flat()[idx].reshape(-1, self.M)
        return self.like(theta.shape[0]).set_flat(theta)

    @classmethod
    def from_parameters(cls, params: dict, *, eps: float = 0.0, H: int = 1,
                        mark_first: bool = True, device=None,
                        dtype=torch.float64) -> "Recognizer":
        r"""A model from explicit arrays named as in ``named_parameters()``.

        Parameters
        ----------
        params : dict
            Arrays by name, each with a leading population axis P or none (then P = 1), see
            Notes; ``D``, ``L`` and ``F`` are read from their shapes.
        eps, H, mark_first
            As for :class:`Recognizer`.
        device, dtype : optional
            Where the parameters live, and their floating dtype (default float64).

        Notes
        -----
        Keys: ``tok`` ``(3, D)``, ``pos`` ``(3, D)``, ``layers.{l}.{Wq,Wk,Wv,Wo}`` ``(D, D)``
        (``x @ W`` convention), ``layers.{l}.{bq,bk,bv,bo,b2}`` ``(D,)``, ``layers.{l}.W1``
        ``(D, F)``, ``layers.{l}.b1`` ``(F,)``, ``layers.{l}.W2`` ``(F, D)``, ``w`` ``(D,)``,
        ``omega`` ``()``. Missing keys are zero; unknown keys or wrong shapes are errors.
        """
        if not isinstance(params, dict) or "tok" not in params:
            got = sorted(params) if isinstance(params, dict) else type(params).__name__
            raise ValueError("params must be a dict of arrays that has at least 'tok' (the token "
                             f"embeddings, shape (3, D) or (P, 3, D)); got {got}")
        t = {k: torch.as_tensor(v, dtype=dtype) for k, v in params.items()}
        if t["tok"].dim() not in (2, 3) or t["tok"].shape[-2] != 3:
            raise ValueError(f"parameter 'tok' must have shape (3, D) or (P, 3, D), got {tuple(t['tok'].shape)}")
        D = t["tok"].shape[-1]
        L = 1 + max((int(k.split(".")[1]) for k in t if k.startswith("layers.")), default=0)
        F = next((v.shape[-1] for k, v in t.items() if k.endswith(".W1")), 4 * D)
        batched = t["tok"].dim() == 3
        P = t["tok"].shape[0] if batched else 1
        model = cls(P, D, L, H, F, eps, mark_first=mark_first, device=device, dtype=dtype)
        own = dict(model.named_parameters())
        with torch.no_grad():
            for k, v in t.items():
                if k not in own:
                    raise ValueError(f"unknown parameter {k!r}; known: {sorted(own)}")
                want = own[k].shape if batched else own[k].shape[1:]
                if tuple(v.shape) != tuple(want):
                    raise ValueError(f"parameter {k!r} must have shape {tuple(want)}, got {tuple(v.shape)}")
                own[k].copy_(v.reshape(own[k].shape))
        return model

    @classmethod
    def random(cls, P: int = 1, D: int = 16, L: int = 2, H: int = 1, F: int | None = None,
               eps: float = 0.0, *, init: str = "uniform", scale: float = 1.0, seed: int = 0,
               mark_first: bool = True, device=None, dtype=torch.float32) -> "Recognizer":
        r"""P independent random models, seeded (the same seed gives the same models anywhere).

        Parameters
        ----------
        P, D, L, H, F, eps
            The architecture, as for :class:`Recognizer`.
        init : {"uniform", "gaussian", "xavier_uniform", "xavier_normal"}
            The distribution of the parameters, see Notes.
        scale : float
            Its scale, > 0.
        seed : int
            The seed of the draw.
        mark_first, device, dtype
            As for :class:`Recognizer`.

        Notes
        -----
        ``uniform``: every parameter uniform on ``[-scale, scale]``, the theory's box
        :math:`\Theta`; ``gaussian``: :math:`N(0, \mathrm{scale}^2)`; ``xavier_uniform`` /
        ``xavier_normal``: matrices by fan-in and fan-out, times ``scale``, vectors uniform on
        :math:`\pm \mathrm{scale}/\sqrt{\mathrm{fan_{in}}}`, so every parameter has a density
        and none is initialised to an exact constant.
        """
        if init not in INITS:
            raise ValueError(f"init={init!r} is unknown; allowed: {', '.join(INITS)}")
        scale = check_real(scale, "scale", minimum=0, strict=True)
        g = torch.Generator().manual_seed(check_seed(seed))
        model = cls(P, D, L, H, F, eps, mark_first=mark_first, device=device, dtype=dtype)
        with torch.no_grad():
            for name, p in model.named_parameters():
                shape = p.shape
                u = lambda: torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
                n = lambda: torch.randn(shape, generator=g, dtype=torch.float64)
                fan_in = shape[1] if len(shape) == 3 else model.D
                fan_out = shape[2] if len(shape) == 3 else 1
                if init == "uniform":
                    v = scale * u()
                elif init == "gaussian":
                    v = scale * n()
                elif len(shape) == 3:                         # a matrix: Xavier / Glorot
                    a = math.sqrt(6 / (fan_in + fan_out))
                    v = scale * (a * u() if init == "xavier_uniform" else a / math.sqrt(3) * n())
                else:                                          # a vector or scalar
                    v = scale * u() / math.sqrt(fan_in)
                p.copy_(v)
        return model

    # ---- forward --------------------------------------------------------------------------
    def _ln(self, d, rec, j=0, edits=None):
        """LN_eps over the last axis; ``rec`` collects (variance, input) when tracing; ``edits``
        (:mod:`sensbook.interventions`) may rewrite layer norm j's sqrt(var + eps) and output."""
        c = d - d.mean(-1, keepdim=True)
        var = (c * c).mean(-1, keepdim=True)
        if rec is not None:
            rec.append((var.squeeze(-1), d))
        if not edits:
            return c / torch.sqrt(var + self._eps)
        same = lambda t: t
        out = c / edits.get(("norm", j), same)(torch.sqrt(var + self._eps))
        return edits.get(("out", j), same)(out)

    def _embed(self, x, models=slice(None), checked=False):
        """y^0: (P', B, N+1, D) for the models ``models`` from x of shape (B, N), (P, B, N),
        or (P', B, N) already restricted to them (``checked``: x was validated by the caller)."""
        x = x if checked else check_strings(x)
        tok, pos = self.tok[models], self.pos[models]
        P = tok.shape[0]
        if x.dim() == 2:
            x = x.unsqueeze(0)
        if x.dim() == 3 and x.shape[0] == self.P != P:
            x = x[models]
        if x.dim() != 3 or x.shape[0] not in (1, P):
            raise ValueError(f"x must have shape (B, N) or (P, B, N) with P={self.P}, got {tuple(x.shape)}")
        N = check_n(x.shape[-1])
        x = x.to(device=self.device, dtype=self.dtype)
        e0, e1, eos = tok[:, 0], tok[:, 1], tok[:, EOS]                      # (P, D)
        bits = e0[:, None, None] + x.unsqueeze(-1) * (e1 - e0)[:, None, None]  # (P, B, N, D)
        eos = eos[:, None, None].expand(P, bits.shape[1], 1, self.D)
        h = torch.cat([bits, eos], dim=2)
        phi = positional_features(N, mark_first=self._mark_first, device=self.device,
                                  dtype=self.dtype)                            # (N+1, 3)
        return h + torch.einsum("sf,pfd->psd", phi, pos).unsqueeze(1)

    def _affine(self, h, W, b):
        """h @ W + b per model: h (P, ..., Din), W (P, Din, Dout), b (P, Dout)."""
        P, shape = h.shape[0], h.shape[1:-1]
        out = torch.baddbmm(b.unsqueeze(1), h.reshape(P, -1, h.shape[-1]), W)
        return out.reshape(P, *shape, W.shape[-1])

    def _attention(self, h, lay, last_only, edits=None, i=0):
        """Multi-head softmax attention; only the eos query if ``last_only``; ``edits`` may
        rewrite layer i's scores q k / sqrt(d_head), shape (P, B, H, queries, S)."""
        P, B, S, D = h.shape
        H, dh = self.H, D // self.H
        hq = h[:, :, -1:] if last_only else h
        heads = lambda t: t.reshape(P * B, t.shape[2], H, dh).transpose(1, 2)   # (PB, H, s, dh)
        q = heads(self._affine(hq, lay.Wq, lay.bq))
        k = heads(self._affine(h, lay.Wk, lay.bk))
        v = heads(self._affine(h, lay.Wv, lay.bv))
        edit = (edits or {}).get(("scores", i))
        if edit is None:
            a = Fn.scaled_dot_product_attention(q, k, v)        # softmax(q k^T / sqrt(dh)) v
        else:
            s = edit((q @ k.transpose(-1, -2) / math.sqrt(dh)).reshape(P, B, H, -1, S))
            a = torch.softmax(s, -1).reshape(P * B, H, -1, S) @ v
        a = a.transpose(1, 2).reshape(P, B, hq.shape[2], D)
        return self._affine(a, lay.Wo, lay.bo)

    def _run(self, x, rec=None, edits=None, models=slice(None), checked=False):
        """T for the models ``models`` (a slice of the population axis; x is (B, N), (P, B, N)
        or already sliced); ``rec`` collects the trace's internals; ``edits`` maps a site
        (:mod:`sensbook.interventions`) to a function that rewrites its tensor."""
        h = self._embed(x, models, checked)
        for i, lay in enumerate(self.layers):
            lay = _Slice(lay, models)
            last = rec is None and i == self.L - 1       # only eos matters at the top
            a = self._attention(h, lay, last, edits, i)
            h = self._ln((h[:, :, -1:] if last else h) + a, rec, 2 * i, edits)
            u = self._affine(h, lay.W1, lay.b1)
            u = torch.relu_(u) if not u.requires_grad else torch.relu(u)
            h = self._ln(h + self._affine(u, lay.W2, lay.b2), rec, 2 * i + 1, edits)
        return (h[:, :, -1] * self.w[models].unsqueeze(1)).sum(-1) \
            + self.omega[models].unsqueeze(1)

    def tile(self, B: int, N: int) -> tuple[int, int]:
        """(models, strings) per tile of a gradient-free forward on B strings of length N.

        On a CPU a tile's activations fit ``TILE_BYTES`` (the FFN's hidden layer and the
        projections stay in the cache between the layer's kernels instead of streaming through
        memory once per kernel), with at most ``TILE_ROWS`` positions per model, so each matmul
        keeps a few hundred rows; on a GPU one tile holds everything (the caller's chunk is sized
        to the device's memory). Tiling never changes a result (see :meth:`forward`)."""
        S = N + 1
        if self.device.type != "cpu":
            return self.P, B
        per_row = (self.F + 3 * self.D) * torch.finfo(self.dtype).bits // 8
        rows = max(S, TILE_BYTES // per_row)
        strings = min(B, max(self.min_rows(), min(rows, TILE_ROWS) // S))
        return min(self.P, max(1, rows // (strings * S))), strings

    def min_rows(self) -> int:
        """Strings per call below which the forward pads (see ``MIN_ROWS``): the top layer's
        matmuls have one row per string, and the smallest is (rows, D) x (D, min(D, F))."""
        return max(MIN_ROWS, SMALL_GEMM // (self.D * min(self.D, self.F)) + 1)

    def forward(self, x) -> torch.Tensor:
        """T(theta, x) for every model and string: shape (P, B).

        Without gradients the forward runs in cache-sized tiles of models x strings
        (:meth:`tile`), and every matmul has at least :meth:`min_rows` rows (a batch of fewer
        strings is padded): a tiny matmul takes another kernel with other rounding, so this way
        T(theta, x) is the same float whatever batch x comes in and however it is tiled (the
        profiler's chunks never change a bit; tests/test_perf.py checks D = 4 ... 64)."""
        if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
            return self._run(x)
        meta = isinstance(x, torch.Tensor) and x.device.type == "meta"   # shapes only
        x = x if meta else check_strings(x)
        if x.dim() not in (2, 3) or x.shape[-2] == 0:
            return self._run(x, checked=True)
        B, N = x.shape[-2], x.shape[-1]
        if B < self.min_rows() and self.device.type == "cpu":
            pad = x[..., :1, :].expand(*x.shape[:-2], self.min_rows() - B, N)
            return self.forward(torch.cat([x, pad], -2))[:, :B]
        g, b = self.tile(B, N)
        if g >= self.P and b >= B:
            return self._run(x, checked=True)
        out = torch.empty(self.P, B, device=self.device, dtype=self.dtype)
        per_model = x.dim() == 3 and x.shape[0] == self.P and self.P > 1
        cuts = list(range(0, B, b))
        if B - cuts[-1] < self.min_rows():             # no tile smaller than that either
            cuts.pop()
        cuts.append(B)
        for p0 in range(0, self.P, g):
            ms = slice(p0, min(p0 + g, self.P))
            xm = x[ms] if per_model else x
            for b0, b1 in zip(cuts[:-1], cuts[1:]):
                out[ms, b0:b1] = self._run(xm[..., b0:b1, :], models=ms, checked=True)
        return out

    @torch.no_grad()
    def features(self, x) -> torch.Tensor:
        r"""The read-out's input: the last layer norm's output at eos, so that
        :math:`T(\theta, x) = h(x) \cdot w + \omega` (the read-out, linear in ``w`` and
        ``omega``; :class:`sensbook.ReadoutScore` integrates it out).

        Parameters
        ----------
        x : torch.Tensor
            0/1 strings ``(B, N)`` (the same for every model) or ``(P, B, N)``.

        Returns
        -------
        torch.Tensor
            ``(P, B, D)``.
        """
        got = []
        self._run(x, edits={("out", 2 * self.L - 1): lambda t: got.append(t[:, :, -1]) or t})
        return got[0]

    @torch.no_grad()
    def trace(self, x, *, inputs: bool = False):
        """The output with layer-norm variances, z, tau and beta.

        Parameters
        ----------
        x : torch.Tensor
            0/1 strings ``(B, N)`` (the same for every model) or ``(P, B, N)``.
        inputs : bool
            Also keep the layer-norm inputs (``Trace.inputs``).

        Returns
        -------
        tuple
            ``(T, trace)``: the scores ``(P, B)`` and a :class:`Trace`.

        Notes
        -----
        After a zero-variance layer norm at eps = 0 the activations it produces are NaN and that
        string's beta is +inf (one factor is infinite). T is NaN when the NaN reaches eos: the
        zero-variance layer norm is at eos, or in a layer below the last (attention then mixes
        NaN into every position). At non-eos positions of the last layer only (always the case
        for L = 1 when eos is fine) the NaN stays there: T is finite and decided, beta is +inf.
        """
        rec = []
        T = self._run(x, rec)
        var = torch.stack([v for v, _ in rec], dim=2)             # (P, B, 2L, S)
        z = 1 / torch.sqrt(var + self._eps)
        tau = (1 + z).amax(-1)
        beta = torch.where(torch.isinf(tau).any(-1), torch.inf, tau.prod(-1))
        return T, Trace(var, z, tau, beta, torch.stack([d for _, d in rec], 2) if inputs else None)

    @torch.no_grad()
    def eos_attention(self, x):
        """(scores, weights) of the eos query in every layer and head: shape (P, B, L, H, N+1);
        scores q k / sqrt(d_head), weights their softmax over the N+1 positions (position 1
        first). Hard attention on position 1 is weights[..., 0] near 1."""
        att = []                                  # the scores of the eos query, layer by layer
        self._run(x, edits={("scores", i): lambda t: att.append(t[..., -1, :]) or t
                            for i in range(self.L)})
        s = torch.stack(att, 2)
        return s, torch.softmax(s, -1)

    def memory_per_string(self, N: int) -> int:
        """Bytes of activations per input string (all P models) at the forward's peak.

        Parameters
        ----------
        N : int
            The string length.

        Returns
        -------
        int
            A bound used to size profiler chunks: a few ``(S, D)``-sized tensors, the
            ``(S, F)`` FFN hidden layer, the ``(S, 3D)`` projections and the ``(H, S, S)``
            attention weights, ``S = N + 1``.
        """
        S = N + 1
        per = self.P * S * (12 * self.D + 2 * self.F + 2 * self.H * S)
        return per * torch.finfo(self.dtype).bits // 8

    def __repr__(self):
        return (f"Recognizer(P={self.P}, D={self.D}, L={self.L}, H={self.H}, F={self.F}, "
                f"eps={self.eps}, M={self.M}, "
                f"{'' if self.mark_first else 'mark_first=False, '}{self.dtype}, {self.device})")


class LowPrecision(ScoreModule):
    """A :class:`Recognizer` evaluated with its matmuls in a low precision (``torch.bfloat16``
    by autocast; on a GPU the tensor cores' path), for speed where float32 is not needed: T is
    computed with the float32 parameters and layer norms, the matmuls in ``dtype``, and every
    string whose |T| lies within ``rounding_bound = ulps * L * u * (|w| sqrt(D) + |omega|)``
    per model (u = the dtype's unit roundoff) gets the score 0: undecided, never a class. The
    bound covers the read-out, not the rounding that the layers below amplify, so it is used
    only where it was checked: every parameter in the box [-BOX, BOX] (the uniform init's
    Theta; tests/test_perf.py checks that no string of random populations in it is decided
    with another label than float32's). A model outside it is refused at every call: inner
    weights 10x the box, as after training, gave strings the other label (T = 2.77 in float32,
    -1.84 in bfloat16, bound 1.31)."""

    BOX = 1.0

    def __init__(self, model: Recognizer, dtype=torch.bfloat16, ulps: float = 16.0):
        super().__init__()
        if not isinstance(model, Recognizer):
            raise ValueError(f"model must be a sensbook.Recognizer, got {type(model).__name__}")
        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype!r}")
        self.model, self.low, self.P = model, dtype, model.P
        self.ulps = check_real(ulps, "ulps", minimum=0)

    device = property(lambda self: self.model.device)
    dtype = property(lambda self: self.model.dtype)
    memory_per_string = property(lambda self: self.model.memory_per_string)
    tile = property(lambda self: self.model.tile)

    def rounding_bound(self) -> torch.Tensor:
        """Per model (P,): |T| at or below this is undecided."""
        m, u = self.model, torch.finfo(self.low).eps / 2
        return self.ulps * m.L * u * (m.w.detach().norm(dim=-1) * math.sqrt(m.D) + m.omega.detach().abs())

    @torch.no_grad()
    def forward(self, x) -> torch.Tensor:
        big = max(float(p.abs().max()) for p in self.model.parameters())
        if not big <= self.BOX:
            raise ValueError(f"LowPrecision is checked only for parameters in [-{self.BOX:g}, "
                             f"{self.BOX:g}]; this model has |theta| up to {big:.3g}, where "
                             "its rounding bound does not hold: evaluate the Recognizer itself")
        with torch.autocast(self.device.type, dtype=self.low):
            T = self.model(x).to(self.model.dtype)
        return torch.where(T.abs() <= self.rounding_bound().unsqueeze(1), torch.zeros_like(T), T)
