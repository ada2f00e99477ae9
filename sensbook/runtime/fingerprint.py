"""The version part of a result's key: the package version plus a fingerprint of the source
that computes the result (:func:`version`), the runner's module and the closure of its imports
inside the package (:func:`fingerprinted_files`). Used by :mod:`sensbook.runtime.store`."""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import pathlib

from ..settings import VERSION

#: The largest source file read (a module is far smaller; a larger one is refused).
MAX_SOURCE_BYTES = 16 << 20


def _source(path: pathlib.Path) -> bytes:
    """The bytes of a module: a regular file (or a link to one; :func:`fingerprinted_files`
    lists only those) of at most :data:`MAX_SOURCE_BYTES`."""
    if not path.is_file() or path.stat().st_size > MAX_SOURCE_BYTES:
        raise ValueError(f"{path} is not a regular file of at most {MAX_SOURCE_BYTES} bytes")
    return path.read_bytes()


_PACKAGE = pathlib.Path(__file__).resolve().parents[1]
# Top-level modules that compute nothing a result depends on (the public names, the command
# line, how pages look); every other top-level module (the instruments and settings) is part
# of every key.
_NOT_FINGERPRINTED = ("__init__.py", "cli.py", "pages.py")


def _imports(path: pathlib.Path) -> set:
    """The files of this package that ``path`` imports (any ``import``/``from`` statement in
    it, at any depth, relative or absolute): a module is its file, a package its
    ``__init__.py``; names imported from a package that are its submodules are those files."""
    def resolve(parts):                       # ("experiments", "ch6") -> file or None
        base = _PACKAGE.joinpath(*parts)
        for f in (base.with_suffix(".py"), base / "__init__.py"):
            if parts and f.is_file():
                return f
        return _PACKAGE / "__init__.py" if not parts else None

    here = list(path.relative_to(_PACKAGE).parent.parts)
    found = set()
    for node in ast.walk(ast.parse(_source(path))):
        if isinstance(node, ast.Import):
            mods = [a.name.split(".")[1:] for a in node.names
                    if a.name.split(".")[0] == _PACKAGE.name]
            found |= {resolve(m) for m in mods}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(here):
                    continue
                base = here[:len(here) - (node.level - 1)]
                mod = node.module
            elif (node.module or "").split(".")[0] == _PACKAGE.name:
                base, mod = [], ".".join(node.module.split(".")[1:])
            else:
                continue
            parts = base + (mod.split(".") if mod else [])
            found.add(resolve(parts))
            for a in node.names:              # `from . import ch6_training`: a submodule
                sub = resolve(parts + [a.name])
                if sub is not None and sub != _PACKAGE / "__init__.py":
                    found.add(sub)
    return {f for f in found if f is not None}


def _computes(f: pathlib.Path) -> bool:
    """Whether a source file is part of a key: a module of the package that is not the runtime
    (which stores and schedules) nor one of ``_NOT_FINGERPRINTED``."""
    rel = f.relative_to(_PACKAGE)
    return (f.suffix == ".py" and f.stem.isidentifier() and rel.parts[0] != "runtime"
            and not (len(rel.parts) == 1 and rel.name in _NOT_FINGERPRINTED))


def fingerprinted_files(runner: str | None = None) -> list:
    """The source files whose content is part of the key of ``runner``'s results (sorted).

    For a ``runner`` (``"package.module:function"``) inside the package: its module, its
    package's ``__init__.py`` and every module of the package they import, directly or through
    each other (the closure of their import statements), leaving out the runtime and
    ``_NOT_FINGERPRINTED``. So ``experiments/ch6_training.py``'s key holds ``train.py`` and
    ``model.py`` but not ``zonotope.py``, which it never imports: editing a certificate
    recomputes chapter 5's certificates only. Without a runner, or for one outside the package,
    every top-level module (the instruments and settings).

    Only importable modules count: a name that is a Python identifier (an editor's lock file
    ``.#model.py``, often a dangling symlink, or a backup ``model copy.py`` is no module and
    computes nothing) that is a regular file (or a link to one)."""
    everything = {p for p in _PACKAGE.glob("*.py") if _computes(p)}
    spec = importlib.util.find_spec(runner.split(":", 1)[0]) if runner is not None else None
    origin = pathlib.Path(spec.origin).resolve() if spec and spec.origin else None
    if origin is None or _PACKAGE not in origin.parents or origin.parent == _PACKAGE:
        files = everything
    else:
        files, todo = set(), [origin, origin.parent / "__init__.py"]
        while todo:
            f = todo.pop()
            if f in files or not f.is_file() or not _computes(f):
                continue
            files.add(f)
            todo.extend(_imports(f))
    return sorted(f for f in files if f.is_file())


def version(runner: str | None = None) -> str:
    """The package version plus a fingerprint of the code that computes ``runner``'s results
    (:func:`fingerprinted_files`; without a runner, of the instruments only)."""
    h = hashlib.sha256()
    for path in fingerprinted_files(runner):
        h.update(path.relative_to(_PACKAGE).as_posix().encode())
        h.update(_source(path))
    return f"{VERSION}+{h.hexdigest()[:10]}"
