import math

import numpy as np
import pytest
from scipy import integrate, stats

from tests.mechanisms import mechanism_checks as checks
from tff_quant.mechanisms import quantized_gaussian as qg

PARAMS = [dict(clip=1.0, num_levels=8, sigma=0.3), dict(clip=1.0, num_levels=2, sigma=1.0),
          dict(clip=0.5, num_levels=64, sigma=0.05)]


def quad_pmf(mech, x):
  """Lemma 2 by adaptive quadrature (independent of the log-space integrator)."""
  b, d, s = mech.levels, mech.level_step, mech.sigma
  f = lambda y: stats.norm.pdf(y, x, s)
  out = []
  for r in range(mech.num_levels):
    val = 0.0
    if r > 0:
      val += integrate.quad(lambda y: f(y) * (y - b[r - 1]) / d, b[r - 1], b[r],
                            epsabs=0, epsrel=1e-12)[0]
    if r < mech.num_levels - 1:
      val += integrate.quad(lambda y: f(y) * (b[r + 1] - y) / d, b[r], b[r + 1],
                            epsabs=0, epsrel=1e-12)[0]
    out.append(val)
  out[0] += stats.norm.cdf(b[0], x, s)
  out[-1] += stats.norm.sf(b[-1], x, s)
  return np.array(out)


@pytest.mark.parametrize('x', [-0.5, 0.0, 0.21, 0.5])
def test_pmf_matches_quadrature(x):
  mech = qg.QuantizedGaussian(clip=1.0, num_levels=8, sigma=0.3)
  np.testing.assert_allclose(mech.pmf(x), quad_pmf(mech, x), rtol=1e-9)


def test_tail_log_pmf_accurate_where_float64_underflows():
  """σ tiny: far levels ~ exp(-1e4); compare with the asymptotic Mills ratio."""
  mech = qg.QuantizedGaussian(clip=1.0, num_levels=4, sigma=0.01)
  x = -0.5
  log_p = mech.log_pmf(x)
  assert np.all(np.isfinite(log_p))
  # The top level is reached only through saturation + the last hat's rise;
  # both integrals are dominated near B(k-2) = 1/3: log P ~ -z^2/2 - log z^2 ...
  # Check instead against a direct log-space quadrature of the rise integral.
  b, d, s = mech.levels, mech.level_step, mech.sigma
  z_lo, z_hi = (b[2] - x) / s, (b[3] - x) / s
  def scaled(z):  # integrand divided by phi(z_lo)
    return (z - z_lo) * s / d * math.exp(-0.5 * (z * z - z_lo * z_lo))
  val = integrate.quad(scaled, z_lo, z_hi, epsabs=0, epsrel=1e-12, limit=200,
                       points=[z_lo + k / z_lo for k in (1, 5, 20)])[0]
  tail = integrate.quad(lambda z: math.exp(-0.5 * (z * z - z_lo * z_lo)),
                        z_hi, z_hi + 50, epsabs=0, epsrel=1e-12)[0]
  expected = (-0.5 * z_lo**2 - 0.5 * math.log(2 * math.pi) +
              math.log(val + tail))
  assert log_p[3] < -3000  # exp(-3000) underflows float64
  assert log_p[3] == pytest.approx(expected, rel=1e-9)


def test_decode_unbiased_without_saturation():
  mech = qg.QuantizedGaussian(clip=1.0, num_levels=16, sigma=0.04)  # 12 sigma margin
  for x in [-0.5, 0.13, 0.5]:
    checks.assert_pmf_mean_is_input(mech, x, atol=1e-9)
    checks.assert_decode_unbiased(mech, x)


def test_saturation_bias_is_reported_by_pmf():
  mech = qg.QuantizedGaussian(clip=1.0, num_levels=8, sigma=1.0)
  assert np.dot(mech.levels, mech.pmf(0.5)) < 0.45


@pytest.mark.parametrize('kwargs, name, error', [
    (dict(clip=0.0), 'clip', ValueError), (dict(num_levels=1), 'num_levels', ValueError),
    (dict(sigma=0.0), 'sigma', ValueError), (dict(sigma=float('inf')), 'sigma', ValueError)])
def test_invalid_params_raise(kwargs, name, error):
  with pytest.raises(error, match=f'`{name}`'):
    qg.QuantizedGaussian(**dict(PARAMS[0], **kwargs))


@pytest.mark.parametrize('params', PARAMS)
def test_local_bound_holds(params):
  """α t²/(2σ²) bounds the secure sum for any others (data processing)."""
  mech = qg.QuantizedGaussian(**params)
  checks.assert_local_bound_holds(mech)
  bound = mech.local_divergences([2.0, math.inf], [0.1, 0.5])
  np.testing.assert_allclose(bound[2.0], 2 * np.array([0.1, 0.5])**2 /
                             (2 * params['sigma']**2))
  assert np.all(np.isinf(bound[math.inf]))
