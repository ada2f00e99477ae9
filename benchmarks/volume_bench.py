"""Small volumes: subset simulation against plain Monte Carlo and nested sampling (issue 45).

``python benchmarks/volume_bench.py [--reps 3] [--quick]`` (one thread; dynesty from PyPI,
importable or under ``--dynesty-path``; without it the nested-sampling rows are skipped).

Prints, for each case (exact closed-form volumes, a disconnected union of boxes, and the
recognizer's solution set in the book's small space), each method's estimate of log V (mean
and spread over ``--reps`` repetitions with other seeds), its error against the exact or
reference value, its CPU seconds, and the ratios measured in this run:

* **equal CPU time**: nested sampling (``dynesty``, random-walk proposals, ``logl_max = 0``:
  the run stops at the first dead point of S > 0, whose prior mass ln X is the estimate of
  log V) runs first; subset simulation (``sb.subset_volume``) at one size (500 points, 4 runs,
  no doublings: a refused run is -inf); plain Monte
  Carlo then draws as many uniform points as fit in the mean CPU time of the slower of the two
  (its estimate log(hits / n); when no point hits, the 95 % upper bound stands in for it,
  so its error is then the floor's distance from V);
* **the score**: on the recognizer, subset simulation also runs on the worst margin alone
  (``subset-min``; the same set above 0), against the package's score, which counts the
  strings still wrong first (``sb.recognition_score``), and over the parameters other than
  the read-out with the read-out integrated out (``subset-r``, ``sb.ReadoutScore``, 256
  read-outs: what ``ch5_certified`` runs); a refused estimate is -inf. PARITY at N = 3 has no
  plain Monte Carlo reference (V about 1e-7): its reference is the read-out integrated out
  over uniform phi alone (conditional Monte Carlo, 4096 read-outs, no levels), with its
  standard error printed;
* **work-normalised error**: mean squared error of log V times CPU seconds (lower is better;
  equal for two methods that trade time for precision at the same rate), as a ratio to the
  chapter's estimator's (``subset-r`` on the recognizer, ``subset`` elsewhere).

Everything is measured with this process's CPU time, one thread (robust on a shared machine).

``--chunks`` measures only the read-out score's chunking: one call on 400 points (256
read-outs, as the chapter) with its (P, K, B) outputs scored about 2^18 at a time
(``ReadoutScore.CHUNK_BITS``, cache-sized) against 2^22, the ratio of the two, and whether
their scores and weights are the same bit for bit.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sensbook as sb  # noqa: E402
from sensbook.experiments import ch5_certified as cc  # noqa: E402
from sensbook.splitting import ReadoutScore, recognition_score, subset_volume  # noqa: E402


def cube(M, a):
    return lambda th: a - th.abs().amax(1), M * math.log(a)


def two_boxes(M, a, c=0.6):
    """Two boxes of half-width a at +c and -c on every coordinate: disconnected, V = 2 a^M."""
    def score(th):
        return torch.maximum(a - (th - c).abs().amax(1), a - (th + c).abs().amax(1))
    return score, math.log(2) + M * math.log(a)


def recognizer(target, N):
    """The package's score, and the worst margin alone (``min_x s(x) T - xi``: the same
    positive set, PARITY's dead ends below 0), for the row ``subset-min``."""
    model = sb.Recognizer(1, cc.VOL_SPACE["D"], cc.VOL_SPACE["L"], cc.VOL_SPACE["H"],
                          cc.VOL_SPACE["F"], dtype=torch.float64)
    x = sb.strings(N, dtype=torch.float64)
    y = cc.vol_labels(target, N)
    s = y.double() * 2 - 1

    @torch.no_grad()
    def worst(theta):
        T = model.like(theta.shape[0]).set_flat(theta)(x)
        g = (T * s).amin(-1) - cc.MARGIN
        return torch.where(torch.isfinite(T).all(-1), g, -torch.inf)

    rs = ReadoutScore(model, x, y, margin=cc.MARGIN, readouts=256)
    return recognition_score(model, x, y, margin=cc.MARGIN), model.M, worst, rs


def conditional_reference(rs, n, seed=999, readouts=4096, batch=2_000):
    """log of the mean over n uniform phi of the read-out's recognising fraction, and its
    standard error (delta method): no levels, so no chain can be trapped."""
    k0 = rs.K                                          # the same set, more read-outs
    rs.K = readouts
    g = torch.Generator().manual_seed(seed)
    rs.resample(g)
    v = torch.cat([rs.weight(torch.rand(batch, rs.M, generator=g, dtype=torch.float64) * 2 - 1)
                   for _ in range(n // batch)])
    rs.K = k0
    return math.log(float(v.mean())), float(v.std() / v.mean() / math.sqrt(len(v)))


def mc(score, M, n, seed, batch=20_000):
    g = torch.Generator().manual_seed(seed)
    hits, done = 0, 0
    while done < n:
        b = min(batch, n - done)
        hits += int((score(torch.rand(b, M, generator=g, dtype=torch.float64) * 2 - 1) > 0).sum())
        done += b
    return hits, done


def reference(score, M, n, seed=999):
    """log V from a long plain Monte Carlo run (the recognizer has no closed form)."""
    h, d = mc(score, M, n, seed)
    if h < 30:
        raise SystemExit(f"reference Monte Carlo too short ({h} hits of {d})")
    return math.log(h / d)


def nested(score, M, seed, nlive, walks, dynesty, maxcall=3_000_000):
    rng = np.random.default_rng(seed)

    def loglike(u):
        return float(score(torch.from_numpy(np.asarray(u, dtype=float))[None])[0])

    s = dynesty.NestedSampler(loglike, lambda u: 2 * u - 1, M, nlive=nlive, bound="none",
                              sample="rwalk", walks=walks, rstate=rng)
    s.run_nested(logl_max=0.0, dlogz=0.0, maxcall=maxcall, print_progress=False, add_live=False)
    r = s.results
    logl, logvol = np.asarray(r.logl), np.asarray(r.logvol)
    above = np.nonzero(logl > 0)[0]
    # the mass above 0 lies between the prior mass of the first dead point above 0 and the one
    # before it; when the run stopped before any, the last mass bounds V from above
    return float(logvol[above[0] - 1]) if len(above) else float(logvol[-1]), int(sum(r.ncall))


def chunks(reps=3):
    print(f"{'target':9s} {'N':>2s} {'2^22 s':>8s} {'2^18 s':>8s} {'ratio':>6s}  same")
    for t, N in (("FIRST", 4), ("MAJORITY", 7), ("PARITY", 6)):
        model = sb.Recognizer(1, **cc.VOL_SPACE, dtype=torch.float64)
        rs = ReadoutScore(model, sb.strings(N, dtype=torch.float64), cc.vol_labels(t, N),
                          margin=cc.MARGIN, readouts=256)
        phi = torch.rand(400, rs.M, generator=torch.Generator().manual_seed(N),
                         dtype=torch.float64) * 2 - 1
        secs, outs = [], []
        for bits in (22, 18):
            rs.CHUNK_BITS = bits
            rs(phi)                                            # warm
            t0 = time.process_time()
            for _ in range(reps):
                S = rs(phi)
            secs.append((time.process_time() - t0) / reps)
            outs.append((S, rs.weight(phi)))
        same = all(torch.equal(a, b) for a, b in zip(*outs))
        print(f"{t:9s} {N:2d} {secs[0]:8.3f} {secs[1]:8.3f} {secs[0] / secs[1]:6.2f}  {same}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    # a shared machine: --quick --reps 2 takes about ten CPU minutes, mostly dynesty's
    ap.add_argument("--quick", action="store_true", help="smaller cases (a smoke run)")
    ap.add_argument("--dynesty-path", default=None, help="a folder to import dynesty from")
    ap.add_argument("--chunks", action="store_true", help="only the read-out score's chunking")
    a = ap.parse_args()
    torch.set_num_threads(1)
    if a.chunks:
        return chunks()
    if a.dynesty_path:
        sys.path.insert(0, a.dynesty_path)
    try:
        import dynesty
    except ImportError:
        dynesty = None
        print("dynesty not importable: nested-sampling rows skipped")
    Ms = (6, 10) if a.quick else (10, 20)
    cases = [(f"cube M={Ms[0]} a=0.3", *cube(Ms[0], 0.3), Ms[0], None),
             (f"cube M={Ms[1]} a=0.1", *cube(Ms[1], 0.1), Ms[1], None),
             (f"two boxes M={Ms[0]} a=0.2", *two_boxes(Ms[0], 0.2), Ms[0], None)]
    cases = [c + (None,) for c in cases]
    for t, N, n_ref in (("FIRST", 3, 200_000), ("PARITY", 2, 2_000_000),
                        ("PARITY", 3, 100_000)):
        score, M, worst, rs = recognizer(t, N)
        t0 = time.process_time()
        if N == 3 and t == "PARITY":
            ref, se = conditional_reference(rs, n_ref // (4 if a.quick else 1))
            label = f"cond. MC ± {se:.2f}"
        else:
            ref, label = reference(score, M, n_ref // (4 if a.quick else 1)), "ref. MC"
        cases.append((f"{t} N={N} (M={M}, {label} {time.process_time() - t0:.0f} s)",
                      score, ref, M, worst, rs))
    print(f"torch {torch.__version__}, dynesty {getattr(dynesty, '__version__', '-')}, "
          f"{a.reps} repetitions, CPU seconds of one thread")
    head = f"{'case':38s} {'method':8s} {'log V':>8s} {'sd':>6s} {'error':>7s} {'CPU s':>7s} {'calls':>9s} {'MSE*s / SS':>10s}"
    print(head)
    summary = []
    for name, score, exact, M, worst, rs in cases:
        rows = {}
        if dynesty is not None and not name.startswith("PARITY N=3"):   # too slow there
            est, secs, calls = [], [], []
            for j in range(a.reps):
                t0 = time.process_time()
                v, c = nested(score, M, j, nlive=200 if a.quick else 400, walks=20, dynesty=dynesty)
                secs.append(time.process_time() - t0); est.append(v); calls.append(c)
            rows["nested"] = (est, secs, calls)
        # the estimator on the package's score, and on the worst margin alone where given
        for meth, f in (("subset", score), ("subset-min", worst), ("subset-r", rs)):
            if f is None:
                continue
            est, secs, calls = [], [], []
            for j in range(a.reps):
                t0 = time.process_time()
                # one size (no doublings: equal work); over phi, the chapter's step
                r = subset_volume(f, getattr(f, "M", M), n=500, runs=4, moves=10, n_max=500,
                                  scale=0.25 if f is rs else 0.5, seed=100 * j)
                secs.append(time.process_time() - t0); est.append(r["log_volume"])
                calls.append(r["evaluations"])
            rows[meth] = (est, secs, calls)
        budget = max(np.mean(v[1]) for v in rows.values())
        t0 = time.process_time()
        mc(score, M, 20_000, 0)
        rate = 20_000 / (time.process_time() - t0)
        est, secs, calls = [], [], []
        for j in range(a.reps):
            t0 = time.process_time()
            h, d = mc(score, M, int(rate * budget), 7 + j)
            secs.append(time.process_time() - t0)
            est.append(math.log(h / d) if h else math.log(sb.wilson_interval(0, d)[1]))
            calls.append(d)
        rows["MC"] = (est, secs, calls)
        wn = {}
        for meth, (est, secs, calls) in rows.items():
            e = np.asarray(est)
            wn[meth] = float(np.mean((e - exact) ** 2) * np.mean(secs)) if np.isfinite(e).all() \
                else math.inf
        base = "subset-r" if "subset-r" in wn else "subset"     # what the chapter runs
        for meth, (est, secs, calls) in rows.items():
            e = np.asarray(est)
            ok = np.isfinite(e).all()
            print(f"{name:38s} {meth:8s} {np.mean(e):8.2f} {np.std(e, ddof=1) if ok else math.nan:6.2f} "
                  f"{np.mean(e) - exact:+7.2f} {np.mean(secs):7.1f} {int(np.mean(calls)):9d} "
                  f"{wn[meth] / wn[base] if wn[base] > 0 else math.nan:10.3g}")
        print(f"{'':38s} {'exact' if 'cube' in name or 'box' in name else 'ref.':8s} {exact:8.2f}")
        summary.append((name, wn, base))
    print("\nratios (work-normalised squared error of log V, method / the chapter's estimator: "
          "subset simulation, over phi with the read-out integrated out on the recognizer; "
          "> 1: it is more accurate at equal CPU time; inf: the method was refused or hit "
          "nothing):")
    for name, wn, base in summary:
        print(f"  {name:38s} " + "  ".join(f"{m} {wn[m] / wn[base]:.3g}" for m in wn
                                           if m != base))


if __name__ == "__main__":
    main()
