"""calibration.search against fake oracles with a closed-form ε (no accountant),
as dp_accounting's mechanism_calibration_test tests its search."""

import math
import types

import pytest

from tff_quant.accounting.calibration import interface
from tff_quant.accounting.calibration import search
from tff_quant.mechanisms import base

RTOL = 2e-3
# A scale parameter more private when higher (a noise multiplier), the
# probability of RQM's q (more private when lower) and an integer one.
SIGMA = base.Tunable('sigma', 1.0, low=0.0, low_open=True, more_private='higher')
Q = base.Tunable('q', 0.5, low=0.0, high=1.0, low_open=True, high_open=True,
                 more_private='lower')
LEVELS = base.Tunable('m', 4, low=1, high=10**6, kind=int,
                      more_private='higher')


class FakeOracle:
  """ε(value) in closed form; with `looseness`, a cheap lower bound
  ε/looseness (which answers a screened evaluation where it exceeds
  `target`); the exact evaluations' values in `exact_at`."""

  def __init__(self, eps, looseness=None, target=None):
    self.eps, self.ratio, self.target = eps, looseness, target
    self.exact_at = []

  def epsilon(self, value, screen=True):
    low = self.lower_bound(value)
    if screen and self.target is not None and low is not None and (
        low > self.target):
      return interface.EpsilonEstimate(low, lower_bound=True)
    self.exact_at.append(value)
    return interface.EpsilonEstimate(self.eps(value))

  def lower_bound(self, value):
    return None if self.ratio is None else self.eps(value) / self.ratio

  def looseness(self):
    return None


def _identity(value):
  return value


def _within(eps, target=10.0, rtol=RTOL):
  return target * (1 - rtol) <= eps <= target


@pytest.mark.parametrize('a', [0.3, 7.0, 2e3])
def test_a_over_sigma_is_solved_to_rtol(a):
  """ε(σ) = a/σ (a Gaussian's shape): σ* = a/target, searched on log σ."""
  fake = FakeOracle(lambda s: a / s)
  found = search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL)
  assert _within(found.epsilon)
  assert found.value == pytest.approx(a / 10.0, rel=RTOL)
  assert found.value >= a / 10.0   # safe: at least as much noise
  assert found.least <= found.epsilon and found.bounded is None
  assert len(fake.exact_at) <= 25


def test_a_plateau_then_a_steep_rise_is_solved():
  """ε flat at 5 up to q = 0.5, then 5 + 100 (q - 0.5): the root 0.55."""
  eps = lambda q: 5.0 + 100.0 * max(q - 0.5, 0.0)
  found = search.search_last(_identity, Q, 10.0, FakeOracle(eps), None, RTOL)
  assert _within(found.epsilon)
  assert found.value == pytest.approx(0.55, rel=RTOL)


def test_a_target_no_value_meets_names_the_most_private_epsilon():
  fake = FakeOracle(lambda q: 20.0 + q)
  found = search.search_last(_identity, Q, 10.0, fake, None, RTOL)
  assert found.value is None
  assert found.epsilon == found.least == pytest.approx(20.0, abs=1e-3)
  assert found.bounded is None   # computed, not bounded


def test_a_lower_bound_over_the_target_answers_and_is_reported():
  """The screen's bound already misses at the most private end: the answer
  names the candidate whose ε is only bounded, and no exact ε is taken."""
  fake = FakeOracle(lambda q: 50.0 + q, looseness=1.5, target=10.0)
  found = search.search_last(_identity, Q, 10.0, fake, None, RTOL)
  assert found.value is None and found.bounded == pytest.approx(1e-4)
  assert found.epsilon == pytest.approx(50.0 / 1.5, rel=1e-3)
  assert fake.exact_at == []


def test_a_target_every_value_meets_returns_the_least_private_end():
  found = search.search_last(_identity, Q, 10.0, FakeOracle(lambda q: q),
                             None, RTOL)
  assert found.value == interface.Axis.of(Q).unsafe and found.epsilon < 1


@pytest.mark.parametrize('target, expected', [(3.0, 34), (100.0, 1),
                                              (0.5, 200)])
def test_an_integer_is_bisected_within_the_bits(target, expected):
  """ε(m) = 100/m, m within 8 bits (m <= 255): the least m meeting it."""
  build = lambda m: types.SimpleNamespace(
      m=m, bits_per_coordinate=math.ceil(math.log2(m + 1)))
  fake = FakeOracle(lambda c: 100.0 / c.m)
  found = search.search_last(build, LEVELS, target, fake, 8, RTOL)
  assert found.value == expected and found.epsilon <= target
  assert len(fake.exact_at) <= 2 + math.ceil(math.log2(255))
  assert search.largest_int_within_bits(build, LEVELS, 8) == 255
  missing = search.search_last(build, LEVELS, 0.1, fake, 8, RTOL)
  assert missing.value is None and missing.epsilon == 100.0 / 255


def test_no_integer_within_the_bits_is_nan():
  build = lambda m: types.SimpleNamespace(m=m, bits_per_coordinate=64)
  found = search.search_last(build, LEVELS, 3.0, FakeOracle(lambda c: 1.0),
                             8, RTOL)
  assert found.value is None and math.isnan(found.least)


def test_a_non_monotone_epsilon_still_returns_a_value_meeting_the_target():
  """ε(q) oscillating: the search makes no claim of the boundary, but what
  it returns was evaluated and meets the target."""
  eps = lambda q: 12.0 * q + 3.0 * math.sin(40.0 * q) + 5.0
  fake = FakeOracle(eps)
  found = search.search_last(_identity, Q, 10.0, fake, None, RTOL)
  assert found.value in fake.exact_at and eps(found.value) <= 10.0


def test_an_error_that_falls_along_the_privacy_direction_is_not_pruned_on():
  with pytest.raises(search.NotMonotone):
    search.least_private_to_beat(_identity, Q, 0.5,
                                 lambda q: math.sin(10.0 * q))


def test_the_least_private_value_to_beat_an_error():
  """error(q) = 1 - q (rising toward the more private low q): q > 0.7 beats
  0.3; none beats 0; every value beats 2."""
  error = lambda q: 1.0 - q
  at = search.least_private_to_beat(_identity, Q, 0.3, error)
  assert at == pytest.approx(0.7, abs=1e-9) and at <= 0.7
  assert search.least_private_to_beat(_identity, Q, 0.0, error) is None
  assert search.least_private_to_beat(_identity, Q, 2.0, error) == (
      interface.Axis.of(Q).safe)


def test_a_search_narrowed_from_just_below_the_target_interpolates():
  """A grid point's answer at the scan's width (ε 9.946) searched again to
  rtol = 2e-3 (ε(q) near linear, as RQM's at Δ = 512c, n = 1,000): Brent
  on log ε lands in [9.98, 10] within 3 exact evaluations. Its floor just
  below 9.946 made the transform a log near 0 and Brent bisected (6)."""
  eps = lambda q: 9.946 + 85.0 * (q - 0.0993)
  fake = FakeOracle(eps, 1.15)
  found = search.search_last(_identity, Q, 10.0, fake, None, RTOL, 0.0993,
                             eps(0.0993), {0.0993: eps(0.0993)})
  assert _within(found.epsilon)
  assert len(fake.exact_at) <= 3


def test_the_most_private_end_is_not_evaluated_when_the_bound_defers_it():
  """ε(q) = 50 q^1.2 and a bound 1.15x looser: the search never evaluates
  the most private end exactly (the slowest law but one) and stops inside
  [target (1 - rtol), target]."""
  fake = FakeOracle(lambda q: 50.0 * q**1.2, 1.15)
  found = search.search_last(_identity, Q, 10.0, fake, None, RTOL)
  assert min(fake.exact_at) > 0.01   # the safe end is 1e-4
  assert _within(found.epsilon)
  assert found.value == pytest.approx((10.0 / 50.0)**(1 / 1.2), rel=RTOL)
  assert len(fake.exact_at) <= 3


def test_a_most_private_end_close_to_the_target_is_evaluated_first():
  """The bound at the safe end (9.4) is within SAFE_END_FIRST of the target
  but the exact ε (17) misses it: one exact evaluation ends the search."""
  fake = FakeOracle(lambda q: 17.0 + 50.0 * q**1.2, 1.8)
  found = search.search_last(_identity, Q, 10.0, fake, None, RTOL)
  assert found.value is None and found.epsilon == found.least > 10.0
  assert len(fake.exact_at) == 1
  assert fake.exact_at[0] == pytest.approx(1e-4, rel=1e-3)
  # Told to trust a bound within 1.8x of the target, it defers the end.
  deferred = FakeOracle(fake.eps, 1.8)
  found = search.search_last(
      _identity, Q, 10.0, deferred, None, RTOL,
      limits=interface.SearchLimits(safe_end_first=1.01))
  assert found.value is None and deferred.exact_at[0] > 1e-3


def test_known_evaluations_that_bracket_the_target_start_the_root_search():
  """`known` bracketing the root q* = 0.2616 of ε(q) = 50 q^1.2: no
  stepping, every evaluation inside the bracket, and the evaluations added
  to it."""
  eps = lambda q: 50.0 * q**1.2
  fake = FakeOracle(eps, 1.15)
  known = {0.25: eps(0.25), 0.27: eps(0.27), 0.01: eps(0.01)}
  found = search.search_last(_identity, Q, 10.0, fake, None, RTOL, 0.25,
                             eps(0.25), known)
  assert _within(found.epsilon)
  assert len(fake.exact_at) <= 2 and all(0.25 < q < 0.27 for q in fake.exact_at)
  assert set(fake.exact_at) <= set(known)


def test_the_axis_is_geometric_for_a_scale_and_exact_at_its_ends():
  sigma, q = interface.Axis.of(SIGMA), interface.Axis.of(Q)
  assert sigma.geometric and (sigma.safe, sigma.unsafe) == (1e6, 1e-6)
  assert sigma.value(sigma.x(sigma.safe)) == sigma.safe
  assert q.geometric and q.safe == 1e-4 and q.unsafe == 1.0 - 1e-4
  assert q.value(100.0) == q.hi   # clamped
  linear = interface.Axis.of(base.Tunable('t', 0.25, low=0.0, high=0.5,
                                          more_private='lower'))
  assert not linear.geometric and linear.value(0.3) == 0.3


def test_an_integer_valued_epsilon_stops_on_the_first_step_at_the_target():
  """ε(q) = ⌈20 q⌉ (plateaus): every q in (0.45, 0.5] has ε = 10, within
  rtol below the target, so the search may stop at any of them; none past
  0.5 is returned."""
  fake = FakeOracle(lambda q: float(math.ceil(20.0 * q)))
  found = search.search_last(_identity, Q, 10.0, fake, None, RTOL)
  assert found.epsilon == 10.0 and 0.45 < found.value <= 0.5


def test_a_guess_at_the_answer_takes_one_exact_evaluation():
  """ε = a/σ and a guess inside the window: nothing else is evaluated."""
  fake = FakeOracle(lambda s: 3.0 / s)
  guess = 3.0 / (10.0 * (1 - RTOL / 2))
  found = search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL,
                             guess=guess)
  assert fake.exact_at == [pytest.approx(guess, rel=1e-12)]
  assert found.value == fake.exact_at[0] and _within(found.epsilon)


@pytest.mark.parametrize('power', [1.0, 2.7, 8.0])
@pytest.mark.parametrize('off', [0.5, 0.97, 1.3, 4.0])
def test_a_guess_off_the_answer_finds_the_same_root_in_fewer_evaluations(
    power, off):
  """ε = (a/σ)^p, steeper than the 1/σ the first step assumes: the secant
  steps still meet the window, at most as many exact evaluations as
  without a guess, and the same root to rtol."""
  eps = lambda s: (0.4 / s)**power
  root = 0.4 / 10.0**(1 / power)
  plain = FakeOracle(eps)
  unguided = search.search_last(_identity, SIGMA, 10.0, plain, None, RTOL)
  fake = FakeOracle(eps)
  found = search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL,
                             guess=off * root)
  assert _within(found.epsilon)
  assert found.value == pytest.approx(root, rel=RTOL)
  assert found.value >= root
  assert len(fake.exact_at) <= len(plain.exact_at)
  assert unguided.value == pytest.approx(found.value, rel=RTOL)


def test_a_guess_at_the_least_resolvable_value_is_the_answer_at_once():
  """ε infinite below σ = 1 (a law out of reach: found at once), 2/σ above,
  so the target is out of reach and the answer is the least resolvable σ.
  A guess there (`ModularNoiseMechanism.gaussian_matched` clamps to it)
  takes one finite evaluation; the steps below it cost nothing."""
  eps = lambda s: math.inf if s < 1.0 else 2.0 / s
  fake = FakeOracle(eps)
  found = search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL,
                             guess=1.0)
  assert found.value == pytest.approx(1.0, rel=1e-12)
  assert len([v for v in fake.exact_at if v >= 1.0]) == 1


def test_a_guess_where_the_law_is_out_of_reach_steps_toward_privacy():
  """The same ε with a guess at 0.01: 4x steps up to a finite value, then
  the bracket halves to the least resolvable σ (within rtol)."""
  eps = lambda s: math.inf if s < 1.0 else 2.0 / s
  found = search.search_last(_identity, SIGMA, 10.0, FakeOracle(eps), None,
                             RTOL, guess=0.01)
  assert found.value == pytest.approx(1.0, rel=RTOL) and found.value >= 1.0


def test_a_guess_is_ignored_with_no_guess_steps():
  eps = lambda s: 3.0 / s
  plain, fake = FakeOracle(eps), FakeOracle(eps)
  search.search_last(_identity, SIGMA, 10.0, plain, None, RTOL)
  search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL, guess=0.2,
                     limits=interface.SearchLimits(guess_steps=0))
  assert fake.exact_at == plain.exact_at


@pytest.mark.parametrize('power', [2.7, 8.0])
def test_a_measured_rate_carried_to_the_first_step_lands_at_once(power):
  """ε = (a/σ)^p, a guess 2% below the root: without a rate the first step
  assumes p = 1 and needs more steps; with the slope the search measured
  (`SearchResult.rate`, ≈ p), the first step lands in the window: two exact
  evaluations."""
  eps = lambda s: (0.4 / s)**power
  root = 0.4 / 10.0**(1 / power)
  plain = FakeOracle(eps)
  first = search.search_last(_identity, SIGMA, 10.0, plain, None, RTOL,
                             guess=0.98 * root)
  assert first.rate == pytest.approx(power, rel=0.02)
  fake = FakeOracle(eps)
  found = search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL,
                             guess=0.98 * root, guess_rate=first.rate)
  assert _within(found.epsilon) and len(fake.exact_at) == 2
  assert len(plain.exact_at) > 2


def test_a_hopeless_value_ends_the_search():
  """ε = 3/σ: `hopeless` is asked only at evaluated values missing the
  target; where it holds the search ends there (`SearchResult.hopeless`,
  no value); where it never holds the search is the one without it."""
  eps = lambda s: 3.0 / s
  asked = []

  def never(value):
    asked.append(value)
    return False
  plain, fake = FakeOracle(eps), FakeOracle(eps)
  base = search.search_last(_identity, SIGMA, 10.0, plain, None, RTOL,
                            guess=0.1)
  same = search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL,
                            guess=0.1, hopeless=never)
  assert fake.exact_at == plain.exact_at and same.value == base.value
  assert asked and all(eps(v) > 10.0 for v in asked)
  stopped = FakeOracle(eps)
  found = search.search_last(_identity, SIGMA, 10.0, stopped, None, RTOL,
                             guess=0.1, hopeless=lambda value: True)
  assert found.hopeless and found.value is None
  assert stopped.exact_at == [pytest.approx(0.1)]
  assert found.epsilon == pytest.approx(30.0)


def test_a_guess_past_the_least_private_end_settles_there_at_once():
  """ε = 2/σ on σ in (0, ∞) axis-clamped: a guess below the axis (the
  least private end) where that end meets the target is the answer in one
  exact evaluation; where it misses, the search goes on as usual."""
  axis = interface.Axis.of(SIGMA)
  fake = FakeOracle(lambda s: 1e-9 / s)
  found = search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL,
                             guess=axis.lo / 2)
  assert found.value == axis.unsafe and len(fake.exact_at) == 1
  steep = FakeOracle(lambda s: 3.0 / s)
  found = search.search_last(_identity, SIGMA, 10.0, steep, None, RTOL,
                             guess=axis.lo / 2)
  assert _within(found.epsilon)


def test_an_evaluated_hint_near_the_guess_starts_the_steps_for_free():
  """ε = (a/σ)^4 with the measured rate: a hint whose ε is known, 1% off the
  guess, is where the steps start: one exact evaluation in all."""
  eps = lambda s: (0.4 / s)**4
  root = 0.4 / 10.0**0.25
  hint = 0.99 * root
  fake = FakeOracle(eps)
  found = search.search_last(_identity, SIGMA, 10.0, fake, None, RTOL,
                             hint=hint, hint_eps=eps(hint), guess=1.01 * hint,
                             guess_rate=4.0)
  assert _within(found.epsilon) and len(fake.exact_at) == 1
