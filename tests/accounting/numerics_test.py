"""Tests for tff_quant.accounting.numerics: the input laws' error carried."""

import itertools
import math

import mpmath
import pytest

from tff_quant.accounting import composition
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import numerics
from tff_quant.accounting import per_round
from tff_quant.mechanisms import bq
from tff_quant.mechanisms import pbm


def _log_binom_half(trials, k):
  return (mpmath.loggamma(trials + 1) - mpmath.loggamma(k + 1) -
          mpmath.loggamma(trials - k + 1) - trials * mpmath.log(2))


def test_issue_61_bq_repro_proved_at_or_above_exact():
  # BQ(s=3, m=712), n = 100, α = 2, coordinate route, +c vs -c with the 99
  # others at -c, the accountant's own window: before, proved
  # 0.0020224719254 < exact 0.0020224719774.
  mech = bq.BQ(1.0, 3, 712)
  cond = mech.conditioned_sum(100, composition.CONDITIONING_TAIL)
  one = cond.mechanism
  proved = per_round.per_round_rdp(one, 1, 1, orders=(2,))[2]
  with mpmath.workdps(40):
    big_m, s = one.m, one.s
    total = mpmath.mpf(0)
    for i in range(one.lo, one.hi + 1):
      kp, kq = i - 2 * s, i
      if 0 <= kp <= big_m and 0 <= kq <= big_m:
        total += mpmath.exp(2 * _log_binom_half(big_m, kp) -
                            _log_binom_half(big_m, kq))
    exact = float(mpmath.log(total))
  assert proved >= exact
  # And not by more than the carried allowance plus the power sum's own
  # rounding allowance (matrix_sums: at most u·(3·708 + 2·|top| + 2·700 +
  # terms + 1) + ℓ·(2 + |log S|) per sum, uniformly; |top| <= 708).
  rounding = 1.01 * (matrix_sums.U * (5 * 708 + 2 * 700 + one.num_levels + 1)
                     + matrix_sums.LIB * 3)
  assert proved - exact <= numerics.rdp_allowance(one, 1, 2) + rounding


def test_issue_61_bq_thousand_clients_proved_at_or_above_exact():
  # BQ(s=1, m=1,000), n = 1,000: before, proved 6.9e-5 relative below exact.
  mech = bq.BQ(1.0, 1, 1000)
  one = mech.conditioned_sum(1000, composition.CONDITIONING_TAIL).mechanism
  proved = per_round.per_round_rdp(one, 1, 1, orders=(2,))[2]
  with mpmath.workdps(40):
    big_m = one.m
    log_m_fact = mpmath.loggamma(big_m + 1) - big_m * mpmath.log(2)
    log_b = lambda k: (log_m_fact - mpmath.loggamma(k + 1) -
                       mpmath.loggamma(big_m - k + 1))
    total = mpmath.mpf(0)
    for i in range(one.lo, one.hi + 1):
      total += mpmath.exp(2 * log_b(i - 2) - log_b(i))
    exact = float(mpmath.log(total))
  assert proved >= exact
  assert (proved - exact) / exact < 1e-6


def test_bq_window_tail_is_an_upper_bound():
  mech = bq.BQ(1.0, 1, 50)
  cond = mech.conditioned_sum(4, 1e-6)
  a = cond.window[0]   # the cut a (W in level-index sums starts at a)
  with mpmath.workdps(40):
    exact = 2 * sum(mpmath.exp(_log_binom_half(200, k)) for k in range(a))
  assert cond.tail >= float(exact)
  assert cond.tail <= 1e-6


def _brute_rdp(mech, n, alpha, xs_target, xs_others):
  """max over target pairs and others' inputs (from a finite set) of D_α of
  the n-client sum, the laws convolved in 40-digit arithmetic from the
  exact per-client pmfs (mpmath binomials)."""
  levels = mech.num_levels

  def exact_law(x):
    p = mpmath.mpf(mech.success_prob(x))
    trials = levels - 1
    return [mpmath.binomial(trials, k) * p**k * (1 - p)**(trials - k)
            for k in range(levels)]

  def conv(a, b):
    out = [mpmath.mpf(0)] * (len(a) + len(b) - 1)
    for i, u in enumerate(a):
      for j, v in enumerate(b):
        out[i + j] += u * v
    return out

  worst = mpmath.mpf(0)
  for others in itertools.combinations_with_replacement(xs_others, n - 1):
    o = [mpmath.mpf(1)]
    for y in others:
      o = conv(o, exact_law(y))
    for x, x2 in itertools.permutations(xs_target, 2):
      p, q = conv(exact_law(x), o), conv(exact_law(x2), o)
      s = sum(u**alpha * v**(1 - alpha) for u, v in zip(p, q) if u > 0)
      worst = max(worst, mpmath.log(s) / (alpha - 1))
  return float(worst)


@pytest.mark.parametrize('n', [2, 3])
def test_pbm_proved_at_or_above_brute_force(n):
  mech = pbm.PBM(1.0, 4, 0.3)
  c = mech.input_bound
  rdp = per_round.per_round_rdp(mech, n, 1, orders=(2, 3))
  with mpmath.workdps(40):
    xs = [-c, -c / 3, c / 3, c]
    for alpha in (2, 3):
      brute = _brute_rdp(mech, n, alpha, [-c, c], xs)
      assert rdp[alpha] >= brute, (alpha, rdp[alpha], brute)


def test_allowance_formula():
  mech = pbm.PBM(1.0, 16, 0.25)
  eta = mech.log_pmf_error
  assert eta > 0
  assert numerics.rdp_allowance(mech, 10, 2) == pytest.approx(30 * eta)
  assert numerics.rdp_allowance(mech, 10, math.inf) == pytest.approx(20 * eta)
  assert numerics.blanket_log_beta(-0.1, 3, mech) == pytest.approx(-0.1 - 3 * eta)


def test_allowance_is_zero_without_a_stated_bound():
  class _NoBound:
    log_pmf_error = None
  assert numerics.rdp_allowance(_NoBound(), 5, 2) == 0.0


@pytest.mark.parametrize('kwargs,name', [(dict(num_clients=0, alpha=2), 'num_clients'),
                                         (dict(num_clients=1, alpha=1), 'alpha')])
def test_bad_input_names_the_parameter(kwargs, name):
  with pytest.raises(ValueError, match=name):
    numerics.rdp_allowance(pbm.PBM(1.0, 4, 0.3), **kwargs)
