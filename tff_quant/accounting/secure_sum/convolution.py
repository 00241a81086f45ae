"""Target rows against the others' law, in the log domain, rounded upward.

Every row is a log-pmf (or log envelope); mixing rows (`mix_rows`),
convolving them with the law of the others' sum (`with_sum`) and taking the
pairs' power sums log Σ P^α Q^(1-α) (`pair_log_sums`) keep a bound on their
rounding entry by entry (`matrix_sums`, `mix_rows`), so what is read is at or
above the exact value of the laws. Where the others' law comes from the
tilted FFT (`with_sum(..., with_error=True)`), its proved per-entry error
(`laws.sum_log_pmf_with_error`) is carried too, as a bound common to every
row at each output index (`ColumnError`).

Cut tails: the sum of many clients' outputs has far tails below any E a pair
can have; the others' law is cut `cut_tail` below its top and the mass the
cut drops is added back as computed (`add_lost`): Σ f(P*O, Q*O),
f(a, b) = a^α b^(1-α) (α > 1), is subadditive in the others' measure O
(f is jointly convex and homogeneous), and a cut part T adds at most
|T|·E_0 (convexity over T's translations).
"""

import dataclasses
import math
from typing import Optional, Tuple, Union

import numpy as np
from scipy import special

from tff_quant.accounting import divergence
from tff_quant.accounting import matrix_sums
from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.accounting.secure_sum import targets as targets_lib
from tff_quant.common import laws

_MIX_FLOOR = -600.0   # mixed values below e^this (of the column's top) are
                     # recomputed in the log domain (`mix_rows`)
# Others' laws are cut at e^-this below their top, plus the largest log E_0
# at orders up to TAIL_ORDER (`cut_tail`). RQM 256 levels, Δ = 256c, q =
# 0.0519, n = 1,000: R^{*221} keeps 33,900 of 168,400 entries; ε 9.9956 ->
# 9.9929 (the shorter laws' rounding allowance is smaller).
POWER_TAIL = 400.0
TAIL_ORDER = 256   # the largest of rdp_route.DEFAULT_ORDERS


def mix_rows(weights: np.ndarray, log_basis: np.ndarray,
             with_error: bool = False):
  """log(weights @ exp(log_basis)) row by row, and optionally its rounding.

  One matrix product on the basis scaled by each column's largest value (a
  factor below e^-708 of it dropped); where a mixed value falls below
  e^_MIX_FLOOR of that scale (its terms may have been dropped), the log
  domain: one pass per non-zero weight slot (a row mixes at most two
  adjacent basis rows for vertex targets). A row that is one basis row
  (weight 1) is that row, exactly.

  Rounding, entry by entry (the basis taken as exact; u = 2^-53, ℓ =
  matrix_sums.LIB, λ = log S̃ the scaled sum's log, W the row's weight sum,
  K basis rows): a term w·e^(b - top) is off by u·|b - top| + ℓ, weighted by
  the terms (Jensen, `matrix_sums`) u·(|log W| + |λ|); the K-term dot
  product (K + 1)·u, the log ℓ·|λ|, adding the scale back u·|value|;
  dropped terms K·e^-108 relative. The log domain: per weight slot, log w
  (ℓ·|log w|), the add (u·|term|), logaddexp (u/e + ℓ·(1 + log 2) + u·|its
  value|, each at most the largest |term| + log K).

  Args:
    weights: [R, K] non-negative mixing weights.
    log_basis: [K, L] log rows.
    with_error: also return the rounding bound.

  Returns:
    [R, L] the mixed rows' logs; with `with_error`, (those, [R, L] a bound
    on each entry's absolute log error from this mixing's rounding, 0 where
    a row is one basis row).
  """
  lattice = (np.all(np.count_nonzero(weights, axis=1) == 1) and
             np.all(np.max(weights, axis=1) == 1.0))
  if lattice:   # each row one basis row (a lattice's)
    out = log_basis[np.argmax(weights, axis=1)]
    return (out, np.zeros(out.shape)) if with_error else out
  top = np.max(log_basis, axis=0)
  top = np.where(np.isfinite(top), top, 0.0)
  with np.errstate(under='ignore'):
    mixed = weights @ matrix_sums.exp_kept(log_basis - top[None])
  with np.errstate(divide='ignore'):
    out = np.log(mixed) + top[None]
  low = mixed < math.exp(_MIX_FLOOR)
  rows, cols = np.nonzero(low)
  exact = np.full(rows.size, -np.inf)
  largest = np.zeros(rows.size)   # the largest |log w + b| summed there
  for j in range(weights.shape[1]):   # the log domain, basis row by row
    w = weights[rows, j]
    used = (w > 0) & np.isfinite(log_basis[j, cols])
    term = np.log(w[used]) + log_basis[j, cols[used]]
    exact[used] = np.logaddexp(exact[used], term)
    largest[used] = np.maximum(largest[used], np.abs(term))
  out[rows, cols] = exact
  if not with_error:
    return out
  u, lib, k = matrix_sums.U, matrix_sums.LIB, weights.shape[1]
  fo = matrix_sums.FIRST_ORDER
  w_pos = weights[weights > 0]
  log_w_max = float(np.max(np.abs(np.log(w_pos)), initial=0.0))
  with np.errstate(divide='ignore'):
    log_total = np.abs(np.log(np.sum(weights, axis=1)))[:, None]
  finite = np.isfinite(out)
  lam = np.where(finite, np.abs(out - top[None]), 0.0)
  value = np.where(finite, np.abs(out), 0.0)
  err = (fo * ((k + 1) * u + lib + u * (log_total + lam) + lib * lam +
               u * value) + k * math.exp(-708.0 - _MIX_FLOOR))
  if rows.size:
    slots = np.count_nonzero(weights[rows] > 0, axis=1)
    err[rows, cols] = fo * slots * (
        u / math.e + lib * (1 + math.log(2)) + lib * log_w_max +
        2 * u * (largest + math.log(k)))
  return out, err


def log_convolve_rows(rows: np.ndarray, log_r: np.ndarray) -> np.ndarray:
  """log(exp(rows[t]) * exp(log_r)) for every row, in the log domain (full precision).

  Args:
    rows: [T, L] log rows.
    log_r: [M] a log-pmf.

  Returns:
    [T, L + M - 1] the convolved rows' logs.
  """
  t, length = rows.shape
  out = np.full((t, length + log_r.size - 1), -np.inf)
  with np.errstate(invalid='ignore'):
    for i in range(length):   # L shifted copies; logaddexp keeps tails exact
      out[:, i:i + log_r.size] = np.logaddexp(out[:, i:i + log_r.size],
                                              rows[:, i:i + 1] + log_r[None, :])
  return out


@dataclasses.dataclass(frozen=True)
class ColumnError:
  """A proved bound on the log error of [K, L] convolved rows: entry [i, z]
  is within entry.at(value) + column[z] of exact.

  `entry` is the convolution's own rounding (`matrix_sums.convolve`, const +
  slope·|value|); `column` carries the others' law's error: every term
  row_i(k)·law(z - k) of entry z has its law factor within e^±column[z]
  (the largest error over the law entries z - k the rows reach), so the
  same bound holds for every row, and for every mix of rows (`mixed_error`).

  Attributes:
    entry: a `matrix_sums.EntryError` of the rows.
    column: [L] bounds >= 0, one per output index.
  """
  entry: matrix_sums.EntryError
  column: np.ndarray


RowsError = Union[float, matrix_sums.EntryError, ColumnError]


def window_max(values: np.ndarray, width: int) -> np.ndarray:
  """[values.size + width - 1] out[z] = max of values[z - k], 0 <= k < width
  (indices outside `values` left out): the largest law error a convolution
  with rows of `width` entries reads at output z.

  Args:
    values: [N] float64 values, N >= 1.
    width: the row width, >= 1.

  Returns:
    The window maxima (sparse-table doubling: O(N log width)).
  """
  values = np.asarray(values, np.float64)
  pad = np.zeros(width - 1)
  # out[z] = max padded[z : z + width] = max values[z - width + 1 : z + 1].
  out, span = np.concatenate([pad, values, pad]), 1
  while span < width:   # out[i] = max padded[i : i + span], clipped at the end
    step = min(span, width - span)
    out = np.concatenate([np.maximum(out[:-step], out[step:]), out[-step:]])
    span += step
  return out[:values.size + width - 1]


def with_sum(rows: np.ndarray, parts, tail: float = math.inf,
             limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS,
             with_error: bool = False):
  """Each row convolved with the law of the sum of `parts`.

  With a finite `tail`, the law's indices provably below e^-tail/length stay
  unresolved by the tilted FFTs and are left out (the far tails of 1,000
  clients' sum take most of its tilts and of the power sums' indices); the
  caller adds the mass back (`add_lost`).

  With `with_error`, the result carries a proved bound on its log error: the
  others' law by `laws.sum_log_pmf_with_error` (its proved per-entry error;
  docs/privacy.md, "Numerics" 3), entries whose bound is not finite left out
  with their rigorous upper bound added to the mass left out; the rows by
  `matrix_sums.convolve` (its proved rounding) at any width, or, over
  `limits.product_convolve`, one tilted FFT sum per row with its own proved
  error. Without it, as before: the log domain below `limits.fft_levels`
  levels and nothing bounded.

  Args:
    rows: [T, L] a target's log-pmfs or envelopes (taken as exact).
    parts: (log-pmf, count) pairs whose sum is the others' law (±c mixes, or
      R^{*m}).
    tail: how far below its top the law may be cut (`cut_tail`).
    limits: the `Limits` (`fft_levels`, `product_convolve`).
    with_error: also return the bound on the result's log error.

  Returns:
    (the convolved rows, log of a bound on the mass of the law left out:
    -inf if none); with `with_error`, (the rows, a `ColumnError` (0.0 where
    there are no others), the mass left out).

  Raises:
    laws.UnresolvedSumError: with `with_error`, a per-row sum whose proved
      bound is not finite at some entry (never seen: an entry is resolved
      within e^12 of a tilt's peak, far above the FFT's error).
  """
  parts = [(lp, k) for lp, k in parts if k > 0]
  if not parts:
    return (rows, 0.0, -np.inf) if with_error else (rows, -np.inf)
  length = divergence.sum_length(parts)
  fft = rows.shape[1] >= limits.fft_levels
  cut = math.isfinite(tail) and fft
  if (fft or with_error) and not cut and (rows.size * length >
                                          limits.product_convolve):
    if with_error:
      return _per_row_with_error(rows, parts)
    return np.stack([divergence.sum_log_pmf([(row, 1)] + parts)
                     for row in rows]), -np.inf
  lost = -np.inf
  if with_error:
    law, law_error, lost = _law_with_error(parts, tail if cut else math.inf,
                                           length)
    if cut and rows.size * law.size > limits.product_convolve:
      return with_sum(rows, parts, limits=limits, with_error=True)
    conv, rounding = matrix_sums.convolve(rows, 0.0, law, 0.0)
    return conv, ColumnError(rounding, window_max(law_error, rows.shape[1])), lost
  if cut:
    law, lost = _cut_law(parts, tail, length)
    if rows.size * law.size > limits.product_convolve:
      return with_sum(rows, parts, limits=limits)
  else:
    law = divergence.sum_log_pmf(parts)
  if not fft:
    return log_convolve_rows(rows, law), lost
  # The others' law once, then every row by matrix products: the ±c mixes
  # of RQM at 256 levels, 663 others, 2 rows: 2 tilted sums -> 1.
  return matrix_sums.convolve(rows, 0.0, law, 0.0)[0], lost


def _per_row_with_error(rows: np.ndarray, parts):
  """`with_sum(..., with_error=True)` by one tilted FFT sum per row (the row
  as one more part, taken as exact): (rows, a `ColumnError` whose column is
  the largest proved error over the rows at each index, -inf)."""
  out, column = [], None
  for row in rows:
    law, _, error = laws.sum_log_pmf_with_error([(row, 1)] + list(parts))
    finite = np.isfinite(law)
    if not np.all(np.isfinite(error[finite])):
      raise laws.UnresolvedSumError(
          'with_sum: a per-row sum has entries without a finite proved error.')
    out.append(law)
    error = np.where(finite, error, 0.0)
    column = error if column is None else np.maximum(column, error)
  conv = np.stack(out)
  return conv, ColumnError(matrix_sums.EntryError(0.0, 0.0, conv), column), -np.inf


def _law_with_error(parts, tail: float, length: int):
  """(the law of the sum of `parts`, [its size] proved bounds on its log
  error, log of a bound on the mass left out).

  The law by `laws.sum_log_pmf_with_error` with the indices provably below
  e^-tail/length unresolved (inf: none). Unresolved entries and entries
  whose proved bound is not finite are left out (set to -inf) and their
  rigorous upper bounds (`log_upper`, its own rounding included) summed
  into the mass left out, with a 1e-9 margin for that sum's rounding; then
  the law's -inf ends are trimmed (a translation changes no divergence)."""
  floor = -tail - math.log(length) if math.isfinite(tail) else -np.inf
  law, upper, error = laws.sum_log_pmf_with_error(parts, floor)
  with np.errstate(invalid='ignore'):
    bad = np.isnan(law) | (np.isfinite(law) & ~np.isfinite(error))
  if not np.any(bad):
    return law, np.where(np.isfinite(law), error, 0.0), -np.inf
  lost = float(special.logsumexp(upper[bad])) + 1e-9
  law = np.where(bad, -np.inf, law)
  error = np.where(np.isfinite(law), error, 0.0)
  kept = np.nonzero(np.isfinite(law))[0]
  return law[kept[0]:kept[-1] + 1], error[kept[0]:kept[-1] + 1], lost


def _cut_law(parts, tail: float, length: int) -> Tuple[np.ndarray, float]:
  """(the law of the sum of `parts` with the indices provably below
  e^-tail/length left out and its -inf ends trimmed, log of a bound on the
  mass left out)."""
  law, upper = divergence.sum_log_pmf_above(parts, -tail - math.log(length))
  left = np.isnan(law)
  if not np.any(left):
    return law, -np.inf
  kept = np.nonzero(np.isfinite(law))[0]
  lost = float(special.logsumexp(upper[left])) + 1e-9   # rounding margin
  return np.where(left, -np.inf, law)[kept[0]:kept[-1] + 1], lost


def cut_tail(d_inf: np.ndarray, log_mass: np.ndarray) -> float:
  """How far below its top an others' law may be cut.

  POWER_TAIL above the largest log E_0 any pair may have at orders up to
  TAIL_ORDER ((α-1)·D∞ + log of the upper row's mass), so what a cut drops
  (entries each below e^-tail of the top, added back as computed,
  `add_lost`) is negligible against a pair's E there. Free of the orders
  asked, so a pair's value at an order does not depend on which others are
  evaluated with it. Used by `with_sum` and `matrix_sums.Powers`.

  Args:
    d_inf: [pairs] each pair's D∞.
    log_mass: [pairs] log of each pair's upper row's mass.

  Returns:
    The tail, or inf (nothing cut) where some D∞ is infinite.
  """
  d_inf, log_mass = (np.where(np.isneginf(v), 0.0, v)   # P = 0: E_0 = 0
                     for v in (d_inf, log_mass))
  if not (np.all(np.isfinite(d_inf)) and np.all(np.isfinite(log_mass))):
    return math.inf
  return POWER_TAIL + max(0.0, (TAIL_ORDER - 1) * float(np.max(d_inf, initial=0.0))
                          + float(np.max(log_mass, initial=0.0)))


def add_lost(value: np.ndarray, lost: float, log_e0: np.ndarray
             ) -> np.ndarray:
  """log(E' + τ·E_0), rounded up: a pair's E_m from the others' law with mass
  τ = e^lost cut off (module docstring).

  Args:
    value: log E' from the cut law.
    lost: log τ (-inf: nothing cut).
    log_e0: log E_0, the pair's power sum with no others.

  Returns:
    The bound, rounded up by two ulps.
  """
  if lost == -np.inf:
    return value
  out = np.logaddexp(value, lost + log_e0)
  return np.nextafter(np.nextafter(out, np.inf), np.inf)


def pair_log_sums(targets: targets_lib.TargetPairs, conv: np.ndarray,
                  orders: np.ndarray, err: Optional[RowsError] = None
                  ) -> np.ndarray:
  """log Σ P^α Q^(1-α) of each target pair, from its basis rows convolved.

  With a bound `err` on conv's error, each mixed row carries its own bound
  entry by entry (`mixed_error`) into the power sums (`matrix_sums`).

  Args:
    targets: the `TargetPairs`.
    conv: the basis rows convolved with an others' law.
    orders: [orders] finite Rényi orders > 1.
    err: a bound on conv's log error: the sums by `matrix_sums` (a number,
      or its `EntryError`, entry by entry), or by the tilted FFT (a
      `ColumnError`, `with_sum(..., with_error=True)`), its rounding
      included (None: unknown, the sums' rounding only).

  Returns:
    [orders, pairs] the log power sums.
  """
  # Only the target rows the pairs use are mixed.
  used_up, pair_up = np.unique(targets.pairs[:, 0], return_inverse=True)
  used_lo, pair_lo = np.unique(targets.pairs[:, 1], return_inverse=True)
  pairs = np.stack([pair_up, pair_lo], axis=1)
  same = (targets.lower_weights is targets.upper_weights
          and np.array_equal(used_up, used_lo))
  if err is None:   # the laws' own error unknown: the sums' rounding only
    conv_up = mix_rows(targets.upper_weights[used_up], conv)
    conv_lo = conv_up if same else mix_rows(targets.lower_weights[used_lo],
                                            conv)
    # In blocks of pairs: gathered at once, the rows of 336,200 pairs of
    # 4,096 levels (RQM at 12 bits) took 10.3 GiB.
    return matrix_sums.blocked_log_power_sums(conv_up, conv_lo, pairs, orders)
  conv_up, err_up = mixed_error(targets.upper_weights[used_up], conv, err)
  conv_lo, err_lo = ((conv_up, err_up) if same else
                     mixed_error(targets.lower_weights[used_lo], conv, err))
  return matrix_sums.pair_log_sums(conv_up, conv_lo, pairs, orders,
                                   (err_up, err_lo))


def mixed_error(weights: np.ndarray, conv: np.ndarray, err: RowsError):
  """(the mixed rows, [R, L] a bound on each entry's absolute log error).

  conv's rows within A + B·|conv| (`matrix_sums.EntryError`; a number: A,
  B = 0) carry into a mix Σ_j w_j c_j: Σ w_j c_j^(1∓B) lies within
  W^B·S^(1-B) and S·(S/W)^B (Jensen, weights w_j, W = Σ_j w_j), so the
  mixed value S is within A + B·(|log S| + max(0, log W)), plus 2B times
  the largest positive log of a basis row (c_j > 1); then `mix_rows`'
  rounding. A `ColumnError`'s column v[z] bounds a factor e^±v[z] of every
  term at z, which factors out of the (non-negative) mix: added as it is.

  Args:
    weights: [R, K] non-negative mixing weights.
    conv: [K, L] the basis rows convolved with an others' law.
    err: the bound on conv's log error (a number, an `EntryError` or a
      `ColumnError`).

  Returns:
    ([R, L] mixed rows, [R, L] their error bounds).
  """
  column = 0.0
  if isinstance(err, ColumnError):
    err, column = err.entry, np.asarray(err.column, np.float64)[None, :]
  bound = matrix_sums.EntryError.of(err, conv)
  mixed, rounding = mix_rows(weights, conv, with_error=True)
  slope = bound.slope
  finite = conv[np.isfinite(conv)]
  c_plus = max(0.0, float(np.max(finite, initial=0.0)))
  with np.errstate(divide='ignore'):
    log_w = np.maximum(np.log(np.sum(weights, axis=1)), 0.0)[:, None]
  carried = bound.at(mixed) + slope * (log_w + 2 * c_plus)
  return mixed, carried + (1 + slope) * rounding + column


def log_ratio_max(log_p: np.ndarray, log_q: np.ndarray, pairs: np.ndarray
                  ) -> np.ndarray:
  """Max over levels of log P/Q for the rows (pairs[:, 0], pairs[:, 1]).

  In blocks of matrix_sums._BLOCK entries (8,340 pairs of 65,536 levels
  would take 4 GB at once).

  Args:
    log_p, log_q: log rows.
    pairs: [M, 2] row indices into log_p and log_q.

  Returns:
    [M] the maxima, -inf where P is 0.
  """
  out = np.empty(len(pairs))
  step = max(1, matrix_sums._BLOCK // max(log_p.shape[1], 1))
  for s in range(0, len(pairs), step):
    a, b = log_p[pairs[s:s + step, 0]], log_q[pairs[s:s + step, 1]]
    with np.errstate(invalid='ignore'):
      ratio = np.where(np.isfinite(a), a - b, -np.inf)
    out[s:s + step] = np.max(ratio, axis=1)
  return out
