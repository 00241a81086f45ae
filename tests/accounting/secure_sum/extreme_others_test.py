"""Tests for the others at ±c (secure_sum/extreme_others.py)."""

import itertools
import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import divergence
from tff_quant.accounting import others as others_lib
from tff_quant.accounting import secure_sum
from tests.accounting.secure_sum import helpers


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'pbm'])
@pytest.mark.parametrize('n', [2, 3])
def test_others_at_extremes_are_the_worst_over_critical_inputs(name, n):
  """Item 2's search: every multiset of critical inputs for the others, every
  target pair of critical inputs; none beats the ±c mixes others='extremes'
  assumes."""
  mech = helpers.mech(name)
  crit = np.unique(mech.critical_inputs())
  crit = crit[np.unique(np.linspace(0, len(crit) - 1, 7).round().astype(int))]
  for alpha in (2.0, 8.0):
    accounted = secure_sum.divergence_curve(mech, [alpha], n, t_points=8,
                                            others='extremes').values[alpha][-1]
    worst = max(helpers.exact(mech, x, y, others, alpha)
                for x in crit for y in crit
                for others in itertools.combinations_with_replacement(crit, n - 1))
    assert worst <= accounted * (1 + 1e-9)


@pytest.mark.parametrize('mech', [mechanisms.RQM(1.0, 1.0, 8, 0.42),
                                  mechanisms.PBM(1.0, 8, 0.25)])
@pytest.mark.parametrize('others', secure_sum.OTHERS)
def test_grouped_splits_of_the_others_bound_every_split(mech, others,
                                                       monkeypatch):
  """Groups of mixes (extremes) or of the others' common-part count (any) are
  bounded by their first member; the default grouping loses little."""
  orders, grid = [2.0, 8.0], secure_sum.distance_grid(1.0, 8)
  curve = lambda k: secure_sum.divergence_curve(mech, orders, 40, t_grid=grid,
                                                exact_splits=k, others=others)
  coarse, default = curve(1), curve(secure_sum.EXACT_SPLITS)
  monkeypatch.setattr(others_lib, 'REFINE', 0.0)   # every count evaluated alone
  every = curve(40)
  for a in orders:
    assert np.all(coarse.values[a] >= every.values[a] * (1 - 1e-12))
    assert np.all(default.values[a] >= every.values[a] * (1 - 1e-12))
    # The default (singles next to the anchors) loses under 2% here.
    assert np.all(default.values[a] <= every.values[a] * 1.02)


def test_two_vertex_mixes_are_evaluated_one_by_one():
  """QMGeo at 4 bits of the FL table (16 levels on ±16c, p = 0.46: no level
  inside (-c, c), so the ±c mixes are the sup over any others), n = 100, t =
  2/√8192: the curve at t is the largest D_2 over the mixes of the 99
  others at ±c (brute force at k = 0, 1, 49, 98, 99 at +c: the largest is
  at k = 0), where grouped mixes (EXACT_SPLITS) were 7.5% above it."""
  dim, n = 8192, 100
  c, t = 3 / math.sqrt(dim), 2 / math.sqrt(dim)
  mech = mechanisms.QMGeo(c, 16, 0.4583395600612428, full_support=True,
                          level_range=16 * c)
  assert secure_sum.vertex_splits(n, secure_sum.EXACT_SPLITS) == n
  assert secure_sum.vertex_splits(secure_sum.EVERY_MIX + 2, 8) == 8
  curve = secure_sum.divergence_curve(mech, [2.0], n, t_grid=[t, 2 * c])
  worst = 0.0
  for k in (0, 1, 49, 98, 99):
    rest = [(mech.log_pmf(c), k), (mech.log_pmf(-c), n - 1 - k)]
    for x, y in ((c, c - t), (c - t, c)):
      p = divergence.sum_log_pmf([(mech.log_pmf(x), 1)] + rest)
      q = divergence.sum_log_pmf([(mech.log_pmf(y), 1)] + rest)
      worst = max(worst, divergence.renyi_divergence(p, q, 2.0))
  assert worst <= curve.values[2.0][0] <= worst * (1 + 1e-6)
