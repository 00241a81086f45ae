"""The grid scan of one calibration: which candidate wins.

The scanned (outer) parameters' grid is visited; at each point the last
parameter is searched (`search.search_last`) to the least private value
meeting the target; among those that carry the signal (`refusals`), the
one with the smallest debiased error (`Mechanism.signal_utility`) is the
`Incumbent`. Grid points that cannot beat it are pruned on the error alone
(`search.least_private_to_beat`), and a scan along a monotone grid stops
where the error starts rising (`Steer.STOP`).
"""

import dataclasses
import enum
import math
import time
from typing import Callable, Dict, Optional

from tff_quant import mechanisms
from tff_quant.accounting import secure_sum
from tff_quant.accounting.calibration import interface
from tff_quant.accounting.calibration import refusals
from tff_quant.accounting.calibration import search
from tff_quant.mechanisms import modular
from tff_quant.mechanisms import utility

#: The root search's width while the grid is scanned; the winner is searched
#: again to `rtol` (`Scan.refine`). RQM 8 bits, n = 1,000: the last steps
#: into a 0.2% window took 2-3 exact evaluations per grid point.
SCAN_RTOL = 1e-2
PROGRESS_AFTER = 10.0   # seconds a calibration runs before it reports progress
#: Halvings after its samples that locate the floor to beat the incumbent:
#: 2^-24 of a sample step (the floor errs toward privacy, so a coarser one
#: prunes less, never wrongly). Skellam at 16 bits: 60 took 3 s of error
#: evaluations a grid point.
BEAT_ITERATIONS = 24


class Steer(enum.Enum):
  """What a grid point's visit tells the scan."""
  CONTINUE = 'continue'   # go on to the next grid point
  STOP = 'stop'           # no later grid point can win
  PRUNED = 'pruned'       # (`Scan._carry_prune`) refused without a search


@dataclasses.dataclass(frozen=True)
class Incumbent:
  """The best candidate so far.

  Attributes:
    error: its debiased error (what calibration minimises).
    mechanism: the candidate.
    params: its scanned and searched parameters (and the fixed ones).
    epsilon: its ε (<= the target).
    utility: its `signal_utility`.
  """
  error: float
  mechanism: object
  params: Dict[str, object]
  epsilon: float
  utility: object


@dataclasses.dataclass(frozen=True)
class _Start:
  """Where a grid point's search starts: a value and its ε (None: the hint
  as it is), and the search's `hopeless` (`Scan._hopeless`)."""
  value: Optional[float]
  epsilon: Optional[float]
  hopeless: Optional[Callable[[float], bool]] = None


def levels_from_bits(cls, params, tune, bits):
  """`params` with num_levels = 2^bits (or `bits` itself) unless given or
  searched.

  Args:
    cls: the mechanism class.
    params: the given parameters.
    tune: the searched parameters' names.
    bits: the bit budget (None: `params` unchanged).

  Returns:
    The parameters.
  """
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


def _tuned(cls, mechanism, tune, bits):
  """The searched parameters' names and specs, validated."""
  if tune is None:
    tune = cls.CALIBRATED
  tune = (tune,) if isinstance(tune, str) else tuple(tune)
  if not tune:
    raise ValueError(f'{mechanism} declares no calibrated parameter; pass '
                     '`tune`.')
  specs = [cls.tunable(name) for name in tune]
  last = specs[-1]
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
  return tune, specs


class _Progress:
  """Calls `log` with a line per grid point once `after` seconds have
  passed: the point, how many of how many, and an ETA at the average pace
  per grid point so far (an estimate: the scan may stop early, and later
  grid points may cost more)."""

  def __init__(self, log, mechanism, total, after):
    self.log, self.mechanism, self.total = log, mechanism, total
    self.after = after
    self.start = time.time()

  def __call__(self, index, grid_point):
    elapsed = time.time() - self.start
    if self.log is None or elapsed < self.after or not index:
      return
    eta = elapsed / index * (self.total - index)
    self.log(f'calibrating {self.mechanism}: grid point {index + 1} of '
             f'{self.total} {grid_point or ""} ({elapsed:.0f} s so far, '
             f'~{eta:.0f} s left at the pace so far)')


class Scan:
  """The search of one calibration: the scanned (outer) parameters' grid, the
  last parameter searched at each point (`search.search_last`), the
  incumbent with the smallest debiased error, and what was refused on the
  way.

  Args:
    mechanism: the registry name.
    epsilon: the target ε.
    clip: c∞, the coordinate bound mechanisms are built for.
    tune: the searched parameters (None: the class's `calibrated_at` the
      fixed parameters: `CALIBRATED`, less those without effect there).
    bits: the bit budget (None: any).
    rtol: the width the answer is searched to.
    params: the fixed parameters.
    epsilon_of: the `interface.Oracle` (`oracle.Epsilon`).
    signal: a, the common input the debiased error is judged on.
    clients: n, the clients a round.
    limits: the root search's `interface.SearchLimits`.
    gaussian_sigma: the continuous Gaussian's per-client std at the same
      target, or None: where the mechanism matches it
      (`Mechanism.gaussian_matched`), each grid point's search starts there.
    to_beat: None, or a debiased error another search of the same
      calibration already reached (`report`'s profile searches): grid points
      that cannot beat it are pruned as if it were this scan's incumbent,
      so this scan may end without an answer of its own.

  Raises:
    ValueError: no parameter to search, one without a privacy direction, an
      integer one without `bits`, or a real outer one without a grid.
  """

  def __init__(self, mechanism, epsilon, clip, tune, bits, rtol, params,
               epsilon_of, signal, clients,
               limits=interface.SearchLimits(), gaussian_sigma=None,
               to_beat=None):
    self.mechanism, self.epsilon, self.clip = mechanism, epsilon, clip
    self.bits, self.rtol, self.epsilon_of = bits, rtol, epsilon_of
    self.signal, self.clients, self.limits = signal, clients, limits
    self.gaussian_sigma = gaussian_sigma
    self.to_beat = to_beat
    self.guess_scale, self.guess_rate = 1.0, None   # `_learn_scale`
    self.cls = cls = mechanisms.get(mechanism)
    if tune is None:   # the class's, less what cannot change the law here
      tune = cls.calibrated_at(levels_from_bits(cls, params, cls.CALIBRATED,
                                                bits))
    self.tune, self.specs = _tuned(cls, mechanism, tune, bits)
    self.last = self.specs[-1]
    params = {k: v for k, v in params.items() if k not in self.tune}
    self.fixed = cls.complete_params(levels_from_bits(cls, params, self.tune,
                                                      bits))
    self.best: Optional[Incumbent] = None
    self.evaluated = self.rising = self.pruned = 0   # pruned: unable to win
    self.counting = True   # whether a rise counts toward the stop (`_rose`)
    self.fits = False
    self.unusable = []   # refusals.Unusable
    # where a target no candidate meets comes closest
    self.reached = []    # refusals.Reached
    self.refused = []    # refusals.Refused: evaluations over Limits.max_operations
    self.hint = None    # the last grid point's answer: where the next starts
    self.known = {}     # grid point -> {value: ε} of its exact evaluations
    self.stopped_after = None   # the scanned parameter `_missed` stopped

  def error_of(self, mech):
    """The debiased error calibration minimises.

    Args:
      mech: a candidate.

    Returns:
      `mech.signal_utility(clients, signal).error`.
    """
    return mech.signal_utility(self.clients, self.signal).error

  def _build(self, base):
    """value -> the mechanism at `base` with the last parameter at value."""
    return lambda v: self.cls.for_coordinate_bound(
        self.clip, **dict(base, **{self.last.name: v}))

  def candidates(self, prefix, outer):
    """Every point of the scanned (outer) parameters that builds and fits
    `bits`.

    Args:
      prefix: the values of the parameters before `outer`.
      outer: the specs still to scan.

    Yields:
      Each grid point, a dict of the scanned parameters' values.
    """
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

  def run(self, progress: Optional[Callable[[str], None]],
          progress_after: float = PROGRESS_AFTER):
    """Visits the grid, then refines and settles the answer.

    Args:
      progress: None, or a callable given a line per grid point once the
        scan has run `progress_after` seconds.
      progress_after: see `progress`.
    """
    points = list(self.candidates({}, self.specs[:-1]))
    report_progress = _Progress(progress, self.mechanism, len(points),
                                progress_after)
    done = 0
    if self._probes_first(points):   # the most private end first
      report_progress(done, points[-1])
      if self.visit(points[-1]) is Steer.STOP:
        points = []
      self.counting = False   # `_rose`: until the scan improves on it
      points, done = points[:-1], 1
      skipped = self._out_of_reach(points)
      points, done = points[skipped:], done + skipped
    for index, grid_point in enumerate(points, done):
      report_progress(index, grid_point)
      if self.visit(grid_point) is Steer.STOP:
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

  def _search(self, build, rtol, hint, hint_eps, known, guess=None,
              hopeless=None):
    return search.search_last(build, self.last, self.epsilon, self.epsilon_of,
                              self.bits, rtol, hint, hint_eps, known,
                              limits=self.limits, guess=guess,
                              hopeless=hopeless, guess_rate=self.guess_rate)

  def _hopeless(self, build):
    """value -> whether its error already reaches the incumbent's, for a
    grid point `_beat_prune` could not bound (its least private values out
    of reach: a modular sum's law unresolved): every value meeting the
    target is more private than one that misses it, so none can win (the
    error taken to rise with privacy, as `_beat_prune` takes it; this
    decides only which candidate wins, never an ε). Discrete Gaussian at 16
    bits, ε = 10: r = 256 and 512 pruned after 2 evaluations each instead
    of searched in 6 and 4. None without an incumbent."""
    level = self._bar()
    if level is None:
      return None

    def hopeless(value):
      try:
        return self.error_of(build(value)) >= level
      except modular.UnresolvableError:
        return False
    return hopeless

  def _guess(self, base):
    """The mechanism's value of the last parameter matching the Gaussian's
    noise at this grid point (`Mechanism.gaussian_matched`), that noise
    scaled by what the grid points searched so far needed over their guess
    (`guess_scale`), or None."""
    if self.gaussian_sigma is None:
      return None
    return self.cls.gaussian_matched(self.gaussian_sigma * self.guess_scale,
                                     self.clip, base)

  def _learn_scale(self, guess, found):
    """`guess_scale` from a grid point's answer over its guess (the hook's
    value is proportional to the noise), kept within [1/4, 4], where the
    target set the answer (its ε within the scan's window: not an end of
    the range or the least resolvable noise); and `guess_rate`,
    the slope of log ε its steps measured. Discrete Gaussian at 16 bits,
    ε = 10: each grid point needed 0.13-0.27% more noise than the
    Gaussian's, and ε fell as about σ^-3.9 there (the first step assumed
    σ^-1 and overshot); guessed and stepped with both, 1-2 evaluations a
    grid point instead of three."""
    if found.rate is not None:
      self.guess_rate = found.rate
    if (guess is not None and found.value is not None and
        found.epsilon >= self.epsilon * (1 - self.scan_rtol)):   # not an end
      self.guess_scale = min(4.0, max(0.25, self.guess_scale *
                                      found.value / guess))

  def settle(self):
    """The answer's ε from the whole accountant (`oracle.Epsilon.full`);
    where the ±c mixes its search skipped lower it below the window, its
    grid point is searched again with them (`oracle.Epsilon.mixes_matter`).
    Updates `best`."""
    if self.best is None:
      return
    best = self.best
    whole = self.epsilon_of.full(best.mechanism)
    if whole is None:
      return
    self.best = dataclasses.replace(best, epsilon=min(whole, best.epsilon))
    if whole >= self.epsilon * (1 - self.rtol) or self.last.kind is int:
      return
    self.epsilon_of.mixes_matter = True
    self.known.pop(self._key(best.params), None)   # the mixture alone's values
    self.refine(again=True)

  def refine(self, again=False):
    """The winner's last parameter searched again to `rtol`, from its answer
    at the scan's width (`scan_rtol`) and its grid point's evaluations: one
    or two exact evaluations more for the winner against two or three fewer
    at every grid point searched. Updates `best`. A winner at the least
    private end of its axis is left as it is: no value beats it, and the
    search would only repeat its bracket (RQM at Δ = 64c, 3 bits, n = 10:
    nine exact evaluations, 2.4 s).

    Args:
      again: also where the scan's width is `rtol` (`settle`).
    """
    best = self.best
    if (best is None or self.last.kind is int or
        (self.scan_rtol <= self.rtol and not again) or
        best.epsilon >= self.epsilon * (1 - self.rtol)):
      return
    name = self.last.name
    if best.params[name] == interface.Axis.of(self.last).unsafe:
      return
    base = {k: v for k, v in best.params.items() if k != name}
    build = self._build(base)
    value, value_eps = self._narrow(build, base, best.params[name],
                                    best.epsilon)
    if value == best.params[name]:
      return
    mech = build(value)
    util = mech.signal_utility(self.clients, self.signal)
    if refusals.why_unusable(mech, util, self.clients, self.signal,
                             None) is None:
      self.best = Incumbent(util.error, mech,
                            dict(best.params, **{name: value}), value_eps, util)

  def _narrow(self, build, base, value, value_eps):
    """(value, ε) of the last parameter at a grid point searched again to
    `rtol` from its answer at the scan's width; the answer as it was where
    that search fails or finds nothing."""
    try:   # guided: secant steps from the answer (`_learn_scale`)
      found = self._search(build, self.rtol, value, value_eps,
                           self.known.get(self._key(base)),
                           value if self.gaussian_sigma is not None else None)
    except secure_sum.CostError:
      return value, value_eps
    return ((value, value_eps) if found.value is None
            else (found.value, found.epsilon))

  def _probes_first(self, points) -> bool:
    """True for one scanned grid whose parameter is more private when
    higher (RQM's Δ): its top, the most private end, is calibrated first.
    There the laws are the smoothest and calibrate cheapest, and the
    incumbent it gives prunes the scan from the bottom before its costly
    searches (RQM 8 bits, n = 1,000: Δ = 64c took 3 exact evaluations and 7
    bounds; pruned, one bound and one evaluation). Visiting the whole grid
    from the top down instead stopped early where sub-sums loosen the bound
    at middle Δ (RQM 16 levels, n = 10, a low cost limit: 64c against 4c,
    6.6x the error)."""
    outer = self.specs[:-1]
    return (len(outer) == 1 and bool(outer[0].grid) and len(points) > 2
            and outer[0].more_private == 'higher')

  def _out_of_reach(self, points) -> int:
    """How many of `points` (a grid ascending toward more privacy) lead it
    out of reach: bisection on the screen's lower bound on ε at each one's
    most private value, which rises toward the less private end by the
    declared privacy direction, so a point the bound rules out rules out
    every point before it (RQM 8 bits, n = 1,000: Δ <= 16c, 8 points by 4
    bounds). Each is recorded as reached, bounded by the bound that ruled
    it out."""
    safe = interface.Axis.of(self.last).safe
    most_private = lambda i: self._build(dict(self.fixed, **points[i]))(safe)
    bounds = {}   # index -> its bound, where it exceeds the target

    def misses(i):
      mech = most_private(i)
      if self.bits is not None and mech.bits_per_coordinate > self.bits:
        return False
      try:
        low = self.epsilon_of.lower_bound(mech)
      except secure_sum.CostError:
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
      self.reached.append(refusals.Reached(low, points[i], most_private(i)))
    return lo

  def _rose(self) -> Steer:
    """One more grid point without a better answer. One scanned parameter:
    the error at the calibrated inner value is taken to be unimodal along
    its grid, and a refused point to stay refused further on (a modular
    sum's modulus needs grow with its steps): two rises in a row end it.
    After a probe of the grid's top (`_probes_first`), rises count once the
    scan improves on it. Along a real-valued grid (a level or quantizer
    range) no point counts before one is usable: the narrowest ranges
    cannot carry the signal, which says nothing of the error further on."""
    if not self.counting:
      return Steer.CONTINUE
    if self.best is None and self.specs[0].kind is not int:
      return Steer.CONTINUE
    self.rising += 1
    return (Steer.STOP if len(self.specs) == 2 and self.rising >= 2
            else Steer.CONTINUE)

  def _missed(self) -> Steer:
    """A grid point whose most private value misses the target, or whose
    evaluation is over its cost. Along one scanned integer range stepped
    toward less privacy (more_private='lower', visited in ascending order),
    every later point does too (ε rises along it, the bit budget leaves the
    last parameter less room, and the critical inputs grow): the scan ends
    (BQ at 16 bits: 32,642 values of s took minutes)."""
    outer = self.specs[:-1]
    if (len(outer) == 1 and outer[0].kind is int and not outer[0].grid
        and outer[0].more_private == 'lower'):
      self.stopped_after = outer[0].name
      return Steer.STOP
    return Steer.CONTINUE

  def _refuse(self, grid_point, err) -> None:
    self.refused.append(refusals.Refused(grid_point, str(err)))

  def _carry_prune(self, build, grid_point):
    """Before a grid point is searched with no incumbent: the slope falls
    along the privacy direction, so where ε already misses the target at a
    value past the most private one carrying the signal (slope >=
    utility.MIN_SLOPE), every candidate meeting it here would be refused.
    Recorded so without the search: `Steer.PRUNED` (QMGeo's and the
    quantized Gaussian's 8-bit refusals at n = 100 took 7 exact evaluations
    and 69-117 s). Else a `_Start` at that value when it meets the target,
    or None (every value carries the signal, the slope is not monotone, or
    a modular sum, whose refusal is its modulus's)."""
    axis = interface.Axis.of(self.last)
    if build(axis.unsafe).modulus is not None:
      return None
    inverse_slope = lambda m: 1 / max(
        m.signal_utility(self.clients, self.signal).slope, 1e-300)
    try:   # 5 samples + 5 halvings: 10 slopes (QG: 0.3-1 s each)
      edge = search.least_private_to_beat(
          build, self.last, 1 / utility.MIN_SLOPE, inverse_slope, samples=5,
          iterations=5)
    except (modular.UnresolvableError, search.NotMonotone):
      return None
    if edge == axis.safe:
      return None
    mech = build(axis.unsafe if edge is None else edge)
    util = mech.signal_utility(self.clients, self.signal)
    if edge is None:
      why = (f'slope {util.slope:.3g} < {utility.MIN_SLOPE} even at its least '
             'private setting')
    else:
      estimate = self.epsilon_of.epsilon(mech)
      eps = estimate.epsilon
      if eps <= self.epsilon:
        return _Start(edge, eps)
      at_least = '>' if estimate.lower_bound else ''
      why = (f'slope {util.slope:.4g} < {utility.MIN_SLOPE} where ε {at_least}= '
             f'{eps:.4g} > {self.epsilon:g} already, and less at any setting '
             'meeting the target (the slope falls as the noise grows)')
    self.unusable.append(refusals.Unusable(why, grid_point, mech, None, util))
    self.pruned += 1
    return Steer.PRUNED

  def _bar(self) -> Optional[float]:
    """The error a grid point must beat: the incumbent's, or `to_beat`
    where smaller; None with neither."""
    bars = [e for e in (None if self.best is None else self.best.error,
                        self.to_beat) if e is not None]
    return min(bars) if bars else None

  def _beat_prune(self, build, grid_point):
    """With an incumbent: the least private value whose error beats it must
    meet the target, else this grid point cannot win (ε and the error both
    fall along the privacy direction). A `_Start` there, None to search as
    usual, or a `Steer` (pruned, or refused for its cost)."""
    try:
      floor = search.least_private_to_beat(build, self.last, self._bar(),
                                           self.error_of,
                                           iterations=BEAT_ITERATIONS)
    except modular.UnresolvableError:
      return _Start(None, None, self._hopeless(build))
    except search.NotMonotone:
      return None
    try:
      floor_eps = (None if floor is None else
                   self.epsilon_of.epsilon(build(floor)).epsilon)
    except secure_sum.CostError as err:
      self._refuse(grid_point, err)
      return Steer.CONTINUE
    if floor is None or floor_eps > self.epsilon:
      self.pruned += 1
      if self.best is not None and self.best.error <= self._bar():
        return self._rose()
      # Pruned against `to_beat` alone: its error may still fall below the
      # incumbent's, so it is no sign that the scan's own error rose.
      return Steer.CONTINUE
    return _Start(floor, floor_eps)

  def _start(self, build, grid_point):
    """Where this grid point's search starts (`_Start`), None (the hint as
    it is), or the `Steer` that ends the visit before any search."""
    if self.last.kind is int:
      return None
    if self._bar() is not None:
      return self._beat_prune(build, grid_point)
    try:
      carried = self._carry_prune(build, grid_point)
    except secure_sum.CostError as err:
      self._refuse(grid_point, err)
      return self._missed()
    return self._rose() if carried is Steer.PRUNED else carried

  def visit(self, grid_point) -> Steer:
    """Calibrates the last parameter at one grid point.

    Args:
      grid_point: the scanned parameters' values.

    Returns:
      `Steer.STOP` where no later grid point can win, else CONTINUE.
    """
    base = dict(self.fixed, **grid_point)
    build = self._build(base)
    start = self._start(build, grid_point)
    if isinstance(start, Steer):
      return start
    hint_eps = hopeless = None
    if start is not None:
      hopeless = start.hopeless
      if start.value is not None:
        self.hint, hint_eps = start.value, start.epsilon
    guess = self._guess(base)
    try:
      found = self._search(build, self.scan_rtol, self.hint, hint_eps,
                           self.known.setdefault(self._key(base), {}), guess,
                           hopeless)
    except secure_sum.CostError as err:   # e.g. RQM with many levels inside ±c
      self._refuse(grid_point, err)
      return self._missed()
    self.evaluated += 1
    if found.hopeless:
      self.pruned += 1
      return self._rose()
    self._learn_scale(guess, found)
    if math.isnan(found.least):
      return Steer.CONTINUE
    self.fits = True
    if found.value is None:   # the most private value was the last evaluated
      self.reached.append(refusals.Reached(found.least, grid_point,
                                           found.bounded))
      return self._missed()
    # Whether a value meeting the target may tie the incumbent: the floor
    # to beat it met the target, or no value missing it had reached its
    # error (the search was not hopeless).
    return self._judge(build, base, grid_point, found,
                       hint_eps is not None or hopeless is not None)

  def _judge(self, build, base, grid_point, found, can_tie) -> Steer:
    """The search's answer at a grid point against the incumbent."""
    value, value_eps = found.value, found.epsilon
    mech = build(value)
    util = mech.signal_utility(self.clients, self.signal)
    if (can_tie and self.best is not None and
        util.error >= self.best.error and self.scan_rtol > self.rtol and
        value_eps < self.epsilon * (1 - self.rtol)):
      # It can beat the incumbent (ε meets the target where the error ties)
      # but its answer at the scan's width does not: a flat error curve
      # (RQM 8 bits, n = 1,000: Δ = 256-2,048c within 4%, where 1% in ε
      # moves the error 2%). Searched to `rtol` before it counts as a rise.
      value, value_eps = self._narrow(build, base, value, value_eps)
      mech = build(value)
      util = mech.signal_utility(self.clients, self.signal)
    self.hint = value
    refused = refusals.why_unusable(mech, util, self.clients, self.signal,
                                    grid_point)
    if refused is not None:
      self.unusable.append(refused)
    elif self.best is None or util.error < self.best.error:
      self.best = Incumbent(util.error, mech, dict(base, **{self.last.name:
                                                            value}),
                            value_eps, util)
      self.rising, self.counting = 0, True
      return Steer.CONTINUE
    return self._rose()
