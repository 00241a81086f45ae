import math

import numpy as np
import pytest

from tff_quant.program import quiet
quiet.import_tensorflow()

import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

from tff_quant import accounting, mechanisms
from tff_quant.accounting import bounds
from tff_quant.aggregators import peers
from tff_quant.program import runtime

SCHEDULE = dict(delta=1e-3, rounds=50, clients_per_round=20, total_clients=1000,
                dim=500, clip_norm=1.0)


@pytest.mark.parametrize('name, bits', [('gaussian', None), ('tff_skellam', 16),
                                        ('tff_dgauss', 16)])
def test_calibration_meets_the_target_and_is_tight(name, bits):
  peer = peers.calibrate(name, 4.0, bits=bits, **SCHEDULE)
  acct = peer.accountant(SCHEDULE['total_clients'], SCHEDULE['delta'])
  eps = acct.epsilon_rdp(SCHEDULE['rounds'])[0]
  assert eps <= 4.0
  less = peers.Peer(name, peer.noise_multiplier / 1.01, 1.0, 20, 500, bits)
  assert less.accountant(1000, 1e-3).epsilon_rdp(50)[0] > 4.0   # tight to rtol


@pytest.mark.parametrize('name, bits', [('gaussian', None), ('tff_dgauss', 16)])
def test_profile_route_calibration_meets_the_target_with_less_noise(name, bits):
  """use_profile: the least of the two routes meets the target, tight to
  rtol, with less noise than the RDP route alone (the Gaussian by its exact
  profile, TFF's peer by its RDP curve's profile)."""
  peer = peers.calibrate(name, 1.0, bits=bits, use_profile=True, rtol=1e-2,
                         **SCHEDULE)
  acct = peer.accountant(SCHEDULE['total_clients'], SCHEDULE['delta'])
  rounds = SCHEDULE['rounds']
  route = lambda a: a.epsilon_from_curve(rounds, use_profile=True)
  assert route(acct) <= 1.0 < acct.epsilon_rdp(rounds)[0]
  less = peers.Peer(name, peer.noise_multiplier / 1.02, 1.0, 20, 500, bits)
  assert route(less.accountant(1000, 1e-3)) > 1.0
  plain = peers.calibrate(name, 1.0, bits=bits, **SCHEDULE)
  assert peer.noise_multiplier < plain.noise_multiplier


def test_a_target_met_at_the_least_noise_searched_returns_it():
  """The bisection's bottom, z = 1e-3, where it meets the target: returned
  itself (asked last, once the bisection has reached it)."""
  peer = peers.calibrate('gaussian', 1e10, **SCHEDULE)
  assert peer.noise_multiplier == 1e-3
  assert peer.epsilon(SCHEDULE['total_clients'], SCHEDULE['delta'],
                      SCHEDULE['rounds']) <= 1e10


def test_gaussian_peer_is_the_registry_gaussian_with_the_same_total_noise():
  peer = peers.Peer('gaussian', 2.0, 0.5, 10, 100)
  mech = peer.reference_mechanism()
  assert math.isclose(mech.sigma * math.sqrt(10), 2.0 * 0.5)
  rdp = peer.round_rdp([2, 8])
  for a in (2, 8):   # α S²/(2 σ_total²), S = 2 clip (replace-one)
    assert math.isclose(rdp[a], a * (2 * 0.5)**2 / (2 * 1.0**2), rel_tol=1e-6)


def test_vector_bounds_reduce_to_the_scalar_ones():
  mech = mechanisms.DistributedSkellam.for_coordinate_bound(
      1.0, num_levels=4096, steps=8, noise_fraction=0.05)
  for a in (2, 5, 17):
    shift = 2 * mech.steps
    assert bounds.skellam_vector_rdp(a, shift, shift, mech.noise_std, 7) == \
        bounds.skellam_rdp(a, mech, 7)
    assert bounds.ddgauss_vector_rdp(a, shift, mech.noise_std, 7, 1) == \
        bounds.ddgauss_rdp(a, mech, 7)


def test_skellam_accounting_approaches_the_gaussian_at_high_resolution():
  # 16 bits, 20 clients: scale is large, rounding inflation small: within 10%.
  g = peers.Peer('gaussian', 1.5, 1.0, 20, 500).round_rdp([8])[8]
  s = peers.Peer('tff_skellam', 1.5, 1.0, 20, 500, 16).round_rdp([8])[8]
  assert g <= s <= 1.1 * g


def test_the_factory_runs_with_the_numbers_the_accountant_uses():
  peer = peers.Peer('tff_skellam', 1.0, 1.0, 3, 10, 16)
  process = peer.factory().create(tff.types.TensorType(np.float32, [10]))
  runtime.use_secure_sum_simulation()
  out = process.next(process.initialize(), [np.full(10, 0.1, np.float32)] * 3)
  m = out.measurements['mean_value']
  ours = peer.ddp_parameters()
  assert math.isclose(m['scale_factor'], ours['scale'], rel_tol=1e-5)
  assert math.isclose(m['scaled_inflated_l2'], ours['scaled_inflated_l2'],
                      rel_tol=1e-5)
  assert math.isclose(m['scaled_local_stddev'], ours['scaled_local_std'],
                      rel_tol=1e-5)
  assert m['padded_dim'] == peer.padded_dim == 16
  # The mean of three identical updates, up to the noise (std z·clip/n = 1/3).
  assert np.all(np.abs(out.result - 0.1) < 5 / 3)


@pytest.mark.parametrize('kwargs, message', [
    (dict(name='foo', noise_multiplier=1.0), 'mechanism'),
    (dict(name='gaussian', noise_multiplier=0.0), 'noise_multiplier'),
    (dict(name='gaussian', noise_multiplier=1.0, bits=8), 'bits'),
    (dict(name='tff_skellam', noise_multiplier=1.0), 'bits'),
    (dict(name='tff_dgauss', noise_multiplier=1.0, bits=40), 'bits'),
])
def test_bad_input_names_the_parameter(kwargs, message):
  args = dict(clip_norm=1.0, clients_per_round=5, dim=10)
  args.update(kwargs)
  with pytest.raises((ValueError, TypeError), match=message):
    peers.Peer(**args)


def test_unreachable_target_names_the_best_epsilon():
  with pytest.raises(ValueError, match='not reachable for tff_skellam'):
    peers.calibrate('tff_skellam', 1.0, 1e-3, 100, 20, 1000, 500, 1.0, bits=6)


def test_accountant_from_round_rdp_composes_like_the_registry_route():
  mech = mechanisms.Gaussian(1.0, 3.0)
  direct = accounting.RoundAccountant(mech, 10, 100, 1e-5, 1)
  given = accounting.RoundAccountant.from_round_rdp(
      {a: mech_rdp for a, mech_rdp in direct.rdp.items()}, 10, 100, 1e-5, 1,
      'test')
  g = given.guarantee(30)
  assert g.route == 'RDP' and g.assumptions == 'test' and 'closed form' in g.pld_note
  # The registry route may also take dp-accounting's Gaussian bound: <=.
  assert direct.epsilon_rdp(30)[0] <= g.epsilon * (1 + 1e-12)


@pytest.mark.parametrize('name, bits', [('gaussian', None), ('tff_dgauss', 16)])
def test_calibrated_peers_run_within_a_tenth_of_a_percent_of_the_target(
    name, bits):
  """Peers compared at equal ε must be at equal ε: the default bisection
  leaves the whole run within 0.1% below the target."""
  peer = peers.calibrate(name, 10.0, 1e-4, 50, 20, 1000, 256, 1.0, bits)
  eps = peer.accountant(1000, 1e-4).epsilon_rdp(50)[0]
  assert 10.0 * (1 - 1e-3) <= eps <= 10.0


def test_a_field_too_small_for_tffs_scale_is_refused_naming_the_bits():
  """At 4 bits TFF's scale heuristic returns nan for 40 clients' sum: a
  refusal naming `bits`, not a float conversion error from deep inside."""
  peer = peers.Peer('tff_skellam', 1.0, 1.0, 40, 1000, 4)
  with pytest.raises(ValueError, match='raise `bits`'):
    peer.ddp_parameters()
  with pytest.raises(ValueError, match='raise `bits`'):
    peers.calibrate('tff_dgauss', 10.0, 1e-3, 10, 40, 1000, 1000, 1.0, bits=4)
