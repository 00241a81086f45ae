"""Tests for the target pairs and critical inputs (secure_sum/targets.py)."""

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import secure_sum
from tff_quant.accounting.secure_sum import targets
from tests.accounting.secure_sum import helpers


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'bq', 'pbm',
                                  'quantized_gaussian', 'randomized_projection'])
def test_piecewise_affine_declaration_holds(name):
  params = dict(bq=dict(s=3, m=8), pbm=dict(num_levels=2),
                qmgeo=dict(range_ratio=4.0),
                quantized_gaussian=dict(lattice=5, num_levels=8),
                randomized_projection=dict(lattice=5, bits=3)).get(name, {})
  mech = helpers.mech(name, **params)
  assert mech.piecewise_affine
  b = np.unique(mech.critical_inputs())
  for lo, hi in zip(b[:-1], b[1:]):
    for s in (0.0, 0.25, 0.5, 0.9, 1.0):
      mixed = (1 - s) * mech.pmf(lo) + s * mech.pmf(hi)
      np.testing.assert_allclose(mech.pmf(lo + s * (hi - lo)), mixed, atol=1e-12)
  assert not helpers.mech('qmgeo', full_support=False).piecewise_affine
  assert not helpers.mech('pbm', num_levels=3).piecewise_affine


def test_critical_inputs_are_mirrored_without_rounding_twins():
  """QMGeo's 256 levels mirrored: 256 critical inputs (not 512 whose halves
  differ by ~1e-16), symmetric, equally spaced."""
  mech = mechanisms.QMGeo(0.0121, 256, 2e-4, full_support=True)
  crit = secure_sum.mirrored_critical_inputs(mech)
  assert crit.size == 256 and np.array_equal(crit, -crit[::-1])
  assert targets.on_lattice(crit)
  assert not targets.on_lattice(secure_sum.mirrored_critical_inputs(mechanisms.RQM(1.0, 1.0, 16, 0.42)))


def test_breakpoints_of_many_lattice_inputs_take_linear_memory():
  """Over `Limits.pairwise_inputs` critical inputs (a lattice and its two ends: RQM at
  16 bits has 52,430) the distances come from the lattice in O(K), and equal
  the pairwise ones; off a lattice it is a ValueError, not 20 GB."""
  mech = helpers.mech('rqm', num_levels=64, delta_ratio=0.25)
  crit = secure_sum.mirrored_critical_inputs(mech)
  pairwise = targets.breakpoints(crit, 1.0)
  few = secure_sum.Limits(pairwise_inputs=8)
  np.testing.assert_allclose(targets.breakpoints(crit, 1.0, few), pairwise,
                             rtol=1e-9)
  with pytest.raises(ValueError, match='off a lattice'):
    targets.breakpoints(np.sort(np.random.default_rng(0).uniform(-1, 1, 20)),
                        1.0, few)


def test_targets_over_the_memory_limit_are_refused_before_allocating():
  """QMGeo at 4,096 levels (the frontier's 12-bit cells) asked for a
  (146,314 x 4,096) weight matrix before `Limits.max_bytes` was read: the
  count now comes first, so the refusal names the GiB and nothing big is
  allocated (a 1 GiB cap on the process would have failed the allocation)."""
  c = 3 / 61706**0.5
  grid = secure_sum.distance_grid(c, 33)
  qmgeo = mechanisms.QMGeo(c, 4096, 0.5, full_support=True)
  with pytest.raises(secure_sum.CostError, match=r'GiB .*target rows of 4096'):
    targets.target_pairs(qmgeo, grid, limits=secure_sum.Limits())
  # Envelopes (a mechanism that is not piecewise affine) count theirs too.
  qg = helpers.mech('quantized_gaussian', num_levels=8, noise_multiplier=0.5,
                    lattice=0)   # the paper's: envelopes
  assert not getattr(qg, 'piecewise_affine', False)
  with pytest.raises(secure_sum.CostError, match='GiB'):
    targets.target_pairs(qg, grid, limits=secure_sum.Limits(max_bytes=100))
  assert targets.target_pairs(qg, grid).pairs.size
