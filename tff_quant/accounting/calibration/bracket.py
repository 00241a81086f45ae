"""A bracket around the target found mostly from a cheap lower bound on ε.

The screening's lower bound (`lower_bound.epsilon_at_least`, a fraction of
the exact ε's cost: docs/performance.md) is monotone along the
privacy direction as ε is, so stepping on it alone certifies an unsafe end,
and scaled by its looseness ε/bound it aims the first exact evaluations at
the window the root search stops in. Accountant-free: the caller passes the
oracle's answers as functions of the search coordinate (`OnAxis`).
"""

import dataclasses
import math
from typing import Callable, Dict, Optional, Tuple

from tff_quant.accounting.calibration import interface


@dataclasses.dataclass(frozen=True)
class OnAxis:
  """An oracle's answers as functions of the search coordinate x.

  Attributes:
    epsilon: the (screened) ε at x.
    bound: the cheap lower bound on ε at x, None where it does not apply.
    unscreened: the ε at x without the screen (default `epsilon`): for
      interpolated points near the target, where a bound rarely exceeds it.
    axis: the `interface.Axis` x is read on (default: x is the value).
  """
  epsilon: Callable[[float], float]
  bound: Callable[[float], Optional[float]]
  unscreened: Optional[Callable[[float], float]] = None
  axis: Optional[interface.Axis] = None


@dataclasses.dataclass(frozen=True)
class Known:
  """What is known before the bracket is sought.

  Attributes:
    looseness: ε / bound measured at an earlier candidate (default 1).
    least: the least exact ε known, if any.
    ok_eps: the exact ε at the safe start, if known.
  """
  looseness: Optional[float] = None
  least: Optional[float] = None
  ok_eps: Optional[float] = None


def bracket_from_bound(f: OnAxis, x_ok: float, x_unsafe: float, target: float,
                       x_tol: float, aim: Optional[float] = None,
                       known: Known = Known(),
                       limits: interface.SearchLimits = interface.SearchLimits()
                       ) -> Optional[Tuple[float, float]]:
  """(safe x, unsafe x) close around the target, or None where the bound does
  not apply or certifies nothing.

  `x_ok` need not have been evaluated: its bound must not exceed the
  target, and it stays unverified unless an exact evaluation finds a safe x.
  Every x whose bound exceeds the target is unsafe, so stepping out from
  `x_ok` on the bound alone certifies an unsafe end (the far end, the
  slowest law to bound, only if the steps reach it).
  The first exact ε is evaluated where the bound, scaled by its looseness
  r = ε/bound (`known.looseness`, or the one at x_ok where `known.ok_eps` is
  given; else 1), meets `aim`. The next exact points are aimed from exact
  points alone (`_Closing.interpolated`). At most `limits.proxy_steps` exact
  evaluations.

  Args:
    f: the oracle along x.
    x_ok: a safe start (its bound within the target).
    x_unsafe: the least private end's x.
    target: the ε to meet.
    x_tol: the width at which the bracket is narrow enough.
    aim: where exact steps aim (default the target; `search.search_last`
      aims inside its stopping window).
    known: what is known already.
    limits: the search's limits.

  Returns:
    (x_ok, x_bad) bracketing the target, or None.
  """
  if not math.isfinite(x_unsafe):
    return None
  closing = _Closing(f, target, target if aim is None else aim, x_tol, limits)
  b = closing.bound(x_ok)
  if b is None or b > target:
    return None
  x_bad = closing.step_out(x_ok, x_unsafe)
  if x_bad is None:
    return None
  return closing.close_in(x_ok, x_bad, known)


class _Closing:
  """The state of one `bracket_from_bound`: bounds taken, and the window."""

  def __init__(self, f, target, aim, x_tol, limits):
    self.f, self.target, self.aim, self.x_tol = f, target, aim, x_tol
    self.limits = limits
    self.bound_at: Dict[float, Optional[float]] = {}
    # `aim` sits mid-window: the window [target (1 - rtol), target] is
    # 2 log(aim / target) wide in log ε. The bound scaled by a looseness
    # measured elsewhere is no closer to ε than the looseness drifts (RQM
    # 8 bits, n = 1,000, Δ = 64c: 1.46 -> 1.33 -> 1.26 along the steps), so
    # the search on it stops within `aim_slack` below the aim, if wider.
    self.window = min(2 * math.log(min(aim / target, 1 - 1e-4)),
                      math.log1p(-limits.aim_slack))
    axis = f.axis
    self.to_value, self.to_x = ((axis.value, axis.x) if axis is not None else
                                (lambda y: y, lambda y: y))

  def bound(self, x):
    """The cheap bound at x (cached; None where it does not apply)."""
    if x not in self.bound_at:
      self.bound_at[x] = self.f.bound(x)
    return self.bound_at[x]

  def step_out(self, x_ok, x_unsafe):
    """The first x out from `x_ok`, doubling, that the bound rules out; None
    where the bound stops applying or rules out nothing."""
    span, lo, step = x_unsafe - x_ok, x_ok, (x_unsafe - x_ok) / 16
    while True:
      left = x_unsafe - lo
      x = x_unsafe if abs(left) <= abs(span) / 64 else lo + math.copysign(
          min(abs(step), abs(left) / 2), span)
      b = self.bound(x)
      if b is None:
        return None
      if b > self.target:
        return x
      if x == x_unsafe:
        return None   # the bound certifies nothing
      lo, step = x, 2 * step

  def close_in(self, x_ok, x_bad, known):
    """The bracket narrowed by at most `proxy_steps` exact evaluations."""
    target, aim, bound = self.target, self.aim, self.bound
    exact_x = self.f.unscreened or self.f.epsilon
    ratio = known.looseness or 1.0   # r = ε / bound
    exact = {}   # x -> ε at the exact evaluations, in order
    unbounded = None   # the last exact point, when its bound was not taken
    if (known.ok_eps is not None and 0 < known.ok_eps < math.inf
        and 0 < bound(x_ok)):
      exact[x_ok] = known.ok_eps   # known already
      ratio = known.ok_eps / bound(x_ok)
    for _ in range(self.limits.proxy_steps):
      x = self.interpolated(exact, x_ok, x_bad, known.least)
      if x is not None:   # interpolated: no bound taken there
        e, b = exact_x(x), None
      else:
        if unbounded is not None:   # the looseness at the last exact point
          b_last = bound(unbounded)
          if b_last is not None and 0 < b_last < math.inf:
            ratio = exact[unbounded] / b_last
          unbounded = None
        if not bound(x_ok) * ratio <= aim < bound(x_bad) * ratio:
          break
        x = self.last_within(ratio, x_ok, x_bad)
        if x is None or x in (x_ok, x_bad):
          break
        e, b = self.f.epsilon(x), bound(x)
      if e <= target:
        x_ok = x
      else:
        x_bad = x
      if (abs(x_bad - x_ok) <= self.x_tol or aim - (target - aim) <= e <= target
          or not (0 < e < math.inf and (b is None or 0 < b < math.inf))):
        break
      exact[x] = e
      if b is not None:
        ratio = e / b
      unbounded = x if b is None else None
    return x_ok, x_bad

  def interpolated(self, exact, x_ok, x_bad, least):
    """The next exact point aimed from exact points alone, or None.

    * Once a safe and an unsafe exact point bracket the target: regula
      falsi on ε against the parameter's value, inside the bracket (RQM's ε
      is near linear in q there: Δ = 128c, n = 1,000, 9.28 and 10.47 ->
      9.91, where the scaled bound took 4 bounds to land at 9.53; QMGeo's
      ε jumps 10.3 -> 17.9 over 2% of p, and this stays inside).
    * While the last two lie on one side of it: a secant on log(ε - floor),
      floor just below `least` (else on log ε): the looseness drifts (RQM 8
      bits, Δ = 16c: 1.09 -> 1.20 over 20% of q), and RQM's ε - floor is
      near linear in q, where a secant on log ε overshot (10.47 aiming at
      9.95; this: 9.98).
    """
    aim, target = self.aim, self.target
    inside = lambda x: min(x_ok, x_bad) < x < max(x_ok, x_bad)
    if x_ok in exact and x_bad in exact:
      (v1, e1), (v2, e2) = [(self.to_value(y), exact[y]) for y in (x_ok, x_bad)]
      x = self.to_x(v1 + (aim - e1) * (v2 - v1) / (e2 - e1))
      return x if inside(x) else None
    if not (len(exact) >= 2 and len({e > target for e in
                                     list(exact.values())[-2:]}) == 1):
      return None
    (x1, l1), (x2, l2) = ends = list(exact.items())[-2:]
    low = min(e for _, e in ends)
    # (`least` may be the first of the two: the most private end's ε, near
    # the floor, with a point far from it: RQM 8 bits, n = 1,000, Δ = 64c:
    # 8.54 at q = 1e-4 and 9.04 -> 9.96 in the window)
    base = (0.0 if least is None or not least <= min(low, aim) else
            least - 1e-2 * (target - least))
    f = lambda e: math.log(e - base)
    if l1 == l2 or f(l2) == f(l1):
      return None
    x = x2 + (f(aim) - f(l2)) * (x2 - x1) / (f(l2) - f(l1))
    return x if inside(x) else None

  def _g(self, ratio, x):
    """log(bound·r / aim) at x; None where the bound does not apply."""
    b = self.bound(x)
    return None if b is None else math.log(max(b * ratio, 1e-300) / self.aim)

  def last_within(self, ratio, lo, hi):
    """An x in [lo, hi) where bound(x)·r <= aim, within the window below it
    or the last such x to x_tol / 4 (true at lo, false at hi); None where
    the bound does not apply. Illinois regula falsi on log(bound·r / aim):
    3-6 bounds where bisection needs 12-17 (docs/performance.md).
    """
    g = lambda x: self._g(ratio, x)
    g_lo, g_hi = g(lo), g(hi)
    if g_lo is None or g_hi is None:
      return None
    lo, g_lo, hi, g_hi = self._narrowed(g, lo, g_lo, hi, g_hi)
    w_lo, w_hi, side = g_lo, g_hi, 0   # the secant's (Illinois-halved) ends
    while abs(hi - lo) > self.x_tol / 4 and not self.window <= g_lo <= 0:
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

  def _narrowed(self, g, lo, g_lo, hi, g_hi):
    """(lo, g(lo), hi, g(hi)) narrowed by the bounds already taken inside
    (lo, hi) (the stepping's)."""
    for x in sorted((x for x in self.bound_at if self.bound_at[x] is not None
                     and 0 < (x - lo) / (hi - lo) < 1),
                    key=lambda x: (x - lo) / (hi - lo)):
      g_x = g(x)
      if g_x <= 0:
        lo, g_lo = x, g_x
      else:
        hi, g_hi = x, g_x
        break
    return lo, g_lo, hi, g_hi
