"""Chapter 3's experiments (sensbook/experiments/ch3.py)."""
import numpy as np
import pytest

import sensbook as sb
from sensbook.experiments import ch3


def test_recognition_runner_splits_models_consistently():
    c = dict(eps=0.1, N=4, P=60, margin=0.02, seed=3, **ch3.ARCH)
    r = ch3.recognition_one(c)
    dec_, non, con, sign = (
        np.array(r[k], bool)
        for k in ("decided", "nonconstant", "constant", "sign_nonconstant")
    )
    assert np.array_equal(non, dec_ & sign) and np.array_equal(con, dec_ & ~sign)
    m = sb.Recognizer.random(60, 16, 2, 2, eps=0.1, init="xavier_uniform", seed=3)
    T = sb.output_table(m, 4)
    assert np.array_equal(sign, ((T > 0).any(-1) & (T < 0).any(-1)).numpy())
    assert np.allclose(r["influence"], sb.exhaustive_influence(m, 4).numpy())
    assert r["distinct"] == sb.distinct_functions(sb.classify(T, 0.02))


def test_box_scan_runner_reaches_the_ceiling_at_eps_0_and_records_every_run():
    """At eps = 0 the danger-zone start holds the ceiling 2 B D: the ladder converges at its
    first doubling; the record has one end array per step count, starts in the order hard
    construction, danger zone, random."""
    c = dict(B=0.1, eps=0.0, N=8, P=1, K=4, lr=ch3.LR, seed=8, mark_first=True, steps=4,
             cap=16, **ch3.WORST_ARCH)
    r = ch3.box_scan_one(c)
    assert r["converged"] and r["steps"] == [4, 8] and len(r["ends"]) == 2
    assert r["n_fixed"] == 2 and len(r["start"]) == 3
    assert r["start"][1] == pytest.approx(2 * 0.1 * 12, rel=1e-9)
    assert r["best"] == pytest.approx([2 * 0.1 * 12] * 2, rel=1e-9)
    cells = ch3.box_curves([c], [r])
    cell = cells[0.1, 0.0, True]
    assert cell["ceiling"] == pytest.approx(2.4) and cell["random"].shape == (1, 1)



def test_box_scan_check_runs_two_schedules_from_more_starts_and_names_the_best_theta():
    """A checked cell (``more`` > 0) runs the decaying schedule for CHECK["long"] times the
    ladder's last step count and the constant one for CHECK["span"] times it; box_curves calls
    it converged only when the three agree within 10 %, and its best is the largest of all;
    the mechanism record is eos_regime's of a theta whose flip is that best."""
    c = dict(B=0.5, eps=0.1, N=8, P=1, K=4, lr=ch3.LR, seed=8, mark_first=True, steps=4,
             cap=16, more=1, **ch3.WORST_ARCH)
    r = ch3.box_scan_one(c)
    last = r["steps"][-1]
    assert r["check"]["schedule"] == ["decay", "constant"]
    assert r["check"]["steps"] == [ch3.CHECK["long"] * last, ch3.CHECK["span"] * last]
    cell = ch3.box_curves([c], [r])[0.5, 0.1, True]
    runs = [r["best"][-1], *r["check"]["best"]]
    assert cell["best"][0] == max(runs) == pytest.approx(r["mechanism"]["value"])
    assert cell["converged"][0] == (max(runs) - min(runs) < 0.1 * max(runs))
    assert cell["checked"][0] and r["mechanism"]["regime"] in sb.mechanism.REGIMES
    assert len(r["mechanism"]["att"]) == 2 and len(r["mechanism"]["z"]) == 4
    # an unchecked cell is never converged, whatever its ladder did
    c0 = {**c, "more": 0}
    r0 = ch3.box_scan_one(c0)
    cell0 = ch3.box_curves([c0], [r0])[0.5, 0.1, True]
    assert "check" not in r0 and not cell0["checked"][0] and not cell0["converged"][0]
    assert cell0["best"][0] == r0["best"][-1]


def test_box_scan_checks_the_cells_conclusions_read():
    for scale in ("ci", "book"):
        box = ch3.BOX[scale]
        checked = {(c["B"], c["eps"]) for c in ch3._ch3_box_configs(scale) if c["more"]}
        assert checked == set(box["check"]) and (min(box["B"]), ch3.EPS[-1]) in checked

def _cell(best, prev, converged, Ns=(8, 32, 128)):
    return dict(Ns=np.array(Ns), best=np.array(best, float), prev=np.array(prev, float),
                converged=np.array(converged))


def test_crossover_only_for_converged_cells_strictly_inside_the_lengths():
    # N |Delta T| = 8 * 1.0 at N = 8, 128 * 0.25 at 128: N* = 128 * 0.25 / 1 = 32, inside
    # (2 N_min, N_max / 2) = (16, 64); near N_max (hard attention) it brackets nothing
    n, lo, hi = ch3.crossover(_cell([1.0, 0.5, 0.25], [0.9, 0.5, 0.25], [True] * 3))
    assert n == pytest.approx(32) and lo == pytest.approx(32) and hi == pytest.approx(32 / 0.9)
    assert ch3.crossover(_cell([1.0, 0.5, 0.25], [1.0, 0.5, 0.25], [True, False, True])) is None
    assert ch3.crossover(_cell([1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [True] * 3)) is None  # hard
    assert ch3.crossover(_cell([1.0, 1.0, 0.9], [1.0, 1.0, 0.9], [True] * 3)) is None
    assert ch3.crossover(_cell([1.0, 0.2, 0.05], [1.0, 0.2, 0.05], [True] * 3)) is None  # 1/N


def test_dictator_positions_and_configs():
    assert ch3.dictator_positions(13) == [1, 2, 7, 12]
    assert ch3.dictator_positions(64) == [1, 2, 32, 63]
    for scale in ("ci", "book", "paper"):
        cs = ch3._ch3_dictator_configs(scale)
        assert {(c["N"], c["i"]) for c in cs} == {(N, i) for N in ch3.DICTATORS[scale]["Ns"]
                                                   for i in ch3.dictator_positions(N)}
        assert all(len(c["seeds"]) >= 8 for c in cs)


def test_dictator_contrasts_name_each_cell_and_read_the_check_grid():
    cs = [c for c in ch3._ch3_dictator_configs("ci") if c["N"] == 13]
    steps = {1: [40] * 8, 2: [100, 110, 121] * 2 + [90, 100], 7: [None] * 8,
             12: [100, 121, 110] * 2 + [100, 90]}
    rs = [dict(steps=steps[c["i"]], budget=c["protocol"]["steps"], w_i=[0.5] * 8) for c in cs]
    cells = ch3.dictator_cells(cs, rs)
    assert set(cells) == {(k, 13) for k in ch3.DICTATOR_KINDS}
    # a step of 121 was first seen at that check: the one before it, 110, is its lower bound
    grid = sb.eval_schedule(cs[0]["protocol"]["steps"], cs[0]["eval_every"], cs[0]["eval_growth"])
    assert 121 in grid and cells["x_2", 13]["checked_before"][2] == max(g for g in grid if g < 121)
    by = {c["name"]: c for c in ch3.dictator_contrasts(cells)}
    assert by["mark"]["factor"] > 2 and by["mark"]["low"] > 1 and by["mark"]["z"] < 0
    assert by["edges"]["low"] < 1 < by["edges"]["high"]          # the same times, shuffled
    assert by["interior"]["factor"] is None and by["interior"]["p"] < 1e-3


def test_unmarked_first_construction_leads_by_a_gap_that_falls_like_1_over_n():
    """Without 1[n = 1] position 1 leads its rival 3 only through n/(N + 1): the score gap times
    N + 1 is the same at every N (to a few %), scales with the query exactly, and the weight on
    x_1 falls from near 1 to about gap (N + 1) / N; inside the box, FIRST at short N."""
    m = ch3.first_unmarked_transformer(0.1)
    half = ch3.first_unmarked_transformer(0.1, q_scale=0.5)
    assert not m.mark_first and max(p.abs().max().item() for p in m.parameters()) <= 1.0
    c = {N: ch3.eos_weight_on_first(m, N)[1] * (N + 1) for N in (64, 512, 4096)}
    assert max(c.values()) < 1.1 * min(c.values()), c
    assert ch3.eos_weight_on_first(half, 512)[1] == pytest.approx(
        ch3.eos_weight_on_first(m, 512)[1] / 2, rel=1e-9)
    assert ch3.eos_weight_on_first(m, 8)[0] > 0.99 > 0.1 > ch3.eos_weight_on_first(m, 4096)[0]
    x = sb.random_strings(8, 64, seed=0).double()
    assert np.array_equal((m(x)[0] > 0).numpy(), sb.FIRST(x).numpy())
    with pytest.raises(ValueError, match="q_scale"):
        ch3.first_unmarked_transformer(q_scale=2.0)
