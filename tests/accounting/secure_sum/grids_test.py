"""Tests for the distance grids and order ladder (secure_sum/grids.py)."""

import math

import numpy as np

from tff_quant import mechanisms
from tff_quant.accounting import secure_sum
from tff_quant.accounting.secure_sum import targets
from tests.accounting.secure_sum import helpers


def test_order_ladder_rounds_up():
  orders = list(range(2, 65)) + [math.inf]
  rungs = secure_sum.order_ladder(orders)
  assert rungs[0] == 2 and rungs[-2] == 64 and rungs[-1] == math.inf
  assert len(rungs) < 20
  assert all(any(r >= a for r in rungs) for a in orders)


def test_lattice_grid_keeps_every_target_on_a_critical_input():
  """On a lattice of critical inputs `l2_grid` is every breakpoint: the
  targets are the critical inputs only (no mixed rows), nothing is off the
  lattice, every interval takes the chord, and the bound at u* is below the
  focused grid's (chords, not steps); it still bounds random pairs within
  each t, the others anywhere."""
  mech, n = mechanisms.QMGeo(1.0, 32, 0.2, full_support=True), 3
  t_star = 0.9
  grid = secure_sum.l2_grid(mech, t_star, 24, n)
  assert grid.size == 31 and secure_sum.off_lattice(mech, grid) == 0
  assert secure_sum.off_lattice(mech, 24) == 0
  assert secure_sum.off_lattice(mech, secure_sum.focused_grid(1.0, t_star, 24)) > 0
  targets = secure_sum.target_pairs(mech, grid)
  assert targets.upper_weights.shape[0] == 32 and len(targets.pairs) == 32**2
  curve = secure_sum.divergence_curve(mech, helpers.ORDERS, n, t_grid=grid)
  assert np.all(curve.convex_on)
  focused = secure_sum.divergence_curve(mech, helpers.ORDERS, n,
                                        t_grid=secure_sum.focused_grid(1.0, t_star, 24))
  for alpha in (2.0, 8.0):
    assert curve.majorant(alpha, t_star**2) < focused.majorant(alpha, t_star**2)
  rng = np.random.default_rng(3)
  for s, t in enumerate(curve.t[::5]):
    for _ in range(4):
      x = rng.uniform(-1, 1)
      x_prime = float(np.clip(x + rng.uniform(-t, t), -1, 1))
      others = list(rng.uniform(-1, 1, n - 1))
      for alpha in (2.0, 8.0):
        true = helpers.exact(mech, x, x_prime, others, alpha)
        bound = curve.values[alpha][5 * s]
        assert true <= bound * (1 + 1e-9) + 1e-12, (t, x, x_prime)
