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
