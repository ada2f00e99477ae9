"""Controls for chapter 7: which ingredient makes the low-sensitivity bias? (architectures
only; chapter 7's experiments are ``experiments/ch7.py``)

Six architectures, each a population of P models evaluated in one call, so that
:func:`sensbook.sensitivity_profile` and :func:`sensbook.train_population` take them
unchanged (``model(x)`` with x of shape (B, N) or (P, B, N) gives (P, B); attributes
``P``, ``device``, ``dtype``):

* ``post-LN``: the book's :class:`sensbook.Recognizer` itself;
* ``pre-LN``, ``no-LN``, ``RMS``: :class:`Transformer`, one model with the Recognizer's
  parameters (same names and shapes without the population axis, same embedding,
  attention, FFN and read-out) and another normalisation: pre-LN ``y + MHA(LN(y))``,
  ``y + FFN(LN(y))`` and a final LN before the read-out; no normalisation at all; or
  RMS-norm ``d / sqrt(mean(d^2) + eps)`` (eps inside the root) where post-LN has its
  layer norms. Drawn from the same seed they get exactly the Recognizer's theta: a
  paired comparison;
* ``LSTM``: :class:`LSTM`, token embeddings read left to right by one LSTM layer of
  width D (PyTorch's gate equations), T = w . h_N + omega;
* ``MLP``: :class:`MLP`, the bits x_1..x_N as one input vector (fixed N), two ReLU
  layers of width 4D, a linear read-out.

Populations of the single-model modules are :class:`Population`: ``torch.func`` stacks
the P modules' parameters (``stack_module_state``) and maps one ``functional_call`` over
them (``vmap``). (``nn.LSTM`` has no vmap rule, hence the LSTM cell written with plain
matrices; ``tests/test_controls.py`` checks it against ``nn.LSTM``.)

Initialisations: the four schemes of :data:`sensbook.INITS`, by the rule of
:meth:`sensbook.Recognizer.random` (matrices in ``x @ W`` layout, fan-in = rows; vectors
uniform on +-scale/sqrt(width)); model p depends only on its own seed.
"""
from __future__ import annotations

import copy
import math

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from .boolean import check_n, check_strings
from .model import INITS, Recognizer, ScoreModule, add_parameters, positional_features

ARCHS = ("post-LN", "pre-LN", "no-LN", "RMS", "LSTM", "MLP")
NORMS = {"post-LN": "post", "pre-LN": "pre", "no-LN": "none", "RMS": "rms"}


# ---- single models -------------------------------------------------------------------
class Transformer(ScoreModule):
    """One transformer with the Recognizer's parameters and normalisation ``norm``:
    ``post`` (the Recognizer's own equations), ``pre``, ``none`` or ``rms``."""

    def __init__(self, D=16, L=2, H=1, F=None, norm="post", eps=0.0):
        super().__init__()
        if norm not in ("post", "pre", "none", "rms"):
            raise ValueError(f"norm={norm!r} is unknown; allowed: post, pre, none, rms")
        if D % H:
            raise ValueError(f"D={D} must be divisible by the number of heads H={H}")
        F = 4 * D if F is None else F
        self.D, self.L, self.H, self.F = D, L, H, F
        self.norm, self.eps = norm, float(eps)
        add_parameters(self, D, L, F, lambda *s: nn.Parameter(torch.zeros(s)))

    def _norm(self, d):
        if self.norm == "rms":
            return d / torch.sqrt((d * d).mean(-1, keepdim=True) + self.eps)
        c = d - d.mean(-1, keepdim=True)
        return c / torch.sqrt((c * c).mean(-1, keepdim=True) + self.eps)

    def _attention(self, h, lay):
        B, S, D = h.shape
        H, dh = self.H, D // self.H
        heads = lambda t: t.reshape(B, S, H, dh).transpose(1, 2)         # (B, H, S, dh)
        q, k, v = (heads(h @ W + b) for W, b in ((lay.Wq, lay.bq), (lay.Wk, lay.bk),
                                                  (lay.Wv, lay.bv)))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), -1) @ v
        return a.transpose(1, 2).reshape(B, S, D) @ lay.Wo + lay.bo

    def forward(self, x):
        """T for strings x of shape (B, N): shape (B,)."""
        B, N = x.shape
        e0, e1, eos = self.tok[0], self.tok[1], self.tok[2]
        h = torch.cat([e0 + x.unsqueeze(-1) * (e1 - e0), eos.expand(B, 1, self.D)], 1)
        h = h + positional_features(N, device=x.device, dtype=x.dtype) @ self.pos
        ffn = lambda u, lay: torch.relu(u @ lay.W1 + lay.b1) @ lay.W2 + lay.b2
        for lay in self.layers:
            if self.norm == "pre":
                h = h + self._attention(self._norm(h), lay)
                h = h + ffn(self._norm(h), lay)
            elif self.norm == "none":
                h = h + self._attention(h, lay)
                h = h + ffn(h, lay)
            else:
                h = self._norm(h + self._attention(h, lay))
                h = self._norm(h + ffn(h, lay))
        y = self._norm(h[:, -1]) if self.norm == "pre" else h[:, -1]
        return y @ self.w + self.omega


class LSTM(ScoreModule):
    """One LSTM recognizer: embeddings E[x_n] (tokens 0, 1), one LSTM layer of width D
    read left to right from h = c = 0 (gates i, f, g, o as in ``nn.LSTM``),
    T = w . h_N + omega."""

    def __init__(self, D=16):
        super().__init__()
        self.D = D
        z = lambda *s: nn.Parameter(torch.zeros(*s))
        self.tok = z(2, D)
        self.W_ih, self.W_hh = z(D, 4 * D), z(D, 4 * D)
        self.b_ih, self.b_hh = z(4 * D), z(4 * D)
        self.w, self.omega = z(D), z(())

    def forward(self, x):
        e = self.tok[0] + x.unsqueeze(-1) * (self.tok[1] - self.tok[0])      # (B, N, D)
        gx = e @ self.W_ih + self.b_ih + self.b_hh              # all steps at once
        h = c = x.new_zeros(x.shape[0], self.D)
        for n in range(x.shape[1]):
            i, f, g, o = (gx[:, n] + h @ self.W_hh).chunk(4, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h @ self.w + self.omega


class MLP(ScoreModule):
    """One MLP on the string as a vector (fixed N):
    x -> ReLU(x W1 + b1) -> ReLU(. W2 + b2)
    -> . w + omega, hidden width ``width``."""

    def __init__(self, N, width=64):
        super().__init__()
        self.N, self.D = check_n(N), width
        z = lambda *s: nn.Parameter(torch.zeros(*s))
        self.W1, self.b1 = z(N, width), z(width)
        self.W2, self.b2 = z(width, width), z(width)
        self.w, self.omega = z(width), z(())

    def forward(self, x):
        if x.shape[-1] != self.N:
            raise ValueError(f"this MLP reads strings of length N={self.N}, "
                             f"got {x.shape[-1]}")
        h = torch.relu(torch.relu(x @ self.W1 + self.b1) @ self.W2 + self.b2)
        return h @ self.w + self.omega


# ---- populations ---------------------------------------------------------------------
class Population(nn.Module):
    """P modules of one architecture with independent parameters, evaluated in one call.

    Parameters
    ----------
    modules : sequence of torch.nn.Module
        The P models, one architecture, without buffers; their parameters are copied.

    Notes
    -----
    The parameters are stacked (``torch.func.stack_module_state``); the forward maps
    ``functional_call`` of one parameter-less copy over the P models (``vmap``).
    ``model(x)``: x of shape ``(B, N)`` (the same strings for every model) or ``(P, B, N)``;
    output ``(P, B)``. :meth:`member` gives model p back as an ordinary module.
    """

    def __init__(self, modules):
        super().__init__()
        modules = list(modules)
        if not modules or not all(isinstance(m, nn.Module) for m in modules):
            raise ValueError("modules must be a non-empty list of nn.Module")
        self.returns_scores = all(getattr(m, "returns_scores", False) for m in modules)
        if any(True for _ in modules[0].buffers()):
            raise ValueError("modules with buffers are not supported")
        params, _ = stack_module_state(modules)
        self.P = len(modules)
        self._names = list(params)
        self.stacked = nn.ParameterList([nn.Parameter(params[n].detach().clone())
                                         for n in self._names])
        self._base = [copy.deepcopy(modules[0]).to("meta")]   # a list: not a submodule

    @property
    def device(self):
        return self.stacked[0].device

    @property
    def dtype(self):
        return self.stacked[0].dtype

    @property
    def base(self) -> nn.Module:
        return self._base[0]

    def params(self) -> dict:
        """The stacked parameters by the single module's names, each (P, ...)."""
        return dict(zip(self._names, self.stacked))

    def member(self, p: int) -> nn.Module:
        """Model p as an ordinary module (a copy of its parameters).

        Parameters
        ----------
        p : int
            The model's index, ``0 <= p < P``.
        """
        m = copy.deepcopy(self.base).to_empty(device=self.device).to(self.dtype)
        with torch.no_grad():
            for n, t in m.named_parameters():
                t.copy_(self.params()[n][p])
        return m

    def forward(self, x):
        x = check_strings(x)
        if x.dim() not in (2, 3) or (x.dim() == 3 and x.shape[0] != self.P):
            raise ValueError(f"x must have shape (B, N) or (P, B, N) with P={self.P}, "
                             f"got {tuple(x.shape)}")
        x = x.to(device=self.device, dtype=self.dtype)
        call = lambda p, xs: functional_call(self.base, p, (xs,))
        return vmap(call, in_dims=(0, 0 if x.dim() == 3 else None))(self.params(), x)

    def memory_per_string(self, N: int) -> int:
        """Bytes of activations per string for all P models (a generous bound, for
        sizing the profiler's chunks)."""
        width = max(getattr(self.base, "D", 16), getattr(self.base, "F", 0) // 2)
        return self.P * (N + 1) * 16 * width * torch.finfo(self.dtype).bits // 8

    def __repr__(self):
        return (f"Population(P={self.P}, {type(self.base).__name__}, {self.dtype}, "
                f"{self.device})")


def _draw(module: nn.Module, init: str, scale: float, g: torch.Generator, width: int):
    """Initialise ``module`` in place by Recognizer.random's rule (module doc)."""
    with torch.no_grad():
        for _, p in module.named_parameters():
            shape = (1, *p.shape)   # the Recognizer draws with its population axis
            u = lambda: torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
            n = lambda: torch.randn(shape, generator=g, dtype=torch.float64)
            if init == "uniform":
                v = scale * u()
            elif init == "gaussian":
                v = scale * n()
            elif p.dim() == 2:                            # a matrix: Xavier / Glorot
                a = math.sqrt(6 / (p.shape[0] + p.shape[1]))
                v = a * u() if init == "xavier_uniform" else a / math.sqrt(3) * n()
                v = scale * v
            else:                                             # a vector or scalar
                v = scale * u() / math.sqrt(width)
            p.copy_(v.reshape(p.shape))
    return module


def single_model(arch: str, seed: int, *, N: int | None = None, D: int = 16,
                 L: int = 2, H: int = 2, eps: float = 0.0, init: str = "uniform",
                 scale: float = 1.0):
    """One model of an architecture, drawn from a seed (float32, on the CPU).

    Parameters
    ----------
    arch : str
        One of ``ARCHS``.
    seed : int
        The model's seed.
    N : int or None
        The string length; needed by the MLP only (it reads a fixed length).
    D, L, H, eps, init, scale
        Width, layers, heads, layer-norm :math:`\\varepsilon`, initialisation and its scale,
        as for :meth:`sensbook.Recognizer.random` (the LSTM and the MLP use ``D``, ``init``
        and ``scale``).

    Notes
    -----
    For the transformers its :math:`\\theta` is exactly that of
    ``Recognizer.random(1, D, L, H, init=init, scale=scale, seed=seed)``.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} is unknown; allowed: {', '.join(ARCHS)}")
    if init not in INITS:
        raise ValueError(f"init={init!r} is unknown; allowed: {', '.join(INITS)}")
    if arch in NORMS:
        rec = Recognizer.random(1, D, L, H, eps=eps, init=init, scale=scale,
                                seed=int(seed))
        if arch == "post-LN":
            return rec
        m = Transformer(D, L, H, norm=NORMS[arch], eps=eps)
        theta = dict(rec.named_parameters())
        with torch.no_grad():
            for name, t in m.named_parameters():
                t.copy_(theta[name][0])
        return m
    g = torch.Generator().manual_seed(int(seed))
    if arch == "LSTM":
        return _draw(LSTM(D), init, scale, g, D)
    if N is None:
        raise ValueError("arch='MLP' reads a fixed length: pass N")
    return _draw(MLP(N, 4 * D), init, scale, g, 4 * D)


def control_population(arch: str, seeds, *, N: int | None = None, D: int = 16,
                       L: int = 2, H: int = 2, eps: float = 0.0, init: str = "uniform",
                       scale: float = 1.0, device=None, dtype=torch.float32):
    """A population of one architecture, one model per seed.

    Parameters
    ----------
    arch : str
        One of ``ARCHS``.
    seeds : iterable of int
        One seed per model, at least one; model ``p`` depends only on ``seeds[p]``.
    N, D, L, H, eps, init, scale
        As for :func:`single_model`.
    device : torch.device or str or None
        Where the population is (default the CPU).
    dtype : torch.dtype
        Its dtype.

    Returns
    -------
    Recognizer or Population
        ``post-LN`` gives a :class:`sensbook.Recognizer`, the others a :class:`Population`.
    """
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds must be a non-empty list of integers")
    kw = dict(N=N, D=D, L=L, H=H, eps=eps, init=init, scale=scale)
    models = [single_model(arch, s, **kw) for s in seeds]
    if arch == "post-LN":
        theta = torch.cat([m.flat() for m in models])
        pop = Recognizer(len(seeds), D, L, H, eps=eps, dtype=dtype)
        pop.set_flat(theta.to(dtype))
    else:
        pop = Population(models).to(dtype)
    return pop.to(device if device is not None else "cpu")
