"""The registry of experiments (sensbook/experiments/__init__.py): every experiment listed,
keyed and within the main job's budget; one pool over several experiments."""
import pathlib

import numpy as np
import pytest

import sensbook as sb
from sensbook import experiments as ex
from sensbook.runtime.sweep import resolve

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_experiment_is_registered_listed_and_keyed():
    exps = sb.registry()
    assert "ch6.training" in exps
    for name, e in exps.items():
        assert e.chapter == name.split(".")[0]
        for scale in sb.SCALES:
            cs = e.configs(scale)
            assert cs, f"{name} has no configurations at {scale}"
            assert len({sb.key(c) for c in cs}) == len(cs), f"{name}@{scale}: duplicate configs"
            assert all(e.cost(c) > 0 for c in cs)
        resolve(e.runner)


def test_book_scale_fits_the_main_job_budget():
    """The cost models of all experiments, summed at book scale, stay inside the budget of
    `make book` on the reference machine (2 cores): adding book-scale work that would push
    the main job past 25 minutes fails here first."""
    from sensbook.experiments import BOOK_BUDGET_SECONDS

    per = {n: e.predicted_seconds("book") for n, e in sb.registry().items()}
    # two worker processes share the two cores (make book runs `sensbook sweep all --workers 2`)
    assert sum(per.values()) / 2 <= BOOK_BUDGET_SECONDS, per


def test_run_all_pools_several_experiments_and_resumes(tmp_path, monkeypatch):
    fakes = [ex.Experiment(f"tst.fake{j}", lambda s, j=j: [{"i": i, "tag": f"t{j}"}
                                                          for i in range(2 + j)],
                           "tests.runtime.test_sweep:fake", lambda c: 1.0 + c["i"]) for j in range(2)]
    monkeypatch.setattr(ex, "EXPERIMENTS", {**ex.registry(), **{f.name: f for f in fakes}})
    assert ex.run_all(fakes, "ci", tmp_path, workers=2, progress=False) == \
        {"tst.fake0": (0, 2), "tst.fake1": (0, 3)}
    assert ex.run_all(fakes, "ci", tmp_path, workers=2, progress=False) == \
        {"tst.fake0": (2, 0), "tst.fake1": (3, 0)}
    for f in fakes:
        got = ex.run_experiment(f.name, "ci", tmp_path, progress=False, compute=False)
        assert got == [{"square": c["i"] ** 2, "tag": c["tag"]} for c in f.configs("ci")]


def test_run_all_reports_a_failing_configuration_and_stores_the_others(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL_AT", "1")
    fake = ex.Experiment("tst.fail", lambda s: [{"i": i, "tag": "f"} for i in range(3)],
                         "tests.runtime.test_sweep:fake", lambda c: 1.0)
    monkeypatch.setattr(ex, "EXPERIMENTS", {**ex.registry(), fake.name: fake})
    with pytest.raises(RuntimeError, match=r"(?s)1 configuration\(s\) failed.*injected failure at 1"):
        ex.run_all([fake], "ci", tmp_path, workers=1, progress=False)
    st = sb.Store(tmp_path, "tst.fail")
    assert [st.done(c) for c in fake.configs("ci")] == [True, False, True]


def test_stored_encoding_round_trips_inf_and_refuses_nan():
    a = np.array([[1.0, np.inf], [2.5, 3.0]])
    enc = ex.enc(a)
    assert enc == [[1.0, None], [2.5, 3.0]]
    assert np.array_equal(ex.dec(enc), a)
    assert np.array_equal(ex.dec(ex.enc(a[1])), a[1])
    with pytest.raises(ValueError, match="NaN"):
        ex.enc([1.0, np.nan])


def _paper_rows():
    """The intro's table of paper-scale cost per chapter, from the cost models: configurations,
    hours of one CPU core, and one H200: each experiment's predicted time over the speed-up of
    the configuration benchmarks/cost_sample.py timed on an H200 (its last successful row in
    benchmarks/measured/h200-paper-sample.json; an experiment not sampled at CPU speed)."""
    import json
    from collections import defaultdict

    from sensbook.experiments import registry

    sample = json.loads((ROOT / "benchmarks" / "measured" / "h200-paper-sample.json").read_text())
    reg = registry()                      # speed-up: the cost model now over the time measured
    speedup = {r["experiment"]: reg[r["experiment"]].cost(
                   reg[r["experiment"]].configs("paper")[r["index"]]) / r["seconds"]
               for r in sample["rows"]
               if "seconds" in r and not r["censored"] and r["experiment"] in reg}
    n, cost, gpu = defaultdict(int), defaultdict(float), defaultdict(float)
    for e in reg.values():
        n[e.chapter] += len(e.configs("paper"))
        cost[e.chapter] += e.predicted_seconds("paper")
        gpu[e.chapter] += e.predicted_seconds("paper") / speedup.get(e.name, 1.0)
    when = lambda s: f"{s / 60:.0f} min" if s < 3600 else f"{s / 3600:.1f} h"
    rows = []
    for ch in sorted(n):
        name = {"ch5": "5 (both notebooks, the intro's figure)",
                "ch5_certified": "5 (certified)"}.get(ch, ch.removeprefix("ch"))
        rows.append(f"| {name} | {n[ch]} | {when(cost[ch])} | {when(gpu[ch])} |")
    return rows


def test_the_intro_states_each_chapters_paper_cost_as_the_cost_models_predict():
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    table = intro.split("(paper-cost)=\n", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    assert table == _paper_rows(), "\n".join(["update book/intro.md:"] + _paper_rows())


def test_in_colab_run_all_stops_before_what_outlives_the_runtime(tmp_path, monkeypatch):
    """Issue 28: at `paper` scale Run all walked into a 22-hour cell. In Colab an experiment
    whose missing configurations are predicted past a runtime's lifetime stops with a message,
    computing nothing, unless the reader opts in ($SENSBOOK_LONG_RUNS=1)."""
    import sensbook.experiments as ex
    from sensbook.experiments import EXPERIMENTS, Experiment, registry

    registry()
    hours = ex.COLAB_LIFETIME_SECONDS / 3600
    exp = Experiment("test.long", lambda scale: [{"i": i, "tag": scale} for i in range(2)],
                     "tests.runtime.test_sweep:fake", lambda c: ex.COLAB_LIFETIME_SECONDS * 0.6)
    monkeypatch.setitem(EXPERIMENTS, exp.name, exp)
    monkeypatch.setenv("SENSBOOK_PUBLISHED", "0")
    monkeypatch.setattr(ex, "in_colab", lambda: True)
    monkeypatch.delenv("SENSBOOK_LONG_RUNS", raising=False)
    with pytest.raises(RuntimeError, match=f"longer than a Colab runtime lives \\({hours:.0f} h\\).*SENSBOOK_LONG_RUNS"):
        ex.run_experiment("test.long", "ci", tmp_path, progress=False)
    assert not list(tmp_path.rglob("*.json"))                  # nothing computed
    # one configuration stored: the rest fits a runtime, and is computed
    ex.run_sweep(exp.sweep("ci").__class__("test.long", exp.configs("ci")[:1], exp.runner),
                 tmp_path, progress=False)
    assert len(ex.run_experiment("test.long", "ci", tmp_path, progress=False)) == 2
    # outside Colab, or opted in, nothing stops
    monkeypatch.setenv("SENSBOOK_LONG_RUNS", "1")
    ex.run_experiment("test.long", "ci", tmp_path / "b", progress=False)
    monkeypatch.delenv("SENSBOOK_LONG_RUNS")
    monkeypatch.setattr(ex, "in_colab", lambda: False)
    ex.run_experiment("test.long", "ci", tmp_path / "c", progress=False)
