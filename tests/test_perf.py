"""Issue 6: the fast paths give the same results as the plain ones, and memory stays bounded.

No timings here: benchmarks/bench.py measures speed.
"""
import math

import pytest
import torch

import sensbook as sb
from sensbook import model as model_module
from sensbook.profile import CACHE_ROWS, plan_chunk


def gather_profile(table):
    """The straightforward profile of a truth table: neighbours by index XOR, all at once."""
    size = table.shape[-1]
    N = size.bit_length() - 1
    idx = torch.arange(size)
    lab = table.to(torch.int8)
    nbs = torch.stack([lab[..., idx ^ (1 << b)] for b in range(N)], -1)     # (*pop, 2^N, N)
    s = (nbs != lab.unsqueeze(-1)).sum(-1)
    complete = (lab >= 0) & ~(nbs < 0).any(-1)
    counts = torch.stack([((s == k) & complete).sum(-1) for k in range(N + 1)], -1)
    return counts, (lab == -1).sum(-1), (lab == -2).sum(-1), ((lab >= 0) & (nbs < 0).any(-1)).sum(-1)


@pytest.mark.parametrize("N, chunk", [(1, 1), (3, 2), (6, 1), (6, 8), (9, 16), (9, 1 << 16), (10, 100)])
def test_block_profile_equals_gather_profile(N, chunk):
    g = torch.Generator().manual_seed(N)
    table = torch.randint(-2, 2, (3, 2, 2**N), generator=g, dtype=torch.int8)
    table[0, 0] = torch.randint(0, 2, (2**N,), generator=g)          # one row fully decided
    p = sb.profile_from_table(table, chunk=chunk)
    counts, und, nonf, inc = gather_profile(table)
    assert p.counts.shape == (3, 2, N + 1)
    assert torch.equal(p.counts, counts) and torch.equal(p.undecided, und)
    assert torch.equal(p.nonfinite, nonf) and torch.equal(p.incomplete, inc)
    assert torch.equal(p.accepted, (table == 1).sum(-1))


def test_batched_chunked_and_per_string_outputs_agree():
    m = sb.Recognizer.random(P=4, D=16, L=3, H=2, seed=7)
    x = sb.strings(8)
    whole = m(x)
    chunks = torch.cat([m(x[a:a + 37]) for a in range(0, 256, 37)], -1)
    assert torch.equal(whole, chunks)                       # the same kernels on any chunk
    one = torch.stack([m(x[b:b + 1])[:, 0] for b in range(0, 256, 17)], -1)
    assert torch.allclose(whole[:, ::17], one, atol=1e-5)
    for i in range(4):
        assert torch.allclose(m.select(i)(x)[0], whole[i], atol=1e-5)


@pytest.mark.parametrize("N", [3, 6])
def test_profiles_equal_the_per_string_per_flip_loop(N):
    m = sb.Recognizer.random(P=2, D=8, L=2, H=2, seed=N, init="xavier_normal")
    table = sb.truth_table(m, N, progress=False)
    for chunk in (1, 5, 64, None):
        assert torch.equal(sb.truth_table(m, N, chunk_size=chunk, progress=False), table)
    # the loop the literature used: each model, each string, each flip: one forward pass each
    K = torch.zeros(2, N + 1, dtype=torch.int64)
    for i in range(2):
        one = m.select(i)
        for x in sb.strings(N):
            lab = [bool(one(x.unsqueeze(0))[0, 0] > 0)]
            for n in range(N):
                y = x.clone()
                y[n] = 1 - y[n]
                lab.append(bool(one(y.unsqueeze(0))[0, 0] > 0))
            K[i, sum(l != lab[0] for l in lab[1:])] += 1
    assert torch.equal(sb.profile_from_table(table).K, K)
    assert torch.equal(sb.sensitivity_profile(m, N, progress=False).K, K)
    est = sb.sensitivity_profile(m, N, n_samples=50, seed=2, progress=False)
    for chunk in (1, 3, 50):
        again = sb.sensitivity_profile(m, N, n_samples=50, seed=2, chunk_size=chunk, progress=False)
        assert torch.equal(est.counts, again.counts)


def test_chunk_planner_arithmetic_bounds_memory():
    m = sb.Recognizer.random(P=2, D=8, L=1, seed=0)
    for N in (10, 16, 20, 24):
        for mb in (0.05, 1, 256):
            step = plan_chunk(m, N, mb)
            assert step >= 1
            assert step == 1 or step * m.memory_per_string(N) <= mb * 2**20      # the budget
            g, b = m.tile(step, N)                            # the forward's tiles are cache-sized
            assert g * b * (N + 1) * (m.F + 3 * m.D) * 4 <= max(model_module.TILE_BYTES,
                                                                b * (N + 1) * (m.F + 3 * m.D) * 4)
            flips = plan_chunk(m, N, mb, per_item=N + 1)
            assert flips == 1 or flips * (N + 1) * m.memory_per_string(N) <= mb * 2**20
    plain = lambda x: m(x)                                # a population that does not tile itself
    plain.memory_per_string, plain.P = m.memory_per_string, m.P
    assert plan_chunk(plain, 10, 256) * m.P * 11 <= CACHE_ROWS
    assert plan_chunk(m, 10, 256, chunk_size=7) == 7
    assert plan_chunk(lambda x: x.sum(-1) > 0, 10, 1) == 2**20 // (64 * 11)
    with pytest.raises(ValueError, match="memory_mb"):
        plan_chunk(m, 10, 0)


def test_exhaustive_calls_never_grow_with_two_to_the_n():
    m = sb.Recognizer.random(P=2, D=4, L=1, seed=0)
    seen = []

    def clf(x):
        seen.append(x.shape[0])
        return m(x)
    clf.memory_per_string, clf.P = m.memory_per_string, m.P
    for N in (10, 13):
        seen.clear()
        sb.truth_table(clf, N, memory_mb=1, progress=False)
        assert max(seen) == plan_chunk(clf, N, 1) < 2**N
        C = math.ceil(2**N / max(seen))    # chunks, then the repeat check's calls (Evaluator):
        checked = sum(1 for j in range(1, C) if j & (j - 1) == 0)     # chunks 1, 2, 4, ...
        assert C + 1 + 2 * checked == len(seen)     # the first chunk twice, 2 small calls each


@pytest.mark.parametrize("N, D, L, H, P", [(8, 64, 4, 1, 16), (9, 64, 1, 2, 7), (8, 16, 2, 2, 5),
                                           (7, 8, 3, 4, 3), (6, 4, 2, 2, 3)])
def test_tiled_forward_is_bit_identical_to_the_whole_batch(N, D, L, H, P, monkeypatch):
    """The gradient-free forward runs in cache-sized tiles of models x strings and pads tiny
    batches: T is the same float as the plain batched forward of all 2^N strings at once
    (``_run``, the path before tiling), for any tile size and any chunk of strings, so the
    profiles equal the old path's exactly."""
    m = sb.Recognizer.random(P=P, D=D, L=L, H=H, init="xavier_normal", seed=N)
    x = sb.strings(N)
    with torch.no_grad():
        whole = m._run(x)                                   # one untiled pass, no padding
    assert 2**N >= m.min_rows()
    with torch.no_grad():
        for c in (1, 2, 3, 5, 37):                         # any batch, even one string
            assert torch.equal(torch.cat([m(x[a:a + c]) for a in range(0, 2**N, c)], 1), whole)
        for tile_bytes in (1, 5000, 1 << 22):
            monkeypatch.setattr(model_module, "TILE_BYTES", tile_bytes)
            assert torch.equal(m(x), whole)
            assert torch.equal(m(x.expand(P, -1, -1)), whole)   # (P, B, N) inputs as well
    table = sb.truth_table(m, N, progress=False)
    assert torch.equal(table, sb.classify(whole))
    old = sb.profile_from_table(sb.classify(whole))
    for chunk in (None, 3, 100):
        new = sb.sensitivity_profile(m, N, chunk_size=chunk, progress=False)
        assert torch.equal(new.counts, old.counts) and torch.equal(new.undecided, old.undecided)
    with torch.enable_grad():                               # training: the plain path, same T
        assert torch.equal(m(x).detach(), whole)


def test_tiles_on_the_meta_device_have_the_planned_shapes():
    """Shapes only (no data): the tiled forward on the meta device, as a GPU-sized chunk
    would run it, keeps the (P, B) output, and a CPU tile fits TILE_BYTES."""
    with torch.device("meta"):
        m = sb.Recognizer(P=1024, D=32, L=2)
    assert m.tile(2**20, 20) == (1024, 2**20)                 # off the CPU: one tile, all of it
    cpu = sb.Recognizer(P=1024, D=32, L=2)
    g, b = cpu.tile(2**20, 20)
    assert g * b * 21 * (cpu.F + 3 * cpu.D) * 4 <= model_module.TILE_BYTES and b >= cpu.min_rows()
    x = torch.zeros(300, 20, device="meta")
    with torch.no_grad():
        assert m(x).shape == (1024, 300)
        assert m._run(x, models=slice(0, 3), checked=True).shape == (3, 300)   # a tile


def test_sampled_bits_flip_only_those_positions():
    """bits=: the same strings are drawn; the string's label and the flips of the chosen
    positions equal the full profile's (a brute-force count from the truth table)."""
    N, n = 9, 200
    m = sb.Recognizer.random(P=3, D=8, L=2, seed=3, init="xavier_normal")
    table = sb.truth_table(m, N, progress=False)
    bits = [2, 5, 9]
    p = sb.sensitivity_profile(m, N, n_samples=n, seed=4, bits=bits, progress=False)
    full = sb.sensitivity_profile(m, N, n_samples=n, seed=4, progress=False)
    g = torch.Generator(device="cpu").manual_seed(4)
    x = torch.randint(0, 2, (n, N), generator=g)
    idx = sb.strings_to_index(x)
    lab = table[:, idx]                                          # (P, n)
    s = sum((table[:, idx ^ (1 << (b - 1))] != lab).long() for b in bits)
    expect = torch.stack([(s == k).sum(-1) for k in range(N + 1)], -1)
    assert torch.equal(p.counts, expect) and torch.equal(p.accepted, full.accepted)
    assert int(p.counts[..., len(bits) + 1:].sum()) == 0
    for chunk in (1, 7):
        again = sb.sensitivity_profile(m, N, n_samples=n, seed=4, bits=bits, chunk_size=chunk,
                                       progress=False)
        assert torch.equal(again.counts, p.counts)
    with pytest.raises(ValueError, match="bits"):
        sb.sensitivity_profile(m, N, n_samples=n, bits=[0])
    with pytest.raises(ValueError, match="n_samples"):
        sb.sensitivity_profile(m, N, bits=[1])


def test_low_precision_never_counts_a_string_within_its_rounding_bound():
    """The bfloat16 path (matmuls by autocast, on the CPU here as on a GPU): a string whose
    |T| lies within the rounding bound is undecided, and every string it decides has the
    float32 label (random populations of the two inits inside its box [-1, 1]; outside it
    LowPrecision refuses: tests/test_bound48.py)."""
    from sensbook.model import LowPrecision
    N = 7
    for D, L, init in ((16, 2, "xavier_uniform"), (16, 2, "uniform"), (32, 3, "uniform")):
        m = sb.Recognizer.random(P=8, D=D, L=L, init=init, seed=5)
        lp = LowPrecision(m)
        exact = sb.truth_table(m, N, progress=False)
        fast = sb.truth_table(lp, N, progress=False)
        decided = fast >= 0
        assert torch.equal(fast[decided], exact[decided])
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            raw = m(sb.strings(N)).float()
        within = raw.abs() <= lp.rounding_bound().unsqueeze(1)
        assert bool(within.any()) and bool((fast[within] == sb.UNDECIDED).all())
    with pytest.raises(ValueError, match="dtype"):
        LowPrecision(m, dtype=torch.float64)


def test_memory_budget_defaults_by_device():
    from sensbook.settings import DEFAULT_MEMORY_MB, default_memory_mb
    assert default_memory_mb("cpu") == default_memory_mb(None) == DEFAULT_MEMORY_MB
    m = sb.Recognizer.random(P=2, D=4, L=1, seed=0)
    assert torch.equal(sb.truth_table(m, 6, progress=False),
                       sb.truth_table(m, 6, memory_mb=DEFAULT_MEMORY_MB, progress=False))
