"""Round RDP that named inputs attain: the lower end of ε ∈ [attained, proved].

A `Configuration` names one round's inputs: the target client's two inputs
(x, x') in each coordinate (the same pair everywhere, or k coordinates at one
pair and d - k at another, splitting the ℓ2 budget) and the other clients'
inputs (how many sit at which value, the same in every coordinate). Its round
RDP is the exact D_α of the secure sums, added over the coordinates
(independent given the inputs). The laws are built with `matrix_sums`
(proved error bounds) and Σ P^α Q^(1-α) is taken at or below its exact value,
so every figure is at most what those inputs attain. Calibration's screen
alone (`search=False`, `lower_bound`) goes further: where the others' law by
matrix products is over `secure_sum.Limits.attained_operations` (RQM at
256 levels, n = 1,000), it
comes from the tilted FFT sum with a measured, not proved, error bound
(FFT_LOG_ERROR). A screen that errs can only refuse a candidate; it never
states a privacy figure.

What the interval means: the sup over all inputs is at least every attained
figure, so no sound bound over the others' inputs goes below it. The ε
composed from the attained figures by the same route (subsampling, rounds,
conversion: each non-decreasing in every per-round value) is therefore at
most the ε any sound per-round bound gives on that route; the accountant's ε
is at most the proved end. Their ratio is the slack of our bound, not of the
route (WBK19 and the RDP-to-ε conversion are upper bounds both ends share).

Configurations searched (`search`): the target at pairs of critical inputs
(where the sup over pairs sits for mechanisms affine between them) and at
the range's ends; the others all at +c, all at the critical input next to it,
all at the one nearest 0, or half at +c and half at -c. On the ℓ2 route
(c > l2_clip/√d) every input must be a clipped update: the target moves by
(t/2, -t/2) with the budget split over coordinates (k at t_hi, d - k at
t_lo), and the others sit at values v with |v|·√d <= l2_clip, or, where
the target moves in few coordinates, at c (all, or half at +c and half at
-c) or a critical input next below it there and at 0 or l2_clip/√d in the
rest, each client's norm within l2_clip (`concentrated_inputs`; QMGeo at
4 bits of the FL table: D_2 1.645 per round, 1.582 with the others at
l2_clip/√d everywhere). `box=True` drops that constraint (inputs
anywhere in [-c, c]^d, the set the accountant's f_α covers): still at most
the accountant's bound, and larger, which is what calibration's screening
wants (`lower_bound`).

Modular sums (ddgauss, skellam: `is_modular`) take their own route
(`_modular_round_rdp`, the comment above MODULAR_LAW_LOG_ERROR): their laws
are shifts of the mechanism's n-client noise-sum law, the others at 0 (on
the lattice, where any others' inputs only translate the law), and the ℓ2
route names a split of the budget over pairs of inputs, symmetric or with
one end on the rounding lattice, at integer and fractional shifts. Their
proved per-coordinate curve is exact, but the ℓ2 route's round bound (the
chord majorant) is not attained: at the FL table's 16-bit Skellam cells it
is 7.7e-4 (r = 128) and 1.6e-3 (r = 64) above what these inputs attain at
α = 2, and 6-14% (α = 2) and 9-49% (α = 8) with coarse rounding (r = 2-8,
σ = 1 step, n = 3, d = 1,000; `tests/accounting/attained_test.py`).
"""

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_quant.accounting import matrix_sums
from tff_quant.accounting import secure_sum
from tff_quant.common import laws as laws_lib
from tff_quant.common import validation
from tff_quant.mechanisms import modular

# The multiply-adds the others' laws may take in all are a limit passed in
# (`secure_sum.Limits.attained_operations`); configurations beyond are not
# tried. Over it, calibration's screen (search=False) takes each law of the others
# from the tilted FFT sum (`laws.sum_log_pmf`, much faster than matrix
# products there: docs/performance.md). Its entries are accurate to
# ~3e-10 relative (laws._TRUST). Measured against matrix_sums' law: 1.2e-10
# in log at 99 clients, 2.5e-9 at most over 254,747 entries at 999 (6e-11 at
# the 99th percentile). FFT_LOG_ERROR carries 4x the largest. The per-
# coordinate divergence it is subtracted from is ~2e-6 at d = 61,706, so a
# margin much wider would erase the bound. Its cost is then the target
# rows' convolution with the law, FFT_ROWS·L·((n-1)(L-1)+1); over
# MAX_FFT_OPERATIONS there is no figure.
FFT_LOG_ERROR = 1e-8
FFT_ROWS = 48          # target rows of the ℓ2 route with box=True
MAX_FFT_OPERATIONS = 1e10
# The FFT route resolves the others' law down to e^-this/length and keeps
# the resolved middle: the power sums run over the outputs whose
# convolution it covers whole (a part of the sum: still a lower bound;
# what it saves: docs/performance.md).
SCREEN_TAIL = 400.0
SPLIT_POINTS = 12    # distances tried below and above t* on the ℓ2 route
CONCENTRATED = 3     # others' values above l2_clip/√d (`concentrated_inputs`)
PAIR_INPUTS = 9      # most target inputs per coordinate on the coordinate route


@dataclasses.dataclass(frozen=True)
class Configuration:
  """One round's named inputs, per coordinate.

  Attributes:
    pairs: ((coordinates, x, x'), ...): the target's two inputs in that many
      coordinates (the counts add up to d).
    others: ((clients, input), ...): the other clients, each at that input
      in every coordinate (the counts add up to n - 1).
    pair_others: None, or for each entry of `pairs` the others' inputs in
      its coordinates (as `others`; the i-th client of each listing is one
      client), where they differ between the groups; `others` is then the
      first group's.
  """
  pairs: Tuple[Tuple[int, float, float], ...]
  others: Tuple[Tuple[int, float], ...]
  pair_others: Optional[Tuple[Tuple[Tuple[int, float], ...], ...]] = None

  def others_at(self, i: int) -> Tuple[Tuple[int, float], ...]:
    """The others' inputs in the coordinates of pairs[i].

    Args:
      i: an index of `pairs`.

    Returns:
      ((clients, input), ...), the counts adding up to n - 1.
    """
    return self.others if self.pair_others is None else self.pair_others[i]

  def describe(self, c: float) -> str:
    """The inputs in units of c (the coordinate bound).

    Args:
      c: the coordinate bound, > 0.

    Returns:
      A one-line description, e.g. 'target 1 coordinate at (+1c, -1c);
      others 9 at +1c' (with per-group others: 'target 910 coordinates at
      (+1c, -1c), others 99 at +1c there, and 7282 ...').
    """
    listed = lambda others: ', '.join(f'{m} at {v / c:+.4g}c'
                                      for m, v in others if m) or 'none'
    if self.pair_others is not None:
      return 'target ' + ' and '.join(
          f'{k} coordinate{"s" * (k != 1)} at ({x / c:+.4g}c, {y / c:+.4g}c)'
          f', others {listed(self.pair_others[i])} there'
          for i, (k, x, y) in enumerate(self.pairs) if k)
    target = ' and '.join(f'{k} coordinate{"s" * (k != 1)} at '
                          f'({x / c:+.4g}c, {y / c:+.4g}c)'
                          for k, x, y in self.pairs if k)
    return f'target {target}; others {listed(self.others)}'


class AttainedRdp(dict):
  """{order: round RDP attained} with `configurations` {order: Configuration}
  (the inputs attaining each) and the coordinate bound `c` they are in."""

  def __init__(self, values: Dict[float, float],
               configurations: Dict[float, Configuration], c: float):
    super().__init__(values)
    self.configurations = configurations
    self.c = c

  def describe(self, order: float) -> str:
    """The inputs attaining the figure at `order`, in units of c.

    Args:
      order: one of the orders the figures are for (a key of this dict).

    Returns:
      `Configuration.describe` of those inputs.

    Raises:
      KeyError: `order` is not one of them.
    """
    return self.configurations[order].describe(self.c)


def _products_cost(mech, num_others: int) -> float:
  """Multiply-adds of the others' law by matrix products: L²m²/2."""
  return mech.num_levels**2 * num_others**2 / 2


def operations(mech, clients_per_round: int, fft: bool = False,
               limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS
               ) -> float:
  """Multiply-adds of one configuration's laws: L²(n-1)²/2 by matrix products
  (`matrix_sums.Powers`); with `fft`, where that is over
  `limits.attained_operations`, the FFT route's convolution of the target
  rows with the law (module constants).

  Args:
    mech: the mechanism (L = `mech.num_levels`).
    clients_per_round: n >= 1, clients in the secure sum.
    fft: allow the FFT route (calibration's screen).
    limits: the `secure_sum.Limits` (its `attained_operations`).

  Returns:
    The estimated multiply-adds (a float).
  """
  levels, others = mech.num_levels, clients_per_round - 1
  powers = _products_cost(mech, others)
  if powers <= limits.attained_operations or not fft:
    return powers
  return FFT_ROWS * levels * (others * (levels - 1) + 1)


def _others_laws(mech, num_others: int, inputs: Sequence[float],
                 budget: float, mixed: bool = True, fft: bool = False
                 ) -> List[Tuple[Tuple[Tuple[int, float], ...], np.ndarray,
                                 float, bool]]:
  """[(others, log-law of their sum, its log error, whether it is the
  resolved middle of the law only)] for every one of them at each of
  `inputs`, then (`mixed`) half at inputs[0] and half at its mirror: by
  matrix products while the multiply-adds fit `budget`; with `fft`, over
  it, by the tilted FFT sum (FFT_LOG_ERROR), resolved down to SCREEN_TAIL
  (a law it leaves unresolved inside is skipped)."""
  out, spent, powers = [], 0.0, {}
  cost = _products_cost(mech, num_others)
  half = num_others // 2
  if fft and cost > budget:
    groups = [((num_others, v),) for v in inputs]
    if mixed and half:
      groups.append(((half, inputs[0]), (num_others - half, -inputs[0])))
    for group in groups:
      parts = [(mech.log_pmf(v), m) for m, v in group]
      log_law = laws_lib.sum_log_pmf_above(
          parts, -SCREEN_TAIL - math.log(laws_lib.sum_length(parts)))[0]
      known = np.nonzero(~np.isnan(log_law))[0]   # resolved, zeros included
      middle = log_law[known[0]:known[-1] + 1]
      if middle.size < log_law.size and middle.size < mech.num_levels:
        # too short to cover one output whole: the law in full
        middle = log_law = laws_lib.sum_log_pmf_above(parts, -np.inf)[0]
      if not np.isnan(middle).any():
        out.append((group, middle, FFT_LOG_ERROR, middle.size < log_law.size))
    return out

  def law(v, m):
    if v not in powers:
      powers[v] = matrix_sums.Powers(mech.log_pmf(v))
    return powers[v](m)

  for v in inputs:
    if spent + cost > budget:
      break
    spent += cost
    out.append((((num_others, v),),) + law(v, num_others) + (False,))
  v = inputs[0]
  if mixed and half and spent + cost <= budget:
    (a, err_a), (b, err_b) = law(v, half), law(-v, num_others - half)
    conv, err = matrix_sums.convolve(a[None], err_a, b, err_b)
    out.append((((half, v), (num_others - half, -v)), conv[0], err, False))
  return out


def _pair_divergences(mech, xs: np.ndarray, ys: np.ndarray, log_law, law_err,
                      orders: np.ndarray, middle: bool = False) -> np.ndarray:
  """[orders + 1, P] lower bounds on D_α (and D∞, last row) of the secure sum
  for target pairs (xs[p], ys[p]), the others' sum having `log_law`
  (`middle`: a contiguous part of that law; then only the outputs whose
  convolution it covers whole are summed, the others' terms dropped)."""
  rows = np.stack([mech.log_pmf(x) for x in np.concatenate([xs, ys])])
  sums, err = matrix_sums.convolve(rows, 0.0, log_law, law_err)
  if middle:
    sums = sums[:, rows.shape[1] - 1:log_law.size]
  p, q = sums[:xs.size], sums[xs.size:]
  logs = matrix_sums.log_power_sums(p, q, orders, err, lower=True)
  f = np.maximum(logs / (orders[:, None] - 1), 0.0)
  with np.errstate(invalid='ignore'):   # -inf - -inf: outside both supports
    ratio = np.nan_to_num(p - q, nan=-np.inf)
  d_inf = np.maximum(np.max(ratio, axis=1) - 2 * err, 0.0)
  return np.vstack([f, d_inf[None]])


def _coordinate_route(mech, laws, dim, orders):
  """Every coordinate at the same pair of `PAIR_INPUTS` critical inputs (and
  ±c): (values [orders + 1], configurations)."""
  c = mech.input_bound
  crit = secure_sum.mirrored_critical_inputs(mech)
  pick = np.unique(np.round(np.linspace(0, len(crit) - 1, PAIR_INPUTS))
                   ).astype(int)
  points = np.union1d(crit[pick], [-c, c])
  xs, ys = (a.ravel() for a in np.meshgrid(points, points, indexing='ij'))
  keep = xs != ys
  xs, ys = xs[keep], ys[keep]
  best = np.zeros(orders.size + 1)
  configs = [None] * (orders.size + 1)
  for others, log_law, err, middle in laws:
    with np.errstate(over='ignore'):   # 1e308·d reads inf, as its ε would
      f = dim * _pair_divergences(mech, xs, ys, log_law, err, orders, middle)
    top = np.argmax(f, axis=1)
    for i, j in enumerate(top):
      if configs[i] is None or f[i, j] > best[i]:
        best[i] = f[i, j]
        configs[i] = Configuration(((dim, float(xs[j]), float(ys[j])),), others)
  return best, configs


def _l2_route(mech, laws, dim, t_star, orders, box, l2_clip=None):
  """The target at (t/2, -t/2) (with `box` also at (c, c - t)), k
  coordinates at t_hi and d - k at t_lo with k·t_hi² + (d-k)·t_lo² <= d·t*²;
  the others from one law in the k coordinates and from one in the rest,
  each client's ℓ2 norm at most `l2_clip` (k·v_hi² + (d-k)·v_lo², v the
  largest |input| of a law; any inputs with `box` or no `l2_clip`):
  (values [orders + 1], configurations)."""
  c = mech.input_bound
  ts = np.unique(np.concatenate([
      np.geomspace(t_star / 8, t_star, SPLIT_POINTS // 2, endpoint=False),
      np.linspace(t_star, 2 * c, SPLIT_POINTS // 2)]))
  best = np.zeros(orders.size + 1)
  configs = [None] * (orders.size + 1)
  starts = [ts / 2] + ([np.full(ts.size, c)] if box else [])
  xs = np.concatenate(starts)
  tables = []   # (others, largest |input|, f [orders + 1, ts], start picked)
  for others, log_law, err, middle in laws:
    f = _pair_divergences(mech, xs, xs - np.tile(ts, len(starts)), log_law,
                          err, orders, middle)
    by_start = np.stack(np.split(f, len(starts), axis=1))
    tables.append((others, max([abs(v) for _, v in others], default=0.0),
                   np.max(by_start, axis=0), np.argmax(by_start, axis=0)))
  budget = math.inf if (box or l2_clip is None) else l2_clip**2 * (1 + 1e-12)
  at = lambda pick, r, j: float(xs[pick[r, j] * ts.size + j])
  low = np.flatnonzero(ts <= t_star)
  for tl, jl in [(0.0, None)] + [(ts[j], j) for j in low]:
    for jh in np.flatnonzero(ts >= t_star):
      th = ts[jh]
      k = dim if th <= tl else math.floor(
          dim * (t_star**2 - tl**2) / (th**2 - tl**2) * (1 + 1e-12))
      k = min(max(k, 0), dim)
      for h, (o_hi, v_hi, f_hi, p_hi) in enumerate(tables):
        if k * v_hi**2 > budget:
          continue
        # Where the target does not move the others' law is immaterial:
        # theirs there is the hi group's if it fits, else 0.
        lows = (range(len(tables)) if jl is not None and k < dim else
                [None])
        for l in lows:
          v_lo = 0.0 if l is None else tables[l][1]
          if k * v_hi**2 + (dim - k) * v_lo**2 > budget:
            continue
          # Divergences near float64's top (BQ's unconditioned sums at
          # high orders) times d overflow to inf, which is their value.
          with np.errstate(over='ignore', invalid='ignore'):
            f_lo = 0.0 if l is None else (dim - k) * tables[l][2][:, jl]
            total = (k * f_hi[:, jh] if k else 0.0) + f_lo
          for r in np.flatnonzero((total > best) | np.array(
              [cf is None for cf in configs])):
            best[r] = total[r]
            x_hi = at(p_hi, r, jh)
            x_lo = at(tables[l][3], r, jl) if l is not None else 0.0
            pairs = ((k, x_hi, x_hi - th), (dim - k, x_lo, x_lo - tl))
            if l is None:
              fits = dim * v_hi**2 <= budget
              rest = o_hi if fits else ((sum(m for m, _ in o_hi), 0.0),)
            else:
              rest = tables[l][0]
            if rest == o_hi:
              configs[r] = Configuration(pairs, o_hi)
            else:
              configs[r] = Configuration(pairs, o_hi, (o_hi, rest))
  return best, configs


# --- Modular sums (`mechanisms.modular`: ddgauss, skellam) -------------------
#
# The n-client sum mod M with the target at x and the others at 0 (which round
# to 0 without randomness) has the law of J + W: J the target's stochastic
# rounding of x/γ (⌊x/γ⌋ + 1 with probability the fraction f) and W the n
# clients' noise sum mod M (`noise_sum_log_pmf(n)`), i.e.
# (1-f)·roll(W, j) + f·roll(W, j+1). Every figure below is D_α of two such
# laws for named inputs x, x', added over the coordinates (independent given
# the inputs: Rényi divergence adds over a product, Mironov 2017), with
# Σ P^α Q^(1-α) read at or below its exact value
# (`matrix_sums.log_power_sums(lower=True)`) and W's entries taken to be off
# by at most MODULAR_LAW_LOG_ERROR in log: 3x the per-entry accuracy the
# tilted FFT sum states for ddgauss's W (~3e-10 relative, `laws._TRUST`);
# Skellam's closed form is more accurate. Other clients off the lattice only
# mix shifts of these laws (joint convexity), so 0 loses nothing.
#
# On the coordinate route every coordinate takes the integer shift whose
# divergence is largest (by joint convexity no fractional shift is larger).
# On the ℓ2 route the accountant bounds the round by d·ĝ_α(S²/d), ĝ_α the
# concave majorant of chords of f_α over u = t² (`secure_sum.vector_rdp`);
# the attained end names a split of the budget instead: k coordinates at one
# kind of pair and d - k at another (`_Kind`), and one coordinate taking what
# the integer k leaves, each of x and x' a clipped update (‖x‖, ‖x'‖ <= clip,
# |x_i|, |x'_i| <= c). The kinds are shifts s (in steps γ) on a grid,
# integers and, where the laws are small enough, fractions of a step (with
# little noise the divergence of a fractional shift is far above the
# lattice's: ddgauss r = 2, σ = 0.5, n = 2, α = 2: f at 4/3 steps 5.9, the
# chord of the shifts 1 and 2 (f = 2, 8) over u 3.6), each in two forms:
# symmetric (s/2, -s/2), both ends mixing two shifts, and anchored, one end
# on the lattice, half the group at (s - b, -b) and half at (b, b - s), b the
# integer nearest s/2 (so x and x' carry the same norm). The best split at
# each rung of `secure_sum.order_ladder` is then evaluated at every order,
# and each order takes the best of them (with the box, `round_rdp(box=True)`:
# ‖x - x'‖ <= S alone, either anchored end alone).
MODULAR_LAW_LOG_ERROR = 1e-9
MODULAR_SHIFTS = 512    # every integer shift up to 2r searched while 2r <= this
MODULAR_NEAR = 16       # else the shifts within this of t*/γ, and
MODULAR_FAR = 48        # this many more, geometric from 1 to 2r
MODULAR_FRACTIONS = 16  # most fractional shifts per step, where they fit in
MODULAR_ENTRIES = 2**23  # law entries (pairs x M) the fractions may take
_MODULAR_ROWS = 32      # law pairs per power-sum call (memory: rows x M)


def is_modular(mech) -> bool:
  """Whether `mech` is a modular sum (`mechanisms.modular`), whose attained
  end comes from `_modular_round_rdp`.

  Args:
    mech: a mechanism.

  Returns:
    True for `modular.ModularNoiseMechanism` subclasses (ddgauss, skellam).
  """
  return isinstance(mech, modular.ModularNoiseMechanism)


def _law_key(mech, x: float, y: float) -> Tuple[int, float, float]:
  """(j_x - j_y, f_x, f_y) of the target's stochastic rounding at x and at y
  (`ModularNoiseMechanism._rounding`, the mechanism's own): the pair of sum
  laws up to a common translation on Z_M, which D_α does not see."""
  jx, fx = mech._rounding(x)   # pylint: disable=protected-access
  jy, fy = mech._rounding(y)   # pylint: disable=protected-access
  return jx - jy, float(fx), float(fy)


def _mixed(log_w: np.ndarray, shift: int, f: float) -> np.ndarray:
  """log((1-f)·roll(W, shift) + f·roll(W, shift + 1))."""
  with np.errstate(divide='ignore'):
    return np.logaddexp(
        math.log1p(-f) + np.roll(log_w, shift) if f < 1 else -np.inf,
        math.log(f) + np.roll(log_w, shift + 1) if f > 0 else -np.inf)


def modular_divergences(log_w: np.ndarray,
                        keys: Sequence[Tuple[int, float, float]],
                        orders: np.ndarray, err: float) -> np.ndarray:
  """Lower bounds on D_α(P‖Q) (and D∞) for law pairs of a modular sum.

  For key (j, f_x, f_y): P = (1-f_x)·roll(W, j) + f_x·roll(W, j+1) and Q =
  (1-f_y)·W + f_y·roll(W, 1), the sum's laws with the target at two inputs
  (`_law_key`). D_α = log Σ P^α Q^(1-α) / (α-1) (Mironov 2017, Def. 3), the
  power sum at or below its exact value (`matrix_sums.log_power_sums`,
  lower=True) for W's entries off by at most `err` in log; D∞ = max log P/Q
  - 2·err.

  Args:
    log_w: [M] log-pmf of the n clients' noise sum mod M.
    keys: law pairs as (shift, f_x, f_y).
    orders: [A] finite orders > 1.
    err: a bound on |log W - exact| at every entry, >= 0 (it covers the
      mixing's own rounding too, a few units of 2^-53).

  Returns:
    [A + 1, len(keys)] float64: D_α at each order, then D∞; each >= 0 and at
    most the exact divergence of the pair.
  """
  out = np.empty((orders.size + 1, len(keys)))
  for start in range(0, len(keys), _MODULAR_ROWS):
    block = keys[start:start + _MODULAR_ROWS]
    p = np.stack([_mixed(log_w, j, fx) for j, fx, _ in block])
    q = np.stack([_mixed(log_w, 0, fy) for _, _, fy in block])
    logs = matrix_sums.log_power_sums(p, q, orders, err, lower=True)
    cols = slice(start, start + len(block))
    out[:-1, cols] = np.maximum(logs / (orders[:, None] - 1), 0.0)
    with np.errstate(invalid='ignore'):   # -inf - -inf: outside both supports
      ratio = np.nan_to_num(p - q, nan=-np.inf)
    out[-1, cols] = np.maximum(np.max(ratio, axis=1) - 2 * err, 0.0)
  return out


@dataclasses.dataclass(frozen=True)
class _Kind:
  """A pair of target inputs for a group of coordinates, in steps γ.

  Attributes:
    shift: s = |x - x'| in steps, in [0, 2r].
    form: 'symmetric': (s/2, -s/2) in every coordinate of the group;
      'anchored': half the group at (s - b, -b) and half at (b, b - s), b the
      integer nearest s/2 (one end on the lattice, x and x' of equal norm);
      'up' / 'down' (the box only): (s - b, -b) / (b, b - s) alone.
  """
  shift: float
  form: str

  def _ends(self) -> List[Tuple[float, float]]:
    s = self.shift
    if self.form == 'symmetric':
      return [(s / 2, 0.0 - s / 2)]   # 0.0 - 0.0 is +0.0
    b = float(math.floor(s / 2 + 0.5))
    up, down = (s - b, 0.0 - b), (b, b - s)
    if self.form == 'up' or up == down:
      return [up]
    return [down] if self.form == 'down' else [up, down]

  def parts(self, gamma: float) -> List[Tuple[float, float, float]]:
    """[(weight, x, x')]: the share of the group's coordinates at each pair
    (the weights add up to 1)."""
    ends = self._ends()
    return [(1 / len(ends), x * gamma, y * gamma) for x, y in ends]

  def entries(self, count: int, gamma: float
              ) -> List[Tuple[int, float, float]]:
    """The group's `Configuration.pairs` entries (count, x, x') for `count`
    coordinates (an odd count puts the extra one at the first pair)."""
    ends = self._ends()
    counts = [count - count // 2, count // 2] if len(ends) == 2 else [count]
    return [(m, x * gamma, y * gamma) for m, (x, y) in zip(counts, ends)]

  def cost(self, box: bool) -> float:
    """Mean squared norm per coordinate (steps²) the group adds to each of x
    and x'; with `box`, ‖x - x'‖²/4 (the budget is then the difference's)."""
    if box:
      return self.shift**2 / 4
    return float(np.mean([(x * x + y * y) / 2 for x, y in self._ends()]))


def _norms(groups, gamma: float) -> Tuple[float, float]:
  """(‖x‖², ‖x'‖²) in steps² over `groups` ((count, x, x') entries)."""
  return (sum(k * (x / gamma)**2 for k, x, _ in groups),
          sum(k * (y / gamma)**2 for k, _, y in groups))


def _spent(groups, gamma: float, box: bool) -> float:
  """What `groups` take of the budget (steps²): the larger of ‖x‖², ‖x'‖²;
  with `box`, ‖x - x'‖²/4."""
  if box:
    return sum(k * ((x - y) / gamma)**2 for k, x, y in groups) / 4
  return max(_norms(groups, gamma))


def _modular_shifts(mech, s_star: Optional[float]) -> np.ndarray:
  """The shifts (in steps, in (0, 2r]) the search takes.

  Integers: all of them while 2r <= MODULAR_SHIFTS, else MODULAR_NEAR each
  side of `s_star` (t*/γ; None: the coordinate route) and MODULAR_FAR
  geometric from 1 to 2r. With `s_star`, also s_star and, where the laws
  fit MODULAR_ENTRIES, F = 2, 4, ..., MODULAR_FRACTIONS fractions of every
  step below 2r and 2^-4 ... 2^-10 steps.
  """
  top = 2 * mech.steps
  if top <= MODULAR_SHIFTS:
    ints = np.arange(1, top + 1, dtype=np.float64)
  else:
    picked = [np.round(np.geomspace(1, top, MODULAR_FAR)), [top]]
    if s_star is not None:
      near = math.floor(s_star)
      picked.append(np.arange(near - MODULAR_NEAR + 1, near + MODULAR_NEAR + 1))
    ints = np.unique(np.concatenate(picked))
    ints = ints[(ints >= 1) & (ints <= top)]
  if s_star is None:
    return ints
  out = [ints, [min(s_star, top)]]
  fractions = 1
  while (fractions < MODULAR_FRACTIONS and
         3 * 2 * fractions * ints.size * mech.modulus <= MODULAR_ENTRIES):
    fractions *= 2
  if fractions > 1:
    steps = np.concatenate([[0.0], ints[ints < top]])
    out += [(steps[:, None] + np.arange(1, fractions)[None, :] /
             fractions).ravel(), 2.0**-np.arange(4, 11)]
  return np.unique(np.concatenate(out))


def _best_split(values: np.ndarray, costs: np.ndarray, dim: int,
                budget: float) -> Tuple[int, int, int]:
  """(p, k, q): k coordinates at kind p and dim - k at kind q, the largest
  k·v_p + (dim - k)·v_q with k·c_p + (dim - k)·c_q <= budget.

  Args:
    values: [K] per-coordinate values of the kinds (one kind: no move, 0).
    costs: [K] their costs per coordinate (that kind: 0).
    dim: d, coordinates.
    budget: the most the costs may add up to.

  Returns:
    The split's (p, k, q).
  """
  v, cp = values[:, None], costs[:, None]
  vq, cq = values[None, :], costs[None, :]
  with np.errstate(divide='ignore', invalid='ignore'):
    k = np.floor((budget - dim * cq) / (cp - cq))
  alone = dim * cp <= budget   # p in every coordinate
  k = np.where(alone, dim, np.where(cp > cq, k, -1))
  k = np.where(dim * cq <= budget, np.clip(k, 0, dim), -1)
  total = np.where(k >= 0, k * v + (dim - k) * vq, -np.inf)
  p, q = np.unravel_index(int(np.argmax(total)), total.shape)
  return int(p), int(k[p, q]), int(q)


def _split_groups(kinds, p: int, k: int, q: int, dim: int, gamma: float,
                  budget: float, box: bool):
  """The `Configuration.pairs` entries of k coordinates at kinds[p] and
  dim - k at kinds[q], k lowered until they fit `budget` exactly (an odd
  anchored group is one coordinate off balance)."""
  def groups(k):
    return [g for g in kinds[p].entries(k, gamma) +
            kinds[q].entries(dim - k, gamma) if g[0]]
  while k > 0 and _spent(groups(k), gamma, box) > budget:
    k -= 1
  out = groups(k)
  return out if _spent(out, gamma, box) <= budget else []


def _with_remainder(mech, groups, gamma: float, budget: float, box: bool):
  """`groups` with one coordinate of the last group moved to the symmetric
  pair (t/2, -t/2), t the largest distance (<= 2r steps) the budget leaves
  it; None where that is no farther."""
  *head, (m, x, y) = groups
  rest = head + ([(m - 1, x, y)] if m > 1 else [])
  left = budget - _spent(rest, gamma, box)
  t = min(2 * math.sqrt(max(left, 0.0)), 2 * mech.steps) * (1 - 1e-12)
  if t <= abs(x - y) / gamma * (1 + 1e-9):
    return None
  return rest + [(1, t / 2 * gamma, 0.0 - t / 2 * gamma)]


def _modular_round_rdp(mech, finite: np.ndarray, clients_per_round: int,
                       dim: int, l2_clip: Optional[float], box: bool
                       ) -> AttainedRdp:
  """`round_rdp` for a modular sum (the comment above MODULAR_LAW_LOG_ERROR):
  the others at 0; on the coordinate route the target at the integer shift
  of largest divergence in every coordinate, on the ℓ2 route the best split
  of the budget over `_Kind`s found at each rung, evaluated at every order.

  Args:
    mech: a `modular.ModularNoiseMechanism` (input bound c, r steps).
    finite: the distinct finite integer orders >= 2 (`_finite_orders`).
    clients_per_round: n >= 1, clients in the secure sum.
    dim: d >= 1, coordinates per client.
    l2_clip: each update's ℓ2 bound (None: the coordinate route).
    box: on the ℓ2 route, ‖x - x'‖ <= 2·l2_clip alone (the accountant's
      set) instead of clipped updates.

  Returns:
    An `AttainedRdp` over `finite` and math.inf, each figure the exact
    round D_α of its configuration (summed over the d coordinates) or below.

  Raises:
    modular.UnresolvableError: W has unresolved entries (as the accountant).
  """
  log_w = mech.noise_sum_log_pmf(clients_per_round)
  if np.any(np.isnan(log_w)):
    raise modular.UnresolvableError(
        f'The noise-sum law on Z_{mech.modulus} has unresolved entries: raise '
        'noise_std or lower num_levels.')
  gamma, c, err = mech.gamma, mech.input_bound, MODULAR_LAW_LOG_ERROR
  others = ((clients_per_round - 1, 0.0),) if clients_per_round > 1 else ()
  if l2_clip is None or secure_sum.coordinate_route_applies(mech, dim,
                                                            l2_clip):
    ends = [_Kind(j, 'up').parts(gamma)[0][1:]
            for j in _modular_shifts(mech, None)]
    per = modular_divergences(log_w, [_law_key(mech, *e) for e in ends],
                              finite, err)
    best = np.argmax(per, axis=1)
    configs = [Configuration(((dim,) + ends[i],), others) for i in best]
    return _as_attained(dim * per[np.arange(per.shape[0]), best], configs,
                        finite, c)
  s_star = min(2 * l2_clip / math.sqrt(dim), 2 * c) / gamma
  budget = (l2_clip / gamma)**2
  forms = ('symmetric', 'up', 'down') if box else ('symmetric', 'anchored')
  kinds = [_Kind(0.0, 'symmetric')] + [
      _Kind(float(s), form) for s in _modular_shifts(mech, s_star)
      for form in forms]
  keys = list(dict.fromkeys(_law_key(mech, x, y) for kind in kinds
                            for _, x, y in kind.parts(gamma)))
  column = {key: i for i, key in enumerate(keys)}
  rungs = np.array([a for a in secure_sum.order_ladder(finite.tolist())
                    if math.isfinite(a)], np.float64)
  at_rungs = modular_divergences(log_w, keys, rungs, err)
  values = np.stack([sum(w * at_rungs[:, column[_law_key(mech, x, y)]]
                         for w, x, y in kind.parts(gamma))
                     for kind in kinds], axis=1)
  costs = np.array([kind.cost(box) for kind in kinds])
  candidates = [((dim, 0.0, 0.0),)]   # the target not moving: D = 0
  for row in values:
    p, k, q = _best_split(row, costs, dim, budget)
    groups = _split_groups(kinds, p, k, q, dim, gamma, budget, box)
    if groups:
      candidates.append(tuple(groups))
      more = _with_remainder(mech, groups, gamma, budget, box)
      if more:
        candidates.append(tuple(more))
  candidates = list(dict.fromkeys(candidates))
  keys = list(dict.fromkeys(_law_key(mech, x, y) for groups in candidates
                            for _, x, y in groups))
  column = {key: i for i, key in enumerate(keys)}
  per_key = modular_divergences(log_w, keys, finite, err)
  totals = np.stack([sum(m * per_key[:, column[_law_key(mech, x, y)]]
                         for m, x, y in groups) for groups in candidates],
                    axis=1)
  best = np.argmax(totals, axis=1)
  configs = [Configuration(candidates[i], others) for i in best]
  return _as_attained(totals[np.arange(totals.shape[0]), best], configs,
                      finite, c)


def others_inputs(mech, bound: float) -> List[float]:
  """Values for the others, each in every coordinate, |v| <= `bound`: the
  bound, the critical input next below it, and the one nearest 0.

  Args:
    mech: the mechanism (its mirrored critical inputs are searched).
    bound: the largest value an other client may send, > 0.

  Returns:
    Up to three distinct floats, `bound` first.
  """
  crit = secure_sum.mirrored_critical_inputs(mech)
  inside = crit[(crit < bound * (1 - 1e-12)) & (crit >= 0)]
  out = [bound]
  if inside.size:
    out += [float(inside.max()), float(inside.min())]
  return list(dict.fromkeys(out))


def concentrated_inputs(mech, bound: float) -> List[float]:
  """Values above `bound` for the others where the target moves in few
  coordinates (`_l2_route`): c and the critical inputs next below it,
  CONCENTRATED of them, then 0 (their value elsewhere).

  Args:
    mech: the mechanism (its mirrored critical inputs are searched).
    bound: l2_clip/√d, the others' value in every coordinate.

  Returns:
    Distinct floats in (bound, c], largest first, then 0.0.
  """
  c = mech.input_bound
  crit = secure_sum.mirrored_critical_inputs(mech)
  above = crit[(crit > bound * (1 + 1e-12)) & (crit < c * (1 - 1e-12))]
  out = [c] + sorted(above.tolist(), reverse=True)
  return list(dict.fromkeys(out[:CONCENTRATED])) + [0.0]


def applies(mech, clients_per_round: int, fft: bool = False,
            limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS) -> bool:
  """True when the search runs: the divergences come from the accountant's
  search over inputs (not a closed form, not a central mechanism) and one
  configuration's laws fit `limits.attained_operations` (by matrix
  products) or, with `fft`, MAX_FFT_OPERATIONS (by the FFT route;
  `operations`); or `mech` is a modular sum (`is_modular`) and not `fft`:
  its named inputs' laws are shifts of the mechanism's own noise-sum law
  (`_modular_round_rdp`), which calibration's screen does not take (the
  accountant's per-coordinate curve is exact there).

  Args:
    mech: the mechanism.
    clients_per_round: n >= 1, clients in the secure sum.
    fft: allow the FFT route (calibration's screen).
    limits: the `secure_sum.Limits` (its `attained_operations`).

  Returns:
    Whether `round_rdp` (with search=not fft) returns figures for `mech`.
  """
  if is_modular(mech):
    return not fft
  if mech.central or mech.has_exact_divergences:
    return False
  if _products_cost(mech, clients_per_round - 1) <= limits.attained_operations:
    return True
  return fft and operations(mech, clients_per_round, fft,
                            limits) <= MAX_FFT_OPERATIONS


def _finite_orders(orders: Sequence[float]) -> np.ndarray:
  """The distinct finite orders, sorted, as integers >= 2 (math.inf dropped).

  Raises:
    TypeError: an order not a number.
    ValueError: a finite order below 2, or none given.
  """
  finite = np.array(sorted(set(int(validation.check_number('orders', a, 2))
                               for a in orders if math.isfinite(a))))
  if not finite.size:
    raise ValueError('`orders` must hold at least one finite order >= 2.')
  return finite


def _as_attained(values: np.ndarray, configs: list, finite: np.ndarray,
                 c: float) -> AttainedRdp:
  """The route's values and configurations as an `AttainedRdp`, D∞ raised
  to the largest D_α (D∞ >= every D_α)."""
  keys = [float(a) for a in finite] + [math.inf]
  rdp = {k: float(v) for k, v in zip(keys, values)}
  top = max(rdp, key=rdp.get)   # D∞ >= every D_α
  if rdp[math.inf] < rdp[top]:
    configs[-1] = configs[keys.index(top)]
    rdp[math.inf] = rdp[top]
  return AttainedRdp(rdp, dict(zip(keys, configs)), c)


def round_rdp(mech, orders: Sequence[float], clients_per_round: int,
              dim: int = 1, l2_clip: Optional[float] = None,
              box: bool = False, search: bool = True,
              limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS
              ) -> Optional[AttainedRdp]:
  """{order: the largest round RDP the searched configurations attain} for
  integer orders >= 2 (math.inf too), each with the inputs that attain it
  (module docstring); None where the search does not apply (`applies`).

  Args:
    mech: the mechanism each coordinate goes through (input bound c).
    orders: Rényi orders >= 2 (finite ones truncated to integers), math.inf
      allowed (always reported).
    clients_per_round: n >= 1, clients in the secure sum.
    dim: d >= 1, coordinates per client.
    l2_clip: each update's ℓ2 bound, > 0 (None: every coordinate may move
      end to end, the coordinate route).
    box: on the ℓ2 route, inputs anywhere in [-c, c]^d (what the
      accountant's bound covers) instead of clipped updates.
    search: every configuration of the module docstring; False: the others
      all at the largest value only (one law: calibration's screening), by
      the FFT route where matrix products are over
      `limits.attained_operations` (module docstring).
    limits: the `secure_sum.Limits` (its `attained_operations`).

  Returns:
    An `AttainedRdp` {order: round RDP (float >= 0, summed over the d
    coordinates)} over the distinct finite orders and math.inf, each a
    lower bound on what its configuration attains; or None.

  Raises:
    TypeError: `clients_per_round` or `dim` not an integer, or `l2_clip` or
      an order not a number.
    ValueError: `clients_per_round` or `dim` < 1, `l2_clip` <= 0, a finite
      order < 2, or no finite order.
  """
  validation.check_integer('clients_per_round', clients_per_round, 1)
  validation.check_integer('dim', dim, 1)
  validation.check_optional(validation.check_positive, 'l2_clip', l2_clip)
  finite = _finite_orders(orders)
  if not applies(mech, clients_per_round, fft=not search, limits=limits):
    return None
  if is_modular(mech):
    return _modular_round_rdp(mech, finite, clients_per_round, dim, l2_clip,
                              box)
  c = mech.input_bound
  l2_route = l2_clip is not None and not secure_sum.coordinate_route_applies(
      mech, dim, l2_clip)
  bound = c if (box or not l2_route) else l2_clip / math.sqrt(dim)
  if clients_per_round == 1:
    laws = [((), np.zeros(1), 0.0, False)]
  else:
    inputs = others_inputs(mech, bound) if search else [bound]
    laws = _others_laws(mech, clients_per_round - 1, inputs,
                        limits.attained_operations, mixed=search,
                        fft=not search)
    if search and l2_route and not box:
      # The others above l2_clip/√d where the target moves in few
      # coordinates, within what the first laws left of the budget.
      spent = len(laws) * _products_cost(mech, clients_per_round - 1)
      extra = [v for v in concentrated_inputs(mech, bound) if v not in inputs]
      laws += _others_laws(mech, clients_per_round - 1, extra,
                           limits.attained_operations - spent, mixed=True)
  if l2_route:
    values, configs = _l2_route(mech, laws, dim,
                                min(2 * l2_clip / math.sqrt(dim), 2 * c), finite,
                                box, l2_clip)
  else:
    values, configs = _coordinate_route(mech, laws, dim, finite)
  return _as_attained(values, configs, finite, c)
