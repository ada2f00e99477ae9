"""What the executed cells print on the built pages (no browser needed).

Issue 39: ch3's box scan printed `np.float64(0.73)` on five lines, and other chapters printed
list and dict reprs of numpy scalars. A reader should see numbers as formatted text, so no
executed output of any page (printed text, rich outputs, the explorers' precomputed settings)
may hold a numpy scalar's repr (`np.float64(`, `np.int64(`, ...: what numpy 2 prints for a
scalar inside a list, a tuple or a dict, or for `repr(x)`).

Issue 46: nor a dict's repr (`{8: '3.12 ± 0.14', ...}`, `{'N_exh': 14, ...}`) nor a numpy
array's print (`[1.42 1.11 1.26 1.2 ]`, `array([...])`): numbers go in a table
(`sb.text_table`, `sb.html_table`) or a sentence. :func:`raw_reprs` checks any output text,
so the same check runs on executed notebooks without a site (tests/colab/test_run.py).
"""
from __future__ import annotations

import html
import html.parser
import re

import pytest

from .conftest import html_pages

PAGES = html_pages()
#: A numpy scalar's repr under numpy >= 2 (np.float64(0.5), np.int64(3), np.True_, ...).
NUMPY_REPR = re.compile(r"\bnp\.(?:float|int|uint|complex)(?:8|16|32|64|128)\(|\bnp\.(?:True_|False_|bool_\(|str_\()")


#: A dict's repr: an opening brace, then a quoted or numeric key and a colon (JSON, which the
#: explorers embed, quotes its keys with double quotes and is not matched).
DICT_REPR = re.compile(r"\{(?:'[^'\n]{0,60}'|-?\d+(?:\.\d+)?): ")
_NUM = r"-?(?:\d+\.?\d*(?:e[+-]?\d+)?|\.\d+|nan|inf)"
#: A numpy array's print: numbers in brackets separated by blanks, no commas (a list's repr
#: has commas), or the repr `array([`.
ARRAY_PRINT = re.compile(r"\[\s*" + _NUM + r"(?:\s+" + _NUM + r")+\s*\]|\barray\(\[")


def raw_reprs(text: str) -> list[str]:
    """Each numpy scalar repr, dict repr or numpy array print in a piece of output text (HTML
    entities already decoded), with the text around it."""
    return [" ".join(text[max(0, m.start() - 40):m.end() + 40].split())
            for rx in (NUMPY_REPR, DICT_REPR, ARRAY_PRINT) for m in rx.finditer(text)]


class _Outputs(html.parser.HTMLParser):
    """The raw HTML inside each `div.cell_output` (Jupyter Book's executed outputs)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.text, self.outputs = text, []
        self._lines = [0] + [m.end() for m in re.finditer("\n", text)]
        self._depth = 0            # open <div>s inside the current output (0: not in one)
        self._start = None
        self.feed(text)

    def _offset(self) -> int:
        line, col = self.getpos()
        return self._lines[line - 1] + col

    def handle_starttag(self, tag, attrs):
        if tag != "div":
            return
        if self._depth:
            self._depth += 1
        elif "cell_output" in (dict(attrs).get("class") or "").split():
            self._depth, self._start = 1, self._offset()

    def handle_endtag(self, tag):
        if tag == "div" and self._depth:
            self._depth -= 1
            if not self._depth:
                self.outputs.append(self.text[self._start:self._offset()])


def numpy_reprs(page_html: str) -> list[str]:
    """Each raw repr (:func:`raw_reprs`) in the page's executed outputs, with the text around
    it (images' base64 data left out)."""
    found = []
    for out in _Outputs(page_html).outputs:
        out = re.sub(r"data:image/[\w+]+;base64,[\w+/=]+", "", html.unescape(out))
        found += raw_reprs(out)
    return found


def notebook_reprs(nb) -> list[str]:
    """:func:`raw_reprs` of every output of an executed notebook (nbformat): streams, plain
    text and HTML (the check without a site build)."""
    found = []
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        for o in cell.get("outputs", []):
            texts = [o.get("text", "")] + [o.get("data", {}).get(k, "")
                                           for k in ("text/plain", "text/html")]
            for s in texts:
                s = "".join(s) if isinstance(s, list) else s
                s = re.sub(r"data:image/[\w+]+;base64,[\w+/=]+", "", html.unescape(s))
                found += [f"code cell {i}: {r}" for r in raw_reprs(s)]
    return found


@pytest.mark.parametrize("rel", PAGES)
def test_no_raw_python_repr_in_outputs(rel, site):
    found = numpy_reprs((site / rel).read_text(encoding="utf-8"))
    assert not found, "\n".join([f"{rel}: {len(found)} raw Python reprs in executed output "
                                 "(numpy scalars, dicts, numpy arrays: print numbers as a "
                                 "table or a sentence):"] + found[:10])


def test_numpy_repr_detector():
    """The check itself (no site needed): reprs in an output are found, the same text in a code
    input, and formatted numbers, are not."""
    page = ('<div class="cell_input"><pre>x = np.float64(0.5)</pre></div>'
            '<div class="cell docutils container"><div class="cell_output docutils container">'
            '<div class="output stream"><pre>[np.float64(0.73), np.int64(3)]</pre></div></div></div>'
            '<div class="cell_output"><div><pre>0.73 3 np.floating</pre></div></div>')
    found = numpy_reprs(page)
    assert len(found) == 2 and "0.73" in found[0]
    assert not numpy_reprs('<div class="cell_input"><pre>np.float64(1)</pre></div>')
    assert not numpy_reprs('<div class="cell_output"><pre>{"a": 0.5, "b": 3}</pre></div>')
    assert numpy_reprs('<div class="cell_output">\n<pre>(np.True_, 1)</pre>\n</div>')


@pytest.mark.parametrize("text", [
    "{8: '3.12 ± 0.14', 16: '2.9 ± 0.1'}", "sizes {'N_exh': 14, 'N_big': 300}",
    "tau: [1.42 1.11 1.26 1.2 ]", "[0.0653 0.0393 0.0348 0.0278 0.02  ]",
    "sigma* / r = [111. 125. 121. 113. 115.]", "q [ 1.5e-03 -2.0e+00]", "array([1, 2])",
    "{&#39;FIRST_HARD&#39;: 0.98}"])
def test_raw_repr_detector_finds_dicts_and_arrays(text):
    page = f'<div class="cell_output"><pre>{text}</pre></div>'
    assert numpy_reprs(page), text


@pytest.mark.parametrize("text", [
    "K = [0, 4, 6]", "N = [4, 6, 8]", '{"items": {"0,0": [[0], "x"]}}', "N = 4: 1.42, 1.11",
    "[1]", "sigma in [0.001, 1]", "   N  q0.5\n   4   1.4", "T: (4, 32)"])
def test_raw_repr_detector_passes_formatted_text(text):
    assert not numpy_reprs(f'<div class="cell_output"><pre>{text}</pre></div>'), text


def test_notebook_check_reads_every_kind_of_output():
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x")])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="ok 1.5\n"),
                           nbformat.v4.new_output("execute_result",
                                                  data={"text/plain": "array([1., 2.])"})]
    assert len(notebook_reprs(nb)) == 1
    nb.cells[0].outputs[1]["data"]["text/plain"] = "1.0, 2.0"
    assert not notebook_reprs(nb)
