import math

import pytest

from tff_quant import mechanisms
from tff_quant.accounting import bounds, divergence


@pytest.mark.parametrize('delta_ratio', [0.429, 0.66, 1.0, 2.0, 2.33])
@pytest.mark.parametrize('q', [0.1, 0.42, 0.9])
@pytest.mark.parametrize('m', [4, 16])
def test_rqm_theorem_5_2_bounds_exact_dinf(delta_ratio, q, m):
  mech = mechanisms.RQM(clip=1.0, delta=delta_ratio, num_levels=m, q=q)
  assert divergence.epsilon_infinity(mech) <= bounds.rqm_theorem_5_2(mech) + 1e-9


def test_qmgeo_printed_bounds_are_not_bounds():
  for r, p in [(8, 0.5), (8, 0.9), (16, 0.9)]:
    as_written = mechanisms.QMGeo(1.0, r, p)
    sound = mechanisms.QMGeo(1.0, r, p, full_support=True)
    assert math.isinf(divergence.epsilon_infinity(as_written))  # eq. 21 is finite
    assert bounds.qmgeo_eq25(sound, 2) < 0  # a negative "RDP bound"
  sound = mechanisms.QMGeo(1.0, 8, 0.5, full_support=True)
  assert bounds.qmgeo_eq21(sound) == pytest.approx(
      divergence.epsilon_infinity(sound), rel=1e-9)
  sound = mechanisms.QMGeo(1.0, 8, 0.9, full_support=True)
  assert bounds.qmgeo_eq21(sound) < divergence.epsilon_infinity(sound)


@pytest.mark.parametrize('k', [2, 4, 16, 64])
def test_gaussian_rdp_bounds_quantized_gaussian(k):
  mech = mechanisms.QuantizedGaussian(clip=1.0, num_levels=k, sigma=1.0)
  for alpha in [1.0, 2.0, 8.0]:
    exact = divergence.renyi_divergence_of_sum(mech, alpha, 1).value
    assert exact <= bounds.gaussian_rdp(mech, alpha) + 1e-12


def test_bq_parameters_meet_constraints():
  s, m = bounds.bq_parameters(bits=6, epsilon=50.0, dim=10, batch_size=10,
                              dataset_size=60000)
  assert 2 * s + m + 1 <= 2**6
  mech = mechanisms.BQ(1.0, s, m)
  assert bounds.bq_lemma_1(mech, 10, 10, 60000) <= 50.0
  with pytest.raises(ValueError, match='No'):
    bounds.bq_parameters(bits=2, epsilon=1e-9, dim=10**6, batch_size=64,
                         dataset_size=100)
  assert bounds.binomial_mode_prob(100) == pytest.approx(
      math.sqrt(2 / (math.pi * 100)), rel=0.01)


def test_rqp_epsilon_t_as_printed():
  from scipy import stats  # pylint: disable=g-import-not-at-top
  mech = mechanisms.RandomizedProjection(bound=0.3, bits=4, q=0.5, sigma=0.1)
  a = (16 * 0.5 - 1) / 15
  c0 = 0.5 / 15
  num = a * (2 * stats.norm.cdf(0.3 / 15 / 0.1) - 1) + c0
  den = a * (stats.norm.cdf((0.3 + 0.02 + 0.45) / 0.1) -
             stats.norm.cdf((0.3 - 0.02 + 0.45) / 0.1)) + c0
  assert bounds.rqp_epsilon_t(mech, 0.45) == pytest.approx(math.log(num / den))


def test_rqp_paper_q_solves_the_printed_epsilon_t():
  target = 1.0 / (46 * 10 / 455)
  q = bounds.rqp_paper_q(0.3, 4, 0.09, 0.45, target)
  at = lambda v: bounds.rqp_epsilon_t(
      mechanisms.RandomizedProjection(0.3, 4, v, 0.09), 0.45)
  assert at(q) == pytest.approx(target, rel=1e-6)
  assert at(min(q + 0.01, 0.999)) > target
  with pytest.raises(ValueError, match='epsilon_t'):
    bounds.rqp_paper_q(0.3, 4, 0.09, 0.45, 1e-6)


@pytest.mark.parametrize('bits, epsilon', [(6, 50.0), (7, 20.0), (8, 12.0), (8, 5.2)])
def test_bq_parameters_equal_a_brute_force_scan(bits, epsilon):
  dim, batch, size = 3000, 32, 15000
  best = None
  for s in range(1, (2**bits - 1) // 2 + 1):
    for m in range(0, 2**bits - 1 - 2 * s + 1):
      if 8 * dim * s * batch * bounds.binomial_mode_prob(m) / size <= epsilon:
        v = bounds.bq_variance(s, m)
        if best is None or v < best[0]:
          best = (v, s, m)
  assert bounds.bq_parameters(bits, epsilon, dim, batch, size) == best[1:]


def test_bq_paper_table_2_epsilons_are_below_its_lemma_1():
  # Table II lists (s, m) = (1, 251) for ε = 1.72; Lemma 1 gives 2.57 for them.
  mech = mechanisms.BQ(0.0015, 1, 251)
  assert bounds.bq_lemma_1(mech, 3000, 32, 15000) == pytest.approx(2.57, abs=0.01)
  with pytest.raises(ValueError, match='No \\(s, m\\)'):
    bounds.bq_parameters(8, 1.72, 3000, 32, 15000)
