"""The API reference (book/api.md) is complete and renders as written.

Every object the page documents with ``autofunction`` / ``autoclass`` (and the members it
lists) or ``automodule`` is read the way the site reads it: its docstring through napoleon's
numpy parser, then docutils. Checked, naming the object and the parameter:

* every parameter of ``inspect.signature`` (a class's constructor: its dataclass fields or
  ``__init__``) has an entry with a description, and no entry names a parameter the
  signature does not have;
* no broken emphasis: an unescaped ``*`` outside code (``(*pop, B)``) opens italics that run
  to the next ``*``; emphasis is allowed only on a few plain words (*censored*);
* no caret math in running text (``2^N``): math is a ``:math:`` role or ``code``; no control
  characters (``\\theta`` in a docstring that is not raw arrives as a tab and "heta").
"""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
from docutils import nodes, utils
from docutils.core import publish_doctree
from docutils.parsers.rst import roles
from sphinx.ext.napoleon import Config
from sphinx.ext.napoleon.docstring import NumpyDocstring

API = Path(__file__).resolve().parents[1] / "book" / "api.md"
SPHINX_ROLES = ("func", "class", "meth", "mod", "data", "attr", "obj", "exc", "doc", "ref",
                "py:func", "py:class", "py:meth", "py:mod", "py:data", "py:attr", "cite",
                "cite:p", "cite:t")


def documented():
    """(name, members) for each autofunction / autoclass / automodule in api.md's eval-rst
    blocks."""
    out, current = [], None
    for block in re.findall(r"```\{eval-rst\}\n(.*?)```", API.read_text(), re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"\.\. auto(function|class|module):: (\S+)", line)
            if m:
                current = [m.group(2), []]
                out.append(current)
                continue
            m = re.match(r"\s+:members:(.*)", line)
            if m and current is not None:
                text = m.group(1)
                for more in lines[i + 1:]:          # continuation lines, indented deeper
                    if not re.match(r"\s{4,}\S", more) or more.strip().startswith(":"):
                        break
                    text += more
                current[1] += [w.strip() for w in text.split(",") if w.strip()]
    return [(name, tuple(members)) for name, members in out]


def resolve(name):
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def targets():
    """(label, object, kind) for every documented object and listed member."""
    out = []
    for name, members in documented():
        obj = resolve(name)
        out.append((name, obj, "class" if inspect.isclass(obj) else
                    "module" if inspect.ismodule(obj) else "function"))
        for m in members:
            raw = inspect.getattr_static(obj, m)
            kind = ("property" if isinstance(raw, property) else
                    "bound" if isinstance(raw, (classmethod, staticmethod)) else "method")
            out.append((f"{name}.{m}", getattr(obj, m), kind))
    return out


def napoleon(doc):
    cfg = Config(napoleon_use_param=True, napoleon_use_ivar=True, napoleon_use_rtype=True)
    return str(NumpyDocstring(doc, cfg))


def entries(rst):
    """{name: description} of the :param: and :ivar: fields napoleon made."""
    out, name = {}, None
    for line in rst.splitlines():
        m = re.match(r":(param|ivar) ([^:]+):(.*)", line)
        if m:
            name = m.group(2).replace("\\", "").lstrip("*").strip()
            out[name] = m.group(3).strip()
        elif name and line.startswith(" ") and line.strip():
            out[name] = (out[name] + " " + line.strip()).strip()
        else:
            name = None
    return out


def parameters(obj, kind):
    if kind in ("property", "module"):
        return []
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    params = list(sig.parameters.values())
    if kind == "method" and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [p.name for p in params]


def _literal_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    return [nodes.literal(rawtext, utils.unescape(text))], []


for _r in SPHINX_ROLES:
    roles.register_local_role(_r, _literal_role)

CODE = (nodes.literal, nodes.literal_block, nodes.math, nodes.math_block, nodes.doctest_block,
        nodes.system_message)


def rendering_problems(rst):
    """Emphasis, inline-markup warnings and caret math in what docutils makes of rst."""
    tree = publish_doctree(rst, settings_overrides={"report_level": 5, "halt_level": 5,
                                                    "warning_stream": False})
    out = []
    for node in tree.findall(lambda n: isinstance(n, (nodes.emphasis, nodes.strong))):
        if not re.fullmatch(r"[A-Za-z][A-Za-z'\- ]{0,38}", node.astext().replace("\n", " ")):
            out.append(f"renders as emphasis: {node.astext()[:60]!r}")
    for msg in tree.findall(nodes.system_message):
        if msg["level"] >= 2 and "nline" in msg.astext():
            out.append(f"inline markup: {msg.astext()[:80]!r}")
    for text in tree.findall(nodes.Text):
        p = text.parent
        while p is not None and not isinstance(p, CODE):
            p = p.parent
        if p is None and (m := re.search(r"\S*\w\^[\w({-]\S*", text.astext())):
            out.append(f"caret math in text: {m.group(0)!r}")
    return out


def docstring_problems(doc):
    """rendering_problems of the docstring, and control characters: LaTeX in a docstring that
    is not raw (\\theta, \\beta, \\varepsilon arrive as a tab, a backspace, a vertical tab)."""
    return rendering_problems(napoleon(doc)) + [
        f"control character {c!r}: a LaTeX command in a docstring that is not r-prefixed?"
        for c in sorted(set(re.findall(r"[\x00-\x09\x0b-\x1f]", doc)))]


TARGETS = targets()


def test_api_page_lists_objects():
    """The parser sees the page: a sample of what it documents."""
    labels = {label for label, _, _ in TARGETS}
    assert {"sensbook.sensitivity_profile", "sensbook.Profile.save",
            "sensbook.Recognizer.random", "sensbook.run_experiment"} <= labels
    assert len(TARGETS) > 80


@pytest.mark.parametrize("label,obj,kind", TARGETS, ids=[t[0] for t in TARGETS])
def test_every_parameter_is_described(label, obj, kind):
    doc = inspect.getdoc(obj) or ""
    assert doc.strip(), f"{label} has no docstring"
    have = entries(napoleon(doc))
    problems = [f"{label}: parameter {p!r} has no description" for p in parameters(obj, kind)
                if not have.get(p)]
    params = parameters(obj, kind)
    if kind != "class":          # a class may also describe attributes beyond its constructor
        problems += [f"{label}: documents {n!r}, which is not a parameter" for n in have
                     if n not in params]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("label,obj,kind", TARGETS, ids=[t[0] for t in TARGETS])
def test_docstring_renders_without_broken_markup(label, obj, kind):
    problems = docstring_problems(inspect.getdoc(obj) or "")
    assert not problems, f"{label}:\n" + "\n".join(problems)


def test_checks_catch_what_they_claim():
    """The checks themselves: a missing description, a stray star, caret math and LaTeX in a
    string that is not raw are found; the same text written correctly passes."""
    head = "Sum.\n\nParameters\n----------\n"
    bad = head + "x : int\ny : torch.Tensor\n    of shape (*pop, B) and (*pop, N), 2^N entries\n"
    good = ("Sum, *censored*.\n\nParameters\n----------\nx : int\n    the count\n"
            "y : torch.Tensor\n    of shape ``(*pop, B)``, :math:`2^N` entries\n")
    assert entries(napoleon(bad)) == {"x": "", "y": "of shape (*pop, B) and (*pop, N), 2^N entries"}
    problems = rendering_problems(napoleon(bad))
    assert any("emphasis" in p for p in problems) and any("caret" in p for p in problems)
    assert all(entries(napoleon(good)).values())
    assert rendering_problems(napoleon(good)) == []
    assert docstring_problems(good) == []
    not_raw = "An angle :math:`\theta`."               # \t: a tab, as in a docstring not raw
    assert any("control" in p for p in docstring_problems(not_raw))
