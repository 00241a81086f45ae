"""The one place that decides a calibration candidate's ε.

`Epsilon` implements `interface.Oracle` over the accountant
(`composition.training_guarantee`: the least of the RDP route, Rényi orders
subsampled by WBK19 Thm 9, composed and converted, Mironov 2017, and the
profile route, the round's profile from the same orders amplified by
sampling and composed as a PLD, `profile_route`) and its cheap lower bound
(`lower_bound.epsilon_at_least`: it bounds the RDP route, and the profile
route of a candidate without a Gaussian-domination rate); with
bound='attained', over the per-round divergences named inputs attain
(`RoundAccountant.epsilon_attained`, both routes).
"""

import dataclasses
import math
from typing import Dict, Optional, Tuple

from tff_quant.accounting import attained as attained_lib
from tff_quant.accounting import composition
from tff_quant.accounting import divergence
from tff_quant.accounting import blanket_domination
from tff_quant.accounting import lower_bound
from tff_quant.accounting import secure_sum
from tff_quant.accounting.calibration import interface
from tff_quant.mechanisms import modular

FAST_ORDERS = tuple(range(2, 33)) + (48, 64)   # orders calibration evaluates
#: What `bound` may name: the ε that must meet the target (package docstring).
BOUNDS = ('proved', 'attained')
#: A bound='attained' calibration's `assumptions`.
ATTAINED_NOTE = (
    'NOT a privacy guarantee: calibrated on the attained ε (bound=\'attained\': '
    'the same route\'s ε from the divergences that named inputs attain), the '
    'optimistic end of what a perfect bound over the other clients\' inputs '
    'could allow; the proved ε of this mechanism may exceed the target.')
#: How a candidate searched by its Gaussian domination alone was evaluated
#: (replaced by its guarantee's text once `Epsilon.full` evaluates it).
DOMINATION_NOTE = ('searched by its Gaussian domination alone on the profile '
                   'route (at or above the whole accountant\'s ε)')


class AttainedUnavailable(ValueError):
  """bound='attained' asked of a mechanism whose attained ε cannot be computed
  (the attained search does not apply: its others' law costs over
  `secure_sum.Limits.attained_operations`): the optimistic end is unknown
  there."""


@dataclasses.dataclass(frozen=True)
class AttainedEnd:
  """A candidate's attained ε, as bound='attained' computed it.

  Attributes:
    accountant: the `composition.RoundAccountant` that computed it (its
      `attained` names the inputs).
    order: the Rényi order the attained ε came from.
  """
  accountant: composition.RoundAccountant
  order: float


@dataclasses.dataclass(frozen=True)
class Evaluated:
  """How a candidate's ε was computed.

  Attributes:
    assumptions: its guarantee's text (`Guarantee.assumptions`), or
      `ATTAINED_NOTE`.
    orders: the Rényi orders its ε came from.
  """
  assumptions: str
  orders: Tuple[int, ...]


class Epsilon:
  """ε of the run for a candidate mechanism; inf where its exact law is out of
  reach (never chosen). Implements `interface.Oracle`.

  After an evaluation, the next uses the orders up to max(8, 2α* + 2), α* the
  order that attained the last ε. The ε of fewer orders is an upper bound, so
  the cap never overstates privacy; along a search α* moves slowly, and the
  cap saves the power sums of orders that cannot attain the minimum (RQM at
  256 levels: 16 ladder rungs -> 7 at α* = 3). When α* is the largest order
  allowed, the minimum may lie above the cap: that candidate is evaluated
  again over every order (without this, a jump from a low-noise candidate
  overstated the next one's ε, 0.79 instead of 0.42 for the Gaussian).
  Where the profile route gives the ε, α* is its binding order
  (`profile_route.binding_order`: the order whose RDP → profile term is
  least where the sampled profile reaches δ/T); measured on the Gaussian's
  curve in the frontier's sampling at z = 2, 3, 6, 12, the cap it sets
  loses nothing against every FAST_ORDERS order.

  With a `target`, a candidate whose accountant costs >= 10x the bound
  (`lower_bound.worthwhile`) is first bounded below from one input
  configuration: when that already exceeds the target, the bound answers
  (`EpsilonEstimate.lower_bound`), so a search sees the same side of the
  target either way (what it saves: docs/performance.md). Not with the PLD
  route (which may give less) nor bound='attained'; on the profile route
  (use_profile=True) only for candidates without a Gaussian-domination rate
  (whose profile route is a function of the same RDP curve:
  `lower_bound`).

  On the profile route a candidate with a Gaussian domination
  (`blanket_domination`) is searched by that domination's ε alone
  (`RoundAccountant.epsilon_domination`), without its RDP curve: a proved
  ε at or above the whole accountant's, which takes the smaller of the two
  profiles and the RDP route. The answer is evaluated by the whole
  accountant (`full`); where that lies below the window the search is run
  again with the whole accountant (`mixes_matter` set, as for the mixes).

  On the ℓ2 route the accountant bounds each target pair by the smaller of
  the mixture bound and the ±c mixes (`secure_sum.PairBounds`). At the
  first candidate they apply to, ε is computed with and without them; where
  they lower it (RQM 16 levels, n = 30: 14%) every candidate keeps them
  (`mixes_matter`), else every later one skips them (`PairBounds.end_mixes`
  False; at RQM 8 bits, n = 1,000 the ε is the same: docs/performance.md):
  a proved ε, at or above the whole accountant's. The answer is evaluated
  by the whole accountant (`full`).

  With bound='attained' a candidate's ε is its attained ε at the same
  orders, capped the same way; a candidate without one raises
  `AttainedUnavailable`.

  Args:
    schedule: training_guarantee's keyword arguments but the mechanism and
      orders (rounds, clients_per_round, total_clients, delta, dim, use_pld,
      l2_clip, others, and optionally min_clients_per_round).
    target: the ε to meet (None: no screening).
    bound: 'proved' or 'attained' (`BOUNDS`).
    mixes_matter: whether the ±c mixes lower ε (None: measured at the
      first candidate they apply to).
    limits: the `secure_sum.Limits` the accountant's search runs under.
    pair_bounds: how the whole accountant bounds a pair for any others
      (`secure_sum.PairBounds`; the mixes are skipped from a copy of it).
  """

  def __init__(self, schedule, target=None, bound='proved', mixes_matter=None,
               limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS,
               pair_bounds: Optional[secure_sum.PairBounds] = None):
    self.schedule, self.orders = dict(schedule), FAST_ORDERS
    self.limits = limits
    self.pair_bounds = pair_bounds or secure_sum.PairBounds()
    self.bound = bound
    self.target = (None if schedule.get('use_pld') or bound == 'attained'
                   else target)
    self.use_profile = bool(schedule.get('use_profile', False))
    # bound='attained' only (the report names the inputs from it).
    self.attained_ends: Dict[str, AttainedEnd] = {}   # repr(mechanism) ->
    self.unresolved = ''   # why the last out-of-reach law was (for the error)
    self.seen: Dict[str, Evaluated] = {}   # repr(mechanism) -> how
    self.mixes_matter = mixes_matter
    self.partial = set()   # repr(mechanism) of evaluations without the mixes
    self._floors = {}      # repr(mechanism) -> its cheap bound (or None)
    self._looseness = None   # ε / bound at the last exact evaluation
    # The screen's bound at the sampled n (and γ = n/N) is also below the
    # ε of a sum over fewer (min_clients_per_round): that sum's bound covers
    # n's by data processing (docs/privacy.md, "Dropouts").
    self._bound_schedule = {k: v for k, v in self.schedule.items()
                            if k not in ('use_pld', 'others', 'use_profile',
                                         'min_clients_per_round')}

  def epsilon(self, mech, screen: bool = True) -> interface.EpsilonEstimate:
    """`mech`'s ε, or with `screen` its lower bound where that exceeds the
    target (`interface.Oracle.epsilon`).

    Args:
      mech: the candidate mechanism.
      screen: whether the cheap lower bound may answer.

    Returns:
      An `interface.EpsilonEstimate`.

    Raises:
      AttainedUnavailable: bound='attained' and `mech` has no attained ε.
      secure_sum.CostError: the accountant's search is over its cost limit.
    """
    if not screen:
      return interface.EpsilonEstimate(self.exact(mech))
    low = self.lower_bound(mech)
    if low is not None and low > self.target:
      return interface.EpsilonEstimate(low, lower_bound=True)
    eps = self.exact(mech)
    if low is not None and 0 < low and math.isfinite(eps):
      self._looseness = eps / low
    return interface.EpsilonEstimate(eps)

  def looseness(self) -> Optional[float]:
    """ε / bound at the last exact evaluation that had both.

    Returns:
      The ratio, or None before any such evaluation.
    """
    return self._looseness

  def lower_bound(self, mech) -> Optional[float]:
    """The cheap lower bound on `mech`'s ε (class docstring).

    Args:
      mech: the candidate mechanism.

    Returns:
      `lower_bound.epsilon_at_least`'s bound (cached), or None where the
      screening does not apply (no target, or not worth its cost).
    """
    key = repr(mech)
    if key not in self._floors:
      n = self.schedule['clients_per_round']
      dominated = self.use_profile and not blanket_domination.unavailable(
          mech, self.schedule.get('min_clients_per_round', n))
      self._floors[key] = (
          None if self.target is None or dominated or not lower_bound.worthwhile(
              mech, n, len(self.orders), self.limits)
          else lower_bound.epsilon_at_least(mech, orders=FAST_ORDERS,
                                            limits=self.limits,
                                            use_profile=self.use_profile,
                                            **self._bound_schedule))
    return self._floors[key]

  def exact(self, mech) -> float:
    """The accountant's ε (no screening); with bound='attained', the
    attained ε.

    Args:
      mech: the candidate mechanism.

    Returns:
      Its ε at the capped orders (inf where its exact law is out of reach;
      why in `unresolved`).

    Raises:
      AttainedUnavailable: bound='attained' and `mech` has no attained ε.
      secure_sum.CostError: the accountant's search is over its cost limit.
    """
    if self.bound == 'attained':
      return self._attained(mech)
    if self.use_profile and not self.mixes_matter:
      eps = self._dominated(mech)
      if eps is not None:
        return eps
    try:
      g = self._guarantee(mech)
      if self.orders != FAST_ORDERS and not _order(g) < max(self.orders):
        self.orders = FAST_ORDERS
        g = self._guarantee(mech)
    except (modular.UnresolvableError, divergence.UnresolvedSumError) as err:
      self.unresolved = str(err)
      return math.inf
    self.seen[repr(mech)] = Evaluated(g.assumptions, tuple(self.orders))
    self._cap(_order(g))
    return g.epsilon

  def _accountant(self, mech) -> composition.RoundAccountant:
    """The `composition.RoundAccountant` of `mech` on the schedule, at the
    current orders."""
    s = self.schedule
    return composition.RoundAccountant(
        mech, s['clients_per_round'], s['total_clients'], s['delta'],
        s['dim'], self.orders, s['l2_clip'], s['others'], limits=self.limits,
        min_clients_per_round=s.get('min_clients_per_round'))

  def _dominated(self, mech) -> Optional[float]:
    """On the profile route, `mech`'s ε from its Gaussian domination alone
    (`RoundAccountant.epsilon_domination`: no RDP curve), or None where it
    has none (class docstring)."""
    n = self.schedule.get('min_clients_per_round',
                          self.schedule['clients_per_round'])
    if blanket_domination.unavailable(mech, n):
      return None
    eps = self._accountant(mech).epsilon_domination(self.schedule['rounds'])
    if eps is None:
      return None
    self.seen[repr(mech)] = Evaluated(DOMINATION_NOTE, tuple(self.orders))
    self.partial.add(repr(mech))   # `full` gives the answer's ε
    return eps

  def _guarantee(self, mech):
    """The proved guarantee at the current orders, of the mixture bound
    alone where the ±c mixes do not lower ε (class docstring)."""
    run = lambda bounds: self._proved(mech, self.orders, bounds)
    if self.mixes_matter:
      return run(self.pair_bounds)
    alone = dataclasses.replace(self.pair_bounds, end_mixes=False, skipped=[])
    g = run(alone)
    skipped = alone.skipped   # the mechanisms whose mixes were skipped
    if skipped and self.mixes_matter is None and math.isfinite(g.epsilon):
      full = run(self.pair_bounds)   # the first candidate they apply to
      self.mixes_matter = full.epsilon < g.epsilon * (1 - 1e-9)
      return full
    if skipped:
      self.partial.add(repr(mech))
    return g

  def _proved(self, mech, orders, pair_bounds=None):
    return composition.training_guarantee(
        mech, orders=orders, attained=False, limits=self.limits,
        pair_bounds=pair_bounds or self.pair_bounds, **self.schedule)

  def full(self, mech) -> Optional[float]:
    """The whole accountant's ε for `mech` at the orders its search used.

    Args:
      mech: an evaluated candidate.

    Returns:
      That ε where its evaluation skipped the ±c mixes (the answer's ε),
      else None.
    """
    key = repr(mech)
    if key not in self.partial:
      return None
    orders = self.seen[key].orders
    g = self._proved(mech, orders)
    self.seen[key] = Evaluated(g.assumptions, orders)
    self.partial.discard(key)
    return g.epsilon

  def _cap(self, order):
    """The orders of the next evaluation, from the order `order` that
    attained the last ε (class docstring)."""
    if math.isfinite(order) and order < max(self.orders):
      cap = max(8, 2 * order + 2)
      self.orders = tuple(a for a in FAST_ORDERS if a <= cap)
    else:
      self.orders = FAST_ORDERS

  def _attained(self, mech) -> float:
    """The attained ε of `mech` (bound='attained'; class docstring)."""
    s = self.schedule

    def run():
      acc = self._accountant(mech)
      return (acc,) + acc.epsilon_attained(s['rounds'],
                                           s.get('use_profile', False))

    try:
      acc, eps, order = run()
      if eps is not None and (self.orders != FAST_ORDERS and
                              not order < max(self.orders)):
        self.orders = FAST_ORDERS
        acc, eps, order = run()
    except (modular.UnresolvableError, divergence.UnresolvedSumError) as err:
      self.unresolved = str(err)
      return math.inf
    if eps is None:
      raise self._unavailable(mech)
    self.seen[repr(mech)] = Evaluated(ATTAINED_NOTE, tuple(self.orders))
    self.attained_ends[repr(mech)] = AttainedEnd(acc, order)
    self._cap(order)
    return eps

  def _unavailable(self, mech) -> AttainedUnavailable:
    n = self.schedule['clients_per_round']
    ops = attained_lib.operations(mech, n, limits=self.limits)
    return AttainedUnavailable(
        f'bound=\'attained\': no attained ε for {mech}: the attained search '
        f'does not apply (the others\' law of {n - 1} '
        f'clients at {mech.num_levels} levels costs {ops:.2g} multiply-adds '
        f'> Limits.attained_operations='
        f'{self.limits.attained_operations:.2g}), so the '
        'optimistic end is unknown here.')


def _order(g) -> float:
  """The Rényi order the reported route of guarantee `g` leans on: the RDP
  route's best order, or the profile route's binding order
  (`profile_route.binding_order`)."""
  return g.profile_order if g.route == 'profile' else g.rdp_order
