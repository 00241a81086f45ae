"""Secure-sum laws and Rényi power sums as matrix products, with proved rounding bounds.

Both sums have non-negative terms only. Scaling each output index by the
largest term that can occur there keeps every kept factor in (e^-708, 1], so
BLAS's dot products (any summation order, FMA or not) carry a relative error of
at most (terms)·u, u = 2^-53 (Higham 2002, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., Sec. 3.1), and the few roundings before them
are bounded by the arguments' sizes. Every value returned comes with an upper
bound on its error in the log domain, and the power sums add theirs, so what
the accountant reads is at or above the exact value of the laws it was given.
Model of arithmetic: `exact_laws` (correctly rounded +, -, ×, /; exp and log
within exact_laws.ELEMENTARY_ULPS ulps).

Per entry (`EntryError`): a term's rounding grows with how far its factors lie
below their scale, u·|log factor|, but such terms weigh e^-|log factor| in the
sum. For non-negative terms t_k with a per-term relative error u·|log t_k|,
Σ t_k^(1-u) <= K^u (Σ t_k)^(1-u) (Jensen: t^(1-u) is concave), so the sum's
error is u·log(K/Σ t_k): small where the sum is near its scale, which is
where a law's mass, and a power sum's, lies. Every error is therefore stated
as const + slope·|log value| at each entry; convolving, mixing and summing
keep that form (each operation's docstring), so R^{*m} carries about
m·(terms + 50)·u in its bulk instead of a worst case taken at its deepest
tail entry.

Against one tilted FFT sum per row, the matrix products are both faster and
more accurate (measured: docs/performance.md). References (Higham 2002,
Mironov 2017): docs/references.md.
"""

import math
import threading
from typing import Dict, Tuple, Union

import numpy as np
from numpy.lib import stride_tricks
from scipy import special

from tff_quant.common import exact_laws
from tff_quant.common import validation

U = 2.0**-53              # unit roundoff of float64
LIB = 2 * exact_laws.ELEMENTARY_ULPS * U   # relative error of one exp or log
_KEEP = -708.0            # exp of an argument below this may lose precision: dropped, bounded
_TINY = -900 * math.log(2)   # scaled sums below e^this are recomputed in the log domain
_SPAN = 500.0            # log range one block's single scale may cover
_TAIL = -60.0             # indices whose every power-sum term is below e^this are bounded, not summed
_EXP_GROWTH = 700.0       # largest exponent a power-sum factor may take (exp(709) overflows)
_DIRECT_ROWS = 4          # up to this many rows, `convolve` sums each directly
_BLOCK = 2**22            # entries of a block's temporaries (32 MB each)
FIRST_ORDER = 1.01       # covers the second-order terms of every u-bound below
# A term below this relative to its sum's scale underflows (exp of an
# argument < -745.13 is 0; a subnormal result is within 2^-1075 absolute).
_UNDERFLOW = 2 * math.exp(-745.0)


class EntryError(float):
  """A proved bound on a log-law's absolute log error, per entry and uniform.

  Entry z of the law it describes is within const + slope·|log law[z]| of
  the exact value (`at`). The float itself is the largest of these over the
  law's finite entries, so code that reads it as a number gets a uniform
  bound (as before per-entry bounds existed).

  Args:
    const: the constant part, >= 0.
    slope: the part per unit of |log value|, >= 0.
    log_law: the law (any shape) the bound describes, for the uniform value.
  """

  def __new__(cls, const: float, slope: float, log_law: np.ndarray):
    log_law = np.asarray(log_law, np.float64)
    finite = log_law[np.isfinite(log_law)]
    top = float(np.max(np.abs(finite), initial=0.0))
    self = super().__new__(cls, (const + slope * top) * (1 + 4 * U))
    self.const, self.slope = float(const), float(slope)
    return self

  @classmethod
  def of(cls, err: float, log_law: np.ndarray) -> 'EntryError':
    """`err` as an EntryError (a plain number: a constant bound).

    Args:
      err: a float bound at every entry, or an EntryError.
      log_law: the law it describes.

    Returns:
      The EntryError (`err` itself if it is one).
    """
    if isinstance(err, EntryError):
      return err
    return cls(float(err), 0.0, log_law)

  @classmethod
  def fit(cls, errors: np.ndarray, log_law: np.ndarray) -> 'EntryError':
    """The const + slope·|log value| bound above per-entry bounds that is
    least one nat above the smallest |log value| (a law's bulk).

    With x_z = |log_law[z]| and e_z = errors[z] at the finite entries and
    x_ref = min x + 1: the line of least value at x_ref above every (x_z,
    e_z) with slope >= 0, i.e. the tangent at x_ref of their upper concave
    hull (slope 0 where that tangent falls or x_ref is past the last x);
    const = the largest e_z - slope·x_z (at least 0), so e_z <= const +
    slope·x_z at every finite entry. Both are raised by a relative 1e-6,
    far above the few roundings of this arithmetic (each u-relative).

    Args:
      errors: per-entry bounds >= 0, of log_law's shape (non-finite
        entries ignored).
      log_law: the law they describe.

    Returns:
      The EntryError.

    Raises:
      ValueError: errors not of log_law's shape, or negative or not finite
        at a finite entry of log_law.
    """
    errors = np.asarray(errors, np.float64)
    log_law = np.asarray(log_law, np.float64)
    if errors.shape != log_law.shape:
      raise ValueError(f'`errors` must have the shape of `log_law` '
                       f'{log_law.shape}, got {errors.shape}.')
    live = np.isfinite(log_law)
    e, x = errors[live], np.abs(log_law[live])
    if not (np.all(np.isfinite(e)) and np.all(e >= 0)):
      raise ValueError('`errors` must be finite and >= 0 at the finite '
                       'entries of `log_law`.')
    if not e.size:
      return cls(0.0, 0.0, log_law)
    x_ref = float(np.min(x)) + 1.0
    slope = max(0.0, _hull_slope(x, e, x_ref))
    const = max(0.0, float(np.max(e - slope * x)))
    return cls(const * (1 + 1e-6), slope * (1 + 1e-6), log_law)

  def at(self, log_values: np.ndarray) -> np.ndarray:
    """The bound at each entry of `log_values` (const where not finite).

    Args:
      log_values: entries of the law (or of a law made from it whose
        entries the bound was carried to).

    Returns:
      float64 array of log_values' shape.
    """
    v = np.asarray(log_values, np.float64)
    with np.errstate(invalid='ignore'):
      mag = np.where(np.isfinite(v), np.abs(v), 0.0)
    return self.const + self.slope * mag


ErrorLike = Union[float, EntryError]


def _hull_slope(x: np.ndarray, e: np.ndarray, x_ref: float) -> float:
  """Slope at x_ref of the upper concave hull of the points (x, e) (0 past
  the last x): the line of least value at x_ref above every point."""
  order = np.lexsort((e, x))
  hull = []
  for px, pe in zip(x[order].tolist(), e[order].tolist()):
    if hull and hull[-1][0] == px:   # the same x: the larger e (sorted last)
      hull.pop()
    while len(hull) >= 2:
      (ax, ae), (bx, be) = hull[-2], hull[-1]
      if (be - ae) * (px - ax) <= (pe - ae) * (bx - ax):   # b not above a-p
        hull.pop()
      else:
        break
    hull.append((px, pe))
  for (ax, ae), (bx, be) in zip(hull, hull[1:]):
    if ax <= x_ref <= bx:
      return (be - ae) / (bx - ax)
  return 0.0


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


def convolve(log_rows: np.ndarray, rows_err: ErrorLike, log_law: np.ndarray,
             law_err: ErrorLike) -> Tuple[np.ndarray, EntryError]:
  """(log(exp(row) * exp(law)) for every row, a bound on its log error at each entry).

  out[i, z] = Σ_k row_i(k) law(z - k) as one matrix product per block of z:
  rows scaled by their maxima and the law by its maximum over the block's
  windows, so every kept factor lies in (e^-708, 1]. A term dropped (a
  factor below e^-708) is below e^-708 of the scales, against a sum of at
  least 2^-900 of them (smaller sums are recomputed by logsumexp over the
  window): at most L·e^-84 relative. Blocks are cut where the law's log
  values span more than _SPAN, so the law is exponentiated once per index,
  not once per window entry. The rounding analysis follows Higham 2002,
  Sec. 3.1 (module docstring; docs/references.md), entry by entry
  (`_convolve_error`).

  Args:
    log_rows: [K, L] log values (e.g. the target's log-pmfs), entries may be
      -inf; a 1-d array is taken as one row.
    rows_err: bound >= 0 on |log_rows - exact| at finite entries: a number,
      or an `EntryError` of the rows.
    log_law: [N] log-pmf of the others' sum (N >= 1), entries may be -inf.
    law_err: the same for `log_law`.

  Returns:
    (out, err): out is the [K, N + L - 1] float64 array of log convolutions
    (-inf where a row is all -inf or the sum is 0); err is an `EntryError`
    bounding |out - exact| at every finite entry (a float: the largest of
    those), the inputs' errors included.

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
  return out, _convolve_error(out, log_rows, log_law,
                              EntryError.of(rows_err, log_rows),
                              EntryError.of(law_err, log_law))


def _positive_max(values: np.ndarray) -> float:
  """max(0, the largest finite entry)."""
  finite = values[np.isfinite(values)]
  return max(0.0, float(np.max(finite, initial=0.0)))


def _convolve_error(out: np.ndarray, log_rows: np.ndarray,
                    log_law: np.ndarray, rows_err: EntryError,
                    law_err: EntryError) -> EntryError:
  """`convolve`'s bound on the log error of each finite output, const +
  slope·|out[z]|.

  Rounding (W = the row width, u = U, ℓ = LIB, λ = log S̃ the scaled sum's
  log, s the block's scale, r the row's maximum): a term's two factors
  exp(x - scale) carry u·|x - scale| + ℓ each, and their product is the
  term t <= 1, so a term is off by at most u·|log t| + 2ℓ; weighted by the
  terms (module docstring) the sum is off by u·(log W - λ) + 2ℓ, and the dot
  product by W·u. The log adds ℓ·|λ|, the two adds u·|λ + s| and u·|out|.
  With |s| <= |out| + log W + |r| + max(0, max law) (out <= log W + s + r)
  and |λ| <= |out| + |s| + |r|, all of it is const + (4u + 2ℓ)·|out|. The
  log domain's recomputation (sums below 2^-900) is within the same bound
  (its terms: u·|term| + u·|term - max| weighted the same way, the log of a
  sum in [1, W], the add). Dropped and subnormal terms: W·e^-84 relative.

  Inputs (rows within A_r + B_r·|row|, law within A_l + B_l·|law|): a
  term's input error is e^(±(A + B·|log factor|)); with only the law's
  slope, Σ_k r_k x_k^(1∓B) is bounded by Jensen with weights r_k (masses
  M_r <= the row's): log S ± B·(|log S| + max(0, log M_r)); with only the
  rows', the same with the law's mass; with both, B = the larger slope and
  uniform weights over the W terms: B·(log W + |log S|). Factors above 1
  add 2B·(their largest log). |log S| <= |out| + the rounding above.
  """
  width = log_rows.shape[1]
  log_w = math.log(width) + 1e-6
  ok = np.any(np.isfinite(log_rows), axis=1)
  row_max = np.max(np.where(np.isfinite(log_rows), log_rows, -np.inf), axis=1)
  rm = float(np.max(np.abs(row_max[ok]), initial=0.0))
  y_plus, r_plus = _positive_max(log_law), _positive_max(log_rows)
  fo = FIRST_ORDER
  scaled = fo * (width * U + 2 * LIB + U * log_w +
                 (U + LIB) * (log_w + 2 * rm + y_plus) + U * rm)
  in_logs = fo * (3 * U * log_w + LIB + width * U + LIB * log_w)
  rho_const = (max(scaled, in_logs) +
               width * (math.exp(_KEEP - _TINY) + 2.0**-1074 * math.exp(-_TINY)
                        + _UNDERFLOW))
  rho_slope = fo * (4 * U + 2 * LIB)
  b_rows, b_law = rows_err.slope, law_err.slope
  slope_in = max(b_rows, b_law)
  if slope_in == 0.0:
    extra = 0.0
  elif b_rows == 0.0:
    masses = special.logsumexp(log_rows[ok], axis=1) if np.any(ok) else [0.0]
    extra = b_law * (max(0.0, float(np.max(masses))) + 1e-12 + 2 * y_plus)
  elif b_law == 0.0:
    mass = float(special.logsumexp(log_law))
    extra = b_rows * (max(0.0, mass) + 1e-12 + 2 * r_plus)
  else:
    extra = slope_in * (log_w + 2 * (y_plus + r_plus))
  const = (rows_err.const + law_err.const + extra +
           (1 + slope_in) * rho_const)
  slope = slope_in + (1 + slope_in) * rho_slope
  return EntryError(const, slope, out)


CHECKPOINT = 16   # `Powers` keeps every this many copies' law on the way


class Powers:
  """log R^{*m} (m iid copies of a law on {0, ..., L-1}) with error bounds.

  For any m asked, built by adding one copy at a time (`convolve`; L² m²/2
  multiply-adds up to m) from the nearest law kept below: those asked and
  every CHECKPOINT-th on the way (a count asked below the last one restarts
  there, not from 0). Thread-safe. Calling the object with m returns
  (log-law of R^{*m}, a bound on its absolute log error: an `EntryError`,
  entry by entry, so the bulk of R^{*m} carries about m·(L + 50)·u, not m
  times a deepest-tail worst case); m = 0 gives (zeros(1), 0.0).

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


Errors = Union[float, EntryError, Tuple[np.ndarray, np.ndarray]]


def _entry_errors(err: Errors, a: np.ndarray, b: np.ndarray):
  """(bound on a's log error, bound on b's): scalars or arrays of their
  shapes, from a number, an `EntryError` (of both), or a pair of arrays."""
  if isinstance(err, tuple):
    e_a, e_b = (np.asarray(e, np.float64) for e in err)
    if not (np.all(e_a >= 0) and np.all(e_b >= 0) and
            np.all(np.isfinite(e_a)) and np.all(np.isfinite(e_b))):
      raise ValueError('`err` arrays must be finite and >= 0.')
    return e_a, e_b
  validation.check_number('err', err, 0, None)
  if isinstance(err, EntryError) and err.slope > 0:
    return err.at(a), err.at(b)
  return float(err), float(err)


def _moved(x: np.ndarray, e, up: bool) -> np.ndarray:
  """x + e (up) or x - e, rounded outward (one ulp past round-to-nearest),
  so the result is at or beyond the exact one; -inf stays -inf."""
  if np.all(np.asarray(e) == 0):
    return x
  with np.errstate(invalid='ignore'):
    moved = x + e if up else x - e
    moved = np.nextafter(moved, np.inf if up else -np.inf)
  return np.where(np.isfinite(x), moved, x)


def _worst_inputs(a, b, err: Errors, alpha_above_one: bool, alpha_positive: bool,
                  lower: bool):
  """The inputs within `err` of (a, b) whose power sum is the largest
  (smallest with `lower`) for orders on one side of 1 and 0: the exponent
  α·a + (1-α)·b grows with a when α > 0 and with b when α < 1."""
  e_a, e_b = _entry_errors(err, a, b)
  return (_moved(a, e_a, alpha_positive != lower),
          _moved(b, e_b, (not alpha_above_one) != lower))


def log_power_sums(a: np.ndarray, b: np.ndarray, orders: np.ndarray,
                   err: Errors, lower: bool = False) -> np.ndarray:
  """[orders, M] log Σ_k exp(α a[m,k] + (1-α) b[m,k]); +inf where a > -inf = b.

  At or above the exact value; with `lower`, at or below it. For log-pmfs
  a = log P and b = log Q this is log Σ P^α Q^(1-α) = (α - 1)·D_α(P‖Q)
  (Mironov 2017; docs/references.md).

  Inputs known to within err: each entry is moved to its worst value within
  its own bound (P up and Q down for α > 1, rounded outward), so the input
  error is carried entry by entry, weighted by the terms, instead of
  (2α-1)·(largest error). Pairs go in blocks of _BLOCK entries, so memory
  stays bounded however many pairs there are; each order is one in-place
  pass, and each pair's sum carries its own rounding bound
  (`_block_power_sums`). Where every pair's term at an index k is below
  e^_TAIL at every order (orders all finite and > 1), the index is left out
  and a bound on what it adds is added (`_cut_tail`).

  Args:
    a: [M, K] float64 log values (e.g. log P for M pairs over K outputs),
      entries may be -inf.
    b: [M, K] float64 log values of the second law of each pair.
    orders: [A] float64 Rényi orders (any real; > 1 for the tail cut).
    err: bound >= 0 on |a - exact| and |b - exact| at finite entries: a
      number, an `EntryError` of both, or (err_a, err_b) arrays
      broadcastable to a's shape.
    lower: return a value at or below the exact one instead of at or above.

  Returns:
    [A, M] float64 array: for each order and pair, an upper (with `lower`,
    lower) bound on the log of the exact power sum; +inf for a pair where
    some a[m, k] is finite and b[m, k] is -inf.

  Raises:
    ValueError: `err` negative or not finite.
  """
  orders = np.asarray(orders, np.float64)
  out = np.empty((orders.size, a.shape[0]))
  above, positive = orders > 1, orders > 0
  for side in {(bool(x), bool(y)) for x, y in zip(above, positive)}:
    idx = (above == side[0]) & (positive == side[1])
    a2, b2 = _worst_inputs(a, b, err, side[0], side[1], lower)
    out[idx] = _bounded_power_sums(a2, b2, orders[idx], lower)
  return out


def _bounded_power_sums(a: np.ndarray, b: np.ndarray, orders: np.ndarray,
                        lower: bool) -> np.ndarray:
  """`log_power_sums` of inputs taken as exact: each value moved by its own
  rounding bound (and, upward, by the cut tail's bound)."""
  a, b, lost = _cut_tail(a, b, orders)
  out = np.empty((orders.size, a.shape[0]))
  rounding = np.empty_like(out)
  step = max(1, _BLOCK // max(1, a.shape[1]))
  for start in range(0, a.shape[0], step):
    rows = slice(start, start + step)
    rounding[:, rows] = _block_power_sums(a[rows], b[rows], orders,
                                          out[:, rows])
  dropped = a.shape[1] * _UNDERFLOW   # underflowed terms, against a sum >= 1
  if lower:   # the cut terms only lower the sums
    return out - rounding - dropped
  # log(S + lost) <= log S + lost / S
  with np.errstate(over='ignore', invalid='ignore'):
    extra = np.where(np.isneginf(lost)[:, None], 0.0,
                     np.exp(lost[:, None] - out))
  return out + rounding + dropped + FIRST_ORDER * extra


def _block_power_sums(a: np.ndarray, b: np.ndarray, orders: np.ndarray,
                      out: np.ndarray) -> np.ndarray:
  """Writes `log_power_sums`' unrounded values for one block of pairs into
  `out` ([orders, block], a view) and returns [orders, block] bounds on
  their rounding (absolute, in log).

  A term's exponent x = a + (α-1)(a - b), less the row's top, rounds by at
  most u·(2|α-1|·|a - b| + |x| + |x - top|) <= u·(2|α-1|·R + |top| +
  2|x - top|), R the pair's largest |a - b|; its exp by ℓ (ℓ = LIB). The
  part 2u·|x - top| = 2u·|log term| is weighted by the terms (module
  docstring): 2u·log K over a sum >= 1 of K terms. Or, uniformly, |(α-1)(a
  - b)| <= |x| + |a| with x - top >= -745 for a kept term. Then the sum (K·u),
  the log (ℓ·|log S̃|) and adding the top back (u·|value|)."""
  ok = np.isfinite(a) & np.isfinite(b)
  bad = np.any(np.isfinite(a) & ~np.isfinite(b), axis=1)
  base = np.where(ok, a, -np.inf)          # α a + (1-α) b = a + (α-1)(a - b)
  with np.errstate(invalid='ignore'):
    ratio = np.where(ok, a - b, 0.0)
  spread = np.max(np.abs(ratio), axis=1, initial=0.0)
  a_abs = np.max(np.abs(np.where(ok, a, 0.0)), axis=1, initial=0.0)
  terms = a.shape[1]
  log_k = math.log(max(terms, 1))
  buf = np.empty_like(base)
  rounding = np.empty_like(out)
  for n, alpha in enumerate(orders):
    np.multiply(ratio, alpha - 1, out=buf)
    np.add(buf, base, out=buf)
    top = np.max(buf, axis=1, initial=-np.inf)
    top = np.where(np.isfinite(top), top, 0.0)   # rows with no finite term
    np.subtract(buf, top[:, None], out=buf)
    np.exp(buf, out=buf)
    with np.errstate(divide='ignore'):
      out[n] = np.log(np.sum(buf, axis=1)) + top
    weighted = 2 * abs(alpha - 1) * spread + np.abs(top) + 2 * log_k
    uniform = 2 * (np.abs(top) + 745 + a_abs) + np.abs(top) + 2 * 745
    with np.errstate(invalid='ignore'):
      log_sum = np.where(np.isfinite(out[n]), np.abs(out[n] - top), 0.0)
      value = np.where(np.isfinite(out[n]), np.abs(out[n]), 0.0)
    rounding[n] = FIRST_ORDER * (U * (np.minimum(weighted, uniform) + terms
                                       + value) + LIB * (1 + log_sum))
  out[:, bad] = np.inf
  return rounding


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


def _power_matrices(up: np.ndarray, lo: np.ndarray, orders: np.ndarray
                    ) -> Dict[int, np.ndarray]:
  """{order index: [Ku, Kl] log Σ_z up_i(z)^α lo_j(z)^(1-α) + its rounding
  bound} for every pair of rows at once (the rows taken as exact); an order
  is left out where the scaling does not fit (a zero in `lo` where some law
  is positive, or a ratio whose (α-1)-th power overflows): the caller sums
  those pairs one by one.

  With M(z) the largest log value at z, α a + (1-α) b = [α(a - M) + M] + (α-1)(M - b):
  the first factor is in (0, 1], the second in [1, e^700]. A first factor below
  e^-708 is dropped; what that loses is at most Σ_z e^(its argument + the
  largest second argument at z), added. Indices z where every pair's term is
  below e^_TAIL (bounded by max_i up_i(z) + (α-1)·(M(z) - min_j lo_j(z)) at
  the largest order) are left out the same way: their bound is added.

  Rounding of a term t = e^(s + g) (s the first argument, g the second):
  s by u·(3|s| + 2|M|), g by 2u·g, two exps 2ℓ. With |s| <= |log t| + g
  that is u·(3|log t| + 5·G_j + 2·T), G_j the largest g of row j, T the
  largest |M|; the 3u·|log t| part weighted by the terms (module
  docstring) is 3u·log(K/S), plus 6u·max(0, log t) where t > 1. Or,
  uniformly, u·(3·708 + 2T + 2·700) per kept term. Then the dot product
  ((K + 1)·u) and the log (ℓ·|log S̃|).
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
  terms = up_gap.shape[1]
  log_k = math.log(max(terms, 1))
  top_abs = float(np.max(np.abs(top), initial=0.0))
  top_max = float(np.max(top, initial=0.0))
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
    g_row = np.max(grow, axis=1, initial=0.0)[None, :]        # [1, Kl]
    with np.errstate(invalid='ignore'):
      log_s = np.where(np.isfinite(logs), logs, 0.0)
    weighted = (5 * g_row + 2 * top_abs + 3 * np.maximum(log_k - log_s, 0.0)
                + 6 * np.maximum(top_max + g_row, 0.0))
    uniform = 3 * 708 + 2 * top_abs + 2 * 700
    rounding = FIRST_ORDER * (U * (np.minimum(weighted, uniform) + terms + 1)
                               + LIB * (2 + np.abs(log_s)))
    out[n] = logs + rounding + FIRST_ORDER * extra
  return out


# A multiply-add inside a matrix product costs ~1/160 of an elementwise numpy
# pass per entry (measured: docs/performance.md); counted at 1/64.
MATRIX_DISCOUNT = 64


#: The core pairs' matrices (`_power_matrices`: one [Ku, Kl] per order and
#: about six temporaries) are built only up to this many bytes; above, those
#: pairs are summed in blocks. RQM at 4,096 levels had 13,105 core rows a
#: side: 1.28 GiB per matrix, killed at a 6 GiB cap.
MAX_DENSE_BYTES = 2**31


def pair_log_sums(up: np.ndarray, lo: np.ndarray, pairs: np.ndarray,
                  orders: np.ndarray, err: Errors,
                  max_dense_bytes: float = MAX_DENSE_BYTES) -> np.ndarray:
  """[orders, pairs] upper bounds on log Σ P^α Q^(1-α), P = up[pairs[:, 0]],
  Q = lo[pairs[:, 1]] (rows given with log error <= err).

  Each row is first moved to its worst values within its error bounds (up
  up, lo down, rounded outward: `log_power_sums`); then the core rows (each
  in at least 1/MATRIX_DISCOUNT of the other side's rows' pairs: QMGeo's
  critical inputs, not the shifted targets) take every pair among them by
  one matrix product per order (`_power_matrices`); the other pairs (and
  an order whose scaling does not fit) are summed one by one
  (`log_power_sums`).

  Args:
    up: [Ku, K] float64 log-pmfs (the P side), entries may be -inf.
    lo: [Kl, K] float64 log-pmfs (the Q side), entries may be -inf.
    pairs: [pairs, 2] integer array of (row of `up`, row of `lo`).
    orders: [A] float64 Rényi orders > 1.
    err: bound >= 0 on the rows' absolute log error at finite entries: a
      number, an `EntryError` of both sides' rows, or (err_up, err_lo)
      arrays broadcastable to up's and lo's shapes.
    max_dense_bytes: the core pairs take the matrix products only where
      their matrices ((A + 6)·Ku·Kl·8 bytes) fit; else they are summed in
      blocks like the rest (the same bound, proved either way).

  Returns:
    [A, pairs] float64 array: for each order and pair, an upper bound on
    log Σ P^α Q^(1-α) (+inf where P > 0 = Q somewhere).

  Raises:
    ValueError: an order <= 1, or `err` negative or not finite.
  """
  orders = np.asarray(orders, np.float64)
  if not np.all(orders > 1):
    raise ValueError(f'`orders` must all be > 1, got {orders!r}.')
  if isinstance(err, tuple):
    up, lo = _moved(up, err[0], True), _moved(lo, err[1], False)
  else:
    up, lo = _worst_inputs(up, lo, err, True, True, False)
  out = np.empty((orders.size, len(pairs)))
  core_up = _core(pairs[:, 0], up.shape[0], pairs[:, 1])
  core_lo = _core(pairs[:, 1], lo.shape[0], pairs[:, 0])
  in_core = core_up[pairs[:, 0]] >= 0
  in_core &= core_lo[pairs[:, 1]] >= 0
  cores = np.count_nonzero(core_up >= 0) * np.count_nonzero(core_lo >= 0)
  dense = (np.count_nonzero(in_core) * MATRIX_DISCOUNT >= cores > 0 and
           (orders.size + 6) * 8.0 * cores <= max_dense_bytes)
  full = (_power_matrices(up[core_up >= 0], lo[core_lo >= 0], orders)
          if dense else {})
  todo = [n for n in range(orders.size) if n not in full]
  for n, matrix in full.items():
    out[n, in_core] = matrix[core_up[pairs[in_core, 0]],
                             core_lo[pairs[in_core, 1]]]
  rest = ~in_core if dense else np.ones(len(pairs), bool)
  if np.any(rest):
    out[:, rest] = blocked_log_power_sums(up, lo, pairs[rest], orders)
  if todo and dense:
    out[np.ix_(todo, in_core)] = blocked_log_power_sums(
        up, lo, pairs[in_core], orders[todo])
  return out


def blocked_log_power_sums(up: np.ndarray, lo: np.ndarray, pairs: np.ndarray,
                           orders: np.ndarray) -> np.ndarray:
  """`log_power_sums` of the row pairs (up[pairs[:, 0]], lo[pairs[:, 1]]),
  rows as given (error 0), gathered in blocks of about _BLOCK entries: the
  pairs' rows at once took 2 x 2.6 GB (80,000 pairs of 4,096 levels, RQM
  at 12 bits).

  Args:
    up, lo: [Ku, K] and [Kl, K] log rows.
    pairs: [M, 2] row indices into up and lo.
    orders: [A] Rényi orders > 1.

  Returns:
    [A, M] the log power sums, as `log_power_sums` gives them pair by pair.
  """
  out = np.empty((len(orders), len(pairs)))
  step = max(1, _BLOCK // max(up.shape[1], 1))
  for s in range(0, len(pairs), step):
    block = pairs[s:s + step]
    out[:, s:s + step] = log_power_sums(up[block[:, 0]], lo[block[:, 1]],
                                        orders, 0.0)
  return out


def _core(rows: np.ndarray, count: int, partners: np.ndarray) -> np.ndarray:
  """[count] position among the core rows (-1: not core): rows paired with
  at least 1/MATRIX_DISCOUNT of the distinct partners."""
  per_row = np.bincount(rows, minlength=count)
  core = per_row * MATRIX_DISCOUNT >= np.unique(partners).size
  return np.where(core, np.cumsum(core) - 1, -1)
