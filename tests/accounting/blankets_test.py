"""Tests for tff_quant/accounting/blankets.py: every construction lies below
the laws it claims to (each block law holds a translated copy of β·R), keeps
what it is measured to keep, stays within its cost limits, and the two-vertex
case needs none."""

import itertools
import math

import numpy as np
import pytest

from tff_quant.accounting import blankets
from tff_quant.accounting import divergence
from tff_quant.accounting import secure_sum
from tests.accounting import cases


_mech = cases.mech
MECHANISMS = cases.MECHANISMS


def _rows(mech):
  targets = secure_sum.target_pairs(mech, [2 * mech.input_bound], cells=16)
  return secure_sum.vertex_rows(targets)


@pytest.mark.parametrize('name', sorted(MECHANISMS))
@pytest.mark.parametrize('block', [1, 2, 3])
def test_each_block_law_holds_a_translated_copy_of_beta_r(name, block):
  """Every multiset of `block` vertex rows (affine mechanisms) or cell
  envelopes sums to a law >= β·R translated by some shift, elementwise (log
  space): what the mixture argument needs."""
  mech = _mech(name, **MECHANISMS[name])
  rows = _rows(mech)
  if len(rows) > 12:
    rows = rows[np.unique(np.linspace(0, len(rows) - 1, 12).round().astype(int))]
  for by_rows in (False, True):
    part = blankets.aligned_part(rows, block, by_rows)
    assert 0 < math.exp(part.log_beta) <= 1
    assert np.exp(part.log_r).sum() == pytest.approx(1.0, abs=1e-9)
    scaled = part.log_beta + part.log_r
    for combo in itertools.combinations_with_replacement(range(len(rows)),
                                                         block):
      law = divergence.sum_log_pmf([(rows[i], 1) for i in combo])
      ok = False
      for shift in range(-scaled.size, law.size):
        lo, hi = max(shift, 0), min(shift + scaled.size, law.size)
        if hi - lo < np.count_nonzero(np.isfinite(scaled)):
          continue
        window = scaled[lo - shift:hi - shift]
        if np.count_nonzero(np.isfinite(window)) < np.count_nonzero(
            np.isfinite(scaled)):
          continue
        if np.all(window <= law[lo:hi] + 1e-9):
          ok = True
          break
      assert ok, (name, block, combo)


def test_two_vertex_laws_are_bounded_by_the_end_mixes():
  """One PBM trial: affine on the whole range, so the ±c mixes bound any
  others (convexity); the 'any' curve equals the 'extremes' one."""
  mech = _mech('pbm', num_levels=2, theta=0.2)
  assert blankets.two_vertices(secure_sum.mirrored_critical_inputs(mech), 1.0)
  assert not blankets.two_vertices(
      secure_sum.mirrored_critical_inputs(_mech('rqm')), 1.0)
  grid = secure_sum.distance_grid(1.0, 8)
  any_ = secure_sum.divergence_curve(mech, [2.0, 8.0], 30, t_grid=grid)
  ext = secure_sum.divergence_curve(mech, [2.0, 8.0], 30, t_grid=grid,
                                others='extremes')
  for a in (2.0, 8.0):
    np.testing.assert_array_less(any_.values[a], ext.values[a] * (1 + 1e-12)
                                 + 1e-15)


def test_aligned_blanket_keeps_far_more_than_the_unshifted_one():
  """RQM, Δ = c, q = 0.42: the laws barely overlap unshifted (β = 0.055) but
  are near translations of one another."""
  rows = _rows(_mech('rqm', **MECHANISMS['rqm']))
  assert math.exp(blankets.common_part(rows).log_beta) < 0.06
  assert math.exp(blankets.aligned_part(rows).log_beta) > 0.8


def test_block_parts_over_the_limits_are_not_built():
  rows = _rows(_mech('rqm', **MECHANISMS['rqm']))
  assert blankets.aligned_part(rows, 2, max_laws=10) is None
  assert blankets.aligned_part(rows, 2, max_operations=10.0) is None
  assert [b.block for b in blankets.blankets(rows, 40, max_laws=10)] == [1, 1]
  assert len({b.block for b in blankets.blankets(rows, 40)}) > 1
