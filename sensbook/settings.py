"""The bottom of the package: the scale setting, the compute device, progress bars, the version.

It imports nothing of sensbook, so every module may import it (the instruments, the
experiments and the runtime alike).

The book runs at three scales:

* ``ci``: each chapter in about a minute on 2 CPU cores (what CI executes);
* ``book``: what the published HTML shows; builds on a laptop CPU;
* ``paper``: larger sweeps, meant for a GPU (Colab or a lab machine).

The scale is read from the environment variable ``SENSBOOK_SCALE`` (default ``book``) or set
with :func:`set_scale`. Chapters choose their sizes with :func:`pick`, so every size a chapter
uses is visible in one line of the chapter.
"""
from __future__ import annotations

import contextlib
import os
from importlib.metadata import PackageNotFoundError, version as _version

import torch

try:                                   # one source of truth for the version: pyproject.toml
    VERSION = _version("sensbook")
except PackageNotFoundError:           # running from a source tree that was never installed
    VERSION = "0.0.0+unknown"

SCALES = ("ci", "book", "paper")
_override: str | None = None


def check_scale(name: str, argument: str) -> str:
    if name not in SCALES:
        raise ValueError(f"{argument}={name!r} is not a scale; allowed: {', '.join(SCALES)}")
    return name


def scale() -> str:
    """The current scale: :func:`set_scale`'s value, else ``$SENSBOOK_SCALE``, else ``book``."""
    if _override is not None:
        return _override
    return check_scale(os.environ.get("SENSBOOK_SCALE", "book").strip().lower(), "SENSBOOK_SCALE")


def set_scale(name: str | None) -> str:
    """Set the scale for this process.

    Parameters
    ----------
    name : str or None
        ``"ci"``, ``"book"`` or ``"paper"``; None goes back to ``$SENSBOOK_SCALE`` (default
        ``book``).

    Returns
    -------
    str
        The scale now in force.
    """
    global _override
    _override = None if name is None else check_scale(name, "scale")
    return scale()


def pick(*, ci, book, paper):
    """The value for the current scale, e.g. ``N_max = pick(ci=10, book=14, paper=20)``.

    Parameters
    ----------
    ci : object
        The value at ``ci`` scale.
    book : object
        The value at ``book`` scale.
    paper : object
        The value at ``paper`` scale.
    """
    return {"ci": ci, "book": book, "paper": paper}[scale()]


def device() -> torch.device:
    """``$SENSBOOK_DEVICE`` if set, else CUDA when available, else the CPU."""
    name = os.environ.get("SENSBOOK_DEVICE")
    if name:
        return check_device(name, "SENSBOOK_DEVICE")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _available(kind: str) -> bool:
    """Whether this machine computes on devices of type ``kind`` (``meta`` computes nothing)."""
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "mps":
        return torch.backends.mps.is_available()
    if kind == "xpu":
        return hasattr(torch, "xpu") and torch.xpu.is_available()
    return kind == "cpu"


def check_device(device, argument="device") -> torch.device:
    """A torch device that exists here.

    Parameters
    ----------
    device : str or torch.device
        The device asked for.
    argument : str
        The argument or environment variable that asked for it (named in the error).

    Returns
    -------
    torch.device

    Notes
    -----
    CUDA (or MPS, XPU) asked for without it, or a device that computes nothing (``meta``),
    is a ValueError.
    """
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{argument}={device!r} is not a torch device ({e})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{argument}={device!r} asks for CUDA, but torch.cuda.is_available() "
                             "is False on this machine; use 'cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{argument}={device!r}: this machine has "
                             f"{torch.cuda.device_count()} CUDA device(s)")
    elif not _available(dev.type):
        what = ("holds no values (nothing is computed)" if dev.type == "meta" else
                "is not available on this machine")
        here = [k for k in ("cpu", "cuda", "mps", "xpu") if _available(k)]
        raise ValueError(f"{argument}={device!r}: a {dev.type!r} device {what}; allowed here: "
                         f"{', '.join(here)}")
    return dev


@contextlib.contextmanager
def one_thread():
    """Torch computes in one thread inside the block; the caller's setting is restored after.

    The book's computations are small matrices, for which more threads only add overhead, and
    the cost models are CPU-seconds of one thread: Colab's default of two threads made one
    ``ch2.e1`` configuration take 26 s against 2.6 s at one thread (issue 28). Every
    configuration computed in the calling process (``workers=1``: a notebook's kernel) runs so
    (:mod:`sensbook.runtime.sweep`), and so does every move of an explorer's controls
    (:func:`sensbook.pages.explore`); pool workers get their share of the cores at start-up.
    (A notebook's banner sets one thread for the whole session: :func:`sensbook.banner`.)"""
    before = torch.get_num_threads()
    if before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: Seconds a computation runs before its progress bar appears: shorter work shows no bar (a
#: bar that lasts milliseconds only flashes by; chapter 1 once showed 31 of them).
PROGRESS_DELAY = 1.0

#: From this string length on, the instruments that run a recognizer on whole strings
#: (:func:`sensbook.blowup`, :func:`sensbook.score_gap`, :func:`sensbook.flip_hinge`) go one
#: string at a time behind a progress bar: attention is quadratic in N, a string takes minutes.
LONG_N = 10**5


def progress(iterable=None, *, total=None, desc=None, leave=False, disable=False, **tqdm_kw):
    """A progress bar (tqdm), silent when ``$SENSBOOK_PROGRESS`` is ``0``.

    Parameters
    ----------
    iterable : iterable or None
        What to iterate over (None: update the bar by hand).
    total : float or None
        The bar's full count.
    desc : str or None
        Its label.
    leave : bool
        Keep the bar after it closes.
    disable : bool
        No bar.
    **tqdm_kw
        Passed to tqdm (``bar_format``, ``smoothing``, ...).

    Notes
    -----
    The book build and CI set ``SENSBOOK_PROGRESS=0`` so that no bar is baked into the HTML;
    in Colab or a terminal the bar shows how far a long computation has got. It appears only
    once the work has run for :data:`PROGRESS_DELAY` seconds (tqdm's ``delay``).
    """
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm as notebook_tqdm

    disable = disable or os.environ.get("SENSBOOK_PROGRESS", "1") == "0"
    if issubclass(tqdm, notebook_tqdm):                   # a notebook (Colab, Jupyter)
        tqdm = _notebook_bar()
    return tqdm(iterable, total=total, desc=desc, leave=leave, disable=disable,
                delay=PROGRESS_DELAY, **tqdm_kw)


def _notebook_bar():
    """tqdm's notebook bar, shown through a display handle so that a bar closed with
    ``leave=False`` leaves no output behind: tqdm only hides its widget, and a hidden widget
    still sits in the saved notebook (its text form, the bar as first shown, in every viewer
    without the widget's state). A bar that stopped on an error stays, as tqdm keeps it."""
    from IPython.display import display
    from tqdm.notebook import tqdm as notebook_tqdm

    class Bar(notebook_tqdm):
        def display(self, msg=None, pos=None, close=False, bar_style=None, check_delay=True):
            super().display(msg, pos, close=close, bar_style=bar_style, check_delay=False)
            if check_delay and self.delay > 0 and not self.displayed and not close:
                # the widget's view as raw data: ipywidgets 7 (Colab's) displays a widget
                # through _ipython_display_, which drops the display id
                view = {"version_major": 2, "version_minor": 0,
                        "model_id": self.container.model_id}
                self._handle = display({"text/plain": repr(self.container),
                                        "application/vnd.jupyter.widget-view+json": view},
                                       raw=True, display_id=True)
                self.displayed = True
            handle = getattr(self, "_handle", None)
            if close and not self.leave and handle is not None \
                    and self.container.children[1].bar_style != "danger":
                handle.update({"text/plain": ""}, raw=True)
                self._handle = None

    return Bar


#: The profilers' working budget (MiB) on a CPU when ``memory_mb`` is not given.
DEFAULT_MEMORY_MB = 256


def default_memory_mb(device=None) -> float:
    """The profilers' ``memory_mb`` when none is given: ``DEFAULT_MEMORY_MB`` on a CPU, half of
    the free memory of a CUDA device (``torch.cuda.mem_get_info``, read once per profile): a
    CPU-sized budget starves a GPU with small chunks."""
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda":
        return max(DEFAULT_MEMORY_MB, torch.cuda.mem_get_info(device)[0] / 2 / 2**20)
    return DEFAULT_MEMORY_MB
