"""Issue 15: no silent garbage at the boundary. Each case is a reproduction from the issue that
used to return a wrong answer without a word (or a confusing error)."""
import math

import numpy as np
import pytest
import torch

import sensbook as sb
from tests.test_boolean import brute_profile


# ---- wrong answers without an error ----------------------------------------------------------
def test_float_zero_one_labels_are_refused_with_how_to_pass_labels():
    with pytest.raises(ValueError, match="bool tensor"):
        sb.sensitivity_profile(lambda x: x.sum(-1) % 2, 6, progress=False)
    with pytest.raises(ValueError, match="bool tensor"):
        sb.sensitivity_profile(lambda x: x.sum(-1) % 2, 30, n_samples=20, progress=False)
    # written as the error says, it is PARITY: every string has s = N
    p = sb.sensitivity_profile(lambda x: (x.sum(-1) % 2) == 1, 6, progress=False)
    assert p.K.tolist() == sb.PARITY.profile(6).tolist() and bool(p.complete)


def test_a_mostly_undecided_profile_says_so():
    with pytest.warns(UserWarning, match="most of the 64 strings are undecided"):
        p = sb.sensitivity_profile(lambda x: 0.0 * x.sum(-1), 6, progress=False)
    assert int(p.undecided) == 64 and int(p.K.sum()) == 0
    with pytest.warns(UserWarning, match="undecided"):             # a margin wider than T
        sb.sensitivity_profile(lambda x: x.sum(-1) - 2.5, 5, margin=10.0, n_samples=30,
                               progress=False)


@pytest.mark.parametrize("table, match", [
    (torch.tensor([[0.2, -0.7, 0.9, 0.4]]), "labels"),            # scores, once cut to int8
    (torch.tensor([0, 1, 5, 1], dtype=torch.int8), "found 5"),
    (torch.tensor([0, 1, 7, 0]), "found 7"),
    (torch.tensor([0, -3, 1, 0]), "found -3"),
])
def test_profile_from_table_refuses_what_is_not_a_label_table(table, match):
    with pytest.raises(ValueError, match=match):
        sb.profile_from_table(table)


def test_profile_from_table_reads_labels_of_any_integer_or_bool_dtype():
    f = sb.random_function(6, seed=3)
    labels = f(sb.strings(6))
    want = f.profile(6).tolist()
    for t in (labels, labels.to(torch.int8), labels.to(torch.int64), labels.to(torch.int16)):
        assert sb.profile_from_table(t).K.tolist() == want


@pytest.mark.parametrize("bad, match", [
    (lambda: sb.strings(3, start=-2), "start must be >= 0"),
    (lambda: sb.strings(3, stop=9), "stop=9 is too large"),
    (lambda: sb.strings(3, start=5, stop=4), "start=5 is too large"),
    (lambda: sb.strings(3, stop=2.0), "stop must be an integer"),
    (lambda: sb.strings_to_index(torch.zeros(2, 64)), "62"),
    (lambda: sb.Recognizer.random(seed=1.9), "seed must be an integer"),
    (lambda: sb.random_function(4, seed=1.9), "seed must be an integer"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, n_samples=5, seed=1.9), "seed must be an integer"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, seed=-1), "seed must be >= 0"),
    (lambda: sb.sparse_parity([1.7]), "position in S must be an integer"),
    (lambda: sb.sparse_majority([2, True]), "position in S must be an integer"),
    (lambda: sb.sparse_parity([]), "non-empty"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, chunk_size=2.7), "chunk_size must be an integer"),
    (lambda: sb.truth_table(sb.PARITY, 4, chunk_size=True), "chunk_size must be an integer"),
    (lambda: sb.Recognizer(eps=True), "eps must be a finite number"),
    (lambda: sb.Recognizer(D=4.0), "D must be an integer"),
    (lambda: sb.Constant(1.0), "value must be 0 or 1"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, n_samples=1e12), "n_samples must be an integer"),
])
def test_silent_coercions_are_errors_naming_the_argument(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        bad()


# ---- numbers that are numbers ------------------------------------------------------------------
def test_numpy_scalars_are_numbers():
    ref = sb.Recognizer.random(P=2, D=4, L=1, eps=0.1, seed=3)
    m = sb.Recognizer.random(P=np.int64(2), D=np.int32(4), L=np.int64(1), eps=np.float32(0.1),
                             seed=np.int64(3))
    assert torch.equal(m.flat(), ref.flat()) and m.eps == pytest.approx(0.1) and m.P == 2
    a = sb.sensitivity_profile(ref, 6, margin=0.25, progress=False)
    b = sb.sensitivity_profile(ref, np.int64(6), margin=np.float32(0.25), memory_mb=np.float32(64),
                               chunk_size=np.int64(7), progress=False)
    assert torch.equal(a.counts, b.counts)
    c = sb.sensitivity_profile(ref, 6, n_samples=40, seed=2, progress=False)
    d = sb.sensitivity_profile(ref, np.int16(6), n_samples=np.int64(40), seed=np.uint8(2),
                               progress=False)
    assert torch.equal(c.counts, d.counts)
    assert sb.sparse_parity([np.int64(2)]).profile(np.int64(3)).tolist() == [0, 8, 0, 0]
    assert sb.strings(np.int64(3), np.int64(2), np.int64(4)).tolist() == [[0, 1, 0], [1, 1, 0]]


@pytest.mark.parametrize("bad", [np.bool_(True), True, "0.1", None, 1j, [0.1], np.nan, math.inf])
def test_anything_else_is_not_a_margin(bad):
    with pytest.raises((ValueError, TypeError), match="margin"):
        sb.sensitivity_profile(sb.PARITY, 3, margin=bad, progress=False)


# ---- confusing errors made clear ---------------------------------------------------------------
@pytest.mark.parametrize("bad, match", [
    (lambda: sb.sensitivity_profile(lambda x: x.sum(-1) + 1j, 4, progress=False), "complex"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, memory_mb=math.inf), "memory_mb must be a finite"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, memory_mb=0), "memory_mb must be a finite number > 0"),
    (lambda: sb.Recognizer.random(seed=None), "seed must be an integer"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, n_samples=3, seed=None), "seed must be an integer"),
    (lambda: sb.Recognizer(dtype=torch.int64), "dtype must be a floating torch dtype"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, dtype=torch.complex64), "dtype must be a floating"),
    (lambda: sb.Recognizer.from_parameters({}), "at least 'tok'"),
    (lambda: sb.Recognizer.from_parameters([1, 2]), "params must be a dict"),
    (lambda: sb.Recognizer.from_parameters({"tok": np.zeros(4)}), "'tok' must have shape"),
    (lambda: sb.classify([0.3, -0.2]), "torch.Tensor"),
    (lambda: sb.sensitivity_profile(sb.PARITY, 4, device="tpu:7"), "device='tpu:7' is not a torch device"),
])
def test_confusing_errors_are_clear(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        bad()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_asked_for_without_cuda_names_who_asked():
    with pytest.raises(ValueError, match="device='cuda' asks for CUDA"):
        sb.Recognizer(device="cuda")
    with pytest.raises(ValueError, match="device='cuda:1' asks for CUDA"):
        sb.sensitivity_profile(sb.PARITY, 4, device="cuda:1")


# ---- margin 0 in float32 -----------------------------------------------------------------------
def test_auto_margin_reports_float32_outputs_within_rounding_of_zero():
    """T = x . w - b with b = (a subset sum of w) - 1e-12: exact T is +-1e-12 on some string,
    which float32 rounds to either sign. At the default margin 0 the float32 table disagrees
    with float64 with nothing undecided (a silently different K_0); with margin="auto" every
    float32 string it decides agrees with float64, and the rest are reported undecided."""
    N, flips = 8, 0
    for seed in range(40):
        w = torch.rand(N, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
        b = w[:5].sum() - 1e-12
        clf = lambda x: x @ w.to(x.dtype) - b.to(x.dtype)
        t64 = sb.truth_table(clf, N, dtype=torch.float64, progress=False)
        t32 = sb.truth_table(clf, N, dtype=torch.float32, progress=False)
        if (t32 != t64).any() and not (t32 < 0).any():
            flips += 1                                           # the silent case
        auto = sb.truth_table(clf, N, dtype=torch.float32, margin="auto", progress=False)
        decided = auto >= 0
        assert torch.equal(auto[decided], t64[decided])
        assert int((~decided).sum()) >= int((t32 != t64).sum())
        assert int((~decided).sum()) <= 4                        # only strings near T = 0
    assert flips >= 1
    assert sb.rounding_margin(torch.float32) == 1024 * torch.finfo(torch.float32).eps
    assert sb.rounding_margin(torch.float64) < 1e-12


# ---- trace: documentation and behaviour agree --------------------------------------------------
def zero_variance_model(L):
    """Tokens 0 and 1 embed to 0 and no positional map: every non-eos position is a constant
    vector (zero variance at eps = 0); eos is not."""
    D = 4
    params = {"tok": [[0.0] * D, [0.0] * D, [1.0, -1.0, 2.0, 0.0]], "w": [1.0, 0, 0, 0],
              "omega": 0.1}
    if L == 2:
        params["layers.1.b2"] = [0.0] * D
    return sb.Recognizer.from_parameters(params, eps=0.0)


def test_trace_nan_exactly_when_the_zero_variance_reaches_eos():
    x = sb.strings(3)
    T1, tr1 = zero_variance_model(1).trace(x)
    assert bool(torch.isinf(tr1.beta).all())                  # a zero-variance layer norm ...
    assert bool(torch.isfinite(T1).all())                     # ... only at non-eos, last layer
    assert bool((sb.classify(T1) >= 0).all())                 # T is decided
    assert torch.equal(T1, zero_variance_model(1)(x).detach())
    T2, tr2 = zero_variance_model(2).trace(x)                 # below the last layer: spreads
    assert bool(torch.isinf(tr2.beta).all()) and bool(torch.isnan(T2).all())
    doc = sb.Recognizer.trace.__doc__
    assert "T is finite and decided" in doc and "T is NaN when the NaN reaches eos" in doc


def test_brute_force_agrees_after_the_boundary_changes():
    clf = lambda x: (x[..., 0] + x[..., 2] - x[..., 1]) > 0.5      # bool labels
    assert (sb.sensitivity_profile(clf, 5, progress=False).K.numpy() == brute_profile(clf, 5)).all()
