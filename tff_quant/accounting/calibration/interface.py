"""What the calibration search asks of an accountant, and nothing more.

The search (`search.py`, `bracket.py`) finds the least private value of one
parameter whose ε meets a target. It asks an `Oracle` for a candidate's ε
and never an accountant, so it is tested against closed forms
(tests/accounting/calibration_search_test.py), as dp_accounting's
`mechanism_calibration` is tested against a fake accountant
(https://github.com/google/differential-privacy/blob/main/python/dp_accounting/dp_accounting/mechanism_calibration.py).
`oracle.Epsilon` is the one implementation that consults the accountant.

A searched parameter is read through an `Axis`: its finite search interval,
which end is the most private, and the coordinate the root search works in.
"""

import dataclasses
import math
from typing import Optional, Protocol

_OPEN_END_MARGIN = 1e-4   # distance kept from an open end of a bounded range
_UNBOUNDED_SPAN = 1e6     # an unbounded float range is searched up to default · this
# (1e3 capped the Gaussian at n = 1000, d = 1.2M: noise multiplier 1e3·c∞
# left ε = 8.18 over 2,000 rounds, so ε = 3 read as unreachable)

#: A most private end whose cheap bound is within this factor of the target
#: is evaluated exactly first (`search.search_last`).
SAFE_END_FIRST = 2.0


@dataclasses.dataclass(frozen=True)
class EpsilonEstimate:
  """A candidate's ε as an `Oracle` decided it.

  Attributes:
    epsilon: the whole run's ε (inf where out of reach); when `lower_bound`,
      a lower bound on it that already exceeds the target.
    lower_bound: whether `epsilon` is only the screen's lower bound (the
      candidate is certified to miss the target without its exact ε).
  """
  epsilon: float
  lower_bound: bool = False


class Oracle(Protocol):
  """The ε of a candidate, as the search needs it.

  `candidate` is whatever the search's `build(value)` returns (a mechanism
  for calibration, the value itself for a fake).
  """

  def epsilon(self, candidate, screen: bool = True) -> EpsilonEstimate:
    """The candidate's ε.

    Args:
      candidate: the candidate to account.
      screen: whether a cheap lower bound that already exceeds the target may
        answer instead of the exact ε (`EpsilonEstimate.lower_bound`).

    Returns:
      An `EpsilonEstimate`.
    """

  def lower_bound(self, candidate) -> Optional[float]:
    """A cheap lower bound on the candidate's ε, None where none applies.

    Args:
      candidate: the candidate to bound.

    Returns:
      The bound, or None.
    """

  def looseness(self) -> Optional[float]:
    """ε / lower bound at the last exact evaluation that had both, or None.

    Returns:
      The ratio the search scales bounds by to aim its first exact step.
    """


@dataclasses.dataclass(frozen=True)
class SearchLimits:
  """The root search's limits and tolerances (passed in, never patched).

  Attributes:
    max_iterations: iterations of Brent's method, at most.
    proxy_steps: exact evaluations steered by the cheap bound, at most
      (`bracket.bracket_from_bound`).
    unscreened_within: Brent's method inside a bracket whose unsafe end's ε
      is under this × the target evaluates without the screen: a bound
      there is at most that ε, so it certifies a candidate only at a
      looseness under it (~1.2 at n = 1,000).
    aim_slack: how far below the aim the bound-guided step may land.
    no_plateau: Brent's method shifts ε by a floor only where the least ε
      seen is below (1 - this) × the target.
    safe_end_first: `SAFE_END_FIRST`.
    guess_steps: exact evaluations the secant steps from a guess may take
      (`search._from_guess`); 0 ignores guesses.
  """
  max_iterations: int = 60
  proxy_steps: int = 4
  unscreened_within: float = 1.1
  aim_slack: float = 0.03
  no_plateau: float = 0.05
  safe_end_first: float = SAFE_END_FIRST
  guess_steps: int = 5


def float_interval(spec):
  """Finite (lo, hi) inside a real tunable's range; open ends kept off by a margin.

  A scale parameter ((0, inf) or [0, inf)) is searched over default·[1e-6, 1e6].

  Args:
    spec: a `mechanisms.Tunable` of kind float.

  Returns:
    (lo, hi), both finite.
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


@dataclasses.dataclass
class Axis:
  """A real tunable's search coordinate x: log v for a scale parameter (range
  ratio > 100), v otherwise; `value(x)` maps back, exact at both ends and
  clamped into the range between.

  Attributes:
    lo, hi: the search interval (`float_interval`).
    safe: the most private end.
    unsafe: the least private end.
    geometric: whether x = log v.
  """
  lo: float
  hi: float
  safe: float
  unsafe: float
  geometric: bool

  @classmethod
  def of(cls, spec) -> 'Axis':
    """The axis of a real `mechanisms.Tunable` with a privacy direction.

    Args:
      spec: the tunable.

    Returns:
      Its `Axis`.
    """
    lo, hi = float_interval(spec)
    safe, unsafe = (hi, lo) if spec.more_private == 'higher' else (lo, hi)
    return cls(lo, hi, safe, unsafe, lo > 0 and hi / lo > 100)

  def x(self, v: float) -> float:
    """The coordinate of the value `v`.

    Args:
      v: a value in [lo, hi].

    Returns:
      log v on a geometric axis, else v.
    """
    return math.log(v) if self.geometric else float(v)

  def value(self, x: float) -> float:
    """The value at coordinate `x`.

    Args:
      x: a coordinate.

    Returns:
      The value, exactly `safe` or `unsafe` at their coordinates, else
      clamped into [lo, hi].
    """
    for end in (self.safe, self.unsafe):
      if x == self.x(end):
        return end
    return min(max(math.exp(x) if self.geometric else float(x), self.lo), self.hi)
