"""Round RDP of the d-coordinate secure sum on the ℓ2 route, from the curve f̄_α.

Σ_j f_α(t_j) <= d·ĝ_α(min(S²/d, 4c²)) by Jensen (package docstring), with ĝ_α
the least concave majorant of the curve's bound (`DivergenceCurve.majorant`)
at the orders of a sparse ladder (`grids.order_ladder`); the orders between
rungs by the convexity of (α-1)·D_α in α (`between_rungs`). α = ∞ composes
the same way (D∞ adds over independent coordinates).
"""

import math
from typing import Dict, Optional, Sequence

import numpy as np

from tff_quant.accounting import divergence
from tff_quant.accounting.secure_sum import cost
from tff_quant.accounting.secure_sum import curve as curve_lib
from tff_quant.accounting.secure_sum import grids
from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.accounting.secure_sum import targets as targets_lib
from tff_quant.common import exact_laws
from tff_quant.common import validation


class RoundRdp(dict):
  """{order: round RDP} (`vector_rdp`) that also says how f_α was bounded.

  Args:
    values: {order: round RDP}.
    method: the `DivergenceCurve.method` (a sub-sum or a local bound shows
      there, for the guarantee's text).
  """

  def __init__(self, values: Dict[float, float], method: str):
    super().__init__(values)
    self.method = method


def vector_rdp(mech, orders: Sequence[float], clients_per_round: int, dim: int,
               l2_sensitivity: float, t_points: int = 24,
               cells: int = targets_lib.DEFAULT_CELLS,
               others: str = 'any',
               limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS,
               pair_bounds: Optional[curve_lib.PairBounds] = None
               ) -> Dict[float, float]:
  """Round RDP of the d-coordinate secure sum when updates differ by <= l2_sensitivity in ℓ2.

  d·ĝ_α(min(S²/d, 4c²)) for each order (see the package docstring), with f̄
  evaluated on a distance grid focused at √u* (`grids.l2_grid`) and at the
  orders of `grids.order_ladder(orders)`; orders between rungs by convexity
  (`between_rungs`). Rényi divergence composes additively over the
  independent coordinates (Mironov 2017, docs/references.md).

  Args:
    mech: the mechanism each coordinate goes through (input bound c).
    orders: Rényi orders > 1 (math.inf allowed).
    clients_per_round: n, clients in the secure sum.
    dim: d, coordinates per client.
    l2_sensitivity: S, the most two neighbouring updates differ by in ℓ2
      (2·l2_clip under replace-one).
    t_points: distance grid size (>= 8), breakpoints
      (`grids.with_breakpoints`) included.
    cells: cells over [-c, c] for mechanisms bounded by envelopes.
    others: the others' inputs: 'any' (proved) or 'extremes'
      (`curve.divergence_curve`).
    limits: the `Limits` the search runs under.
    pair_bounds: how a pair is bounded for any others (`curve.PairBounds`).

  Returns:
    {order: RDP of one round, before subsampling} (a `RoundRdp`: its `method`
    says how the secure sum's divergences were bounded).

  Raises:
    ValueError: `dim` < 1, `l2_sensitivity` <= 0, or a bad order.
    CostError: the search is over `limits` with no looser bound to take.
  """
  validation.check_integer('dim', dim, 1)
  validation.check_positive('l2_sensitivity', l2_sensitivity)
  c = mech.input_bound
  u = min(l2_sensitivity**2 / dim, 4 * c**2)
  # Closed-form (central) divergences are cheap at every order: no ladder.
  rungs = (sorted(set(float(a) for a in orders)) if mech.central
           else grids.order_ladder(orders))
  grid = grids.l2_grid(mech, math.sqrt(u), t_points, clients_per_round, limits)
  curve_at = lambda g, rs: curve_lib.divergence_curve(
      mech, rs, clients_per_round, t_grid=g, cells=cells, others=others,
      limits=limits, pair_bounds=pair_bounds)
  if _affordable(mech, grid, rungs, clients_per_round, cells, others, limits):
    curve = curve_at(grid, rungs)
    per_rung = {a: dim * curve.majorant(a, u) for a in rungs}
    return RoundRdp(between_rungs(per_rung, orders), curve.method)
  # The wide grid over every rung is over the cost: the narrow grid at every
  # rung, and the wide one at the lowest rungs it affords (where ε is
  # usually set), each rung at the smaller majorant (both bound it), so a
  # rung's bound does not depend on how many others were asked with it.
  narrow = grids.l2_grid(mech, math.sqrt(u), t_points, clients_per_round,
                         limits, wide=False)
  curve = curve_at(narrow, rungs)
  per_rung = {a: dim * curve.majorant(a, u) for a in rungs}
  low = next((rungs[:k] for k in range(len(rungs) - 1, 0, -1)
              if _affordable(mech, grid, rungs[:k], clients_per_round, cells,
                             others, limits)), [])
  if low:
    wide = curve_at(grid, low)
    for a in low:
      per_rung[a] = min(per_rung[a], dim * wide.majorant(a, u))
  return RoundRdp(between_rungs(per_rung, orders), curve.method)


def _affordable(mech, grid: np.ndarray, rungs, num_clients: int, cells: int,
                others: str, limits: limits_lib.Limits) -> bool:
  """Whether the whole search on `grid` is within `limits.max_operations`
  (`cost.search_operations` of the sum the curve searches; over it the
  curve takes a sub-sum or the local bound)."""
  red = targets_lib.searched(mech, num_clients)
  one = red.mechanism
  if one.has_exact_divergences:
    return True
  finite = [a for a in rungs if math.isfinite(a)]
  off = grids.off_lattice(one, grid, limits)
  return cost.search_operations(one, red.num_clients, len(finite), off, cells,
                                others, limits) <= limits.max_operations


def between_rungs(per_rung: Dict[float, float], orders: Sequence[float]
                  ) -> Dict[float, float]:
  """Upper bounds at `orders` from upper bounds at the rungs of `order_ladder`.

  (α-1)·D_α is convex in α (a log-sum-exp of functions linear in α), for every
  pair of laws and so for the sup of the bounds: between rungs a < α < b,
  (α-1)·D_α <= ((b-α)(a-1)·D_a + (α-a)(b-1)·D_b) / (b-a). Orders below the
  first rung take it (D_α is non-decreasing in α).

  Args:
    per_rung: {rung: upper bound}.
    orders: the orders wanted (each at most the largest rung).

  Returns:
    {order: upper bound}.
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
    # Nine roundings of non-negative terms (the differences of orders are
    # exact or within u): raised by 12u.
    out[a] = min(per_rung[hi], mixed / (a - 1) * (1 + 12 * exact_laws.U))
  return out


def end_pair_is_worst(mech, num_clients: int, orders=(2, 8, 32),
                      limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
                      ) -> bool:
  """Whether no vertex target pair beats x = ±c at `orders` (to 1e-9).

  The condition under which routes that compose the ±c pair (PLD) are used;
  the pairs are searched under the PLD route's assumption
  (others='extremes').

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    num_clients: n, clients in the secure sum.
    orders: the Rényi orders compared.
    limits: the `Limits` the search runs under.

  Returns:
    True also where there are no vertex targets (or exact divergences).
  """
  if not mech.piecewise_affine or mech.has_exact_divergences:
    return True
  c = mech.input_bound
  curve = curve_lib.divergence_curve(mech, orders, num_clients, t_grid=[2 * c],
                                     others='extremes', limits=limits)
  ends = divergence.renyi_divergence_of_sum(mech, list(orders), num_clients)
  return all(curve.values[r.alpha][0] <= r.value * (1 + 1e-9) + 1e-12
             for r in ends)


def coordinate_route_applies(mech, dim: int, l2_clip: float) -> bool:
  """Whether c <= l2_clip/√d: every coordinate can move end to end (d × scalar).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (input bound c).
    dim: d, coordinates per client.
    l2_clip: the ℓ2 norm bound of each update.

  Returns:
    True on the coordinate route (to a relative 1e-12).
  """
  return mech.input_bound <= l2_clip / math.sqrt(dim) * (1 + 1e-12)
