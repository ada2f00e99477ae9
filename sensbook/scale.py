"""One scale setting for every chapter, the compute device, and progress bars.

The book runs at three scales:

* ``ci``: each chapter in about a minute on 2 CPU cores (what CI executes);
* ``book``: what the published HTML shows; builds on a laptop CPU;
* ``paper``: larger sweeps, meant for a GPU (Colab or a lab machine).

The scale is read from the environment variable ``SENSBOOK_SCALE`` (default ``book``) or set
with :func:`set_scale`. Chapters choose their sizes with :func:`pick`, so every size a chapter
uses is visible in one line of the chapter.
"""
from __future__ import annotations

import os

import torch

SCALES = ("ci", "book", "paper")
_override: str | None = None


def _check(name: str, argument: str) -> str:
    if name not in SCALES:
        raise ValueError(f"{argument}={name!r} is not a scale; allowed: {', '.join(SCALES)}")
    return name


def scale() -> str:
    """The current scale: :func:`set_scale`'s value, else ``$SENSBOOK_SCALE``, else ``book``."""
    if _override is not None:
        return _override
    return _check(os.environ.get("SENSBOOK_SCALE", "book").strip().lower(), "SENSBOOK_SCALE")


def set_scale(name: str | None) -> str:
    """Set the scale for this process (``None`` goes back to the environment). Returns it."""
    global _override
    _override = None if name is None else _check(name, "scale")
    return scale()


def pick(*, ci, book, paper):
    """The value for the current scale, e.g. ``N_max = pick(ci=10, book=14, paper=20)``."""
    return {"ci": ci, "book": book, "paper": paper}[scale()]


def device() -> torch.device:
    """``$SENSBOOK_DEVICE`` if set, else CUDA when available, else the CPU."""
    name = os.environ.get("SENSBOOK_DEVICE")
    if name:
        from .profile import check_device

        return check_device(name, "SENSBOOK_DEVICE")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def progress(iterable=None, *, total=None, desc=None, leave=False, disable=False):
    """A progress bar (tqdm), silent when ``$SENSBOOK_PROGRESS`` is ``0``.

    The book build and CI set ``SENSBOOK_PROGRESS=0`` so that no bar is baked into the HTML;
    in Colab or a terminal the bar shows how far a long computation has got.
    """
    from tqdm.auto import tqdm

    disable = disable or os.environ.get("SENSBOOK_PROGRESS", "1") == "0"
    return tqdm(iterable, total=total, desc=desc, leave=leave, disable=disable)


def banner(chapter: str | None = None) -> str:
    """The lines each chapter prints first: scale, device, torch version and, for a ``chapter``
    (``"ch5"``), how long its experiments take here: how many results are already stored and
    the predicted time of the missing ones (their cost models, on one CPU core; a GPU is faster).
    """
    line = f"sensbook scale={scale()!r} device={device()} torch={torch.__version__}"
    if chapter is None:
        return line
    from .experiments import registry
    from .sweep import Store, results_dir

    n = stored = 0
    missing = 0.0
    for e in (e for e in registry().values() if e.chapter == chapter):
        st = Store(results_dir(), e.name)
        for c in e.configs(scale()):
            n += 1
            if st.done(c):
                stored += 1
            else:
                missing += e.cost(c)
    if n == 0:
        return f"{line}\n{chapter}: no stored experiments; every cell computes as it runs"
    when = ("everything is stored: this chapter only reads and plots" if stored == n else
            f"computing the other {n - stored} takes about {_minutes(missing)} on one CPU core")
    return f"{line}\n{chapter}: {n} experiment configurations at this scale, {stored} stored; {when}"


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
