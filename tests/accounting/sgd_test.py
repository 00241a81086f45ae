import math

import dp_accounting
import numpy as np
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import divergence, per_round, sgd


def _rp(q=0.6, sigma=0.09, bits=3):
  return mechanisms.RandomizedProjection(0.3, bits, q, sigma, input_bound=0.75)


def test_dp_sgd_full_batch_equals_gaussian_rdp():
  # gamma = 1: WBK19 returns the unsampled RDP 2α/z², i.e. a Gaussian of noise
  # multiplier z/2 at sensitivity 1, composed over the steps.
  z, steps, delta = 3.0, 7, 1e-6
  acc = dp_accounting.rdp.RdpAccountant(list(sgd._ORDERS))
  acc.compose(dp_accounting.GaussianDpEvent(z / 2), steps)
  assert sgd.dp_sgd_epsilon(z, 10, 10, steps, delta) == pytest.approx(
      acc.get_epsilon(delta), rel=1e-9)


def test_dp_sgd_noise_multiplier_meets_target_tightly():
  z = sgd.dp_sgd_noise_multiplier(1.0, 1e-7, 10, 455, 46)
  assert sgd.dp_sgd_epsilon(z, 10, 455, 46, 1e-7) <= 1.0
  assert sgd.dp_sgd_epsilon(z * 0.999, 10, 455, 46, 1e-7) > 1.0
  assert sgd.dp_sgd_epsilon(2 * z, 10, 455, 46, 1e-7) < 1.0  # monotone


def test_vector_bound_dim_one_is_the_scalar_bound():
  mech, s = _rp(), 0.09
  scalar = divergence.epsilon_infinity_local(mech, s, 401)
  vec = sgd.vector_epsilon_infinity(mech, s, 1)
  assert scalar - 1e-12 <= vec <= scalar * 1.1


@pytest.mark.parametrize('dim', [2, 5])
def test_vector_bound_covers_every_split_of_the_sensitivity(dim):
  mech, s = _rp(), 0.09
  bound = sgd.vector_epsilon_infinity(mech, s, dim)
  f = lambda d: divergence.epsilon_infinity_local(mech, d, 401) if d > 0 else 0.0
  rng = np.random.default_rng(0)
  splits = [np.eye(dim)[0], np.ones(dim) / math.sqrt(dim)]
  splits += [v / np.linalg.norm(v) for v in rng.normal(size=(6, dim))]
  worst = max(sum(f(abs(s * c)) for c in v) for v in splits)
  assert worst <= bound + 1e-9
  # ... and is far below the trivial dim × (whole shift on every coordinate).
  assert bound < dim * f(s)


def test_amplification_by_subsampling():
  assert sgd.amplified_pure_epsilon(2.0, 1.0) == pytest.approx(2.0)
  eps, gamma = 2.0, 0.01
  assert sgd.amplified_pure_epsilon(eps, gamma) == pytest.approx(
      math.log1p(gamma * math.expm1(eps)))
  assert sgd.amplified_pure_epsilon(eps, gamma) > gamma * eps  # the paper's count
  assert sgd.amplified_pure_epsilon(math.inf, 0.5) == math.inf
  with pytest.raises(ValueError, match='sampling_rate'):
    sgd.amplified_pure_epsilon(1.0, 0.0)


def test_rqp_sgd_epsilon_composes_the_amplified_step():
  mech = _rp()
  out = sgd.rqp_sgd_epsilon(mech, clip=0.45, learning_rate=1.0, batch_size=10,
                            dataset_size=455, steps=46, dim=4)
  assert out['l2_sensitivity'] == pytest.approx(0.09)
  assert out['per_coordinate_step'] == pytest.approx(
      divergence.epsilon_infinity_local(mech, 0.09))
  assert out['per_step_amplified'] == pytest.approx(
      sgd.amplified_pure_epsilon(out['per_step'], 10 / 455))
  assert out['total'] == pytest.approx(46 * out['per_step_amplified'])


@pytest.mark.parametrize('kwargs, name', [
    (dict(noise_multiplier=0.0, batch_size=1, dataset_size=2, steps=1, delta=0.1),
     'noise_multiplier'),
    (dict(noise_multiplier=1.0, batch_size=3, dataset_size=2, steps=1, delta=0.1),
     'dataset_size'),
    (dict(noise_multiplier=1.0, batch_size=1, dataset_size=2, steps=0, delta=0.1),
     'steps'),
    (dict(noise_multiplier=1.0, batch_size=1, dataset_size=2, steps=1, delta=1.0),
     'delta')])
def test_dp_sgd_rejects_bad_arguments(kwargs, name):
  with pytest.raises(ValueError, match=name):
    sgd.dp_sgd_epsilon(**kwargs)


def test_vector_bound_rejects_bad_arguments():
  with pytest.raises(ValueError, match='l2_sensitivity'):
    sgd.vector_epsilon_infinity(_rp(), 0.0, 3)
  with pytest.raises(ValueError, match='dim'):
    sgd.vector_epsilon_infinity(_rp(), 0.1, 0)


def test_amplification_is_finite_for_huge_epsilon():
  assert sgd.amplified_pure_epsilon(5000.0, 0.01) == pytest.approx(
      5000.0 + math.log(0.01), rel=1e-12)
  assert sgd.amplified_pure_epsilon(30.5, 0.01) == pytest.approx(
      math.log1p(0.01 * math.expm1(30.5)), rel=1e-12)


def test_vector_bound_is_infinite_where_the_scalar_one_is():
  # QMGeo as written has D∞ = inf at every shift (bounds.py); its
  # full-support variant is finite and at least the one-coordinate value.
  assert sgd.vector_epsilon_infinity(mechanisms.QMGeo(1.0, 8, 0.5), 0.5, 4) == (
      math.inf)
  full = mechanisms.QMGeo(1.0, 8, 0.5, full_support=True)
  vec = sgd.vector_epsilon_infinity(full, 0.5, 4)
  assert math.isfinite(vec)
  assert vec >= 4 * divergence.epsilon_infinity_local(full, 0.25, 401) - 1e-12


def test_example_level_rdp_composes_the_subsampled_round():
  mech = mechanisms.RQM(clip=1.0, delta=1.0, num_levels=8, q=0.42)
  orders = range(2, 17)
  rdp = per_round.per_round_rdp(mech, 3, 10, orders)
  full = sgd.example_level_rdp(mech, 3, 10, 1.0, 20, 1e-5, orders=orders)
  assert full['per_round_rdp'] == {a: rdp[a] for a in orders}
  expected, _ = dp_accounting.rdp.compute_epsilon(
      list(orders), [20 * rdp[a] for a in orders], 1e-5)
  assert full['epsilon'] == pytest.approx(expected, rel=1e-12)
  sampled = sgd.example_level_rdp(mech, 3, 10, 0.05, 20, 1e-5, orders=orders)
  assert all(sampled['per_round_rdp'][a] <= rdp[a] for a in orders)
  assert sampled['epsilon'] < full['epsilon']
