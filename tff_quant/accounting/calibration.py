"""A registered mechanism's free parameters that meet a target (ε, δ) for a training run.

Generic over `tff_quant.mechanisms.registry()`: the class declares its tunables
(range, default, which direction is more private) and which ones calibration
searches (`CALIBRATED`: every parameter that trades privacy for accuracy). The
last is searched along its privacy direction; earlier ones are scanned over
their declared grid (or the integers within the bit budget), and among the
candidates that meet the target and carry the signal, the one with the
smallest debiased error wins: the worst Var/slope² of the decoded mean of the
round's clients sharing an input |x| <= a (`mechanisms.utility`; a = ℓ2
clip/√d on the ℓ2 route, the rms coordinate of an update at the clip, else
the coordinate clip). Plain MSE would reward outputs that stay near 0 whatever
the input (a wrapped modular sum, a quantizer clipping noise far wider than
its range). A candidate that cannot carry the signal is refused: a modular
sum whose modulus does not hold its summed noise as TFF's
DistributedDpSumFactory sizes it, or a decoded mean with slope < 1/2
(`utility.MIN_SLOPE`); when every candidate meeting the target is refused,
`CannotCarrySignal` says why and, for a modular sum, the bits it needs.
`calibration_report` also calibrates the continuous Gaussian to the same
target, for the ratio.

Where the ±c mixes of the others leave ε unchanged at the first candidate
they apply to, later candidates are bounded by the mixture bound over the
others alone (`vector.mixture_alone`, `_Epsilon`): a proved ε, at or above
the one `training_guarantee` gives. The answer's ε is the whole
accountant's.

Which ε meets the target (`bound`): 'proved' (the default) is the
accountant's ε, a guarantee for any inputs of the other clients. 'attained'
is the same route's ε from the per-round divergences that named inputs
attain (`RoundAccountant.epsilon_attained`, `accounting.attained`): what a
perfect bound over the others' inputs could at best allow on this route, so
its calibration is the optimistic end of what the mechanism could be
calibrated to. It is NOT a privacy guarantee (a mechanism calibrated so may
exceed the target under the proved bound, and a tighter proof could land
anywhere between the two ends); it exists to tell which comparisons survive
the slack of our bounds. Where the divergences are exact in closed form
(gaussian, skellam, ddgauss) the two ends coincide; where the attained search
does not apply (its others' law over `attained.MAX_OPERATIONS`),
`AttainedUnavailable` says so rather than fall back to the proved ε. RDP
route only (not with use_pld).
"""

import dataclasses
import math
import time
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import numpy as np
from scipy import optimize

from tff_quant import mechanisms
from tff_quant.mechanisms import modular
from tff_quant.mechanisms import utility
from tff_quant.accounting import attained as attained_lib
from tff_quant.accounting import composition
from tff_quant.accounting import divergence
from tff_quant.accounting import lower_bound
from tff_quant.accounting import vector
from tff_quant.common import validation

FAST_ORDERS = tuple(range(2, 33)) + (48, 64)   # orders calibration evaluates
_OPEN_END_MARGIN = 1e-4   # distance kept from an open end of a bounded range
_UNBOUNDED_SPAN = 1e6     # an unbounded float range is searched up to default · this
# (1e3 capped the Gaussian at n = 1000, d = 1.2M: noise multiplier 1e3·c∞
# left ε = 8.18 over 2,000 rounds, so ε = 3 read as unreachable)
_RTOL = 2e-3              # the root search stops at this relative width
_MAX_ITERATIONS = 60      # iterations of the root search, at most
_PROXY_STEPS = 4         # exact evaluations steered by the cheap bound, at most
# Brent's method inside a bracket whose unsafe end's ε is under this x the
# target evaluates without the screen: a bound there is at most that ε, so
# it certifies a candidate only at a looseness under it (~1.2 at n = 1,000).
_UNSCREENED_WITHIN = 1.1
# How far below the aim the bound-guided step may land (`_bracket_from_floor`).
_AIM_SLACK = 0.03
_NO_PLATEAU = 0.05   # `_search_last`: Brent's floor only below this share of the target
# The root search's width while the grid is scanned; the winner is searched
# again to `rtol` (`_Scan.refine`). RQM 8 bits, n = 1,000: the last steps
# into a 0.2% window took 2-3 exact evaluations per grid point, 7-30 s each.
SCAN_RTOL = 1e-2
SAFE_END_FIRST = 2.0     # a most private end whose bound is within this
                         # factor of the target is evaluated first (`_search_last`)
#: What `bound` may name: the ε that must meet the target (module docstring).
BOUNDS = ('proved', 'attained')
#: A bound='attained' calibration's `assumptions`.
ATTAINED_NOTE = (
    'NOT a privacy guarantee: calibrated on the attained ε (bound=\'attained\': '
    'the same route\'s ε from the divergences that named inputs attain), the '
    'optimistic end of what a perfect bound over the other clients\' inputs '
    'could allow; the proved ε of this mechanism may exceed the target.')


class AttainedUnavailable(ValueError):
  """bound='attained' asked of a mechanism whose attained ε cannot be computed
  (the attained search does not apply: its others' law costs over
  `attained.MAX_OPERATIONS`): the optimistic end is unknown there."""


class _Epsilon:
  """ε of the run for a candidate mechanism; inf where its exact law is out of
  reach (never chosen).

  After an evaluation, the next uses the orders up to max(8, 2α* + 2), α* the
  order that attained the last ε. The ε of fewer orders is an upper bound, so
  the cap never overstates privacy; along a search α* moves slowly, and the
  cap saves the power sums of orders that cannot attain the minimum (RQM at
  256 levels: 16 ladder rungs -> 7 at α* = 3). When α* is the largest order
  allowed, the minimum may lie above the cap: that candidate is evaluated
  again over every order (without this, a jump from a low-noise candidate
  overstated the next one's ε, 0.79 instead of 0.42 for the Gaussian, and
  made ε look non-monotone to the root search).

  With a `target`, a candidate whose accountant costs >= 10x the bound
  (`lower_bound.worthwhile`) is first bounded below from one input
  configuration (~0.1 s for RQM at 256 levels, n = 100): when that already
  exceeds the target, the bound is returned instead of the accountant's ε
  (which is larger) and `bounded` holds the mechanism, so a search sees the
  same side of the target either way (RQM 8 bits, n = 100: its most private
  ends at Δ <= 8c, 9-20 s each, ε 3e7 to 1560, are certified in ~0.1 s). Not
  with the PLD route (the bound is the RDP route's).

  On the ℓ2 route, where a candidate's ends are its only vertices, the
  accountant bounds each target pair by the smaller of the mixture bound and
  the ±c mixes (`vector`). At the first such candidate ε is computed with
  and without the mixes; where they lower it (RQM 16 levels, n = 30: 14%)
  every candidate keeps them, else every later one skips them
  (`vector.mixture_alone`: RQM 8 bits, n = 1,000, Δ >= 256c: ε the same to
  the last digit, 11 s -> 4 s an evaluation). A candidate's ε is then the
  mixture bound's: proved, at or above the whole accountant's. The answer
  is evaluated by the whole accountant (`full`, `_Scan.settle`), and
  searched again with the mixes where they lower its ε out of the window
  (at another grid point they can: RQM 16 levels, n = 200, none at Δ =
  16c, 2.885 against 3.196 at Δ = 32c).

  With bound='attained' the ε of a candidate is its attained ε
  (`RoundAccountant.epsilon_attained` at the same orders, capped the same
  way: fewer orders only raise it); no screening there (the lower bound's one
  law of the others is a large share of the attained search's own few), and
  a candidate without an
  attained ε raises `AttainedUnavailable`.
  """

  def __init__(self, schedule, target=None, bound='proved'):
    self.schedule, self.orders = dict(schedule), FAST_ORDERS
    self.bound = bound
    self.target = (None if schedule.get('use_pld') or bound == 'attained'
                   else target)
    # repr(mechanism) -> (its RoundAccountant, the order of its attained ε):
    # bound='attained' only (the report names the inputs from it).
    self.accountants = {}
    self.unresolved = ''   # why the last out-of-reach law was (for the error)
    # repr(mechanism) -> (its guarantee's text, the orders its ε came from)
    self.seen = {}
    # whether the ±c mixes lowered ε where first tried (None: not yet), and
    # repr(mechanism) of the evaluations that skipped them
    self.mixes_matter = None
    self.partial = set()
    self.bounded = None    # the last mechanism answered by a lower bound
    self._floors = {}      # repr(mechanism) -> its cheap bound (or None)
    # ε / bound at the last exact evaluation: where the next search's first
    # exact step aims (`_bracket_from_floor`)
    self.looseness = None
    self._bound_schedule = {k: v for k, v in self.schedule.items()
                            if k not in ('use_pld', 'others')}

  def __call__(self, mech) -> float:
    self.bounded = None
    low = self.floor(mech)
    if low is not None and low > self.target:
      self.bounded = mech
      return low
    eps = self.exact(mech)
    if low is not None and 0 < low and math.isfinite(eps):
      self.looseness = eps / low
    return eps

  def unscreened(self, mech) -> float:
    """The accountant's ε without the screen (the search's interpolated
    candidates, near the target, where a bound rarely exceeds it)."""
    self.bounded = None
    return self.exact(mech)

  def floor(self, mech) -> Optional[float]:
    """The cheap lower bound on `mech`'s ε (class docstring); None where the
    screening does not apply (no target, or not worth its cost)."""
    key = repr(mech)
    if key not in self._floors:
      self._floors[key] = (
          None if self.target is None or not lower_bound.worthwhile(
              mech, self.schedule['clients_per_round'], len(self.orders))
          else lower_bound.epsilon_at_least(mech, orders=FAST_ORDERS,
                                            **self._bound_schedule))
    return self._floors[key]

  def exact(self, mech) -> float:
    """The accountant's ε (no screening); with bound='attained', the
    attained ε."""
    if self.bound == 'attained':
      return self._attained(mech)
    try:
      g = self._guarantee(mech)
      if self.orders != FAST_ORDERS and not g.rdp_order < max(self.orders):
        self.orders = FAST_ORDERS
        g = self._guarantee(mech)
    except (modular.UnresolvableError, divergence.UnresolvedSumError) as err:
      self.unresolved = str(err)
      return math.inf
    self.seen[repr(mech)] = (g.assumptions, tuple(self.orders))
    self._cap(g.rdp_order)
    return g.epsilon

  def _guarantee(self, mech):
    """The proved guarantee at the current orders: the search needs the
    proved ε only (the report computes the answer's attained end), and the
    mixture bound alone where the ±c mixes do not lower ε (`mixes_matter`,
    class docstring)."""
    run = lambda: self._proved(mech, self.orders)
    if self.mixes_matter:
      return run()
    with vector.mixture_alone() as skipped:
      g = run()
    if skipped and self.mixes_matter is None and math.isfinite(g.epsilon):
      full = run()   # the first candidate they apply to
      self.mixes_matter = full.epsilon < g.epsilon * (1 - 1e-9)
      return full
    if skipped:
      self.partial.add(repr(mech))
    return g

  def _proved(self, mech, orders):
    return composition.training_guarantee(mech, orders=orders, attained=False,
                                          **self.schedule)

  def full(self, mech) -> Optional[float]:
    """The whole accountant's ε for `mech` at the orders its search used,
    where that search skipped the ±c mixes (else None): the answer's ε."""
    key = repr(mech)
    if key not in self.partial:
      return None
    orders = self.seen[key][1]
    g = self._proved(mech, orders)
    self.seen[key] = (g.assumptions, orders)
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
      acc = composition.RoundAccountant(
          mech, s['clients_per_round'], s['total_clients'], s['delta'],
          s['dim'], self.orders, s['l2_clip'], s['others'])
      return (acc,) + acc.epsilon_attained(s['rounds'])

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
      ops = attained_lib.operations(mech, s['clients_per_round'])
      raise AttainedUnavailable(
          f'bound=\'attained\': no attained ε for {mech}: the attained search '
          f'does not apply (the others\' law of {s["clients_per_round"] - 1} '
          f'clients at {mech.num_levels} levels costs {ops:.2g} multiply-adds '
          f'> attained.MAX_OPERATIONS={attained_lib.MAX_OPERATIONS:.2g}), so the '
          'optimistic end is unknown here.')
    self.seen[repr(mech)] = (ATTAINED_NOTE, tuple(self.orders))
    self.accountants[repr(mech)] = (acc, order)
    self._cap(order)
    return eps


def _float_interval(spec):
  """Finite (lo, hi) inside a real tunable's range; open ends kept off by a margin.

  A scale parameter ((0, inf) or [0, inf)) is searched over default·[1e-6, 1e6].
  """
  default = abs(spec.default)
  if spec.low == 0 and spec.high is None:
    return default / _UNBOUNDED_SPAN, default * _UNBOUNDED_SPAN
  lo = spec.low if spec.low is not None else -default * _UNBOUNDED_SPAN
  hi = spec.high if spec.high is not None else default * _UNBOUNDED_SPAN
  if spec.low_open:
    lo = spec.search_low if spec.search_low is not None else lo + _OPEN_END_MARGIN
  if spec.high_open:
    hi -= _OPEN_END_MARGIN
  return lo, hi


def _largest_int_within_bits(build, spec, bits: int) -> int:
  """Largest integer value of `spec` whose mechanism needs <= `bits` bits (monotone)."""
  lo, hi = int(spec.low), int(spec.high)
  if build(lo).bits_per_coordinate > bits:
    return lo - 1
  while lo < hi:
    mid = (lo + hi + 1) // 2
    if build(mid).bits_per_coordinate <= bits:
      lo = mid
    else:
      hi = mid - 1
  return lo


@dataclasses.dataclass
class _Axis:
  """A real tunable's search coordinate x: log v for a scale parameter (range
  ratio > 100), v otherwise; `value(x)` maps back, exact at both ends and
  clamped into the range between."""
  lo: float
  hi: float
  safe: float     # the most private end
  unsafe: float   # the least private end
  geometric: bool

  @classmethod
  def of(cls, spec):
    lo, hi = _float_interval(spec)
    safe, unsafe = (hi, lo) if spec.more_private == 'higher' else (lo, hi)
    return cls(lo, hi, safe, unsafe, lo > 0 and hi / lo > 100)

  def x(self, v: float) -> float:
    return math.log(v) if self.geometric else float(v)

  def value(self, x: float) -> float:
    for end in (self.safe, self.unsafe):
      if x == self.x(end):
        return end
    return min(max(math.exp(x) if self.geometric else float(x), self.lo), self.hi)


class _CloseEnough(Exception):
  """A value whose ε is within rtol below the target: the root search ends."""


class _NotMonotone(Exception):
  """The error does not rise along the privacy direction: pruning does not apply."""


class CannotCarrySignal(ValueError):
  """Every candidate meeting the target was refused for not carrying the
  signal (`calibration_report` names why, and the bits a modular sum needs).

  Args (attributes): bits_needed: for a modular sum, the fewest bits its
  modulus needs at the candidates searched (a lower bound); None otherwise.
  """

  def __init__(self, message, bits_needed=None):
    super().__init__(message)
    self.bits_needed = bits_needed


def _least_private_to_beat(build, spec, error_to_beat, error_of, samples=33,
                           iterations=60):
  """A value of a real `spec` at or just past (more private than) the most
  private one whose error (`error_of(mechanism)`) is below `error_to_beat`:
  every value that beats it is at most as private. None when no value in its
  range beats it; the most private end when all do. Bisection on the error
  (cheap: no accounting; the error is taken to rise along the privacy
  direction, checked on `samples` points), `iterations` halvings. A grid
  point whose ε misses the target there cannot beat it."""
  axis = _Axis.of(spec)
  error = lambda x: error_of(build(axis.value(x)))
  x_ok, x_bad = axis.x(axis.unsafe), axis.x(axis.safe)   # beats / does not beat
  # Checked on `samples` points (plain MSE broke it: a wrapping modular
  # sum's fell with more noise); a fall anywhere: no pruning.
  sampled = [error(x) for x in np.linspace(x_ok, x_bad, samples)]
  if any(b < a * (1 - 1e-9) for a, b in zip(sampled, sampled[1:])):
    raise _NotMonotone()
  if not sampled[0] < error_to_beat:
    return None
  if sampled[-1] < error_to_beat:
    return axis.safe
  step = (x_bad - x_ok) / (samples - 1)
  first_bad = next(i for i, e in enumerate(sampled) if not e < error_to_beat)
  x_ok, x_bad = x_ok + (first_bad - 1) * step, x_ok + first_bad * step
  for _ in range(iterations):
    mid = 0.5 * (x_ok + x_bad)
    if error(mid) < error_to_beat:
      x_ok = mid
    else:
      x_bad = mid
  return axis.value(x_bad)


def _bisect_integer(build, spec, target, eps_at, bits, higher_private):
  """`_search_last` for an integer parameter: plain bisection between the
  most private value and the least private one within `bits`."""
  lo, hi = int(spec.low), _largest_int_within_bits(build, spec, bits)
  if hi < lo:
    return None, math.nan, math.nan   # nothing fits the bits
  safe, unsafe = (hi, lo) if higher_private else (lo, hi)
  best = eps_at(safe)
  if best > target:
    return None, best, best
  e = eps_at(unsafe)
  if e <= target:
    return unsafe, e, best
  e = best
  while abs(safe - unsafe) > 1:
    mid = (safe + unsafe) // 2
    e_mid = eps_at(mid)
    if e_mid <= target:
      safe, e = mid, e_mid
    else:
      unsafe = mid
  return safe, e, best


def _bracket_from_floor(eps_x, floor, build_x, x_ok, x_unsafe, target, x_tol,
                        aim=None, looseness=None, least=None, ok_eps=None,
                        exact_x=None, axis=None):
  """(safe x, unsafe x) close around the target, found with the screening's
  cheap lower bound on ε (`_Epsilon.floor`: ~0.3 s against 3-14 s for the
  exact ε at 256 levels, n = 100); None where that bound does not apply.

  `x_ok` need not have been evaluated: its bound must not exceed the target,
  and it stays unverified unless an exact evaluation below finds a safe x.
  Every x whose bound exceeds the target is unsafe, so stepping out from
  `x_ok` on the bound alone certifies an unsafe end (the far end, the
  slowest law to bound, 7 s for RQM at q -> 1, only if the steps reach it).
  The first exact ε is evaluated where the bound, scaled by its looseness
  r = ε/bound (`looseness`, or the one at x_ok where `ok_eps`, x_ok's exact
  ε, is known; else 1), meets `aim` (default the target; `_search_last`
  aims inside its stopping window). Bounds taken while stepping narrow that
  search on the bound. The next exact points are aimed from exact points
  alone:
  * while the last two lie on one side of the target (x_ok and its `ok_eps`
    count as one), a secant on log(ε - floor) through them, floor just
    below `least` (the least exact ε known, if any; else on log ε): the
    looseness drifts (RQM 8 bits, Δ = 16c: 1.09 -> 1.20 over 20% of q);
  * once a safe and an unsafe one bracket it, regula falsi on ε against the
    value of `axis` (an `_Axis`; default x itself), which stays inside the
    bracket even where ε jumps (QMGeo: 10.3 -> 17.9 over 2% of p).
  Those interpolated points are evaluated by `exact_x` (default `eps_x`;
  `_search_last` passes the unscreened ε: a bound rarely exceeds the target
  where ε is aimed at it), and the bound is taken there only if a later
  step falls back to aiming by it. At most `_PROXY_STEPS` exact
  evaluations."""
  if floor is None or not math.isfinite(x_unsafe):
    return None
  aim = target if aim is None else aim
  bound_at = {}

  def bound(x):   # None where the screening does not apply there
    if x not in bound_at:
      bound_at[x] = floor(build_x(x))
    return bound_at[x]

  # `aim` sits mid-window: the window [target (1 - rtol), target] is
  # 2 log(aim / target) wide in log ε. The bound scaled by a looseness
  # measured elsewhere is no closer to ε than the looseness drifts (RQM 8
  # bits, n = 1,000, Δ = 64c: 1.46 -> 1.33 -> 1.26 along the steps), so the
  # search on it stops within _AIM_SLACK below the aim, if that is wider.
  window = min(2 * math.log(min(aim / target, 1 - 1e-4)),
               math.log1p(-_AIM_SLACK))

  def last_within(r, lo, hi):
    """An x in [lo, hi) where bound(x)·r(x) <= aim, within `window` below
    it or the last such x to x_tol / 4 (true at lo, false at hi); None
    where the bound does not apply. Illinois regula falsi on
    log(bound·r / aim): 3-6 bounds where bisection took 12-17 (each 1-3 s
    for RQM at n = 1,000)."""
    def g(x):
      b = bound(x)
      return None if b is None else math.log(max(b * r(x), 1e-300) / aim)
    g_lo, g_hi = g(lo), g(hi)
    if g_lo is None or g_hi is None:
      return None
    # Bounds already taken inside (lo, hi) narrow it first (the stepping's).
    for x in sorted((x for x in bound_at if bound_at[x] is not None and
                     0 < (x - lo) / (hi - lo) < 1),
                    key=lambda x: (x - lo) / (hi - lo)):
      g_x = g(x)
      if g_x <= 0:
        lo, g_lo = x, g_x
      else:
        hi, g_hi = x, g_x
        break
    w_lo, w_hi, side = g_lo, g_hi, 0   # the secant's (Illinois-halved) ends
    while abs(hi - lo) > x_tol / 4 and not window <= g_lo <= 0:
      x = (hi - w_hi * (hi - lo) / (w_hi - w_lo)
           if math.isfinite(w_hi) and w_hi != w_lo else 0.5 * (lo + hi))
      if not min(lo, hi) < x < max(lo, hi):
        x = 0.5 * (lo + hi)
      g_x = g(x)
      if g_x is None:
        return None
      if g_x <= 0:
        lo, g_lo, w_lo = x, g_x, g_x
        w_hi, side = (w_hi / 2 if side == -1 else w_hi), -1
      else:
        hi, g_hi, w_hi = x, g_x, g_x
        w_lo, side = (w_lo / 2 if side == 1 else w_lo), 1
    return lo

  b = bound(x_ok)
  if b is None or b > target:
    return None
  span, lo, step = x_unsafe - x_ok, x_ok, (x_unsafe - x_ok) / 16
  while True:   # out from x_ok, doubling, to the first x the bound rules out
    left = x_unsafe - lo
    x = x_unsafe if abs(left) <= abs(span) / 64 else lo + math.copysign(
        min(abs(step), abs(left) / 2), span)
    b = bound(x)
    if b is None:
      return None
    if b > target:
      x_bad = x
      break
    if x == x_unsafe:
      return None   # the bound certifies nothing
    lo, step = x, 2 * step
  exact_x = exact_x or eps_x
  to_value, to_x = ((axis.value, axis.x) if axis is not None else
                    (lambda y: y, lambda y: y))
  r = lambda _, c=looseness or 1.0: c
  exact = {}   # x -> ε at the exact evaluations, in order
  unbounded = None   # the last exact point, when its bound was not taken
  if ok_eps is not None and 0 < ok_eps < math.inf and 0 < bound(x_ok):
    exact[x_ok] = ok_eps   # known already
    r = lambda _, c=ok_eps / bound(x_ok): c
  for _ in range(_PROXY_STEPS):
    x = None
    ends = None
    if x_ok in exact and x_bad in exact:
      # Exact points bracket the target: regula falsi on ε against the
      # parameter's value, inside the bracket (RQM's ε is near linear in q
      # there: Δ = 128c, n = 1,000, 9.28 and 10.47 -> 9.91, where the bound
      # scaled by the interpolated looseness took 4 bounds to land at 9.53,
      # and the same on log q 9.875).
      (v1, e1), (v2, e2) = [(to_value(y), exact[y]) for y in (x_ok, x_bad)]
      x = to_x(v1 + (aim - e1) * (v2 - v1) / (e2 - e1))
      if not min(x_ok, x_bad) < x < max(x_ok, x_bad):
        x = None
    elif len(exact) >= 2 and len({e > target for e in
                                  list(exact.values())[-2:]}) == 1:
      ends = list(exact.items())[-2:]   # the last two, on one side
      # on log(ε - floor), floor just below the least ε known (`least`),
      # as Brent's method below: RQM's ε - floor is near linear in q, so
      # a secant on log ε overshot (10.47 aiming at 9.95; this: 9.98)
      low = min(e for _, e in ends)
      # (`least` may be the first of the two: the most private end's ε,
      # near the floor, with a point far from it: RQM 8 bits, n = 1,000, Δ
      # = 64c: 8.54 at q = 1e-4 and 9.04 -> 9.96 in the window)
      base = (0.0 if least is None or not least <= min(low, aim) else
              least - 1e-2 * (target - least))
      f = lambda e, base=base: math.log(e - base)
    if ends is not None:
      (x1, l1), (x2, l2) = ends
      if l1 != l2:
        x = (x2 + (f(aim) - f(l2)) * (x2 - x1) / (f(l2) - f(l1))
             if f(l2) != f(l1) else None)
        if x is not None and not min(x_ok, x_bad) < x < max(x_ok, x_bad):
          x = None
    if x is not None:   # interpolated: no bound taken there
      e, b = exact_x(x), None
    else:
      if unbounded is not None:   # the looseness at the last exact point
        b_last = bound(unbounded)
        if b_last is not None and 0 < b_last < math.inf:
          r = lambda _, c=exact[unbounded] / b_last: c
        unbounded = None
      if not bound(x_ok) * r(x_ok) <= aim < bound(x_bad) * r(x_bad):
        break
      x = last_within(r, x_ok, x_bad)
      if x is None or x in (x_ok, x_bad):
        break
      e, b = eps_x(x), bound(x)
    if e <= target:
      x_ok = x
    else:
      x_bad = x
    if (abs(x_bad - x_ok) <= x_tol or aim - (target - aim) <= e <= target or
        not (0 < e < math.inf and (b is None or 0 < b < math.inf))):
      break
    exact[x] = e
    if b is not None:
      r = lambda _, c=e / b: c
    unbounded = x if b is None else None
  return x_ok, x_bad


def _search_last(build, spec, target, epsilon_of, bits, rtol, hint=None,
                 hint_eps=None, known=None):
  """(least private value of `spec` with ε <= target, its ε, the smallest ε
  seen): bisection for an integer, Brent's method for a real (in log space
  for a scale parameter) to relative width `rtol`; the value is None when even
  the most private one misses.

  For a real, the bracket is found by stepping from `hint` (the answer at the
  previous grid point, or the pruning floor; `hint_eps` its ε if known) or the
  most private end toward the least private one, in growing steps (a secant
  on log ε): the least private end (q -> 1 for RQM: ~10^8 ε, and the slowest
  law to resolve, 173 s at 256 levels) is evaluated only if reached.
  `known` ({value: ε}, updated with this search's evaluations) holds earlier
  ones at the same grid point: where they bracket the target the search goes
  straight to Brent's method from them."""
  higher_private = spec.more_private == 'higher'
  eps_at = lambda v: epsilon_of(build(v))
  if spec.kind is int:
    return _bisect_integer(build, spec, target, eps_at, bits, higher_private)
  axis = _Axis.of(spec)
  lo, hi, safe, unsafe = axis.lo, axis.hi, axis.safe, axis.unsafe
  if bits is not None and build(safe).bits_per_coordinate > bits:
    return None, math.nan, math.nan
  to_x = axis.x
  x_safe, x_unsafe = to_x(safe), to_x(unsafe)
  seen = {}   # x -> ε, every evaluation (the answer is the best safe one)

  # Without the screen (`_Epsilon.unscreened`) where a candidate is
  # interpolated between exact points near the target (`_UNSCREENED_WITHIN`).
  unscreened = getattr(epsilon_of, 'unscreened', epsilon_of)

  def eps_x(x, screen=True):
    if x not in seen:
      seen[x] = (epsilon_of if screen else unscreened)(build(axis.value(x)))
    return seen[x]

  span = x_unsafe - x_safe
  x_tol = 0.5 * (rtol if axis.geometric else rtol * max(abs(safe), abs(unsafe)))
  if known:   # this grid point's earlier evaluations (`_Scan.refine`)
    seen.update({to_x(v): e for v, e in known.items() if lo < v < hi})
  toward = lambda x: math.copysign(1.0, span) * x   # grows toward unsafe
  ok = [x for x, e in seen.items() if e <= target]
  beyond = [x for x, e in seen.items() if e > target and ok and
            toward(x) > max(map(toward, ok))]
  if beyond:   # a bracket already: straight to the root search
    x_ok, x_bad = max(ok, key=toward), min(beyond, key=toward)
  else:
    # Bracket: a safe x and an unsafe x, stepping toward the unsafe end (secant
    # on log ε, doubling at least; at most half the way left, so the unsafe end
    # is evaluated only once the search is within 1/64 of the span of it).
    span = x_unsafe - x_safe
    start = x_safe
    if hint is not None and hint_eps is not None and lo < hint < hi:
      seen[to_x(hint)] = hint_eps
    floor = getattr(epsilon_of, 'floor', None)
    if hint is not None and lo < hint < hi and eps_x(to_x(hint)) <= target:
      start = to_x(hint)
    else:
      # The most private end's exact ε (its law the slowest but one) is
      # needed only if no safe value turns up: a cheap bound well within the
      # target defers it. A bound within SAFE_END_FIRST of the target does
      # not: the exact ε there may miss it (RQM 8 bits, n = 1,000, Δ = 32c:
      # bound 9.40, ε 17.1 at the target 10, after 9 bounds and an exact ε
      # spent bracketing a root that did not exist), and where it meets it,
      # it is the looseness the next steps aim with.
      low = None if floor is None else floor(build(safe))
      if (low is None or low > target / SAFE_END_FIRST) and eps_x(
          x_safe) > target:
        return None, seen[x_safe], seen[x_safe]
    x_ok, x_prev, x_bad, step = start, None, None, span / 16
    # The cheap bound steers the first exact evaluations to the window the
    # root search stops in, [target (1 - rtol), target] (measured, RQM 8 bits,
    # n = 100: 8 exact evaluations at the first grid point -> 6; after a hint
    # 6 -> 3).
    near = _bracket_from_floor(
        eps_x, floor, lambda x: build(axis.value(x)), start, x_unsafe, target,
        x_tol, aim=target * (1 - rtol / 2),
        looseness=getattr(epsilon_of, 'looseness', None),
        least=min(seen.values(), default=None), ok_eps=seen.get(start),
        exact_x=lambda x: eps_x(x, False), axis=axis)
    if near is not None:
      x_ok, x_bad = near
    if x_ok not in seen and eps_x(x_ok) > target:   # the deferred check
      return None, seen[x_ok], min(seen.values())
    while x_bad is None:
      e_ok = seen[x_ok]
      if x_prev is not None and 0 < seen[x_prev] < e_ok < math.inf:
        slope = math.log(e_ok / seen[x_prev]) / (x_ok - x_prev)
        step = math.copysign(min(max(abs(1.5 * math.log(target / e_ok) / slope),
                                     abs(2 * step)), abs(4 * step)), span)
      else:
        step *= 2
      left = x_unsafe - x_ok
      x = x_unsafe if abs(left) <= abs(span) / 64 else x_ok + math.copysign(
          min(abs(step), abs(left) / 2), span)
      if eps_x(x) <= target:
        if x == x_unsafe:
          return unsafe, seen[x], min(seen.values())
        x_prev, x_ok = x_ok, x
      else:
        x_bad = x
  # Brent's method on log((ε - floor)/(target - floor)), floor just below the
  # least ε seen: ε is smooth and monotone in the value, flat near the private
  # end and then steep (RQM: ε - floor ~ q^1.3), which this makes nearly
  # linear (measured: RQM 8 bits, Δ = 32c, Brent 6 evaluations -> 4). Any
  # increasing transform keeps the bracket and the root; the bracket always
  # straddles the target, so the least private value seen with ε <= target
  # is within `rtol` of the boundary. A value whose ε is within rtol below
  # the target ends it too: its ε is as close to the target as the width asks
  # (the root search's last steps at rtol = 2e-3 change ε by < 0.1%).
  # Where every ε seen is within _NO_PLATEAU of the target (a search
  # narrowed from an answer at the scan's width), there is no plateau to
  # flatten: a floor just below it made the transform a log near 0, and
  # Brent bisected (RQM n = 1,000, Δ = 512c, 9.946 -> 10.0: 6 exact
  # evaluations); plain log ε there.
  least = min(seen.values())
  floor = (least - 1e-2 * (target - least)
           if least < target * (1 - _NO_PLATEAU) else 0.0)

  close = lambda e: target * (1 - rtol) <= e <= target
  # The root sought is the window's middle, not its edge: a root at the
  # target lands on either side of it (RQM refined at n = 1,000: 10.0043,
  # then 10.0001, both over, before 9.9968).
  middle = target * (1 - rtol / 2)

  screen = not seen.get(x_bad, math.inf) < _UNSCREENED_WITHIN * target

  def excess(x):
    e = eps_x(x, screen)
    if close(e):
      raise _CloseEnough()
    if not e < math.inf:
      return 50.0
    return math.log(max(e - floor, 1e-300) / (middle - floor))

  if not close(seen[x_ok]):
    try:
      optimize.brentq(excess, x_ok, x_bad, xtol=x_tol, maxiter=_MAX_ITERATIONS)
    except (RuntimeError, _CloseEnough):   # the best safe value seen holds
      pass
  sign = -1 if higher_private else 1
  x_best = max((x for x, e in seen.items() if e <= target),
               key=lambda x: sign * axis.value(x))
  if known is not None:
    known.update({axis.value(x): e for x, e in seen.items()})
  return axis.value(x_best), seen[x_best], min(seen.values())


@dataclasses.dataclass(frozen=True)
class CalibratedSetting:
  """Every assumption a calibration's ε rests on: what a factory must match.

  The accountant's ε is a function of the mechanism (name, tunables and the
  coordinate clip c∞), the ℓ2 clip S, the coordinates d each client sends, the
  schedule (rounds, n of N clients a round, δ) and how it was computed
  (Rényi orders, PLD, the others' inputs). A factory built with
  `calibrated_for=setting` (`aggregators.mechanism_factory`) runs exactly
  this mechanism and refuses a setting that would change its ε
  (docs/privacy.md, "From calibration to run").

  Args:
    mechanism: the registry name.
    tunables: the mechanism's tunables, as sorted (name, value) pairs.
    coordinate_clip: c∞, the per-coordinate range the mechanism was built for.
    l2_clip: S, the ℓ2 clip of a client's update (None: the coordinate route,
      each coordinate moving end to end).
    dim: d, the coordinates each client sends (after any padding).
    rounds, clients_per_round, total_clients, delta: the schedule and δ.
    target_epsilon: the ε asked for.
    epsilon: the ε calibration reported (<= target_epsilon when bound is
      'proved').
    orders: the Rényi orders `epsilon` was computed from.
    use_pld: whether the PLD route was used too.
    others: the other clients' inputs covered ('any' or 'extremes').
    bound: 'proved' (a guarantee) or 'attained' (not a guarantee).
  """
  mechanism: str
  tunables: Tuple[Tuple[str, object], ...]
  coordinate_clip: float
  l2_clip: Optional[float]
  dim: int
  rounds: int
  clients_per_round: int
  total_clients: int
  delta: float
  target_epsilon: float
  epsilon: float
  orders: Tuple[int, ...]
  use_pld: bool
  others: str
  bound: str

  def params(self) -> Dict[str, object]:
    """The mechanism's tunables as a dict."""
    return dict(self.tunables)

  def describe(self) -> str:
    """One line: the mechanism, c∞, S, d and the schedule it was calibrated for."""
    l2 = 'none (coordinate route)' if self.l2_clip is None else f'{self.l2_clip:g}'
    return (f'{self.mechanism} {self.params()} at c∞ = {self.coordinate_clip:.6g}, '
            f'ℓ2 clip {l2}, d = {self.dim}, {self.rounds} rounds of '
            f'{self.clients_per_round} of {self.total_clients} clients, '
            f'δ = {self.delta:.3g}: ε = {self.epsilon:.6g} ({self.bound}) for a '
            f'target of {self.target_epsilon:g}')


#: The key of `Calibration.params` that carries its `CalibratedSetting`.
CALIBRATED_FOR = 'calibrated_for'


@dataclasses.dataclass
class Calibration:
  """A calibrated mechanism and what it costs in accuracy next to the Gaussian.

  Args:
    mechanism: the registry mechanism meeting the target and carrying the
      signal with the smallest debiased error among the candidates searched.
    params: the keyword arguments of the mechanism's factory that rebuild it
      and nothing else: its tunables plus `calibrated_for` (the
      `CalibratedSetting`), so `aggregators.rqm_factory(clip, **cal.params)`
      runs this mechanism or refuses (`aggregators.mechanism_factory`).
      `tunables` holds the tunables alone (`for_coordinate_bound(c,
      **cal.tunables)` rebuilds the mechanism).
    epsilon: its whole-run ε (RDP route) at `delta`; <= target_epsilon. With
      bound='attained', its attained ε: NOT a guarantee (`bound`).
    target_epsilon, delta: the target.
    mse: plain worst-case mean squared error per coordinate of the decoded
      mean of clients_per_round clients sharing any input in the range
      (`Mechanism.decoded_mean_mse`; the variance for unbiased mechanisms).
    gaussian: the continuous Gaussian calibrated to the same target and
      schedule (None when not asked for); gaussian_mse its MSE, which is
      also its debiased error (slope 1).
    ratio_to_gaussian: debiased_error / gaussian_mse: the cost of quantizing,
      as the error of each one's best debiased use.
    candidates: grid points searched.
    refused: grid points not evaluated because one evaluation's estimated cost
      exceeds `vector.MAX_OPERATIONS` (the optimum may lie among them).
    pruned: grid points skipped after one ε evaluation: at the least private
      value whose MSE beats the incumbent's, ε already missed the target.
    assumptions: the chosen mechanism's guarantee text (`Guarantee.assumptions`:
      what is assumed, and on the ℓ2 route how the divergences were bounded,
      e.g. through a sub-sum or one client's local bound).
  """
  mechanism: object
  params: Dict[str, object]
  epsilon: float
  target_epsilon: float
  delta: float
  mse: float
  gaussian: Optional[object] = None
  gaussian_mse: Optional[float] = None
  ratio_to_gaussian: Optional[float] = None
  candidates: int = 0
  refused: Sequence[Dict[str, object]] = ()
  pruned: int = 0
  assumptions: str = ''
  #: The lower end of ε ∈ [attained, proved]: the same route's ε from the
  #: divergences named inputs attain (`accounting.attained`): no sound bound
  #: over the others' inputs gets below it on this route, so epsilon -
  #: epsilon_attained bounds what tighter bounds could gain. Not a lower bound
  #: on the true ε (WBK19 and the RDP conversion are upper bounds both
  #: share). None with the PLD route or where no search applies.
  epsilon_attained: Optional[float] = None
  #: The inputs attaining it (at the order of its ε).
  attained_inputs: str = ''
  #: The Rényi orders `epsilon` was computed from: an accountant given these
  #: (`RoundAccountant(..., orders=...)`) reproduces it. With all orders the
  #: search may cost more, go over `vector.MAX_OPERATIONS` and fall back to a
  #: looser sub-sum (an RQM run calibrated to 10 was reported at 13.8).
  orders: Sequence[int] = FAST_ORDERS
  #: What calibration minimises (`Mechanism.signal_utility(n, a).error`): the
  #: worst Var/slope² per coordinate of the decoded mean of n clients sharing
  #: an input |x| <= signal_bound, the error of its best debiased use.
  debiased_error: float = math.nan
  #: The least slope d E[decoded mean]/dx over that range (1: unbiased).
  slope: float = math.nan
  #: a: ℓ2 clip/√d on the ℓ2 route, else the coordinate clip.
  signal_bound: float = math.nan
  #: mse / gaussian_mse (the plain-MSE figure the debiased ratio replaces).
  mse_ratio_to_gaussian: Optional[float] = None
  #: Grid points that met the target but were refused for not carrying the
  #: signal (each with `why`).
  unusable: Sequence[Dict[str, object]] = ()
  #: Which ε met the target (module docstring): 'proved' (a guarantee) or
  #: 'attained' (the optimistic end: NOT a guarantee; `epsilon` and
  #: `epsilon_attained` are then both the attained ε, and `assumptions` is
  #: `ATTAINED_NOTE`).
  bound: str = 'proved'
  #: Every assumption `epsilon` rests on (`CalibratedSetting`); None only for
  #: a Calibration built by hand.
  setting: Optional[CalibratedSetting] = None

  @property
  def tunables(self) -> Dict[str, object]:
    """The mechanism's tunables (`params` without `calibrated_for`)."""
    return {k: v for k, v in self.params.items() if k != CALIBRATED_FOR}

  def guarantee(self, rounds: Optional[int] = None,
                attained: bool = True) -> composition.Guarantee:
    """The run's guarantee, computed as calibration computed `epsilon`.

    The same accountant (`training_guarantee`) at the same Rényi orders,
    routes (PLD only if calibration used it), ℓ2 clip, d, schedule and
    others' inputs: at the calibrated rounds its `epsilon` equals this
    calibration's (bound='proved').

    Args:
      rounds: rounds run so far (default: the calibrated number).
      attained: also the lower end ε_attained.

    Returns:
      The `composition.Guarantee`.

    Raises:
      ValueError: a Calibration without a `setting`, or rounds < 1.
    """
    s = self.setting
    if s is None:
      raise ValueError('This Calibration has no `setting` (not made by '
                       '`calibration_report`): call training_guarantee.')
    return composition.training_guarantee(
        self.mechanism, s.rounds if rounds is None else rounds,
        s.clients_per_round, s.total_clients, s.delta, s.dim,
        orders=s.orders, use_pld=s.use_pld, l2_clip=s.l2_clip,
        others=s.others, attained=attained)


def _closest(reached, epsilon_of):
  """(ε, grid point, True) with the smallest ε at a grid point's most private
  value, or None when nothing was reached. Values known only by a lower bound
  are evaluated in increasing order of their bound until no bound is below
  the smallest exact ε, so the error names an ε computed, not bounded; if
  none can be (all over the cost limit) the smallest bound is returned with
  False."""
  if not reached:
    return None
  exact = [(e, g) for e, g, bounded in reached if bounded is None]
  for e, g, bounded in sorted((r for r in reached if r[2] is not None),
                              key=lambda r: r[0]):
    if exact and min(exact, key=lambda r: r[0])[0] <= e:
      break
    try:
      exact.append((epsilon_of.exact(bounded), g))
    except vector.CostError:
      continue
  if not exact:
    return min(reached, key=lambda r: r[0])[:2] + (False,)
  return min(exact, key=lambda r: r[0]) + (True,)


def _levels_from_bits(cls, params, tune, bits):
  """num_levels = 2^bits (or `bits` itself) unless given or searched."""
  if bits is None:
    return params
  params = dict(params)
  for t in cls.TUNABLES:
    if t.name in params or t.name in tune:
      continue
    if t.name == 'num_levels':
      params['num_levels'] = int(min(2**bits, t.high))
    elif t.name == 'bits' and t.kind is int:
      params['bits'] = int(min(bits, t.high))
  return params


def mechanism_for_bits(mechanism: str, clip: float, bits: Optional[int],
                       **params):
  """The registry mechanism at its default parameters (num_levels from `bits`),
  the starting point calibration searches from."""
  cls = mechanisms.get(mechanism)
  return cls.for_coordinate_bound(
      clip, **cls.complete_params(_levels_from_bits(cls, params, (), bits)))


def calibrate(mechanism: str, epsilon: float, delta: float, rounds: int,
              clients_per_round: int, total_clients: int, dim: int = 1,
              clip: Optional[float] = None,
              tune: Union[None, str, Sequence[str]] = None,
              bits: Optional[int] = None, use_pld: bool = False,
              rtol: float = _RTOL, l2_clip: Optional[float] = None,
              coordinate_clip: Optional[float] = None, others: str = 'any',
              bound: str = 'proved',
              progress: Optional[Callable[[str], None]] = None, **params):
  """Returns the mechanism `mechanism` calibrated to (ε, δ) for a training run.

  Among the candidates meeting the target that carry the signal, the one
  with the smallest debiased error (module docstring) is returned.
  `calibration_report` with the same arguments gives that error, the slope,
  the plain MSE and the comparison with the continuous Gaussian too.

  Args:
    mechanism: a name in `tff_quant.mechanisms.registry(include_central=True)`.
    epsilon: target ε of the whole run, > 0.
    delta: target δ in (0, 1).
    rounds: training rounds.
    clients_per_round: clients sampled (without replacement) per round.
    total_clients: population size.
    dim: coordinates each client sends (the accountant's d).
    clip: the coordinate bound c∞ the mechanism is built for (alias of
      `coordinate_clip`; default 1, or l2_clip/√dim when `l2_clip` is given).
    tune: the parameter(s) to search; default the class's `CALIBRATED` (every
      free parameter that trades privacy for accuracy). The last is bisected
      along its `more_private` direction (ε monotone in it); earlier ones are
      scanned over their declared `grid` (or the integers within `bits`).
    bits: bits per coordinate: a mechanism with a level count gets 2^bits
      levels (unless `num_levels` is given), and scanned integers stay within.
    use_pld: also use the PLD route (slower, tighter).
    rtol: relative width at which the bisection stops (in the parameter; a
      value whose ε is within rtol below the target also ends it). The grid
      is scanned at SCAN_RTOL where that is wider, and the winner is then
      searched again to rtol.
    l2_clip: the ℓ2 bound of each update; with c∞ > l2_clip/√dim the ℓ2 route
      accounts the run (`accounting.vector_rdp`).
    coordinate_clip: c∞ (see `clip`).
    others: the other clients' inputs the guarantee covers: 'any' (proved) or
      'extremes' (±c, a search-backed assumption); `RoundAccountant`.
    bound: the ε that must meet the target: 'proved' (default; the
      accountant's, a guarantee) or 'attained' (the same route's ε from
      divergences named inputs attain: the optimistic end of what a perfect
      bound could allow, NOT a privacy guarantee; module docstring). RDP
      route only.
    progress: None, or a callable given a line per grid point once the
      calibration has run PROGRESS_AFTER seconds.
    **params: the other parameters, fixed (defaults for the omitted ones).

  Returns:
    The calibrated `tff_quant.mechanisms.Mechanism` (`calibration_report`
    returns it with its ε, error and `CalibratedSetting`).

  Raises:
    ValueError: unknown mechanism or parameter, a parameter without a privacy
      direction, bad numbers, a `bound` not in `BOUNDS` (or 'attained' with
      use_pld), or a target no candidate reaches (the message
      names the smallest ε reached and where).
    CannotCarrySignal (a ValueError): candidates reach the target but none
      carries the signal (a modular sum wider than its modulus: the message
      names the bits it needs; or a decoded mean with slope < 1/2).
    AttainedUnavailable (a ValueError): bound='attained' where a candidate's
      attained ε cannot be computed.
  """
  return calibration_report(
      mechanism, epsilon, delta, rounds, clients_per_round, total_clients,
      dim, clip, tune, bits, use_pld, rtol, l2_clip, coordinate_clip,
      compare_gaussian=False, others=others, bound=bound, progress=progress,
      **params).mechanism


def calibration_report(mechanism: str, epsilon: float, delta: float, rounds: int,
                       clients_per_round: int, total_clients: int, dim: int = 1,
                       clip: Optional[float] = None,
                       tune: Union[None, str, Sequence[str]] = None,
                       bits: Optional[int] = None, use_pld: bool = False,
                       rtol: float = _RTOL,
                       l2_clip: Optional[float] = None,
                       coordinate_clip: Optional[float] = None,
                       compare_gaussian: bool = True, others: str = 'any',
                       bound: str = 'proved',
                       progress: Optional[Callable[[str], None]] = None,
                       **params) -> Calibration:
  """`calibrate`, returning a `Calibration`: the mechanism, its ε, debiased
  error, slope and plain MSE, and (with `compare_gaussian`) the continuous
  Gaussian calibrated to the same target and both ratios. Arguments as for
  `calibrate`; `progress` (e.g. print), once a calibration has run
  PROGRESS_AFTER seconds, gets a line per grid point: how far, and an ETA.

  A modular sum refused at `bits` (`CannotCarrySignal`) is calibrated again
  at more bits, from the lower bound its refusal proves up to TFF's 22, and
  the error names the fewest bits that carry the signal and what they give.
  """
  args = dict(mechanism=mechanism, epsilon=epsilon, delta=delta, rounds=rounds,
              clients_per_round=clients_per_round, total_clients=total_clients,
              dim=dim, clip=clip, tune=tune, bits=bits, use_pld=use_pld,
              rtol=rtol, l2_clip=l2_clip, coordinate_clip=coordinate_clip,
              compare_gaussian=compare_gaussian, others=others, bound=bound,
              progress=progress, **params)
  try:
    return _calibration_report(**args)
  except CannotCarrySignal as err:
    if err.bits_needed is None or bits is None or 'num_levels' in params:
      raise
    raise _fewest_bits(err, args) from None


PROGRESS_AFTER = 10.0   # seconds a calibration runs before it reports progress


class _Progress:
  """Calls `log` with a line per grid point once PROGRESS_AFTER seconds have
  passed: the point, how many of how many, and an ETA at the average pace per
  grid point so far. It is an estimate, not a bound: the scan may stop early,
  and later grid points may cost more (RQM at n = 1,000: the first seven are
  screened in 1-2 s each, the last ones take 20 s per exact evaluation)."""

  def __init__(self, log, mechanism, total):
    self.log, self.mechanism, self.total = log, mechanism, total
    self.start = time.time()

  def __call__(self, index, grid_point):
    elapsed = time.time() - self.start
    if self.log is None or elapsed < PROGRESS_AFTER or not index:
      return
    eta = elapsed / index * (self.total - index)
    self.log(f'calibrating {self.mechanism}: grid point {index + 1} of '
             f'{self.total} {grid_point or ""} ({elapsed:.0f} s so far, '
             f'~{eta:.0f} s left at the pace so far)')


_MAX_MODULAR_BITS = 22   # TFF's DistributedDpSumFactory allows bits <= 22
#: `_fewest_bits` confirms a bit width by calibrating there only while the
#: exact law of the clients' noise sum has at most this many points (n·2^bits;
#: n = 100 at 11 bits: 2e5, ~10 s for the whole confirmation; n = 1,000 at 11
#: bits ran over 20 minutes): past it the refusal names the first width
#: it did not calibrate, every narrower one having been refused.
_CONFIRM_SUPPORT = 2**20


def _fewest_bits(err, args):
  """`err` (a modular sum refused at args['bits']) with the fewest bits that
  carry the signal, found by calibrating at each from its lower bound on."""
  lower, b = err.bits_needed, err.bits_needed
  why = ''
  while b <= _MAX_MODULAR_BITS:
    support = args['clients_per_round'] * 2**b
    if support > _CONFIRM_SUPPORT:
      why = (f' (not confirmed by calibrating at {b} bits: the exact law of '
             f'{args["clients_per_round"]} clients\' noise sum there has '
             f'{support:.3g} points, over {_CONFIRM_SUPPORT:.3g}, minutes per '
             'evaluation)')
      lower = b   # every width below was calibrated and refused
      break
    try:
      rep = _calibration_report(**dict(args, bits=b, compare_gaussian=False))
    except CannotCarrySignal as again:
      b = max(b + 1, again.bits_needed or b + 1)
      continue
    except ValueError as other:   # out of reach there (cost, exact law)
      why = f' (at {b} bits: {str(other)[:300]})'
      break
    found = (f'it needs {b} bits: calibrated at bits={b}, {rep.mechanism} '
             f'meets ε <= {rep.epsilon:.4g} with debiased error '
             f'{rep.debiased_error:.4g} per coordinate (slope {rep.slope:.4g})')
    return CannotCarrySignal(str(err).replace(_needs(lower), found, 1),
                             bits_needed=b)
  else:
    why = f' (none up to {_MAX_MODULAR_BITS}, TFF\'s limit, carries it)'
  return CannotCarrySignal(
      str(err).replace(_needs(err.bits_needed), _needs(lower) + why, 1),
      bits_needed=lower)


def _calibration_report(mechanism, epsilon, delta, rounds, clients_per_round,
                        total_clients, dim=1, clip=None, tune=None, bits=None,
                        use_pld=False, rtol=_RTOL, l2_clip=None,
                        coordinate_clip=None, compare_gaussian=True,
                        others='any', bound='proved', progress=None,
                        **params) -> Calibration:
  """`calibration_report` without the search for the bits a refused modular
  sum needs."""
  validation.check_positive('epsilon', epsilon)
  validation.check_optional(validation.check_positive, 'l2_clip', l2_clip)
  validation.check_number('rtol', rtol, 0, 0.5, low_open=True)
  vector.check_others(others)
  validation.check_one_of('bound', bound, BOUNDS)
  if bound == 'attained' and use_pld:
    raise ValueError("`bound`='attained' is the RDP route's attained ε; it "
                     'does not combine with use_pld=True.')
  if clip is not None and coordinate_clip is not None and clip != coordinate_clip:
    raise ValueError(f'`clip` ({clip}) and `coordinate_clip` ({coordinate_clip}) '
                     'name the same bound; pass one.')
  clip = coordinate_clip if coordinate_clip is not None else clip
  if clip is None:
    clip = 1.0 if l2_clip is None else l2_clip / math.sqrt(dim)
  validation.check_positive('coordinate_clip', clip)
  validation.check_optional(validation.check_integer, 'bits', bits, 1, 64)
  schedule = dict(rounds=rounds, clients_per_round=clients_per_round,
                  total_clients=total_clients, delta=delta, dim=dim, use_pld=use_pld,
                  l2_clip=l2_clip, others=others)
  scan = _Scan(mechanism, epsilon, clip, tune, bits, rtol, params,
               _Epsilon(schedule, epsilon, bound),
               # The signal the debiased error is judged on (module docstring).
               clip if l2_clip is None else min(clip, l2_clip / math.sqrt(dim)),
               clients_per_round)
  scan.run(progress)
  if scan.best is None:
    raise scan.no_answer(bound, use_pld)
  mech, params_found, eps_found, util = scan.best[1:]
  assumptions, orders = scan.epsilon_of.seen.get(repr(mech), ('', FAST_ORDERS))
  setting = CalibratedSetting(
      mechanism=mechanism, tunables=tuple(sorted(
          mechanisms.get(mechanism).complete_params(params_found).items())),
      coordinate_clip=float(mech.input_bound),
      l2_clip=None if l2_clip is None else float(l2_clip), dim=int(dim),
      rounds=int(rounds), clients_per_round=int(clients_per_round),
      total_clients=int(total_clients), delta=float(delta),
      target_epsilon=float(epsilon), epsilon=float(eps_found),
      orders=tuple(orders), use_pld=bool(use_pld), others=others, bound=bound)
  report = Calibration(mech, dict(params_found, **{CALIBRATED_FOR: setting}),
                       eps_found, epsilon, delta,
                       mech.decoded_mean_mse(clients_per_round),
                       candidates=scan.evaluated,
                       refused=[g for g, _ in scan.refused], pruned=scan.pruned,
                       assumptions=assumptions, orders=orders,
                       debiased_error=util.error, slope=util.slope,
                       signal_bound=scan.signal,
                       unusable=[dict(u[1], why=u[0]) for u in scan.unusable],
                       bound=bound, setting=setting)
  if bound == 'attained':   # the ε that met the target is the attained one
    low, at = scan.epsilon_of.accountants[repr(mech)]
    report.epsilon_attained = eps_found
    report.attained_inputs = _attained_inputs(low, at)
  elif not use_pld:
    low = composition.RoundAccountant(
        mech, clients_per_round, total_clients, delta, dim, orders, l2_clip,
        others)
    report.epsilon_attained, at = low.epsilon_attained(rounds)
    report.attained_inputs = _attained_inputs(low, at)
  if compare_gaussian:
    gauss = calibration_report('gaussian', epsilon, delta, rounds,
                               clients_per_round, total_clients, dim, clip,
                               use_pld=use_pld, rtol=rtol, l2_clip=l2_clip,
                               compare_gaussian=False)
    report.gaussian = gauss.mechanism
    report.gaussian_mse = gauss.mse
    report.ratio_to_gaussian = util.error / gauss.debiased_error
    report.mse_ratio_to_gaussian = report.mse / gauss.mse
  return report


class _Scan:
  """The search of one calibration: the scanned (outer) parameters' grid, the
  last parameter bisected at each point (`_search_last`), the incumbent with
  the smallest debiased error, and what was refused on the way."""

  def __init__(self, mechanism, epsilon, clip, tune, bits, rtol, params,
               epsilon_of, signal, clients):
    self.mechanism, self.epsilon, self.clip = mechanism, epsilon, clip
    self.bits, self.rtol, self.epsilon_of = bits, rtol, epsilon_of
    self.signal, self.clients = signal, clients
    self.cls = cls = mechanisms.get(mechanism)
    if tune is None:
      tune = cls.CALIBRATED
    tune = (tune,) if isinstance(tune, str) else tuple(tune)
    if not tune:
      raise ValueError(f'{mechanism} declares no calibrated parameter; pass '
                       '`tune`.')
    self.tune = tune
    self.specs = specs = [cls.tunable(name) for name in tune]
    self.last = last = specs[-1]
    if last.more_private is None:
      raise ValueError(f'`tune`: {last.name} of {mechanism} has no privacy '
                       'direction; choose one of '
                       f'{[t.name for t in cls.TUNABLES if t.more_private]}.')
    for spec in specs:
      if spec.kind is int and not spec.grid and bits is None:
        raise ValueError(f'`bits` is required to search the integer parameter '
                         f'{spec.name} of {mechanism}.')
      if spec is not last and spec.kind is not int and not spec.grid:
        raise ValueError(f'`tune`: {spec.name} of {mechanism} is real-valued '
                         'and declares no grid to scan; only the last parameter '
                         'is bisected.')
    params = {k: v for k, v in params.items() if k not in tune}
    self.fixed = cls.complete_params(_levels_from_bits(cls, params, tune, bits))
    self.best = None   # (error, mechanism, params, ε, utility)
    self.evaluated = self.rising = self.pruned = 0   # pruned: unable to win
    self.counting = True   # whether a rise counts toward the stop (`_rose`)
    self.fits = False
    self.unusable = []   # (why, grid point, mechanism, bits needed, utility)
    # (ε at the most private value, grid point, the mechanism when that ε is
    # only a lower bound): where a target no candidate meets comes closest
    self.reached = []
    self.refused = []   # (grid point, why): evaluations over MAX_OPERATIONS
    self.hint = None    # the last grid point's answer: where the next starts
    self.known = {}     # grid point -> {value: ε} of its exact evaluations
    self.stopped_after = None   # the scanned parameter `_missed` stopped

  def error_of(self, mech):
    return mech.signal_utility(self.clients, self.signal).error

  def candidates(self, prefix, outer):
    """Every point of the scanned (outer) parameters that builds and fits
    `bits`."""
    if not outer:
      yield dict(prefix)
      return
    spec = outer[0]
    values = (list(spec.grid) if spec.grid
              else range(int(spec.low), int(spec.high) + 1))
    for value in values:
      trial = dict(prefix, **{spec.name: value})
      try:
        probe = self.cls.for_coordinate_bound(self.clip,
                                              **dict(self.fixed, **trial))
      except ValueError:   # e.g. more rounding steps than the modulus holds
        continue
      if self.bits is not None and probe.bits_per_coordinate > self.bits:
        if spec.grid:
          continue
        break
      yield from self.candidates(trial, outer[1:])

  def run(self, progress):
    points = list(self.candidates({}, self.specs[:-1]))
    report_progress = _Progress(progress, self.mechanism, len(points))
    done = 0
    if self._probes_first(points):   # the most private end first
      report_progress(done, points[-1])
      if self.visit(points[-1]) == 'stop':
        points = []
      self.counting = False   # `_rose`: until the scan improves on it
      points, done = points[:-1], 1
      skipped = self._out_of_reach(points)
      points, done = points[skipped:], done + skipped
    for index, grid_point in enumerate(points, done):
      report_progress(index, grid_point)
      if self.visit(grid_point) == 'stop':
        break
    self.refine()
    self.settle()   # (only proved evaluations skip the mixes)

  @property
  def scan_rtol(self):
    """The root search's width while scanning: SCAN_RTOL, or `rtol` if wider."""
    return max(self.rtol, SCAN_RTOL)

  def _key(self, params):
    """A grid point's key in `known`: its parameters but the last."""
    return repr(sorted((k, v) for k, v in params.items()
                       if k != self.last.name))

  def settle(self):
    """The answer's ε from the whole accountant (`_Epsilon.full`); where the
    ±c mixes its search skipped lower it below the window, its grid point is
    searched again with them (`_Epsilon.mixes_matter`)."""
    if self.best is None:
      return
    error, mech, params, eps, util = self.best
    whole = self.epsilon_of.full(mech)
    if whole is None:
      return
    self.best = (error, mech, params, min(whole, eps), util)
    if whole >= self.epsilon * (1 - self.rtol) or self.last.kind is int:
      return
    self.epsilon_of.mixes_matter = True
    self.known.pop(self._key(params), None)   # the mixture alone's values
    self.refine(again=True)

  def refine(self, again=False):
    """The winner's last parameter searched again to `rtol`, from its answer
    at the scan's width (`scan_rtol`) and its grid point's evaluations: one
    or two exact evaluations more for the winner against two or three fewer
    at every grid point searched. `again`: also where the scan's width is
    `rtol` (`settle`)."""
    if (self.best is None or self.last.kind is int or
        (self.scan_rtol <= self.rtol and not again) or
        self.best[3] >= self.epsilon * (1 - self.rtol)):
      return
    _, mech, params, eps, _ = self.best
    last = self.last
    base = {k: v for k, v in params.items() if k != last.name}
    build = lambda v: self.cls.for_coordinate_bound(
        self.clip, **dict(base, **{last.name: v}))
    value, value_eps = self._narrow(build, base, params[last.name], eps)
    if value == params[last.name]:
      return
    mech = build(value)
    util = mech.signal_utility(self.clients, self.signal)
    if _unusable(mech, util, self.clients, self.signal) is None:
      self.best = (util.error, mech, dict(params, **{last.name: value}),
                   value_eps, util)

  def _narrow(self, build, base, value, value_eps):
    """(value, ε) of the last parameter at a grid point searched again to
    `rtol` from its answer at the scan's width; the answer as it was where
    that search fails or finds nothing."""
    try:
      found, found_eps, _ = _search_last(
          build, self.last, self.epsilon, self.epsilon_of, self.bits,
          self.rtol, value, value_eps, self.known.get(self._key(base)))
    except vector.CostError:
      return value, value_eps
    return (value, value_eps) if found is None else (found, found_eps)

  def _probes_first(self, points) -> bool:
    """True for one scanned grid whose parameter is more private when
    higher (RQM's Δ): its top, the most private end, is calibrated first.
    There the laws are the smoothest and calibrate cheapest, and the
    incumbent it gives prunes the scan from the bottom before its costly
    searches (RQM 8 bits, n = 1,000: Δ = 64c took 3 exact evaluations of 5
    s each and 7 bounds; pruned, one bound and one evaluation). Visiting
    the whole grid from the top down instead stopped early where sub-sums
    loosen the bound at middle Δ (RQM 16 levels, n = 10, a low cost limit:
    64c against 4c, 6.6x the error)."""
    outer = self.specs[:-1]
    return (len(outer) == 1 and bool(outer[0].grid) and len(points) > 2
            and outer[0].more_private == 'higher')

  def _out_of_reach(self, points) -> int:
    """How many of `points` (a grid ascending toward more privacy) lead it
    out of reach: bisection on the screen's lower bound on ε at each one's
    most private value, which rises toward the less private end by the
    declared privacy direction, so a point the bound rules out rules out
    every point before it (RQM 8 bits, n = 1,000: Δ <= 16c, 8 points at
    ~2.5 s each, by 4 bounds). Each is recorded as reached, bounded by the
    bound that ruled it out."""
    axis = _Axis.of(self.last)
    most_private = lambda i: self.cls.for_coordinate_bound(self.clip, **dict(
        self.fixed, **points[i], **{self.last.name: axis.safe}))
    bounds = {}   # index -> its bound, where it exceeds the target

    def misses(i):
      mech = most_private(i)
      if self.bits is not None and mech.bits_per_coordinate > self.bits:
        return False
      try:
        low = self.epsilon_of.floor(mech)
      except vector.CostError:
        return False
      if low is None or not low > self.epsilon:
        return False
      bounds[i] = low
      return True
    lo, hi = 0, len(points)   # every point before lo misses
    while lo < hi:
      mid = (lo + hi) // 2
      if misses(mid):
        lo = mid + 1
      else:
        hi = mid
    for i in range(lo):
      low = bounds[min(k for k in bounds if k >= i)]
      self.reached.append((low, points[i], most_private(i)))
    return lo

  def _rose(self):
    """One more grid point without a better answer. One scanned parameter:
    the error at the calibrated inner value is taken to be unimodal along
    its grid, and a refused point to stay refused further on (a modular
    sum's modulus needs grow with its steps): two rises in a row end it.
    After a probe of the grid's top (`_probes_first`), rises count once the
    scan improves on it: the points before lie on the falling side. Along
    a real-valued grid (a level or quantizer range: QMGeo's, the quantized
    Gaussian's, the randomized projection's) no point counts before one is
    usable: the narrowest ranges cannot carry the signal (the slope grows
    with the range), which says nothing of the error further on."""
    if not self.counting:
      return None
    if self.best is None and self.specs[0].kind is not int:
      return None
    self.rising += 1
    return 'stop' if len(self.specs) == 2 and self.rising >= 2 else None

  def _missed(self):
    """A grid point whose most private value misses the target, or whose
    evaluation is over its cost. Along one scanned integer range stepped
    toward less privacy (more_private='lower', visited in ascending order),
    every later point does too: ε rises along it, the bit budget leaves the
    last parameter less room, and the accountant's critical inputs grow with
    it. The scan ends there (BQ at 16 bits: 32,642 values of s, each missing
    at ε = inf on the RDP route or refused for its cost, took minutes)."""
    outer = self.specs[:-1]
    if (len(outer) == 1 and outer[0].kind is int and not outer[0].grid
        and outer[0].more_private == 'lower'):
      self.stopped_after = outer[0].name
      return 'stop'
    return None

  def _carry_prune(self, build, grid_point):
    """Before a grid point is searched with no incumbent: the slope falls
    along the privacy direction, so where ε already misses the target at a
    value past the most private one carrying the signal (slope >=
    utility.MIN_SLOPE), every candidate meeting it here would be refused
    (`_unusable`). Recorded so without the search: 'pruned' (QMGeo's and the
    quantized Gaussian's 8-bit refusals at n = 100 took 7 exact evaluations
    and 69-117 s). Else (that value, its ε) when it meets the target (the
    search starts there), or None (every value carries the signal, the slope
    is not monotone, or a modular sum, whose refusal is its modulus's)."""
    axis = _Axis.of(self.last)
    if build(axis.unsafe).modulus is not None:
      return None
    inverse_slope = lambda m: 1 / max(
        m.signal_utility(self.clients, self.signal).slope, 1e-300)
    try:   # 5 samples + 5 halvings: 10 slopes (QG: 0.3-1 s each)
      edge = _least_private_to_beat(build, self.last, 1 / utility.MIN_SLOPE,
                                    inverse_slope, samples=5, iterations=5)
    except (modular.UnresolvableError, _NotMonotone):
      return None
    if edge == axis.safe:
      return None
    mech = build(axis.unsafe if edge is None else edge)
    util = mech.signal_utility(self.clients, self.signal)
    if edge is None:
      why = (f'slope {util.slope:.3g} < {utility.MIN_SLOPE} even at its least '
             'private setting')
    else:
      eps = self.epsilon_of(mech)
      if eps <= self.epsilon:
        return edge, eps
      at_least = '>' if self.epsilon_of.bounded is not None else ''
      why = (f'slope {util.slope:.4g} < {utility.MIN_SLOPE} where ε {at_least}= '
             f'{eps:.4g} > {self.epsilon:g} already, and less at any setting '
             'meeting the target (the slope falls as the noise grows)')
    self.unusable.append((why, grid_point, mech, None, util))
    self.pruned += 1
    return 'pruned'

  def visit(self, grid_point):
    """Calibrates the last parameter at one grid point; 'stop' ends the scan."""
    last, base = self.last, dict(self.fixed, **grid_point)
    build = lambda v: self.cls.for_coordinate_bound(
        self.clip, **dict(base, **{last.name: v}))
    hint_eps = None
    if self.best is None and last.kind is not int:
      try:
        carried = self._carry_prune(build, grid_point)
      except vector.CostError as err:
        self.refused.append((grid_point, str(err)))
        return self._missed()
      if carried == 'pruned':
        return self._rose()
      if carried is not None:
        self.hint, hint_eps = carried
    if self.best is not None and last.kind is not int:
      # Prune: the least private value with a smaller error than the
      # incumbent's must meet the target, else this grid point cannot win (ε
      # and the error both fall along the privacy direction). Start there.
      try:
        floor = _least_private_to_beat(build, last, self.best[0],
                                       self.error_of)
      except (modular.UnresolvableError, _NotMonotone):   # search as usual
        floor = False
      if floor is not False:
        try:
          floor_eps = None if floor is None else self.epsilon_of(build(floor))
        except vector.CostError as err:
          self.refused.append((grid_point, str(err)))
          return None
        if floor is None or floor_eps > self.epsilon:
          self.pruned += 1
          return self._rose()
        self.hint, hint_eps = floor, floor_eps
    try:
      value, value_eps, most_private_eps = _search_last(
          build, last, self.epsilon, self.epsilon_of, self.bits,
          self.scan_rtol, self.hint, hint_eps,
          self.known.setdefault(self._key(base), {}))
    except vector.CostError as err:   # e.g. RQM with many levels inside ±c
      self.refused.append((grid_point, str(err)))
      return self._missed()
    self.evaluated += 1
    if math.isnan(most_private_eps):
      return None
    self.fits = True
    if value is None:   # the most private value was the last evaluated
      self.reached.append((most_private_eps, grid_point,
                           self.epsilon_of.bounded))
      return self._missed()
    mech = build(value)
    util = mech.signal_utility(self.clients, self.signal)
    if (hint_eps is not None and self.best is not None and
        util.error >= self.best[0] and self.scan_rtol > self.rtol and
        value_eps < self.epsilon * (1 - self.rtol)):
      # It can beat the incumbent (ε meets the target where the error ties)
      # but its answer at the scan's width does not: a flat error curve
      # (RQM 8 bits, n = 1,000: Δ = 256-2,048c within 4%, where 1% in ε
      # moves the error 2%). Searched to `rtol` before it counts as a rise.
      value, value_eps = self._narrow(build, base, value, value_eps)
      mech = build(value)
      util = mech.signal_utility(self.clients, self.signal)
    self.hint = value
    why = _unusable(mech, util, self.clients, self.signal)
    if why is not None:
      self.unusable.append((why[0], grid_point, mech, why[1], util))
    elif self.best is None or util.error < self.best[0]:
      self.best = (util.error, mech, dict(base, **{last.name: value}),
                   value_eps, util)
      self.rising, self.counting = 0, True
      return None
    return self._rose()

  def no_answer(self, bound, use_pld) -> ValueError:
    """The error when no candidate met the target and carried the signal."""
    mechanism, epsilon, tune, bits = (self.mechanism, self.epsilon, self.tune,
                                      self.bits)
    if self.unusable:
      return _cannot_carry(mechanism, epsilon, bits, tune, self.clients,
                           self.signal, self.unusable, self.refused)
    closest = _closest(self.reached, self.epsilon_of)
    refused = self.refused
    if refused and not (closest and closest[2]):
      bounded = [g for _, g, m in self.reached if m is not None]
      return vector.CostError(
          f'{refused[0][1]} No setting of {", ".join(tune)} could be evaluated: '
          f'{[g for g, _ in refused]} were refused'
          + (f' (larger {self.stopped_after} costs more and was not tried)'
             if self.stopped_after else '')
          + (f', and {bounded} are out of reach (ε >= {closest[0]:.4g} by a '
             'lower bound, lower_bound.py)' if bounded else '') + '.')
    if not self.fits and bits is not None:
      return ValueError(f'`bits`={bits} is below what {mechanism} needs: no '
                        f'setting of {", ".join(tune)} with {self.fixed} fits '
                        f'in {bits} bits per coordinate.')
    budget = f' within {bits} bits' if bits is not None else ''
    others = {k: v for k, v in self.fixed.items() if k not in tune}
    where = f' at {closest[1]}' if closest[1] else ''
    unresolved = self.epsilon_of.unresolved
    return ValueError(
        f'Target ε={epsilon} is not reachable for {mechanism}{budget}'
        + (' even on the attained ε (bound=\'attained\')'
           if bound == 'attained' else '') + ': the most '
        f'private value of {", ".join(tune)} gives ε={closest[0]:.4g}{where} '
        f'(other parameters {others}); raise the target or change the schedule'
        + (f'; its exact law is out of reach there ({unresolved})'
           if math.isinf(closest[0]) and unresolved else
           '; every RDP order is infinite for it: try use_pld=True'
           if math.isinf(closest[0]) and not use_pld else '')
        + (f'; settings {[g for g, _ in refused]} were not evaluated (cost over '
           f'vector.MAX_OPERATIONS)' if refused else '') + '.')


def _attained_inputs(accountant, order) -> str:
  """The inputs attaining an accountant's attained ε at `order` ('' where
  none is attained)."""
  if accountant.attained is None:
    return ''
  if accountant.attained.configurations and math.isfinite(order):
    return accountant.attained.describe(order)
  return 'exact (closed form)'


def _unusable(mech, util, clients, signal):
  """None when `mech` carries the signal, else (why, bits needed or None).

  A modular sum must hold its summed noise as TFF's DistributedDpSumFactory
  sizes its field (`utility.modulus_needed`: k = 3.89 standard deviations of
  n clients' noise, rounding and common signal inside the modulus); past it
  the sum wraps toward uniform and its mean loses the input. Any mechanism's
  decoded mean must keep slope >= `utility.MIN_SLOPE` over |x| <= a: the
  factory returns that mean, not a debiased one.
  """
  needed = getattr(mech, 'modulus_needed', None)
  if mech.modulus is not None and needed is not None:
    need = needed(clients, signal)
    if mech.modulus < need:
      return (f'modulus {mech.modulus} < {need:.4g} (TFF DistributedDpSumFactory '
              f'sizing; slope {util.slope:.3g})',
              max(1, math.ceil(math.log2(need))))
  if not util.carries_signal:
    return (f'slope {util.slope:.3g} < {utility.MIN_SLOPE}', None)
  return None


def _needs(bits):
  """The claim a modular refusal starts with (`_fewest_bits` replaces it)."""
  return f'it needs at least {bits} bits'


def _cannot_carry(mechanism, epsilon, bits, tune, clients, signal, unusable,
                  refused):
  """The `CannotCarrySignal` for candidates that met the target but were all
  refused by `_unusable`: for a modular sum, the fewest bits any of them
  needs; otherwise the best slope reached."""
  budget = f' in {bits} bits' if bits is not None else ''
  skipped = (f' (settings {[g for g, _ in refused]} were not evaluated: cost '
             'over vector.MAX_OPERATIONS)' if refused else '')
  modular_rule = [u for u in unusable if u[3] is not None]
  if modular_rule:
    why, point, mech, need_bits, _ = min(modular_rule, key=lambda u: u[3])
    k = utility.modclip_stddevs()
    return CannotCarrySignal(
        f'{mechanism} cannot carry the signal{budget}: {_needs(need_bits)} '
        '(a larger power-of-two modulus cannot need less noise: the sum mod M '
        'is a function of the sum mod 2M). At every setting of '
        f'{", ".join(tune)} searched that meets ε={epsilon}, the modulus does '
        f'not hold the summed noise of {clients} clients as TFF\'s '
        'DistributedDpSumFactory sizes it (M >= 2k·√(n(σ² + 1/4) + (n·a/γ)²) '
        f'in rounding steps γ, k = {k:.3g} standard deviations for '
        f'modclip_prob {utility.MODCLIP_PROB:g}, a = {signal:.4g} the common '
        f'signal). Closest: {point or "its only setting"} at noise_std='
        f'{mech.noise_std:.4g}: {why}{skipped}.', bits_needed=need_bits)
  why, point, mech, _, _ = max(unusable, key=lambda u: u[4].slope)
  return CannotCarrySignal(
      f'{mechanism} cannot carry the signal{budget}: calibrated to ε={epsilon}, '
      f'the decoded mean of {clients} clients sharing an input |x| <= '
      f'{signal:.4g} has {why} at best ({mech}; {point or "its only setting"}): '
      'the mean QuantizationFactory returns is then more bias (1 - slope)·x '
      'than signal slope·x. Its output barely moves with its input (noise '
      'saturating its range): a wider coordinate clip, fewer rounds or a '
      f'larger ε raise the slope{skipped}.')
