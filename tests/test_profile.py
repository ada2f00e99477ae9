"""The profiler against brute force, for Boolean functions and arbitrary torch classifiers."""
import pytest
import torch

import sensbook as sb
from tests.test_boolean import brute_profile, families


@pytest.mark.parametrize("N", [1, 2, 5, 9, 12])
def test_exhaustive_profile_equals_closed_form(N):
    for f in families(N):
        p = sb.sensitivity_profile(f, N, progress=False)
        assert (p.K.numpy() == f.profile(N)).all(), f
        assert p.complete and int(p.K.sum()) == 2**N


def test_arbitrary_torch_classifier_equals_brute_force():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    clf = lambda x: net(x).squeeze(-1)
    p = sb.sensitivity_profile(clf, 7, progress=False)
    assert (p.K.numpy() == brute_profile(lambda x: clf(x.float()) > 0, 7)).all()
    # A module returning (B, 1) does not fit: a clear error, not a silent broadcast.
    with pytest.raises(ValueError, match="shape"):
        sb.sensitivity_profile(net, 7, progress=False)


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_chunk_size_never_changes_the_result(chunk):
    m = sb.Recognizer.random(P=3, D=8, L=2, H=2, seed=1)
    a = sb.sensitivity_profile(m, 8, progress=False)
    b = sb.sensitivity_profile(m, 8, chunk_size=chunk, progress=False)
    assert torch.equal(a.counts, b.counts)
    t = sb.truth_table(m, 8, chunk_size=chunk, progress=False)
    assert torch.equal(sb.profile_from_table(t, chunk=max(1, chunk // 3)).counts, a.counts)


def test_population_profile_equals_each_model_alone():
    m = sb.Recognizer.random(P=4, D=8, L=1, H=1, seed=2)
    pop = sb.sensitivity_profile(m, 7, progress=False)
    for i in range(4):
        one = sb.sensitivity_profile(m.select(i), 7, progress=False)
        assert torch.equal(one.counts[0], pop.counts[i])


def test_margin_undecided_and_nonfinite_are_never_a_class():
    N = 4
    def clf(x):                       # T = (#ones - 2) / 2, NaN on the all-ones string
        T = (x.sum(-1) - 2) / 2
        return torch.where(x.sum(-1) == N, torch.nan, T)
    p = sb.sensitivity_profile(clf, N, margin=0.25, progress=False)
    assert int(p.undecided) == 6               # weight 2: T = 0
    assert int(p.nonfinite) == 1               # weight 4
    # weight 1 and 3 strings all have an undecided (weight 2) neighbour; weight 0 too? no:
    # weight 0's neighbours have weight 1 (decided): complete, s = 0.
    assert int(p.incomplete) == 4 + 4
    assert p.K.tolist() == [1, 0, 0, 0, 0]
    assert int(p.K.sum() + p.undecided + p.nonfinite + p.incomplete) == 2**N
    assert not bool(p.complete)
    lab = sb.classify(torch.tensor([0.3, 0.1, -0.1, -0.3, 0.0, float("inf")]), 0.2)
    assert lab.tolist() == [1, -1, -1, 0, -1, -2]
    assert sb.classify(torch.tensor([0.0]), 0.0).tolist() == [-1]   # T = 0 is undecided


def test_sampled_profile_is_unbiased_within_its_error_bars():
    m = sb.Recognizer.random(P=2, D=8, L=2, H=2, seed=5)
    exact = sb.sensitivity_profile(m, 10, progress=False)
    est = sb.sensitivity_profile(m, 10, n_samples=4000, seed=1, progress=False)
    z = (est.fractions - exact.fractions).abs() / est.stderr.clamp_min(1e-3)
    assert float(z.max()) < 5
    f = sb.sensitivity_profile(sb.MAJORITY, 101, n_samples=2000, progress=False)
    assert int(f.counts.sum()) == 2000 and f.max_sensitivity == 51


def test_sampled_profile_matches_exact_for_functions_with_one_sensitivity():
    for f, k in [(sb.PARITY, 300), (sb.FIRST, 1), (sb.sparse_parity([2, 50, 99]), 3)]:
        p = sb.sensitivity_profile(f, 300, n_samples=64, progress=False)
        assert int(p.counts[k]) == 64 and float(p.stderr[k]) == 0.0


def test_zero_sensitivity_count_and_summary_statistics():
    assert int(sb.zero_sensitivity_count(sb.MAJORITY, 7, progress=False)) == sb.MAJORITY.K0(7)
    p = sb.sensitivity_profile(sb.PARITY, 6, progress=False)
    assert float(p.average_sensitivity) == 6.0 and int(p.max_sensitivity) == 6
    assert bool(sb.sensitivity_profile(sb.Constant(1), 5, progress=False).is_constant)


def test_random_tables_give_poisson_one_zero_sensitivity_counts():
    # E[K_0] = 1 exactly for uniform random functions: the mean over 400 tables is near 1.
    g = torch.Generator().manual_seed(0)
    tables = torch.randint(0, 2, (400, 2**10), generator=g, dtype=torch.int8)
    K0 = sb.profile_from_table(tables).K0.double()
    assert abs(K0.mean().item() - 1) < 4 * (1 / 400) ** 0.5 * 1.2


@pytest.mark.parametrize("bad, match", [
    (lambda: sb.sensitivity_profile(sb.PARITY, 25), "n_samples"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 0), "N must be >= 1"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 5, margin=-1), "margin"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 5, n_samples=0), "n_samples"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 5, chunk_size=0), "chunk_size"),
    (lambda: sb.sensitivity_profile(lambda x: (x.sum(-1) * 2).long(), 5), "0/1"),
    (lambda: sb.profile_from_table(torch.zeros(5, dtype=torch.int8)), "2\\^N"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 5, n_samples=10).K, "sampled"),
])
def test_bad_input(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        bad()


def test_random_function_profiles_match_truth_table_profiles():
    # Same seed stream as random_function_profiles (one chunk); each row from the numpy path.
    K = sb.random_function_profiles(7, 50, seed=3)
    g = torch.Generator().manual_seed(3)
    tables = torch.randint(0, 2, (50, 2**7), generator=g, dtype=torch.int8)
    assert K.tolist() == [sb.TruthTable(t).profile(7).tolist() for t in tables]


# ---- issue 21: float labels whatever the chunk holds, absurd budgets, outputs that are no tensor
@pytest.mark.parametrize("f, kwargs", [
    (lambda x: x.sum(-1) % 2, dict(chunk_size=1)),                     # one value per call
    (lambda x: x[:, -1], dict(chunk_size=8)),                          # 0.0s, then 1.0s
    (lambda x: x.sum(-1) % 2, dict(chunk_size=1, n_samples=50)),      # sampled
])
def test_float_labels_are_refused_whatever_one_chunk_holds(f, kwargs):
    with pytest.raises(ValueError, match="float values that are all 0.0 or 1.0"):
        sb.sensitivity_profile(f, 4, progress=False, **kwargs)
    # scores (their sign is the label) are read, chunk by chunk, as before
    scores = sb.sensitivity_profile(lambda x: 2 * f(x) - 1, 4, progress=False, **kwargs)
    labels = sb.sensitivity_profile(lambda x: f(x) == 1, 4, progress=False, **kwargs)
    assert torch.equal(scores.counts, labels.counts) and int(scores.undecided) == 0


@pytest.mark.parametrize("call", [
    lambda m: sb.sensitivity_profile(lambda x: x.sum(-1) % 2 == 1, 4, memory_mb=m),
    lambda m: sb.sensitivity_profile(lambda x: x.sum(-1) % 2 == 1, 4, n_samples=8, memory_mb=m),
    lambda m: sb.truth_table(lambda x: x.sum(-1) % 2 == 1, 4, memory_mb=m),
    lambda m: sb.profile_from_table(torch.zeros(16, dtype=torch.bool), memory_mb=m),
])
def test_an_absurd_memory_budget_is_named(call):
    with pytest.raises(ValueError, match=r"memory_mb=1e\+305 is more than any machine has.*"
                                         r"at most 1073741824 \(1 PiB\)"):
        call(1e305)
    call(2.0**30)                                                      # the largest allowed


@pytest.mark.parametrize("out, what", [(None, "returned NoneType"), ("yes", "returned str"),
                                       (b"\x01", "returned bytes"),
                                       ([None] * 16, "returned list of dtype object")])
def test_a_classifier_returning_no_tensor_is_named(out, what):
    with pytest.raises(TypeError, match=f"the classifier must return a tensor .* {what}"):
        sb.sensitivity_profile(lambda x: out, 4, progress=False)
    lists = sb.sensitivity_profile(lambda x: ((x.sum(-1) % 2) == 1).tolist(), 4, progress=False)
    assert lists.K.tolist() == [0, 0, 0, 0, 16]                       # a list of bools is read


# ---- issue 30: a NaN does not hide float 0/1 labels
@pytest.mark.parametrize("kwargs", [dict(), dict(chunk_size=1), dict(n_samples=64)])
def test_float_labels_with_a_nan_are_still_refused(kwargs):
    def labels_with_nan(x):
        y = (x.sum(-1) % 2).float()
        y[x[:, :3].sum(-1) == 0] = float("nan")            # NaN on some strings (N = 8: 32)
        return y

    with pytest.raises(ValueError, match="all 0.0 or 1.0 \\(NaN and inf aside\\)"):
        sb.sensitivity_profile(labels_with_nan, 8, progress=False, **kwargs)
    with pytest.raises(ValueError, match="NaN and inf aside"):
        sb.classify(torch.tensor([0.0, 1.0, float("nan")]))
    # scores with a NaN are read: the NaN strings counted nonfinite, never a class
    p = sb.sensitivity_profile(lambda x: 2 * labels_with_nan(x) - 1, 8, progress=False)
    assert int(p.nonfinite) == 32 and int(p.undecided) == 0
