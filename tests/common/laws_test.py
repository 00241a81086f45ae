"""Tests for tff_quant/common/laws.py: laws of sums exact deep in the tails,
the Chernoff envelope, supports with holes."""

import numpy as np
from scipy import special
from scipy import stats

from tff_quant.common import laws


def test_sum_log_pmf_exact_in_deep_tails():
  lp = stats.binom.logpmf(np.arange(16), 15, 0.3)
  s = laws.sum_log_pmf([(lp, 300)])
  exact = stats.binom.logpmf(np.arange(s.size), 15 * 300, 0.3)
  assert exact.min() < -5000  # far below float64's smallest positive number
  np.testing.assert_allclose(s, exact, rtol=1e-10)


def test_sum_log_pmf_folds_wide_parts_into_small_windows():
  """A part wider than the tilted window (4,096 levels, FFTs of 2,048): folded
  modulo the window, every index, deep tails included, stays exact."""
  lp = stats.binom.logpmf(np.arange(4096), 4095, 0.3)
  s = laws.sum_log_pmf([(lp, 4)])
  exact = stats.binom.logpmf(np.arange(s.size), 4 * 4095, 0.3)
  assert exact.min() < -10000
  np.testing.assert_allclose(s, exact, rtol=1e-10)


def test_chernoff_lower_envelope_is_the_minimum_over_lines():
  rng = np.random.default_rng(3)
  for trial in range(100):
    lines = [(float(rng.normal() * 50), float(rng.normal()))
             for _ in range(rng.integers(1, 20))]
    lines.append((lines[0][0] + 1.0, lines[0][1]))   # a parallel, higher line
    length = int(rng.integers(1, 400))
    k = np.arange(length)
    brute = np.min([s - lam * k for s, lam in lines], axis=0)
    np.testing.assert_allclose(laws._lower_envelope(lines, length), brute,
                               rtol=1e-12, atol=1e-9)


def test_sum_log_pmf_with_holes():
  p = np.array([0.5, 0.0, 0.25, 0.25])
  with np.errstate(divide='ignore'):
    s = laws.sum_log_pmf([(np.log(p), 3)])
  np.testing.assert_allclose(np.exp(s), np.convolve(np.convolve(p, p), p),
                             atol=1e-15)
  assert np.isneginf(s[1])


def test_log_sum_exp_rows_is_scipys_to_the_bit():
  rng = np.random.default_rng(3)
  t = rng.normal(size=(6, 257)) * 40
  t[1] = -np.inf
  t[2, 5] = np.inf
  t[3, :100] = -np.inf
  want = special.logsumexp(t, axis=1)
  got = laws.log_sum_exp_rows(t.copy())
  np.testing.assert_array_equal(got, want)


def test_renyi_divergence_is_rounded_up_past_its_own_evaluation():
  """For the laws as given, the float result sits at or above the 40-digit
  value of the same sums, by no more than its stated allowance (u per
  operation, ELEMENTARY_ULPS per exp/log, N·u for the sum)."""
  import mpmath   # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  for size in (5, 200):
    log_p = np.log(rng.dirichlet(np.ones(size)))
    log_q = np.log(rng.dirichlet(np.ones(size)))
    for alpha in (1.0, 2.0, 7.5):
      got = laws.renyi_divergence(log_p, log_q, alpha)
      with mpmath.workdps(40):
        lp = [mpmath.mpf(float(v)) for v in log_p]
        lq = [mpmath.mpf(float(v)) for v in log_q]
        if alpha == 1:
          exact = sum(mpmath.exp(a) * (a - b) for a, b in zip(lp, lq))
        else:
          exact = mpmath.log(sum(mpmath.exp(alpha * a + (1 - alpha) * b)
                                 for a, b in zip(lp, lq))) / (alpha - 1)
      exact = max(float(exact), 0.0)
      assert got >= exact
      assert got - exact <= 1e-11 * max(1.0, exact)
