"""Closed-form sensitivity profiles against brute force, and the string/index conventions."""
import itertools

import numpy as np
import pytest
import torch

import sensbook as sb


def brute_profile(f, N):
    """Independent: enumerate strings with itertools, flip each bit, call f one string at a time."""
    K = np.zeros(N + 1, dtype=np.int64)
    for bits in itertools.product([0, 1], repeat=N):
        x = torch.tensor(bits)
        y = bool(f(x))
        s = 0
        for i in range(N):
            z = x.clone(); z[i] = 1 - z[i]
            s += bool(f(z)) != y
        K[s] += 1
    return K


def families(N):
    fs = [sb.PARITY, sb.MAJORITY, sb.FIRST, sb.Dictator(N), sb.Constant(0), sb.Constant(1)]
    for m in range(2, min(N, 4) + 1):
        S = list(range(N - m + 1, N + 1))              # the last m positions
        fs += [sb.sparse_parity(S), sb.sparse_majority(S)]
    return fs


@pytest.mark.parametrize("N", range(1, 11))
def test_closed_forms_match_brute_force(N):
    for f in families(N):
        assert (f.profile(N) == brute_profile(f, N)).all(), (f, N)


@pytest.mark.parametrize("N", range(11, 15))
def test_closed_forms_match_vectorised_brute_force(N):
    # Larger N: vectorised flips of all strings (still independent of the closed forms).
    x = sb.strings(N)
    for f in families(N):
        y = f(x)
        s = sum((f(torch.where(torch.arange(N) == i, 1 - x, x)) != y).long() for i in range(N))
        K = np.bincount(s.numpy(), minlength=N + 1)
        assert (f.profile(N) == K).all(), (f, N)


def test_majority_k0_formula_odd_n():
    from math import comb
    for N in range(1, 30, 2):
        assert sb.MAJORITY.K0(N) == 2**N - 2 * comb(N, (N - 1) // 2)


def test_majority_even_n_convention():
    # Ties are rejected: weight N/2 -> 0, weight N/2 + 1 -> 1.
    x = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0]])
    assert sb.MAJORITY(x).tolist() == [False, True]


def test_average_sensitivity_ranks_first_below_majority_but_k0_separates_them():
    # as(FIRST) = 1 <= as(MAJORITY) ~ sqrt(2N/pi): by average sensitivity FIRST looks easier,
    # yet FIRST has no zero-sensitivity string and MAJORITY has most strings at s = 0.
    for N in range(3, 16, 2):
        assert sb.FIRST.average_sensitivity(N) == 1.0 < sb.MAJORITY.average_sensitivity(N)
        assert sb.FIRST.K0(N) == 0 and sb.MAJORITY.K0(N) >= 2 ** (N - 2)


def test_truth_table_profile_and_random_function():
    f = sb.random_function(8, seed=3)
    assert (f.profile(8) == brute_profile(f, 8)).all()
    assert sb.random_function(8, seed=3).table.equal(f.table)
    assert not sb.random_function(8, seed=4).table.equal(f.table)
    assert sb.random_function_expected_profile(5).tolist() == [1, 5, 10, 10, 5, 1]


def test_index_conventions():
    x = sb.strings(5)
    assert x.shape == (32, 5)
    assert sb.strings_to_index(x).tolist() == list(range(32))
    assert x[0b00101].tolist() == [1, 0, 1, 0, 0]       # bit n-1 of the index is position n


@pytest.mark.parametrize("bad, match", [
    (lambda: sb.PARITY(torch.tensor([[0, 2, 1]])), "binary"),
    (lambda: sb.PARITY(torch.tensor([[0.5, 1.0]])), "binary"),
    (lambda: sb.PARITY(torch.tensor(1)), "shape"),
    (lambda: sb.MAJORITY.profile(0), "N must be >= 1"),
    (lambda: sb.PARITY.profile(2.5), "integer"),
    (lambda: sb.sparse_parity([1, 7])(torch.zeros(3, 5)), "N >= 7"),
    (lambda: sb.Dictator(0), "position"),
    (lambda: sb.random_function(30), "N=30"),
    (lambda: sb.TruthTable(torch.zeros(6)), "2\\^N"),
    (lambda: sb.random_function(4)(torch.zeros(2, 5)), "N=4"),
])
def test_bad_input_errors_name_the_argument(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        bad()


@pytest.mark.parametrize("N", [2, 3, 4])
def test_random_function_k0_law_exactly_over_all_functions(N):
    # Enumerate all 2^(2^N) functions: E[K_0] = 1 exactly, and P(K_0 >= 1) is within the
    # Chen–Stein bound of the Poisson(1) value 1 - 1/e.
    tables = sb.index_to_strings(torch.arange(2 ** 2**N), 2**N, dtype=torch.int8)
    K0 = sb.profile_from_table(tables).K0.double()
    assert K0.mean().item() == pytest.approx(1.0, abs=1e-12)
    p = (K0 >= 1).double().mean().item()
    assert abs(p - (1 - np.exp(-1))) <= sb.poisson_tv_bound(N)
    assert (sb.random_function_expected_profile(N) ==
            sb.profile_from_table(tables).counts.double().mean(0).numpy()).all()
