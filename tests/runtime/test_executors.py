"""The cluster executors (sensbook/executors.py) through submitit's local executor: the same
jobs, bookkeeping and status as on Slurm (tests/runtime/test_slurm.py runs them on a real cluster)."""
import json

import pytest

import sensbook as sb
from sensbook.cli import main
from sensbook.runtime.executors import SubmititExecutor, SweepFailed, status, summary
from tests.runtime.test_sweep import calls, snapshot, sweep


def records(folder):
    """Stored records without their meta (seconds, host, ... differ between runs)."""
    return {k: {f: v for f, v in json.loads(t).items() if f != "meta"}
            for k, t in snapshot(folder).items()}


def fake_experiment(monkeypatch, n=3):
    from sensbook.experiments import EXPERIMENTS, Experiment, registry

    registry()
    exp = Experiment("test.fake", lambda scale: [{"i": i, "tag": scale} for i in range(n)],
                     "tests.runtime.test_sweep:fake", lambda c: 0.1)
    monkeypatch.setitem(EXPERIMENTS, exp.name, exp)
    return exp


def test_local_jobs_store_what_the_process_pool_stores_and_a_failure_is_shown(tmp_path,
                                                                               monkeypatch):
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    sb.run_sweep(sweep(3), tmp_path / "pool", progress=False)
    calls_pool = len(calls(log))
    # the same sweep as submitit jobs; the job of config 1 raises
    monkeypatch.setenv("FAKE_FAIL_AT", "1")
    ex = SubmititExecutor("local", time=10, poll_s=0.2)
    out = tmp_path / "jobs"
    with pytest.raises(SweepFailed, match="injected failure at 1") as err:
        sb.run_sweep(sweep(3), out, progress=False, executor=ex)
    assert "1 of 3" in str(err.value) and "RuntimeError" in str(err.value)
    assert len(ex.submitted) == 3
    states = status(out, "fake", sb.results_version(), sweep(3).configs)
    assert [s.state for s in states] == ["stored", "failed", "stored"]
    assert "injected failure at 1" in states[1].error and states[0].error is None
    assert summary(states) == "stored 2, queued 0, running 0, failed 1, missing 0"
    kept = snapshot(out / "fake")
    # the resume submits only the failed configuration
    monkeypatch.delenv("FAKE_FAIL_AT")
    res, stats = sb.run_sweep(sweep(3), out, progress=False, executor=ex)
    assert stats == {"stored": 2, "computed": 1, "missing": 0} and len(ex.submitted) == 1
    assert sorted(calls(log)[calls_pool:]) == [0, 1, 1, 2]
    assert all(snapshot(out / "fake")[k] == v for k, v in kept.items())
    assert records(out / "fake") == records(tmp_path / "pool" / "fake")
    assert res == [{"square": i * i, "tag": "a"} for i in range(3)]
    jobs = json.loads((out / ".submitit" / "fake" / "jobs.json").read_text())
    assert len(jobs) == 3 and {j["kind"] for j in jobs.values()} == {"local"}


def test_cli_runs_through_the_executor_and_reports_status(tmp_path, monkeypatch, capsys):
    fake_experiment(monkeypatch, n=2)
    monkeypatch.setenv("FAKE_FAIL_AT", "1")
    argv = ["sweep", "test.fake", "--scale", "ci", "--out", str(tmp_path)]
    assert main(argv + ["--status"]) == 0
    assert "stored 0, queued 0, running 0, failed 0, missing 2" in capsys.readouterr().out
    assert main(argv + ["--executor", "submitit-local", "--time", "5"]) == 1
    assert "injected failure at 1" in capsys.readouterr().err
    assert main(argv + ["--status"]) == 0
    out = capsys.readouterr().out
    assert "stored 1, queued 0, running 0, failed 1, missing 0" in out
    assert "injected failure at 1" in out and '"i": 1' in out
    # a chapter (both experiments) through the executor: only what failed or is new runs
    from sensbook.experiments import EXPERIMENTS, Experiment
    other = Experiment("test.other", lambda scale: [{"i": 5}], "tests.runtime.test_sweep:fake", len)
    monkeypatch.setitem(EXPERIMENTS, other.name, other)
    monkeypatch.delenv("FAKE_FAIL_AT")
    assert main(["sweep", "test", "--scale", "ci", "--out", str(tmp_path),
                 "--executor", "submitit-local"]) == 0
    out = capsys.readouterr().out
    assert "test.fake @ ci: 1 already stored, 1 computed" in out
    assert "test.other @ ci: 0 already stored, 1 computed" in out
    assert out.count("(1 jobs submitted, 0 already queued or running)") == 2
    jobs = [json.loads((tmp_path / ".submitit" / n / "jobs.json").read_text())
            for n in ("test.fake", "test.other")]
    assert [len(j) for j in jobs] == [2, 1]


def test_help_documents_the_executor_options(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    for opt in ("--executor", "slurm", "--partition", "--time", "--cpus-per-task",
                "--gpus-per-task", "--mem", "--array-parallelism", "--no-wait", "--status"):
        assert opt in text


@pytest.mark.parametrize("kw, word", [({"kind": "pbs"}, "kind"), ({"time": 0}, "time"),
                                      ({"cpus_per_task": 1.5}, "cpus_per_task"),
                                      ({"gpus_per_task": -1}, "gpus_per_task"),
                                      ({"array_parallelism": 0}, "array_parallelism"),
                                      ({"partition": ""}, "partition")])
def test_bad_executor_options_are_named(kw, word):
    with pytest.raises(ValueError, match=word):
        SubmititExecutor(**kw)
