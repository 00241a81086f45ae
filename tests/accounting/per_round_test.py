"""Tests for tff_quant/accounting/per_round.py: one round's RDP on the
coordinate route (every vertex pair, the others at ±c, and the bounds that
serve where the extremes' exact sums are too large or unresolved)."""

import itertools

import pytest

from tff_quant import mechanisms
from tff_quant.accounting import composition
from tff_quant.accounting import divergence
from tff_quant.accounting import per_round


def test_coordinate_route_takes_the_worst_vertex_pair_not_only_the_ends():
  # RQM defaults at n = 1, α = 8: the pair at ±c gives 5.315642, an interior
  # pair of critical inputs 5.344229 (tests/accounting/secure_sum/curve_test.py).
  mech = mechanisms.get('rqm').for_coordinate_bound(1.0)
  rdp = per_round.per_round_rdp(mech, 1, 3, orders=range(2, 17))
  assert rdp[8] == pytest.approx(3 * 5.344228585, abs=1e-7)
  for a in range(2, 17):   # between ladder rungs: convexity, never below a rung's
    assert rdp[a] >= 3 * divergence.renyi_divergence_of_sum(
        mech, a, 1).value * (1 - 1e-12)
  guarantee = composition.training_guarantee(mech, 5, 1, 10, 1e-5, use_pld=True,
                                   others='extremes')
  assert guarantee.epsilon_pld is None and 'interior pair' in guarantee.pld_note


@pytest.mark.parametrize('name', ['pbm', 'quantized_gaussian'])
@pytest.mark.parametrize('n', [1, 2])
def test_end_pair_is_the_worst_target_pair_for_the_smooth_mechanisms(name, n):
  # PBM and the quantized Gaussian keep targets at ±c: a fine grid of target
  # pairs (and the other client at ±c or 0) finds nothing worse.
  mech = mechanisms.get(name).for_coordinate_bound(1.0, num_levels=8)
  grid = [-1.0, -0.6, -0.2, 0.0, 0.3, 0.7, 1.0]
  for alpha in (2.0, 8.0):
    ends = divergence.renyi_divergence_of_sum(mech, alpha, n).value
    for x, x2 in itertools.combinations(grid, 2):
      for other in ([] if n == 1 else [[-1.0], [0.0], [1.0]]) or [[]]:
        parts = [(mech.log_pmf(o), 1) for o in other]
        p = divergence.sum_log_pmf([(mech.log_pmf(x), 1)] + parts)
        q = divergence.sum_log_pmf([(mech.log_pmf(x2), 1)] + parts)
        for a, b in ((p, q), (q, p)):
          assert divergence.renyi_divergence(a, b, alpha) <= ends * (1 + 1e-9)


def test_extremes_fall_back_to_the_local_bound_where_the_sum_is_unresolved():
  # σ = 1e6·Cq: interior levels ~1e-300, beyond what the tilted FFTs resolve.
  mech = mechanisms.get('quantized_gaussian')(clip=2.0, num_levels=16, sigma=2e6)
  with pytest.raises(divergence.UnresolvedSumError):
    divergence.renyi_divergence_of_sum(mech, [2, 3], 3)
  rdp = per_round.per_round_rdp(mech, 3, dim=2, orders=[3], others='extremes')
  assert rdp[2] == pytest.approx(2 * 2 * 2.0**2 / (2 * 2e6**2), rel=1e-12)
  assert rdp[3] == pytest.approx(1.5 * rdp[2], rel=1e-12)


def test_large_extremes_sums_take_a_bound_that_is_above_the_exact_value():
  """With the size limits at 0, PBM takes its one-trial reduction and RQM (no
  reduction, no local bound) its local D∞; each is >= the exact extremes value, and
  PBM's reduction stays within 1% of it (0.3% here)."""
  orders = [2, 4, 8]
  pbm = mechanisms.get('pbm')(clip=1.0, num_levels=16, theta=0.05)
  rqm = mechanisms.get('rqm').for_coordinate_bound(1.0, num_levels=8)
  exact = {m.name: per_round.per_round_rdp(m, 6, orders=orders,
                                           others='extremes')
           for m in (pbm, rqm)}
  at_zero = dict(reduce_above_points=0, local_above_points=0)
  for m in (pbm, rqm):
    bound = per_round.per_round_rdp(m, 6, orders=orders, others='extremes',
                                    **at_zero)
    for a in orders:
      assert bound[a] >= exact[m.name][a] * (1 - 1e-9), (m.name, a)
  reduced = per_round.per_round_rdp(pbm, 6, orders=orders, others='extremes',
                                    **at_zero)
  for a in orders:
    assert reduced[a] == pytest.approx(exact['pbm'][a], rel=1e-2)
  bound = per_round.per_round_rdp(rqm, 6, orders=orders, others='extremes',
                                  **at_zero)
  assert bound[4] == pytest.approx(divergence.epsilon_infinity(rqm), rel=1e-12)
