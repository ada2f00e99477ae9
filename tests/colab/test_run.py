"""Every committed notebook, run as a reader runs it in Colab (`make colab-test`, part of `make
test`): a fresh Colab-like runtime (tests/colab/conftest.py: Colab's ipywidgets, numpy,
matplotlib, IPython and ipykernel, this machine's torch), a clean working folder, the install
cell pointed at the checkout, a published store on 127.0.0.1, executed top to bottom by nbclient
at ``ci`` scale. Then the notebook's first lines are held to what happened:

* the install cell installed ``sensbook`` from the checkout, once;
* the banner names exactly the experiments the notebook read (its ``[name @ scale: ...]`` lines),
  and every experiment whose results arrived in the store during the run; its counts are those
  of the run: stored here, fetched from the published store, computed now; these are also the
  counts the test put there (a third each);
* the predicted computing time is within a factor :data:`TIME_FACTOR` of the CPU seconds the
  computed configurations took (their stored ``cpu_seconds``), once it is long enough to time;
* the kernels start with Colab's default thread count (:data:`COLAB_THREADS`), not one: the
  notebook's first output sets one thread and says so (the book's small matrices are fastest
  so), torch must still have one after Run all, and the configurations the notebook computed
  must have run in one thread (the cost models are one-thread CPU seconds);
* no cell writes to stderr (the pages drop stderr; a Colab reader sees it);
* no output holds a raw Python repr: numpy scalars, dicts, numpy arrays (issue 46; the check
  of the built pages, tests/site/test_outputs.py, on the notebook's outputs);
* every progress bar belongs to a cell that ran for at least ``PROGRESS_DELAY`` seconds, and
  none is left in an output once it finished (it empties its display: issue 46);
* each explorer's controls (``interact``'s widgets that are not ``fixed``) are exactly the grid
  its ``sb.explore`` call gives;
* every widget callback runs at its slowest setting (sliders at their maximum, every option of
  every menu) in the same kernel; the CPU seconds of the slowest call must stay within
  :data:`WIDGET_SECONDS` (the book's target is about one second per event).

What it measured is written to ``_build/colab-run/<notebook>.json`` (timings, counts).
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import time

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from ..site.test_outputs import notebook_reprs
from .conftest import ROOT, SCALE, fresh_runtime, kernel_spec, seed_local_store, share

NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))   # the chapters and the introduction
REPORT = ROOT / "_build" / "colab-run"
#: torch's thread count in a Colab runtime (two vCPUs): the kernels here start with it.
COLAB_THREADS = 2
#: Predicted and measured computing time may differ by this factor (the cost models are fitted
#: on ci runs of one thread, and configurations compute in one thread; the machine may be busy).
TIME_FACTOR = 4.0
#: Predictions below this many seconds are not timed (import and first-call overheads dominate).
TIME_FLOOR = 5.0
#: The most CPU seconds one widget event may take at its slowest setting (target: about 1 s).
WIDGET_SECONDS = 2.5

BANNER = re.compile(r"this notebook reads \d+ experiments? \((?P<n>\d+) configurations at this "
                    r"scale\): (?P<names>[\w., ]+)\n(?P<here>\d+) stored here(?:, (?P<site>\d+) "
                    r"in the published store \([^)]*\))?, (?P<todo>\d+) to compute: "
                    r"(?:about (?P<t>[\d.]+) (?P<unit>s|min|h)|nothing to compute)")
READ = re.compile(r"\[(?P<name>[\w.]+) @ (?P<scale>\w+): (?P<n>\d+) configurations, (?P<here>\d+) "
                  r"read from the store, (?:(?P<site>\d+) from the published store \([^)]*\), )?"
                  r"(?P<new>\d+) computed now\]")
UNIT = {"s": 1, "min": 60, "h": 3600}

# Runs in the notebook's kernel after its last cell: each interact() widget's callback at every
# combination of its controls' slowest values. Prints one JSON line.
PROBE = r'''
import itertools as _it, json as _json, time as _time
import ipywidgets as _w, matplotlib.pyplot as _plt
def _slowest(c):
    if isinstance(c, _w.fixed) or not isinstance(c, _w.ValueWidget):
        return [c.value]
    if isinstance(c, _w.SelectionSlider):
        return [c._options_values[-1]]
    if hasattr(c, "_options_values"):
        return list(c._options_values)
    if isinstance(c, _w.Checkbox):
        return [False, True]
    if isinstance(c, _w.FloatLogSlider):
        return [c.base ** c.max]
    return [c.max] if hasattr(c, "max") else [c.value]
import torch as _torch
_threads_after_run = _torch.get_num_threads()
_found = getattr(_w.Widget, "widgets", None) or getattr(_w.widgets.widget, "_instances", {})
_out = []
for _iw in [w for w in list(_found.values()) if isinstance(w, _w.interactive)]:
    _names = [c._kwarg for c in _iw.kwargs_widgets]
    _worst = (0.0, 0.0, None)
    for _vals in _it.product(*[_slowest(c) for c in _iw.kwargs_widgets]):
        _kw = dict(zip(_names, _vals))
        with _w.Output():
            _c, _t = _time.process_time(), _time.perf_counter()
            _iw.f(**_kw)
            _c, _t = _time.process_time() - _c, _time.perf_counter() - _t
        _plt.close("all")
        if _c > _worst[0]:
            _worst = (_c, _t, {k: repr(v) for k, v in _kw.items()})
    _out.append(dict(callback=_iw.f.__name__, cpu_s=round(_worst[0], 3),
                     controls=[c._kwarg for c in _iw.kwargs_widgets if not isinstance(c, _w.fixed)],
                     wall_s=round(_worst[1], 3), setting=_worst[2],
                     manual=bool(getattr(_iw, "manual", False)),
                     continuous=[getattr(c, "continuous_update", None) for c in _iw.kwargs_widgets]))
print("WIDGET-PROBE " + _json.dumps(dict(widgets=_out, threads=_threads_after_run)))
'''


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")


def _seconds(cell) -> float:
    t = cell.metadata.get("execution", {})
    a, b = t.get("iopub.execute_input"), t.get("shell.execute_reply")
    if not (a and b):
        return 0.0
    from datetime import datetime
    parse = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (parse(b) - parse(a)).total_seconds()


def _stderr(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream" and o.get("name") == "stderr")


def _records(results: pathlib.Path) -> dict:
    """{experiment: names of its stored records} of a results folder."""
    return {d.name: {p.name for p in d.glob("*.json")} for d in results.glob("*.*") if d.is_dir()}


def _explorers(cells) -> list:
    """``(function name, sorted control names)`` of each ``sb.explore(fn, name=values, ...)``
    call in the cells' source: the grid the reader is promised."""
    import ast

    found = []
    for cell in cells:
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:                         # a cell with shell or magic lines
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "explore" and node.args):
                fn = node.args[0]
                name = fn.id if isinstance(fn, ast.Name) else "<lambda>"
                found.append((name, sorted(k.arg for k in node.keywords
                                           if k.arg not in ("start", "live", "note"))))
    return sorted(found)


def _bars(cell) -> tuple:
    """Progress bars (shown, left) by a cell that makes no interact() (nor sb.explore(), which
    is interact in a kernel): a bar still in the outputs is a widget output; a finished one has
    emptied its display (sensbook.settings.progress), an empty text output."""
    if "interact" in cell.source or "sb.explore(" in cell.source:
        return 0, 0
    data = [o.get("data", {}) for o in cell.get("outputs", []) if o.get("output_type") ==
            "display_data"]
    left = sum("application/vnd.jupyter.widget-view+json" in d for d in data)
    return left + sum(d == {"text/plain": ""} for d in data), left


def test_there_are_committed_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("ipynb", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_in_a_colab_like_runtime_as_its_banner_says(
        ipynb, colab_venv, wheel, ci_store, published_site, chapters, tmp_path):
    from sensbook.experiments import get
    from sensbook.runtime.store import Store
    from sensbook.settings import PROGRESS_DELAY

    base, _ = published_site
    nb = nbformat.read(ipynb, as_version=4)
    install = next(c for c in nb.cells if c.cell_type == "code")
    assert re.search(r"spec = 'sensbook @ git\+https://[^']+'", install.source), install.source
    install.source = re.sub(r"spec = '[^']*'", f"spec = 'sensbook @ {wheel.as_uri()}'",
                            install.source)
    work = tmp_path / "content"                       # the clean working folder (Colab's)
    (work / "results").mkdir(parents=True)            # (seeded below when the session reads any)
    seed_local_store(ci_store, work / "results", chapters)
    seeded = _records(work / "results")
    runtime = fresh_runtime(colab_venv, tmp_path / "runtime")
    name = kernel_spec(runtime, tmp_path / "kernels")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SENSBOOK_", "COLAB_", "PYTHON", "VIRTUAL_ENV", "MPLBACKEND"))}
    env.update(SENSBOOK_SCALE=SCALE, SENSBOOK_PUBLISHED=base, COLAB_RELEASE_TAG="colab-like",
               OMP_NUM_THREADS=str(COLAB_THREADS), PYDEVD_DISABLE_FILE_VALIDATION="1")
    km = KernelManager(kernel_name=name,
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]))
    client = NotebookClient(nb, km=km, timeout=1200, resources={"metadata": {"path": str(work)}})
    t0 = time.perf_counter()
    with client.setup_kernel(env=env):
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, i)
        run_s = time.perf_counter() - t0
        probe = nbformat.v4.new_code_cell(PROBE)
        nb.cells.append(probe)
        client.execute_cell(probe, len(nb.cells) - 1)
    total_s = time.perf_counter() - t0
    probed = json.loads(_text(probe).split("WIDGET-PROBE ", 1)[1])
    widgets = probed["widgets"]
    nb.cells.pop()
    code = [c for c in nb.cells if c.cell_type == "code"]
    problems = []

    # the install cell installed the checkout's package
    if not _text(code[0]).startswith(f"installed sensbook ") or wheel.name not in _text(code[0]):
        problems.append(f"install cell printed {_text(code[0])!r}")

    # torch's threads: the runtime starts with Colab's; the banner sets one, and says so
    if probed["threads"] != 1 or " threads=1\n" not in _text(code[1]):
        problems.append(f"after Run all torch computes with {probed['threads']} threads (the "
                        f"runtime started with {COLAB_THREADS}); the banner said "
                        f"{_text(code[1]).splitlines()[:1]}")

    # nothing on stderr: warnings that are expected are silenced where they arise
    problems += [f"code cell {i} wrote to stderr: {_stderr(c)[:300]!r}"
                 for i, c in enumerate(code) if _stderr(c)]
    problems += [f"raw repr in {r}" for r in notebook_reprs(nb)]

    # the banner against the run
    text = "\n".join(_text(c) for c in code)
    m = BANNER.search(text)
    if m is None and "sb.banner()" in "\n".join(c.source for c in code):
        # a chapter that reads no stored experiment (its banner names none): it read none
        assert not READ.search(text), f"{ipynb.name} reads experiments its banner omits"
        assert f"sensbook scale={SCALE!r}" in text, f"{ipynb.name}: no scale line:\n{text[:500]}"
        assert not problems, problems
        return
    assert m, f"{ipynb.name}: no banner in the output:\n{text[:2000]}"
    named = [n.strip() for n in m["names"].split(",")]
    reads = {}
    for r in READ.finditer(text):
        assert r["scale"] == SCALE
        reads.setdefault(r["name"], r)              # an experiment read twice counts once
    if set(named) != set(reads):
        problems.append(f"banner names {sorted(named)}, the notebook read {sorted(reads)}")
    # every experiment whose results arrived in the store (fetched or computed) is in the banner,
    # whether or not the notebook printed a line for it (issue 39: a helper read one quietly)
    arrived = sorted(n for n, files in _records(work / "results").items()
                     if files - seeded.get(n, set()))
    if set(arrived) - set(named):
        problems.append(f"results of {sorted(set(arrived) - set(named))} arrived in the store "
                        f"during the run; the banner names {sorted(named)}")
    want = {"here": 0, "published": 0, "compute": 0}
    for n in named:
        for i in range(len(get(n).configs(SCALE))):
            want[share(i)] += 1
    got = {k: sum(int(r[k] or 0) for r in reads.values()) for k in ("here", "site", "new")}
    said = {k: int(m[k] or 0) for k in ("here", "site", "todo")}
    if (said["here"], said["site"], said["todo"]) != (want["here"], want["published"], want["compute"]):
        problems.append(f"banner says {said}, the stores held {want}")
    if (got["here"], got["site"], got["new"]) != (said["here"], said["site"], said["todo"]):
        problems.append(f"banner says {said}, the run read/fetched/computed {got}")
    if int(m["n"]) != sum(want.values()):
        problems.append(f"banner counts {m['n']} configurations, the experiments have {sum(want.values())}")

    # the predicted computing time against the CPU seconds of what was computed
    predicted = float(m["t"]) * UNIT[m["unit"]] if m["t"] else 0.0
    measured = wall = 0.0
    for n in named:
        e = get(n)
        store = Store(work / "results", n, e.sweep(SCALE).version)
        for i, c in enumerate(e.configs(SCALE)):
            if share(i) == "compute":
                rec = store.record(c)
                assert rec is not None and "published" not in rec["meta"], (n, c)
                measured += rec["meta"]["cpu_seconds"]
                wall += rec["meta"]["seconds"]
                if rec["meta"].get("threads") != 1:
                    problems.append(f"{n} {c}: computed with {rec['meta'].get('threads')} "
                                    "threads (the cost models are of one thread)")
    if max(predicted, measured) >= TIME_FLOOR and not (
            predicted / TIME_FACTOR <= measured <= predicted * TIME_FACTOR):
        problems.append(f"predicted {predicted:.1f} s of computing, measured {measured:.1f} CPU s")

    # progress bars only where the cell ran long enough to show one
    bars = [(i, *_bars(c), round(_seconds(c), 2)) for i, c in enumerate(code) if _bars(c)[0]]
    problems += [f"code cell {i}: {n} progress bar(s) in a cell of {s} s" for i, n, _, s in bars
                 if s < PROGRESS_DELAY]
    problems += [f"code cell {i}: {k} finished progress bar(s) left in its outputs"
                 for i, _, k, _ in bars if k]

    # widgets: each explorer's controls are exactly its grid (no slider for a parameter that
    # is no control: issue 39), one explorer per sb.explore call
    shown = sorted((w["callback"], sorted(w["controls"])) for w in widgets)
    if shown != _explorers(code):
        problems.append(f"the notebook's explorers have controls {shown}, its sb.explore calls "
                        f"grids {_explorers(code)}")

    # widgets: the slowest event
    problems += [f"widget {w['callback']}: {w['cpu_s']} CPU s at {w['setting']}" for w in widgets
                 if w["cpu_s"] > WIDGET_SECONDS]

    REPORT.mkdir(parents=True, exist_ok=True)
    (REPORT / f"{ipynb.stem}.json").write_text(json.dumps(dict(
        notebook=ipynb.name, scale=SCALE, run_seconds=round(run_s, 1),
        total_seconds=round(total_s, 1), experiments=named, banner=said,
        predicted_compute_s=predicted, measured_compute_cpu_s=round(measured, 2),
        measured_compute_wall_s=round(wall, 2), threads=COLAB_THREADS,
        progress_bars=bars, widgets=widgets,
        slowest_cells=sorted(((round(_seconds(c), 2), i) for i, c in enumerate(code)),
                             reverse=True)[:5]), indent=1) + "\n")
    assert not problems, "\n".join([ipynb.name] + problems)


def test_the_intro_at_paper_scale_up_to_its_first_check(colab_venv, wheel, tmp_path):
    """Issue 46: a reader sets `paper` (`SENSBOOK_SCALE=paper`) and runs the intro in a
    Colab-like runtime with nothing stored and nothing published (nothing is, at paper): the
    banner states what it computes and its cost (minutes: ``ch5.intro_basin``), and every cell
    up to and including the first check (the remove-cell whose asserts read the figure's data)
    runs without error or stderr."""
    ipynb = ROOT / "book" / "intro.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    install = next(c for c in nb.cells if c.cell_type == "code")
    install.source = re.sub(r"spec = '[^']*'", f"spec = 'sensbook @ {wheel.as_uri()}'",
                            install.source)
    code = [c for c in nb.cells if c.cell_type == "code"]
    check = next(i for i, c in enumerate(code) if "remove-cell" in c.metadata.get("tags", [])
                 and "assert" in c.source)
    work = tmp_path / "content"
    work.mkdir()
    runtime = fresh_runtime(colab_venv, tmp_path / "runtime")
    name = kernel_spec(runtime, tmp_path / "kernels")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SENSBOOK_", "COLAB_", "PYTHON", "VIRTUAL_ENV", "MPLBACKEND"))}
    env.update(SENSBOOK_SCALE="paper", SENSBOOK_PUBLISHED="0", COLAB_RELEASE_TAG="colab-like",
               SENSBOOK_RESULTS=str(work / "results"), OMP_NUM_THREADS=str(COLAB_THREADS),
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    km = KernelManager(kernel_name=name,
                       kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]))
    client = NotebookClient(nb, km=km, timeout=1800, resources={"metadata": {"path": str(work)}})
    with client.setup_kernel(env=env):
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code":
                client.execute_cell(cell, i)               # raises on the first error
                if cell is code[check]:
                    break
    text = "\n".join(_text(c) for c in code[:check + 1])
    m = BANNER.search(text)
    assert m and [n.strip() for n in m["names"].split(",")] == ["ch5.intro_basin"], text[:2000]
    assert m["unit"] in ("s", "min") and int(m["todo"]) == int(m["n"]), m.group(0)
    assert "sensbook scale='paper'" in text, text[:500]
    assert not [c for c in code[:check + 1] if _stderr(c)], [_stderr(c)[:300] for c in code]
