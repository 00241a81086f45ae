"""Tests for the cost estimates and the limits (secure_sum/cost.py, limits.py)."""

import dataclasses

import numpy as np
import pytest

from tff_quant.accounting import secure_sum
from tests.accounting.secure_sum import helpers


def test_limits_are_frozen_with_the_documented_defaults():
  limits = secure_sum.Limits()
  assert limits == secure_sum.DEFAULT_LIMITS
  assert (limits.max_operations, limits.max_bytes) == (3e10, 3 * 2**30)
  assert (limits.pairwise_inputs, limits.fft_levels) == (4096, 128)
  assert (limits.product_convolve, limits.matrix_levels) == (1e9, 512)
  with pytest.raises(dataclasses.FrozenInstanceError):
    limits.max_operations = 1.0


def test_refuses_a_too_costly_evaluation_before_starting():
  with pytest.raises(ValueError, match='operations'):
    secure_sum.divergence_curve(helpers.mech('rqm'), [2], 40,
                                limits=secure_sum.Limits(max_operations=1e3))


def test_local_bound_caps_the_envelopes_and_replaces_a_refused_search():
  """The quantized Gaussian: each grid value is at most α t²/(2σ²); with the
  search over the cost limit, that bound is the curve (and costs nothing)."""
  mech = helpers.mech('quantized_gaussian', num_levels=8, noise_multiplier=0.5,
                      lattice=0)   # the paper's: envelopes and the local bound
  grid = secure_sum.distance_grid(1.0, 8)
  local = mech.local_divergences([2.0, 8.0], grid)
  searched = secure_sum.divergence_curve(mech, [2.0, 8.0], 5, t_grid=grid)
  assert 'local' in searched.method
  for a in (2.0, 8.0):
    assert np.all(searched.values[a] <= local[a])
  assert np.any(searched.values[2.0] < local[2.0])   # the search wins somewhere
  assert secure_sum.estimated_operations(mech, 5, 2, len(grid)) > 0
  tiny = secure_sum.Limits(max_operations=1.0)
  assert secure_sum.estimated_operations(mech, 5, 2, len(grid),
                                         limits=tiny) == 0.0
  refused = secure_sum.divergence_curve(mech, [2.0, 8.0], 5, t_grid=grid,
                                        limits=tiny)
  assert refused.method.startswith('local')
  np.testing.assert_array_equal(refused.values[8.0], local[8.0])
  with pytest.raises(secure_sum.CostError):   # no local bound: still refused
    secure_sum.divergence_curve(helpers.mech('rqm'), [2.0], 5, t_grid=grid,
                                limits=tiny)
  # A sub-sum would fit, but the instant local bound is preferred to it.
  cost = lambda n: secure_sum.search_operations(mech, n, 2, len(grid),
                                                secure_sum.DEFAULT_CELLS)
  between = secure_sum.Limits(max_operations=(cost(2) + cost(3)) / 2)
  assert secure_sum.estimated_operations(mech, 5, 2, len(grid),
                                         limits=between) == 0.0
  assert secure_sum.divergence_curve(
      mech, [2.0], 5, t_grid=grid, limits=between).method.startswith('local')


def test_over_the_limit_the_largest_affordable_sub_sum_is_searched():
  """f_α(n) <= f_α(n') for n' <= n (the other clients' outputs dropped): with
  the limit between the costs of 2 and 3 clients, n = 6 is searched as n' = 2,
  an upper bound on the exact 6-client curve and at most the 1-client one."""
  mech = helpers.mech('rqm', num_levels=8)
  grid = secure_sum.distance_grid(1.0, 8)
  orders = [2.0, 8.0]
  exact = secure_sum.divergence_curve(mech, orders, 6, t_grid=grid)
  two = secure_sum.divergence_curve(mech, orders, 2, t_grid=grid)
  one = secure_sum.divergence_curve(mech, orders, 1, t_grid=grid)
  cost = lambda n: secure_sum.search_operations(mech, n, 2, len(grid),
                                                secure_sum.DEFAULT_CELLS)
  limits = secure_sum.Limits(max_operations=(cost(2) + cost(3)) / 2)
  assert secure_sum.affordable_clients(mech, 6, 2, len(grid),
                                       limits=limits) == 2
  assert secure_sum.estimated_operations(mech, 6, 2, len(grid),
                                         limits=limits) == cost(2)
  sub = secure_sum.divergence_curve(mech, orders, 6, t_grid=grid,
                                    limits=limits)
  assert 'the target and 1 of the 5 others searched' in sub.method
  assert sub.num_clients == 6
  for a in orders:
    np.testing.assert_array_equal(sub.values[a], two.values[a])
    assert np.all(exact.values[a] <= sub.values[a] * (1 + 1e-12))
    assert np.all(sub.values[a] <= one.values[a] * (1 + 1e-12))
  assert np.any(exact.values[2.0] < 0.9 * sub.values[2.0])   # the price of dropping
  for bad, name in ((dict(num_clients=0), 'num_clients'),
                    (dict(num_orders=-1), 'num_orders')):
    args = dict(dict(num_clients=6, num_orders=2, t_points=len(grid)), **bad)
    with pytest.raises(ValueError, match=f'`{name}`'):
      secure_sum.affordable_clients(mech, limits=limits, **args)
  none = secure_sum.Limits(max_operations=cost(1) / 2)
  assert secure_sum.affordable_clients(mech, 6, 2, len(grid), limits=none) == 0
  with pytest.raises(secure_sum.CostError):
    secure_sum.divergence_curve(mech, orders, 6, t_grid=grid, limits=none)


def test_target_laws_over_the_memory_limit_are_refused_before_allocating():
  """With `Limits.max_bytes` below the target pairs' laws: the local bound
  where the mechanism has one (named in the method), else CostError naming
  the GiB needed."""
  grid = secure_sum.distance_grid(1.0, 8)
  qg = helpers.mech('quantized_gaussian', num_levels=8, noise_multiplier=0.5,
                    lattice=0)   # the paper's: it has the local bound
  limits = secure_sum.Limits(max_bytes=100)
  curve = secure_sum.divergence_curve(qg, [2.0], 3, t_grid=grid, limits=limits)
  assert 'GiB' in curve.method and curve.method.startswith('local')
  np.testing.assert_array_equal(curve.values[2.0],
                                qg.local_divergences([2.0], grid)[2.0])
  with pytest.raises(secure_sum.CostError, match='GiB'):
    secure_sum.divergence_curve(helpers.mech('rqm'), [2.0], 3, t_grid=grid,
                                limits=limits)
