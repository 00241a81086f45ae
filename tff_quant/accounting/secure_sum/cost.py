"""What a target-pair search costs, estimated before it starts.

Searches over `Limits.max_operations` are not run. Where a mechanism has a
closed-form local bound (`Mechanism.local_divergences`: one client's output,
which adds N(0, σ²) before input-free processing, bounds the sum for any
others by data processing) it takes the search's place: instant, where a
sub-sum's search costs up to the limit per evaluation. It ignores the others'
noise (about n× too much noise where that dominates).

Otherwise the n-client sum is the sum of the target and n'-1 others plus the
remaining others' independent outputs, so by data processing
f_α(n) <= f_α(n') for every n' <= n, for any inputs of the others (or under
the same ±c assumption). The largest n' whose search fits is searched
instead (`affordable_clients`); n' = 1 is one client's own output. Loose by
about n/n' where the others' noise dominates, but finite and proved where
the search used to be refused.
"""

from tff_quant.accounting import matrix_sums
from tff_quant.accounting import others as others_lib
from tff_quant.accounting.secure_sum import grids
from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.accounting.secure_sum import targets as targets_lib
from tff_quant.common import validation

Limits = limits_lib.Limits
DEFAULT_LIMITS = limits_lib.DEFAULT_LIMITS
CostError = limits_lib.CostError


def search_operations(mech, num_clients: int, num_orders: int, t_points: int,
                      cells: int, others: str = 'any',
                      limits: Limits = DEFAULT_LIMITS) -> float:
  """Elementary operations of the target-pair search of `mech`'s own sum.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (not sum-reduced).
    num_clients: n, clients in the secure sum.
    num_orders: finite orders evaluated.
    t_points: the grid distances whose targets are not all critical inputs
      (`grids.off_lattice`).
    cells: cells over [-c, c] for mechanisms bounded by envelopes.
    others: 'any' or 'extremes'.
    limits: the `Limits` (`matrix_levels`: which route the sums take).

  Returns:
    The estimate.
  """
  levels = mech.num_levels
  crit = targets_lib.mirrored_critical_inputs(mech).size
  if getattr(mech, 'piecewise_affine', False):
    basis, core, extra = crit, crit, 4 * crit * t_points
  else:
    basis, core, extra = 2 * (cells + crit), cells + crit, 0
  length = num_clients * (levels - 1) + 1
  sums = len(others_lib.split_groups(0, num_clients - 1, (num_clients - 1) // 2))
  if others == 'any' and num_clients > 1 and levels <= limits.matrix_levels:
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


def estimated_operations(mech, num_clients: int, num_orders: int,
                         t_points: int = grids.DEFAULT_T_POINTS,
                         cells: int = targets_lib.DEFAULT_CELLS,
                         limits: Limits = DEFAULT_LIMITS) -> float:
  """Elementary operations `divergence_curve` will do, counted before it starts.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    num_clients: n, clients in the secure sum.
    num_orders: finite orders evaluated.
    t_points: the distance grid's size.
    cells: cells over [-c, c] for mechanisms bounded by envelopes.
    limits: the `Limits` the curve runs under.

  Returns:
    The estimate: 0 where it takes a closed form (exact divergences, or a
    local bound in place of a search over `limits.max_operations`).
  """
  red = targets_lib.searched(mech, num_clients)
  one = red.mechanism
  if one.has_exact_divergences:
    return 0.0
  t_points = grids.off_lattice(one, t_points, limits)
  sub = clients_searched(one, red.num_clients, num_orders, t_points, cells,
                         limits=limits)
  if sub:
    return search_operations(one, sub, num_orders, t_points, cells,
                             limits=limits)
  return 0.0 if one.has_local_bound else search_operations(
      one, red.num_clients, num_orders, t_points, cells, limits=limits)


def clients_searched(mech, num_clients: int, num_orders: int, t_points: int,
                     cells: int, others: str = 'any',
                     limits: Limits = DEFAULT_LIMITS) -> int:
  """How many clients' sum `divergence_curve` searches for `mech`'s own n-client sum.

  n within `limits.max_operations`; over it, 0 where the closed-form local
  bound takes its place (instant, where a sub-sum's envelope search costs up
  to the limit per evaluation and did not beat it in the noise-dominated
  frontier cells measured), else the largest affordable sub-sum
  (`affordable_clients`).

  Args:
    mech, num_clients, num_orders, t_points, cells, others: as for
      `search_operations`.
    limits: the `Limits`.

  Returns:
    n' (0: the local bound, or refused where there is none).
  """
  if search_operations(mech, num_clients, num_orders, t_points, cells, others,
                       limits) <= limits.max_operations:
    return num_clients
  if mech.has_local_bound:
    return 0
  return affordable_clients(mech, num_clients, num_orders, t_points, cells,
                            others, limits)


def affordable_clients(mech, num_clients: int, num_orders: int,
                       t_points: int = grids.DEFAULT_T_POINTS,
                       cells: int = targets_lib.DEFAULT_CELLS,
                       others: str = 'any',
                       limits: Limits = DEFAULT_LIMITS) -> int:
  """The largest n' <= n whose search of `mech`'s own sum is within the limit.

  f_α(n) <= f_α(n') by data processing (module docstring). The cost grows
  with n', so bisection.

  Args:
    mech, num_clients, num_orders, t_points, cells, others: as for
      `search_operations`.
    limits: the `Limits` (`max_operations`).

  Returns:
    n' (0: not even one client's search fits).

  Raises:
    ValueError: `num_clients` < 1 or `num_orders` < 0.
  """
  validation.check_integer('num_clients', num_clients, 1)
  validation.check_integer('num_orders', num_orders, 0)
  cost = lambda n: search_operations(mech, n, num_orders, t_points, cells,
                                     others, limits)
  if cost(1) > limits.max_operations:
    return 0
  lo, hi = 1, num_clients   # cost(lo) fits; find the last n that fits
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if cost(mid) <= limits.max_operations:
      lo = mid
    else:
      hi = mid - 1
  return lo
