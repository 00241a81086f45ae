"""Tests for tff_quant/program/comparisons.py: the paired t interval's
coverage and TOST's error rate by seeded Monte Carlo (normal, skewed and
heavy-tailed draws), Holm's procedure against hand-worked examples and its
family-wise error by Monte Carlo, and the verdicts on constructed cases.

Every Monte Carlo tolerance is 4 binomial sds of the estimate,
4·sqrt(p(1-p)/N) (a correct procedure fails it with probability ~6e-5).
Where the t procedures are known to degrade with skew at small n, the check
runs at a size where they hold, and a second check pins the degradation at
3 seeds (comparisons' module docstring quotes both).
"""

import math

import numpy as np
import pytest
from scipy import stats

from tff_quant.program import comparisons

MARGIN = comparisons.MARGIN
ALPHA = comparisons.ALPHA


def _tolerance(p, reps):
  return 4 * math.sqrt(p * (1 - p) / reps)


def _coverage(draws, mean):
  _, low, high = comparisons.interval(draws)
  return float(np.mean((low <= mean) & (mean <= high)))


def _standardised(draw, mean, sd):
  return lambda rng, shape: (draw(rng, shape) - mean) / sd


_LN_SD = math.sqrt((math.exp(0.25) - 1) * math.exp(0.25))
#: Right-skewed (skewness 1.75), mean 0, sd 1.
LOGNORMAL = _standardised(lambda rng, shape: rng.lognormal(0, 0.5, shape),
                          math.exp(0.125), _LN_SD)
#: Right-skewed (skewness 0.6), mean 0, sd 1.
BETA = _standardised(lambda rng, shape: rng.beta(2, 5, shape), 2 / 7,
                     math.sqrt(10 / (49 * 8)))
#: Heavy-tailed: Student t with 3 degrees of freedom, mean 0, sd 1.
T3 = _standardised(lambda rng, shape: rng.standard_t(3, shape), 0, math.sqrt(3))
NORMAL = lambda rng, shape: rng.standard_normal(shape)


def test_interval_is_the_student_t_interval_of_the_paired_differences():
  a = {0: 0.70, 1: 0.72, 2: 0.75, 5: 0.9}
  b = {0: 0.69, 1: 0.70, 2: 0.71, 3: 0.5}
  seeds, d = comparisons.paired(a, b)
  assert seeds == (0, 1, 2)   # seeds 3 and 5 have no partner
  assert d == pytest.approx([0.01, 0.02, 0.04])
  mean, low, high = comparisons.interval(d)
  half = stats.t.ppf(0.975, 2) * np.std(d, ddof=1) / math.sqrt(3)
  assert mean == pytest.approx(np.mean(d))
  assert (low, high) == pytest.approx((mean - half, mean + half))
  assert comparisons.interval([0.1])[1] == -math.inf
  assert comparisons.p_difference([0.1]) == 1
  assert comparisons.p_equivalence([0.0]) == 1


def test_p_values_match_the_t_tests_they_name():
  d = np.array([0.012, -0.004, 0.007, 0.015, 0.001])
  assert comparisons.p_difference(d) == pytest.approx(
      stats.ttest_1samp(d, 0).pvalue)
  low = stats.ttest_1samp(d, -MARGIN, alternative='greater').pvalue
  high = stats.ttest_1samp(d, MARGIN, alternative='less').pvalue
  assert comparisons.p_equivalence(d) == pytest.approx(max(low, high))
  # TOST at alpha rejects exactly when the (1 - 2 alpha) interval lies
  # inside the margin.
  _, lo90, hi90 = comparisons.interval(d, level=0.90)
  assert (comparisons.p_equivalence(d) <= ALPHA) == (
      -MARGIN < lo90 and hi90 < MARGIN)
  # No spread: decided by the mean alone.
  assert comparisons.p_difference([0.01] * 3) == 0
  assert comparisons.p_difference([0.0] * 3) == 1
  assert comparisons.p_equivalence([0.01] * 3) == 0
  assert comparisons.p_equivalence([0.03] * 3) == 1
  with pytest.raises(ValueError, match='positive'):
    comparisons.p_equivalence(d, margin=0)


def test_coverage_of_the_paired_interval_with_normal_draws():
  """4,000 comparisons of 3 seeds: arm a and arm b share a seed effect
  (sd 0.05, the block) and differ by 0.01; the interval of the mean
  difference holds 0.01 in 95% of them."""
  rng = np.random.default_rng(0)
  reps = 4000
  block = rng.normal(0.6, 0.05, (reps, 3))
  a = block + 0.01 + rng.normal(0, 0.02, (reps, 3))
  b = block + rng.normal(0, 0.03, (reps, 3))
  assert abs(_coverage(a - b, 0.01) - 0.95) < _tolerance(0.95, 4000)


@pytest.mark.parametrize('name, draw, seeds', [
    # beta(2, 5) covers 93.7% at 3 seeds and 94.9% at 50.
    ('beta(2, 5), skewed', BETA, 50),
    # lognormal(0, 0.5) covers 92.5% at 3 seeds, 94.0% at 50, 94.8% at 200.
    ('lognormal(0, 0.5), skewed', LOGNORMAL, 200),
    # Student t(3): conservative at 3 seeds (96.2%); at 30 within tolerance.
    ('t(3), heavy tails', T3, 30)])
def test_coverage_with_non_normal_draws_where_it_holds(name, draw, seeds):
  rng = np.random.default_rng(1)
  reps = 4000
  d = 0.01 + 0.03 * draw(rng, (reps, seeds))
  assert abs(_coverage(d, 0.01) - 0.95) < _tolerance(0.95, reps), name


def test_coverage_at_3_seeds_conservative_with_heavy_tails_short_with_skew():
  rng = np.random.default_rng(2)
  reps = 4000
  tol = _tolerance(0.95, reps)
  assert _coverage(0.03 * T3(rng, (reps, 3)), 0) > 0.95 - tol
  assert _coverage(0.03 * LOGNORMAL(rng, (reps, 3)), 0) < 0.95 - tol   # ~92%
  # A skewed arm minus a normal arm of the same spread: ~95% again.
  d = 0.03 * LOGNORMAL(rng, (reps, 3)) - rng.normal(0, 0.03, (reps, 3))
  assert abs(_coverage(d, 0) - 0.95) < tol


def _tost_rate(draw, seeds, delta, sd, reps, seed):
  rng = np.random.default_rng(seed)
  d = delta + sd * draw(rng, (reps, seeds))
  return float(np.mean(comparisons.p_equivalence(d) <= ALPHA))


@pytest.mark.parametrize('delta', [MARGIN, -MARGIN])
def test_tost_rejects_at_the_margin_in_alpha_of_normal_draws(delta):
  """At δ = ±margin (the null's edge) with a small sd, TOST's error is alpha;
  with a large sd it is below alpha (the other one-sided test rarely
  rejects)."""
  reps = 20000
  tol = _tolerance(ALPHA, reps)
  assert abs(_tost_rate(NORMAL, 3, delta, 0.005, reps, 3) - ALPHA) < tol
  assert _tost_rate(NORMAL, 3, delta, 0.03, reps, 4) < ALPHA + tol
  # Outside the margin it errs less still, inside it shows equivalence.
  assert _tost_rate(NORMAL, 3, 1.5 * delta, 0.005, reps, 5) < ALPHA
  assert _tost_rate(NORMAL, 3, 0.0, 0.005, reps, 6) > 0.5


@pytest.mark.parametrize('name, draw, seeds', [
    # beta(2, 5): 8.7% at +margin with 3 seeds, 5.5% with 200, 5.2% with 400.
    ('beta(2, 5), skewed', BETA, 400),
    # Student t(3): conservative at 3 seeds (4.1%), alpha at 30.
    ('t(3), heavy tails', T3, 30)])
@pytest.mark.parametrize('delta', [MARGIN, -MARGIN])
def test_tost_error_with_non_normal_draws_where_it_holds(name, draw, seeds,
                                                         delta):
  reps = 10000
  rate = _tost_rate(draw, seeds, delta, 0.005, reps, 7)
  assert abs(rate - ALPHA) < _tolerance(ALPHA, reps), (name, rate)


def test_tost_error_at_3_seeds_below_alpha_with_heavy_tails_above_with_skew():
  reps = 20000
  tol = _tolerance(ALPHA, reps)
  for delta in (MARGIN, -MARGIN):
    assert _tost_rate(T3, 3, delta, 0.005, reps, 8) < ALPHA + tol
  # Right skew: the test of δ >= margin errs ~12% at +margin; ~2% at -margin.
  assert _tost_rate(LOGNORMAL, 3, MARGIN, 0.005, reps, 9) > ALPHA + tol
  assert _tost_rate(LOGNORMAL, 3, -MARGIN, 0.005, reps, 9) < ALPHA


def test_holm_against_a_hand_worked_example():
  """p = (0.01, 0.04, 0.03, 0.005), 4 hypotheses. Ranked: 0.005·4 = 0.02,
  0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 -> 0.06 (kept non-decreasing).
  At 0.05 the first two ranked (hypotheses 4 and 1) are rejected."""
  adjusted = comparisons.holm([0.01, 0.04, 0.03, 0.005])
  assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
  assert list(adjusted <= 0.05) == [True, False, False, True]
  # Capped at 1; a single hypothesis is left as it is.
  assert comparisons.holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])
  assert comparisons.holm([0.03]) == pytest.approx([0.03])


def test_holm_counts_groups_when_given():
  """Hypotheses (p, group): (0.01, A), (0.04, A), (0.03, B), (0.005, B).
  Ranked 0.005 (B), 0.01 (A), 0.03 (B), 0.04 (A); groups from each rank on:
  2, 2, 2, 1. Adjusted: 0.01, 0.02, 0.06, max(0.06, 0.04) = 0.06. Plain
  Holm over the 4 would give 0.02, 0.03, 0.06, 0.06."""
  adjusted = comparisons.holm([0.01, 0.04, 0.03, 0.005], ['A', 'A', 'B', 'B'])
  assert adjusted == pytest.approx([0.02, 0.06, 0.06, 0.01])
  # (0.001, A), (0.002, B), (0.02, C), (0.03, B): groups from each rank on
  # are {A, B, C}, {B, C}, {C, B}, {B}: 0.003, 0.004, 0.04, 0.03 -> 0.04.
  adjusted = comparisons.holm([0.001, 0.002, 0.02, 0.03], ['A', 'B', 'C', 'B'])
  assert adjusted == pytest.approx([0.003, 0.004, 0.04, 0.04])
  with pytest.raises(ValueError, match='groups'):
    comparisons.holm([0.1, 0.2], ['A'])
  with pytest.raises(ValueError, match=r'\[0, 1\]'):
    comparisons.holm([0.1, math.nan])


def test_family_wise_error_by_monte_carlo_with_a_shared_reference():
  """4,000 families of 6 comparisons at 5 seeds, each a cell minus one shared
  reference arm (so the differences are dependent): true differences 0, 0,
  0, +margin, -margin, +margin. A family errs when it rejects a true null
  (a "no difference" where δ = 0, an equivalence where |δ| = margin); it
  does so in at most alpha of the families."""
  rng = np.random.default_rng(10)
  reps, seeds = 4000, 5
  deltas = np.array([0, 0, 0, MARGIN, -MARGIN, MARGIN])
  reference = rng.normal(0, 0.004, (reps, 1, seeds))
  cells = deltas[None, :, None] + rng.normal(0, 0.004, (reps, 6, seeds))
  d = cells - reference
  p_diff = comparisons.p_difference(d)
  p_eq = comparisons.p_equivalence(d)
  errors = 0
  for k in range(reps):
    adjusted = comparisons.holm(np.concatenate([p_diff[k], p_eq[k]]),
                                groups=list(range(6)) * 2)
    wrong = (adjusted[:6] <= ALPHA) & (deltas == 0)
    wrong |= (adjusted[6:] <= ALPHA) & (np.abs(deltas) >= MARGIN)
    errors += bool(wrong.any())
  assert errors / reps < ALPHA + _tolerance(ALPHA, reps)
  # Unadjusted, the same tests err in about 1 - 0.95^6 of the families.
  raw = ((p_diff <= ALPHA) & (deltas == 0)) | (
      (p_eq <= ALPHA) & (np.abs(deltas) >= MARGIN))
  assert raw.any(axis=1).mean() > 0.2


def _compare(*differences):
  """A family of comparisons of arms b = 0.6 and a = 0.6 + d per seed."""
  return comparisons.compare(
      [(f'a{k}', f'b{k}', {s: 0.6 + x for s, x in enumerate(d)},
        {s: 0.6 for s in range(len(d))}) for k, d in enumerate(differences)])


def test_every_verdict_is_reachable():
  equivalent, better, worse, inconclusive = _compare(
      [0.002, -0.001, 0.0, 0.001, -0.002],
      [0.050, 0.052, 0.049, 0.051, 0.050],
      [-0.050, -0.052, -0.049, -0.051, -0.050],
      [0.05, -0.04, 0.01, 0.08, -0.06])
  assert equivalent.verdict == 'equivalent'
  assert better.verdict == 'better' and worse.verdict == 'worse'
  assert inconclusive.verdict == 'inconclusive'
  assert equivalent.n == 5 and better.mean == pytest.approx(0.0504)
  # Holm over 4 comparisons (8 hypotheses, counted as 4).
  assert better.p_difference_holm >= better.p_difference
  assert set(comparisons.VERDICTS) == {'better', 'worse', 'equivalent',
                                       'inconclusive'}


def test_a_shown_difference_inside_the_margin_is_equivalent():
  (c,) = _compare([0.0100, 0.0101, 0.0099, 0.0100, 0.0102])
  assert c.p_difference_holm <= ALPHA and c.p_equivalence_holm <= ALPHA
  assert c.verdict == 'equivalent'


def test_holm_turns_a_lone_rejection_into_inconclusive():
  """p ~ 0.02 alone is 'better'; the same comparison among 10, the others
  null, is inconclusive (Holm's first step is 0.05/10)."""
  d = [0.03, 0.05, 0.04]   # mean 0.04, p ~ 0.02, beyond the margin
  (alone,) = _compare(d)
  assert alone.p_difference < ALPHA and alone.verdict == 'better'
  family = _compare(d, *([[0.1, -0.1, 0.05]] * 9))
  assert family[0].p_difference == alone.p_difference
  assert family[0].verdict == 'inconclusive'


def test_the_old_non_overlapping_intervals_rule_got_these_wrong():
  """Arms sharing a large seed effect: each arm's own 95% interval is wide
  and they overlap, so the old rule gave no verdict and listed a as "not
  separable" from b (read as a tie). Paired by seed, a is 0.03 above b in
  every block: 'better'. And an overlap is not a tie: where the paired
  interval is wider than the margin the verdict is 'inconclusive'."""
  seed_effect = [0.55, 0.65, 0.75]
  a = {s: e + 0.03 + x for s, (e, x) in
       enumerate(zip(seed_effect, [0.001, -0.001, 0.0005]))}
  b = dict(enumerate(seed_effect))

  def t_interval(values):
    v = np.array(list(values.values()))
    half = stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return v.mean() - half, v.mean() + half
  (a_lo, a_hi), (b_lo, b_hi) = t_interval(a), t_interval(b)
  assert a_lo < b_hi and b_lo < a_hi   # the old rule: overlap, no verdict
  (c,) = comparisons.compare([('a', 'b', a, b)])
  assert c.verdict == 'better' and c.low > 0
  tie = {s: e + x for s, (e, x) in
         enumerate(zip(seed_effect, [0.03, -0.04, 0.01]))}
  (c,) = comparisons.compare([('tie', 'b', tie, b)])
  assert c.verdict == 'inconclusive' and c.half_width > MARGIN


def test_a_comparison_without_shared_seeds_stays_in_the_family():
  c, d = comparisons.compare([('a', 'b', {0: 0.7}, {1: 0.6}),
                              ('c', 'd', {0: 0.7, 1: 0.71}, {0: 0.6, 1: 0.6})])
  assert c.n == 0 and math.isnan(c.mean) and c.verdict == 'inconclusive'
  assert c.p_difference == 1 and c.half_width == math.inf
  assert d.n == 2


def test_seeds_for_a_half_width_and_for_tost():
  sd = 0.02
  n = comparisons.seeds_for_half_width(sd, 0.02)
  assert comparisons.expected_half_width(sd, n) <= 0.02
  assert comparisons.expected_half_width(sd, n - 1) > 0.02
  assured = comparisons.seeds_for_half_width(sd, 0.02, assurance=0.8)
  assert assured > n
  # The assurance is what a run of that many seeds gets, by Monte Carlo.
  rng = np.random.default_rng(11)
  s = rng.normal(0, sd, (20000, assured)).std(axis=1, ddof=1)
  half = stats.t.ppf(0.975, assured - 1) * s / math.sqrt(assured)
  assert np.mean(half <= 0.02) >= 0.8 - _tolerance(0.8, 20000)
  # TOST's power by Monte Carlo at the seeds it names.
  k = comparisons.seeds_for_equivalence(sd, MARGIN, ALPHA, 0.8)
  rate = np.mean(comparisons.p_equivalence(
      rng.normal(0, sd, (20000, k))) <= ALPHA)
  assert abs(rate - comparisons.tost_power(sd, k)) < _tolerance(0.8, 20000)
  assert rate >= 0.8 - _tolerance(0.8, 20000)
  assert comparisons.tost_power(sd, k - 1) < 0.8
  with pytest.raises(ValueError, match='inside the margin'):
    comparisons.seeds_for_equivalence(sd, delta=MARGIN)


def test_pooled_sd():
  sd, df = comparisons.pooled_sd([[0.0, 0.02], [0.1, 0.1, 0.13], [0.5]])
  ss = 0.02**2 / 2 + (0.03**2 * 2 / 3)
  assert df == 3 and sd == pytest.approx(math.sqrt(ss / 3))
  assert math.isnan(comparisons.pooled_sd([[0.5]])[0])
