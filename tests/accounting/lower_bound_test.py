"""Tests for tff_quant/accounting/lower_bound.py: the bound never exceeds what
the accountant reports (per order and in ε, on both routes, for either
assumption on the others), equals the exact divergence where the configuration
is the whole story, and steps aside where it does not apply."""

import math

import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import attained
from tff_quant.accounting import composition
from tff_quant.accounting import divergence
from tff_quant.accounting import gaussian_domination
from tff_quant.accounting import lower_bound
from tff_quant.accounting import per_round
from tff_quant.accounting import secure_sum

ORDERS = tuple(range(2, 17))
DIM = 100
SCHEDULE = dict(clients_per_round=5, total_clients=100, delta=1e-5)

MECHANISMS = {
    'rqm': lambda c: mechanisms.RQM(c, 2 * c, 16, 0.3),
    'pbm': lambda c: mechanisms.PBM(c, 8, 0.2),
    'qmgeo': lambda c: mechanisms.QMGeo(c, 16, 0.1, full_support=True),
    'bq': lambda c: mechanisms.BQ(c, 2, 200),   # a window fits (finite)
    'quantized_gaussian': lambda c: mechanisms.QuantizedGaussian(2 * c, 16, c),
    'randomized_projection': lambda c: mechanisms.get(
        'randomized_projection').for_coordinate_bound(c, bits=3, q=0.6),
}


@pytest.mark.parametrize('name', sorted(MECHANISMS))
@pytest.mark.parametrize('l2_clip', [None, 1.0])
@pytest.mark.parametrize('others', ['any', 'extremes'])
def test_never_above_the_accountant(name, l2_clip, others):
  """Per order, and in ε after 50 rounds: the bound <= the accountant's value,
  on the coordinate route (c = 0.5, no ℓ2 clip) and the ℓ2 route (c = 3/√d)."""
  c = 0.5 if l2_clip is None else 3 / math.sqrt(DIM)
  mech = MECHANISMS[name](c)
  accountant = composition.RoundAccountant(mech, dim=DIM, orders=ORDERS,
                                           l2_clip=l2_clip, others=others,
                                           **SCHEDULE)
  low = lower_bound.round_rdp_at_least(mech, ORDERS, SCHEDULE['clients_per_round'],
                                       DIM, l2_clip)
  assert set(low) == set(ORDERS) | {math.inf}
  for order, value in low.items():
    assert value <= accountant.rdp[order] * (1 + 1e-12), order
  eps = lower_bound.epsilon_at_least(mech, 50, dim=DIM, orders=ORDERS,
                                     l2_clip=l2_clip, **SCHEDULE)
  assert eps <= accountant.epsilon_rdp(50)[0] * (1 + 1e-12)
  # BQ: both are of the sum conditioned on its window (finite).
  assert 0 < eps < math.inf


@pytest.mark.parametrize('name, screens_more', [
    ('rqm', True), ('quantized_gaussian', True),
    ('randomized_projection', False)])
def test_the_profile_routes_floor_is_below_the_accountants_profile_route(
    name, screens_more):
  """For mechanisms without a Gaussian-domination rate the floor with
  use_profile is at most both of the accountant's routes after 300 rounds,
  and at most the RDP route's floor; for RQM and the quantized Gaussian here
  it is below it (their profile route is the smaller, so it screens more)."""
  c = 3 / math.sqrt(DIM)
  mech = (mechanisms.QuantizedGaussian(2 * c, 4, c)   # 4 levels: seconds
          if name == 'quantized_gaussian' else MECHANISMS[name](c))
  assert gaussian_domination.unavailable(mech, SCHEDULE['clients_per_round'])
  accountant = composition.RoundAccountant(mech, dim=DIM, orders=ORDERS,
                                           l2_clip=1.0, **SCHEDULE)
  profile, why = accountant.epsilon_profile(300)
  assert not why
  kwargs = dict(dim=DIM, orders=ORDERS, l2_clip=1.0, **SCHEDULE)
  floor = lower_bound.epsilon_at_least(mech, 300, use_profile=True, **kwargs)
  rdp_floor = lower_bound.epsilon_at_least(mech, 300, **kwargs)
  assert 0 < floor <= min(profile, accountant.epsilon_rdp(300)[0])
  assert floor <= rdp_floor
  assert (floor < rdp_floor) == screens_more


@pytest.mark.parametrize('name', ['rqm', 'qmgeo', 'pbm'])
def test_one_client_is_the_exact_end_pair_divergence(name):
  """n = 1 on the coordinate route: the ±c pair's D_α of one client's pmf,
  to rounding and never above it."""
  mech = MECHANISMS[name](1.0)
  low = lower_bound.round_rdp_at_least(mech, ORDERS, 1, 1, None)
  for alpha in ORDERS:
    exact = divergence.renyi_divergence(mech.log_pmf(1.0), mech.log_pmf(-1.0),
                                        alpha)
    assert exact * (1 - 1e-10) <= low[alpha] <= exact, alpha
  assert low[math.inf] == pytest.approx(divergence.renyi_divergence(
      mech.log_pmf(1.0), mech.log_pmf(-1.0), math.inf), rel=1e-9)


def test_tight_where_the_configuration_is_the_worst():
  """PBM at n = 1 (affine in x: the ±c pair is the worst) on the coordinate
  route: the bound is the accountant's round RDP at every order."""
  mech = MECHANISMS['pbm'](1.0)
  rdp = per_round.per_round_rdp(mech, 1, DIM, ORDERS, others='extremes')
  low = lower_bound.round_rdp_at_least(mech, ORDERS, 1, DIM, None)
  for alpha in ORDERS:
    assert low[alpha] == pytest.approx(rdp[alpha], rel=1e-9)


def test_the_l2_route_moves_the_target_by_the_sensitivity_per_coordinate():
  """On the ℓ2 route the pairs are t* = 2·l2_clip/√d apart, not 2c: at c =
  3/√d the bound is well below the coordinate route's and at least the pair
  (t*/2, -t*/2)'s exact value with the others at +c."""
  c = 3 / math.sqrt(DIM)
  mech = MECHANISMS['rqm'](c)
  l2 = lower_bound.round_rdp_at_least(mech, ORDERS, 1, DIM, 1.0)
  ends = lower_bound.round_rdp_at_least(mech, ORDERS, 1, DIM, None)
  t = 2 / math.sqrt(DIM)
  exact = DIM * divergence.renyi_divergence(mech.log_pmf(t / 2),
                                            mech.log_pmf(-t / 2), 2)
  assert exact * (1 - 1e-10) <= l2[2] < ends[2] / 2


def test_steps_aside_for_closed_forms_and_costly_laws():
  """No bound for mechanisms accounted in closed form or with their own
  subsampling analysis, nor where even the FFT route's convolution costs over
  attained.MAX_FFT_OPERATIONS."""
  for name in ('gaussian', 'skellam', 'ddgauss'):
    cls = mechanisms.get(name)
    mech = cls.for_coordinate_bound(0.1, **cls.complete_params({}))
    assert lower_bound.epsilon_at_least(mech, 10, dim=DIM, **SCHEDULE) is None
  rqm = mechanisms.RQM(1.0, 1.0, 256, 0.3)
  assert lower_bound.applies(rqm, 100)
  # 256²·999²/2 = 3.3e10 by matrix products; 48·256·254,747 = 3.1e9 by FFT.
  assert lower_bound.applies(rqm, 1000)
  assert not attained.applies(rqm, 1000)   # the attained search: no FFT
  huge = mechanisms.RQM(1.0, 1.0, 4096, 0.3)
  assert not lower_bound.applies(huge, 1000)
  assert lower_bound.epsilon_at_least(huge, 10, 1000, 3400, 1e-5) is None


@pytest.mark.parametrize('l2_clip', [None, 1.0])
def test_the_fft_route_stays_below_the_accountant_and_near_matrix_products(
    l2_clip):
  """RQM at 16 levels, n = 60: the screen's others' law by the tilted FFT
  (forced by a tiny `Limits.attained_operations`) is within 1e-3 of the one by matrix
  products, below it up to the carried error, and below the accountant."""
  c = 0.5 if l2_clip is None else 3 / math.sqrt(DIM)
  mech = mechanisms.RQM(c, 2 * c, 16, 0.3)
  schedule = dict(clients_per_round=60, total_clients=1000, delta=1e-5)
  products = lower_bound.round_rdp_at_least(mech, ORDERS, 60, DIM, l2_clip)
  fft = lower_bound.round_rdp_at_least(
      mech, ORDERS, 60, DIM, l2_clip,
      limits=secure_sum.Limits(attained_operations=1.0))
  accountant = composition.RoundAccountant(mech, dim=DIM, orders=ORDERS,
                                           l2_clip=l2_clip, **schedule)
  for order in ORDERS:
    assert fft[order] == pytest.approx(products[order], rel=1e-3), order
    assert fft[order] <= products[order] + 1e-12 * DIM, order
    assert fft[order] <= accountant.rdp[order] * (1 + 1e-12), order


def test_worthwhile_only_before_a_costly_accountant():
  """RQM's vertex search at 256 levels, n = 100 costs ~30x the bound; PBM's
  per-trial reduction costs less than the bound itself."""
  rqm = mechanisms.RQM(1.0, 32.0, 256, 0.005)
  pbm = mechanisms.PBM(1.0, 256, 0.0013)
  assert lower_bound.worthwhile(rqm, 100, 7)
  assert lower_bound.applies(pbm, 100) and not lower_bound.worthwhile(pbm, 100, 7)


def test_laws_are_the_secure_sum_with_the_others_at_the_top():
  """The others' law is R(+c)^{*(n-1)}: at n = 3 the pair's power sum from the
  bound equals one from numpy's convolutions of the pmfs."""
  mech = MECHANISMS['qmgeo'](1.0)
  top = mech.pmf(1.0)
  law = np.convolve(top, top)
  p, q = np.convolve(mech.pmf(1.0), law), np.convolve(mech.pmf(-1.0), law)
  want = math.log(np.sum(p**2 / q))
  low = lower_bound.round_rdp_at_least(mech, (2,), 3, 1, None)
  assert low[2] == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize('kwargs, match', [
    (dict(clients_per_round=0), 'clients_per_round'),
    (dict(dim=0), 'dim'),
    (dict(l2_clip=-1.0), 'l2_clip'),
    (dict(l2_clip=math.nan), 'l2_clip'),
])
def test_bad_input_names_the_parameter(kwargs, match):
  args = dict(dict(clients_per_round=5, dim=DIM, l2_clip=1.0), **kwargs)
  with pytest.raises(ValueError, match=match):
    lower_bound.round_rdp_at_least(MECHANISMS['rqm'](0.3), ORDERS, **args)
