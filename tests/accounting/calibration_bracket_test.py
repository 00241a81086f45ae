"""calibration.bracket against closed-form ε and bounds (no accountant)."""

import math

import pytest

from tff_quant.accounting.calibration import bracket
from tff_quant.accounting.calibration import interface
from tff_quant.mechanisms import base

Q = base.Tunable('q', 0.5, low=0.0, high=1.0, low_open=True, high_open=True,
                 more_private='lower')


def _looser_bound_search(looseness, limits=interface.SearchLimits()):
  """(bracket, exact evaluations) on ε(x) = e^{2x} (x a log-parameter) with
  a cheap bound ε(x)/looseness(x)."""
  calls = []

  def eps_x(x):
    calls.append(x)
    return math.exp(2 * x)

  out = bracket.bracket_from_bound(
      bracket.OnAxis(eps_x, lambda x: math.exp(2 * x) / looseness(x)),
      x_ok=-5.0, x_unsafe=5.0, target=10.0, x_tol=1e-3, limits=limits)
  return out, calls


@pytest.mark.parametrize('looseness', [lambda x: 1.05, lambda x: 1.3 + 0.1 * x,
                                       lambda x: 2.0 - 0.2 * math.tanh(x)])
def test_the_cheap_bound_brackets_the_target_in_few_exact_evaluations(looseness):
  """The bracket straddles the root x* = ln(10)/2 (safe end exact, unsafe end
  exact or certified by the bound), in at most proxy_steps exact evaluations."""
  (ok, bad), calls = _looser_bound_search(looseness)
  root = math.log(10.0) / 2
  assert ok < bad and ok <= root + 1e-12 and root - 1e-12 <= bad   # a secant
  # through two exact points of log ε = 2x can land on the root itself
  assert len(calls) <= interface.SearchLimits().proxy_steps
  # from a span of 10: one end within 0.01 of the root, the bracket < 0.5
  assert min(root - ok, bad - root) < 0.01 and bad - ok < 0.5


def test_the_exact_evaluations_stay_within_the_limit_passed():
  (ok, bad), calls = _looser_bound_search(
      lambda x: 1.3 + 0.1 * x, interface.SearchLimits(proxy_steps=1))
  assert len(calls) == 1 and ok < math.log(10.0) / 2 < bad


def test_the_secant_on_the_shifted_log_lands_where_a_log_secant_overshoots():
  """ε = 8.3 + 340 q (x = log q; RQM 8 bits, n = 1,000, Δ = 64c) with a
  looseness drifting 1.46 -> 1.2: the secant through two exact points on
  log(ε - floor), floor below the least ε known, reaches the window
  [9.9, 10] at the third evaluation; on log ε it overshoots (a fourth)."""
  def search(least):
    calls = []
    eps = lambda x: 8.3 + 340 * math.exp(x)
    loose = lambda x: 1.46 - 0.06 * (x - math.log(1e-4))
    bracket.bracket_from_bound(
        bracket.OnAxis(lambda x: calls.append(eps(x)) or eps(x),
                       lambda x: eps(x) / loose(x)),
        x_ok=math.log(1e-4), x_unsafe=0.0, target=10.0, x_tol=5e-3, aim=9.95,
        known=bracket.Known(looseness=1.46, least=least))
    return calls

  shifted, plain = search(8.334), search(None)
  assert len(shifted) == 3 and 9.9 <= shifted[-1] <= 10.0
  assert len(plain) == 4 and plain[2] > 10.0


def test_a_secant_through_two_equal_logs_is_skipped_not_divided_by_zero():
  """Two exact ε a float apart (10 and 10 + 2e-15) have the same log: the
  secant is skipped, the search goes on."""
  values = iter([10.0, 10.000000000000002] + [9.0] * 5)
  seen = {}

  def eps_x(x):
    if x not in seen:
      seen[x] = next(values)
    return seen[x]

  bracket.bracket_from_bound(bracket.OnAxis(eps_x, lambda x: 10.0 * x),
                             0.0, 1.0, 5.0, 1e-3, aim=5.0 * (1 - 1e-3))
  assert len(seen) >= 2


def test_the_cheap_bound_is_not_used_where_it_does_not_apply():
  assert bracket.bracket_from_bound(
      bracket.OnAxis(math.exp, lambda x: None), -5.0, 5.0, 10.0, 1e-3) is None
  # a bound that never exceeds the target certifies nothing
  assert bracket.bracket_from_bound(
      bracket.OnAxis(math.exp, lambda x: 1.0), -5.0, 5.0, 10.0, 1e-3) is None


def test_exact_points_that_bracket_the_target_are_interpolated_on_the_value():
  """RQM 8 bits, n = 1,000, Δ = 128c in miniature: ε near linear in q from
  9.28 at the hint, a bound 1.17-1.23x looser. From the hint's exact ε, the
  bound aims one exact evaluation past the target, then regula falsi on q
  lands mid-window [9.9, 10] without a bound taken there (on log q the
  search's own landed at 9.875, under it)."""
  eps = lambda q: 9.28 + 241.7 * (q - 0.018811) + 4000 * (q - 0.018811)**2
  loose = lambda q: 1.169 + 12.8 * (q - 0.018811)   # 1.23 at q = 0.0237
  axis = interface.Axis.of(Q)
  screened, unscreened, bounds = [], [], []

  def bound(x):
    bounds.append(x)
    return eps(math.exp(x)) / loose(math.exp(x))

  bracket.bracket_from_bound(
      bracket.OnAxis(
          lambda x: screened.append(eps(math.exp(x))) or screened[-1], bound,
          lambda x: unscreened.append(eps(math.exp(x))) or unscreened[-1],
          axis),
      math.log(0.018811), 0.0, 10.0, 5e-3, aim=9.95,
      known=bracket.Known(looseness=1.17, least=9.28, ok_eps=9.28))
  assert len(screened) == 1 and screened[0] > 10.0   # aimed past it
  # 9.932 (on log q: 9.903, the window's edge)
  assert len(unscreened) == 1 and abs(unscreened[0] - 9.95) < 0.03
  assert len(bounds) <= 5


def test_bounds_taken_while_stepping_narrow_the_search_on_the_bound():
  """RQM 8 bits, n = 1,000, Δ = 64c in miniature (ε = 8.3 + 340 q, the
  bound 1.46 -> 1.2x looser), from the most private end's exact ε: the
  stepping's bounds bracket where the scaled bound meets the aim, so the
  regula falsi on the bound starts there, and stops within aim_slack of
  the aim: 7 bounds in all (15 from the whole stepped span to 1%), the
  window reached at the third exact evaluation."""
  eps = lambda x: 8.3 + 340 * math.exp(x)
  loose = lambda x: 1.46 - 0.06 * (x - math.log(1e-4))
  bounds, exact = [], []
  bracket.bracket_from_bound(
      bracket.OnAxis(lambda x: exact.append(eps(x)) or exact[-1],
                     lambda x: bounds.append(x) or eps(x) / loose(x)),
      x_ok=math.log(1e-4), x_unsafe=0.0, target=10.0, x_tol=5e-3, aim=9.95,
      known=bracket.Known(looseness=1.46, least=8.334, ok_eps=8.334))
  assert len(bounds) <= 7
  assert len(exact) == 3 and 9.9 <= exact[-1] <= 10.0
