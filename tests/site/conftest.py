"""Fixtures for the checks of the built HTML book in _build/html (`make site-test`).

The site is served by a stdlib HTTP server on 127.0.0.1 (a free port) and opened in Debian's
Chromium through Playwright (`playwright install` is never run: no browser is downloaded).
Without a build these tests skip, unless SENSBOOK_SITE_REQUIRED=1 (as `make site-test` sets),
in which case they fail.
"""
from __future__ import annotations

import functools
import http.server
import os
import pathlib
import re
import subprocess
import threading

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "site-test" / "screenshots"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
CHROMIUM = os.environ.get("SENSBOOK_CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("SENSBOOK_SITE_REQUIRED") == "1"


def _missing(why: str):
    if REQUIRED:
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def toc_docnames() -> list[str]:
    """Every document of the book, in reading order (root first)."""
    names = [TOC["root"]]
    stack = list(TOC.get("chapters", [])) + [e for p in TOC.get("parts", []) for e in p.get("chapters", [])]
    while stack:
        entry = stack.pop(0)
        if "file" in entry:
            names.append(entry["file"])
        stack[:0] = entry.get("sections", [])
    return names


def html_pages() -> list[str]:
    """Every HTML page of the built site, relative to _build/html (theme templates excluded)."""
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                  if not p.relative_to(HTML).parts[0].startswith(("_", ".")))


def source_of(page: str) -> pathlib.Path | None:
    """The book source (.md) a page was built from, if any."""
    doc = page[: -len(".html")]
    if doc in toc_docnames():
        src = ROOT / f"{doc}.md"
        return src if src.exists() else None
    return None


def prose_of(text: str) -> str:
    """A MyST source without its YAML header, code cells, fenced code blocks and code spans."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = re.sub(r"^(```+|~~~+)(?!\{math\})[^\n]*\n.*?^\1\s*$", "", text, flags=re.S | re.M)
    return re.sub(r"(?<!\})`[^`\n]*`", "", text)       # keeps roles such as {math}`x`


# Raw pipe-table text (a Markdown table that was not rendered as a table): a separator row such
# as |---|:--:| (smart quotes turn --- into an em dash on a page), or a line that starts and ends
# with | and has at least three.
_SEPARATOR = re.compile(r"(?:\|[ \t]*:?(?:-{3,}|[\u2013\u2014]+-*):?[ \t]*)+\|")
_ROW = re.compile(r"^[ \t]*\|(?:[^|\n]*\|){2,}[ \t]*$", re.M)


def raw_tables(text: str) -> list[str]:
    """The raw pipe-table fragments of a page's visible text (code inputs taken out)."""
    found = [m.group(0) for m in _SEPARATOR.finditer(text)] + [m.group(0).strip() for m in _ROW.finditer(text)]
    return [f[:120] for f in found]


# Visible text of a page without what may legitimately hold pipes: code inputs, inline code,
# math (typeset or not). Removes those elements: call it last.
VISIBLE_PROSE_JS = """(skip) => {
  document.querySelectorAll(skip).forEach(e => e.remove());
  return document.body.innerText;
}"""


def tracked_files() -> set[str] | None:
    """Files committed in the repository (None when this is not a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return set(out.decode().split("\0")) - {""}


@pytest.fixture(scope="session")
def site() -> pathlib.Path:
    if not (HTML / "index.html").exists():
        _missing("no built site in _build/html: run `make book-ci` (or `make book`) first")
    return HTML


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def base_url(site):
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser(site):
    if not os.access(CHROMIUM, os.X_OK):
        _missing(f"no Chromium at {CHROMIUM} (`make chromium` installs Debian's package)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (it is in requirements.txt)")
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()
