"""The finite set of target pairs whose sup bounds f_α at every grid distance.

f_α(t) is a sup over target pairs |x - x'| <= t in [-c, c] (package
docstring); the search evaluates a finite set of candidates that provably
attains or bounds it:

* Vertex targets, when the mechanism's pmf is affine in x between consecutive
  critical inputs and continuous (`piecewise_affine`: RQM, BQ, QMGeo with full
  support): exp((α-1)D_α) is jointly convex in the pair of laws and the sum's
  law is affine in the target's pmf, so over the polygon {|x - x'| <= t} ∩
  (segment × segment) the sup sits at a vertex: a pair of critical inputs, or
  (b, b ± t), (b ± t, b) for a critical input b. Exact at every grid t.
* Envelopes otherwise (quantized Gaussian, randomized projection): the range
  is cut into cells whose ends include every critical input; each level's
  probability is unimodal in x with its peak at a critical input, so on a
  cell it is at most the larger and at least the smaller end value. Replacing
  P by that upper envelope and Q by the lower one only increases
  Σ P^α Q^(1-α) (α > 1), before and after convolving with the others' law.

The distances between critical inputs ("breakpoints") are where f_α may
bend: between consecutive ones exp((α-1)f_α) is a max of convex functions
(`grids`, `curve.DivergenceCurve`).
"""

import dataclasses
from typing import Optional

import numpy as np

from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.common import validation
from tff_quant.mechanisms import base as mech_base

DEFAULT_CELLS = 64   # cells per [-c, c] for the envelope bound
TIE = 1e-9           # breakpoints this close (relative) to a distance sit on it


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
      the same sums (`any_others.mirror_classes`).
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


def reversal_invariant(log_rows: np.ndarray) -> bool:
  """Whether `log_rows` equals itself reversed along every axis.

  Args:
    log_rows: an array of logs (-inf for zeros).

  Returns:
    True where the zeros agree and the finite entries are within 1e-12.
  """
  flipped = np.flip(log_rows)
  finite = np.isfinite(log_rows)
  return (np.array_equal(finite, np.isfinite(flipped)) and
          np.allclose(log_rows[finite], flipped[finite], rtol=0, atol=1e-12))


def _mirrored(mech, xs: np.ndarray, rows: np.ndarray) -> bool:
  """xs == -xs as a set and log_pmf(-x) is log_pmf(x) with the levels reversed."""
  return np.array_equal(np.sort(-xs), xs) and reversal_invariant(rows)


def mirrored_critical_inputs(mech) -> np.ndarray:
  """The mechanism's critical inputs in [-c, c], mirrored.

  Extra breakpoints are harmless, and symmetry halves the others' mixes;
  rounding twins (an input and its mirror's mirror, ~1e-16 apart) are merged
  within TIE·2c: one target row each.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its `critical_inputs`).

  Returns:
    The sorted inputs, symmetric about 0, ±c included where critical.
  """
  c = mech.input_bound
  half = np.unique(np.abs(np.clip(mech.critical_inputs(), -c, c)))
  half = half[np.concatenate([[True], np.diff(half) > TIE * 2 * c])]
  return np.union1d(-half, half)


def breakpoints(crit: np.ndarray, c: float,
                limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
                ) -> np.ndarray:
  """Distinct positive distances between critical inputs.

  Rounding twins (a mirrored input and the mechanism's own differ by ~1e-16)
  are merged within TIE relative (on such a sliver the chord is off by
  < f·TIE). Over `limits.pairwise_inputs` inputs (RQM at 16 bits: 52,430,
  whose K² distances would take 20 GB) the inputs must be a lattice with its
  two ends apart (`mirrored_critical_inputs` of a levels grid and ±c): then
  the distances are the lattice's multiples and each end's distance to every
  input, in O(K).

  Args:
    crit: sorted critical inputs (`mirrored_critical_inputs`).
    c: the input bound.
    limits: the `Limits` (its `pairwise_inputs`).

  Returns:
    The sorted distances.

  Raises:
    ValueError: more than `limits.pairwise_inputs` inputs off a lattice,
      before anything is allocated.
  """
  if crit.size > limits.pairwise_inputs:
    inner = crit[1:-1]
    if not on_lattice(inner):
      raise ValueError(f'{crit.size} critical inputs off a lattice: their '
                       f'pairwise distances would take {crit.size**2 * 8 / 2**30:.0f}'
                       ' GB; use fewer levels.')
    step = (inner[-1] - inner[0]) / (inner.size - 1)
    gaps = np.concatenate([step * np.arange(1, inner.size),
                           np.abs(crit[0] - crit), np.abs(crit[-1] - crit)])
  else:
    gaps = np.abs(crit[:, None] - crit[None, :]).ravel()
  gaps = np.unique(gaps)
  gaps = gaps[gaps > TIE * 2 * c]
  return gaps[np.concatenate([[True], np.diff(gaps) > TIE * gaps[1:]])]


def _snapped(xs: np.ndarray, crit: np.ndarray, c: float) -> np.ndarray:
  """xs with each value within TIE·2c of a critical input replaced by it:
  b ± t for a critical-input distance t lands on a critical input up to
  rounding, and is that input (one target row, not a mix of two)."""
  at = np.clip(np.searchsorted(crit, xs), 1, len(crit) - 1)
  near = np.where(np.abs(crit[at] - xs) < np.abs(crit[at - 1] - xs),
                  crit[at], crit[at - 1])
  return np.where(np.abs(near - xs) <= TIE * 2 * c, near, xs)


def on_lattice(crit: np.ndarray) -> bool:
  """Whether the critical inputs are equally spaced (to TIE).

  Then b ± (a distance between two of them) is one of them or outside
  [-c, c], so a grid of those distances makes every target pair a pair of
  critical inputs (`grids.l2_grid`).

  Args:
    crit: sorted critical inputs, rounding twins merged
      (`mirrored_critical_inputs`).

  Returns:
    True on a lattice (False for fewer than two inputs).
  """
  gaps = np.diff(crit)
  return bool(gaps.size and np.all(np.abs(gaps - gaps[0]) <= TIE * gaps[0]))


def searched(mech, num_clients: int):
  """The `SumReduction` whose sum is searched.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    num_clients: n, clients in the secure sum.

  Returns:
    The mechanism's own (`Mechanism.sum_reduction`), else the identity
    (mech, 1 copy, n clients).
  """
  red = mech.sum_reduction(num_clients)
  return red or mech_base.SumReduction(mech, 1, num_clients, '')


def target_pairs(mech, t_grid: np.ndarray, cells: int = DEFAULT_CELLS,
                 limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
                 ) -> TargetPairs:
  """The finite set of target pairs whose sup bounds f_α at every grid distance.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    t_grid: the grid distances.
    cells: cells over [-c, c] for mechanisms bounded by envelopes (>= 2).
    limits: the `Limits` (`breakpoints` reads `pairwise_inputs`).

  Returns:
    Vertex targets for a `piecewise_affine` mechanism, else envelopes
    (module docstring).

  Raises:
    ValueError: `cells` < 2 (envelopes), or critical inputs too many to take
      pairwise off a lattice (`breakpoints`).
    CostError: the targets' arrays and the rows mixed from them would exceed
      `limits.max_bytes` (estimated before anything is allocated).
  """
  if getattr(mech, 'piecewise_affine', False):
    return _vertex_targets(mech, np.asarray(t_grid), limits)
  validation.check_integer('cells', cells, 2)
  return _envelope_targets(mech, cells, limits)


def _check_bytes(mech, rows: int, own: float, limits) -> None:
  """Refuses, before allocating, targets whose arrays (`own` bytes) plus
  the rows the search mixes from them (the upper and lower rows and a
  temporary of that size: 3·8·rows·L) exceed `limits.max_bytes`."""
  need = own + 3 * 8 * rows * mech.num_levels
  if need > limits.max_bytes:
    raise limits_lib.CostError(
        f'The target pairs of {mech!r} need ~{need / 2**30:.3g} GiB '
        f'({rows} target rows of {mech.num_levels} levels; limit '
        f'Limits.max_bytes = {limits.max_bytes / 2**30:.3g} GiB): lower '
        '`cells`, the grid, or the levels.')


def _vertex_targets(mech, t_grid: np.ndarray, limits) -> TargetPairs:
  """Targets (b, b ± t) for every critical input b and grid distance t, and
  every pair of critical inputs; each row a mix of two adjacent critical
  inputs' laws."""
  c = mech.input_bound
  crit = mirrored_critical_inputs(mech)
  k = len(crit)
  ends, base = (a.ravel() for a in np.meshgrid(t_grid, crit, indexing='ij'))
  starts = np.concatenate([base, base])
  shifted = _snapped(np.concatenate([base - ends, base + ends]), crit, c)
  inside = (shifted >= -c) & (shifted <= c)
  starts, shifted = starts[inside], shifted[inside]
  xs = np.union1d(crit, shifted)
  # The weights (rows x k) and the basis (k x L), then the mixed rows.
  _check_bytes(mech, len(xs), 8.0 * k * (len(xs) + mech.num_levels), limits)
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
                     breakpoints(crit, c, limits))


def _envelope_targets(mech, cells: int, limits) -> TargetPairs:
  """Every pair of cells (ends at the critical inputs and `cells` equal
  steps), the upper envelope of one against the lower of the other."""
  c = mech.input_bound
  crit = mirrored_critical_inputs(mech)
  line = np.linspace(-c, c, cells + 1)
  grid = np.union1d(np.union1d(line, -line), crit)
  k = len(grid) - 1
  # The laws at the grid and the envelopes (3k x L), the weights (2 x k x 2k)
  # and identity, the k² pairs (two int64) and their gaps (three floats).
  _check_bytes(mech, k, 8.0 * (3 * k * mech.num_levels + 5 * k * k +
                               5 * k * k), limits)
  at = np.stack([mech.log_pmf(x) for x in grid])
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
