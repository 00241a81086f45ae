import itertools
import math

import numpy as np
import pytest

from tests.mechanisms import mechanism_checks as checks
from tff_quant.mechanisms import rqm

PARAMS = [dict(clip=1.5, delta=1.5, num_levels=16, q=0.42),
          dict(clip=1.0, delta=2.33, num_levels=16, q=0.42),
          dict(clip=0.3, delta=0.1, num_levels=5, q=0.9),
          dict(clip=1.0, delta=0.5, num_levels=2, q=0.5)]


def brute_force_pmf(mech, x):
  """Alg. 2 literally: enumerate all keep masks of the interior levels."""
  m, q = mech.num_levels, mech.q
  b = mech.levels
  out = np.zeros(m)
  for mask in itertools.product([0, 1], repeat=m - 2):
    kept = [0] + [i + 1 for i, k in enumerate(mask) if k] + [m - 1]
    prob = math.prod(q if k else 1 - q for k in mask)
    lo = max(i for i in kept if b[i] <= x)
    hi = min(i for i in kept if b[i] > x)
    p_up = (x - b[lo]) / (b[hi] - b[lo])
    out[lo] += prob * (1 - p_up)
    out[hi] += prob * p_up
  return out


@pytest.mark.parametrize('x', [-1.0, -0.3, 0.0, 0.2, 0.5, 1.0])
def test_pmf_matches_brute_force_enumeration(x):
  mech = rqm.RQM(clip=1.0, delta=0.7, num_levels=8, q=0.3)
  np.testing.assert_allclose(mech.pmf(x), brute_force_pmf(mech, x), atol=1e-14)


def test_log_pmf_finite_in_far_tail():
  """Level 0 at x=c has probability (1-q)^j * sum_k P(up=k) w_k ~ 1e-8000."""
  mech = rqm.RQM(clip=1.0, delta=1.0, num_levels=4096, q=0.99)
  x = 1.0
  log_p = mech.log_pmf(x)
  assert np.all(np.isfinite(log_p))
  assert abs(np.logaddexp.reduce(log_p)) < 1e-12
  j = mech._bin(x)
  b, m, q = mech.levels, mech.num_levels, mech.q
  ks = np.arange(j + 1, m)
  p_up = np.where(ks == m - 1, (1 - q)**(m - 2 - j), q * (1 - q)**(ks - j - 1))
  expected = j * math.log1p(-q) + math.log(np.sum(p_up * (b[ks] - x) /
                                                   (b[ks] - b[0])))
  assert log_p[0] < -700
  assert log_p[0] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize('params', PARAMS[:2])
def test_decode_unbiased(params):
  mech = rqm.RQM(**params)
  for x in [-mech.clip, 0.3 * mech.clip, mech.clip]:
    checks.assert_decode_unbiased(mech, x)


def test_levels_and_alphabet():
  mech = rqm.RQM(clip=1.0, delta=1.0, num_levels=16, q=0.42)
  assert mech.num_levels == 16 and mech.bits_per_coordinate == 4
  np.testing.assert_allclose(mech.levels[[0, -1]], [-2.0, 2.0])


@pytest.mark.parametrize('kwargs, name, error', [
    (dict(clip=0.0), 'clip', ValueError), (dict(clip=-1.0), 'clip', ValueError),
    (dict(delta=0.0), 'delta', ValueError), (dict(num_levels=1), 'num_levels', ValueError),
    (dict(num_levels=3.5), 'num_levels', TypeError), (dict(q=0.0), 'q', ValueError),
    (dict(q=1.0), 'q', ValueError), (dict(q=float('nan')), 'q', ValueError)])
def test_invalid_params_raise(kwargs, name, error):
  args = dict(PARAMS[0], **kwargs)
  with pytest.raises(error, match=f'`{name}`'):
    rqm.RQM(**args)


def test_pmf_in_blocks_equals_one_table_and_memory_stays_bounded(monkeypatch):
  mech = rqm.RQM(clip=1.0, delta=1.0, num_levels=1024, q=0.42)
  x = 0.137
  whole = mech.log_pmf(x)                    # 512 x 512 pairs: one block
  monkeypatch.setattr(rqm, '_BLOCK', 4096)   # 64 blocks of 8 rows
  np.testing.assert_allclose(mech.log_pmf(x), whole, rtol=0, atol=1e-12)
  assert abs(float(np.dot(np.exp(whole), mech.levels)) - x) < 1e-12


def test_pairs_beyond_near_levels_change_nothing(monkeypatch):
  """Pairing each end only with kept levels within `_near_levels` steps (and the
  endpoints) equals the full pair table to float64 resolution."""
  mech = rqm.RQM(clip=1.0, delta=1.0, num_levels=1024, q=0.42)
  assert rqm._near_levels(mech.q, mech.num_levels) < 200
  for x in (-1.0, -0.31, 0.0, 0.77, 1.0):
    near = mech.log_pmf(x)
    with monkeypatch.context() as patch:
      patch.setattr(rqm, '_near_levels', lambda q, m: m)
      full = mech.log_pmf(x)
    np.testing.assert_allclose(near, full, rtol=1e-15, atol=0)
