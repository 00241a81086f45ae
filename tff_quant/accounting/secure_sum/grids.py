"""The distances and orders at which f_α is evaluated.

f_α is evaluated so the result is an upper bound, never interpolated below
it: t on a grid t_1 < ... < t_G = 2c; f is non-decreasing, so on
(t_{s-1}, t_s] it is at most f̄(t_s) = the sup over pairs at distance <= t_s.
For vertex targets on an interval free of critical-input distances
("breakpoints", put on the grid by `with_breakpoints`), exp((α-1)f) lies
below the chord of its end values (`curve.DivergenceCurve`): 35-40% less
round RDP than the step bound for RQM at 24 points. The majorant is taken of
that bound, stepped at sub-steps (left ends included).

On a lattice of critical inputs (equally spaced: QMGeo's levels) the grid is
every breakpoint (`l2_grid`): b ± t is then a critical input, so every target
pair is a pair of critical inputs (all of them: one matrix product per order
and count) and every interval takes the chord.

Orders: Rényi divergence is non-decreasing in the order, and (α-1)·D_α is
convex in α, so a sparse ladder of orders (`order_ladder`) bounds the rest
(`l2_route.between_rungs`).
"""

import math
from typing import List, Optional, Sequence

import numpy as np

from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.accounting.secure_sum import targets as targets_lib
from tff_quant.common import validation

DEFAULT_T_POINTS = 48   # distance grid: half geometric from 2c·1e-3, half linear
CHORD_POINTS = 24   # least size of `l2_grid`'s focused part where chords apply
LATTICE_POINTS = 4096   # most distances `l2_grid` puts on a lattice's grid
#: Where an exact curve has over LATTICE_POINTS breakpoints, those `l2_grid`
#: puts on each side of t* (`exact_breakpoints`).
EXACT_BREAKPOINTS = 4

_TIE = targets_lib.TIE


def distance_grid(c: float, t_points: int) -> np.ndarray:
  """t_1 < ... < t_G = 2c: geometric near 0 (where ĝ's step error matters), then linear.

  Args:
    c: the input bound.
    t_points: the grid size (>= 4).

  Returns:
    The increasing distances.

  Raises:
    ValueError: `t_points` < 4.
  """
  validation.check_integer('t_points', t_points, 4)
  half = t_points // 2
  geo = 2 * c * np.geomspace(1e-3, 1.0, half, endpoint=False)
  lin = np.linspace(2 * c / (t_points - half), 2 * c, t_points - half)
  return np.unique(np.concatenate([geo, lin]))


def order_ladder(orders: Sequence[float]) -> List[float]:
  """A sparse set of orders covering `orders`: every one up to 8, then ~25% apart.

  Rényi divergence is non-decreasing in the order, so an order's value is
  bounded by the next rung's; evaluating ~15 orders instead of 63 is what
  makes the ℓ2 route affordable inside calibration.

  Args:
    orders: Rényi orders (math.inf allowed).

  Returns:
    The rungs, increasing, the largest finite order and math.inf (where
    asked) included.
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
  """Distances for bounding ĝ at u* = t*².

  t*, and t*(1 + 1e-3) just above it (the step bound's next value),
  geometric from 2c·1e-3 below, linear above to 2c.

  Args:
    c: the input bound.
    t_star: t* = √u*.
    t_points: the grid size (>= 8).

  Returns:
    The increasing distances, ending at 2c.

  Raises:
    ValueError: `t_points` < 8.
  """
  validation.check_integer('t_points', t_points, 8)
  below = t_points // 2
  lo = min(2 * c * 1e-3, t_star / 2)
  grid = [np.geomspace(lo, t_star, below), [t_star * (1 + 1e-3)],
          np.linspace(t_star, 2 * c, t_points - below)]
  return np.unique(np.clip(np.concatenate(grid), lo, 2 * c))


def chord_grid(c: float, t_star: float, t_points: int = CHORD_POINTS
               ) -> np.ndarray:
  """Distances for bounding ĝ at u* = t*² where every interval takes the chord.

  Where f_α ≈ k·t² the chord over (t_{s-1}, t_s] lies above f by up to
  k·(t_s - t_{s-1})²/4 wherever the interval is, and the least concave
  majorant at u* rises by the excess of the intervals on both sides of it:
  a geometric grid's wide intervals below t* cost 4-6% of round RDP at the
  FL table's setting (QMGeo and the quantized Gaussian at 4 bits), this
  grid 1% at 24 points. So half the points are evenly spaced on (0, t*]
  and half from t* to 2c, spaced as (i/m)^1.5 (finer next to t*).

  Args:
    c: the input bound.
    t_star: t* = √u*, in (0, 2c].
    t_points: the grid size (>= 8).

  Returns:
    The increasing distances, t* among them, ending at 2c.

  Raises:
    ValueError: `t_points` < 8.
  """
  validation.check_integer('t_points', t_points, 8)
  below = t_points // 2
  above = t_points - below
  grid = [t_star * np.arange(1, below + 1) / below,
          t_star + (2 * c - t_star) * (np.arange(1, above + 1) / above)**1.5]
  grid = np.unique(np.clip(np.concatenate(grid), 0.0, 2 * c))
  grid = grid[grid > 0]
  grid[-1] = 2 * c
  return grid


def _vertex_breakpoints(one, limits) -> Optional[np.ndarray]:
  """The critical-input distances of a searched mechanism with vertex targets
  (`targets.target_pairs`), else None (envelopes or exact divergences:
  no chords)."""
  if not getattr(one, 'piecewise_affine', False) or one.has_exact_divergences:
    return None
  return targets_lib.breakpoints(targets_lib.mirrored_critical_inputs(one),
                                 one.input_bound, limits)


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


def with_breakpoints(mech, t_grid: np.ndarray, limit: int, num_clients: int,
                     limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
                     ) -> np.ndarray:
  """`t_grid` plus every critical-input distance in (0, 2c], where few.

  Of the mechanism searched for `num_clients` clients
  (`Mechanism.sum_reduction`), when there are at most `limit` of them
  (vertex targets only): then every interval is breakpoint-free and takes
  the chord bound (`curve.DivergenceCurve`).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    t_grid: increasing distances ending at 2c.
    limit: the most breakpoints added.
    num_clients: n, clients in the secure sum.
    limits: the `Limits` (`targets.breakpoints`).

  Returns:
    The merged grid, ending at t_grid[-1].
  """
  one = targets_lib.searched(mech, num_clients).mechanism
  return _merged(t_grid, _vertex_breakpoints(one, limits), limit)


def lattice_grid(one, t_points: int,
                 limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
                 ) -> Optional[np.ndarray]:
  """Every breakpoint of a searched mechanism on a lattice, ending at 2c.

  Args:
    one: the searched mechanism (`targets.searched`).
    t_points: the fewest breakpoints for which the lattice grid is taken.
    limits: the `Limits` (`targets.breakpoints`).

  Returns:
    The grid where the critical inputs are a lattice with
    t_points..LATTICE_POINTS breakpoints (`l2_grid`), else None.
  """
  gaps = _vertex_breakpoints(one, limits)
  if (gaps is None or not t_points <= gaps.size <= LATTICE_POINTS
      or not targets_lib.on_lattice(targets_lib.mirrored_critical_inputs(one))):
    return None
  grid = gaps.copy()
  grid[-1] = 2 * one.input_bound
  return grid


def exact_breakpoints(mech, t_star: float) -> np.ndarray:
  """Grid distances for an exact curve convex between multiples of a step.

  For a curve whose exp((α-1)f_α) is convex between multiples of
  `mech.divergence_breakpoint_step` (none where the step is 0 or unknown):
  every multiple in (0, 2c) when there are at most LATTICE_POINTS (the
  intervals between them all take the chord, and a modular sum computes f_α
  at every integer shift anyway), else the EXACT_BREAKPOINTS nearest on
  each side of t_star (`l2_grid`).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    t_star: the distance the grid focuses on.

  Returns:
    The distances (empty where none apply).
  """
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


def convex_between_breakpoints(t_grid: np.ndarray, step: Optional[float]
                               ) -> Optional[np.ndarray]:
  """`DivergenceCurve.convex_on` of an exact curve convex between multiples of `step`.

  Interval s is (t_{s-1}, t_s), t_{-1} = 0: free when no multiple of `step`
  lies strictly inside it (to TIE of the step).

  Args:
    t_grid: the curve's distances.
    step: `Mechanism.divergence_breakpoint_step` (0: convex everywhere; None:
      unknown).

  Returns:
    [G] bools, or None (steps everywhere) where `step` is None.
  """
  if step is None:
    return None
  if step == 0:
    return np.ones(len(t_grid), bool)
  lo = np.concatenate([[0.0], t_grid[:-1]]) / step
  hi = np.asarray(t_grid, np.float64) / step
  # The first multiple of `step` above lo (a multiple at lo itself is an end).
  first = np.floor(lo + _TIE) + 1
  return first >= hi - _TIE


def l2_grid(mech, t_star: float, t_points: int, num_clients: int,
            limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS,
            wide: bool = True) -> np.ndarray:
  """The distances `vector_rdp` evaluates for `num_clients` clients.

  Where there are at most `t_points` breakpoints (vertex targets), every
  interval between them takes the chord: `chord_grid` (max(t_points,
  CHORD_POINTS) points; with `wide` False, max(8, t_points - breakpoints),
  what the breakpoints leave of t_points: `l2_route.vector_rdp` takes it where
  the wide grid would put the search over its cost limit) plus the
  breakpoints. Otherwise `focused_grid` at t* = √u* (`t_points` points; the
  intervals holding breakpoints take steps, for which its geometric part near
  0 is made). Where the critical inputs are equally spaced (QMGeo: its levels)
  with at least `t_points` breakpoints, every breakpoint instead (up to
  LATTICE_POINTS): their targets are pairs of critical inputs (all of which
  the search takes anyway, by matrix products), and every interval takes the
  chord, within ~(h/t*)²/4 of f at t* on a lattice of step h (t* itself would
  add 4 targets per critical input, summed one by one).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    t_star: t* = √u*, u* = min(S²/d, 4c²).
    t_points: the grid size (>= 8).
    num_clients: n, clients in the secure sum.
    limits: the `Limits` (`targets.breakpoints`).
    wide: the chord grid's size (above).

  Returns:
    The increasing distances, ending at 2c.
  """
  one = targets_lib.searched(mech, num_clients).mechanism
  lattice = lattice_grid(one, t_points, limits)
  if lattice is not None:
    return lattice
  near = exact_breakpoints(one, t_star)
  if near.size:   # exact curves: chords between breakpoints
    return _merged(focused_grid(mech.input_bound, t_star, t_points), near,
                   near.size)
  gaps = _vertex_breakpoints(one, limits)
  if gaps is not None and gaps.size <= t_points:
    # Every interval is free of breakpoints and takes the chord.
    points = (max(t_points, CHORD_POINTS) if wide else
              max(8, t_points - gaps.size))
    return _merged(chord_grid(mech.input_bound, t_star, points), gaps,
                   gaps.size)
  return _merged(focused_grid(mech.input_bound, t_star, t_points), gaps,
                 t_points)


def off_lattice(mech, t_grid,
                limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS) -> int:
  """How many distances put targets off the critical inputs.

  On a lattice of critical inputs (`targets.on_lattice`) the
  breakpoints do not, so `l2_grid`'s lattice grid has none.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    t_grid: the distances, or (a number) the size of `l2_grid`'s.
    limits: the `Limits` (`targets.breakpoints`).

  Returns:
    The count.
  """
  if not getattr(mech, 'piecewise_affine', False):
    return int(np.size(t_grid)) if np.ndim(t_grid) else int(t_grid)
  crit = targets_lib.mirrored_critical_inputs(mech)
  gaps = targets_lib.breakpoints(crit, mech.input_bound, limits)
  if np.ndim(t_grid) == 0:
    return 0 if lattice_grid(mech, t_grid, limits) is not None else int(t_grid)
  t_grid = np.asarray(t_grid, np.float64)
  if not targets_lib.on_lattice(crit):
    return t_grid.size
  near = np.min(np.abs(gaps[None, :] - t_grid[:, None]), axis=1)
  return int(np.count_nonzero(near > _TIE * t_grid))
