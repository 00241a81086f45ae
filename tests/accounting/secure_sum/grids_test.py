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


def test_chord_grid_holds_t_star_and_ends_at_2c():
  for t_star in (0.01, 0.9, 2.0):
    grid = secure_sum.chord_grid(1.0, t_star, 32)
    assert np.all(np.diff(grid) > 0) and grid[0] > 0 and grid[-1] == 2.0
    assert np.min(np.abs(grid - t_star)) <= 1e-12
    assert grid.size <= 32


def test_chords_on_an_even_grid_keep_the_majorant_near_f_at_t_star():
  """QMGeo at 4 bits of the FL table (two vertices: the ±c mixes are f_α
  for any others), t* = 2/√d: on `l2_grid` (every interval takes the chord,
  evenly spaced below t*) ĝ at u* is within 1.2% of f̄(t*); on the
  geometric focused grid, 6.1% above it. Where the even grid's search would
  be over the cost limit, the narrow one has fewer points."""
  dim, n = 8192, 100
  c, t_star = 3 / math.sqrt(dim), 2 / math.sqrt(dim)
  mech = mechanisms.QMGeo(c, 16, 0.4583395600612428, full_support=True,
                          level_range=16 * c)
  grid = secure_sum.l2_grid(mech, t_star, 24, n)
  assert grid.size >= secure_sum.CHORD_POINTS
  assert secure_sum.l2_grid(mech, t_star, 24, n, wide=False).size < grid.size
  at = int(np.argmin(np.abs(grid - t_star)))
  assert abs(grid[at] - t_star) <= 1e-12
  curve = secure_sum.divergence_curve(mech, [2.0, 3.0], n, t_grid=grid)
  assert np.all(curve.convex_on)
  focused = secure_sum.divergence_curve(
      mech, [2.0, 3.0], n, t_grid=secure_sum.focused_grid(c, t_star, 24))
  for alpha in (2.0, 3.0):
    top = curve.values[alpha][at]
    assert top <= curve.majorant(alpha, t_star**2) <= 1.012 * top
    assert focused.majorant(alpha, t_star**2) > 1.05 * top
