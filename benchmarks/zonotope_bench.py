"""What each device of the tighter certificate (sensbook/zonotope.py) buys, in one run.

For each construction at one length, the certified radius r_t of ``sb.tight_bounds``
(bisected to 0.5 %) with every device on, and with each one turned off in turn:

* ``fresh``: the error term made new noise symbols after each block (``Affine.fresh``);
* ``balls``: a layer norm's remainder kept as a ball of D symbols (else a box);
* ``gram``: the Gram bound on the deviation's length at the last layer (``_cube_norm``);
* ``ratio``: the read-out's ratio bound (``_ratio_lo``);

and the seconds of one bound on all 2^N strings. Each variant is still sound (a device off
only widens the bounds), so every radius printed is certified; the ratio of each to the
full radius is what that device is worth here.

    python benchmarks/zonotope_bench.py            # N = 3
    python benchmarks/zonotope_bench.py --n 4
"""
from __future__ import annotations

import argparse
import time
from contextlib import contextmanager, nullcontext

import torch

import sensbook as sb
import sensbook.zonotope as zz
from sensbook.certify import certified_radius
from sensbook.constructions import target
from sensbook.experiments import ch5_certified as cc


@contextmanager
def off(device: str):
    """Turn one device off for the duration (the attribute restored after)."""
    ln = zz._layer_norm
    owner, name, value = {
        "fresh": (zz.Affine, "fresh", lambda self, start: self),
        "balls": (zz, "_layer_norm", lambda d, eps, cen=None, ball=None, gram=False:
                  ln(d, eps, cen, None, gram)),
        "gram": (zz, "_cube_norm", lambda G, top=256: torch.full(
            G.shape[:-2], torch.inf, dtype=G.dtype, device=G.device)),
        "ratio": (zz, "_ratio_lo", lambda a, t, n0, q, W, **kw: torch.full_like(a.c, -torch.inf)),
    }[device]
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3, help="string length N (default 3)")
    ap.add_argument("--rtol", type=float, default=0.005, help="bisection tolerance")
    args = ap.parse_args(argv)
    devices = ("none", "fresh", "balls", "gram", "ratio")
    rows = []
    for name in cc.NAMES:
        model = cc.boxed_construction(name)
        x = sb.strings(args.n, dtype=torch.float64)
        y = target(name)(x)
        r = certified_radius(model, x, y, margin=cc.MARGIN, rtol=cc.RTOL, r_max=cc.BOX)["radius"]
        full = None
        for dev in devices:
            with off(dev) if dev != "none" else nullcontext():
                t = time.perf_counter()
                sb.tight_bounds(model, x, r)
                sec = time.perf_counter() - t
                rt = certified_radius(model, x, y, margin=cc.MARGIN, rtol=args.rtol, r_min=r,
                                      r_max=cc.TIGHT_SPAN * r, bounds=sb.tight_bounds)["radius"]
            full = rt if dev == "none" else full
            rows.append((name, "all on" if dev == "none" else f"{dev} off", rt, rt / full,
                         rt / r, sec))
    print(f"N = {args.n}; r_t bisected to {args.rtol:.1%}; r: the interval certificate's")
    print(sb.text_table(["construction", "devices", "r_t", "r_t / all on", "r_t / r",
                         "s per bound"], rows, ["s", "s", ".4g", ".3f", ".2f", ".2f"]))


if __name__ == "__main__":
    main()
