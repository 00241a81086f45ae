"""Blankets: a part β·R of each other client's noise that no input removes.

The bound for any inputs of the others (`others`, module docstring) needs,
for one other client or a block of g of them, a law R and a weight β with
P_y >= β·(δ_s(y) * R) for every input y, the shift s(y) fixed by the input
(for a block: P_y1 * ... * P_yg >= β_g·(δ_s * R_g)). This module builds
such (β, R) pairs (`Blanket`), and says where none is needed.

Where β·R comes from (`Blanket`):
* `common_part`: R ∝ min over inputs of P_y (no shift): the blanket.
* `aligned_part`: R ∝ min over vertex laws translated to a common centre.
  For a mechanism whose law is affine in the input between critical inputs,
  every input's law is a mixture of two vertex laws (the critical inputs'),
  so a block of inputs has a mixture of the blocks of vertex laws: each is
  >= β·(translated R), hence so is the mixture (a mixture of translations
  of R). For the others (each level's probability unimodal in the input,
  `secure_sum.target_pairs`' envelopes) every input's law is at least its cell's
  lower envelope, and convolution keeps the order. For RQM, 16 levels,
  Δ = c, q = 0.42 (n = 40, α = 2): β = 0.055 unshifted, 0.82 aligned.
  Blocks of g others keep more of their noise than one (summing smooths the
  laws); their laws are enumerated within `MAX_BLOCK_LAWS` and
  `MAX_BLOCK_OPERATIONS` (`block_cost`).
* `shifted_part`: R and, for each block law, a law W of integer shifts with
  P >= β·(W * R): the translation drawn at random, independently of R. A
  translation by a fraction of a level is none, but a mixture of two integer
  ones has its mean: where the laws are near translations of one another by
  fractions of a level (the quantized Gaussian at 4 bits, σ ≈ 4 levels,
  means 1.7 levels apart over the range), R keeps more of their spread than
  the aligned part can (blocks of 3: β·Var(R) 1,562 against 1,452 squared
  levels over the 99 others, of 1,668 at ±c). Built by linear programs and
  certified in log space (`shifted_part`).
* Two vertices (`two_vertices`): when the law is affine in the input on the
  whole range (one PBM trial), the sup over the others' inputs sits at ±c:
  Σ (P*O)^α (Q*O)^(1-α) is convex in each other's law, which is affine in
  that client's input, so moving the clients one at a time to the better end
  never lowers it. The ±c mixes then bound every input, with no blanket.

References (Balle et al., "The privacy blanket of the shuffle model", 2019):
docs/references.md.
"""

import dataclasses
import itertools
import math
from typing import List, Optional, Tuple

import numpy as np
from scipy import optimize
from scipy import sparse
from scipy import special


@dataclasses.dataclass(frozen=True)
class Blanket:
  """Every block of `block` other clients draws, with probability β and
  independently of the other blocks, from R translated by an amount their
  inputs fix (`others` module docstring; Balle et al. 2019's blanket,
  docs/references.md).

  Attributes:
    log_beta: log β in [-inf, 0].
    log_r: log-pmf of R over the sum of one block's levels (normalised).
    block: g >= 1, other clients per block.
    why: the construction, in words.
  """
  log_beta: float
  log_r: np.ndarray
  block: int
  why: str

  def blocks(self, num_others: int) -> int:
    """Blocks the `num_others` others make (the rest are dropped).

    Args:
      num_others: n - 1 >= 0, the other clients.

    Returns:
      floor(num_others / block).
    """
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
  of them or a mixture of them): R ∝ their elementwise minimum.

  Args:
    log_rows: [K, L] log-pmfs of one client's level (the vertex laws or the
      cells' lower envelopes).

  Returns:
    A `Blanket` with block 1: β = min(Σ_u min_i row_i(u), 1) and R the
    minimum normalised by it (β = 0 and R = [1] where the minimum is 0
    everywhere).
  """
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
  symmetric about 0 (the accountant then evaluates half the pairs).

  Args:
    log_rows: [K, L] float64 log-pmfs.
    partner: optional [K] integer array, partner[i] the row that is row i
      reversed (partner[i] = i for a self-mirrored row).

  Returns:
    [K] int64 array of shifts: row i's level y sits at y + shifts[i].
  """
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
  """(block laws, multiply-adds) of `aligned_part`.

  Args:
    num_rows: K, the vertex laws.
    length: L, levels of each.
    block: g >= 1, other clients per block.

  Returns:
    (laws, operations): the multisets of g rows, C(K + g - 1, g), and the
    multiply-adds of their direct convolutions.
  """
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
                 by_rows: bool = False, max_laws: int = MAX_BLOCK_LAWS,
                 max_operations: float = MAX_BLOCK_OPERATIONS
                 ) -> Optional[Blanket]:
  """The aligned blanket of blocks of `block` others: R ∝ the elementwise
  minimum, over every multiset of `block` rows, of the law of their sum
  translated to a common centre: each block law's own (`aligned_shifts`),
  or with `by_rows` the sum of its rows' (which keeps more of the laws'
  spread where the blocks' own alignment trades it for mass). None when the
  multisets are over `max_laws` or `max_operations`.

  Args:
    log_rows: [K, L] log-pmfs of one client's level (vertex laws or lower
      envelopes).
    block: g >= 1, other clients per block.
    by_rows: centre each block law by the sum of its rows' shifts instead
      of its own.
    max_laws: the most block laws (multisets of g rows) built.
    max_operations: the most multiply-adds their convolutions may take.

  Returns:
    A `Blanket` for blocks of g others, or None over the cost limits.
  """
  laws, ops = block_cost(*log_rows.shape, block)
  if laws > max_laws or ops > max_operations:
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


# The shifted part's linear program (`shifted_part`): at most this many
# block-law entries (multisets x levels of their sum) in all.
MAX_SHIFTED_ENTRIES = 30_000
# Entries of a block law more than this many nats below its top take no part
# in the programs: R is kept off them (it loses at most e^-this of its mass).
_SHIFT_SPAN = 40.0
# Relative error allowed for the certificate's sums (nonnegative terms, a
# few ulps each) before β is scaled below them.
_CERTIFY_MARGIN = 1e-9
# The program's coefficients below this share of their row's largest are
# dropped (`_best_r`): with them a row could span 23 decades, and HiGHS's
# dual simplex (scipy 1.9) then failed an internal assertion and aborted the
# process. Dropping them loosens the program only; the certificate
# (`certified_beta`) is computed on the exact laws for the R it returns.
_PROGRAM_RELATIVE_FLOOR = 1e-9


def _shift_matrix(weights: np.ndarray, length: int) -> sparse.csr_matrix:
  """[J·(length + width), length]: row (j, y) maps U to (W_j * U)(y), W_j =
  weights[j] on shifts 0..width."""
  count, shifts = weights.shape
  rows, cols, vals = [], [], []
  for j, s in zip(*np.nonzero(weights)):
    rows.append(j * (length + shifts - 1) + s + np.arange(length))
    cols.append(np.arange(length))
    vals.append(np.full(length, weights[j, s]))
  return sparse.csr_matrix(
      (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
      shape=(count * (length + shifts - 1), length))


def _best_r(laws: np.ndarray, usable: np.ndarray, weights: np.ndarray,
            mirrored: bool) -> Optional[np.ndarray]:
  """U = β·R maximising its second moment about its frame's centre (β·Var(R)
  where R is centred) subject to W_j * U <= P_j at every usable entry, U
  = 0 where some W_j would carry it onto an unusable one, and U unimodal
  about the centre (`shifted_part`); symmetric where the laws mirror. None
  where the program fails."""
  count, length = laws.shape
  shifts = weights.shape[1]
  size = length - shifts + 1
  op = _shift_matrix(weights, size)
  flat_ok = usable.ravel()
  # U(u) must vanish where it lands on an unusable entry.
  blocked = np.asarray(op[~flat_ok].sum(axis=0)).ravel() > 0
  scale = np.where(flat_ok, 1.0 / np.where(flat_ok, laws.ravel(), 1.0), 0.0)
  a = sparse.csr_matrix(sparse.diags(scale[flat_ok]) @ op[flat_ok])
  row_top = a.max(axis=1).toarray().ravel()   # entries are >= 0
  a.data[a.data < _PROGRAM_RELATIVE_FLOOR * np.repeat(
      row_top, np.diff(a.indptr))] = 0.0
  a.eliminate_zeros()
  moment = (np.arange(size) - (size - 1) / 2)**2
  fold = sparse.identity(size, format='csr')
  if mirrored:   # U(u) = U(size - 1 - u)
    half = (size + 1) // 2
    idx = np.minimum(np.arange(size), size - 1 - np.arange(size))
    fold = sparse.csr_matrix((np.ones(size), (np.arange(size), idx)),
                             shape=(size, half))
    blocked = np.asarray(fold.T @ blocked.astype(float)).ravel() > 0
  bounds = [(0.0, 0.0) if b else (0.0, None) for b in blocked]
  # Unimodal about the centre: U(u) <= U(u + 1) below it, U(u + 1) <= U(u)
  # above (the second moment alone would leave the centre empty).
  top = (size - 1) // 2
  steps = np.arange(size - 1)
  sign = np.where(steps < top, 1.0, -1.0)
  rise = sparse.csr_matrix(
      (np.concatenate([sign, -sign]),
       (np.concatenate([steps, steps]), np.concatenate([steps, steps + 1]))),
      shape=(size - 1, size))
  res = optimize.linprog(-(fold.T @ moment),
                         A_ub=sparse.vstack([a, rise]) @ fold,
                         b_ub=np.concatenate([np.ones(a.shape[0]),
                                              np.zeros(size - 1)]),
                         bounds=bounds, method='highs')
  if res.status != 0 or not np.any(res.x > 0):
    return None
  return np.maximum(fold @ res.x, 0.0)


def certified_beta(log_laws: np.ndarray, log_r: np.ndarray,
                   log_shifts: np.ndarray) -> float:
  """The largest log β (to _CERTIFY_MARGIN) with every law >= β·(W_j * R),
  elementwise, in log space.

  Args:
    log_laws: [J, Lg] log of the (block) laws, each at or below the exact one.
    log_r: [Lg - width] log R (normalised; -inf allowed).
    log_shifts: [J, width + 1] log W_j, each normalised: W_j's shift s puts
      R(u) at law entry u + s.

  Returns:
    log β <= 0 (-inf where some W_j * R puts mass where its law has none).
  """
  count, length = log_laws.shape
  size = log_r.size
  conv = np.full((count, length), -np.inf)
  for s in range(log_shifts.shape[1]):
    with np.errstate(invalid='ignore'):
      term = log_shifts[:, s, None] + log_r[None, :]
    conv[:, s:s + size] = np.logaddexp(conv[:, s:s + size], term)
  with np.errstate(invalid='ignore'):
    over = np.where(np.isfinite(conv), conv - log_laws, -np.inf)
  worst = float(np.max(np.nan_to_num(over, nan=np.inf)))
  return min(-worst + math.log1p(-_CERTIFY_MARGIN), 0.0)


def _initial_shifts(laws: np.ndarray, shifts: int) -> np.ndarray:
  """[J, shifts]: each law's mean, relative to the middle of the means,
  as a mixture of the two integer shifts around it (centred in 0..width)."""
  mass = laws.sum(axis=1)
  means = laws @ np.arange(laws.shape[1]) / mass
  spot = np.clip(means - (means.min() + means.max()) / 2 + (shifts - 1) / 2,
                 0.0, shifts - 1)
  low = np.minimum(np.floor(spot).astype(int), shifts - 2)
  frac = spot - low
  out = np.zeros((laws.shape[0], shifts))
  out[np.arange(len(low)), low] = 1 - frac
  out[np.arange(len(low)), low + 1] += frac
  return out


def _shifted(log_laws: np.ndarray, width: int, mirrored: bool
             ) -> Optional[Tuple[float, np.ndarray, np.ndarray]]:
  """(log β, log R, log W) for shifts 0..width: W_j from each law's mean
  (`_initial_shifts`), R from `_best_r`, β certified (`certified_beta`);
  None where the program fails."""
  top = np.max(log_laws, axis=1, keepdims=True)
  usable = log_laws >= top - _SHIFT_SPAN
  laws = np.where(usable, np.exp(log_laws), 0.0)
  weights = _initial_shifts(laws, width + 1)
  u = _best_r(laws, usable, weights, mirrored)
  if u is None:
    return None
  with np.errstate(divide='ignore'):
    log_r, log_w = np.log(u / u.sum()), np.log(weights)
  return certified_beta(log_laws, log_r, log_w), log_r, log_w


def shifted_part(log_rows: np.ndarray, block: int = 1,
                 max_laws: int = MAX_BLOCK_LAWS,
                 max_operations: float = MAX_BLOCK_OPERATIONS,
                 max_entries: int = MAX_SHIFTED_ENTRIES) -> Optional[Blanket]:
  """A blanket of blocks of `block` others whose translation is drawn at
  random: every block law P_j >= β·(W_j * R), W_j a law of integer shifts.

  The mixture argument (`others` module docstring) holds unchanged: each
  block draws from R with probability β, shifted by an independent draw
  from W_j (a mixture of the W_j of the vertex laws whose mixture its law
  is), so conditioned on who draws from R, on the shifts and on the
  remainders, the others add a constant plus R^{*M}. Any W_j and R meeting
  the inequality give a valid bound. Here W_j puts each law's mean, relative
  to the middle of the means, on the two integer shifts around it (shifts
  0..width, width the range of the means rounded up, or one more), and R
  comes from one linear program (HiGHS): β·R maximising its second moment
  about the centre (β·Var(R), what the sum keeps where it is near
  Gaussian) under W_j * (β·R) <= P_j. β is then certified in log space
  against the block laws (`certified_beta`), so the program's tolerances
  can only lower it. (Re-solving each W_j for that R and R again gained
  0.1% of β·Var(R) at 15x the time: the quantized Gaussian at 4 bits.)

  Args:
    log_rows: [K, L] log-pmfs of one client's level (vertex laws or lower
      envelopes).
    block: g >= 1, other clients per block.
    max_laws, max_operations: the cost limits of `aligned_part`.
    max_entries: the most block-law entries the programs take.

  Returns:
    A `Blanket` for blocks of g others (the larger β·Var(R) of the widths
    tried), or None over the limits or where no program succeeds.
  """
  found = shifted_certificate(log_rows, block, max_laws, max_operations,
                              max_entries)
  return None if found is None else found[0]


def shifted_certificate(log_rows: np.ndarray, block: int = 1,
                        max_laws: int = MAX_BLOCK_LAWS,
                        max_operations: float = MAX_BLOCK_OPERATIONS,
                        max_entries: int = MAX_SHIFTED_ENTRIES
                        ) -> Optional[Tuple[Blanket, np.ndarray]]:
  """`shifted_part` with its shift laws (what makes it valid, for tests).

  Args:
    log_rows, block, max_laws, max_operations, max_entries: as for
      `shifted_part`.

  Returns:
    (blanket, log W): W [multisets, width + 1], row j the shift law of the
    j-th multiset of `block` rows (`itertools.combinations_with_replacement`
    order): its law >= β·(W_j * R), shift s putting R's first entry at the
    law's entry s; or None (as `shifted_part`).
  """
  laws, ops = block_cost(*log_rows.shape, block)
  if laws > max_laws or ops > max_operations:
    return None
  log_laws, partner = _block_laws(log_rows, block)
  if log_laws.size > max_entries:
    return None
  if block > 1:
    log_laws = log_laws + math.log1p(-_BLOCK_MARGIN)
  mass = np.exp(log_laws - np.max(log_laws, axis=1, keepdims=True))
  means = mass @ np.arange(mass.shape[1]) / mass.sum(axis=1)
  first = max(1, math.ceil(means.max() - means.min() - 1e-9))
  best = None
  for width in (first, first + 1):
    if width > log_laws.shape[1] - 2:
      break
    found = _shifted(log_laws, width, partner is not None)
    if found is None or not math.isfinite(found[0]):
      continue
    log_beta, log_r, log_w = found
    # R without its zero ends: a translation, which the shifts absorb.
    kept = np.flatnonzero(np.isfinite(log_r))
    log_w = np.concatenate([np.full((log_w.shape[0], kept[0]), -np.inf),
                            log_w], axis=1)
    part = Blanket(log_beta, log_r[kept[0]:kept[-1] + 1], block,
                   'shifted common part' +
                   (f' of blocks of {block}' if block > 1 else ''))
    if best is None or spread(part, block) > spread(best[0], block):
      best = (part, log_w)
  return best


BLOCKS = (1, 2, 3)   # block sizes `blankets` offers (within the cost limits)


def blankets(log_rows: np.ndarray, num_others: int,
             max_laws: int = MAX_BLOCK_LAWS,
             max_operations: float = MAX_BLOCK_OPERATIONS) -> List[Blanket]:
  """Every construction of this module for `log_rows` (the vertex laws, or
  the cells' lower envelopes): the unshifted blanket, the aligned ones
  (both centrings) and the shifted one for blocks of BLOCKS others that the
  others fill at least once.

  Args:
    log_rows: [K, L] log-pmfs of one client's level.
    num_others: n - 1 >= 0, the other clients.
    max_laws, max_operations: the cost limits of `aligned_part`.

  Returns:
    A list of `Blanket`s: `common_part` first, then every aligned and
    shifted one within the cost limits with β > 0.
  """
  out = [common_part(log_rows)]
  for block in BLOCKS:
    if block > max(num_others, 1):
      break
    for by_rows in ((False, True) if block > 1 else (False,)):
      part = aligned_part(log_rows, block, by_rows, max_laws, max_operations)
      if part is not None and math.isfinite(part.log_beta):
        out.append(part)
    part = shifted_part(log_rows, block, max_laws, max_operations)
    if part is not None and math.isfinite(part.log_beta):
      out.append(part)
  return out


def spread(blanket: Blanket, num_others: int) -> float:
  """β·Var(R) per block times the blocks: the variance of the others' noise
  the construction keeps (its merit where the sum is near Gaussian).

  Args:
    blanket: the construction.
    num_others: n - 1 >= 0, the other clients.

  Returns:
    The kept variance, in squared levels (a float >= 0).
  """
  r = np.exp(blanket.log_r)
  k = np.arange(r.size)
  mean = float(r @ k)
  return (math.exp(blanket.log_beta) * float(r @ (k - mean)**2) *
          blanket.blocks(num_others))


def two_vertices(critical: np.ndarray, c: float) -> bool:
  """True when the critical inputs are just ±c (for a law affine on the
  whole range: one PBM trial), so the ±c mixes are the sup over any inputs.

  Args:
    critical: the mechanism's critical inputs (`Mechanism.critical_inputs`).
    c: the input bound, > 0.

  Returns:
    Whether the distinct critical inputs are -c and c (to 1e-12·c).
  """
  crit = np.unique(critical)
  return crit.size == 2 and np.allclose(crit, [-c, c], rtol=0, atol=1e-12 * c)
