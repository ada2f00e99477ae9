"""Execute the book's chapters in parallel into a notebook cache, for `jupyter-book build`.

Jupyter Book 1.x executes one notebook at a time. This runs ``--jobs`` chapters at once (each
in its own kernel, with this process's environment, SENSBOOK_SCALE and OMP_NUM_THREADS, and
what the book's extension tools/sensbook_site.py gives the build's kernels: SENSBOOK_PAGE=1,
encrypted sockets), stores
every chapter that ran without error in the jupyter-cache at ``--cache`` (the cache myst-nb
reads in ``cache`` mode), and writes ``--config``: ``_config.yml`` with ``execute_notebooks:
cache`` at that cache. ``jupyter-book build . --config <it>`` then renders the cached outputs.
A chapter already in the cache with the same code is not run again; a chapter that fails is not
stored, so the build runs it again and reports its error as it always does.

    python tools/execute.py --cache _build/.jupyter_cache --config _build/config.yml --jobs 2
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import yaml
from jupyter_cache import get_cache
from jupyter_cache.base import CacheBundleIn
from jupyter_cache.executors.utils import single_nb_execution
from jupyter_book.config import get_final_config
from myst_nb.core.config import NbParserConfig
from myst_nb.core.read import create_nb_reader
from myst_parser.config.main import MdParserConfig

import sensbook_site  # tools/: the book's Sphinx extension

ROOT = Path(__file__).resolve().parent.parent


def chapters() -> list[Path]:
    """The notebooks of ``_toc.yml`` (root first), as paths."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    names = [toc["root"]] + [c["file"] for c in toc.get("chapters", [])]
    paths = [ROOT / f"{n}.md" for n in names]
    return [p for p in paths if p.exists() and "{code-cell}" in p.read_text()]


def md_config() -> MdParserConfig:
    """The Markdown settings the build gives myst-nb's reader (Jupyter Book's ``myst_*``)."""
    cfg = get_final_config(user_yaml=ROOT / "_config.yml", sourcedir=ROOT,
                           cli_config={"latex_individualpages": False})[0]
    known = set(MdParserConfig.__dataclass_fields__)
    return MdParserConfig(**{k[5:]: v for k, v in cfg.items()
                             if k.startswith("myst_") and k[5:] in known})


def read(path: Path, md: MdParserConfig | None = None):
    """The notebook myst-nb builds from a chapter (its own reader): what the cache is keyed on."""
    text = path.read_text()
    return create_nb_reader(str(path), md or md_config(), NbParserConfig(), text).read(text)


def _run(path: str, timeout: int):
    """Execute one chapter in its own directory (as myst-nb does): (notebook, seconds, error)."""
    p = Path(path)
    r = single_nb_execution(read(p), cwd=str(p.parent), allow_errors=False, timeout=timeout,
                            meta_override=True)
    return r.nb, r.time, (None if r.err is None else r.exc_string)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", required=True, help="the jupyter-cache folder")
    ap.add_argument("--config", required=True, help="the build configuration to write")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="chapters executed at once (default: the cores)")
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error(f"--jobs must be an integer >= 1, got {a.jobs}")
    sensbook_site.build_kernels()               # the kernels the build itself would start
    conf = yaml.safe_load((ROOT / "_config.yml").read_text())
    timeout = int(conf.get("execute", {}).get("timeout", 3600))
    cache, md = get_cache(a.cache), md_config()
    todo = []
    for p in chapters():
        try:
            cache.match_cache_notebook(read(p, md))
        except KeyError:
            todo.append(p)
    t0, failed = time.time(), []
    print(f"executing {len(todo)} chapter(s), {a.jobs} at a time", flush=True)
    with ProcessPoolExecutor(a.jobs) as pool:
        futures = {p: pool.submit(_run, str(p), timeout) for p in todo}
        for p, fut in futures.items():
            nb, seconds, err = fut.result()
            rel = p.relative_to(ROOT)
            if err is not None:
                failed.append(rel)
                print(f"{rel}: failed after {seconds:.0f} s (the build runs it again and "
                      "reports the error)", flush=True)
                continue
            cache.cache_notebook_bundle(CacheBundleIn(nb, str(p), data={"execution_seconds": seconds}),
                                        check_validity=False, overwrite=True)
            print(f"{rel}: executed in {seconds:.1f} s", flush=True)
    conf["execute"].update(execute_notebooks="cache", cache=str(Path(a.cache).resolve()))
    ext = conf.get("sphinx", {}).get("local_extensions") or {}
    for name, folder in ext.items():             # relative to the configuration's folder
        ext[name] = str((ROOT / folder).resolve())
    Path(a.config).parent.mkdir(parents=True, exist_ok=True)
    Path(a.config).write_text(yaml.safe_dump(conf, sort_keys=False))
    print(f"{len(todo) - len(failed)} of {len(todo)} chapter(s) cached in "
          f"{time.time() - t0:.0f} s; build with --config {a.config}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
