"""calibration.oracle: the one place that decides a candidate's ε."""

import pytest

from tff_quant import mechanisms
from tff_quant.accounting import composition, secure_sum
from tff_quant.accounting.calibration import oracle

VERTEX_RQM = dict(num_levels=16, delta_ratio=16.0)   # the ends are vertices


def test_order_cap_follows_the_optimum_and_never_lowers_epsilon():
  """After an evaluation only orders near α* are used; the ε of fewer orders is
  an upper bound on the ε of all of them."""
  schedule = dict(rounds=200, clients_per_round=10, total_clients=1000,
                  delta=1e-3, dim=400, use_pld=False, l2_clip=1.0)
  epsilon_of = oracle.Epsilon(schedule)
  build = lambda q: mechanisms.get('rqm').for_coordinate_bound(
      3 / 20, num_levels=8, delta_ratio=8.0, q=q)
  epsilon_of.epsilon(build(0.05))
  assert max(epsilon_of.orders) < max(oracle.FAST_ORDERS)
  for q in (0.02, 0.1, 0.3):
    capped = epsilon_of.epsilon(build(q)).epsilon
    full = composition.training_guarantee(
        build(q), orders=oracle.FAST_ORDERS, **schedule).epsilon
    # (1e-9: which of the others' constructions is completed is priced at
    # the orders asked, so two order sets may differ at rounding level.)
    assert capped >= full * (1 - 1e-9)
    assert capped <= full * 1.05   # the cap follows α*: little is lost


def test_end_mixes_that_leave_epsilon_are_computed_once_then_skipped():
  """Mixes that never lower a pair's bound (here made so: `PairBounds`' ±c
  mixes raised by 50, counted at each call) are computed at
  the first candidate they apply to only; later candidates skip them, and
  their ε is the mixture bound's, the same as the whole accountant's."""
  calls = []
  real = secure_sum.extreme_mixes

  def useless(*args, **kwargs):
    calls.append(1)
    return real(*args, **kwargs) + 50.0
  bounds = secure_sum.PairBounds(extreme_mixes=useless)
  schedule = dict(delta=1e-5, rounds=20, clients_per_round=30,
                  total_clients=1000, dim=100, l2_clip=1.0)
  epsilon_of = oracle.Epsilon(dict(schedule, use_pld=False, others='any'),
                              4.0, pair_bounds=bounds)
  build = lambda q: mechanisms.get('rqm').for_coordinate_bound(
      0.3, q=q, **VERTEX_RQM)
  epsilon_of.exact(build(0.3))
  assert epsilon_of.mixes_matter is False and len(calls) == 1
  second = epsilon_of.exact(build(0.4))
  assert len(calls) == 1
  whole = composition.training_guarantee(build(0.4), orders=epsilon_of.orders,
                                         attained=False, pair_bounds=bounds,
                                         **schedule)
  assert len(calls) == 2 and whole.epsilon == pytest.approx(second, rel=1e-12)


def test_the_profile_route_decides_and_the_rdp_routes_screen_stands_aside():
  """At ε ≈ 1 in the frontier's sampling the profile route proves far less
  than the RDP route: the oracle answers with it (the accountant's least
  ε), and no cheap bound rejects a candidate the profile route accepts (the
  target lies between the two routes' ε). With use_profile=False the RDP
  route decides (and it is the default: the profile route is opt-in)."""
  schedule = dict(rounds=300, clients_per_round=100, total_clients=3400,
                  delta=1 / 3400, dim=4, use_pld=False, l2_clip=None,
                  others='any', use_profile=True)
  mech = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.03)
  whole = composition.training_guarantee(mech, orders=oracle.FAST_ORDERS,
                                         attained=False, **schedule)
  assert whole.route == 'profile'
  target = (whole.epsilon + whole.epsilon_rdp) / 2
  est = oracle.Epsilon(schedule, target).epsilon(mech)
  assert not est.lower_bound and est.epsilon == whole.epsilon < target
  rdp_only = oracle.Epsilon({k: v for k, v in schedule.items()
                            if k != 'use_profile'}, target)
  est = rdp_only.epsilon(mech)
  assert est.epsilon > target
