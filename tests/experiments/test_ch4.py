"""Chapter 4's experiments (sensbook/experiments/ch4.py)."""
import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.experiments import ch4
from tests.test_geometry import small


def test_small_ball_blocks_merge_exactly_into_the_pooled_sample():
    cfgs = [dict(D=3, n=3000, keep=50, seed=s) for s in (5, 10**6 + 5)]
    merged = ch4.merge_small_ball([ch4.small_ball_one(c) for c in cfgs])
    pooled = np.sort(
        np.concatenate(
            [
                sb.layer_norm_variances(3, 3000, seed=c["seed"], progress=False).numpy()
                for c in cfgs
            ]
        )
    )
    assert merged["n"] == 6000 and np.array_equal(merged["smallest"], pooled[:50])
    p, se = sb.small_ball_cdf(pooled, merged["t"])
    assert np.allclose(merged["p"], p) and np.allclose(merged["se"], se)


def test_chunked_max_blowup_equals_the_unchunked_maximum():
    m = small(P=3, L=1, eps=0.0)
    xs = sb.random_strings(6, 20, seed=8)
    want = sb.blowup(m, xs).amax(1)
    assert torch.equal(ch4._max_blowup(m, xs, chunk_bytes=1), want)


def test_danger_zone_runner_takes_the_max_over_x_and_each_neighbour():
    c = dict(N=6, n_ball=5, n_nb=3, **ch4.ZONE)
    r = ch4.danger_zone_one(c)
    center = sb.danger_center(6, D=c["D"], L=c["L"], seed=0)
    ball = sb.perturb(center, c["r"], 5, kind="uniform", seed=1)
    x = sb.random_strings(6, 1, seed=6)
    assert np.allclose(r["beta"], sb.blowup(ball, x)[:, 0].numpy())
    by_hand = []
    for p in range(3):
        one = ball.select(p)
        betas = [sb.blowup(one, x).item()]
        for i in range(6):
            y = x.clone()
            y[0, i] = 1 - y[0, i]
            betas.append(sb.blowup(one, y).item())
        by_hand.append(max(betas))
    assert np.allclose(r["beta_nb"], by_hand)
    assert ch4.danger_zone_one(dict(c, n_nb=0))["beta_nb"] == []


def test_all_strings_runner_is_the_max_over_the_enumerated_strings():
    c = dict(N=4, n_pts=3, **ch4.ZONE)
    r = ch4.all_strings_one(c)
    ball = sb.perturb(
        sb.danger_center(4, D=c["D"], L=c["L"], seed=0),
        c["r"],
        3,
        kind="uniform",
        seed=1,
    )
    allx = sb.strings(4)
    assert np.allclose(r["beta_all"], sb.blowup(ball, allx).amax(1).numpy())
    assert (np.array(r["beta_all"]) >= np.array(r["beta"])).all()


def test_eps_comparison_blocks_merge_into_the_whole_population():
    """ch4.eps_cmp (blocks of models) against the chapter's former loop over one population."""
    cfgs = [dict(P=7, N=5, D=8, L=2, H=2, init="uniform", seed=3, eps=ch4.EPS_CMP,
                 start=a, stop=min(7, a + 3)) for a in (0, 3, 6)]
    rows = ch4.eps_cmp_rows([ch4.eps_cmp_one(c) for c in cfgs])
    model = sb.Recognizer.random(7, 8, 2, 2, init="uniform", seed=3)
    T0 = sb.output_table(model, 5)
    for (e, agree, k0, nf), eps in zip(rows, ch4.EPS_CMP):
        model.eps = eps
        T = sb.output_table(model, 5)
        prof = sb.profile_from_table(sb.classify(T, 0.0))
        assert e == eps and nf == int(prof.nonfinite.sum())
        assert agree == pytest.approx(((T > 0) == (T0 > 0)).double().mean().item(), abs=1e-12)
        assert k0 == pytest.approx(prof.fractions[:, 0].double().mean().item(), abs=1e-12)
    assert rows[0][1] == 1.0 and rows[-1][1] < 1.0       # eps = 1 changes some labels here


@torch.no_grad()
def test_cor43_runner_counts_the_label_changes_of_the_k_flips():
    c = dict(N=16, n_pts=20, n_beta=5, K=4, **ch4.ZONE)
    r = ch4.cor43_one(c)
    ball = ch4._zone_ball(c, 20)
    x = sb.random_strings(16, 1, seed=16)
    bits = sb.flip_bits(16, 4)
    T = ball(x)[:, 0]
    s = torch.zeros(20, dtype=torch.long)
    for i in bits:
        y = x.clone()
        y[:, i] = 1 - y[:, i]
        s += ((ball(y)[:, 0] > 0) != (T > 0)).long()
    assert r["s_k"] == s.tolist()
    assert np.array(r["n_dT"]).shape == (5, len(bits))
    assert np.allclose(np.array(r["abs_T"]), T.abs().double().numpy())
