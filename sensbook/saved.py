"""Saved profiles on disk (:meth:`sensbook.Profile.save` / :meth:`sensbook.Profile.load`):
the checks a saved dict passes before it becomes a profile (every field, and a checksum of the
counts, as the store's records have), and a write that never replaces what is not a regular
file and never exposes a partly written one (a temporary file of a unique name in the target's
folder, renamed over it, removed on every error)."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile

import numpy as np
import torch


def check_saved(d, fmt: str, fields) -> tuple:
    """``(N, exact, n_strings, meta, {field: int64 tensor})`` of a saved profile's dict, or a
    ValueError naming the field that is wrong (see :meth:`sensbook.Profile.from_dict`)."""
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise ValueError(f"not a saved profile: expected a dict with format={fmt!r}, got "
                         f"{d.get('format') if isinstance(d, dict) else type(d).__name__!r}")
    missing = [k for k in ("N", "exact", "n_strings", *fields) if k not in d]
    if missing:
        raise ValueError(f"the saved profile lacks {missing}")
    for k in ("N", "n_strings"):
        if isinstance(d[k], bool) or not isinstance(d[k], int) or d[k] < 1:
            raise ValueError(f"the saved profile's {k} must be an integer >= 1, got {d[k]!r}")
    N, n = d["N"], d["n_strings"]
    if not isinstance(d["exact"], bool):
        raise ValueError(f"the saved profile's exact must be true or false, got {d['exact']!r}")
    if d["exact"] and (N > 62 or n != 2**N):
        raise ValueError(f"the saved profile's n_strings={n} is not 2^N (N={N}) for an "
                         "exact profile")
    meta = d.get("meta", {})
    if not isinstance(meta, dict):
        raise ValueError(f"the saved profile's meta must be a dict, got {type(meta).__name__}")
    t = {k: _counts(d[k], k) for k in fields}
    pop = t["counts"].shape[:-1]
    if t["counts"].dim() < 1 or t["counts"].shape[-1] != N + 1:
        raise ValueError(f"the saved counts have shape {tuple(t['counts'].shape)}: N + 1 = "
                         f"{N + 1} entries a model expected")
    for k in fields[1:]:
        if t[k].shape != pop:
            raise ValueError(f"the saved {k} has shape {tuple(t[k].shape)}, not the counts' "
                             f"population shape {tuple(pop)}")
    total = t["counts"].sum(-1) + t["undecided"] + t["nonfinite"] + t["incomplete"]
    if bool((total != n).any()):
        raise ValueError(f"the saved counts, undecided, nonfinite and incomplete sum to "
                         f"{total.flatten()[:5].tolist()} strings, not n_strings={n}")
    if bool((t["accepted"] > n - t["undecided"] - t["nonfinite"]).any()):
        raise ValueError(f"the saved accepted {t['accepted'].flatten()[:5].tolist()} exceeds "
                         "the decided strings")
    if "checksum" in d and d["checksum"] != checksum(d, fields):
        raise ValueError("the saved profile's checksum does not match its counts: the file "
                         "was edited or damaged")
    return N, d["exact"], n, dict(meta), t


def checksum(d: dict, fields) -> str:
    """sha256 of a saved profile's format, N, exact, n_strings and count ``fields`` (not its
    meta), as canonical JSON."""
    body = {k: d[k] for k in ("format", "N", "exact", "n_strings", *fields)}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def _counts(value, field) -> torch.Tensor:
    """A saved count field: (nested lists of) integers >= 0, as an int64 tensor."""
    try:
        a = np.asarray(value)
    except ValueError:
        a = np.asarray(None)
    if a.dtype.kind not in "iu" or (a.size and int(a.min()) < 0):
        raise ValueError(f"the saved {field} must be (lists of) integers >= 0, got "
                         f"{str(value)[:60]}")
    return torch.from_numpy(a.astype(np.int64))


def check_writable(path) -> str:
    """``path`` as a string if a profile can be written there: its folder exists, is writable,
    and the path is absent or a regular file (a symbolic link: the file it names); else an
    error naming the path.

    Parameters
    ----------
    path : str or os.PathLike
        Where :meth:`Profile.save` will write.

    Returns
    -------
    str
    """
    path = os.path.realpath(os.fspath(path))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        what = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise ValueError(f"{path} is {what}: a profile is saved only to a new or a regular file")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot save to {path}: no folder {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot save to {path}: the folder {folder} is not writable")
    return path


def write_atomic(path, text: str) -> None:
    """Write ``text`` to ``path`` (checked by :func:`check_writable`) through a temporary file of
    a unique name in its folder, fsynced, then renamed over it; the temporary file is removed
    on every error (Ctrl-C included), so concurrent writers never expose a damaged file."""
    path = check_writable(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".",
                               prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)                      # as open() would create it
        check_writable(path)                              # still nothing but a regular file
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
