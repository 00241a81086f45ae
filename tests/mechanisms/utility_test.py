"""The debiased error (`mechanisms.utility`): exact moments of the decoded mean
against brute-force laws and Monte Carlo of encode/decode, slopes, the TFF
modulus rule, bad input."""

import math

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from tff_quant import mechanisms
from tff_quant.mechanisms import skellam
from tff_quant.mechanisms import utility

CLIENTS = 6
ROUNDS = 20_000    # Monte Carlo draws of the decoded mean per input
SIGMAS = 5.0
# Small alphabets (brute-force laws stay cheap); a modular sum that wraps
# partly at the range ends; noise about the quantizer's range. A mechanism
# not listed is tested at its defaults.
PARAMS = {'rqm': dict(num_levels=8), 'pbm': dict(num_levels=8),
          'qmgeo': dict(num_levels=8),
          'quantized_gaussian': dict(num_levels=8, noise_multiplier=1.0),
          'randomized_projection': dict(bits=3, noise_multiplier=1.0),
          'skellam': dict(num_levels=64, steps=4, noise_fraction=3 / 64),
          'ddgauss': dict(num_levels=64, steps=4, noise_fraction=3 / 64)}


def _build(name):
  return mechanisms.build(name, 1.0, **PARAMS.get(name, {}))


def _exact_law(mech, n, x):
  """(values of D, their probabilities): the decoded mean of n clients at x
  by brute-force convolution of the per-client pmf (mod M for a modular sum)."""
  p = mech.pmf(x)
  if mech.modulus is not None:
    law = np.zeros(mech.modulus)
    law[0] = 1.0
    for _ in range(n):
      law = np.real(np.fft.ifft(np.fft.fft(law) * np.fft.fft(p)))
    law = np.maximum(law, 0.0)
    return mech.levels / n, law / law.sum()   # levels: γ·centre(i)
  law = np.ones(1)
  for _ in range(n):
    law = np.convolve(law, p)
  s = np.arange(law.size)
  return (n * mech.level_offset + mech.level_step * s) / n, law


def _law_moments(values, probs):
  mean = float(np.dot(probs, values))
  var = float(np.dot(probs, (values - mean)**2))
  return mean, var, float(np.dot(probs, (values - mean)**4))


def _monte_carlo(mech, n, x, seed):
  """ROUNDS decoded means of n clients at x, through encode and decode as the
  factory runs them (sum of levels, mod M for a modular sum)."""
  levels = mech.encode(tf.fill([ROUNDS * n], tf.constant(x, tf.float32)),
                       tf.constant(seed, tf.int64)).numpy().astype(np.int64)
  sums = levels.reshape(ROUNDS, n).sum(axis=1)
  if mech.modulus is not None:
    sums %= mech.modulus
  return mech.decode(tf.constant(sums), n).numpy().astype(np.float64) / n


@pytest.mark.parametrize('name', list(mechanisms.registry()))
def test_exact_moments_match_the_law_and_monte_carlo(name):
  mech = _build(name)
  c = mech.input_bound
  for i, x in enumerate([float(np.float32(0.123 * c)), -c]):
    mean, var, slope = mech.decoded_moments(CLIENTS, x)
    law_mean, law_var, mu4 = _law_moments(*_exact_law(mech, CLIENTS, x))
    assert mean == pytest.approx(law_mean, rel=1e-9, abs=1e-12 * c)
    assert var == pytest.approx(law_var, rel=1e-9)
    draws = _monte_carlo(mech, CLIENTS, x, (5, 17 + i))
    assert abs(draws.mean() - mean) <= SIGMAS * math.sqrt(var / ROUNDS), (x, mean)
    # Var of the sample variance: (μ4 - v²)/N.
    assert abs(draws.var() - var) <= SIGMAS * math.sqrt((mu4 - var**2) / ROUNDS)
    # The slope: the right difference of the exact law's mean.
    h = 1e-6 * c
    right = (_law_moments(*_exact_law(mech, CLIENTS, x + h))[0] - law_mean) / h
    assert slope == pytest.approx(right, rel=1e-4, abs=1e-6), x


@pytest.mark.parametrize('name', list(mechanisms.registry()))
def test_slopes_integrate_to_the_monte_carlo_secant(name):
  """∫ s(x) dx over [-0.3c, 0.3c] (Simpson on the exact slopes) equals the
  exact mean's rise, and Monte Carlo's rise agrees within its variance."""
  mech = _build(name)
  c = mech.input_bound
  x1, x2 = float(np.float32(-0.3 * c)), float(np.float32(0.3 * c))
  xs = np.linspace(x1, x2, 201)
  slopes = np.array([mech.decoded_moments(CLIENTS, x)[2] for x in xs])
  m1, v1, _ = mech.decoded_moments(CLIENTS, x1)
  m2, v2, _ = mech.decoded_moments(CLIENTS, x2)
  from scipy import integrate  # pylint: disable=g-import-not-at-top
  assert integrate.simpson(slopes, x=xs) == pytest.approx(m2 - m1, rel=2e-3)
  rise = (_monte_carlo(mech, CLIENTS, x2, (9, 1)).mean()
          - _monte_carlo(mech, CLIENTS, x1, (9, 2)).mean())
  assert abs(rise - (m2 - m1)) <= SIGMAS * math.sqrt((v1 + v2) / ROUNDS)


@pytest.mark.parametrize('name', ['rqm', 'pbm', 'bq'])
def test_unbiased_mechanisms_have_slope_one_and_their_variance(name):
  mech = _build(name)
  util = mech.signal_utility(10)
  assert mech.unbiased and util.slope == 1.0
  assert util.error == pytest.approx(mech.decoded_mean_mse(10), rel=1e-12)
  assert util.error == pytest.approx(util.variance)


def test_gaussian_is_sigma_squared_over_n_at_slope_one():
  mech = mechanisms.build('gaussian', 0.5, noise_multiplier=3.0)
  util = mech.signal_utility(25)
  assert (util.slope, util.error) == (1.0, pytest.approx(1.5**2 / 25))
  assert mech.decoded_moments(25, 0.2) == (0.2, pytest.approx(1.5**2 / 25), 1.0)


def test_a_modular_sum_that_holds_its_noise_has_slope_one():
  # n = 40, σ = 6 steps: the sum's noise std 38 against M/2 = 2048.
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=4096, steps=8,
                                    noise_std=6.0)
  util = mech.signal_utility(40)
  assert util.slope == pytest.approx(1.0, abs=1e-12) and util.carries_signal
  # No wrap: Var = γ²(nσ² + Σ rounding)/n², worst at half steps (1/4 each).
  assert util.error == pytest.approx(
      (1 / 8)**2 * (40 * 36 + 40 * 0.25) / 40**2, rel=1e-9)
  assert mech.modulus >= mech.modulus_needed(40)


def test_a_wrapped_modular_sum_has_slope_near_zero():
  """The issue's case: Skellam at 4 bits, n = 100, 2 rounding steps, σ = 0.82
  steps per client (summed std 8.2 against M = 16): the sum mod 16 is nearly
  uniform; its decoded mean barely moves, exactly and by Monte Carlo."""
  mech = skellam.DistributedSkellam(clip=1.0, num_levels=16, steps=2,
                                    noise_std=0.82)
  n = 100
  util = mech.signal_utility(n, signal_bound=1 / 3)
  assert abs(util.slope) < 0.02 and not util.carries_signal
  assert util.error == math.inf   # the mean turns back inside the range
  m1, v1, _ = mech.decoded_moments(n, -0.5)
  m2, v2, _ = mech.decoded_moments(n, 0.5)
  assert abs(m2 - m1) < 0.02   # an unbiased mechanism's rise: 1
  rise = (_monte_carlo(mech, n, 0.5, (3, 1)).mean()
          - _monte_carlo(mech, n, -0.5, (3, 2)).mean())
  assert abs(rise - (m2 - m1)) <= SIGMAS * math.sqrt((v1 + v2) / ROUNDS)
  assert mech.modulus_needed(n, 1 / 3) > 16 * 10


def test_quantized_gaussian_slope_is_the_unclipped_probability():
  """E[value] = E[clip(x + N, -Cq, Cq)], so s(x) = P(|x + N| < Cq)."""
  mech = mechanisms.QuantizedGaussian(clip=1.0, num_levels=16, sigma=40.0)
  for x in (0.0, 0.3, -0.5):
    want = stats.norm.cdf((1 - x) / 40) - stats.norm.cdf((-1 - x) / 40)
    assert mech.decoded_moments(10, x)[2] == pytest.approx(want, rel=1e-6)
  util = mech.signal_utility(10)
  assert util.slope < 0.03 and not util.carries_signal
  assert math.isfinite(util.error)   # debiased, the signal is still there


def test_dense_levels_are_subsampled_within_the_rounding_variance(monkeypatch):
  """Randomized projection at 12 bits (1,365 levels inside |x| <= c/3): an
  even subset of 256 gives the same worst case to within step²/4 per
  client, at a fifth of the pmfs."""
  mech = mechanisms.RandomizedProjection(1.0, 12, 0.9, 2.0)
  capped = mech.signal_utility(10, 1 / 3)
  assert utility.evaluation_points(mech, 1 / 3).size < 600
  monkeypatch.setattr(utility, '_MAX_CRITICAL', 10**6)
  full = mech.signal_utility(10, 1 / 3)
  step = mech.level_step
  assert abs(capped.variance - full.variance) <= step**2 / 4 / 10
  assert capped.slope == pytest.approx(full.slope, rel=1e-6)
  assert capped.error == pytest.approx(full.error, rel=1e-6)


def test_modulus_rule_reproduces_tff_distributed_dp_sizing():
  """TFF's scale factor for `bits` (distributed_dp._heuristic_scale_factor)
  makes our modulus_needed 2^bits: the same rule (TFF's k is a float32
  erfcinv, 3e-8 off ours)."""
  from tensorflow_federated.python.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
  k = utility.modclip_stddevs()
  assert k == pytest.approx(distributed_dp._clip_prob_to_num_stddevs(1e-4),
                            rel=1e-6)
  for stddev, clip, bits, n, dim in [(0.07, 1.0, 16, 100, 65536),
                                     (0.5, 0.3, 12, 40, 1024),
                                     (0.01, 2.0, 20, 1000, 2**20)]:
    scale = float(distributed_dp._heuristic_scale_factor(
        stddev, clip, bits, n, dim, k).numpy())
    need = utility.modulus_needed(stddev * scale, n,
                                  clip / math.sqrt(dim) * scale)
    assert need == pytest.approx(2.0**bits, rel=1e-7)   # TF's float rounding


@pytest.mark.parametrize('call, match, generic', [
    (lambda m: m.signal_utility(0), 'num_clients', True),
    (lambda m: m.signal_utility(2.5), 'num_clients', True),
    (lambda m: m.signal_utility(3, signal_bound=-1.0), 'signal_bound', True),
    (lambda m: m.signal_utility(3, signal_bound=math.nan), 'signal_bound', True),
    (lambda m: m.decoded_moments(0, 0.1), 'num_clients', True),
    (lambda m: m.modulus_needed(0), 'num_clients', False),
    (lambda m: m.modulus_needed(3, modclip_prob=0.0), 'modclip_prob', False),
    (lambda m: utility.modulus_needed(-1.0, 3, 1.0), 'noise_std', False),
    (lambda m: utility.modulus_needed(1.0, 3, -1.0), 'signal_steps', False)])
def test_bad_input_is_refused_naming_the_parameter(call, match, generic):
  """On a modular mechanism and, for the generic calls, a per-client one."""
  for name in ('skellam', 'quantized_gaussian') if generic else ('skellam',):
    with pytest.raises((ValueError, TypeError), match=match):
      call(_build(name))


def test_a_utility_over_its_cost_is_refused_before_any_pmf(monkeypatch):
  """A mechanism whose pmfs cost over MAX_OPERATIONS (its `pmf_operations`
  says so; 541 inputs) is refused at once, naming the estimate, before any
  pmf is computed; RQM's own O(m) pmf at 65,536 levels is not refused."""

  class Costly(mechanisms.RQM):
    def pmf_operations(self):
      return 1e12

  mech = Costly(1.0, 2.0, 256, 1e-4)
  calls = []
  monkeypatch.setattr(Costly, 'log_pmf',
                      lambda self, x: calls.append(x) or 1 / 0)
  with pytest.raises(utility.CostError, match=r'needs ~\S+ operations'):
    mech.signal_utility(100)
  assert not calls
  monkeypatch.undo()
  assert mechanisms.RQM(1.0, 2.0, 2**16, 1e-4).pmf_operations() == 2**16
  small = mechanisms.RQM(1.0, 2.0, 256, 1e-4)
  assert small.signal_utility(100).error > 0
