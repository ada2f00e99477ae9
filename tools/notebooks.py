"""The Colab notebooks, generated from the chapters: book/chN_*.md (the one source) -> .ipynb.

`make sync` runs this. The committed `book/chN_*.ipynb` is what the "Open in Colab" button
opens, and Colab (or Jupyter) knows nothing of Jupyter Book's tags and MyST roles, so each
notebook is the chapter rewritten for a notebook front end:

- the install cell becomes one quiet Python cell that installs `sensbook` from the repository
  in `_config.yml` (`repository.url`, `repository.branch`) when the runtime lacks it and prints
  one line saying what it installed (never torch: Colab keeps its own);
- every cell hidden on the pages (tag `remove-cell`, the chapter's assert cells) becomes a Colab
  form cell: `cellView: form` and a `# @title` line, so Colab shows the title and folds the code
  away, one click from view (`jupyter.source_hidden` does the same in JupyterLab); the code is
  unchanged and runs;
- nbval's `# NBVAL_...` comment markers are dropped from the code the reader sees and kept as
  the equivalent cell tags (`nbval-ignore-output`, ...);
- MyST roles become Markdown: `{cite:t}`/`{cite:p}`/`{cite}` author-year text from
  references.bib linking to the published references page, `{doc}`/`{ref}`/`{numref}` links to
  the published HTML pages (GitHub Pages of the configured repository), `{math}` dollar math;
  admonitions become block quotes, `(label)=` targets and `%` comments are dropped; anything
  else fails loudly, so a new role cannot reach the notebook raw;
- each figure's caption (cell metadata `mystnb.figure.caption`) becomes a Markdown cell right
  after the figure's code cell, numbered as on the page ("Fig. 2.").

Code cells stay one-to-one with the chapter's, in order, with the same code apart from the
install cell, the `# @title` lines and the nbval markers. The output is a pure function of the
chapter, references.bib, the chapters' titles and labels and `_config.yml`: running it twice
changes nothing, and tests/test_chapters.py fails when a committed notebook differs from it.

The generated notebook carries no `jupytext` metadata, and each run dates it a second before
its source: the chapters still declare `formats: ipynb,md:myst`, and `jupytext --sync` copies
the input cells of the *newer* file of a pair, so a newer generated notebook would be copied
back over the source (`jupytext --sync` after editing a chapter only overwrites the notebook,
which the pairing test then reports until `make sync` runs).

    python tools/notebooks.py            # (re)write every book/ch*.ipynb that changed
    python tools/notebooks.py --check    # exit 1, naming them, if any is out of date
    python tools/notebooks.py book/ch1_sensitivity.md ...
"""
from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import re
import sys
from urllib.parse import urlsplit

import jupytext
import nbformat
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
MAX_LINE = 88

INSTALL_TITLE = "Install sensbook if this runtime lacks it (never torch: Colab keeps its own)"
# Titles a reader sees in Colab: they speak of the notebook, not of the web pages.
CHECK_TITLE = "Check the claims above ({n} assert{s})"
HIDDEN_TITLE = "Supporting code (not shown in the HTML book)"


# --------------------------------------------------------------------------- configuration
def config(root: pathlib.Path = ROOT) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))


def repository(cfg: dict) -> tuple[str, str]:
    """(url, branch) of the repository: the one setting every link and install follows."""
    repo = cfg.get("repository") or {}
    url, branch = str(repo.get("url", "")).rstrip("/"), str(repo.get("branch", "main"))
    if url.endswith(".git"):
        url = url[:-4]
    parts = urlsplit(url)
    if parts.scheme != "https" or parts.hostname != "github.com" or \
            len(parts.path.strip("/").split("/")) != 2:
        raise ValueError(f"_config.yml repository.url must be https://github.com/OWNER/REPO, "
                         f"got {url!r}")
    return url, branch


def pages_url(cfg: dict) -> str:
    """Where the book is published: GitHub Pages of the repository (.github/workflows/publish.yml)."""
    url, _ = repository(cfg)
    owner, repo = urlsplit(url).path.strip("/").split("/")
    if repo.lower() == f"{owner.lower()}.github.io":
        return f"https://{owner.lower()}.github.io/"
    return f"https://{owner.lower()}.github.io/{repo}/"


def install_spec(cfg: dict) -> str:
    url, branch = repository(cfg)
    return f"sensbook @ git+{url}@{branch}"


def install_cell_source(cfg: dict) -> str:
    return "\n".join([
        f"# @title {INSTALL_TITLE}",
        "import importlib, importlib.util, subprocess, sys",
        "",
        "if importlib.util.find_spec(\"sensbook\") is None:",
        f"    spec = {install_spec(cfg)!r}",
        "    pip = [sys.executable, \"-m\", \"pip\", \"install\", \"-q\",",
        "           \"--disable-pip-version-check\", spec]",
        "    done = subprocess.run(pip, capture_output=True, text=True)",
        "    if done.returncode:",
        "        raise RuntimeError(f\"pip could not install {spec}:\\n{done.stderr}\")",
        "    importlib.invalidate_caches()",
        "    from importlib.metadata import version",
        "    print(f\"installed sensbook {version('sensbook')} from {spec.split('@ ')[1]}\")",
    ])


def is_install_cell(cell) -> bool:
    """The chapter's first cell: imports sensbook, installing it when that fails."""
    src = cell.source
    return cell.cell_type == "code" and "import sensbook" in src and (
        "except ImportError" in src or "find_spec(\"sensbook\")" in src)


def chapter_install_spec(source: str) -> str | None:
    """The requirement a chapter's install cell installs (`%pip install -q "<spec>"`)."""
    m = re.search(r"%pip install -q \"([^\"]+)\"", source) or re.search(r"spec = '([^']+)'", source)
    return m.group(1) if m else None


# --------------------------------------------------------------------------- bibliography
class Bibliography:
    """Author-year labels of references.bib, as the book's bibliography shows them."""

    def __init__(self, path: pathlib.Path):
        import pybtex.database
        self.entries = {}
        for key, e in pybtex.database.parse_file(str(path)).entries.items():
            people = e.persons.get("author") or e.persons.get("editor") or []
            last = [" ".join(n.render_as("text") for n in p.rich_last_names) for p in people]
            year = e.fields.get("year", "n.d.")
            self.entries[key] = (last, year)

    def authors(self, key: str, full: bool = False) -> str:
        last, _ = self.entries[key]
        if not last:
            return "Anonymous"
        if len(last) == 1:
            return last[0]
        if len(last) == 2 or full:
            return ", ".join(last[:-1]) + " and " + last[-1]
        return f"{last[0]} et al."

    def year(self, key: str) -> str:
        return self.entries[key][1]


# --------------------------------------------------------------------------- the book's labels
def _title(text: str) -> str:
    m = re.search(r"^# +(.+?)\s*$", re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S), re.M)
    return m.group(1) if m else ""


class Book:
    """Document titles and labels of book/*.md, to resolve {doc}, {ref}, {numref} and {eq}:
    label -> (document, text for {ref}, text for {numref}/{eq}), numbered per page as Sphinx does."""

    def __init__(self, root: pathlib.Path = ROOT):
        self.titles: dict[str, str] = {}
        self.labels: dict[str, tuple[str, str, str]] = {}
        for md in sorted((root / "book").glob("*.md")):
            doc = f"book/{md.stem}"
            text = md.read_text(encoding="utf-8")
            self.titles[doc] = _strip_roles(_title(text))
            for m in re.finditer(r"^\((?P<label>[\w.:-]+)\)=\s*\n+(?:#+ +(?P<head>.+))?", text, re.M):
                head = _strip_roles(m.group("head") or m.group("label"))
                self.labels[m.group("label")] = (doc, head, head)
            for k, m in enumerate(re.finditer(r"^\$\$[ \t]*\((?P<label>[\w.:-]+)\)[ \t]*$", text, re.M)):
                self.labels[m.group("label")] = (doc, f"({k + 1})", f"({k + 1})")
            if "jupytext" in text[:500]:
                figures = [c.metadata["mystnb"]["figure"] for c in jupytext.read(md).cells
                           if c.cell_type == "code" and "figure" in c.metadata.get("mystnb", {})]
                for k, fig in enumerate(figures):
                    if fig.get("name"):
                        caption = " ".join(str(fig.get("caption", "")).split())
                        self.labels[fig["name"]] = (doc, caption, f"Fig. {k + 1}")


def _strip_roles(text: str) -> str:
    """A title's roles as plain Markdown ({math} as dollar math)."""
    return re.sub(r"\{([\w:-]+)\}`([^`]*)`",
                  lambda m: f"${m.group(2)}$" if m.group(1) == "math" else m.group(2), text)


# --------------------------------------------------------------------------- Markdown
ROLE = re.compile(r"\{(?P<role>[a-z][\w:-]*)\}`(?P<body>[^`]+)`")
# a role, or a code span (left as it is)
TOKEN = re.compile(ROLE.pattern + r"|(?P<code>(?P<ticks>`+).+?(?<!`)(?P=ticks)(?!`))", re.S)
FENCE = re.compile(r"^(?P<fence>```+|~~~+|:::+)(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$\n?",
                   re.S | re.M)
ADMONITIONS = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger",
               "error", "seealso", "admonition"}


class Renderer:
    """MyST Markdown -> Markdown that Colab and Jupyter render (links to the published book)."""

    def __init__(self, cfg: dict, root: pathlib.Path = ROOT):
        self.base = pages_url(cfg)
        self.bib = Bibliography(root / "references.bib")
        self.book = Book(root)

    def page(self, doc: str, anchor: str = "") -> str:
        return f"{self.base}{doc}.html" + (f"#{anchor}" if anchor else "")

    def cite(self, role: str, body: str, where: str) -> str:
        keys = [k.strip() for k in body.split(",") if k.strip()]
        for k in keys:
            if k not in self.bib.entries:
                raise ValueError(f"{where}: {{{role}}}`{body}`: {k!r} is not in references.bib")
        refs = self.page("book/references")
        mode = role.split(":", 1)[1] if ":" in role else "p"
        full = mode in ("ts", "ps")
        if mode in ("t", "ts"):
            return ", ".join(f"[{self.bib.authors(k, full)} ({self.bib.year(k)})]({refs})" for k in keys)
        if mode in ("p", "ps"):
            return "(" + "; ".join(f"[{self.bib.authors(k, full)}, {self.bib.year(k)}]({refs})"
                                   for k in keys) + ")"
        if mode == "author":
            return ", ".join(self.bib.authors(k) for k in keys)
        if mode == "year":
            return ", ".join(f"[{self.bib.year(k)}]({refs})" for k in keys)
        raise ValueError(f"{where}: unsupported citation role {{{role}}}")

    def xref(self, role: str, body: str, here: str, where: str) -> str:
        m = re.fullmatch(r"(?s)(?P<text>.*?)\s*<(?P<target>[^<>]+)>", body.strip())
        text, target = (m.group("text"), m.group("target")) if m else (None, body.strip())
        if role == "doc":
            doc = target.lstrip("/") if target.startswith("/") else \
                str(pathlib.PurePosixPath(here).parent / target)
            doc = doc[:-3] if doc.endswith((".md", ".ipynb")) else doc
            if doc not in self.book.titles:
                raise ValueError(f"{where}: {{doc}}`{body}`: no document {doc}")
            return f"[{text or self.book.titles[doc]}]({self.page(doc)})"
        if target not in self.book.labels:
            raise ValueError(f"{where}: {{{role}}}`{body}`: no label {target!r} in book/*.md")
        doc, ref_text, number = self.book.labels[target]
        if text is not None and role == "numref":
            bare = number.removeprefix("Fig. ")
            text = text.replace("{number}", bare).replace("%s", bare)
        if text is None:
            text = self.plain(ref_text, here, where) if role == "ref" else number
        return f"[{text}]({self.page(doc, target)})"

    def plain(self, text: str, here: str, where: str) -> str:
        """Rendered text without links (to be the text of a link)."""
        return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", self.inline(text, here, where))

    def inline(self, text: str, here: str, where: str) -> str:
        def role(m):
            r, body = m.group("role"), m.group("body")
            if r == "cite" or r.startswith("cite:"):
                return self.cite(r, body, where)
            if r in ("doc", "ref", "numref", "eq"):
                return self.xref(r, body, here, where)
            if r == "math":
                return f"${body}$"
            raise ValueError(f"{where}: the MyST role {{{r}}} has no notebook rendering "
                             f"(tools/notebooks.py)")
        return TOKEN.sub(lambda m: m.group(0) if m.group("code") else role(m), text)

    def markdown(self, text: str, here: str, where: str) -> str:
        out, pos = [], 0
        for m in FENCE.finditer(text):
            out.append(self._prose(text[pos:m.start()], here, where))
            out.append(self._fence(m, here, where))
            pos = m.end()
        out.append(self._prose(text[pos:], here, where))
        return "".join(out).strip("\n")

    def _prose(self, text: str, here: str, where: str) -> str:
        text = re.sub(r"^\([\w.:-]+\)=[ \t]*\n", "", text, flags=re.M)      # (label)= targets
        text = re.sub(r"^%[^\n]*\n?", "", text, flags=re.M)                 # MyST comments
        text = re.sub(r"^(\$\$)[ \t]*\([\w.:-]+\)[ \t]*$", r"\1", text, flags=re.M)   # $$ (label)
        return re.sub(r"\n{3,}", "\n\n", self.inline(text, here, where))

    def _fence(self, m, here: str, where: str) -> str:
        info, body = m.group("info").strip(), m.group("body")
        d = re.match(r"\{(?P<name>[\w:-]+)\}\s*(?P<arg>.*)", info)
        if not d:
            return m.group(0)                                     # plain code block: unchanged
        name, arg = d.group("name"), d.group("arg")
        lines = body.splitlines()
        while lines and lines[0].startswith(":"):                 # directive options
            lines.pop(0)
        body = "\n".join(lines).strip("\n")
        if name == "math":
            return f"$$\n{body}\n$$\n"
        if name in ADMONITIONS:
            title = arg if name == "admonition" else name.capitalize() + (f": {arg}" if arg else "")
            inner = self.markdown(body, here, where)
            return "\n".join(["> **" + title + "**", ">"] + [f"> {ln}".rstrip() for ln in inner.splitlines()]) + "\n"
        raise ValueError(f"{where}: the MyST directive {{{name}}} has no notebook rendering "
                         f"(tools/notebooks.py)")


# --------------------------------------------------------------------------- notebooks
NBVAL = re.compile(r"^[ \t]*# *NBVAL_(?P<marker>[A-Z_]+)[ \t]*\n?", re.M)


def _cell_id(stem: str, kind: str, source: str, seen: dict) -> str:
    h = hashlib.sha1(f"{stem}\0{kind}\0{source}".encode()).hexdigest()[:8]
    seen[h] = seen.get(h, 0) + 1
    return h if seen[h] == 1 else f"{h}-{seen[h]}"


def _form(title: str, source: str) -> str:
    return f"# @title {title}\n{source}"


def n_asserts(source: str) -> int:
    return len(re.findall(r"^\s*assert\b", source, re.M))


def notebook(md: pathlib.Path, cfg: dict | None = None, renderer: Renderer | None = None,
             root: pathlib.Path = ROOT) -> nbformat.NotebookNode:
    """The Colab notebook of one chapter (see the module docstring)."""
    cfg = config(root) if cfg is None else cfg
    renderer = renderer or Renderer(cfg, root)
    here = f"book/{md.stem}"
    src = jupytext.read(md)
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "colab": {"toc_visible": True},
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    seen: dict = {}
    n_code = n_fig = 0
    for i, cell in enumerate(src.cells):
        where = f"{md.name}, cell {i}"
        if cell.cell_type == "markdown":
            text = renderer.markdown(cell.source, here, where)
            if text:
                nb.cells.append(nbformat.v4.new_markdown_cell(
                    text, id=_cell_id(md.stem, "md", text, seen)))
            continue
        if cell.cell_type != "code":
            continue
        n_code += 1
        tags = list(cell.metadata.get("tags", []))
        meta = {k: v for k, v in cell.metadata.items() if k != "tags"}
        source = cell.source
        for marker in NBVAL.findall(source):
            tag = "nbval-" + marker.lower().replace("_", "-")
            if tag not in tags:
                tags.append(tag)
        source = NBVAL.sub("", source)
        if n_code == 1 and is_install_cell(cell):
            spec = chapter_install_spec(cell.source)
            if spec is not None and spec != install_spec(cfg):
                raise ValueError(f"{where}: the install cell installs {spec!r}, but _config.yml "
                                 f"says {install_spec(cfg)!r}")
            source = install_cell_source(cfg)
            meta.update(cellView="form", jupyter={"source_hidden": True})
        elif "remove-cell" in tags:
            n = n_asserts(source)
            title = CHECK_TITLE.format(n=n, s="" if n == 1 else "s") if n else HIDDEN_TITLE
            source = _form(title, source)
            meta.update(cellView="form", jupyter={"source_hidden": True})
        if tags:
            meta["tags"] = tags
        nb.cells.append(nbformat.v4.new_code_cell(
            source, metadata=meta, id=_cell_id(md.stem, "code", source, seen)))
        caption = meta.get("mystnb", {}).get("figure", {}).get("caption")
        if caption:
            n_fig += 1                                  # numbered per chapter, as on the page
            text = f"**Fig. {n_fig}.** " + renderer.markdown(" ".join(str(caption).split()), here, where)
            nb.cells.append(nbformat.v4.new_markdown_cell(
                text, id=_cell_id(md.stem, "caption", text, seen),
                metadata={"sensbook": {"caption_of": nb.cells[-1].id}}))
    nbformat.validate(nb)
    return nb


def dumps(nb) -> str:
    return nbformat.writes(nb) + "\n"


def chapters(root: pathlib.Path = ROOT) -> list[pathlib.Path]:
    """The chapters with a Colab notebook: book/*.md with a jupytext header."""
    return sorted(p for p in (root / "book").glob("*.md")
                  if "jupytext" in p.read_text(encoding="utf-8")[:500])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="*", type=pathlib.Path)
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if any is stale")
    ap.add_argument("--root", type=pathlib.Path, default=ROOT, help="the book's root folder")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    cfg = config(root)
    renderer = Renderer(cfg, root)
    stale = []
    for md in [p.resolve() for p in args.chapters] or chapters(root):
        target = md.with_suffix(".ipynb")
        text = dumps(notebook(md, cfg, renderer, root))
        if not (target.exists() and target.read_text(encoding="utf-8") == text):
            stale.append(target)
            if not args.check:
                target.write_text(text, encoding="utf-8")
                print(f"wrote {target.relative_to(root)}")
        if not args.check:
            _older_than(target, md)
    if args.check and stale:
        print("out of date (run `make sync`): " + ", ".join(str(p.relative_to(root)) for p in stale))
        return 1
    return 0


def _older_than(target: pathlib.Path, md: pathlib.Path) -> None:
    """Date the notebook a second before its source. The chapters still declare the jupytext
    pairing `formats: ipynb,md:myst`, and `jupytext --sync` takes its input cells from the newer
    file of a pair: a newer generated notebook would be copied back over the source."""
    src = md.stat()
    if target.stat().st_mtime_ns >= src.st_mtime_ns:
        os.utime(target, ns=(src.st_atime_ns, src.st_mtime_ns - 1_000_000_000))


if __name__ == "__main__":
    sys.exit(main())
