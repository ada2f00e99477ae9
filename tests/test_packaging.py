"""Issue 29: what a researcher installs from a clone (not editable) is the whole package, typed
and licensed, and its metadata points at the one repository setting."""
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "sensbook", src / "sensbook", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(out), str(src)], check=True,
                   capture_output=True)
    return zipfile.ZipFile(next(out.glob("sensbook-*.whl")))


def test_the_wheel_holds_every_module_the_license_and_py_typed(wheel):
    names = set(wheel.namelist())
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "sensbook").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    assert "sensbook/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    meta = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in meta and "Author: " in meta
    assert "Classifier: Typing :: Typed" in meta


def test_the_project_urls_follow_the_repository_setting(wheel):
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    meta = wheel.read(next(n for n in wheel.namelist() if n.endswith("METADATA"))).decode()
    urls = [ln.split(", ", 1)[1] for ln in meta.splitlines() if ln.startswith("Project-URL: ")]
    assert f"{url}" in urls and f"{url}/issues" in urls
    owner, repo = url.rstrip("/").split("/")[-2:]
    assert f"https://{owner.lower()}.github.io/{repo}/" in urls


def test_the_book_is_built_from_one_resolution():
    """make installs requirements.txt with the constraints file, which pins every package."""
    make = (ROOT / "Makefile").read_text()
    assert "-c constraints.txt -r requirements.txt" in make
    pins = [ln for ln in (ROOT / "constraints.txt").read_text().splitlines()
            if ln.strip() and not ln.startswith("#")]
    assert pins and all("==" in ln for ln in pins)
    names = {ln.split("==")[0].lower() for ln in pins}
    assert {"torch", "jupyter-book", "numpy", "scipy", "transformers", "scikit-learn"} <= names
