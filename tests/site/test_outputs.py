"""What the executed cells print on the built pages (no browser needed).

Issue 39: ch3's box scan printed `np.float64(0.73)` on five lines, and other chapters printed
list and dict reprs of numpy scalars. A reader should see numbers as formatted text, so no
executed output of any page (printed text, rich outputs, the explorers' precomputed settings)
may hold a numpy scalar's repr (`np.float64(`, `np.int64(`, ...: what numpy 2 prints for a
scalar inside a list, a tuple or a dict, or for `repr(x)`).
"""
from __future__ import annotations

import html.parser
import re

import pytest

from .conftest import html_pages

PAGES = html_pages()
#: A numpy scalar's repr under numpy >= 2 (np.float64(0.5), np.int64(3), np.True_, ...).
NUMPY_REPR = re.compile(r"\bnp\.(?:float|int|uint|complex)(?:8|16|32|64|128)\(|\bnp\.(?:True_|False_|bool_\(|str_\()")


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
    """Each numpy scalar repr in the page's executed outputs, with the text around it."""
    found = []
    for out in _Outputs(page_html).outputs:
        for m in NUMPY_REPR.finditer(out):
            found.append(" ".join(out[max(0, m.start() - 40):m.end() + 40].split()))
    return found


@pytest.mark.parametrize("rel", PAGES)
def test_no_numpy_scalar_repr_in_outputs(rel, site):
    found = numpy_reprs((site / rel).read_text(encoding="utf-8"))
    assert not found, "\n".join([f"{rel}: {len(found)} numpy scalar reprs in executed output "
                                 "(print numbers as formatted text):"] + found[:10])


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
