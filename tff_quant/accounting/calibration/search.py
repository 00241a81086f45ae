"""The least private value of one parameter whose ε meets a target.

Accountant-free root finding against an `interface.Oracle`, the design of
dp_accounting's `mechanism_calibration` (bracket, then a root search on a
monotone ε; https://github.com/google/differential-privacy/blob/main/python/dp_accounting/dp_accounting/mechanism_calibration.py),
with what calibrating a quantized mechanism adds: an integer parameter is
bisected within a bit budget; a real one is bracketed from a hint and a
cheap lower bound (`bracket.py`), then searched by Brent's method on a
transform of ε that makes it near linear. `least_private_to_beat` finds
where an error crosses a level (no ε at all), which the scan prunes with.
"""

import dataclasses
import math
from typing import Callable, Dict, Optional

import numpy as np
from scipy import optimize

from tff_quant.accounting.calibration import bracket
from tff_quant.accounting.calibration import interface


class NotMonotone(Exception):
  """The error does not rise along the privacy direction: pruning does not apply."""


class _CloseEnough(Exception):
  """A value whose ε is within rtol below the target: the root search ends."""


class _Hopeless(Exception):
  """A value missing the target at which the search's `hopeless` holds: no
  value meeting it can win, and the search ends."""


@dataclasses.dataclass(frozen=True)
class SearchResult:
  """What `search_last` found.

  Attributes:
    value: the least private value with ε <= target; None when even the
      most private one misses.
    epsilon: its ε (when `value` is None: the ε of the most private value
      evaluated, or nan when no value fits the bits).
    least: the smallest ε seen (nan when no value fits the bits).
    bounded: when `value` is None, the candidate whose ε is known only by
      the oracle's lower bound (`EpsilonEstimate.lower_bound`), else None.
    hopeless: the search ended at a value missing the target where its
      `hopeless` held (`value` None, `epsilon` that value's).
    rate: d log ε / d log value (toward less privacy) last measured by
      the steps from a guess, or None.
  """
  value: Optional[float]
  epsilon: float
  least: float
  bounded: object = None
  hopeless: bool = False
  rate: Optional[float] = None


class _Evaluations:
  """A search's evaluations by x, cached; which one was last a lower bound."""

  def __init__(self, oracle, build, to_value, target=math.inf,
               hopeless=None):
    self.oracle, self.build, self.to_value = oracle, build, to_value
    self.target, self.hopeless = target, hopeless
    self.seen: Dict[float, float] = {}   # x -> ε, every evaluation
    self.bounded = None   # the last evaluated candidate, if only bounded

  def __call__(self, x, screen=True):
    if x not in self.seen:
      self.evaluate(x, screen)
    return self.seen[x]

  def evaluate(self, x, screen=True):
    """ε at x from the oracle, even where seen already."""
    candidate = self.build(self.to_value(x))
    estimate = self.oracle.epsilon(candidate, screen)
    self.bounded = candidate if estimate.lower_bound else None
    self.seen[x] = estimate.epsilon
    if (self.hopeless is not None and
        self.target < estimate.epsilon < math.inf and
        self.hopeless(self.to_value(x))):
      raise _Hopeless(x)
    return estimate.epsilon

  def result(self, value, x):
    """`SearchResult` of `value` at ε seen[x] (None: missed, at x)."""
    return SearchResult(value, self.seen[x], min(self.seen.values()),
                        self.bounded if value is None else None)


def largest_int_within_bits(build, spec, bits: int) -> int:
  """Largest integer value of `spec` whose candidate needs <= `bits` bits.

  Args:
    build: value -> candidate with `bits_per_coordinate` (monotone in it).
    spec: the integer `mechanisms.Tunable`.
    bits: the bit budget.

  Returns:
    The value (spec.low - 1 when even spec.low needs more).
  """
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


def _bisect_integer(build, spec, target, oracle, bits):
  """`search_last` for an integer parameter: plain bisection between the
  most private value and the least private one within `bits`."""
  lo, hi = int(spec.low), largest_int_within_bits(build, spec, bits)
  if hi < lo:
    return SearchResult(None, math.nan, math.nan)   # nothing fits the bits
  ev = _Evaluations(oracle, build, lambda v: v)
  eps_at = ev.evaluate   # uncached: one value is both ends when lo == hi
  safe, unsafe = (hi, lo) if spec.more_private == 'higher' else (lo, hi)
  best = eps_at(safe)
  if best > target:
    return SearchResult(None, best, best, ev.bounded)
  e = eps_at(unsafe)
  if e <= target:
    return SearchResult(unsafe, e, best)
  e = best
  while abs(safe - unsafe) > 1:
    mid = (safe + unsafe) // 2
    e_mid = eps_at(mid)
    if e_mid <= target:
      safe, e = mid, e_mid
    else:
      unsafe = mid
  return SearchResult(safe, e, best)


def least_private_to_beat(build, spec, error_to_beat: float,
                          error_of: Callable[[object], float], samples=33,
                          iterations=60) -> Optional[float]:
  """A value of a real `spec` at or just past (more private than) the most
  private one whose error is below `error_to_beat`.

  Every value that beats it is at most as private, so a grid point whose ε
  misses the target there cannot beat it. Bisection on the error (cheap: no
  accounting), which is taken to rise along the privacy direction, checked
  on `samples` points (plain MSE broke it: a wrapping modular sum's fell
  with more noise).

  Args:
    build: value -> candidate.
    spec: the real `mechanisms.Tunable` searched.
    error_to_beat: the level.
    error_of: candidate -> its error.
    samples: points the monotonicity is checked on.
    iterations: halvings after the samples.

  Returns:
    The value; None when no value in its range beats it; the most private
    end when all do.

  Raises:
    NotMonotone: the error falls somewhere along the privacy direction.
  """
  axis = interface.Axis.of(spec)
  error = lambda x: error_of(build(axis.value(x)))
  x_ok, x_bad = axis.x(axis.unsafe), axis.x(axis.safe)   # beats / does not beat
  sampled = [error(x) for x in np.linspace(x_ok, x_bad, samples)]
  if any(b < a * (1 - 1e-9) for a, b in zip(sampled, sampled[1:])):
    raise NotMonotone()
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


@dataclasses.dataclass
class _Real:
  """One real parameter's search: its axis, evaluations and tolerances."""
  axis: interface.Axis
  ev: _Evaluations
  oracle: interface.Oracle
  build: Callable[[float], object]
  target: float
  rtol: float
  x_tol: float
  limits: interface.SearchLimits
  rate: Optional[float] = None   # `_from_guess`'s last measured slope

  @property
  def span(self):
    return self.axis.x(self.axis.unsafe) - self.axis.x(self.axis.safe)

  def known_bracket(self):
    """(x_ok, x_bad) from earlier evaluations that straddle the target."""
    toward = lambda x: math.copysign(1.0, self.span) * x   # grows toward unsafe
    seen, target = self.ev.seen, self.target
    ok = [x for x, e in seen.items() if e <= target]
    beyond = [x for x, e in seen.items() if e > target and ok and
              toward(x) > max(map(toward, ok))]
    if not beyond:
      return None
    return max(ok, key=toward), min(beyond, key=toward)


def search_last(build, spec, target: float, oracle: interface.Oracle,
                bits: Optional[int], rtol: float, hint=None, hint_eps=None,
                known: Optional[Dict[float, float]] = None,
                limits: interface.SearchLimits = interface.SearchLimits(),
                guess: Optional[float] = None,
                hopeless: Optional[Callable[[float], bool]] = None,
                guess_rate: Optional[float] = None) -> SearchResult:
  """The least private value of `spec` whose ε meets `target`.

  Bisection for an integer; for a real, a bracket (`_bracket`), then
  Brent's method (in log space for a scale parameter) to relative width
  `rtol` (`_root`).

  Args:
    build: value -> candidate (what `oracle` accounts).
    spec: the `mechanisms.Tunable` searched, with a privacy direction.
    target: the ε to meet.
    oracle: the `interface.Oracle`.
    bits: the bit budget candidates must fit (None: any).
    rtol: the relative width the root search stops at; a value whose ε is
      within rtol below the target ends it too.
    hint: where to start (the previous grid point's answer, or the scan's
      pruning floor); `hint_eps` its ε if known.
    hint_eps: see `hint`.
    known: {value: ε} of earlier evaluations at the same grid point,
      updated with this search's: where they bracket the target the search
      goes straight to Brent's method.
    limits: the search's limits.
    guess: a predicted value of a noise scale (ε falling about as
      1/value; `Mechanism.gaussian_matched`): where no earlier evaluations
      bracket the target, secant steps on log ε from it come first
      (`_from_guess`), and the hint's bracket only where they find none.
    guess_rate: d log ε / d log value (toward less privacy, > 0) the first
      step from `guess` assumes (None: 1); e.g. `SearchResult.rate` of the
      previous grid point.
    hopeless: value -> whether no value at least as private can win (a
      real parameter: asked at each evaluated value whose finite ε misses
      the target); where it holds, the search ends (`SearchResult.hopeless`).

  Returns:
    A `SearchResult`.
  """
  if spec.kind is int:
    return _bisect_integer(build, spec, target, oracle, bits)
  axis = interface.Axis.of(spec)
  if bits is not None and build(axis.safe).bits_per_coordinate > bits:
    return SearchResult(None, math.nan, math.nan)
  x_tol = 0.5 * (rtol if axis.geometric else
                 rtol * max(abs(axis.safe), abs(axis.unsafe)))
  real = _Real(axis, _Evaluations(oracle, build, axis.value, target,
                                  hopeless), oracle, build,
               target, rtol, x_tol, limits)
  if known:   # this grid point's earlier evaluations (`scan.Scan.refine`)
    real.ev.seen.update({axis.x(v): e for v, e in known.items()
                         if axis.lo < v < axis.hi})
  try:
    found = _search_real(real, spec, known, guess, guess_rate, hint,
                         hint_eps)
  except _Hopeless as stop:
    seen = real.ev.seen
    _remember(known, real)
    found = SearchResult(None, seen[stop.args[0]], min(seen.values()),
                         hopeless=True)
  return dataclasses.replace(found, rate=real.rate)


def _search_real(real, spec, known, guess, guess_rate, hint, hint_eps):
  """`search_last` for a real parameter, from its `_Real`."""
  axis, target, limits = real.axis, real.target, real.limits
  ends = real.known_bracket()
  if ends is None and guess is not None and limits.guess_steps:
    if hint_eps is not None and axis.lo < hint < axis.hi:
      # An evaluated start (the scan's floor) within 5% of the guess: the
      # steps begin there, free (Skellam at 16 bits: one exact evaluation
      # fewer a grid point).
      real.ev.seen.setdefault(axis.x(hint), hint_eps)
      if guess > 0 and abs(math.log(hint / guess)) < 0.05:
        guess = hint
    at_end = _least_private_end_if_safe(real, guess)
    if at_end is not None:
      return at_end
    ends = real.known_bracket() or _from_guess(real, guess,
                                               limits.guess_steps, guess_rate)
  if ends is None:
    ends = _bracket(real, hint, hint_eps)
    if isinstance(ends, SearchResult):
      return ends
  x_ok, x_bad = ends
  _root(real, x_ok, x_bad)
  seen = real.ev.seen
  sign = -1 if spec.more_private == 'higher' else 1
  x_best = max((x for x, e in seen.items() if e <= target),
               key=lambda x: sign * axis.value(x))
  _remember(known, real)
  return real.ev.result(axis.value(x_best), x_best)


def _remember(known, real):
  """`known` (the grid point's {value: ε}, or None) updated with the
  search's evaluations."""
  if known is not None:
    known.update({real.axis.value(x): e for x, e in real.ev.seen.items()})


def _least_private_end_if_safe(real, guess):
  """Where `guess` lies at or past the least private end of the axis (a
  noise the Gaussian's matches below the range: the discrete Gaussian's and
  Skellam's at one rounding step): that end's `SearchResult` if its ε meets
  the target (one evaluation where the bracket from the most private end
  took ten), else None."""
  axis = real.axis
  past = (guess <= axis.lo) if axis.unsafe == axis.lo else (guess >= axis.hi)
  if not past:
    return None
  x = axis.x(axis.unsafe)
  return real.ev.result(axis.unsafe, x) if real.ev(x) <= real.target else None


def _from_guess(real, guess, steps, rate=None):
  """(x_ok, x_bad) around the target after secant steps on log ε from
  `guess`, or (x, None) at a value whose ε is within `rtol` below the
  target; None where the steps bracket nothing (the hint's bracket takes
  over, these evaluations kept).

  The first step takes ε ∝ value^-rate (a noise scale: x = log value;
  rate 1 unless given), the later ones the slope through the last two
  finite points (kept in `real.rate`), each aimed at the window's middle
  and kept inside a bracket once there is one (else its midpoint; a step
  past the axis, its end). A value whose law is out of reach (ε infinite,
  found at once) moves 4x toward privacy, or halves the bracket; such values do
  not count against the `steps` finite evaluations, and the steps end
  once the bracket is `x_tol` wide. Discrete Gaussian at 16 bits, r = 64:
  one exact evaluation where the hint's bracket took six; r = 1, its
  answer at the least noise whose law is resolvable: one where the
  hint's took twelve."""
  axis, ev, target = real.axis, real.ev, real.target
  if not (axis.geometric and axis.lo < guess < axis.hi):
    return None
  toward = math.copysign(1.0, real.span)   # x grows toward less privacy
  middle = target * (1 - real.rtol / 2)
  ends_x = sorted((axis.x(axis.lo), axis.x(axis.hi)))
  # rate: d log ε / d(toward·x)
  x, rate, last = axis.x(guess), (rate if rate and rate > 0 else 1.0), None
  finite = 0
  for _ in range(6 * steps):
    e = ev(x)
    ends = real.known_bracket()
    if 0 < e < math.inf:
      finite += 1
      if target * (1 - real.rtol) <= e <= target:
        return x, None
      if last is not None:
        measured = (math.log(e) - math.log(last[1])) / (toward * (x - last[0]))
        if measured > 0:
          rate = real.rate = measured
      last = (x, e)
      step = x + toward * math.log(middle / e) / rate
    elif e <= 0:   # no divergence at all: far too private
      step = x + toward * math.log(4.0)
    else:
      step = None if ends is not None else x - toward * math.log(4.0)
    if finite >= steps or (ends is not None and
                           abs(ends[0] - ends[1]) <= real.x_tol):
      break
    lo, hi = sorted(ends) if ends is not None else ends_x
    if step is not None and ends is None:
      x = min(max(step, lo), hi)   # past the axis: its end
    else:
      x = step if step is not None and lo < step < hi else 0.5 * (lo + hi)
    if x in ev.seen:
      break
  return real.known_bracket()


def _bracket(real, hint, hint_eps):
  """(x_ok, x_bad) straddling the target, stepping from `hint` or the most
  private end toward the least private one (the least private end, q -> 1
  for RQM: ~10^8 ε and the slowest law to resolve, 173 s at 256 levels, is
  evaluated only if reached); or the `SearchResult` where a safe value is
  missing or the least private end is safe."""
  axis, ev, target = real.axis, real.ev, real.target
  x_safe, x_unsafe = axis.x(axis.safe), axis.x(axis.unsafe)
  start = x_safe
  inside = hint is not None and axis.lo < hint < axis.hi
  if inside and hint_eps is not None:
    ev.seen[axis.x(hint)] = hint_eps
  if inside and ev(axis.x(hint)) <= target:
    start = axis.x(hint)
  else:
    # The most private end's exact ε (its law the slowest but one) is needed
    # only if no safe value turns up: a cheap bound well within the target
    # defers it. A bound within `safe_end_first` of the target does not: the
    # exact ε there may miss it (RQM 8 bits, n = 1,000, Δ = 32c: bound 9.40,
    # ε 17.1 at the target 10), and where it meets it, it is the looseness
    # the next steps aim with.
    low = real.oracle.lower_bound(real.build(axis.safe))
    if (low is None or low > target / real.limits.safe_end_first) and ev(
        x_safe) > target:
      return SearchResult(None, ev.seen[x_safe], ev.seen[x_safe], ev.bounded)
  # The cheap bound steers the first exact evaluations to the window the
  # root search stops in (RQM 8 bits, n = 100: 8 exact evaluations at the
  # first grid point -> 6; after a hint 6 -> 3).
  near = bracket.bracket_from_bound(
      bracket.OnAxis(ev, lambda x: real.oracle.lower_bound(
          real.build(axis.value(x))), lambda x: ev(x, False), axis),
      start, x_unsafe, target, real.x_tol, aim=target * (1 - real.rtol / 2),
      known=bracket.Known(real.oracle.looseness(),
                          min(ev.seen.values(), default=None),
                          ev.seen.get(start)),
      limits=real.limits)
  x_ok, x_bad = (start, None) if near is None else near
  if x_ok not in ev.seen and ev(x_ok) > target:   # the deferred check
    return ev.result(None, x_ok)
  if x_bad is not None:
    return x_ok, x_bad
  return _step_out(real, x_ok)


def _step_out(real, x_ok):
  """Steps from the safe `x_ok` toward the unsafe end (a secant on log ε,
  doubling at least; at most half the way left, so the unsafe end is
  evaluated only once within 1/64 of the span of it) to the first unsafe
  x: (x_ok, x_bad), or the `SearchResult` where the unsafe end is safe."""
  ev, target, span = real.ev, real.target, real.span
  x_unsafe = real.axis.x(real.axis.unsafe)
  x_prev, step = None, span / 16
  while True:
    e_ok = ev.seen[x_ok]
    if x_prev is not None and 0 < ev.seen[x_prev] < e_ok < math.inf:
      slope = math.log(e_ok / ev.seen[x_prev]) / (x_ok - x_prev)
      step = math.copysign(min(max(abs(1.5 * math.log(target / e_ok) / slope),
                                   abs(2 * step)), abs(4 * step)), span)
    else:
      step *= 2
    left = x_unsafe - x_ok
    x = x_unsafe if abs(left) <= abs(span) / 64 else x_ok + math.copysign(
        min(abs(step), abs(left) / 2), span)
    if not ev(x) <= target:
      return x_ok, x
    if x == x_unsafe:
      return ev.result(real.axis.unsafe, x)
    x_prev, x_ok = x_ok, x


def _root(real, x_ok, x_bad):
  """Brent's method between `x_ok` and `x_bad` until a value's ε is within
  `rtol` below the target or the bracket is `x_tol` wide.

  On log((ε - floor)/(middle - floor)), floor just below the least ε seen:
  ε is smooth and monotone in the value, flat near the private end and then
  steep (RQM: ε - floor ~ q^1.3), which this makes nearly linear (RQM 8
  bits, Δ = 32c: 6 evaluations -> 4); any increasing transform keeps the
  bracket and the root. Where every ε seen is within `no_plateau` of the
  target (a search narrowed from an answer at the scan's width) there is
  no plateau to flatten: plain log ε (a floor just below it made the
  transform a log near 0, and Brent bisected: 6 evaluations). The root
  sought is the window's middle, not its edge: a root at the target lands
  on either side of it (RQM refined at n = 1,000: 10.0043, then 10.0001,
  both over, before 9.9968).
  """
  ev, target, rtol = real.ev, real.target, real.rtol
  least = min(ev.seen.values())
  floor = (least - 1e-2 * (target - least)
           if least < target * (1 - real.limits.no_plateau) else 0.0)
  close = lambda e: target * (1 - rtol) <= e <= target
  middle = target * (1 - rtol / 2)
  screen = not ev.seen.get(x_bad, math.inf) < (
      real.limits.unscreened_within * target)

  def excess(x):
    e = ev(x, screen)
    if close(e):
      raise _CloseEnough()
    if not e < math.inf:
      return 50.0
    return math.log(max(e - floor, 1e-300) / (middle - floor))

  if close(ev.seen[x_ok]):
    return
  try:
    optimize.brentq(excess, x_ok, x_bad, xtol=real.x_tol,
                    maxiter=real.limits.max_iterations)
  except (RuntimeError, _CloseEnough):   # the best safe value seen holds
    pass
