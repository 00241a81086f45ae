"""Tests for tff_quant/accounting/pld_route.py: the PLD route's ε is the one
a guarantee reports, and where the route does not apply it says why."""

import pytest

from tff_quant import mechanisms
from tff_quant.accounting import composition
from tff_quant.accounting import pld_route
from tff_quant.accounting import secure_sum
from tff_quant.mechanisms import skellam

_PBM = mechanisms.PBM(clip=1.0, num_levels=16, theta=0.25)
# 4 of 100 clients per round, 2 coordinates, 10 rounds, δ = 1e-5.
_SCHEDULE = (4, 2, 10, 4 / 100, 1e-5)
_ROUTE = dict(use_pld=True, l2_route=False, others='extremes',
              limits=secure_sum.DEFAULT_LIMITS, pld_interval=1e-3,
              pld_max_points=pld_route.DEFAULT_PLD_MAX_POINTS)


def test_pld_epsilon_is_the_guarantees():
  eps, note = pld_route.pld_epsilon(_PBM, *_SCHEDULE, **_ROUTE)
  g = composition.training_guarantee(_PBM, 10, 4, 100, 1e-5, dim=2,
                                     others='extremes')
  assert note == '' and eps == g.epsilon_pld and g.pld_note == ''


@pytest.mark.parametrize('change, reason', [
    (dict(use_pld=False), 'not requested (use_pld=False)'),
    (dict(l2_route=True), 'ℓ2 clipping with c > l2_clip/√d'),
    (dict(others='any'), "an assumption (others='extremes')"),
    (dict(pld_max_points=2), 'above pld_max_points=2')])
def test_pld_epsilon_says_why_it_was_not_computed(change, reason):
  eps, note = pld_route.pld_epsilon(_PBM, *_SCHEDULE, **{**_ROUTE, **change})
  assert eps is None and reason in note


def test_pld_route_is_not_implemented_where_divergences_are_exact():
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=16, steps=2,
                                    noise_std=0.82)
  eps, note = pld_route.pld_epsilon(mech, *_SCHEDULE, **_ROUTE)
  assert eps is None and 'not implemented for DistributedSkellam' in note


@pytest.mark.parametrize('change, error', [
    (dict(pld_interval=0.0), ValueError), (dict(pld_max_points=1), ValueError),
    (dict(pld_max_points=2.5), TypeError)])
def test_pld_epsilon_checks_its_grid_where_the_route_applies(change, error):
  with pytest.raises(error):
    pld_route.pld_epsilon(_PBM, *_SCHEDULE, **{**_ROUTE, **change})
