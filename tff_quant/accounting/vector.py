"""The ℓ2 route: round RDP of a d-coordinate update bounded in ℓ2 norm, not per coordinate.

A client's update x lies in [-c, c]^d (c = the mechanism's input bound) and its
ℓ2 norm is at most l2_clip; replacing the client moves it by at most
S = 2·l2_clip in ℓ2 (coordinate clipping is 1-Lipschitz, so it never widens a
difference). The d coordinates go through the secure sum independently, so
round RDP = Σ_j D_α(coordinate j) <= Σ_j f_α(t_j), where t_j = |x_j - x'_j|
<= 2c, Σ t_j² <= S², and

  f_α(t) = sup over target pairs |x - x'| <= t in [-c, c], and the n-1 other
           clients' inputs, of D_α(secure sum | x || secure sum | x').

With ĝ_α the least concave majorant of u ↦ f_α(√u) on [0, 4c²] (non-decreasing
because f is), Jensen gives Σ_j f_α(t_j) <= d·ĝ_α(min(S²/d, 4c²)). When
c <= l2_clip/√d this is d·f_α(2c), the coordinate route; with c = k·l2_clip/√d
(random rotation, k ≈ 2-4) it charges each coordinate a fraction of the range.
α = ∞ composes the same way (D∞ adds over independent coordinates).

f_α is evaluated so the result is an upper bound, never interpolated below it:
* t on a grid t_1 < ... < t_G = 2c; f is non-decreasing, so on (t_{s-1}, t_s]
  it is at most f̄(t_s) = the sup over pairs at distance <= t_s. For vertex
  targets on an interval free of critical-input distances ("breakpoints", put
  on the grid by `with_breakpoints`), exp((α-1)f) lies below the chord of its
  end values (`DivergenceCurve`): 35-40% less round RDP than the step bound for
  RQM at 24 points. The majorant is taken of that bound, stepped at sub-steps
  (left ends included).
* Targets, when the mechanism's pmf is affine in x between consecutive critical
  inputs and continuous (`piecewise_affine`: RQM, BQ, QMGeo with full support):
  exp((α-1)D_α) is jointly convex in the pair of laws and the sum's law is
  affine in the target's pmf, so over the polygon {|x - x'| <= t} ∩ (segment ×
  segment) the sup sits at a vertex: a pair of critical inputs, or (b, b ± t),
  (b ± t, b) for a critical input b. Exact at every grid t.
* Sums that reduce to a simpler one (`Mechanism.sum_reduction`), for any
  inputs of the others: PBM's output is a function of m - 1 independent
  Bernoulli trials at the same input, so the server's view is a function of
  the m - 1 per-trial secure sums (data processing) and f_α <= (m - 1)·f_α of
  one trial (Rényi divergence adds over independent releases), each affine in
  x, so exact. Tight to first order where the sum is near Gaussian: PBM 16
  levels, θ = 0.001, n = 100: 2.4049e-6 against 2.4000e-6 for the exact ±c
  mixes (α = 2, t = 2c). BQ's output is a rounding plus input-free
  Binomial(m, 1/2) noise, so dropping the others' rounded inputs (data
  processing) leaves one client with Binomial(n·m, 1/2) noise: exact (attained
  with the others on the rounding grid).
* Targets otherwise (quantized Gaussian, randomized projection): the range
  is cut into cells whose ends include every critical input; each level's
  probability is unimodal in x with its peak at a critical input, so on a cell
  it is at most the larger and at least the smaller end value. Replacing P by
  that upper envelope and Q by the lower one only increases Σ P^α Q^(1-α)
  (α > 1), before and after convolving with the others' law.
  Both of these add N(0, σ²) before input-free processing, so one client's
  Gaussian D_α = α t²/(2σ²) bounds the sum for any others (data processing;
  `Mechanism.local_divergences`, for the randomized projection also its
  randomized response's): the curve takes the smaller at each grid point, and
  the local bound alone where the search is over MAX_OPERATIONS (instant,
  where a sub-sum's search, below, costs up to the limit per evaluation). It
  ignores the others' noise (about n× too much noise where that dominates).
* Sums too costly to search (over MAX_OPERATIONS): the n-client sum is the
  sum of the target and n'-1 others plus the remaining others' independent
  outputs, so by data processing f_α(n) <= f_α(n') for every n' <= n, for any
  inputs of the others (or under the same ±c assumption). The largest n'
  whose search fits is searched instead (`affordable_clients`) by mechanisms
  without a closed-form local bound; n' = 1 is one client's own output.
  Loose by about n/n' where the others' noise dominates, but finite and
  proved where the search used to be refused.
* Others (default, others='any'): any inputs in [-c, c], proved. Each
  other client (or block of g others) holds, with probability β, an
  independent draw from a law R translated by an amount its inputs fix
  (`accounting.others`: the blanket, and the aligned blankets of blocks of
  1-3 others), so Σ (P*O)^α (Q*O)^(1-α) <= Σ_m P(M = m)·E_m,
  M ~ Binomial(blocks, β), E_m the target pair's with m copies of R added
  (`others_mixture`; joint convexity, translation invariance, data
  processing). E_m does not increase in m, so counts are bounded in groups
  by their first, refined where a group matters; a group never evaluated is
  bounded by (α-1)·D∞ of the pair. Measured against what named inputs attain
  (`accounting.attained`; n = 10 and 40, α = 2 and 8, t = 2c): RQM 16
  levels, Δ = c, q = 0.42, 1.10-1.43x (the blanket alone: 1.4-7.4x);
  QMGeo 8 levels, p = 0.5, 1.07-2.46x; PBM (per trial, `others.two_vertices`:
  the ±c mixes bound any others) 1.01-1.02x.
  For a mechanism that mirrors its levels R is symmetric, so a target pair
  and its mirror image have the same sums: one of each is evaluated
  (`_mirror_classes`). Up to MATRIX_LEVELS levels, R^{*m}, the target rows'
  sums with it and the pairs' power sums are matrix products
  (`matrix_sums`), each with a proved bound on its rounding that the power
  sums add: what is read is at or above the exact value of the laws.
* On a lattice of critical inputs (equally spaced: QMGeo's levels) the grid
  is every breakpoint (`l2_grid`): b ± t is then a critical input, so every
  target pair is a pair of critical inputs (all of them: one matrix product
  per order and count) and every interval takes the chord.
* Others with others='extremes': every mix of the n-1 others at ±c, the same
  family as `divergence.renyi_divergence_of_sum`: an assumption. Mixes are
  bounded in groups (`split_groups`): for k in [k0, k1] others at +c, the
  others' law is T * S_k with T = k0 at +c and n-1-k1 at -c, so by data
  processing D(P*T || Q*T) bounds every k of the group. An exhaustive search
  over every multiset of critical inputs for the others and every target pair
  (tested for n <= 3) finds no worse case for RQM, PBM and QMGeo at finite
  orders; no proof exists.
* D∞ uses n = 1 (the sum's D∞ is at most the target's local D∞ by data
  processing), so it needs no assumption on the others.
"""

from concurrent import futures
import contextlib
import contextvars
import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy import special

from tff_quant.accounting import divergence
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import others as others_lib
from tff_quant.common import validation
from tff_quant.mechanisms import base as mech_base

DEFAULT_T_POINTS = 48      # distance grid: half geometric from 2c·1e-3, half linear
DEFAULT_CELLS = 64         # cells per [-c, c] for the envelope bound
_TIE = 1e-9                # breakpoints this close (relative) to a distance sit on it
# Refuse (before allocating) evaluations above this many elementary log-domain
# operations (~1 minute of numpy on one core).
MAX_OPERATIONS = 3e10
# Refuse (before allocating) target pairs whose laws would take more than this
# many bytes: the upper and lower rows and a temporary of that size (BQ at 16
# bits: 73 rows of 6.6e6 levels, 3.6 GB each, killed the process for memory).
MAX_BYTES = 3 * 2**30


OTHERS = ('any', 'extremes')   # what the accountant assumes of the others' inputs


def check_others(others: str) -> None:
  """`others` names one of OTHERS."""
  if others not in OTHERS:
    raise ValueError(f'`others` must be one of {OTHERS}, got {others!r}.')


class CostError(ValueError):
  """An evaluation refused before it starts: its estimated cost exceeds MAX_OPERATIONS."""


def distance_grid(c: float, t_points: int) -> np.ndarray:
  """t_1 < ... < t_G = 2c: geometric near 0 (where ĝ's step error matters), then linear."""
  validation.check_integer('t_points', t_points, 4)
  half = t_points // 2
  geo = 2 * c * np.geomspace(1e-3, 1.0, half, endpoint=False)
  lin = np.linspace(2 * c / (t_points - half), 2 * c, t_points - half)
  return np.unique(np.concatenate([geo, lin]))


@dataclasses.dataclass
class TargetPairs:
  """Candidate target pairs and the laws (or envelopes) they stand for.

  Row r of the upper (lower) laws is log Σ_i weights[r, i] exp(basis[i]): the
  sum's law is linear in the target's pmf, so only the basis rows are
  convolved with the others' law.

  Args:
    basis: [K, L] log-pmfs (or log envelopes).
    upper_weights, lower_weights: [R, K] non-negative mixing weights.
    pairs: [M, 2] indices (into upper rows, into lower rows).
    distance: [M] the least |x - x'| a pair stands for.
    method: 'vertices' (exact) or 'envelopes' (cell bounds).
    symmetric: the candidate set is closed under x -> -x, row r of the
      upper (lower) laws stands for the mirror image of row R-1-r, and the
      mechanism mirrors its levels there: so mixes k and n-1-k give the same
      sup, and against a symmetric others' law a pair and its mirror image
      the same sums (`_mirror_classes`).
    breakpoints: for 'vertices', every distance between two critical inputs:
      between consecutive ones f_α is a max of convex functions (`convex_on`).
  """
  basis: np.ndarray
  upper_weights: np.ndarray
  lower_weights: np.ndarray
  pairs: np.ndarray
  distance: np.ndarray
  method: str
  symmetric: bool
  breakpoints: Optional[np.ndarray] = None


def _reversal_invariant(log_rows: np.ndarray) -> bool:
  """log_rows equals itself reversed along every axis, up to rounding (the
  same zeros, finite entries within 1e-12)."""
  flipped = np.flip(log_rows)
  finite = np.isfinite(log_rows)
  return (np.array_equal(finite, np.isfinite(flipped)) and
          np.allclose(log_rows[finite], flipped[finite], rtol=0, atol=1e-12))


def _mirrored(mech, xs: np.ndarray, rows: np.ndarray) -> bool:
  """xs == -xs as a set and log_pmf(-x) is log_pmf(x) with the levels reversed."""
  return np.array_equal(np.sort(-xs), xs) and _reversal_invariant(rows)


def mirrored_critical_inputs(mech) -> np.ndarray:
  """The mechanism's critical inputs in [-c, c], mirrored (extra breakpoints are
  harmless; symmetry halves the others' mixes), rounding twins (an input and
  its mirror's mirror, ~1e-16 apart) merged within _TIE·2c: one target row each.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its `critical_inputs`).

  Returns:
    The sorted inputs, symmetric about 0, ±c included where critical.
  """
  c = mech.input_bound
  half = np.unique(np.abs(np.clip(mech.critical_inputs(), -c, c)))
  half = half[np.concatenate([[True], np.diff(half) > _TIE * 2 * c])]
  return np.union1d(-half, half)


_PAIRWISE_INPUTS = 4096   # critical inputs whose distances are taken pairwise


def _breakpoints(crit: np.ndarray, c: float) -> np.ndarray:
  """Distinct positive distances between critical inputs; rounding twins
  (a mirrored input and the mechanism's own differ by ~1e-16) merged, within
  _TIE relative (on such a sliver the chord is off by < f·_TIE).

  Over _PAIRWISE_INPUTS inputs (RQM at 16 bits: 52,430, whose K² distances
  would take 20 GB) the inputs must be a lattice with its two ends apart
  (`mirrored_critical_inputs` of a levels grid and ±c): then the distances are the
  lattice's multiples and each end's distance to every input, in O(K);
  otherwise ValueError before anything is allocated."""
  if crit.size > _PAIRWISE_INPUTS:
    inner = crit[1:-1]
    if not _on_lattice(inner):
      raise ValueError(f'{crit.size} critical inputs off a lattice: their '
                       f'pairwise distances would take {crit.size**2 * 8 / 2**30:.0f}'
                       ' GB; use fewer levels.')
    step = (inner[-1] - inner[0]) / (inner.size - 1)
    gaps = np.concatenate([step * np.arange(1, inner.size),
                           np.abs(crit[0] - crit), np.abs(crit[-1] - crit)])
  else:
    gaps = np.abs(crit[:, None] - crit[None, :]).ravel()
  gaps = np.unique(gaps)
  gaps = gaps[gaps > _TIE * 2 * c]
  return gaps[np.concatenate([[True], np.diff(gaps) > _TIE * gaps[1:]])]


def _snapped(xs: np.ndarray, crit: np.ndarray, c: float) -> np.ndarray:
  """xs with each value within _TIE·2c of a critical input replaced by it:
  b ± t for a critical-input distance t lands on a critical input up to
  rounding, and is that input (one target row, not a mix of two)."""
  at = np.clip(np.searchsorted(crit, xs), 1, len(crit) - 1)
  near = np.where(np.abs(crit[at] - xs) < np.abs(crit[at - 1] - xs),
                  crit[at], crit[at - 1])
  return np.where(np.abs(near - xs) <= _TIE * 2 * c, near, xs)


def _on_lattice(crit: np.ndarray) -> bool:
  """The critical inputs are equally spaced (to _TIE): then b ± (a distance
  between two of them) is one of them or outside [-c, c], so a grid of those
  distances makes every target pair a pair of critical inputs (`l2_grid`)."""
  gaps = np.diff(crit)   # `mirrored_critical_inputs`: sorted, rounding twins merged
  return bool(gaps.size and np.all(np.abs(gaps - gaps[0]) <= _TIE * gaps[0]))


def target_pairs(mech, t_grid: np.ndarray, cells: int = DEFAULT_CELLS) -> TargetPairs:
  """The finite set of target pairs whose sup bounds f_α at every grid distance."""
  c = mech.input_bound
  crit = mirrored_critical_inputs(mech)
  if getattr(mech, 'piecewise_affine', False):
    k = len(crit)
    # Targets (b, b ± t) for every critical input b and grid distance t.
    ends, base = (a.ravel() for a in np.meshgrid(t_grid, crit, indexing='ij'))
    starts = np.concatenate([base, base])
    shifted = _snapped(np.concatenate([base - ends, base + ends]), crit, c)
    inside = (shifted >= -c) & (shifted <= c)
    starts, shifted = starts[inside], shifted[inside]
    xs = np.union1d(crit, shifted)
    basis = np.stack([mech.log_pmf(x) for x in crit])
    seg = np.clip(np.searchsorted(crit, xs, side='right') - 1, 0, k - 2)
    frac = np.clip((xs - crit[seg]) / (crit[seg + 1] - crit[seg]), 0.0, 1.0)
    weights = np.zeros((len(xs), k))
    weights[np.arange(len(xs)), seg] = 1 - frac
    weights[np.arange(len(xs)), seg + 1] += frac
    at_crit = np.searchsorted(xs, crit)
    i, j = np.meshgrid(at_crit, at_crit, indexing='ij')
    b, v = np.searchsorted(xs, starts), np.searchsorted(xs, shifted)
    pairs = np.concatenate([np.stack([i.ravel(), j.ravel()], 1),
                            np.stack([b, v], 1), np.stack([v, b], 1)])
    pairs = np.unique(pairs, axis=0)
    dist = np.abs(xs[pairs[:, 0]] - xs[pairs[:, 1]])
    return TargetPairs(basis, weights, weights, pairs, dist, 'vertices',
                       _mirrored(mech, crit, basis)
                       and np.array_equal(xs, -xs[::-1]),
                       _breakpoints(crit, c))
  validation.check_integer('cells', cells, 2)
  line = np.linspace(-c, c, cells + 1)
  grid = np.union1d(np.union1d(line, -line), crit)
  at = np.stack([mech.log_pmf(x) for x in grid])
  k = len(grid) - 1
  basis = np.concatenate([np.maximum(at[:-1], at[1:]), np.minimum(at[:-1], at[1:])])
  eye = np.eye(k)
  upper_w = np.concatenate([eye, np.zeros((k, k))], 1)
  lower_w = np.concatenate([np.zeros((k, k)), eye], 1)
  i, j = np.meshgrid(np.arange(k), np.arange(k), indexing='ij')
  pairs = np.stack([i.ravel(), j.ravel()], 1)
  gap = np.maximum.reduce([np.zeros(k * k), grid[j.ravel()] - grid[i.ravel() + 1],
                           grid[i.ravel()] - grid[j.ravel() + 1]])
  return TargetPairs(basis, upper_w, lower_w, pairs, gap, 'envelopes',
                     _mirrored(mech, grid, at))


EXACT_SPLITS = others_lib.EXACT_SPLITS
split_groups = others_lib.split_groups


_MIX_FLOOR = -600.0   # mixed values below e^this (of the column's top) are
                     # recomputed in the log domain (`_mix_rows`)


def _mix_rows(weights: np.ndarray, log_basis: np.ndarray) -> np.ndarray:
  """log(weights @ exp(log_basis)) row by row.

  One matrix product on the basis scaled by each column's largest value (a
  factor below e^-708 of it dropped); where a mixed value falls below
  e^_MIX_FLOOR of that scale (its terms may have been dropped), the log
  domain: one pass per non-zero weight slot (a row mixes at most two
  adjacent basis rows for vertex targets). Rounding: `_mix_error`.
  """
  if np.all(np.count_nonzero(weights, axis=1) == 1) and np.all(
      np.max(weights, axis=1) == 1.0):   # each row one basis row (a lattice's)
    return log_basis[np.argmax(weights, axis=1)]
  top = np.max(log_basis, axis=0)
  top = np.where(np.isfinite(top), top, 0.0)
  with np.errstate(under='ignore'):
    mixed = weights @ matrix_sums.exp_kept(log_basis - top[None])
  with np.errstate(divide='ignore'):
    out = np.log(mixed) + top[None]
  low = mixed < math.exp(_MIX_FLOOR)
  if not np.any(low):
    return out
  rows, cols = np.nonzero(low)
  exact = np.full(rows.size, -np.inf)
  for j in range(weights.shape[1]):   # the log domain, basis row by row
    w = weights[rows, j]
    used = w > 0
    exact[used] = np.logaddexp(exact[used], np.log(w[used]) +
                               log_basis[j, cols[used]])
  out[rows, cols] = exact
  return out


def _log_convolve_rows(rows: np.ndarray, log_r: np.ndarray) -> np.ndarray:
  """log(exp(rows[t]) * exp(log_r)) for every row, in the log domain (full precision)."""
  t, length = rows.shape
  out = np.full((t, length + log_r.size - 1), -np.inf)
  with np.errstate(invalid='ignore'):
    for i in range(length):   # L shifted copies; logaddexp keeps tails exact
      out[:, i:i + log_r.size] = np.logaddexp(out[:, i:i + log_r.size],
                                              rows[:, i:i + 1] + log_r[None, :])
  return out


# From this many levels on, a target row is convolved with the others by the
# tilted FFT sum (`divergence.sum_log_pmf`) rather than L shifted log-domain
# adds (measured, n = 100: 8x faster at 256 levels, level at 64, 15x slower at 16).
_FFT_LEVELS = 128
# Up to this many multiply-adds (rows x levels x the others' law), `_with_sum`
# convolves the rows with the others' law by `matrix_sums.convolve` (BLAS,
# ~0.1 s) instead of one tilted FFT sum per row.
_PRODUCT_CONVOLVE = 1e9
# Up to this many levels, `others_mixture` builds the others' laws and the
# target rows' sums by `matrix_sums` (matrix products with proved rounding
# bounds; its power sums too): ~8x faster than the tilted FFT at 256 levels,
# and ~40x more accurate.
MATRIX_LEVELS = 512


def _with_sum(rows: np.ndarray, parts, tail: float = math.inf
              ) -> Tuple[np.ndarray, float]:
  """(each row (a target's log-pmf or envelope) convolved with the law of the
  sum of `parts`, (log-pmf, count) pairs (the others' law: ±c mixes, or
  R^{*m}); log of a bound on the mass of that law left out, -inf if none).

  With a finite `tail`, the law's indices provably below e^-tail/length stay
  unresolved by the tilted FFTs and are left out (the far tails of 1,000
  clients' sum take most of its tilts and of the power sums' indices); the
  caller adds the mass back (`_add_lost`)."""
  parts = [(lp, k) for lp, k in parts if k > 0]
  if not parts:
    return rows, -np.inf
  length = divergence.sum_length(parts)
  cut = math.isfinite(tail) and rows.shape[1] >= _FFT_LEVELS
  if rows.shape[1] >= _FFT_LEVELS and not cut and (
      rows.size * length > _PRODUCT_CONVOLVE):
    return np.stack([divergence.sum_log_pmf([(row, 1)] + parts)
                     for row in rows]), -np.inf
  lost = -np.inf
  if cut:
    law, upper = divergence.sum_log_pmf_above(
        parts, -tail - math.log(length))
    left = np.isnan(law)
    if np.any(left):
      kept = np.nonzero(np.isfinite(law))[0]
      lost = float(special.logsumexp(upper[left])) + 1e-9   # rounding margin
      law = np.where(left, -np.inf, law)[kept[0]:kept[-1] + 1]
    if rows.size * law.size > _PRODUCT_CONVOLVE:
      return _with_sum(rows, parts)
  else:
    law = divergence.sum_log_pmf(parts)
  if rows.shape[1] < _FFT_LEVELS:
    return _log_convolve_rows(rows, law), lost
  # The others' law once, then every row by matrix products: the ±c mixes
  # of RQM at 256 levels, 663 others, 2 rows: 2 tilted sums -> 1.
  return matrix_sums.convolve(rows, 0.0, law, 0.0)[0], lost


def cut_tail(d_inf: np.ndarray, log_mass: np.ndarray) -> float:
  """How far below its top an others' law may be cut (`_with_sum`,
  `matrix_sums.Powers`): POWER_TAIL above the largest log E_0 any pair may
  have at orders up to TAIL_ORDER ((α-1)·D∞ + log of the upper row's mass),
  so what a cut drops (entries each below e^-tail of the top, added back as
  computed, `_add_lost`) is negligible against a pair's E there; inf
  (nothing cut) where some D∞ is infinite. Free of the orders asked, so a
  pair's value at an order does not depend on which others are evaluated
  with it."""
  d_inf, log_mass = (np.where(np.isneginf(v), 0.0, v)   # P = 0: E_0 = 0
                     for v in (d_inf, log_mass))
  if not (np.all(np.isfinite(d_inf)) and np.all(np.isfinite(log_mass))):
    return math.inf
  return POWER_TAIL + max(0.0, (TAIL_ORDER - 1) * float(np.max(d_inf, initial=0.0))
                          + float(np.max(log_mass, initial=0.0)))


def _add_lost(value: np.ndarray, lost: float, log_e0: np.ndarray
              ) -> np.ndarray:
  """log(E' + τ·E_0), rounded up: a pair's E_m from the others' law with mass
  τ = e^lost cut off. Σ f(P*O, Q*O), f(a, b) = a^α b^(1-α) (α > 1), is
  subadditive in the others' measure O (f is jointly convex and
  homogeneous), and a cut part T adds at most |T|·E_0 (convexity over T's
  translations)."""
  if lost == -np.inf:
    return value
  out = np.logaddexp(value, lost + log_e0)
  return np.nextafter(np.nextafter(out, np.inf), np.inf)


def _mix_error(targets: TargetPairs, conv: np.ndarray) -> float:
  """What `_mix_rows` adds to the rows' log error, in units of u with margin:
  the scaled product's exp argument (2·top), exp, the weights, the sum of K
  terms, its log (<= 708 in size) and adding the scale back (top + 708); the
  log domain's log w, + row, exp, log1p and adds (4·(top + log w)); the
  terms dropped below e^-708 of the scale, K·e^-108 relative to a mixed
  value above e^_MIX_FLOOR."""
  w = np.concatenate([targets.upper_weights.ravel(),
                      targets.lower_weights.ravel()])
  log_w = float(np.max(np.abs(np.log(w[w > 0])), initial=0.0))
  top = float(np.max(np.abs(conv[np.isfinite(conv)]), initial=0.0))
  k = targets.upper_weights.shape[1]
  return (matrix_sums.U * (4 * (top + log_w) + 2 * 708 + k + 64) +
          k * math.exp(-708 - _MIX_FLOOR))


def _pair_log_sums(targets: TargetPairs, conv: np.ndarray,
                   orders: np.ndarray, err: Optional[float] = None
                   ) -> np.ndarray:
  """[orders, pairs] log Σ P^α Q^(1-α) of each target pair, from the basis rows
  convolved with an others' law (`conv`); with `err` (a bound on conv's log
  error) by `matrix_sums`, its rounding allowance included."""
  # Only the target rows the pairs use are mixed.
  used_up, pair_up = np.unique(targets.pairs[:, 0], return_inverse=True)
  used_lo, pair_lo = np.unique(targets.pairs[:, 1], return_inverse=True)
  conv_up = _mix_rows(targets.upper_weights[used_up], conv)
  conv_lo = (conv_up if targets.lower_weights is targets.upper_weights
             and np.array_equal(used_up, used_lo)
             else _mix_rows(targets.lower_weights[used_lo], conv))
  pairs = np.stack([pair_up, pair_lo], axis=1)
  if err is None:   # the laws' own error unknown: the sums' rounding only
    return matrix_sums.log_power_sums(conv_up[pairs[:, 0]],
                                      conv_lo[pairs[:, 1]], orders, 0.0)
  return matrix_sums.pair_log_sums(conv_up, conv_lo, pairs, orders,
                                   err + _mix_error(targets, conv))


def _mirror_classes(targets: TargetPairs, log_r: np.ndarray
                    ) -> Tuple[np.ndarray, np.ndarray]:
  """(kept, expand): one pair of each mirror-image couple, and for every pair
  the position in `kept` of its couple's.

  With a symmetric target set (`TargetPairs.symmetric`) and an others' law
  symmetric about its centre (R^{*m}: the common part of a mirrored
  mechanism is; `log_r`, checked), the secure sums of a pair's targets are
  the reversed sums of its mirror image's, so Σ P^α Q^(1-α), D∞ and the
  distance agree: half the pairs are evaluated. Without symmetry (or a pair
  whose image is missing) every pair is its own class."""
  m = len(targets.pairs)
  every = (np.arange(m), np.arange(m))
  if not (targets.symmetric and _reversal_invariant(log_r)):
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


def _ends_are_vertices(mech, targets: TargetPairs) -> bool:
  """True when the law is affine in the input on the whole range (vertex
  targets whose critical inputs are just ±c: one PBM trial): the ±c mixes
  (`_extreme_mixes`) are then the sup over any inputs of the others
  (`others.two_vertices`)."""
  return targets.method == 'vertices' and others_lib.two_vertices(
      mirrored_critical_inputs(mech), mech.input_bound)


def _extreme_mixes(mech, targets: TargetPairs, num_clients: int,
                   orders: np.ndarray, exact: int, tail: float = math.inf
                   ) -> np.ndarray:
  """[orders, pairs] the largest log Σ P^α Q^(1-α) over the others at ±c, every
  mix k of n-1 at +c; a group [k0, k1] of mixes is bounded by its common part
  (k0 at +c, n-1-k1 at -c): data processing (`others='extremes'`). Each
  group's law is cut `tail` below its top (`cut_tail`, `_add_lost`)."""
  worst = np.full((orders.size, len(targets.pairs)), 0.0)
  first = (num_clients - 1) // 2 if targets.symmetric else 0
  at_plus, at_minus = divergence.end_log_pmfs(mech)
  log_e0 = _pair_log_sums(targets, targets.basis, orders)

  def group(bounds):
    k0, k1 = bounds
    conv, lost = _with_sum(targets.basis, [(at_plus, k0),
                                           (at_minus, num_clients - 1 - k1)],
                           tail)
    return _add_lost(_pair_log_sums(targets, conv, orders), lost, log_e0)

  groups = split_groups(first, num_clients - 1, (num_clients - 1) // 2, exact)
  # Independent groups, in threads (the FFTs and numpy's loops release the GIL).
  with futures.ThreadPoolExecutor(others_lib.workers(len(groups))) as pool:
    for value in pool.map(group, groups):
      worst = np.maximum(worst, value)
  return worst


def common_part(mech) -> Tuple[float, np.ndarray]:
  """(log β, log R): the unshifted blanket over every input in [-c, c]
  (`others.common_part` of the critical inputs' laws, where each level's
  probability attains its minimum over the range)."""
  c = mech.input_bound
  xs = np.union1d(mirrored_critical_inputs(mech), [-c, c])
  part = others_lib.common_part(np.stack([mech.log_pmf(x) for x in xs]))
  return part.log_beta, part.log_r


def vertex_rows(targets: TargetPairs) -> np.ndarray:
  """Rows every input's law is a mixture of (vertex targets: the critical
  inputs' laws) or is at least one of (envelopes: the cells' lower
  envelopes), for `others.aligned_part`."""
  if targets.method == 'vertices':
    return targets.basis
  return targets.basis[targets.basis.shape[0] // 2:]


def blankets(mech, targets: TargetPairs, num_others: int
             ) -> List[others_lib.Blanket]:
  """The unshifted blanket (`common_part`) and the aligned ones of the
  targets' vertex rows (`others.blankets`), built once per mechanism and
  target construction."""
  key = ('_blankets', targets.method, targets.basis.shape)
  cache = mech.__dict__.setdefault('_blankets', {})
  if key not in cache:
    log_beta, log_r = common_part(mech)
    aligned = others_lib.blankets(vertex_rows(targets), max(others_lib.BLOCKS))
    cache[key] = [others_lib.Blanket(log_beta, log_r, 1, 'common part')
                  ] + aligned[1:]
  return [b for b in cache[key] if b.block <= max(num_others, 1)]


# Others' laws are cut at e^-this below their top, plus the largest log E_0
# at orders up to TAIL_ORDER (`cut_tail`). RQM 256 levels, Δ = 256c, q =
# 0.0519, n = 1,000: R^{*221} keeps 33,900 of 168,400 entries; one thread,
# the whole evaluation 22.4 s -> 6.9 s, the mixture bound alone 6.5 s -> 2.4
# s; ε 9.9956 -> 9.9929 (the shorter laws' rounding allowance is smaller).
POWER_TAIL = 400.0
TAIL_ORDER = 256   # the largest of composition.DEFAULT_ORDERS


def _evaluator(targets: TargetPairs, log_r: np.ndarray, orders: np.ndarray,
               tail: float = math.inf):
  """m -> [orders, pairs] log E_m: the pairs' power sums with m copies of R
  added (by `matrix_sums` up to MATRIX_LEVELS levels, its error included).
  R^{*m} is built cut `tail` below its top (`matrix_sums.Powers`) and the
  mass the cuts drop is added back (`_add_lost`)."""
  big = targets.basis.shape[1] > MATRIX_LEVELS
  log_e0 = _pair_log_sums(targets, targets.basis, orders, None if big else 0.0)
  if big:
    def evaluate(m):
      conv, lost = _with_sum(targets.basis, [(log_r, m)], tail)
      return _add_lost(_pair_log_sums(targets, conv, orders), lost, log_e0)
    return evaluate
  powers = matrix_sums.Powers(log_r, tail)

  def evaluate(m):
    if m == 0:
      return log_e0
    conv, err = matrix_sums.convolve(targets.basis, 0.0, *powers(m))
    return _add_lost(_pair_log_sums(targets, conv, orders, err),
                     powers.log_dropped(m), log_e0)
  return evaluate


SPREAD_MARGIN = 1.5   # constructions keeping 1/this of the best spread are priced
TWIN_SPREAD = 0.02    # same-block constructions this close in spread: one priced
PRICE_STDS = 1.5      # the pricing count: this many stds below the mean


def others_mixture(mech, targets: TargetPairs, num_others: int,
                   orders: np.ndarray, log_cap: np.ndarray,
                   exact: int = EXACT_SPLITS, tail: float = math.inf
                   ) -> np.ndarray:
  """[orders, pairs] log of an upper bound on Σ P^α Q^(1-α) of each target
  pair's secure sum, whatever the `num_others` other clients' inputs in
  [-c, c]: the smallest, pair by pair and order by order, of the mixture
  bounds (`others.mixture_bound`) of the `blankets` constructions, each
  proved (`others` module docstring). Constructions keeping under
  1/SPREAD_MARGIN of the best one's noise variance (`others.spread`) are
  skipped, and of two with the same block size within TWIN_SPREAD of each
  other's only the larger is kept. The one keeping the most is completed
  (in the near-Gaussian regime it keeps the least divergence). Where others
  are left, each is priced by the sup divergence of its farthest pairs at
  PRICE_STDS standard deviations below the mean count of R copies (where the
  mixture's weight matters at high orders), and the cheapest at each order
  is completed too (at small n the constructions trade places across
  orders: RQM 16 levels, n = 10, proved/attained at α = 2 and 8 is 1.30 and
  1.10 this way, 1.30 and 1.22 with the largest spread alone, 1.38 and 1.10
  with the priced ones alone). Of a pair and its mirror image only one is
  evaluated where R is symmetric (`_mirror_classes`)."""
  runs = []
  candidates = blankets(mech, targets, num_others)
  spreads = [others_lib.spread(b, num_others) for b in candidates]
  for i, (blanket, spread) in enumerate(zip(candidates, spreads)):
    if spread * SPREAD_MARGIN < max(spreads) or any(
        b.block == blanket.block and abs(s - spread) <= TWIN_SPREAD * spread
        and (s > spread or (s == spread and j < i))
        for j, (b, s) in enumerate(zip(candidates, spreads)) if j != i):
      continue   # far behind, or the twin (other centring) of a better one
    kept, expand = _mirror_classes(targets, blanket.log_r)
    half = dataclasses.replace(targets, pairs=targets.pairs[kept],
                               distance=targets.distance[kept])
    evaluate = _memoised(_evaluator(half, blanket.log_r, orders, tail))
    runs.append((blanket, kept, expand, half, evaluate))
  widest = max(range(len(runs)),
               key=lambda i: others_lib.spread(runs[i][0], num_others))
  chosen = {widest}
  if len(runs) > 1:
    prices = np.stack([_price(blanket, half, num_others, orders)
                       for blanket, _, _, half, _ in runs])
    # The cheapest at each order (the first where prices tie, inf included).
    chosen |= set(np.argmin(np.nan_to_num(prices, nan=np.inf), axis=0)
                  .tolist())
  best = None
  for i in sorted(chosen):
    blanket, kept, expand, half, evaluate = runs[i]
    bound = others_lib.mixture_bound(
        evaluate, blanket.log_beta, blanket.blocks(num_others), half.distance,
        orders, log_cap[:, kept], exact)[:, expand]
    best = bound if best is None else np.minimum(best, bound)
  return best


def _price(blanket, half: TargetPairs, num_others: int, orders: np.ndarray
           ) -> np.ndarray:
  """[orders] a construction's price (`others_mixture`): the sup divergence
  over its farthest pairs (where the sup over pairs sits in practice) at
  PRICE_STDS below the mean count of R copies. A price only picks the
  construction, so the others' law comes from the tilted FFT sum
  (`_with_sum`), not `matrix_sums`: building R^{*m} there for 664 others
  took 2.3-4.4 s per construction (RQM 256 levels, Δ = 256c)."""
  blocks = blanket.blocks(num_others)
  beta = math.exp(blanket.log_beta)
  low = max(0, int(math.floor(blocks * beta - PRICE_STDS * math.sqrt(
      blocks * beta * (1 - beta)))))
  far = half.distance >= np.max(half.distance) * (1 - 1e-12)
  value = _pair_log_sums(
      dataclasses.replace(half, pairs=half.pairs[far],
                          distance=half.distance[far]),
      _with_sum(half.basis, [(blanket.log_r, low)])[0], orders)
  return np.max(value, axis=1) / (orders - 1)


def _memoised(evaluate):
  """`evaluate` remembering its values (a count asked twice is evaluated once)."""
  memo = {}

  def wrapped(m):
    if m not in memo:
      memo[m] = evaluate(m)
    return memo[m]
  return wrapped

_LOCAL_METHOD = 'local (one client\'s output, the others\' noise not counted)'
_SUB_SUM_METHOD = 'the rest dropped: data processing'


def is_loose_method(method: str) -> bool:
  """True for a `DivergenceCurve.method` that took a bound looser than the
  search over every client: one client's local bound alone, or a sub-sum."""
  return method.startswith(_LOCAL_METHOD) or _SUB_SUM_METHOD in method

CHORD_STEPS = 32   # sub-steps per interval of the chord bound (`DivergenceCurve`)


@dataclasses.dataclass
class DivergenceCurve:
  """Upper bounds f̄_α(t_s) on the worst D_α of the secure sum at target distance <= t_s.

  Between grid points f_α is bounded by the next point's value (f is
  non-decreasing) or, on an interval marked in `convex_on`, by a chord: there
  no critical-input distance lies strictly inside (t_{s-1}, t_s), so each
  candidate pair moves one end along a single affine piece of the pmf and
  exp((α-1)D_α) = Σ P^α Q^(1-α) (exp D∞ = max P/Q for α = ∞) is convex in t
  (jointly convex in (P, Q), which are affine in t); the max of convex
  functions lies below the chord of its end values. (D∞ itself is not convex
  when P moves: log of an affine function.) Near 0 (f ≈ C t²) the chord is within (r-1)²/4 of f on a grid of
  ratio r, where the step bound is r² above it: 24 distance points then give
  what ~300 points of steps give.

  Args:
    t: [G] increasing distances, t[-1] = 2c.
    values: {order: [G] f̄_α(t_s)}; f_α(t) <= f̄_α(t_s) for t in (t_{s-1}, t_s].
    method: how targets were bounded ('vertices' exact, 'envelopes' cell bounds).
    num_clients: n, clients in the secure sum.
    convex_on: [G] interval s = (t_{s-1}, t_s) (t_{-1} = 0, f = 0 there) is
      free of breakpoints; None: steps everywhere.
  """
  t: np.ndarray
  values: Dict[float, np.ndarray]
  method: str
  num_clients: int
  convex_on: Optional[np.ndarray] = None

  def bound_points(self, order: float):
    """(u, y): the bound on u ↦ f_α(√u) as points whose step function (y on
    (u_i, u_{i+1}], and at the last u) lies above it."""
    f = np.asarray(self.values[order], np.float64)
    t0 = np.concatenate([[0.0], self.t[:-1]])
    f0 = np.concatenate([[0.0], f[:-1]])
    us, ys = [], []
    for s in range(len(self.t)):
      if self.convex_on is None or not self.convex_on[s] or not np.isfinite(f[s]):
        us.append([t0[s]**2])
        ys.append([f[s]])
        continue
      lam = np.linspace(0.0, 1.0, CHORD_STEPS + 1)[1:]   # weight of the right end
      k = 1.0 if math.isinf(order) else order - 1   # exp(k·f) is convex in t
      with np.errstate(divide='ignore'):
        chord = np.logaddexp(np.log1p(-lam) + k * f0[s],
                             np.log(lam) + k * f[s]) / k
      chord[-1] = f[s]
      ts = t0[s] + np.concatenate([[0.0], lam[:-1]]) * (self.t[s] - t0[s])
      us.append(ts**2)
      ys.append(np.minimum(chord, f[s]))   # the step bound holds too
    us.append([self.t[-1]**2])
    ys.append([f[-1]])
    return np.concatenate(us), np.concatenate(ys)

  def majorant(self, order: float, u: float) -> float:
    """ĝ_α(u): the least concave majorant of the bound on u ↦ f_α(√u), u in [0, 4c²]."""
    us, ys = self.bound_points(order)
    if not np.all(np.isfinite(ys)):
      return math.inf
    hull = _upper_hull(us, ys)
    u = min(max(u, 0.0), us[-1])
    return float(np.interp(u, us[hull], ys[hull]))


def _convex_between_breakpoints(t_grid: np.ndarray, step: Optional[float]
                                ) -> Optional[np.ndarray]:
  """`DivergenceCurve.convex_on` of an exact curve whose exp((α-1)f_α) is
  convex between multiples of `step` (`Mechanism.divergence_breakpoint_step`:
  0 convex everywhere, None unknown: steps everywhere). Interval s is
  (t_{s-1}, t_s), t_{-1} = 0: free when no multiple of `step` lies strictly
  inside it (to _TIE of the step)."""
  if step is None:
    return None
  if step == 0:
    return np.ones(len(t_grid), bool)
  lo = np.concatenate([[0.0], t_grid[:-1]]) / step
  hi = np.asarray(t_grid, np.float64) / step
  # The first multiple of `step` above lo (a multiple at lo itself is an end).
  first = np.floor(lo + _TIE) + 1
  return first >= hi - _TIE


def exact_breakpoints(mech, t_star: float) -> np.ndarray:
  """Grid distances for an exact curve whose exp((α-1)f_α) is convex between
  multiples of `mech.divergence_breakpoint_step` (none where the step is 0
  or unknown): every multiple in (0, 2c) when there are at most
  LATTICE_POINTS (the intervals between them all take the chord, and a
  modular sum computes f_α at every integer shift anyway), else the
  EXACT_BREAKPOINTS nearest on each side of t_star (`l2_grid`)."""
  step = mech.divergence_breakpoint_step if mech.has_exact_divergences else None
  if not step:
    return np.empty(0)
  top = 2 * mech.input_bound
  count = int(math.floor(top / step * (1 + _TIE)))
  if count <= LATTICE_POINTS:
    ks = np.arange(1, count + 1, dtype=np.float64)
  else:
    k = math.floor(t_star / step)
    ks = np.arange(k - EXACT_BREAKPOINTS + 1, k + EXACT_BREAKPOINTS + 1,
                   dtype=np.float64)
  ts = ks * step
  return ts[(ts > 0) & (ts < top * (1 - _TIE))]


def _upper_hull(x: np.ndarray, y: np.ndarray) -> List[int]:
  """Indices of the upper concave hull of points sorted by x (monotone chain)."""
  hull: List[int] = []
  for i in range(len(x)):
    while len(hull) >= 2:
      o, a = hull[-2], hull[-1]
      cross = (x[a] - x[o]) * (y[i] - y[o]) - (y[a] - y[o]) * (x[i] - x[o])
      if cross >= 0:   # a lies on or below the chord o-i: not on the upper hull
        hull.pop()
      else:
        break
    hull.append(i)
  return hull


def _searched(mech, num_clients: int):
  """The `SumReduction` whose sum is searched: the mechanism's own
  (`Mechanism.sum_reduction`), else the identity (mech, 1 copy, n clients)."""
  red = mech.sum_reduction(num_clients)
  return red or mech_base.SumReduction(mech, 1, num_clients, '')


def _search_operations(mech, num_clients: int, num_orders: int, t_points: int,
                       cells: int, others: str = 'any') -> float:
  """Elementary operations of the target-pair search of `mech`'s own sum;
  `t_points`: the grid distances whose targets are not all critical inputs
  (`off_lattice`)."""
  levels = mech.num_levels
  crit = mirrored_critical_inputs(mech).size
  if getattr(mech, 'piecewise_affine', False):
    basis, core, extra = crit, crit, 4 * crit * t_points
  else:
    basis, core, extra = 2 * (cells + crit), cells + crit, 0
  length = num_clients * (levels - 1) + 1
  sums = len(split_groups(0, num_clients - 1, (num_clients - 1) // 2))
  if others == 'any' and num_clients > 1 and levels <= MATRIX_LEVELS:
    # `matrix_sums`: the others' laws once (one copy added at a time), each
    # count's rows by a product, core pairs by a product per order.
    discount = matrix_sums.MATRIX_DISCOUNT
    laws = levels * levels * num_clients**2 / 2
    rows = basis * levels * length / discount + levels * length
    pairs = num_orders * length * (core * core / discount + 6 * core + extra)
    return laws + sums * (rows + pairs)
  pairs = core * core + extra
  convolve = basis * levels if num_clients > 1 else basis   # n = 1: nothing to add
  return sums * length * (convolve + pairs * num_orders)


def off_lattice(mech, t_grid) -> int:
  """How many distances of `t_grid` (or of `l2_grid`'s, given its size) put
  targets off the critical inputs: on a lattice of them (`_on_lattice`) the
  breakpoints do not, so `l2_grid`'s lattice grid has none."""
  if not getattr(mech, 'piecewise_affine', False):
    return int(np.size(t_grid)) if np.ndim(t_grid) else int(t_grid)
  crit = mirrored_critical_inputs(mech)
  gaps = _breakpoints(crit, mech.input_bound)
  if np.ndim(t_grid) == 0:
    return 0 if _lattice_grid(mech, t_grid) is not None else int(t_grid)
  t_grid = np.asarray(t_grid, np.float64)
  if not _on_lattice(crit):
    return t_grid.size
  near = np.min(np.abs(gaps[None, :] - t_grid[:, None]), axis=1)
  return int(np.count_nonzero(near > _TIE * t_grid))


def estimated_operations(mech, num_clients: int, num_orders: int,
                         t_points: int = DEFAULT_T_POINTS,
                         cells: int = DEFAULT_CELLS) -> float:
  """Elementary operations `divergence_curve` will do, counted before it starts
  (0 where it takes a closed form: exact divergences, or a local bound in
  place of a search over MAX_OPERATIONS)."""
  red = _searched(mech, num_clients)
  one = red.mechanism
  if one.has_exact_divergences:
    return 0.0
  t_points = off_lattice(one, t_points)
  sub = _clients_searched(one, red.num_clients, num_orders, t_points, cells)
  if sub:
    return _search_operations(one, sub, num_orders, t_points, cells)
  return 0.0 if one.has_local_bound else _search_operations(
      one, red.num_clients, num_orders, t_points, cells)


def _clients_searched(mech, num_clients: int, num_orders: int, t_points: int,
                      cells: int, others: str = 'any') -> int:
  """How many clients' sum `divergence_curve` searches for `mech`'s own
  n-client sum: n within MAX_OPERATIONS; over it, 0 where the closed-form
  local bound takes its place (instant, where a sub-sum's envelope search
  costs up to the limit per evaluation and did not beat it in the
  noise-dominated frontier cells measured), else the largest affordable
  sub-sum (`affordable_clients`; 0: refused)."""
  if _search_operations(mech, num_clients, num_orders, t_points,
                        cells, others) <= MAX_OPERATIONS:
    return num_clients
  if mech.has_local_bound:
    return 0
  return affordable_clients(mech, num_clients, num_orders, t_points, cells,
                            others)


def affordable_clients(mech, num_clients: int, num_orders: int,
                       t_points: int = DEFAULT_T_POINTS,
                       cells: int = DEFAULT_CELLS, others: str = 'any') -> int:
  """The largest n' <= n whose search of `mech`'s own sum is within
  MAX_OPERATIONS (0: not even one client's): f_α(n) <= f_α(n') by data
  processing (module docstring). The cost grows with n', so bisection."""
  validation.check_integer('num_clients', num_clients, 1)
  validation.check_integer('num_orders', num_orders, 0)
  cost = lambda n: _search_operations(mech, n, num_orders, t_points, cells,
                                      others)
  if cost(1) > MAX_OPERATIONS:
    return 0
  lo, hi = 1, num_clients   # cost(lo) fits; find the last n that fits
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if cost(mid) <= MAX_OPERATIONS:
      lo = mid
    else:
      hi = mid - 1
  return lo


def divergence_curve(mech, orders: Sequence[float], num_clients: int,
                     t_points: int = DEFAULT_T_POINTS,
                     cells: int = DEFAULT_CELLS,
                     t_grid: Optional[np.ndarray] = None,
                     exact_splits: int = EXACT_SPLITS,
                     others: str = 'any') -> DivergenceCurve:
  """f̄_α on a distance grid: see the module docstring for why each value is an upper bound.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    orders: Rényi orders > 1 (math.inf allowed).
    num_clients: n >= 1, clients in the secure sum.
    t_points: distance grid size (>= 4), when `t_grid` is not given.
    cells: cells over [-c, c] for mechanisms bounded by envelopes.
    t_grid: increasing distances in (0, 2c] ending at 2c (default
      `distance_grid(c, t_points)`).
    exact_splits: single groups of the others next to each anchor
      (`split_groups`); n or more evaluates each on its own.
    others: 'any' (default): a bound for any inputs of the n-1 others in
      [-c, c] (`others_mixture`, proved); 'extremes': the worst mix of the
      others at ±c (`_extreme_mixes`; a search-backed assumption, exhaustive
      over critical inputs for n <= 3, tighter where the laws barely overlap).

  Raises:
    ValueError: an order <= 1, or an evaluation estimated above MAX_OPERATIONS
      (the message gives the estimate and what to lower).
  """
  validation.check_integer('num_clients', num_clients, 1)
  check_others(others)
  orders = sorted(set(validation.check_orders('orders', orders)))
  c = mech.input_bound
  if t_grid is None:
    t_grid = distance_grid(c, t_points)
  t_grid = np.asarray(t_grid, np.float64)
  if not (t_grid[0] > 0 and np.all(np.diff(t_grid) > 0)
          and abs(t_grid[-1] - 2 * c) <= 1e-12 * c):
    raise ValueError('`t_grid` must increase within (0, 2c] and end at 2c = '
                     f'{2 * c!r}.')
  again = lambda m, n: divergence_curve(m, orders, n, t_grid=t_grid,
                                        cells=cells, exact_splits=exact_splits,
                                        others=others)
  red = _searched(mech, num_clients)
  if red.mechanism is not mech:
    # Mechanism.sum_reduction: f_α <= copies·f_α of the reduced sum.
    # exp((α-1)·k·f) = (exp((α-1)f))^k stays convex where exp((α-1)f) is, so
    # the chord intervals carry over.
    curve = again(red.mechanism, red.num_clients)
    return dataclasses.replace(
        curve, values={a: red.copies * v for a, v in curve.values.items()},
        method=f'{curve.method} ({red.why})', num_clients=num_clients)
  own = mech.sum_divergences(orders, num_clients, t_grid)
  if own is not None:   # exact at every t (closed form / translation invariance)
    return DivergenceCurve(t_grid, {a: np.maximum(np.asarray(own[a]), 0.0)
                                    for a in orders}, 'exact', num_clients,
                           _convex_between_breakpoints(
                               t_grid, mech.divergence_breakpoint_step))
  local = mech.local_divergences(orders, t_grid)
  finite = [a for a in orders if math.isfinite(a)]
  off = off_lattice(mech, t_grid)
  cost = _search_operations(mech, num_clients, len(finite), off, cells, others)
  sub = _clients_searched(mech, num_clients, len(finite), off, cells, others)
  if 0 < sub < num_clients:
    # f_α(n) <= f_α(n'): the other n - n' clients' outputs dropped.
    curve = again(mech, sub)
    return dataclasses.replace(
        curve, num_clients=num_clients,
        method=f'{curve.method} (the target and {sub - 1} of the '
        f'{num_clients - 1} others searched, {_SUB_SUM_METHOD}; '
        f'all {num_clients} need ~{cost:.2g} operations)')
  if not sub and local is not None:
    return DivergenceCurve(t_grid, local, _LOCAL_METHOD, num_clients)
  if not sub:
    raise CostError(
        f'The search over target pairs (ℓ2 route, or the coordinate route\'s '
        f'vertex pairs) for {mech!r} with {num_clients} clients and '
        f'{len(finite)} orders needs ~{cost:.2g} operations (limit '
        f'{MAX_OPERATIONS:.2g}, about a minute): lower `t_points`/`cells`, the '
        'number of orders, or the levels.')
  targets = target_pairs(mech, t_grid, cells)
  need = 3 * 8 * targets.upper_weights.shape[0] * targets.basis.shape[1]
  if need > MAX_BYTES:
    if local is not None:
      return DivergenceCurve(t_grid, local, f'{_LOCAL_METHOD} (the target '
                             f'pairs\' laws need ~{need / 2**30:.3g} GiB)',
                             num_clients)
    raise CostError(
        f'The target pairs of {mech!r} need ~{need / 2**30:.3g} GiB of laws '
        f'(limit vector.MAX_BYTES = {MAX_BYTES / 2**30:.3g} GiB): lower '
        '`cells` or the levels.')
  try:
    per_pair = _pair_divergences(mech, targets, orders, num_clients,
                                 exact_splits, others)
  except divergence.UnresolvedSumError:
    if local is None:
      raise
    # E.g. the quantized Gaussian at huge σ: interior levels ~1e-300.
    return DivergenceCurve(t_grid, local, f'{_LOCAL_METHOD} (the search\'s '
                           'sum law was unresolved)', num_clients)
  return _assembled(targets, per_pair, t_grid, local, num_clients)


def _pair_divergences(mech, targets: TargetPairs, orders: Sequence[float],
                      num_clients: int, exact_splits: int, others: str
                      ) -> Dict[float, np.ndarray]:
  """{order: [pairs] upper bound on D_α of each target pair's secure sum}:
  D∞ from the target alone (the sum's D∞ is at most the target's, by post
  processing), finite orders over the others (`others_mixture` for any
  inputs, `_extreme_mixes` at ±c: both where the ends are the only vertices,
  the smaller pair by pair)."""
  finite = np.asarray([a for a in orders if math.isfinite(a)])
  up = targets.pairs[:, 0]
  local_up = _mix_rows(targets.upper_weights, targets.basis)
  local_lo = _mix_rows(targets.lower_weights, targets.basis)
  d_inf = _log_ratio_max(local_up, local_lo, targets.pairs)
  out = {a: d_inf for a in orders if math.isinf(a)}
  if not finite.size:
    return out
  log_e = None
  # Σ P^α Q^(1-α) <= max(P/Q)^(α-1) Σ P (Σ P > 1 for an upper envelope).
  log_mass = special.logsumexp(local_up, axis=1)[up]
  tail = cut_tail(d_inf, log_mass)
  if others == 'any':
    with np.errstate(invalid='ignore'):
      log_cap = ((finite[:, None] - 1) * d_inf[None, :] + log_mass[None, :])
    log_e = others_mixture(mech, targets, num_clients - 1, finite, log_cap,
                           exact_splits, tail)
  if others == 'extremes' or _ends_are_vertices(mech, targets):
    # Under the assumption, or proved for any others (both bounds hold then).
    skipped = _MIXTURE_ALONE.get()
    if log_e is not None and skipped is not None:
      skipped.append(mech)   # the mixture bound alone: larger, still proved
    else:
      mixes = _extreme_mixes(mech, targets, num_clients, finite, exact_splits,
                             tail)
      log_e = mixes if log_e is None else np.minimum(log_e, mixes)
  for i, a in enumerate(finite):
    out[float(a)] = log_e[i] / (a - 1)
  return out


# Inside `mixture_alone()`: the list of mechanisms whose ±c mixes were skipped.
_MIXTURE_ALONE = contextvars.ContextVar('mixture_alone', default=None)


@contextlib.contextmanager
def mixture_alone():
  """Within it, others='any' bounds every pair by the mixture bound alone:
  the ±c mixes (`_extreme_mixes`, where the ends are the only vertices) are
  skipped. The pair bound is then min(mixture, mixes) without its second
  term, larger or equal and still proved. The mixes are 60% of an
  evaluation at RQM 256 levels, Δ >= 256c, n = 1,000, where they leave ε
  unchanged (the mixture is the smaller at the pairs ε depends on); at n =
  30 they are 14% tighter at every distance. Yields the list of the
  mechanisms whose mixes were skipped (a calibration's search runs so where
  they do not lower ε, then evaluates its answer in full)."""
  skipped = []
  token = _MIXTURE_ALONE.set(skipped)
  try:
    yield skipped
  finally:
    _MIXTURE_ALONE.reset(token)


def _log_ratio_max(log_p: np.ndarray, log_q: np.ndarray, pairs: np.ndarray
                   ) -> np.ndarray:
  """[pairs] max over levels of log P/Q for rows (pairs[:, 0], pairs[:, 1]),
  -inf where P is 0; in blocks of matrix_sums._BLOCK entries (8,340 pairs of
  65,536 levels would take 4 GB at once)."""
  out = np.empty(len(pairs))
  step = max(1, matrix_sums._BLOCK // max(log_p.shape[1], 1))
  for s in range(0, len(pairs), step):
    a, b = log_p[pairs[s:s + step, 0]], log_q[pairs[s:s + step, 1]]
    with np.errstate(invalid='ignore'):
      ratio = np.where(np.isfinite(a), a - b, -np.inf)
    out[s:s + step] = np.max(ratio, axis=1)
  return out


def _assembled(targets: TargetPairs, per_pair: Dict[float, np.ndarray],
               t_grid: np.ndarray, local, num_clients: int) -> DivergenceCurve:
  """The curve from per-pair bounds: at each t the largest over pairs no
  farther apart (f is a sup over |x - x'| <= t), the smaller of it and the
  local bound where there is one, chords on breakpoint-free intervals.

  The chord of the smaller is sound even where the two bounds cross inside an
  interval: it rests on exp((α-1)f_α) being convex there (`DivergenceCurve`),
  so any upper bounds of f_α at the ends, the smaller of two included, give a
  chord above f_α; it never lies above the smaller of the two bounds' own
  chords (docs/privacy.md, the ℓ2 route)."""
  values = {}
  by_distance = np.argsort(targets.distance, kind='stable')
  # The pairs no farther apart than each t (1e-12: rounding twins count).
  reach = np.searchsorted(targets.distance[by_distance], t_grid * (1 + 1e-12),
                          'right')
  for a, bound in per_pair.items():
    records = np.maximum.accumulate(np.maximum(bound, 0.0)[by_distance])
    values[a] = np.where(reach > 0, records[np.maximum(reach, 1) - 1], 0.0)
  method = targets.method
  if local is not None:   # both bound f_α at each grid point: take the smaller
    values = {a: np.minimum(v, local[a]) for a, v in values.items()}
    method += f' or {_LOCAL_METHOD}, the smaller'
  convex_on = None
  if targets.breakpoints is not None:
    left = np.concatenate([[0.0], t_grid[:-1]])
    # A breakpoint within _TIE (relative) of an end counts as that end (see
    # `_breakpoints`).
    inside = (np.searchsorted(targets.breakpoints, t_grid * (1 - _TIE), 'left') -
              np.searchsorted(targets.breakpoints, left * (1 + _TIE), 'right'))
    convex_on = inside == 0
  return DivergenceCurve(t_grid, values, method, num_clients, convex_on)


def order_ladder(orders: Sequence[float]) -> List[float]:
  """A sparse set of orders covering `orders`: every one up to 8, then ~25% apart.

  Rényi divergence is non-decreasing in the order, so an order's value is
  bounded by the next rung's; evaluating ~15 orders instead of 63 is what makes
  the ℓ2 route affordable inside calibration.
  """
  finite = sorted(set(float(a) for a in orders if math.isfinite(a)))
  rungs, a = [], 2.0
  top = finite[-1] if finite else 2.0
  while a < top:
    rungs.append(a)
    a = a + 1 if a < 8 else math.ceil(a * 1.25)
  rungs.append(top)
  rungs = sorted(set(r for r in rungs if r >= finite[0]) | {top}) if finite else []
  return rungs + ([math.inf] if any(math.isinf(a) for a in orders) else [])


def focused_grid(c: float, t_star: float, t_points: int) -> np.ndarray:
  """Distances for bounding ĝ at u* = t*²: t*, and t*(1 + 1e-3) just above it (the
  step bound's next value), geometric from 2c·1e-3 below, linear above to 2c."""
  validation.check_integer('t_points', t_points, 8)
  below = t_points // 2
  lo = min(2 * c * 1e-3, t_star / 2)
  grid = [np.geomspace(lo, t_star, below), [t_star * (1 + 1e-3)],
          np.linspace(t_star, 2 * c, t_points - below)]
  return np.unique(np.clip(np.concatenate(grid), lo, 2 * c))


def _vertex_breakpoints(one) -> Optional[np.ndarray]:
  """The critical-input distances of a searched mechanism with vertex targets
  (`target_pairs`), else None (envelopes or exact divergences: no chords)."""
  if not getattr(one, 'piecewise_affine', False) or one.has_exact_divergences:
    return None
  return _breakpoints(mirrored_critical_inputs(one), one.input_bound)


def _merged(t_grid: np.ndarray, gaps: Optional[np.ndarray], limit: int
            ) -> np.ndarray:
  """`t_grid` plus `gaps` when there are at most `limit` of them."""
  if gaps is None or gaps.size > limit:
    return t_grid
  merged = np.union1d(t_grid, gaps)
  keep = np.concatenate([[True], np.diff(merged) > _TIE * merged[1:]])
  merged = merged[keep]
  merged[-1] = t_grid[-1]
  return merged


def with_breakpoints(mech, t_grid: np.ndarray, limit: int,
                     num_clients: int) -> np.ndarray:
  """`t_grid` plus every critical-input distance in (0, 2c] of the mechanism
  searched for `num_clients` clients (`Mechanism.sum_reduction`) when there are
  at most `limit` of them (vertex targets only): then every interval is
  breakpoint-free and takes the chord bound (`DivergenceCurve`)."""
  one = _searched(mech, num_clients).mechanism
  return _merged(t_grid, _vertex_breakpoints(one), limit)


LATTICE_POINTS = 4096   # most distances `l2_grid` puts on a lattice's grid
#: Where an exact curve has over LATTICE_POINTS breakpoints, those `l2_grid`
#: puts on each side of t* (`exact_breakpoints`).
EXACT_BREAKPOINTS = 4


def _lattice_grid(one, t_points: int) -> Optional[np.ndarray]:
  """Every breakpoint of the searched mechanism `one` (ending at 2c) where its
  critical inputs are a lattice with t_points..LATTICE_POINTS breakpoints
  (`l2_grid`), else None."""
  gaps = _vertex_breakpoints(one)
  if (gaps is None or not t_points <= gaps.size <= LATTICE_POINTS
      or not _on_lattice(mirrored_critical_inputs(one))):
    return None
  grid = gaps.copy()
  grid[-1] = 2 * one.input_bound
  return grid


def l2_grid(mech, t_star: float, t_points: int, num_clients: int) -> np.ndarray:
  """The distances `vector_rdp` evaluates for `num_clients` clients:
  `focused_grid` at t* = √u* plus the breakpoints, about `t_points` in all
  (with chords, 8 focused points beside 15 breakpoints bound within 1% of 24
  beside them: RQM, 256 levels, measured). Where the critical inputs are
  equally spaced (QMGeo: its levels) with at least `t_points` breakpoints,
  every breakpoint instead (up to LATTICE_POINTS): their targets are pairs of
  critical inputs (all of which the search takes anyway, by matrix products),
  and every interval takes the chord, within ~(h/t*)²/4 of f at t* on a
  lattice of step h (t* itself would add 4 targets per critical input,
  summed one by one).
  """
  one = _searched(mech, num_clients).mechanism
  lattice = _lattice_grid(one, t_points)
  if lattice is not None:
    return lattice
  near = exact_breakpoints(one, t_star)
  if near.size:   # exact curves: chords between breakpoints
    return _merged(focused_grid(mech.input_bound, t_star, t_points), near,
                   near.size)
  gaps = _vertex_breakpoints(one)
  base = t_points
  if gaps is not None:
    base = t_points if gaps.size > t_points else max(8, t_points - gaps.size)
  return _merged(focused_grid(mech.input_bound, t_star, base), gaps, t_points)


def vector_rdp(mech, orders: Sequence[float], clients_per_round: int, dim: int,
               l2_sensitivity: float, t_points: int = 24,
               cells: int = DEFAULT_CELLS,
               others: str = 'any') -> Dict[float, float]:
  """Round RDP of the d-coordinate secure sum when updates differ by <= l2_sensitivity in ℓ2.

  d·ĝ_α(min(S²/d, 4c²)) for each order (see the module docstring), with f̄
  evaluated on a distance grid focused at √u* and at the orders of
  `order_ladder(orders)`; orders between rungs by convexity (`between_rungs`).

  Args:
    mech: the mechanism each coordinate goes through (input bound c).
    orders: Rényi orders > 1 (math.inf allowed).
    clients_per_round: n, clients in the secure sum.
    dim: d, coordinates per client.
    l2_sensitivity: S, the most two neighbouring updates differ by in ℓ2
      (2·l2_clip under replace-one).
    t_points: distance grid size (>= 8), breakpoints (`with_breakpoints`) included.
    cells: cells over [-c, c] for mechanisms bounded by envelopes.
    others: the others' inputs: 'any' (proved) or 'extremes' (`divergence_curve`).

  Returns:
    {order: RDP of one round, before subsampling} (a `RoundRdp`: its `method`
    says how the secure sum's divergences were bounded).
  """
  validation.check_integer('dim', dim, 1)
  validation.check_positive('l2_sensitivity', l2_sensitivity)
  c = mech.input_bound
  u = min(l2_sensitivity**2 / dim, 4 * c**2)
  # Closed-form (central) divergences are cheap at every order: no ladder.
  rungs = (sorted(set(float(a) for a in orders)) if mech.central
           else order_ladder(orders))
  grid = l2_grid(mech, math.sqrt(u), t_points, clients_per_round)
  curve = divergence_curve(mech, rungs, clients_per_round, t_grid=grid,
                           cells=cells, others=others)
  per_rung = {a: dim * curve.majorant(a, u) for a in rungs}
  return RoundRdp(between_rungs(per_rung, orders), curve.method)


class RoundRdp(dict):
  """{order: round RDP} (`vector_rdp`) that also says how f_α was bounded:
  `method` is the `DivergenceCurve.method` (a sub-sum or a local bound shows
  there, for the guarantee's text)."""

  def __init__(self, values: Dict[float, float], method: str):
    super().__init__(values)
    self.method = method


def between_rungs(per_rung: Dict[float, float], orders: Sequence[float]
                  ) -> Dict[float, float]:
  """Upper bounds at `orders` from upper bounds at the rungs of `order_ladder`.

  (α-1)·D_α is convex in α (a log-sum-exp of functions linear in α), for every
  pair of laws and so for the sup of the bounds: between rungs a < α < b,
  (α-1)·D_α <= ((b-α)(a-1)·D_a + (α-a)(b-1)·D_b) / (b-a). Orders below the
  first rung take it (D_α is non-decreasing in α).
  """
  rungs = sorted(per_rung)
  finite_rungs = [r for r in rungs if math.isfinite(r)]
  out = {}
  for a in orders:
    if a in per_rung:
      out[a] = per_rung[a]
      continue
    above = min(r for r in rungs if r >= a)
    below = [r for r in finite_rungs if r < a]
    if not below or not math.isfinite(above) or not math.isfinite(
        per_rung[above]) or not math.isfinite(per_rung[below[-1]]):
      out[a] = per_rung[above]
      continue
    lo, hi = below[-1], above
    mixed = ((hi - a) * (lo - 1) * per_rung[lo] +
             (a - lo) * (hi - 1) * per_rung[hi]) / (hi - lo)
    out[a] = min(per_rung[hi], mixed / (a - 1))
  return out


def end_pair_is_worst(mech, num_clients: int, orders=(2, 8, 32)) -> bool:
  """True when no vertex target pair beats x = ±c at `orders` (to 1e-9): the
  condition under which routes that compose the ±c pair (PLD) are used."""
  if not mech.piecewise_affine or mech.has_exact_divergences:
    return True
  c = mech.input_bound
  curve = divergence_curve(mech, orders, num_clients, t_grid=[2 * c],
                           others='extremes')   # the PLD route's assumption
  ends = divergence.renyi_divergence_of_sum(mech, list(orders), num_clients)
  return all(curve.values[r.alpha][0] <= r.value * (1 + 1e-9) + 1e-12
             for r in ends)


def coordinate_route_applies(mech, dim: int, l2_clip: float) -> bool:
  """True when c <= l2_clip/√d: every coordinate can move end to end (d × scalar)."""
  return mech.input_bound <= l2_clip / math.sqrt(dim) * (1 + 1e-12)
