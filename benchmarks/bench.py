"""sensbook benchmark (issue 6): `make bench`, or `python benchmarks/bench.py [--full]`.

Prints one table of figures measured in this run on this machine (CPU, and CUDA when present):

1. exhaustive profiles of random recognizers: (model x string) profiled per second, against a
   plain per-model, per-string, per-flip loop (one forward pass per string and per flip, as the
   literature did) over the same models, implemented here in two ways:
   *pkg loop* calls ``sb.Recognizer`` (P = 1) on one string at a time; *lean loop* is a minimal
   functional forward of the same parameters on one string (no checks, no batching);
2. sampled profiles at N = 256 and 1024: (strings x flips) evaluated per second;
3. training a population: P = 16 seeds in one batched model vs one after another (Adam + MSE);
3b. training until learned: each seed dropped at its first passage vs every seed to the last one's;
4. every figure as a fraction of the float32 matrix-multiply rate measured in this run (the
   column "% of the matmul rate": the FLOPs of the standard forward pass, every layer at every
   position, times the items per second, over that rate; training counts 3 forwards per step),
   beside the same model written as a naive batched forward and that forward torch.compile'd
   (BENCH_COMPILE=0 skips the compile), so "close to the limit" is read off one table;
   2b. (issue 37 item 15) sampled profiles of a BERT-shaped encoder at N = 256, all flips and
   ``bits=``, against the naive batched loop (one call per string with its N flips); and
   (issue 47 item 9) a flip-sharing forward of the same model (``bert_flip_sharing``: the
   embeddings and first-layer q, k, v computed for the string and its complement only, not
   for each of the N + 1 sequences), checked against the model's scores on the same strings;
5. the Fourier spectrum (``sb.spectral_weights``, the fast Walsh-Hadamard transform, O(N 2^N)
   per table): table entries per second, beside ``sb.profile_from_table`` (the profile from the
   same tables, the profiler's last step) and the profiler's model*strings/s of item 1.

Every figure is measured over a fixed amount of work (wall clock; ratios come from one run).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time

import torch
import torch.nn.functional as Fn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sensbook as sb  # noqa: E402


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


CLOCK = time.perf_counter


def timed(fn, device, reps=1):
    """Seconds per call of fn over ``reps`` calls (after one warm-up call), by ``CLOCK``: wall
    time, or with ``--clock cpu`` this process's CPU time (robust on a shared machine when
    running one thread)."""
    clock = time.perf_counter if device.type == "cuda" else CLOCK
    fn()
    sync(device)
    t = clock()
    for _ in range(reps):
        fn()
    sync(device)
    return (clock() - t) / reps


def matmul_rate(device, n=1024, reps=40):
    """FLOP/s of an n x n float32 matmul (the machine's dense rate, measured now)."""
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    if device.type == "cuda":
        n, reps = 8192, 20
        a = torch.randn(n, n, device=device)
        b = torch.randn(n, n, device=device)
    return 2 * n**3 / timed(lambda: a @ b, device, reps)


def forward_flops(N, D, L, F=None):
    """FLOPs of the standard forward pass on one string, one model: every layer at every one
    of the S = N+1 positions (Q, K, V, O projections, the FFN, scores and weighted sum)."""
    F = 4 * D if F is None else F
    S = N + 1
    return L * (2 * S * (4 * D * D + 2 * D * F) + 4 * S * S * D) + 2 * D


# ---- the plain loops (baselines) ----------------------------------------------------------------
def lean_forward(p, x, H, eps, phi):
    """One model (parameters p without the population axis), one string x (N,): the textbook
    post-LN forward, written plainly (what a per-string evaluation script does)."""
    h = p["tok"][torch.cat([x.long(), x.new_tensor([2]).long()])] + phi @ p["pos"]
    S, D = h.shape
    dh = D // H
    for l in range(len(p["layers"])):
        g = p["layers"][l]
        q = (h @ g["Wq"] + g["bq"]).reshape(S, H, dh).transpose(0, 1)
        k = (h @ g["Wk"] + g["bk"]).reshape(S, H, dh).transpose(0, 1)
        v = (h @ g["Wv"] + g["bv"]).reshape(S, H, dh).transpose(0, 1)
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(dh), -1) @ v
        h = Fn.layer_norm(h + a.transpose(0, 1).reshape(S, D) @ g["Wo"] + g["bo"], (D,), eps=eps)
        f = torch.relu(h @ g["W1"] + g["b1"]) @ g["W2"] + g["b2"]
        h = Fn.layer_norm(h + f, (D,), eps=eps)
    return h[-1] @ p["w"] + p["omega"]


def lean_params(model, i):
    d = {k: v[i].detach() for k, v in model.named_parameters()}
    layers = [{m: d[f"layers.{l}.{m}"] for m in ("Wq", "Wk", "Wv", "Wo", "bq", "bk", "bv", "bo",
                                                  "W1", "b1", "W2", "b2")}
              for l in range(model.L)]
    return {"tok": d["tok"], "pos": d["pos"], "w": d["w"], "omega": d["omega"], "layers": layers}


@torch.no_grad()
def loop_profile_rate(model, N, n_strings, device, kind, flips=None):
    """Strings profiled per second by the per-string, per-flip loop (model 0; every model costs
    the same), with labels checked against the batched profiler's truth table. With ``flips``,
    only the first ``flips`` flips are run and the rate is scaled to all N."""
    g = torch.Generator().manual_seed(1)
    xs = torch.randint(0, 2, (n_strings, N), generator=g).to(device)
    one = model.select(0)
    if kind == "lean":
        p = lean_params(model, 0)
        phi = sb.positional_features(N, device=device, dtype=model.dtype)
        T = lambda x: lean_forward(p, x, model.H, model.eps, phi)
    else:
        T = lambda x: one(x.unsqueeze(0).to(model.dtype))[0, 0]
    labels = []
    threads = torch.get_num_threads()

    def run():
        torch.set_num_threads(1)       # tiny per-string ops gain nothing from threads; on a
        try:                           # shared machine threads only make the loop slower
            _run()
        finally:
            torch.set_num_threads(threads)

    def _run():
        labels.clear()
        for x in xs:
            s_lab = []
            for n in range(-1, N if flips is None else flips):   # the string, then its flips
                y = x.clone()
                if n >= 0:
                    y[n] = 1 - y[n]
                s_lab.append(float(T(y)) > 0)
            labels.append(s_lab)

    dt = timed(run, device, 1)
    if flips is not None:
        dt *= (N + 1) / (flips + 1)
    return n_strings / dt, xs, labels


def naive_batched(model):
    """The same model written as a plain batched forward (what one writes first in PyTorch):
    every layer at every position for all P models and B strings in one pass, explicit
    softmax and layer norm, no tiling. Returns x (B, N) -> T (P, B)."""
    prm = dict(model.named_parameters())
    H, eps, L = model.H, model.eps, model.L

    def ln(d):
        c = d - d.mean(-1, keepdim=True)
        return c / torch.sqrt((c * c).mean(-1, keepdim=True) + eps)

    def forward(x, phi):
        P, D = prm["tok"].shape[0], prm["tok"].shape[-1]
        e0, e1, eos = prm["tok"][:, 0], prm["tok"][:, 1], prm["tok"][:, 2]
        h = e0[:, None, None] + x[None, :, :, None] * (e1 - e0)[:, None, None]
        h = torch.cat([h, eos[:, None, None].expand(P, x.shape[0], 1, D)], 2)
        h = h + torch.einsum("sf,pfd->psd", phi, prm["pos"])[:, None]
        B, S, dh = x.shape[0], x.shape[1] + 1, D // H
        for l in range(L):
            g = lambda n: prm[f"layers.{l}.{n}"]
            proj = lambda t, n, b: torch.einsum("pbsd,pde->pbse", t, g(n)) + g(b)[:, None, None]
            q, k, v = (proj(h, W, b).reshape(P, B, S, H, dh).transpose(2, 3)
                       for W, b in (("Wq", "bq"), ("Wk", "bk"), ("Wv", "bv")))
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), -1) @ v
            h = ln(h + proj(a.transpose(2, 3).reshape(P, B, S, D), "Wo", "bo"))
            h = ln(h + proj(torch.relu(proj(h, "W1", "b1")), "W2", "b2"))
        return (h[:, :, -1] * prm["w"][:, None]).sum(-1) + prm["omega"][:, None]
    return forward


def naive_rates(model, N, device, rate, rows, label, compile=True):
    """model*strings/s of the naive batched forward and of its torch.compile'd version on the
    same strings (a chunk of at most 1,024), as rows of the table."""
    x = sb.strings(N, 0, min(2**N, 1024), device=device)
    phi = sb.positional_features(N, device=device)
    f = naive_batched(model)
    with torch.no_grad():
        ref = model(x)
        assert torch.allclose(f(x, phi), ref, atol=1e-3), "the naive forward is another model"
        t = timed(lambda: f(x, phi), device, 1)
        n = model.P * x.shape[0]
        fl = forward_flops(N, model.D, model.L)
        rows.append((f"   naive batched forward, {label}", f"{n / t:,.0f} model*strings/s",
                     f"{100 * n * fl / t / rate:.0f}%", ""))
        print(*rows[-1], sep="  |  ", flush=True)
        if not compile or os.environ.get("BENCH_COMPILE", "1") == "0":
            return
        try:
            t0 = time.perf_counter()
            fc = torch.compile(f, dynamic=False)
            fc(x, phi)
            compile_s = time.perf_counter() - t0
            tc = timed(lambda: fc(x, phi), device, 1)
            rows.append((f"   torch.compile'd naive forward, {label}",
                         f"{n / tc:,.0f} model*strings/s (compiled in {compile_s:.0f} s wall)",
                         f"{100 * n * fl / tc / rate:.0f}%", ""))
        except Exception as e:                      # say why, keep the table
            rows.append((f"   torch.compile'd naive forward, {label}",
                         f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}", "", ""))
        print(*rows[-1], sep="  |  ", flush=True)


# ---- the four items -----------------------------------------------------------------------------
def profile_seconds(m, N, device, budget_strings):
    """Seconds for the exhaustive profile of m at N. If P 2^N exceeds ``budget_strings``, the
    truth table is timed on its first blocks only (the profiler's own per-chunk work: plan,
    strings, forward, classify) and scaled to all 2^N strings, plus the measured time of
    ``profile_from_table`` on a full table. Returns (seconds, fraction of strings evaluated)."""
    if m.P * 2**N <= budget_strings:
        reps = max(1, budget_strings // (16 * m.P * 2**N))
        return timed(lambda: sb.sensitivity_profile(m, N, progress=False), device, reps), 1.0
    from sensbook.boolean import index_to_strings
    from sensbook.profile import _evaluate, plan_chunk
    step = plan_chunk(m, N)
    n = max(step, (budget_strings // m.P) // step * step)

    def part():
        for a in range(0, n, step):
            idx = torch.arange(a, a + step, device=device)
            _evaluate(m, index_to_strings(idx, N, dtype=m.dtype), 0.0, step)
    t_table = timed(part, device, 1) * 2**N / n
    full = torch.randint(-2, 2, (m.P, 2**N), dtype=torch.int8, device=device)
    t_prof = timed(lambda: sb.profile_from_table(full), device, 1)
    return t_table + t_prof, n / 2**N


def emit(rows, *row):
    rows.append(row)
    print(*row, sep="  |  ", flush=True)


def exhaustive(device, rate0, args, rows):
    configs = [(10, 64, 4, 1), (10, 64, 4, 16), (12, 64, 2, 64), (16, 32, 2, 64)]
    for N, D, L, P in configs:
        m = sb.Recognizer.random(P=P, D=D, L=L, H=1, init="xavier_normal", seed=0, device=device)
        rate = matmul_rate(device)
        t, share = profile_seconds(m, N, device, 2**30 if args.full else 2**18)
        rate = (rate + matmul_rate(device)) / 2         # the matmul rate around this measurement
        ours = P * 2**N / t
        table = sb.truth_table(m.select(0), N, progress=False)[0]
        line = {}
        for kind, n in (("pkg", 20 if N <= 10 else 10), ("lean", 40 if N <= 10 else 20)):
            r, xs, labs = loop_profile_rate(m, N, n, device, kind)
            idx = sb.strings_to_index(xs.cpu())
            agree = all(bool(table[i] == 1) == l[0] for i, l in zip(idx.tolist(), labs))
            line[kind] = (r, agree)
        fl = forward_flops(N, D, L)
        part = "" if share == 1 else f" ({share:.0%} of strings timed, scaled)"
        label = f"N={N} D={D} L={L} H=1 P={P}"
        emit(rows, f"1. exhaustive profile, {label}", f"{ours:,.0f} model*strings/s, {t:.2f} s{part}",
             f"{100 * ours * fl / rate:.0f}%",
             f"x{ours / line['pkg'][0]:,.0f} vs pkg loop ({line['pkg'][0]:,.1f}/s), "
             f"x{ours / line['lean'][0]:,.0f} vs lean loop ({line['lean'][0]:,.1f}/s)"
             + ("" if line['pkg'][1] and line['lean'][1] else "  [LABELS DISAGREE]"))
        naive_rates(m, N, device, rate, rows, label, compile=D == 64 and P > 1)   # 2+ min each on a CPU


def sampled(device, args, rows, rate):
    for N, n in ((256, 16), (1024, 1)):
        m = sb.Recognizer.random(P=1, D=32, L=2, H=1, init="xavier_normal", seed=0, device=device)
        t = timed(lambda: sb.sensitivity_profile(m, N, n_samples=n, seed=0, progress=False), device, 1)
        ours = n * (N + 1) / t
        r, _, _ = loop_profile_rate(m, N, 1, device, "lean", flips=15)
        emit(rows, f"2. sampled N={N} D=32 L=2 P=1 ({n} strings)",
             f"{ours:,.0f} strings*flips/s in {t:.2f} s",
             f"{100 * ours * forward_flops(N, 32, 2) / rate:.1f}%",
             f"x{ours / (r * (N + 1)):,.1f} vs lean loop ({r * (N + 1):,.0f}/s, timed on 16 passes)")


def bert_flops(cfg, S):
    """FLOPs of one BERT forward on one sequence of S tokens (encoder layers only)."""
    D, F = cfg.hidden_size, cfg.intermediate_size
    return cfg.num_hidden_layers * (2 * S * (4 * D * D + 2 * D * F) + 4 * S * S * D)


def sampled_bert(device, args, rows, rate, N=256, n=2):
    """Issue 37 item 15: sampled profiles of a BERT-shaped encoder (hidden 256, 4 layers, 4
    heads) at N = 256, all flips and bits= (16 positions), against the naive batched loop:
    one call per sampled string on the string and its N flips."""
    try:
        import transformers
    except ImportError:
        emit(rows, "2b. sampled BERT-shaped N=256", "skipped: transformers is not installed", "", "")
        return
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=8, hidden_size=256, num_hidden_layers=4,
                                  num_attention_heads=4, intermediate_size=1024,
                                  max_position_embeddings=N + 8)
    model = transformers.BertForSequenceClassification(cfg).eval().to(device)
    clf = sb.TorchClassifier(model, tokens=(3, 4), prefix=[2])
    fl = bert_flops(cfg, N + 1)
    g = torch.Generator().manual_seed(0)
    xs = torch.randint(0, 2, (n, N), generator=g).float().to(device)

    def naive():
        with torch.no_grad():
            for x in xs:
                batch = x.repeat(N + 1, 1)
                batch[torch.arange(1, N + 1), torch.arange(N)] = 1 - x
                clf(batch)
    t_naive = timed(naive, device, 1)
    r_naive = n * (N + 1) / t_naive
    emit(rows, f"2b. naive batched loop, BERT-shaped N={N} (D=256, 4 layers)",
         f"{r_naive:,.1f} strings*flips/s", f"{100 * r_naive * fl / rate:.0f}%", "")
    t = timed(lambda: sb.sensitivity_profile(clf, N, n_samples=n, seed=0, progress=False), device, 1)
    ours = n * (N + 1) / t
    emit(rows, f"2b. sampled profile, all {N} flips", f"{ours:,.1f} strings*flips/s",
         f"{100 * ours * fl / rate:.0f}%", f"x{ours / r_naive:.2f} vs naive loop")
    # the flip-sharing forward on the same strings: checked against the model, then timed
    heads, pos = cfg.num_attention_heads, torch.arange(N, device=device) + 1      # after [CLS]
    ids = lambda x: torch.cat([torch.tensor([2], device=device), (x + 3).long()])  # noqa: E731

    def flip_batch(x):
        batch = x.repeat(N + 1, 1)
        batch[torch.arange(1, N + 1), torch.arange(N)] = 1 - x
        return batch

    for cls_only in (False, True):
        with torch.no_grad():
            gap = max(float((bert_flip_sharing(model, ids(x), pos, heads, cls_only)
                             - clf(flip_batch(x))).abs().max()) for x in xs)

        def sharing():
            with torch.no_grad():
                for x in xs:
                    bert_flip_sharing(model, ids(x), pos, heads, cls_only)
        r_share = n * (N + 1) / timed(sharing, device, 1)
        emit(rows, f"2b. flip-sharing forward{', last layer at [CLS] only' if cls_only else ''}"
             f", all {N} flips (max |T - T_model| {gap:.1e})", f"{r_share:,.1f} strings*flips/s",
             f"{100 * r_share * fl / rate:.0f}%", f"x{r_share / r_naive:.2f} vs naive loop")
    bits = list(range(1, 17))
    tb = timed(lambda: sb.sensitivity_profile(clf, N, n_samples=n, seed=0, bits=bits,
                                              progress=False), device, 1)
    emit(rows, "2b. sampled profile, bits= 16 positions", f"{n / tb:,.2f} sampled strings/s",
         f"{100 * n * 17 * fl / tb / rate:.0f}%",
         f"x{(n / tb) / (r_naive / (N + 1)):.1f} sampled strings/s vs naive loop (all flips)")


def _bert_layer(layer, q, k, v, h, heads):
    """One BERT encoder layer from its projections q, k, v (..., S, D) of its input h."""
    a = layer.attention
    sh = lambda t: t.unflatten(-1, (heads, -1)).transpose(-3, -2)          # (..., H, S, d)
    ctx = Fn.scaled_dot_product_attention(sh(q), sh(k), sh(v)).transpose(-3, -2).flatten(-2)
    h = a.output.LayerNorm(a.output.dense(ctx) + h)
    return layer.output.LayerNorm(layer.output.dense(layer.intermediate(h)) + h)


def bert_flip_sharing(model, ids, pos, heads, cls_only=False):
    """Issue 47 item 9: scores of the sequence ``ids`` (S,) and of its N flips (bit at token
    position ``pos[j]`` flipped, token 3 <-> 4) in one pass: the embeddings and the first
    layer's q, k, v of every position are computed twice (for the string and for its
    complement: all a flip can put there), not N + 1 times; each flip's rows are the string's
    with one row taken from the complement. The layers above see every position changed (the
    flipped token is attended to), so they run on all N + 1 sequences, as the naive loop does;
    with ``cls_only`` the last layer computes only the [CLS] row the pooler reads (its keys and
    values at every position)."""
    bert = model.bert
    both = torch.stack([ids, torch.where(ids == 3, 4, torch.where(ids == 4, 3, ids))])
    e = bert.embeddings(input_ids=both)                                     # (2, S, D)
    lay = bert.encoder.layer[0]
    sa = lay.attention.self
    qkv = [f(e) for f in (sa.query, sa.key, sa.value)]                      # (2, S, D) each
    n1, S = len(pos) + 1, ids.shape[0]
    rows = torch.arange(1, n1)

    def flipped(t):                                                         # (N+1, S, D)
        out = t[0].expand(n1, S, -1).clone()
        out[rows, pos] = t[1, pos]
        return out
    h = _bert_layer(lay, *map(flipped, qkv), flipped(e), heads)
    last = len(bert.encoder.layer) - 1
    for i, lay in enumerate(bert.encoder.layer[1:], 1):
        sa, hq = lay.attention.self, h[:, :1] if cls_only and i == last else h
        h = _bert_layer(lay, sa.query(hq), sa.key(h), sa.value(h), hq, heads)
    logits = model.classifier(bert.pooler(h))
    return logits[:, 1] - logits[:, 0]


def training(device, args, rows, rate, P=16, steps=20, N=10, D=64, L=4, batch=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 2, (batch, N), generator=g).float().to(device)
    y = (sb.PARITY(x).float() * 2 - 1).to(device)           # +-1 targets

    def train(model, n_steps):
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
        for _ in range(n_steps):
            opt.zero_grad(set_to_none=True)
            loss = ((model(x) - y) ** 2).mean(-1).sum()     # models independent: sum of losses
            loss.backward()
            opt.step()

    pop = sb.Recognizer.random(P=P, D=D, L=L, H=1, eps=1e-5, init="xavier_normal", seed=0, device=device)
    singles = [pop.select(i) for i in range(P)]
    together = timed(lambda: train(pop, steps), device, 1)
    one_by_one = timed(lambda: [train(s, steps) for s in singles], device, 1)
    fl = 3 * forward_flops(N, D, L) * batch                 # forward + backward per model-step
    emit(rows, f"3. training P={P} N={N} D={D} L={L} H=1 batch={batch}, Adam+MSE",
         f"together {P * steps / together:,.1f} model-steps/s, "
         f"one after another {P * steps / one_by_one:,.1f}",
         f"{100 * P * steps * fl / together / rate:.0f}% (together)", f"x{one_by_one / together:,.1f}")


def learning(device, args, rows, rate, N=17, seeds=8, budget=600):
    """3b. ``sb.learn`` until every seed has learned or the budget is spent, the book's protocol
    (a dictator on x_2, as ch3.dictators), with each seed dropped at its first passage
    (``drop_learned``) against all seeds training to the last one's: the same steps, checked."""
    f, pr = sb.Dictator(2), sb.Protocol(steps=budget, batch=64)
    checks = sb.eval_schedule(budget, 10, 0.1)
    out = {}
    for drop in (False, True):
        def run():
            m = sb.init_population(list(range(seeds)), pr, device=device)
            out[drop] = sb.learn(m, f, N, list(range(seeds)), pr, criterion=0.99, n_test=512,
                                 checks=checks, drop_learned=drop)
        out[drop, "t"] = timed(run, device, 1)
    assert out[True]["steps"] == out[False]["steps"], (out[True]["steps"], out[False]["steps"])
    steps = [s or budget for s in out[False]["steps"]]
    emit(rows, f"3b. learn {f} N={N}, {seeds} seeds, budget {budget} (steps {min(steps)}-"
         f"{max(steps)})", f"dropping learned seeds {out[True, 't']:.2f} s, keeping them "
         f"{out[False, 't']:.2f} s", "(same steps)",
         f"x{out[False, 't'] / out[True, 't']:,.2f} (work ratio {max(steps) * seeds / sum(steps):.2f})")


def fourier(device, args, rows):
    sizes = [(16, 64), (20, 8), (24, 1 if device.type == "cpu" and not args.full else 4)]
    for N, P in sizes:
        g = torch.Generator().manual_seed(N)
        tables = torch.randint(0, 2, (P, 2**N), generator=g, dtype=torch.int8).to(device)
        reps = max(1, 2**22 // (P * 2**N))
        t_w = timed(lambda: sb.spectral_weights(tables), device, reps)
        t_p = timed(lambda: sb.profile_from_table(tables), device, reps)
        emit(rows, f"5. Fourier spectrum N={N}, {P} tables",
             f"{P * 2**N / t_w:,.0f} entries/s ({t_w:.3g} s)", "(no matmul)",
             f"profile_from_table on the same tables {P * 2**N / t_p:,.0f} entries/s "
             f"({t_p:.3g} s): spectrum x{t_p / t_w:,.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true",
                    help="time the whole N=16, P=64 profile (minutes) instead of its first 2^12 strings")
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--cuda-only", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall time, or process CPU time (use with --threads 1 on a shared machine)")
    args = ap.parse_args()
    global CLOCK
    if args.clock == "cpu":
        CLOCK = time.process_time
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cuda_only and not torch.cuda.is_available():
        ap.error("--cuda-only: this machine has no CUDA device")
    devices = [] if args.cuda_only else [torch.device("cpu")]
    if torch.cuda.is_available() and not args.cpu_only:
        devices.append(torch.device("cuda"))
    t0 = time.perf_counter()
    for device in devices:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
            f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, {args.clock} clock"
        print(f"\n## sensbook {sb.__version__} benchmark on {device.type} ({name}), torch {torch.__version__}\n",
              flush=True)
        rate = matmul_rate(device)
        rows = []
        emit(rows, "matmul rate (1024^2 float32)" if device.type == "cpu" else "matmul rate (8192^2 float32)",
             f"{rate / 1e9:,.1f} GFLOP/s", "100%", "")
        exhaustive(device, rate, args, rows)
        sampled(device, args, rows, rate)
        sampled_bert(device, args, rows, rate)
        training(device, args, rows, rate)                       # the literature's size
        training(device, args, rows, rate, steps=40, D=16, L=2)   # a small model: overhead-bound
        learning(device, args, rows, rate)
        fourier(device, args, rows)
        print("\n| item | measured | % of the matmul rate | ratio |\n|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s wall, {time.process_time():.0f} s CPU")


if __name__ == "__main__":
    main()
