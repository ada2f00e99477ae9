"""The attack on a box of parameters (sensbook/attack.py): it finds violations built into a
model, and never one inside a box that sensbook/certify.py certified."""
import math

import numpy as np
import pytest
import torch

import sensbook as sb

from sensbook.attack import attack, attack_radius
from sensbook.certify import certified_radius, certify, output_bounds
from sensbook.constructions import target
from sensbook.experiments import ch5_certified as cc


@pytest.fixture(autouse=True)
def _gradients_off():
    """Each test runs with gradients off (the attack turns them on where it needs them), and
    the switch is undone after it: a module-level ``torch.set_grad_enabled(False)`` stayed off
    for every later test in the same worker and broke training there."""
    with torch.no_grad():
        yield


def _constant_model(delta, eps=0.1):
    """All parameters 0 but the read-out bias omega = delta: T(theta0, x) = delta on every
    string (LN_eps(0) = 0); moving omega alone by -r gives T = delta - r, a violation of the
    all-accept labels exactly when r >= delta."""
    m = sb.Recognizer(1, 4, 1, 1, 4, eps=eps, dtype=torch.float64)
    names = [n for n, _ in m.named_parameters()]
    sizes = [p[0].numel() for _, p in m.named_parameters()]
    i = names.index("omega")
    theta = torch.zeros(1, m.M, dtype=torch.float64)
    theta[0, sum(sizes[:i])] = delta
    return m.set_flat(theta)


@pytest.mark.parametrize("delta", [0.05, 0.3])
def test_finds_the_violation_built_into_a_model(delta):
    m = _constant_model(delta)
    x = sb.strings(4, dtype=torch.float64)
    y = torch.ones(len(x), dtype=torch.bool)
    assert torch.allclose(m(x)[0], torch.full((16,), delta, dtype=torch.float64))
    below = attack(m, x, y, 0.8 * delta, starts=4, corners=8, steps=20)
    above = attack(m, x, y, 1.2 * delta, starts=4, corners=8, steps=20)
    # the attack reaches at least the omega-only point: worst <= delta - r
    assert below["worst"] <= 0.2 * delta + 1e-12
    assert above["violated"] and above["worst"] <= -0.2 * delta + 1e-12
    # the worst theta lies in the box and really has that output
    th = above["theta"]
    assert (th - m.flat()[0]).abs().max() <= 1.2 * delta + 1e-12
    T = m.like().set_flat(th[None])(x)[0]
    assert abs(float(T.min()) - above["worst"]) < 1e-9
    up = attack_radius(m, x, y, r_start=1e-3, rtol=0.05, starts=4, corners=8, steps=20)
    assert up["r_ok"] < up["r_up"] <= delta * 1.05 + 1e-12
    # and the certificate agrees from below: certified r <= delta (omega alone breaks it)
    cr = certified_radius(m, x, y, rtol=0.01)
    assert 0 < cr["radius"] <= up["r_up"] <= delta * 1.05 + 1e-12


@pytest.mark.parametrize("name,N", [("MAJORITY", 5), ("FIRST_HARD", 3), ("PARITY", 3)])
def test_never_a_violation_inside_a_certified_box(name, N):
    m = cc.boxed_construction(name)
    x = sb.strings(N, dtype=torch.float64)
    y = target(name)(x)
    r = certified_radius(m, x, y, rtol=0.05)["radius"]
    assert r > 0
    a = attack(m, x, y, r, starts=8, corners=32, steps=15, seed=1)
    assert not a["violated"]
    # the attack's worst point lies above the interval bound of the same box, and below T0
    b = output_bounds(m, x, r)
    s = y.double() * 2 - 1
    lower = float(torch.where(y, b.lo, -b.hi).min())
    assert lower - 1e-9 <= a["worst"] <= float((m(x)[0] * s).min()) + 1e-12
    up = attack_radius(m, x, y, r_start=r, starts=8, corners=32, steps=15, seed=1)
    assert up["r_up"] > r and math.isfinite(up["r_up"])


@pytest.mark.parametrize("seed", range(4))
def test_random_models_certified_radius_below_attack_radius(seed):
    m = sb.Recognizer.random(1, 4, 1, 2, eps=0.05, seed=seed, dtype=torch.float64)
    x = sb.strings(4, dtype=torch.float64)
    y = m(x)[0] > 0
    cr = certified_radius(m, x, y, rtol=0.05)
    up = attack_radius(m, x, y, r_start=1e-4, starts=6, corners=16, steps=15, seed=seed)
    assert cr["radius"] <= up["r_up"]
    if cr["radius"] > 0:
        assert not attack(m, x, y, cr["radius"], starts=6, corners=16, steps=15)["violated"]


def test_bad_arguments_are_named():
    m = _constant_model(0.1)
    x = sb.strings(3, dtype=torch.float64)
    y = torch.ones(8, dtype=torch.bool)
    for kw, arg in ((dict(radius=-1.0), "radius"), (dict(radius=math.nan), "radius"),
                    (dict(radius=0.1, margin=-1.0), "margin"),
                    (dict(radius=0.1, starts=0), "starts"), (dict(radius=0.1, steps=1.5), "steps")):
        with pytest.raises((TypeError, ValueError), match=arg):
            attack(m, x, y, **kw)
    with pytest.raises(ValueError, match="labels"):
        attack(m, x, y[:3], 0.1)
    with pytest.raises(ValueError, match="rtol"):
        attack_radius(m, x, y, rtol=0.0)
    assert attack(m, x, y, np.float32(0.05), starts=2, corners=2, steps=2)["evaluations"] == 8
