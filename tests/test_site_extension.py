"""The book's Sphinx extension (tools/sensbook_site.py), parts that need no built site."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Executes a one-cell notebook as myst-nb does (jupyter_cache's single_nb_execution), after the
# extension's set-up when argv[1] is "extension"; the kernel's stderr is this process's.
RUN = """
import sys
sys.path.insert(0, {tools!r})
import nbformat
if sys.argv[1] == "extension":
    import sensbook_site
    sensbook_site._encrypted_kernels()
from myst_nb.core.execute.direct import single_nb_execution
nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("6 * 7")])
nb.metadata["kernelspec"] = {{"name": "python3", "display_name": "Python 3", "language": "python"}}
r = single_nb_execution(nb, cwd={tools!r}, timeout=120, allow_errors=False)
assert r.err is None, r.exc_string
print(nb.cells[0].outputs[0]["data"]["text/plain"])
"""


def test_the_build_kernels_are_encrypted_and_say_nothing_about_plain_tcp():
    """Issue 39: every notebook of `make book` logged "Kernel is running over TCP without
    encryption"; the build's kernels now use CurveZMQ, and the log is quiet."""
    def run(how):
        p = subprocess.run([sys.executable, "-c", RUN.format(tools=str(ROOT / "tools")), how],
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0 and p.stdout.strip() == "42", p.stderr
        return p.stderr

    assert "without encryption" in run("plain")        # what this jupyter_client/ipykernel do
    assert "without encryption" not in run("extension")


def test_a_cached_chapter_is_written_to_jupyter_execute_with_its_outputs(tmp_path):
    """`make book` renders from the cache tools/execute.py fills; myst-nb's cache client merges
    the outputs into a copy and writes the original, empty, to _build/jupyter_execute/ (what
    tests/site/test_colab.py checks a reader's front end against). With the extension the
    notebook myst-nb writes is the executed one."""
    import copy
    import logging

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from myst_nb.core.config import NbParserConfig
    from myst_nb.core.execute.cache import NotebookClientCache

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import sensbook_site
    finally:
        sys.path.remove(str(ROOT / "tools"))
    src = tmp_path / "chapter.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# A"),
                                         nbformat.v4.new_code_cell("6 * 7")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, src)
    done = copy.deepcopy(nb)
    done.cells[1].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "42"},
                                                    execution_count=1)]
    cache = get_cache(str(tmp_path / "cache"))
    cache.cache_notebook_bundle(CacheBundleIn(done, str(src)), check_validity=False)
    config = NbParserConfig(execution_mode="cache", execution_cache_path=str(tmp_path / "cache"))

    def rendered():
        mine = copy.deepcopy(nb)
        with NotebookClientCache(mine, src, config, logging.getLogger("t")) as client:
            shown = client.notebook.cells[1].outputs
        return shown, mine.cells[1].outputs

    shown, written = rendered()
    assert shown and shown[0]["data"]["text/plain"] == "42" and written == []   # myst-nb alone
    sensbook_site._cached_outputs_written()
    sensbook_site._cached_outputs_written()                                  # idempotent
    shown, written = rendered()
    assert shown[0]["data"]["text/plain"] == "42" and written == shown
