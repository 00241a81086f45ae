"""The bound for any inputs of the others (others='any', the default): proved.

Each other client (or block of g others) holds, with probability β, an
independent draw from a law R translated by an amount its inputs fix
(`accounting.blankets`: the blanket, and the aligned and shifted blankets
of blocks of 1-3 others), so Σ (P*O)^α (Q*O)^(1-α) <= Σ_m P(M = m)·E_m,
M ~ Binomial(blocks, β), E_m the target pair's with m copies of R added
(`others_mixture`, `accounting.others`; joint convexity, translation
invariance, data processing). E_m does not increase in m, so counts are
bounded in groups by their first, refined where a group matters; a group
never evaluated is bounded by (α-1)·D∞ of the pair. Measured against what
named inputs attain (`accounting.attained`; n = 10 and 40, α = 2 and 8,
t = 2c): RQM 16 levels, Δ = c, q = 0.42, 1.10-1.16x (the blanket alone:
1.4-7.4x); QMGeo 8 levels, p = 0.5, 1.10-2.46x; PBM (per trial,
`blankets.two_vertices`: the ±c mixes bound any others) 1.00-1.01x.

For a mechanism that mirrors its levels R is symmetric, so a target pair and
its mirror image have the same sums: one of each is evaluated
(`mirror_classes`). Up to `Limits.matrix_levels` levels, R^{*m}, the target
rows' sums with it and the pairs' power sums are matrix products
(`matrix_sums`), each with a proved bound on its rounding that the power
sums add; above, R^{*m} is the tilted FFT sum and its proved per-entry error
(`laws.sum_log_pmf_with_error`) is carried the same way
(`convolution.with_sum(..., with_error=True)`): either way what is read is at
or above the exact value of the laws. Only `price`, which picks a
construction and states no figure, reads the FFT sum without its error.
"""

import dataclasses
import math
from typing import Callable, List, Optional, Tuple

import numpy as np
from scipy import special

from tff_quant.accounting import blankets as blankets_lib
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import numerics
from tff_quant.accounting import others as others_lib
from tff_quant.accounting.secure_sum import convolution
from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.accounting.secure_sum import targets as targets_lib

TargetPairs = targets_lib.TargetPairs

SPREAD_MARGIN = 1.5   # constructions keeping 1/this of the best spread are priced
TWIN_SPREAD = 0.02    # same-block constructions this close in spread: one priced
PRICE_STDS = 1.5      # the pricing count: this many stds below the mean


def mirror_classes(targets: TargetPairs, log_r: np.ndarray
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """One pair of each mirror-image couple.

  With a symmetric target set (`TargetPairs.symmetric`) and an others' law
  symmetric about its centre (R^{*m}: the common part of a mirrored
  mechanism is; `log_r`, checked), the secure sums of a pair's targets are
  the reversed sums of its mirror image's, so Σ P^α Q^(1-α), D∞ and the
  distance agree: half the pairs are evaluated. Without symmetry (or a pair
  whose image is missing) every pair is its own class.

  Args:
    targets: the `TargetPairs`.
    log_r: the others' law R (log).

  Returns:
    (kept, expand): the kept pairs' indices, and for every pair the position
    in `kept` of its couple's.
  """
  m = len(targets.pairs)
  every = (np.arange(m), np.arange(m))
  if not (targets.symmetric and targets_lib.reversal_invariant(log_r)):
    return every
  rows = targets.upper_weights.shape[0]
  code = targets.pairs[:, 0] * rows + targets.pairs[:, 1]
  image = (rows - 1 - targets.pairs[:, 0]) * rows + (rows - 1 - targets.pairs[:, 1])
  order = np.argsort(code)
  at = np.searchsorted(code[order], image)
  if np.any(at >= m) or np.any(code[order][np.minimum(at, m - 1)] != image):
    return every
  canonical = np.minimum(code, image)
  _, first, expand = np.unique(canonical, return_index=True,
                               return_inverse=True)
  # The kept pair of a class is the one whose own code is the canonical code.
  kept = order[np.searchsorted(code[order], canonical[first])]
  return kept, expand


def common_part(mech) -> Tuple[float, np.ndarray]:
  """The unshifted blanket over every input in [-c, c].

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.

  Returns:
    (log β, log R): `blankets.common_part` of the critical inputs' laws, where
    each level's probability attains its minimum over the range.
  """
  c = mech.input_bound
  xs = np.union1d(targets_lib.mirrored_critical_inputs(mech), [-c, c])
  part = blankets_lib.common_part(np.stack([mech.log_pmf(x) for x in xs]))
  return part.log_beta, part.log_r


def vertex_rows(targets: TargetPairs) -> np.ndarray:
  """Rows every input's law is a mixture of, or is at least one of.

  Args:
    targets: the `TargetPairs`.

  Returns:
    Vertex targets: the critical inputs' laws; envelopes: the cells' lower
    envelopes (for `blankets.aligned_part`).
  """
  if targets.method == 'vertices':
    return targets.basis
  return targets.basis[targets.basis.shape[0] // 2:]


def blankets(mech, targets: TargetPairs, num_others: int
             ) -> List[blankets_lib.Blanket]:
  """The mixture bound's constructions, built once per mechanism and target construction.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (caches them in its __dict__).
    targets: its `TargetPairs`.
    num_others: n - 1.

  Returns:
    The unshifted blanket (`common_part`) and the aligned ones of the
    targets' vertex rows (`blankets.blankets`) with blocks of at most
    max(num_others, 1) others.
  """
  key = ('_blankets', targets.method, targets.basis.shape)
  cache = mech.__dict__.setdefault('_blankets', {})
  if key not in cache:
    log_beta, log_r = common_part(mech)
    aligned = blankets_lib.blankets(vertex_rows(targets),
                                    max(blankets_lib.BLOCKS))
    # Certified on the computed laws; the exact ones are at least e^(-gη)
    # of them (`numerics.blanket_log_beta`).
    cache[key] = [blankets_lib.Blanket(
        numerics.blanket_log_beta(log_beta, 1, mech), log_r, 1, 'common part')
                  ] + [dataclasses.replace(b, log_beta=numerics.blanket_log_beta(
                      b.log_beta, b.block, mech)) for b in aligned[1:]]
  return [b for b in cache[key] if b.block <= max(num_others, 1)]


def _evaluator(targets: TargetPairs, log_r: np.ndarray, orders: np.ndarray,
               tail: float, limits: limits_lib.Limits):
  """m -> [orders, pairs] log E_m: the pairs' power sums with m copies of R
  added, their error included: by `matrix_sums` up to `limits.matrix_levels`
  levels (R^{*m} cut `tail` below its top, `matrix_sums.Powers`), above by
  the tilted FFT sum with its proved error (`convolution.with_sum(...,
  with_error=True)`, cut there too). The mass the cuts drop is added back
  (`convolution.add_lost`)."""
  big = targets.basis.shape[1] > limits.matrix_levels
  log_e0 = convolution.pair_log_sums(targets, targets.basis, orders, 0.0)
  if big:
    def evaluate(m):
      conv, err, lost = convolution.with_sum(targets.basis, [(log_r, m)], tail,
                                             limits, with_error=True)
      return convolution.add_lost(
          convolution.pair_log_sums(targets, conv, orders, err), lost, log_e0)
    return evaluate
  powers = matrix_sums.Powers(log_r, tail)

  def evaluate(m):
    if m == 0:
      return log_e0
    conv, err = matrix_sums.convolve(targets.basis, 0.0, *powers(m))
    return convolution.add_lost(
        convolution.pair_log_sums(targets, conv, orders, err),
        powers.log_dropped(m), log_e0)
  return evaluate


def _skipped(i: int, candidates, spreads) -> bool:
  """Whether construction i keeps under 1/SPREAD_MARGIN of the best spread,
  or is the twin (other centring, same block, within TWIN_SPREAD) of a
  better one."""
  blanket, spread = candidates[i], spreads[i]
  return spread * SPREAD_MARGIN < max(spreads) or any(
      b.block == blanket.block and abs(s - spread) <= TWIN_SPREAD * spread
      and (s > spread or (s == spread and j < i))
      for j, (b, s) in enumerate(zip(candidates, spreads)) if j != i)


def _runs(candidates, num_others: int, targets: TargetPairs,
          orders: np.ndarray, tail: float, limits: limits_lib.Limits):
  """(blanket, kept, expand, half, evaluate) of each construction not
  skipped: its pairs up to mirror images (`mirror_classes`) and its
  memoised E_m."""
  runs = []
  spreads = [blankets_lib.spread(b, num_others) for b in candidates]
  for i, blanket in enumerate(candidates):
    if _skipped(i, candidates, spreads):
      continue
    kept, expand = mirror_classes(targets, blanket.log_r)
    half = dataclasses.replace(targets, pairs=targets.pairs[kept],
                               distance=targets.distance[kept])
    evaluate = _memoised(_evaluator(half, blanket.log_r, orders, tail, limits))
    runs.append((blanket, kept, expand, half, evaluate))
  return runs


def _chosen(runs, num_others: int, orders: np.ndarray, limits) -> List[int]:
  """The runs completed: the widest, and (where others are left) the
  cheapest at each order by `price` (the first where prices tie, inf
  included)."""
  widest = max(range(len(runs)),
               key=lambda i: blankets_lib.spread(runs[i][0], num_others))
  chosen = {widest}
  if len(runs) > 1:
    prices = np.stack([price(blanket, half, num_others, orders, limits)
                       for blanket, _, _, half, _ in runs])
    chosen |= set(np.argmin(np.nan_to_num(prices, nan=np.inf), axis=0)
                  .tolist())
  return sorted(chosen)


def others_mixture(mech, targets: TargetPairs, num_others: int,
                   orders: np.ndarray, log_cap: np.ndarray,
                   exact: int = others_lib.EXACT_SPLITS,
                   tail: float = math.inf,
                   limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS,
                   constructions: Optional[Callable] = None) -> np.ndarray:
  """An upper bound on Σ P^α Q^(1-α) of each pair's secure sum, for any inputs of the others.

  The smallest, pair by pair and order by order, of the mixture bounds
  (`others.mixture_bound`) of the `blankets` constructions, each proved
  (`others` module docstring). Constructions keeping under 1/SPREAD_MARGIN
  of the best one's noise variance (`blankets.spread`) are skipped, and of two
  with the same block size within TWIN_SPREAD of each other's only the
  larger is kept. The one keeping the most is completed (in the
  near-Gaussian regime it keeps the least divergence). Where others are
  left, each is priced (`price`) and the cheapest at each order is
  completed too (at small n the constructions trade places across orders:
  RQM 16 levels, n = 10, proved/attained at α = 2 and 8 is 1.12 and 1.10
  this way and with the priced ones alone, 1.12 and 1.14 with the largest
  spread alone). Of a pair and its mirror image only one is
  evaluated where R is symmetric (`mirror_classes`).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    targets: its `TargetPairs`.
    num_others: n - 1, the other clients.
    orders: [orders] finite Rényi orders > 1.
    log_cap: [orders, pairs] a bound on each pair's log E for a group never
      evaluated ((α-1)·D∞ + log of the upper row's mass).
    exact: single groups next to each anchor (`others.split_groups`).
    tail: how far below its top an others' law may be cut
      (`convolution.cut_tail`).
    limits: the `Limits` (`matrix_levels`, `convolution.with_sum`'s).
    constructions: (mech, targets, num_others) -> the `blankets.Blanket`s to
      take (default `blankets`).

  Returns:
    [orders, pairs] the log bounds.
  """
  candidates = (constructions or blankets)(mech, targets, num_others)
  runs = _runs(candidates, num_others, targets, orders, tail, limits)
  best = None
  for i in _chosen(runs, num_others, orders, limits):
    blanket, kept, expand, half, evaluate = runs[i]
    bound = others_lib.mixture_bound(
        evaluate, blanket.log_beta, blanket.blocks(num_others), half.distance,
        orders, log_cap[:, kept], exact)[:, expand]
    best = bound if best is None else np.minimum(best, bound)
  return best


def price(blanket, half: TargetPairs, num_others: int, orders: np.ndarray,
          limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
          ) -> np.ndarray:
  """A construction's price (`others_mixture`).

  The sup divergence over its farthest pairs (where the sup over pairs sits
  in practice), the counts of R copies from PRICE_STDS below their mean on
  taken at that count and those below at none (their probability times the
  pair's value alone). A price only
  picks the construction (every construction's bound is proved), so the
  others' law comes from the tilted FFT sum without its error
  (`convolution.with_sum`), not `matrix_sums` (whose R^{*m} costs more to
  build for hundreds of others: docs/performance.md).

  Args:
    blanket: the `blankets.Blanket`.
    half: its target pairs (up to mirror images).
    num_others: n - 1.
    orders: [orders] finite Rényi orders > 1.
    limits: the `Limits` (`convolution.with_sum`).

  Returns:
    [orders] the price.
  """
  blocks = blanket.blocks(num_others)
  beta = math.exp(blanket.log_beta)
  low = max(0, int(math.floor(blocks * beta - PRICE_STDS * math.sqrt(
      blocks * beta * (1 - beta)))))
  far = half.distance >= np.max(half.distance) * (1 - 1e-12)
  farthest = dataclasses.replace(half, pairs=half.pairs[far],
                                 distance=half.distance[far])
  value = convolution.pair_log_sums(
      farthest, convolution.with_sum(half.basis, [(blanket.log_r, low)],
                                     limits=limits)[0], orders)
  # Counts below `low` are priced as none (the pair alone): at high orders
  # that term can outweigh the rest.
  if low:
    log_b = others_lib.log_binomial(blocks, blanket.log_beta)
    below = special.logsumexp(log_b[:low])
    alone = below + convolution.pair_log_sums(farthest, half.basis, orders)
    value = np.logaddexp(value + math.log(-math.expm1(below)) if below < 0
                         else -np.inf, alone)
  return np.max(value, axis=1) / (orders - 1)


def _memoised(evaluate):
  """`evaluate` remembering its values (a count asked twice is evaluated once)."""
  memo = {}

  def wrapped(m):
    if m not in memo:
      memo[m] = evaluate(m)
    return memo[m]
  return wrapped
