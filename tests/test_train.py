"""Population training against one-seed-at-a-time training, and the chapter-6 measurements."""
import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.mechanism import eos_mechanism
from sensbook.train import target


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
    # the spread support {ceil(N/3), ceil(2N/3), N}: {3, 5, 7} at N = 7, {5, 9, 13} at 13
    assert torch.equal(target("SPREAD_PARITY_3", 7)(x), x[:, [2, 4, 6]].sum(-1) % 2 == 1)
    y = sb.strings(13)
    assert torch.equal(target("SPREAD_PARITY_3", 13)(y), y[:, [4, 8, 12]].sum(-1) % 2 == 1)


@pytest.mark.parametrize("name,N,arg", [("MAJORITY", 10, "MAJORITY"), ("SPARSE_PARITY_9", 5, "m"),
                                        ("SPARSE_PARITY_x", 5, "integer"), ("XOR", 5, "not a target"),
                                        ("SPREAD_PARITY_9", 5, "SPREAD_PARITY_9.*m must")])
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


def _row(target, N, steps, budget=1000):
    t = np.array([np.inf if s is None else s for s in steps], dtype=float)
    return dict(target=target, name=target, N=N, steps=t, budget=budget,
                learned=int(np.isfinite(t).sum()), seeds=len(t))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_population_matches_cpu():
    pr, seeds, N = tiny(), [0, 1, 2], 7
    cpu = sb.init_population(seeds, pr, dtype=torch.float64)
    gpu = sb.init_population(seeds, pr, device="cuda", dtype=torch.float64)
    sb.train_population(cpu, sb.MAJORITY, N, seeds, pr, progress=False)
    sb.train_population(gpu, sb.MAJORITY, N, seeds, pr, progress=False)
    torch.testing.assert_close(gpu.flat().cpu(), cpu.flat(), rtol=1e-6, atol=1e-6)


def test_learn_leaves_each_seed_at_its_first_passage():
    pr, N, seeds = tiny(steps=80), 5, [0, 1, 2]
    m = sb.init_population(seeds, pr, dtype=torch.float64)
    run = sb.learn(m, sb.MAJORITY, N, seeds, pr, criterion=0.9, checks=range(5, 81, 5))
    assert any(s is not None for s in run["steps"])
    acc = np.array(run["eval_accuracy"])
    for p, s in enumerate(run["steps"]):
        alone = sb.init_population([seeds[p]], pr, dtype=torch.float64)
        steps = s if s is not None else run["steps_run"]
        sb.train_population(alone, sb.MAJORITY, N, [seeds[p]], pr.replace(steps=steps),
                            progress=False)
        # the trained model of seed p: its parameters at its first passage (or the end)
        torch.testing.assert_close(m.flat()[p], alone.flat()[0], rtol=1e-9, atol=1e-9)
        hit = np.flatnonzero(acc[:, p] >= 0.9)
        assert s == (run["eval_steps"][hit[0]] if hit.size else None)
    with pytest.raises(ValueError, match="criterion"):
        sb.learn(m, sb.MAJORITY, N, seeds, pr, criterion=1)


def _population(arch, seeds, pr, N):
    if arch == "recognizer":
        return sb.init_population(seeds, pr)
    return sb.control_population(arch, seeds, N=N, D=pr.D, L=pr.L, H=pr.H, eps=pr.eps,
                                 init=pr.init, scale=pr.init_scale)


# float32, the book's dtype: "the same" is number for number, not close. The no-LN case ends
# with one seed training alone, where a vmapped population of one would round otherwise.
@pytest.mark.parametrize("arch, f, N, seeds", [("recognizer", sb.MAJORITY, 7, range(6)),
                                               ("no-LN", sb.MAJORITY, 9, range(8))])
def test_dropping_learned_seeds_leaves_what_they_learn_number_for_number(arch, f, N, seeds):
    pr, seeds = sb.Protocol(steps=300, batch=64), list(seeds)
    checks = sb.eval_schedule(pr.steps, 5, 0.05)
    runs, flats = [], []
    for drop in (False, True):
        m = _population(arch, seeds, pr, N)
        runs.append(sb.learn(m, f, N, seeds, pr, criterion=0.99, n_test=512, checks=checks,
                             log_steps=[pr.steps], drop_learned=drop))
        flats.append(torch.cat([t.detach().reshape(len(seeds), -1) for t in m.parameters()], 1))
    kept, dropped = runs
    steps = kept["steps"]
    assert all(s is not None for s in steps) and len(set(steps)) > 2, steps   # seeds finish apart
    assert dropped["steps"] == steps and dropped["steps_run"] == kept["steps_run"]
    assert torch.equal(flats[0], flats[1])
    acc_k, acc_d = np.array(kept["eval_accuracy"]), np.array(dropped["eval_accuracy"])
    for p, s in enumerate(steps):
        i = kept["eval_steps"].index(s)
        np.testing.assert_array_equal(acc_d[:i + 1, p], acc_k[:i + 1, p])
        assert (acc_d[i:, p] == acc_d[i, p]).all()       # frozen at its first passage
    # the curve of a seed ends at its first passage (the one window here is the whole run)
    assert np.isfinite(dropped["curve"]).all() and dropped["curve"].shape == (1, len(seeds))


def test_train_population_drop_freezes_the_dropped_models_and_trains_the_others_as_before():
    pr, N, seeds = sb.Protocol(steps=20, batch=16), 5, [0, 1, 2, 3]     # the book's widths
    a, b = (sb.init_population(seeds, pr) for _ in range(2))
    theta0 = a.flat()
    ca = sb.train_population(a, sb.MAJORITY, N, seeds, pr, log_every=5, progress=False)
    at = {}

    def drop(step):
        if step in (6, 11):
            at[step] = b.flat()
            return [1, 3] if step == 6 else [0]
        return []

    cb = sb.train_population(b, sb.MAJORITY, N, seeds, pr, log_every=5, drop=drop,
                             progress=False)
    assert torch.equal(b.flat()[2], a.flat()[2]) and not torch.equal(a.flat()[2], theta0[2])
    assert torch.equal(b.flat()[[1, 3]], at[6][[1, 3]])     # frozen where they were dropped
    assert torch.equal(b.flat()[0], at[11][0])
    np.testing.assert_array_equal(cb[:, 2], ca[:, 2])
    assert np.isnan(cb[2:, [1, 3]]).all() and np.isfinite(cb[:2, [1, 3]]).all()
    assert np.isnan(cb[3:, 0]).all() and np.isfinite(cb[:3, 0]).all()


def test_drop_learned_refuses_the_gradient_signal():
    pr, seeds = tiny(), [0, 1]
    m = sb.init_population(seeds, pr)
    with pytest.raises(ValueError, match="drop_learned"):
        sb.learn(m, sb.MAJORITY, 5, seeds, pr, signal_steps=[2],
                 signal_strings=sb.strings(5), drop_learned=True)


def test_top_hessian_eigenvalue_matches_the_full_hessian():
    from torch.func import functional_call
    from torch.nn.attention import SDPBackend, sdpa_kernel

    m = sb.Recognizer.random(3, D=4, L=1, H=1, eps=1e-5, init="xavier_normal", seed=1,
                             dtype=torch.float64)
    N = 4
    x = sb.strings(N).double()
    res = sb.top_hessian_eigenvalue(m, sb.PARITY, x, iters=3000, tol=1e-12)
    s = 2 * sb.PARITY(x).double() - 1
    for p in range(3):
        one = m.select(p)
        names = [(k, t.shape) for k, t in one.named_parameters()]

        def loss(theta):
            ps, i = {}, 0
            for k, shape in names:
                n = shape.numel()
                ps[k] = theta[i:i + n].reshape(shape)
                i += n
            with sdpa_kernel(SDPBackend.MATH):
                T = functional_call(one, ps, (x,))
            return torch.nn.functional.softplus(-s * T).mean()

        ev = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss, one.flat()[0]))
        top = ev[ev.abs().argmax()].item()                    # largest in magnitude
        assert res["lam"][p] == pytest.approx(top, rel=1e-6), (p, ev[0], ev[-1])
    assert res["converged"].all()
    # batched: each model's value does not depend on the others in the population
    alone = sb.top_hessian_eigenvalue(m.select([2]), sb.PARITY, x, iters=3000, tol=1e-12)
    assert alone["lam"][0] == pytest.approx(res["lam"][2], rel=1e-6)


def test_min_margin_is_the_smallest_output():
    m = sb.Recognizer.random(2, 8, 1, 2, seed=0, dtype=torch.float64)
    x = sb.strings(5)
    np.testing.assert_allclose(sb.min_margin(m, x), m(x).abs().min(1).values.detach())


def test_logging_the_gradient_signal_does_not_change_training():
    pr, N, seeds = tiny(steps=40), 5, [0, 1, 2]
    runs = []
    for log in (False, True):
        m = sb.init_population(seeds, pr, dtype=torch.float64)
        kw = dict(signal_steps=[1, 7, 20, 40], signal_strings=sb.strings(N).double(),
                  signal_probe=lambda m: eos_mechanism(m, sb.strings(N))) if log else {}
        runs.append((sb.learn(m, sb.PARITY, N, seeds, pr, criterion=0.9, checks=range(5, 41, 5),
                              **kw), m.flat()))
    (off, theta_off), (on, theta_on) = runs
    assert off["signal"] is None and on["signal"]["steps"] == [1, 7, 20, 40][:len(on["signal"]["steps"])]
    assert on["steps"] == off["steps"] and on["steps_run"] == off["steps_run"]
    assert torch.equal(theta_on, theta_off)                      # bit for bit
    np.testing.assert_array_equal(on["curve"], off["curve"])
    assert np.array(on["signal"]["grad_norm"]).shape == (len(on["signal"]["steps"]), 3)
    # the mechanism probe logged beside it, at the same steps, is the probe of those parameters
    assert np.array(on["signal"]["var_min"]).shape == (len(on["signal"]["steps"]), 3, 2)
    assert on["steps"] == [None] * 3 and on["signal"]["steps"][-1] == on["steps_run"] == 40
    np.testing.assert_allclose(on["signal"]["var_min"][-1],      # no seed learned: the last
                               eos_mechanism(m, sb.strings(N))["var_min"], rtol=1e-12)


def test_gradient_signal_against_a_direct_computation():
    N = 5
    m = sb.Recognizer.random(3, 8, 1, 2, seed=4, dtype=torch.float64)
    x = sb.strings(N).double()
    got = sb.gradient_signal(m, sb.PARITY, x, chunk=7)            # blocks that do not divide 2^N
    for p in range(3):
        one = m.select([p])
        loss = sb.population_loss(one, x, sb.PARITY(x))[0]
        g = torch.autograd.grad(loss, list(one.parameters()))
        assert got["loss"][p] == pytest.approx(float(loss.detach()), rel=1e-12)
        assert got["grad_norm"][p] == pytest.approx(float(torch.sqrt(sum((v ** 2).sum() for v in g))),
                                                     rel=1e-10)
        T = one(x)[0].detach()
        chi = torch.tensor([(-1) ** int(s.sum()) for s in x], dtype=torch.float64)
        assert got["parity_coef"][p] == pytest.approx(float((T * chi).sum() / 2**N), abs=1e-12)
        assert got["mean_square"][p] == pytest.approx(float((T * T).mean()), rel=1e-12)
    assert all(p.grad is None for p in m.parameters())           # nothing accumulated


# ---- issue 30: errors that name the argument, numpy scalars that are numbers
def test_accuracy_on_all_strings_past_the_exhaustive_limit_says_to_sample():
    m = sb.Recognizer.random(1, 8, 1, 1, seed=0)
    with pytest.raises(ValueError, match="N=64: .* N <= 24; pass n_test"):
        sb.accuracy(m, sb.PARITY, 64)
    assert sb.accuracy(m, sb.PARITY, 64, n_test=16).shape == (1,)


def test_protocol_reads_numpy_scalars_as_the_python_numbers():
    p = sb.Protocol(lr=np.float32(0.5), D=np.int64(8), eps=np.float64(1e-5))
    assert p == sb.Protocol(lr=0.5, D=8, eps=1e-5)
    assert type(p.lr) is float and type(p.D) is int            # JSON-able, as configs are
    with pytest.raises((TypeError, ValueError), match="lr"):
        sb.Protocol(lr=np.float32("nan"))


@pytest.mark.parametrize("tol", [-1, float("nan")])
def test_top_hessian_eigenvalue_refuses_a_negative_tolerance(tol):
    m = sb.Recognizer.random(1, 8, 1, 1, seed=0, dtype=torch.float64)
    with pytest.raises(ValueError, match="tol must be a finite number >= 0"):
        sb.top_hessian_eigenvalue(m, sb.PARITY, sb.strings(4), tol=tol, iters=2)
