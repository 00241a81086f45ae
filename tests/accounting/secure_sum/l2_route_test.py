"""Tests for the ℓ2 route's round RDP (secure_sum/l2_route.py)."""

import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import calibration
from tff_quant.accounting import composition
from tff_quant.accounting import per_round
from tff_quant.accounting import secure_sum
from tests.accounting.secure_sum import helpers


def test_chord_bound_is_tighter_than_steps():
  """The chord bound on breakpoint-free intervals: the ℓ2 route's round RDP for
  RQM (16 levels, c = 3·clip/√d) drops by more than a quarter."""
  dim, clip = 400, 1.0
  mech = helpers.mech('rqm', c=3 * clip / math.sqrt(dim), num_levels=16, delta_ratio=4.0,
                      q=0.1)
  chords = secure_sum.vector_rdp(mech, [8.0], 10, dim, 2 * clip)
  u = 4 * clip**2 / dim
  grid = secure_sum.focused_grid(mech.input_bound, math.sqrt(u), 24)
  steps = secure_sum.divergence_curve(mech, [8.0], 10, t_grid=grid)
  steps.convex_on = None
  assert chords[8.0] < 0.75 * dim * steps.majorant(8.0, u)


def test_vector_rdp_reduces_to_the_coordinate_route():
  dim, clip = 50, 1.0
  mech = helpers.mech('rqm', c=clip / math.sqrt(dim))
  rdp = secure_sum.vector_rdp(mech, [2, 8, math.inf], 4, dim, 2 * clip, t_points=8)
  coord = per_round.per_round_rdp(mech, 4, dim, orders=[8])
  # Same d × full-flip value; targets over every critical input can only add.
  assert coord[2] * (1 - 1e-12) <= rdp[2] <= coord[2] * 1.01
  assert coord[8] * (1 - 1e-12) <= rdp[8] <= coord[8] * 1.01
  assert rdp[math.inf] == pytest.approx(coord[math.inf], rel=1e-9)


def test_l2_route_charges_a_fraction_of_the_range():
  dim, clip, n = 400, 1.0, 5
  wide = helpers.mech('rqm', c=3 * clip / math.sqrt(dim))
  l2 = secure_sum.vector_rdp(wide, [2, 8], n, dim, 2 * clip, t_points=12)
  full = per_round.per_round_rdp(wide, n, dim, orders=[8])
  assert l2[2] < 0.6 * full[2] and l2[8] < 0.6 * full[8]
  # Never below the truth at one admissible input pair: S/√d on every coordinate.
  t = 2 * clip / math.sqrt(dim)
  c = wide.input_bound
  for plus in range(n):
    others = [c] * plus + [-c] * (n - 1 - plus)
    assert dim * helpers.exact(wide, c, c - t, others, 2.0) <= l2[2] * (1 + 1e-9)


def test_accountant_takes_l2_clip():
  dim, clip, schedule = 400, 1.0, dict(rounds=5, clients_per_round=5,
                                       total_clients=100, delta=1e-5)
  wide = helpers.mech('rqm', c=3 * clip / math.sqrt(dim), q=0.1)
  g_l2 = composition.training_guarantee(wide, dim=dim, l2_clip=clip,
                                        orders=range(2, 17), **schedule)
  g_box = composition.training_guarantee(wide, dim=dim, orders=range(2, 17),
                                         use_pld=False, **schedule)
  assert g_l2.epsilon < g_box.epsilon
  assert 'ℓ2 route' in g_l2.assumptions and 'PLD route not used' in g_l2.pld_note
  narrow = helpers.mech('rqm', c=clip / math.sqrt(dim), q=0.1)
  same = composition.RoundAccountant(narrow, 5, 100, 1e-5, dim, range(2, 9),
                                     l2_clip=clip)
  assert not same.l2_route


def test_calibrate_with_l2_clip_meets_the_target():
  dim, clip = 200, 1.0
  schedule = dict(delta=1e-5, rounds=3, clients_per_round=4, total_clients=100,
                  dim=dim)
  mech = calibration.calibrate('rqm', 50.0, **schedule, l2_clip=clip,
                               coordinate_clip=3 * clip / math.sqrt(dim))
  assert mech.input_bound == pytest.approx(3 * clip / math.sqrt(dim))
  eps = composition.training_guarantee(mech, l2_clip=clip, use_pld=False,
                                       orders=calibration.FAST_ORDERS,
                                       **schedule).epsilon
  assert eps <= 50.0
  with pytest.raises(ValueError, match='coordinate_clip'):
    calibration.calibrate('rqm', 50.0, **schedule, clip=1.0, coordinate_clip=2.0)


@pytest.mark.parametrize('kwargs,match', [
    (dict(l2_sensitivity=0.0), 'l2_sensitivity'),
    (dict(l2_sensitivity=float('nan')), 'l2_sensitivity'),
    (dict(orders=[1.0]), 'orders'),
    (dict(dim=0), 'dim'),
])
def test_bad_input(kwargs, match):
  args = dict(mech=helpers.mech('rqm'), orders=[2], clients_per_round=2, dim=4,
              l2_sensitivity=1.0)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    secure_sum.vector_rdp(**args)
  with pytest.raises(ValueError, match='t_grid'):
    secure_sum.divergence_curve(helpers.mech('rqm'), [2], 2, t_grid=np.array([0.5, 1.0]))
  with pytest.raises(ValueError, match='l2_clip'):
    composition.RoundAccountant(helpers.mech('rqm'), 2, 10, 1e-5, 4, l2_clip=-1.0)
  for bad in (0, 1.5):
    with pytest.raises((ValueError, TypeError), match='`num_clients`'):
      secure_sum.with_breakpoints(helpers.mech('pbm'), secure_sum.distance_grid(1.0, 8), 64, bad)
    with pytest.raises((ValueError, TypeError), match='`num_clients`'):
      secure_sum.l2_grid(helpers.mech('rqm'), 0.1, 24, bad)


def test_the_even_grid_gives_way_where_its_search_is_over_the_limit():
  """With a limit between the costs of the wide and the narrow chord grids
  (QMGeo, 32 levels on ±4c, 8 others), vector_rdp searches every client on
  the narrow grid, where the wide one would drop some of the others."""
  dim, n = 400, 9
  c = 3 / math.sqrt(dim)
  mech = mechanisms.QMGeo(c, 32, 0.3, full_support=True, level_range=4 * c)
  t_star = 2 / math.sqrt(dim)
  orders = [2.0, 3.0]
  wide = secure_sum.l2_grid(mech, t_star, 24, n)
  narrow = secure_sum.l2_grid(mech, t_star, 24, n, wide=False)
  ops = [secure_sum.search_operations(mech, n, 2, secure_sum.off_lattice(
      mech, g), secure_sum.DEFAULT_CELLS) for g in (narrow, wide)]
  assert ops[0] < ops[1]
  limits = secure_sum.Limits(max_operations=(ops[0] + ops[1]) / 2)
  rdp = secure_sum.vector_rdp(mech, orders, n, dim, 2.0, limits=limits)
  assert not secure_sum.is_loose_method(rdp.method)
  over = secure_sum.divergence_curve(mech, orders, n, t_grid=wide,
                                     limits=limits)
  assert secure_sum.is_loose_method(over.method)


def test_an_orders_bound_does_not_depend_on_the_orders_asked_with_it():
  """A limit that affords the wide grid for two rungs but not for six: the
  low orders' bounds asked with many orders are those asked alone (the wide
  grid is still searched where it is affordable), and never above them."""
  dim, n = 400, 9
  c = 3 / math.sqrt(dim)
  mech = mechanisms.QMGeo(c, 32, 0.3, full_support=True, level_range=4 * c)
  t_star = 2 / math.sqrt(dim)
  wide = secure_sum.l2_grid(mech, t_star, 24, n)
  narrow = secure_sum.l2_grid(mech, t_star, 24, n, wide=False)
  ops = lambda g, k: secure_sum.search_operations(
      mech, n, k, secure_sum.off_lattice(mech, g), secure_sum.DEFAULT_CELLS)
  # Affords the wide grid at 2 rungs, and the narrow one at 6.
  limit = max(ops(wide, 2), ops(narrow, 6)) * 1.01
  assert ops(wide, 6) > limit
  limits = secure_sum.Limits(max_operations=limit)
  few = secure_sum.vector_rdp(mech, [2.0, 3.0], n, dim, 2.0, limits=limits)
  many = secure_sum.vector_rdp(mech, [2.0, 3.0, 4.0, 5.0, 6.0, 7.0], n, dim,
                               2.0, limits=limits)
  narrow_only = secure_sum.divergence_curve(mech, [2.0, 3.0], n,
                                            t_grid=narrow, limits=limits)
  for a in (2.0, 3.0):
    assert many[a] == pytest.approx(few[a], rel=1e-12)
    assert many[a] <= dim * narrow_only.majorant(a, min(4 / dim, 4 * c**2))
