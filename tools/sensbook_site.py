"""Sphinx extension (listed under `sphinx.local_extensions` in _config.yml) for the offline book.

- On start-up it makes sure the self-hosted MathJax and widget JavaScript are in _site_assets/
  (tools/site_assets.py; a no-op once fetched), so any `jupyter-book build .` is offline-complete.
- After the build it deletes JavaScript/CSS source maps (*.map) that the theme ships: browsers
  fetch them only with developer tools open, and they would add megabytes to the site.
"""
from __future__ import annotations

import pathlib

import site_assets


def _ensure_assets(app, config):
    site_assets.site_assets()


def _drop_source_maps(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for p in pathlib.Path(app.outdir).rglob("*.map"):
        p.unlink()


def setup(app):
    app.connect("config-inited", _ensure_assets)
    app.connect("build-finished", _drop_source_maps)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
