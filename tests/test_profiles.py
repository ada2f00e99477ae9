"""The profiler's results (sensbook/profiles.py): intervals that cover the closed forms,
equality and saving that round-trip, a two-sample test calibrated under its null, a plot."""
import json
import math

import numpy as np
import pytest
import torch

import sensbook as sb
from sensbook.profiles import Profile, compare_profiles, wilson_interval


# ---- issue 37 item 5: no zero-width interval from a sample ---------------------------------
def test_item5_a_k_never_seen_has_an_interval_of_nonzero_width():
    const = lambda x: x[:, 0] * 0 + 2.0                     # constant: every s = 0
    p = sb.sensitivity_profile(const, 256, n_samples=32, progress=False)
    lo, hi = p.interval()
    assert float(p.stderr[0]) == 0.0                        # the plug-in error says nothing
    assert 0 < float(lo[0]) < 1 and float(hi[0]) == 1.0     # always seen: lo < 1
    assert float(hi[1]) > 0.05 and float(lo[1]) == 0.0      # never seen: hi > 0
    # the average sensitivity: 0 in the sample, but the interval does not collapse
    alo, ahi = p.average_sensitivity_interval()
    assert float(alo) == 0.0 and float(ahi) > 1.0


def test_item5_wilson_intervals_cover_the_closed_form_fractions():
    """Over 200 seeds the 95 % intervals of MAJORITY's K_k / 2^N cover the exact fraction in
    about 95 % of the (seed, k) pairs (binomial sd of the rate over 200 x 4 pairs: 0.8 %)."""
    N, n = 9, 150
    exact = torch.as_tensor(sb.MAJORITY.profile(N)).double() / 2**N
    ks = [k for k in range(N + 1) if exact[k] > 0]
    cover, avg_cover = [], []
    true_avg = float((exact * torch.arange(N + 1)).sum())
    for seed in range(200):
        p = sb.sensitivity_profile(sb.MAJORITY, N, n_samples=n, seed=seed, progress=False)
        lo, hi = p.interval()
        cover += [bool(lo[k] <= exact[k] <= hi[k]) for k in ks]
        alo, ahi = p.average_sensitivity_interval()
        avg_cover.append(float(alo) <= true_avg <= float(ahi))
    assert 0.92 <= np.mean(cover) <= 0.985, np.mean(cover)
    assert 0.90 <= np.mean(avg_cover) <= 0.99, np.mean(avg_cover)


def test_wilson_interval_against_statsmodels():
    proportion = pytest.importorskip("statsmodels.stats.proportion")
    for k, n in [(0, 32), (32, 32), (7, 40), (123, 1000)]:
        lo, hi = wilson_interval(k, n)
        want = proportion.proportion_confint(k, n, alpha=0.05, method="wilson")
        assert (float(lo), float(hi)) == pytest.approx(want, abs=2e-3)


# ---- issue 37 item 11: keep and compare ------------------------------------------------------
def test_item11_equal_profiles_compare_equal_and_round_trip_through_json(tmp_path):
    clf = lambda x: x[:, :3].sum(-1) - 1.5
    a = sb.sensitivity_profile(clf, 8, progress=False)
    b = sb.sensitivity_profile(clf, 8, progress=False)
    assert a == b and not (a != b)                          # raised on two equal profiles before
    assert a != sb.sensitivity_profile(sb.PARITY, 8, progress=False)
    s = sb.sensitivity_profile(clf, 40, n_samples=64, seed=5, progress=False)
    assert s == sb.sensitivity_profile(clf, 40, n_samples=64, seed=5, progress=False)
    assert s != sb.sensitivity_profile(clf, 40, n_samples=64, seed=6, progress=False)
    path = tmp_path / "p.json"
    s.save(path, model="three bits")
    d = json.loads(path.read_text())
    assert d["N"] == 40 and d["n_strings"] == 64 and d["meta"]["seed"] == 5
    assert d["meta"]["torch"] == torch.__version__ and d["meta"]["model"] == "three bits"
    assert "lambda" in d["meta"]["classifier"]
    back = Profile.load(path)
    assert back == s and back.meta["seed"] == 5
    assert Profile.from_dict(a.to_dict()) == a
    pop = sb.sensitivity_profile(sb.Recognizer.random(3, 8, 1, 1, seed=0), 5, progress=False)
    assert Profile.from_dict(json.loads(json.dumps(pop.to_dict()))) == pop
    with pytest.raises(ValueError, match="format"):
        Profile.from_dict({"N": 3})


def test_item11_the_two_sample_test_against_scipy_and_under_its_null():
    stats = pytest.importorskip("scipy.stats")
    maj = lambda x: x.sum(-1) - x.shape[-1] / 2            # MAJORITY as scores (N odd)
    first = lambda x: x[:, 0] - 0.5
    N = 15
    a = sb.sensitivity_profile(maj, N, n_samples=400, seed=1, progress=False)
    b = sb.sensitivity_profile(first, N, n_samples=400, seed=2, progress=False)
    r = compare_profiles(a, b)
    assert r["p_value"] < 1e-6 and r["difference"] > 0
    # no pooling needed here: the statistic is scipy's on the nonzero columns
    t = np.stack([a.counts.numpy(), b.counts.numpy()])
    t = t[:, t.sum(0) > 0]
    if (stats.contingency.expected_freq(t) >= 5).all():
        chi2, p, df, _ = stats.chi2_contingency(t, correction=False)
        assert r["statistic"] == pytest.approx(chi2) and r["p_value"] == pytest.approx(p)
    # under the null (one model, two seeds) it rejects at 5 % about 5 % of the time
    rejections = [compare_profiles(
        sb.sensitivity_profile(maj, N, n_samples=200, seed=2 * i, progress=False),
        sb.sensitivity_profile(maj, N, n_samples=200, seed=2 * i + 1, progress=False)
    )["p_value"] < 0.05 for i in range(150)]
    assert 0.01 <= np.mean(rejections) <= 0.10, np.mean(rejections)
    with pytest.raises(ValueError, match="=="):
        compare_profiles(sb.sensitivity_profile(maj, 5, progress=False), a)


def test_item12_plot_profile_draws_every_profile_with_its_band():
    import matplotlib
    matplotlib.use("Agg")
    a = sb.sensitivity_profile(sb.MAJORITY, 9, progress=False)
    b = sb.sensitivity_profile(sb.MAJORITY, 30, n_samples=50, progress=False)
    ax = sb.plot_profile([a, b], labels=["exact", "sampled"])
    assert ax.get_xlabel() == "$k / N$"                      # two lengths: on [0, 1]
    ys = [line.get_ydata() for line in ax.get_lines()]
    assert np.allclose(ys[0], a.fractions.numpy()) and np.allclose(ys[1], b.fractions.numpy())
    assert len(ax.collections) == 1                         # one band: the sampled profile
    band = ax.collections[0].get_paths()[0].vertices
    lo, hi = b.interval()
    assert band[:, 1].max() == pytest.approx(float(hi.max()))
    assert [t.get_text() for t in ax.get_legend().get_texts()][1].startswith("sampled")
    with pytest.raises(ValueError, match="labels"):
        sb.plot_profile([a, b], labels=["one"])
    assert ax.xaxis.label.get_fontsize() == sb.STYLE["axes.labelsize"]
