"""The cluster executors (sensbook/executors.py) through submitit's local executor: the same
jobs, bookkeeping and status as on Slurm (tests/runtime/test_slurm.py runs them on a real cluster)."""
import json
import time

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


# ---- issue 21: claimed configurations, reused pids, a --status that always answers ----------
def test_a_job_waits_for_a_configuration_another_live_runner_holds(tmp_path, monkeypatch):
    import threading
    import time

    import sensbook.runtime.store as store_mod
    from sensbook.runtime.sweep import _run_one
    from tests.runtime.test_store import bounded
    monkeypatch.setattr(store_mod, "CLAIM_POLL", 0.05)
    sw_ = sweep(1)
    store = sb.Store(tmp_path, "fake", sw_.version)
    store.folder.mkdir(parents=True)
    claim, _ = store_mod.Claim.take(store.claim_path(sw_.configs[0]))   # the other runner
    got = {}
    job = threading.Thread(target=lambda: got.setdefault("result", _run_one(
        store.root, "fake", store.version, sw_.runner, sw_.configs[0], {})), daemon=True)
    job.start()
    job.join(0.5)
    assert job.is_alive(), f"the job ended while another runner held its config: {got}"
    # meanwhile --status says it is running (held by a live runner), not failed
    book = tmp_path / ".submitit" / "fake"
    book.mkdir(parents=True)
    gone = __import__("subprocess").Popen(["true"])
    gone.wait()
    (book / "jobs.json").write_text(json.dumps({store.path(sw_.configs[0]).stem: {
        "kind": "local", "job_id": str(gone.pid), "stdout": "-", "stderr": "-", "result": "-"}}))
    assert [s.state for s in status(tmp_path, "fake", sw_.version, sw_.configs)] == ["running"]
    store.save(sw_.configs[0], {"square": "stored by the other runner"})
    claim.release()
    bounded(lambda: job.join(10) or got)
    assert got["result"] == {"square": "stored by the other runner"}


def _sleeper():
    import subprocess
    return subprocess.Popen(["sleep", "60"])


@pytest.mark.parametrize("start", ["recorded, another", "not recorded"])
def test_a_reused_pid_is_not_taken_for_a_running_local_job(tmp_path, start):
    from sensbook.runtime.store import process_start
    sw_ = sweep(1)
    book = tmp_path / ".submitit" / "fake"
    book.mkdir(parents=True)
    other = _sleeper()                        # an unrelated process that got the job's old pid
    try:
        entry = {"kind": "local", "job_id": str(other.pid), "stdout": "-", "stderr": "-",
                 "result": "-"}
        if start == "recorded, another":
            entry["start"] = str(int(process_start(other.pid)) - 1)
        k = sb.Store(tmp_path, "fake", sw_.version).path(sw_.configs[0]).stem
        (book / "jobs.json").write_text(json.dumps({k: entry}))
        assert [s.state for s in status(tmp_path, "fake", sw_.version, sw_.configs)] == \
            ["failed"]
        entry["start"] = process_start(other.pid)        # the job's own process: running
        (book / "jobs.json").write_text(json.dumps({k: entry}))
        assert [s.state for s in status(tmp_path, "fake", sw_.version, sw_.configs)] == \
            ["running"]
    finally:
        other.kill()
        other.wait()


def _status_argv(out):
    return ["sweep", "test.fake", "--scale", "ci", "--out", str(out), "--status"]


@pytest.mark.parametrize("damage, said", [
    (b"\xff\xfe not text", "jobs.json is unreadable (UnicodeDecodeError"),
    (b"[1, 2]", "jobs.json holds a JSON list, not an object"),
    (b'{"K": {"kind": "local"}}', "1 entry without kind, job_id, stderr, result"),
])
def test_status_with_a_damaged_jobs_json_names_it(tmp_path, monkeypatch, capsys, damage, said):
    exp = fake_experiment(monkeypatch, n=2)
    k = sb.Store(tmp_path, exp.name, exp.sweep("ci").version).path(exp.configs("ci")[0]).stem
    book = tmp_path / ".submitit" / exp.name
    book.mkdir(parents=True)
    (book / "jobs.json").write_bytes(damage.replace(b"K", k.encode()))
    assert main(_status_argv(tmp_path)) == 1
    out = capsys.readouterr().out
    assert "test.fake @ ci: 0/2 stored" in out and "missing 2" in out
    assert "could not read: " in out and said in out


def test_status_of_a_store_path_that_is_a_file(tmp_path, monkeypatch, capsys):
    fake_experiment(monkeypatch, n=2)
    (tmp_path / "file").write_text("not a folder")
    assert main(_status_argv(tmp_path / "file")) == 1
    out = capsys.readouterr().out
    assert "test.fake @ ci: 0/2 stored" in out
    assert f"could not read: the store path {tmp_path / 'file'} is a file, not a folder" in out


@pytest.mark.parametrize("squeue", ["no controller", "absent"])
def test_status_of_slurm_jobs_without_a_reachable_controller(tmp_path, monkeypatch, capsys,
                                                             squeue):
    exp = fake_experiment(monkeypatch, n=2)
    k = sb.Store(tmp_path, exp.name, exp.sweep("ci").version).path(exp.configs("ci")[0]).stem
    book = tmp_path / ".submitit" / exp.name
    book.mkdir(parents=True)
    (book / "jobs.json").write_text(json.dumps({k: {
        "kind": "slurm", "job_id": "12_0", "stdout": "-", "stderr": "-", "result": "-"}}))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if squeue == "no controller":
        (bindir / "squeue").write_text(
            "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller "
            "(connect failure)' >&2\nexit 1\n")
        (bindir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    assert main(_status_argv(tmp_path)) == 1
    out = capsys.readouterr().out
    assert "test.fake @ ci: 0/2 stored" in out and "missing 1, unknown 1" in out
    why = ("Unable to contact slurm controller" if squeue == "no controller" else
           "squeue is not available here")
    assert "could not read: the Slurm queue cannot be read" in out and why in out
    with pytest.raises(RuntimeError, match=why):        # a sweep does not resubmit blindly
        status(tmp_path, exp.name, exp.sweep("ci").version, exp.configs("ci"))


# ---- issue 30: bounded local jobs, logs read as regular files, bookkeeping before submitting
def test_local_jobs_run_no_more_at_once_than_the_machine_holds(tmp_path, monkeypatch, capsys):
    import sensbook.runtime.executors as ex_mod
    import sensbook.runtime.sweep as sweep_mod
    monkeypatch.setattr(sweep_mod, "_cores", lambda: 2, raising=False)
    monkeypatch.setattr(sweep_mod, "_available_mb", lambda: 10**6, raising=False)
    waves, submit = [], SubmititExecutor._submit

    def watched(self, ex, folder, todo, version_):     # what runs when a wave is submitted
        busy = [s for s in status(tmp_path, "fake", version_, sweep(5).configs)
                if s.state in ("queued", "running")]
        waves.append((len(todo), len(busy)))
        submit(self, ex, folder, todo, version_)

    monkeypatch.setattr(ex_mod.SubmititExecutor, "_submit", watched, raising=False)
    ex = SubmititExecutor("local", time=10, poll_s=0.2)
    with pytest.warns(UserWarning, match="5 submitit-local jobs at once cut to 2: this machine "
                                         "has 2 core"):
        _, stats = sb.run_sweep(sweep(5), tmp_path, progress=False, executor=ex)
    assert stats["computed"] == 5 and len(ex.submitted) == 5
    assert waves == [(2, 0), (2, 0), (1, 0)]
    # without waiting, only what may run at once is submitted; the rest is said
    fake_experiment(monkeypatch, n=3)
    with pytest.warns(UserWarning, match="3 submitit-local jobs at once cut to 2"):
        assert main(["sweep", "test.fake", "--scale", "ci", "--out", str(tmp_path / "b"),
                     "--executor", "submitit-local", "--no-wait"]) == 0
    assert "(2 jobs submitted, 0 already queued or running; see --status); 1 not submitted " \
           "(no more local jobs at once than this machine holds)" in capsys.readouterr().out
    sw = fake_experiment(monkeypatch, n=3).sweep("ci")
    for _ in range(600):                    # let the two jobs finish (bounded)
        states = status(tmp_path / "b", sw.name, sw.version, sw.configs)
        if summary(states).startswith("stored 2"):
            break
        time.sleep(0.1)
    assert summary(states) == "stored 2, queued 0, running 0, failed 0, missing 1"


def test_a_jobs_file_that_is_a_directory_is_moved_aside_before_submitting(tmp_path):
    book = tmp_path / ".submitit" / "fake" / "jobs.json"
    book.mkdir(parents=True)
    ex = SubmititExecutor("local", time=10, poll_s=0.2)
    with pytest.warns(UserWarning, match="jobs.json was not a regular file; moved aside"):
        _, stats = sb.run_sweep(sweep(2), tmp_path, progress=False, executor=ex)
    assert stats["computed"] == 2 and len(json.loads(book.read_text())) == 2
    assert [p.name[:13] for p in book.parent.glob("jobs.json.bad-*")] == ["jobs.json.bad"]


@pytest.mark.parametrize("what", ["fifo", "dev-zero"])
def test_a_job_log_that_is_a_fifo_or_a_device_is_named_not_read(tmp_path, what):
    import os
    import threading
    from sensbook.runtime.executors import bookkeeping
    sw = sweep(1)
    folder = bookkeeping(tmp_path, "fake")
    folder.mkdir(parents=True)
    log, result = folder / "job.err", folder / "job.pkl"
    if what == "fifo":
        os.mkfifo(log)
        os.mkfifo(result)
    else:
        log.symlink_to("/dev/zero")
        result.symlink_to("/dev/zero")
    entry = {"kind": "local", "job_id": "999999999", "start": "1", "stdout": str(log),
             "stderr": str(log), "result": str(result)}             # a job long gone
    (folder / "jobs.json").write_text(json.dumps({sb.key(sw.configs[0], sw.version): entry}))
    got = []
    t = threading.Thread(target=lambda: got.append(status(tmp_path, "fake", sw.version,
                                                          sw.configs, [])), daemon=True)
    t.start()
    t.join(30)                              # a regression must fail, not hang the suite
    try:
        assert not t.is_alive(), "status is still reading the job's log"
    finally:
        for p in (log, result):             # let a reader blocked on a FIFO go (a regression)
            if what == "fifo" and t.is_alive():
                try:
                    os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:             # no reader on this one
                    pass
    [s] = got[0]
    kind = "a FIFO" if what == "fifo" else "a device"
    assert s.state == "failed" and f"is {kind}, not a regular file: not read" in s.error
