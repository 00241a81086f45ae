"""Tests for tff_quant.common.exact_laws: the proved binomial log-pmf."""

import math

import mpmath
import numpy as np
import pytest

from tff_quant.common import exact_laws


def _exact_log_binomial(trials, p, k):
  """log P(Binomial(trials, p) = k) at 40 digits (mpmath's log-gamma)."""
  with mpmath.workdps(40):
    p = mpmath.mpf(p)   # the float p exactly
    return (mpmath.loggamma(trials + 1) - mpmath.loggamma(k + 1) -
            mpmath.loggamma(trials - k + 1) + k * mpmath.log(p) +
            (trials - k) * mpmath.log1p(-p))


@pytest.mark.parametrize('trials,p', [(1, 0.5), (10, 0.5), (255, 0.3),
                                      (1000, 0.01), (15, 0.9999),
                                      (71200, 0.5)])
def test_log_binomial_within_its_proved_bound(trials, p):
  lp, err = exact_laws.log_binomial(trials, p)
  ks = np.unique(np.concatenate([np.linspace(0, trials, 60).astype(int),
                                 [int(trials * p)]]))
  for k in ks:
    exact = float(_exact_log_binomial(trials, p, int(k)))
    assert abs(lp[k] - exact) <= err[k], (k, lp[k] - exact, err[k])


def test_log_binomial_integers_exactly():
  # Python's exact integers: log(C(N, k)) - N log 2 from math.comb.
  trials = 300
  lp, err = exact_laws.log_binomial(trials, 0.5)
  for k in (0, 1, 7, 150, 299, 300):
    with mpmath.workdps(40):
      exact = float(mpmath.log(mpmath.mpf(math.comb(trials, k))) -
                    trials * mpmath.log(2))
    assert abs(lp[k] - exact) <= err[k]


def test_bound_is_not_vacuous_near_the_mode():
  # Near the mode the bound is a few hundred u, far below scipy's 1e-10.
  lp, err = exact_laws.log_binomial(10**6, 0.5)
  assert err[500000] < 1e-13
  assert np.all(np.isfinite(lp))


def test_degenerate_laws_are_exact():
  lp, err = exact_laws.log_binomial(5, 0.0)
  assert lp[0] == 0.0 and np.all(np.isneginf(lp[1:])) and not err.any()
  lp, err = exact_laws.log_binomial(5, 1.0)
  assert lp[5] == 0.0 and np.all(np.isneginf(lp[:5]))
  lp, err = exact_laws.log_binomial(0, 0.3)
  assert lp.tolist() == [0.0]


def test_uniform_bound_dominates_the_per_entry_bounds():
  rng = np.random.default_rng(0)
  for trials, lo, hi in [(15, 0.25, 0.75), (255, 0.01, 0.99), (1, 0.4999, 0.5001)]:
    bound = exact_laws.log_binomial_error_bound(trials, lo, hi)
    for p in np.concatenate([[lo, hi, 0.5], rng.uniform(lo, hi, 8)]):
      assert np.max(exact_laws.log_binomial(trials, float(p))[1]) <= bound


def test_exact_prefix_sums_within_bound():
  rng = np.random.default_rng(1)
  terms = rng.normal(0, 3, 5000)
  s, err = exact_laws.exact_prefix_sums(terms)
  from fractions import Fraction
  run = Fraction(0)
  for i, t in enumerate(terms):
    run += Fraction(float(t))
    if i % 499 == 0:
      assert abs(Fraction(float(s[i])) - run) <= Fraction(float(err[i]))


def test_exact_prefix_sums_take_large_terms_when_few_and_refuse_overflow():
  """Terms beyond 32 are exact while max|t|·N < 2^32 (Skellam's far log
  ratios); past that the int64 sums could overflow: refused, named."""
  from fractions import Fraction
  terms = np.array([-700.123456789, -65.5, 1e6 / 3, -2.0**-40, 12.25])
  s, err = exact_laws.exact_prefix_sums(terms)
  run = Fraction(0)
  for i, t in enumerate(terms):
    run += Fraction(float(t))
    assert abs(Fraction(float(s[i])) - run) <= Fraction(float(err[i]))
  with pytest.raises(ValueError, match='max\\|t\\|·N below 2\\^32'):
    exact_laws.exact_prefix_sums(np.full(8, 2.0**30))
  with pytest.raises(ValueError, match='finite'):
    exact_laws.exact_prefix_sums(np.array([1.0, np.nan]))


def test_log_normaliser_bounds_the_whole_sum_with_missing_mass():
  """log Σ e^(v_k) with each v_k off by up to its bound, and a share of the
  whole outside the window: the exact log Z of the whole is within e."""
  rng = np.random.default_rng(4)
  exact = np.concatenate([[0.0], -rng.uniform(0, 30, 200)])
  bound = np.full(exact.size, 1e-12)
  bound[0] = 0.0
  computed = exact + rng.uniform(-1, 1, exact.size) * bound
  missing = 1e-6
  with mpmath.workdps(40):
    inside = mpmath.fsum(mpmath.exp(mpmath.mpf(float(x))) for x in exact)
    whole = inside / (1 - mpmath.mpf(missing) / 2)   # half the allowed share
    log_z, e = exact_laws.log_normaliser(computed, bound, missing=missing)
    assert abs(float(mpmath.log(whole) - mpmath.mpf(log_z))) <= e
    assert e < 1.1e-6   # the missing share dominates; rounding adds ~1e-12


def test_two_point_mixture_error_covers_a_tiny_weight():
  a, b = -3.0, -2.0
  f = 2.0**-1070
  computed = np.logaddexp(math.log1p(-f) + a, math.log(f) + b)
  with mpmath.workdps(60):
    exact = mpmath.log((1 - mpmath.mpf(f)) * mpmath.exp(a) +
                       mpmath.mpf(f) * mpmath.exp(b))
  assert abs(computed - float(exact)) <= exact_laws.two_point_mixture_error(3.0)


def _ndtr_grid():
  """Tail arguments t <= 0: log-spaced from 1e-8 and uniform over [-37, 0]
  (fixed seed), where the accountant's cells read Φ."""
  rng = np.random.default_rng(3)
  return np.concatenate([-np.logspace(-8, math.log10(37.0), 1500),
                         rng.uniform(-37.0, 0.0, 1500), [0.0, -37.0]])


def test_ndtr_within_the_assumption():
  """The NDTR_U_* assumption against 40-digit mpmath: relative on the tail
  side t in [-37, 0]; 1 - Φ(-t) for t > 0 within u + the same·Φ(-t); below
  -37 only 0 <= ndtr <= NDTR_TINY. Also reports the margin (>= 1.5)."""
  from scipy import special   # pylint: disable=g-import-not-at-top
  u = exact_laws.U
  worst = 0.0
  with mpmath.workdps(40):
    for t in _ndtr_grid():
      exact = mpmath.ncdf(mpmath.mpf(t))
      rel = abs(float((mpmath.mpf(special.ndtr(t)) - exact) / exact))
      allowed = float(exact_laws.ndtr_relative_error(t))
      assert rel <= allowed, (t, rel / u)
      worst = max(worst, rel / allowed)
      other = abs(float(mpmath.mpf(special.ndtr(-t)) - (1 - exact)))
      assert other <= u + allowed * float(exact), (t, other)
  assert worst <= 1 / 1.5
  far = special.ndtr(-np.linspace(37.0, 60.0, 200))
  assert np.all((far >= 0) & (far <= exact_laws.NDTR_TINY))


def test_normal_tail_bounds_bracket_the_tail():
  with mpmath.workdps(40):
    for t in np.concatenate([np.linspace(0, 40, 401), [1e-9, 1e-3]]):
      exact = float(mpmath.ncdf(-mpmath.mpf(t)))
      assert exact_laws.normal_tail_lower(t) <= exact <= exact_laws.normal_tail_upper(t)


def test_log_add_error_covers_numpy_logaddexp():
  rng = np.random.default_rng(4)
  xs = np.concatenate([rng.uniform(-800, 5, 300), [0.0, -1e-300, -745.0]])
  ys = xs + np.concatenate([rng.normal(0, 3, 200), rng.uniform(-40, 40, 103)])
  with mpmath.workdps(40):
    for x, y in zip(xs, ys):
      got = np.logaddexp(x, y)
      exact = mpmath.log(mpmath.exp(mpmath.mpf(x)) + mpmath.exp(mpmath.mpf(y)))
      assert abs(got - float(exact)) <= exact_laws.log_add_error(abs(got) + 1e-9)


def _log_cdf_grid():
  """t <= 0: log-spaced from -1e-8 to -1e4, uniform over [-40, 0] (fixed
  seed), and both sides of the series' start (-10)."""
  rng = np.random.default_rng(5)
  edge = exact_laws.LOG_NDTR_SERIES_FROM
  return np.concatenate([-np.logspace(-8, 4, 600), rng.uniform(-40.0, 0.0, 600),
                         [0.0, -edge, -np.nextafter(edge, 0), -37.0, -1e150]])


def test_log_normal_cdf_within_its_bound():
  """`log_normal_cdf` against 40-digit mpmath: within its per-entry bound
  everywhere (both branches), which is also at most the a priori
  `log_normal_cdf_error_bound`; the bound is within 100 of the largest
  error measured over the grid (not vacuous)."""
  t = _log_cdf_grid()
  values, errors = exact_laws.log_normal_cdf(t)
  worst = 0.0
  with mpmath.workdps(40):
    for ti, v, e in zip(t, values, errors):
      exact = mpmath.log(mpmath.ncdf(mpmath.mpf(ti)))
      diff = abs(float(mpmath.mpf(v) - exact))
      assert diff <= e, (ti, diff, e)
      worst = max(worst, diff / e)
      assert e <= exact_laws.log_normal_cdf_error_bound(-ti)
  assert worst >= 0.01


def test_log_normal_cdf_error_bound_is_small_where_laws_are_read():
  """A priori bounds: 1.9e-14 at |t| <= 3.9 (a served quantized Gaussian's
  saturation), <= 2e-13 up to 10, then about u·t²."""
  u = exact_laws.U
  assert exact_laws.log_normal_cdf_error_bound(3.9) <= 170 * u
  assert exact_laws.log_normal_cdf_error_bound(10.0) <= 900 * u
  assert exact_laws.log_normal_cdf_error_bound(1e4) <= 1.01 * u * 1e8


@pytest.mark.parametrize('t', [1e-300, 1.0, np.inf, -np.inf, np.nan, -1e151])
def test_log_normal_cdf_refuses_arguments_out_of_range(t):
  with pytest.raises(ValueError, match='`t`'):
    exact_laws.log_normal_cdf(t)


@pytest.mark.parametrize('kwargs,name', [(dict(trials=-1, p=0.5), 'trials'),
                                         (dict(trials=2**27, p=0.5), 'trials'),
                                         (dict(trials=3, p=1.5), 'p')])
def test_bad_input_names_the_parameter(kwargs, name):
  with pytest.raises(ValueError, match=name):
    exact_laws.log_binomial(**kwargs)


@pytest.mark.parametrize('x_max', [-1.0, 1e151])
def test_log_normal_cdf_error_bound_refuses_out_of_range(x_max):
  with pytest.raises(ValueError, match='`x_max`'):
    exact_laws.log_normal_cdf_error_bound(x_max)
