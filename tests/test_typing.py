"""The type hints agree with the documentation (issue 37 item 7): mypy accepts the README's and
chapter 8's code as written. Runs where mypy is installed (it is not a dependency of the
book: `pip install mypy` to run it; about two minutes of CPU without a cache)."""
import pathlib
import re
import subprocess
import sys

import jupytext
import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: Names the README's snippets leave to the reader (their own models).
HEADER = """from typing import Any
import torch
import sensbook as sb
bert: torch.nn.Module
net: torch.nn.Module
model: Any
cls_id: int
fitted_estimator: Any
"""
#: Calls the API reference documents on any classifier (mypy rejected the first three on an
#: adapter when they were hinted ``Recognizer``).
DOCUMENTED = """
documented_adapter = sb.TorchClassifier(net)
multi_token = sb.TorchClassifier(net, tokens=((3, 5), (4, 6)), prefix=[2])  # words of 2 ids
x = sb.strings(4)
sb.output_table(documented_adapter, 4)
sb.exhaustive_influence(documented_adapter, 4)
sb.flip_influence(documented_adapter, x)
sb.accuracy(documented_adapter, sb.PARITY, 4)
sb.min_margin(documented_adapter, x)
sb.top_hessian_eigenvalue(documented_adapter, sb.PARITY, x)
sb.agreement(documented_adapter, sb.PARITY, 4)
prof = sb.sensitivity_profile(sb.SklearnClassifier(fitted_estimator), 4)
lo, hi = prof.interval()
same: bool = sb.Profile.from_dict(prof.to_dict()) == prof
"""


def snippets() -> str:
    readme = ROOT.joinpath("README.md").read_text()
    code = [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", readme, re.S | re.M)]
    nb = jupytext.read(ROOT / "book" / "ch8_own_model.md")
    for c in nb.cells:
        if c.cell_type == "code" and "%pip" not in c.source:
            code.append(c.source)
    return HEADER + DOCUMENTED + "\n".join(code)


def test_mypy_accepts_the_documented_calls(tmp_path):
    src = tmp_path / "documented.py"
    src.write_text(snippets())
    (tmp_path / "mypy.ini").write_text(
        f"[mypy]\nmypy_path = {ROOT}\nfollow_imports = silent\nignore_missing_imports = True\n"
        "[mypy-transformers.*]\nfollow_imports = skip\n"
        "[mypy-sklearn.*]\nfollow_imports = skip\n")
    out, err, rc = mypy_api.run([str(src), "--config-file", str(tmp_path / "mypy.ini"),
                                 "--python-executable", sys.executable,
                                 "--cache-dir", str(tmp_path / "cache")])
    errors = [ln for ln in out.splitlines() if "error:" in ln]
    assert not errors, "\n".join(errors)
