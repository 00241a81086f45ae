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


def test_two_point_mixture_error_covers_a_tiny_weight():
  a, b = -3.0, -2.0
  f = 2.0**-1070
  computed = np.logaddexp(math.log1p(-f) + a, math.log(f) + b)
  with mpmath.workdps(60):
    exact = mpmath.log((1 - mpmath.mpf(f)) * mpmath.exp(a) +
                       mpmath.mpf(f) * mpmath.exp(b))
  assert abs(computed - float(exact)) <= exact_laws.two_point_mixture_error(3.0)


@pytest.mark.parametrize('kwargs,name', [(dict(trials=-1, p=0.5), 'trials'),
                                         (dict(trials=2**27, p=0.5), 'trials'),
                                         (dict(trials=3, p=1.5), 'p')])
def test_bad_input_names_the_parameter(kwargs, name):
  with pytest.raises(ValueError, match=name):
    exact_laws.log_binomial(**kwargs)
