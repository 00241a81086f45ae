"""Paired comparisons of training runs: differences by seed, 95% Student-t
intervals, Holm's step-down over a stated family, equivalence by two one-sided
tests (TOST) at a margin fixed before the runs, and four verdicts.

* A **comparison** is two arms (e.g. two FL table cells at the same ε) run
  with the same seeds; seed s is a block, so its figure is the mean of the
  paired differences d_s = a_s - b_s over the seeds both arms have, with the
  95% interval mean ± t_{0.975, n-1}·sd(d)/√n.
* Each comparison tests two nulls: H0= "no difference" (the two-sided paired
  t test) and H0≈ "|difference| >= margin" (TOST: the one-sided t tests of
  δ <= -margin and of δ >= margin both reject; its p-value is the larger of
  the two (Schuirmann 1987), i.e. the 90% interval lies inside ±margin).
* **Holm (1979)** step-down over every hypothesis of the family, the divisor
  at each step counting the *comparisons* with a hypothesis not yet passed
  rather than the hypotheses: a comparison's H0= (δ = 0) and H0≈ (|δ| >=
  margin) cannot both be true, so it holds at most one true null (Shaffer's
  1986 refinement of Holm for logically related hypotheses). The chance of
  rejecting any true null of the family stays <= alpha under any dependence
  between the comparisons (e.g. arms shared by several of them): at the first
  false rejection, at step j, every true null still ranks at j or later, each
  in its own comparison, so the divisor is at least their number.
* **Verdicts**, at the adjusted p-values: "equivalent" when H0≈ is rejected
  (a difference shown inside ±margin, whatever H0= says); else "better" /
  "worse" (the sign of the mean difference) when H0= is rejected; else
  "inconclusive". "Inconclusive" is not a tie: it says the runs cannot tell.

The t interval and the one-sided t tests assume roughly normal differences.
Heavy symmetric tails (t, 3 df) make them conservative at 3 seeds; skew does
not: at 3 seeds, right-skewed differences (lognormal, σ = 0.5) give an
interval that covers 92%, and a test of δ >= margin that rejects 12% of the
time at δ = margin (left skew: the mirror image at -margin); a skewed arm
minus a normal one is much less skewed (95%). Skew fades slowly with seeds
(beta(2, 5): 95% coverage by 50 seeds, a 5% TOST by about 400).
tests/program/comparisons_test.py measures each of these.
"""

import dataclasses
import math
from typing import Any, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy import integrate, stats

#: The equivalence margin, in test accuracy, fixed before the runs: two arms
#: whose mean difference is shown inside ±MARGIN are "equivalent".
MARGIN = 0.02
#: The family-wise error rate of each family of comparisons.
ALPHA = 0.05
LEVEL = 0.95   # the intervals printed beside the verdicts
VERDICTS = ('better', 'worse', 'equivalent', 'inconclusive')


def summary(d, axis: int = -1) -> Tuple[np.ndarray, np.ndarray, int]:
  """(mean, standard error, degrees of freedom) of paired differences.

  Args:
    d: the differences, seeds along `axis` (any leading shape: one
      comparison per row).
    axis: the axis of the seeds.

  Returns:
    The mean and sd/√n along `axis` (nan standard error with one seed), and
    n - 1.
  """
  d = np.asarray(d, np.float64)
  n = d.shape[axis]
  mean = d.mean(axis=axis)
  if n < 2:
    return mean, np.full_like(mean, np.nan), n - 1
  return mean, d.std(axis=axis, ddof=1) / math.sqrt(n), n - 1


def interval(d, level: float = LEVEL, axis: int = -1):
  """(mean, low, high): the Student-t interval of the mean difference.

  Args:
    d: paired differences, seeds along `axis`.
    level: the coverage, e.g. 0.95.
    axis: the axis of the seeds.

  Returns:
    mean ± t_{(1+level)/2, n-1}·sd/√n; (mean, -inf, inf) with one seed.
  """
  mean, se, df = summary(d, axis)
  if df < 1:
    return mean, np.full_like(mean, -np.inf), np.full_like(mean, np.inf)
  half = stats.t.ppf((1 + level) / 2, df) * se
  return mean, mean - half, mean + half


def _t_stat(numerator, se):
  """numerator/se, ±inf where se is 0 and the numerator is not, nan at 0/0."""
  with np.errstate(divide='ignore', invalid='ignore'):
    return np.asarray(numerator, np.float64) / se


def _no_nan(p):
  """p-values with nan (one seed, or 0/0) read as 1: no evidence."""
  p = np.asarray(p, np.float64)
  return np.where(np.isnan(p), 1.0, p)


def p_difference(d, axis: int = -1):
  """Two-sided paired t test of "no difference" (its p-value).

  Args:
    d: paired differences, seeds along `axis`.
    axis: the axis of the seeds.

  Returns:
    2·P(T_{n-1} >= |mean|/se); 1 with fewer than two seeds or a zero
    difference of zero spread.
  """
  mean, se, df = summary(d, axis)
  if df < 1:
    return np.ones_like(mean)
  t = _t_stat(mean, se)
  return _no_nan(2 * stats.t.sf(np.abs(t), df))


def p_equivalence(d, margin: float = MARGIN, axis: int = -1):
  """TOST's p-value for "|difference| >= margin" (Schuirmann 1987).

  Args:
    d: paired differences, seeds along `axis`.
    margin: the equivalence margin (> 0).
    axis: the axis of the seeds.

  Returns:
    The larger of the one-sided p-values of δ <= -margin and δ >= margin:
    at most alpha exactly when the (1 - 2·alpha) interval lies inside
    ±margin. 1 with fewer than two seeds.

  Raises:
    ValueError: a margin that is not positive.
  """
  if not margin > 0:
    raise ValueError(f'the equivalence margin must be positive, not {margin}')
  mean, se, df = summary(d, axis)
  if df < 1:
    return np.ones_like(mean)
  p_low = stats.t.sf(_t_stat(mean + margin, se), df)    # H0: δ <= -margin
  p_high = stats.t.cdf(_t_stat(mean - margin, se), df)  # H0: δ >= margin
  return np.maximum(_no_nan(p_low), _no_nan(p_high))


def holm(pvalues: Sequence[float], groups: Optional[Sequence[Any]] = None
         ) -> np.ndarray:
  """Holm's (1979) step-down adjusted p-values.

  The hypotheses are ranked by p-value; the j-th smallest is multiplied by
  the number of hypotheses from rank j on (with `groups`: the number of
  groups with a hypothesis from rank j on), capped at 1, and the adjusted
  values are made non-decreasing in rank. Reject where adjusted <= alpha.

  Args:
    pvalues: one per hypothesis, in [0, 1].
    groups: optional, one label per hypothesis: hypotheses of which at most
      one per group can be true (a comparison's H0= and H0≈). None: every
      hypothesis its own group (plain Holm).

  Returns:
    The adjusted p-values, in the input's order.

  Raises:
    ValueError: a p-value outside [0, 1] or nan, or groups of another length.
  """
  p = np.asarray(pvalues, np.float64).ravel()
  if np.any(~((p >= 0) & (p <= 1))):
    raise ValueError(f'p-values must lie in [0, 1]: {p.tolist()}')
  groups = list(range(p.size)) if groups is None else list(groups)
  if len(groups) != p.size:
    raise ValueError(f'{len(groups)} groups for {p.size} p-values')
  order = np.argsort(p, kind='stable')
  adjusted = np.empty_like(p)
  running = 0.0
  for rank, i in enumerate(order):
    left = len({groups[j] for j in order[rank:]})
    running = max(running, min(1.0, left * p[i]))
    adjusted[i] = running
  return adjusted


def verdict(mean: float, p_difference_adjusted: float,
            p_equivalence_adjusted: float, alpha: float = ALPHA) -> str:
  """'equivalent', 'better', 'worse' or 'inconclusive' (module docstring).

  Args:
    mean: the mean difference (a - b).
    p_difference_adjusted: Holm-adjusted p-value of "no difference".
    p_equivalence_adjusted: Holm-adjusted TOST p-value.
    alpha: the family-wise error rate.

  Returns:
    'equivalent' where TOST rejects; else 'better' (mean > 0) or 'worse'
    where "no difference" is rejected; else 'inconclusive'.
  """
  if p_equivalence_adjusted <= alpha:
    return 'equivalent'
  if p_difference_adjusted <= alpha:
    return 'better' if mean > 0 else 'worse'
  return 'inconclusive'


@dataclasses.dataclass
class Comparison:
  """Arm a against arm b, paired by seed.

  Args:
    a, b: the arms (any object; e.g. fl_table.Cell).
    seeds: the seeds both arms have, in order.
    differences: a - b per seed, in that order.
    mean, low, high: the mean difference and its 95% t interval (nan without
      a shared seed; ±inf with one).
    p_difference, p_equivalence: the unadjusted p-values (H0=, H0≈).
    p_difference_holm, p_equivalence_holm: adjusted over the family.
    verdict: one of VERDICTS.
    margin: the equivalence margin tested.
  """
  a: Any
  b: Any
  seeds: Tuple[int, ...]
  differences: np.ndarray
  mean: float
  low: float
  high: float
  p_difference: float
  p_equivalence: float
  p_difference_holm: float = math.nan
  p_equivalence_holm: float = math.nan
  verdict: str = 'inconclusive'
  margin: float = MARGIN

  @property
  def n(self) -> int:
    """The number of paired seeds."""
    return len(self.seeds)

  @property
  def half_width(self) -> float:
    """The 95% interval's half-width (inf with fewer than two seeds)."""
    return (self.high - self.low) / 2 if self.n >= 2 else math.inf


def paired(a: Mapping[int, float], b: Mapping[int, float]
           ) -> Tuple[Tuple[int, ...], np.ndarray]:
  """(seeds, a - b) over the seeds both `a` and `b` ({seed: value}) have."""
  seeds = tuple(sorted(set(a) & set(b)))
  return seeds, np.array([a[s] - b[s] for s in seeds], np.float64)


def compare(pairs: Sequence[Tuple[Any, Any, Mapping[int, float],
                                  Mapping[int, float]]],
            margin: float = MARGIN, alpha: float = ALPHA) -> List[Comparison]:
  """One family of comparisons, with Holm's adjustment and the verdicts.

  Args:
    pairs: (a, b, {seed: a's value}, {seed: b's value}) per comparison; the
      family is exactly these (a comparison without two shared seeds stays in
      it, with p-values 1).
    margin: the equivalence margin.
    alpha: the family-wise error rate.

  Returns:
    A Comparison per pair, in order.
  """
  out = []
  for a, b, values_a, values_b in pairs:
    seeds, d = paired(values_a, values_b)
    if d.size:
      mean, low, high = (float(x) for x in interval(d))
      p_d, p_e = float(p_difference(d)), float(p_equivalence(d, margin))
    else:
      mean = low = high = math.nan
      p_d = p_e = 1.0
    out.append(Comparison(a, b, seeds, d, mean, low, high, p_d, p_e,
                          margin=margin))
  if out:
    adjusted = holm([c.p_difference for c in out] +
                    [c.p_equivalence for c in out],
                    groups=list(range(len(out))) * 2)
    for k, c in enumerate(out):
      c.p_difference_holm = float(adjusted[k])
      c.p_equivalence_holm = float(adjusted[len(out) + k])
      c.verdict = verdict(c.mean, c.p_difference_holm, c.p_equivalence_holm,
                          alpha)
  return out


def pooled_sd(differences: Sequence[Sequence[float]]) -> Tuple[float, int]:
  """(pooled sd, its degrees of freedom) of several comparisons' differences:
  sqrt(Σ (n_i - 1)·s_i² / Σ (n_i - 1)) over those with two or more seeds
  ((nan, 0) if none has)."""
  ss, df = 0.0, 0
  for d in differences:
    d = np.asarray(d, np.float64)
    if d.size >= 2:
      ss += float(((d - d.mean())**2).sum())
      df += d.size - 1
  return (math.sqrt(ss / df), df) if df else (math.nan, 0)


def expected_half_width(sd: float, n: int, level: float = LEVEL) -> float:
  """t_{(1+level)/2, n-1}·sd/√n: the half-width at n seeds for this sd."""
  return float(stats.t.ppf((1 + level) / 2, n - 1) * sd / math.sqrt(n))


def seeds_for_half_width(sd: float, half_width: float, level: float = LEVEL,
                         assurance: Optional[float] = None,
                         max_seeds: int = 100_000) -> int:
  """The fewest seeds whose paired interval has at most `half_width`.

  Args:
    sd: the sd of the paired differences (e.g. pooled_sd's).
    half_width: the target half-width.
    level: the interval's coverage.
    assurance: None: the half-width t_{(1+level)/2, n-1}·sd/√n computed at
      `sd` (the plug-in answer); a probability, e.g. 0.8: the half-width a
      run of n seeds gets, t·S/√n with its own sample sd S, is below the
      target with that probability ((n-1)S²/sd² ~ χ²_{n-1}).
    max_seeds: the search's limit.

  Returns:
    The smallest n >= 2.

  Raises:
    ValueError: a non-positive target or sd, or no n up to max_seeds.
  """
  if not (half_width > 0 and sd > 0):
    raise ValueError(f'need sd > 0 and half_width > 0, not {sd}, {half_width}')
  for n in range(2, max_seeds + 1):
    t = stats.t.ppf((1 + level) / 2, n - 1)
    if assurance is None:
      if t * sd / math.sqrt(n) <= half_width:
        return n
    elif stats.chi2.cdf((n - 1) * (half_width * math.sqrt(n) / (t * sd))**2,
                        n - 1) >= assurance:
      return n
  raise ValueError(f'no n <= {max_seeds} reaches half-width {half_width}')


def tost_power(sd: float, n: int, margin: float = MARGIN,
               alpha: float = ALPHA, delta: float = 0.0) -> float:
  """P(TOST at level alpha shows equivalence) for n seeds of paired
  differences ~ N(delta, sd²): P(|mean| + t_{1-alpha, n-1}·S/√n < margin),
  integrated over the sample sd S."""
  df = n - 1
  t = stats.t.ppf(1 - alpha, df)
  se = sd / math.sqrt(n)

  def given(u):   # u = (n-1)S²/sd² ~ χ²_df
    reach = margin - t * sd * math.sqrt(u / df) / math.sqrt(n)
    if reach <= 0:
      return 0.0
    return (stats.norm.cdf((reach - delta) / se) -
            stats.norm.cdf((-reach - delta) / se)) * stats.chi2.pdf(u, df)
  # The integrand is 0 beyond u where t·S/√n reaches the margin.
  top = df * (margin * math.sqrt(n) / (t * sd))**2
  return float(integrate.quad(given, 0, top, limit=200)[0])


def seeds_for_equivalence(sd: float, margin: float = MARGIN,
                          alpha: float = ALPHA, power: float = 0.8,
                          delta: float = 0.0, max_seeds: int = 10_000) -> int:
  """The fewest seeds with which TOST at level alpha shows equivalence with
  probability `power` when the true difference is `delta`.

  Raises:
    ValueError: |delta| >= margin, or no n up to max_seeds.
  """
  if not abs(delta) < margin:
    raise ValueError(f'|delta| = {abs(delta)} is not inside the margin '
                     f'{margin}')
  for n in range(2, max_seeds + 1):
    if tost_power(sd, n, margin, alpha, delta) >= power:
      return n
  raise ValueError(f'no n <= {max_seeds} reaches power {power}')

