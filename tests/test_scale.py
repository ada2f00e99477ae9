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
