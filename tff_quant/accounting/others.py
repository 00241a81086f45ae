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
  divergence, and dropping the remainders is data processing.
* Blocks: the same holds for the sum of a block of g others in place of one
  other (P_y1 * ... * P_yg >= β_g·(δ_s * R_g)); the n-1 others make
  floor((n-1)/g) blocks, the rest dropped (data processing). Summing smooths
  the laws, so a block keeps more of their noise: the truncation of a law at
  the range's end costs a fixed number of levels while the block's spread
  grows like √g.

Where β·R comes from (`Blanket`):
* `common_part`: R ∝ min over inputs of P_y (no shift): the blanket.
* `aligned_part`: R ∝ min over vertex laws translated to a common centre.
  For a mechanism whose law is affine in the input between critical inputs,
  every input's law is a mixture of two vertex laws (the critical inputs'),
  so a block of inputs has a mixture of the blocks of vertex laws: each is
  >= β·(translated R), hence so is the mixture (a mixture of translations
  of R). For the others (each level's probability unimodal in the input,
  `vector.target_pairs`' envelopes) every input's law is at least its cell's
  lower envelope, and convolution keeps the order. For RQM, 16 levels,
  Δ = c, q = 0.42 (n = 40, α = 2): β = 0.055 unshifted, 0.82 aligned.
* Two vertices (`two_vertices`): when the law is affine in the input on the
  whole range (one PBM trial), the sup over the others' inputs sits at ±c:
  Σ (P*O)^α (Q*O)^(1-α) is convex in each other's law, which is affine in
  that client's input, so moving the clients one at a time to the better end
  never lowers it. The ±c mixes then bound every input, with no blanket.

Not a worst case: the others all at ±c (the papers' setting,
others='extremes'). For RQM, 16 levels, Δ = c, q = 0.42, n = 40, α = 2,
every other client at the level next to +c gives D_2 = 0.503 against 0.486
for the worst ±c mix (`attained` finds such configurations).

References (Balle et al. 2019 above): docs/references.md.
"""

import bisect
from concurrent import futures
import dataclasses
import itertools
import math
import os
from typing import Callable, List, Optional, Tuple

import numpy as np
from scipy import special

EXACT_SPLITS = 8   # single counts next to each anchor (`split_groups`)


def split_groups(first: int, last: int, centre: int,
                 exact: int = EXACT_SPLITS) -> List[tuple]:
  """Inclusive ranges [k0, k1] covering first..last: `exact` single counts next
  to each end and to `centre`, widths doubling away from them."""
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


@dataclasses.dataclass(frozen=True)
class Blanket:
  """Every block of `block` other clients draws, with probability β and
  independently of the other blocks, from R translated by an amount their
  inputs fix (module docstring); `why` names the construction."""
  log_beta: float
  log_r: np.ndarray
  block: int
  why: str

  def blocks(self, num_others: int) -> int:
    """Blocks the `num_others` others make (the rest are dropped)."""
    return num_others // self.block


def _trimmed(log_m: np.ndarray) -> Tuple[float, np.ndarray]:
  """(log β, log R) from an unnormalised log law: its finite range, normalised."""
  finite = np.flatnonzero(np.isfinite(log_m))
  if not finite.size:
    return -math.inf, np.zeros(1)
  log_m = log_m[finite[0]:finite[-1] + 1]
  log_beta = min(float(special.logsumexp(log_m)), 0.0)
  return log_beta, log_m - log_beta


def common_part(log_rows: np.ndarray) -> Blanket:
  """The unshifted blanket of `log_rows` (every input's law is at least one
  of them or a mixture of them): R ∝ their elementwise minimum."""
  log_m = np.min(log_rows, axis=0)
  if not np.any(np.isfinite(log_m)):
    return Blanket(-math.inf, np.zeros(1), 1, 'common part')
  finite = np.isfinite(log_m)
  log_beta = min(float(special.logsumexp(log_m[finite])), 0.0)
  return Blanket(log_beta, log_m - log_beta, 1, 'common part')


def _placed(log_rows: np.ndarray, shifts: np.ndarray) -> np.ndarray:
  """The rows on a common frame: row i's level y at frame position
  y + shifts[i] - min(shifts)."""
  k, length = log_rows.shape
  lo, hi = int(shifts.min()), int(shifts.max()) + length
  frame = np.full((k, hi - lo), -np.inf)
  for i in range(k):
    start = int(shifts[i]) - lo
    frame[i, start:start + length] = log_rows[i]
  return frame


def _overlap(log_rows: np.ndarray, shifts: np.ndarray) -> float:
  """log Σ_u min_i row_i(u - shift_i)."""
  low = np.min(_placed(log_rows, shifts), axis=0)
  return float(special.logsumexp(low)) if np.any(np.isfinite(low)) else -math.inf


_SHIFT_PASSES = 3     # coordinate-descent passes over the shifts
_SHIFT_REACH = 2      # levels a shift moves per trial
_DESCENT_ROWS = 300   # most rows whose shifts are refined by descent
_DESCENT_ENTRIES = 2**22   # ... and most entries of their frame (each trial
                           # rebuilds it: ~1,800 trials)


def aligned_shifts(log_rows: np.ndarray, partner: Optional[np.ndarray] = None
                   ) -> np.ndarray:
  """Integer translations with a large common mass Σ_u min_i row_i(u -
  shift_i): each row's mean at 0 (or no shift, if that overlaps more), then
  (up to _DESCENT_ROWS rows and _DESCENT_ENTRIES frame entries) coordinate
  descent. Any shifts give a valid bound; these give a large β.
  With `partner` (row partner[i] is row i reversed) mirrored rows keep
  mirrored shifts, shift_j = -(L-1) - shift_i, so the frame and R are
  symmetric about 0 (the accountant then evaluates half the pairs)."""
  length = log_rows.shape[1]
  w = np.exp(log_rows - special.logsumexp(log_rows, axis=1, keepdims=True))
  shifts = -np.round(w @ np.arange(length)).astype(np.int64)
  movable = np.arange(len(shifts))
  if partner is not None:
    shifts = np.where(partner >= movable, shifts,
                      -(length - 1) - shifts[partner])
    shifts[partner == movable] = -(length - 1) // 2
    movable = movable[partner > movable]
  # No translation at all (the plain blanket) may overlap more: start there.
  unshifted = np.full_like(shifts, -((length - 1) // 2))
  best = _overlap(log_rows, shifts)
  if _overlap(log_rows, unshifted) > best:
    shifts, best = unshifted, _overlap(log_rows, unshifted)
  if len(shifts) > _DESCENT_ROWS or len(shifts) * length > _DESCENT_ENTRIES:
    return shifts
  for _ in range(_SHIFT_PASSES):
    improved = False
    for i in movable:
      for step in range(-_SHIFT_REACH, _SHIFT_REACH + 1):
        trial = shifts.copy()
        trial[i] += step
        if partner is not None:
          trial[partner[i]] = -(length - 1) - trial[i]
        value = _overlap(log_rows, trial) if step else -math.inf
        if value > best + 1e-12:
          best, shifts, improved = value, trial, True
    if not improved:
      break
  return shifts


# Relative error allowed for the block laws' direct convolutions (nonnegative
# terms: <= (g·L)·2^-53 each, with exp's) before R is scaled below them.
_BLOCK_MARGIN = 1e-10
# Most block laws (multisets of vertex rows) an aligned block part enumerates,
# and most multiply-adds their convolutions may take.
MAX_BLOCK_LAWS = 4000
MAX_BLOCK_OPERATIONS = 2e8


def block_cost(num_rows: int, length: int, block: int) -> Tuple[int, float]:
  """(block laws, multiply-adds) of `aligned_part`."""
  laws = math.comb(num_rows + block - 1, block)
  return laws, laws * sum(k * (length - 1) + 1 for k in range(1, block)) * length


def _block_laws(log_rows: np.ndarray, block: int
                ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
  """([multisets, g(L-1)+1] log-laws of the sum of every multiset of `block`
  rows, partner): partner[i] is the multiset whose law is law i reversed
  (the rows reversed, when the rows mirror: row K-1-i is row i reversed),
  else None. Direct convolutions of nonnegative terms, each row scaled to
  its maximum (relative error <= g·L·2^-53; `_BLOCK_MARGIN` covers it;
  subnormal ranges dropped)."""
  k = log_rows.shape[0]
  combos = list(itertools.combinations_with_replacement(range(k), block))
  if block == 1:
    laws = log_rows
  else:
    top = np.max(log_rows, axis=1)
    # Entries below e^-690 of their row's top are dropped (0: only lowers R),
    # and so are sums below 1e-290: subnormal floats carry few significant
    # bits, and a rounded-up tail could put β·R above the law.
    scaled = log_rows - top[:, None]
    with np.errstate(under='ignore'):
      rows = np.where(scaled > -690.0, np.exp(np.maximum(scaled, -690.0)), 0.0)
    laws = []
    for combo in combos:
      law = rows[combo[0]]
      for i in combo[1:]:
        with np.errstate(under='ignore'):
          law = np.convolve(law, rows[i])
      law = np.where(law > 1e-290, law, 0.0)
      with np.errstate(divide='ignore'):
        laws.append(np.log(law) + float(np.sum(top[list(combo)])))
    laws = np.stack(laws)
  flipped = log_rows[::-1, ::-1]
  finite = np.isfinite(log_rows)
  if not (np.array_equal(finite, np.isfinite(flipped)) and np.allclose(
      log_rows[finite], flipped[finite], rtol=0, atol=1e-12)):
    return laws, None
  where = {c: i for i, c in enumerate(combos)}
  partner = np.array([where[tuple(sorted(k - 1 - i for i in c))]
                      for c in combos])
  return laws, partner


def aligned_part(log_rows: np.ndarray, block: int = 1,
                 by_rows: bool = False) -> Optional[Blanket]:
  """The aligned blanket of blocks of `block` others: R ∝ the elementwise
  minimum, over every multiset of `block` rows, of the law of their sum
  translated to a common centre: each block law's own (`aligned_shifts`),
  or with `by_rows` the sum of its rows' (which keeps more of the laws'
  spread where the blocks' own alignment trades it for mass). None when the
  multisets are over MAX_BLOCK_LAWS or MAX_BLOCK_OPERATIONS."""
  laws, ops = block_cost(*log_rows.shape, block)
  if laws > MAX_BLOCK_LAWS or ops > MAX_BLOCK_OPERATIONS:
    return None
  log_laws, partner = _block_laws(log_rows, block)
  if partner is not None and np.any(partner == np.arange(len(partner))) and (
      (log_laws.shape[1] - 1) % 2):
    partner = None   # a self-mirrored law cannot be centred on an integer
  if by_rows:
    row_partner = None if partner is None else np.arange(len(log_rows))[::-1]
    row_shifts = aligned_shifts(log_rows, row_partner)
    combos = itertools.combinations_with_replacement(range(len(log_rows)),
                                                     block)
    shifts = np.array([int(np.sum(row_shifts[list(c)])) for c in combos])
  else:
    shifts = aligned_shifts(log_laws, partner)
  low = np.min(_placed(log_laws, shifts), axis=0)
  if block > 1:
    low = low + math.log1p(-_BLOCK_MARGIN)
  log_beta, log_r = _trimmed(low)
  what = ('aligned common part' + (f' of blocks of {block}' if block > 1
                                   else '') + (' (rows\' centres)' if by_rows
                                               else ''))
  return Blanket(log_beta, log_r, block, what)


BLOCKS = (1, 2, 3)   # block sizes `blankets` offers (within the cost limits)


def blankets(log_rows: np.ndarray, num_others: int) -> List[Blanket]:
  """Every construction of this module for `log_rows` (the vertex laws, or
  the cells' lower envelopes): the unshifted blanket and the aligned ones
  (both centrings) for blocks of BLOCKS others that the others fill at
  least once."""
  out = [common_part(log_rows)]
  for block in BLOCKS:
    if block > max(num_others, 1):
      break
    for by_rows in ((False, True) if block > 1 else (False,)):
      part = aligned_part(log_rows, block, by_rows)
      if part is not None and math.isfinite(part.log_beta):
        out.append(part)
  return out


def spread(blanket: Blanket, num_others: int) -> float:
  """β·Var(R) per block times the blocks: the variance of the others' noise
  the construction keeps (its merit where the sum is near Gaussian)."""
  r = np.exp(blanket.log_r)
  k = np.arange(r.size)
  mean = float(r @ k)
  return (math.exp(blanket.log_beta) * float(r @ (k - mean)**2) *
          blanket.blocks(num_others))


def two_vertices(critical: np.ndarray, c: float) -> bool:
  """True when the critical inputs are just ±c (for a law affine on the
  whole range: one PBM trial), so the ±c mixes are the sup over any inputs."""
  crit = np.unique(critical)
  return crit.size == 2 and np.allclose(crit, [-c, c], rtol=0, atol=1e-12 * c)


def log_binomial(trials: int, log_p: float) -> np.ndarray:
  """log P(Binomial(trials, p) = m), m = 0..trials, from log p (p = 0, 1 exact)."""
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
  """Threads for `tasks` independent evaluations: the cores this process may use."""
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


def mixture_bound(evaluate: Callable[[int], np.ndarray], log_beta: float,
                  num_blocks: int, distance: np.ndarray, orders: np.ndarray,
                  log_cap: np.ndarray,
                  exact: int = EXACT_SPLITS) -> np.ndarray:
  """[orders, pairs] log of Σ_m P(M = m)·E_m >= Σ (P*O)^α (Q*O)^(1-α), M ~
  Binomial(num_blocks, β) (module docstring).

  `evaluate(m)` gives [orders, pairs] log E_m, the target pairs' power sums
  with m copies of R added; pairs at `distance`. E_m does not increase with
  m (data processing), so a group of counts m0..m1 is bounded by its weight
  times E_m for the largest evaluated m <= m0; E_0 (the target alone) is
  capped by `log_cap` ((α-1)·the pair's D∞). The evaluated count next at or
  above m1 (else E = 1) bounds the group's values below, so weight × the
  difference (its slack) bounds what the group adds over the average of
  every E_m. Groups start as `split_groups` around the mean count with
  min(exact, START_SPLITS) singles (every count alone when exact exceeds
  `num_blocks`); for each pair that sets the sup (a record in distance
  order) at some order, the groups with the largest slack are split (or
  their start evaluated) until the rest sum to at most REFINE of the pair's
  excess over 1 (RQM 256 levels, 405 blocks: 27 counts -> ~10).
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
  ends = sorted({centre, num_blocks} - {0})
  with futures.ThreadPoolExecutor(workers(len(ends))) as pool:
    starts.update(zip(ends, pool.map(evaluate, ends)))
  order = np.argsort(distance, kind='stable')
  while True:
    weight = np.array([special.logsumexp(log_b[a:b + 1]) for a, b in groups])
    evaluated = sorted(starts)
    # A group takes the nearest evaluated count below its start; the nearest
    # at or above its end bounds it below (none: E >= 1, log 0).
    value = np.stack([starts[evaluated[bisect.bisect_right(evaluated, a) - 1]]
                      for a, _ in groups])
    zero = np.zeros_like(starts[0])
    lower = np.stack([starts[evaluated[bisect.bisect_left(evaluated, b)]]
                      if b <= evaluated[-1] else zero for _, b in groups])
    live = np.isfinite(weight)[:, None, None]
    with np.errstate(invalid='ignore'):
      parts = np.where(live, weight[:, None, None] + value, -np.inf)
    total = special.logsumexp(parts, axis=0)
    # Records: pairs whose bound is the sup over pairs no farther apart.
    per_pair = np.maximum(total / (orders[:, None] - 1), 0.0)[:, order]
    relevant = np.zeros(total.shape, bool)
    relevant[:, order] = per_pair >= np.maximum.accumulate(per_pair, axis=1)
    # A group's slack as a share of a pair's excess over 1 (E >= 1); an
    # infinite total is refined wherever a group is infinite.
    with np.errstate(invalid='ignore'):   # inf - inf: set just below
      share = (weight[:, None, None] + _log_gap(value, lower) -
               log_expm1(total)[None])
    share = np.where(np.isnan(share), -np.inf, share)   # E = 1 up to rounding
    share = np.where(np.isinf(total)[None], np.where(parts == np.inf, np.inf,
                                                     -np.inf), share)
    share = np.where(live & relevant[None] & (total > 0)[None], share, -np.inf)
    with np.errstate(over='ignore'):
      flags = _flagged(np.exp(share), REFINE)
    # The largest first, a batch of one per worker (each evaluation moves
    # the slack of its neighbours).
    # A single count already evaluated is exact: it can be neither split nor
    # evaluated (an infinite E there keeps an infinite slack for good).
    top = np.max(share, axis=(1, 2))
    flagged = sorted((g for g, f in zip(groups, flags)
                      if f and not (g[0] in starts and g[0] == g[1])),
                     key=lambda g: -top[groups.index(g)])[:workers(len(groups))]
    todo = {a for a, _ in flagged if a not in starts}
    splits = [g for g in flagged if g[0] in starts and g[1] > g[0]]
    if not todo and not splits:
      return total
    for g in splits:   # each half's start is evaluated with the batch
      mid = (g[0] + g[1]) // 2
      groups[groups.index(g):groups.index(g) + 1] = [(g[0], mid), (mid + 1, g[1])]
      todo.add(mid + 1)
    counts = sorted(todo - set(starts))
    with futures.ThreadPoolExecutor(workers(len(counts))) as pool:
      starts.update(zip(counts, pool.map(evaluate, counts)))
