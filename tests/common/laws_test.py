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


# --- proved error of the tilted FFT convolution (docs/privacy.md, "Numerics") ---

import math  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

import mpmath  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position


def _long_double_dft(x: np.ndarray) -> np.ndarray:
  """DFT by recursive radix-2 in long double (64-bit mantissa: its own
  error, ~log2(N)·2^-64 relative, is 1/2000 of the float64 bound tested)."""
  x = np.asarray(x, np.clongdouble)
  n = x.size
  if n == 1:
    return x
  even, odd = _long_double_dft(x[0::2]), _long_double_dft(x[1::2])
  angle = -2 * np.pi * np.arange(n // 2, dtype=np.longdouble) / n
  tw = (np.cos(angle) + 1j * np.sin(angle)) * odd
  return np.concatenate([even + tw, even - tw])


@pytest.mark.parametrize('log2_n', [1, 3, 6, 9, 11])
def test_numpy_fft_is_within_the_assumed_norm_wise_bound(log2_n):
  """FFT_ERROR_CONSTANT·log2(N)·u·||X||_2 holds for rfft and irfft on
  tilted-pmf-like inputs (smooth bumps and spiky Dirichlet draws)."""
  n = 2**log2_n
  rng = np.random.default_rng(log2_n)
  bound = laws.FFT_ERROR_CONSTANT * log2_n * laws.U
  inputs = [rng.dirichlet(np.full(n, 0.2)),
            stats.binom.pmf(np.arange(n), n - 1, 0.4),
            np.exp(-0.5 * ((np.arange(n) - n / 3) / max(1.0, n / 50))**2)]
  for x in inputs:
    exact = _long_double_dft(x)
    got = np.fft.rfft(x)
    full = np.concatenate([got, np.conj(got[1:n - n // 2][::-1])])
    assert (np.linalg.norm((full - exact).astype(np.clongdouble)) <=
            bound * np.linalg.norm(exact))
    back = np.fft.irfft(got, n)
    exact_back = np.real(np.conj(_long_double_dft(np.conj(
        full.astype(np.clongdouble))))) / n
    assert (np.linalg.norm(back - exact_back) <=
            bound * np.linalg.norm(exact_back))


def _mpmath_sum(parts):
  """log of the exact convolution of the given (float) log-pmfs, in mpmath."""
  mpmath.mp.prec = 160
  out = [mpmath.mpf(1)]
  for lp, count in parts:
    pmf = [mpmath.exp(mpmath.mpf(float(v))) if np.isfinite(v) else mpmath.mpf(0)
           for v in lp]
    for _ in range(count):
      new = [mpmath.mpf(0)] * (len(out) + len(pmf) - 1)
      for i, a in enumerate(out):
        if a:
          for j, b in enumerate(pmf):
            new[i + j] += a * b
      out = new
  return out


@pytest.mark.parametrize('levels, clients, concentration', [
    (16, 10, 1.0), (16, 40, 0.3), (5, 60, 1.0), (3, 100, 0.3)])
def test_every_entry_is_within_its_proved_error(levels, clients, concentration):
  """Against the exact convolution (mpmath, 160 bits) of the same float
  inputs, full transforms and folded windows (3 levels x 100: tilted
  windows of 33 entries) alike."""
  rng = np.random.default_rng(levels * clients)
  parts = [(np.log(rng.dirichlet(np.full(levels, concentration))), clients // 2),
           (np.log(rng.dirichlet(np.ones(levels))), clients - clients // 2)]
  est, upper, error = laws.sum_log_pmf_with_error(parts)
  exact = _mpmath_sum(parts)
  assert np.all(np.isfinite(error)) and np.all(error > 0)
  for k, (e, x) in enumerate(zip(est, exact)):
    gap = abs(float(mpmath.mpf(float(e)) - mpmath.log(x)))
    assert gap <= error[k], (k, gap, error[k])
    assert float(mpmath.log(x)) <= upper[k]
  # Sharp enough to use: near the mode the bound is ~1e-11.
  assert np.min(error) < 1e-10


def test_power_sums_with_errors_are_above_the_exact_ones():
  """D_α from the computed laws with their errors >= D_α of the exact laws
  (mpmath), at every order; and for laws perturbed by e^±δ (signs drawn to
  oppose the bound), D_α with δ stays above the unperturbed exact value."""
  rng = np.random.default_rng(7)
  lp_a = np.log(rng.dirichlet(np.ones(8)))
  lp_b = np.log(rng.dirichlet(np.ones(8)))
  p_parts, q_parts = [(lp_a, 13), (lp_b, 7)], [(lp_a, 12), (lp_b, 8)]
  lp, _, ep = laws.sum_log_pmf_with_error(p_parts)
  lq, _, eq = laws.sum_log_pmf_with_error(q_parts)
  xp, xq = _mpmath_sum(p_parts), _mpmath_sum(q_parts)
  for a in (1.0, 2.0, 5.0, 32.0, math.inf):
    if a == 1:
      exact = sum(p * mpmath.log(p / q) for p, q in zip(xp, xq))
    elif math.isinf(a):
      exact = max(mpmath.log(p / q) for p, q in zip(xp, xq))
    else:
      exact = mpmath.log(sum(p**a * q**(1 - a) for p, q in zip(xp, xq))) / (a - 1)
    proved = laws.renyi_divergence(lp, lq, a, log_p_error=ep, log_q_error=eq)
    assert proved >= float(exact)
    # Laws seen through e^-δ (P) and e^+δ (Q), every term lowered: without
    # δ the divergence falls below the exact one; with δ it is covered.
    delta = 1e-3
    true_p = np.array([float(mpmath.log(p)) for p in xp])
    true_q = np.array([float(mpmath.log(q)) for q in xq])
    assert laws.renyi_divergence(true_p - delta, true_q + delta, a,
                                 log_p_error=delta, log_q_error=delta) >= float(exact)
    if a > 1:
      assert laws.renyi_divergence(true_p - delta, true_q + delta, a) < float(exact)
