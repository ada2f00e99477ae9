"""The book's structure: paired notebooks, the Colab install cell, the table of contents."""
import pathlib
import re

import jupytext
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = sorted(p for p in BOOK.glob("*.md") if "jupytext" in p.read_text()[:500])
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())


def code(nb):
    return [c.source.strip() for c in nb.cells if c.cell_type == "code"]


def test_there_are_chapters():
    assert len(CHAPTERS) >= 2


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_paired_notebook_has_the_same_code(md):
    nb = md.with_suffix(".ipynb")
    assert nb.exists(), f"{nb.name} is missing: run `make sync`"
    assert code(jupytext.read(md)) == code(jupytext.read(nb)), f"{nb.name} drifted: run `make sync`"
    assert all(not c.get("outputs") for c in jupytext.read(nb).cells if c.cell_type == "code"), \
        f"{nb.name} is committed with outputs"


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_first_cell_installs_sensbook_from_the_configured_repository(md):
    first = code(jupytext.read(md))[0]
    url = CONFIG["repository"]["url"].rstrip("/")
    branch = CONFIG["repository"]["branch"]
    assert "import sensbook" in first and "except ImportError" in first
    installs = re.findall(r"%pip install[^\n]*", first)
    assert installs == [f'%pip install -q "sensbook @ git+{url}@{branch}"'], installs


@pytest.mark.parametrize("md", CHAPTERS, ids=lambda p: p.name)
def test_chapter_prints_its_scale_and_asserts_claims(md):
    nb = jupytext.read(md)
    src = "\n".join(code(nb))
    assert "sb.banner()" in src, "every chapter prints the scale it ran at"
    hidden = [c for c in nb.cells if c.cell_type == "code" and "remove-cell" in c.metadata.get("tags", [])]
    assert any("assert" in c.source for c in hidden), "claims are asserted in remove-cell cells"


def test_every_chapter_is_in_the_toc_and_every_toc_entry_exists():
    files = {TOC["root"]} | {c["file"] for c in TOC["chapters"]}
    for f in files:
        assert (ROOT / f"{f}.md").exists(), f
    for md in CHAPTERS:
        assert f"book/{md.stem}" in files, f"{md.name} is not in _toc.yml"
