"""How the book's figures and controls look: the figure style, and explorers that answer on the
published page as well as in a live kernel (issue 28).

* :data:`STYLE` is the one place the book's matplotlib settings live (:func:`use_style` applies
  them; every notebook's banner does). ``tests/site/`` computes the size at which each figure's
  text lands on the page from these settings, the figure's pixel size and its displayed width.
* :func:`explore` is ``ipywidgets.interact`` for a small grid of settings. In a live kernel
  (Colab, Jupyter) it *is* ``interact``: each move calls the function. While the book is built
  (``$SENSBOOK_PAGE=1``, set by the book's Sphinx extension) it calls the function once for every
  combination of the grid and writes a self-contained viewer (the figures as PNG, a few lines
  of JavaScript, no network), so every control on the page answers. An explorer that computes
  something fresh at each move (``live=True``) shows on the page its first setting, with its
  controls visibly disabled and one line saying where they are live.

Each call of the explorer's function computes in one thread (:func:`sensbook.settings.one_thread`),
the reader's setting restored after. Imports nothing of sensbook but :mod:`sensbook.settings`;
ipywidgets and IPython are imported only when an explorer is shown.
"""
from __future__ import annotations

import base64
import contextlib
import hashlib
import html
import io
import itertools
import json
import functools
import os

from .settings import one_thread

#: The book's figure settings (matplotlib rcParams). Text is at least ``font.size`` minus one
#: step: the smallest size any default text (ticks, legends) takes is :data:`SMALLEST_PT`.
STYLE = {
    "figure.dpi": 100,
    "savefig.dpi": 100,
    "font.size": 10.0,
    "axes.titlesize": 10.0,
    "axes.labelsize": 10.0,
    "xtick.labelsize": 9.0,
    "ytick.labelsize": 9.0,
    "legend.fontsize": 9.0,
    "legend.title_fontsize": 9.0,
    "figure.titlesize": 11.0,
}
#: The smallest text (points) the style itself sets; a figure may set smaller text explicitly
#: (``fontsize=...``), which ``tests/site/`` reads from the cell that draws it.
SMALLEST_PT = min(v for k, v in STYLE.items() if k.endswith("size"))
#: Most settings an explorer precomputes for the page (each is one figure in the page).
MAX_SETTINGS = 160
#: Where controls that compute live, and why the page shows them disabled.
LIVE_NOTE = ("These controls compute a fresh result at each setting: they are live when this "
             "notebook runs (the Colab button at the top of the page); the page shows the first "
             "setting.")


def text_table(head, rows, fmts) -> str:
    """Rows as aligned text, for a chapter's printed verdicts and numbers (no list reprs).

    Parameters
    ----------
    head : sequence of str
        The column titles.
    rows : iterable of sequences
        One sequence of values per row, one value per column.
    fmts : sequence of str
        One format spec per column (``".3g"``, ``"d"``; ``"s"`` for a text column).

    Returns
    -------
    str
        The title line, then one line per row; every column right-aligned to its widest entry
        and separated by two spaces.
    """
    cells = [[format(v, f) for v, f in zip(r, fmts)] for r in rows]
    if any(len(c) != len(head) for c in cells) or len(fmts) != len(head):
        raise ValueError(f"text_table: every row and fmts need {len(head)} entries (one per column)")
    w = [max(len(h), *(len(c[j]) for c in cells)) for j, h in enumerate(head)]
    line = lambda cs: "  ".join(c.rjust(k) for c, k in zip(cs, w))
    return "\n".join([line(head)] + [line(c) for c in cells])


def html_table(head, rows, *, prose: bool = False) -> str:
    """Rows as a small HTML table, for ``IPython.display.HTML`` (a chapter's tables of results
    and verdicts).

    Parameters
    ----------
    head : sequence of str
        The column titles (HTML allowed, e.g. ``K<sub>0</sub>``).
    rows : iterable of sequences
        One sequence of cells per row, one cell per column, each written with ``str``.
    prose : bool
        A table of sentences (a verdict table): its cells wrap (the CSS class
        ``sensbook-prose``); otherwise numbers never break over two lines.

    Returns
    -------
    str
        The ``<table>`` element.
    """
    rows = [list(r) for r in rows]
    if any(len(r) != len(head) for r in rows):
        raise ValueError(f"html_table: every row needs {len(head)} cells (one per column)")
    line = lambda tag, cells: "<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>"
    table = '<table class="sensbook-prose">' if prose else "<table>"
    return "\n".join([table, "<thead>" + line("th", head) + "</thead>", "<tbody>"]
                     + [line("td", r) for r in rows] + ["</tbody>", "</table>"])


def use_style() -> None:
    """Apply :data:`STYLE` to matplotlib (what the banner of every notebook does)."""
    import matplotlib

    matplotlib.rcParams.update(STYLE)


def on_page() -> bool:
    """True while the book is being built (``$SENSBOOK_PAGE=1``): explorers precompute."""
    return os.environ.get("SENSBOOK_PAGE") == "1"


def _grid(name, values):
    if isinstance(values, range):
        values = list(values)
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name}={values!r}: give the list (or range) of its values")
    values = list(values)
    if not values:
        raise ValueError(f"{name}: its list of values is empty")
    return values


def _label(v) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _widget(name, values, start):
    """The ipywidgets control of a grid: a slider over numbers, a menu otherwise."""
    import ipywidgets as widgets

    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    steps = {b - a for a, b in zip(values, values[1:])} if numeric else set()
    if numeric and all(isinstance(v, int) for v in values) and len(steps) <= 1:
        step = steps.pop() if steps else 1
        return widgets.IntSlider(start, values[0], values[-1], step, description=name,
                                 continuous_update=False)
    if numeric:
        return widgets.SelectionSlider(options=[(_label(v), v) for v in values], value=start,
                                       description=name, continuous_update=False)
    return widgets.Dropdown(options=values, value=start, description=name)


@contextlib.contextmanager
def _captured():
    """Figures and printed text of a call, not shown: yields a list filled with (png, text)."""
    import matplotlib.pyplot as plt

    got, out, show = [], io.StringIO(), plt.show
    plt.show = lambda *a, **k: None
    before = set(plt.get_fignums())
    try:
        with contextlib.redirect_stdout(out):
            yield got
    finally:
        plt.show = show
    pngs = []
    for num in plt.get_fignums():
        if num in before:
            continue
        fig = plt.figure(num)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        pngs.append(base64.b64encode(buf.getvalue()).decode())
        plt.close(fig)
    got.append((pngs, out.getvalue()))


def _render(fn, kwargs):
    with _captured() as got:
        fn(**kwargs)
    return got[0]


def _control_html(i, name, values, start, disabled):
    dis = " disabled" if disabled else ""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        opts = "".join(f'<option value="{j}"{" selected" if v == start else ""}>'
                       f"{html.escape(_label(v))}</option>" for j, v in enumerate(values))
        field = f'<select data-i="{i}"{dis}>{opts}</select>'
    else:
        j = values.index(start)
        field = (f'<input type="range" data-i="{i}" min="0" max="{len(values) - 1}" step="1" '
                 f'value="{j}"{dis}><output>{html.escape(_label(start))}</output>')
    return f"<label>{html.escape(name)} {field}</label>"


_VIEWER_JS = """(function () {
  var root = document.getElementById(%(uid)s), data = %(data)s;
  var img = root.querySelectorAll("img.sx-figure"), txt = root.querySelector("pre.sx-text");
  var fields = root.querySelectorAll("[data-i]");
  function show() {
    var key = Array.prototype.map.call(fields, function (f) { return f.value; }).join(",");
    var item = data.items[key];
    Array.prototype.forEach.call(fields, function (f) {
      var out = f.parentNode.querySelector("output");
      if (out) out.textContent = data.labels[+f.getAttribute("data-i")][+f.value];
    });
    Array.prototype.forEach.call(img, function (im, k) {
      im.src = "data:image/png;base64," + data.pngs[item[0][k]];
    });
    if (txt) txt.textContent = item[1];
  }
  Array.prototype.forEach.call(fields, function (f) { f.addEventListener("input", show);
                                                       f.addEventListener("change", show); });
})();"""


def _page_html(fn, grids, start, live, note):
    names = list(grids)
    combos = ([tuple(grids[n].index(start[n]) for n in names)] if live else
              list(itertools.product(*[range(len(grids[n])) for n in names])))
    if len(combos) > MAX_SETTINGS:
        raise ValueError(f"explore: {len(combos)} settings to precompute for the page (at most "
                         f"{MAX_SETTINGS}): give shorter lists of values, or live=True")
    pngs, index, items = [], {}, {}
    for combo in combos:
        figs, text = _render(fn, {n: grids[n][j] for n, j in zip(names, combo)})
        ids = []
        for p in figs:
            if p not in index:
                index[p] = len(pngs)
                pngs.append(p)
            ids.append(index[p])
        items[",".join(map(str, combo))] = [ids, text]
    first = items[",".join(str(grids[n].index(start[n])) for n in names)]
    uid = "sx-" + hashlib.sha1(json.dumps([fn.__name__, names, list(items)]).encode()
                               + "".join(pngs).encode()).hexdigest()[:12]
    controls = "".join(_control_html(i, n, grids[n], start[n], live)
                       for i, n in enumerate(names))
    figs = "".join(f'<img class="sx-figure" alt="{html.escape(fn.__name__)}" '
                   f'src="data:image/png;base64,{pngs[k]}">' for k in first[0])
    text = f'<pre class="sx-text">{html.escape(first[1])}</pre>' if any(t for _, t in items.values()) else ""
    line = note or (LIVE_NOTE if live else
                    f"Every setting of these controls was computed when the book was built "
                    f"({len(combos)} settings); in a running notebook they call "
                    f"{fn.__name__}() live.")
    kind = "sensbook-explorer sx-live" if live else "sensbook-explorer sx-answers"
    out = (f'<div class="{kind}" id="{uid}"><div class="sx-controls">{controls}</div>'
           f'{figs}{text}<p class="sx-note">{html.escape(line)}</p></div>')
    if not live:
        data = {"pngs": pngs, "items": items,
                "labels": [[_label(v) for v in grids[n]] for n in names]}
        out += "<script>" + _VIEWER_JS % {"uid": json.dumps(uid), "data": json.dumps(data)} + "</script>"
    return out


def _one_thread_calls(fn):
    @functools.wraps(fn)
    def call(**kwargs):
        with one_thread():
            return fn(**kwargs)
    return call


class _Page:
    def __init__(self, html_):
        self._html = html_

    def _repr_html_(self):
        return self._html


def explore(fn, *, start: dict | None = None, live: bool = False, note: str | None = None,
            **grids):
    """Show ``fn(**setting)`` with a control for each grid of settings.

    Parameters
    ----------
    fn : callable
        Draws (or prints) one setting; called with one keyword argument per grid.
    start : dict or None
        The first setting shown, by control name (default: each grid's first value).
    live : bool
        True when each setting computes something fresh: the page then shows only ``start``,
        its controls disabled, with a line saying where they are live.
    note : str or None
        The line under the page's explorer (default: what was precomputed, or where it is
        live).
    **grids : list or range
        One per control: its name and its values.

    Notes
    -----
    In a live kernel it is ``ipywidgets.interact``: sliders over numbers, menus otherwise;
    sliders act on release. While the book is built (``$SENSBOOK_PAGE=1``) every combination
    is computed now (at most ``MAX_SETTINGS``) and the page gets a viewer whose controls
    answer from those figures. The controls are exactly ``grids``: every other parameter of
    ``fn`` keeps its default (``interact`` would make a slider of it), and one without a
    default is refused. Shows the explorer, as ``interact`` does; returns None.
    """
    if not callable(fn):
        raise ValueError(f"fn must be the function to call, got {fn!r}")
    grids = {n: _grid(n, v) for n, v in grids.items()}
    if not grids:
        raise ValueError("explore needs at least one control (name=list of values)")
    fixed = _fixed_parameters(fn, grids)
    start = dict(start or {})
    unknown = set(start) - set(grids)
    if unknown:
        raise ValueError(f"start names {sorted(unknown)}, which are not controls; "
                         f"controls: {', '.join(grids)}")
    for n, vals in grids.items():
        start.setdefault(n, vals[0])
        if start[n] not in vals:
            raise ValueError(f"start[{n!r}]={start[n]!r} is not one of its values {vals}")
    from IPython.display import display

    fn = _one_thread_calls(fn)
    if on_page():
        display(_Page(_page_html(fn, grids, start, live, note)))
        return
    import ipywidgets as widgets

    display(widgets.interactive(fn, **{n: _widget(n, v, start[n]) for n, v in grids.items()},
                                **{n: widgets.fixed(v) for n, v in fixed.items()}))


def _fixed_parameters(fn, grids) -> dict:
    """The parameters of ``fn`` that are not controls, with their defaults; ValueError for a
    control ``fn`` does not take, or a parameter that is neither a control nor has a default."""
    import inspect

    params = inspect.signature(fn).parameters
    named = {n: p for n, p in params.items()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        alien = [n for n in grids if n not in named]
        if alien:
            raise ValueError(f"controls {alien} are not parameters of {fn.__name__}(); its "
                             f"parameters: {', '.join(named) or 'none'}")
    bare = [n for n, p in named.items() if n not in grids and p.default is p.empty]
    if bare:
        raise ValueError(f"{fn.__name__}() parameter(s) {bare} are neither controls nor have a "
                         f"default: give each a list of values, or a default")
    return {n: p.default for n, p in named.items() if n not in grids}
