"""Lower bounds on the accountant's ε from one input configuration.

A certificate that a mechanism misses a target ε, at a fraction of the
accountant's cost: calibration screens every candidate it would account at
high cost with it. One configuration of `attained` (the other clients all at
the largest value, the target at pairs of critical inputs, or splitting the
ℓ2 budget over the coordinates), by default anywhere in the box [-c, c]^d
that the accountant's f_α covers (others='extremes' included), so its round
RDP is at most the accountant's at every order; with `attainable`, at inputs
clipped updates can have, so the figure is a floor for any sound bound on
the same route (`Calibration.rdp_floor`). WBK19 subsampling and the
RDP-to-ε conversion are non-decreasing in every per-round value, so the ε
composed from these is at most the accountant's ε at any subset of the
orders. Only the RDP route: the PLD route may be smaller.
"""

from typing import Optional, Sequence

from tff_quant.accounting import attained
from tff_quant.accounting import composition
from tff_quant.accounting import vector
from tff_quant.mechanisms import base


# A bound is worth computing before an accountant estimated at this many
# times its cost (PBM at 256 levels, n = 100: 6.7e6 against 3.2e8, and its
# widely spread laws make the bound 0.6 s against 0.5 s for the whole
# calibration; RQM: 9e9 against 3.2e8 at n = 100; at n = 1,000 by the FFT
# route 3.1e9 against 3.0e10: 2.4-4.3 s against 15-60 s).
WORTHWHILE_RATIO = 5


def operations(mech, clients_per_round: int) -> float:
  """Multiply-adds of the bound's one configuration (`attained.operations`,
  the FFT route allowed)."""
  return attained.operations(mech, clients_per_round, fft=True)


def applies(mech, clients_per_round: int) -> bool:
  """True when `epsilon_at_least` bounds `mech`'s ε: its divergences come from
  the accountant's search (not closed form), the generic subsampling bound is
  the one used, and one configuration's laws are within the cost limits
  (`attained.applies`)."""
  own_subsampling = (type(mech).subsampled_rdp is not
                     base.Mechanism.subsampled_rdp)
  return not own_subsampling and attained.applies(mech, clients_per_round,
                                                  fft=True)


def worthwhile(mech, clients_per_round: int, num_orders: int) -> bool:
  """True when the bound applies and costs under 1/WORTHWHILE_RATIO of the
  accountant's search (`vector.estimated_operations`)."""
  return applies(mech, clients_per_round) and vector.estimated_operations(
      mech, clients_per_round, num_orders) >= WORTHWHILE_RATIO * operations(
          mech, clients_per_round)


def round_rdp_at_least(mech, orders: Sequence[int], clients_per_round: int,
                       dim: int, l2_clip: Optional[float],
                       attainable: bool = False) -> dict:
  """{order: a lower bound on the accountant's round RDP} for integer orders
  >= 2 and math.inf: one configuration of `attained` (the others all at the
  largest value, the target at pairs of critical inputs or splitting the ℓ2
  budget); by default in the box [-c, c]^d the accountant's bound covers
  (with (c, c - t) targets on the ℓ2 route), with `attainable` at inputs a
  clipped update can have. For a conditioned sum (BQ: the accountant's RDP
  is the conditioned sum's, `composition.CONDITIONING_TAIL`), the
  configuration's conditioned law, without the normalisation's share."""
  conditioned = _conditioned(mech, clients_per_round)
  if conditioned is not None:
    mech, clients_per_round = conditioned.attained, 1
  return dict(attained.round_rdp(mech, orders, clients_per_round, dim,
                                 l2_clip, box=not attainable, search=False))


def _conditioned(mech, clients_per_round: int):
  """The conditioned sum the accountant composes for `mech`, or None (also
  for a bad `clients_per_round`, which the configuration's check names)."""
  if not isinstance(clients_per_round, int) or clients_per_round < 1:
    return None
  return mech.conditioned_sum(clients_per_round, composition.CONDITIONING_TAIL)


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
  # A conditioned sum (BQ) is composed as the accountant composes it
  # (δ - T·d·η, plus T·d·λ).
  accountant = composition.RoundAccountant.from_round_rdp(
      rdp, clients_per_round, total_clients, delta, dim,
      'lower bound: one input configuration', orders,
      _conditioned(mech, clients_per_round))
  return accountant.epsilon_rdp(rounds)[0]
