"""Published results: a chapter reads what the published site stores for its keys (over HTTP,
here a local http.server on 127.0.0.1), computes only the rest, and says which is which; no
network outside Colab unless SENSBOOK_PUBLISHED asks for it. And the publish workflow ships the
book-scale store with the site."""
import functools
import http.server
import json
import re
import shutil
import threading
import urllib.request

import pytest
import yaml

import sensbook as sb
import sensbook.runtime.published as pub
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
    sb.set_scale("book")
    try:
        text = sb.banner(exp.name)
    finally:
        sb.set_scale(None)
    assert text.splitlines()[1:] == [
        "this notebook reads 1 experiment (5 configurations at this scale): test.fake",
        f"1 stored here, 2 in the published store ({base}), 2 to compute: "
        "about 0 s on one CPU core"]
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
    assert "sensbook.runtime.published _build/html/results" in runs[ship]      # its index.json
    cache = [s for s in steps if s.get("uses", "").startswith("actions/cache@")
             and s["with"]["path"] == "results"]
    assert len(cache) == 1 and "hashFiles('sensbook/**'" in cache[0]["with"]["key"]
    assert "restore-keys" not in cache[0]["with"], "results of other code are never shipped"
