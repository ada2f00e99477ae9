"""Sphinx extension (listed under `sphinx.local_extensions` in _config.yml) for the offline book.

- On start-up it makes sure the self-hosted MathJax and widget JavaScript are in _site_assets/
  (tools/site_assets.py; a no-op once fetched), so any `jupyter-book build .` is offline-complete.
- It drops duplicate inline scripts from each page: sphinx-thebe's configuration script is added
  twice under Jupyter Book 1.x, which declares `const THEBE_JS_URL` twice and raises a console
  error on every page.
- It sets SENSBOOK_PAGE=1 for the kernels it starts: explorers (sensbook.pages.explore) then
  precompute every setting, and the page's controls answer without a kernel.
- It has the kernels it starts talk to the build over CurveZMQ-encrypted sockets
  (jupyter_client's `transport_encryption="auto"`; ipykernel's kernelspec declares support),
  instead of plain TCP, about which every kernel printed a warning into the build log.
- It adds the book's stylesheet, tools/static/sensbook.css (code fits the column, outputs wrap,
  tables and explorers are styled), to every page. Not through a root `_static/` folder: Jupyter
  Book would then add every .js of every static path (MathJax's too) to every page.
- It registers the pybtex style `authoryear` (`bibtex_default_style` in _config.yml): the
  bibliography labels its entries as the text cites them, "Kövér et al., 2026", not
  "[KoverBS+26]".
- Where the build renders a notebook from the execution cache (tools/execute.py), it writes
  the executed notebook, outputs included, to _build/jupyter_execute/, as a `force` build does
  (myst-nb's cache mode writes the notebook without them).
- It links each computed figure to its own PNG (tap or click to enlarge, issue 46: at 390 px a
  figure's text lands at 4-6 px; the PNG opens at its natural size, where it is 12 px).
- After the build it deletes JavaScript/CSS source maps (*.map) that the theme ships: browsers
  fetch them only with developer tools open, and they would add megabytes to the site.
- After the build it also copies the widget bundle's icon fonts to `book/@jupyter-widgets/`.
  widgets/setup.js points the bundle at `_static/widgets/`, but the bundle sometimes resolves the
  fonts' URL relative to the page instead (a race in webpack's public-path detection seen in
  about one page load in ten); serving them at both places makes every load complete.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil

import site_assets


HERE = pathlib.Path(__file__).resolve().parent


def _register_authoryear():
    """The pybtex style `authoryear`: unsrt's entries sorted by author and year, labelled
    "Hahn, 2020", "Hahn and Rofin, 2024", "Kövér et al., 2026" (the text's author_year
    citations), with a letter added when two entries would share a label."""
    from pybtex.plugin import register_plugin
    from pybtex.richtext import Text
    from pybtex.style.formatting.unsrt import Style as Unsrt
    from pybtex.style.labels import BaseLabelStyle
    from pybtex.style.sorting.author_year_title import SortingStyle

    def last(person):
        return Text(*person.rich_last_names).render_as("text")

    class AuthorYearLabels(BaseLabelStyle):
        def format_labels(self, sorted_entries):
            labels = []
            for entry in sorted_entries:
                people = entry.persons.get("author") or entry.persons.get("editor") or []
                names = [last(p) for p in people]
                who = (names[0] if len(names) == 1 else " and ".join(names) if len(names) == 2
                       else f"{names[0]} et al." if names else entry.key)
                labels.append(f"{who}, {entry.fields.get('year', 'n.d.')}")
            for i, lab in enumerate(labels):
                same = [j for j, other in enumerate(labels) if other == lab]
                if len(same) > 1:
                    for k, j in enumerate(same):
                        labels[j] = lab + "abcdefghij"[k]
            yield from labels

    class AuthorYear(Unsrt):
        default_sorting_style = SortingStyle
        default_label_style = AuthorYearLabels

    register_plugin("pybtex.style.formatting", "authoryear", AuthorYear)


def _encrypted_kernels():
    """Kernels over CurveZMQ, not plain TCP (each plain one logs "Kernel is running over TCP
    without encryption" to the build log). myst-nb executes notebooks, in every execution mode,
    through jupyter_cache's `single_nb_execution`, which calls `nbclient.execute` by the name
    `executenb`: this build's copy of that name passes nbclient a configuration. Nothing changes
    where libzmq has no CurveZMQ (the kernels then keep plain TCP, and their warning)."""
    import zmq
    from jupyter_cache.executors import utils
    from traitlets.config import Config

    plain = utils.executenb
    if not zmq.has("curve") or getattr(plain, "encrypted", False):
        return

    def executenb(nb, cwd=None, km=None, **kwargs):
        kwargs.setdefault("config", Config({"KernelManager": {"transport_encryption": "auto"}}))
        return plain(nb, cwd=cwd, km=km, **kwargs)

    executenb.encrypted = True
    utils.executenb = executenb


def _cached_outputs_written():
    """In ``cache`` mode (``make book``, ``book-ci``, ``book-publish``: tools/execute.py fills the
    cache) myst-nb renders a merged *copy* of the notebook and writes the original, without
    outputs, to _build/jupyter_execute/, the executed copy a reader's notebook front end is
    checked against (tests/site/test_colab.py). This build's cache client merges the cached
    outputs into the notebook itself, so the copy it writes is the executed one, as in ``force``
    mode."""
    from myst_nb.core.execute.cache import NotebookClientCache

    plain = NotebookClientCache.start_client
    if getattr(plain, "in_place", False):
        return

    def start_client(self):
        mine = self._notebook
        plain(self)
        merged = self._notebook
        if merged is not mine:
            mine.cells, mine.metadata = merged.cells, merged.metadata
            self._notebook = mine

    start_client.in_place = True
    NotebookClientCache.start_client = start_client


def build_kernels():
    """What every kernel of the build gets (myst-nb's, and tools/execute.py's): encrypted
    sockets, and SENSBOOK_PAGE=1 in the environment it inherits, so explorers precompute every
    setting for the page (sensbook.pages.explore) and every control on the page answers."""
    _encrypted_kernels()
    os.environ["SENSBOOK_PAGE"] = "1"


def _ensure_assets(app, config):
    site_assets.site_assets()
    config.html_static_path = [*config.html_static_path, str(HERE / "static")]
    # the API page's signatures show a default as the source writes it (`Protocol()`), not its
    # repr (`Protocol(D=16, L=2, H=2, ...)`, the whole dataclass: issue 46)
    config.autodoc_preserve_defaults = True


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for js in scripts:
        attrs = getattr(js, "attributes", {}) or {}
        key = (getattr(js, "filename", str(js)) or None, tuple(sorted((k, str(v)) for k, v in attrs.items())))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept      # in place: the builder reverts this list before the next page


# A figure a cell computed: an <img> of the build's _images/ folder not already inside a link.
_FIGURE = re.compile(r'(<img\b[^>]*\bsrc="(?P<src>(?:\.\./)*_images/[^"]+\.png)"[^>]*>)')


def enlarge_links(body: str) -> str:
    """Each computed figure of a page's HTML wrapped in a link to its PNG (opens it at full
    size); an image already in a link, or one of an explorer (a data: URI), is left alone."""
    def link(m):
        before = body[:m.start()]
        if before.rfind("<a ") > before.rfind("</a>"):      # inside a link already
            return m.group(0)
        return (f'<a class="sensbook-enlarge" href="{m.group("src")}" '
                f'title="the figure at full size">{m.group(1)}</a>')
    return _FIGURE.sub(link, body)


def _figure_links(app, pagename, templatename, context, doctree):
    if "body" in context:
        context["body"] = enlarge_links(context["body"])


def _finish(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    out = pathlib.Path(app.outdir)
    for p in out.rglob("*.map"):
        p.unlink()
    fonts = [p for p in (out / "_static" / "widgets").glob("*") if p.suffix in (".woff", ".woff2", ".ttf")]
    if fonts:
        (out / "book" / "@jupyter-widgets").mkdir(parents=True, exist_ok=True)
        for p in fonts:
            shutil.copyfile(p, out / "book" / "@jupyter-widgets" / p.name)


def setup(app):
    _register_authoryear()
    build_kernels()
    _cached_outputs_written()
    app.connect("config-inited", _ensure_assets)
    app.add_css_file("sensbook.css")
    app.connect("html-page-context", _dedupe_scripts, priority=900)   # after the others add theirs
    app.connect("html-page-context", _figure_links)
    app.connect("build-finished", _finish)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
