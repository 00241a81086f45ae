import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from tff_quant import accounting
from tff_quant import aggregators
from tff_quant import mechanisms

ORDERS = [2, 3, 8, 32, 64]


def _dp_accounting_rdp(noise_multiplier):
  acc = rdp_privacy_accountant.RdpAccountant(ORDERS)
  acc.compose(dp_event.GaussianDpEvent(noise_multiplier))
  return dict(zip(ORDERS, acc._rdp))   # pylint: disable=protected-access


@pytest.mark.parametrize('sigma, n, dim', [(0.5, 1, 1), (2.0, 10, 1), (3.0, 40, 100)])
def test_coordinate_route_matches_dp_accounting_gaussian_event(sigma, n, dim):
  c = 1.0 / math.sqrt(dim)   # the box [-c, c]^d inside the unit l2 ball
  mech = mechanisms.Gaussian(clip=c, sigma=sigma * c)
  ours = accounting.per_round_rdp(mech, n, dim, ORDERS)
  # The sum of n clients has std √n·σ·c; replace-one moves it by 2 in l2.
  ref = _dp_accounting_rdp(math.sqrt(n) * sigma * c / 2.0)
  for a in ORDERS:
    assert ours[a] == pytest.approx(ref[a], rel=1e-6, abs=1e-12)
  assert math.isinf(ours[math.inf])


@pytest.mark.parametrize('k', [1.0, 2.5, 4.0])
def test_l2_route_bounds_the_gaussian_mechanism_for_any_coordinate_bound(k):
  dim, n, l2_clip, sigma = 1000, 20, 1.0, 0.3
  mech = mechanisms.Gaussian(clip=k * l2_clip / math.sqrt(dim), sigma=sigma)
  ours = accounting.vector_rdp(mech, ORDERS, n, dim, 2 * l2_clip)
  ref = _dp_accounting_rdp(math.sqrt(n) * sigma / (2 * l2_clip))
  for a in ORDERS:
    if k == 1.0:   # S²/d = 4c²: the range end, evaluated exactly
      assert ours[a] == pytest.approx(ref[a], rel=1e-6)
    else:          # the step bound between grid distances is an upper bound
      assert ref[a] * (1 - 1e-9) <= ours[a] <= 2 * ref[a]


def test_central_mechanism_is_listed_for_accounting_only():
  assert 'gaussian' not in mechanisms.registry()
  assert mechanisms.registry(include_central=True)['gaussian'] is mechanisms.Gaussian
  mech = mechanisms.build('gaussian', 1.0, noise_multiplier=2.0)
  assert mech.sigma == 2.0 and mech.worst_case_variance() == 4.0
  assert mech.decoded_mean_mse(10) == pytest.approx(0.4)
  with pytest.raises(TypeError, match='density'):
    mech.log_pmf(0.0)
  with pytest.raises(ValueError, match='DifferentiallyPrivateFactory'):
    aggregators.QuantizationFactory(mech)


@pytest.mark.parametrize('num_clients,total_clients', [
    (1, 3400), (100, 3400), (4, 20), (999, 1000), (10, 10), (0, 10)])
def test_sampled_rdp_equals_dp_accountings_to_the_last_bit(num_clients,
                                                           total_clients):
  """The forward-difference table built once serves every order with the
  same numbers dp-accounting's `RdpAccountant` gives for one
  `SampledWithoutReplacementDpEvent` (integer orders up to 256, and the
  orders it hands to dp-accounting: fractional, above 256, inf), q at 0 and
  1 too."""
  orders = list(accounting.rdp_route.DEFAULT_ORDERS) + [1.5, 2.5, 300, math.inf]
  for z in (0.1, 0.7, 1.46, 5.0, 43.6, 1e3):
    accountant = rdp_privacy_accountant.RdpAccountant(
        orders, rdp_privacy_accountant.NeighborRel.REPLACE_ONE)
    accountant.compose(dp_event.SampledWithoutReplacementDpEvent(
        total_clients, num_clients, dp_event.GaussianDpEvent(z)))
    got = mechanisms.gaussian.sampled_without_replacement_rdp(
        num_clients / total_clients, z, orders)
    np.testing.assert_array_equal(got, accountant._rdp)  # pylint: disable=protected-access


def test_the_gaussian_matched_to_a_gaussian_is_itself():
  """`gaussian_matched` (where calibration on the profile route starts: the
  RDP route's σ) gives the noise multiplier whose mechanism has that σ."""
  cls = mechanisms.get('gaussian')
  m = cls.gaussian_matched(0.3, 0.1, {})
  assert cls.for_coordinate_bound(0.1, noise_multiplier=m).sigma == (
      pytest.approx(0.3, rel=1e-15))
