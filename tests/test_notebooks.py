"""tools/notebooks.py, the generator of the Colab notebooks (`make sync`), on small books."""
import contextlib
import io
import json
import pathlib
import subprocess
import sys

import jupytext
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import notebooks  # noqa: E402

BIB = r"""
@article{solo2020,  title = {A}, author = {M{\"u}ller, Jo}, year = {2020} }
@article{duo2021,   title = {B}, author = {Ada, Lovelace and Babbage, Charles}, year = {2021} }
@article{trio2022,  title = {C}, author = {One, A. and Two, B. and Three, C.}, year = {2022} }
"""
HEADER = """---
jupytext:
  formats: ipynb,md:myst
  text_representation: {extension: .md, format_name: myst, format_version: 0.13}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
"""
CHAPTER = HEADER + '''
# First chapter

As {cite:t}`solo2020` and {cite:p}`duo2021,trio2022` show, see {doc}`ch2_other` and
{doc}`the other one <ch2_other>`, or {ref}`fig-a`, {numref}`fig-a`, {eq}`eq-one`, {numref}`Figure %s <fig-a>`.

$$
a = b
$$ (eq-one)

Code ``{cite:t}`x` `` stays; {math}`a+b`.

(a-label)=
% a comment
```{note}
Take care {cite}`trio2022`.
```

```{code-cell} ipython3
:tags: [remove-cell]

try:
    import sensbook
except ImportError:
    %pip install -q "sensbook @ git+https://github.com/Org/Repo@dev"
    import sensbook
```

```{code-cell} ipython3
---
mystnb:
  figure:
    caption: A curve, as in {cite:t}`solo2020`.
    name: fig-a
---
# NBVAL_IGNORE_OUTPUT
x = 1
```

```{code-cell} ipython3
:tags: [remove-cell]

assert x == 1
assert x > 0
```
'''
OTHER = HEADER + """
# The {math}`\\beta` chapter

```{code-cell} ipython3
try:
    import sensbook
except ImportError:
    %pip install -q "sensbook @ git+https://github.com/Org/Repo@dev"
```
"""


@pytest.fixture
def book(tmp_path):
    (tmp_path / "book").mkdir()
    (tmp_path / "_config.yml").write_text("repository:\n  url: https://github.com/Org/Repo\n  branch: dev\n")
    (tmp_path / "references.bib").write_text(BIB)
    (tmp_path / "book" / "ch1_first.md").write_text(CHAPTER)
    (tmp_path / "book" / "ch2_other.md").write_text(OTHER)
    return tmp_path


def make(book, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = notebooks.main(["--root", str(book), *args])
    return rc, out.getvalue()


def cells(book, name="ch1_first"):
    return json.loads((book / "book" / f"{name}.ipynb").read_text())["cells"]


def test_roles_become_links_to_the_published_book(book):
    make(book)
    text = cells(book)[0]["source"]
    text = "".join(text) if isinstance(text, list) else text
    refs = "https://org.github.io/Repo/book/references.html"
    assert f"[Müller (2020)]({refs})" in text
    assert f"([Ada and Babbage, 2021]({refs}); [One et al., 2022]({refs}))" in text
    assert "[The $\\beta$ chapter](https://org.github.io/Repo/book/ch2_other.html)" in text
    assert "[the other one](https://org.github.io/Repo/book/ch2_other.html)" in text
    page = "https://org.github.io/Repo/book/ch1_first.html"
    assert f"[A curve, as in Müller (2020).]({page}#fig-a), [Fig. 1]({page}#fig-a), [(1)]({page}#eq-one), [Figure 1]({page}#fig-a)." in text
    assert "$$\na = b\n$$\n" in text
    assert "``{cite:t}`x` ``" in text and "$a+b$" in text            # code spans stay
    assert "(a-label)=" not in text and "% a comment" not in text
    assert f"> **Note**\n>\n> Take care ([One et al., 2022]({refs}))." in text


def test_cells_fold_captions_follow_markers_become_tags(book):
    make(book)
    c = cells(book)
    src = ["".join(x["source"]) for x in c]
    kinds = [x["cell_type"] for x in c]
    assert kinds == ["markdown", "code", "code", "markdown", "code"]
    install, figure, caption, check = c[1], c[2], c[3], c[4]
    assert install["metadata"]["cellView"] == "form" and "'sensbook @ git+https://github.com/Org/Repo@dev'" in src[1]
    assert src[2] == "x = 1" and figure["metadata"]["tags"] == ["nbval-ignore-output"]
    assert src[3] == ("**Fig. 1.** A curve, as in "
                      "[Müller (2020)](https://org.github.io/Repo/book/references.html).")
    assert caption["metadata"]["sensbook"]["caption_of"] == figure["id"]
    assert check["metadata"]["cellView"] == "form" and check["metadata"]["jupyter"]["source_hidden"]
    assert src[4] == "# @title Check the claims above (2 asserts)\n" \
                     "assert x == 1\nassert x > 0"
    assert "jupytext" not in json.loads((book / "book" / "ch1_first.ipynb").read_text())["metadata"]


def test_generation_is_idempotent_and_check_catches_drift(book):
    md, nb = book / "book" / "ch1_first.md", book / "book" / "ch1_first.ipynb"
    assert make(book)[0] == 0 and nb.exists()
    first = nb.read_text()
    assert make(book) == (0, "")                                  # nothing to write the second time
    assert nb.read_text() == first and make(book, "--check") == (0, "")
    for old, new in [("x = 1", "x = 2"), ("First chapter", "Chapter one"), ("A curve", "One curve")]:
        md.write_text(CHAPTER.replace(old, new))
        rc, out = make(book, "--check")
        assert rc == 1 and "ch1_first.ipynb" in out, (old, new)
        assert nb.read_text() == first                            # --check writes nothing
    md.write_text(CHAPTER)
    nb.write_text(first.replace("x = 1", "x = 3"))
    assert make(book, "--check")[0] == 1


def test_plain_jupytext_sync_never_overwrites_the_chapter(book):
    """The chapters still declare the jupytext pairing: after `make sync`, `jupytext --sync`
    must read the chapter (the generated notebook is dated before it), never the notebook."""
    md = book / "book" / "ch1_first.md"
    before = [(c.cell_type, c.source) for c in jupytext.read(md).cells]
    make(book)
    assert (book / "book" / "ch1_first.ipynb").stat().st_mtime_ns < md.stat().st_mtime_ns
    subprocess.run([sys.executable, "-m", "jupytext", "--sync", str(md)], check=True, capture_output=True)
    assert [(c.cell_type, c.source) for c in jupytext.read(md).cells] == before
    assert "@title" not in md.read_text()
    assert make(book, "--check")[0] == 1                          # the plain notebook is drift


@pytest.mark.parametrize("bad, message", [
    ("{cite:t}`nokey2020`", "'nokey2020' is not in references.bib"),
    ("{doc}`ch9_missing`", "no document book/ch9_missing"),
    ("{ref}`no-such-label`", "no label 'no-such-label'"),
    ("{glue}`value`", "the MyST role {glue} has no notebook rendering"),
    ("```{figure} x.png\n```", "the MyST directive {figure} has no notebook rendering"),
])
def test_what_cannot_be_rendered_fails_loudly(book, bad, message):
    (book / "book" / "ch1_first.md").write_text(CHAPTER.replace("# First chapter", "# First chapter\n\n" + bad))
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        make(book)


def test_an_install_cell_that_disagrees_with_the_setting_fails(book):
    (book / "_config.yml").write_text("repository:\n  url: https://github.com/Other/Repo\n  branch: dev\n")
    with pytest.raises(ValueError, match="says 'sensbook @ git"):
        make(book)


def _run_install_cell(monkeypatch, present, returncode=0):
    import importlib.util
    calls = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: (real(name, *a) if present else None) if name == "sensbook" else real(name, *a))
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: calls.append(cmd) or
                        subprocess.CompletedProcess(cmd, returncode, "", "ERROR: no such repository"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(notebooks.install_cell_source(notebooks.config(ROOT)), {})
    return calls, out.getvalue()


def test_install_cell_is_quiet_and_says_what_it_installed(monkeypatch):
    assert _run_install_cell(monkeypatch, present=True) == ([], "")
    calls, out = _run_install_cell(monkeypatch, present=False)
    url, branch = notebooks.repository(notebooks.config(ROOT))
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                      f"sensbook @ git+{url}@{branch}"]]
    assert out.splitlines() == [f"installed sensbook {notebooks_version()} from git+{url}@{branch}"]
    with pytest.raises(RuntimeError, match="no such repository"):
        _run_install_cell(monkeypatch, present=False, returncode=1)


def notebooks_version():
    from importlib.metadata import version
    return version("sensbook")

