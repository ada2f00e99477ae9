"""The fast Walsh–Hadamard transform against the naive O(4^N) sum; the closed forms."""
import itertools
from math import comb

import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.fourier import degrees


def naive_spectrum(table, N):
    """c[S] = sum_x (-1)^(f(x) + S.x), straight from the definition (4^N terms)."""
    t = np.asarray(table, dtype=np.int64)
    c = np.zeros(2**N, dtype=np.int64)
    for S in range(2**N):
        for x in range(2**N):
            c[S] += (-1) ** (int(t[x]) + bin(S & x).count("1"))
    return c


def table_of(f, N):
    return f(sb.strings(N)).to(torch.int8)


@pytest.mark.parametrize("N", [1, 2, 3, 5, 7])
def test_fast_transform_equals_naive_sum(N):
    g = torch.Generator().manual_seed(N)
    tables = torch.randint(0, 2, (4, 2**N), generator=g, dtype=torch.int8)
    fast = sb.walsh_hadamard(tables)
    for t, c in zip(tables, fast):
        assert (c.numpy() == naive_spectrum(t, N)).all()
    # batched over leading axes: the same numbers in a (2, 2, 2^N) layout
    assert torch.equal(sb.walsh_hadamard(tables.reshape(2, 2, -1)).reshape(4, -1), fast)


@pytest.mark.parametrize("N", [3, 6, 9])
def test_weights_by_degree_and_parseval(N):
    g = torch.Generator().manual_seed(10 + N)
    tables = torch.randint(0, 2, (3, 2**N), generator=g, dtype=torch.int8)
    W = sb.spectral_weights(tables)
    deg = degrees(N).numpy()
    for t, w in zip(tables, W):
        fast = sb.walsh_hadamard(t).numpy().astype(np.int64)
        c = naive_spectrum(t, N) if N <= 6 else fast
        want = np.bincount(deg, weights=c.astype(float) ** 2, minlength=N + 1) / 4.0**N
        assert np.allclose(w.numpy(), want, atol=0, rtol=1e-15)
    assert torch.allclose(W.sum(-1), torch.ones(3, dtype=torch.float64), atol=1e-15)


@pytest.mark.parametrize("N", [2, 5, 8, 11])
def test_total_influence_is_average_sensitivity(N):
    g = torch.Generator().manual_seed(N)
    tables = torch.randint(0, 2, (5, 2**N), generator=g, dtype=torch.int8)
    tables[0] = 0                                   # a constant: both sides 0
    tables[1] = table_of(sb.MAJORITY if N % 2 else sb.FIRST, N)
    prof = sb.profile_from_table(tables)
    got = sb.total_influence(sb.spectral_weights(tables))
    assert torch.allclose(got, prof.average_sensitivity, atol=1e-12)


@pytest.mark.parametrize("N", [1, 3, 4, 7, 10])
def test_closed_forms_against_the_transform(N):
    fams = [sb.PARITY, sb.FIRST, sb.Constant(1), sb.Dictator(N),
            sb.sparse_parity([1, N])]
    if N % 2:
        fams.append(sb.MAJORITY)
    if N >= 3:
        fams.append(sb.sparse_majority([1, 2, 3]))
    for f in fams:
        if N == 1 and "SPARSE" in str(f):
            continue
        W = sb.spectral_weights(table_of(f, N)).numpy()
        assert np.allclose(sb.closed_form_weights(f, N), W, atol=1e-15), (f, N)


def test_majority_closed_form_known_values():
    # W_1(MAJ_3) = 3 (1/2)^2 = 3/4 and W_3 = 1/4; W_1(MAJ_n) decreases to 2/pi
    # (O'Donnell 5.2)
    assert np.allclose(sb.closed_form_weights(sb.MAJORITY, 3), [0, 0.75, 0, 0.25])
    w1 = [sb.closed_form_weights(sb.MAJORITY, n)[1] for n in (3, 9, 51, 61)]
    assert all(a > b > 2 / np.pi for a, b in zip(w1, w1[1:]))


@pytest.mark.parametrize("N", [2, 3])
def test_random_function_weights_average_over_all_functions(N):
    # the mean over all 2^(2^N) functions, exactly
    tables = list(itertools.product([0, 1], repeat=2**N))
    tables = torch.tensor(tables, dtype=torch.int8)
    W = sb.spectral_weights(tables).mean(0).numpy()
    assert np.allclose(W, sb.random_function_weights(N), atol=1e-15)
    binom = [comb(N, k) for k in range(N + 1)]
    assert np.allclose(sb.random_function_weights(N) * 2**N, binom)


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="labels 0/1"):
        sb.spectral_weights(torch.tensor([0, 1, -1, 0], dtype=torch.int8))
    with pytest.raises(ValueError, match="2\\^N entries"):
        sb.walsh_hadamard(torch.zeros(6, dtype=torch.int8))
    with pytest.raises(ValueError, match="odd number"):
        sb.closed_form_weights(sb.MAJORITY, 4)
    with pytest.raises(ValueError, match="no closed form"):
        sb.closed_form_weights(sb.random_function(3), 3)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    g = torch.Generator().manual_seed(0)
    t = torch.randint(0, 2, (3, 2**12), generator=g, dtype=torch.int8)
    W = sb.spectral_weights(t.cuda())
    assert W.device.type == "cuda" and torch.equal(W.cpu(), sb.spectral_weights(t))
