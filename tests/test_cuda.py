"""Issue 36: on a CUDA device the profiler gives the CPU's profiles exactly (float32, the same
strings). Skipped without CUDA; `make unit-cuda` runs the `cuda`-marked tests alone, so a GPU
machine checks the device path in a minute or two instead of running the CPU suite there."""
import pytest
import torch

import sensbook as sb

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("N, D, L, H, P", [(10, 16, 2, 2, 8), (12, 32, 2, 1, 64)])
def test_exhaustive_profiles_on_cuda_equal_the_cpu(N, D, L, H, P):
    cpu = sb.Recognizer.random(P=P, D=D, L=L, H=H, init="xavier_normal", seed=N)
    gpu = sb.Recognizer.random(P=P, D=D, L=L, H=H, init="xavier_normal", seed=N, device="cuda")
    a = sb.sensitivity_profile(cpu, N, progress=False)
    b = sb.sensitivity_profile(gpu, N, progress=False)        # chunks from the device's memory
    assert b.counts.device.type == "cuda"
    for f in ("counts", "undecided", "nonfinite", "incomplete", "accepted"):
        assert torch.equal(getattr(a, f), getattr(b, f).cpu()), f


def test_sampled_profiles_on_cuda_equal_the_cpu():
    cpu = sb.Recognizer.random(P=4, D=16, L=2, init="xavier_normal", seed=1)
    gpu = sb.Recognizer.random(P=4, D=16, L=2, init="xavier_normal", seed=1, device="cuda")
    for bits in (None, [1, 7, 64]):
        a = sb.sensitivity_profile(cpu, 64, n_samples=64, seed=3, bits=bits, progress=False)
        b = sb.sensitivity_profile(gpu, 64, n_samples=64, seed=3, bits=bits, progress=False)
        assert torch.equal(a.counts, b.counts.cpu()) and torch.equal(a.accepted, b.accepted.cpu())


def test_cuda_chunks_come_from_the_device_memory():
    from sensbook.settings import DEFAULT_MEMORY_MB, default_memory_mb
    free = torch.cuda.mem_get_info()[0] / 2**20
    assert default_memory_mb("cuda") == max(DEFAULT_MEMORY_MB, free / 2)
    assert default_memory_mb("cpu") == DEFAULT_MEMORY_MB
