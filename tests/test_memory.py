"""Issue 15: a memory budget that is a budget. ``memory_mb`` bounds the profiler's memory beyond
its output (the truth table of an exhaustive profile; nothing for a sampled one), measured as
the peak resident set size of a fresh process (Linux: the kernel's high-water mark, reset with
/proc/self/clear_refs after a warm-up); a request that cannot fit fails at once, with the size
it would need."""
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest
import torch

import sensbook as sb
from sensbook.profile import check_budget

ROOT = pathlib.Path(__file__).resolve().parents[1]

MEASURE = r"""
import json, sys, torch, sensbook as sb
from sensbook.memory import trim_memory
torch.set_num_threads(1)
a = json.loads(sys.argv[1])
def kib(k):
    for line in open("/proc/self/status"):
        if line.startswith(k):
            return int(line.split()[1])
m = sb.Recognizer.random(P=a["P"], D=a["D"], L=1, seed=0)
kw = dict(memory_mb=a["mb"], chunk_size=a.get("chunk"), progress=False)
warm = dict(kw, n_samples=2) if a.get("n") else kw
sb.sensitivity_profile(m, 6, **warm)                   # warm-up: kernels, thread pools, imports
trim_memory()
open("/proc/self/clear_refs", "w").write("5")           # reset the peak RSS to the current RSS
base = kib("VmRSS")
p = sb.sensitivity_profile(m, a["N"], n_samples=a.get("n"), **kw)
print(json.dumps({"peak_mib": (kib("VmHWM") - base) / 1024, "counted": int(p.counts.sum())}))
"""


def peak_mib(**case):
    out = subprocess.run([sys.executable, "-c", MEASURE, json.dumps(case)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
                                          # glibc's mmap threshold fixed: see test_adapters' item 4
                                          "MALLOC_MMAP_THRESHOLD_": "131072"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


needs_linux_peak = pytest.mark.skipif(not pathlib.Path("/proc/self/clear_refs").exists(),
                                      reason="needs Linux /proc to reset and read the peak RSS")


@needs_linux_peak
@pytest.mark.parametrize("case", [
    dict(P=1, D=4, N=18, mb=2),            # the issue: an exhaustive profile of a tiny model
    dict(P=64, D=4, N=14, mb=4),           # a population: the table profiler is budgeted too
    dict(P=1, D=4, N=1024, n=2, mb=16),    # the issue: sampled N = 1024 used 205 MiB at 16
    dict(P=64, D=4, N=40, n=20, mb=16, chunk=8),    # an explicit chunk that fits the budget
])
def test_measured_peak_is_within_the_budget_plus_the_table(case):
    got = peak_mib(**case)
    table = 0 if case.get("n") else case["P"] * 2**case["N"] / 2**20
    assert got["counted"] > 0
    assert got["peak_mib"] <= case["mb"] + table, (case, got)


def test_a_request_that_cannot_fit_fails_at_once_with_the_size_it_needs():
    m = sb.Recognizer.random(P=64, D=4, L=1, seed=0)
    t = time.process_time()
    with pytest.raises(ValueError, match=r"chunk_size=100000 strings .* need about [\d.,]+ GiB, "
                                         r"over memory_mb=256"):
        sb.sensitivity_profile(m, 40, n_samples=1000, chunk_size=100_000, progress=False)
    with pytest.raises(ValueError, match=r"one string of length N=100000 needs about [\d.,]+ GiB"):
        sb.sensitivity_profile(sb.Recognizer.random(D=4, L=1), 100_000, n_samples=10, progress=False)
    with pytest.raises(ValueError, match=r"memory_mb=0.01 is too small: .* at least"):
        sb.sensitivity_profile(m, 20, memory_mb=0.01, progress=False)
    with pytest.raises(ValueError, match=r"too small to profile 1000 models: it needs at least"):
        sb.profile_from_table(torch.zeros(1000, 2**4, dtype=torch.int8), memory_mb=0.01)

    class Huge:                            # a population whose truth table no machine holds
        P, dtype = 10**9, torch.float32

        def memory_per_string(self, N):
            return 64

        def __call__(self, x):             # pragma: no cover - never reached
            raise AssertionError("computed before refusing")
    with pytest.raises(ValueError, match=r"the truth table needs [\d.,]+ GiB .* more than"):
        sb.truth_table(Huge(), 24, progress=False)
    assert time.process_time() - t < 5                    # refused before any work


def test_sampled_memory_does_not_grow_with_n_samples_or_n():
    """Each call sees at most the planned chunk of strings, for any n_samples, and a sampled
    string's N + 1 evaluations may span calls (so N = 1024 fits a small budget)."""
    m = sb.Recognizer.random(P=2, D=4, L=1, seed=0)
    seen = []

    def clf(x):
        seen.append(x.shape[0])
        return m(x)
    clf.memory_per_string, clf.P, clf.dtype = m.memory_per_string, m.P, m.dtype
    for N, n, mb in ((12, 3000, 1), (300, 3, 4)):
        seen.clear()
        step = check_budget(clf, N, mb, None, torch.float32, extra_per_string=8 + m.P)
        p = sb.sensitivity_profile(clf, N, n_samples=n, memory_mb=mb, progress=False)
        chunks, i = [], 0                   # without the repeat check's calls (Evaluator):
        while i < len(seen):                # the first chunk twice, then two calls on the
            j = len(chunks)                 # first 16 strings of chunks 1, 2, 4, 8, ...
            chunks.append(seen[i])
            i += 2 if j == 0 else 3 if j & (j - 1) == 0 else 1
        assert max(seen) <= step and sum(chunks) == n * (N + 1)
        assert int(p.counts.sum() + (p.undecided + p.nonfinite + p.incomplete).sum()) == 2 * n
    assert step < 300 + 1                                     # an item spanned several calls
    a = sb.sensitivity_profile(m, 300, n_samples=3, seed=4, progress=False)
    b = sb.sensitivity_profile(m, 300, n_samples=3, seed=4, chunk_size=7, progress=False)
    assert torch.equal(a.counts, b.counts) and torch.equal(a.accepted, b.accepted)
