"""Lower bounds on the accountant's ε from one input configuration.

A certificate that a mechanism misses a target ε, at a fraction of the
accountant's cost: calibration screens every candidate it would account at
high cost with it. The target client sits at x vs x' with |x - x'| = t in
every coordinate, the d coordinates splitting the ℓ2 budget of t* (t* = 2c on
the coordinate route, S/√d on the ℓ2 route), and every other client at +c: a
configuration every route's bound covers (others='extremes' included; on the
ℓ2 route not an ℓ2-clipped input, but f_α is a sup over the box). With
`attainable` the inputs are ones clipped updates can have, so the figure is a
floor for any sound accountant using the same subsampling bound and
conversion (`Calibration.rdp_floor`). The secure sum's laws are built with
`matrix_sums` (proved error bounds) and log Σ P^α Q^(1-α) is taken at or below
its exact value, so the round RDP is at most the accountant's:
d·ĝ_α(t*²) >= any split of f_α on the ℓ2 route, d × the worst pair at ±c on
the coordinate route (D∞: the largest log ratio of the same laws, less its
error). WBK19 subsampling and the RDP-to-ε conversion are non-decreasing in
every per-round value, so the ε composed from these is at most the
accountant's ε at any subset of the orders. Only the RDP route: the PLD route
may be smaller.
"""

import math
from typing import Optional, Sequence

import numpy as np

from tff_quant.accounting import composition
from tff_quant.accounting import matrix_sums
from tff_quant.accounting import vector
from tff_quant.common import validation
from tff_quant.mechanisms import base

# Multiply-adds the others' law may take (m copies of L levels: L²m²/2);
# above, no bound is offered (1e9: about 1 s here; RQM 256 levels, n = 100:
# 3.2e8).
MAX_OPERATIONS = 1e9


# A bound is worth computing before an accountant estimated at this many
# times its cost (PBM at 256 levels, n = 100: 6.7e6 against 3.2e8, and its
# widely spread laws make the bound 0.6 s against 0.5 s for the whole
# calibration; RQM: 9e9 against 3.2e8).
WORTHWHILE_RATIO = 10


def operations(mech, clients_per_round: int) -> float:
  """Multiply-adds of the others' law: L²(n-1)²/2."""
  return mech.num_levels**2 * (clients_per_round - 1)**2 / 2


def applies(mech, clients_per_round: int) -> bool:
  """True when `epsilon_at_least` bounds `mech`'s ε: its divergences come from
  the accountant's search (not closed form), the generic subsampling bound is
  the one used, and the others' law costs <= MAX_OPERATIONS."""
  own_subsampling = (type(mech).subsampled_rdp is not
                     base.Mechanism.subsampled_rdp)
  if mech.central or mech.has_exact_divergences or own_subsampling:
    return False
  return operations(mech, clients_per_round) <= MAX_OPERATIONS


def worthwhile(mech, clients_per_round: int, num_orders: int) -> bool:
  """True when the bound applies and costs under 1/WORTHWHILE_RATIO of the
  accountant's search (`vector.estimated_operations`)."""
  return applies(mech, clients_per_round) and vector.estimated_operations(
      mech, clients_per_round, num_orders) >= WORTHWHILE_RATIO * operations(
          mech, clients_per_round)


SPLIT_POINTS = 12   # distances tried above and below t* (`round_rdp_at_least`)


def round_rdp_at_least(mech, orders: Sequence[int], clients_per_round: int,
                       dim: int, l2_clip: Optional[float],
                       attainable: bool = False) -> dict:
  """{order: a lower bound on the accountant's round RDP} for integer orders
  >= 2 and math.inf (module docstring).

  Per coordinate, target pairs at distances t in a grid with t* in it: by
  default the larger of (c, c - t) and (t/2, -t/2), the others at +c (a
  configuration the accountant's f_α covers); with `attainable`, inputs a
  clipped update can have: (t/2, -t/2), the others at min(c, l2_clip/√d).
  The d coordinates may split the ℓ2 budget: k of them at t_hi and d - k at
  t_lo with k·t_hi² + (d-k)·t_lo² <= d·t*² (attainable, and below d·ĝ_α(t*²)
  since ĝ is a non-decreasing concave majorant of f_α(√u)); the best split
  over the grid is taken (coarse mechanisms: f_α far from concave in u).
  """
  validation.check_integer('clients_per_round', clients_per_round, 1)
  validation.check_integer('dim', dim, 1)
  validation.check_optional(validation.check_positive, 'l2_clip', l2_clip)
  c = mech.input_bound
  t_star, others = 2 * c, c
  if l2_clip is not None and not vector.coordinate_route_applies(mech, dim,
                                                                  l2_clip):
    t_star = min(2 * l2_clip / math.sqrt(dim), 2 * c)
    if attainable:
      others = l2_clip / math.sqrt(dim)
  ts = np.unique(np.concatenate([
      np.geomspace(t_star / 8, t_star, SPLIT_POINTS // 2, endpoint=False),
      np.linspace(t_star, 2 * c, SPLIT_POINTS // 2)]))
  pairs = [(t / 2, -t / 2) for t in ts]
  if not attainable:
    pairs += [(c, c - t) for t in ts]
  rows = np.stack([mech.log_pmf(x) for pair in pairs for x in pair])
  law, law_err = matrix_sums.Powers(mech.log_pmf(others))(clients_per_round - 1)
  sums, err = matrix_sums.convolve(rows, 0.0, law, law_err)
  finite = np.array(sorted(set(int(a) for a in orders if math.isfinite(a))))
  logs = matrix_sums.log_power_sums(sums[0::2], sums[1::2], finite, err,
                                    lower=True)          # [orders, pairs]
  f = np.maximum(logs / (finite[:, None] - 1), 0.0)
  with np.errstate(invalid='ignore'):   # -inf - -inf: outside both supports
    ratio = np.nan_to_num(sums[0::2] - sums[1::2], nan=-np.inf)
  d_inf = np.maximum(np.max(ratio, axis=1) - 2 * err, 0.0)   # largest log ratio
  f = np.vstack([f, d_inf[None]])   # D∞ adds over coordinates as D_α does
  f = np.maximum.reduce(np.split(f, len(pairs) // ts.size, axis=1))  # [.., ts]
  # Splits: (t_lo, t_hi) with t_lo <= t* <= t_hi, t_lo = 0 (f = 0) included.
  lo_t = np.concatenate([[0.0], ts[ts <= t_star]])
  lo_f = np.concatenate([np.zeros((f.shape[0], 1)), f[:, ts <= t_star]], axis=1)
  hi_t, hi_f = ts[ts >= t_star], f[:, ts >= t_star]
  best = np.zeros(f.shape[0])
  for i, tl in enumerate(lo_t):
    for j, th in enumerate(hi_t):
      k = dim if th <= tl else math.floor(
          dim * (t_star**2 - tl**2) / (th**2 - tl**2) * (1 + 1e-12))
      k = min(max(k, 0), dim)
      # (0 coordinates at an infinite divergence add nothing; a sum over
      # 1e308 reads inf, as any ε from it would)
      with np.errstate(over='ignore'):
        best = np.maximum(best, (k * hi_f[:, j] if k else 0.0) +
                          ((dim - k) * lo_f[:, i] if dim - k else 0.0))
  rdp = {int(a): float(v) for a, v in zip(finite, best)}
  rdp[math.inf] = max(float(best[-1]), max(rdp.values()))   # D∞ >= every D_α
  return rdp


def epsilon_at_least(mech, rounds: int, clients_per_round: int,
                     total_clients: int, delta: float, dim: int = 1,
                     orders: Sequence[int] = composition.DEFAULT_ORDERS,
                     l2_clip: Optional[float] = None,
                     attainable: bool = False) -> Optional[float]:
  """A lower bound on the RDP-route ε `composition.training_guarantee` reports
  for these arguments at any subset of `orders` (`attainable`: on the ε any
  sound per-round bound gives on this route, `round_rdp_at_least`); None when
  the bound does not apply (`applies`)."""
  if not applies(mech, clients_per_round):
    return None
  every = list(range(2, max(orders) + 1))   # WBK19 needs every j <= α
  rdp = round_rdp_at_least(mech, every, clients_per_round, dim, l2_clip,
                           attainable)
  accountant = composition.RoundAccountant.from_round_rdp(
      rdp, clients_per_round, total_clients, delta, dim,
      'lower bound: one input configuration', orders)
  return accountant.epsilon_rdp(rounds)[0]
