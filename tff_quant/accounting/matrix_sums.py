"""Secure-sum laws and Rényi power sums as matrix products, with proved rounding bounds.

Both sums have non-negative terms only. Scaling each output index by the
largest term that can occur there keeps every kept factor in (e^-708, 1], so
BLAS's dot products (any summation order, FMA or not) carry a relative error of
at most (terms)·u, u = 2^-53 (Higham 2002, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., Sec. 3.1), and the few roundings before them
are bounded by the arguments' sizes. Every value returned comes with an upper
bound on its error in the log domain (`err`), and the power sums add theirs,
so what the accountant reads is at or above the exact value of the laws it
was given, assuming only that exp and log are correct to one ulp (glibc's
are).

Against one tilted FFT sum per row, the matrix products are both faster and
more accurate (measured: docs/performance.md). References (Higham 2002,
Mironov 2017): docs/references.md.
"""

import math
import threading
from typing import Dict, Tuple

import numpy as np
from numpy.lib import stride_tricks
from scipy import special

from tff_quant.common import validation

U = 2.0**-53              # unit roundoff of float64
_KEEP = -708.0            # exp of an argument below this may lose precision: dropped, bounded
_TINY = -900 * math.log(2)   # scaled sums below e^this are recomputed in the log domain
_SPAN = 500.0            # log range one block's single scale may cover
_TAIL = -60.0             # indices whose every power-sum term is below e^this are bounded, not summed
_EXP_GROWTH = 700.0       # largest exponent a power-sum factor may take (exp(709) overflows)
_DIRECT_ROWS = 4          # up to this many rows, `convolve` sums each directly
_BLOCK = 2**22            # entries of a block's temporaries (32 MB each)
# Rounding per kept term in units of u (`_power_matrix`): the first factor's
# argument 5·708, the second's 2·700, two exps 2 each, the log of the sum 16
# (products and the sum are in the dot product's terms·u).
_POWER_ROUNDING = 5 * 708 + 2 * 700 + 4 + 16
# `convolve`, per kept term in units of u: two scalings 708 each, two exps 2
# each, the log of a sum >= 2^-900 624 (the product and the sum are in the dot
# product's L·u, the adds after the log counted from the values).
_CONVOLVE_ROUNDING = 2 * 708 + 4 + 624


def exp_kept(x: np.ndarray) -> np.ndarray:
  """exp(x), with 0 where x < _KEEP (the caller bounds what that drops).

  Args:
    x: float64 array of log values (any shape; -inf allowed).

  Returns:
    A float64 array of x's shape: exp(x) where x >= _KEEP (= -708), else 0.
  """
  with np.errstate(under='ignore'):
    return np.where(x >= _KEEP, np.exp(np.maximum(x, _KEEP)), 0.0)


def _blocks(padded: np.ndarray, length: int, width: int, step: int):
  """Output ranges [z0, z1) whose windows' finite log values span <= _SPAN
  (so one scale serves the block), at least `width` long unless at the end,
  at most `step`. The span is scanned over 4 windows first and doubled
  while all of it fits, so a law spanning far more than _SPAN per window
  (RQM 256 levels, Δ = 1,024c, n = 1,000: 34,000 blocks) does not cost a
  scan of `step` per block (docs/performance.md)."""
  z0 = 0
  while z0 < length:
    probe = min(step, 4 * width)
    while True:
      seg = padded[z0:min(length, z0 + probe) + width - 1]
      vals = np.where(np.isfinite(seg), seg, np.nan)
      with np.errstate(invalid='ignore'):
        spread = np.fmax.accumulate(vals) - np.fmin.accumulate(vals)
      fits = np.nonzero(~(spread > _SPAN))[0]   # NaN (no finite value yet) fits
      last = fits[-1] if fits.size else 0       # spread only grows: a prefix fits
      if last < seg.size - 1 or probe >= step or z0 + probe >= length:
        break
      probe = min(step, 2 * probe)
    z1 = min(length, max(z0 + min(width, step), z0 + last - (width - 1) + 1))
    yield z0, z1
    z0 = z1


def _block_sums(log_rows: np.ndarray, scaled_rows: np.ndarray,
                row_max: np.ndarray, row_ok: np.ndarray, span: np.ndarray
                ) -> np.ndarray:
  """[K, block] log Σ_k row_i(k) law(z - k) over one block of outputs z.

  `span` holds the law's log values over the block's windows (at least one
  finite); `scaled_rows` = exp(log_rows - row_max) (`convolve`).
  """
  width = log_rows.shape[1]
  finite = np.isfinite(span)
  scale = float(np.max(span[finite]))
  scaled_span = exp_kept(span - scale)
  if log_rows.shape[0] <= _DIRECT_ROWS:   # np.convolve's direct sums: no copy
    sums = np.stack([np.convolve(r, scaled_span, 'valid')
                     for r in scaled_rows])
  else:
    # window[z, j] = law(z0 + z - j), j = 0..L-1 (contiguous: BLAS takes
    # no overlapping strides).
    window = np.ascontiguousarray(stride_tricks.sliding_window_view(
        scaled_span, width)[:, ::-1])
    sums = scaled_rows @ window.T                     # [K, block]
  with np.errstate(divide='ignore'):
    block = np.log(sums) + scale + row_max[:, None]
  low = (sums < math.exp(_TINY)) & row_ok[:, None]
  if np.any(low):   # far tails of sharp laws: the log domain
    rows, cols = np.nonzero(low)
    logs = stride_tricks.sliding_window_view(span, width)[cols, ::-1]
    block[rows, cols] = special.logsumexp(log_rows[rows] + logs, axis=1)
  block[~row_ok] = -np.inf
  return block


def convolve(log_rows: np.ndarray, rows_err: float, log_law: np.ndarray,
             law_err: float) -> Tuple[np.ndarray, float]:
  """(log(exp(row) * exp(law)) for every row, a bound on its absolute log error).

  out[i, z] = Σ_k row_i(k) law(z - k) as one matrix product per block of z:
  rows scaled by their maxima and the law by its maximum over the block's
  windows, so every kept factor lies in (e^-708, 1] and each kept term is
  within e^(rows_err + law_err) · (1 + _CONVOLVE_ROUNDING·u) of exact. A term
  dropped (a factor below e^-708) is below e^-708 of the scales, against a sum
  of at least 2^-900 of them (smaller sums are recomputed by logsumexp over
  the window): at most L·e^-84 relative. Blocks are cut where the law's log
  values span more than _SPAN, so the law is exponentiated once per index, not
  once per window entry. The rounding analysis follows Higham 2002,
  Sec. 3.1 (module docstring; docs/references.md).

  Args:
    log_rows: [K, L] log values (e.g. the target's log-pmfs), entries may be
      -inf; a 1-d array is taken as one row.
    rows_err: bound >= 0 on |log_rows - exact| at finite entries.
    log_law: [N] log-pmf of the others' sum (N >= 1), entries may be -inf.
    law_err: bound >= 0 on |log_law - exact| at finite entries.

  Returns:
    (out, err): out is the [K, N + L - 1] float64 array of log convolutions
    (-inf where a row is all -inf or the sum is 0); err is a float bound on
    |out - exact| at every finite entry, including rows_err + law_err.

  Raises:
    TypeError: `rows_err` or `law_err` not a number.
    ValueError: `rows_err` or `law_err` negative or not finite, `log_rows`
      not 2-d (after promoting a vector), or `log_law` not a non-empty vector.
  """
  validation.check_number('rows_err', rows_err, 0, None)
  validation.check_number('law_err', law_err, 0, None)
  log_rows = np.atleast_2d(np.asarray(log_rows, np.float64))
  log_law = np.asarray(log_law, np.float64)
  if log_rows.ndim != 2 or log_law.ndim != 1 or not log_law.size:
    raise ValueError('`log_rows` must be [K, L] and `log_law` a non-empty '
                     f'vector, got shapes {log_rows.shape} and {log_law.shape}.')
  k, width = log_rows.shape
  length = log_law.size + width - 1
  padded = np.concatenate([np.full(width - 1, -np.inf), log_law,
                           np.full(width - 1, -np.inf)])
  row_max = np.max(log_rows, axis=1)
  row_ok = np.isfinite(row_max)
  row_max = np.where(row_ok, row_max, 0.0)
  scaled_rows = exp_kept(log_rows - row_max[:, None])
  out = np.full((k, length), -np.inf)
  step = max(width, _BLOCK // max(width, k))
  for z0, z1 in _blocks(padded, length, width, step):
    span = padded[z0:z1 + width - 1]
    if not np.any(np.isfinite(span)):
      continue
    out[:, z0:z1] = _block_sums(log_rows, scaled_rows, row_max, row_ok, span)
  return out, _convolve_error(out, row_max, width, rows_err, law_err)


def _convolve_error(out: np.ndarray, row_max: np.ndarray, width: int,
                    rows_err: float, law_err: float) -> float:
  """`convolve`'s bound on the absolute log error of its finite outputs."""
  finite = np.isfinite(out)
  top = float(np.max(np.abs(out[finite]), initial=0.0))
  return (rows_err + law_err
          + U * (_CONVOLVE_ROUNDING + 1.01 * width + 2 * top +
                 float(np.max(np.abs(row_max), initial=0.0)))
          + width * math.exp(_KEEP - _TINY))


CHECKPOINT = 16   # `Powers` keeps every this many copies' law on the way


class Powers:
  """log R^{*m} (m iid copies of a law on {0, ..., L-1}) with error bounds.

  For any m asked, built by adding one copy at a time (`convolve`; L² m²/2
  multiply-adds up to m) from the nearest law kept below: those asked and
  every CHECKPOINT-th on the way (a count asked below the last one restarts
  there, not from 0). Thread-safe. Calling the object with m returns
  (log-law of R^{*m}, a bound on its absolute log error); m = 0 gives
  (zeros(1), 0.0).

  With a finite `tail`, every law built is cut at both ends to the entries
  within `tail` (log) of its largest, and `log_dropped(m)` bounds the mass
  left out of R^{*m}: what a cut drops, plus the earlier cuts' mass carried
  through R. The law returned is then R^{*m} minus a non-negative part of
  that mass, translated (the cut start is not tracked: a translation of the
  others' sum changes no divergence). The support grows like m while the
  part above e^-tail of the top grows like √m: RQM 256 levels, Δ = 256c,
  221 blocks of 4 others, a tail of 445 keeps 33,900 of 168,400 entries.

  Args:
    log_r: [L] log-pmf of the law R (entries may be -inf).
    tail: the log distance below a law's top beyond which its entries are
      cut, >= 0; inf (the default) cuts nothing.

  Raises:
    TypeError: `tail` not a number.
    ValueError: `tail` negative or NaN.
  """

  def __init__(self, log_r: np.ndarray, tail: float = math.inf):
    if tail != math.inf:   # inf: nothing cut
      validation.check_number('tail', tail, 0, None)
    self.log_r = np.asarray(log_r, np.float64)
    self.tail = float(tail)
    # log R's mass, rounded up: the dropped mass carried through one copy.
    self._log_mass = float(special.logsumexp(self.log_r)) + 1e-12
    self._kept: Dict[int, Tuple[np.ndarray, float, float]] = {
        0: (np.zeros(1), 0.0, -np.inf)}
    self._lock = threading.Lock()

  def _cut(self, law: np.ndarray, err: float) -> Tuple[np.ndarray, float]:
    """(law cut to the entries within `tail` of its top, log of a bound on
    the exact mass it drops)."""
    if not math.isfinite(self.tail):
      return law, -np.inf
    kept = np.nonzero(law >= np.max(law) - self.tail)[0]
    first, last = kept[0], kept[-1]
    dropped = np.concatenate([law[:first], law[last + 1:]])
    if not dropped.size:
      return law, -np.inf
    # Each dropped value is within err of exact (log); the sum's and log's
    # rounding is covered by the 1e-9 margin.
    return law[first:last + 1], float(special.logsumexp(dropped)) + err + 1e-9

  def __call__(self, m: int) -> Tuple[np.ndarray, float]:
    return self._law(m)[:2]

  def log_dropped(self, m: int) -> float:
    """Log of a bound on the mass of R^{*m} the cuts left out.

    Args:
      m: copies of R, an integer >= 0.

    Returns:
      A float: the log of an upper bound on the mass the cuts dropped from
      the law `self(m)` returns (-inf: nothing dropped).

    Raises:
      TypeError: `m` not an integer.
      ValueError: `m` < 0.
    """
    return self._law(m)[2]

  def _law(self, m: int) -> Tuple[np.ndarray, float, float]:
    validation.check_integer('m', m, 0)
    with self._lock:
      if m not in self._kept:
        start = max(j for j in self._kept if j <= m)
        law, err, lost = self._kept[start]
        for j in range(start + 1, m + 1):
          law, err = convolve(self.log_r[None], 0.0, law, err)
          law, cut = self._cut(law[0], err)
          lost = float(np.logaddexp(lost + self._log_mass, cut)) + 1e-12
          if j % CHECKPOINT == 0:
            self._kept[j] = (law, err, lost)
        self._kept[m] = (law, err, lost)
      return self._kept[m]


def _allowance(orders: np.ndarray, err: float, terms: int, rounding: float
               ) -> np.ndarray:
  """[orders] what log Σ P^α Q^(1-α) may read below its exact value: inputs off
  by err in log (α·err + (α-1)·err), `rounding`·u per term, and the sum of
  `terms` positive terms (terms·u, any order), to first order with a 1% margin."""
  rel = (2 * orders - 1) * err + U * (rounding + terms)
  return 1.01 * rel


def log_power_sums(a: np.ndarray, b: np.ndarray, orders: np.ndarray,
                   err: float, lower: bool = False) -> np.ndarray:
  """[orders, M] log Σ_k exp(α a[m,k] + (1-α) b[m,k]); +inf where a > -inf = b.

  At or above the exact value; with `lower`, at or below it (the allowance
  subtracted; dropped terms only lower the sum). For log-pmfs a = log P and
  b = log Q this is log Σ P^α Q^(1-α) = (α - 1)·D_α(P‖Q) (Mironov 2017;
  docs/references.md).

  Pairs go in blocks of _BLOCK entries, so memory stays bounded however
  many pairs there are; each order is one in-place pass. The result carries
  its rounding allowance (`err`: a bound on the inputs' log error, 0 where
  they are taken as exact): a kept term's exponent (r = a - b, (α-1)r, + a,
  - top, the last >= -745) rounds by at most u(2|a| + 3|top| + 4·745), exp
  by 2u, the log of the sum and adding top back by u(2|top| + 25), the
  pairwise sum by terms·u; a term dropped (exponent below top - 745) is
  under e^-745 of the largest. Where every pair's term at an index k is
  below e^_TAIL at every order (orders all finite and > 1), the index is
  left out and a bound on what it adds is added (`_cut_tail`).

  Args:
    a: [M, K] float64 log values (e.g. log P for M pairs over K outputs),
      entries may be -inf.
    b: [M, K] float64 log values of the second law of each pair.
    orders: [A] float64 Rényi orders (any real; > 1 for the tail cut).
    err: bound >= 0 on |a - exact| and |b - exact| at finite entries.
    lower: return a value at or below the exact one instead of at or above.

  Returns:
    [A, M] float64 array: for each order and pair, the log of the power sum
    plus (or, with `lower`, minus) its rounding allowance; +inf for a pair
    where some a[m, k] is finite and b[m, k] is -inf.
  """
  a, b, lost = _cut_tail(a, b, orders)
  out = np.empty((orders.size, a.shape[0]))
  step = max(1, _BLOCK // max(1, a.shape[1]))
  worst = 0.0
  for start in range(0, a.shape[0], step):
    rows = slice(start, start + step)
    worst = max(worst, _block_power_sums(a[rows], b[rows], orders,
                                         out[:, rows]))
  terms = a.shape[1]
  allowance = _allowance(orders, err, terms, worst + 4)
  if lower:   # the cut terms only lower the sums
    return out - allowance[:, None]
  # log(S + lost) <= log S + lost / S
  with np.errstate(over='ignore', invalid='ignore'):
    extra = np.where(np.isneginf(lost)[:, None], 0.0,
                     np.exp(lost[:, None] - out))
  return out + allowance[:, None] + terms * math.exp(-745) + 1.01 * extra


def _block_power_sums(a: np.ndarray, b: np.ndarray, orders: np.ndarray,
                      out: np.ndarray) -> float:
  """Writes `log_power_sums`' unrounded values for one block of pairs into
  `out` ([orders, block], a view) and returns the block's rounding factor
  (in units of u per term, before the final +4)."""
  worst = 0.0
  ok = np.isfinite(a) & np.isfinite(b)
  bad = np.any(np.isfinite(a) & ~np.isfinite(b), axis=1)
  base = np.where(ok, a, -np.inf)          # α a + (1-α) b = a + (α-1)(a-b)
  with np.errstate(invalid='ignore'):
    ratio = np.where(ok, a - b, 0.0)
  buf = np.empty_like(base)
  a_abs = float(np.max(np.abs(np.where(ok, a, 0.0)), initial=0.0))
  for n, alpha in enumerate(orders):
    np.multiply(ratio, alpha - 1, out=buf)
    np.add(buf, base, out=buf)
    top = np.max(buf, axis=1)
    top = np.where(np.isfinite(top), top, 0.0)   # rows with no finite term
    top_abs = float(np.max(np.abs(top), initial=0.0))
    worst = max(worst, 2 * a_abs + 5 * top_abs + 4 * 745 + 25)
    np.subtract(buf, top[:, None], out=buf)
    np.exp(buf, out=buf)
    with np.errstate(divide='ignore'):
      out[n] = np.log(np.sum(buf, axis=1)) + top
  out[:, bad] = np.inf
  return worst


def _cut_tail(a: np.ndarray, b: np.ndarray, orders: np.ndarray):
  """(a, b, lost): the indices where some pair's term may reach e^_TAIL at
  some order, and [orders] the log of a bound on what the others add to any
  pair's sum: a term is a + (α-1)(a - b) <= max a + (α-1)(max(a, b) - min b)
  at its index. Nothing is cut for an order <= 1 or infinite."""
  none = np.full(orders.size, -np.inf)
  if not (np.all(orders > 1) and np.all(np.isfinite(orders))) or not a.size:
    return a, b, none
  head = np.max(a, axis=0)
  with np.errstate(invalid='ignore'):
    spread = np.max(np.maximum(a, b), axis=0) - np.min(b, axis=0)
    reach = head + (np.max(orders) - 1) * spread
  keep = ~(reach < _TAIL) & ~np.isneginf(head)   # NaN (a all -inf) is cut
  cut = ~keep & ~np.isneginf(head)
  if np.all(keep) or not np.any(keep):
    return a, b, none
  lost = np.array([special.logsumexp(head[cut] + (alpha - 1) * spread[cut])
                   if np.any(cut) else -np.inf for alpha in orders])
  return a[:, keep], b[:, keep], lost


def _power_matrices(up: np.ndarray, lo: np.ndarray, orders: np.ndarray,
                    err: float) -> Dict[int, np.ndarray]:
  """{order index: [Ku, Kl] log Σ_z up_i(z)^α lo_j(z)^(1-α) + its rounding
  allowance} for every pair of rows at once; an order is left out where the
  scaling does not fit (a zero in `lo` where some law is positive, or a ratio
  whose (α-1)-th power overflows): the caller sums those pairs one by one.

  With M(z) the largest log value at z, α a + (1-α) b = [α(a - M) + M] + (α-1)(M - b):
  the first factor is in (0, 1], the second in [1, e^700]. A first factor below
  e^-708 is dropped; what that loses is at most Σ_z e^(its argument + the
  largest second argument at z), added. Indices z where every pair's term is
  below e^_TAIL (bounded by max_i up_i(z) + (α-1)·(M(z) - min_j lo_j(z)) at
  the largest order) are left out the same way: their bound is added.
  """
  top = np.maximum(np.max(up, axis=0), np.max(lo, axis=0))
  live = np.isfinite(top)
  if not np.all(np.isfinite(lo[:, live])):
    return {}
  spread = top - np.min(lo, axis=0)
  head = np.max(up, axis=0)
  with np.errstate(invalid='ignore'):
    reach = head + (max(orders) - 1) * spread
  keep = live & (reach >= _TAIL)
  cut = live & ~keep
  up_gap = up[:, keep] - top[keep]          # <= 0
  lo_gap = top[keep] - lo[:, keep]          # >= 0
  top, spread_cut, head_cut = top[keep], spread[cut], head[cut]
  out = {}
  for n, alpha in enumerate(orders):
    grow = (alpha - 1) * lo_gap
    if np.max(grow, initial=0.0) > _EXP_GROWTH:
      continue
    shrink = alpha * up_gap + top
    with np.errstate(under='ignore'):
      sums = exp_kept(shrink) @ np.exp(grow).T
    dropped = np.where(shrink < _KEEP, shrink, -np.inf)
    with np.errstate(divide='ignore'):   # nothing dropped: log 0 = -inf
      lost = np.logaddexp(
          special.logsumexp(np.max(dropped, axis=0) + np.max(grow, axis=0)),
          special.logsumexp(head_cut + (alpha - 1) * spread_cut)
          if head_cut.size else -np.inf)
    with np.errstate(divide='ignore'):
      logs = np.log(sums)
    # log(S + lost) <= log S + lost/S; every S here is >= ~1 (Hölder).
    least = float(np.min(logs[np.isfinite(logs)], initial=0.0))
    extra = math.exp(lost - least) if np.isfinite(lost) else 0.0
    out[n] = logs + _allowance(np.array([alpha]), err, up_gap.shape[1],
                               _POWER_ROUNDING)[0] + 1.01 * extra
  return out


# A multiply-add inside a matrix product costs ~1/160 of an elementwise numpy
# pass per entry (measured: docs/performance.md); counted at 1/64.
MATRIX_DISCOUNT = 64


def pair_log_sums(up: np.ndarray, lo: np.ndarray, pairs: np.ndarray,
                  orders: np.ndarray, err: float) -> np.ndarray:
  """[orders, pairs] log Σ P^α Q^(1-α) + allowance, P = up[pairs[:, 0]],
  Q = lo[pairs[:, 1]] (rows given with log error <= err).

  The core rows (each in at least 1/MATRIX_DISCOUNT of the other side's
  rows' pairs: QMGeo's critical inputs, not the shifted targets) take every
  pair among them by one matrix product per order; the other pairs (and an
  order whose scaling does not fit) are summed one by one
  (`log_power_sums`).

  Args:
    up: [Ku, K] float64 log-pmfs (the P side), entries may be -inf.
    lo: [Kl, K] float64 log-pmfs (the Q side), entries may be -inf.
    pairs: [pairs, 2] integer array of (row of `up`, row of `lo`).
    orders: [A] float64 Rényi orders > 1.
    err: bound >= 0 on the rows' absolute log error at finite entries.

  Returns:
    [A, pairs] float64 array: for each order and pair, an upper bound on
    log Σ P^α Q^(1-α) (+inf where P > 0 = Q somewhere).
  """
  out = np.empty((orders.size, len(pairs)))
  core_up = _core(pairs[:, 0], up.shape[0], pairs[:, 1])
  core_lo = _core(pairs[:, 1], lo.shape[0], pairs[:, 0])
  in_core = core_up[pairs[:, 0]] >= 0
  in_core &= core_lo[pairs[:, 1]] >= 0
  dense = (np.count_nonzero(in_core) * MATRIX_DISCOUNT >=
           np.count_nonzero(core_up >= 0) * np.count_nonzero(core_lo >= 0) > 0)
  full = (_power_matrices(up[core_up >= 0], lo[core_lo >= 0], orders, err)
          if dense else {})
  todo = [n for n in range(orders.size) if n not in full]
  for n, matrix in full.items():
    out[n, in_core] = matrix[core_up[pairs[in_core, 0]],
                             core_lo[pairs[in_core, 1]]]
  rest = ~in_core if dense else np.ones(len(pairs), bool)
  if np.any(rest):
    out[:, rest] = log_power_sums(up[pairs[rest, 0]], lo[pairs[rest, 1]],
                                  orders, err)
  if todo and dense:
    out[np.ix_(todo, in_core)] = log_power_sums(
        up[pairs[in_core, 0]], lo[pairs[in_core, 1]], orders[todo], err)
  return out


def _core(rows: np.ndarray, count: int, partners: np.ndarray) -> np.ndarray:
  """[count] position among the core rows (-1: not core): rows paired with
  at least 1/MATRIX_DISCOUNT of the distinct partners."""
  per_row = np.bincount(rows, minlength=count)
  core = per_row * MATRIX_DISCOUNT >= np.unique(partners).size
  return np.where(core, np.cumsum(core) - 1, -1)
