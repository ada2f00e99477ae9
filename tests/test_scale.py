import pytest

import sensbook as sb


def test_pick_follows_the_scale(monkeypatch):
    monkeypatch.setenv("SENSBOOK_SCALE", "paper")
    sb.set_scale(None)
    assert sb.scale() == "paper" and sb.pick(ci=1, book=2, paper=3) == 3
    assert sb.set_scale("ci") == "ci" and sb.pick(ci=1, book=2, paper=3) == 1
    sb.set_scale(None)
    monkeypatch.delenv("SENSBOOK_SCALE")
    assert sb.scale() == "book"
    assert "scale='book'" in sb.banner()


def test_unknown_scale_is_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match="scale='huge'.*ci, book, paper"):
        sb.set_scale("huge")
    monkeypatch.setenv("SENSBOOK_SCALE", "fast")
    with pytest.raises(ValueError, match="SENSBOOK_SCALE='fast'"):
        sb.scale()


def test_progress_bar_shows_only_for_work_longer_than_the_delay(monkeypatch, capsys):
    """A bar for milliseconds of work only flashes by: nothing is drawn before PROGRESS_DELAY."""
    import time

    from sensbook.settings import PROGRESS_DELAY, progress

    monkeypatch.setenv("SENSBOOK_PROGRESS", "1")
    for _ in progress(range(50), desc="quick"):
        pass
    assert "quick" not in capsys.readouterr().err
    for _ in progress(range(3), desc="slow"):
        time.sleep(PROGRESS_DELAY / 2 + 0.05)         # the last updates come after the delay
    assert "slow" in capsys.readouterr().err
    monkeypatch.setenv("SENSBOOK_PROGRESS", "0")
    for _ in progress(range(3), desc="off"):
        time.sleep(PROGRESS_DELAY / 2 + 0.05)
    assert "off" not in capsys.readouterr().err


def test_a_finished_notebook_bar_leaves_no_output_and_a_failed_one_stays():
    """In a notebook (Colab, Jupyter) tqdm only hides a closed bar: its widget and its text
    form stay in the saved outputs (issue 46). sensbook's bar empties its display once it
    finished; a bar stopped by an error stays, showing where. Run in a real kernel."""
    import os

    import nbclient
    import nbformat

    from sensbook.settings import PROGRESS_DELAY

    wait = PROGRESS_DELAY * 0.8
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"import time, sensbook.settings as s\nfor i in s.progress(range(3), desc='done'):\n"
        f"    time.sleep({wait})"), nbformat.v4.new_code_cell(
        f"try:\n    for i in s.progress(range(3), desc='failed'):\n        time.sleep({wait})\n"
        f"        assert i < 2\nexcept AssertionError:\n    pass")])
    env = dict(os.environ, SENSBOOK_PROGRESS="1")
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=120)
    with client.setup_kernel(env=env):
        for i, cell in enumerate(nb.cells):
            client.execute_cell(cell, i)
    widget = "application/vnd.jupyter.widget-view+json"
    done, failed = ([o.get("data", {}) for o in c.outputs] for c in nb.cells)
    assert done == [{"text/plain": ""}], done               # shown, then emptied
    assert len(failed) == 1 and widget in failed[0] and "failed" in failed[0]["text/plain"]
