import math

import numpy as np
import pytest

from tests.mechanisms import mechanism_checks as checks
from tff_quant.mechanisms import qmgeo

PARAMS = [dict(clip=1.0, num_levels=8, p=0.5), dict(clip=0.05, num_levels=16, p=0.9),
          dict(clip=1.0, num_levels=8, p=0.5, full_support=True),
          dict(clip=0.05, num_levels=16, p=0.9, full_support=True),
          dict(clip=1.0, num_levels=2, p=0.3, full_support=True)]


def test_pmf_matches_corrected_equations():
  """Eq. (9) with p_mix on the upward branch and normalisers matching supports."""
  big_r, p, w = 8, 0.5, 0.1
  mech = qmgeo.QMGeo(clip=1.0, num_levels=big_r, p=p)
  q = 1 - p
  t = (w + 1.0) / mech.level_step
  r, p_mix = math.floor(t), t - math.floor(t)
  expected = np.zeros(big_r)
  for i in range(big_r):
    if i <= r:
      expected[i] = (1 - p_mix) * p * q**(r - i) / (1 - q**(r + 1))
    else:
      expected[i] = p_mix * p * q**(i - r - 1) / (1 - q**(big_r - r - 1))
  np.testing.assert_allclose(mech.pmf(w), expected, atol=1e-15)


def test_as_written_is_one_sided_on_levels_and_full_support_is_not():
  plain = qmgeo.QMGeo(clip=1.0, num_levels=8, p=0.5)
  x = plain.levels[3]
  assert np.all(plain.pmf(x)[4:] == 0)       # p_mix = 0: nothing above
  assert plain.pmf(plain.levels[-1])[-1] == 1.0  # top input is deterministic
  sound = qmgeo.QMGeo(clip=1.0, num_levels=8, p=0.5, full_support=True)
  for y in checks.standard_inputs(sound):
    assert np.all(sound.pmf(y) > 0)


def test_full_support_is_continuous_at_levels():
  sound = qmgeo.QMGeo(clip=1.0, num_levels=8, p=0.5, full_support=True)
  x = sound.levels[3]
  np.testing.assert_allclose(sound.pmf(x), sound.pmf(np.nextafter(x, -2)),
                             atol=1e-12)


@pytest.mark.parametrize('kwargs, name, error', [
    (dict(clip=0.0), 'clip', ValueError), (dict(num_levels=1), 'num_levels', ValueError),
    (dict(p=0.0), 'p', ValueError), (dict(p=1.0), 'p', ValueError), (dict(full_support=1), 'full_support', TypeError)])
def test_invalid_params_raise(kwargs, name, error):
  with pytest.raises(error, match=f'`{name}`'):
    qmgeo.QMGeo(**dict(PARAMS[0], **kwargs))
