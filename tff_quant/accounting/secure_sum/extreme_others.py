"""The others at ±c in every mix (others='extremes'), and where that is proved.

Every mix of the n-1 others at ±c, the same family as
`divergence.renyi_divergence_of_sum`: an assumption. Mixes are bounded in
groups (`others.split_groups`): for k in [k0, k1] others at +c, the others'
law is T * S_k with T = k0 at +c and n-1-k1 at -c, so by data processing
D(P*T || Q*T) bounds every k of the group. An exhaustive search over every
multiset of critical inputs for the others and every target pair (tested for
n <= 3) finds no worse case for RQM, PBM and QMGeo at finite orders; no
proof exists.

Where the law is affine in the input on the whole range (one PBM trial: the
ends are its only vertices) the ±c mixes are the sup over any inputs of the
others (`blankets.two_vertices`), so they bound the sum for any others too
(`ends_are_vertices`).
"""

from concurrent import futures
import math

import numpy as np

from tff_quant.accounting import blankets as blankets_lib
from tff_quant.accounting import divergence
from tff_quant.accounting import others as others_lib
from tff_quant.accounting.secure_sum import convolution
from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.accounting.secure_sum import targets as targets_lib

EXACT_SPLITS = others_lib.EXACT_SPLITS
split_groups = others_lib.split_groups
# Up to this many others, where the ±c mixes are the sup over any inputs of
# the others (`ends_are_vertices`), every mix is evaluated alone
# (`vertex_splits`): a group's bound drops k1 - k0 others, about (k1 -
# k0)/(n - 1) of D too much where the mixes are near equal (QMGeo, 16
# levels on ±16c, p = 0.46, n = 100, at t = 2/√8192: 7.5% with EXACT_SPLITS,
# 2.0106e-4 against 2.1619e-4).
EVERY_MIX = 128


def vertex_splits(num_clients: int, exact: int) -> int:
  """The single groups `extreme_mixes` takes where the ends are the vertices.

  Args:
    num_clients: n, clients in the secure sum.
    exact: the single groups asked for (`others.split_groups`).

  Returns:
    n (every mix alone) where n - 1 <= EVERY_MIX, else `exact`.
  """
  return max(exact, num_clients) if num_clients - 1 <= EVERY_MIX else exact


def ends_are_vertices(mech, targets: targets_lib.TargetPairs) -> bool:
  """Whether the ±c mixes are the sup over any inputs of the others.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    targets: its `TargetPairs`.

  Returns:
    True for vertex targets whose critical inputs are just ±c (one PBM
    trial): the law is affine in the input on the whole range
    (`blankets.two_vertices`).
  """
  return targets.method == 'vertices' and blankets_lib.two_vertices(
      targets_lib.mirrored_critical_inputs(mech), mech.input_bound)


def extreme_mixes(mech, targets: targets_lib.TargetPairs, num_clients: int,
                  orders: np.ndarray, exact: int, tail: float = math.inf,
                  limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS
                  ) -> np.ndarray:
  """The largest log Σ P^α Q^(1-α) over the others at ±c, every mix k of n-1 at +c.

  A group [k0, k1] of mixes is bounded by its common part (k0 at +c, n-1-k1
  at -c): data processing (module docstring). Each group's law is cut `tail`
  below its top (`convolution.cut_tail`, `convolution.add_lost`); groups are
  evaluated in threads (the FFTs and numpy's loops release the GIL).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    targets: its `TargetPairs`.
    num_clients: n, clients in the secure sum.
    orders: [orders] finite Rényi orders > 1.
    exact: single groups next to each anchor (`others.split_groups`).
    tail: how far below its top each group's law may be cut.
    limits: the `Limits` (`convolution.with_sum`).

  Returns:
    [orders, pairs] the log power sums, at least 0.
  """
  worst = np.full((orders.size, len(targets.pairs)), 0.0)
  first = (num_clients - 1) // 2 if targets.symmetric else 0
  at_plus, at_minus = divergence.end_log_pmfs(mech)
  log_e0 = convolution.pair_log_sums(targets, targets.basis, orders)

  def group(bounds):
    k0, k1 = bounds
    conv, lost = convolution.with_sum(
        targets.basis, [(at_plus, k0), (at_minus, num_clients - 1 - k1)],
        tail, limits)
    return convolution.add_lost(
        convolution.pair_log_sums(targets, conv, orders), lost, log_e0)

  groups = split_groups(first, num_clients - 1, (num_clients - 1) // 2, exact)
  with futures.ThreadPoolExecutor(others_lib.workers(len(groups))) as pool:
    for value in pool.map(group, groups):
      worst = np.maximum(worst, value)
  return worst
