"""Internal links of the built site (no network): every local href/src resolves to a file of
_build/html, every #fragment to an id on the target page, and no page loads a script, style
sheet or image from outside the site (it must work offline)."""
from __future__ import annotations

import html.parser
import pathlib
from urllib.parse import unquote, urlsplit

import pytest

from .conftest import html_pages

PAGES = html_pages()
LOADED = {("script", "src"), ("link", "href"), ("img", "src"), ("source", "src"), ("iframe", "src"),
          ("video", "src"), ("audio", "src"), ("embed", "src")}


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id",) + (("name",) if tag == "a" else ()):
            if a.get(key):
                self.ids.add(a[key])
        for attr in ("href", "src"):
            if a.get(attr) is not None and not (tag == "link" and attr == "href" and a.get("rel") in (
                    "canonical", "alternate")):
                self.links.append((tag, attr, a[attr]))


_cache: dict[pathlib.Path, _Page] = {}


def parse(path: pathlib.Path) -> _Page:
    if path not in _cache:
        p = _Page()
        p.feed(path.read_text(encoding="utf-8", errors="replace"))
        _cache[path] = p
    return _cache[path]


@pytest.mark.parametrize("rel", PAGES)
def test_internal_links_resolve(rel, site):
    page_path = site / rel
    problems = []
    for tag, attr, value in parse(page_path).links:
        parts = urlsplit(value)
        if parts.scheme in ("http", "https") or value.startswith("//"):
            if (tag, attr) in LOADED:
                problems.append(f"<{tag} {attr}> loads from outside the site: {value}")
            continue
        if parts.scheme in ("mailto", "javascript", "data", "tel") or value == "":
            continue
        target = page_path if parts.path == "" else (page_path.parent / unquote(parts.path)).resolve()
        if target.is_dir():
            target = target / "index.html"
        if site.resolve() not in target.resolve().parents and target.resolve() != site.resolve():
            problems.append(f"<{tag} {attr}> points outside the site: {value}")
            continue
        if not target.exists():
            problems.append(f"<{tag} {attr}> broken: {value}")
            continue
        if parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in parse(target).ids:
            problems.append(f"<{tag} {attr}> missing anchor: {value}")
    assert not problems, "\n".join([rel] + problems)
