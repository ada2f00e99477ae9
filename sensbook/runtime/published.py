"""Results the published book already computed, read over HTTP by readers (Colab).

The publish workflow (``.github/workflows/publish.yml``) runs every experiment at ``book`` scale
and ships the store with the site: ``<site>/results/<experiment>/<key>.json``, the same files as
a local store (:class:`~sensbook.runtime.store.Store`). A chapter opened in Colab calls
:func:`~sensbook.experiments.run_experiment`, which first asks the published store for each
configuration missing locally (:func:`fetch_missing`). A published record is checked exactly as
a local one (:func:`~sensbook.runtime.store.check_record`: its fields, its sha256, its code
version, key and configuration) and saved in the local store as it came, never re-signed, so
the local store can still tell if it was damaged; one that fails is refused with a line naming
its URL and what is wrong, counted, and its configuration computed here. The chapter says how
many results came from the published store, how many were refused and how many were computed.

A fetch never hangs and never fills memory: connecting and each read wait at most
``FETCH_TIMEOUT`` seconds, all the fetches of one experiment at most ``FETCH_BUDGET`` seconds,
and a record is read up to ``MAX_RECORD_BYTES`` (:mod:`~sensbook.runtime.store`). A site too
slow, unreachable or broken stops the fetching with one line; what is missing is computed.

The published store also holds ``<site>/results/index.json`` (:func:`write_index`): the keys
it holds per experiment, read once per session (:func:`published_keys`), so a notebook's first
line can say what will arrive from the store before it predicts any computing time, and only
keys the site holds are requested.

The network is used only where a reader runs the book: in Colab, or where ``SENSBOOK_PUBLISHED``
is set: to the site's URL, to ``1`` (the URL below), or to ``0`` (never, even in Colab). CI and
local builds never touch the network.

    python -m sensbook.runtime index results/    # write results/index.json (publishing)
"""
from __future__ import annotations

import http.client
import json
import os
import pathlib
import re
import socket
import sys
import time
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
#: The most bytes of the index read (a few hundred keys per experiment take kilobytes).
MAX_INDEX_BYTES = 16 << 20
_KEY = re.compile(r"[0-9a-f]{20}")


def write_index(root) -> pathlib.Path:
    """Write ``root/index.json``, the keys of every stored result per experiment folder
    (``{"experiments": {name: [key, ...]}}``); the publish workflow runs this on the store it
    ships. Returns its path, written whole (a temporary file replaced: a full disk keeps the old
    index). A missing folder, a file or a store that cannot be written: ValueError, one line."""
    root = pathlib.Path(root)
    if not root.is_dir():
        raise ValueError(f"DIR={str(root)!r} is {'a file' if root.exists() else 'missing'}: "
                         "index writes DIR/index.json into a results folder (a store)")
    exps = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        keys = sorted(p.stem for p in d.glob("*.json") if _KEY.fullmatch(p.stem))
        if keys:
            exps[d.name] = keys
    path = root / INDEX
    from . import store as _store

    try:
        return _store.write_atomic(path, json.dumps({"experiments": exps}, sort_keys=True) + "\n")
    except OSError as e:
        raise ValueError(f"DIR={str(root)!r}: cannot write {INDEX} ({e.strerror or e}); the "
                         "index needs a store that can be written (the old index is kept)") from None


_index_cache: dict = {}


def published_keys(base: str, timeout: float | None = None):
    """``{experiment: set of keys}`` of the published store at ``base`` (its index.json, read
    once per process), or None when the site has no index, cannot be reached, or its index is
    not one (not JSON, nested too deep, not ``{"experiments": {name: [key, ...]}}``). Read as a
    record is (:func:`fetch`): ``timeout`` seconds to connect and between reads (default
    ``FETCH_TIMEOUT``), ``FETCH_BUDGET`` seconds in all, at most ``MAX_INDEX_BYTES``. What the
    index lists is what the site says it holds, not what it serves: each record is fetched
    and checked when it is needed."""
    if base not in _index_cache:
        url = urllib.parse.urljoin(base, f"results/{INDEX}")
        try:
            index = fetch(url, timeout=timeout, limit=MAX_INDEX_BYTES)
            exps = index["experiments"]
            if not all(isinstance(v, list) and all(isinstance(k, str) for k in v)
                       for v in exps.values()):
                raise TypeError("an index lists keys (strings) per experiment")
            _index_cache[base] = {str(k): set(v) for k, v in exps.items()}
        except (Unreachable, Refused, KeyError, TypeError, AttributeError):
            _index_cache[base] = None
    return _index_cache[base]


#: Seconds to connect to the site, and the most seconds between two reads of a record.
FETCH_TIMEOUT = 10.0
#: Seconds all the fetches of one experiment (:func:`fetch_missing`) may take together; the
#: index (:func:`published_keys`) has as long again.
FETCH_BUDGET = 60.0


class Unreachable(OSError):
    """The site cannot serve records now (no network, too slow, a server error): stop asking."""


class Refused(ValueError):
    """One published record is not usable (too large, not JSON, fails the checks)."""


def record_url(base: str, name: str, key: str) -> str:
    return urllib.parse.urljoin(base, f"results/{urllib.parse.quote(name)}/{key}.json")


def fetch(url: str, deadline: float | None = None, timeout: float | None = None,
          limit: int | None = None):
    """The published record at ``url`` (parsed JSON), or None if the site has none (HTTP 404).
    :class:`Unreachable` when the site cannot answer in time (``timeout`` seconds to connect and
    between reads, default ``FETCH_TIMEOUT``; all by ``deadline``, a ``time.monotonic()``
    value, default ``FETCH_BUDGET`` from now) or fails; :class:`Refused` when the body is
    larger than ``limit`` (default ``MAX_RECORD_BYTES``) or is not standard JSON
    (:func:`~sensbook.runtime.store.parse_record`: nesting bounded, no NaN)."""
    from . import store as _store

    timeout = FETCH_TIMEOUT if timeout is None else timeout
    deadline = time.monotonic() + FETCH_BUDGET if deadline is None else deadline
    limit = _store.MAX_RECORD_BYTES if limit is None else limit
    left = lambda: deadline - time.monotonic()
    if left() <= 0:
        raise Unreachable(f"the time budget of {FETCH_BUDGET:g} s for fetching is spent")
    req = urllib.request.Request(url, headers={"User-Agent": "sensbook"})
    try:
        with urllib.request.urlopen(req, timeout=min(timeout, left())) as r:
            size = r.headers.get("Content-Length", "")
            if size.strip().isdigit() and int(size) > limit:
                raise Refused(f"is {int(size)} bytes, over the limit of {limit}")

            def in_time(n):
                if left() <= 0:
                    raise Unreachable(f"{url} did not arrive within the time budget of "
                                      f"{FETCH_BUDGET:g} s ({n} bytes in)")

            data, over = _store.read_capped(r.read1, limit, in_time)
            if over:
                raise Refused(f"is over the limit of {limit} bytes")
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise Unreachable(f"{url} answered HTTP {e.code}") from None
    except (TimeoutError, socket.timeout):
        raise Unreachable(f"{url} sent nothing for {min(timeout, max(left(), 0)):.3g} s") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
        if isinstance(e, (Unreachable, Refused)):
            raise
        raise Unreachable(f"{url}: {type(e).__name__}: {e}") from None
    try:
        return _store.parse_record(data)
    except ValueError as e:
        raise Refused(str(e)) from None


def fetch_missing(sweep, out, base: str | None = None) -> tuple:
    """Copy into the local store ``out`` every published result of ``sweep`` that ``out`` lacks
    and that passes the checks of a local record. Returns ``(copied, base URL or None,
    refused, absent)``; with no published site (see :func:`published_url`) nothing is fetched.
    When the site has an index (:func:`published_keys`) only the keys it lists are requested;
    ``absent`` counts those it lists but does not serve (HTTP 404: a stale index), said in one
    line. A refused record is named (its URL and what is wrong) in one line on stderr; a site
    that cannot answer in time stops the fetching with one line. What is missing is then
    computed as usual."""
    from .store import Store, check_record, key

    base = published_url() if base is None else base
    if base is None:
        return 0, None, 0, 0
    store = Store(out, sweep.name, sweep.version)
    missing = [c for c in sweep.configs if store.record(c) is None]
    if missing:
        store.check_writable()               # an OSError naming the folder, before any fetch
    index = published_keys(base) if missing else None
    copied = refused = absent = 0
    deadline = time.monotonic() + FETCH_BUDGET
    for c in missing:
        k = key(c, store.version)
        if index is not None and k not in index.get(sweep.name, ()):
            continue
        url = record_url(base, sweep.name, k)
        try:
            rec = fetch(url, deadline)
            problem = None if rec is None else check_record(rec, store.version, k, c)
        except Unreachable as e:
            print(f"[published results at {base} not reachable ({e}); computing instead]",
                  file=sys.stderr)
            break
        except Refused as e:
            problem = str(e)
        if problem is not None:
            print(f"[published record {url} refused: it {problem}; computing it here]",
                  file=sys.stderr)
            refused += 1
            continue
        if rec is None:
            absent += index is not None
            continue
        store.put(rec, published=base)
        copied += 1
    if absent:
        print(f"[the index of the published store ({base}) lists {absent} result(s) of "
              f"{sweep.name} that the site does not serve (a stale index); computing them here]",
              file=sys.stderr)
    return copied, base, refused, absent

