"""f̄_α on a distance grid: the one dispatcher (`divergence_curve`).

Which bound each curve takes, every one an upper bound on f_α at each grid
distance:

* Exact (`Mechanism.sum_divergences`): closed form or translation
  invariance, at every t.
* Sums that reduce to a simpler one (`Mechanism.sum_reduction`), for any
  inputs of the others: PBM's output is a function of m - 1 independent
  Bernoulli trials at the same input, so the server's view is a function of
  the m - 1 per-trial secure sums (data processing) and
  f_α <= (m - 1)·f_α of one trial (Rényi divergence adds over independent
  releases, Mironov 2017), each affine in x, so exact. Tight to first order
  where the sum is near Gaussian: PBM 16 levels, θ = 0.001, n = 100:
  2.4049e-6 against 2.4000e-6 for the exact ±c mixes (α = 2, t = 2c). BQ's
  output is a rounding plus input-free Binomial(m, 1/2) noise, so dropping
  the others' rounded inputs (data processing) leaves one client with
  Binomial(n·m, 1/2) noise: exact (attained with the others on the rounding
  grid).
* The target-pair search (`targets`) over the others: for any inputs
  (`any_others`, proved) or at ±c (`extreme_others`, an assumption). The
  quantized Gaussian and the randomized projection add N(0, σ²) before
  input-free processing, so one client's Gaussian D_α = α t²/(2σ²) bounds the
  sum for any others (data processing; `Mechanism.local_divergences`, for the
  randomized projection also its randomized response's): the curve takes the
  smaller at each grid point, and the local bound alone where the search is
  over `Limits.max_operations` (`cost`).
* D∞ uses n = 1 (the sum's D∞ is at most the target's local D∞ by data
  processing), so it needs no assumption on the others.
"""

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
from scipy import special

from tff_quant.accounting import divergence
from tff_quant.accounting import numerics
from tff_quant.accounting.secure_sum import any_others
from tff_quant.accounting.secure_sum import convolution
from tff_quant.accounting.secure_sum import cost
from tff_quant.accounting.secure_sum import extreme_others
from tff_quant.accounting.secure_sum import grids
from tff_quant.accounting.secure_sum import limits as limits_lib
from tff_quant.accounting.secure_sum import targets as targets_lib
from tff_quant.common import exact_laws
from tff_quant.common import validation

OTHERS = ('any', 'extremes')   # what the accountant assumes of the others' inputs
CHORD_STEPS = 32   # sub-steps per interval of the chord bound (`DivergenceCurve`)
_LOCAL_METHOD = 'local (one client\'s output, the others\' noise not counted)'
_SUB_SUM_METHOD = 'the rest dropped: data processing'
_TIE = targets_lib.TIE


def check_others(others: str) -> None:
  """Checks that `others` names one of OTHERS.

  Args:
    others: the others' inputs: 'any' or 'extremes'.

  Raises:
    ValueError: any other value.
  """
  if others not in OTHERS:
    raise ValueError(f'`others` must be one of {OTHERS}, got {others!r}.')


def is_loose_method(method: str) -> bool:
  """Whether a `DivergenceCurve.method` took a bound looser than the search over every client.

  Args:
    method: the method's text.

  Returns:
    True for one client's local bound alone, or a sub-sum.
  """
  return method.startswith(_LOCAL_METHOD) or _SUB_SUM_METHOD in method


@dataclasses.dataclass
class PairBounds:
  """How a target pair is bounded for any inputs of the others (others='any').

  Where the ends are the only vertices (`extreme_others.ends_are_vertices`)
  each pair takes the smaller of the mixture bound and the ±c mixes. With
  `end_mixes` False the mixes are skipped: the pair bound is then the
  mixture bound alone, larger or equal and still proved. At RQM 256
  levels, Δ >= 256c, n = 1,000 they leave ε unchanged (the mixture is the
  smaller at the pairs ε depends on) and take much of an evaluation
  (docs/performance.md); at n = 30 they are 14% tighter at every distance
  (a calibration's search runs without them where they do not lower ε,
  then evaluates its answer in full: `calibration.oracle`).

  Attributes:
    end_mixes: whether the ±c mixes are taken where they apply for any others.
    skipped: the mechanisms whose mixes were skipped (appended to).
    extreme_mixes: the ±c mixes' bound (`extreme_others.extreme_mixes`'
      signature); also others='extremes' takes it.
    constructions: the mixture bound's constructions
      (`any_others.blankets`' signature).
  """
  end_mixes: bool = True
  skipped: List = dataclasses.field(default_factory=list)
  extreme_mixes: Callable = extreme_others.extreme_mixes
  constructions: Callable = any_others.blankets


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
  when P moves: log of an affine function.) Near 0 (f ≈ C t²) the chord is
  within (r-1)²/4 of f on a grid of ratio r, where the step bound is r²
  above it: 24 distance points then give what ~300 points of steps give.

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
    """The bound on u ↦ f_α(√u) as points.

    Args:
      order: a Rényi order of `values`.

    Returns:
      (u, y): points whose step function (y on (u_i, u_{i+1}], and at the
      last u) lies above the bound.
    """
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
      # Its rounding: the two-point mixture's (exact_laws), the products k·f
      # (u of the larger), the division by k and its own value (u each).
      top = k * max(abs(f0[s]), abs(f[s]))
      chord = chord + ((exact_laws.two_point_mixture_error(top, one_sided=False)
                        + exact_laws.U * top) / k + 2 * exact_laws.U * np.abs(chord)
                       ) * (1 + 4 * exact_laws.U)
      chord[-1] = f[s]
      ts = t0[s] + np.concatenate([[0.0], lam[:-1]]) * (self.t[s] - t0[s])
      us.append(ts**2)
      ys.append(np.minimum(chord, f[s]))   # the step bound holds too
    us.append([self.t[-1]**2])
    ys.append([f[-1]])
    return np.concatenate(us), np.concatenate(ys)

  def majorant(self, order: float, u: float) -> float:
    """ĝ_α(u): the least concave majorant of the bound on u ↦ f_α(√u), u in [0, 4c²].

    Args:
      order: a Rényi order of `values`.
      u: the squared distance (clipped to [0, 4c²]).

    Returns:
      The majorant's value (inf where the bound is infinite somewhere).
    """
    us, ys = self.bound_points(order)
    return concave_majorant_at(us, ys, u)


def concave_majorant_at(x: np.ndarray, y: np.ndarray, at: float) -> float:
  """An upper bound on the least concave majorant of the points (x, y) at
  `at` (clipped to [x_0, x_last]), with its own rounding carried.

  The majorant at v is the largest (1-θ)y_a + θy_b over pairs x_a <= v <=
  x_b with (1-θ)x_a + θx_b = v, computed over every such pair (no hull test
  to misjudge). Rounding: y is first made non-decreasing (max-accumulated:
  only raised), so the majorant is non-decreasing; abscissae computed within
  a relative 7u of the positions they stand for (t_0 + λΔt, then squared)
  are covered by reading at v(1 + 8u) (a pair straddling v in exact
  positions straddles a point <= v(1 + 7u) in computed ones); θ =
  (v - x_a)/(x_b - x_a) is within 5u relative (each difference exact by
  Sterbenz or within 2u), so each value within 16u·max|y| (y_b - y_a up to
  2·max|y| where signs mix); the result is raised by 1 + 4u more for one
  product by the caller (d·ĝ on the ℓ2 route).

  Args:
    x: [N] increasing abscissae, finite and >= 0 (squared distances: the
      7u argument reads at v(1 + 8u), which moves left for v < 0).
    y: [N] ordinates (an infinite one makes the majorant infinite).
    at: the abscissa.

  Returns:
    The bound (inf where some y is).

  Raises:
    ValueError: a negative abscissa.
  """
  x = np.asarray(x, np.float64)
  if x.size and not x[0] >= 0:
    raise ValueError(f'`x` must be >= 0 (squared distances), got {x[0]}.')
  if not np.all(np.isfinite(y)):
    return math.inf
  u = exact_laws.U
  y = np.maximum.accumulate(np.asarray(y, np.float64))
  v = min(max(at * (1 + 8 * u), x[0]), x[-1])
  left, right = x <= v, x >= v
  xa, ya = x[left][:, None], y[left][:, None]
  xb, yb = x[right][None, :], y[right][None, :]
  width = xb - xa
  with np.errstate(divide='ignore', invalid='ignore'):
    values = np.where(width > 0, ya + (v - xa) / width * (yb - ya),
                      np.maximum(ya, yb))
  best = float(np.max(values))
  return (best + 16 * u * float(np.max(np.abs(y)))) * (1 + 4 * u)


def _checked_grid(c: float, t_points: int, t_grid) -> np.ndarray:
  """`t_grid` (default `grids.distance_grid(c, t_points)`) as floats,
  checked to increase within (0, 2c] and end at 2c."""
  if t_grid is None:
    t_grid = grids.distance_grid(c, t_points)
  t_grid = np.asarray(t_grid, np.float64)
  if not (t_grid[0] > 0 and np.all(np.diff(t_grid) > 0)
          and abs(t_grid[-1] - 2 * c) <= 1e-12 * c):
    raise ValueError('`t_grid` must increase within (0, 2c] and end at 2c = '
                     f'{2 * c!r}.')
  return t_grid


def divergence_curve(mech, orders: Sequence[float], num_clients: int,
                     t_points: int = grids.DEFAULT_T_POINTS,
                     cells: int = targets_lib.DEFAULT_CELLS,
                     t_grid: Optional[np.ndarray] = None,
                     exact_splits: int = extreme_others.EXACT_SPLITS,
                     others: str = 'any',
                     limits: limits_lib.Limits = limits_lib.DEFAULT_LIMITS,
                     pair_bounds: Optional[PairBounds] = None
                     ) -> DivergenceCurve:
  """f̄_α on a distance grid: see the module docstring for why each value is an upper bound.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    orders: Rényi orders > 1 (math.inf allowed).
    num_clients: n >= 1, clients in the secure sum.
    t_points: distance grid size (>= 4), when `t_grid` is not given.
    cells: cells over [-c, c] for mechanisms bounded by envelopes.
    t_grid: increasing distances in (0, 2c] ending at 2c (default
      `grids.distance_grid(c, t_points)`).
    exact_splits: single groups of the others next to each anchor
      (`others.split_groups`); n or more evaluates each on its own.
    others: 'any' (default): a bound for any inputs of the n-1 others in
      [-c, c] (`any_others.others_mixture`, proved); 'extremes': the worst
      mix of the others at ±c (`extreme_others.extreme_mixes`; a
      search-backed assumption, exhaustive over critical inputs for n <= 3,
      tighter where the laws barely overlap).
    limits: the `Limits` the search runs under.
    pair_bounds: how a pair is bounded for any others (default `PairBounds()`).

  Returns:
    The `DivergenceCurve`.

  Raises:
    ValueError: an order <= 1, or a bad `t_grid`.
    CostError: an evaluation estimated above `limits.max_operations` (or
      its laws above `limits.max_bytes`) with no local bound to take its
      place (the message gives the estimate and what to lower).
  """
  validation.check_integer('num_clients', num_clients, 1)
  check_others(others)
  orders = sorted(set(validation.check_orders('orders', orders)))
  t_grid = _checked_grid(mech.input_bound, t_points, t_grid)
  pair_bounds = pair_bounds or PairBounds()
  again = lambda m, n: divergence_curve(
      m, orders, n, t_grid=t_grid, cells=cells, exact_splits=exact_splits,
      others=others, limits=limits, pair_bounds=pair_bounds)
  curve = _reduced_or_exact(mech, orders, num_clients, t_grid, again)
  if curve is not None:
    return curve
  local = mech.local_divergences(orders, t_grid)
  curve = _within_cost(mech, orders, num_clients, t_grid, cells, others,
                       limits, local, again)
  if curve is not None:
    return curve
  return _search(mech, orders, num_clients, t_grid, cells, exact_splits,
                 others, limits, pair_bounds, local)


def _reduced_or_exact(mech, orders, num_clients, t_grid, again
                      ) -> Optional[DivergenceCurve]:
  """The curve of a sum that reduces to a simpler one (`again` on it), or
  the exact one (`Mechanism.sum_divergences`); None for a search."""
  red = targets_lib.searched(mech, num_clients)
  if red.mechanism is not mech:
    # Mechanism.sum_reduction: f_α <= copies·f_α of the reduced sum.
    # exp((α-1)·k·f) = (exp((α-1)f))^k stays convex where exp((α-1)f) is, so
    # the chord intervals carry over.
    curve = again(red.mechanism, red.num_clients)
    return dataclasses.replace(
        curve, values={a: red.copies * v for a, v in curve.values.items()},
        method=f'{curve.method} ({red.why})', num_clients=num_clients)
  own = mech.sum_divergences(orders, num_clients, t_grid)
  if own is None:
    return None
  # Exact at every t (closed form / translation invariance).
  return DivergenceCurve(t_grid, {a: np.maximum(np.asarray(own[a]), 0.0)
                                  for a in orders}, 'exact', num_clients,
                         grids.convex_between_breakpoints(
                             t_grid, mech.divergence_breakpoint_step))


def _within_cost(mech, orders, num_clients, t_grid, cells, others, limits,
                 local, again) -> Optional[DivergenceCurve]:
  """The curve where the whole search is over `limits.max_operations`: the
  largest affordable sub-sum's (f_α(n) <= f_α(n'): the other n - n'
  clients' outputs dropped), else the local bound; None where the whole
  search fits.

  Raises:
    CostError: over the limit with no local bound and no sub-sum.
  """
  finite = [a for a in orders if math.isfinite(a)]
  off = grids.off_lattice(mech, t_grid, limits)
  ops = cost.search_operations(mech, num_clients, len(finite), off, cells,
                               others, limits)
  sub = cost.clients_searched(mech, num_clients, len(finite), off, cells,
                              others, limits)
  if sub == num_clients:
    return None
  if sub:
    curve = again(mech, sub)
    return dataclasses.replace(
        curve, num_clients=num_clients,
        method=f'{curve.method} (the target and {sub - 1} of the '
        f'{num_clients - 1} others searched, {_SUB_SUM_METHOD}; '
        f'all {num_clients} need ~{ops:.2g} operations)')
  if local is not None:
    return DivergenceCurve(t_grid, local, _LOCAL_METHOD, num_clients)
  raise cost.CostError(
      f'The search over target pairs (ℓ2 route, or the coordinate route\'s '
      f'vertex pairs) for {mech!r} with {num_clients} clients and '
      f'{len(finite)} orders needs ~{ops:.2g} operations (limit '
      f'{limits.max_operations:.2g}, about a minute): lower '
      '`t_points`/`cells`, the number of orders, or the levels.')


def _search(mech, orders, num_clients, t_grid, cells, exact_splits, others,
            limits, pair_bounds, local) -> DivergenceCurve:
  """The target-pair search's curve, capped by the local bound where there
  is one; the local bound alone where the pairs' laws are over
  `limits.max_bytes` or the search's sum law is unresolved.

  Raises:
    CostError: the laws over `limits.max_bytes` with no local bound.
  """
  try:   # refused before allocating where the laws would not fit
    targets = targets_lib.target_pairs(mech, t_grid, cells, limits)
  except cost.CostError as err:
    if local is None:
      raise
    return DivergenceCurve(t_grid, local, f'{_LOCAL_METHOD} ({err})',
                           num_clients)
  try:
    per_pair = _pair_divergences(mech, targets, orders, num_clients,
                                 exact_splits, others, limits, pair_bounds)
  except divergence.UnresolvedSumError:
    if local is None:
      raise
    # E.g. the quantized Gaussian at huge σ: interior levels ~1e-300.
    return DivergenceCurve(t_grid, local, f'{_LOCAL_METHOD} (the search\'s '
                           'sum law was unresolved)', num_clients)
  return _assembled(targets, per_pair, t_grid, local, num_clients)


def _pair_divergences(mech, targets: targets_lib.TargetPairs,
                      orders: Sequence[float], num_clients: int,
                      exact_splits: int, others: str, limits, pair_bounds
                      ) -> Dict[float, np.ndarray]:
  """{order: [pairs] upper bound on D_α of each target pair's secure sum}:
  D∞ from the target alone (the sum's D∞ is at most the target's, by post
  processing), finite orders over the others (`_finite_log_sums`)."""
  finite = np.asarray([a for a in orders if math.isfinite(a)])
  up = targets.pairs[:, 0]
  local_up = convolution.mix_rows(targets.upper_weights, targets.basis)
  local_lo = convolution.mix_rows(targets.lower_weights, targets.basis)
  d_inf = convolution.log_ratio_max(local_up, local_lo, targets.pairs)
  # The input laws' proved error (`numerics`): D∞ from the target's law
  # alone (the finite orders: `_finite_log_sums`, path by path).
  out = {a: d_inf + numerics.rdp_allowance(mech, 1, a)
         for a in orders if math.isinf(a)}
  if not finite.size:
    return out
  # Σ P^α Q^(1-α) <= max(P/Q)^(α-1) Σ P (Σ P > 1 for an upper envelope).
  log_mass = special.logsumexp(local_up, axis=1)[up]
  log_e = _finite_log_sums(mech, targets, finite, num_clients, exact_splits,
                           others, limits, pair_bounds, d_inf, log_mass)
  for i, a in enumerate(finite):
    out[float(a)] = log_e[i] / (a - 1)
  return out


def _finite_log_sums(mech, targets, finite, num_clients, exact_splits,
                     others, limits, pair_bounds, d_inf, log_mass
                     ) -> np.ndarray:
  """[orders, pairs] log Σ P^α Q^(1-α) over the others: `others_mixture`
  for any inputs, the ±c mixes (`pair_bounds.extreme_mixes`) under the
  assumption or where the ends are the only vertices (both bounds hold
  then: the smaller pair by pair, unless `pair_bounds` skips the mixes)."""
  log_e = None
  tail = convolution.cut_tail(d_inf, log_mass)
  if others == 'any':
    with np.errstate(invalid='ignore'):
      log_cap = ((finite[:, None] - 1) * d_inf[None, :] + log_mass[None, :])
    log_e = any_others.others_mixture(
        mech, targets, num_clients - 1, finite, log_cap, exact_splits, tail,
        limits, pair_bounds.constructions)
    # The input laws' proved error (`numerics`): the mixture bound reads the
    # target's rows (R is used as computed, β lowered for it), so one law.
    log_e = log_e + numerics.log_sum_allowance(mech, 1, finite)[:, None]
  if others == 'extremes' or extreme_others.ends_are_vertices(mech, targets):
    if log_e is not None and not pair_bounds.end_mixes:
      pair_bounds.skipped.append(mech)   # the mixture bound alone: larger, still proved
    else:
      exact = exact_splits
      if extreme_others.ends_are_vertices(mech, targets):
        exact = extreme_others.vertex_splits(num_clients, exact_splits)
      mixes = pair_bounds.extreme_mixes(mech, targets, num_clients, finite,
                                        exact, tail, limits)
      # The ±c mixes are built from num_clients client laws (`numerics`).
      mixes = mixes + numerics.log_sum_allowance(mech, num_clients,
                                                 finite)[:, None]
      log_e = mixes if log_e is None else np.minimum(log_e, mixes)
  return log_e


def _assembled(targets: targets_lib.TargetPairs,
               per_pair: Dict[float, np.ndarray], t_grid: np.ndarray, local,
               num_clients: int) -> DivergenceCurve:
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
  return DivergenceCurve(t_grid, values, method, num_clients,
                         _convex_on(targets, t_grid))


def _convex_on(targets: targets_lib.TargetPairs, t_grid: np.ndarray
               ) -> Optional[np.ndarray]:
  """[G] whether interval s holds no breakpoint (None without breakpoints);
  a breakpoint within TIE (relative) of an end counts as that end
  (`targets.breakpoints`)."""
  if targets.breakpoints is None:
    return None
  left = np.concatenate([[0.0], t_grid[:-1]])
  inside = (np.searchsorted(targets.breakpoints, t_grid * (1 - _TIE), 'left') -
            np.searchsorted(targets.breakpoints, left * (1 + _TIE), 'right'))
  return inside == 0
