"""What of the other clients' noise survives any inputs they may have.

The server sees S = X + Σ_i Y_i: the target's output X and the n-1 others'
outputs Y_i, independent given the inputs. A bound "for any inputs of the
others" needs a part of their noise that no input removes. Two facts give it:

* Mixtures (Balle et al., "The privacy blanket of the shuffle model", 2019,
  for the unshifted case): if every input's law satisfies P_y >= β·(δ_s(y) * R)
  for one law R and a shift s(y) fixed by the input, then each other client
  draws, with probability β independently of the rest, from R translated by
  s(y), else from a remainder. Conditioned on who draws from R (M of them,
  M ~ Binomial(n-1, β)), on the shifts and on the remainders' draws, the
  others add a constant plus R^{*M}. (p, q) ↦ Σ p^α q^(1-α) is jointly
  convex and both laws are linear in the others' law, so
  Σ (P*O)^α (Q*O)^(1-α) <= Σ_m P(M = m)·E_m, E_m that of the target pair with
  m copies of R added: a translation of the server's view changes no
  divergence, and dropping the remainders is data processing. The shift
  may also be drawn at random, from a law W_y the input fixes
  (P_y >= β·(W_y * R)), independently of R: conditioned on it too, the
  others still add a constant plus R^{*M} (`blankets.shifted_part`).
* Blocks: the same holds for the sum of a block of g others in place of one
  other (P_y1 * ... * P_yg >= β_g·(δ_s * R_g)); the n-1 others make
  floor((n-1)/g) blocks, the rest dropped (data processing). Summing smooths
  the laws, so a block keeps more of their noise: the truncation of a law at
  the range's end costs a fixed number of levels while the block's spread
  grows like √g.

Where β·R comes from, and the case that needs none (two vertices): the
`blankets` module. This one bounds the mixture over the count M
(`mixture_bound`, its count groups refined by their slack).

Not a worst case: the others all at ±c (the papers' setting,
others='extremes'). For RQM, 16 levels, Δ = c, q = 0.42, n = 40, α = 2,
every other client at the level next to +c gives D_2 = 0.503 against 0.486
for the worst ±c mix (`attained` finds such configurations).

References (Balle et al. 2019 above): docs/references.md.
"""

import bisect
from concurrent import futures
import math
import os
from typing import Callable, List, Tuple

import numpy as np
from scipy import special

EXACT_SPLITS = 8   # single counts next to each anchor (`split_groups`)


def split_groups(first: int, last: int, centre: int,
                 exact: int = EXACT_SPLITS) -> List[tuple]:
  """Inclusive ranges [k0, k1] covering first..last: `exact` single counts next
  to each end and to `centre`, widths doubling away from them.

  Args:
    first: the smallest count (integer).
    last: the largest count, >= first.
    centre: the count to split around (clamped to [first, last]).
    exact: single counts next to each anchor, >= 0.

  Returns:
    A sorted list of disjoint (k0, k1) integer tuples, k0 <= k1, whose union
    is first..last.
  """
  centre = min(max(centre, first), last)
  segments = [(first, centre - 1), (centre, last)] if centre > first else [
      (first, last)]
  groups = []
  for lo, hi in segments:
    left, right = [], []
    while lo <= hi:
      width = 1 if len(left) < exact else 2**(len(left) - exact + 1)
      left.append((lo, min(hi, lo + width - 1)))
      lo = left[-1][1] + 1
      if lo > hi:
        break
      width = 1 if len(right) < exact else 2**(len(right) - exact + 1)
      right.append((max(lo, hi - width + 1), hi))
      hi = right[-1][0] - 1
    groups += left + right[::-1]
  return sorted(groups)


def log_binomial(trials: int, log_p: float) -> np.ndarray:
  """log P(Binomial(trials, p) = m), m = 0..trials, from log p (p = 0, 1 exact).

  Args:
    trials: an integer >= 0.
    log_p: log p in [-inf, 0].

  Returns:
    [trials + 1] float64 log-probabilities (-inf where a count is impossible).
  """
  m = np.arange(trials + 1)
  log_q = math.log(-math.expm1(log_p)) if log_p < 0 else -math.inf
  with np.errstate(invalid='ignore'):
    terms = special.xlogy(m, math.exp(log_p)) + special.xlogy(trials - m,
                                                            math.exp(log_q))
  choose = (special.gammaln(trials + 1) - special.gammaln(m + 1) -
            special.gammaln(trials - m + 1))
  return np.where(np.isnan(terms), -np.inf, choose + terms)


def log_expm1(x) -> np.ndarray:
  """log(e^x - 1), elementwise, without overflow.

  Args:
    x: a number or an array of them.

  Returns:
    A float64 array of x's shape (0-d for a number): log(e^x - 1), inf at
    x = inf, -inf at 0, NaN below 0.
  """
  x = np.asarray(x, np.float64)
  with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
    return np.where(x > 30, x + np.log1p(-np.exp(-x)),
                    np.log(np.expm1(np.minimum(x, 30))))


# Evaluations of the count groups run in threads (numpy's loops release the
# GIL): at most this many at once, each holding ~0.5 GB at 256 levels, n = 100.
MAX_WORKERS = 4


def workers(tasks: int) -> int:
  """Threads for `tasks` independent evaluations: the cores this process may use.

  Args:
    tasks: the number of evaluations (0 allowed).

  Returns:
    min(tasks, MAX_WORKERS, usable cores), at least 1.
  """
  return max(1, min(tasks, MAX_WORKERS, len(os.sched_getaffinity(0))))


REFINE = 1e-2   # the bound may exceed the average over every count by this
                # share of a record pair's excess (`mixture_bound`)
START_SPLITS = 2   # single counts next to each anchor the groups start from


def _log_gap(upper: np.ndarray, lower: np.ndarray) -> np.ndarray:
  """log(e^upper - e^lower), -inf where upper <= lower (inf where upper is)."""
  with np.errstate(invalid='ignore', divide='ignore'):
    gap = upper + np.log(-np.expm1(np.minimum(lower - upper, 0.0)))
  gap = np.where(upper > lower, gap, -np.inf)
  return np.where(np.isposinf(upper), np.inf, gap)


def _flagged(slack: np.ndarray, budget: float) -> np.ndarray:
  """[groups] True for the groups to refine: per column of `slack` ([groups,
  ...] shares, linear), the largest ones until the others sum to <= budget."""
  ranked = np.sort(slack, axis=0)
  total = np.cumsum(ranked, axis=0)   # over the smallest first
  # a group is kept when it and every smaller one sum to <= budget
  keep_upto = np.where(total <= budget, ranked, -np.inf).max(axis=0,
                                                            initial=-np.inf)
  return np.any(slack > keep_upto[None], axis=tuple(range(1, slack.ndim)))


def _group_values(groups: List[tuple], starts: dict, log_b: np.ndarray):
  """(weight, value, lower, live, parts, total) of `mixture_bound`'s groups.

  weight [groups]: log P(M in the group); value, lower [groups, orders,
  pairs]: log E at the nearest evaluated count at or below the group's
  start (its bound) and at or above its end (none: E >= 1, log 0; a bound
  below); live: the groups of positive weight; parts: weight + value;
  total [orders, pairs]: the log of the bound, Σ_groups e^parts.
  """
  weight = np.array([special.logsumexp(log_b[a:b + 1]) for a, b in groups])
  evaluated = sorted(starts)
  value = np.stack([starts[evaluated[bisect.bisect_right(evaluated, a) - 1]]
                    for a, _ in groups])
  zero = np.zeros_like(starts[0])
  lower = np.stack([starts[evaluated[bisect.bisect_left(evaluated, b)]]
                    if b <= evaluated[-1] else zero for _, b in groups])
  live = np.isfinite(weight)[:, None, None]
  with np.errstate(invalid='ignore'):
    parts = np.where(live, weight[:, None, None] + value, -np.inf)
  total = special.logsumexp(parts, axis=0)
  return weight, value, lower, live, parts, total


def _slack_shares(weight, value, lower, live, parts, total, orders,
                  order) -> np.ndarray:
  """[groups, orders, pairs] log of each group's slack as a share of a
  record pair's excess over 1 (E >= 1); -inf off the records.

  Records are the pairs whose bound is the sup over pairs no farther apart
  (`order` sorts the pairs by distance); an infinite total is refined
  wherever a group is infinite.
  """
  per_pair = np.maximum(total / (orders[:, None] - 1), 0.0)[:, order]
  relevant = np.zeros(total.shape, bool)
  relevant[:, order] = per_pair >= np.maximum.accumulate(per_pair, axis=1)
  with np.errstate(invalid='ignore'):   # inf - inf: set just below
    share = (weight[:, None, None] + _log_gap(value, lower) -
             log_expm1(total)[None])
  share = np.where(np.isnan(share), -np.inf, share)   # E = 1 up to rounding
  share = np.where(np.isinf(total)[None], np.where(parts == np.inf, np.inf,
                                                   -np.inf), share)
  return np.where(live & relevant[None] & (total > 0)[None], share, -np.inf)


def _next_batch(groups: List[tuple], share: np.ndarray, starts: dict
                ) -> Tuple[set, List[tuple]]:
  """(counts to evaluate, groups to split) for the next round of refinement.

  The flagged groups (`_flagged` at REFINE), the largest slack first, a
  batch of one per worker (each evaluation moves the slack of its
  neighbours). A single count already evaluated is exact: it can be neither
  split nor evaluated (an infinite E there keeps an infinite slack for
  good).
  """
  with np.errstate(over='ignore'):
    flags = _flagged(np.exp(share), REFINE)
  top = np.max(share, axis=(1, 2))
  flagged = sorted((g for g, f in zip(groups, flags)
                    if f and not (g[0] in starts and g[0] == g[1])),
                   key=lambda g: -top[groups.index(g)])[:workers(len(groups))]
  todo = {a for a, _ in flagged if a not in starts}
  splits = [g for g in flagged if g[0] in starts and g[1] > g[0]]
  return todo, splits


def _evaluate_all(evaluate: Callable[[int], np.ndarray], counts, starts: dict):
  """Adds evaluate(m) for every m of `counts` to `starts`, in threads."""
  with futures.ThreadPoolExecutor(workers(len(counts))) as pool:
    starts.update(zip(counts, pool.map(evaluate, counts)))


def mixture_bound(evaluate: Callable[[int], np.ndarray], log_beta: float,
                  num_blocks: int, distance: np.ndarray, orders: np.ndarray,
                  log_cap: np.ndarray,
                  exact: int = EXACT_SPLITS) -> np.ndarray:
  """[orders, pairs] log of Σ_m P(M = m)·E_m >= Σ (P*O)^α (Q*O)^(1-α), M ~
  Binomial(num_blocks, β) (module docstring; the blanket decomposition of
  Balle et al. 2019, docs/references.md).

  E_m does not increase with m (data processing), so a group of counts
  m0..m1 is bounded by its weight times E_m for the largest evaluated m <=
  m0; E_0 (the target alone) is capped by `log_cap`. The evaluated count
  next at or above m1 (else E = 1) bounds the group's values below, so
  weight × the difference (its slack) bounds what the group adds over the
  average of every E_m. Groups start as `split_groups` around the mean
  count with min(exact, START_SPLITS) singles (every count alone when exact
  exceeds `num_blocks`); for each pair that sets the sup (a record in
  distance order) at some order, the groups with the largest slack are
  split (or their start evaluated) until the rest sum to at most REFINE of
  the pair's excess over 1 (evaluations in threads, `workers`).

  Args:
    evaluate: m -> [orders, pairs] float64 log E_m, the target pairs' power
      sums with m copies of R added (m in [0, num_blocks]).
    log_beta: log β <= 0, the blanket's weight (`Blanket.log_beta`).
    num_blocks: blocks of the others, >= 0 (`Blanket.blocks`).
    distance: [pairs] the pairs' distances (records taken in this order).
    orders: [orders] Rényi orders > 1.
    log_cap: [orders, pairs] (or broadcastable) cap on log E_0: (α-1)·D∞.
    exact: single counts next to each anchor when every count fits
      (`split_groups`).

  Returns:
    [orders, pairs] float64 array: the log of an upper bound on each pair's
    Σ (P*O)^α (Q*O)^(1-α) over any inputs of the others (+inf possible).
  """
  log_b = log_binomial(num_blocks, log_beta)
  centre = int(round(num_blocks * math.exp(log_beta)))
  groups = split_groups(0, num_blocks, centre,
                        exact if exact > num_blocks else min(exact,
                                                             START_SPLITS))
  starts = {0: np.minimum(evaluate(0), log_cap)}   # the target alone: cheap
  if num_blocks == 0:
    return starts[0]
  # The centre and the last count first: the latter bounds every group
  # below (the least E), so the upper tail needs no further count.
  _evaluate_all(evaluate, sorted({centre, num_blocks} - {0}), starts)
  order = np.argsort(distance, kind='stable')
  while True:
    weight, value, lower, live, parts, total = _group_values(groups, starts,
                                                             log_b)
    share = _slack_shares(weight, value, lower, live, parts, total, orders,
                          order)
    todo, splits = _next_batch(groups, share, starts)
    if not todo and not splits:
      return total
    for g in splits:   # each half's start is evaluated with the batch
      mid = (g[0] + g[1]) // 2
      groups[groups.index(g):groups.index(g) + 1] = [(g[0], mid), (mid + 1, g[1])]
      todo.add(mid + 1)
    _evaluate_all(evaluate, sorted(todo - set(starts)), starts)
