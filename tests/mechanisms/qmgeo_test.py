import math

import numpy as np
import pytest

from tests.mechanisms import mechanism_checks as checks
from tff_quant import mechanisms
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


def edge_mechanisms(c):
  """QMGeo at clip c with levels on ±c (W = 2c, R = 4097): as written, the
  law jumps there, and an input -float32(c) < -c walked up from -c, half
  its draws impossible for the pmf at -c (contract_test.py)."""
  return [qmgeo.QMGeo(c, 4097, 0.5, False, 2 * c),
          qmgeo.QMGeo(c, 4097, 0.5, True, 2 * c)]


@pytest.mark.parametrize('full_support', [True, False])
def test_log_pmf_within_its_proved_error(full_support):
  """`log_pmf_error` bounds the computed log-pmf against 40-digit mpmath at
  the critical inputs and random inputs (the served 4-bit cell's law)."""
  import mpmath   # pylint: disable=g-import-not-at-top
  c = 2 / math.sqrt(61706)
  mech = mechanisms.get('qmgeo').for_coordinate_bound(
      c, num_levels=16, p=0.9814228019672326, full_support=full_support,
      range_ratio=256.0)
  eta = mech.log_pmf_error
  big_r = mech.r_levels
  rng = np.random.default_rng(0)
  with mpmath.workdps(40):
    p = mpmath.mpf(mech.p)
    q = 1 - p

    def branch(start, down):
      if full_support:
        w = [q**abs(i - start) for i in range(big_r)]
        return [v / sum(w) for v in w]
      out = [mpmath.mpf(0)] * big_r
      size = start + 1 if down else big_r - start
      for g in range(size):
        out[start - g if down else start + g] = p * q**g / (1 - q**size)
      return out

    for x in np.concatenate([mech.critical_inputs(), rng.uniform(-c, c, 10)]):
      r, mix = mech._bin(mech.clip_input(x))
      mix = mpmath.mpf(mix)
      exact = [(1 - mix) * a + mix * b
               for a, b in zip(branch(r, True), branch(r + 1, False))]
      got = mech.log_pmf(x)
      for g, e in zip(got, exact):
        if e > 0:
          assert abs(float(mpmath.log(e)) - g) <= eta
        else:
          assert g == -np.inf
