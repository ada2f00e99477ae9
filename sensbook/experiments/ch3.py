"""Chapter 3's experiments: eps > 0 (Lemma 3.2, Cor. 3.3/3.4, Lemma 3.1 + Prop. 3.5).

The worst case over theta of the blowup, the largest one-flip influence against N, what random
models recognise on all 2^N strings, and the Lipschitz constant in theta; at eps = 0 beside
eps > 0 on the same models.
"""
from __future__ import annotations

import numpy as np
import torch

from ..constructions import (construction_parameters, count_threshold_transformer,
                             first_hard_transformer, score_gap)
from ..geometry import (distinct_functions, flip_bits, lipschitz_theta, maximise_blowup,
                        random_strings, recognition)
from ..hinge import converged_influence, flip_hinge, lemma29_ratio, maximise_influence
from ..mechanism import eos_regime
from ..boolean import Dictator
from ..model import Recognizer
from ..train import (Protocol, accuracy, eval_schedule, held_out_strings, init_population,
                     learn)
from ..settings import device
from ..survival import censored_contrast
from . import Experiment, dec, enc, pick, register  # noqa: F401 (dec: for the chapter)

#: The chapter-3 architecture (Xavier init for typical theta; the box [-1, 1]^M for
#: worst case).
ARCH = dict(D=16, L=2, H=2)
EPS = [0.0, 0.1]  # typical theta: the same models at eps = 0 and eps > 0
#: Sizes of the chapter's own cells: ``P_blow`` models per (eps, L) for Lemma 3.2.
SIZES = dict(ci=dict(P_blow=64), book=dict(P_blow=256), paper=dict(P_blow=2048))


def _model(c, P, seed, init="xavier_uniform", dtype=torch.float32):
    return Recognizer.random(
        P,
        ARCH["D"],
        ARCH["L"],
        ARCH["H"],
        eps=c["eps"],
        init=init,
        seed=seed,
        dtype=dtype,
        device=device(),
    )


def worst_blowup_one(c: dict) -> dict:
    """One start block of the worst-case search: ``c["P"]`` models uniform on the box,
    blowup on one string of length ``c["N"]`` maximised by :func:`maximise_blowup`."""
    m = _model(c, c["P"], c["seed"], init="uniform", dtype=torch.float64)
    x = random_strings(c["N"], 1, seed=c["N"])
    steps, beta = maximise_blowup(m, x, steps=c["steps"], lr=tuple(c["lr"]))
    return {"steps": steps.tolist(), "beta": enc(beta[:, :, 0])}


def influence_one(c: dict) -> dict:
    """Max over ``c["B"]`` strings and ``c["K"]`` bits of one flip's influence, per
    model; and for every (model, string, bit) the two sides of Lemma 2.9: ``n_dT`` =
    N |T(x) - T(x xor e_i)| and ``beta_pair`` = beta(x) beta(x xor e_i), shape (P, B, k)."""
    m = _model(c, c["P"], c["seed"])
    x = random_strings(c["N"], c["B"], seed=c["N"])
    h = flip_hinge(m, x, flip_bits(c["N"], c["K"]))        # passes sized to 1 GiB
    dT = h["dT"].double().cpu().numpy()
    return {"max_influence": enc(dT.max((1, 2))), "n_dT": enc(c["N"] * dT),
            "beta_pair": enc(h["beta_pair"].double().cpu().numpy())}


#: The worst case of the flip is searched in the FIRST constructions' architecture
#: (D = 12, L = 2, H = 1, F = 8), so that the constructions are starts.
WORST_ARCH = dict(D=12, L=2, H=1, F=8)


def _ladder(c, make, x, box):
    """:func:`converged_influence` over the bits ``flip_bits(N, K)`` of ``x``, step sizes
    ``c["lr"]`` times ``box``, from ``c["steps"]`` steps doubling up to ``c["cap"]``: the
    JSON-able record of every run (``steps``, ``start``, ``ends``, ``best``, ``converged``;
    ``end`` the last run's) and the last run's model."""
    r = converged_influence(make, x, flip_bits(c["N"], c["K"]), steps=c["steps"], cap=c["cap"],
                            lr=(c["lr"][0] * box, c["lr"][1] * box), box=box)
    rec = {"steps": r["steps"], "start": enc(r["start"]), "end": enc(r["ends"][-1]),
           "ends": [enc(e) for e in r["ends"]], "best": r["best"], "converged": r["converged"]}
    return rec, r["model"]


def _best_theta(make, model, start, end):
    """The one theta (a population of 1) with the largest flip among a run's starts (before the
    search: rebuilt by ``make``) and ends (``model``)."""
    i, j = int(start.argmax()), int(end.argmax())
    return make().select([i]) if start[i] > end[j] else model.select([j])


def _regime(m, x):
    """:func:`sensbook.mechanism.eos_regime` of one theta on ``x`` and ``x`` with its largest
    flip's bit flipped: the JSON-able record (``att`` per layer, ``z`` per layer norm, the
    ``regime``)."""
    dT = flip_hinge(m, x, blowups=False)["dT"][0, 0]
    xs = x.repeat(2, 1)
    xs[1, int(dT.argmax())] = 1 - xs[1, int(dT.argmax())]
    r = eos_regime(m, xs)
    return dict(att=r["att"][0].tolist(), z=r["z"][0].tolist(), regime=r["regime"][0])


def box_scan_one(c: dict) -> dict:
    """The box scan: the largest flip over theta in [-B, B]^M (``c["B"]``) at length ``c["N"]``
    and layer-norm ``c["eps"]``, in the worst-case architecture, run to convergence
    (:func:`_ladder`). Starts: the hard-attention FIRST construction scaled by B (its scores
    scale by B^2; only with the feature 1[n = 1], ``c["mark_first"]``), the danger-zone
    threshold on the string's count of ones (:func:`count_threshold_transformer`: the flip
    2 B D at eps = 0, the most the box allows, so the lower bound there does not rest on the
    search), then ``c["P"]`` uniform points of the box. Returns the ladder's record, ``gap``
    (the scaled construction's score gap, :func:`score_gap`; 0 without the feature) and
    ``n_fixed`` (how many analytic starts precede the random ones) and ``end_ratio`` (per
    start): max over the N bits of Lemma 2.9's ratio N |Delta T_i| / (beta(x) beta(x xor e_i))
    at the last run's end, with the measured blowups (a lower bound on its constant C).

    With ``c["more"]`` (a cell a conclusion reads) the cell is checked (``check``): from the
    same analytic starts and ``c["P"] + c["more"]`` random ones, :data:`CHECK` ``["long"]``
    times the ladder's last step count with its decaying step sizes, and ``["span"]`` times at
    the constant step size ``["constant"]`` B (a second schedule); ``check["best"]`` holds each
    run's best. ``mechanism``: what the theta of the largest flip found (over every run) uses
    at eos (:func:`_regime`), with ``value`` its flip."""
    B = c["B"]
    x = random_strings(c["N"], 1, seed=c["N"]).double()
    fixed = [count_threshold_transformer(int(x.sum()), c["N"], B=B).flat()]
    gap = 0.0
    if c["mark_first"]:
        hard = first_hard_transformer(eps=c["eps"], device=device())
        hard.set_flat(B * hard.flat())
        gap = score_gap(hard, c["N"]).item()
        fixed.insert(0, hard.flat())

    def starts(P):
        def make():
            rnd = Recognizer.random(P, eps=c["eps"], init="uniform", scale=B, seed=c["seed"],
                                    dtype=torch.float64, device=device(),
                                    mark_first=c["mark_first"], **WORST_ARCH)
            theta = torch.cat([f.to(rnd.flat()) for f in fixed] + [rnd.flat()])
            return rnd.like(len(theta)).set_flat(theta)
        return make
    make = starts(c["P"])
    rec, m = _ladder(c, make, x, B)
    h = flip_hinge(m, x)
    ratio = lemma29_ratio(c["N"], h["dT"][:, 0].double().cpu().numpy(),
                          h["beta_pair"][:, 0].double().cpu().numpy()).max(-1)
    top = (rec["best"][-1], _best_theta(make, m, dec(rec["start"]), dec(rec["end"])))
    out = {**rec, "gap": gap, "n_fixed": len(fixed), "end_ratio": enc(ratio)}
    if c.get("more"):
        last, bits = rec["steps"][-1], flip_bits(c["N"], c["K"])
        runs = [("decay", CHECK["long"] * last, (c["lr"][0] * B, c["lr"][1] * B)),
                ("constant", CHECK["span"] * last, (CHECK["constant"] * B,) * 2)]
        make = starts(c["P"] + c["more"])
        out["check"] = dict(schedule=[], steps=[], best=[])
        for name, steps, lr in runs:
            mv = make()
            start, end = maximise_influence(mv, x, bits, steps=steps, lr=lr, box=B)
            b = float(max(start.max(), end.max()))
            for k, v in zip(("schedule", "steps", "best"), (name, steps, b)):
                out["check"][k].append(v)
            if b > top[0]:
                top = (b, _best_theta(make, mv, start, end))
    out["mechanism"] = {**_regime(top[1], x), "value": float(top[0])}
    return out


def recognition_one(c: dict) -> dict:
    """What each of ``c["P"]`` models computes on all 2^N strings (0/1 lists, one per
    model): ``decided`` (every |T| >= margin), ``nonconstant`` / ``constant``
    (recognised with margin, both labels / one), ``sign_nonconstant`` (both signs of T
    occur: margin 0, where no string can be undecided); ``influence``: max over all
    strings and bits of one flip's effect on T; ``distinct``: the number of distinct
    functions recognised with margin."""
    m = _model(c, c["P"], c["seed"])
    r = recognition(m, c["N"], c["margin"])
    T = r.T
    if not torch.isfinite(T).all():
        raise ValueError("non-finite output: a layer-norm input of variance 0")
    as01 = lambda b: b.int().cpu().tolist()
    return {
        "decided": as01(r.recognises),
        "nonconstant": as01(r.nonconstant),
        "constant": as01(r.constant),
        "sign_nonconstant": as01((T > 0).any(-1) & (T < 0).any(-1)),
        "influence": enc(r.influence.double().cpu().numpy()),
        "distinct": distinct_functions(r.table.cpu()),
    }


def lipschitz_one(c: dict) -> dict:
    """Max over ``c["B"]`` strings of ||grad_theta T||_1, per model (Lemma 3.1)."""
    m = _model(c, c["P"], c["seed"])
    lip = lipschitz_theta(m, random_strings(c["N"], c["B"], seed=c["N"])).amax(1)
    return {"lipschitz": enc(lip.cpu().numpy())}


def _ch3_worst_configs(scale):
    P, steps, seeds = pick(
        scale, ci=(2, 200, 1), book=(4, 300, 2), paper=(16, 1000, 4)
    )
    return [
        dict(eps=e, P=P, steps=steps, N=16, lr=[0.05, 1e-7], seed=s, **ARCH)
        for e in (0.0, 1e-4, 1e-2, 1e-1)
        for s in range(seeds)
    ]


#: Every worst-case flip search runs to convergence (:func:`converged_influence`): ``steps``
#: first, doubled until the best flip changes by less than 10 %, censored past ``cap``. Step
#: sizes (times the box's half-width B) decay from LR[0] to LR[1] over each run.
#: At eps = 0 the danger-zone start already reaches the box's ceiling 2 B D, so the ladder
#: starts at half the steps there. Without the feature 1[n = 1] the long cells need more
#: doublings (at book scale B = 0.125, N = 128 converges at 1920 steps): ``cap_unmarked``.
LADDER = dict(ci=dict(steps=60, cap=240, cap_unmarked=1920),
              book=dict(steps=60, cap=240, cap_unmarked=1920),
              paper=dict(steps=150, cap=1200, cap_unmarked=9600))
LR = [0.5, 0.01]

#: The box scan: half-widths B of the box, layer-norm eps and lengths N per scale (N = 256
#: and beyond at ``paper`` only: at ``book`` it cost 205 of the main job's CPU seconds).
#: ``unmarked``: the B at which the scan also runs without the feature 1[n = 1] (eps = 0 and
#: 0.1 at B = 1, eps = 0.1 below). ``check``: the (B, eps) cells (with the feature) that a
#: conclusion of the chapter reads as converged, searched again (:data:`CHECK`) from ``more``
#: further random starts; every other cell is a lower bound only.
BOX = dict(
    ci=dict(B=[0.03, 1.0], eps=[0.0, 0.1], Ns=[8, 32, 128], P=2, unmarked=[1.0],
            check=[(0.03, 0.1)], more=2),
    book=dict(B=[0.03, 0.06, 0.125, 1.0], eps=[0.0, 0.1], Ns=[8, 32, 128], P=3,
              unmarked=[0.125, 1.0], check=[(0.03, 0.1)], more=3),
    paper=dict(B=[0.03, 0.045, 0.06, 0.09, 0.125, 0.18, 0.25, 0.35, 0.5, 0.7, 1.0],
               eps=[0.0, 0.01, 0.1, 1.0], Ns=[8, 32, 128, 256, 512, 1024], P=8,
               unmarked=[0.06, 0.125, 0.25, 1.0],
               check=[(B, e) for B in (0.03, 0.06, 0.125, 1.0) for e in (0.01, 0.1, 1.0)],
               more=8),
)
#: The check of a cell a conclusion reads: a run ``long`` times the ladder's last step count
#: with the ladder's decaying step sizes, and one ``span`` times it at the constant step size
#: ``constant`` B (a second schedule), both from more starts. The cell is *converged* when the
#: ladder's last run and both agree within 10 %; otherwise it is still rising (a lower bound).
CHECK = dict(long=5, span=2, constant=0.05, tol=0.1)


def _ch3_box_configs(scale):
    """Every (B, eps, N) of ``BOX`` with the feature 1[n = 1]; and without it (its ablation)
    at the ``unmarked`` B: eps = 0 and 0.1 at B = 1, eps = 0.1 below. ``more`` > 0 on the
    checked cells."""
    s, lad = pick(scale, **BOX), pick(scale, **LADDER)

    def one(B, e, N, mark):
        steps = lad["steps"] // 2 if e == 0 else lad["steps"]
        more = s["more"] if mark and (B, e) in s["check"] else 0
        return dict(B=B, eps=e, N=N, P=s["P"], K=4, lr=LR, seed=N, mark_first=mark,
                    steps=steps, cap=lad["cap" if mark else "cap_unmarked"], more=more,
                    **WORST_ARCH)
    return ([one(B, e, N, True) for B in s["B"] for e in s["eps"] for N in s["Ns"]]
            + [one(B, e, N, False) for B in s["unmarked"] for e in EPS
               if B == 1.0 or e > 0 for N in s["Ns"]])


def box_curves(configs, results) -> dict:
    """The box scan as {(B, eps, mark_first): cell}, each cell a dict of arrays over its lengths
    ``Ns``: ``ladder`` the largest flip max_i |Delta T_i| found over all starts by the ladder's
    last run, ``prev`` that of the run before it (half the steps), ``stalled`` (bool per N:
    the ladder's doubling changed it by < 10 %), ``checked`` (a second search ran:
    ``check_best`` (len(Ns), 2) its two runs' best, NaN where none), ``converged`` (checked,
    and the ladder's last and both check runs agree within ``CHECK["tol"]``: every other
    length is a lower bound, still rising or unchecked), ``best`` the largest flip found by
    any run (a lower bound on the worst case), ``steps`` (the ladder's last run's), ``starts``
    (len(Ns), n) each start's best (the analytic starts first), ``random_start``, ``random``
    and ``random_prev`` (len(Ns), P) the random starts' values before the search and at the
    end of the ladder's last two runs, ``end_ratio`` (len(Ns),) the largest Lemma 2.9 ratio
    at the last run's ends, ``att`` (len(Ns), L) and ``z`` (len(Ns), 2L) the largest eos
    attention weight per layer and eos layer-norm z of the theta of ``best``, ``regime``
    (list) its name (:func:`sensbook.mechanism.eos_regime`), and ``ceiling`` = 2 B D, the
    largest flip any theta of the box allows (:func:`count_threshold_transformer` reaches it at
    eps = 0)."""
    cells = {}
    for c, r in zip(configs, results):
        cells.setdefault((c["B"], c["eps"], c["mark_first"]), []).append((c, r))
    out = {}
    for k, rows in cells.items():
        rows.sort(key=lambda t: t[0]["N"])
        nf = rows[0][1]["n_fixed"]
        both = lambda r, i: np.maximum(dec(r["start"]), dec(r["ends"][i]))
        ladder = np.array([r["best"][-1] for _, r in rows])
        chk = np.array([r["check"]["best"] if "check" in r else [np.nan] * 2 for _, r in rows])
        runs = np.column_stack([ladder, chk])
        agree = np.nanmax(runs, 1) - np.nanmin(runs, 1) < CHECK["tol"] * np.nanmax(runs, 1)
        mech = [r["mechanism"] for _, r in rows]
        out[k] = dict(Ns=np.array([c["N"] for c, _ in rows]), ladder=ladder,
                      best=np.nanmax(runs, 1), check_best=chk,
                      prev=np.array([r["best"][-2] for _, r in rows]),
                      stalled=np.array([r["converged"] for _, r in rows]),
                      checked=np.isfinite(chk).all(1),
                      converged=np.isfinite(chk).all(1) & agree,
                      steps=np.array([r["steps"][-1] for _, r in rows]),
                      end_ratio=np.array([dec(r["end_ratio"]).max() for _, r in rows]),
                      starts=np.stack([both(r, -1) for _, r in rows]),
                      random_start=np.stack([dec(r["start"])[nf:] for _, r in rows]),
                      random=np.stack([dec(r["ends"][-1])[nf:] for _, r in rows]),
                      random_prev=np.stack([dec(r["ends"][-2])[nf:] for _, r in rows]),
                      att=np.array([m["att"] for m in mech]), z=np.array([m["z"] for m in mech]),
                      regime=[m["regime"] for m in mech], ceiling=2 * k[0] * rows[0][0]["D"])
    return out


def crossover(cell) -> tuple | None:
    """N*: where the hard-attention line through the shortest length (N |Delta T| growing like
    N from its value there) reaches the value at the longest, N_max best(N_max) / best(N_min),
    with the range it takes over the ladder's last two runs at both lengths and the check's
    runs (the search's own uncertainty). None unless every length of the cell converged (its
    check agreeing: ``converged``) and N* lies inside (2 N_min, N_max / 2) (otherwise it
    brackets nothing: hard attention throughout, or the 1/N regime from the start)."""
    if not cell["converged"].all():
        return None
    Ns = cell["Ns"]
    runs = lambda j: [cell["best"][j], cell["prev"][j],
                      *np.asarray(cell.get("check_best", [[np.nan]] * len(Ns)))[j]]
    hi_, lo_ = [v for v in runs(-1) if np.isfinite(v)], [v for v in runs(0) if np.isfinite(v)]
    vals = [Ns[-1] * hi / lo for hi in hi_ for lo in lo_]
    n_star = Ns[-1] * cell["best"][-1] / cell["best"][0]
    if not 2 * Ns[0] < n_star < Ns[-1] / 2:
        return None
    return float(n_star), float(min(vals)), float(max(vals))


def first_unmarked_transformer(eps: float = 0.0, *, q_scale: float = 1.0) -> Recognizer:
    """Hard attention on x_1 without the feature 1[n = 1]: :func:`first_hard_transformer` with
    its key feature f = 1[n = 1] replaced by f = -(1 - 2 (n % 2)) - n/(N + 1) (+1 - n/(N + 1) at
    odd n, -1 - n/(N + 1) at even n), built from the two bounded features every position has;
    the query (W_q, b_q) times ``q_scale`` in (0, 1], which scales every eos score by exactly
    that. Every parameter stays in [-1, 1] and ``mark_first=False``. Position 1 leads position 3,
    its nearest rival, only through n/(N + 1): by a score gap c / (N + 1) (c proportional to
    ``q_scale``), so the eos weight on x_1 is near 1 while N << c and falls like c / N
    beyond: hard attention up to a length linear in the score range."""
    if not 0 < q_scale <= 1:
        raise ValueError(f"q_scale must be in (0, 1] (the box [-1, 1]), got {q_scale!r}")
    p, H = construction_parameters("FIRST_HARD")
    p = {k: np.array(v, float) for k, v in p.items()}
    D = p["tok"].shape[-1]
    f = int(np.flatnonzero(p["pos"][2] > 0)[0])     # the coordinate 1[n = 1] was written to
    p["pos"][2] = 0.0
    for row in (0, 1):                               # n/(N + 1), 1 - 2 (n % 2): weight -1 each
        p["pos"][row, f], p["pos"][row, f + D // 2] = -1.0, 1.0
    p["layers.1.Wq"] *= q_scale
    p["layers.1.bq"] *= q_scale
    return Recognizer.from_parameters(p, eps=eps, H=H, mark_first=False, device=device())


def eos_weight_on_first(model: Recognizer, N: int) -> tuple:
    """(w_1, gap): on the all-zeros and all-ones strings of length N, the smaller last-layer eos
    attention weight on position 1 (first head), and the smaller score lead of position 1 over
    position 3 (its nearest unmarked rival)."""
    x = torch.stack([torch.zeros(N), torch.ones(N)]).to(model.dtype)
    s, w = model.eos_attention(x)
    s, w = s[0, :, -1, 0], w[0, :, -1, 0]
    return w[:, 0].min().item(), (s[:, 0] - s[:, 2]).min().item()


# ---- marked against unmarked, edge against interior: dictators trained --------------------
#: DICTATOR x_i trained with the book's protocol as ``ch6.long`` trains FIRST (layer-norm eps
#: 1e-5, its checks and held-out strings), at i = 1 (the marked position: FIRST), 2 and N - 1
#: (unmarked, at an edge) and ceil(N/2) (unmarked, interior), ``seeds`` models per cell, at
#: most ``budget`` steps; the trained models are probed on ``probe`` held-out strings.
DICTATORS = dict(
    ci=dict(Ns=[13, 33], seeds=8, budget=300, probe=32),
    book=dict(Ns=[13, 33, 65], seeds=8, budget=600, probe=64),
    paper=dict(Ns=[13, 33, 65, 129], seeds=16, budget=3000, probe=256),
)
#: The dictators by kind: (name, position at length N).
DICTATOR_KINDS = {"x_1": lambda N: 1, "x_2": lambda N: 2, "x_mid": lambda N: -(-N // 2),
                  "x_last": lambda N: N - 1}
#: The contrasts the dictators decide: (name, kind a, kind b, what differs); b against a.
DICTATOR_CONTRASTS = (("mark", "x_1", "x_2", "marked x_1 against unmarked x_2, one edge"),
                      ("edges", "x_2", "x_last", "x_2 against x_(N-1): the two edges"),
                      ("interior", "x_2", "x_mid", "edge x_2 against interior x_mid"),
                      ("interior, other edge", "x_last", "x_mid",
                       "edge x_(N-1) against interior x_mid"))


def dictator_positions(N: int) -> list:
    """The dictators trained at length N: x_1 (marked), x_2, x_ceil(N/2) and x_(N-1)
    (unmarked), in the order of :data:`DICTATOR_KINDS`."""
    return [k(N) for k in DICTATOR_KINDS.values()]


def dictator_cells(configs, results) -> dict:
    """{(kind, N): cell} of ``ch3.dictators``: ``steps`` (inf: censored), ``budget``,
    ``checked_before`` (the check before each learned seed's step: it learned in
    (checked_before, steps]), ``learned``, ``seeds`` and ``w`` (the eos weight on x_i)."""
    out = {}
    for c, r in zip(configs, results):
        N = c["N"]
        kind = next(k for k, at in DICTATOR_KINDS.items() if at(N) == c["i"])
        t = np.array([np.inf if s is None else s for s in r["steps"]], float)
        ev = np.array(eval_schedule(r["budget"], c["eval_every"], c["eval_growth"]), float)
        out[kind, N] = dict(steps=t, budget=r["budget"], w=np.array(r["w_i"]),
                            checked_before=np.array([ev[ev < s].max(initial=0.0)
                                                     if np.isfinite(s) else 0.0 for s in t]),
                            learned=int(np.isfinite(t).sum()), seeds=len(t))
    return out


def dictator_contrasts(cells: dict) -> list:
    """Each contrast of :data:`DICTATOR_CONTRASTS` at each length (``cells``:
    :func:`dictator_cells`), b against a as censored samples
    (:func:`sensbook.survival.censored_contrast`, interval-censored on the check grid):
    ``name``, ``N``, ``what``, log-rank ``z`` (< 0: b learns later), ``p``, the factor on b's
    steps with its 95% interval (None where a cell has no learned seed), ``learned``."""
    out = []
    for N in sorted({N for _, N in cells}):
        for name, a, b, what in DICTATOR_CONTRASTS:
            rs = (cells[a, N], cells[b, N])
            res = censored_contrast(
                np.concatenate([np.minimum(r["steps"], r["budget"]) for r in rs]),
                np.concatenate([np.isfinite(r["steps"]) for r in rs]),
                np.concatenate([np.full(r["seeds"], float(j)) for j, r in enumerate(rs)]),
                lower=np.concatenate([r["checked_before"] for r in rs]))
            out.append(dict(res, name=name, N=N, a=a, b=b, what=what,
                            learned=tuple(r["learned"] for r in rs),
                            seeds=tuple(r["seeds"] for r in rs)))
    return out


def _ch3_dictator_configs(scale):
    s = pick(scale, **DICTATORS)
    pr = Protocol(steps=s["budget"], batch=64, lr=1e-3, eps=1e-5).to_dict()
    return [dict(N=N, i=i, seeds=list(range(s["seeds"])), protocol=pr, criterion=0.99,
                 eval_every=10, eval_growth=0.1, n_test=512, probe=s["probe"])
            for N in s["Ns"] for i in dictator_positions(N)]


def dictator_one(c: dict) -> dict:
    """Train DICTATOR x_i (``c["i"]``) at length ``c["N"]`` (:func:`sensbook.train.learn`:
    accuracy on ``n_test`` held-out strings checked at :func:`eval_schedule`; a seed that
    never reaches ``criterion`` within the budget is censored, None). Returns ``steps`` (per
    seed), ``budget``, ``accuracy`` (held-out, of the trained models), and on ``probe``
    other held-out strings ``w_i``: per seed the eos query's mean attention weight on
    position i in the last layer (the largest over heads), and ``flip_i`` / ``flip_other``:
    the mean |Delta T| of flipping bit i, and the largest mean over bits 1, N/2 and N other
    than i."""
    N, i = c["N"], c["i"]
    f, pr, seeds = Dictator(i), Protocol.from_dict(c["protocol"]), c["seeds"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = init_population(seeds, pr, device=device())
        run = learn(model, f, N, seeds, pr, criterion=c["criterion"], n_test=c["n_test"],
                    checks=eval_schedule(pr.steps, c["eval_every"], c["eval_growth"]),
                    drop_learned=True)
        x = held_out_strings(N, c["probe"], seed=1)
        others = sorted({0, N // 2, N - 1} - {i - 1})
        with torch.no_grad():
            _, w = model.eos_attention(x)                       # (P, B, L, H, N+1)
            dT = flip_hinge(model, x, [i - 1] + others, blowups=False)["dT"].mean(1)
    finally:
        torch.set_num_threads(threads)
    np_ = lambda t: t.double().cpu().numpy().tolist()
    return dict(steps=run["steps"], budget=pr.steps,
                accuracy=accuracy(model, f, N, n_test=c["n_test"]).tolist(),
                w_i=np_(w[:, :, -1, :, i - 1].mean(1).amax(-1)),
                flip_i=np_(dT[:, 0]), flip_other=np_(dT[:, 1:].amax(-1)))


#: The lengths of ``ch3.influence``. ``book`` stops at 1024 as ``ci`` does: N = 2048 cost 12 CPU s
#: a cell on AVX-512 and 55 on the kernels without vectors (attention over 2049 positions),
#: and the fitted slope's interval moved by 0.01 without it (issue 43); ``paper`` goes on.
N_INF = dict(
    ci=[16, 32, 64, 128, 256, 512, 1024],
    book=[16, 32, 64, 128, 256, 512, 1024],
    paper=[16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
)
N_LIP = dict(
    ci=[8, 32, 128, 512],
    book=[8, 32, 128, 512, 1024],
    paper=[8, 32, 128, 512, 2048, 8192],
)


def _ch3_influence_configs(scale):
    P, B, K = pick(scale, ci=(16, 2, 8), book=(24, 2, 8), paper=(128, 8, 32))
    return [
        dict(eps=e, N=N, P=P, B=B, K=K, seed=0, **ARCH)
        for e in EPS
        for N in N_INF[scale]
    ]


def _ch3_recognition_configs(scale):
    P, N_max = pick(scale, ci=(400, 9), book=(1000, 10), paper=(20000, 13))
    return [
        dict(eps=e, N=N, P=P, margin=0.02, seed=3, **ARCH)
        for e in EPS
        for N in range(1, N_max + 1)
    ]


def _ch3_lipschitz_configs(scale):
    P, B = pick(scale, ci=(16, 2), book=(24, 2), paper=(128, 8))
    return [
        dict(eps=e, N=N, P=P, B=B, seed=5, **ARCH)
        for e in EPS
        for N in N_LIP[scale]
    ]


# cost models: CPU-seconds of one thread, constants fitted on ci runs (`sensbook
# calibrate`)
def _work(c, S):
    """Forward work of one string of S positions for one model of the chapter-3
    architecture."""
    return S * (S + 8 * c["D"]) * c["D"] * c["L"]


def _worst_cost(c):
    return 0.2 + 5.0e-8 * c["P"] * c["steps"] * _work(c, c["N"] + 1)


def _box_cost(c):
    """The ladder's steps: s + 2 s at eps = 0 (the danger-zone start sits at the ceiling),
    s + 2 s + 4 s otherwise (most cells need the second doubling), s + ... + 16 s without the
    feature 1[n = 1] from N = 128 on (at book scale those cells took 2 to 6 runs); a checked
    cell adds (long + span) times the ladder's last (4 s) from ``more`` further starts."""
    strings = 2 + len(flip_bits(c["N"], c["K"]))
    long_unmarked = not c["mark_first"] and c["N"] >= 128
    steps = c["steps"] * (3 if c["eps"] == 0 else 31 if long_unmarked else 7)
    step = lambda P: 3.5e-3 + 4.3e-10 * (P + 2) * strings * _work(c, c["N"] + 1)
    more = c.get("more", 0)
    check = 4 * c["steps"] * (CHECK["long"] + CHECK["span"]) * step(c["P"] + more) if more else 0
    return 0.3 + steps * step(c["P"]) + check


def _dictator_cost(c):
    """Seeds x batch strings of N + 1 positions a step, over the budget; the constants fitted
    on the ci and book runs (most cells stop well before the budget: the marked dictator and
    the short unmarked ones are learned early)."""
    P, N = len(c["seeds"]), c["N"]
    return 0.5 + c["protocol"]["steps"] * (2e-3 + 1e-6 * P * 64 * (N + 1) * (1 + (N + 1) / 100))


def _influence_cost(c):
    strings = c["B"] * (1 + len(flip_bits(c["N"], c["K"])))
    return 0.02 + 1.0e-10 * c["P"] * strings * _work(c, c["N"] + 1)


def _recognition_cost(c):
    return 0.05 + 4.0e-10 * c["P"] * 2 ** c["N"] * _work(c, c["N"] + 1)


def _lipschitz_cost(c):
    return 0.02 + 4.0e-10 * c["P"] * c["B"] * _work(c, c["N"] + 1)


register(
    Experiment(
        "ch3.worst_blowup",
        _ch3_worst_configs,
        "sensbook.experiments.ch3:worst_blowup_one",
        _worst_cost,
        doc="worst case over theta: gradient ascent on the blowup",
    )
)
register(
    Experiment(
        "ch3.box_scan",
        _ch3_box_configs,
        "sensbook.experiments.ch3:box_scan_one",
        _box_cost,
        doc="worst case of the flip over the box [-B, B]^M, per B, eps and N",
    )
)
register(
    Experiment(
        "ch3.dictators",
        _ch3_dictator_configs,
        "sensbook.experiments.ch3:dictator_one",
        _dictator_cost,
        doc="dictators on the marked x_1 and unmarked x_2, x_ceil(N/2), x_(N-1) trained "
            "against N",
    )
)
register(
    Experiment(
        "ch3.influence",
        _ch3_influence_configs,
        "sensbook.experiments.ch3:influence_one",
        _influence_cost,
        doc="max one-flip influence against N, eps = 0 and > 0",
    )
)
register(
    Experiment(
        "ch3.recognition",
        _ch3_recognition_configs,
        "sensbook.experiments.ch3:recognition_one",
        _recognition_cost,
        doc="what random models recognise on all 2^N strings, eps = 0 and > 0",
    )
)
register(
    Experiment(
        "ch3.lipschitz",
        _ch3_lipschitz_configs,
        "sensbook.experiments.ch3:lipschitz_one",
        _lipschitz_cost,
        doc="Lipschitz constant in theta against N",
    )
)
