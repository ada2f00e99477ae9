"""The sweep runner: keys, atomic storage, skip, resume after an exception or a hard kill."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

import sensbook as sb
import sensbook.runtime.fingerprint
import sensbook.runtime.store
from sensbook.cli import main
from sensbook.experiments import ch6_training as ch6

ROOT = pathlib.Path(__file__).resolve().parents[2]


# A cheap runner. Every call is logged to $FAKE_LOG (one line per call); $FAKE_FAIL_AT=i makes
# the call for config i raise, $FAKE_KILL_AT=i makes it SIGKILL its own process (once: the
# variable names a marker file that is deleted first).
def fake(config):
    log = os.environ.get("FAKE_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"{config['i']}\n")
    if str(config["i"]) == os.environ.get("FAKE_FAIL_AT"):
        raise RuntimeError(f"injected failure at {config['i']}")
    marker = os.environ.get("FAKE_KILL_MARKER")
    if marker and str(config["i"]) == os.environ.get("FAKE_KILL_AT") and os.path.exists(marker):
        os.remove(marker)
        os.kill(os.getpid(), signal.SIGKILL)
    if config.get("tag") == "device":
        return {"square": config["i"] ** 2, "tag": os.environ.get("SENSBOOK_DEVICE")}
    return {"square": config["i"] ** 2, "tag": config.get("tag")}


def progress_setting(config):
    """The progress setting the runner sees (``$SENSBOOK_PROGRESS``)."""
    return {"progress": os.environ.get("SENSBOOK_PROGRESS", "unset")}


def sweep(n=6, tag="a"):
    return sb.Sweep("fake", [{"i": i, "tag": tag} for i in range(n)], "tests.runtime.test_sweep:fake")


def calls(log):
    return [int(l) for l in pathlib.Path(log).read_text().split()] if pathlib.Path(log).exists() else []


def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(pathlib.Path(folder).glob("*.json"))}


def test_keys_change_with_the_configuration_and_the_version():
    c = {"a": 1, "b": [1, 2], "p": {"lr": 0.001}}
    k = sb.key(c, "1.0")
    assert k == sb.key({"p": {"lr": 0.001}, "b": [1, 2], "a": 1}, "1.0")     # order-free
    assert k != sb.key({**c, "a": 2}, "1.0")
    assert k != sb.key({**c, "p": {"lr": 0.002}}, "1.0")
    assert k != sb.key(c, "1.1")
    assert sb.key(c) == sb.key(c, sb.results_version())
    assert sb.results_version().startswith(sb.__version__ + "+")


def test_chapter6_configurations_have_distinct_keys_at_every_scale():
    keys = set()
    for scale in sb.SCALES:
        cs = ch6.sweep(scale).configs
        ks = {sb.key(c) for c in cs}
        assert len(ks) == len(cs)
        keys |= ks
    assert len(keys) == sum(len(ch6.sweep(s).configs) for s in sb.SCALES)


def test_non_json_configs_are_rejected():
    with pytest.raises(ValueError, match="config"):
        sb.key({"x": float("nan")})
    with pytest.raises(ValueError, match="config"):
        sb.key({"x": object()})


def test_store_is_atomic_and_checks_config_and_version(tmp_path):
    st = sb.Store(tmp_path, "s", version="v1")
    c = {"i": 1}
    assert st.load(c) is None
    p = st.save(c, {"y": 2})
    assert st.load(c) == {"y": 2} and p.parent == tmp_path / "s"
    assert [q.name for q in (tmp_path / "s").iterdir()] == [p.name]          # no temp files left
    assert sb.Store(tmp_path, "s", version="v2").load(c) is None             # other version
    # a file whose recorded config differs (e.g. a hash collision or a hand edit) is not used
    rec = json.loads(p.read_text()); rec["config"] = {"i": 2}; p.write_text(json.dumps(rec))
    assert st.load(c) is None
    p.write_text("{ truncated")                                               # a torn file
    assert st.load(c) is None
    with pytest.raises(ValueError, match="name"):
        sb.Store(tmp_path, "../x")


def test_rerun_skips_what_is_done(tmp_path, monkeypatch):
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    res, stats = sb.run_sweep(sweep(), tmp_path, progress=False)
    assert [r["square"] for r in res] == [i * i for i in range(6)]
    assert stats == {"stored": 0, "computed": 6, "missing": 0} and calls(log) == list(range(6))
    before = snapshot(tmp_path / "fake")
    res2, stats2 = sb.run_sweep(sweep(), tmp_path, progress=False)
    assert res2 == res and stats2 == {"stored": 6, "computed": 0, "missing": 0}
    assert calls(log) == list(range(6)) and snapshot(tmp_path / "fake") == before
    # a changed configuration is a new key: only it is computed
    res3, stats3 = sb.run_sweep(sweep(7), tmp_path, progress=False)
    assert stats3["computed"] == 1 and calls(log)[-1] == 6
    # compute=False reads only
    res4, stats4 = sb.run_sweep(sweep(3, tag="b"), tmp_path, progress=False, compute=False)
    assert res4 == [None] * 3 and stats4["missing"] == 3


def test_resume_after_an_exception_recomputes_nothing_and_loses_nothing(tmp_path, monkeypatch):
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_FAIL_AT", "3")
    with pytest.raises(RuntimeError, match="injected"):
        sb.run_sweep(sweep(), tmp_path, progress=False)
    assert len(snapshot(tmp_path / "fake")) == 3                              # 0, 1, 2 stored
    kept = snapshot(tmp_path / "fake")
    monkeypatch.delenv("FAKE_FAIL_AT")
    res, stats = sb.run_sweep(sweep(), tmp_path, progress=False)
    assert stats == {"stored": 3, "computed": 3, "missing": 0}
    assert calls(log) == [0, 1, 2, 3, 3, 4, 5]                               # 3 failed, then ran once
    after = snapshot(tmp_path / "fake")
    assert all(after[k] == v for k, v in kept.items()) and len(after) == 6
    assert [r["square"] for r in res] == [i * i for i in range(6)]


SCRIPT = """
import sys, sensbook as sb
sys.path.insert(0, {root!r})
from tests.runtime.test_sweep import sweep
res, stats = sb.run_sweep(sweep(), {out!r}, workers={workers}, progress=False)
print(stats)
"""


@pytest.mark.parametrize("workers", [1, 2])
def test_a_killed_sweep_resumes(tmp_path, workers):
    """SIGKILL midway (the process running config 3 kills itself): rerun, nothing lost or redone."""
    log, marker = tmp_path / "log", tmp_path / "armed"
    marker.touch()
    env = {**os.environ, "FAKE_LOG": str(log), "FAKE_KILL_AT": "3", "FAKE_KILL_MARKER": str(marker),
           "PYTHONPATH": str(ROOT), "SENSBOOK_PROGRESS": "0"}
    code = SCRIPT.format(root=str(ROOT), out=str(tmp_path), workers=workers)
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert first.returncode != 0 and not marker.exists()                     # it was killed
    kept = snapshot(tmp_path / "fake")
    assert 3 not in [json.loads(v)["config"]["i"] for v in kept.values()]
    if workers == 1:
        assert len(kept) == 3                                                # 0, 1, 2 finished
    done_first = set(calls(log)) - {3}
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert second.returncode == 0, second.stderr
    after = snapshot(tmp_path / "fake")
    assert len(after) == 6 and all(after[k] == v for k, v in kept.items())   # nothing lost
    stored_first = {json.loads(v)["config"]["i"] for v in kept.values()}
    redone = calls(log)[len(calls(log)) - (6 - len(kept)):]
    assert set(redone) == set(range(6)) - stored_first                       # nothing recomputed
    assert f"'stored': {len(kept)}" in second.stdout
    assert stored_first <= done_first


def test_workers_give_the_same_results(tmp_path):
    a, _ = sb.run_sweep(sweep(5), tmp_path / "one", progress=False)
    b, stats = sb.run_sweep(sweep(5), tmp_path / "two", workers=2, progress=False)
    assert a == b and stats["computed"] == 5
    strip = lambda snap: {k: {**json.loads(v), "meta": None} for k, v in snap.items()}
    assert strip(snapshot(tmp_path / "one" / "fake")) == strip(snapshot(tmp_path / "two" / "fake"))


def test_workers_are_spread_over_devices(tmp_path):
    # two names torch accepts on any machine (a device is checked where it is read: issue 21)
    res, _ = sb.run_sweep(sweep(6, tag="device"), tmp_path, workers=2, devices=["cpu:0", "cpu:1"],
                          progress=False)
    assert {r["tag"] for r in res} <= {"cpu:0", "cpu:1"} and None not in {r["tag"] for r in res}
    with pytest.raises(ValueError, match="devices"):
        sb.run_sweep(sweep(2), tmp_path, workers=1, devices=["cuda:0"])


def test_real_runner_results_round_trip(tmp_path):
    pr = sb.Protocol(D=8, L=1, H=2, steps=5, batch=8)
    c = dict(target="FIRST", N=5, seeds=[0, 1], protocol=pr.to_dict(), **ch6.EVAL)
    s = sb.Sweep("real", [c], "sensbook.experiments.ch6_training:run_config")
    (r,), _ = sb.run_sweep(s, tmp_path, progress=False)
    (r2,), stats = sb.run_sweep(s, tmp_path, progress=False)
    assert stats["stored"] == 1 and r2 == json.loads(json.dumps(r))


def test_bad_arguments_raise(tmp_path):
    with pytest.raises(ValueError, match="workers"):
        sb.run_sweep(sweep(), tmp_path, workers=0)
    with pytest.raises(ValueError, match="duplicates"):
        sb.Sweep("d", [{"i": 1}, {"i": 1}], "tests.runtime.test_sweep:fake")
    with pytest.raises(ValueError, match="runner"):
        sb.Sweep("d", [{"i": 1}], "no_colon")
    with pytest.raises(ValueError, match="experiment='ch9' is unknown"):
        sb.experiments_select("ch9")
    with pytest.raises(ValueError, match="scale='huge'"):
        sb.EXPERIMENTS["ch6.training"].sweep("huge")


def test_cli_status_and_list(tmp_path, capsys):
    assert main(["list"]) == 0
    assert "ch6" in capsys.readouterr().out
    assert main(["sweep", "ch6", "--scale", "ci", "--out", str(tmp_path), "--status"]) == 0
    n = len(ch6.sweep("ci").configs)
    assert f"0/{n} stored" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["sweep", "ch6", "--scale", "huge"])


def test_console_script_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'sensbook = "sensbook.cli:main"' in text


def test_key_covers_the_runners_imports_only():
    files = lambda runner=None: {p.relative_to(p.parents[1] if p.parent.name != "sensbook"
                                               else p.parent).as_posix()
                                 for p in sensbook.runtime.fingerprint.fingerprinted_files(runner)}
    ch6_files = files("sensbook.experiments.ch6_training:run_config")
    for m in ("boolean.py", "model.py", "profile.py", "train.py", "geometry.py", "volume.py",
              "settings.py", "experiments/ch6_training.py", "experiments/__init__.py"):
        assert m in ch6_files
    # the command line, the runtime, the other chapters' experiments and the instruments
    # chapter 6 never imports (the certificates) are not in ch6's key
    assert not {"cli.py", "__init__.py", "pages.py", "experiments/ch2.py", "zonotope.py",
                "attack.py", "certify.py"} & ch6_files
    assert not any(f.startswith("runtime/") for f in ch6_files)
    assert {"zonotope.py", "attack.py", "certify.py", "experiments/ch5.py"} <= files(
        "sensbook.experiments.ch5_certified:attack_one")
    assert {f for f in ch6_files if "/" not in f} < files()
    assert files() == {p.name for p in sensbook.runtime.fingerprint._PACKAGE.glob("*.py")} - {
        "cli.py", "__init__.py", "pages.py"}
    v = sensbook.runtime.fingerprint.version
    assert v("sensbook.experiments.ch6_training:run_config") != v("sensbook.experiments.ch2:e1_cell")
    assert v("tests.runtime.test_sweep:fake") == v()        # code outside the package: every instrument


def test_key_is_closed_under_the_imports_of_its_files():
    """Read by a regular expression (not the store's parser): every module of the package that a
    fingerprinted file imports by a relative ``from`` is fingerprinted too, for every runner of
    every experiment, unless it is the runtime or a module that computes nothing."""
    import re

    pkg = sensbook.runtime.fingerprint._PACKAGE
    runners = {e.sweep("ci").runner for e in sb.experiments.registry().values()}
    for runner in sorted(runners):
        key = set(sensbook.runtime.fingerprint.fingerprinted_files(runner))
        for f in key:
            for dots, mod, names in re.findall(r"^\s*from (\.+)([\w.]*) import \(?([\w, \n]+)",
                                               f.read_text(), re.M):
                base = f.parent
                for _ in range(len(dots) - 1):
                    base = base.parent
                target = base.joinpath(*mod.split(".")) if mod else base
                cands = [target.with_suffix(".py")] + [target / f"{n.strip()}.py"
                                                       for n in names.split(",") if n.strip()]
                for c in cands:
                    if c.is_file() and "runtime" not in c.relative_to(pkg).parts and \
                            c.name not in ("cli.py", "pages.py", "__init__.py"):
                        assert c in key, (runner, f.name, c.name)


def test_stored_results_record_device_and_seconds(tmp_path):
    (r,), _ = sb.run_sweep(sweep(1), tmp_path, progress=False)
    rec = sb.Store(tmp_path, "fake").record({"i": 0, "tag": "a"})
    assert rec["result"] == r and rec["meta"]["device"] in ("cpu", "cuda")
    assert rec["meta"]["seconds"] >= 0 and rec["meta"]["torch"]



def test_in_process_configurations_compute_in_one_thread_and_the_setting_is_restored(tmp_path):
    """Issue 28: a notebook's kernel (Colab: two threads) computes its configurations in one
    thread, as the cost models assume, and gets its own setting back afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        sb.run_sweep(sweep(2), tmp_path, progress=False)
        assert torch.get_num_threads() == 2
        threads = [sb.Store(tmp_path, "fake").record({"i": i, "tag": "a"})["meta"]["threads"]
                   for i in range(2)]
        assert threads == [1, 1]
        sb.experiments.run_pool([(sweep(3, tag="b"), lambda c: 1.0)], tmp_path, progress=False)
        assert torch.get_num_threads() == 2
        assert sb.Store(tmp_path, "fake").record({"i": 2, "tag": "b"})["meta"]["threads"] == 1
    finally:
        torch.set_num_threads(before)



def test_the_pool_progress_bar_counts_predicted_seconds_so_its_time_left_holds(tmp_path,
                                                                              monkeypatch):
    """Issue 39: the configurations run longest first, so a bar counting configurations
    promised 2:49:13 left after 7 minutes of a 15-minute run; it counts predicted seconds."""
    from tqdm import tqdm

    bars = []

    class Bar:
        def __init__(self, total=None, desc=None, **kw):
            self.total, self.desc, self.kw, self.updates = total, desc, kw, []
            bars.append(self)

        def update(self, n):
            self.updates.append(n)

        def close(self):
            pass

    sb.run_sweep(sb.Sweep("fake", [{"i": 0, "tag": "a"}], "tests.runtime.test_sweep:fake"),
                 tmp_path, progress=False)                          # one already stored
    monkeypatch.setattr(sensbook.runtime.sweep, "_progress", Bar)
    sb.experiments.run_pool([(sweep(4), lambda c: 10.0 * (c["i"] + 1))], tmp_path)
    (bar,) = bars
    assert bar.total == 20 + 30 + 40 and bar.updates == [40, 30, 20]
    # 40 of 90 predicted seconds done after 60 s: 50 left at that rate is 75 s
    line = tqdm.format_meter(40, bar.total, 60, prefix=bar.desc, **bar.kw)
    assert "40/90 predicted CPU s" in line and "[01:00<01:15]" in line, line


def test_pool_workers_run_without_inner_progress_bars(tmp_path, monkeypatch):
    """`make book`'s log: runners' own bars (flip_hinge N=256, ...) from two workers
    interleaved with the pool's bar. Workers run with ``SENSBOOK_PROGRESS=0``; the parent's
    setting is left as it was."""
    monkeypatch.setenv("SENSBOOK_PROGRESS", "1")
    s = sb.Sweep("bars", [{"i": i} for i in range(3)], "tests.runtime.test_sweep:progress_setting")
    sb.experiments.run_pool([(s, lambda c: 1.0)], tmp_path, workers=2, progress=False)
    got = [sb.Store(tmp_path, "bars").record({"i": i})["result"]["progress"] for i in range(3)]
    assert got == ["0", "0", "0"] and os.environ["SENSBOOK_PROGRESS"] == "1"


# ---- issue 21: interrupted and crowded sweeps, devices checked where read, calibrate ---------
INTERRUPTED = """
import sys
import time
sys.path.insert(0, {root!r})
from sensbook.experiments import EXPERIMENTS, Experiment, registry
from sensbook.cli import main
registry()
EXPERIMENTS["test.slow"] = Experiment(
    "test.slow", lambda s: [{{"i": i, "sleep": 1.0}} for i in range(48)],
    "tests.runtime.test_store:logged", lambda c: 1.0)
sys.exit(main(["sweep", "test.slow", "--scale", "ci", "--out", {out!r}, "--workers", "2"]))
"""


def _interrupted_sweep(log, out):
    """The INTERRUPTED sweep in its own process group, started as from a terminal (SIGINT at its
    default: a test run launched in the background of a script inherits SIGINT ignored, and
    Python keeps an inherited SIG_IGN)."""
    env = {**os.environ, "STORE_LOG": str(log), "PYTHONPATH": str(ROOT), "SENSBOOK_PROGRESS": "0"}
    return subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED.format(root=str(ROOT), out=str(out))], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_ctrl_c_stops_a_pool_at_once_keeps_what_is_stored_and_says_how_to_resume(tmp_path):
    from tests.runtime.test_store import _alive
    log, out = tmp_path / "log", tmp_path / "out"
    p = _interrupted_sweep(log, out)
    try:
        deadline = time.time() + 120
        # both workers busy (each has logged a call; on a loaded machine the second may start
        # after the first has stored a result), claims held
        while ((not list((out / "test.slow").glob("*.json")) or len({w for w, _ in sb_calls(log)}) < 2)
               and time.time() < deadline):
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGINT)      # Ctrl-C in a terminal: the whole process group
        _, err = p.communicate(timeout=40)   # 48 x 1 s on 2 workers would take 24 s more
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, err
    assert "Traceback" not in err and "run the same command again to resume" in err
    stored = list((out / "test.slow").glob("*.json"))
    assert 1 <= len(stored) < 48 and f"{len(stored)} of 48 configurations are stored" in err
    assert not list((out / "test.slow").glob("*.claim"))    # released, nothing to wait for
    workers = {pid for pid, _ in sb_calls(log)}
    assert len(workers) == 2 and not any(_alive(w) for w in workers)
    runner = "tests.runtime.test_store:logged"
    store = sb.Store(out, "test.slow", sensbook.runtime.store.version(runner))
    assert sum(store.done({"i": i, "sleep": 1.0}) for i in range(48)) == len(stored)


def sb_calls(log):
    from tests.runtime.test_store import calls as store_calls
    return store_calls(log)


class FakePool:
    """A ProcessPoolExecutor stand-in that records its size and runs each job at once."""

    sizes = []

    def __init__(self, max_workers, **kwargs):
        FakePool.sizes.append(max_workers)

    def submit(self, fn, *args):
        from concurrent.futures import Future
        f = Future()
        f.set_result(fn(*args))
        return f

    def shutdown(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.shutdown()


@pytest.mark.parametrize("cores, free_mb, cut, why", [
    (2, 10**6, 2, "this machine has 2 core"),
    (64, 1100, 2, "this machine has 1.1 GiB of memory available (512 MB per worker)"),
])
def test_workers_are_bounded_by_cores_and_memory_with_a_warning(tmp_path, monkeypatch, cores,
                                                                 free_mb, cut, why):
    import sensbook.runtime.sweep as sweep_mod
    from sensbook.experiments import run_all
    from tests.runtime.test_executors import fake_experiment
    monkeypatch.setattr(sweep_mod, "ProcessPoolExecutor", FakePool)
    monkeypatch.setattr(sweep_mod, "_cores", lambda: cores, raising=False)
    monkeypatch.setattr(sweep_mod, "_available_mb", lambda: free_mb, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    FakePool.sizes = []
    with pytest.warns(UserWarning, match=re.escape(f"workers=64 cut to {cut}: {why}")):
        res, stats = sb.run_sweep(sweep(6), tmp_path / "a", workers=64, progress=False)
    assert FakePool.sizes == [cut] and stats["computed"] == 6
    assert [r["square"] for r in res] == [i * i for i in range(6)]
    exp = fake_experiment(monkeypatch, n=5)               # `sweep all --workers 1000`: one pool
    with pytest.warns(UserWarning, match=f"workers=1000 cut to {cut}"):
        assert run_all([exp], "ci", tmp_path / "b", workers=1000, progress=False) == \
            {"test.fake": (0, 5)}
    assert FakePool.sizes == [cut, cut]
    FakePool.sizes = []
    sb.run_sweep(sweep(6), tmp_path / "c", workers=2, progress=False)   # within bounds: no cut
    assert FakePool.sizes == [2]


@pytest.mark.parametrize("name", ["mps", "xpu", "meta"])
def test_a_device_this_machine_lacks_is_refused_not_recorded(name, tmp_path, monkeypatch, capsys):
    """Issue 30: mps / xpu / meta were accepted and results stored as computed on them."""
    import torch
    if name != "meta" and sb.settings._available(name):
        pytest.skip(f"this machine has {name}")
    monkeypatch.setenv("SENSBOOK_DEVICE", name)
    with pytest.raises(ValueError, match=f"SENSBOOK_DEVICE='{name}': a '{name}' device .*"
                                         "allowed here: cpu"):
        sb.run_sweep(sweep(2), tmp_path, progress=False)
    assert not snapshot(tmp_path / "fake")
    monkeypatch.delenv("SENSBOOK_DEVICE")
    with pytest.raises(ValueError, match=f"device='{name}'"):
        sb.Recognizer(device=name)
    from tests.runtime.test_executors import fake_experiment
    fake_experiment(monkeypatch, n=2)
    assert main(["sweep", "test.fake", "--scale", "ci", "--out", str(tmp_path),
                 "--device", name]) == 2
    assert f"--device='{name}'" in capsys.readouterr().err
    assert torch.device(name).type == name                 # torch itself knows the name


def test_a_bad_sensbook_device_is_refused_where_it_is_read(tmp_path, monkeypatch, capsys):
    from tests.runtime.test_executors import fake_experiment
    monkeypatch.setenv("SENSBOOK_DEVICE", "banana")
    with pytest.raises(ValueError, match="SENSBOOK_DEVICE='banana' is not a torch device"):
        sb.run_sweep(sweep(2), tmp_path, progress=False)
    assert not snapshot(tmp_path / "fake")                   # nothing stored as run on "banana"
    fake_experiment(monkeypatch, n=2)
    assert main(["sweep", "test.fake", "--scale", "ci", "--out", str(tmp_path)]) == 2
    assert "SENSBOOK_DEVICE='banana' is not a torch device" in capsys.readouterr().err
    monkeypatch.setenv("SENSBOOK_DEVICE", "cpu")
    sb.run_sweep(sweep(2), tmp_path, progress=False)
    assert {sb.Store(tmp_path, "fake").record(c)["meta"]["device"] for c in sweep(2).configs} \
        == {"cpu"}


def test_calibrate_always_computes_in_a_scratch_store(tmp_path, monkeypatch, capsys):
    from tests.runtime.test_executors import fake_experiment
    exp = fake_experiment(monkeypatch, n=2)
    out = tmp_path / "store"
    sb.run_experiment(exp.name, "ci", out, progress=False)   # everything already stored
    before = snapshot(out / exp.name)
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    capsys.readouterr()
    assert main(["calibrate", exp.name, "--out", str(out)]) == 0
    assert calls(log) == [0, 1]                              # computed, not read from --out
    text = capsys.readouterr().out
    assert text.count("test.fake: measured") == 2 and "predicted     0.10 s" in text
    assert snapshot(out / exp.name) == before                # what --out held is untouched
    assert main(["calibrate", exp.name, "--out", str(tmp_path / "new")]) == 0
    assert calls(log) == [0, 1, 0, 1]
    assert len(snapshot(tmp_path / "new" / exp.name)) == 2   # kept where --out says


def test_cpu_devices_add_no_cores(tmp_path, monkeypatch):
    """Issue 30: `--devices cpu,cpu,cpu,cpu,cpu` started 5 workers on 2 cores."""
    import sensbook.runtime.sweep as sweep_mod
    monkeypatch.setattr(sweep_mod, "ProcessPoolExecutor", FakePool)
    monkeypatch.setattr(sweep_mod, "_cores", lambda: 2, raising=False)
    monkeypatch.setattr(sweep_mod, "_available_mb", lambda: 10**6, raising=False)
    FakePool.sizes = []
    with pytest.warns(UserWarning, match="workers=5 cut to 2: this machine has 2 core"):
        _, stats = sb.run_sweep(sweep(6), tmp_path, workers=5, devices=["cpu"] * 5,
                                progress=False)
    assert FakePool.sizes == [2] and stats["computed"] == 6
    assert sweep_mod.bound_workers(4, ["cuda:0", "cuda:1", "cuda:2", "cuda:3"]) == 4   # GPUs do


def test_an_interrupted_pool_has_closed_its_wakeup_pipe_before_the_exit_hook_runs(tmp_path):
    # Python 3.11's exit hook writes to every live pool's wakeup pipe while the pool's manager
    # thread may be closing it (a "Bad file descriptor" traceback after Ctrl-C's message):
    # an interrupted sweep must return only once its manager thread has closed the pipe
    import _thread
    import signal
    import threading
    from concurrent.futures import process as cfp
    from sensbook.runtime.sweep import Interrupted

    sweep = sb.Sweep("test.slow", [{"i": i, "sleep": 1.0} for i in range(8)],
                     "tests.runtime.test_store:logged")
    out = tmp_path / "out"

    def interrupt_once_one_is_stored():
        while not list((out / "test.slow").glob("*.json")):
            time.sleep(0.02)
        _thread.interrupt_main()                 # what Ctrl-C does to the main thread

    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_once_one_is_stored, daemon=True).start()
        with pytest.raises(Interrupted):
            sb.run_sweep(sweep, out, workers=2, progress=False)
    finally:
        signal.signal(signal.SIGINT, old)
    assert all(w._closed for w in cfp._threads_wakeups.values()), "a pool's pipe is still open"


def _children(pid):
    try:
        return [int(c) for t in pathlib.Path(f"/proc/{pid}/task").iterdir()
                for c in (t / "children").read_text().split()]
    except OSError:
        return []


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").exists(), reason="Linux /proc")
def test_ctrl_c_while_workers_start_prints_one_line_and_no_worker_traceback(tmp_path):
    """Issue 48 ("Also"): Ctrl-C reaches the whole process group; a worker still importing
    (spawned, its initializer not yet run) printed a KeyboardInterrupt traceback above the
    sweep's one line. Workers now start with SIGINT ignored."""
    log, out = tmp_path / "log", tmp_path / "out"
    p = _interrupted_sweep(log, out)
    try:
        deadline = time.time() + 120
        while len(_children(p.pid)) < 2 and time.time() < deadline:   # spawned, starting up
            time.sleep(0.005)
        time.sleep(0.3)                      # inside their start-up (imports), not yet set up
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "run the same command again to resume" in err


def test_list_measured_reads_the_stored_cpu_seconds_against_the_uncalibrated_model(
        tmp_path, monkeypatch, capsys):
    """`sensbook list --scale ci --measured STORE`: the CPU seconds the stored results took
    (meta.cpu_seconds, summed) beside the calibrated prediction, and their factor over the
    model before calibration (what COST_CALIBRATION is set from)."""
    import json
    from sensbook import experiments as ex
    from tests.runtime.test_executors import fake_experiment
    exp = fake_experiment(monkeypatch, n=2)
    out = tmp_path / "store"
    sb.run_experiment(exp.name, "ci", out, progress=False)
    for f in (out / exp.name).glob("*.json"):             # each record: 0.3 CPU seconds
        rec = json.loads(f.read_text())
        rec["meta"]["cpu_seconds"] = 0.3
        rec["sha256"] = sb.runtime.store._checksum(rec)
        f.write_text(json.dumps(rec))
    capsys.readouterr()
    assert main(["list", "--scale", "ci", "--measured", str(out)]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("test.fake"))
    assert line.split()[1:] == ["2/2", "0.2", "0.6", "3.00"]  # 2 x 0.1 predicted, 2 x 0.3
    monkeypatch.setitem(ex.COST_CALIBRATION, "test.fake", 3.0)   # calibrated: 3 x the model
    cal = ex.Experiment("test.fake", exp.configs, exp.runner, lambda c: 0.1)
    monkeypatch.setitem(ex.EXPERIMENTS, "test.fake", cal)
    assert main(["list", "--scale", "ci", "--measured", str(out)]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("test.fake"))
    assert line.split()[1:] == ["2/2", "0.6", "0.6", "3.00"]
    assert main(["list", "--measured", str(out)]) == 2     # which scale the store is of
    assert "--measured needs --scale" in capsys.readouterr().err
