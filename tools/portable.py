"""Do the book's claims hold on every reader's CPU? (issue 43; `make book-portable`)

Float32 training is chaotic: a last-bit difference in one matrix product changes a trajectory,
and torch's CPU kernel paths (``ATEN_CPU_CAPABILITY=default|avx2|avx512``, read when torch is
imported; MKL's BLAS path by ``MKL_ENABLE_INSTRUCTIONS``) differ in such bits. For each kernel
path this machine offers, this tool executes the chapters under nbval with that path and its
own results store, ``results-<scale>-<path>/`` (so every experiment a chapter reads is
recomputed on that path: nothing is shared between paths), and prints a table chapter x path
-> pass/fail. A chapter that passes on one path and fails on another has an assert decided by
rounding.

    python tools/portable.py                        # book scale, every chapter, every path
    python tools/portable.py --scale ci --chapters training --skip-native    # in `make test`

``--skip-native`` leaves out the path torch picks here by itself (``make chapters`` runs the
chapters on it already). Exit status 1 if any chapter fails on any path.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[1]
PATHS = ("default", "avx2", "avx512")
#: MKL's instruction set matched to each kernel path (the BLAS an older CPU runs); None: MKL's own
MKL = {"default": "SSE4_2", "avx2": "AVX2", "avx512": None}
#: The chapters whose asserts read training outcomes or searches (`make test` runs these at ci)
TRAINING = ("ch3_eps_positive", "ch3_score_range", "ch6_training", "ch6_mechanism",
            "ch6_explanations", "ch7_controls")


def env_for(path: str, scale: str) -> dict:
    """The environment of one kernel path: ``ATEN_CPU_CAPABILITY``, MKL's path, its own store."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY=path, SENSBOOK_SCALE=scale, PYTHONPATH=str(ROOT),
               SENSBOOK_RESULTS=str(ROOT / f"results-{scale}-{path}"), OMP_NUM_THREADS="1",
               SENSBOOK_PROGRESS="0")
    env.pop("MKL_ENABLE_INSTRUCTIONS", None)
    if MKL[path]:
        env["MKL_ENABLE_INSTRUCTIONS"] = MKL[path]
    return env


#: Runs vector kernels (softmax, exp, a matmul), then prints the path torch reports.
PROBE = ("import torch; x = torch.randn(64, 64); torch.softmax(x, 0).sum(); "
         "torch.exp(x.double()).sum(); (x @ x).sum(); "
         "print(torch.backends.cpu.get_cpu_capability())")


def capability(env: dict | None = None) -> str | None:
    """The kernel path torch runs under ``env`` (lower case: default, avx2, avx512, ...), or
    None where torch dies running vector kernels there. torch 2.13 reports ``avx512`` when
    asked for it on an AVX2-only CPU (an AMD EPYC), then stops at its first softmax with an
    illegal instruction: so the probe runs kernels before it asks."""
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True)
    return out.stdout.strip().lower() if out.returncode == 0 else None


def offered(scale: str) -> list:
    """The kernel paths this machine offers: those torch runs and reports back when asked for
    them (a path the CPU lacks falls back to a lower one, or dies: not offered)."""
    return [p for p in PATHS if capability(env_for(p, scale)) == p]


def run_chapter(chapter: str, path: str, scale: str, timeout: float) -> tuple:
    """Execute one chapter under nbval on one path: (passed, seconds, the tail of its log)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
           "--nbval-current-env", "--nbval-cell-timeout=1800", "--ignore-glob=*.ipynb",
           f"book/{chapter}.md"]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env_for(path, scale), capture_output=True,
                           text=True, timeout=timeout)
        ok, log = r.returncode == 0, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        ok, log = False, f"timed out after {timeout:.0f} s"
    return ok, time.perf_counter() - t0, log[-3000:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", default=os.environ.get("SENSBOOK_SCALE", "book"),
                    choices=("ci", "book", "paper"))
    ap.add_argument("--chapters", default="all",
                    help="'all', 'training' (the chapters whose asserts read training "
                         "outcomes: %s) or a comma-separated list" % ", ".join(TRAINING))
    ap.add_argument("--paths", default=None,
                    help="comma-separated kernel paths (default: every one this machine offers)")
    ap.add_argument("--skip-native", action="store_true",
                    help="leave out the path torch picks here by itself")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", 2)))
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per chapter")
    a = ap.parse_args(argv)
    if a.chapters == "all":
        chapters = sorted(p.stem for p in (ROOT / "book").glob("*.md")
                          if p.stem not in ("api", "references"))
    elif a.chapters == "training":
        chapters = list(TRAINING)
    else:
        chapters = [c.strip() for c in a.chapters.split(",") if c.strip()]
    missing = [c for c in chapters if not (ROOT / "book" / f"{c}.md").is_file()]
    if missing:
        ap.error(f"--chapters: no book/{missing[0]}.md")
    native = capability(dict(os.environ, ATEN_CPU_CAPABILITY=""))
    if native is None:              # torch dies on its own path: nothing here can be checked
        ap.error("torch cannot run its kernels on this machine even on its own path "
                 f"(the probe {PROBE!r} failed): no path to check the chapters on")
    have = offered(a.scale)
    paths = have if a.paths is None else [p.strip() for p in a.paths.split(",")]
    bad = [p for p in paths if p not in have]
    if bad:
        ap.error(f"--paths: {bad[0]!r} is not offered here (offered: {', '.join(have)})")
    if a.skip_native:
        paths = [p for p in paths if p != native]
    print(f"kernel paths offered here: {', '.join(have)} (torch's own: {native}); running "
          f"{', '.join(paths) or 'none'} at {a.scale} scale on {len(chapters)} chapters",
          flush=True)
    t0 = time.perf_counter()
    jobs = [(c, p) for p in paths for c in chapters]

    def one(job):
        r = run_chapter(*job, a.scale, a.timeout)
        print(f"{job[0]} on {job[1]}: {'pass' if r[0] else 'FAIL'} ({r[1]:.0f} s)", flush=True)
        return r

    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        out = dict(zip(jobs, pool.map(one, jobs)))
    width = max(len(c) for c in chapters)
    print(f"\n{'chapter':{width}s}  " + "  ".join(f"{p:>14s}" for p in paths))
    for c in chapters:
        print(f"{c:{width}s}  " + "  ".join(
            f"{('pass' if out[c, p][0] else 'FAIL') + f' {out[c, p][1]:.0f} s':>14s}"
            for p in paths))
    print(f"total {time.perf_counter() - t0:.0f} s, {a.jobs} jobs")
    failed = [j for j in jobs if not out[j][0]]
    for c, p in failed:
        print(f"\n---- {c} on {p} (store results-{a.scale}-{p}/) ----\n{out[c, p][2]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
