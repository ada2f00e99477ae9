"""Population training against one-seed-at-a-time training, and the chapter-6 measurements."""
import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.train import ch6_cost, target


def tiny(**kw):
    base = dict(D=8, L=1, H=2, steps=12, batch=16, lr=3e-3)
    base.update(kw)
    return sb.Protocol(**base)


def test_init_population_model_p_is_its_own_seed():
    pr = tiny()
    pop = sb.init_population([5, 2, 9], pr, dtype=torch.float64)
    for p, s in enumerate([5, 2, 9]):
        alone = sb.Recognizer.random(1, pr.D, pr.L, pr.H, pr.F, pr.eps, init=pr.init, seed=s,
                                     dtype=torch.float64)
        assert torch.equal(pop.flat()[p], alone.flat()[0])


@pytest.mark.parametrize("loss", ["logistic", "mse"])
def test_population_training_equals_training_each_seed_alone(loss):
    pr, f, N, seeds = tiny(loss=loss, weight_decay=0.01), sb.MAJORITY, 7, [3, 7, 11, 0]
    pop = sb.init_population(seeds, pr, dtype=torch.float64)
    theta0 = pop.flat()
    curve = sb.train_population(pop, f, N, seeds, pr, log_every=1, progress=False)
    assert curve.shape == (pr.steps, len(seeds))
    assert not torch.allclose(pop.flat(), theta0)          # it did train
    for p, s in enumerate(seeds):
        alone = sb.init_population([s], pr, dtype=torch.float64)
        c1 = sb.train_population(alone, f, N, [s], pr, log_every=1, progress=False)
        torch.testing.assert_close(pop.flat()[p], alone.flat()[0], rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(curve[:, p], c1[:, 0], rtol=1e-9, atol=1e-12)


def test_population_order_does_not_matter():
    pr, N = tiny(), 6
    a = sb.init_population([1, 2], pr, dtype=torch.float64)
    b = sb.init_population([2, 1], pr, dtype=torch.float64)
    sb.train_population(a, sb.PARITY, N, [1, 2], pr, progress=False)
    sb.train_population(b, sb.PARITY, N, [2, 1], pr, progress=False)
    torch.testing.assert_close(a.flat()[0], b.flat()[1], rtol=1e-9, atol=1e-9)


def test_population_loss_matches_a_direct_computation():
    m = sb.Recognizer.random(3, 8, 1, 2, seed=0, dtype=torch.float64)
    x = torch.randint(0, 2, (3, 10, 5), generator=torch.Generator().manual_seed(1)).double()
    y = sb.PARITY(x)
    T = m(x)
    s = torch.where(y, 1.0, -1.0).double()
    torch.testing.assert_close(sb.population_loss(m, x, y, "logistic"), torch.log1p(torch.exp(-s * T)).mean(-1))
    torch.testing.assert_close(sb.population_loss(m, x, y, "mse"), ((T - s) ** 2).mean(-1))


def test_accuracy_agrees_with_the_truth_table():
    m = sb.Recognizer.random(4, 8, 1, 1, init="gaussian", seed=3, dtype=torch.float64)
    N, f = 6, sb.FIRST
    table = sb.truth_table(m, N, progress=False)                  # (4, 64) labels
    want = (table == f(sb.strings(N)).to(torch.int8)).double().mean(-1).numpy()
    np.testing.assert_allclose(sb.accuracy(m, f, N), want)
    # a held-out sample estimates it
    est = sb.accuracy(m, f, N, n_test=20000)
    assert np.all(np.abs(est - want) < 4 * np.sqrt(0.25 / 20000) + 1e-12)


def test_accuracy_refuses_nan_outputs():
    m = sb.Recognizer.random(3, 8, 1, 1, init="gaussian", seed=3, dtype=torch.float64)
    theta = m.flat()
    theta[1, -1] = float("nan")                 # omega of model 1: T = NaN on every string
    m.set_flat(theta)
    # PARITY(x) = 0 on half the strings: a NaN counted as "reject" would score 0.5 there
    with pytest.raises(ValueError, match=r"NaN or infinite.*\{1: 32\}"):
        sb.accuracy(m, sb.PARITY, 5)
    with pytest.raises(ValueError, match="NaN"):
        sb.accuracy(m, sb.PARITY, 5, n_test=100)
    with pytest.raises(ValueError, match="n_test"):
        sb.accuracy(m, sb.PARITY, 5, n_test=0)
    np.testing.assert_allclose(sb.accuracy(m.select([0, 2]), sb.PARITY, 5),
                               sb.accuracy(m.select([0]), sb.PARITY, 5).tolist()
                               + sb.accuracy(m.select([2]), sb.PARITY, 5).tolist())


def test_targets_are_the_named_functions():
    x = sb.strings(7)
    assert torch.equal(target("PARITY", 7)(x), sb.PARITY(x))
    assert torch.equal(target("FIRST", 7)(x), x[:, 0] == 1)
    assert torch.equal(target("MAJORITY", 7)(x), x.sum(-1) >= 4)
    assert torch.equal(target("SPARSE_PARITY_3", 7)(x), x[:, :3].sum(-1) % 2 == 1)
    assert torch.equal(target("SPARSE_MAJORITY_2", 7)(x), x[:, :2].sum(-1) >= 2)


@pytest.mark.parametrize("name,N,arg", [("MAJORITY", 10, "MAJORITY"), ("SPARSE_PARITY_9", 5, "m"),
                                        ("SPARSE_PARITY_x", 5, "integer"), ("XOR", 5, "not a target")])
def test_bad_targets_raise(name, N, arg):
    with pytest.raises(ValueError, match=arg):
        target(name, N)


@pytest.mark.parametrize("kw,arg", [(dict(steps=0), "steps"), (dict(lr=-1.0), "lr"), (dict(init="he"), "init"),
                                    (dict(loss="hinge"), "loss"), (dict(eps=float("nan")), "eps")])
def test_bad_protocol_raises(kw, arg):
    with pytest.raises(ValueError, match=arg):
        sb.Protocol(**kw)


def test_protocol_round_trips_and_rejects_unknown_settings():
    pr = tiny()
    assert sb.Protocol.from_dict(pr.to_dict()) == pr
    with pytest.raises(ValueError, match="unknown"):
        sb.Protocol.from_dict({**pr.to_dict(), "momentum": 0.9})


def test_seeds_must_match_the_population():
    pr = tiny()
    m = sb.init_population([0, 1], pr)
    with pytest.raises(ValueError, match="seeds"):
        sb.train_population(m, sb.PARITY, 5, [0], pr, progress=False)
    with pytest.raises(ValueError, match="seeds"):
        sb.init_population([], pr)


def tiny_config(name="MAJORITY", N=5, budget=60, seeds=(0, 1, 2), **kw):
    c = dict(target=name, N=N, seeds=list(seeds), protocol=tiny(steps=budget).to_dict(),
             **sb.CH6_EVAL)
    c.update(kw)
    return c


def test_eval_schedule_resolution_and_budget():
    s = sb.eval_schedule(1000, 5, 0.1)
    assert s[0] == 5 and s[-1] == 1000 and s == sorted(set(s))
    gaps = np.diff(s[:-1])
    assert (gaps >= 5).all()
    assert all(g <= max(5, np.ceil(0.1 * t)) for g, t in zip(gaps, s))   # relative resolution
    assert sb.eval_schedule(7, 5, 0.1) == [5, 7] and sb.eval_schedule(3, 5, 0.1) == [3]
    c = sb.curve_schedule(500, 20)
    assert c[0] == 1 and c[-1] == 500 and len(c) <= 20
    with pytest.raises(ValueError, match="eval_every"):
        sb.eval_schedule(100, 0, 0.1)
    with pytest.raises(ValueError, match="curve_points"):
        sb.curve_schedule(100, 1)


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
    r = sb.run_config(c, device="cpu")
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
    r2 = sb.run_config(c, device="cpu")
    assert r2["steps"] == r["steps"] and r2["curve"] == r["curve"]


def test_a_seed_short_of_the_criterion_at_the_budget_is_censored():
    r = sb.run_config(tiny_config("PARITY", 6, budget=12), device="cpu")
    assert r["steps"] == [None, None, None] and r["steps_run"] == 12
    assert r["eval_steps"][-1] == 12 and max(map(max, r["eval_accuracy"])) < 0.99
    rows = sb.ch6_times([tiny_config("PARITY", 6, budget=12)], [r])
    assert np.isinf(rows[0]["steps"]).all() and rows[0]["learned"] == 0


def test_held_out_accuracy_above_exhaustive_max():
    r = sb.run_config(tiny_config("FIRST", 6, budget=10, exhaustive_max=5, n_test=300),
                      device="cpu")
    assert r["accuracy_strings"] == 300


@pytest.mark.parametrize("change,arg", [(dict(seeds=[]), "seeds"), (dict(criterion=0.3), "criterion"),
                                        (dict(dtype="half"), "dtype"), (dict(momentum=1), "unknown"),
                                        (dict(target="XOR"), "not a target")])
def test_run_config_rejects_bad_configs(change, arg):
    with pytest.raises(ValueError, match=arg):
        sb.run_config({**tiny_config(), **change}, device="cpu")
    c = tiny_config()
    del c["eval_every"]
    with pytest.raises(ValueError, match="missing"):
        sb.run_config(c, device="cpu")


def _row(target, N, steps, budget=1000):
    t = np.array([np.inf if s is None else s for s in steps], dtype=float)
    return dict(target=target, name=target, N=N, steps=t, budget=budget,
                learned=int(np.isfinite(t).sum()), seeds=len(t))


def test_growth_rate_recovers_a_known_slope_and_counts_censored_at_the_budget():
    rows = [_row("A", N, [2 ** (3 + 0.5 * N)] * 4) for N in (4, 8, 12)]
    g = sb.growth_rate(rows, "A")
    assert g["slope"] == pytest.approx(0.5) and g["low"] == pytest.approx(0.5)
    assert g["high"] == pytest.approx(0.5) and g["censored"] == 0 and g["n"] == 12
    # noisy seeds: the interval has width and contains the least-squares slope
    rng = np.random.default_rng(1)
    rows = [_row("B", N, 2 ** (3 + 0.5 * N + rng.normal(0, 0.5, 6))) for N in (4, 8, 12)]
    g = sb.growth_rate(rows, "B")
    assert g["low"] < g["slope"] < g["high"] and 0.2 < g["slope"] < 0.8
    # censored seeds enter at the budget: the same slope as if they had taken budget steps
    cens = [_row("C", 4, [16, 16]), _row("C", 8, [64, None], budget=256)]
    same = [_row("C", 4, [16, 16]), _row("C", 8, [64, 256], budget=256)]
    assert sb.growth_rate(cens, "C")["slope"] == pytest.approx(sb.growth_rate(same, "C")["slope"])
    assert sb.growth_rate(cens, "C")["censored"] == 1
    with pytest.raises(ValueError, match="two lengths"):
        sb.growth_rate([_row("D", 4, [5, 6])], "D")


def test_plateau_exit_is_the_first_window_below_log2_minus_drop():
    row = dict(curve_steps=np.array([1, 2, 4, 8, 16]),
               curve=np.array([[0.70, 0.70], [0.69, 0.70], [0.58, 0.69], [0.2, 0.69],
                               [0.1, 0.69]]))
    np.testing.assert_array_equal(sb.plateau_exit(row), [4, np.inf])


def test_table_is_html_with_one_row_per_cell_and_marks_censoring():
    html = sb.ch6_table([_row("PARITY", 5, [100, 300, 200]), _row("PARITY", 9, [900, None, None])])
    assert html.startswith("<table>") and html.count("<tr>") == 3 and "|" not in html
    assert "<td>3/3</td>" in html and "<td>200 [100, 300]</td>" in html
    assert "<td>1/3</td>" in html and "&gt; 1000 [900, censored]" in html


def test_chapter6_configs_one_per_target_and_length_within_the_book_budget():
    for scale in sb.SCALES:
        sizes = sb.CH6_SIZES[scale]
        cs = sb.ch6_sweep(scale).configs
        cells = {(c["target"], c["N"]) for c in cs}
        assert len(cells) == len(cs) == len(sizes["targets"]) * len(sizes["Ns"])
        assert all(c["N"] % 2 == 1 for c in cs)            # MAJORITY without ties
        assert all(len(c["seeds"]) == sizes["seeds"] for c in cs)
        assert all(ch6_cost(c) > 0 for c in cs)
        for t in ("PARITY", "FIRST", "MAJORITY"):
            assert t in sizes["targets"]
    # the chapter's book-scale budget: 360 CPU-seconds of one thread
    assert sum(ch6_cost(c) for c in sb.ch6_sweep("book").configs) <= 360
    assert sb.experiment("ch6.training").configs("ci") == sb.ch6_sweep("ci").configs

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_population_matches_cpu():
    pr, seeds, N = tiny(), [0, 1, 2], 7
    cpu = sb.init_population(seeds, pr, dtype=torch.float64)
    gpu = sb.init_population(seeds, pr, device="cuda", dtype=torch.float64)
    sb.train_population(cpu, sb.MAJORITY, N, seeds, pr, progress=False)
    sb.train_population(gpu, sb.MAJORITY, N, seeds, pr, progress=False)
    torch.testing.assert_close(gpu.flat().cpu(), cpu.flat(), rtol=1e-6, atol=1e-6)
