"""Every scale a reader can choose builds, and its sizes and grids can carry the chapters'
claims (issue 46: `SENSBOOK_SCALE=paper` failed on the first page, because the intro's sigma
grid stopped above PARITY's sigma* at N = 12, and nothing checked the `paper` sizes).

Without computing the experiments: every experiment's configurations are built at every scale,
and the asserts that depend only on sizes and grids are evaluated on them: the basin's sigma
grid brackets sigma* at every length run (what the intro and ch5_basins assert), and the
length lists the chapters index hold the cases they index.
"""
import json
import math
import pathlib

import numpy as np
import pytest

import sensbook as sb
from sensbook.experiments import ch5, registry

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCALES = ("ci", "book", "paper")
EXPERIMENTS = sorted(registry())


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_builds_its_configurations_at_every_scale(name, scale):
    """Configurations built (not run) at each scale: a non-empty JSON-able list with a finite,
    positive predicted cost each, so `sensbook list` and the banner can state the cost."""
    exp = registry()[name]
    configs = exp.configs(scale)
    assert configs, f"{name} @ {scale}: no configurations"
    json.dumps(configs)
    costs = [exp.cost(c) for c in configs]
    assert all(math.isfinite(c) and c > 0 for c in costs), (name, scale)


@pytest.fixture(scope="module")
def sigma_star_at_4():
    """sigma* of the PARITY and hard-FIRST constructions at N = 4 (all 16 strings, 32 copies
    per sigma, on the paper grid): one small measurement to extrapolate the grid check from."""
    sig = ch5.basin_sigmas("paper")
    out = {}
    for name, model, f in (("PARITY", sb.parity_transformer(), sb.PARITY),
                           ("FIRST_HARD", sb.first_hard_transformer(), sb.FIRST)):
        r = sb.basin_curve(model, f, 4, sig, 32, seed=4, progress=False)
        out[name] = sb.critical_sigma(sig, r["p_exact"])
    assert all(np.isfinite(v) for v in out.values()), out
    return out


@pytest.mark.parametrize("scale", SCALES)
def test_the_basin_grid_brackets_sigma_star_at_every_length(scale, sigma_star_at_4):
    """The intro and ch5_basins assert sigma* is defined (every curve crosses 1/2 inside the
    grid) at every N run. PARITY's sigma* is extrapolated from N = 4 by the heuristic N^-2
    (steeper than measured: ch5_basins fits about N^-1.3), so the grid must reach a grid step
    below that at the longest length; the hard FIRST's (flat in N) a grid step above."""
    for sig, N_max in ((ch5.basin_sigmas(scale), max(ch5.basin_lengths("PARITY", scale))),
                       (ch5.intro_basin_sigmas(scale), max(ch5.intro_basin_sizes(scale)["Ns"]))):
        step = sig[1] / sig[0]
        parity_low = sigma_star_at_4["PARITY"] * (4 / N_max) ** 2
        assert sig[0] * step < parity_low, (scale, sig[0], parity_low)
        assert sig[-1] > step * sigma_star_at_4["FIRST_HARD"], (scale, sig[-1])
    # the old intro grid (logspace(-3, 0, 10)) stopped above it at paper's N = 12
    assert not 1e-3 * 10 ** (1 / 3) < sigma_star_at_4["PARITY"] * (4 / 12) ** 2


@pytest.mark.parametrize("scale", SCALES)
def test_the_length_lists_hold_what_the_chapters_index(scale):
    """ch5_basins fits a power of N per construction (a t interval: at least 3 lengths, the
    same count for each, MAJORITY's odd), compares the hard FIRST with the uniform one at a
    length both ran, and the intro plots PARITY and the hard FIRST at the same lengths."""
    Ns = {n: ch5.basin_lengths(n, scale) for n in ("PARITY", "FIRST", "MAJORITY", "FIRST_HARD")}
    assert len(Ns["PARITY"]) >= 3 and len({len(Ns[n]) for n in ("PARITY", "FIRST", "MAJORITY")}) == 1
    assert all(N % 2 for N in Ns["MAJORITY"])
    assert [N for N in Ns["FIRST_HARD"] if N in Ns["FIRST"]], Ns
    assert set(ch5.sizes("basin", scale)["Ns"]) <= set(Ns["FIRST_HARD"]) & set(Ns["PARITY"])
    # the pieces cover the whole grid for each (construction, N) the intro plots; at ci and
    # book they are ch5.basin's own configurations (the same keys), at paper fewer
    sig = list(ch5.intro_basin_sigmas(scale))
    configs = registry()["ch5.intro_basin"].configs(scale)
    assert len(ch5.intro_basin_sizes(scale)["Ns"]) >= 3
    for name in ("PARITY", "FIRST_HARD"):
        for N in ch5.intro_basin_sizes(scale)["Ns"]:
            got = sorted(s for c in configs if (c["kind"], c["name"], c["N"]) ==
                         ("uniform", name, N) for s in c["sigmas"])
            assert got == sig, (scale, name, N)
    if scale != "paper":
        assert all(c in registry()["ch5.basin"].configs(scale) for c in configs)



def test_the_intro_banner_states_its_paper_cost(tmp_path, monkeypatch):
    """The intro's first output at `paper` scale, with nothing stored: what it reads and its
    predicted cost, minutes (on main the intro named no experiment and computed 174 s
    unannounced; then it read ch5.basin, hours at paper). The Colab test runs it
    (tests/colab/test_run.py::test_the_intro_at_paper_scale)."""
    import re

    names = _banner_names("intro.md")
    assert names == ["ch5.intro_basin"], names
    monkeypatch.setenv("SENSBOOK_RESULTS", str(tmp_path))
    monkeypatch.setenv("SENSBOOK_PUBLISHED", "0")
    monkeypatch.setenv("SENSBOOK_SCALE", "paper")
    sb.set_scale(None)
    try:
        text = sb.banner(*names)
    finally:
        monkeypatch.setenv("SENSBOOK_SCALE", "ci")
        sb.set_scale(None)
    exp = registry()["ch5.intro_basin"]
    assert f"0 stored here, {len(exp.configs('paper'))} to compute: about " in text, text
    m = re.search(r"about ([\d.]+) (s|min)\b", text)
    assert m, text
    secs = float(m.group(1)) * (60 if m.group(2) == "min" else 1)
    rounding = 30 if m.group(2) == "min" else 0.5                 # the banner's last digit
    assert abs(secs - exp.predicted_seconds("paper")) <= rounding + 0.05 * secs
    assert exp.predicted_seconds("paper") < 600
    assert "too long for one notebook session" not in text


def test_a_colab_refusal_shows_its_message_alone():
    """Issue 46: `paper`-scale refusals arrived as a 6-frame traceback; IPython (a notebook's
    kernel, in its own process here) shows the refusal's message alone."""
    import subprocess
    import sys

    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "from sensbook.experiments import TooLongForColab\n"
            "sh = InteractiveShell.instance()\n"
            "sh.user_ns['TooLongForColab'] = TooLongForColab\n"
            "sh.run_cell('def deep():\\n    raise TooLongForColab(\\'ch9.x: about 20 h\\')\\n'\n"
            "            'def call():\\n    deep()\\ncall()')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    text = out.stdout + out.stderr
    assert "TooLongForColab: ch9.x: about 20 h" in text, text
    assert "deep()" not in text and "Traceback" not in text, text


def _banner_names(md):
    import re

    src = (ROOT / "book" / md).read_text(encoding="utf-8")
    (args,) = re.findall(r"sb\.banner\(([^)]*)\)", src)
    return re.findall(r'"([\w.]+)"', args)


@pytest.mark.parametrize("scale", SCALES)
def test_the_box_scan_holds_the_cells_ch3_score_range_indexes(scale):
    """ch3_score_range reads the scan at B = 1 with and without the mark, at both eps of
    ch3.EPS, and compares its longest N with the unmarked construction's lengths 8..4096."""
    from sensbook.experiments import ch3

    box = ch3.BOX[scale]
    assert 1.0 in box["B"] and 1.0 in box["unmarked"], box
    assert set(ch3.EPS) <= set(box["eps"]), box
    assert max(box["Ns"]) in 2 ** np.arange(3, 13), box
    cells = {(c["B"], c["eps"], c["N"], c["mark_first"])
             for c in registry()["ch3.box_scan"].configs(scale)}
    for e in ch3.EPS:
        for mark in (True, False):
            assert {(1.0, e, N, mark) for N in box["Ns"]} <= cells, (scale, e, mark)
