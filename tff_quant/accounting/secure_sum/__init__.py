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

One module per step (each module's docstring gives its part of the proof):
* `targets`: the finite set of target pairs (vertices, or envelopes)
  whose sup bounds f_α at each grid distance; critical inputs, breakpoints.
* `grids`: the distances (`l2_grid`, chords between breakpoints) and orders
  (`order_ladder`) evaluated.
* `convolution`: the target rows against the others' law in the log domain,
  rounded upward, tails cut with their mass added back.
* `any_others`: the bound for any inputs of the others (proved, the default).
* `extreme_others`: the others at ±c in every mix (an assumption, except where
  the ends are the only vertices).
* `limits`, `cost`: every cost limit in one `Limits`, passed in; the cost
  estimates, and the sub-sum or local bound taken over the limit.
* `curve`: `divergence_curve`, the one dispatcher, and `DivergenceCurve`.
* `l2_route`: `vector_rdp`, the round RDP from the curve.
"""

from tff_quant.accounting.secure_sum.any_others import (blankets, common_part,
                                                        others_mixture,
                                                        vertex_rows)
from tff_quant.accounting.secure_sum.convolution import cut_tail
from tff_quant.accounting.secure_sum.cost import (affordable_clients,
                                                  clients_searched,
                                                  estimated_operations,
                                                  search_operations)
from tff_quant.accounting.secure_sum.curve import (OTHERS, DivergenceCurve,
                                                   PairBounds, check_others,
                                                   concave_majorant_at,
                                                   divergence_curve,
                                                   is_loose_method)
from tff_quant.accounting.secure_sum.extreme_others import (EVERY_MIX,
                                                            EXACT_SPLITS,
                                                            extreme_mixes,
                                                            vertex_splits)
from tff_quant.accounting.secure_sum.grids import (CHORD_POINTS,
                                                   DEFAULT_T_POINTS,
                                                   chord_grid,
                                                   distance_grid,
                                                   exact_breakpoints,
                                                   focused_grid, l2_grid,
                                                   off_lattice, order_ladder,
                                                   with_breakpoints)
from tff_quant.accounting.secure_sum.l2_route import (RoundRdp, between_rungs,
                                                      coordinate_route_applies,
                                                      end_pair_is_worst,
                                                      vector_rdp)
from tff_quant.accounting.secure_sum.limits import (DEFAULT_LIMITS, CostError,
                                                    Limits)
from tff_quant.accounting.secure_sum.targets import (
    DEFAULT_CELLS, TargetPairs, mirrored_critical_inputs, target_pairs)
