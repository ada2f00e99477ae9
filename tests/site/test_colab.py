"""The committed notebooks as a notebook front end shows them (what "Open in Colab" opens).

Each committed book/ch*.ipynb is rendered the way Jupyter does, with nbconvert's `lab` HTML
template and no Sphinx, after two steps a front end would take: the outputs are those of the
book build (Jupyter Book's executed copy of the chapter in _build/jupyter_execute/, matched code
cell by code cell: what the reader sees after running it; without it the cells stay empty), and
Colab's form cells (`cellView: form`) show their `# @title` with the code folded away in a
closed <details>, as Colab does. The page is opened in headless Chromium, offline, and must show
no MyST role or directive text ({cite, {doc, {glue, ...), no nbval marker, no raw pipe-table text
and no assert statement (hidden checks are folded), every form's title, and under each figure
its caption (and, with outputs, the figure itself). Screenshots go beside the page screenshots:
_build/site-test/screenshots/colab__<chapter>.png (the HTML beside them in ../colab/).
"""
from __future__ import annotations

import copy
import html
import re
from urllib.parse import urlsplit

import nbformat
import pytest

from .conftest import HTML, ROOT, SHOTS, VISIBLE_PROSE_JS, raw_tables

NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))   # the chapters and the introduction
EXECUTED = HTML.parent / "jupyter_execute" / "book"
RAW_MYST = re.compile(r"\{(?:cite|doc|glue|ref|numref|eq|math|term|download)[\w:-]*\}|```\{|:::\{|NBVAL_")
MATHJAX = "window.MathJax = {tex: {inlineMath: [['$', '$'], ['\\\\(', '\\\\)']]}};"


def _strip_markers(source: str) -> str:
    return re.sub(r"^[ \t]*# *NBVAL_[A-Z_]+[ \t]*\n?", "", source, flags=re.M).strip()


def with_outputs(nb, executed) -> list[str]:
    """Copy the outputs of the executed chapter into nb, code cell by code cell (the generator
    keeps code cells one-to-one). Returns the mismatches (a stale notebook or build)."""
    mine = [c for c in nb.cells if c.cell_type == "code"]
    theirs = [c for c in executed.cells if c.cell_type == "code"]
    if len(mine) != len(theirs):
        return [f"{len(mine)} code cells in the notebook, {len(theirs)} in the build"]
    problems = []
    for i, (a, b) in enumerate(zip(mine, theirs)):
        body = re.sub(r"\A# @title [^\n]*\n", "", a.source).strip()
        if i > 0 and body != _strip_markers(b.source):
            problems.append(f"code cell {i} differs from the built chapter's")
        a.outputs = b.get("outputs", [])
        a.execution_count = b.get("execution_count")
    return problems


def colab_view(nb):
    """Colab's rendering of form cells: the title, the code in a closed <details> (one click).
    Returns nb with a placeholder raw cell before each form cell, and the HTML for each."""
    cells, folds = [], {}
    for c in nb.cells:
        if c.cell_type == "code" and c.metadata.get("cellView") == "form":
            title, _, code = c.source.partition("\n")
            key = f"@@colab-form-{len(folds)}@@"
            folds[key] = (f'<details class="colab-form"><summary><b>'
                          f'{html.escape(title.removeprefix("# @title "))}</b> (show code)</summary>'
                          f'<pre>{html.escape(code)}</pre></details>')
            cells.append(nbformat.v4.new_raw_cell(key, metadata={"raw_mimetype": "text/html"}))
            c.metadata["transient"] = {"remove_source": True}
        cells.append(c)
    nb.cells = cells
    return nb, folds


@pytest.fixture(scope="module")
def exporter(base_url):
    from nbconvert import HTMLExporter
    return HTMLExporter(template_name="lab", mathjax_url=base_url + "_static/mathjax/tex-mml-chtml.js")


def test_there_are_committed_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_as_a_front_end_shows_it(ipynb, browser, base_url, exporter):
    nb = nbformat.read(ipynb, as_version=4)
    problems = []
    executed = EXECUTED / ipynb.name
    if executed.exists():
        problems += with_outputs(nb, nbformat.read(executed, as_version=4))
    forms = [c.source.partition("\n")[0].removeprefix("# @title ") for c in nb.cells
             if c.cell_type == "code" and c.metadata.get("cellView") == "form"]
    figures = [(c.id, nb.cells[i + 1]) for i, c in enumerate(nb.cells)
               if c.cell_type == "code" and "figure" in c.metadata.get("mystnb", {})]
    view, folds = colab_view(copy.deepcopy(nb))
    body, _ = exporter.from_notebook_node(view)
    for key, fold in folds.items():                 # nbconvert sanitises raw HTML cells
        assert body.count(key) == 1, key
        body = body.replace(key, fold)
    out = SHOTS.parent / "colab" / f"{ipynb.stem}.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body, encoding="utf-8")

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.route("**/*", lambda r: r.continue_() if urlsplit(r.request.url).scheme == "file"
               or urlsplit(r.request.url).hostname == "127.0.0.1" else r.abort())
    page.add_init_script(MATHJAX)
    try:
        page.goto(out.as_uri(), wait_until="networkidle")
        page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
        page.wait_for_timeout(300)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"colab__{ipynb.stem}.png"), full_page=True)

        visible = page.inner_text("body")
        problems += [f"raw MyST or nbval text visible: {m!r}" for m in sorted(set(RAW_MYST.findall(visible)))]
        asserts = [ln.strip() for ln in visible.splitlines() if re.match(r"\s*assert\b", ln)]
        problems += [f"assert code visible (not folded): {a[:80]!r}" for a in asserts[:5]]
        for title in forms:
            if title not in visible:
                problems.append(f"form title not shown: {title!r}")
        for fig_id, cap in figures:
            cell = page.locator(f'[id="cell-id={fig_id}"]')
            after = page.locator(f'[id="cell-id={fig_id}"] + [id="cell-id={cap.id}"]')
            if cap.cell_type != "markdown" or after.count() != 1:
                problems.append(f"figure cell {fig_id}: no caption cell right under it")
            elif not after.inner_text().strip().startswith("Fig."):
                problems.append(f"figure cell {fig_id}: the cell under it is not its caption")
            if executed.exists() and not cell.locator("img").evaluate_all(
                    "is => is.some(i => i.complete && i.naturalWidth > 0)"):
                problems.append(f"figure cell {fig_id}: no figure rendered")
        prose = page.evaluate(VISIBLE_PROSE_JS, ".jp-CodeCell .jp-InputArea, code, mjx-container, script, style")
        problems += [f"raw pipe-table text: {t!r}" for t in raw_tables(prose)]
        assert not problems, "\n".join([ipynb.name] + problems)
    finally:
        page.close()
