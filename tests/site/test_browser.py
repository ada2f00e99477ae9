"""The built book as a reader meets it, in headless Chromium with the network cut off.

For every HTML page: it loads with no failed local request, no request leaving 127.0.0.1 (the
site must be complete offline) and no console error; every image is present and non-empty,
and every figure of the source is on the page; where the source has math, every math element is
typeset by MathJax without errors; no code or output block is wider than its column at 1280 px;
the text of every figure is at least :data:`MIN_TEXT_PX` tall on the page (computed from the
book's figure style, the cell's explicit font sizes, the figure's pixel width and its displayed
width); every control on the page answers (moving it changes the figure or the text) or is
visibly disabled with a line saying where it is live, and no live-kernel widget is left on the
page, where it could not answer; every Colab link opens a committed .ipynb of this repository; no raw
pipe-table text (a Markdown table shown as text) is visible. At a phone's 390 px no page scrolls
sideways and every display equation too wide for the column scrolls in its own box, with a
visible hint. A full-page screenshot of each page goes to _build/site-test/screenshots/ (at
390 px to screenshots/phone/; the workflows upload them).
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

import jupytext
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

import sensbook.pages as pages

from .conftest import (CONFIG, HTML, SHOTS, VISIBLE_PROSE_JS, html_pages, prose_of, raw_tables, source_of,
                       toc_docnames, tracked_files)

PAGES = html_pages()
MATH = re.compile(r"\$[^$\n]+\$|\$\$|\{math\}|```\{math\}|\\\(|\\\[|\\begin\{")
HIDDEN = {"remove-cell", "remove-output", "skip-execution"}
EXPLORE = re.compile(r"\bsb\.explore\(")
#: The smallest text a figure may show at 1280 px (CSS pixels).
MIN_TEXT_PX = 9.0
FONTSIZE = re.compile(r"fontsize\s*=\s*([\d.]+)")

# Every code and output block (and the prose's code blocks) that is wider than its box.
OVERFLOW_JS = """() => [...document.querySelectorAll(
    'div.cell_input pre, div.cell_output pre, div.cell_output .output, div.highlight pre, div.cell_output table')]
  .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
  .map(e => [e.scrollWidth - e.clientWidth, (e.innerText || '').split('\\n')[0].slice(0, 80)])"""

# Per code cell on the page: its images' [displayed width, natural width].
CELL_IMAGES_JS = """() => [...document.querySelectorAll('div.cell')].map(c =>
  [...c.querySelectorAll('img')].filter(i => i.naturalWidth > 0)
    .map(i => [i.getBoundingClientRect().width, i.naturalWidth]))"""

# Every explorer: move each enabled control to another value and see the figure or text change.
EXPLORERS_JS = """() => [...document.querySelectorAll('.sensbook-explorer')].map(x => {
  const state = () => [...x.querySelectorAll('img')].map(i => i.src).join('|')
                      + (x.querySelector('pre.sx-text') || {}).textContent;
  const fields = [...x.querySelectorAll('[data-i]')];
  const moved = fields.map(f => {
    if (f.disabled) return 'disabled';
    const before = state(), old = f.value;
    const n = f.tagName === 'SELECT' ? f.options.length : (+f.max + 1);
    let changed = false;
    for (let v = 0; v < n && !changed; v++) {
      if (String(v) === old) continue;
      f.value = String(v); f.dispatchEvent(new Event('input')); f.dispatchEvent(new Event('change'));
      changed = state() !== before;
    }
    f.value = old; f.dispatchEvent(new Event('input'));
    return changed ? 'answers' : 'dead';
  });
  return {live: x.classList.contains('sx-live'), moved: moved,
          note: (x.querySelector('.sx-note') || {}).textContent || ''};
})"""


def figure_text_px(min_pt: float, displayed: float, natural: float) -> float:
    """CSS pixels of text of ``min_pt`` points in a figure of ``natural`` pixels (at the style's
    dpi) shown ``displayed`` pixels wide."""
    dpi = pages.STYLE["figure.dpi"]
    return min_pt * dpi / 72 * min(1.0, displayed / natural)


def test_site_is_built(site):
    assert PAGES, "no pages in _build/html"
    for doc in toc_docnames():
        assert f"{doc}.html" in PAGES, f"{doc} is in _toc.yml but was not built"


def _visit(browser, url: str, shot, width: int = 1280) -> dict:
    """Open url with every non-local request blocked; return what went wrong and the page."""
    page = browser.new_page(viewport={"width": width, "height": 900 if width > 600 else 844})
    seen = {"console": [], "failed": [], "external": [], "http": []}

    def route(r):
        host = urlsplit(r.request.url).hostname
        if r.request.url.startswith(("data:", "blob:")) or host in ("127.0.0.1", "localhost"):
            r.continue_()
        else:
            seen["external"].append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.on("console", lambda m: m.type == "error" and seen["console"].append(f"{m.text} @ {m.location}"))
    page.on("pageerror", lambda e: seen["console"].append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: urlsplit(r.url).hostname == "127.0.0.1"
            and seen["failed"].append(f"{r.url}: {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and seen["http"].append(f"{r.status} {r.url}"))
    page.goto(url, wait_until="networkidle")
    # MathJax typesets after load; the widget manager renders after load too.
    page.evaluate("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
    if page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count():
        try:
            page.wait_for_selector(".jupyter-widgets", state="attached", timeout=20_000)
        except PlaywrightTimeout:
            pass                                   # reported below: views embedded, none rendered
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    return page, seen


@pytest.mark.parametrize("rel", PAGES)
def test_page(rel, browser, base_url):
    src = source_of(rel)
    text = src.read_text() if src else ""
    nb = jupytext.read(src) if src and "jupytext" in text[:500] else None
    # Cells whose output the page shows (not removed, not skipped).
    shown_cells = [c for c in nb.cells if c.cell_type == "code" and not HIDDEN & set(c.metadata.get("tags", []))] \
        if nb else []
    code = "\n".join(c.source for c in shown_cells)
    page, seen = _visit(browser, base_url + rel, SHOTS / (rel[:-5].replace("/", "__") + ".png"))
    try:
        problems = []
        problems += [f"request left the machine: {u}" for u in seen["external"]]
        problems += [f"failed request: {u}" for u in seen["failed"]]
        problems += [f"HTTP {u}" for u in seen["http"]]
        problems += [f"console error: {m}" for m in seen["console"]]

        # Images: every <img> decoded with a non-zero size; every local one non-empty on disk.
        imgs = page.eval_on_selector_all(
            "img", "els => els.map(e => [e.currentSrc || e.src, e.complete, e.naturalWidth, e.naturalHeight])")
        for url, complete, w, h in imgs:
            if not (complete and w > 0 and h > 0):
                problems.append(f"image not rendered: {url} ({w}x{h})")
            parts = urlsplit(url)
            if parts.hostname == "127.0.0.1" and (HTML / parts.path.lstrip("/")).stat().st_size == 0:
                problems.append(f"empty image file: {url}")
        if nb is not None:
            figures = sum(1 for c in shown_cells if "figure" in c.metadata.get("mystnb", {}))
            shown = page.eval_on_selector_all(
                "figure", "fs => fs.filter(f => [...f.querySelectorAll('img')].some(i => i.naturalWidth > 0)).length")
            if shown < figures:
                problems.append(f"{figures} figures in the source, {shown} rendered figures on the page")

        # Math: where the prose has math, every math element is typeset, and without errors.
        if MATH.search(prose_of(text)):
            n_math = page.locator(".math").count()
            n_done = page.locator(".math mjx-container").count()
            typeset = page.eval_on_selector_all(".math", "ms => ms.filter(m => m.querySelector('mjx-container')).length")
            if n_math == 0 or typeset < n_math or n_done == 0:
                problems.append(f"math not rendered: {typeset} of {n_math} math elements typeset by MathJax")
            if page.locator("mjx-merror").count():
                problems.append(f"MathJax errors: {page.locator('mjx-merror').all_inner_texts()[:3]}")

        # Nothing scrolls sideways at 1280 px: code fits the column, printed lines wrap.
        wide = page.evaluate(OVERFLOW_JS)
        problems += [f"a block {d} px wider than its column: {t!r}" for d, t in wide]

        # Figure text is legible: the smallest text of each figure, at its displayed size.
        cells = page.evaluate(CELL_IMAGES_JS)
        if nb is not None and len(cells) == len(shown_cells):
            for cell, imgs in zip(shown_cells, cells):
                pts = [float(x) for x in FONTSIZE.findall(cell.source)]
                min_pt = min([pages.SMALLEST_PT, *pts])
                for displayed, natural in imgs:
                    px = figure_text_px(min_pt, displayed, natural)
                    if px < MIN_TEXT_PX:
                        problems.append(
                            f"figure text {px:.1f} px at 1280 px (a {natural} px figure shown "
                            f"{displayed:.0f} px wide, {min_pt:g} pt): {cell.source.splitlines()[0][:60]!r}")
        elif nb is not None:
            problems.append(f"{len(shown_cells)} code cells shown in the source, {len(cells)} on the page")

        # Controls: every explorer's control answers, or is disabled and says where it is live;
        # no kernel widget is left on the page (it would look live and not answer).
        explorers = page.evaluate(EXPLORERS_JS)
        calls = sum(len(EXPLORE.findall(c.source)) for c in shown_cells)
        if len(explorers) != calls:
            problems.append(f"{calls} explorers in the source, {len(explorers)} on the page")
        for x in explorers:
            if x["live"] and (set(x["moved"]) != {"disabled"} or "live" not in x["note"]):
                problems.append(f"a live-only explorer whose controls are not all disabled or "
                                f"that does not say where they are live: {x}")
            if not x["live"] and "answers" not in x["moved"] or "dead" in x["moved"]:
                problems.append(f"an explorer control that does not change the figure: {x}")
        dead = page.locator(".jupyter-widgets input, .jupyter-widgets select, .widget-slider").count()
        if dead:
            problems.append(f"{dead} kernel widget controls on the page (they cannot answer here)")

        # Colab links open a committed notebook of this repository.
        repo = urlsplit(CONFIG["repository"]["url"]).path.strip("/")
        prefix = f"/github/{repo}/blob/{CONFIG['repository']['branch']}/"
        tracked = tracked_files()
        colab = page.eval_on_selector_all("a[href*='colab.research.google.com']", "as => as.map(a => a.href)")
        for href in colab:
            path = urlsplit(href).path
            if not path.startswith(prefix) or not path.endswith(".ipynb"):
                problems.append(f"Colab link does not open an .ipynb of {repo}: {href}")
                continue
            target = path[len(prefix):]
            if tracked is not None and target not in tracked:
                problems.append(f"Colab link to {target}, which is not committed")
            elif not (HTML.parents[1] / target).exists():
                problems.append(f"Colab link to {target}, which does not exist")
        if nb is not None and not colab:
            problems.append("a notebook page without a Colab link")

        # Tables render as tables: no raw pipe-table text anywhere on the page (last: it edits the DOM).
        prose = page.evaluate(VISIBLE_PROSE_JS, ".cell_input, div[class*='highlight-']:not(.output), code, "
                                                 "mjx-container, .math, script, style")
        problems += [f"raw pipe-table text on the page: {t!r}" for t in raw_tables(prose)]

        assert not problems, "\n".join([rel] + problems)
    finally:
        page.close()


# At a phone's width: how far the page scrolls sideways, and each display equation wider than
# its box that does not scroll there or shows no sign of it (the edge shadows of sensbook.css).
PHONE_JS = """() => ({
  page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  widest: [...document.querySelectorAll('body *')].filter(e => e.offsetParent !== null)
    .map(e => [Math.round(e.getBoundingClientRect().right), e.tagName + '.' + String(e.className)
               + ' ' + (e.innerText || '').slice(0, 40)])
    .sort((a, b) => b[0] - a[0]).slice(0, 1),
  equations: [...document.querySelectorAll('div.math mjx-container')]
    .filter(m => m.scrollWidth > m.clientWidth + 1)
    .map(m => { const st = getComputedStyle(m);
                return [m.scrollWidth - m.clientWidth, st.overflowX, /gradient/.test(st.backgroundImage),
                        (m.innerText || '').replace(/\\s+/g, '').slice(0, 40)]; })
})"""
PHONE_PX = 390


@pytest.mark.parametrize("rel", PAGES)
def test_page_on_a_phone(rel, browser, base_url):
    """Issue 39: at 390 px no page scrolls sideways (the API page was 453 px wide, the general
    index 435, ch8 402), and a display equation too wide for the column scrolls in its own box
    with a visible sign that it does (they were clipped, with no hint, in ch1, ch2 and the
    introduction)."""
    page, seen = _visit(browser, base_url + rel, SHOTS / "phone" / (rel[:-5].replace("/", "__") + ".png"),
                        width=PHONE_PX)
    try:
        got = page.evaluate(PHONE_JS)
        problems = [f"console error: {m}" for m in seen["console"]]
        if got["page"] > 1:
            problems.append(f"the page scrolls sideways by {got['page']} px at {PHONE_PX} px; "
                            f"widest element: {got['widest']}")
        problems += [f"a display equation {d} px wider than its box with overflow-x {o}"
                     f"{'' if hint else ' and no scroll hint'}: {t!r}"
                     for d, o, hint, t in got["equations"] if o not in ("auto", "scroll") or not hint]
        assert not problems, "\n".join([rel] + problems)
    finally:
        page.close()


# The sidebar's table of contents: each entry's title and where its box ends on the first screen.
SIDEBAR_JS = """() => [...document.querySelectorAll('.bd-sidebar-primary nav.bd-docs-nav a')]
  .map(a => [a.innerText.trim(), Math.round(a.getBoundingClientRect().bottom)])"""
#: The most words a page title may have in the sidebar (issue 39: ch3's had 16).
TITLE_WORDS = 6


def title_words(title: str) -> int:
    """Words of a title: runs of non-space holding a letter or a digit ("ε = 0:" is two)."""
    return len(re.findall(r"\S*\w\S*", title))


def test_sidebar_fits_the_first_screen(browser, base_url, site):
    """Issue 39: at 1280 x 900 the last four entries of the sidebar fell below the fold. On the
    introduction's first screen every entry of the table of contents is in view, and no page's
    title is over TITLE_WORDS words."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(base_url + f"{toc_docnames()[0]}.html", wait_until="networkidle")
        entries = page.evaluate(SIDEBAR_JS)
    finally:
        page.close()
    assert len(entries) >= len(toc_docnames()), entries
    problems = [f"{t!r}: {title_words(t)} words" for t, _ in entries if title_words(t) > TITLE_WORDS]
    problems += [f"{t!r} ends at {b} px, below the first screen (900 px)" for t, b in entries if b > 900]
    assert not problems, "\n".join(problems)


def test_title_words():
    assert title_words("With ε = 0: danger zones") == 5
    assert title_words("Basins, K₀ and the parameter-function map") == 6
    assert title_words("With ε > 0 and a fixed margin, only constants survive once log N exceeds "
                       "the score range") == 17      # ch3's, before issue 39


def test_raw_table_detector():
    """The raw-table check itself (no site needed): Markdown tables shown as text are found,
    prose with absolute values and real tables (cells separated by tabs) are not."""
    assert raw_tables("| target | N | learned |\n|---|---|---|\n| PARITY | 9 | 0/4 |")
    assert raw_tables("| target | N | learned | |\u2014|\u2014|\u2014| | PARITY | 9 | 0/4 |")   # one paragraph
    assert raw_tables("see | a | b |\n| :---: | --- |")
    assert not raw_tables("the margin min|T| is below |x| for every x")
    assert not raw_tables("function\ts(f,x)\tprofile\nPARITY\tN for every x\tK_N = 2^N")
    assert not raw_tables("a || b and --- a dash")


def test_figure_text_size_arithmetic():
    """The legibility check itself (no site needed): ch1's old Fig. 1, a 14-inch strip of 9 pt
    text shown in a 700 px column, lands at about 6 px and fails; a 6-inch figure shown at its
    own size keeps 9 pt at 12.5 px."""
    assert figure_text_px(9, 700, 1400) < MIN_TEXT_PX
    assert abs(figure_text_px(9, 600, 600) - 12.5) < 1e-9
    assert figure_text_px(9, 900, 600) == figure_text_px(9, 600, 600)    # never enlarged
