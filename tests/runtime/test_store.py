"""Issue 15: a store and a runner that survive anything. Each test is a reproduction from the
issue: damaged files, a read-only or full folder, kills, concurrent sweeps, bad results."""
import json
import math
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import sensbook as sb
import sensbook.runtime.store as sw
from sensbook.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]


def logged(config):
    """Square of config["i"]; every call is logged to $STORE_LOG as "pid i"."""
    log = os.environ.get("STORE_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()} {config['i']}\n")
    time.sleep(config.get("sleep", 0))
    return {"square": config["i"] ** 2}


def bad_result(config):
    return {"nan": math.nan} if config["i"] == 0 else None


def sleeper(config):
    """Write this worker's pid to $STORE_PIDS/<pid>, then sleep long."""
    pathlib.Path(os.environ["STORE_PIDS"], str(os.getpid())).touch()
    time.sleep(120)
    return {"i": config["i"]}


def sweep(n=3, **extra):
    return sb.Sweep("s", [{"i": i, **extra} for i in range(n)], "tests.runtime.test_store:logged")


def calls(log):
    p = pathlib.Path(log)
    return [tuple(map(int, l.split())) for l in p.read_text().splitlines()] if p.exists() else []


def strict_json(text):
    """json.loads that refuses NaN / Infinity tokens (standard JSON only)."""
    def refuse(tok):
        raise ValueError(f"non-standard JSON token {tok}")
    return json.loads(text, parse_constant=refuse)


def _alive(pid):
    try:
        state = pathlib.Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state                  # a zombie has exited


# ---- malformed stored files -------------------------------------------------------------------
DAMAGE = {
    "null": lambda p: p.write_text("null"),
    "a list": lambda p: p.write_text("[1, 2]"),
    "binary": lambda p: p.write_bytes(b"\x80\x81\xfe\xff\x00"),
    "no result key": lambda p: p.write_text(json.dumps(
        {k: v for k, v in json.loads(p.read_text()).items() if k != "result"})),
    "an edited result": lambda p: p.write_text(json.dumps(
        {**json.loads(p.read_text()), "result": {"square": 5}})),
    "a directory": lambda p: (p.unlink(), p.mkdir()),
}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_a_malformed_file_is_named_moved_aside_and_recomputed(tmp_path, monkeypatch, how):
    log = tmp_path / "log"
    monkeypatch.setenv("STORE_LOG", str(log))
    res, _ = sb.run_sweep(sweep(), tmp_path, progress=False)
    store = sb.Store(tmp_path, "s")
    p = store.path({"i": 1})
    DAMAGE[how](p)
    with pytest.warns(UserWarning, match=p.name):
        assert not store.done({"i": 1})                       # what --status asks: named
    assert p.exists() is False and len(list(p.parent.glob(p.name + ".bad-*"))) == 1
    DAMAGE["null"](p)                                        # damaged again: a resume recomputes
    with pytest.warns(UserWarning, match=p.name):
        again, stats = sb.run_sweep(sweep(), tmp_path, progress=False)
    assert again == res and stats == {"stored": 2, "computed": 1, "missing": 0}
    assert [i for _, i in calls(log)] == [0, 1, 2, 1]
    assert store.load({"i": 1}) == {"square": 1}


def test_stored_results_carry_a_checksum_and_are_standard_json(tmp_path):
    sb.run_sweep(sweep(), tmp_path, progress=False)
    for p in (tmp_path / "s").glob("*.json"):
        rec = strict_json(p.read_text())
        assert rec["sha256"] == sw._checksum(rec) and len(rec["sha256"]) == 64


def test_nan_results_and_none_results_are_errors(tmp_path):
    s = sb.Sweep("bad", [{"i": 0}, {"i": 1}], "tests.runtime.test_store:bad_result")
    with pytest.raises(ValueError, match="standard JSON"):
        sb.run_sweep(sb.Sweep("bad", [{"i": 0}], s.runner), tmp_path, progress=False)
    with pytest.raises(ValueError, match="returned None"):
        sb.run_sweep(sb.Sweep("bad", [{"i": 1}], s.runner), tmp_path, progress=False)
    assert list((tmp_path / "bad").glob("*.json")) == []    # nothing stored, nothing claimed
    assert list((tmp_path / "bad").glob("*.claim")) == []


def test_duplicate_configurations_are_named():
    with pytest.raises(ValueError, match=r'#0 and #2 are both \{"i":1\}'):
        sb.Sweep("d", [{"i": 1}, {"i": 2}, {"i": 1}], "tests.runtime.test_store:logged")


# ---- a folder that cannot take results ---------------------------------------------------------
def test_an_unwritable_folder_fails_before_computing(tmp_path, monkeypatch):
    log = tmp_path / "log"
    monkeypatch.setenv("STORE_LOG", str(log))
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with pytest.raises(OSError, match="not writable.*nothing was computed"):
        sb.run_sweep(sweep(), blocked, progress=False)
    if os.geteuid() != 0:                                    # root writes through chmod
        ro = tmp_path / "ro"
        (ro / "s").mkdir(parents=True)
        (ro / "s").chmod(0o555)
        with pytest.raises(OSError, match="not writable"):
            sb.run_sweep(sweep(), ro, progress=False)
    assert calls(log) == []


def test_a_full_folder_fails_before_computing(tmp_path, monkeypatch):
    log = tmp_path / "log"
    monkeypatch.setenv("STORE_LOG", str(log))
    full = lambda path: type("usage", (), {"free": 4096})()
    monkeypatch.setattr(sw.shutil, "disk_usage", full)
    with pytest.raises(OSError, match="is full"):
        sb.run_sweep(sweep(), tmp_path, progress=False)
    assert calls(log) == []


def test_stray_tmp_files_from_a_kill_are_cleaned(tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    old, fresh = folder / ".abc.123.tmp", folder / ".def.456.tmp"
    old.write_text("{ torn")
    fresh.write_text("{ being written")
    t = time.time() - 2 * sw.TMP_STALE
    os.utime(old, (t, t))
    sb.run_sweep(sweep(), tmp_path, progress=False)
    assert not old.exists() and fresh.exists()               # a young one may be in flight


# ---- claims: concurrent runners split the work -------------------------------------------------
def _claim(store, config, host, pid, age=0.0):
    p = store.claim_path(config)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"owner": f"{host}:{pid}:x", "host": host, "pid": pid}))
    t = time.time() - age
    os.utime(p, (t, t))
    return p


@pytest.mark.parametrize("why", ["no heartbeat", "process gone"])
def test_a_stale_claim_is_taken_over(tmp_path, monkeypatch, why):
    log = tmp_path / "log"
    monkeypatch.setenv("STORE_LOG", str(log))
    store = sb.Store(tmp_path, "s")
    if why == "no heartbeat":
        p = _claim(store, {"i": 1}, "another-host", 1, age=2 * sw.CLAIM_STALE)
    else:
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        p = _claim(store, {"i": 1}, socket.gethostname(), dead.pid)
    res, stats = sb.run_sweep(sweep(), tmp_path, progress=False)
    assert stats["computed"] == 3 and sorted(i for _, i in calls(log)) == [0, 1, 2]
    assert not p.exists() and res[1] == {"square": 1}


def test_a_live_claim_is_waited_for_not_recomputed(tmp_path, monkeypatch):
    log = tmp_path / "log"
    monkeypatch.setenv("STORE_LOG", str(log))
    monkeypatch.setattr(sw, "CLAIM_POLL", 0.05)
    store = sb.Store(tmp_path, "s")
    p = _claim(store, {"i": 1}, "another-host", 1)         # fresh heartbeat: alive

    def other_runner_finishes():
        time.sleep(0.5)
        store.save({"i": 1}, {"square": "from the other runner"})
        p.unlink()
    t = threading.Thread(target=other_runner_finishes)
    t.start()
    res, stats = sb.run_sweep(sweep(), tmp_path, progress=False)
    t.join()
    assert res[1] == {"square": "from the other runner"}
    assert sorted(i for _, i in calls(log)) == [0, 2]
    assert stats == {"stored": 1, "computed": 2, "missing": 0}


CONCURRENT = """
import os, pathlib, sys, time
sys.path.insert(0, {root!r})
import sensbook as sb
from tests.runtime.test_store import sweep
ready = pathlib.Path({out!r}) / "ready"
ready.mkdir(exist_ok=True)
(ready / str(os.getpid())).touch()
while len(list(ready.iterdir())) < 2:          # start together
    time.sleep(0.01)
res, stats = sb.run_sweep(sweep(8, sleep=0.4), {out!r}, workers={workers}, progress=False)
print(stats, [r["square"] for r in res])
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_two_sweeps_on_one_folder_split_the_work(tmp_path, workers):
    log = tmp_path / "log"
    env = {**os.environ, "STORE_LOG": str(log), "PYTHONPATH": str(ROOT), "SENSBOOK_PROGRESS": "0"}
    code = CONCURRENT.format(root=str(ROOT), out=str(tmp_path), workers=workers)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
    squares = str([i * i for i in range(8)])
    assert all(squares in o for o, _ in outs)                # both return every result
    done = calls(log)
    assert sorted(i for _, i in done) == list(range(8))      # each computed exactly once
    by_sweep = [eval(o.split("}")[0] + "}") for o, _ in outs]
    assert sum(s["computed"] for s in by_sweep) == 8
    assert all(s["computed"] >= 1 for s in by_sweep)         # the work was split
    assert list((tmp_path / "s").glob("*.claim")) == []


# ---- processes ---------------------------------------------------------------------------------
KILLED = """
import sys
sys.path.insert(0, {root!r})
import sensbook as sb
s = sb.Sweep("k", [{{"i": i}} for i in range(4)], "tests.runtime.test_store:sleeper")
sb.run_sweep(s, {out!r}, workers=2, progress=False)
"""


def test_workers_die_with_their_parent(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "STORE_PIDS": str(pids), "PYTHONPATH": str(ROOT), "SENSBOOK_PROGRESS": "0"}
    parent = subprocess.Popen([sys.executable, "-c", KILLED.format(root=str(ROOT), out=str(tmp_path))],
                              env=env)
    deadline = time.time() + 120
    while len(list(pids.iterdir())) < 2 and time.time() < deadline and parent.poll() is None:
        time.sleep(0.1)
    workers = [int(p.name) for p in pids.iterdir()]
    assert len(workers) == 2 and all(_alive(w) for w in workers)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 15
    while any(_alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.1)
    alive = [w for w in workers if _alive(w)]
    for w in alive:                                          # do not leave them behind
        os.kill(w, signal.SIGKILL)
    assert alive == []


# ---- the command line --------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [",", "cpu,,cpu", " , "])
def test_cli_devices_without_a_device_is_an_error(tmp_path, capsys, bad):
    assert main(["sweep", "ch6", "--scale", "ci", "--out", str(tmp_path), "--devices", bad]) == 2
    assert "--devices" in capsys.readouterr().err


@pytest.mark.skipif(sb.device().type == "cuda", reason="this machine has CUDA")
def test_cli_cuda_without_cuda_names_the_option(tmp_path, capsys):
    assert main(["sweep", "ch6", "--out", str(tmp_path), "--devices", "cuda:0,cuda:1"]) == 2
    err = capsys.readouterr().err
    assert "--devices" in err and "CUDA" in err
    assert main(["sweep", "ch6", "--out", str(tmp_path), "--device", "cuda"]) == 2
    assert "--device=" in capsys.readouterr().err


def test_cli_honours_sensbook_scale_when_scale_is_absent(tmp_path, capsys, monkeypatch):
    for scale in ("ci", "paper"):
        monkeypatch.setenv("SENSBOOK_SCALE", scale)
        assert main(["sweep", "ch6", "--out", str(tmp_path), "--status"]) == 0
        n = len(sb.EXPERIMENTS["ch6.training"].configs(scale))
        assert f"@ {scale}: 0/{n} stored" in capsys.readouterr().out
    assert main(["sweep", "ch6", "--scale", "ci", "--out", str(tmp_path), "--status"]) == 0
    assert "@ ci:" in capsys.readouterr().out                # --scale wins over the variable
    monkeypatch.setenv("SENSBOOK_SCALE", "huge")
    assert main(["sweep", "ch6", "--out", str(tmp_path), "--status"]) == 2
    assert "SENSBOOK_SCALE='huge'" in capsys.readouterr().err


# ---- issue 21: ownerless claims, what a sweep waits for, records that are no files, keys ------
def bounded(fn, seconds=20.0):
    """fn() in a thread; its result, or a failure (not a hang) when it takes over ``seconds``."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:               # noqa: BLE001 - re-raised below
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize("content", ["", "{}", '{"owner": "x"', "[1]"])
def test_an_ownerless_claim_is_taken_over_at_once_and_said(tmp_path, monkeypatch, capsys,
                                                            content):
    log = tmp_path / "log"
    monkeypatch.setenv("STORE_LOG", str(log))
    store = sb.Store(tmp_path, "s")
    p = store.claim_path({"i": 1})
    p.parent.mkdir(parents=True)
    p.write_text(content)                    # what a full disk or a kill mid-claim leaves
    t = time.time() - 10                    # older than a write takes, younger than CLAIM_STALE
    os.utime(p, (t, t))
    res, stats = bounded(lambda: sb.run_sweep(sweep(), tmp_path, progress=False))
    assert stats["computed"] == 3 and res[1] == {"square": 1} and not p.exists()
    err = capsys.readouterr().err
    assert f"taking over the stale claim {p}: it names no owner" in err


def test_a_claim_is_never_ownerless_while_it_exists(tmp_path):
    store = sb.Store(tmp_path, "s")
    p = store.claim_path({"i": 1})
    p.parent.mkdir(parents=True)
    claim, _ = sw.Claim.take(p)
    try:
        owner = json.loads(p.read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        assert owner["pid_start"] == sw.process_start(os.getpid())
        assert not list(p.parent.glob(".*.tmp"))             # written whole, then linked
    finally:
        claim.release()
    assert not p.exists()


def test_a_sweep_says_what_it_waits_for(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sw, "CLAIM_POLL", 0.05)
    store = sb.Store(tmp_path, "s")
    p = _claim(store, {"i": 1}, "another-host", 4242)

    def other_runner_finishes():
        time.sleep(0.5)
        store.save({"i": 1}, {"square": 1})
        p.unlink()
    t = threading.Thread(target=other_runner_finishes)
    t.start()
    sb.run_sweep(sweep(), tmp_path, progress=False)
    t.join()
    err = capsys.readouterr().err
    assert err.count("waiting for") == 1                     # once, not once per poll
    assert "s: waiting for 1 configuration(s) another runner is computing (another-host:4242:x, "\
        "last heartbeat 0 s ago)" in err


NOT_A_FILE = {
    "a FIFO": (lambda p, tmp: (p.unlink(), os.mkfifo(p)), "is a FIFO, not a regular file"),
    "a link to /dev/zero": (lambda p, tmp: (p.unlink(), os.symlink("/dev/zero", p)),
                            "is a device, not a regular file"),
    "a link out of the store": (lambda p, tmp: (os.replace(p, tmp / "elsewhere.json"),
                                                os.symlink(tmp / "elsewhere.json", p)),
                                "links out of the store"),
    "over the size limit": (lambda p, tmp: None, "bytes, over the limit of 64"),
}


@pytest.mark.parametrize("how", list(NOT_A_FILE))
def test_only_regular_files_inside_the_store_are_read(tmp_path, monkeypatch, how):
    make, why = NOT_A_FILE[how]
    log = tmp_path / "log"
    monkeypatch.setenv("STORE_LOG", str(log))
    out = tmp_path / "store"
    sb.run_sweep(sweep(), out, progress=False)
    store = sb.Store(out, "s")
    p = store.path({"i": 1})
    make(p, tmp_path)
    if how == "over the size limit":
        monkeypatch.setattr(sw, "MAX_RECORD_BYTES", 64, raising=False)
    with pytest.warns(UserWarning, match=why):
        res, stats = bounded(lambda: sb.run_sweep(sweep(), out, progress=False))
    assert stats["computed"] == (3 if how == "over the size limit" else 1)
    assert res[1] == {"square": 1} and 1 in [i for _, i in calls(log)][3:]
    if how != "over the size limit":
        assert p.is_file() and not p.is_symlink()            # recomputed, a regular file now
        assert len(list(p.parent.glob(p.name + ".bad-*"))) == 1


def test_editor_lock_files_in_the_package_neither_crash_nor_change_the_key(tmp_path,
                                                                           monkeypatch):
    import sensbook.runtime.fingerprint as fp

    pkg = tmp_path / "sensbook"
    pkg.mkdir()
    for f in fp._PACKAGE.glob("*.py"):
        if f.stem.isidentifier():
            (pkg / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(fp, "_PACKAGE", pkg)
    clean = sw.version()
    (pkg / ".#model.py").symlink_to("root@host.12345:1700000000")   # Emacs: a dangling link
    (pkg / ".#geometry.py").write_text("root@host.12345:1700000000")  # Emacs without links
    (pkg / "#volume.py#").write_text("autosave")
    (pkg / "model copy.py").write_bytes((pkg / "model.py").read_bytes())
    os.mkfifo(pkg / ".#train.py")
    assert bounded(sw.version) == clean
    (pkg / "model.py").write_text((pkg / "model.py").read_text() + "\n# edited\n")
    assert sw.version() != clean                             # the modules still count


# ---- issue 30: one store for the sweep and the chapters, a relative $SENSBOOK_RESULTS included
def test_a_relative_results_folder_is_the_same_from_the_root_and_from_book(tmp_path,
                                                                           monkeypatch):
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    (tmp_path / "book").mkdir()
    sweep = sb.Sweep("rel", [{"i": 2}], "tests.runtime.test_store:logged")
    monkeypatch.setenv("SENSBOOK_RESULTS", "paper-results")
    monkeypatch.chdir(tmp_path)                            # `sensbook sweep` at the root
    assert sb.results_dir() == tmp_path / "paper-results"
    sb.run_sweep(sweep, progress=False)
    monkeypatch.chdir(tmp_path / "book")                   # a chapter's kernel runs in book/
    assert sb.results_dir() == tmp_path / "paper-results"
    assert sb.run_sweep(sweep, progress=False, compute=False)[1]["stored"] == 1
    monkeypatch.setenv("SENSBOOK_RESULTS", str(tmp_path / "abs"))   # absolute: as given
    assert sb.results_dir() == tmp_path / "abs"
    monkeypatch.delenv("SENSBOOK_RESULTS")
    assert sb.results_dir() == tmp_path / "results"


@pytest.mark.parametrize("command", [["sweep", "test.fake", "--scale", "ci"], ["calibrate", "test.fake"],
                                     ["sweep", "test.fake", "--scale", "ci", "--workers", "2"]])
def test_a_store_that_is_a_file_is_one_line_and_nothing_computed(command, tmp_path, monkeypatch,
                                                                  capsys):
    """Issue 30: `--out FILE` was a traceback ending in OSError (calibrate: after computing)."""
    from tests.runtime.test_executors import fake_experiment
    fake_experiment(monkeypatch, n=3)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    (tmp_path / "file").write_text("not a folder")
    assert main(command + ["--out", str(tmp_path / "file")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{tmp_path / 'file'} is a file, not a folder; nothing was computed" in err
    assert not (tmp_path / "log").exists()


def test_records_say_where_they_were_computed_and_are_read_on_any_path(tmp_path):
    """Issue 43: a record's meta names the kernel path torch ran (and the CPU); its key does
    not, so a store computed on one path is read, not recomputed, on another."""
    import torch

    st = sw.Store(tmp_path, "fake", "v1")
    st.save({"i": 1}, {"square": 1}, {"device": "cpu"})
    meta = st.record({"i": 1})["meta"]
    assert meta["kernel"] == torch.backends.cpu.get_cpu_capability() and meta["cpu"], meta
    assert meta["device"] == "cpu"
    code = ("import sys, torch, sensbook.runtime.store as sw; st = sw.Store(sys.argv[1], 'fake', "
            "'v1'); print(st.load({'i': 1}), sw.key({'i': 1}, 'v1')); "
            "st.save({'i': 2}, {'square': 4}); print(st.record({'i': 2})['meta']['kernel'])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, check=True, cwd=ROOT,
                         env=dict(os.environ, ATEN_CPU_CAPABILITY="default",
                                  PYTHONPATH=str(ROOT))).stdout.split("\n")
    assert out[0] == f"{{'square': 1}} {sw.key({'i': 1}, 'v1')}", out
    assert out[1] == "DEFAULT", out
