"""Saved profiles, what they record, comparing them, and the `sensbook profile` command
(issues 47 items 4-8, 48 items 1-3, 6-8 and 12, 46 item 2). Each test builds its fault and
fails on the code before these fixes."""
import json
import math
import multiprocessing
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from torch import nn

import sensbook as sb
from sensbook import cli

ROOT = pathlib.Path(sb.__file__).resolve().parents[1]
first_two = lambda x: x[:, 0] + x[:, 1] - 1.5               # noqa: E731


def sampled(N=6, n=300, seed=0, **kw):
    return sb.sensitivity_profile(first_two, N, n_samples=n, seed=seed, progress=False, **kw)


# ---- 47.4 / 48.8: every field of a saved profile is checked -------------------------------------
EDITS = {                                       # what is edited: (the error names, the edit)
    "exact 'false'": ("exact must be true or false", lambda d: d.update(exact="false")),
    "counts 1.25": ("counts must be .*integers", lambda d: d["counts"].__setitem__(0, 1.25)),
    "counts -100": ("counts must be .*>= 0", lambda d: d["counts"].__setitem__(0, -100)),
    "counts past n_strings": ("sum to .* not n_strings",
                              lambda d: d["counts"].__setitem__(0, d["counts"][0] + 5)),
    "n_strings 0": ("n_strings must be an integer >= 1", lambda d: d.update(n_strings=0)),
    "n_strings -5": ("n_strings must be an integer >= 1", lambda d: d.update(n_strings=-5)),
    "N 6.9": ("N must be an integer >= 1", lambda d: d.update(N=6.9)),
    "N -1": ("N must be an integer >= 1", lambda d: d.update(N=-1)),
    "undecided shape": ("undecided has shape", lambda d: d.update(undecided=[0, 0])),
    "accepted": ("accepted .* exceeds", lambda d: d.update(accepted=d["n_strings"] + 1)),
    "a consistent edit": ("checksum does not match", lambda d: (
        d["counts"].__setitem__(0, d["counts"][0] - 1),
        d["counts"].__setitem__(1, d["counts"][1] + 1))),
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_saved_profile_is_refused_naming_the_field(edit, tmp_path):
    p = sampled()
    d = p.to_dict()
    message, change = EDITS[edit]
    change(d)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=message):
        sb.Profile.load(path)


def test_a_saved_profile_without_checksum_still_loads_when_consistent():
    p = sb.sensitivity_profile(first_two, 5, progress=False)
    d = p.to_dict()
    del d["checksum"]
    assert sb.Profile.from_dict(d) == p
    d["exact"] = 1                                          # an integer is not a boolean
    with pytest.raises(ValueError, match="exact"):
        sb.Profile.from_dict(d)


# ---- 48.1 / 48.2: save writes only regular files, through a unique temporary file ---------------
def test_save_refuses_a_fifo_and_a_folder_and_leaves_nothing_behind(tmp_path):
    p = sampled()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        p.save(fifo)
    assert fifo.is_fifo()
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(ValueError, match="folder"):
        p.save(folder)
    assert folder.is_dir() and sorted(x.name for x in tmp_path.iterdir()) == ["fifo", "folder"]


def test_a_failed_save_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    p = sampled()
    path = tmp_path / "p.json"
    p.save(path)
    before = path.read_text()
    with pytest.raises(TypeError):
        sampled(seed=1).save(path, steps=np.int64(3))       # numpy int: not JSON
    assert path.read_text() == before and [x.name for x in tmp_path.iterdir()] == ["p.json"]


def _writer(path, seed, rounds, errors):
    p = sb.sensitivity_profile(first_two, 6, n_samples=50 + seed, seed=seed, progress=False)
    for _ in range(rounds):
        try:
            p.save(path)
        except Exception as e:                             # noqa: BLE001 - counted
            errors.put(repr(e))


def test_concurrent_saves_never_expose_a_damaged_file(tmp_path):
    path = str(tmp_path / "p.json")
    sampled().save(path)
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(path, s, 150, errors)) for s in (1, 2)]
    for pr in procs:
        pr.start()
    reads = bad = 0
    while any(pr.is_alive() for pr in procs):
        try:
            sb.Profile.load(path)
        except (ValueError, OSError):
            bad += 1
        reads += 1
    for pr in procs:
        pr.join()
    failed = []
    while not errors.empty():
        failed.append(errors.get())
    assert reads > 0 and bad == 0 and not failed, (reads, bad, failed[:3])
    assert [x.name for x in tmp_path.iterdir()] == ["p.json"]


# ---- 47.5 / 48.7: a profile carries how the model was read ----------------------------------------
def test_sampled_profile_records_the_positions_it_flipped_and_its_reading():
    direct = sb.sampled_profile(first_two, 8, 100, bits=(b for b in [2, 1]), seed=3,
                                progress=False)
    assert direct.meta["bits"] == [1, 2] and direct.meta["seed"] == 3
    assert direct.meta["margin"] == 0.0 and direct.meta["sampler"] is None
    dup = sb.sampled_profile(first_two, 8, 100, bits=[1, 1, 1], progress=False)
    assert dup.meta["bits"] == [1] and int(dup.counts[2:].sum()) == 0     # flipped once
    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(9, 4), nn.Flatten(1), nn.Linear(4 * 10, 1))
    clf = sb.TorchClassifier(net, tokens=((3, 5), (4, 6)), prefix=[2], suffix=[8], sep=[7])
    p = sb.sensitivity_profile(clf, 3, progress=False)
    assert (p.meta["tokens"], p.meta["prefix"], p.meta["suffix"], p.meta["sep"]) == \
        ([[3, 5], [4, 6]], [2], [8], [7])
    assert p.meta["output"] == "logits" and p.meta["threshold"] == 0.5
    draw = lambda n, g: torch.randint(0, 2, (n, 6), generator=g)     # noqa: E731
    q = sampled(sampler=draw)
    assert q.meta["sampler"].endswith("<lambda>") and json.loads(json.dumps(q.to_dict()))


def test_sampler_at_an_exhaustive_length_is_a_clear_error():
    with pytest.raises(ValueError, match="sampler= draws the strings of a sampled profile"):
        sb.sensitivity_profile(first_two, 6, sampler=lambda n, g: None, progress=False)


# ---- 47.6 / 48.7: compare_profiles compares like with like, and its small p-values ------------
def test_compare_profiles_refuses_different_measurements_naming_them():
    full = sampled(n=400)
    with pytest.raises(ValueError, match="bits"):
        sb.compare_profiles(sampled(n=400, bits=[1]), full)
    draw = lambda n, g: torch.ones(n, 6)                    # noqa: E731
    with pytest.raises(ValueError, match="sampler"):
        sb.compare_profiles(sampled(n=400, sampler=draw), full)
    with pytest.raises(ValueError, match="margin"):
        sb.compare_profiles(sb.sensitivity_profile(first_two, 6, n_samples=400, margin=0.1,
                                                   progress=False), full)
    with pytest.raises(ValueError, match="different lengths"):
        sb.compare_profiles(sampled(N=7), full)
    assert sb.compare_profiles(sampled(n=400, bits=[1]), full, check_meta=False)["p_value"] < 1


def _q_even(df, stat):
    """The chi-square survival function at even df: exp(-x) sum_{i < df/2} x^i / i!, x = stat/2
    (a closed form independent of the incomplete gamma function)."""
    x = stat / 2
    return math.exp(-x) * sum(x ** i / math.factorial(i) for i in range(df // 2))


def test_compare_profiles_reports_the_true_small_p_value():
    N = 6
    a = sb.Profile(N, False, 3000, torch.tensor([1000, 1000, 1000, 0, 0, 0, 0]),
                   torch.tensor(0), torch.tensor(0), torch.tensor(0), torch.tensor(1500))
    b = sb.Profile(N, False, 3000, torch.tensor([1400, 1000, 600, 0, 0, 0, 0]),
                   torch.tensor(0), torch.tensor(0), torch.tensor(0), torch.tensor(1500))
    t = sb.compare_profiles(a, b)
    assert t["df"] == 2
    want = _q_even(t["df"], t["statistic"])
    assert 0 < want < 1e-30 and math.isclose(t["p_value"], want, rel_tol=1e-9), (t, want)
    assert math.isclose(t["log10_p_value"], math.log10(want), rel_tol=1e-9)


# ---- 48.6: incomplete strings count toward "most strings not counted" ---------------------------
def test_the_not_counted_warning_counts_incomplete_strings():
    f = lambda x: torch.where((x[:, 0] == 1) & (x[:, 1] == 1), math.nan, x[:, 2] - 0.5)  # noqa
    with pytest.warns(UserWarning, match="incomplete"):
        p = sb.sensitivity_profile(f, 8, progress=False)
    assert int(p.nonfinite) * 2 < p.n_strings and int(p.counts.sum()) * 4 == p.n_strings


# ---- 47.8: the legend label, the API page --------------------------------------------------------
def test_plot_profiles_default_label_is_cut_at_a_word_and_fits_a_subplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    torch.manual_seed(0)
    net = nn.Sequential(nn.Embedding(5, 4), nn.Flatten(1), nn.Linear(4 * 7, 1))
    p = sb.sensitivity_profile(sb.TorchClassifier(net, tokens=(3, 4), prefix=[2]), 6,
                               n_samples=100, progress=False)
    p.meta["classifier"] = "AVeryLongModelName ForSequenceClassification with a head"
    fig, axes = plt.subplots(1, 3, figsize=(9, 3))
    ax = sb.plot_profile(p, ax=axes[0])
    text = ax.get_legend().get_texts()[0].get_text()
    head = text.split("\n")[0]
    name = p.meta["classifier"]
    assert head.endswith("\u2026") and name.startswith(head[:-1])
    nxt = name[len(head) - 1]                                 # cut between words
    assert nxt in " ,(.=_" or (nxt.isupper() and name[len(head) - 2].islower()), head
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().width <= ax.get_window_extent().width
    plt.close(fig)


def test_api_page_lists_every_name_chapter_8_and_the_documented_calls_use():
    import re

    api = (ROOT / "book" / "api.md").read_text()
    listed = set(re.findall(r"sensbook\.([A-Za-z_]\w*)", api))
    used = set(re.findall(r"\bsb\.([A-Za-z_]\w*)", (ROOT / "book" / "ch8_own_model.md").read_text()))
    used |= set(re.findall(r"\bsb\.([A-Za-z_]\w*)", (ROOT / "tests" / "test_typing.py").read_text()))
    assert {"random_strings", "agreement"} <= used
    assert not sorted(used - listed)


# ---- 47.7 / 46.2 / 48.3 / 48.12: the command line ------------------------------------------------
MODELS = '''
import os, time, torch
from torch import nn

def sigmoid():
    return lambda x: torch.sigmoid(4 * (x[:, 0] + x[:, 1] - 1.5))

def plain():
    return lambda x: x[:, 0] + x[:, 1] - 1.5

class Emb(nn.Module):
    def __init__(self):
        super().__init__()
        self.e, self.pos, self.h = nn.Embedding(5, 4), nn.Embedding(9, 4), nn.Linear(4, 1)
    def forward(self, ids):
        return self.h(self.e(ids).mean(1) + self.pos(torch.arange(ids.shape[1])).mean(0))

def emb():
    torch.manual_seed(0)
    return Emb().eval()

def tree():
    import sensbook as sb
    from sklearn.tree import DecisionTreeClassifier
    X = sb.strings(6)
    return DecisionTreeClassifier(random_state=0).fit(X.numpy(), sb.sparse_majority([1, 2, 3])(X))

def removes_folder():
    os.rmdir(os.environ["GONE"])
    return plain()

def marks():
    open("computing", "w").close()
    return plain()

def sleeps():
    def f(x):
        open("computing", "w").close()
        time.sleep(120)
        return x[:, 0]
    return f
'''


@pytest.fixture
def models(tmp_path, monkeypatch):
    (tmp_path / "models.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SENSBOOK_PROGRESS", "0")
    sys.modules.pop("models", None)
    yield tmp_path
    sys.modules.pop("models", None)


def run(capsys, line):
    rc = cli.main(shlex.split(line))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_reads_probabilities_with_a_threshold_and_records_its_options(models, capsys):
    rc, out, err = run(capsys, "profile models:sigmoid --N 6 --out all.json")
    assert rc == 0 and "every one of the 64 decided strings got one label" in err
    rc, out, err = run(capsys, "profile models:sigmoid --N 6 --output probability --threshold 0.5 "
                               "--out p.json")
    assert rc == 0 and "one label" not in err
    got = sb.Profile.load("p.json")
    assert got == sb.sensitivity_profile(first_two, 6, progress=False)
    assert got.meta["command"]["output"] == "probability" and got.meta["command"]["threshold"] == 0.5
    rc, out, err = run(capsys, "profile models:plain --N 6 --threshold 0.9 --out t.json")
    assert rc == 0
    assert sb.Profile.load("t.json") == sb.sensitivity_profile(lambda x: first_two(x) - 0.9, 6,
                                                               progress=False)
    rc, out, err = run(capsys, "profile models:plain --N 9 --samples 40 --bits 2,1 --out b.json")
    b = sb.Profile.load("b.json")
    assert rc == 0 and b.meta["bits"] == [1, 2] and b.meta["command"]["bits"] == [2, 1]
    assert b == sb.sensitivity_profile(first_two, 9, n_samples=40, bits=[1, 2], progress=False)


def test_cli_wraps_a_scikit_learn_estimator(models, capsys):
    rc, out, err = run(capsys, "profile models:tree --N 6 --out tree.json")
    assert rc == 0, err
    assert sb.Profile.load("tree.json").K.tolist() == sb.sparse_majority([1, 2, 3]).profile(6).tolist()


def test_cli_prints_a_summary_not_every_count(models, capsys):
    rc, out, err = run(capsys, "profile models:plain --N 256 --samples 20 --out s.json")
    assert rc == 0, err
    assert "accepted:" in out and "95 % interval" in out and "k seen" in out
    assert max(len(line) for line in out.splitlines()) < 300, out
    assert "0, 0, 0, 0" not in out
    assert "nonzero of 257" in repr(sb.Profile.load("s.json"))


@pytest.mark.parametrize("line,option", [
    ("models:plain --N 6 --device banana", "--device"),
    ("models:plain --N 6 --device cuda:0", "--device"),
    ("models:plain --N 6 --device cpu", "--device"),
    ("models:emb --N 6 --tokens 3,7", "--tokens"),
    ("models:emb --N 6 --tokens 3,4 --prefix 6", "--prefix"),
    ("models:emb --N 12 --tokens 3,4", "--N"),
    ("models:plain --N 1000000000 --samples 1", "--N"),
    ("models:plain --N 30", "--N"),
    ("models:emb --N 6 --tokens 3,x", "--tokens"),
    ("models:plain --N 6 --bits 1", "--bits"),
    ("models:plain --N six", "--N"),
    ("models:plain --N 6 --output probability --threshold 2", "--threshold"),
])
def test_cli_errors_are_one_line_naming_the_option(models, capsys, line, option):
    rc, out, err = run(capsys, f"profile {line} --out p.json")
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2 and len(lines) == 1 and option in lines[0], err
    assert not (models / "p.json").exists()


def test_cli_checks_the_output_path_before_computing(models, capsys):
    os.mkfifo("fifo")
    for target in ("fifo", ".", "missing/p.json"):
        rc, out, err = run(capsys, f"profile models:marks --N 6 --out {target}")
        assert rc == 2 and "--out" in err and not (models / "computing").exists(), err
    assert (models / "fifo").is_fifo()


def test_cli_never_throws_a_computed_profile_away(models, capsys, monkeypatch):
    (models / "gone").mkdir()
    monkeypatch.setenv("GONE", str(models / "gone"))
    rc, out, err = run(capsys, "profile models:removes_folder --N 6 --out gone/p.json")
    assert rc == 1 and "could not be saved" in err
    saved = sb.Profile.from_dict(json.loads(out.splitlines()[-1]))
    assert saved == sb.sensitivity_profile(first_two, 6, progress=False)


def test_cli_ctrl_c_is_one_line_and_rc_130(models):
    env = dict(os.environ, PYTHONPATH=str(ROOT), SENSBOOK_PROGRESS="0", OMP_NUM_THREADS="1")
    # a terminal's Ctrl-C: Python's own SIGINT handler, also where this suite runs under
    # `nohup ... &` in a shell without job control, whose children start with SIGINT ignored
    # (Python then never installs it)
    start = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
             " sys.argv = ['sensbook'] + sys.argv[1:];"
             " runpy.run_module('sensbook.cli', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", start, "profile", "models:sleeps",
                             "--N", "6", "--out", "p.json"], cwd=models, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (models / "computing").exists() and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    lines = [x for x in err.splitlines() if x.strip()]
    assert proc.returncode == 130 and len(lines) == 1 and "interrupted" in lines[0], err


# ---- 46.2: chapter 8's command line gives the chapter's result ----------------------------------
def test_chapter_8s_command_line_gives_the_chapters_sampled_profile(tmp_path, monkeypatch, capsys):
    import jupytext

    pytest.importorskip("transformers")
    from sensbook.experiments import ch8

    cells = [c.source for c in jupytext.read(ROOT / "book" / "ch8_own_model.md").cells
             if c.cell_type == "code"]
    build = next(c for c in cells if "BertConfig" in c)
    body = build[:build.index("bert = ")] + build[build.index("bert = "):].split("\n")[0]
    (tmp_path / "my_bert.py").write_text(
        "import torch\nimport transformers\nimport sensbook as sb\nfrom sensbook.experiments "
        "import ch8\nS = sb.pick(**ch8.SIZES)\n\ndef build():\n" +
        "".join(f"    {ln}\n" for ln in body.splitlines()) + "    return bert\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SENSBOOK_PROGRESS", "0")
    sys.modules.pop("my_bert", None)
    import importlib.util
    spec = importlib.util.spec_from_file_location("my_bert", tmp_path / "my_bert.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    bert = mod.build()
    S = sb.pick(**ch8.SIZES)
    N_big, n = S["N_big"], S["n_samples"]
    bert_clf = sb.TorchClassifier(bert, tokens=(3, 4), prefix=[2])     # as the chapter does
    median = float(bert_clf(sb.random_strings(N_big, 200, seed=5)).median())
    balanced = sb.TorchClassifier(bert, tokens=(3, 4), prefix=[2],
                                  output=lambda logits: logits[:, 1] - logits[:, 0] - median)
    big = sb.sensitivity_profile(balanced, N_big, n_samples=n, seed=0, progress=False)
    line_cell = next(c for c in cells if "sensbook profile" in c)
    ns = {"N_big": N_big, "n": n, "median": median, "print": lambda s: ns.setdefault("line", s)}
    exec(line_cell, ns)
    rc = cli.main(shlex.split(ns["line"])[1:])
    out, err = capsys.readouterr()
    assert rc == 0 and "one label" not in err, err
    got = sb.Profile.load(tmp_path / "p.json")
    assert got == big and 0 < int(got.accepted) < n, (got, big)
    assert got.meta["prefix"] == [2] and got.meta["command"]["threshold"] == median


# ---- 48 "Also": the index command's folders, as sweep --out reads them ---------------------------
def test_the_index_commands_default_folder_is_the_book_roots_results(tmp_path, monkeypatch, capsys):
    from sensbook.runtime.__main__ import main

    (tmp_path / "_toc.yml").write_text("root: intro\n")
    (tmp_path / "results" / "ch1.x").mkdir(parents=True)
    (tmp_path / "book").mkdir()
    monkeypatch.chdir(tmp_path / "book")                     # where the chapters' kernels run
    monkeypatch.delenv("SENSBOOK_RESULTS", raising=False)
    assert main(["index"]) == 0, capsys.readouterr().err
    assert (tmp_path / "results" / "index.json").is_file()
    assert not (tmp_path / "book" / "results").exists()
    (tmp_path / "other" / "ch1.x").mkdir(parents=True)
    monkeypatch.setenv("SENSBOOK_RESULTS", "other")
    assert main(["index"]) == 0 and (tmp_path / "other" / "index.json").is_file()
    assert main(["index", "results"]) == 0                   # relative: to the root
