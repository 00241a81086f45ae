import math

import numpy as np
import pytest
from scipy import stats

from tests.mechanisms import mechanism_checks as checks
from tff_quant.mechanisms import randomized_projection as rp

PARAMS = [dict(bound=0.3, bits=4, q=0.5, sigma=0.05),
          dict(bound=0.3, bits=2, q=0.9, sigma=0.0, input_bound=0.5),
          dict(bound=1.0, bits=3, q=1 / 7, sigma=0.4, input_bound=1.2),
          dict(bound=2.0, bits=4, q=0.9, sigma=0.5, input_bound=0.5, lattice=5)]


def test_end_cells_absorb_the_clipped_tails():
  mech = rp.RandomizedProjection(bound=0.3, bits=4, q=0.6, sigma=0.1, input_bound=0.4)
  a = mech.nearest_level_probs(0.4)
  h = mech.level_step / 2
  assert a[-1] == pytest.approx(stats.norm.sf(0.3 - h, 0.4, 0.1))
  assert a.sum() == pytest.approx(1.0)
  # The paper's interior formula for the top cell misses the mass above Q_top + h:
  paper_top = stats.norm.cdf(0.3 + h, 0.4, 0.1) - stats.norm.cdf(0.3 - h, 0.4, 0.1)
  assert paper_top < a[-1] - 0.1


def test_every_level_possible_so_dinf_is_finite():
  mech = rp.RandomizedProjection(**PARAMS[1])
  for x in checks.standard_inputs(mech):
    assert np.all(mech.pmf(x) >= (1 - mech.q) / (mech.num_levels - 1) - 1e-15)


@pytest.mark.parametrize('kwargs, name, error', [
    (dict(bound=0.0), 'bound', ValueError), (dict(bits=0), 'bits', ValueError),
    (dict(q=1.0), 'q', ValueError), (dict(q=0.01), 'q', ValueError),
    (dict(sigma=-1.0), 'sigma', ValueError),
    (dict(input_bound=0.0), 'input_bound', ValueError)])
def test_invalid_params_raise(kwargs, name, error):
  with pytest.raises(error, match=f'`{name}`'):
    rp.RandomizedProjection(**dict(PARAMS[0], **kwargs))


def test_one_bit_takes_every_q_that_favours_the_nearest_level():
  """q >= 1/L: at b = 1 (L = 2) q in [0.5, 1) builds, below it is refused."""
  for q in (0.5, 0.9):
    mech = rp.RandomizedProjection(bound=1.0, bits=1, q=q, sigma=0.1)
    assert np.exp(mech.log_pmf(1.0)).sum() == pytest.approx(1.0)
  with pytest.raises(ValueError, match='`q`'):
    rp.RandomizedProjection(bound=1.0, bits=1, q=0.49, sigma=0.1)


@pytest.mark.parametrize('params', PARAMS)
def test_local_bound_holds(params):
  """min(Gaussian, randomized response) bounds the secure sum for any others;
  at σ = 0 it is the randomized response's, D∞ = log(q(L-1)/(1-q)) included."""
  mech = rp.RandomizedProjection(**params)
  checks.assert_local_bound_holds(mech)
  if params['sigma'] == 0:
    big_l, q = 2**params['bits'], params['q']
    bound = mech.local_divergences([np.inf], [1e-3, 0.4])[np.inf]
    np.testing.assert_allclose(bound, np.log(q * (big_l - 1) / (1 - q)))


def test_lattice_and_range_from_the_coordinate_bound():
  """range_ratio sets M = ratio·c∞, the lattice's points are the critical
  inputs, the law is the paper's at them and affine between, and the local
  bound (the Gaussian's chord between lattice multiples, capped by the
  randomized response's) holds, above the paper's."""
  mech = rp.RandomizedProjection.for_coordinate_bound(
      0.5, bits=4, q=0.9, noise_multiplier=1.0, range_ratio=4.0, lattice=5)
  assert mech.bound == 2.0 and mech.input_bound == 0.5 and mech.sigma == 0.5
  assert mech.piecewise_affine
  paper = rp.RandomizedProjection(2.0, 4, 0.9, 0.5, input_bound=0.5)
  np.testing.assert_allclose(mech.critical_inputs(), [-.5, -.25, 0, .25, .5])
  np.testing.assert_allclose(mech.pmf(0.25), paper.pmf(0.25), rtol=1e-12)
  np.testing.assert_allclose(mech.pmf(0.1),
                             0.6 * paper.pmf(0.0) + 0.4 * paper.pmf(0.25),
                             rtol=1e-12)
  local = mech.local_divergences([2.0], [0.01, 1.0])[2.0]
  assert 0 < local[0] <= local[1]
  assert paper.local_divergences([2.0], [0.01])[2.0][0] < local[0]
  checks.assert_local_bound_holds(mech)
  np.testing.assert_allclose(
      rp.RandomizedProjection(**mech.params()).pmf(0.3), mech.pmf(0.3), rtol=0)


def test_the_default_q_follows_the_bits_and_a_given_q_wins():
  complete = rp.RandomizedProjection.complete_params
  assert complete({})['q'] == 0.9 and complete({'bits': 4})['q'] == 0.9
  assert complete({'bits': 7})['q'] == 0.9
  assert complete({'bits': 8})['q'] == 0.99
  assert complete({'bits': 12})['q'] == 0.99
  assert complete({'bits': 8, 'q': 0.5})['q'] == 0.5
  assert rp.RandomizedProjection.for_coordinate_bound(0.1, bits=8).q == 0.99
  for bits in range(1, 25):   # the default is a valid q at every width
    assert complete({'bits': bits})['q'] >= 1 / 2**bits
  with pytest.raises(ValueError, match='bits'):
    complete({'bits': 0})


def edge_mechanisms(c):
  """Randomized projection at clip c without noise, with a cell edge
  between c and float32(c) when float32 rounds c up: the float32 lattice's
  end point float32(c) fell in the next cell (nearest level 3 instead of 2
  w.p. q = 0.9), so the law at the edge was not the pmf's at c
  (contract_test.py)."""
  # Where float32 rounds c down, the edge still sits clear of c (1e-9c).
  above = max(float(np.float32(c)) - c, 1e-9 * c)
  return [rp.RandomizedProjection(1.5 * (c + above / 2), 2, 0.9, 0.0, c, 9),
          rp.RandomizedProjection(2 * c, 8, 0.9, 0.3 * c, c, 0)]


def test_resampled_level_reaches_every_level_at_24_bits():
  """The resampled ("other") level is uniform over the L - 1 others: at
  b = 24 a float32 uniform (multiples of 2^-23) reached only odd levels
  below the nearest and even ones above it, so every level the pmf gives
  (1-q)/(L-1) was impossible at half the inputs. Below the nearest, odd
  and even levels must each be half the draws (5 standard deviations)."""
  mech = rp.RandomizedProjection(1.0, 24, 2.0**-23, 0.0)
  draws = 50_000
  levels = checks.sample(mech, 0.0, num=draws)
  nearest = 2**23   # of x = 0
  below = levels[levels < nearest]
  assert below.size > 0.45 * draws
  odd = float(np.mean(below % 2))
  assert abs(odd - 0.5) <= 5 * np.sqrt(0.25 / below.size), odd


def _exact_paper_log_pmf(mech, x):
  """The paper's law at the float input x, 40 digits: cell i of the exact
  edges -M + (2i ± 1)M/(L-1), P_i = r + A_i(q - r)."""
  import mpmath   # pylint: disable=g-import-not-at-top
  with mpmath.workdps(40):
    big_m, big_l = mpmath.mpf(mech.bound), mech.num_levels
    q = mpmath.mpf(mech.q)
    r = (1 - q) / (big_l - 1)
    x = mpmath.mpf(x)
    out = []
    for i in range(big_l):
      lo = -mpmath.inf if i == 0 else -big_m + (2 * i - 1) * big_m / (big_l - 1)
      hi = mpmath.inf if i == big_l - 1 else -big_m + (2 * i + 1) * big_m / (big_l - 1)
      if mech.sigma == 0:
        a = 1 if lo <= x < hi else 0
      else:
        s = mpmath.mpf(mech.sigma)
        a = mpmath.ncdf((hi - x) / s) - mpmath.ncdf((lo - x) / s)
        if a < mpmath.mpf(10)**-30:   # the tail side, without cancellation
          a = (mpmath.ncdf((x - lo) / s) - mpmath.ncdf((x - hi) / s)
               if lo - x > 0 else a)
      out.append(mpmath.log(r + a * (q - r)))
    return out


def _exact_log_pmf(mech, x):
  """`_exact_paper_log_pmf`, mixed over the input lattice as the code does
  (`exact_lattice_log_pmf`)."""
  return checks.exact_lattice_log_pmf(
      mech, x, lambda v: _exact_paper_log_pmf(mech, v), 40)


C_SERVED = 0.03314563036811941   # 3/√8192, the served cells' c∞


@pytest.mark.parametrize('params', [
    # The served cells (results/served_cells): 8 bits ε = 10, 4 bits ε = 10.
    dict(bound=0.5303300858899106, bits=8, q=0.99, sigma=0.1444441747713754,
         input_bound=C_SERVED, lattice=9),
    dict(bound=0.2651650429449553, bits=4, q=0.9, sigma=0.1296050545613571,
         input_bound=C_SERVED, lattice=9),
    # Extremes: σ ≪ the cells (tails to Φ(-37) and beyond), q = 1/L, σ = 0,
    # inputs past the levels.
    dict(bound=1.0, bits=4, q=0.5, sigma=0.01),
    dict(bound=1.0, bits=3, q=1 / 8, sigma=2.0, input_bound=1.5),
    dict(bound=0.3, bits=2, q=0.9, sigma=0.0, input_bound=0.5)])
def test_log_pmf_within_its_proved_error(params):
  """`log_pmf_error` bounds the computed log-pmf against 40-digit mpmath at
  ±c, 0, the lattice points and off-lattice inputs; the bound is within
  10^3 of the largest error measured (a sanity check on its tightness)."""
  mech = rp.RandomizedProjection(**params)
  c = mech.input_bound
  rng = np.random.default_rng(0)
  xs = np.concatenate([[-c, c, 0.0, 0.37 * c], rng.uniform(-c, c, 3)])
  checks.assert_log_pmf_within_error(
      mech, lambda x: _exact_log_pmf(mech, x), xs)


@pytest.mark.parametrize('params', [
    dict(bound=1.0, bits=24, q=0.99, sigma=1e-9),
    dict(bound=1.0, bits=24, q=2.0**-24, sigma=1e6),
    dict(bound=1.0, bits=1, q=1 - 2.0**-53, sigma=1e-11, input_bound=9.0),
    dict(bound=1e-100, bits=24, q=0.5, sigma=1e90, lattice=4097)])
def test_log_pmf_error_finite_across_the_covered_range(params):
  """η is finite and positive at the ends of the range it covers."""
  eta = rp.RandomizedProjection(**params).log_pmf_error
  assert 0 < eta < 0.01 and math.isfinite(eta)


@pytest.mark.parametrize('params', [
    dict(bound=1.0, bits=4, q=0.9, sigma=1e-13),
    dict(bound=1e-300, bits=24, q=0.9, sigma=1e-100)])
def test_log_pmf_error_refuses_a_sigma_it_does_not_cover(params):
  with pytest.raises(ValueError, match='`sigma`'):
    rp.RandomizedProjection(**params).log_pmf_error  # pylint: disable=expression-not-assigned
