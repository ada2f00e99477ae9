"""Issue 48, the evaluation boundary's items: LowPrecision outside the regime its rounding
bound was checked in (5), eos_mechanism's NaN and tied attention rows (9), the memory probe
and budgets (11) and clear errors (13)."""
import pathlib

import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.model import LowPrecision


def scaled_inner_weights(seed, factor=10.0):
    """The issue's case: a uniform population whose inner weights (all but the read-out w,
    omega) are ``factor`` times the default box, as after training."""
    m = sb.Recognizer.random(P=16, D=16, L=2, init="uniform", seed=seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name not in ("w", "omega"):
                p.mul_(factor)
    return m


def test_48_5_low_precision_refuses_a_model_outside_its_box():
    """On the old code seed 3 decided 131 strings with the other label than float32 (and
    seed 2, 65): its bound covers the read-out only. Now such a model is refused at every
    call, whatever it is asked for."""
    m = scaled_inner_weights(3)
    lp = LowPrecision(m)
    for run in (lambda: lp(sb.strings(6)), lambda: sb.truth_table(lp, 6, progress=False),
                lambda: sb.sensitivity_profile(lp, 40, n_samples=4, progress=False)):
        with pytest.raises(ValueError, match=r"parameters in \[-1, 1\]; this model has .theta. up to 10,"):
            run()
    inside = sb.Recognizer.random(P=16, D=16, L=2, init="uniform", seed=3)
    fast = sb.truth_table(LowPrecision(inside), 10, progress=False)
    exact = sb.truth_table(inside, 10, progress=False)
    decided = fast >= 0
    assert torch.equal(fast[decided], exact[decided]) and decided.float().mean() > 0.5
    with torch.no_grad():
        inside.layers[0].Wq.mul_(1.5)             # moved out of the box after wrapping
    with pytest.raises(ValueError, match="LowPrecision is checked only"):
        LowPrecision(inside)(sb.strings(4))


def test_48_9_eos_mechanism_counts_no_nan_or_tied_row_as_attending_to_x1():
    zero = sb.Recognizer.random(P=1, D=8, L=1, seed=0)
    with torch.no_grad():
        for p in zero.parameters():
            p.zero_()                               # eps = 0: uniform attention, NaN norms
    out = sb.eos_mechanism(zero, sb.strings(5))
    assert out["att_where"].tolist() == [[[-1]]] and out["att_share"].tolist() == [[[0.0]]]
    # against a brute force on a random population: the unique finite argmax of each row
    m = sb.Recognizer.random(P=3, D=8, L=2, H=2, seed=1)
    x = sb.strings(6)
    out = sb.eos_mechanism(m, x, chunk=np.int64(7))
    w = m.eos_attention(x)[1].double()                  # (P, B, L, H, S)
    S = w.shape[-1]
    for p in range(3):
        for lay in range(2):
            for h in range(2):
                rows = w[p, :, lay, h]
                top = rows.topk(2, -1).values
                where = torch.where(top[:, 0] > top[:, 1], rows.argmax(-1), S)
                counts = torch.bincount(where, minlength=S + 1)[:S]
                assert out["att_where"][p, lay, h] == int(counts.argmax())
                assert out["att_share"][p, lay, h] == pytest.approx(int(counts.max()) / 64)


def test_48_11_eos_mechanism_is_bounded_by_its_memory_budget():
    m = sb.Recognizer.random(P=4, D=8, L=1, seed=0)
    x = sb.strings(10)
    with pytest.raises(ValueError, match=r"memory_mb=0.01 is too small: eos_mechanism keeps"):
        sb.eos_mechanism(m, x, memory_mb=0.01)
    full = sb.eos_mechanism(m, x)
    small = sb.eos_mechanism(m, x, memory_mb=1)             # many chunks, the same answer
    for k in full:
        assert np.array_equal(full[k], small[k])


def test_48_11_the_probe_refuses_from_the_input_alone_and_never_reads_a_failure_as_free():
    f = lambda x: x.sum(-1) - 0.5                           # noqa: E731
    with pytest.raises(ValueError, match=r"alone needs 3.73 GiB"):
        sb.sensitivity_profile(f, N=10**9, n_samples=1, memory_mb=64, progress=False)

    def quadratic(x):                                       # N^2 floats a string
        return (x.unsqueeze(-1) * x.unsqueeze(-2)).sum((-1, -2)) - 0.5

    # N = 3000: 36 MB a string, past a 16 MiB budget; the probe stops at its first product
    with pytest.raises(ValueError, match="memory_mb=16 is too small: one string of length N=3000"):
        sb.sensitivity_profile(quadratic, N=3000, n_samples=1, memory_mb=16, progress=False)
    failures = []

    def fails_when_measured(x):                    # the probe's dispatch mode fails it
        if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FUNCTIONAL) is None and \
                torch.utils._python_dispatch._get_current_dispatch_mode() is not None:
            failures.append(len(x))
            raise RuntimeError("not under a dispatch mode")
        return x.sum(-1) - x.shape[-1] / 2 - 0.5

    chunks = []
    p = sb.sensitivity_profile(lambda x: (chunks.append(len(x)), fails_when_measured(x))[1],
                               8, memory_mb=1, progress=False)
    assert failures and p.counts.sum() == 256
    # the old code read the failed probe as 0 bytes (chunks of 2^16 // 9 strings, here one
    # chunk of 256); now a string costs the whole budget: one string a call
    assert max(chunks[len(failures):]) == 1


def test_48_13_clear_errors_naming_the_argument():
    m = sb.Recognizer.random(P=2, D=8, L=1, seed=0)
    x = sb.strings(4)
    for bad, err in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="chunk"):
            sb.eos_mechanism(m, x, chunk=bad)
        with pytest.raises(err, match="chunk"):
            sb.accuracy(m, sb.PARITY, 4, chunk=bad)
    for zero in (lambda: sb.eos_mechanism(m, x[:0]), lambda: sb.flip_influence(m, x[:0]),
                 lambda: sb.min_margin(m, x[:0])):
        with pytest.raises(ValueError, match=r"x must"):
            zero()
    with torch.device("meta"):
        lin = torch.nn.Linear(8, 1)
    for run in (lambda: sb.TorchClassifier(lin), lambda: sb.sensitivity_profile(lin, 8),
                lambda: sb.eos_mechanism(sb.Recognizer.random(P=1, D=8, L=1).to("meta"), x)):
        with pytest.raises(ValueError, match="'meta' device"):
            run()
    emb = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Flatten(), torch.nn.Linear(16, 1))
    for tokens in (torch.tensor([3, 4]), np.array([3, 4]), (torch.tensor(3), np.int64(4))):
        clf = sb.TorchClassifier(emb, tokens=tokens)
        assert clf.tokens.tolist() == [[3], [4]]
    with pytest.raises(ValueError, match="tokens"):
        sb.TorchClassifier(emb, tokens=torch.tensor([3.0, 4.0]))
    f = lambda x: x.sum(-1) - 3.5                           # noqa: E731
    for out in (None, "0101", [["a"] * 8] * 5):
        with pytest.raises(TypeError, match=r"sampler must return 5 strings"):
            sb.sensitivity_profile(f, 8, n_samples=5, sampler=lambda n, g: out, progress=False)
    # numpy and 0-d numbers wherever a number is
    want = sb.sensitivity_profile(m, 4, margin=0.1, progress=False)
    for N, margin in ((np.int64(4), np.float32(0.1)), (np.array(4), np.array(0.1)),
                      (torch.tensor(4), torch.tensor(0.1))):
        assert sb.sensitivity_profile(m, N, margin=margin, progress=False) == want
    for bad in (torch.tensor([4]), np.array([4, 5]), torch.tensor(True), "4"):
        with pytest.raises((TypeError, ValueError), match="N must"):
            sb.sensitivity_profile(m, bad, progress=False)
