"""Chapter 6's experiment (sensbook/experiments/ch6.py): steps to learn, censoring, tables."""
import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.experiments import ch6
from tests.test_train import _row, tiny


def tiny_config(name="MAJORITY", N=5, budget=60, seeds=(0, 1, 2), **kw):
    c = dict(target=name, N=N, seeds=list(seeds), protocol=tiny(steps=budget).to_dict(),
             **ch6.EVAL)
    c.update(kw)
    return c


def test_training_stops_when_until_says_so_and_the_curve_is_window_means():
    pr, seeds = tiny(steps=40), [0, 1]
    full = sb.train_population(sb.init_population(seeds, pr, dtype=torch.float64), sb.FIRST, 5,
                               seeds, pr, log_every=1, progress=False)
    m = sb.init_population(seeds, pr, dtype=torch.float64)
    part = sb.train_population(m, sb.FIRST, 5, seeds, pr, log_steps=[4, 10, 40],
                               until=lambda step: step == 13, progress=False)
    # windows (0, 4], (4, 10], (10, 13]: the means of the per-step losses of the full run
    want = [full[:4].mean(0), full[4:10].mean(0), full[10:13].mean(0)]
    np.testing.assert_allclose(part, want, rtol=1e-10)


def test_steps_to_learn_is_the_first_checked_step_at_the_criterion():
    c = tiny_config("MAJORITY", 5, budget=80, criterion=0.9)
    r = ch6.run_config(c, device="cpu")
    acc = np.array(r["eval_accuracy"])                              # (checks, seeds)
    assert r["eval_steps"] == [s for s in sb.eval_schedule(80, 5, c["eval_growth"])
                               if s <= r["steps_run"]]
    for p, s in enumerate(r["steps"]):
        hit = np.flatnonzero(acc[:, p] >= 0.9)
        assert s == (r["eval_steps"][hit[0]] if hit.size else None)
    learned = [s for s in r["steps"] if s is not None]
    assert learned, r["steps"]                         # the tiny model learns MAJORITY here
    if len(learned) == len(r["steps"]):                # stopped once all learned
        assert r["steps_run"] == max(learned)
    else:
        assert r["steps_run"] == r["budget"]
    assert len(r["curve"]) == len(r["curve_steps"]) and r["curve_steps"][-1] == r["steps_run"]
    assert r["accuracy_strings"] == 2**5
    # independently: seed p trained alone for steps[p] steps meets the criterion on all
    # strings, and at the previous check it did not yet
    pr = sb.Protocol.from_dict(c["protocol"])
    for p, s in enumerate(r["steps"]):
        if s is None:
            continue
        k = r["eval_steps"].index(s)
        for steps, want in ((s, True), (r["eval_steps"][k - 1] if k else None, False)):
            if steps is None:
                continue
            alone = sb.init_population([p], pr)
            sb.train_population(alone, sb.MAJORITY, 5, [p], pr.replace(steps=steps),
                                progress=False)
            assert (sb.accuracy(alone, sb.MAJORITY, 5)[0] >= 0.9) == want, (p, steps)
    # seeded: the same configuration gives the same record
    r2 = ch6.run_config(c, device="cpu")
    assert r2["steps"] == r["steps"] and r2["curve"] == r["curve"]


def test_a_seed_short_of_the_criterion_at_the_budget_is_censored():
    r = ch6.run_config(tiny_config("PARITY", 6, budget=12), device="cpu")
    assert r["steps"] == [None, None, None] and r["steps_run"] == 12
    assert r["eval_steps"][-1] == 12 and max(map(max, r["eval_accuracy"])) < 0.99
    rows = ch6.times([tiny_config("PARITY", 6, budget=12)], [r])
    assert np.isinf(rows[0]["steps"]).all() and rows[0]["learned"] == 0


def test_held_out_accuracy_above_exhaustive_max():
    r = ch6.run_config(tiny_config("FIRST", 6, budget=10, exhaustive_max=5, n_test=300),
                      device="cpu")
    assert r["accuracy_strings"] == 300


@pytest.mark.parametrize("change,arg", [(dict(seeds=[]), "seeds"), (dict(criterion=0.3), "criterion"),
                                        (dict(dtype="half"), "dtype"), (dict(momentum=1), "unknown"),
                                        (dict(target="XOR"), "not a target")])
def test_run_config_rejects_bad_configs(change, arg):
    with pytest.raises(ValueError, match=arg):
        ch6.run_config({**tiny_config(), **change}, device="cpu")
    c = tiny_config()
    del c["eval_every"]
    with pytest.raises(ValueError, match="missing"):
        ch6.run_config(c, device="cpu")


def test_growth_rate_recovers_a_known_slope_and_counts_censored_at_the_budget():
    rows = [_row("A", N, [2 ** (3 + 0.5 * N)] * 4) for N in (4, 8, 12)]
    g = ch6.growth_rate(rows, "A")
    assert g["slope"] == pytest.approx(0.5) and g["low"] == pytest.approx(0.5)
    assert g["high"] == pytest.approx(0.5) and g["censored"] == 0 and g["n"] == 12
    # noisy seeds: the interval has width and contains the least-squares slope
    rng = np.random.default_rng(1)
    rows = [_row("B", N, 2 ** (3 + 0.5 * N + rng.normal(0, 0.5, 6))) for N in (4, 8, 12)]
    g = ch6.growth_rate(rows, "B")
    assert g["low"] < g["slope"] < g["high"] and 0.2 < g["slope"] < 0.8
    # censored seeds enter at the budget: the same slope as if they had taken budget steps
    cens = [_row("C", 4, [16, 16]), _row("C", 8, [64, None], budget=256)]
    same = [_row("C", 4, [16, 16]), _row("C", 8, [64, 256], budget=256)]
    assert ch6.growth_rate(cens, "C")["slope"] == pytest.approx(ch6.growth_rate(same, "C")["slope"])
    assert ch6.growth_rate(cens, "C")["censored"] == 1
    with pytest.raises(ValueError, match="two lengths"):
        ch6.growth_rate([_row("D", 4, [5, 6])], "D")


def test_plateau_exit_is_the_first_window_below_log2_minus_drop():
    row = dict(curve_steps=np.array([1, 2, 4, 8, 16]),
               curve=np.array([[0.70, 0.70], [0.69, 0.70], [0.58, 0.69], [0.2, 0.69],
                               [0.1, 0.69]]))
    np.testing.assert_array_equal(ch6.plateau_exit(row), [4, np.inf])


def test_table_is_html_with_one_row_per_cell_and_marks_censoring():
    html = ch6.table([_row("PARITY", 5, [100, 300, 200]), _row("PARITY", 9, [900, None, None])])
    assert html.startswith("<table>") and html.count("<tr>") == 3 and "|" not in html
    assert "<td>3/3</td>" in html and "<td>200 [100, 300]</td>" in html
    assert "<td>1/3</td>" in html and "&gt; 1000 [900, censored]" in html


def test_chapter6_configs_one_per_target_and_length_within_the_book_budget():
    for scale in sb.SCALES:
        sizes = ch6.SIZES[scale]
        cs = ch6.sweep(scale).configs
        cells = {(c["target"], c["N"]) for c in cs}
        assert len(cells) == len(cs) == len(sizes["targets"]) * len(sizes["Ns"])
        assert all(c["N"] % 2 == 1 for c in cs)            # MAJORITY without ties
        assert all(len(c["seeds"]) == sizes["seeds"] for c in cs)
        assert all(ch6.cost(c) > 0 for c in cs)
        for t in ("PARITY", "FIRST", "MAJORITY"):
            assert t in sizes["targets"]
    # the chapter's book-scale budget: 360 CPU-seconds of one thread
    assert sum(ch6.cost(c) for c in ch6.sweep("book").configs) <= 360
    assert sb.experiment("ch6.training").configs("ci") == ch6.sweep("ci").configs
