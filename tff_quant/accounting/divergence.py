"""Exact Rényi divergences of what the server sees: the secure sum of n clients' levels.

The laws of the sums come from `tff_quant.common.laws` (tilted FFTs, full
relative precision in the tails); this module searches the others' inputs at
±c and the mechanism's extremes.
"""

import dataclasses
import math
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np

from tff_quant.accounting import numerics
from tff_quant.common import laws
from tff_quant.common import validation
# The primitives, under the names the accountant has always exported.
from tff_quant.common.laws import (UnresolvedSumError, renyi_divergence,  # noqa: F401  pylint: disable=unused-import
                                   sum_length, sum_log_pmf, sum_log_pmf_above)  # noqa: F401

@dataclasses.dataclass
class SumDivergence:
  """D_α of the secure sum, maximised over the other clients' inputs.

  Returned by `renyi_divergence_of_sum`.

  Attributes:
    alpha: the order.
    num_clients: n, clients in the secure sum.
    value: the maximum of D_α over the mixes evaluated.
    worst_num_plus: the mix attaining it (others at +clip).
    per_mix: D_α for every mix evaluated.
  """
  alpha: float
  num_clients: int
  value: float
  worst_num_plus: int                 # how many of the n-1 others sit at +clip
  per_mix: Dict[int, float]           # num_plus -> D_α for every mix evaluated


def _mixes(others, num_others: int) -> List[int]:
  if isinstance(others, str):
    if others == 'extremes':
      return list(range(num_others + 1))
    if others == 'balanced':
      return [num_others // 2]
    raise ValueError("`others` must be 'extremes', 'balanced' or a list of "
                     f'counts in [0, {num_others}], got {others!r}.')
  mixes = sorted(set(int(k) for k in others))
  if not mixes or mixes[0] < 0 or mixes[-1] > num_others:
    raise ValueError(f'`others` counts must be in [0, {num_others}], got {others!r}.')
  return mixes


def sum_log_pmf_at_extremes(mech, num_plus: int, num_minus: int,
                            log_floor: float = -np.inf,
                            with_error: bool = False):
  """(log-pmf, log upper bound) of the secure sum: `num_plus` clients at +clip, `num_minus` at -clip.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    num_plus, num_minus: clients (integers >= 0) with input +clip and -clip.
    log_floor: indices whose log-probability is provably below this may be
      left unresolved (`sum_log_pmf_above`); -inf resolves every index.

  Returns:
    (log_pmf, log_upper): float64 arrays over the sum's values 0..n(L-1)
    (L = `mech.num_levels`, n = num_plus + num_minus); log_pmf is NaN at an
    unresolved index, where log_upper < log_floor bounds it rigorously.
    With no clients, (zeros(1), zeros(1)): the sum is 0. With `with_error`,
    a third array: each entry's proved rounding
    (`laws.sum_log_pmf_with_error`, docs/privacy.md "Numerics" 3).
  """
  at_plus, at_minus = end_log_pmfs(mech)
  out = laws.sum_log_pmf_with_error([(at_plus, num_plus),
                                     (at_minus, num_minus)], log_floor)
  return out if with_error else out[:2]


def end_log_pmfs(mech) -> Tuple[np.ndarray, np.ndarray]:
  """(log_pmf(+c), log_pmf(-c)), computed once per mechanism object.

  An accounting call asks for them many times; they are cached in the
  mechanism's `__dict__` (docs/performance.md gives their cost).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`; c = `mech.input_bound`.

  Returns:
    (at_plus, at_minus): the [L] log-pmfs of one client's level at input +c
    and -c (-inf where a level is impossible); the same arrays on every call.
  """
  cached = mech.__dict__.get('_end_log_pmfs')
  if cached is None:
    c = mech.input_bound
    cached = (mech.log_pmf(c), mech.log_pmf(-c))
    mech.__dict__['_end_log_pmfs'] = cached
  return cached


def sum_pair_log_pmfs(mech, num_clients: int, num_plus: int):
  """The secure sum's laws when one client is at +clip vs -clip, with their
  proved rounding.

  The other n-1 clients: `num_plus` at +clip, the rest at -clip.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    num_clients: n, clients in the secure sum (the target included).
    num_plus: how many of the n-1 others sit at +clip, in [0, n-1].

  Returns:
    (p, q): the sum's law with the target at +clip and at -clip, each a
    triple (log_pmf, log_upper, log_error) of [n(L-1)+1] float64 arrays
    (`sum_log_pmf_at_extremes` with its error: every index resolved).
  """
  others_minus = num_clients - 1 - num_plus
  return (sum_log_pmf_at_extremes(mech, num_plus + 1, others_minus,
                                  with_error=True),
          sum_log_pmf_at_extremes(mech, num_plus, others_minus + 1,
                                  with_error=True))


def _infinite_mixes(mech, mixes: List[int], num_clients: int) -> List[int]:
  """The mixes in `mixes` whose pair of sums has D_α = inf for every α >= 1.

  That is where the sum with the target at +clip can take values the sum
  with it at -clip cannot; decided exactly on the supports (boolean
  convolutions), before any tail bound is needed (BQ at its range ends, for
  example).
  """
  at_plus, at_minus = end_log_pmfs(mech)
  sup_hi, sup_lo = np.isfinite(at_plus), np.isfinite(at_minus)
  if np.array_equal(sup_hi, sup_lo):
    return []
  length = num_clients * (sup_hi.size - 1) + 1
  infinite = []
  for k in mixes:
    sp = laws.support([(sup_hi, k + 1), (sup_lo, num_clients - 1 - k)], length)
    sq = laws.support([(sup_hi, k), (sup_lo, num_clients - k)], length)
    if (sp & ~sq).any():
      infinite.append(k)
  return infinite


def _tail_floor(alphas: List[float], d_inf_local: float) -> float:
  """The log floor below which the sums' tails are only bounded.

  Tails that cannot matter for the largest finite order are only bounded:
  terms are <= P e^((α-1) D∞_local), and the sum's D∞ <= the local D∞ at
  +-clip. Each sum serves as P for one mix and as Q for the next; where only
  Q is below the floor, P <= Q e^D∞, so the floor sits one D∞ lower than P
  needs: every bounded term is then <= e^-80. -inf (nothing bounded) when
  an order or the local D∞ is infinite.
  """
  finite = [a for a in alphas if not math.isinf(a)]
  if len(finite) == len(alphas) and math.isfinite(d_inf_local):
    return -max(finite) * d_inf_local - 80.0
  return -np.inf


def _mix_divergences(mech, alphas: List[float], num_clients: int,
                     mixes: List[int], per: Dict[float, Dict[int, float]]):
  """Fills per[α][k] with D_α of the pair of sums for every mix k in `mixes`.

  The pair for mix k is (S_{k+1}, S_k), S_j = j clients at +clip, n-j at
  -clip: n+1 sums serve all n mixes.
  """
  at_plus, at_minus = end_log_pmfs(mech)
  d_inf_local = renyi_divergence(at_plus, at_minus, math.inf)
  log_floor = _tail_floor(alphas, d_inf_local)
  sums = {}
  for j in sorted(set(mixes) | {k + 1 for k in mixes}):
    sums[j] = sum_log_pmf_at_extremes(mech, j, num_clients - j, log_floor,
                                      with_error=True)
  for k in mixes:
    (lp, lp_up, ep), (lq, _, eq) = sums[k + 1], sums[k]
    for a in alphas:   # raised by the sums' proved rounding
      per[a][k] = renyi_divergence(lp, lq, a, lp_up, d_inf_local,
                                   log_p_error=ep, log_q_error=eq)
      if math.isinf(a):   # the sum is a post-processing of the target's
        per[a][k] = min(per[a][k], d_inf_local)   # output and the others


def renyi_divergence_of_sum(mech, alpha: Union[float, Sequence[float]],
                            num_clients: int, others='extremes'):
  """Exact D_α between the secure sums when one client moves from +clip to -clip.

  The target client's input moves from +c to -c (c = `mech.input_bound`);
  the n-1 others sit at ±c in the mixes `others` names, and the largest D_α
  over them is reported. Where the mechanism has a closed form or a
  translation-invariant sum (`Mechanism.sum_divergences`), that value is
  exact for any inputs of the others and is returned instead (with
  `worst_num_plus` 0). The laws come from `tff_quant.common.laws` with full
  relative precision in the tails; tails that cannot matter are bounded
  (every bounded term <= e^-80 of the sum).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is
      accounted).
    alpha: an order in [1, inf] (1 = KL, inf = D∞), or a sequence of orders.
    num_clients: n >= 1 clients in the sum (n = 1 is the local guarantee).
    others: 'extremes' (every mix of the n-1 others at +-clip; the maximum is
      reported with the mix that attains it), 'balanced' (floor((n-1)/2) of
      them at +clip), or a list of counts in [0, n-1] of others at +clip.

  Returns:
    A `SumDivergence` (or a list of them, one per order in the order given,
    when `alpha` is a sequence); its value is inf where the sum with the
    target at +clip can take a value the sum at -clip cannot.

  Raises:
    TypeError: `num_clients` not an integer or an order not a number.
    ValueError: `num_clients` < 1, an order below 1 (or none given), or
      `others` neither 'extremes', 'balanced' nor counts in [0, n-1].
  """
  validation.check_integer('num_clients', num_clients, 1)
  alphas = validation.check_orders('alpha', alpha, low_open=False)
  own = mech.sum_divergences(alphas, num_clients, [2 * mech.input_bound])
  if own is not None:   # exact for any others (closed form / translation invariance)
    results = [SumDivergence(float(a), num_clients, float(own[a][0]), 0,
                             {0: float(own[a][0])}) for a in alphas]
    return results[0] if np.isscalar(alpha) else results
  mixes = _mixes(others, num_clients - 1)
  per = {a: {} for a in alphas}
  infinite = _infinite_mixes(mech, mixes, num_clients)
  for k in infinite:
    for a in alphas:
      per[a][k] = math.inf
  mixes = [k for k in mixes if k not in infinite]
  _mix_divergences(mech, alphas, num_clients, mixes, per)
  results = []
  for a in alphas:
    worst = max(per[a], key=lambda k: per[a][k])
    results.append(SumDivergence(float(a), num_clients, per[a][worst], worst,
                                 per[a]))
  return results[0] if np.isscalar(alpha) else results


def epsilon_infinity(mech) -> float:
  """Exact local D∞ = sup_{x,x'} max_i log P_x(i)/P_x'(i) over the whole input range.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is
      accounted). Its `extreme_log_pmfs()` must attain every level's sup and
      inf over the input range.

  Returns:
    The local D∞ (ε∞ of one client's coordinate, pure ε-DP) as a float in
    [0, inf]: inf where some level is possible at one input and impossible
    at another. The mechanism's own closed form where it has one.
  """
  own = mech.sum_divergences([math.inf], 1, [2 * mech.input_bound])
  if own is not None:
    return float(own[math.inf][0])
  rows = mech.extreme_log_pmfs()
  hi, lo = rows.max(axis=0), rows.min(axis=0)
  possible = np.isfinite(hi)
  if np.any(possible & ~np.isfinite(lo)):
    return math.inf
  # Plus twice the laws' proved error (`numerics`: a log-ratio of two
  # entries), the subtraction's rounding u·|value| rounded up.
  value = float(np.max(hi[possible] - lo[possible]))
  return value * (1 + 4 * numerics.U) + numerics.rdp_allowance(mech, 1, math.inf)


IMPOSSIBLE_MASS_MAX_INPUTS = 65


def impossible_mass(mech) -> Tuple[float, float, float]:
  """(δ₀, x, x'): the largest P_x(levels impossible under x') found over inputs.

  No (ε, δ)-DP guarantee with δ < δ₀ exists for one client's coordinate; δ₀ = 1
  means two inputs have disjoint output laws (no privacy at all). Evaluated at
  the critical inputs (where each level's probability attains its extremes, so
  its zero sets are among theirs), thinned to at most
  IMPOSSIBLE_MASS_MAX_INPUTS evenly spaced ones (range ends kept) so that a
  mechanism with 2^16 levels costs O(65 L), not O(L²) memory: the value is
  exact for the pair it names, and a lower bound on the sup when thinned.
  Where the mechanism knows every level is possible at every input
  (`Mechanism.positive_everywhere`), 0 without computing a law.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.

  Returns:
    (δ₀, x, x'): δ₀ in [0, 1] is the mass P_x puts on levels impossible
    under x'; x, x' are the pair of inputs (floats in the input range) that
    attains the largest δ₀ among those evaluated.
  """
  if mech.positive_everywhere():   # no level impossible: no law needed
    return 0.0, -mech.input_bound, mech.input_bound
  inputs = np.unique(mech.critical_inputs())
  if len(inputs) > IMPOSSIBLE_MASS_MAX_INPUTS:
    pick = np.linspace(0, len(inputs) - 1, IMPOSSIBLE_MASS_MAX_INPUTS)
    inputs = inputs[np.unique(np.round(pick).astype(int))]
  log_p = np.stack([mech.log_pmf(x) for x in inputs])   # [K, L]
  probs = np.exp(log_p)
  zero = (log_p == -np.inf).astype(np.float64)   # impossible, not underflowed
  mass = probs @ zero.T           # mass[i, j] = P_{x_i}(levels impossible under x_j)
  i, j = np.unravel_index(np.argmax(mass), mass.shape)
  return min(float(mass[i, j]), 1.0), float(inputs[i]), float(inputs[j])


def epsilon_infinity_local(mech, sensitivity: float, grid_size: int = 2001) -> float:
  """Upper bound on sup_{|x-x'| <= Δ} max_i log P_x(i)/P_x'(i) over the input range.

  For one SGD step the neighbouring inputs differ by a sensitivity Δ (e.g.
  2ηC/m in RQP-SGD), not by the whole range. Valid for mechanisms whose level
  probabilities are unimodal in x (RQM, PBM, BQ, QuantizedGaussian,
  RandomizedProjection): the critical inputs (modes) are grid points, so on each
  grid cell the max of log P_x(i) is at a cell end, and the min over the
  Δ-widened cell is at its ends. The bound tightens as `grid_size` grows.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    sensitivity: Δ > 0, the most two neighbouring inputs differ by (in the
      units of the input, `mech.input_bound`).
    grid_size: grid points over the input range, an integer >= 2.

  Returns:
    An upper bound (float in [0, inf]) on the local D∞ over input pairs at
    most Δ apart; inf where some level is possible at one input and
    impossible at one within Δ.

  Raises:
    TypeError: `sensitivity` not a number or `grid_size` not an integer.
    ValueError: `sensitivity` <= 0 or not finite, or `grid_size` < 2.
  """
  validation.check_positive('sensitivity', sensitivity)
  validation.check_integer('grid_size', grid_size, 2)
  b = mech.input_bound
  grid = np.union1d(np.linspace(-b, b, int(grid_size)), mech.critical_inputs())
  lp = np.stack([mech.log_pmf(x) for x in grid])
  lo_x = np.clip(grid[:-1] - sensitivity, -b, b)
  hi_x = np.clip(grid[1:] + sensitivity, -b, b)
  lp_lo = np.stack([mech.log_pmf(x) for x in lo_x])
  lp_hi = np.stack([mech.log_pmf(x) for x in hi_x])
  top = np.maximum(lp[:-1], lp[1:])
  bottom = np.minimum(lp_lo, lp_hi)
  with np.errstate(invalid='ignore'):
    gap = np.where(np.isfinite(top), top - bottom, 0.0)
  return float(np.max(gap))
