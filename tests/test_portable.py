"""tools/portable.py (`make book-portable`, issue 43): the kernel paths it runs are the ones
torch really runs, each with its own store; bad arguments are named."""
import importlib.util
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("portable", ROOT / "tools" / "portable.py")
portable = importlib.util.module_from_spec(spec)
sys.modules["portable"] = portable
spec.loader.exec_module(portable)


def test_the_paths_offered_are_the_ones_torch_runs():
    """'default' (no vector kernels) is offered everywhere, and so is this process's own path;
    each path's environment makes torch report that path, with a store of its own."""
    have = portable.offered("ci")
    assert "default" in have
    assert torch.backends.cpu.get_cpu_capability().lower() in have + ["zvector", "vsx"]
    stores = set()
    for p in have:
        env = portable.env_for(p, "ci")
        assert portable.capability(env) == p
        stores.add(env["SENSBOOK_RESULTS"])
        assert env["SENSBOOK_SCALE"] == "ci" and p in env["SENSBOOK_RESULTS"]
    assert len(stores) == len(have)


def test_a_path_whose_kernels_die_is_not_offered(monkeypatch):
    """A path torch reports but cannot run (avx512 on an AVX2-only CPU: an illegal
    instruction at the first softmax) is not offered; here the probe is made to die as that
    one does, by a signal, under one path."""
    probe = portable.PROBE
    monkeypatch.setattr(portable, "PROBE", "import os, signal\n"
                        "if os.environ['ATEN_CPU_CAPABILITY'] == 'default':\n"
                        "    os.kill(os.getpid(), signal.SIGILL)\n" + probe)
    assert portable.capability(portable.env_for("default", "ci")) is None
    assert "default" not in portable.offered("ci")


def test_a_torch_that_dies_on_its_own_path_is_an_error_not_a_pass(monkeypatch, capsys):
    """Every path's probe dying (a broken torch) must not leave portable-ci checking no path
    and passing."""
    monkeypatch.setattr(portable, "PROBE", "import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    with pytest.raises(SystemExit):
        portable.main(["--scale", "ci", "--chapters", "ch1_sensitivity"])
    assert "even on its own path" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [(["--paths", "sse9"], "not offered here"),
                                           (["--chapters", "ch99_none"], "no book/ch99_none.md")])
def test_bad_arguments_are_named(args, message, capsys):
    with pytest.raises(SystemExit):
        portable.main(["--scale", "ci", *args])
    assert message in capsys.readouterr().err
