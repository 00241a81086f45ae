import numpy as np
import pytest
from scipy import stats

from tests.mechanisms import mechanism_checks as checks
from tff_quant.mechanisms import pbm

PARAMS = [dict(clip=1.0, num_levels=16, theta=0.25),
          dict(clip=0.02, num_levels=4, theta=0.5),
          dict(clip=3.0, num_levels=256, theta=0.1)]


def test_pmf_is_binomial_and_tail_is_finite():
  mech = pbm.PBM(clip=1.0, num_levels=1000, theta=0.4)
  x = 0.3
  np.testing.assert_allclose(
      mech.pmf(x), stats.binom.pmf(np.arange(1000), 999, 0.5 + 0.4 * 0.3),
      rtol=1e-10, atol=1e-300)
  log_p = mech.log_pmf(1.0)
  assert np.all(np.isfinite(log_p)) and log_p.min() < -700


def test_theta_half_is_deterministic_at_the_ends():
  mech = pbm.PBM(clip=1.0, num_levels=8, theta=0.5)
  p = mech.pmf(1.0)
  assert p[-1] == 1.0 and np.all(p[:-1] == 0)


@pytest.mark.parametrize('params', PARAMS[:2])
def test_decode_unbiased(params):
  mech = pbm.PBM(**params)
  for x in [-mech.clip, 0.3 * mech.clip, mech.clip]:
    checks.assert_decode_unbiased(mech, x)


@pytest.mark.parametrize('kwargs, name, error', [
    (dict(clip=0.0), 'clip', ValueError), (dict(num_levels=1), 'num_levels', ValueError),
    (dict(theta=0.0), 'theta', ValueError), (dict(theta=0.51), 'theta', ValueError),
    (dict(theta='a'), 'theta', TypeError)])
def test_invalid_params_raise(kwargs, name, error):
  with pytest.raises(error, match=f'`{name}`'):
    pbm.PBM(**dict(PARAMS[0], **kwargs))


def edge_mechanisms(c):
  """PBM at clip c: θ = ½ (one level at ±c), and more trials than the
  inversion serves (TF's sampler) (contract_test.py)."""
  return [pbm.PBM(c, 16, 0.5), pbm.PBM(c, 100, 0.3)]


def test_theta_the_sampler_would_round_to_a_half_is_refused():
  """Within the sampler's snapping radius of 1/2 the end probabilities
  would be sampled as 0 and 1 (θ = 1/2) while the pmf says otherwise."""
  for theta in (0.5 - 1e-15, 0.4999999999999999):
    with pytest.raises(ValueError, match='theta'):
      pbm.PBM(clip=1.0, num_levels=4, theta=theta)
  pbm.PBM(clip=1.0, num_levels=4, theta=0.5 - 1e-12)
  pbm.PBM(clip=1.0, num_levels=4, theta=0.5)
