"""The Chiang-Cholak-style constructions against their specification (PARITY, FIRST, MAJORITY).

Exhaustive on all 2^N strings for N <= 16, and on 10^4 uniform strings (plus the extreme
strings) at N = 100 in float64; at N = 1000 on 10^3 strings by default, on 10^4 with
SENSBOOK_FULL=1 (several CPU-minutes per construction).
"""
import os

import numpy as np
import pytest
import torch

import sensbook as sb
from tests.test_model import one, reference

BUILD = {"PARITY": (sb.parity_transformer, sb.PARITY), "FIRST": (sb.first_transformer, sb.FIRST),
         "MAJORITY": (sb.majority_transformer, sb.MAJORITY)}
#: every construction exact at eps = 0 (the hard-attention FIRST too; its eps > 0 is below)
EXACT = {**BUILD, "FIRST_HARD": (sb.first_hard_transformer, sb.FIRST)}
# T = +-1 up to rounding: the final layer norm outputs sqrt(D/2) exactly up to a few ulps.
TOL = 1e-12


def lengths(name, Ns):
    return [N for N in Ns if name != "MAJORITY" or N % 2]


@pytest.mark.parametrize("name", EXACT)
def test_exact_on_every_string_up_to_16(name):
    mk, f = EXACT[name]
    model = mk()
    Ns = list(range(1, 13)) + ([16] if name != "MAJORITY" else [15])
    for N in lengths(name, Ns):
        x = sb.strings(N, dtype=torch.float64)
        T = torch.cat([model(x[a:a + 8192])[0] for a in range(0, len(x), 8192)])
        assert torch.equal(T > 0, f(x)), (name, N)
        assert ((T.abs() - 1).abs() < TOL).all(), (name, N, (T.abs() - 1).abs().max())
        # the profiler agrees: the construction's profile is the function's closed form
        if N <= 10:
            K = sb.sensitivity_profile(model, N, margin=1 - TOL, progress=False).K[0].numpy()
            assert (K == f.profile(N)).all()


def sample(N, n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 2, (n, N), generator=g).double()
    extremes = torch.stack([torch.zeros(N), torch.ones(N), torch.eye(N)[0], 1 - torch.eye(N)[0],
                            torch.arange(N) % 2, (torch.arange(N) + 1) % 2]).double()
    return torch.cat([extremes, x])


@pytest.mark.parametrize("name", EXACT)
@pytest.mark.parametrize("N", [100, 1000])
def test_exact_on_random_strings_at_large_N(name, N):
    mk, f = EXACT[name]
    N = N + 1 if name == "MAJORITY" else N
    n = 10_000 if (N < 500 or os.environ.get("SENSBOOK_FULL", "0") == "1") else 1000
    x = sample(N, n, seed=N)
    model = mk()
    T = torch.cat([model(x[a:a + 500])[0] for a in range(0, len(x), 500)])
    assert torch.equal(T > 0, f(x))
    assert ((T.abs() - 1).abs() < TOL).all()           # achieved margin: |T| = 1 - O(1e-15)


@pytest.mark.parametrize("name", EXACT)
def test_matches_the_independent_reference_implementation(name):
    mk, f = EXACT[name]
    model = mk()
    p = one(model, 0)
    N = 7
    for b in range(0, 2**N, 9):
        x = sb.index_to_strings(torch.tensor(b), N).long().tolist()
        Tr, var = reference(p, x, model.H, 0.0)
        assert abs(Tr - model(torch.tensor([x]))[0, 0].item()) < 1e-9
        assert (Tr > 0) == bool(f(torch.tensor(x)))


@pytest.mark.parametrize("name", EXACT)
def test_mirror_trick_every_layer_norm_input_has_mean_zero(name):
    model = EXACT[name][0]()
    x = sample(9, 50, 1)
    _, tr = model.trace(x, inputs=True)
    assert tr.inputs.mean(-1).abs().max() < 1e-14
    assert torch.isfinite(tr.beta).all()           # no zero-variance LN input anywhere


@pytest.mark.parametrize("name", ["PARITY", "FIRST"])
def test_float32_is_enough_up_to_N_100(name):
    mk, f = BUILD[name]
    x = sample(100, 500, 3).float()
    T = mk(dtype=torch.float32)(x)[0]
    assert torch.equal(T > 0, f(x)) and ((T.abs() - 1).abs() < 1e-5).all()


@pytest.mark.parametrize("name,power", [("FIRST", 2), ("PARITY", 4)])
def test_last_layer_norm_variance_at_eos_shrinks_polynomially(name, power):
    """The eos input of the last LN is a (e_o - e_o') with |a| ~ 1/N (FIRST) or ~1/N^2 (PARITY):
    its variance 2 a^2 / D falls like N^-2 or N^-4; N^power * var stays within a factor 2."""
    model = BUILD[name][0]()
    v = []
    for N in (25, 50, 100, 200):
        _, tr = model.trace(sample(N, 40, N))
        v.append(tr.variances[0, :, -1, -1].mean().item() * N**power)
    assert max(v) / min(v) < 2, v


@pytest.mark.parametrize("name", BUILD)
def test_positive_eps_keeps_the_sign_and_shrinks_the_margin(name):
    """LN_eps of a mean-zero vector is still a positive multiple of it: signs survive any eps,
    but the eos input of the last LN is a (e_o - e_o') and the readout gives
    |T| = sqrt(var / (var + eps)) exactly, which falls as |a| falls with N."""
    mk, f = BUILD[name]
    m1 = mk(eps=1e-4)
    prev = np.inf
    for N in (21, 41, 81, 161):
        x = sample(N, 200, N)
        T1, tr1 = m1.trace(x)
        assert torch.equal(T1[0] > 0, f(x))
        v1 = tr1.variances[0, :, -1, -1]
        assert torch.allclose(T1[0].abs(), torch.sqrt(v1 / (v1 + 1e-4)), rtol=1e-9)
        mean = T1[0].abs().mean().item()
        assert mean < prev
        prev = mean


def test_bad_arguments():
    with pytest.raises(ValueError):
        sb.parity_transformer(eps=-1.0)
    with pytest.raises(ValueError):
        sb.construction_parameters("NOPE")
    with pytest.raises(ValueError):
        sb.first_transformer(0)




# ---- the hard-attention FIRST (chapter 3's lower bound on C(Theta, eps)) -------------------
def test_hard_first_lives_in_the_box_and_in_the_worst_case_architecture():
    m = sb.first_hard_transformer()
    assert (m.D, m.L, m.H, m.F) == (12, 2, 1, 8)
    assert max(p.abs().max().item() for p in m.parameters()) <= 1.0


@pytest.mark.parametrize("eps", [0.0, 0.01, 0.1])
def test_hard_first_has_a_margin_and_a_flip_that_do_not_shrink_with_N(eps):
    """Hard attention: min |T| and the flip of x_1 are the same at every N (to 1e-9), the
    other bits move T by less than 1e-12: the opposite of the uniform FIRST's 1/N."""
    m = sb.first_hard_transformer(eps=eps)
    margins, flips = [], []
    for N in (8, 64, 512, 2048):
        x = sample(N, 64 if N > 500 else 300, N)
        T = m(x)[0]
        assert torch.equal(T > 0, sb.FIRST(x)), (eps, N)
        h = sb.hinge.flip_hinge(m, x[:8], [0, 1, N // 2, N - 1], blowups=False)["dT"][0]
        assert h[:, 1:].max() < 1e-12, (eps, N, h)
        margins.append(T.abs().min().item()); flips.append(h[:, 0].min().item())
    assert np.ptp(margins) < 1e-9 and np.ptp(flips) < 1e-9, (margins, flips)
    assert abs(flips[0] - 2 * margins[0]) < 1e-9          # T = +-margin: the flip is 2 margins
    assert margins[0] > 0.5, margins


def test_hard_first_score_gap_and_attention_weight():
    """The score gap is d_head (2 sqrt6 + 1) 2 sqrt3 / sqrt(d_head) at eps = 0 (the closed form
    of the docstring), smaller but still > 50 at eps = 0.1; the eos weight on position 1 is
    1 - O(N e^-gap) in layer 2 and uniform in layer 1 (zero queries)."""
    dh = 12
    want = dh * (2 * 6**0.5 + 1) * 2 * 3**0.5 / dh**0.5
    assert abs(sb.score_gap(sb.first_hard_transformer(), 100).item() - want) < 1e-9
    assert sb.score_gap(sb.first_hard_transformer(eps=0.1), 100).item() > 50
    x = sample(300, 10, 1)
    _, w = sb.first_hard_transformer().eos_attention(x)                # (1, B, L, H, S)
    assert (1 - w[0, :, 1, 0, 0]).max() < 1e-20
    assert torch.allclose(w[0, :, 0, 0], torch.full_like(w[0, :, 0, 0], 1 / 301))


def test_hard_first_needs_the_marked_position():
    """Without 1[n = 1] every layer-2 score is equal: the weight on position 1 is 1/(N+1) and
    the model no longer computes FIRST (it fails on some string at N = 12)."""
    p, H = sb.construction_parameters("FIRST_HARD")
    m = sb.Recognizer.from_parameters(p, H=H, mark_first=False)
    _, w = m.eos_attention(sample(12, 4, 0))
    assert torch.allclose(w[0, :, 1, 0, 0], torch.full((10,), 1 / 13, dtype=w.dtype))
    x = sb.strings(12, dtype=torch.float64)
    assert not torch.equal(m(x)[0] > 0, sb.FIRST(x))


def test_mark_first_flag_is_checked_and_kept():
    with pytest.raises(ValueError, match="mark_first"):
        sb.Recognizer(1, 4, 1, mark_first=1)
    m = sb.Recognizer.random(3, 8, 1, mark_first=False)
    assert not m.like().mark_first and not m.select([0]).mark_first
    assert not sb.perturb(m.select([0]), 0.1, 2).mark_first
    phi = sb.positional_features(5, mark_first=False)
    assert (phi[:, 2] == 0).all() and torch.equal(phi[:, :2], sb.positional_features(5)[:, :2])


# ---- the danger-zone threshold (chapter 3's start at eps = 0) -----------------------------
@pytest.mark.parametrize("B", [0.03, 0.5, 1.0])
@pytest.mark.parametrize("N", [5, 40])
def test_count_threshold_reaches_the_box_ceiling_through_a_danger_zone(B, N):
    """In the box, flips of the bits that cross the count threshold move T by exactly 2 B D
    (the ceiling), the others by 0; the first layer norm's input at eos has variance
    (B^3 / (2 (N + 1)))^2 (v has variance 1); at eps = 0.1 in a small box the same theta
    barely flips."""
    D = 12
    x = sample(N, 3, N)
    for row in x:
        k = int(row.sum())
        m = sb.count_threshold_transformer(k, N, B=B)
        assert (m.D, m.L, m.H, m.F) == (12, 2, 1, 8) and m.flat().abs().max() <= B
        dT = sb.flip_hinge(m, row[None], blowups=False)["dT"][0, 0]
        cross = row == 0 if k < N else row == 1
        assert torch.allclose(dT[cross], torch.full_like(dT[cross], 2 * B * D), rtol=1e-12)
        assert dT[~cross].abs().max() < 1e-12 if (~cross).any() else True
        _, tr = m.trace(row[None])
        want = (B**3 / (2 * (N + 1))) ** 2
        assert abs(tr.variances[0, 0, 0, -1].item() / want - 1) < 1e-9
        if B < 0.1:           # a small box: with eps > 0 the layer norms cannot restore it
            dT1 = sb.flip_hinge(sb.count_threshold_transformer(k, N, B=B, eps=0.1), row[None],
                                blowups=False)["dT"]
            assert dT1.max() < 0.01 * 2 * B * D


def test_no_theta_of_the_box_passes_the_ceiling():
    """The ceiling 2 B D, checked against random points of a small box."""
    B, N = 0.2, 9
    m = sb.Recognizer.random(64, 12, 2, 1, 8, init="uniform", scale=B, seed=3,
                             dtype=torch.float64)
    dT = sb.flip_hinge(m, sample(N, 20, 0), blowups=False)["dT"]
    assert dT.max() <= 2 * B * 12


def test_count_threshold_rejects_bad_arguments():
    for kw, match in [(dict(k=-1, N=4), "k must"), (dict(k=5, N=4), "k must"),
                      (dict(k=1, N=4, B=0.0), "B must"), (dict(k=1, N=4, B=2.0), "B must"),
                      (dict(k=1, N=4, eps=-1.0), "eps must")]:
        with pytest.raises(ValueError, match=match):
            sb.count_threshold_transformer(**kw)
