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
