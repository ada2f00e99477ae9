"""Published results: a chapter reads what the published site stores for its keys (over HTTP,
here a local http.server on 127.0.0.1), computes only the rest, and says which is which; no
network outside Colab unless SENSBOOK_PUBLISHED asks for it. And the publish workflow ships the
book-scale store with the site."""
import functools
import os
import pathlib
import http.server
import json
import re
import shutil
import threading
import time
import urllib.request

import pytest
import yaml

import sensbook as sb
import sensbook.runtime.published as pub
import sensbook.runtime.store as store_mod
from tests.runtime.test_executors import fake_experiment
from tests.runtime.test_sweep import ROOT, calls


@pytest.fixture
def site(tmp_path):
    """A site folder served on 127.0.0.1; yields (folder, base URL, list of requested paths)."""
    folder = tmp_path / "site"
    folder.mkdir()
    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_request(self, *a):
            requested.append(self.path)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield folder, f"http://127.0.0.1:{server.server_port}/book/", requested
    finally:
        server.shutdown()
        server.server_close()


def publish(store_root, name, site_folder):
    """What the publish workflow does: the store's folder, copied under results/."""
    shutil.copytree(store_root / name, site_folder / "book" / "results" / name)


def test_a_chapter_reads_published_results_and_computes_only_the_rest(tmp_path, site,
                                                                     monkeypatch, capsys):
    folder, base, requested = site
    exp = fake_experiment(monkeypatch, n=4)
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    # the publisher computed configurations 0, 1, 2; config 2's record is from other code
    sb.run_sweep(type(exp.sweep("book"))(exp.name, exp.configs("book")[:3], exp.runner),
                 tmp_path / "publisher", progress=False)
    publish(tmp_path / "publisher", exp.name, folder)
    third = folder / "book" / "results" / exp.name / f"{sb.key(exp.configs('book')[2])}.json"
    rec = json.loads(third.read_text()); rec["version"] = "0.0.0+other"
    third.write_text(json.dumps(rec))
    monkeypatch.setenv("SENSBOOK_PUBLISHED", base)
    log.unlink()
    res = sb.run_experiment(exp.name, "book", tmp_path / "reader", progress=False)
    assert res == [{"square": i * i, "tag": "book"} for i in range(4)]
    assert sorted(calls(log)) == [2, 3]                   # only what the site lacks (or is stale)
    line = capsys.readouterr().out
    assert f"0 read from the store, 2 from the published store ({base}), 2 computed now" in line
    # this site has no index.json (asked for once): every missing key is asked for
    assert requested[0] == "/book/results/index.json" and len(requested) == 5
    assert all(p.startswith("/book/results/test.fake/") for p in requested[1:])
    # the fetched records are now local, marked as published; nothing is fetched again
    recs = [sb.Store(tmp_path / "reader", exp.name).record(c) for c in exp.configs("book")]
    assert [r["meta"].get("published") for r in recs] == [base, base, None, None]
    sb.run_experiment(exp.name, "book", tmp_path / "reader", progress=False)
    assert "4 read from the store, 0 from the published store" in capsys.readouterr().out
    assert len(requested) == 5


def banner_at(scale, name):
    """``sb.banner(name)`` at ``scale`` (the scale set back afterwards)."""
    sb.set_scale(scale)
    try:
        return sb.banner(name)
    finally:
        sb.set_scale(None)


def test_the_banner_says_what_is_stored_published_and_to_compute(tmp_path, site, monkeypatch,
                                                                capsys):
    """The first line a notebook prints: what is stored here, what the published store holds
    (its index.json, one request) and the predicted time of the rest only; then the run does
    exactly that, asking the site only for the keys its index lists."""
    folder, base, requested = site
    exp = fake_experiment(monkeypatch, n=5)
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    cfgs = exp.configs("book")
    sweep = type(exp.sweep("book"))
    sb.run_sweep(sweep(exp.name, cfgs[1:3], exp.runner), tmp_path / "publisher", progress=False)
    publish(tmp_path / "publisher", exp.name, folder)
    assert pub.write_index(folder / "book" / "results").name == "index.json"
    sb.run_sweep(sweep(exp.name, cfgs[:1], exp.runner), tmp_path / "reader", progress=False)
    monkeypatch.setenv("SENSBOOK_PUBLISHED", base)
    monkeypatch.setenv("SENSBOOK_RESULTS", str(tmp_path / "reader"))
    text = banner_at("book", exp.name)
    where = sb.runtime.store.where_computed()      # issue 43: where the stored one was computed
    assert text.splitlines()[1:] == [
        "this notebook reads 1 experiment (5 configurations at this scale): test.fake",
        f"1 stored here, 2 in the published store ({base}), 2 to compute: "
        "about 0 s on one CPU core",
        "(not yet fetched: any that fails to arrive is computed here, at most 0 s)",
        f"stored results computed on kernel path, CPU: {where['kernel']}, {where['cpu']} (1) "
        f"(this machine: {where['kernel']})"]
    assert requested == ["/book/results/index.json"]
    (tmp_path / "log").unlink(missing_ok=True)
    sb.run_experiment(exp.name, "book", tmp_path / "reader", progress=False)
    assert sorted(calls(tmp_path / "log")) == [3, 4]
    assert f"1 read from the store, 2 from the published store ({base}), 2 computed now" in \
        capsys.readouterr().out
    assert len(requested) == 3 and requested[0] == "/book/results/index.json"
    sb.set_scale("book")
    try:
        assert sb.banner(exp.name).splitlines()[2] == \
            f"5 stored here, 0 in the published store ({base}), 0 to compute: nothing to compute"
    finally:
        sb.set_scale(None)


def test_no_network_outside_colab_unless_asked(tmp_path, monkeypatch, capsys):
    exp = fake_experiment(monkeypatch, n=2)

    def no_network(*a, **k):
        raise AssertionError("the network was used")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.delenv("SENSBOOK_PUBLISHED", raising=False)
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    assert pub.published_url() is None
    sb.run_experiment(exp.name, "ci", tmp_path, progress=False)
    assert "0 read from the store, 2 computed now" in capsys.readouterr().out
    # in Colab the site of the repository the install cell installed from is asked (none
    # without such an install), unless SENSBOOK_PUBLISHED=0
    monkeypatch.setitem(__import__("sys").modules, "google.colab", object())
    monkeypatch.setattr(pub, "installed_from", lambda: None)
    assert pub.published_url() is None
    monkeypatch.setenv("SENSBOOK_PUBLISHED", "1")
    with pytest.raises(ValueError, match="SENSBOOK_PUBLISHED=1 needs sensbook installed"):
        pub.published_url()
    monkeypatch.delenv("SENSBOOK_PUBLISHED")
    monkeypatch.setattr(pub, "installed_from", lambda: "https://github.com/Org/Repo")
    assert pub.published_url() == "https://org.github.io/Repo/"
    monkeypatch.setenv("SENSBOOK_PUBLISHED", "0")
    assert pub.published_url() is None
    monkeypatch.setenv("SENSBOOK_PUBLISHED", "ftp://x")
    with pytest.raises(ValueError, match="SENSBOOK_PUBLISHED"):
        pub.published_url()


def test_an_unreachable_site_means_computing_with_one_warning(tmp_path, site, monkeypatch,
                                                              capsys):
    exp = fake_experiment(monkeypatch, n=3)
    folder, base, requested = site
    monkeypatch.setenv("SENSBOOK_PUBLISHED", "http://127.0.0.1:9/")     # nothing listens there
    res = sb.run_experiment(exp.name, "ci", tmp_path, progress=False)
    assert [r["square"] for r in res] == [0, 1, 4]
    out = capsys.readouterr()
    assert out.err.count("not reachable") == 1 and "0 from the published store" in out.out


def test_the_site_is_that_of_the_repository_pip_installed_from(monkeypatch):
    """_config.yml's repository.url is the one setting: the install cell installs from it, and
    pip's direct_url.json of that install tells the package where its site is."""
    import importlib.metadata as md

    class Dist:
        def __init__(self, text):
            self.text = text

        def read_text(self, name):
            return self.text if name == "direct_url.json" else None

    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    branch = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["branch"]
    git = json.dumps({"url": url + ".git", "vcs_info": {"vcs": "git", "requested_revision": branch,
                                                        "commit_id": "0" * 40}})
    for text, want in [(git, url), (json.dumps({"url": "file:///tmp/x.whl", "archive_info": {}}), None),
                       (json.dumps({"url": "https://gitlab.com/a/b", "vcs_info": {}}), None),
                       (None, None), ("not json", None)]:
        monkeypatch.setattr(md, "distribution", lambda name, t=text: Dist(t))
        assert pub.installed_from() == want, text
    assert pub.site_url("https://github.com/Sensbook/notes") == "https://sensbook.github.io/notes/"
    assert pub.site_url("https://github.com/ab/ab.github.io.git") == "https://ab.github.io/"
    with pytest.raises(ValueError, match="repository"):
        pub.site_url("https://gitlab.com/a/b")


def load_workflow(name):
    text = (ROOT / ".github" / "workflows" / name).read_text()
    return yaml.safe_load(re.sub(r"^on:", '"on":', text, flags=re.M))


def test_publish_runs_the_book_scale_experiments_and_ships_the_store():
    steps = load_workflow("publish.yml")["jobs"]["build"]["steps"]
    runs = [s.get("run", "") for s in steps]
    at = lambda pattern: next(i for i, r in enumerate(runs) if re.search(pattern, r))
    sweep = at(r"sensbook\S* sweep all --scale book\b.*--out results")
    build, ship = at(r"make book-publish"), at(r"_build/html/results")
    upload = next(i for i, s in enumerate(steps)
                  if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert sweep < build < ship < upload
    assert at(r"_config\.yml") < sweep           # the repository URL is checked first
    assert ".submitit" in runs[ship]             # job bookkeeping is not published
    assert "sensbook.runtime index _build/html/results" in runs[ship]      # its index.json
    cache = [s for s in steps if s.get("uses", "").startswith("actions/cache@")
             and s["with"]["path"] == "results"]
    assert len(cache) == 1 and "hashFiles('sensbook/**'" in cache[0]["with"]["key"]
    assert "restore-keys" not in cache[0]["with"], "results of other code are never shipped"


# ---- issue 21: a damaged or hostile published store --------------------------------------
@pytest.fixture
def hostile(monkeypatch):
    """A server on 127.0.0.1 that answers ``<key>.json`` with ``answers[key]``: bytes (200), or
    a function of the request handler that writes what it likes; 404 for other keys. Yields
    (base URL, answers, sent: key -> bytes written before the client hung up)."""
    answers, sent = {}, {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            k = self.path.rsplit("/", 1)[-1].removesuffix(".json")
            body = answers.get(k)
            if body is None:
                self.send_response(404)
                self.end_headers()
            elif callable(body):
                sent[k] = 0
                try:
                    body(self, lambda n: sent.__setitem__(k, sent[k] + n))
                except OSError:                 # the client hung up: what we wanted to see
                    pass
            else:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SENSBOOK_PUBLISHED", f"http://127.0.0.1:{server.server_port}/book/")
    try:
        yield f"http://127.0.0.1:{server.server_port}/book/", answers, sent
    finally:
        server.shutdown()
        server.server_close()


def published_records(tmp_path, exp):
    """The records a publisher stores for ``exp`` at ci scale: (keys, records, sweep)."""
    sw_ = exp.sweep("ci")
    sb.run_sweep(sw_, tmp_path / "publisher", progress=False)
    st = sb.Store(tmp_path / "publisher", exp.name, sw_.version)
    return ([st.path(c).stem for c in sw_.configs],
            [json.loads(st.path(c).read_text()) for c in sw_.configs], sw_)


def resign(rec):
    """What a hostile site can do: recompute the checksum over whatever it changed."""
    from sensbook.runtime.store import _checksum
    return dict(rec, sha256=_checksum(rec))


def test_published_records_are_verified_as_local_ones_and_never_resigned(tmp_path, hostile,
                                                                          monkeypatch, capsys):
    base, answers, _ = hostile
    exp = fake_experiment(monkeypatch, n=4)
    keys, recs, sw_ = published_records(tmp_path, exp)
    forged = {"square": 99, "tag": "ci"}
    answers[keys[0]] = json.dumps(dict(recs[0], result=forged)).encode()     # checksum fails
    no_sha = dict(recs[1], result=forged)
    del no_sha["sha256"]
    answers[keys[1]] = json.dumps(no_sha).encode()                          # no checksum
    answers[keys[2]] = json.dumps(resign(dict(recs[2], key=keys[3]))).encode()  # another key
    answers[keys[3]] = json.dumps(recs[3]).encode()                          # intact
    log = tmp_path / "log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    res = sb.run_experiment(exp.name, "ci", tmp_path / "reader", progress=False)
    assert res == [{"square": i * i, "tag": "ci"} for i in range(4)]
    assert sorted(calls(log)) == [0, 1, 2]                  # the refused ones computed here
    out = capsys.readouterr()
    for k, why in zip(keys, ("fails its checksum", "has no 'sha256'", "names another key")):
        assert f"published record {base}results/{exp.name}/{k}.json refused: it {why}" in out.err
    assert "1 from the published store" in out.out and "3 computed now" in out.out
    assert "3 published record(s) refused" in out.out
    st = sb.Store(tmp_path / "reader", exp.name, sw_.version)
    kept = [st.record(c) for c in sw_.configs]
    assert [r["meta"].get("published") for r in kept] == [None, None, None, base]
    # the accepted record is stored as published (same checksum, only meta.published added)
    assert {k: v for k, v in kept[3].items() if k != "meta"} == \
        {k: v for k, v in recs[3].items() if k != "meta"}


@pytest.mark.parametrize("body, why", [
    (lambda r: json.dumps(dict(r, meta=[1])).encode(), "has a meta that is a JSON list"),
    (lambda r: json.dumps(resign(dict(r, result=None))).encode(), "has a null result"),
    (lambda r: b"\xff\xfe{", "is not JSON (UnicodeDecodeError"),
    (lambda r: b"[1, 2]", "holds a JSON list, not a record"),
    (lambda r: b"[" * 100_000, "is nested deeper than the limit of 64 levels"),
    (lambda r: json.dumps(dict(r, config={"x": float("nan")})).encode(), "is not standard JSON"),
    # issue 30: meta is validated like the result; nesting is bounded before anything recurses
    (lambda r: json.dumps(dict(r, meta=dict(r["meta"], seconds=float("nan")))).encode(),
     "is not standard JSON (it holds NaN)"),
    (lambda r: json.dumps(dict(r, meta=dict(r["meta"], seconds=float("inf")))).encode(),
     "is not standard JSON (it holds Infinity)"),
    # issue 38: numbers beyond a float's range read as inf (and crashed Store.put), in meta or
    # in an extra field outside the checksum
    (lambda r: json.dumps(dict(r, meta=dict(r["meta"], seconds="@"))).replace('"@"', "1e999")
     .encode(), "is not standard JSON (it holds 1e999, beyond a float's range)"),
    (lambda r: json.dumps(dict(r, extra="@")).replace('"@"', "-1e400").encode(),
     "is not standard JSON (it holds -1e400, beyond a float's range)"),
    (lambda r: deep(r, 990), "is nested deeper than the limit of 64 levels"),
    (lambda r: deep(r, 65, "meta"), "is nested deeper than the limit of 64 levels (66 levels)"),
])
def test_a_malformed_published_record_is_skipped_counted_and_computed(tmp_path, hostile,
                                                                      monkeypatch, capsys, body,
                                                                      why):
    base, answers, _ = hostile
    exp = fake_experiment(monkeypatch, n=2)
    keys, recs, _ = published_records(tmp_path, exp)
    answers[keys[0]] = body(recs[0])
    answers[keys[1]] = json.dumps(recs[1]).encode()
    res = sb.run_experiment(exp.name, "ci", tmp_path / "reader", progress=False)
    assert res == [{"square": i * i, "tag": "ci"} for i in range(2)]
    out = capsys.readouterr()
    assert f"{keys[0]}.json refused: it {why}" in out.err
    assert "1 from the published store" in out.out and "1 computed now" in out.out
    assert "1 published record(s) refused" in out.out


def deep(rec, depth, field="result"):
    """``rec`` as bytes with ``field`` replaced by lists nested ``depth`` deep."""
    return json.dumps(dict(rec, **{field: "@@"})).replace(
        '"@@"', "[" * depth + "]" * depth).encode()


def trickle(h, count):
    """A site's answer that trickles: a byte every 20 ms, 300 at most (6 s)."""
    h.send_response(200)
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(300):
        h.wfile.write(b" ")
        h.wfile.flush()
        count(1)
        time.sleep(0.02)


def test_a_trickling_site_hits_the_deadline_and_the_rest_is_computed(tmp_path, hostile,
                                                                      monkeypatch, capsys):
    base, answers, sent = hostile
    exp = fake_experiment(monkeypatch, n=2)
    keys, recs, _ = published_records(tmp_path, exp)

    answers[keys[0]] = trickle
    answers[keys[1]] = json.dumps(recs[1]).encode()
    monkeypatch.setattr(pub, "FETCH_BUDGET", 0.5, raising=False)
    monkeypatch.setattr(pub, "FETCH_TIMEOUT", 0.3, raising=False)
    res = sb.run_experiment(exp.name, "ci", tmp_path / "reader", progress=False)
    assert res == [{"square": i * i, "tag": "ci"} for i in range(2)]
    out = capsys.readouterr()
    line = [l for l in out.err.splitlines() if "not reachable" in l]
    assert len(line) == 1 and "within the time budget of 0.5 s" in line[0]
    assert "0 from the published store" in out.out and "2 computed now" in out.out
    time.sleep(0.2)
    assert sent[keys[0]] < 300              # the client hung up; it did not wait for the rest


@pytest.mark.parametrize("length", [None, 10**12])
def test_an_endless_or_huge_record_is_refused_at_the_byte_limit(tmp_path, hostile, monkeypatch,
                                                                capsys, length):
    base, answers, sent = hostile
    exp = fake_experiment(monkeypatch, n=2)
    keys, recs, _ = published_records(tmp_path, exp)

    def endless(h, count):                  # 8 MiB of "[[[[...", as fast as it goes
        h.send_response(200)
        if length:
            h.send_header("Content-Length", str(length))
        h.end_headers()
        for _ in range(128):
            h.wfile.write(b"[" * 65536)
            count(65536)

    answers[keys[0]] = endless
    answers[keys[1]] = json.dumps(recs[1]).encode()
    monkeypatch.setattr(store_mod, "MAX_RECORD_BYTES", 256 * 1024, raising=False)
    res = sb.run_experiment(exp.name, "ci", tmp_path / "reader", progress=False)
    assert res == [{"square": i * i, "tag": "ci"} for i in range(2)]
    out = capsys.readouterr()
    what = f"is {length} bytes, over" if length else "is over the limit of 262144 bytes"
    assert f"{keys[0]}.json refused: it {what}" in out.err
    assert "1 from the published store" in out.out and "1 published record(s) refused" in out.out
    time.sleep(0.2)
    assert sent[keys[0]] < 128 * 65536      # not read to the end


def test_a_published_fetch_into_a_store_that_is_a_file_names_it_before_fetching(tmp_path, site,
                                                                                monkeypatch):
    folder, base, requested = site
    exp = fake_experiment(monkeypatch, n=2)
    sb.run_sweep(exp.sweep("book"), tmp_path / "publisher", progress=False)
    publish(tmp_path / "publisher", exp.name, folder)
    monkeypatch.setenv("SENSBOOK_PUBLISHED", base)
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="is a file, not a folder; nothing was computed"):
        sb.run_experiment(exp.name, "book", tmp_path / "file", progress=False)
    assert requested == []


# ---- issue 30: the published index (a promise, not a fetch), bounded like a record ---------
def test_an_index_that_lists_what_the_site_lacks_is_no_promise_and_the_run_says_so(
        tmp_path, hostile, monkeypatch, capsys):
    base, answers, _ = hostile
    exp = fake_experiment(monkeypatch, n=3)
    keys, recs, _ = published_records(tmp_path, exp)
    answers["index"] = json.dumps({"experiments": {exp.name: keys}}).encode()
    answers[keys[0]] = json.dumps(recs[0]).encode()          # the site serves only the first
    monkeypatch.setenv("SENSBOOK_RESULTS", str(tmp_path / "reader"))
    monkeypatch.setenv("FAKE_LOG", str(tmp_path / "log"))
    text = banner_at("ci", exp.name)
    lines = text.splitlines()
    assert lines[2] == f"0 stored here, 3 in the published store ({base}), 0 to compute: " \
                       "nothing to compute"
    assert "arrive in seconds" not in text and "not yet fetched" in lines[3]
    res = sb.run_experiment(exp.name, "ci", tmp_path / "reader", progress=False)
    assert res == [{"square": i * i, "tag": "ci"} for i in range(3)]
    assert sorted(calls(tmp_path / "log")) == [1, 2]
    out = capsys.readouterr()
    assert f"lists 2 result(s) of {exp.name} that the site does not serve (a stale index)" in out.err
    assert f"1 from the published store ({base}), 2 computed now; 2 listed in the published " \
           "index but not on the site, computed here]" in out.out


@pytest.mark.parametrize("answer", ["trickle", "deep", "nan", "a list of keys"])
def test_an_index_that_trickles_or_is_malformed_is_unreadable_not_a_hang_or_a_crash(
        tmp_path, hostile, monkeypatch, capsys, answer):
    base, answers, sent = hostile
    exp = fake_experiment(monkeypatch, n=2)
    keys, recs, _ = published_records(tmp_path, exp)

    answers["index"] = {"trickle": trickle, "deep": b"[" * 100_000,
                        "nan": b'{"experiments": {"test.fake": NaN}}',
                        "a list of keys": json.dumps({"experiments": keys}).encode()}[answer]
    answers[keys[0]] = json.dumps(recs[0]).encode()
    monkeypatch.setattr(pub, "FETCH_BUDGET", 0.5, raising=False)
    monkeypatch.setattr(pub, "FETCH_TIMEOUT", 0.3, raising=False)
    monkeypatch.setenv("SENSBOOK_RESULTS", str(tmp_path / "reader"))
    text = banner_at("ci", exp.name)
    assert f"0 stored here, the published store ({base}) unreadable, 2 to compute" in text
    if answer == "trickle":
        time.sleep(0.2)
        assert sent["index"] < 300          # the client hung up at the deadline
    # no index: every missing key is asked for, what the site serves is used
    res = sb.run_experiment(exp.name, "ci", tmp_path / "reader", progress=False)
    assert res == [{"square": i * i, "tag": "ci"} for i in range(2)]
    assert "1 from the published store" in capsys.readouterr().out


def test_a_local_record_nested_too_deep_is_set_aside_not_a_crash(tmp_path, monkeypatch, capsys):
    from sensbook.cli import main
    exp = fake_experiment(monkeypatch, n=2)
    keys, recs, sw_ = published_records(tmp_path, exp)
    path = sb.Store(tmp_path / "publisher", exp.name, sw_.version).path(sw_.configs[0])
    path.write_bytes(deep(recs[0], 990, "meta"))
    assert main(["sweep", exp.name, "--scale", "ci", "--out", str(tmp_path / "publisher"),
                 "--status"]) == 0
    assert "1/2 stored" in capsys.readouterr().out
    path.write_bytes(deep(recs[0], 990, "meta"))
    with pytest.warns(UserWarning, match="deeper than the limit of 64 levels.*; moved aside"):
        res = sb.run_experiment(exp.name, "ci", tmp_path / "publisher", progress=False)
    assert res == [{"square": i * i, "tag": "ci"} for i in range(2)]
    assert "1 read from the store, 1 computed now" in capsys.readouterr().out


def test_the_index_command_writes_the_index_without_warnings(tmp_path):
    """Issue 28: `python -m sensbook.runtime.published DIR` printed a RuntimeWarning (the module
    is imported by `import sensbook` before runpy runs it); the publish step's command is clean."""
    import subprocess
    import sys

    folder = tmp_path / "results" / "ch1.random_functions"
    folder.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(__file__).resolve().parents[2]))
    done = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "sensbook.runtime",
                           "index", str(tmp_path / "results")], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (tmp_path / "results" / "index.json").is_file() and "wrote" in done.stdout
