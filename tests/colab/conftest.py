"""A Colab-like runtime for tests/colab/: Colab's versions of the packages a notebook sees, this
machine's torch (Colab never reinstalls torch), and a published store served on 127.0.0.1.

* ``.colab-venv/`` (git-ignored, in the checkout; rebuilt when :data:`PINS` change) is a venv of
  this Python with Colab's pins and, through a ``.pth`` file, a folder of links to the torch of
  the running environment and torch's own dependencies (nothing else of it).
* Every notebook then runs in a *fresh runtime*: a new venv without packages of its own that
  sees the Colab venv and torch through a ``.pth`` file, so the notebook's install cell really
  installs ``sensbook`` (into that runtime only) and no runtime sees another's install.
* The install cell is pointed at the checkout: at a wheel built from a copy of its package.
* The published store: the checkout's ``ci`` results (``results/``, which ``make chapters`` has
  filled; the missing ones are computed first), a third of each experiment's configurations
  copied under ``<site>/results/`` with its ``index.json`` and served on 127.0.0.1; another third
  is put into the notebook's local store, the last third is left to compute (:func:`share`).
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import http.server
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV = ROOT / ".colab-venv"
#: Colab's versions (2026) of what a chapter imports besides torch and sensbook.
PINS = ("pip==24.1.2", "ipywidgets==7.7.1", "numpy==2.0.2", "matplotlib==3.10.0",
        "ipykernel==6.17.1", "ipython==7.34.0", "tqdm==4.67.1",
        # "Profile your own model" (book/ch8_own_model.md)
        "scikit-learn==1.6.1", "transformers==4.57.1")
#: torch and the packages torch itself imports, linked from the running environment.
TORCH = ("torch", "torchgen", "functorch", "filelock", "typing_extensions", "sympy", "mpmath",
         "networkx", "jinja2", "markupsafe", "fsspec")
SCALE = "ci"


@contextlib.contextmanager
def locked(path: pathlib.Path):
    """An exclusive lock on ``path`` (pytest-xdist workers build the venv once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def site_packages(prefix: pathlib.Path) -> pathlib.Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _torch_links(target: pathlib.Path) -> None:
    here = pathlib.Path(importlib.util.find_spec("torch").origin).parents[1]
    target.mkdir()
    wanted = {n.lower() for n in TORCH}
    for p in here.iterdir():
        stem = p.name.split("-")[0].removesuffix(".py").lower()
        if stem in wanted and (p.is_dir() or p.suffix == ".py"):
            (target / p.name).symlink_to(p)


@pytest.fixture(scope="session")
def colab_venv() -> pathlib.Path:
    """The Colab-like venv (built once; about a minute with pip's cache warm)."""
    stamp = hashlib.sha256("\n".join([*PINS, *TORCH, sys.version,
                                      importlib.util.find_spec("torch").origin]).encode()).hexdigest()
    with locked(ROOT / ".colab-venv.lock"):
        if (VENV / ".stamp").is_file() and (VENV / ".stamp").read_text() == stamp:
            return VENV
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q",
               "--disable-pip-version-check"]
        subprocess.run(pip + [PINS[0]], check=True)
        subprocess.run(pip + list(PINS[1:]), check=True)
        _torch_links(VENV / "torch-site")
        (VENV / ".stamp").write_text(stamp)
    return VENV


def fresh_runtime(venv: pathlib.Path, where: pathlib.Path) -> pathlib.Path:
    """A new, empty venv that sees the Colab venv and torch: one notebook's runtime."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    (site_packages(where) / "colab_runtime.pth").write_text(
        f"{site_packages(venv)}\n{venv / 'torch-site'}\n")
    return where


@pytest.fixture(scope="session")
def wheel(colab_venv, tmp_path_factory) -> pathlib.Path:
    """A wheel of the checkout's package (built from a copy, so the checkout stays clean)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "sensbook", src / "sensbook",
                    ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([str(colab_venv / "bin" / "python"), "-m", "pip", "wheel", "-q", "--no-deps",
                    "--disable-pip-version-check", "-w", str(out), str(src)], check=True)
    return next(out.glob("sensbook-*.whl"))


def share(i: int) -> str:
    """Where configuration ``i`` of an experiment is before a notebook runs."""
    return ("here", "published", "compute")[i % 3]


@pytest.fixture(scope="session")
def chapters(request) -> list:
    """The chapters (``ch1`` ... ) of the notebooks this session runs (``-k ch1_sensitivity``
    runs one notebook and needs only its chapter's results), and of the experiments their
    banners name (ch6_explanations reads ``ch5.basin``)."""
    names = set()
    for item in request.session.items:
        if hasattr(item, "callspec") and "ipynb" in item.callspec.params:
            ipynb = item.callspec.params["ipynb"]
            names |= {ipynb.stem.split("_")[0], ipynb.stem}     # ch6_training: ch6.*
            for args in re.findall(r"sb\.banner\(([^)]*)\)", ipynb.read_text()):
                # an experiment's chapter is its name before the dot: ch5.basin, ch5_certified.radius
                names |= {n.split(".")[0] for n in re.findall(r'\\?"(ch\d+\w*)[\w.]*\\?"', args)}
    return sorted(names)


def _experiments(chapters):
    from sensbook.experiments import registry

    return [e for e in registry().values() if e.chapter in chapters]


@pytest.fixture(scope="session")
def ci_store(chapters) -> pathlib.Path:
    """The checkout's ``ci`` results of those chapters (``make chapters`` stores them; the
    missing are computed)."""
    out = ROOT / "results"
    env = dict(os.environ, OMP_NUM_THREADS="1", SENSBOOK_PROGRESS="0", PYTHONPATH=str(ROOT))
    with locked(ROOT / ".colab-venv.lock"):
        for chapter in sorted({e.chapter for e in _experiments(chapters)}):   # ch8 has none
            subprocess.run([sys.executable, "-m", "sensbook.cli", "sweep", chapter, "--scale",
                            SCALE, "--workers", "2", "--out", str(out)], check=True, env=env,
                           stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="session")
def published_site(ci_store, chapters, tmp_path_factory):
    """(base URL, folder): a third of every experiment's ci results, served on 127.0.0.1."""
    from sensbook.runtime.published import write_index
    from sensbook.runtime.store import Store

    folder = tmp_path_factory.mktemp("site")
    for e in _experiments(chapters):
        sweep = e.sweep(SCALE)
        store = Store(ci_store, e.name, sweep.version)
        for i, c in enumerate(sweep.configs):
            if share(i) == "published":
                dst = folder / "results" / e.name / store.path(c).name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(store.path(c), dst)
    (folder / "results").mkdir(exist_ok=True)   # a session of notebooks that read none (intro, ch8)
    write_index(folder / "results")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/", folder
    finally:
        server.shutdown()
        server.server_close()


def seed_local_store(ci_store: pathlib.Path, out: pathlib.Path, chapters) -> None:
    """The notebook's own store (``./results`` of its working folder): another third."""
    from sensbook.runtime.store import Store

    for e in _experiments(chapters):
        sweep = e.sweep(SCALE)
        store = Store(ci_store, e.name, sweep.version)
        for i, c in enumerate(sweep.configs):
            if share(i) == "here":
                dst = out / e.name / store.path(c).name
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(store.path(c), dst)


def kernel_spec(runtime: pathlib.Path, kernels: pathlib.Path) -> str:
    """A kernel spec running ipykernel in ``runtime``; returns its name."""
    spec = kernels / "colab"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(runtime / "bin" / "python"), "-Xfrozen_modules=off", "-m",
                 "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like", "language": "python"}))
    return "colab"
