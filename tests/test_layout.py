"""The package's folders are its architecture (README, "How the code is organised"): read from
the source, every import (function-level ones included) keeps the rules, and none forms a
cycle."""
import ast
import pathlib
import re

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1] / "sensbook"
BOOK = PKG.parent / "book"


def module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}


def imports(path: pathlib.Path) -> set:
    """The sensbook modules that ``path`` imports anywhere in its body (resolved)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # "from . import x" may name a submodule x
            names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod
                     for a in node.names]
        else:
            continue
        out |= {n for n in names if n in MODULES and n != me}
    return out


GRAPH = {m: imports(p) for m, p in MODULES.items()}


def kind(m: str) -> str:
    if m == "sensbook":
        return "api"
    if m == "sensbook.settings":
        return "settings"
    if m == "sensbook.cli":
        return "cli"
    if m.startswith("sensbook.experiments"):
        return "experiments"
    if m.startswith("sensbook.runtime"):
        return "runtime"
    return "instrument"


ALLOWED = {"settings": set(), "instrument": {"instrument", "settings"},
           "runtime": {"runtime", "settings"},
           "experiments": {"experiments", "instrument", "runtime", "settings"},
           "cli": {"experiments", "instrument", "runtime", "settings"},
           "api": {"api", "instrument", "experiments", "runtime", "settings"}}


def test_the_tree_is_the_architecture():
    assert {"sensbook.settings", "sensbook.experiments", "sensbook.runtime",
            "sensbook.runtime.store", "sensbook.runtime.sweep", "sensbook.cli"} <= set(MODULES)
    assert [m for m in MODULES if m.startswith("sensbook.experiments.ch")]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_keep_the_rules(module):
    bad = {m for m in GRAPH[module] if kind(m) not in ALLOWED[kind(module)]}
    assert not bad, f"{module} ({kind(module)}) imports {sorted(bad)}"


def test_no_import_cycle():
    """A depth-first search over every import, function-level ones included (the package's
    ``__init__`` re-exports everything and is imported by nobody inside the package)."""
    assert not any("sensbook" in deps for deps in GRAPH.values())
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for d in GRAPH[m]:
            if state.get(d) == "open":
                pytest.fail(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = "done"

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_experiments_are_registered_only_in_the_experiments_folder():
    for m, p in MODULES.items():
        if kind(m) != "experiments" and re.search(r"\bregister\(\s*Experiment\(", p.read_text()):
            pytest.fail(f"{m} registers an experiment outside sensbook/experiments/")


def test_no_module_is_much_over_600_lines():
    """Instruments and runtime modules stay under 650 lines. A chapter's experiments file holds
    that chapter's runners and its analysis, one file a chapter, and may reach 800."""
    limit = lambda m: 800 if kind(m) == "experiments" else 650
    long = {m: n for m, p in MODULES.items()
            if (n := len(p.read_text().splitlines())) > limit(m)}
    assert not long, long


@pytest.mark.parametrize("chapter", sorted(BOOK.glob("ch*.md")), ids=lambda p: p.name)
def test_chapters_import_sensbook_and_at_most_their_own_experiments(chapter):
    own = re.match(r"(ch\d+)", chapter.name).group(1)
    text = chapter.read_text()
    found = set(re.findall(r"^\s*(?:from|import) (sensbook[\w.]*)", text, re.M))
    for names in re.findall(r"^\s*from sensbook\.experiments import ([\w ,]+)", text, re.M):
        found |= {f"sensbook.experiments.{n.split()[0]}" for n in names.split(",")}
    # a chapter's own module: chN.py, or one per notebook of the chapter (ch6_training.py)
    mine = {m for m in MODULES if re.fullmatch(rf"sensbook\.experiments\.{own}(_\w+)?", m)}
    allowed = {"sensbook", "sensbook.experiments"} | mine
    assert found <= allowed | {"sensbook.controls"}, sorted(found - allowed)
