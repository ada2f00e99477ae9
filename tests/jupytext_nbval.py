"""pytest plugin: run the MyST-Markdown (jupytext) chapters in book/ with nbval.

nbval collects only .ipynb; this reads each chapter's .md with jupytext and hands the notebook
to nbval, so the chapter sources themselves are what CI executes (the paired .ipynb is checked
to hold the same code by tests/test_chapters.py).
"""
from unittest import mock

import jupytext
from nbval import plugin as nbval_plugin


def _is_jupytext_notebook(path):
    head = path.read_text(encoding="utf-8")[:2000]
    return "jupytext" in head and "kernelspec" in head


class JupytextNbFile(nbval_plugin.IPyNbFile):
    def collect(self):
        nb = jupytext.read(str(self.path))
        with mock.patch.object(nbval_plugin.nbformat, "read", return_value=nb):
            items = list(super().collect())
        yield from items


def pytest_collect_file(file_path, parent):
    opt = parent.config.option
    if (getattr(opt, "nbval", False) or getattr(opt, "nbval_lax", False)) and file_path.suffix == ".md" \
            and "book" in file_path.parts and _is_jupytext_notebook(file_path):
        return JupytextNbFile.from_parent(parent, path=file_path)
