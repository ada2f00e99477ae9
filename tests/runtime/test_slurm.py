"""A real Slurm cluster: one node on this machine (tools/slurm_cluster.sh; Debian's slurmctld,
slurmd, slurm-client and munge, installed with apt-get when missing). A ci-scale sweep run as a
Slurm job array stores exactly what the local run stores; a job cancelled mid-way (scancel) is
reported failed with Slurm's message, and the resume recomputes only that configuration.

`make slurm-test` runs this file (`make test` runs that target). It is skipped only where the
cluster cannot be started at all (not root, or no apt-get to install Slurm); any other failure to
start the cluster fails the test.
"""
import json
import os
import pathlib
import subprocess
import time

import pytest

import sensbook as sb
from sensbook.cli import main
from sensbook.runtime.executors import SubmititExecutor, status
from tests.runtime.test_executors import fake_experiment, records
from tests.runtime.test_sweep import calls, snapshot

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "slurm_cluster.sh"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("slurm")
    r = subprocess.run(["bash", str(SCRIPT), "start", str(scratch)], capture_output=True, text=True,
                       timeout=600)
    if r.returncode == 3:
        pytest.skip(f"no Slurm cluster possible here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stdout + r.stderr + "".join(
        p.read_text() for p in scratch.glob("*.log"))
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(scratch / "slurm.conf")
    try:
        yield scratch
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(scratch)], check=True, timeout=120)
        if old is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = old


# A runner that sleeps (long) on the configuration named by $SLOW_AT, so that it can be cancelled.
def slow(config):
    with open(os.environ["FAKE_LOG"], "a") as fh:
        fh.write(f"{config['i']}\n")
    if str(config["i"]) == os.environ.get("SLOW_AT"):
        time.sleep(600)
    return {"square": config["i"] ** 2}


def untimed(x):
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if "seconds" not in k}
    return [untimed(v) for v in x] if isinstance(x, list) else x


def wait_for(predicate, what, timeout=180):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        ok, value = predicate()
        if ok:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last seen: {value}")


def test_a_sweep_through_slurm_stores_what_the_local_run_stores(cluster, tmp_path, monkeypatch,
                                                                capsys):
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    # a fake experiment through the command line ...
    fake_experiment(monkeypatch, n=4)
    argv = ["sweep", "test.fake", "--scale", "ci"]
    assert main(argv + ["--out", str(tmp_path / "local")]) == 0
    assert main(argv + ["--out", str(tmp_path / "slurm"), "--executor", "slurm", "--time", "5",
                        "--array-parallelism", "2"]) == 0
    assert "4 jobs submitted" in capsys.readouterr().out
    assert records(tmp_path / "slurm" / "test.fake") == records(tmp_path / "local" / "test.fake")
    jobs = json.loads((tmp_path / "slurm" / ".submitit" / "test.fake" / "jobs.json").read_text())
    ids = sorted(j["job_id"] for j in jobs.values())
    assert len(ids) == 4 and len({i.split("_")[0] for i in ids}) == 1     # one array of 4 tasks
    assert all(j["kind"] == "slurm" for j in jobs.values())
    # ... and one real configuration of the book (chapter 6's training, ci scale)
    exp = sb.registry()["ch6.training"]
    real = sb.Sweep(exp.name, exp.configs("ci")[:1], exp.runner)
    sb.run_sweep(real, tmp_path / "local", progress=False)
    local, _ = sb.run_sweep(real, tmp_path / "local", progress=False, compute=False)  # as stored
    ex = SubmititExecutor("slurm", time=10, poll_s=0.5)
    slurm, stats = sb.run_sweep(real, tmp_path / "slurm", progress=False, executor=ex)
    assert stats == {"stored": 0, "computed": 1, "missing": 0} and len(ex.submitted) == 1
    # equal except the runner's own timings (cpu_seconds, seconds_train, ...)
    assert untimed(slurm) == untimed(local) and untimed(slurm)[0]["eval_accuracy"]


def test_a_cancelled_job_is_reported_and_only_it_is_recomputed(cluster, tmp_path, monkeypatch,
                                                               capsys):
    from sensbook.experiments import EXPERIMENTS, Experiment

    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("SLOW_AT", "1")                  # the jobs inherit the environment
    exp = Experiment("test.slow", lambda scale: [{"i": i} for i in range(3)],
                     "tests.runtime.test_slurm:slow", lambda c: 1.0)
    monkeypatch.setitem(EXPERIMENTS, exp.name, exp)
    sw = exp.sweep("ci")
    cli = ["sweep", exp.name, "--scale", "ci", "--out", str(tmp_path)]
    assert main(cli + ["--executor", "slurm", "--time", "10", "--array-parallelism", "2",
                       "--no-wait"]) == 0
    assert "3 jobs submitted, 0 already queued or running; see --status" in capsys.readouterr().out
    version = sb.results_version()
    states = lambda: status(tmp_path, exp.name, version, sw.configs)
    seen = lambda: [s.state for s in states()]
    wait_for(lambda: (seen() == ["stored", "running", "stored"], seen()),
             "configs 0 and 2 stored while 1 runs")
    # a second sweep now submits nothing: config 1 is running
    again = SubmititExecutor("slurm", time=10, wait=False)
    sb.run_sweep(sw, tmp_path, progress=False, executor=again)
    assert again.submitted == [] and again.in_flight == [{"i": 1}]
    job = states()[1].job_id
    subprocess.run(["scancel", job], check=True)
    failed_now = lambda: [s for s in states() if s.state == "failed"]
    failed = wait_for(lambda: (lambda f: (bool(f), f))(failed_now()), "the cancelled job")
    assert [s.config for s in failed] == [{"i": 1}] and failed[0].job_id == job
    assert "CANCELLED" in failed[0].error, failed[0].error          # Slurm's own message
    assert main(cli + ["--status"]) == 0
    shown = capsys.readouterr().out
    assert "2/3 stored" in shown and "failed 1" in shown and "CANCELLED" in shown
    kept = snapshot(tmp_path / exp.name)
    assert len(kept) == 2 and sorted(calls(log)) == [0, 1, 2]
    # the resume recomputes config 1 only
    monkeypatch.delenv("SLOW_AT")
    resume = SubmititExecutor("slurm", time=10, poll_s=0.5)
    res, stats = sb.run_sweep(sw, tmp_path, progress=False, executor=resume)
    assert stats == {"stored": 2, "computed": 1, "missing": 0} and len(resume.submitted) == 1
    assert res == [{"square": i * i} for i in range(3)]
    assert sorted(calls(log)) == [0, 1, 1, 2]
    after = snapshot(tmp_path / exp.name)
    assert len(after) == 3 and all(after[k] == v for k, v in kept.items())
    assert [s.state for s in states()] == ["stored"] * 3
