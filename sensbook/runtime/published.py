"""Results the published book already computed, read over HTTP by readers (Colab).

The publish workflow (``.github/workflows/publish.yml``) runs every experiment at ``book`` scale
and ships the store with the site: ``<site>/results/<experiment>/<key>.json``, the same files as
a local store (:class:`~sensbook.sweep.Store`). A chapter opened in Colab calls
:func:`~sensbook.experiments.run_experiment`, which first asks the published store for each
configuration missing locally (:func:`fetch_missing`): a record is used only when its code
version and configuration are exactly the ones asked for (the key already covers both; the record
is checked again), is saved in the local store, and the chapter says how many results came from
the published store and how many were computed now.

The published store also holds ``<site>/results/index.json`` (:func:`write_index`): the keys
it holds per experiment, read once per session (:func:`published_keys`), so a notebook's first
line can say what will arrive from the store before it predicts any computing time, and only
keys the site holds are requested.

The network is used only where a reader runs the book: in Colab, or where ``SENSBOOK_PUBLISHED``
is set: to the site's URL, to ``1`` (the URL below), or to ``0`` (never, even in Colab). CI and
local builds never touch the network.

    python -m sensbook.runtime.published results/    # write results/index.json (publishing)
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

def site_url(repository: str) -> str:
    """The GitHub Pages site of a GitHub repository: ``https://OWNER.github.io/REPO/``."""
    parts = urllib.parse.urlparse(repository)
    path = [p for p in parts.path.split("/") if p]
    if parts.netloc.lower() != "github.com" or len(path) != 2:
        raise ValueError(f"repository must be https://github.com/OWNER/REPO, got {repository!r}")
    owner, repo = path[0].lower(), path[1].removesuffix(".git")
    return f"https://{owner}.github.io/" if repo.lower() == f"{owner}.github.io" else \
        f"https://{owner}.github.io/{repo}/"


def in_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def installed_from() -> str | None:
    """The GitHub repository this package was installed from, or None: pip records the URL of
    a ``sensbook @ git+https://github.com/OWNER/REPO@BRANCH`` install (what every notebook's
    install cell runs, from ``repository.url`` of ``_config.yml``, the one place it is set) in
    ``direct_url.json``. So the repository is never written into the package itself."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        info = json.loads(distribution("sensbook").read_text("direct_url.json") or "null")
    except (PackageNotFoundError, ValueError, OSError):
        return None
    if not isinstance(info, dict) or "vcs_info" not in info:
        return None
    url = str(info.get("url", "")).removesuffix(".git")
    try:
        site_url(url)
    except ValueError:
        return None
    return url


def published_url() -> str | None:
    """The published site to read results from, or None (no network): ``$SENSBOOK_PUBLISHED``
    (a URL, ``1`` for the site of :func:`installed_from`, ``0`` for none), else that site in
    Colab only."""
    env = os.environ.get("SENSBOOK_PUBLISHED", "").strip()
    if env == "0":
        return None
    if env == "1" or (not env and in_colab()):
        repo = installed_from()
        if repo is None and env == "1":
            raise ValueError("SENSBOOK_PUBLISHED=1 needs sensbook installed from its GitHub "
                             "repository (pip install 'sensbook @ git+https://github.com/OWNER/"
                             "REPO@BRANCH'); otherwise set SENSBOOK_PUBLISHED to the site's URL")
        return None if repo is None else site_url(repo)
    if not env:
        return None
    if urllib.parse.urlparse(env).scheme not in ("http", "https"):
        raise ValueError(f"SENSBOOK_PUBLISHED must be an http(s) URL, 1 or 0, got {env!r}")
    return env.rstrip("/") + "/"


#: The published store's list of keys per experiment, beside the experiments' folders.
INDEX = "index.json"
_KEY = re.compile(r"[0-9a-f]{20}")


def write_index(root) -> pathlib.Path:
    """Write ``root/index.json``, the keys of every stored result per experiment folder
    (``{"experiments": {name: [key, ...]}}``); the publish workflow runs this on the store it
    ships. Returns its path."""
    root = pathlib.Path(root)
    exps = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        keys = sorted(p.stem for p in d.glob("*.json") if _KEY.fullmatch(p.stem))
        if keys:
            exps[d.name] = keys
    path = root / INDEX
    path.write_text(json.dumps({"experiments": exps}, sort_keys=True) + "\n", encoding="utf-8")
    return path


_index_cache: dict = {}


def published_keys(base: str, timeout: float = 10.0):
    """``{experiment: set of keys}`` of the published store at ``base`` (its index.json, read
    once per process), or None when the site has no index or cannot be reached."""
    if base not in _index_cache:
        url = urllib.parse.urljoin(base, f"results/{INDEX}")
        req = urllib.request.Request(url, headers={"User-Agent": "sensbook"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                exps = json.loads(r.read().decode())["experiments"]
            _index_cache[base] = {str(k): set(v) for k, v in exps.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            _index_cache[base] = None
    return _index_cache[base]


def fetch(base: str, name: str, key: str, timeout: float = 10.0):
    """The published record ``<base>results/<name>/<key>.json`` (a dict), or None if the site has
    none (HTTP 404). Other failures (no network, a server error) raise :class:`OSError`."""
    url = urllib.parse.urljoin(base, f"results/{urllib.parse.quote(name)}/{key}.json")
    req = urllib.request.Request(url, headers={"User-Agent": "sensbook"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def fetch_missing(sweep, out, base: str | None = None) -> tuple:
    """Copy into the local store ``out`` every published result of ``sweep`` that ``out`` lacks
    (exact version and configuration only). Returns ``(number copied, base URL or None)``; with no
    published site (see :func:`published_url`) nothing is fetched. When the site has an index
    (:func:`published_keys`) only the keys it lists are requested. A network failure stops the
    fetching with one warning; what is missing is then computed as usual."""
    from .store import Store, canonical, key

    base = published_url() if base is None else base
    if base is None:
        return 0, None
    store = Store(out, sweep.name, sweep.version)
    missing = [c for c in sweep.configs if store.record(c) is None]
    index = published_keys(base) if missing else None
    copied = 0
    for c in missing:
        k = key(c, store.version)
        if index is not None and k not in index.get(sweep.name, ()):
            continue
        try:
            rec = fetch(base, sweep.name, k)
        except OSError as e:
            print(f"[published results at {base} not reachable ({e}); computing instead]",
                  file=sys.stderr)
            break
        if (not isinstance(rec, dict) or rec.get("version") != store.version or "result" not in rec
                or canonical(rec.get("config")) != canonical(c)):
            continue
        meta = dict(rec.get("meta") or {}, published=base)
        store.save(c, rec["result"], meta)
        copied += 1
    return copied, base


if __name__ == "__main__":
    for folder in sys.argv[1:] or ["results"]:
        print(f"wrote {write_index(folder)}")
