import math

import numpy as np
import pytest

from tests.mechanisms import mechanism_checks as checks
from tff_quant.mechanisms import qmgeo

PARAMS = [dict(clip=1.0, num_levels=8, p=0.5), dict(clip=0.05, num_levels=16, p=0.9),
          dict(clip=1.0, num_levels=8, p=0.5, full_support=True),
          dict(clip=0.05, num_levels=16, p=0.9, full_support=True),
          dict(clip=1.0, num_levels=2, p=0.3, full_support=True),
          dict(clip=0.05, num_levels=16, p=0.2, full_support=True,
               level_range=0.8),
          dict(clip=1.0, num_levels=8, p=0.5, level_range=2.5)]


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


def test_level_range_spans_the_levels_and_keeps_inputs_clipped():
  """W > c: levels span ±W, inputs are clipped to ±c, the critical inputs are
  ±c and the levels strictly inside, and W = c is the paper's mechanism."""
  wide = qmgeo.QMGeo.for_coordinate_bound(0.5, num_levels=9, p=0.3,
                                          range_ratio=4.0)
  assert wide.level_range == 2.0 and wide.input_bound == 0.5
  np.testing.assert_allclose(wide.levels, np.linspace(-2, 2, 9))
  np.testing.assert_allclose(wide.critical_inputs(), [-0.5, 0.0, 0.5])
  np.testing.assert_allclose(wide.pmf(3.0), wide.pmf(0.5), atol=0)
  paper = qmgeo.QMGeo.for_coordinate_bound(0.5, num_levels=9, p=0.3)
  assert paper.params() == qmgeo.QMGeo(0.5, 9, 0.3, True).params()
  np.testing.assert_allclose(paper.levels, np.linspace(-0.5, 0.5, 9))
  rebuilt = qmgeo.QMGeo(**wide.params())
  np.testing.assert_allclose(rebuilt.pmf(0.2), wide.pmf(0.2), atol=0)
  with pytest.raises(ValueError, match='level_range'):
    qmgeo.QMGeo(1.0, 8, 0.5, level_range=0.5)


def test_a_wider_level_range_is_more_private_and_keeps_more_signal():
  """At equal p the slope of E[output] grows with W (the walk's pull toward
  the middle is a smaller share of the range), and D∞ falls."""
  from tff_quant.accounting import divergence  # pylint: disable=g-import-not-at-top
  slopes, eps = [], []
  for ratio in (1.0, 4.0, 16.0):
    mech = qmgeo.QMGeo.for_coordinate_bound(1.0, num_levels=16, p=0.05,
                                            range_ratio=ratio)
    mean = lambda x, m=mech: float(np.dot(m.pmf(x), m.levels))
    slopes.append((mean(0.5) - mean(-0.5)) / 1.0)
    eps.append(divergence.epsilon_infinity(mech))
  assert slopes[0] < slopes[1] < slopes[2]
  assert eps[0] > eps[1] > eps[2]
