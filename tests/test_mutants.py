"""tools/mutants.py (`make mutants`, not part of `make test`): every mutant still applies to the
current package and names chapters that exist, so a moved line is found here, in seconds, not
after half an hour of `make mutants` (the `sparse-is-parity` mutant pointed at train.py after
``target`` moved to boolean.py)."""
import importlib.util
import pathlib
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("mutants", ROOT / "tools" / "mutants.py")
mutants = importlib.util.module_from_spec(spec)
sys.modules["mutants"] = mutants            # dataclasses look their module up there
spec.loader.exec_module(mutants)


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_each_mutant_applies_and_changes_its_file(mutant, tmp_path):
    pkg = tmp_path / "sensbook"
    shutil.copytree(ROOT / "sensbook", pkg)
    before = (pkg / mutant.file).read_text()
    mutants.apply(mutant, pkg)
    after = (pkg / mutant.file).read_text()
    assert after != before and mutant.new in after
    compile(after, str(pkg / mutant.file), "exec")            # the mutant is still Python
    assert mutant.chapters and all((ROOT / "book" / f"{c}.md").is_file() for c in mutant.chapters)


def test_a_moved_line_is_reported(tmp_path):
    pkg = tmp_path / "sensbook"
    shutil.copytree(ROOT / "sensbook", pkg)
    moved = mutants.Mutant("moved", "a line that is not there", "train.py", "no such line", "x",
                           ("ch6_training",))
    with pytest.raises(SystemExit, match="the code moved"):
        mutants.apply(moved, pkg)


def test_mutant_names_are_unique():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))


def test_a_must_survive_mutant_runs_every_training_chapter():
    """Issue 43: a harmless perturbation (rounding only) under which every chapter that trains
    must still pass; it names every such chapter and perturbs training, nothing else."""
    harmless = [m for m in mutants.MUTANTS if m.must_survive]
    assert harmless, "no must-survive mutant"
    for m in harmless:
        assert set(mutants.TRAINING) <= set(m.chapters), m.chapters
        assert m.file == "train.py" and "1e-6" in m.new


@pytest.mark.parametrize("must_survive, caught, rc", [(True, None, 0), (True, "ch6_mechanism (x)", 1),
                                                     (False, "ch6_training (x)", 0),
                                                     (False, None, 1)])
def test_verdicts_of_harmful_and_harmless_mutants(monkeypatch, capsys, must_survive, caught, rc):
    """A harmless mutant that fails a chapter fails the run (an assert decided by rounding), as
    a harmful one that every chapter survives does; the opposite outcomes pass."""
    m = next(m for m in mutants.MUTANTS if m.must_survive == must_survive)
    monkeypatch.setattr(mutants, "run", lambda mutant, python, timeout: (caught, 1.0))
    assert mutants.main([m.name]) == rc
    out = capsys.readouterr().out
    assert ("rounding" in out) == (must_survive and caught is not None), out
