"""Chapter 6's experiment (sensbook/experiments/ch6_training.py, ch6_explanations.py): steps to learn, censoring, tables."""
import math
import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.experiments import ch6_training as ch6t, ch6_explanations as ch6x, ch6_mechanism as ch6m
from sensbook.train import target
from tests.test_train import _row, tiny


def tiny_config(name="MAJORITY", N=5, budget=60, seeds=(0, 1, 2), **kw):
    c = dict(target=name, N=N, seeds=list(seeds), protocol=tiny(steps=budget).to_dict(),
             **ch6t.EVAL)
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
    r = ch6t.run_config(c, device="cpu")
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
    r2 = ch6t.run_config(c, device="cpu")
    assert r2["steps"] == r["steps"] and r2["curve"] == r["curve"]


def test_a_seed_short_of_the_criterion_at_the_budget_is_censored():
    r = ch6t.run_config(tiny_config("PARITY", 6, budget=12), device="cpu")
    assert r["steps"] == [None, None, None] and r["steps_run"] == 12
    assert r["eval_steps"][-1] == 12 and max(map(max, r["eval_accuracy"])) < 0.99
    rows = ch6t.times([tiny_config("PARITY", 6, budget=12)], [r])
    assert np.isinf(rows[0]["steps"]).all() and rows[0]["learned"] == 0


def test_held_out_accuracy_above_exhaustive_max():
    r = ch6t.run_config(tiny_config("FIRST", 6, budget=10, exhaustive_max=5, n_test=300),
                      device="cpu")
    assert r["accuracy_strings"] == 300


@pytest.mark.parametrize("change,arg", [(dict(seeds=[]), "seeds"), (dict(criterion=0.3), "criterion"),
                                        (dict(dtype="half"), "dtype"), (dict(momentum=1), "unknown"),
                                        (dict(target="XOR"), "not a target")])
def test_run_config_rejects_bad_configs(change, arg):
    with pytest.raises(ValueError, match=arg):
        ch6t.run_config({**tiny_config(), **change}, device="cpu")
    c = tiny_config()
    del c["eval_every"]
    with pytest.raises(ValueError, match="missing"):
        ch6t.run_config(c, device="cpu")


def test_growth_recovers_a_known_slope_and_uses_the_censored_seeds():
    rng = np.random.default_rng(1)
    Ns = (5, 7, 9, 11)
    true = {N: 2 ** (3 + 0.5 * N + 0.3 * rng.standard_normal(8)) for N in Ns}
    budget = 2**7.5
    rows = [_row("A", N, [s if s <= budget else None for s in true[N]], budget=budget)
            for N in Ns]
    g = ch6t.growth(rows, "A")
    assert g["low"] < 0.5 < g["high"] and g["censored"] == sum(
        int((true[N] > budget).sum()) for N in Ns) > 4
    # counted at the budget instead, the slope is biased low
    assert ch6t.growth([_row("A", N, np.minimum(true[N], budget), budget=budget)
                       for N in Ns], "A")["slope"] < g["low"]
    assert set(g["heldout"]) == {"N", "logN"}
    # the same seeds seen only on a grid of checks (powers of 2): read as exact times the
    # steps move b; as intervals (checked_before) the fit stays near the true 0.5
    grid = 2.0 ** np.arange(0, 12)
    coarse = []
    for N in Ns:
        seen = [grid[np.searchsorted(grid, s)] if s <= budget else None for s in true[N]]
        r = _row("A", N, seen, budget=budget)
        r["checked_before"] = np.array([s / 2 if s is not None else 0.0 for s in seen])
        coarse.append(r)
    gi = ch6t.growth(coarse, "A")
    assert gi["low"] < 0.5 < gi["high"] and gi["slope_exact"] != gi["slope"]
    with pytest.raises(ValueError, match="two lengths"):
        ch6t.growth([_row("D", 4, [5, 6])], "D")


def test_preferred_growth_needs_every_law_to_agree():
    fit = lambda n, logn: dict(heldout=dict(N=n, logN=logn))
    assert ch6t.preferred_growth([fit(-10, -15), fit(-3, -6)]) == "N"
    assert ch6t.preferred_growth([fit(-15, -10), fit(-9, -6)]) == "log N"
    assert ch6t.preferred_growth([fit(-10, -15), fit(-6, -5)]) == "cannot tell"
    assert ch6t.preferred_growth([dict(heldout=None)]) == "cannot tell"


@pytest.mark.parametrize("name,N", [("PARITY", 6), ("FIRST", 5), ("MAJORITY", 7)])
def test_accuracy_bound_holds_for_every_error_set_and_is_attained(name, N):
    f = target(name, N)
    table = f(sb.strings(N)).numpy()
    ref = ch6t.target_profile(name, N)
    rng = np.random.default_rng(0)
    for k in (1, 2, 3, 5):
        for _ in range(30):
            g = table.copy()
            g[rng.choice(2**N, k, replace=False)] ^= True
            prof = sb.TruthTable(g).profile(N) / 2**N
            assert ch6t.profile_distance(prof, ref) <= ch6t.accuracy_bound(N, 1 - k / 2**N) + 1e-12
    if name == "PARITY":          # one isolated error moves exactly N + 1 strings
        g = table.copy()
        g[0] ^= True
        prof = sb.TruthTable(g).profile(N) / 2**N
        assert ch6t.profile_distance(prof, ref) == pytest.approx((N + 1) / 2**N)
        assert prof[0] == 1 / 2**N              # and the error is a zero-sensitivity string


def test_run_config_records_the_initial_and_the_trained_models():
    c = tiny_config("MAJORITY", 5, budget=80, criterion=0.9,
                    basin=dict(sigmas=[1e-4, 1e-2, 1.0], copies=4, n_strings=16))
    r = ch6t.run_config(c, device="cpu")
    pr = sb.Protocol.from_dict(c["protocol"])
    init = sb.init_population(c["seeds"], pr)
    assert r["before"]["K"] == sb.sensitivity_profile(init, 5, progress=False).counts.tolist()
    for p, s in enumerate(r["steps"]):
        alone = sb.init_population([p], pr)
        steps = s if s is not None else r["steps_run"]
        sb.train_population(alone, sb.MAJORITY, 5, [p], pr.replace(steps=steps),
                            progress=False)
        K = sb.sensitivity_profile(alone, 5, progress=False).counts[0].tolist()
        assert r["after"]["K"][p] == K
        assert r["after"]["accuracy"][p] == pytest.approx(sb.accuracy(alone, sb.MAJORITY, 5)[0])
        assert r["after"]["margin"][p] == pytest.approx(
            float(alone(sb.strings(5)).detach().abs().min()), abs=1e-6)     # float32
        lam, s99 = r["sharpness"]["lam"][p], r["basin"]["sigma99"][p]
        assert (lam is None) == (s is None) and (s99 is None) == (s is None)
        if s is not None:
            assert lam > 0 and 1e-4 < s99 < 1.0           # agreement 1 at 1e-4, low at 1
            assert r["basin"]["agreement"][p][0] == 1.0
    assert any(s is not None for s in r["steps"])
    rows = ch6t.times([c], [r])
    np.testing.assert_allclose(rows[0]["after"].sum(1), 1)


def test_two_runs_of_one_configuration_store_the_same_checksum(tmp_path):
    """Issue 38 item 9: the result held its CPU seconds, so two runs of one configuration
    stored different checksums; timings and device belong to the store's meta."""
    c = tiny_config("MAJORITY", 5, budget=40, criterion=0.9,
                    basin=dict(sigmas=[1e-4, 1e-2], copies=2, n_strings=16))
    s = sb.Sweep("same", [c], "sensbook.experiments.ch6_training:run_config")
    recs = []
    for out in (tmp_path / "a", tmp_path / "b"):
        sb.run_sweep(s, out, progress=False)
        recs.append(sb.Store(out, "same", s.version).record(c))
    assert recs[0]["sha256"] == recs[1]["sha256"]
    assert recs[0]["meta"]["cpu_seconds"] > 0 and recs[0]["meta"]["device"] == "cpu"


def test_long_configs_are_odd_lengths_at_each_eps_plus_one_parity_cell():
    for scale in sb.SCALES:
        lg = ch6t.SIZES[scale]["long"]
        cs = ch6t.long_configs(scale)
        assert len(cs) == 2 * len(lg["Ns"]) * len(lg["eps"]) + 1
        assert all(c["N"] % 2 == 1 and c["N"] > c["exhaustive_max"] for c in cs)
        assert {c["protocol"]["eps"] for c in cs} == set(lg["eps"])
        assert [c["target"] for c in cs].count("PARITY") == 1
        assert all(c["sharpness"] is None and c["basin"] is None for c in cs)


def test_plateau_exit_is_the_first_window_below_log2_minus_drop():
    row = dict(curve_steps=np.array([1, 2, 4, 8, 16]),
               curve=np.array([[0.70, 0.70], [0.69, 0.70], [0.58, 0.69], [0.2, 0.69],
                               [0.1, 0.69]]))
    np.testing.assert_array_equal(ch6t.plateau_exit(row), [4, np.inf])


def test_table_is_html_with_one_row_per_cell_and_marks_censoring():
    html = ch6t.table([_row("PARITY", 5, [100, 300, 200]), _row("PARITY", 9, [900, None, None])])
    assert html.startswith("<table>") and html.count("<tr>") == 3 and "|" not in html
    assert "<td>3/3</td>" in html and "<td>200 [100, 300]</td>" in html
    assert "<td>1/3</td>" in html and "&gt; 1000 [900, censored]" in html


def test_chapter6_configs_one_per_target_and_length_within_the_book_budget():
    for scale in sb.SCALES:
        sizes = ch6t.SIZES[scale]
        cs = ch6t.sweep(scale).configs
        cells = {(c["target"], c["N"]) for c in cs}
        sparse = sizes["sparse"]
        assert len(cells) == len(cs) == len(sizes["targets"]) * len(sizes["Ns"]) + len(
            sparse["targets"]) * len(sparse["Ns"])
        assert all(c["N"] % 2 == 1 for c in cs)            # MAJORITY without ties
        assert all(len(c["seeds"]) == sizes["seeds"] for c in cs)
        assert all(ch6t.cost(c) > 0 for c in cs)
        for t in ("PARITY", "FIRST", "MAJORITY"):
            assert t in sizes["targets"]
    # the chapter's book-scale budget: 600 CPU-seconds of one thread (training and long)
    assert sum(ch6t.cost(c) for c in ch6t.sweep("book").configs + ch6t.long_configs("book")) <= 600
    assert sb.experiment("ch6.training").configs("ci") == ch6t.sweep("ci").configs


def test_rival_configs_add_new_sparse_cells_and_one_unlogged_parity_cell():
    for scale in sb.SCALES:
        trained = {(c["target"], c["N"]): c for c in ch6t.sweep(scale).configs}
        cs = ch6x.rival_configs(scale)
        rv = ch6t.SIZES[scale]["rivals"]
        sparse, ctrl = cs[:-1], cs[-1]
        assert all((c["target"], c["N"]) not in trained and c["signal"] is None
                   and c["target"] in rv["targets"] for c in sparse)
        assert all(len(c["seeds"]) == rv["seeds"] for c in sparse)
        assert {(c["target"], c["N"]) for c in sparse} | {
            k for k in trained if k[0] in rv["targets"]} >= {
            (t, N) for t in rv["targets"] for N in rv["Ns"]}
        same = trained[("PARITY", rv["control_N"])]
        assert same["signal"] and ctrl["signal"] is None
        assert {k: v for k, v in ctrl.items() if k not in ("signal", "sharpness", "basin", "mechanism")} == \
            {k: v for k, v in same.items() if k not in ("signal", "sharpness", "basin", "mechanism")}
        assert all(c["signal"] is None for c in trained.values() if c["target"] != "PARITY")
    # the share of the book budget: about 200 CPU-seconds for the new work
    logged = sum(ch6t.cost(dict(c, mechanism=None)) - ch6t.cost(dict(c, signal=None, mechanism=None))
                 for c in ch6t.sweep("book").configs)
    assert 0 < logged and logged + sum(ch6t.cost(c) for c in ch6x.rival_configs("book")) <= 260
    # issue 34's share: the mechanism probe, and issue 44's the supports, about 300 CPU-seconds
    mech = sum(ch6t.cost(c) - ch6t.cost(dict(c, mechanism=None))
               for c in ch6t.sweep("book").configs)
    supports = sb.experiment("ch6.supports").predicted_seconds("book")
    assert 0 < mech and 0 < supports and mech + supports <= 300, (mech, supports)


def test_supports_are_the_named_positions_and_every_cell_trains_them():
    # the spread support is the boolean module's SPREAD_PARITY_3 (an independent definition)
    for N in (4, 7, 9, 13, 21):
        assert ch6x.support_positions("spread", N) == list(target("SPREAD_PARITY_3", N).S)
        assert ch6x.support_positions("first", N) == list(target("SPARSE_PARITY_3", N).S)
        assert ch6x.support_positions("last", N) == [N - 2, N - 1, N]
        assert ch6x.support_positions("second", N) == [2, 3, 4]
    assert 1 not in ch6x.support_positions("spread", 9) + ch6x.support_positions("last", 9)
    with pytest.raises(ValueError, match="kind='middle' is not a support"):
        ch6x.support_positions("middle", 9)
    with pytest.raises(ValueError, match="N must be an integer >= 4"):
        ch6x.support_positions("last", 3)
    for scale in sb.SCALES:
        cs = ch6x.support_configs(scale)
        z = ch6x.SUPPORT_SIZES[scale]
        assert {(c["support"], c["N"]) for c in cs} == {(k, N) for k in ch6x.SUPPORTS
                                                       for N in z["Ns"]}
        assert all(len(c["seeds"]) == z["seeds"] >= 8 and c["signal"] is None for c in cs)
    # the runner trains the support it names: a tiny budget, one seed, the stored name
    c = dict(ch6x.support_configs("ci")[2], seeds=[0])
    c["protocol"] = dict(c["protocol"], steps=3)
    r = ch6x.support_one(c)
    assert r["name"] == "3-SPARSE PARITY[5, 6, 7]" and r["steps_run"] == 3


def test_support_contrasts_compare_the_named_pairs_one_property_apart():
    # four cells at N = 9: the spread support 4 times slower than the rest, which agree
    rng = np.random.default_rng(3)
    base = 300 * 2 ** (0.3 * rng.standard_normal(8))
    steps = {"first": base, "second": base[::-1], "last": np.roll(base, 3), "spread": 4 * base}
    rows = {(k, 9): dict(_row("SPARSE_PARITY_3", 9, list(v), budget=3000),
                         checked_before=0.95 * v) for k, v in steps.items()}
    by = {c["name"]: c for c in ch6x.support_contrasts(rows)}
    assert set(by) == {n for n, *_ in ch6x.SUPPORT_CONTRASTS}
    for name, a, b, _ in ch6x.SUPPORT_CONTRASTS:
        assert (by[name]["a"], by[name]["b"], by[name]["N"]) == (a, b, 9)
    assert by["interior"]["low"] > 2 and by["confounded"]["low"] > 2
    assert by["mark"]["low"] < 1 < by["mark"]["high"] and by["edges"]["p"] > 0.05


def test_cell_contrast_reads_a_known_factor_and_keeps_censored_seeds():
    rng = np.random.default_rng(5)
    fast = 200 * 2 ** (0.3 * rng.standard_normal(12))
    slow = 4 * 200 * 2 ** (0.3 * rng.standard_normal(12))
    slow[slow > 1200] = np.inf                                    # censored at the budget
    rows = [dict(_row("A", 9, list(v), budget=1200), checked_before=np.where(
        np.isfinite(v), 0.95 * v, 0.0)) for v in (fast, slow)]
    c = ch6x.cell_contrast(*rows)
    assert c["low"] < 4 < c["high"] and c["low"] > 2 and c["z"] < 0 and c["p"] < 1e-3
    assert c["learned"] == (12, int(np.isfinite(slow).sum())) and c["seeds"] == (12, 12)
    none = dict(rows[1], steps=np.full(12, np.inf), learned=0)
    c = ch6x.cell_contrast(rows[0], none)                         # no finite fit, a test
    assert c["factor"] is None and c["z"] < 0 and c["p"] < 1e-3


def test_power_growth_recovers_a_known_exponent_with_censoring():
    rng = np.random.default_rng(2)
    Ns = (5, 9, 13, 21)
    true = {N: 40 * N ** 1.5 * 2 ** (0.3 * rng.standard_normal(8)) for N in Ns}
    budget = 3000
    rows = [_row("A", N, [s if s <= budget else None for s in true[N]], budget=budget)
            for N in Ns]
    g = ch6x.power_growth(rows, "A")
    assert g["low"] < 1.5 < g["high"] and g["censored"] > 0


def _signal_row(N, exits, coef0, budget=1000):
    """A PARITY cell whose loss leaves log 2 at ``exits`` and whose logged signal at every
    step is ``coef0`` per seed (grad norm twice that), the loss on log 2 before the exit."""
    steps = [1, 5, 20, 80, 320, 1000]
    cs = np.unique(np.r_[np.geomspace(1, budget, 300).round(), steps])   # the loss windows
    ex = np.array(exits, dtype=float)
    curve = np.where(cs[:, None] >= ex, 0.3, math.log(2))
    loss = np.where(np.array(steps)[:, None] >= ex, 0.3, math.log(2) + 0.001)
    loss[0] = 0.75                                         # not yet on the plateau at step 1
    c = np.tile(coef0, (len(steps), 1))
    row = _row("PARITY", N, [None if e > budget else e for e in exits], budget=budget)
    row.update(curve_steps=cs, curve=curve, steps_run=budget,
               signal=dict(steps=steps, loss=loss.tolist(), grad_norm=(2 * c).tolist(),
                           parity_coef=(-c).tolist(), mean_square=np.ones_like(c).tolist(),
                           batch_grad_norm=(3 * c).tolist()))
    return row


def test_plateau_signal_is_read_at_the_first_logged_step_on_the_plateau():
    row = _signal_row(7, [80, 320, math.inf], [1e-2, 1e-3, 1e-4])
    ps = ch6x.plateau_signal(row)
    np.testing.assert_array_equal(ps["at"], [20, 20, 20])
    np.testing.assert_allclose(ps["coef"], [1e-2, 1e-3, 1e-4])
    np.testing.assert_allclose(ps["grad_norm"], [2e-2, 2e-3, 2e-4])
    np.testing.assert_array_equal(ps["left"], [True, True, False])
    np.testing.assert_array_equal(ps["time"], [80, 320, 1000])
    early = _signal_row(7, [5, 320], [1e-2, 1e-3])          # left before any plateau step
    assert np.isnan(ch6x.plateau_signal(early)["coef"][0])


def test_exit_fit_recovers_the_exponent_of_a_signal_that_sets_the_exit():
    rng = np.random.default_rng(3)
    rows = []
    for N in (5, 7, 9, 11):
        coef = 10 ** rng.uniform(-4, -2, 6)
        exits = np.round(2 * coef ** -1.0 * 2 ** (0.1 * rng.standard_normal(6)))
        rows.append(_signal_row(N, exits, coef, budget=10**6))
    g = ch6x.exit_fit(rows, "coef")
    assert g["low"] < -1.0 < g["high"] and g["n"] == 24 and g["heldout"] is not None
    star = ch6x.exit_fit(rows, "sigma_star", sigma_star={5: 0.1, 7: 0.08, 9: 0.06, 11: 0.05})
    assert g["heldout"] > star["heldout"] + 2          # sigma* cannot order seeds of one N
    tau = ch6x.within_length_tau(rows, "coef", n_perm=200)
    assert tau["tau"] < -0.5 and tau["p"] < 0.05
    flat = ch6x.within_length_tau(rows, "grad_norm", n_perm=200, seed=1)
    assert flat["tau"] == tau["tau"]                    # grad_norm = 2 coef: the same order


def test_parity_sigma_star_interpolates_chapter5_in_log_log(monkeypatch):
    Ns5 = sb.experiments.ch5.basin_lengths("PARITY", "ci")
    sig = sb.experiments.ch5.basin_sigmas("ci")
    star = {N: 0.5 * N ** -1.0 for N in Ns5}
    p = {N: np.exp(-(sig / star[N]) ** 2) for N in Ns5}
    monkeypatch.setattr(ch6x, "run_experiment", lambda *a, **k: None)
    monkeypatch.setattr(ch6x.ch5, "basin_merge", lambda c, r: {
        ("uniform", "PARITY", N): dict(p_exact=p[N]) for N in Ns5})
    want = np.array([sb.critical_sigma(sig, p[N]) for N in Ns5])
    np.testing.assert_allclose(ch6x.parity_sigma_star(Ns5, "ci"), want, rtol=1e-12)
    mid = ch6x.parity_sigma_star([5, 3, 13], "ci")             # between, and beyond the ends
    assert want[1] < mid[0] < want[0] and mid[1] > want[0] and mid[2] < want[-1]


def test_log_slope_is_statsmodels_ols_with_its_t_interval():
    import statsmodels.api as sm

    rng = np.random.default_rng(3)
    rows = [dict(target="X", N=N, key=2.0 ** (0.3 * N + rng.normal(0, 0.4, 5)))
            for N in (5, 7, 9, 11)]
    g = ch6x.log_slope(rows, "X", "key", n_boot=200)
    x = np.concatenate([np.full(5, r["N"], float) for r in rows])
    ols = sm.OLS(np.log2(np.concatenate([r["key"] for r in rows])), sm.add_constant(x)).fit()
    lo, hi = ols.conf_int(0.05)[1]
    assert g["slope"] == pytest.approx(ols.params[1], abs=1e-12)
    assert (g["t_low"], g["t_high"]) == pytest.approx((lo, hi), abs=1e-8)  # t_quantile to ~1e-9
    assert g["df"] == 18 and g["low"] < g["slope"] < g["high"]


def _mech_row(N, lam, c0, exits, budget=4000, var0=1.5, dip=0.01):
    """A PARITY cell whose |c| grows as c0 e^(lam t) on the plateau (the loss on log 2 until
    the exit) and whose last layer norm's eos variance stays at var0 there, then dips."""
    steps = np.array([1, 2, 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560], float)
    ex = np.asarray(exits, float)
    P = len(ex)
    coef = np.asarray(c0) * np.exp(np.outer(steps, lam))
    loss = np.where(steps[:, None] >= ex, 0.3, math.log(2) + 0.001)
    var = np.where(steps[:, None] >= ex, dip, var0)[..., None] * np.ones(4)   # (steps, P, 2L)
    cs = np.unique(np.r_[np.geomspace(1, budget, 200).round(), steps])
    curve = np.where(cs[:, None] >= ex, 0.3, math.log(2))
    mech = lambda v: dict(var_median=[[v] * 4] * P, var_min=[[v] * 4] * P,
                          beta_median=[30.0] * P, att_max=[[[0.2]]] * P,
                          att_where=[[[N]]] * P, att_share=[[[1.0]]] * P)
    sig = dict(steps=steps.tolist(), loss=loss.tolist(), parity_coef=coef.tolist(),
               var_median=var.tolist(), var_min=var.tolist(),
               beta_median=np.full((len(steps), P), 30.0).tolist(),
               att_max=np.full((len(steps), P, 1, 1), 0.2).tolist())
    res = dict(steps=[None if e > budget else int(e) for e in ex], steps_run=budget,
               curve=curve.tolist(), curve_steps=cs.tolist(), signal=sig,
               before=dict(mechanism=mech(var0)), after=dict(mechanism=mech(dip)))
    return dict(target="PARITY", N=N), res


def test_escape_rates_recover_the_growth_rate_on_the_plateau():
    c, r = _mech_row(9, [0.004, 0.002, 0.001], [1e-3, 1e-4, 1e-3], [900, 2000, 3000])
    (row,) = ch6x.mechanism_rows([c], [r])
    er = ch6x.escape_rates(row)
    np.testing.assert_allclose(er["lam"], [0.004, 0.002, 0.001], rtol=1e-9)
    np.testing.assert_array_equal(er["t0"], [10, 10, 10])           # the first plateau step
    np.testing.assert_allclose(er["c0"], [1e-3 * np.exp(0.04), 1e-4 * np.exp(0.02),
                                          1e-3 * np.exp(0.01)], rtol=1e-9)
    walk = ch6x.plateau_walk(row)
    np.testing.assert_allclose(walk["plateau_low"], 1.5)
    np.testing.assert_allclose(walk["after_exit"], [0.01, 0.01, np.nan])   # none logged after
    np.testing.assert_allclose(walk["final"], 0.01)
    rn = ch6x.rate_against_n([er, dict(er, N=11, lam=er["lam"] / np.e ** 2)])
    assert rn["slope"] == pytest.approx(-1.0) and rn["median"][9] == pytest.approx(0.002)


def test_variance_slope_recovers_a_power_of_n_over_learned_seeds():
    rng = np.random.default_rng(0)
    cs, rs = [], []
    for N in (5, 7, 9, 11, 13):
        c, r = _mech_row(N, [0.003] * 4, [1e-3] * 4, [500, 600, 700, 5000])
        v = 3.0 * N ** -2.0 * np.exp(0.1 * rng.standard_normal(4))
        r["after"]["mechanism"]["var_min"] = [[1.0, 1.0, 1.0, x] for x in v[:3]] + [[1, 1, 1, 9.0]]
        cs.append(c), rs.append(r)
    g = ch6x.variance_slope(ch6x.mechanism_rows(cs, rs))
    assert g["low"] < -2 < g["high"] and g["n"] == 15             # the censored seed left out
    assert abs(g["z2"]) < 3 and g["z4"] > 10
    html = ch6x.mechanism_table(ch6x.mechanism_rows(cs, rs))
    assert html.count("<tr>") == 6 and "3/4" in html


def test_pages_print_numbers_as_text_and_tables_as_html():
    # no reprs: None, inf and NaN read as the word given, numbers in the format given
    assert ch6x.listed([1997.0, np.inf, None, np.nan, 589.0], ".0f", "never") == (
        "1997, never, never, never, 589")
    assert ch6x.listed(np.array([0.0213, 1.5])) == "0.0213, 1.5"
    assert "np.float64" not in ch6x.listed(np.float64([0.5]))
    assert set(ch6x.GROWTH_WORDS) == {"N", "log N", "cannot tell"}


# ---- ch6.interventions -------------------------------------------------------------------
def test_intervention_runner_on_a_tiny_cell_against_the_instrument():
    c = dict(ch6m.intervention_configs("ci")[0], N=4, seeds=[0, 1])
    c["protocol"] = {**c["protocol"], "steps": 20}
    c["v_N"] = ch6m.danger_threshold(4, c["protocol"]["eps"])
    r = ch6m.intervention_one(c)
    names = set(ch6m.interventions_of(2, 4)) | {"trained"}
    assert set(r["accuracy"]) == set(r["agree"]) == set(r["margin"]) == names
    assert r["agree"]["trained"] == [1.0, 1.0]
    # retrain the same seeds and freeze the last LN at eos directly: the same agreement
    pr = sb.Protocol.from_dict(c["protocol"])
    model = sb.init_population(c["seeds"], pr)
    sb.learn(model, target("PARITY", 4), 4, c["seeds"], pr, criterion=0.99,
             checks=sb.eval_schedule(pr.steps, c["eval_every"], c["eval_growth"]))
    x = sb.strings(4)
    T0 = model(x)
    T = sb.intervened_scores(model, x, sb.freeze_norms(model, x, 3, positions=[4]))
    assert r["agree"]["last LN at eos"] == ((T > 0) == (T0 > 0)).double().mean(1).tolist()
    for share in r["patch"].values():
        assert all(0 <= s <= 1 for s in share)
    assert sorted(r["patch"]) == [f"{b} 1 {p}" for b in (0, 1, 3) for p in ("bit", "eos")]
    # the flip of a bit PARITY reads changes the label of every string the model gets right
    acc = np.array(r["accuracy"]["trained"])
    assert (np.array(r["flips"]["0"]) >= 2 * acc - 1 - 1e-12).all()
    # per layer norm and position, after and before training, against v_N = 1/4 - eps
    v_N = c["v_N"]
    assert v_N == pytest.approx(0.25 - 1e-5)
    s = sb.variance_summary(model, x, v_N)
    assert np.array_equal(np.array(r["below"]), s["below"]) and np.shape(r["below"]) == (2, 4, 5)
    assert np.array_equal(np.array(r["var_median"]), s["median"])
    tr = model.trace(x)[1]
    assert np.allclose(r["tau_max"], tr.tau.double().amax(1).numpy())
    assert np.allclose(r["beta"], tr.beta.double().median(1).values.numpy())
    m0 = sb.init_population(c["seeds"], pr)
    assert np.array_equal(np.array(r["before"]["below"]),
                          sb.variance_summary(m0, x, v_N)["below"])
    assert np.allclose(r["theta_norm0"], m0.flat().double().norm(dim=1).numpy())
    assert np.allclose(r["theta_max"], model.flat().double().abs().amax(1).numpy())
    rows = ch6m.danger_rows([c], [r])
    # the largest share below v_N over the sites that reach T: the last layer at eos only
    b = np.array(r["below"])
    want = np.concatenate([b[:, :2].max(2), b[:, 2:, -1]], axis=1)
    assert np.array_equal(rows[0]["below_seeds"], want)
    assert "<td>PARITY</td>" in ch6m.danger_table(rows) and ch6m.patch_table([c], [r])
    assert ch6m.danger_table(rows, [1]).count("LN 2:") == 1 \
        and "LN 1:" not in ch6m.danger_table(rows, [1])


def test_danger_threshold_reaches_t_and_the_interior_dictator():
    assert ch6m.danger_threshold(9, 0.0) == pytest.approx(1 / 9)
    # there z = 1/sqrt(v_N + eps) = sqrt(N): Lemma 2.9's one-layer-norm order-one flip
    N, eps = 11, 1e-5
    assert 1 / math.sqrt(ch6m.danger_threshold(N, eps) + eps) == pytest.approx(math.sqrt(N))
    with pytest.raises(ValueError, match="eps"):
        ch6m.danger_threshold(10, 0.1)
    m = ch6m.reaches_t(2, 5)
    assert m.shape == (4, 6) and m[:2].all() and m[2:, -1].all() and not m[2:, :-1].any()
    for N in (5, 7, 9, 11):
        f = ch6m.intervention_target("DICTATOR_MID", N)
        x = sb.strings(N)
        mid = -(-N // 2)
        assert torch.equal(f(x), x[:, mid - 1].bool()) and 1 < mid < N
        assert mid - 1 == ch6m.BIT_ROLES["x<sub>⌈N/2⌉</sub>"](N) in ch6m.patched_bits(N)
    assert ch6m.intervention_target("SPARSE_PARITY_2", 7).S == (1, 2)


def test_intervention_effects_verdicts_follow_the_interval_over_seeds():
    c = dict(target="PARITY", N=5)
    agree = {"trained": [1.0] * 8, "a": [0.6, 0.7, 0.5, 0.65, 0.7, 0.6, 0.55, 0.6],
             "b": [1.0] * 8, "c": [1.0, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]}
    r = dict(accuracy=agree, agree=agree, steps=[1] * 8,
             margin={"trained": [2.0] * 8, "a": [1.0] * 8, "b": [1.0] * 8, "c": [2.0] * 8})
    rows = {x["intervention"]: x for x in ch6m.intervention_effects([c], [r])}
    assert rows["a"]["verdict"] == "labels" and rows["b"]["verdict"] == "margin only"
    assert rows["c"]["verdict"] == "undecided"               # one seed: interval straddles
    m, lo, hi = ch6m.mean_interval(1 - np.array(agree["a"]))
    assert math.isclose(m, rows["a"]["moved"]) and lo < m < hi
    assert ch6m.pooled_moved([c, c], [r, r], "PARITY", "a")[0] == pytest.approx(m)


def test_logrank_against_scipy_with_ties_and_censoring():
    """Issue 43: the censored two-sample test the book's ablation and ch7 assert on, against
    scipy's independent implementation (scipy.stats.logrank), ties and censoring included."""
    from scipy.stats import CensoredData, logrank
    from sensbook.experiments.ch6_training import logrank as ours

    rng = np.random.default_rng(3)
    for _ in range(20):
        n0, n1 = rng.integers(3, 12, size=2)
        t = rng.integers(1, 8, size=n0 + n1).astype(float) * 10      # ties on a grid
        d = rng.random(n0 + n1) < 0.7
        g = np.r_[np.zeros(n0), np.ones(n1)]
        if not d.any():
            continue
        data = [CensoredData(uncensored=t[(g == k) & d], right=t[(g == k) & ~d]) for k in (0, 1)]
        ref = logrank(*data)
        got = ours(t, d, g)
        assert abs(got["z"] + ref.statistic) < 1e-9 and abs(got["p"] - ref.pvalue) < 1e-9
    with pytest.raises(ValueError, match="group must hold both 0 and 1"):
        ours([1.0, 2.0], [1, 1], [0, 0])


def test_stratified_logrank_against_statsmodels_survdiff():
    """Issue 43: the log-rank test stratified by length (3-sparse PARITY against FIRST over
    their lengths) against statsmodels' independent implementation (survdiff with strata),
    ties and censoring included; one stratum is the plain test."""
    from statsmodels.duration.survfunc import survdiff
    from sensbook.survival import logrank

    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(8, 30))
        t = rng.integers(1, 8, size=n).astype(float) * 10
        d = (rng.random(n) < 0.7).astype(int)
        g = rng.integers(0, 2, size=n)
        k = rng.integers(0, 3, size=n)
        if len(set(g)) < 2 or not d.any():
            continue
        chi2, p = survdiff(t, d, g, strata=k)
        got = logrank(t, d, g, strata=k)
        assert abs(got["z"] ** 2 - chi2) < 1e-9 and abs(got["p"] - p) < 1e-9
    assert logrank(t, d, g, strata=np.zeros(n)) == logrank(t, d, g)
    with pytest.raises(ValueError, match="strata must hold one label per run"):
        logrank(t, d, g, strata=[0, 1])


def test_later_compares_within_lengths_and_slowest_share_marks_censoring():
    rows = lambda steps, N: dict(N=N, steps=np.array(steps, float), budget=100, steps_run=100)
    first = [rows([5, 6, 7, 8], 5), rows([50, 60, 70, 80], 9)]
    second = [rows([10, 11, 12, np.inf], 5), rows([90, 95, 99, np.inf], 9)]
    v = ch6t.later(first, second)
    assert v["z"] < 0 and v["n"] == 8 and v["b"] is None
    # pooled over lengths the first length's second group would look fast; stratified, not
    from sensbook.survival import logrank
    t = np.r_[5, 6, 7, 8, 50, 60, 70, 80, 10, 11, 12, 100, 90, 95, 99, 100]
    d = np.isfinite(np.r_[first[0]["steps"], first[1]["steps"], second[0]["steps"],
                          second[1]["steps"]])
    assert v["z"] < logrank(t, d, np.repeat([0, 1], 8))["z"]
    one = ch6t.later(first[:1], second[:1])
    assert one["b"] > 0 and one["low"] < one["b"] < one["high"]
    with pytest.raises(ValueError, match="one row per N"):
        ch6t.later(first, second[::-1])
    assert ch6t.slowest_share(first[1]) == 0.8 and ch6t.slowest_share(second[0]) == np.inf


def test_one_ulp_moves_every_parameter_by_one_unit_in_the_last_place():
    from sensbook.train import Protocol, init_population

    model = init_population(range(2), Protocol(steps=1, batch=4))
    before = model.flat().clone()
    assert ch6t.one_ulp(model) == before.numel()
    after = model.flat()
    up = torch.nextafter(before, torch.full_like(before, math.inf))
    assert torch.equal(after, up) and (after > before).all()
    assert ((after - before) / before.abs().clamp_min(1e-30)).abs().max() < 2.4e-7


def test_growth_noise_with_the_drawn_runs_is_the_drawn_fit():
    cs = [dict(c, seeds=c["seeds"][:3]) for c in ch6t.sweep("ci").configs
          if c["target"] in ("PARITY", "FIRST")]
    rng = np.random.default_rng(0)
    res = []
    for c in cs:
        s = (2.0 ** (4 + (0.6 if c["target"] == "PARITY" else 0.1) * c["N"]
                     + rng.normal(0, 0.3, 3))).round()
        res.append(dict(name=c["target"], steps=[float(x) for x in s], budget=1500,
                        steps_run=int(s.max()), curve_steps=[1], curve=[[0.7] * 3],
                        eval_steps=list(range(5, 1500, 5)), accuracy_strings=8,
                        before=dict(K=[[1, 1]] * 3, accuracy=[0.5] * 3),
                        after=dict(K=[[1, 1]] * 3, accuracy=[1.0] * 3, margin=[1] * 3,
                                   theta_norm=[1] * 3), sharpness=None, basin=None))
    rows = ch6t.times(cs, res)
    noise = [dict(r, steps=r["steps"][:2], checked_before=r["checked_before"][:2], seeds=2)
             for r in rows]
    gn = ch6t.growth_noise(rows, noise, dists=("log-normal",))
    for v in gn["fits"].values():
        assert v["inside"] and v["drawn"]["slope"] == pytest.approx(v["perturbed"]["slope"])
    np.testing.assert_array_equal(gn["t0"], gn["t1"])
    moved = [dict(q, steps=q["steps"] * (8.0 if q["target"] == "PARITY" else 1.0))
             for q in noise]
    gm = ch6t.growth_noise(rows, moved, dists=("log-normal",))
    assert gm["fits"]["PARITY", "log-normal"]["perturbed"]["a"] > \
        gm["fits"]["PARITY", "log-normal"]["drawn"]["a"]


def test_run_config_perturb_trains_the_same_seeds_one_ulp_away():
    """ch6.noise: ``perturb`` = 1 trains from the initial parameters one ulp away (the loss
    curve moves; :func:`one_ulp` itself is checked above); without it, or with 0, the run
    is the drawn one."""
    c = tiny_config("PARITY", 5, budget=40, criterion=0.99, seeds=(0, 1), sharpness=None,
                    basin=None, mechanism=None)
    drawn = ch6t.run_config(c, device="cpu")
    assert ch6t.run_config(dict(c, perturb=0), device="cpu")["curve"] == drawn["curve"]
    moved = ch6t.run_config(dict(c, perturb=1), device="cpu")
    assert moved["curve"] != drawn["curve"]
    for n in ch6t.noise_configs("ci"):
        assert n["perturb"] == 1 and len(n["seeds"]) == ch6t.NOISE_SEEDS
        assert n["sharpness"] is n["basin"] is n["signal"] is n["mechanism"] is None


# ---- plateau verdicts that can lose (issue 44, item 5) ----------------------------------
_STEPS = np.array([1, 2, 4, 9, 18, 38, 79, 163, 338, 700, 1449, 3000], float)


def test_exit_coefficient_is_the_least_coefficient_a_loss_below_the_exit_allows():
    cs = ch6x.exit_coefficient(0.1)
    # T a multiple of chi (labels y = -chi): the loss is log(1 + e^-|c|), log 2 - 0.1 at c*
    assert math.log1p(math.exp(-cs)) == pytest.approx(math.log(2) - 0.1, rel=1e-12)
    # any T (Jensen): a loss at most log 2 - 0.1 needs |c| >= c*
    rng = np.random.default_rng(0)
    chi = rng.choice([-1.0, 1.0], 4096)
    for _ in range(200):
        T = rng.normal(0, rng.uniform(0.01, 3), 4096) - rng.uniform(0, 0.5) * chi
        loss, c = np.mean(np.log1p(np.exp(chi * T))), abs(np.mean(T * chi))   # y T = -chi T
        assert loss > math.log(2) - 0.1 or c >= cs
    with pytest.raises(ValueError, match="drop"):
        ch6x.exit_coefficient(1.0)


def _exponential(lam, c0, budget=3000, noise=0.0, seed=0):
    """|c(t)| = c0 e^(lam t) (times log-normal noise), exits where it reaches c*."""
    lam, c0 = np.asarray(lam, float), np.asarray(c0, float)
    rng = np.random.default_rng(seed)
    coef = c0 * np.exp(np.outer(_STEPS, lam) + noise * rng.standard_normal((len(_STEPS), len(lam))))
    ex = np.log(ch6x.exit_coefficient() / c0) / lam
    return _STEPS, coef, np.where(ex < budget, ex, np.inf), budget


def test_escape_forecast_is_exact_on_a_noiseless_exponential():
    logs = _exponential([0.004, 0.01, 0.02, 0.002], [1e-3, 1e-4, 1e-5, 1e-5])
    for how in ("first half", "other seeds", "all"):
        f = ch6x.escape_forecast(*logs, fit_on=how)
        if how == "other seeds":                 # the others' rates are not this seed's
            continue
        np.testing.assert_allclose(f["lam"], [0.004, 0.01, 0.02, 0.002], rtol=1e-8)
        np.testing.assert_allclose(f["predicted"][:3], logs[2][:3], rtol=1e-8)
        np.testing.assert_allclose(f["ratio"][:3], 1.0, rtol=1e-8)
        # the last never leaves within 3000 steps: its ratio is the lower bound 3000 / exit
        assert f["ratio"][3] == pytest.approx(3000 * 0.002 / math.log(0.2111 / 1e-5), rel=1e-3)
    same = _exponential([0.01] * 4, [1e-3, 1e-4, 1e-5, 1e-4])
    f = ch6x.escape_forecast(*same, fit_on="other seeds")
    np.testing.assert_allclose(f["ratio"], 1.0, rtol=1e-8)


def test_escape_forecast_does_not_see_the_scored_half_and_counts_failures():
    steps, coef, ex, end = _exponential([0.004, 0.01], [1e-3, 1e-4])
    late = steps[:, None] >= (10 + ex) / 2
    moved = np.where(late, coef * 50.0, coef)
    a, b = (ch6x.escape_forecast(steps, c, ex, end) for c in (coef, moved))
    np.testing.assert_array_equal(a["predicted"], b["predicted"])       # out of sample
    inn = [ch6x.escape_forecast(steps, c, ex, end, fit_on="all") for c in (coef, moved)]
    assert not np.allclose(inn[0]["predicted"], inn[1]["predicted"])   # the in-sample fit moves
    # a rate <= 0 on a seed that left is a failed prediction: ratio 0, kept in the summary
    flat = np.where(late, coef, 1e-3)
    flat[:, 1] = coef[:, 1]
    f = ch6x.escape_forecast(steps, np.where(late, coef, flat * np.exp(-1e-4 * steps)[:, None]),
                             ex, end)
    assert f["lam"][0] < 0 and f["ratio"][0] == 0 and f["predicted"][0] == np.inf
    s = ch6x.forecast_summary([f])
    assert s["failed"] == 1 and s["n"] == 2 and s["within2"] == 0.5


def test_heldout_growth_prefers_the_law_that_made_the_data():
    rng = np.random.default_rng(1)
    lam = rng.uniform(0.005, 0.02, 8)
    expo = _exponential(lam, 10 ** rng.uniform(-5, -3, 8), noise=0.3, seed=2)
    k, c1 = rng.uniform(0.8, 2.0, 8), 10 ** rng.uniform(-6, -4, 8)
    ex = (ch6x.exit_coefficient() / c1) ** (1 / k)
    coef = c1 * _STEPS[:, None] ** k * np.exp(0.3 * rng.standard_normal((len(_STEPS), 8)))
    power = (_STEPS, coef, np.where(ex < 3000, ex, np.inf), 3000)
    for logs, law in ((expo, "exponential"), (power, "power")):
        (g,) = ch6x.growth_heldout([logs])
        assert len(g["seeds"]) >= 4
        assert ch6x.pooled_preference([g["diff"]])["prefer"] == law, (law, g["diff"])
        # and the forecast of the exit from the first half: the true law's is near 1
        s = {w: ch6x.forecast_summary([ch6x.escape_forecast(*logs, law=w)])["median"]
             for w in ch6x.GROWTH_LAWS}
        assert 0.6 < s[law] < 1.6, s
    # a model that does not move (|c| noise about a constant, never leaving): no preference
    still = (_STEPS, 1e-4 * np.exp(0.3 * rng.standard_normal((len(_STEPS), 8))),
             np.full(8, np.inf), 3000)
    (g,) = ch6x.growth_heldout([still])
    assert ch6x.pooled_preference([g["diff"]])["prefer"] != "exponential"


def test_verdict_labels():
    assert ch6x.verdict(True, False) == "decided"
    assert ch6x.verdict(True, False, shared=True) == "consistent, does not discriminate"
    assert ch6x.verdict(False, False) == "consistent, does not discriminate"
    assert ch6x.verdict(False, True) == "rejected"
    with pytest.raises(ValueError):
        ch6x.verdict(True, True)
