"""(ε, δ) of a whole training run, from the exact per-round output distributions.

Neighbouring relation: one client's update replaced by any other (replace-one), the
number of participants being public (the decoder needs it). The ε pipeline, one
module per step:
1. `per_round`: one round's RDP, every coordinate of the secure sum (the
   coordinate route, or the ℓ2 route `secure_sum.vector_rdp`), by default for
   any inputs of the n-1 others (`accounting.others`, proved).
2. `rdp_route`: that RDP after client sampling (WBK19), and RDP → (ε, δ).
3. `pld_route`: the PLD route's ε, from the exact loss pmf of the worst pair.
4. `profile_route`: the profile route's ε, from the round's privacy profile
   (its RDP curve converted, or the Gaussian's closed form) amplified by
   sampling and composed as a PLD.
5. Here: composition over rounds (`RoundAccountant`, `training_guarantee`),
   the tightest route reported (`Guarantee`). Every guarantee also carries the ε
   that named inputs attain on the same route (`Guarantee.epsilon_attained`):
   ε ∈ [attained, proved].

Three routes. The first two are valid for sampling `clients_per_round` of
`total_clients` uniformly (fixed size, without replacement) or by Poisson
sampling at that rate, the third for fixed-size sampling (what runs):
* RDP: WBK19 (Wang, Balle, Kasiviswanathan, AISTATS 2019, Thm 9;
  docs/references.md) subsampled RDP for sampling without replacement under
  replace-one, composed over rounds, converted with
  dp_accounting.rdp.compute_epsilon (`rdp_route.epsilon_from_rdp`).
* PLD: the exact loss pmf of the worst-mix pair, composed d times (loss_pmf,
  FFT, pessimistic rounding), mixed with a point mass at loss 0 of weight 1-γ
  (the target not sampled; pessimistic: as if the server could tell), then
  composed over rounds with its rounding carried. Skipped, with the
  reason in `Guarantee.pld_note`, when its grid would exceed pld_max_points.
* Profile: the round's proved RDP curve converted to a privacy profile
  (CKS20 Prop. 12; the central Gaussian's in closed form, Balle & Wang 2018
  Thm 8), amplified by fixed-size sampling (a coupling and Balle, Barthe,
  Gaboardi 2018, Thm 2), dominated by a connect-the-dots pair (Doroshenko
  et al. 2022) and composed over rounds with its rounding carried (Zhu,
  Dong, Wang 2022, Thm 10): `profile_route`. It removes WBK19 Thm 9's excess at small ε.
  Not used, with the reason in `Guarantee.profile_note`, for a conditioned
  sum (BQ).
"""

import dataclasses
import functools
import math
from typing import Dict, Optional, Sequence

import numpy as np

from tff_quant.accounting import attained as attained_lib
from tff_quant.accounting import blanket_domination
from tff_quant.accounting import gaussian_domination
from tff_quant.accounting import per_round
from tff_quant.accounting import pld_route
from tff_quant.accounting import profile_route
from tff_quant.accounting import rdp_route
from tff_quant.accounting import secure_sum
from tff_quant.common import exact_laws
from tff_quant.common import validation
from tff_quant.mechanisms import gaussian


@dataclasses.dataclass
class Guarantee:
  """(ε, δ) for a run, by every route computed; `epsilon` is the least.

  Args:
    epsilon, delta: the headline guarantee (the tightest route).
    route: 'RDP', 'PLD' or 'profile', the route that gave `epsilon`.
    epsilon_rdp, rdp_order: the RDP route's ε and the order attaining it.
    epsilon_pld: the PLD route's ε (None when not computed).
    rounds, clients_per_round, total_clients, dim: the schedule accounted.
    per_round_rdp: {order: ε} of one round before subsampling.
    assumptions: the neighbouring relation and worst cases used, in words.
    epsilon_profile: the profile route's ε (None when not computed, why in
      `profile_note`).
  """
  epsilon: float
  delta: float
  route: str
  epsilon_rdp: float
  rdp_order: float
  epsilon_pld: Optional[float]
  rounds: int
  clients_per_round: int
  total_clients: int
  dim: int
  per_round_rdp: Dict[float, float]
  assumptions: str
  pld_note: str = ''   # why the PLD route was not computed, if it was not
  #: The same route's ε from per-round divergences that named inputs attain
  #: (`attained`): no sound bound over the others' inputs reports less on
  #: this route. None where no configuration search applies.
  epsilon_attained: Optional[float] = None
  #: The inputs attaining the per-round divergence at the ε's order.
  attained_inputs: str = ''
  #: The fewest clients whose outputs a round's sum holds (dropouts; None:
  #: every sampled client's, `clients_per_round`).
  min_clients_per_round: Optional[int] = None
  epsilon_profile: Optional[float] = None
  profile_note: str = ''   # why the profile route was not computed, if not
  #: The Rényi order the profile route leans on most
  #: (`profile_route.binding_order`; nan where not computed).
  profile_order: float = math.nan

  @property
  def slack(self) -> Optional[float]:
    """epsilon / epsilon_attained: how far the proved ε may be above the
    best any bound over the others' inputs could report on this route."""
    if not self.epsilon_attained:
      return None
    return self.epsilon / self.epsilon_attained

  def interval(self) -> str:
    """'ε ∈ [attained, proved]' (or the proved ε alone where nothing is attained)."""
    if self.epsilon_attained is None:
      return f'ε = {self.epsilon:.4g} (no attained value: {self.attained_inputs})'
    return (f'ε ∈ [{self.epsilon_attained:.4g}, {self.epsilon:.4g}] '
            '[attained by named inputs, proved]')

  def summary(self) -> str:
    """One line: (ε, δ), rounds, the interval, every route's ε and the
    notes of those not computed."""
    pld = 'n/a' if self.epsilon_pld is None else f'{self.epsilon_pld:.4g}'
    prof = ('n/a' if self.epsilon_profile is None
            else f'{self.epsilon_profile:.4g}')
    notes = '; '.join(n for n in (self.pld_note, self.profile_note) if n)
    return (f'(ε={self.epsilon:.4g}, δ={self.delta:.3g}) after {self.rounds} rounds; '
            f'{self.interval()} [{self.route}; RDP ε={self.epsilon_rdp:.4g} at '
            f'α={self.rdp_order:g}, PLD ε={pld}, profile ε={prof}]' +
            (f' ({notes})' if notes else ''))


# Introduces, in a guarantee's text, how the ℓ2 route bounded the divergences
# (`secure_sum.RoundRdp.method`).
DIVERGENCES_NOTE = 'Per-coordinate divergences: '


#: For mechanisms whose every Rényi divergence is infinite (finite-support
#: noise: BQ), the RDP routes account the secure sum conditioned on a window
#: of outputs (`Mechanism.conditioned_sum`) that each coordinate's sum misses
#: with probability at most this, per round, for any inputs; T rounds of d
#: coordinates then add T·d·η to δ and T·d·log(1/(1-η)) to ε (docs/privacy.md,
#: "Conditioning on a window"). 1e-14: 2.5e-8 of δ at the FL table's
#: T·d = 300·8,192, while the window stays within ~8 standard deviations.
CONDITIONING_TAIL = 1e-14


def _check_schedule(clients_per_round, total_clients, delta, dim,
                    min_clients_per_round=None):
  validation.check_integer('clients_per_round', clients_per_round, 1)
  validation.check_integer('total_clients', total_clients, 1)
  validation.check_integer('dim', dim, 1)
  validation.check_at_most('clients_per_round', clients_per_round,
                           'total_clients', total_clients)
  validation.check_probability('delta', delta)
  validation.check_optional(validation.check_integer, 'min_clients_per_round',
                            min_clients_per_round, 1)
  if min_clients_per_round is not None:
    validation.check_at_most('min_clients_per_round', min_clients_per_round,
                             'clients_per_round', clients_per_round)


class RoundAccountant:
  """Per-round RDP computed once; (ε, δ) after any number of rounds, cheaply.

  `epsilon(rounds)` is the RDP route (fast, used for per-round logs);
  `guarantee(rounds)` adds the PLD and profile routes and picks the least.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    clients_per_round: clients sampled per round (without replacement), >= 1.
    total_clients: the population, >= clients_per_round.
    delta: target δ in (0, 1).
    dim: coordinates each client sends.
    orders: integer Rényi orders >= 2 for the RDP route.
    l2_clip: the ℓ2 norm bound of each client's update, or None (every
      coordinate may move end to end). When the mechanism's coordinate bound c
      exceeds l2_clip/√dim, the ℓ2 route (`secure_sum.vector_rdp`) is used.
    others: the other clients' inputs: 'any' (default; proved for every input
      in [-c, c]) or 'extremes' (±c, worst mix: a search-backed assumption).
    conditioning_tail: for a mechanism with a `Mechanism.conditioned_sum`
      (BQ), the most each coordinate's sum may miss its window per round.
    limits: the `secure_sum.Limits` the target-pair search runs under.
    pair_bounds: how a pair is bounded for any others
      (`secure_sum.PairBounds`; default: the mixture bound and the ±c
      mixes, the smaller).
    min_clients_per_round: None (every sampled client contributes), or
      n_min in [1, clients_per_round]: the fewest of a round's sampled
      clients whose outputs its sum holds (dropouts independent of the
      data and of which sampled client is which). The round's RDP is then
      that of the sum of n_min clients, and WBK19 subsamples it at γ =
      clients_per_round / total_clients: a bound for every cohort from n_min
      to clients_per_round (docs/privacy.md, "Dropouts"). The mechanism's
      own subsampling analysis (`Mechanism.subsampled_rdp`, which ties the
      noise to the sampled count) is not used then.

  Raises:
    ValueError: a schedule argument out of range (named),
      `conditioning_tail` outside (0, 1), or `min_clients_per_round` below
      clients_per_round for a mechanism accounted by conditioning (BQ).
  """

  def __init__(self, mech, clients_per_round: int, total_clients: int,
               delta: float, dim: int = 1,
               orders: Sequence[int] = rdp_route.DEFAULT_ORDERS,
               l2_clip: Optional[float] = None, others: str = 'any',
               conditioning_tail: float = CONDITIONING_TAIL,
               limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS,
               pair_bounds: Optional[secure_sum.PairBounds] = None,
               min_clients_per_round: Optional[int] = None):
    _check_schedule(clients_per_round, total_clients, delta, dim,
                    min_clients_per_round)
    secure_sum.check_others(others)
    self.others = others
    self.limits, self.pair_bounds = limits, pair_bounds
    validation.check_optional(validation.check_positive, 'l2_clip', l2_clip)
    self.mech, self.n, self.population = mech, clients_per_round, total_clients
    #: Clients in the sum the round's RDP is computed for (n_min <= n).
    self.summed = min_clients_per_round or clients_per_round
    self.delta, self.dim, self.orders = delta, dim, list(orders)
    self.gamma = clients_per_round / total_clients
    self.l2_clip = l2_clip
    self.l2_route = (l2_clip is not None and
                     not secure_sum.coordinate_route_applies(mech, dim, l2_clip))
    self._attained = None
    #: The conditioned secure sum the RDP routes account (None: the sum itself).
    self.conditioned = mech.conditioned_sum(self.summed, conditioning_tail)
    if self.conditioned is not None and self.summed < self.n:
      raise ValueError(
          f'`min_clients_per_round`={self.summed} < `clients_per_round`='
          f'{self.n} is not available for {mech}: its RDP routes account the '
          'sum conditioned on a window fixed by the number of clients summed '
          '(docs/privacy.md, "Conditioning on a window"), and a sum over '
          'more clients is not a post-processing of that conditioned sum. '
          'Calibrate it without dropouts (min_clients_per_round=None).')

  @property
  def _accounted(self):
    """(mechanism, clients) whose secure sum the RDP routes bound: the
    conditioned sum's windowed mechanism where there is one."""
    if self.conditioned is None:
      return self.mech, self.summed
    return self.conditioned.mechanism, self.conditioned.num_clients

  @functools.cached_property
  def rdp(self) -> Dict[float, float]:
    """{order: proved per-round RDP} (math.inf too), computed on first use
    (an accountant asked only for the attained end never computes it)."""
    mech, n = self._accounted
    if self.l2_route:
      every = sorted(set(range(2, max(self.orders) + 1)))  # WBK needs every j
      rdp = secure_sum.vector_rdp(mech, every + [math.inf], n, self.dim,
                                  2 * self.l2_clip, others=self.others,
                                  limits=self.limits,
                                  pair_bounds=self.pair_bounds)
    else:
      rdp = per_round.per_round_rdp(mech, n, self.dim, self.orders,
                                    self.others, self.limits,
                                    self.pair_bounds)
    if self.conditioned is not None:   # the normalisation, d coordinates
      for a in rdp:
        rdp[a] += self.dim * self.conditioned.conditioning_rdp(a)
    return rdp

  @functools.cached_property
  def _sub(self):
    return self._subsampled(self.rdp)

  def _subsampled(self, rdp: Dict[float, float]):
    """[orders] round RDP after sampling: WBK19 Thm 9 (docs/references.md),
    or the mechanism's own analysis where it gives less (both are upper
    bounds)."""
    sub = [rdp_route.subsampled_rdp_without_replacement(rdp, self.gamma, a)
           for a in self.orders]
    if self.mech is None or self.gamma >= 1 or self.summed < self.n:
      return sub
    own = self.mech.subsampled_rdp(self.orders, self.n, self.population,
                                   self._sensitivity)
    if own is None:
      return sub
    return [min(a, float(b)) for a, b in zip(sub, own)]

  @property
  def attained(self) -> Optional[Dict[float, float]]:
    """{order: per-round RDP attained by named inputs} (`attained.round_rdp`,
    its `describe(order)` names them; for a modular sum its own route,
    `attained.is_modular`), computed on first use; the proved values
    themselves where the divergences are exact in closed form (the central
    Gaussian); None where no search applies."""
    if self._attained is None and self.mech is not None:
      if (self.mech.has_exact_divergences and
          not attained_lib.is_modular(self.mech)):
        self._attained = attained_lib.AttainedRdp(
            dict(self.rdp), {}, self.mech.input_bound)
      else:
        every = sorted(set(range(2, max(self.orders) + 1)))
        mech, n = self._accounted
        if self.conditioned is not None:   # the conditioned sum, named others
          mech, n = self.conditioned.attained, 1
        self._attained = attained_lib.round_rdp(
            mech, every + [math.inf], n, self.dim,
            self.l2_clip if self.l2_route else None,
            limits=self.limits) or False
    return self._attained or None

  def epsilon_attained(self, rounds: int, use_profile: bool = False,
                       interval: float = profile_route.DEFAULT_INTERVAL):
    """The lower end of ε ∈ [attained, proved] (`attained` module
    docstring): the RDP route from the attained per-round RDP, and the
    profile route from it (where it applies), the smaller, as the proved ε
    is the smaller of the routes from the proved curve.

    Args:
      rounds: T >= 1, rounds composed.
      use_profile: also the profile route (as `guarantee`'s; opt-in).
      interval: the profile route's PLD loss grid spacing.

    Returns:
      (ε, order): ε at self.delta after T rounds and the Rényi order the
      RDP route's came from; (None, nan) where no configuration search
      applies.

    Raises:
      TypeError: `rounds` not an integer.
      ValueError: `rounds` < 1.
    """
    validation.check_integer('rounds', rounds, 1)
    if self.attained is None:
      return None, math.nan
    eps, order = self._epsilon(self._subsampled(self.attained), rounds)
    if use_profile and not self._profile_reason(self.attained):
      eps = min(eps, profile_route.profile_epsilon(
          self._round_profile(self.attained), self.gamma, rounds,
          self.delta, interval))
    return eps, order

  @classmethod
  def from_round_rdp(cls, rdp: Dict[float, float], clients_per_round: int,
                     total_clients: int, delta: float, dim: int,
                     assumptions: str,
                     orders: Sequence[int] = rdp_route.DEFAULT_ORDERS,
                     conditioned=None) -> 'RoundAccountant':
    """An accountant for a mechanism outside the registry (TFF's own
    aggregators, the lower bound's one configuration) from its per-round
    RDP, subsampled (WBK19 Thm 9; docs/references.md) and composed as for
    the registry's.

    Args:
      rdp: {order: per-round RDP >= 0} at every integer order up to
        max(orders), and math.inf.
      clients_per_round: n >= 1.
      total_clients: N >= n.
      delta: target δ in (0, 1).
      dim: d >= 1, coordinates per client.
      assumptions: reported with each guarantee.
      orders: integer Rényi orders >= 2 at which ε is converted.
      conditioned: a `base.ConditionedSum` when `rdp` is of that conditioned
        sum: ε is then composed as for it (δ - T·d·η, plus T·d·λ).

    Returns:
      The RoundAccountant (no mechanism: its guarantee has the RDP route
      only).

    Raises:
      TypeError, ValueError: a schedule argument of the wrong type or out of
        range (named).
    """
    _check_schedule(clients_per_round, total_clients, delta, dim)
    self = cls.__new__(cls)
    self.mech, self.n, self.population = None, clients_per_round, total_clients
    self.summed = clients_per_round
    self.delta, self.dim, self.orders = delta, dim, list(orders)
    self.gamma = clients_per_round / total_clients
    self.l2_clip, self.l2_route, self.rdp = None, True, dict(rdp)
    self._assumptions, self._attained = assumptions, None
    self.conditioned = conditioned
    self.limits, self.pair_bounds = secure_sum.DEFAULT_LIMITS, None
    return self

  @property
  def gives_privacy(self) -> bool:
    """False when every order's per-round RDP is infinite (ε = inf for any δ)."""
    return any(math.isfinite(v) for v in self._sub)

  def epsilon_rdp(self, rounds: int):
    """The proved ε after `rounds` rounds by the RDP route.

    Args:
      rounds: T >= 1, rounds composed.

    Returns:
      (ε, order): ε at self.delta and the Rényi order it came from ((inf,
      nan) for a conditioned sum whose T·d·η reaches δ).

    Raises:
      TypeError: `rounds` not an integer.
      ValueError: `rounds` < 1.
    """
    validation.check_integer('rounds', rounds, 1)
    return self._epsilon(self._sub, rounds)

  def epsilon_from_curve(self, rounds: int, use_profile: bool = False,
                         interval: float = profile_route.DEFAULT_INTERVAL
                         ) -> float:
    """The proved ε after `rounds` rounds from the round's RDP curve alone
    (no PLD route): the RDP route, and with `use_profile` the lesser of it
    and the profile route where that applies (as `guarantee` takes them).

    Args:
      rounds: T >= 1, rounds composed.
      use_profile: also the profile route (`epsilon_profile`).
      interval: the profile route's PLD loss grid spacing.

    Returns:
      ε at self.delta.

    Raises:
      TypeError: `rounds` not an integer.
      ValueError: `rounds` < 1.
    """
    eps = self.epsilon_rdp(rounds)[0]
    if use_profile:
      eps_prof = self.epsilon_profile(rounds, interval)[0]
      if eps_prof is not None:
        eps = min(eps, eps_prof)
    return eps

  def _epsilon(self, sub, rounds: int):
    """(ε, order) at self.delta from per-round subsampled RDP `sub`; for a
    conditioned sum, the conditioned process's (ε', δ - T·d·η) plus T·d·λ
    (λ = log(1/(1-η))), and (inf, nan) where T·d·η reaches δ."""
    if self.conditioned is None:
      return rdp_route.epsilon_from_rdp(self.orders, sub, rounds, self.delta)
    steps = rounds * self.dim
    delta = self.delta - steps * self.conditioned.tail
    if delta <= 0:
      return math.inf, math.nan
    eps, order = rdp_route.epsilon_from_rdp(self.orders, sub, rounds, delta)
    return eps + steps * self.conditioned.log_ratio, order

  def _profile_reason(self, rdp) -> str:
    """'' where the profile route applies to the round RDP curve `rdp`,
    else why not (in words)."""
    if self.conditioned is not None:
      return ('profile route not used: the RDP routes account the sum '
              'conditioned on a window (docs/privacy.md, "Conditioning on a '
              'window"), whose profile is not the released sum\'s')
    if not any(math.isfinite(v) for v in rdp.values()):
      return ('profile route not used: every per-round Rényi divergence is '
              'infinite')
    return ''

  @property
  def _sensitivity(self) -> float:
    """The replace-one ℓ2 bound of a round's change: 2·l2_clip on the ℓ2
    route, else 2c√d (every coordinate end to end)."""
    return (2 * self.l2_clip if self.l2_route
            else 2 * self.mech.input_bound * math.sqrt(self.dim))

  @functools.cached_property
  def dominating_rate(self) -> Optional[gaussian_domination.Rate]:
    """The mechanism's per-coordinate Gaussian-domination rate at the
    summed clients (`blanket_domination.rate`: two levels in closed form,
    more through the blanket mixture), None where it has none."""
    if self.mech is None:
      return None
    return blanket_domination.rate(self.mech, self.summed)

  def _gaussian_mu(self) -> Optional[float]:
    """μ of a Gaussian pair that dominates the un-sampled round: for the
    central Gaussian its sensitivity over the summed noise's standard
    deviation (exact: the round RDP is α·μ²/2), else κ·sensitivity where
    the mechanism has a Gaussian-domination rate κ; None otherwise."""
    if isinstance(self.mech, gaussian.Gaussian):
      return self._sensitivity / (math.sqrt(self.summed) * self.mech.sigma)
    rate = self.dominating_rate
    return (None if rate is None else
            rate.round_mu(self._sensitivity, self.dim))

  def _domination_profile(self, mu: float):
    """The round's δ_M from a dominating Gaussian pair at `mu`, with the
    rate's tail t: the pair ((1 − t)N(0, 1) + t·δ_⊥, (1 − t)N(μ, 1) +
    t·δ_⊤) where the domination holds but with probability t
    (`blanket_domination`, C; t = 0 otherwise)."""
    rate = self.dominating_rate
    tail = 0.0 if rate is None else rate.tail
    return lambda eps: np.minimum(
        (profile_route.gaussian_profile(mu, eps) + tail) *
        (1 + 2 * exact_laws.U), 1.0)

  def _round_profile(self, rdp):
    """The un-sampled round's δ_M from the RDP curve `rdp` (CKS20 Prop.
    12), and where smaller the profile of a dominating Gaussian pair
    (`_gaussian_mu`: the central Gaussian's closed form, or a proved
    per-coordinate domination, `blanket_domination`)."""
    mu = self._gaussian_mu()
    if mu is None:
      return lambda eps: profile_route.rdp_profile(rdp, eps)
    dominated = self._domination_profile(mu)
    return lambda eps: np.minimum(dominated(eps),
                                  profile_route.rdp_profile(rdp, eps))

  def epsilon_domination(self, rounds: int,
                         interval: float = profile_route.DEFAULT_INTERVAL
                         ) -> Optional[float]:
    """The profile route's ε from the Gaussian domination alone, without
    the RDP curve (whose profile `epsilon_profile` also takes where it is
    smaller): at or above `epsilon_profile`'s ε, and a proved ε by itself.
    Calibration searches with it where a domination exists (its RDP curve
    is most of a candidate's cost; `calibration.oracle`).

    Args:
      rounds: T >= 1, rounds composed.
      interval: the PLD loss grid's spacing, > 0.

    Returns:
      ε, or None where there is no dominating Gaussian pair (or the round
      is accounted conditioned on a window).

    Raises:
      TypeError: `rounds` not an integer.
      ValueError: `rounds` < 1 or `interval` <= 0.
    """
    validation.check_integer('rounds', rounds, 1)
    if self.conditioned is not None:
      return None
    mu = self._gaussian_mu()
    if mu is None:
      return None
    return profile_route.profile_epsilon(
        self._domination_profile(mu), self.gamma, rounds, self.delta,
        interval)

  def epsilon_profile(self, rounds: int,
                      interval: float = profile_route.DEFAULT_INTERVAL):
    """The proved ε after `rounds` rounds by the profile route
    (`profile_route`; docs/privacy.md, "Subsampling (WBK19) and composition").

    The round's profile is bounded from its proved RDP (a sup over every
    ordered target pair and any others, so both orders are covered), or in
    closed form for the central Gaussian. With dropouts the round is the sum
    of n_min clients sampled at γ = n/N (docs/privacy.md, "Dropouts": the
    same argument with hockey-stick divergences).

    Args:
      rounds: T >= 1, rounds composed.
      interval: the PLD loss grid's spacing, > 0.

    Returns:
      (ε, '') or (None, why the route does not apply).

    Raises:
      TypeError: `rounds` not an integer.
      ValueError: `rounds` < 1 or `interval` <= 0.
    """
    validation.check_integer('rounds', rounds, 1)
    if self.conditioned is not None:   # before the curve is computed
      return None, self._profile_reason({})
    why = self._profile_reason(self.rdp)
    if why:
      return None, why
    return profile_route.profile_epsilon(
        self._round_profile(self.rdp), self.gamma, rounds, self.delta,
        interval), ''

  def guarantee(self, rounds: int, use_pld: bool = True,
                pld_interval: float = 1e-3,
                pld_max_points: int = pld_route.DEFAULT_PLD_MAX_POINTS,
                attained: bool = True, use_profile: bool = False,
                profile_interval: float = profile_route.DEFAULT_INTERVAL
                ) -> Guarantee:
    """(ε, δ) after `rounds` rounds: the least of the RDP route, the PLD
    route and the profile route (each an upper bound).

    Args:
      rounds: T >= 1, rounds composed.
      use_pld: try the PLD route (`pld_route.pld_epsilon`).
      pld_interval: the PLD loss grid's spacing.
      pld_max_points: the largest PLD grid allocated (else `pld_note` says
        why the route was skipped).
      attained: also compute the lower end of ε ∈ [attained, proved].
      use_profile: try the profile route (`epsilon_profile`; opt-in until
        the stored results are recomputed with it; docs/privacy.md).
      profile_interval: the profile route's PLD loss grid spacing.

    Returns:
      A `Guarantee`.

    Raises:
      TypeError: `rounds` not an integer.
      ValueError: `rounds` < 1, or the accountant's own errors (a cost over
        `secure_sum.Limits`: `secure_sum.CostError`).
    """
    eps_rdp, order = self.epsilon_rdp(rounds)
    if use_profile:
      eps_prof, prof_note = self.epsilon_profile(rounds, profile_interval)
    else:
      eps_prof, prof_note = None, 'profile route not requested (use_profile=False)'
    prof_order = (math.nan if eps_prof is None else profile_route.binding_order(
        self.rdp, self.gamma, self.delta, rounds))
    if self.mech is None:
      eps, route = ((eps_prof, 'profile')
                    if eps_prof is not None and eps_prof < eps_rdp
                    else (eps_rdp, 'RDP'))
      return Guarantee(eps, self.delta, route, eps_rdp, order, None, rounds,
                       self.n, self.population, self.dim, self.rdp,
                       self._assumptions, 'PLD route not available: the '
                       'per-round RDP was given in closed form',
                       attained_inputs='the per-round RDP was given in closed '
                       'form', epsilon_profile=eps_prof,
                       profile_note=prof_note, profile_order=prof_order)
    eps_pld, note = pld_route.pld_epsilon(
        self.mech, self.summed, self.dim, rounds, self.gamma, self.delta,
        use_pld=use_pld, l2_route=self.l2_route, others=self.others,
        limits=self.limits, pld_interval=pld_interval,
        pld_max_points=pld_max_points)
    eps, route = min(((e, r) for e, r in ((eps_rdp, 'RDP'), (eps_pld, 'PLD'),
                                          (eps_prof, 'profile'))
                      if e is not None), key=lambda er: er[0])
    low, inputs = None, 'not requested (attained=False)'
    if attained and route == 'PLD':
      # The PLD route composes named pairs' exact loss distributions.
      low, inputs = eps, 'the pair the PLD route composes (exact law)'
    elif attained and self.attained is None:
      inputs = ('no configuration search applies (closed form or a '
                'secure-sum law over Limits.attained_operations)')
    elif attained:
      low, at = self.epsilon_attained(rounds, use_profile and eps_prof is not
                                      None, profile_interval)
      from_profile = low is not None and low < self.epsilon_attained(
          rounds, False)[0]
      if not self.attained.configurations:
        inputs = 'exact per-round divergences (closed form)'
      elif math.isnan(at):   # every order infinite
        inputs = self.attained.describe(math.inf)
      else:
        inputs = self.attained.describe(at)
      if self.conditioned is not None:   # the others were folded into the law
        inputs = inputs.replace('others none', self.conditioned.attained_others)
      if from_profile and self.attained.configurations:
        inputs = ('the profile route from the RDP attained at every order; '
                  f'the RDP route\'s order: {inputs}')
    return Guarantee(eps, self.delta, route, eps_rdp, order, eps_pld, rounds,
                     self.n, self.population, self.dim, self.rdp,
                     self._assumptions_text(eps_prof is not None), note, low,
                     inputs,
                     self.summed if self.summed < self.n else None,
                     eps_prof, prof_note, prof_order)

  def _assumptions_text(self, profile: bool = False) -> str:
    """The neighbouring relation, sampling, route and worst cases, in words
    (`profile`: the profile route was computed, and its bounds are named)."""
    if self.l2_route:
      coords = (f'ℓ2 route: update norm <= {self.l2_clip:g}, {self.dim} '
                f'coordinates in [-c, c], c = {self.mech.input_bound:.4g} = '
                f'{self.mech.input_bound * math.sqrt(self.dim) / self.l2_clip:.3g}'
                '·l2_clip/√d')
    else:
      coords = f'all {self.dim} coordinates move from +c to -c'
    if self.mech.has_exact_divergences:
      others = ('exact for any inputs of the others (closed form or translation '
                'invariance of the modular sum)')
    elif self.conditioned is not None:
      others = (f'RDP routes: {self.conditioned.why}; targets at every vertex '
                'pair; T·d·η is added to δ and T·d·log(1/(1-η)) to ε (η = '
                f'{self.conditioned.tail:.3g}); the PLD route, where it '
                'applies, composes the exact law (infinite losses in δ)')
    else:
      red = self.mech.sum_reduction(self.summed)
      if red is not None and (self.l2_route or self.others == 'any' or
                              self.mech.piecewise_affine):
        others = f'{red.why}, targets at every vertex pair'
      elif self.mech.piecewise_affine:
        others = 'targets at every vertex pair of critical inputs'
      elif self.l2_route or self.others == 'any':
        others = 'targets bounded by cell envelopes'
        if self.mech.has_local_bound:
          others += (' or by one client\'s own output (data processing, the '
                     'others\' noise not counted), the smaller')
      else:
        others = 'targets at ±c (grid search finds none worse for n <= 2)'
      if self.others == 'any':
        others += ('; any inputs of the others in [-c, c] (the part of their '
                   'noise no input removes: blanket or aligned-block mixture '
                   'bound, proved; accounting/others.py)')
      else:
        others += ('; ASSUMED: others at ±c (worst mix; the papers\' setting, '
                   'not a worst case: interior inputs can give more)')
    dropouts = ('' if self.summed == self.n else
                f', of whom at least {self.summed} contribute (dropouts '
                'independent of the data and of who the client is; each round '
                f'accounted as the sum of {self.summed} clients sampled at γ)')
    text = (
        f'replace-one neighbouring (participant count public); {self.n} of '
        f'{self.population} clients per round (γ={self.gamma:.4g}){dropouts}, '
        'fixed-size without replacement (RDP: WBK19 Thm 9; profile: the round\'s '
        'profile amplified by a coupling and BBG18 Thm 2, composed as a PLD) '
        'or Poisson (PLD: '
        f'target participation revealed, pessimistic); {coords}; {others}; '
        'D∞ = sup over all inputs.')
    if profile and self.dominating_rate is not None:
      text += (' Profile route: the round\'s profile is also bounded by '
               f'{self.dominating_rate.why}; μ = {self._gaussian_mu():.6g} '
               f'at an ℓ2 change of {self._sensitivity:.4g} '
               '(docs/privacy.md, "Gaussian domination").')
    elif profile and not isinstance(self.mech, gaussian.Gaussian):
      text += (' Profile route: the round\'s profile from its RDP curve '
               '(CKS20 Prop. 12); ' + blanket_domination.unavailable(
                   self.mech, self.summed) + '.')
    method = getattr(self.rdp, 'method', '')
    if method:   # what the ℓ2 route's curve did (a sub-sum, a local bound)
      text += f' {DIVERGENCES_NOTE}{method}.'
    return text


def training_guarantee(mech, rounds: int, clients_per_round: int,
                       total_clients: int, delta: float, dim: int = 1,
                       orders: Sequence[int] = rdp_route.DEFAULT_ORDERS,
                       use_pld: bool = True,
                       pld_interval: float = 1e-3,
                       pld_max_points: int = None,
                       l2_clip: Optional[float] = None,
                       others: str = 'any', attained: bool = True,
                       limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS,
                       pair_bounds: Optional[secure_sum.PairBounds] = None,
                       min_clients_per_round: Optional[int] = None,
                       use_profile: bool = False,
                       profile_interval: float = profile_route.DEFAULT_INTERVAL
                       ) -> Guarantee:
  """(ε, δ) after `rounds` rounds of `clients_per_round` sampled from `total_clients`.

  Args:
    mech: the mechanism each coordinate goes through.
    rounds, clients_per_round, total_clients: the schedule (1 <= n <= N).
    delta: target δ in (0, 1).
    dim: number of coordinates each client sends (the model size d).
    orders: integer Rényi orders for the RDP route.
    use_pld: also compute the PLD route where its grid fits `pld_max_points`
      (else it is skipped and `Guarantee.pld_note` says why).
    pld_interval: PLD loss discretisation (pessimistic rounding).
    pld_max_points: the largest loss grid the PLD route may allocate (default
      pld_route.DEFAULT_PLD_MAX_POINTS); checked before allocating.
    l2_clip: the ℓ2 bound of each update (None: coordinates move end to end);
      see `RoundAccountant`.
    others: the other clients' inputs, 'any' or 'extremes' (`RoundAccountant`).
    attained: also the lower end of ε ∈ [attained, proved] (`attained`).
    limits: the `secure_sum.Limits` the target-pair search runs under.
    pair_bounds: how a pair is bounded for any others
      (`secure_sum.PairBounds`).
    min_clients_per_round: None, or the fewest sampled clients a round's sum
      may hold (dropouts; `RoundAccountant`).
    use_profile: also compute the profile route (`RoundAccountant.
      epsilon_profile`; where it does not apply `Guarantee.profile_note`
      says why; opt-in until the stored results are recomputed with it;
      docs/privacy.md).
    profile_interval: the profile route's PLD loss grid spacing.

  Returns:
    A `Guarantee`: the least ε of the routes computed.

  Raises:
    TypeError, ValueError: an argument of the wrong type or out of range
      (named), or the accountant's own errors (`RoundAccountant.guarantee`).
  """
  validation.check_integer('rounds', rounds, 1)
  accountant = RoundAccountant(mech, clients_per_round, total_clients, delta,
                               dim, orders, l2_clip, others, limits=limits,
                               pair_bounds=pair_bounds,
                               min_clients_per_round=min_clients_per_round)
  return accountant.guarantee(
      rounds, use_pld, pld_interval,
      pld_max_points or pld_route.DEFAULT_PLD_MAX_POINTS, attained,
      use_profile, profile_interval)
