"""Tests for tff_quant/accounting/loss_pmf.py: every mass and loss is moved
to the pessimistic side by at least its rounding (exact rational arithmetic
as the reference), and the composition's FFT size is known beforehand."""

import fractions
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from tff_quant import mechanisms
from tff_quant.accounting import composition, divergence, loss_pmf
from tests.accounting import cases

INTERVAL = 1e-3


def _delta(pmf, eps):
  """δ(ε) = E_P[(1 - e^(ε-L))_+] + P(L = inf), from a LossPmf."""
  losses = (pmf.lower + np.arange(len(pmf.probs))) * pmf.interval
  gain = -np.expm1(np.minimum(eps - losses, 0.0))   # (1 - e^(ε-L))_+
  return float(np.sum(pmf.probs * gain) + pmf.inf_mass)


def _pbm_pmf(interval=INTERVAL):
  (lp, up, ep), (lq, _, eq) = divergence.sum_pair_log_pmfs(
      mechanisms.PBM(1.0, 16, 0.25), 3, 1)
  return loss_pmf.LossPmf.from_log_pmfs(lp, lq, interval, ep, eq, up)


def _exact_power(probs, times):
  """The `times`-fold convolution of the float masses, in exact rationals
  (over the nonzero entries)."""
  base = {i: fractions.Fraction(float(x)) for i, x in enumerate(probs) if x}
  out = cases.sparse_power(base, times, fractions.Fraction(1))
  dense = [fractions.Fraction(0)] * (times * (len(probs) - 1) + 1)
  for i, v in out.items():
    dense[i] = v
  return dense


def test_losses_are_rounded_up_and_mass_kept():
  with np.errstate(divide='ignore'):
    log_p = np.log(np.array([0.5, 0.3, 0.2, 0.0]))
    log_q = np.log(np.array([0.25, 0.5, 0.0, 0.25]))
  pmf = loss_pmf.LossPmf.from_log_pmfs(log_p, log_q, 0.1)
  assert 0.2 <= pmf.inf_mass <= 0.2 * (1 + 1e-14)
  losses = (pmf.lower + np.nonzero(pmf.probs)[0]) * 0.1
  exact = sorted([math.log(0.3 / 0.5), math.log(2.0)])
  assert np.all(losses >= np.array(exact) - 1e-12)
  assert np.all(losses - np.array(exact) < 0.1)
  assert 1.0 <= pmf.probs.sum() + pmf.inf_mass <= 1.0 + 1e-14


def test_a_loss_on_a_grid_point_is_not_rounded_down():
  """(log P − log Q)/interval one ulp below an integer while the exact
  value is the integer: the slack moves it to the next point, not below."""
  log_q = np.array([-700.0])
  log_p = np.array([-700.0 + 3 * 0.1])   # the difference, rounded, is 0.3 ± ulps
  pmf = loss_pmf.LossPmf.from_log_pmfs(log_p, log_q, 0.1)
  assert pmf.lower * 0.1 >= 0.3 - 1e-15 and pmf.lower <= 4


def test_proved_errors_move_losses_up_and_unbounded_entries_to_infinity():
  log_p = np.log(np.array([0.5, 0.3, 0.2]))
  log_q = np.log(np.array([0.25, 0.5, 0.25]))
  err = np.array([0.05, 0.0, np.inf])
  upper = np.log(np.array([0.6, 0.3, 0.25]))
  pmf = loss_pmf.LossPmf.from_log_pmfs(log_p, log_q, 0.01, err, err, upper)
  assert pmf.inf_mass == pytest.approx(0.25, rel=1e-14) and pmf.inf_mass >= 0.25
  points = {k * 0.01: v for k, v in pmf.as_dict().items()}
  # Entry 0: loss log 2 + 0.1 (both errors), mass 0.5 e^0.05.
  first = min(l for l in points if l >= math.log(2) + 0.1 - 1e-12)
  assert points[first] >= 0.5 * math.exp(0.05)
  with pytest.raises(ValueError, match='log_p_upper'):
    loss_pmf.LossPmf.from_log_pmfs(log_p, log_q, 0.01, err, err)


@pytest.mark.parametrize('times', [2, 3, 6])
def test_composition_is_never_below_the_exact_convolution(times):
  one = _pbm_pmf(interval=0.05)   # a coarse grid keeps the rationals small
  exact = _exact_power(one.probs, times)
  many = one.compose(times, tail=1e-12)
  assert len(many.probs) == one.composed_points(times, tail=1e-12)
  start = many.lower - times * one.lower
  kept = exact[start:start + len(many.probs)]
  assert all(fractions.Fraction(float(a)) >= b
             for a, b in zip(many.probs, kept))
  # What the window left out: at most the tail above (added at +∞) and
  # below (aliased upwards).
  outside = sum(exact) - sum(kept)
  assert outside <= fractions.Fraction(2e-12)
  assert many.inf_mass >= 1e-12
  exact_pmf = loss_pmf.LossPmf(times * one.lower,
                               np.array([float(x) for x in exact]), 0.0,
                               0.05)
  for eps in (0.0, 0.5, 2.0):
    assert _delta(exact_pmf, eps) <= _delta(many, eps) <= (
        _delta(exact_pmf, eps) + 1e-9)


def test_composition_matches_dp_accounting_closely():
  """Against dp-accounting's (unproved) composition of the same masses: the
  proved one adds each entry's FFT bound, about 2e-9 of δ over 131,072
  points here; ε at δ = 1e-3 moves by under 1e-6 relative."""
  one = _pbm_pmf()
  five = one.compose(5)
  theirs = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
      one.as_dict(), one.inf_mass, INTERVAL).self_compose(5)
  for eps in (0.5, 5.0, 20.0, 30.0):
    assert _delta(five, eps) == pytest.approx(
        theirs.get_delta_for_epsilon(eps), abs=1e-8)
  ours = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
      five.as_dict(), five.inf_mass, INTERVAL)
  assert ours.get_epsilon_for_delta(1e-3) == pytest.approx(
      theirs.get_epsilon_for_delta(1e-3), rel=1e-6)


def test_sum_window_leaves_at_most_the_tail_outside():
  one = _pbm_pmf(interval=0.05)
  exact = _exact_power(one.probs, 6)
  lo, hi = loss_pmf.sum_window(one.probs, one.lower, 6, 1e-6)
  first = 6 * one.lower
  assert sum(exact[:lo - first]) <= fractions.Fraction(1e-6)
  assert sum(exact[hi - first + 1:]) <= fractions.Fraction(1e-6)


def test_sum_window_is_clamped_into_the_support():
  """Helper review: where the finite mass^T is below τ the Chernoff cuts
  crossed and the FFT was sized from a negative width (2^28 points)."""
  lo, hi = loss_pmf.sum_window(np.array([3.8863997202133414e-08]), 18, 10,
                               4.086674570006442e-08)
  assert 180 <= lo <= hi <= 180
  lo, hi = loss_pmf.sum_window(np.array([1e-3, 1e-3]), 0, 5, 1e-12)
  assert 0 <= lo <= hi <= 5



def _every_lambdas_window(p, k_lo, times, tail):
  """The window from the best of all 60 grid λ (each side): the reference
  the golden-section search must meet where the edge is unimodal."""
  i = np.arange(p.size, dtype=np.float64)
  with np.errstate(divide='ignore'):
    log_p = np.log(p)
  lo_all, hi_all = times * k_lo, times * (k_lo + p.size - 1)
  hi, lo = hi_all, lo_all
  for lam in np.geomspace(1e-6, 50.0, 60):
    for sign in (1.0, -1.0):
      terms = log_p + sign * lam * i
      m = float(np.max(terms))
      k = m + math.log(float(np.sum(np.exp(terms - m))))
      k += 1e-9 + 1e-12 * abs(k) + 4 * 2.0**-53 * lam * p.size + sign * lam * k_lo
      edge = (times * k - math.log(tail)) / lam
      if sign > 0:
        hi = min(hi, int(math.ceil(edge)))
      else:
        lo = max(lo, int(math.floor(-edge)))
  lo = min(max(lo, lo_all), hi_all)
  return lo, min(max(hi, lo), hi_all)


def test_sum_window_is_the_best_of_every_grid_lambda():
  """The golden-section search over λ's grid finds the window all 60 grid
  points give (the log-MGF's convexity makes each side's edge unimodal in
  λ), on masses of every shape: sparse, heavy-tailed, one point."""
  rng = np.random.default_rng(20)
  for _ in range(150):
    n = int(rng.integers(1, 300))
    p = rng.random(n)**rng.uniform(0.5, 20)
    p[rng.random(n) < 0.3] = 0.0
    p[int(rng.integers(n))] += 1e-3
    p /= p.sum() * rng.uniform(1, 3)
    args = (p, int(rng.integers(-500, 500)), int(rng.integers(1, 2000)),
            10.0**rng.uniform(-15, -2))
    assert loss_pmf.sum_window(*args) == _every_lambdas_window(*args), args

def test_infinite_mass_of_copies_is_rounded_up():
  for mass, times in ((1e-10, 1000), (0.3, 7), (0.0, 5), (1.0, 2)):
    exact = 1 - (1 - fractions.Fraction(mass))**times
    assert loss_pmf.raised_power_of_one_minus(mass, times) >= exact


def test_mix_with_zero_keeps_mass():
  mixed = _pbm_pmf().compose(3).mix_with_zero(0.1)
  assert 1.0 <= mixed.probs.sum() + mixed.inf_mass <= 1.0 + 1e-8
  assert mixed.probs[-mixed.lower] >= 0.9


def test_a_large_model_skips_pld_with_a_reason_instead_of_allocating():
  d = 1_206_590
  c = 0.03 / math.sqrt(d)
  g = composition.training_guarantee(mechanisms.RQM(c, c, 16, 0.42), 2000, 40,
                                     3400, 1 / 3400, dim=d, others='extremes')
  assert g.epsilon_pld is None and g.route == 'RDP'
  assert 'PLD route skipped' in g.pld_note and 'pld_max_points' in g.pld_note
  assert 'skipped' in g.summary()


def test_bq_gets_a_finite_epsilon_from_the_pld_route():
  g = composition.training_guarantee(mechanisms.BQ(1.0, 3, 8), 10, 4, 100, 1e-3,
                                     dim=3, others='extremes')
  assert math.isinf(g.epsilon_rdp) and g.route == 'PLD'
  assert 0 < g.epsilon < math.inf and g.pld_note == ''


def test_review_cases_masses_are_never_short():
  """A helper review's reproducers: the sum log p + e_p rounded down (the
  mass short by 8.8e-15 relative at |log p| = 700), a mass that underflows
  (e^-800 at loss 100 came out 0), and a γ·p in the subnormal range."""
  import mpmath  # pylint: disable=g-import-not-at-top
  mpmath.mp.dps = 40
  pmf = loss_pmf.LossPmf.from_log_pmfs(np.array([-700.0]), np.array([-700.5]),
                                       0.5, np.array([1e-14]), np.array([0.0]))
  assert mpmath.mpf(float(pmf.probs.sum())) >= mpmath.exp(
      mpmath.mpf(-700) + mpmath.mpf(1e-14))
  tiny = loss_pmf.LossPmf.from_log_pmfs(np.array([-800.0, 0.0]),
                                        np.array([-900.0, 0.0]), 1.0)
  # (at 101: the loss 100 is raised by its rounding slack first)
  assert sum(v for k, v in tiny.as_dict().items() if k >= 100 and k != 0) > 0
  mixed = loss_pmf.LossPmf(3, np.array([1.29e-307]), 7e-302, 1.0).mix_with_zero(
      5e-324)
  assert mixed.as_dict()[3] > 0 and mixed.inf_mass > 0
  with pytest.raises(ValueError, match='log_q'):
    loss_pmf.LossPmf.from_log_pmfs(np.array([-1.0]), np.array([np.nan]), 0.1,
                                   np.array([0.0]), np.array([0.0]))


def test_a_power_that_underflows_goes_to_infinity_instead_of_failing():
  for mass, times in ((1e-160, 3), (1e-5, 200)):
    out = loss_pmf.LossPmf(0, np.array([mass]), 0.0, 0.01).compose(times)
    assert out.inf_mass > 0 and not np.any(out.probs)


def test_no_mass_is_raised_outside_the_sums_range():
  """The FFT's bound is added inside the T-fold sum's range only: three
  points over 2,774 grid points (PBM with 2 levels) composed 3 times put
  2.7e-10 of spurious mass above the support, which swamped δ = 1e-10 (ε
  9.29 against 8.32 exact, by the review's brute force)."""
  g = composition.training_guarantee(mechanisms.PBM(1.0, 2, 0.3), 2, 2, 4,
                                     1e-10, dim=3, others='extremes')
  assert 8.318 <= g.epsilon_pld <= 8.33
