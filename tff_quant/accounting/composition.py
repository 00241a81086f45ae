"""(ε, δ) of a whole training run, from the exact per-round output distributions.

Neighbouring relation: one client's update replaced by any other (replace-one), the
number of participants being public (the decoder needs it). One round releases the
secure sum of every coordinate; the d coordinates are independent given the inputs.
Coordinate route (no ℓ2 clip given, or c <= l2_clip/√d): per-round RDP is
d × D_α(scalar sum) with every coordinate moving from +c to -c (attainable: the
ℓ2 ball of radius clip_norm contains the box [-c, c]^d when c = clip_norm/√d).
ℓ2 route (c > l2_clip/√d, e.g. c = k·l2_clip/√d after a random rotation):
`vector.vector_rdp`, d·ĝ_α(S²/d) with S = 2·l2_clip. In both, by default
(others='any') the bound holds for any inputs of the n-1 others
(`accounting.others`, proved); others='extremes' puts them at ±c in the worst
mix (the papers' setting: an assumption, and not a worst case, see
`accounting.attained`). D∞ is the sup over all inputs
(`divergence.epsilon_infinity`). Every guarantee also carries the ε that
named inputs attain on the same route (`Guarantee.epsilon_attained`):
ε ∈ [attained, proved].

Two routes, both valid for sampling `clients_per_round` of `total_clients`
uniformly (fixed size, without replacement) or by Poisson sampling at that rate:
* RDP: WBK19 (Wang, Balle, Kasiviswanathan, AISTATS 2019, Thm 9;
  docs/references.md) subsampled RDP for sampling without replacement under
  replace-one, composed over rounds, converted with
  dp_accounting.rdp.compute_epsilon (`epsilon_from_rdp`).
* PLD: the exact loss pmf of the worst-mix pair, composed d times (loss_pmf,
  FFT, pessimistic rounding), mixed with a point mass at loss 0 of weight 1-γ
  (the target not sampled; pessimistic: as if the server could tell), then
  dp-accounting's PLD (public API) composed over rounds. Skipped, with the
  reason in `Guarantee.pld_note`, when its grid would exceed pld_max_points.
"""

import dataclasses
import functools
import math
from typing import Dict, Mapping, Optional, Sequence, Tuple

from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from tff_quant.accounting import attained as attained_lib
from tff_quant.accounting import divergence
from tff_quant.accounting import loss_pmf
from tff_quant.accounting import others as others_lib
from tff_quant.accounting import vector
from tff_quant.common import validation

DEFAULT_ORDERS = tuple(range(2, 65)) + (80, 96, 128, 192, 256)
# Largest PLD loss grid allocated by default: 2^26 points (0.5 GiB per float64
# array; an FFT convolution holds a few): the `make demo` run's PLD fits, a
# 1.2M-coordinate model does not (measured peaks: docs/performance.md,
# "Measured costs behind accounting choices").
DEFAULT_PLD_MAX_POINTS = 2**26


def _check_rdp_curve(rdp: Mapping[float, float], gamma: float, alpha: int):
  """Raises unless `rdp` maps every order the WBK19 bound at (gamma, alpha)
  reads (alpha alone at gamma = 1, else each integer 2..alpha) to a number
  in [0, inf]; math.inf (D∞) may be given too, in [0, inf]."""
  if not isinstance(rdp, Mapping):
    raise TypeError(f'`rdp` must map Rényi orders to RDP values, got '
                    f'{type(rdp).__name__}.')
  if gamma >= 1:
    needed, which = [alpha], f'order {alpha}'
  else:
    needed = list(range(2, alpha + 1))
    which = f'every integer order in [2, {alpha}] (the bound sums over them)'
  missing = [a for a in needed if a not in rdp]
  if missing:
    raise ValueError(f'`rdp` must hold {which}, missing {missing[:5]}'
                     f'{"..." if len(missing) > 5 else ""}.')
  for a in needed + ([math.inf] if math.inf in rdp else []):
    try:
      if isinstance(rdp[a], (str, bytes, bool)):
        raise TypeError
      value = float(rdp[a])
    except (TypeError, ValueError):
      raise TypeError(f'`rdp`[{a}] must be a number in [0, inf], got '
                      f'{rdp[a]!r}.') from None
    if not value >= 0:   # NaN fails too
      raise ValueError(f'`rdp`[{a}] must be in [0, inf], got {rdp[a]!r}.')


def subsampled_rdp_without_replacement(rdp: Mapping[float, float], gamma: float,
                                       alpha: int) -> float:
  """WBK19 Thm 9 bound at integer α >= 2 (docs/references.md).

  RDP at order α of the mechanism run on a uniformly drawn fixed-size subset
  (sampling without replacement, replace-one neighbours), no more than the
  unsampled rdp[α].

  Args:
    rdp: per-round RDP {order: ε} of the unsampled mechanism, each in [0, inf]:
      every integer order 2..alpha (alpha alone when gamma = 1) and optionally
      math.inf (D∞, used in the bound's j = 2 term; absent means inf).
    gamma: sampling rate clients_per_round / total_clients, in (0, 1].
    alpha: the integer order >= 2 to bound.

  Returns:
    The subsampled RDP at order alpha.

  Raises:
    TypeError: alpha not an integer, gamma not a number, rdp not a mapping
      of numbers.
    ValueError: gamma outside (0, 1], alpha < 2, an order rdp must hold
      missing, or a value outside [0, inf].
  """
  validation.check_number('gamma', gamma, 0, 1, low_open=True)
  validation.check_integer('alpha', alpha, 2)
  _check_rdp_curve(rdp, gamma, alpha)
  if gamma >= 1:
    return rdp[alpha]
  eps_inf = rdp.get(math.inf, math.inf)
  log_g = math.log(gamma)
  # j = 2 term: min{4(e^ε2 - 1), e^ε2 min{2, (e^ε∞ - 1)^2}}
  log_em1_inf = (float(others_lib.log_expm1(eps_inf)) if math.isfinite(eps_inf)
                 else math.inf)
  t2 = min(math.log(4) + float(others_lib.log_expm1(rdp[2])),
           rdp[2] + min(math.log(2), 2 * log_em1_inf))
  terms = [0.0, 2 * log_g + math.log(special.comb(alpha, 2)) + t2]
  for j in range(3, alpha + 1):
    terms.append(j * log_g + float(special.gammaln(alpha + 1) - special.gammaln(j + 1)
                                   - special.gammaln(alpha - j + 1)) +
                 (j - 1) * rdp[j] + min(math.log(2), j * log_em1_inf))
  bound = special.logsumexp(terms) / (alpha - 1)
  return min(bound, rdp[alpha])


def epsilon_from_rdp(orders: Sequence[float], per_round: Sequence[float],
                     rounds: int, delta: float) -> Tuple[float, float]:
  """(ε, order) at `delta` after `rounds` rounds of per-round RDP `per_round`.

  RDP composes by addition over rounds; dp_accounting.rdp.compute_epsilon
  converts the total to (ε, δ) at the best order. Orders whose per-round RDP
  is not finite are left out (they cannot give the best ε).

  Args:
    orders: the Rényi orders of `per_round`.
    per_round: [orders] RDP of one round (after any subsampling).
    rounds: rounds composed.
    delta: target δ.

  Returns:
    (ε, the order attaining it), or (inf, nan) when no order is finite.
  """
  finite = [(o, rounds * v) for o, v in zip(orders, per_round)
            if math.isfinite(v)]
  if not finite:
    return math.inf, math.nan
  eps, order = rdp_privacy_accountant.compute_epsilon(
      [o for o, _ in finite], [v for _, v in finite], delta)
  return float(eps), float(order)


@dataclasses.dataclass
class Guarantee:
  """(ε, δ) for a run, by both routes; `epsilon` is the tighter one.

  Args:
    epsilon, delta: the headline guarantee (the tighter route).
    route: 'RDP' or 'PLD', the route that gave `epsilon`.
    epsilon_rdp, rdp_order: the RDP route's ε and the order attaining it.
    epsilon_pld: the PLD route's ε (None when not computed).
    rounds, clients_per_round, total_clients, dim: the schedule accounted.
    per_round_rdp: {order: ε} of one round before subsampling.
    assumptions: the neighbouring relation and worst cases used, in words.
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
    """One line: (ε, δ), rounds, the interval, both routes' ε and the PLD note."""
    pld = 'n/a' if self.epsilon_pld is None else f'{self.epsilon_pld:.4g}'
    return (f'(ε={self.epsilon:.4g}, δ={self.delta:.3g}) after {self.rounds} rounds; '
            f'{self.interval()} [{self.route}; RDP ε={self.epsilon_rdp:.4g} at '
            f'α={self.rdp_order:g}, PLD ε={pld}]' +
            (f' ({self.pld_note})' if self.pld_note else ''))


# Introduces, in a guarantee's text, how the ℓ2 route bounded the divergences
# (`vector.RoundRdp.method`).
DIVERGENCES_NOTE = 'Per-coordinate divergences: '


def per_round_rdp(mech, clients_per_round: int, dim: int = 1,
                  orders: Sequence[int] = DEFAULT_ORDERS,
                  others: str = 'any') -> Dict[float, float]:
  """Per-round RDP ε(α) = dim × the worst D_α of the secure sum (α = inf too).

  others='any': `vector.divergence_curve` at t = 2c, every target pair (vertex
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
  """
  vector.check_others(others)
  all_orders = sorted(set(range(2, max(orders) + 1)))  # WBK needs every j <= α
  if others == 'any' and not mech.has_exact_divergences:
    rdp = {a: 0.0 for a in all_orders}
  else:
    rdp = {a: dim * v for a, v in
           _extremes_divergences(mech, all_orders, clients_per_round).items()}
  if not mech.has_exact_divergences and (mech.piecewise_affine or
                                         others == 'any'):
    # Targets at every vertex pair, not only ±c (at n = 1 an interior pair is
    # worse): the sup at the ladder's rungs, between them by convexity.
    rungs = vector.order_ladder(all_orders)
    curve = vector.divergence_curve(mech, rungs, clients_per_round,
                                    t_grid=[2 * mech.input_bound], others=others)
    sup = vector.between_rungs({a: curve.values[a][0] for a in rungs},
                               all_orders)
    rdp = {a: max(v, dim * sup[a]) for a, v in rdp.items()}
  # The sum's D∞ is at most the local D∞ (post-processing), sup over all inputs.
  rdp[math.inf] = dim * divergence.epsilon_infinity(mech)
  return rdp


# Points (mixes × sum support) of the extremes' exact sums: above
# REDUCE_ABOVE_POINTS a mechanism's sum reduction serves instead (PBM: its
# one-trial sums, within 1e-6 of the exact value, at a small share of the
# exact sums' cost); above LOCAL_ABOVE_POINTS, with no reduction, the local
# divergence or D∞ (exact sums that large cost too much to build). Measured
# times: docs/performance.md, "Measured costs behind accounting choices".
REDUCE_ABOVE_POINTS = 1e6
LOCAL_ABOVE_POINTS = 5e7


def _extremes_divergences(mech, orders, num_clients) -> Dict[float, float]:
  """{order: D_α of one coordinate's secure sum, the others at ±c in the worst
  mix} (`divergence.renyi_divergence_of_sum`), or an upper bound of it where
  those sums are large: the mechanism's sum reduction (it holds for any
  others, so for these), else the local divergence (data processing) or the
  local D∞. Exact values never exceed these bounds."""
  points = (0 if mech.has_exact_divergences else
            num_clients * (num_clients * (mech.num_levels - 1) + 1))
  red = mech.sum_reduction(num_clients)
  if (points > REDUCE_ABOVE_POINTS and red is not None and
      red.mechanism.num_levels < mech.num_levels):
    res = divergence.renyi_divergence_of_sum(red.mechanism, orders,
                                             red.num_clients)
    return {r.alpha: red.copies * r.value for r in res}
  local = mech.local_divergences(orders, [2 * mech.input_bound])
  local = None if local is None else {a: float(local[a][0]) for a in orders}
  if points > LOCAL_ABOVE_POINTS:   # D_α <= D∞ at every order
    return local or dict.fromkeys(orders, divergence.epsilon_infinity(mech))
  try:
    res = divergence.renyi_divergence_of_sum(mech, orders, num_clients)
    return {r.alpha: r.value for r in res}
  except divergence.UnresolvedSumError:
    # An exact value is never above the local bound (data processing), so
    # the bound only matters where the sum's law cannot be resolved.
    if local is None:
      raise
    return local


def _pld_epsilon(mech, clients_per_round, dim, rounds, gamma, delta, mixes,
                 interval, max_points):
  """(ε by the PLD route, '') or (None, why it was skipped).

  Per worst mix: the exact one-coordinate loss pmf, composed over `dim`
  coordinates (loss_pmf, FFT), mixed with loss 0 w.p. 1-γ, handed to
  dp-accounting (public API) and composed over `rounds`. Each composition's
  grid is bounded first; above `max_points` the route is skipped, not tried.
  """
  eps = 0.0
  for k in mixes:
    lp, lq = divergence.sum_pair_log_pmfs(mech, clients_per_round, k)
    one = loss_pmf.LossPmf.from_log_pmfs(lp, lq, interval)
    need = max(one.composed_points(dim),
               one.round_then_rounds_points(dim, gamma, rounds))
    if need > max_points:
      return None, (f'PLD route skipped: {dim} coordinates × {rounds} rounds need '
                    f'up to {need:.3g} loss-grid points at interval {interval:g}, '
                    f'above pld_max_points={max_points:.3g} (memory); the RDP '
                    'route is reported')
    per_round = one.compose(dim) if dim > 1 else one
    if gamma < 1:
      per_round = per_round.mix_with_zero(gamma)
    pld = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
        per_round.as_dict(), per_round.inf_mass, interval)
    total = pld.self_compose(rounds) if rounds > 1 else pld
    eps = max(eps, total.get_epsilon_for_delta(delta))
  return eps, ''


#: For mechanisms whose every Rényi divergence is infinite (finite-support
#: noise: BQ), the RDP routes account the secure sum conditioned on a window
#: of outputs (`Mechanism.conditioned_sum`) that each coordinate's sum misses
#: with probability at most this, per round, for any inputs; T rounds of d
#: coordinates then add T·d·η to δ and T·d·log(1/(1-η)) to ε (docs/privacy.md,
#: "Conditioning on a window"). 1e-14: 2.5e-8 of δ at the FL table's
#: T·d = 300·8,192, while the window stays within ~8 standard deviations.
CONDITIONING_TAIL = 1e-14


def _check_schedule(clients_per_round, total_clients, delta, dim):
  validation.check_integer('clients_per_round', clients_per_round, 1)
  validation.check_integer('total_clients', total_clients, 1)
  validation.check_integer('dim', dim, 1)
  validation.check_at_most('clients_per_round', clients_per_round,
                           'total_clients', total_clients)
  validation.check_probability('delta', delta)


class RoundAccountant:
  """Per-round RDP computed once; (ε, δ) after any number of rounds, cheaply.

  `epsilon(rounds)` is the RDP route (fast, used for per-round logs);
  `guarantee(rounds)` adds the PLD route and picks the tighter one.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    clients_per_round: clients sampled per round (without replacement), >= 1.
    total_clients: the population, >= clients_per_round.
    delta: target δ in (0, 1).
    dim: coordinates each client sends.
    orders: integer Rényi orders >= 2 for the RDP route.
    l2_clip: the ℓ2 norm bound of each client's update, or None (every
      coordinate may move end to end). When the mechanism's coordinate bound c
      exceeds l2_clip/√dim, the ℓ2 route (`vector.vector_rdp`) is used.
    others: the other clients' inputs: 'any' (default; proved for every input
      in [-c, c]) or 'extremes' (±c, worst mix: a search-backed assumption).
    conditioning_tail: for a mechanism with a `Mechanism.conditioned_sum`
      (BQ), the most each coordinate's sum may miss its window per round.

  Raises:
    ValueError: a schedule argument out of range (named), or
      `conditioning_tail` outside (0, 1).
  """

  def __init__(self, mech, clients_per_round: int, total_clients: int,
               delta: float, dim: int = 1,
               orders: Sequence[int] = DEFAULT_ORDERS,
               l2_clip: Optional[float] = None, others: str = 'any',
               conditioning_tail: float = CONDITIONING_TAIL):
    _check_schedule(clients_per_round, total_clients, delta, dim)
    vector.check_others(others)
    self.others = others
    validation.check_optional(validation.check_positive, 'l2_clip', l2_clip)
    self.mech, self.n, self.population = mech, clients_per_round, total_clients
    self.delta, self.dim, self.orders = delta, dim, list(orders)
    self.gamma = clients_per_round / total_clients
    self.l2_clip = l2_clip
    self.l2_route = (l2_clip is not None and
                     not vector.coordinate_route_applies(mech, dim, l2_clip))
    self._attained = None
    #: The conditioned secure sum the RDP routes account (None: the sum itself).
    self.conditioned = mech.conditioned_sum(clients_per_round,
                                            conditioning_tail)

  @property
  def _accounted(self):
    """(mechanism, clients) whose secure sum the RDP routes bound: the
    conditioned sum's windowed mechanism where there is one."""
    if self.conditioned is None:
      return self.mech, self.n
    return self.conditioned.mechanism, self.conditioned.num_clients

  @functools.cached_property
  def rdp(self) -> Dict[float, float]:
    """{order: proved per-round RDP} (math.inf too), computed on first use
    (an accountant asked only for the attained end never computes it)."""
    mech, n = self._accounted
    if self.l2_route:
      every = sorted(set(range(2, max(self.orders) + 1)))  # WBK needs every j
      rdp = vector.vector_rdp(mech, every + [math.inf], n, self.dim,
                              2 * self.l2_clip, others=self.others)
    else:
      rdp = per_round_rdp(mech, n, self.dim, self.orders, self.others)
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
    sub = [subsampled_rdp_without_replacement(rdp, self.gamma, a)
           for a in self.orders]
    if self.mech is None or self.gamma >= 1:
      return sub
    sensitivity = (2 * self.l2_clip if self.l2_route
                   else 2 * self.mech.input_bound * math.sqrt(self.dim))
    own = self.mech.subsampled_rdp(self.orders, self.n, self.population,
                                   sensitivity)
    if own is None:
      return sub
    return [min(a, float(b)) for a, b in zip(sub, own)]

  @property
  def attained(self) -> Optional[Dict[float, float]]:
    """{order: per-round RDP attained by named inputs} (`attained.round_rdp`,
    its `describe(order)` names them), computed on first use; the proved
    values themselves where the divergences are exact in closed form; None
    where no search applies."""
    if self._attained is None and self.mech is not None:
      if self.mech.has_exact_divergences:
        self._attained = attained_lib.AttainedRdp(
            dict(self.rdp), {}, self.mech.input_bound)
      else:
        every = sorted(set(range(2, max(self.orders) + 1)))
        mech, n = self._accounted
        if self.conditioned is not None:   # the conditioned sum, named others
          mech, n = self.conditioned.attained, 1
        self._attained = attained_lib.round_rdp(
            mech, every + [math.inf], n, self.dim,
            self.l2_clip if self.l2_route else None) or False
    return self._attained or None

  def epsilon_attained(self, rounds: int):
    """(ε, order) after `rounds` rounds by the RDP route from the attained
    per-round RDP (None, nan where none is attained): the lower end of
    ε ∈ [attained, proved] (`attained` module docstring)."""
    validation.check_integer('rounds', rounds, 1)
    if self.attained is None:
      return None, math.nan
    return self._epsilon(self._subsampled(self.attained), rounds)

  @classmethod
  def from_round_rdp(cls, rdp: Dict[float, float], clients_per_round: int,
                     total_clients: int, delta: float, dim: int,
                     assumptions: str,
                     orders: Sequence[int] = DEFAULT_ORDERS,
                     conditioned=None) -> 'RoundAccountant':
    """An accountant for a mechanism outside the registry (TFF's own
    aggregators) from its per-round RDP {order: ε} (every integer order up to
    max(orders), and math.inf): subsampled (WBK19 Thm 9; docs/references.md)
    and composed as for the registry's; `assumptions` is reported with each
    guarantee. `conditioned` (a `base.ConditionedSum`): `rdp` is of that
    conditioned sum, and ε is composed as for it (δ - T·d·η, + T·d·λ)."""
    _check_schedule(clients_per_round, total_clients, delta, dim)
    self = cls.__new__(cls)
    self.mech, self.n, self.population = None, clients_per_round, total_clients
    self.delta, self.dim, self.orders = delta, dim, list(orders)
    self.gamma = clients_per_round / total_clients
    self.l2_clip, self.l2_route, self.rdp = None, True, dict(rdp)
    self._assumptions, self._attained = assumptions, None
    self.conditioned = conditioned
    return self

  @property
  def gives_privacy(self) -> bool:
    """False when every order's per-round RDP is infinite (ε = inf for any δ)."""
    return any(math.isfinite(v) for v in self._sub)

  def epsilon_rdp(self, rounds: int):
    """(ε, order) after `rounds` rounds by the RDP route."""
    validation.check_integer('rounds', rounds, 1)
    return self._epsilon(self._sub, rounds)

  def _epsilon(self, sub, rounds: int):
    """(ε, order) at self.delta from per-round subsampled RDP `sub`; for a
    conditioned sum, the conditioned process's (ε', δ - T·d·η) plus T·d·λ
    (λ = log(1/(1-η))), and (inf, nan) where T·d·η reaches δ."""
    if self.conditioned is None:
      return epsilon_from_rdp(self.orders, sub, rounds, self.delta)
    steps = rounds * self.dim
    delta = self.delta - steps * self.conditioned.tail
    if delta <= 0:
      return math.inf, math.nan
    eps, order = epsilon_from_rdp(self.orders, sub, rounds, delta)
    return eps + steps * self.conditioned.log_ratio, order

  def guarantee(self, rounds: int, use_pld: bool = True,
                pld_interval: float = 1e-3,
                pld_max_points: int = DEFAULT_PLD_MAX_POINTS,
                attained: bool = True) -> Guarantee:
    """(ε, δ) after `rounds` rounds: the RDP route, and the PLD route when
    `use_pld` and its grid fits `pld_max_points` (else `pld_note` says why);
    with `attained`, the lower end of ε ∈ [attained, proved] too."""
    eps_rdp, order = self.epsilon_rdp(rounds)
    if self.mech is None:
      return Guarantee(eps_rdp, self.delta, 'RDP', eps_rdp, order, None, rounds,
                       self.n, self.population, self.dim, self.rdp,
                       self._assumptions, 'PLD route not available: the '
                       'per-round RDP was given in closed form',
                       attained_inputs='the per-round RDP was given in closed '
                       'form')
    eps_pld, note = self._pld_route(rounds, use_pld, pld_interval,
                                    pld_max_points)
    if eps_pld is not None and eps_pld < eps_rdp:
      eps, route = eps_pld, 'PLD'
    else:
      eps, route = eps_rdp, 'RDP'
    low, inputs = None, 'not requested (attained=False)'
    if attained and route == 'PLD':
      # The PLD route composes named pairs' exact loss distributions.
      low, inputs = eps, 'the pair the PLD route composes (exact law)'
    elif attained and self.attained is None:
      inputs = ('no configuration search applies (closed form or a '
                'secure-sum law over attained.MAX_OPERATIONS)')
    elif attained:
      low, at = self.epsilon_attained(rounds)
      if not self.attained.configurations:
        inputs = 'exact per-round divergences (closed form)'
      elif math.isnan(at):   # every order infinite
        inputs = self.attained.describe(math.inf)
      else:
        inputs = self.attained.describe(at)
      if self.conditioned is not None:   # the others were folded into the law
        inputs = inputs.replace('others none', self.conditioned.attained_others)
    return Guarantee(eps, self.delta, route, eps_rdp, order, eps_pld, rounds,
                     self.n, self.population, self.dim, self.rdp,
                     self._assumptions_text(), note, low, inputs)

  def _pld_route(self, rounds, use_pld, pld_interval, pld_max_points):
    """(ε by the PLD route, '') or (None, why it was not computed).

    It composes the ±c pair's exact loss distribution: with the others at
    their worst ±c mix under others='extremes', and for any others where the
    sum reduces exactly to one client (`SumReduction.exact`: BQ)."""
    red = self.mech.sum_reduction(self.n)
    exact_one = red is not None and red.exact and red.num_clients == 1
    if not use_pld:
      return None, 'PLD route not requested (use_pld=False)'
    if self.mech.has_exact_divergences:
      return None, (f'PLD route not implemented for {type(self.mech).__name__} '
                    '(its divergences are exact in closed form / by '
                    'translation invariance); the RDP route is reported')
    if self.l2_route:
      return None, ('PLD route not used: it composes d coordinates each moving '
                    'end to end, which ℓ2 clipping with c > l2_clip/√d rules '
                    'out; the ℓ2 RDP route is reported')
    if self.others == 'any' and not exact_one:
      return None, ('PLD route not used: it composes the worst mix of the '
                    'others at ±c, an assumption (others=\'extremes\'); the '
                    'RDP route holds for any inputs of the others')
    mech, n = (red.mechanism, 1) if exact_one else (self.mech, self.n)
    if not vector.end_pair_is_worst(mech, n):
      return None, ('PLD route not used: it composes the ±c target pair, and '
                    'an interior pair of critical inputs is worse here; the '
                    'RDP route (every vertex pair) is reported')
    # Also when every RDP order is infinite (BQ): δ can absorb that mass.
    validation.check_positive('pld_interval', pld_interval)
    validation.check_integer('pld_max_points', pld_max_points, 2)
    worst = {divergence.renyi_divergence_of_sum(mech, a, n).worst_num_plus
             for a in (1, 2, 8)}
    return _pld_epsilon(mech, n, self.dim, rounds, self.gamma, self.delta,
                        sorted(worst), pld_interval, pld_max_points)

  def _assumptions_text(self) -> str:
    """The neighbouring relation, sampling, route and worst cases, in words."""
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
      red = self.mech.sum_reduction(self.n)
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
    text = (
        f'replace-one neighbouring (participant count public); {self.n} of '
        f'{self.population} clients per round (γ={self.gamma:.4g}), fixed-size '
        'without replacement (RDP: WBK19 Thm 9) or Poisson (PLD: target '
        f'participation revealed, pessimistic); {coords}; {others}; D∞ = sup '
        'over all inputs.')
    method = getattr(self.rdp, 'method', '')
    if method:   # what the ℓ2 route's curve did (a sub-sum, a local bound)
      text += f' {DIVERGENCES_NOTE}{method}.'
    return text


def training_guarantee(mech, rounds: int, clients_per_round: int,
                       total_clients: int, delta: float, dim: int = 1,
                       orders: Sequence[int] = DEFAULT_ORDERS,
                       use_pld: bool = True,
                       pld_interval: float = 1e-3,
                       pld_max_points: int = None,
                       l2_clip: Optional[float] = None,
                       others: str = 'any', attained: bool = True) -> Guarantee:
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
      DEFAULT_PLD_MAX_POINTS); checked before allocating.
    l2_clip: the ℓ2 bound of each update (None: coordinates move end to end);
      see `RoundAccountant`.
    others: the other clients' inputs, 'any' or 'extremes' (`RoundAccountant`).
    attained: also the lower end of ε ∈ [attained, proved] (`attained`).
  """
  validation.check_integer('rounds', rounds, 1)
  accountant = RoundAccountant(mech, clients_per_round, total_clients, delta,
                               dim, orders, l2_clip, others)
  return accountant.guarantee(rounds, use_pld, pld_interval,
                              pld_max_points or DEFAULT_PLD_MAX_POINTS,
                              attained)
