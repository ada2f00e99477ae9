"""The results store: one JSON file per finished configuration, keyed by what computed it.

* :func:`key`: a hash of the configuration and a *version*: the package version plus a
  fingerprint of the source files that compute the result (:func:`version`, from
  :mod:`sensbook.runtime.fingerprint`): the module of the experiment's runner and every module
  of ``sensbook/`` it imports. Changed code never reads
  stale results, and editing one chapter's experiments (``sensbook/experiments/ch6_training.py``)
  or an instrument only that chapter imports recomputes that chapter only.
* :class:`Store` writes atomically (a temporary file in the same folder, flushed and fsynced,
  then ``os.replace``), so a killed run leaves either the whole file or none; a record holds its
  configuration, version and checksum, and :meth:`Store.load` returns it only when all match.
* :class:`Claim`: a configuration being computed is claimed, so several runners on one folder
  split the work (:mod:`sensbook.runtime.sweep`). Imports nothing of sensbook but
  :mod:`sensbook.settings` and :mod:`sensbook.runtime.fingerprint`.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import pathlib
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field


from .fingerprint import MAX_SOURCE_BYTES, version


def canonical(config) -> str:
    """The configuration as canonical JSON (sorted keys, no spaces); ValueError if not JSON-able."""
    try:
        return json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"config must be JSON-serialisable (dicts, lists, str, int, finite float): {e}") from None


def key(config, version_: str | None = None) -> str:
    """A 20-hex-digit key of (configuration, version): changes when either changes."""
    v = version() if version_ is None else version_
    return hashlib.sha256(f"{v}\n{canonical(config)}".encode()).hexdigest()[:20]


def results_dir(path=None) -> pathlib.Path:
    """Where results live: ``path`` if given, else ``$SENSBOOK_RESULTS`` if set, else
    ``results/`` in the book's root.

    Parameters
    ----------
    path : str or os.PathLike, optional
        The command line's ``--out``.

    Returns
    -------
    pathlib.Path

    Notes
    -----
    The book's root is the nearest folder at or above the working directory holding
    ``_toc.yml`` (so a chapter executed in ``book/`` and ``sensbook sweep`` run at the root use
    the same, git-ignored, ``results/``); elsewhere (e.g. Colab) the working directory. A
    relative ``path`` or ``$SENSBOOK_RESULTS`` (``paper-results``) is relative to that root too
    (one rule for both), so the sweep, wherever it runs, and the chapters' kernels (which run in
    ``book/``) read one store.
    """
    here = pathlib.Path.cwd()
    root = next((d for d in (here, *here.parents) if (d / "_toc.yml").is_file()), here)
    env = os.fspath(path) if path is not None else os.environ.get("SENSBOOK_RESULTS")
    return root / pathlib.Path(env).expanduser() if env else root / "results"


#: Seconds between heartbeats of a claim (its file's mtime is touched while computing).
CLAIM_HEARTBEAT = 10.0
#: A claim whose heartbeat is older than this (or whose process, on this host, is gone) is
#: stale: another runner takes the configuration over.
CLAIM_STALE = 120.0
#: Seconds between looks at configurations claimed by another runner.
CLAIM_POLL = 1.0
#: A leftover ``.tmp`` file (a write interrupted by a kill) older than this is deleted.
TMP_STALE = 600.0
#: The least free space (bytes) a results folder must have before anything is computed.
MIN_FREE_BYTES = 1 << 20
#: The largest record read, locally or from the published store (the book's records are below
#: 100 kB at ``book`` scale); a larger file is refused, never read whole.
MAX_RECORD_BYTES = 64 << 20
#: The largest source file read for a key, and the largest claim file read.
#: A claim file that names no owner (a full disk at claim time, or a kill between creating and
#: writing it, by an older version) and is older than this many seconds is stale.
CLAIM_OWNERLESS = 2.0


class UnsafeFile(OSError):
    """A path that is not a regular file of bounded size (a FIFO, a device, a link out of the
    store, a file over the size limit): it is not read."""


def read_capped(read, limit: int, before_read=None) -> tuple:
    """``(bytes, over)``: chunks from ``read(k)`` until it returns nothing, but never more than
    ``limit + 1`` bytes in all (``over``: the source had more than ``limit``).
    ``before_read(n)``, with the bytes read so far, runs before each read (it may raise: a
    deadline). The one bounded read of a record, from a file or from the network."""
    chunks, n = [], 0
    while n <= limit:
        if before_read is not None:
            before_read(n)
        b = read(min(1 << 16, limit + 1 - n))
        if not b:
            break
        chunks.append(b)
        n += len(b)
    return b"".join(chunks), n > limit


def read_regular(path, limit: int, inside=None, tail: bool = False) -> bytes:
    """The bytes of ``path`` when it is a regular file (or a link to one) of at most ``limit``
    bytes, and, with ``inside``, when it resolves to a path inside that folder; otherwise
    :class:`UnsafeFile` saying what it is. Never blocks on a FIFO (opened non-blocking) and
    never reads more than ``limit + 1`` bytes (``/dev/zero`` is refused, not read). With
    ``tail``, a longer file gives its last ``limit`` bytes (a log's end)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a directory"
                    if stat.S_ISDIR(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "not a regular file")
            raise UnsafeFile(f"is {kind}, not a regular file")
        if inside is not None:
            real, root = os.path.realpath(path), os.path.realpath(inside)
            if os.path.commonpath([real, root]) != root:
                raise UnsafeFile(f"links out of the store (to {real})")
        if tail and st.st_size > limit:
            os.lseek(fd, st.st_size - limit, os.SEEK_SET)
        elif st.st_size > limit:
            raise UnsafeFile(f"is {st.st_size} bytes, over the limit of {limit}")
        data, over = read_capped(lambda k: os.read(fd, k), limit)
        if tail:
            return data[-limit:]
        if over:
            raise UnsafeFile(f"grows past the limit of {limit} bytes")
        return data
    finally:
        os.close(fd)


def write_atomic(p: pathlib.Path, text: str) -> pathlib.Path:
    """Write ``text`` to ``p`` atomically: temp file in the same folder, fsync, replace (a full
    disk or a kill leaves the old file whole, never part of the new one)."""
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, p)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    return p


def _checksum(rec: dict) -> str:
    """sha256 of the canonical JSON of what a record stores (version, key, config, result);
    ``meta`` (where and how long it ran) is not part of it, so the same result computed on
    two machines has the same checksum."""
    body = {k: rec[k] for k in ("version", "key", "config", "result")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                     allow_nan=False).encode()).hexdigest()


def _record_problem(rec) -> str | None:
    """Why a parsed file is not a stored record, else None."""
    if not isinstance(rec, dict):
        return f"holds a JSON {type(rec).__name__}, not a record"
    missing = [k for k in ("version", "key", "config", "result", "meta", "sha256") if k not in rec]
    if missing:
        return f"has no {', '.join(repr(k) for k in missing)}"
    if rec["result"] is None:
        return "has a null result"
    if not isinstance(rec["meta"], dict):
        return f"has a meta that is a JSON {type(rec['meta']).__name__}, not an object"
    try:
        if rec["sha256"] != _checksum(rec):
            return "fails its checksum (edited or damaged)"
    except (TypeError, ValueError) as e:
        return f"is not standard JSON ({e})"
    return None


def check_record(rec, version_: str, key_: str, config) -> str | None:
    """Why ``rec`` (a parsed JSON file, local or published) is not the record of ``config`` at
    code version ``version_`` under key ``key_``, else None: its fields, its checksum, and its
    version, key and configuration, exactly."""
    problem = _record_problem(rec)
    if problem is None and rec["version"] != version_:
        problem = f"is of another code version ({str(rec['version'])[:40]!r}, not {version_!r})"
    elif problem is None and rec["key"] != key_:
        problem = f"names another key ({str(rec['key'])[:40]!r}, not {key_!r})"
    elif problem is None and canonical(rec["config"]) != canonical(config):
        problem = f"holds another configuration ({canonical(rec['config'])[:80]})"
    return problem


#: The deepest nesting of lists and objects a record (or the published index) may have: a
#: deeper one would overflow the stack of whatever reads it next (checksum, canonical form).
MAX_RECORD_DEPTH = 64


def _nan(token):
    raise ValueError(f"is not standard JSON (it holds {token})")


def _finite(text):
    """A JSON number as a float, refused beyond a float's range (``1e999`` would read as inf
    and fail only when the record is stored again)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"is not standard JSON (it holds {text[:40]}, beyond a float's range)")
    return value


def json_depth(value) -> int:
    """How deeply lists and objects nest in ``value`` (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if items is not None:
            deepest = max(deepest, d)
            stack.extend((x, d + 1) for x in items)
    return deepest


def parse_record(data: bytes):
    """A record file's bytes as standard JSON (no NaN or Infinity, at most
    ``MAX_RECORD_DEPTH`` levels deep); ValueError (with what is wrong) otherwise."""
    limit = f"is nested deeper than the limit of {MAX_RECORD_DEPTH} levels"
    try:
        rec = json.loads(data.decode("utf-8"), parse_constant=_nan, parse_float=_finite)
    except RecursionError:
        raise ValueError(f"{limit} (too deep to parse)") from None
    except (UnicodeDecodeError, ValueError) as e:
        if str(e).startswith("is not standard JSON"):
            raise ValueError(str(e)) from None
        raise ValueError(f"is not JSON ({type(e).__name__}: {str(e)[:120]})") from None
    depth = json_depth(rec)
    if depth > MAX_RECORD_DEPTH:
        raise ValueError(f"{limit} ({depth} levels)")
    return rec


def process_start(pid) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, ``/proc/<pid>/stat``), which
    with the pid identifies a process (a pid alone is reused); None when unknown."""
    try:
        stat_ = pathlib.Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError, TypeError, OverflowError):
        return None
    fields = stat_.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else None


def pid_alive(pid, start: str | None = None) -> bool:
    """Whether process ``pid`` of this host runs, and, when its ``start`` time was recorded
    (:func:`process_start`), is still the same process (not a later one given its pid)."""
    if start is not None and pathlib.Path("/proc/self/stat").exists():
        return process_start(pid) == start
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, TypeError, OverflowError):
        return True
    return True


class Claim:
    """A claim on one configuration: the file ``<key>.claim`` beside its result, created whole
    and exclusively (written to a temporary file, then hard-linked to its name, so it never
    exists without its owner), holding its owner (host, pid and the pid's start time, a random
    tag, start time), with a heartbeat (the file's mtime, touched every ``CLAIM_HEARTBEAT``
    seconds by a thread while the configuration is computed). Another runner skips a claimed
    configuration and waits for its result; a stale claim is taken over, saying why: no
    heartbeat for ``CLAIM_STALE`` seconds, its process gone on this host (or its pid now
    another process's), or no owner at all (a file an older version left empty when the disk
    was full or it was killed while writing). Two runners can at worst both compute a
    configuration after a simultaneous takeover (the same result, written atomically), never
    lose it."""

    def __init__(self, path: pathlib.Path, owner: str):
        self.path, self.owner = path, owner
        self._stop = threading.Event()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True)
        self._beat.start()

    @staticmethod
    def info(path: pathlib.Path):
        """(owner dict or {}, mtime) of a claim file, or None when there is none."""
        try:
            mtime = os.lstat(path).st_mtime
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            return {}, time.time()
        try:
            text = read_regular(path, MAX_SOURCE_BYTES).decode()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, UnicodeDecodeError):
            return {}, mtime
        try:
            owner = json.loads(text)
        except (ValueError, RecursionError):
            owner = {}
        return (owner if isinstance(owner, dict) else {}), mtime

    @staticmethod
    def why_stale(owner: dict, mtime: float) -> str | None:
        """Why a claim (its owner and heartbeat) is stale, else None."""
        age = time.time() - mtime
        if age > CLAIM_STALE:
            return f"no heartbeat for {age:.0f} s"
        if not all(k in owner for k in ("owner", "host", "pid")):
            if age > CLAIM_OWNERLESS:
                return ("it names no owner (left by a full disk at claim time, or a kill "
                        "between creating and writing it)")
            return None
        if owner["host"] == socket.gethostname() and not pid_alive(owner["pid"],
                                                                   owner.get("pid_start")):
            return f"its process {owner['pid']} on this host is gone"
        return None

    @classmethod
    def stale(cls, owner: dict, mtime: float) -> bool:
        return cls.why_stale(owner, mtime) is not None

    @staticmethod
    def describe(owner: dict, mtime: float) -> str:
        """Who holds a claim, for a person: owner and last heartbeat."""
        who = owner.get("owner") or "no recorded owner"
        return f"{who}, last heartbeat {max(0.0, time.time() - mtime):.0f} s ago"

    @classmethod
    def _create(cls, path: pathlib.Path, text: str) -> bool:
        """Create ``path`` holding ``text``, whole, only if it does not exist; False if it does."""
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.chmod(tmp, 0o644)
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                return False
            except OSError:                    # no hard links here: create exclusively instead
                try:
                    fd2 = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    return False
                with os.fdopen(fd2, "w") as fh:
                    fh.write(text)
                return True
        finally:
            pathlib.Path(tmp).unlink(missing_ok=True)

    @classmethod
    def take(cls, path: pathlib.Path):
        """``(Claim, None)`` when this process now holds the claim, else ``(None, who)``:
        ``who`` describes the holder (:meth:`describe`)."""
        tag = uuid.uuid4().hex[:12]
        owner = {"owner": f"{socket.gethostname()}:{os.getpid()}:{tag}",
                 "host": socket.gethostname(), "pid": os.getpid(),
                 "pid_start": process_start(os.getpid()),
                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        for _ in range(3):
            if cls._create(path, json.dumps(owner)):
                return cls(path, owner["owner"]), None
            info = cls.info(path)
            if info is None:
                continue                                       # released meanwhile: try again
            held, mtime = info
            why = cls.why_stale(held, mtime)
            if why is None:
                return None, cls.describe(held, mtime)
            again = cls.info(path)                             # still the same stale claim?
            if again is not None and again[0].get("owner") == held.get("owner"):
                try:
                    os.unlink(path)                            # take it over
                    print(f"[taking over the stale claim {path}: {why}]", file=sys.stderr,
                          flush=True)
                except FileNotFoundError:
                    pass
        return None, "a claim that changed hands while it was read"

    def _mine(self) -> bool:
        info = self.info(self.path)
        return info is not None and info[0].get("owner") == self.owner

    def _heartbeat(self):
        while not self._stop.wait(CLAIM_HEARTBEAT):
            try:
                if not self._mine():
                    return
                os.utime(self.path)
            except OSError:
                pass

    def release(self):
        """Stop the heartbeat and delete the claim if it is still this process's."""
        self._stop.set()
        try:
            if self._mine():
                self.path.unlink()
        except OSError:
            pass


def where_computed(device: str = "cpu") -> dict:
    """A record's ``meta`` (not its key: a published store is read anywhere): ``kernel``, torch's
    CPU kernel path (``$ATEN_CPU_CAPABILITY``) or the CUDA device, ``cpu``, and
    ``MKL_ENABLE_INSTRUCTIONS`` if set."""
    import torch
    p = pathlib.Path("/proc/cpuinfo")
    cpu = [ln.split(":", 1)[1].strip() for ln in (p.read_text().splitlines() if p.is_file()
                                                  else ()) if ln.startswith("model name")]
    cuda = str(device).startswith("cuda") and torch.cuda.is_available()
    return {"kernel": "CUDA " + torch.cuda.get_device_name(torch.device(device)) if cuda
            else torch.backends.cpu.get_cpu_capability(), "cpu": (cpu or [os.uname().machine])[0],
            **{k: os.environ[k] for k in ("MKL_ENABLE_INSTRUCTIONS",) if os.environ.get(k)}}

@dataclass(frozen=True)
class Claimed:
    """What :func:`~sensbook.runtime.sweep._attempt` returns when another live runner holds
    the configuration: who (:meth:`Claim.describe`)."""

    owner: str


@dataclass
class Store:
    """One JSON file per finished configuration, under ``root/<sweep name>/``.

    A stored record holds ``version``, ``key``, ``config``, ``result``, ``meta`` and the
    ``sha256`` of the first four, and is standard JSON (no NaN or Infinity). A file at a result's
    path that is not such a record (unreadable, not JSON, null, a list, a directory, no
    result, a failed checksum) is named in a warning, moved aside to ``<name>.bad-<time>`` and
    read as missing, so its configuration is computed again.
    """

    root: pathlib.Path
    name: str
    version: str = field(default_factory=version)

    def __post_init__(self):
        self.root = pathlib.Path(self.root)
        if not isinstance(self.name, str) or not self.name or any(c in self.name for c in "/\\") \
                or self.name.startswith("."):
            raise ValueError(f"name must be a plain folder name, got {self.name!r}")

    @property
    def folder(self) -> pathlib.Path:
        return self.root / self.name

    def path(self, config) -> pathlib.Path:
        return self.folder / f"{key(config, self.version)}.json"

    def claim_path(self, config) -> pathlib.Path:
        return self.folder / f"{key(config, self.version)}.claim"

    def _set_aside(self, p: pathlib.Path, problem: str):
        aside = p.with_name(f"{p.name}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}")
        try:
            os.replace(p, aside)
            where = f"moved aside to {aside.name}"
        except FileNotFoundError:
            return                                              # another reader moved it
        except OSError as e:
            where = f"could not be moved aside ({e})"
        warnings.warn(f"stored result {p} {problem}; {where}; its configuration will be computed "
                      "again", stacklevel=3)

    def record(self, config):
        """The whole stored record (``config``, ``result``, ``meta``: device, seconds, ...) of
        exactly this configuration and version, else None (a malformed file is moved aside).
        Only a regular file inside the store, of at most ``MAX_RECORD_BYTES``, is read: a
        FIFO, a device or a link out of the store at a record's path is moved aside unread."""
        p = self.path(config)
        if not os.path.lexists(p):
            return None
        try:
            rec = parse_record(read_regular(p, MAX_RECORD_BYTES, inside=self.root))
            problem = check_record(rec, self.version, p.stem, config)
        except UnsafeFile as e:
            problem = str(e)
        except OSError as e:
            problem = f"is unreadable ({type(e).__name__}: {e})"
        except ValueError as e:
            problem = str(e)
        if problem is not None:
            self._set_aside(p, problem)
            return None
        return rec

    def load(self, config):
        """The stored result of exactly this configuration and version, else None."""
        rec = self.record(config)
        return None if rec is None else rec["result"]

    def done(self, config) -> bool:
        return self.load(config) is not None

    def check_writable(self):
        """Before computing anything: the folder can be created and written (a probe file is
        written, fsynced and deleted) and has at least ``MIN_FREE_BYTES`` free."""
        for d in (self.folder, *self.folder.parents):       # the nearest path that exists
            if os.path.lexists(d):
                if not d.is_dir():
                    raise OSError(f"the results folder {self.folder} is not writable: {d} is "
                                  "a file, not a folder; nothing was computed")
                break
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".probe.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w") as fh:
                    fh.write("probe")
                    fh.flush()
                    os.fsync(fh.fileno())
            finally:
                pathlib.Path(tmp).unlink(missing_ok=True)
            free = shutil.disk_usage(self.folder).free
        except OSError as e:
            raise OSError(f"the results folder {self.folder} is not writable ({e}); nothing was "
                          "computed") from None
        if free < MIN_FREE_BYTES:
            raise OSError(f"the results folder {self.folder} is full ({free} bytes free); nothing "
                          "was computed")

    def clean_tmp(self, older_than: float | None = None) -> list:
        """Delete leftover temporary files (``.*.tmp``, from a write a kill interrupted) older
        than ``older_than`` seconds (default ``TMP_STALE``); returns their names."""
        age = TMP_STALE if older_than is None else older_than
        gone = []
        for t in self.folder.glob(".*.tmp"):
            try:
                if time.time() - t.stat().st_mtime > age:
                    t.unlink()
                    gone.append(t.name)
            except OSError:
                pass
        return gone

    def save(self, config, result, meta: dict | None = None) -> pathlib.Path:
        """Write atomically: temp file in the same folder, fsync, then ``os.replace``.
        ``meta`` (device, seconds, ...) is stored beside the result, with a checksum, and
        where it was computed (:func:`where_computed`). The
        result must be standard JSON (no NaN or Infinity: encode them, e.g. as None)."""
        if result is None:
            raise ValueError(f"{self.name}: the result of config {canonical(config)} is None; a "
                             "runner must return a JSON-able result (None reads as missing)")
        p = self.path(config)
        p.parent.mkdir(parents=True, exist_ok=True)
        meta = dict(meta or {})
        rec = {"version": self.version, "key": p.stem, "config": config, "result": result,
               "meta": {**where_computed(str(meta.get("device", "cpu"))), **meta}}
        try:
            rec["sha256"] = _checksum(rec)
            text = json.dumps(rec, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{self.name}: the result of config {canonical(config)} is not "
                             f"standard JSON ({e}); return lists, dicts, str, int, finite floats, "
                             "and encode NaN/inf, e.g. as None or strings") from None
        return self._write(p, text)

    def put(self, rec: dict, **meta) -> pathlib.Path:
        """Store a record checked elsewhere (a published one, or one computed in another
        store) as it is, with ``meta`` added: never re-signed, so its checksum still proves
        what was computed. ValueError when it is not the record of its configuration here."""
        config = rec.get("config") if isinstance(rec, dict) else None
        p = self.path(config)
        problem = check_record(rec, self.version, p.stem, config)
        if problem is not None:
            raise ValueError(f"{self.name}: the record {problem}")
        rec = dict(rec, meta=dict(rec["meta"], **meta))
        return self._write(p, json.dumps(rec, sort_keys=True, allow_nan=False))

    def _write(self, p: pathlib.Path, text: str) -> pathlib.Path:
        return write_atomic(p, text)

    def release_claims(self, pids) -> list:
        """Delete the claims that processes ``pids`` of this host hold in this store (what an
        interrupted pool's killed workers leave); returns their names."""
        pids, gone = {int(p) for p in pids}, []
        for c in self.folder.glob("*.claim"):
            info = Claim.info(c)
            if info and info[0].get("host") == socket.gethostname() and info[0].get("pid") in pids:
                try:
                    c.unlink()
                    gone.append(c.name)
                except OSError:
                    pass
        return gone


