"""sensbook.interventions against hand-built models whose mechanism is known.

The hard-attention FIRST decides by its layer-2 attention and not by any layer norm; the
uniform-attention FIRST does not need attention to be focused; the mirrored constructions
(shared/constructions.md) make every layer norm a positive per-position rescaling, so freezing
one moves no label; the MAJORITY construction given a read-out offset decides by its last layer
norm. Each assert below fails on the model built the other way."""
import pytest
import torch

import sensbook as sb
from sensbook import interventions as iv


def acc(model, f, x, edits=None):
    return float(iv.effect(iv.scores(model, x, edits), f, x)["accuracy"][0])


def majority_with_offset(N, omega=0.5):
    """MAJORITY's construction with T = sign(2k - N) + omega: the same labels for omega < 1,
    but a read-out that is not homogeneous in the eos vector."""
    m = sb.majority_transformer(N)
    with torch.no_grad():
        m.omega.fill_(omega)
    return m


@pytest.mark.parametrize("N", [5, 9])
def test_hard_first_depends_on_its_attention_and_the_uniform_first_does_not(N):
    x = sb.strings(N)
    hard, soft = sb.first_hard_transformer(N), sb.first_transformer(N)
    assert acc(hard, sb.FIRST, x) == acc(soft, sb.FIRST, x) == 1.0
    assert acc(hard, sb.FIRST, x, iv.fix_attention(hard, x, 1)) < 0.75      # labels move
    assert acc(soft, sb.FIRST, x, iv.fix_attention(soft, x, 1)) == 1.0      # already uniform
    # the mean pattern of a hard head is the same hard head: nothing moves
    assert acc(hard, sb.FIRST, x, iv.fix_attention(hard, x, 1, pattern="mean")) == 1.0


@pytest.mark.parametrize("N", [9, 11])   # |2k - N| = 1 on fewer than half the strings
def test_hard_first_does_not_depend_on_its_layer_norms_and_an_offset_majority_does(N):
    x = sb.strings(N)
    hard = sb.first_hard_transformer(N)
    assert acc(hard, sb.FIRST, x, iv.freeze_norms(hard, x)) == 1.0
    maj = majority_with_offset(N)
    assert acc(maj, sb.MAJORITY, x) == 1.0
    # frozen at its median z, the eos vector keeps the size of |2k - N|: small counts flip
    assert acc(maj, sb.MAJORITY, x, iv.freeze_norms(maj, x, 1, positions=[N])) < 0.9


@pytest.mark.parametrize("N", [5, 9, 11])
def test_parity_construction_decides_by_attention_and_its_layer_norms_only_rescale(N):
    x = sb.strings(N)
    m = sb.parity_transformer(N)
    # the mirror trick: every layer norm multiplies a position's vector by a positive number
    frozen = iv.effect(iv.scores(m, x, iv.freeze_norms(m, x)), sb.PARITY, x)
    assert frozen["accuracy"][0] == 1.0 and frozen["margin"][0] > 0.9
    assert acc(m, sb.PARITY, x, iv.fix_attention(m, x, 1)) < 0.5           # the two heads
    assert acc(m, sb.PARITY, x, iv.fix_attention(m, x, 0)) == 1.0          # already uniform


def test_a_flip_of_the_first_bit_travels_through_position_one_then_eos():
    N = 7
    x, m = sb.strings(N), sb.first_hard_transformer(N)
    clean = iv.scores(m, x)
    flipped = x.clone()
    flipped[:, 0] = 1 - flipped[:, 0]
    want = iv.scores(m, flipped)
    carried = lambda T: float(((T > 0) == (want > 0)).double().mean())
    assert carried(iv.patch(m, x, 0, 1, [0])) == 1.0            # layer 1's output at x_1
    assert carried(iv.patch(m, x, 0, 2, [N])) == 1.0            # layer 2's attention at eos
    assert carried(iv.patch(m, x, 0, 1, range(1, N + 1))) == 0.0   # everywhere else: nothing
    assert carried(iv.patch(m, x, 3, 1, range(N + 1))) == 0.0      # another bit: nothing
    assert torch.equal(iv.patch(m, x, 0, 0, range(N + 1)), want)   # the whole first stream
    assert torch.equal(iv.patch(m, x, 0, 2, []), clean)


@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_no_op_interventions_leave_T_bit_identical(eps):
    N = 9
    x = sb.strings(N)
    m = sb.Recognizer.random(P=4, D=8, L=2, H=2, eps=eps, seed=3)
    T = m(x)
    assert torch.equal(iv.scores(m, x), T)
    assert torch.equal(iv.scores(m, x, iv.freeze_norms(m, x, positions=[])), T)
    assert torch.equal(iv.patch(m, x, 2, 1, []), T)
    # a frozen normaliser that moves nothing is not a no-op: random models use their layer norms
    moved = iv.effect(iv.scores(m, x, iv.freeze_norms(m, x, [0, 1])), lambda s: (T > 0)[0], x)
    assert moved["accuracy"].min() < 0.99


@pytest.mark.parametrize("eps", [0.0, 1e-5])
def test_the_last_layer_norm_before_the_read_out_rescales_T_and_moves_no_label(eps):
    N, L = 8, 2
    x = sb.strings(N)
    m = sb.Recognizer.random(P=8, D=8, L=L, H=1, eps=eps, init="gaussian", seed=5)
    T = m(x) - m.omega.detach()[:, None]                       # the read-out's linear part
    F = iv.scores(m, x, iv.freeze_norms(m, x, 2 * L - 1, positions=[N])) - m.omega.detach()[:, None]
    assert ((F / T) > 0).all()                                  # a positive factor per string
    ratio = (F / T).double()
    assert (ratio.amax(1) / ratio.amin(1) > 1.01).all()         # it does rescale
    # any other layer norm, frozen, moves labels of these random models
    other = iv.scores(m, x, iv.freeze_norms(m, x, 0)) - m.omega.detach()[:, None]
    assert ((other > 0) != (T > 0)).any()


def test_variance_summary_and_errors():
    N = 6
    x = sb.strings(N)
    m = sb.Recognizer.random(P=2, D=8, L=2, seed=1)
    v = m.trace(x)[1].variances
    s = iv.variance_summary(m, x, 0.5)
    assert s["median"].shape == (2, 4, N + 1)
    assert (s["below"] == (v < 0.5).double().mean(1).numpy()).all()
    assert (s["minimum"] <= s["median"]).all()
    with pytest.raises(ValueError, match="norms"):
        iv.freeze_norms(m, x, 4)
    with pytest.raises(ValueError, match="pattern"):
        iv.fix_attention(m, x, 0, pattern="hard")
    with pytest.raises(ValueError, match="layer"):
        iv.fix_attention(m, x, 2)
    with pytest.raises(ValueError, match="positions"):
        iv.patch(m, x, 0, 1, [N + 1])
    with pytest.raises(ValueError, match="model"):
        iv.scores(object(), x)
