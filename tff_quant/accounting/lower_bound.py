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
orders. The PLD route may be smaller: it is not bounded.

The profile route (`use_profile`) of a mechanism without a Gaussian-domination
rate is a function of the same curve too: CKS20's conversion is a minimum over
orders of terms non-decreasing in each ρ(α), amplification by sampling and
the lower convex hull are monotone in the profile, and composing dominating
pairs preserves their order. Its computed value carries a pessimistic
discretization whose grid depends on the profile, so the floor's profile-route
ε is taken PROFILE_MARGIN below its computed value. A mechanism with a rate is
not bounded here: its profile is the dominating Gaussian's, not the curve's.
"""

from typing import Optional, Sequence

from tff_quant.accounting import attained
from tff_quant.accounting import composition
from tff_quant.accounting import rdp_route
from tff_quant.accounting import secure_sum
from tff_quant.mechanisms import base


# A bound is worth computing before an accountant estimated at this many
# times its cost, in multiply-adds (PBM at 256 levels, n = 100: 6.7e6
# against 3.2e8; RQM: 9e9 against 3.2e8 at n = 100; at n = 1,000 by the FFT
# route 3.1e9 against 3.0e10). Their times: docs/performance.md.
WORTHWHILE_RATIO = 5
#: The floor's profile-route ε counts this fraction below its computed value
#: (module docstring): two profiles' discretizations differ by far less (the
#: grid spacing is 1e-4 in the loss, the tail share 1e-6 of δ).
PROFILE_MARGIN = 1e-3


def operations(mech, clients_per_round: int,
               limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS) -> float:
  """Multiply-adds of the bound's one configuration (`attained.operations`,
  the FFT route allowed).

  Args:
    mech: the mechanism.
    clients_per_round: n >= 1, clients in the secure sum.
    limits: the `secure_sum.Limits` (`attained.operations`).

  Returns:
    The estimated multiply-adds (a float).
  """
  return attained.operations(mech, clients_per_round, fft=True, limits=limits)


def applies(mech, clients_per_round: int,
            limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS) -> bool:
  """True when `epsilon_at_least` bounds `mech`'s ε: its divergences come from
  the accountant's search (not closed form), the generic subsampling bound is
  the one used, and one configuration's laws are within the cost limits
  (`attained.applies`).

  Args:
    mech: the mechanism.
    clients_per_round: n >= 1, clients in the secure sum.
    limits: the `secure_sum.Limits` (`attained.applies`).

  Returns:
    Whether `epsilon_at_least` returns a bound (not None) for `mech`.
  """
  own_subsampling = (type(mech).subsampled_rdp is not
                     base.Mechanism.subsampled_rdp)
  return not own_subsampling and attained.applies(mech, clients_per_round,
                                                  fft=True, limits=limits)


def worthwhile(mech, clients_per_round: int, num_orders: int,
               limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS) -> bool:
  """True when the bound applies and costs under 1/WORTHWHILE_RATIO of the
  accountant's search (`secure_sum.estimated_operations`).

  Args:
    mech: the mechanism.
    clients_per_round: n >= 1, clients in the secure sum.
    num_orders: Rényi orders the accountant would evaluate.
    limits: the `secure_sum.Limits` the accountant's search runs under.

  Returns:
    Whether calibration should screen a candidate with this bound first.
  """
  return applies(mech, clients_per_round, limits) and (
      secure_sum.estimated_operations(mech, clients_per_round, num_orders,
                                      limits=limits)
      >= WORTHWHILE_RATIO * operations(mech, clients_per_round, limits))


def round_rdp_at_least(mech, orders: Sequence[int], clients_per_round: int,
                       dim: int, l2_clip: Optional[float],
                       attainable: bool = False,
                       limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS
                       ) -> dict:
  """{order: a lower bound on the accountant's round RDP} for integer orders
  >= 2 and math.inf: one configuration of `attained` (the others all at the
  largest value, the target at pairs of critical inputs or splitting the ℓ2
  budget); by default in the box [-c, c]^d the accountant's bound covers
  (with (c, c - t) targets on the ℓ2 route), with `attainable` at inputs a
  clipped update can have. For a conditioned sum (BQ: the accountant's RDP
  is the conditioned sum's, `composition.CONDITIONING_TAIL`), the
  configuration's conditioned law, without the normalisation's share.

  Args:
    mech: the mechanism each coordinate goes through.
    orders: Rényi orders, integers >= 2 (math.inf allowed).
    clients_per_round: n >= 1, clients in the secure sum.
    dim: d >= 1, coordinates per client.
    l2_clip: each update's ℓ2 bound, > 0 (None: the coordinate route).
    attainable: inputs clipped updates can have, instead of the box.
    limits: the `secure_sum.Limits` (`attained.round_rdp`).

  Returns:
    {order: round RDP lower bound (float >= 0)} over the distinct finite
    orders and math.inf (`attained.round_rdp`).

  Raises:
    TypeError: where the search does not apply (check `applies` first), or
      as `attained.round_rdp`.
    ValueError: as `attained.round_rdp`.
  """
  conditioned = _conditioned(mech, clients_per_round)
  if conditioned is not None:
    mech, clients_per_round = conditioned.attained, 1
  return dict(attained.round_rdp(mech, orders, clients_per_round, dim,
                                 l2_clip, box=not attainable, search=False,
                                 limits=limits))


def _conditioned(mech, clients_per_round: int):
  """The conditioned sum the accountant composes for `mech`, or None (also
  for a bad `clients_per_round`, which the configuration's check names)."""
  if not isinstance(clients_per_round, int) or clients_per_round < 1:
    return None
  return mech.conditioned_sum(clients_per_round, composition.CONDITIONING_TAIL)


def epsilon_at_least(mech, rounds: int, clients_per_round: int,
                     total_clients: int, delta: float, dim: int = 1,
                     orders: Sequence[int] = rdp_route.DEFAULT_ORDERS,
                     l2_clip: Optional[float] = None,
                     attainable: bool = False,
                     limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS,
                     use_profile: bool = False) -> Optional[float]:
  """A lower bound on the RDP-route ε `composition.training_guarantee` reports
  for these arguments at any subset of `orders` (`attainable`: on the ε any
  sound per-round bound gives on this route, `round_rdp_at_least`); None when
  the bound does not apply (`applies`). The per-round figures are subsampled
  by WBK19, Thm 9 and converted as the accountant converts them
  (docs/references.md). With `use_profile`, the least of that and the
  profile route's ε from the same figures, PROFILE_MARGIN below (module
  docstring): a lower bound on what the accountant reports with
  use_profile=True for a mechanism without a Gaussian-domination rate.

  Args:
    mech: the mechanism each coordinate goes through.
    rounds: T >= 1, rounds composed.
    clients_per_round: n >= 1, clients in each round's secure sum.
    total_clients: N >= n, the population sampled from.
    delta: target δ in (0, 1).
    dim: d >= 1, coordinates per client.
    orders: integer Rényi orders >= 2 at which ε is converted.
    l2_clip: each update's ℓ2 bound, > 0 (None: the coordinate route).
    attainable: inputs clipped updates can have, instead of the box.
    limits: the `secure_sum.Limits` (`attained.round_rdp`).
    use_profile: also bound the profile route (module docstring).

  Returns:
    A float lower bound on ε (inf possible), or None.

  Raises:
    TypeError: an argument of the wrong type (`composition` and
      `attained.round_rdp` name it).
    ValueError: n < 1 or n > N, δ outside (0, 1), d < 1, `rounds` < 1,
      `l2_clip` <= 0, or an order < 2.
  """
  if not applies(mech, clients_per_round, limits):
    return None
  every = list(range(2, max(orders) + 1))   # WBK19 needs every j <= α
  rdp = round_rdp_at_least(mech, every, clients_per_round, dim, l2_clip,
                           attainable, limits)
  # A conditioned sum (BQ) is composed as the accountant composes it
  # (δ - T·d·η, plus T·d·λ).
  accountant = composition.RoundAccountant.from_round_rdp(
      rdp, clients_per_round, total_clients, delta, dim,
      'lower bound: one input configuration', orders,
      _conditioned(mech, clients_per_round))
  eps = accountant.epsilon_rdp(rounds)[0]
  if use_profile:
    profile, _ = accountant.epsilon_profile(rounds)
    if profile is not None:
      eps = min(eps, profile * (1 - PROFILE_MARGIN))
  return eps
