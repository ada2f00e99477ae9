"""Sphinx extension (listed under `sphinx.local_extensions` in _config.yml) for the offline book.

- On start-up it makes sure the self-hosted MathJax and widget JavaScript are in _site_assets/
  (tools/site_assets.py; a no-op once fetched), so any `jupyter-book build .` is offline-complete.
- It drops duplicate inline scripts from each page: sphinx-thebe's configuration script is added
  twice under Jupyter Book 1.x, which declares `const THEBE_JS_URL` twice and raises a console
  error on every page.
- After the build it deletes JavaScript/CSS source maps (*.map) that the theme ships: browsers
  fetch them only with developer tools open, and they would add megabytes to the site.
"""
from __future__ import annotations

import pathlib

import site_assets


def _ensure_assets(app, config):
    site_assets.site_assets()


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


def _drop_source_maps(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for p in pathlib.Path(app.outdir).rglob("*.map"):
        p.unlink()


def setup(app):
    app.connect("config-inited", _ensure_assets)
    app.connect("html-page-context", _dedupe_scripts, priority=900)   # after the others add theirs
    app.connect("build-finished", _drop_source_maps)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
