"""sensbook.pages: the figure style and explorers (issue 28: every control on the page answers
or says where it is live)."""
import base64
import json
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest

import sensbook as sb
from sensbook import pages


def _shown(monkeypatch, fn, **kw):
    out = []
    monkeypatch.setattr("IPython.display.display", lambda obj: out.append(obj))
    sb.explore(fn, **kw)
    (obj,) = out
    return obj


def draw(kind="bar", n=2):
    plt.figure(figsize=(2, 1))
    (plt.bar if kind == "bar" else plt.plot)(range(n), range(n))
    print(f"{kind} {n}")
    plt.show()


def test_on_the_page_every_setting_is_precomputed_and_distinct(monkeypatch):
    monkeypatch.setenv("SENSBOOK_PAGE", "1")
    html = _shown(monkeypatch, draw, kind=["bar", "line"], n=range(2, 5), start=dict(n=3))._repr_html_()
    data = json.loads(re.search(r"data = (\{.*?\});\n", html, re.S).group(1))
    assert set(data["items"]) == {f"{i},{j}" for i in range(2) for j in range(3)}
    assert [it[1] for it in data["items"].values()] == [f"{k} {n}\n" for k in ("bar", "line")
                                                        for n in (2, 3, 4)]
    pngs = {data["pngs"][it[0][0]] for it in data["items"].values()}
    assert len(pngs) == 6 and all(base64.b64decode(p)[:4] == b"\x89PNG" for p in pngs)
    # the first figure shown is the start setting, the controls are enabled and labelled
    assert 'value="1"' in html and "disabled" not in html and "bar 3" in html
    assert data["labels"] == [["bar", "line"], ["2", "3", "4"]]
    assert not plt.get_fignums()                       # nothing left open


def test_live_explorers_show_one_setting_with_disabled_controls(monkeypatch):
    monkeypatch.setenv("SENSBOOK_PAGE", "1")
    calls = []
    html = _shown(monkeypatch, lambda n: calls.append(n) or draw(n=n), n=[2, 3], live=True,
                  start=dict(n=3))._repr_html_()
    assert calls == [3] and "disabled" in html and pages.LIVE_NOTE in html and "<script" not in html


def test_in_a_kernel_it_is_interact(monkeypatch):
    monkeypatch.delenv("SENSBOOK_PAGE", raising=False)
    import ipywidgets as widgets

    w = _shown(monkeypatch, draw, kind=["bar", "line"], n=range(2, 5), start=dict(n=3))
    assert isinstance(w, widgets.interactive)
    menu, slider = w.kwargs_widgets
    assert isinstance(menu, widgets.Dropdown) and menu.value == "bar"
    assert isinstance(slider, widgets.IntSlider) and (slider.min, slider.max, slider.value) == (2, 4, 3)
    assert slider.continuous_update is False
    w2 = _shown(monkeypatch, draw, kind=["bar"], n=[2, 4, 8])
    assert isinstance(w2.kwargs_widgets[1], widgets.SelectionSlider)
    plt.close("all")


def test_in_a_kernel_the_controls_are_exactly_the_grid(monkeypatch):
    """Issue 39: ch7's explorer has a parameter P=32 that is no control; interact made it a
    fourth slider (-32...96, failing at P <= 0) in Colab, while the page showed three."""
    monkeypatch.delenv("SENSBOOK_PAGE", raising=False)
    import ipywidgets as widgets

    calls = []

    def show(kind="bar", n=2, P=32, *, scale=1.0):
        calls.append((kind, n, P, scale))

    w = _shown(monkeypatch, show, kind=["bar", "line"], n=[2, 3])
    controls = [c._kwarg for c in w.kwargs_widgets if not isinstance(c, widgets.fixed)]
    assert controls == ["kind", "n"]
    assert {c._kwarg: c.value for c in w.kwargs_widgets if isinstance(c, widgets.fixed)} == \
        {"P": 32, "scale": 1.0}
    w.kwargs_widgets[1].value = 3                  # a move of the slider
    assert calls[-1] == ("bar", 3, 32, 1.0)


def test_bad_explorers_are_refused_naming_the_argument(monkeypatch):
    with pytest.raises(ValueError, match="n=3"):
        sb.explore(draw, n=3)
    with pytest.raises(ValueError, match="start\\['n'\\]=9"):
        sb.explore(draw, n=[1, 2], start=dict(n=9))
    with pytest.raises(ValueError, match="not controls"):
        sb.explore(draw, n=[1, 2], start=dict(m=1))
    with pytest.raises(ValueError, match=r"controls \['m'\] are not parameters of draw"):
        sb.explore(draw, m=[1, 2])
    with pytest.raises(ValueError, match=r"\['P'\] are neither controls nor have a default"):
        sb.explore(lambda n, P: None, n=[1, 2])
    monkeypatch.setenv("SENSBOOK_PAGE", "1")
    with pytest.raises(ValueError, match="at most"):
        sb.explore(draw, kind=list(range(20)), n=list(range(20)))


def test_use_style_sets_the_books_figure_settings():
    matplotlib.rcdefaults()
    sb.use_style()
    assert all(matplotlib.rcParams[k] == v for k, v in sb.STYLE.items())
    assert pages.SMALLEST_PT == 9.0


def test_every_call_computes_in_one_thread_and_the_setting_is_restored(monkeypatch):
    import torch

    seen, before = [], torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.delenv("SENSBOOK_PAGE", raising=False)
        w = _shown(monkeypatch, lambda n: seen.append(torch.get_num_threads()), n=[1, 2])
        w.f(n=2)                                   # what a move of the slider calls
        monkeypatch.setenv("SENSBOOK_PAGE", "1")
        _shown(monkeypatch, lambda n: seen.append(torch.get_num_threads()), n=[1, 2])
        assert seen == [1, 1, 1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_text_table_aligns_each_column_to_its_widest_entry():
    """sb.text_table (the chapters' printed tables): every line as wide as the title line,
    each column right-aligned, formats applied per column; a row that does not fit is refused."""
    out = sb.text_table(("N", "flip", "verdict"), [(8, 2.5, "hard"), (256, 0.0625, "1/N")],
                        ("d", ".3g", "s"))
    lines = out.split("\n")
    assert lines == ["  N    flip  verdict", "  8     2.5     hard", "256  0.0625      1/N"]
    assert sb.text_table(("a",), iter([(1,), (22,)]), ("d",)) == " a\n 1\n22"   # rows may be an iterator
    with pytest.raises(ValueError, match="2 entries"):
        sb.text_table(("a", "b"), [(1,)], ("d", "d"))


def test_html_table_writes_one_row_per_entry_and_marks_prose_tables():
    """sb.html_table (chapter 6's tables): a title row and one row per entry, cells as str;
    a table of sentences carries the CSS class that lets its cells wrap; rows may be an
    iterator; a row that does not fit is refused."""
    html = sb.html_table(("a", "b"), iter([(1, "x"), (2.5, "y")]))
    assert html.count("<tr>") == 3 and "<th>b</th>" in html and "<td>2.5</td>" in html
    assert html.startswith("<table>") and html.endswith("</table>")
    assert sb.html_table(("a",), [("x",)], prose=True).startswith('<table class="sensbook-prose">')
    with pytest.raises(ValueError, match="2 cells"):
        sb.html_table(("a", "b"), [(1,)])
