"""Exact Rényi divergences of what the server sees: the secure sum of n clients' levels.

The laws of the sums come from `tff_quant.common.laws` (tilted FFTs, full
relative precision in the tails); this module searches the others' inputs at
±c and the mechanism's extremes.
"""

import dataclasses
import math
from typing import Dict, List, Sequence, Tuple, Union

import numpy as np

from tff_quant.common import laws
from tff_quant.common import validation
# The primitives, under the names the accountant has always exported.
from tff_quant.common.laws import (UnresolvedSumError, renyi_divergence,  # noqa: F401  pylint: disable=unused-import
                                   sum_length, sum_log_pmf, sum_log_pmf_above)  # noqa: F401

@dataclasses.dataclass
class SumDivergence:
  """D_α of the secure sum, maximised over the other clients' inputs.

  Args:
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
                            log_floor: float = -np.inf):
  """(log-pmf, log upper bound) of the secure sum: `num_plus` clients at +clip, `num_minus` at -clip.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    num_plus, num_minus: clients with input +clip and -clip.
    log_floor: see `sum_log_pmf_above`.
  """
  at_plus, at_minus = end_log_pmfs(mech)
  return sum_log_pmf_above([(at_plus, num_plus), (at_minus, num_minus)], log_floor)


def end_log_pmfs(mech) -> Tuple[np.ndarray, np.ndarray]:
  """(log_pmf(+c), log_pmf(-c)), computed once per mechanism object (an
  accounting call asks for them many times; RQM at 2^16 levels takes 0.1 s)."""
  cached = mech.__dict__.get('_end_log_pmfs')
  if cached is None:
    c = mech.input_bound
    cached = (mech.log_pmf(c), mech.log_pmf(-c))
    mech.__dict__['_end_log_pmfs'] = cached
  return cached


def sum_pair_log_pmfs(mech, num_clients: int, num_plus: int):
  """Log-pmfs of the secure sum when one client is at +clip vs -clip.

  The other n-1 clients: `num_plus` at +clip, the rest at -clip.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    num_clients: n, clients in the secure sum (the target included).
    num_plus: how many of the n-1 others sit at +clip.
  """
  others_minus = num_clients - 1 - num_plus
  return (sum_log_pmf_at_extremes(mech, num_plus + 1, others_minus)[0],
          sum_log_pmf_at_extremes(mech, num_plus, others_minus + 1)[0])


def renyi_divergence_of_sum(mech, alpha: Union[float, Sequence[float]],
                            num_clients: int, others='extremes'):
  """Exact D_α between the secure sums when one client moves from +clip to -clip.

  Args:
    mech: a tff_quant mechanism.
    alpha: an order in [1, inf] (1 = KL, inf = D∞), or a sequence of orders.
    num_clients: n >= 1 clients in the sum (n = 1 is the local guarantee).
    others: 'extremes' (every mix of the n-1 others at +-clip; the maximum is
      reported with the mix that attains it), 'balanced', or a list of counts.

  Returns:
    SumDivergence (or a list of them, one per order when `alpha` is a sequence).
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
  # Where the sum at +clip can take values the sum at -clip cannot, D_α = inf
  # for every α >= 1; decided exactly on the supports (boolean convolutions),
  # before any tail bound is needed (BQ at its range ends, for example).
  at_plus, at_minus = end_log_pmfs(mech)
  sup_hi, sup_lo = np.isfinite(at_plus), np.isfinite(at_minus)
  if not np.array_equal(sup_hi, sup_lo):
    length = num_clients * (sup_hi.size - 1) + 1
    for k in list(mixes):
      sp = laws.support([(sup_hi, k + 1), (sup_lo, num_clients - 1 - k)], length)
      sq = laws.support([(sup_hi, k), (sup_lo, num_clients - k)], length)
      if (sp & ~sq).any():
        for a in alphas:
          per[a][k] = math.inf
    mixes = [k for k in mixes if k not in per[alphas[0]]]
  # Tails that cannot matter for the largest finite order are only bounded:
  # terms are <= P e^((α-1) D∞_local), and the sum's D∞ <= the local D∞ at +-clip.
  # Each sum serves as P for one mix and as Q for the next; where only Q is
  # below the floor, P <= Q e^D∞, so the floor sits one D∞ lower than P needs:
  # every bounded term is then <= e^-80.
  d_inf_local = renyi_divergence(at_plus, at_minus, math.inf)
  finite = [a for a in alphas if not math.isinf(a)]
  if len(finite) == len(alphas) and math.isfinite(d_inf_local):
    log_floor = -max(finite) * d_inf_local - 80.0
  else:
    log_floor = -np.inf
  # The pair for mix k is (S_{k+1}, S_k), S_j = j clients at +clip, n-j at -clip:
  # n+1 sums serve all n mixes.
  sums = {}
  for j in sorted(set(mixes) | {k + 1 for k in mixes}):
    sums[j] = sum_log_pmf_at_extremes(mech, j, num_clients - j, log_floor)
  for k in mixes:
    (lp, lp_up), (lq, _) = sums[k + 1], sums[k]
    for a in alphas:
      per[a][k] = renyi_divergence(lp, lq, a, lp_up, d_inf_local)
  results = []
  for a in alphas:
    worst = max(per[a], key=lambda k: per[a][k])
    results.append(SumDivergence(float(a), num_clients, per[a][worst], worst,
                                 per[a]))
  return results[0] if np.isscalar(alpha) else results


def epsilon_infinity(mech) -> float:
  """Exact local D∞ = sup_{x,x'} max_i log P_x(i)/P_x'(i) over the whole input range.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted). Its `extreme_log_pmfs()`
      must attain every level's sup and inf over the input range.
  """
  own = mech.sum_divergences([math.inf], 1, [2 * mech.input_bound])
  if own is not None:
    return float(own[math.inf][0])
  rows = mech.extreme_log_pmfs()
  hi, lo = rows.max(axis=0), rows.min(axis=0)
  possible = np.isfinite(hi)
  if np.any(possible & ~np.isfinite(lo)):
    return math.inf
  return float(np.max(hi[possible] - lo[possible]))


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

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
  """
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
    sensitivity: Δ > 0, the most two neighbouring inputs differ by.
    grid_size: grid points over the input range, >= 2.
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
