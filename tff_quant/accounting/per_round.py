"""Per-round RDP of one round's secure sum, the first step of the ε pipeline.

Neighbouring relation: one client's update replaced by any other (replace-one), the
number of participants being public (the decoder needs it). One round releases the
secure sum of every coordinate; the d coordinates are independent given the inputs.
Coordinate route (no ℓ2 clip given, or c <= l2_clip/√d): per-round RDP is
d × D_α(scalar sum) with every coordinate moving from +c to -c (attainable: the
ℓ2 ball of radius clip_norm contains the box [-c, c]^d when c = clip_norm/√d;
`per_round_rdp`).
ℓ2 route (c > l2_clip/√d, e.g. c = k·l2_clip/√d after a random rotation):
`secure_sum.vector_rdp`, d·ĝ_α(S²/d) with S = 2·l2_clip. In both, by default
(others='any') the bound holds for any inputs of the n-1 others
(`accounting.others`, proved); others='extremes' puts them at ±c in the worst
mix (the papers' setting: an assumption, and not a worst case, see
`accounting.attained`). D∞ is the sup over all inputs
(`divergence.epsilon_infinity`).

`composition.RoundAccountant.rdp` picks the route (and adds a conditioned
sum's normalisation); the RDP route then subsamples and converts these
values (`rdp_route`), and `composition` composes them over rounds.
"""

import math
from typing import Dict, Optional, Sequence

from tff_quant.accounting import divergence
from tff_quant.accounting import numerics
from tff_quant.accounting import rdp_route
from tff_quant.accounting import secure_sum

# Points (mixes × sum support) of the extremes' exact sums: above
# REDUCE_ABOVE_POINTS a mechanism's sum reduction serves instead (PBM: its
# one-trial sums, within 1e-6 of the exact value, at a small share of the
# exact sums' cost); above LOCAL_ABOVE_POINTS, with no reduction, the local
# divergence or D∞ (exact sums that large cost too much to build). Measured
# times: docs/performance.md, "Measured costs behind accounting choices".
REDUCE_ABOVE_POINTS = 1e6
LOCAL_ABOVE_POINTS = 5e7


def per_round_rdp(mech, clients_per_round: int, dim: int = 1,
                  orders: Sequence[int] = rdp_route.DEFAULT_ORDERS,
                  others: str = 'any',
                  limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS,
                  pair_bounds: Optional[secure_sum.PairBounds] = None, *,
                  reduce_above_points: float = REDUCE_ABOVE_POINTS,
                  local_above_points: float = LOCAL_ABOVE_POINTS
                  ) -> Dict[float, float]:
  """Per-round RDP ε(α) = dim × the worst D_α of the secure sum (α = inf too).

  others='any': `secure_sum.divergence_curve` at t = 2c, every target pair (vertex
  pairs, or cell envelopes) and any inputs of the others. others='extremes':
  targets at ±c (and every vertex pair for piecewise-affine mechanisms), the
  others at ±c in every mix (a bound of it where those sums are too large to
  build: `_extremes_divergences`).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    clients_per_round: clients in the secure sum, >= 1.
    dim: coordinates each client sends (composed d times).
    orders: integer Rényi orders >= 2 (math.inf is always added).
    others: what the others' inputs may be, 'any' or 'extremes' (above).
    limits: the `secure_sum.Limits` the target-pair search runs under.
    pair_bounds: how a pair is bounded for any others
      (`secure_sum.PairBounds`).
    reduce_above_points, local_above_points: the sizes of the extremes'
      exact sums above which a bound serves instead (`REDUCE_ABOVE_POINTS`,
      `LOCAL_ABOVE_POINTS`).

  Returns:
    {order: per-round RDP} at every integer order 2..max(orders) and at
    math.inf (D∞).

  Raises:
    ValueError: `others` neither 'any' nor 'extremes'.
  """
  secure_sum.check_others(others)
  all_orders = sorted(set(range(2, max(orders) + 1)))  # WBK needs every j <= α
  if others == 'any' and not mech.has_exact_divergences:
    rdp = {a: 0.0 for a in all_orders}
  else:
    rdp = {a: dim * v for a, v in
           _extremes_divergences(mech, all_orders, clients_per_round,
                                 reduce_above_points,
                                 local_above_points).items()}
  if not mech.has_exact_divergences and (mech.piecewise_affine or
                                         others == 'any'):
    # Targets at every vertex pair, not only ±c (at n = 1 an interior pair is
    # worse): the sup at the ladder's rungs, between them by convexity.
    rungs = secure_sum.order_ladder(all_orders)
    curve = secure_sum.divergence_curve(mech, rungs, clients_per_round,
                                        t_grid=[2 * mech.input_bound],
                                        others=others, limits=limits,
                                        pair_bounds=pair_bounds)
    sup = secure_sum.between_rungs({a: curve.values[a][0] for a in rungs},
                               all_orders)
    rdp = {a: max(v, dim * sup[a]) for a, v in rdp.items()}
  # The sum's D∞ is at most the local D∞ (post-processing), sup over all inputs.
  rdp[math.inf] = dim * divergence.epsilon_infinity(mech)
  return rdp


def _extremes_divergences(mech, orders, num_clients, reduce_above_points,
                          local_above_points) -> Dict[float, float]:
  """{order: D_α of one coordinate's secure sum, the others at ±c in the worst
  mix} (`divergence.renyi_divergence_of_sum`), or an upper bound of it where
  those sums are large: the mechanism's sum reduction (it holds for any
  others, so for these), else the local divergence (data processing) or the
  local D∞ (above `reduce_above_points`, `local_above_points`: the
  module's REDUCE_ABOVE_POINTS, LOCAL_ABOVE_POINTS by default). Exact
  values never exceed these bounds."""
  points = (0 if mech.has_exact_divergences else
            num_clients * (num_clients * (mech.num_levels - 1) + 1))
  red = mech.sum_reduction(num_clients)
  if (points > reduce_above_points and red is not None and
      red.mechanism.num_levels < mech.num_levels):
    res = divergence.renyi_divergence_of_sum(red.mechanism, orders,
                                             red.num_clients)
    # Plus the reduced laws' proved error (`numerics`), per copy.
    return {r.alpha: red.copies * (r.value + numerics.rdp_allowance(
        red.mechanism, red.num_clients, r.alpha)) for r in res}
  local = mech.local_divergences(orders, [2 * mech.input_bound])
  local = None if local is None else {a: float(local[a][0]) for a in orders}
  if points > local_above_points:   # D_α <= D∞ at every order
    return local or dict.fromkeys(orders, divergence.epsilon_infinity(mech))
  try:
    res = divergence.renyi_divergence_of_sum(mech, orders, num_clients)
    if mech.has_exact_divergences:
      # A translation-invariant sum (`sum_divergences`: ddgauss) carries its
      # laws' proved error itself (`noise_sum_log_error`).
      return {r.alpha: r.value for r in res}
    return {r.alpha: r.value + numerics.rdp_allowance(mech, num_clients,
                                                      r.alpha) for r in res}
  except divergence.UnresolvedSumError:
    # An exact value is never above the local bound (data processing), so
    # the bound only matters where the sum's law cannot be resolved.
    if local is None:
      raise
    return local

