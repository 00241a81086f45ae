import itertools
import math

import numpy as np
import pytest
from scipy import special

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


_ORACLE_BLOCK = 2**21   # pairs per block of the oracle's (lower, upper) table


def pair_table_log_pmf(mech, x):
  """Lemma 5.1 summed over (lower kept, upper kept) level pairs, O(m·near):
  the oracle for `RQM.log_pmf`'s O(m) recurrence.

  For each end, pairs whose other end lies more than `near` steps away (the
  endpoints always included) carry < 2^-80 of the entry: exact in float64.
  """
  x = mech.clip_input(x)
  m, q = mech.num_levels, mech.q
  b = mech.levels
  j = mech._bin(x)
  lq, l1q = math.log(q), math.log1p(-q)
  idx = np.arange(m)
  log_low = np.full(m, -np.inf)
  log_low[:j + 1] = lq + (j - idx[:j + 1]) * l1q
  log_low[0] = j * l1q
  log_up = np.full(m, -np.inf)
  log_up[j + 1:] = lq + (idx[j + 1:] - j - 1) * l1q
  log_up[m - 1] = (m - 2 - j) * l1q
  need = 80 * math.log(2) + math.log(m / q)
  near = int(min(m, math.ceil(need / -math.log1p(-q))))
  ups = np.union1d(idx[j + 1:j + 2 + near], [m - 1])
  lows = np.union1d(idx[max(0, j - near):j + 1], [0])

  def landing(lows, ups, on_low):
    own, other = (lows, ups) if on_low else (ups, lows)
    out = np.empty(own.size)
    step = max(1, _ORACLE_BLOCK // other.size)
    for start in range(0, own.size, step):
      block = own[start:start + step][:, None]
      lo, up = (block, other[None, :]) if on_low else (other[None, :], block)
      with np.errstate(divide='ignore'):
        log_w = np.log(np.maximum(b[up] - x if on_low else x - b[lo], 0.0) /
                       (b[up] - b[lo]))
      out[start:start + step] = special.logsumexp(
          log_low[lo] + log_up[up] + log_w, axis=1)
    return out

  out = np.empty(m)
  out[:j + 1] = landing(idx[:j + 1], ups, True)
  out[j + 1:] = landing(lows, idx[j + 1:], False)
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


def _grid_inputs(mech):
  """The range ends, every level inside the range, and points between levels
  (just above a level, a third of the way, just below the next)."""
  b, c, h = mech.levels, mech.clip, mech.level_step
  inside = b[(b > -c) & (b < c)]
  between = np.concatenate([inside + 1e-9 * h, inside + h / 3, inside - 1e-9 * h])
  xs = np.concatenate([[-c, c, 0.0], inside, between[np.abs(between) <= c]])
  if xs.size > 40:
    xs = xs[np.random.default_rng(0).choice(xs.size, 40, replace=False)]
  return xs


@pytest.mark.parametrize('m', [2, 3, 4, 5, 16, 100, 300])
@pytest.mark.parametrize('q', [1e-9, 1e-3, 0.05, 0.42, 0.9, 0.999, 1 - 1e-9])
def test_recurrence_equals_pair_table(m, q):
  """The O(m) pmf equals the pair-table sum to 1e-12 relative, compared in log
  space (entries down to e^-6200 at q = 1 - 1e-9, where 1e-13·|log p| allows
  for the few ulps of log p itself), sums to 1 and has mean x."""
  mech = rqm.RQM(clip=1.0, delta=0.6, num_levels=m, q=q)
  for x in _grid_inputs(mech):
    log_p = mech.log_pmf(x)
    np.testing.assert_allclose(log_p, pair_table_log_pmf(mech, x),
                               rtol=1e-13, atol=1e-12, err_msg=f'm={m} q={q} x={x!r}')
    assert abs(special.logsumexp(log_p)) < 1e-13
    assert abs(float(np.dot(np.exp(log_p), mech.levels)) - x) < 1e-12


def test_recurrence_at_many_levels_sums_to_one_with_mean_x():
  """65,536 levels at q = 1e-4 (the pair table needs 4.3e9 terms, 17 s)."""
  mech = rqm.RQM(clip=1.0, delta=1.0, num_levels=2**16, q=1e-4)
  for x in (-1.0, -0.123456, 0.0, 0.5 + mech.level_step / 3, 1.0):
    log_p = mech.log_pmf(x)
    assert np.all(np.isfinite(log_p))
    assert abs(special.logsumexp(log_p)) < 1e-11
    assert abs(float(np.dot(np.exp(log_p), mech.levels)) - x) < 1e-11


def edge_mechanisms(c):
  """RQM at clip c: levels a hair past ±c (Δ = 1e-7c, 2^16 levels: a
  float32(c) input was past the range's rounding point), and the registry's
  defaults (contract_test.py)."""
  return [rqm.RQM(c, 1e-7 * c, 2**16, 0.5), rqm.RQM(c, c, 16, 0.42)]


def _exact_log_pmf(mech, x):
  """Lemma 5.1 at 40 digits, at the rounding offsets s the code computes
  from the float levels (the sampler rounds at its own t, `RQM._encode`; η
  bounds the arithmetic at those offsets): P(i) = P(L = i)·E[(G' + s_up)/
  (G' + j + 1 - i)] for i <= j, P(U = u)·E[(G + s_low)/(G + u - j)] above,
  G, G' the gaps (interior q r^k, endpoint r^(K+1))."""
  import mpmath   # pylint: disable=g-import-not-at-top
  x = mech.clip_input(x)
  m, b, h = mech.m, mech.levels, mech.level_step
  j = mech._bin(x)
  s_low = min(max((x - b[j]) / h, 0.0), 1.0)
  s_up = min(max((b[j + 1] - x) / h, 0.0), 1.0)
  with mpmath.workdps(40):
    q = mpmath.mpf(mech.q)
    r = 1 - q
    gap = lambda k: [q * r**g for g in range(k + 1)] + [r**(k + 1)]
    low, up = gap(j - 1), gap(m - 3 - j)
    s_low, s_up = mpmath.mpf(s_low), mpmath.mpf(s_up)
    out = []
    for i in range(m):
      if i <= j:
        p = low[j - i] * sum(w * (g + s_up) / (g + j + 1 - i)
                             for g, w in enumerate(up))
      else:
        p = up[i - j - 1] * sum(w * (g + s_low) / (g + i - j)
                                for g, w in enumerate(low))
      out.append(mpmath.log(p) if p > 0 else None)
    return out


@pytest.mark.parametrize('m, q', [(16, 0.42), (8, 0.4), (2, 0.5), (3, 1e-9),
                                  (40, 0.999), (64, 0.05), (100, 1 - 1e-9),
                                  (120, 1e-3)])
def test_log_pmf_within_its_proved_error(m, q):
  """`log_pmf_error` bounds the computed log-pmf against 40-digit mpmath at
  ±c, 0, levels (s = 0), just off a level and inside bins, with K on both
  sides of DIRECT_MAX_GAP at m >= 40. η carries the worst case of every
  log (ELEMENTARY_ULPS, |log s| up to 745 next to a level), so it sits
  10^2-10^3.5 above the errors measured here: checked within 10^4."""
  mech = rqm.RQM(clip=1.0, delta=0.6, num_levels=m, q=q)
  eta = mech.log_pmf_error
  b, h = mech.levels, mech.level_step
  inside = b[(b > -1.0) & (b < 1.0)]
  # 1e-300: s ~ 1e-300 next to the level at 0 (exactly 0 at m = 3).
  xs = np.concatenate([[-1.0, 1.0, 0.0, 1e-300, -0.3371], inside[:3], inside[-2:],
                       inside[:2] + 1e-9 * h, inside[-2:] - h / 3])
  worst = 0.0
  for x in xs:
    for g, e in zip(mech.log_pmf(x), _exact_log_pmf(mech, x)):
      if e is None:
        assert g == -np.inf
        continue
      assert abs(g - float(e)) <= eta, (x, g - float(e), eta)
      worst = max(worst, abs(g - float(e)))
  assert eta <= 1e4 * max(worst, 1e-15)


@pytest.mark.parametrize('q', [1e-9, 0.5, 1 - 1e-9])
def test_log_pmf_error_finite_at_many_levels(q):
  """η covers every valid parameter: finite at 2^16 levels and extreme q."""
  eta = rqm.RQM(1.0, 1.0, 2**16, q).log_pmf_error
  assert 0 < eta < 1e-3 and math.isfinite(eta)
