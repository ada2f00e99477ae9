"""Run the chapters against deliberately broken copies of the package (``make mutants``).

Each mutant is one small edit of one file of ``sensbook/`` (a snippet that must occur in the
current source, so a mutant that no longer applies fails loudly instead of passing). For each
mutant this script copies the package into a scratch folder, applies the edit, and runs the
chapters at ``ci`` scale under nbval with that copy first on ``PYTHONPATH`` and an empty results
store (so nothing is read from results computed by the real package: the store's keys cover the
package's code anyway). Chapters run in the order given for the mutant (the chapter expected to
catch it first) and stop at the first failure.

A mutant is *caught* when some chapter fails; one that survives every chapter is a claim the book
does not really check, and the script exits 1. The README lists which chapter catches which.

A *must-survive* mutant (``must_survive=True``) is the opposite: a harmless perturbation (the
learning rate times 1 + 1e-6) that changes float32 training's trajectories by rounding only,
as another CPU's kernel path does (issue 43). Every chapter it names must still pass under it
(all are run); a chapter that fails has an assert decided by rounding, and the script exits 1.

    python tools/mutants.py                 # every mutant
    python tools/mutants.py idle-trainer    # one of them
    python tools/mutants.py --list
"""
from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str
    file: str                 # under sensbook/
    old: str                  # must occur in the current source
    new: str
    chapters: tuple           # the chapters to try, in order (file stems under book/)
    count: int = 1            # how many occurrences are replaced (0: all)
    must_survive: bool = False  # harmless: every chapter must still pass under it


#: The chapters whose asserts read training outcomes (the must-survive mutant runs them all)
TRAINING = ("ch3_eps_positive", "ch3_score_range", "ch6_training", "ch6_mechanism",
            "ch6_explanations", "ch7_controls")


MUTANTS = (
    Mutant("idle-trainer", "the trainer computes gradients but never updates the parameters",
           "train.py", "opt.step()", "pass  # mutant: no update", ("ch6_training",)),
    Mutant("ln-ignores-eps", "every layer norm ignores eps (computes LN_0 whatever eps is)",
           "model.py", "var + self._eps", "var + 0.0 * self._eps",
           ("ch2_transformer", "ch3_eps_positive", "ch3_score_range", "ch5_expressivity",
            "ch4_eps_zero"), count=0),
    Mutant("profiler-miscounts", "the profiler counts strings of sensitivity 1 as sensitivity 0",
           "profile.py", "    return h.reshape(*pop, N + 1)",
           "    h = h.reshape(*pop, N + 1).clone(); h[..., 0] += h[..., 1]; h[..., 1] = 0\n"
           "    return h",
           ("ch1_sensitivity", "ch2_transformer")),
    Mutant("construction-weight", "one weight of the PARITY construction changed",
           "constructions.py", "enumerate((1.0, -2.0, 1.0))", "enumerate((1.0, -2.0, 0.9))",
           ("ch5_expressivity",)),
    Mutant("perturb-ignores-sigma", "sb.perturb adds noise of a fixed size, whatever sigma is",
           "volume.py", "theta + sigma * noise", "theta + 1e-2 * noise",
           ("ch5_basins", "ch4_eps_zero")),
    Mutant("influence-wrong-position", "a flip of bit i is computed at bit i + 1 (mod N)",
           "geometry.py", "flips[torch.arange(1, len(bits) + 1), bits] = 1",
           "flips[torch.arange(1, len(bits) + 1), (bits + 1) % N] = 1",
           ("ch3_score_range", "ch4_eps_zero")),
    Mutant("search-wrong-objective", "the worst-case search maximises |T(x)|, not the flip",
           "hinge.py", "d = (T[:, 1:] - T[:, :1]).abs().amax(-1)",
           "d = T[:, :1].abs().amax(-1)", ("ch3_score_range",)),
    Mutant("census-ignores-eps", "the K_0 census at eps > 0 runs at eps = 0",
           "experiments/ch5.py", "    sub.eps = eps\n", "    sub.eps = 0.0\n",
           ("ch5_basins",)),
    Mutant("after-is-initial", "the after-training profiles are computed on the initial models",
           "experiments/ch6_training.py", "    after = _profiles(model, f, N, config, n_test)",
           "    after = _profiles(init_population(seeds, pr, device=dev, dtype=dtype), f, N,\n"
           "                      config, n_test)  # mutant",
           ("ch6_training",)),
    Mutant("sparse-is-parity", "every m-sparse PARITY target is silently the full PARITY",
           "boolean.py", "return (sparse_parity if cls == \"parity\" else sparse_majority)(range(1, m + 1))",
           "return PARITY if cls == \"parity\" else sparse_majority(range(1, m + 1))",
           ("ch6_explanations",)),
    Mutant("logging-moves-weights", "logging the gradient signal nudges the parameters",
           "train.py", "            signal[\"steps\"].append(step)\n",
           "            signal[\"steps\"].append(step)\n"
           "            [p.data.mul_(1 + 1e-6) for p in model.parameters()]  # mutant\n",
           ("ch6_explanations",)),
    Mutant("forecast-sees-scored-half", "the plateau's exit forecast fits its rate to the "
           "whole plateau, the half it scores included (a test that cannot lose)",
           "experiments/ch6_explanations.py",
           'm = h["first"] if fit_on == "first half" else np.ones(len(h["t"]), bool)',
           'm = np.ones(len(h["t"]), bool)  # mutant', ("ch6_explanations",)),
    Mutant("search-ignores-eps", "the worst-case flip search runs at eps = 0 whatever eps is",
           "hinge.py", "    model = _check_model(model)\n    x = torch.as_tensor(x).to(model.dtype)",
           "    model = _check_model(model)\n    model.eps = 0.0  # mutant\n"
           "    x = torch.as_tensor(x).to(model.dtype)", ("ch3_score_range",)),
    Mutant("search-ignores-steps", "the worst-case flip search runs a fixed 30 steps whatever "
           "step count it is given (so doubling the steps changes nothing)",
           "hinge.py", "ascend_in_box(model, log_flip, steps=steps,",
           "ascend_in_box(model, log_flip, steps=30,", ("ch3_score_range",)),
    Mutant("probe-wrong-layer-norm", "the mechanism probe reads the layer norms in reverse "
           "order (the first as the last)",
           "mechanism.py", "var.append(tr.variances[..., -1].double().cpu())",
           "var.append(tr.variances.flip(2)[..., -1].double().cpu())  # mutant",
           ("ch6_mechanism",)),
    Mutant("beta-sum-not-product", "the blowup beta sums the layer norms' factors tau instead "
           "of multiplying them (Lemma 2.9)",
           "model.py", "tau.prod(-1))", "tau.sum(-1))", ("ch4_eps_zero", "ch3_eps_positive")),
    Mutant("beta-max-not-product", "the blowup beta is the largest layer norm's factor tau, "
           "not the product over layer norms (Lemma 2.9)",
           "model.py", "tau.prod(-1))", "tau.amax(-1))", ("ch4_eps_zero", "ch3_eps_positive")),
    Mutant("frozen-norm-data-dependent", "sb.freeze_norms leaves each normaliser a function of "
           "the string (the intervention a no-op)",
           "interventions.py", "torch.where(m, c.expand_as(t), t)",
           "torch.where(m, t, t)  # mutant", ("ch6_mechanism",)),
    Mutant("bounds-ignore-layer-radius", "the certified bounds treat the first layer's "
           "parameters as points, whatever the radius",
           "certify.py",
           '    return {k.split(".")[-1]: v for k, v in boxes.items() if k.startswith(f"layers.{l}.")}',
           '    return {k.split(".")[-1]: (v if l else ((v[0] + v[1]) / 2,) * 2)  # mutant\n'
           '            for k, v in boxes.items() if k.startswith(f"layers.{l}.")}',
           ("ch5_certified",)),
    Mutant("splitting-level-fraction", "subset simulation counts each level's conditional "
           "fraction 1.5 times too large",
           "splitting.py", "log_v += math.log(k / n)", "log_v += math.log(1.5 * k / n)",
           ("ch5_certified",)),
    Mutant("readout-weight-ignores-omega", "the read-out score's last factor counts a w as "
           "recognising whenever some omega does (the interval's length dropped)",
           "splitting.py", "length.mean(1) / (2 * self.box)",
           "(length > 0).double().mean(1) / 1", ("ch5_certified",)),
    Mutant("affine-drops-taylor-remainder", "the affine-arithmetic bounds drop the Taylor "
           "remainder of exp, 1/v, v^(-1/2) and the square (each is replaced by its tangent: unsound)",
           "affine.py", "    k = d2f_max(lo, z.c + R) * R * R / 4",
           "    k = 0 * d2f_max(lo, z.c + R)  # mutant", ("ch5_certified",)),
    Mutant("layer-norm-drops-remainder", "the direct layer-norm rule of the affine bounds "
           "keeps its exact Jacobian but drops the second-derivative remainder (unsound)",
           "zonotope.py",
           "    rem = math.sqrt(D) * 2 / math.sqrt(3) * rho.square() * _remainder_weight(",
           "    rem = 0 * rho * _remainder_weight(  # mutant", ("ch5_certified",)),
    Mutant("attack-leaves-the-box", "the attack never projects back into the box, so it "
           "reports points outside it as the box's worst",
           "attack.py", "theta = torch.minimum(torch.maximum(theta, theta0 - r), theta0 + r)",
           "theta = theta  # mutant: no projection", ("ch5_certified",)),
)


MUTANTS += (
    Mutant("lr-one-part-in-a-million", "harmless: the learning rate times 1 + 1e-6 (float32 "
           "training's trajectories change by rounding, as on another CPU's kernel path)",
           "train.py", "lr=pr.lr, weight_decay", "lr=pr.lr * (1 + 1e-6), weight_decay",
           TRAINING, must_survive=True),
)


def apply(mutant: Mutant, pkg: pathlib.Path) -> None:
    path = pkg / mutant.file
    src = path.read_text()
    n = src.count(mutant.old)
    if n == 0 or (mutant.count and n < mutant.count):
        raise SystemExit(f"mutant {mutant.name}: {mutant.old!r} not found in sensbook/{mutant.file}"
                         " (the code moved: update tools/mutants.py)")
    path.write_text(src.replace(mutant.old, mutant.new, mutant.count or -1))


def run(mutant: Mutant, python: str, timeout: int) -> tuple:
    """(caught_by or None, seconds). A must-survive mutant runs every chapter it names and
    returns every failure (joined by '; ')."""
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as tmp:
        tmp = pathlib.Path(tmp)
        shutil.copytree(ROOT / "sensbook", tmp / "sensbook",
                        ignore=shutil.ignore_patterns("__pycache__"))
        apply(mutant, tmp / "sensbook")
        env = {**os.environ, "PYTHONPATH": f"{tmp}{os.pathsep}{ROOT}", "SENSBOOK_SCALE": "ci",
               "SENSBOOK_PROGRESS": "0", "SENSBOOK_RESULTS": str(tmp / "results"),
               "OMP_NUM_THREADS": "1"}
        where = subprocess.run([python, "-c", "import sensbook; print(sensbook.__file__)"],
                               env=env, capture_output=True, text=True, cwd=ROOT / "book")
        if not where.stdout.strip().startswith(str(tmp)):
            raise SystemExit(f"the mutated copy is not the one imported: {where.stdout}{where.stderr}")
        failed = []
        for ch in mutant.chapters:
            src = ROOT / "book" / f"{ch}.md"
            if not src.exists():
                raise SystemExit(f"mutant {mutant.name}: no chapter {src}")
            r = subprocess.run([python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                                "--nbval-lax", "--nbval-current-env", f"--nbval-cell-timeout={timeout}",
                                str(src)], env=env, cwd=ROOT, capture_output=True, text=True)
            if r.returncode != 0:
                failed.append(f"{ch} ({_reason(r.stdout)})")
                if not mutant.must_survive:
                    break
    return "; ".join(failed) or None, time.time() - t0


def _reason(out: str) -> str:
    """The failing cell and the first error line of a failed nbval run (so a mutant caught for
    an unrelated reason, e.g. an import error, is visible as such)."""
    import re

    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    cell = re.search(r"FAILED \S+::(Cell \d+)", plain)
    err = re.search(r"^(\w*(?:Error|Exception))\s", plain, flags=re.M)
    line = re.search(r"^-+> *\d+ (.*)$", plain[err.start():] if err else "", flags=re.M)
    return (f"{cell.group(1) if cell else '?'}, {err.group(1) if err else 'no error'} at: "
            f"{line.group(1).strip()[:90] if line else '?'}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="mutants to run (default: all)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--timeout", type=int, default=900, help="nbval cell timeout (s)")
    args = p.parse_args(argv)
    known = {m.name: m for m in MUTANTS}
    if args.list:
        for m in MUTANTS:
            print(f"{m.name:24s} sensbook/{m.file:18s} "
                  f"{'(must survive) ' if m.must_survive else ''}{m.what}")
        return 0
    unknown = [n for n in args.names if n not in known]
    if unknown:
        p.error(f"unknown mutant(s) {unknown}; known: {', '.join(known)}")
    survivors, rounding = [], []
    for m in [known[n] for n in args.names] or MUTANTS:
        caught, secs = run(m, sys.executable, args.timeout)
        if m.must_survive:
            verdict = (f"FAILED (must survive; an assert decided by rounding): {caught}" if caught
                       else "survived, as it must")
        else:
            verdict = "caught by " + caught if caught else "SURVIVED"
        print(f"{m.name:22s} {verdict} ({secs:.0f} s)", flush=True)
        if m.must_survive and caught:
            rounding.append(m.name)
        elif not m.must_survive and not caught:
            survivors.append(m.name)
    if survivors:
        print(f"{len(survivors)} mutant(s) survived: {', '.join(survivors)}")
    if rounding:
        print(f"{len(rounding)} harmless mutant(s) failed a chapter: {', '.join(rounding)}")
    if survivors or rounding:
        return 1
    print("every mutant was caught, and every harmless one survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
