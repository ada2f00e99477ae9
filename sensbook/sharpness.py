"""Sharpness of trained models: the top eigenvalue of the training loss's Hessian, per model.

:func:`top_hessian_eigenvalue` runs power iteration on Hessian-vector products of
:func:`sensbook.train.population_loss` for a whole population at once (the loss is summed over
models, so its Hessian is block-diagonal), or for one model of any kind (a ``torch.nn.Module``,
an :class:`sensbook.TorchClassifier`). Chapter 6 measures it on the trained recognizers.
"""
from __future__ import annotations

import math

import torch

from .adapters import check_one_function
from .boolean import BooleanFunction, check_real
from .train import _population_axis, _where, population_loss

__all__ = ["top_hessian_eigenvalue"]


def top_hessian_eigenvalue(model, f: BooleanFunction, x, *, loss: str = "logistic",
                           iters: int = 100, tol: float = 1e-3, seed: int = 0) -> dict:
    r"""Sharpness: the largest-magnitude eigenvalue of the Hessian of each model's training
    loss on the strings ``x``, by power iteration, for the whole population at once.

    Parameters
    ----------
    model : Recognizer or torch.nn.Module or TorchClassifier
        The population, or one model (Notes).
    f : BooleanFunction
        The target that labels ``x``.
    x : torch.Tensor
        0/1 strings ``(B, N)``.
    loss : {"logistic", "mse"}
        The loss (:func:`population_loss`).
    iters : int
        The most Hessian-vector products.
    tol : float
        Stop when every model's Rayleigh quotient changes by at most this, relatively.
    seed : int
        The seed of the start vectors.

    Returns
    -------
    dict
        ``lam`` ``(P,)``, ``iterations`` and ``converged`` ``(P,)``.

    Notes
    -----
    The loss is :func:`population_loss` (the mean over ``x`` of each model's loss) summed over
    models, so its Hessian is block-diagonal: one Hessian-vector product (``torch.func``,
    reverse over reverse) gives every model's product, and each model's vector is normalised
    on its own. At a minimum the Hessian is positive semi-definite and this is
    :math:`\lambda_{max}`, the sharpness of Hahn & Rofin (2024) and Keskar et al. (2017).
    Any other ``torch.nn.Module`` mapping x to scores ``(B,)`` or one logit per string
    ``(B, 1)`` is one model (P = 1), its Hessian over all its parameters; so is an
    :class:`sensbook.TorchClassifier` (the Hessian over its ``.model``'s parameters, through
    its token ids and output reading).
    """
    from torch.func import functional_call, grad, vjp
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from .adapters import TorchClassifier, explain_call

    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be an integer >= 1, got {iters!r}")
    adapter = model if isinstance(model, TorchClassifier) else None
    if adapter is not None:
        model = adapter.model
    if not isinstance(model, torch.nn.Module) or not any(True for _ in model.parameters()):
        raise TypeError(f"model must be a torch.nn.Module with parameters (the Hessian is over "
                        f"them) or an sb.TorchClassifier (the Hessian over its .model's), got "
                        f"{type(model).__name__}")
    tol = check_real(tol, "tol", minimum=0)
    dev, dt = _where(model)
    x = torch.as_tensor(x).to(device=dev, dtype=dt)
    y, _ = f(x), check_one_function(adapter or model, x)
    params = {k: v.detach() for k, v in model.named_parameters()}
    P = _population_axis(model) or 1
    g = torch.Generator().manual_seed(int(seed))
    v = {k: torch.randn(t.shape, generator=g, dtype=torch.float64).to(t) for k, t in
         params.items()}
    norm = lambda u: torch.sqrt(sum((t.reshape(P, -1).double() ** 2).sum(1) for t in u.values()))
    times = lambda u, c: {k: t * c.to(t).reshape(P, *[1] * (t.dim() - 1)) for k, t in u.items()}
    v = times(v, 1 / norm(v))
    def call(p, z):
        if adapter is None:
            return functional_call(model, p, (z,))
        args, kw = adapter.inputs(z)
        return adapter.scores(functional_call(model, p, args, kw))

    per = lambda p: population_loss(lambda z: call(p, z), x, y, loss)
    lam = torch.full((P,), math.nan, dtype=torch.float64)
    # the CPU flash-attention kernel has no double backward; the math kernel is the same
    # softmax(q k^T / sqrt(d)) v written in differentiable operations
    with sdpa_kernel(SDPBackend.MATH), explain_call(model, x):
        _, hvp = vjp(grad(lambda p: per(p).sum()), params)
        for it in range(1, iters + 1):
            hv = hvp(v)[0]
            new = sum((hv[k] * v[k]).reshape(P, -1).double().sum(1) for k in v).cpu()
            converged = (new - lam).abs() <= tol * new.abs()
            lam = new
            v = times(hv, 1 / norm(hv).clamp_min(1e-300))
            if bool(converged.all()):
                break
    return dict(lam=lam.numpy(), iterations=it, converged=converged.numpy())
