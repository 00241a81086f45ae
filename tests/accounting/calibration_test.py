import functools
import math

import pytest

from tff_quant import mechanisms
from tff_quant.accounting import (calibration, composition,
                                  gaussian_domination, lower_bound, rdp_route,
                                  secure_sum)
from tff_quant.accounting.calibration import interface
from tff_quant.accounting.calibration import oracle
from tff_quant.accounting.calibration import scan as scan_lib

SCHEDULE = dict(delta=1e-5, rounds=20, clients_per_round=10, total_clients=1000)


@pytest.mark.parametrize('name, attr', [('rqm', 'q'), ('pbm', 'theta'),
                                        ('qmgeo', 'p')])
def test_calibrated_parameter_meets_target_and_is_tight(name, attr):
  target = 1.5
  mech = calibration.calibrate(name, target, **SCHEDULE, num_levels=8)
  eps = composition.training_guarantee(mech, use_pld=False, **SCHEDULE,
                                       orders=calibration.FAST_ORDERS).epsilon
  assert eps <= target
  params = mech.params()
  params[attr] = min(getattr(mech, attr) * 1.05, 0.5 if name == 'pbm' else 0.9999)
  looser = type(mech)(**params)
  assert composition.training_guarantee(
      looser, use_pld=False, **SCHEDULE,
      orders=calibration.FAST_ORDERS).epsilon > target * 0.999


def test_unknown_mechanism_and_unreachable_target_raise():
  with pytest.raises(ValueError, match='mechanism'):
    calibration.calibrate('laplace', 1.0, **SCHEDULE)
  with pytest.raises(ValueError, match='not reachable'):
    calibration.calibrate('rqm', 1e-6, **SCHEDULE)


def test_rqm_searches_delta_and_q_jointly_and_reaches_what_q_alone_cannot():
  # The issue's case: the coordinate route at d = 61,706, ε = 10. With Δ fixed
  # at c only q is free and the target is out of reach; scanning Δ reaches it.
  schedule = dict(delta=1 / 3400, rounds=2000, clients_per_round=40,
                  total_clients=3400, dim=61706)
  with pytest.raises(ValueError, match='not reachable') as err:
    calibration.calibrate('rqm', 10.0, **schedule, tune='q', bits=4)
  assert 'gives ε=' in str(err.value)
  report = calibration.calibration_report('rqm', 10.0, **schedule, bits=4)
  mech = report.mechanism
  assert mech.m == 16 and mech.delta > mech.clip   # levels from bits; Δ moved
  assert report.epsilon <= 10.0
  eps = composition.training_guarantee(mech, use_pld=False, **schedule,
                                       orders=report.orders).epsilon
  assert eps == pytest.approx(report.epsilon, rel=1e-12)
  assert report.mse == pytest.approx(mech.worst_case_variance() / 40)
  # The reference is the Gaussian at its best route (here its profile
  # route), which meets the target there and beats the RDP route's.
  gauss = report.gaussian
  assert report.gaussian_route == 'profile'
  assert composition.training_guarantee(
      gauss, use_pld=False, **schedule, use_profile=True).epsilon <= 10.0
  assert report.ratio_to_gaussian == pytest.approx(
      report.mse / (gauss.sigma**2 / 40))
  assert report.ratio_to_gaussian_same_route < report.ratio_to_gaussian


# Skellam at 6 bits is refused here (its modulus cannot hold n = 10 clients'
# common input at c∞ as TFF sizes it); 7 bits carry it.
@pytest.mark.parametrize('name, bits, levels', [('pbm', 4, 16), ('skellam', 7, 128),
                                                ('gaussian', None, None)])
def test_calibration_takes_levels_from_bits_and_compares_with_the_gaussian(
    name, bits, levels):
  report = calibration.calibration_report(name, 2.0, **SCHEDULE, bits=bits)
  assert report.epsilon <= 2.0
  if levels:
    assert report.mechanism.num_levels == levels
  assert report.gaussian_mse > 0 and report.ratio_to_gaussian > 0
  if name == 'gaussian':   # on the RDP route, against itself at its best
    assert report.ratio_to_gaussian_same_route == pytest.approx(1.0, rel=1e-9)
    assert report.ratio_to_gaussian >= report.ratio_to_gaussian_same_route
  # ε ∈ [attained, proved]: the Gaussian's closed form is exact (the two ends
  # meet); Skellam on the coordinate route attains its proved value with the
  # target at (+c, -c) (to the lower rounding of the power sums).
  assert 0 < report.epsilon_attained <= report.epsilon * (1 + 1e-12)
  if name == 'gaussian':
    assert report.epsilon_attained == pytest.approx(report.epsilon, rel=1e-9)
    assert report.attained_inputs == 'exact (closed form)'
  elif name == 'skellam':
    assert report.epsilon_attained == pytest.approx(report.epsilon, rel=1e-6)
    assert report.attained_inputs == ('target 1 coordinate at (+1c, -1c); '
                                      'others 9 at +0c')
  else:
    assert 'others' in report.attained_inputs


def test_bits_below_what_a_mechanism_needs_is_one_clear_error():
  with pytest.raises(ValueError, match='below what bq needs'):
    calibration.calibrate('bq', 2.0, **SCHEDULE, bits=2)


def test_bq_is_calibrated_on_the_conditioned_rdp_route():
  """Every Rényi order of BQ's sum is infinite; its RDP route accounts the
  sum conditioned on a window (docs/privacy.md): m is chosen by ε."""
  mech = calibration.calibrate('bq', 2.0, **SCHEDULE, bits=8)
  acc = composition.RoundAccountant(mech, 10, 1000, 1e-5,
                                    orders=calibration.FAST_ORDERS)
  assert acc.conditioned is not None
  assert acc.epsilon_rdp(20)[0] <= 2.0
  assert mech.bits_per_coordinate <= 8


@pytest.mark.parametrize('kwargs, match', [
    (dict(epsilon=-1.0), 'epsilon'), (dict(epsilon=float('nan')), 'epsilon'),
    (dict(l2_clip=-1.0), 'l2_clip'), (dict(coordinate_clip=float('nan')),
                                      'coordinate_clip'),
    (dict(bits=0), 'bits'), (dict(rtol=0.0), 'rtol')])
def test_bad_numbers_name_the_parameter(kwargs, match):
  args = dict(mechanism='pbm', epsilon=1.0, **SCHEDULE)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    calibration.calibrate(**args)


def test_grid_points_over_the_cost_limit_are_skipped_and_reported():
  """RQM with 16 levels: small Δ puts many levels inside ±c (costly vertex
  search). Over the limit a sub-sum of fewer clients is searched (a looser,
  still proved bound); with even one client's search over it up to Δ = 2c
  (Δ = 4c and 8c cost less: at 4c the critical inputs are a lattice, whose
  breakpoints add no targets), only Δ >= 4c is searched, and the report names
  what was left out (Δ <= c are not among them: `lower_bound` certifies them
  out of reach before any cost arises); with every point over it, one error."""
  schedule = dict(SCHEDULE, dim=100, l2_clip=1.0, coordinate_clip=0.3)
  rungs = len(secure_sum.order_ladder(calibration.FAST_ORDERS))
  mech = lambda ratio: mechanisms.RQM(0.3, ratio * 0.3, 16, 0.5)
  # t* = S/√d, as vector_rdp; its narrow grid, which it takes where the
  # wide one is over the limit.
  cost = lambda ratio, n: secure_sum.search_operations(
      mech(ratio), n, rungs, secure_sum.off_lattice(
          mech(ratio), secure_sum.l2_grid(mech(ratio), 2.0 / 100**0.5, 24, n,
                                          wide=False)),
      secure_sum.DEFAULT_CELLS)
  limits = lambda ops: calibration.Limits(
      accountant=secure_sum.Limits(max_operations=ops))
  assert cost(2.0, 1) > max(cost(4.0, 1), cost(8.0, 1))
  report = calibration.calibration_report(
      'rqm', 3.0, **schedule, bits=4, compare_gaussian=False,
      limits=limits((cost(2.0, 10) * cost(8.0, 10))**0.5))
  assert not report.refused and report.epsilon <= 3.0
  report = calibration.calibration_report(
      'rqm', 3.0, **schedule, bits=4, compare_gaussian=False,
      limits=limits((cost(2.0, 1) * cost(8.0, 1))**0.5))
  assert report.mechanism.delta >= 4 * 0.3 - 1e-12
  assert [g['delta_ratio'] for g in report.refused] == [2.0]
  with pytest.raises(secure_sum.CostError,
                     match=r'No setting of delta_ratio, q could be evaluated.*'
                     r'\[\{.delta_ratio.: 0.25\}, \{.delta_ratio.: 0.5\}, '
                     r'\{.delta_ratio.: 1.0\}\] are out of reach'):
    calibration.calibrate('rqm', 3.0, **schedule, bits=4, limits=limits(1.0))


def test_pruned_grid_points_cannot_beat_the_answer():
  """A grid point is skipped after one ε evaluation when even the least private
  value that would beat the incumbent's MSE misses the target: calibrating it
  alone confirms it ends up worse (or out of reach)."""
  schedule = dict(delta=1 / 3400, rounds=300, clients_per_round=10,
                  total_clients=3400, dim=1000, l2_clip=1.0,
                  coordinate_clip=3 / 1000**0.5)
  report = calibration.calibration_report('rqm', 10.0, **schedule, bits=3,
                                          compare_gaussian=False)
  assert report.pruned >= 1
  assert report.epsilon <= 10.0
  searched = {report.params['delta_ratio']}
  for ratio in mechanisms.RQM.tunable('delta_ratio').grid:
    if ratio in searched:
      continue
    try:
      alone = calibration.calibration_report(
          'rqm', 10.0, **schedule, bits=3, tune='q', delta_ratio=ratio,
          compare_gaussian=False)
    except ValueError:
      continue   # out of reach at this Δ
    assert alone.debiased_error >= report.debiased_error * (1 - 1e-3), ratio


def test_pruning_skips_itself_where_the_error_is_out_of_reach():
  """ddgauss at 11 bits (the fewest that carry its signal here; 8 were used
  before the debiased error): at the least private end of its noise the exact
  noise law (and so the error) is unresolvable; the search goes on unpruned
  there."""
  dim = 61706
  report = calibration.calibration_report(
      'ddgauss', 10.0, delta=1 / 3400, rounds=2000, clients_per_round=40,
      total_clients=3400, dim=dim, l2_clip=1.0, coordinate_clip=3 / dim**0.5,
      bits=11, compare_gaussian=False)
  assert report.epsilon <= 10.0 and report.candidates >= 2
  assert report.mechanism.modulus >= report.mechanism.modulus_needed(
      40, report.signal_bound)


ISSUE = dict(delta=1 / 3400, rounds=300, clients_per_round=100,
             total_clients=3400, dim=61706, l2_clip=1.0,
             coordinate_clip=3 / 61706**0.5)   # issue 36's measurement


@pytest.mark.parametrize('name', ['skellam', 'ddgauss'])
def test_a_modulus_too_small_for_the_summed_noise_is_refused_naming_the_bits(
    name):
  """The issue's case: at 4 bits the summed noise of 100 clients wraps the
  modulus (the old MSE ranked it 0.68x the Gaussian, its slope ~0); refused,
  and the error names the fewest bits that carry the signal, calibrated
  there: 10 (the exact curve's chords between rounding steps need less
  noise than its step bound did, which needed 11), where the decoded mean
  has slope ~1."""
  with pytest.raises(calibration.CannotCarrySignal,
                     match=r'(?s)cannot carry the signal in 4 bits: it needs '
                     r'10 bits: calibrated at bits=10.*DistributedDpSumFactory'
                     ) as err:
    calibration.calibrate(name, 10.0, **ISSUE, bits=4)
  assert err.value.bits_needed == 10
  report = calibration.calibration_report(name, 10.0, **ISSUE, bits=10)
  mech = report.mechanism
  assert mech.modulus == 2**10 and report.epsilon <= 10.0
  assert mech.modulus >= mech.modulus_needed(100, report.signal_bound)
  assert report.slope == pytest.approx(1.0, abs=5e-3)
  # Debiased, it is no better than the Gaussian at the same target.
  assert report.ratio_to_gaussian > 1.0


def test_the_bits_are_not_confirmed_where_the_noise_sum_law_is_too_large():
  """Past `Limits.confirm_support` points (n = 1,000 at 11 bits took over 20 minutes)
  the search stops: the refusal names the first width it did not calibrate
  (every narrower one was refused) and says why."""
  with pytest.raises(calibration.CannotCarrySignal,
                     match=r'it needs at least (\d+) bits \(not confirmed by '
                     r'calibrating at \1 bits: .* 100 clients') as err:
    calibration.calibrate('skellam', 10.0, **ISSUE, bits=4,
                          limits=calibration.Limits(
                              confirm_support=100 * 2**9))
  assert err.value.bits_needed == 10   # 9 refused; 10 is the answer


def test_the_bits_search_stops_at_tffs_limit_and_keeps_the_lower_bound():
  """Skellam at 6 bits, n = 10 (7 carry it): with the search capped below
  7 the error keeps the proved lower bound and says none up to the cap."""
  with pytest.raises(calibration.CannotCarrySignal,
                     match=r'it needs at least 7 bits \(none up to 6') as err:
    calibration.calibrate('skellam', 2.0, **SCHEDULE, bits=6,
                          limits=calibration.Limits(max_modular_bits=6))
  assert err.value.bits_needed == 7


# The papers' quantized Gaussian and randomized projection: no input lattice,
# the quantizer's range tied to c∞ (range_ratio at its default, not searched).
PAPERS_RANGE = dict(lattice=0, tune='noise_multiplier')


@pytest.mark.parametrize('name', ['quantized_gaussian', 'randomized_projection'])
def test_noise_far_wider_than_the_range_is_refused_by_its_slope(name):
  """The issue's case at 4 bits, the papers' variants: the calibrated noise
  is ~80x the quantizer's range, so the decoded mean keeps ~1% of the input
  (slope 0.005-0.01); refused with the slope, and no bits named (more would
  not help). (The registry's defaults search the range: served.)"""
  with pytest.raises(calibration.CannotCarrySignal,
                     match=r'slope 0\.\d+ < 0\.5') as err:
    calibration.calibrate(name, 10.0, **ISSUE, bits=4, **PAPERS_RANGE)
  assert err.value.bits_needed is None


def test_a_refusal_by_slope_takes_one_evaluation_and_agrees_with_the_search(
    monkeypatch):
  """The quantized Gaussian at 4 bits: ε at the noisiest setting that still
  carries the signal already misses the target, so the refusal takes one ε
  evaluation; the full search (prune off) refuses too, at a slope below."""
  calls = []
  epsilon_of = oracle.Epsilon.epsilon

  def screened(self, m, screen=True):   # the screened evaluations, counted
    if screen:
      calls.append(m)
    return epsilon_of(self, m, screen)
  monkeypatch.setattr(oracle.Epsilon, 'epsilon', screened)
  with pytest.raises(calibration.CannotCarrySignal,
                     match=r'slope 0\.4\d+ < 0\.5 where ε >?= \S+ > 10 already'):
    calibration.calibrate('quantized_gaussian', 10.0, **ISSUE, bits=4,
                          **PAPERS_RANGE)
  assert len(calls) == 1
  monkeypatch.setattr(scan_lib.Scan, '_carry_prune', lambda *a: None)
  with pytest.raises(calibration.CannotCarrySignal,
                     match=r'slope 0\.0\d+ < 0\.5 at best'):
    calibration.calibrate('quantized_gaussian', 10.0, **ISSUE, bits=4,
                          **PAPERS_RANGE)
  assert len(calls) > 3


def test_the_report_carries_the_debiased_error_it_minimised_and_the_mse():
  """PBM at 4 bits on the ℓ2 route: the error is judged on shared inputs
  |x| <= clip/√d, unbiased (slope 1), next to the plain MSE over ±c∞."""
  schedule = dict(delta=1 / 3400, rounds=300, clients_per_round=40,
                  total_clients=3400, dim=1000, l2_clip=1.0,
                  coordinate_clip=3 / 1000**0.5)
  report = calibration.calibration_report('pbm', 10.0, **schedule, bits=4)
  mech = report.mechanism
  assert report.signal_bound == pytest.approx(1 / 1000**0.5)
  util = mech.signal_utility(40, report.signal_bound)
  assert report.debiased_error == util.error and report.slope == 1.0
  assert report.mse == mech.decoded_mean_mse(40)
  assert report.ratio_to_gaussian == pytest.approx(
      report.debiased_error / report.gaussian_mse)
  assert report.mse_ratio_to_gaussian == pytest.approx(
      report.mse / report.gaussian_mse)
  assert not report.unusable


def test_report_carries_the_chosen_mechanisms_guarantee_text():
  """Over the cost limit the paper's quantized Gaussian (no input lattice) is
  accounted by one client's local bound; the report's text says so, as the
  guarantee's does. (c∞ = 1: at 0.3 its noise swamps its range, slope 0.26,
  and it is refused.)"""
  schedule = dict(SCHEDULE, dim=100, l2_clip=1.0, coordinate_clip=1.0)
  tiny = secure_sum.Limits(max_operations=1.0)
  report = calibration.calibration_report(
      'quantized_gaussian', 3.0, **schedule, bits=2, compare_gaussian=False,
      lattice=0, tune='noise_multiplier',
      limits=calibration.Limits(accountant=tiny))
  del schedule['coordinate_clip']   # in the mechanism
  again = composition.training_guarantee(
      report.mechanism, orders=calibration.FAST_ORDERS, limits=tiny, **schedule)
  assert 'Per-coordinate divergences: local' in report.assumptions
  assert report.assumptions == again.assumptions


def test_the_reported_orders_reproduce_the_calibrated_epsilon():
  """An accountant given `Calibration.orders` reports the ε calibration proved;
  with every order, where the whole search costs more than the limit, the
  lowest orders it affords are still searched in full
  (`secure_sum.vector_rdp`), so it reports no more than that ε either."""
  dim, n, total, delta, rounds = 1000, 6, 200, 1e-3, 20
  rep = calibration.calibration_report(
      'rqm', 5.0, delta, rounds, n, total, dim, bits=4, l2_clip=1.0,
      coordinate_clip=3 / math.sqrt(dim), compare_gaussian=False)
  assert rep.epsilon <= 5.0 and max(rep.orders) < max(rdp_route.DEFAULT_ORDERS)
  # A limit between the two searches' costs: the calibration's orders fit.
  rungs = lambda orders: len(secure_sum.order_ladder(sorted(set(range(2, max(orders) + 1))))) + 1
  cost = lambda orders: secure_sum.estimated_operations(rep.mechanism, n, rungs(orders))
  assert cost(rep.orders) < cost(rdp_route.DEFAULT_ORDERS)
  limits = secure_sum.Limits(max_operations=cost(rep.orders) * 1.01)
  account = lambda orders: composition.RoundAccountant(
      rep.mechanism, n, total, delta, dim, orders=orders, l2_clip=1.0,
      limits=limits).epsilon_rdp(rounds)[0]
  assert account(rep.orders) == pytest.approx(rep.epsilon, rel=1e-9)
  assert account(rdp_route.DEFAULT_ORDERS) <= rep.epsilon * (1 + 1e-9)


@pytest.mark.parametrize('use_profile', [False, True])
def test_screening_by_a_lower_bound_changes_no_answer(monkeypatch, use_profile):
  """Candidates `lower_bound` certifies out of reach skip the accountant: the
  calibration found is the unscreened one (Δ the same, q to the search's
  tolerance) with fewer evaluations, and an unreachable target's error names
  the same exact ε (the closest grid point evaluated, not bounded). The
  calibration on the profile route too, where only candidates without a
  Gaussian-domination rate are screened."""
  # On the profile route a smaller cohort and target: the same search, at a
  # third of the cost (every candidate's profile is a long loss grid).
  schedule = dict(delta=1 / 3400, rounds=300,
                  clients_per_round=20 if use_profile else 40,
                  total_clients=3400, dim=1000, l2_clip=1.0,
                  coordinate_clip=3 / 1000**0.5, use_profile=use_profile)
  target = 3.0 if use_profile else 10.0
  calls = []
  exact = oracle.Epsilon.exact
  monkeypatch.setattr(oracle.Epsilon, 'exact',
                      lambda self, mech: calls.append(mech) or exact(self, mech))

  def run(target, **kwargs):
    calls.clear()
    try:
      out = calibration.calibration_report('rqm', target, **kwargs,
                                           compare_gaussian=False)
    except ValueError as err:
      out = str(err)
    return out, len(calls)

  screened, screened_calls = run(target, **schedule, bits=3)
  monkeypatch.setattr(lower_bound, 'epsilon_at_least', lambda *a, **k: None)
  plain, plain_calls = run(target, **schedule, bits=3)
  assert screened_calls < plain_calls
  assert screened.params['delta_ratio'] == plain.params['delta_ratio']
  assert screened.params['q'] == pytest.approx(plain.params['q'], rel=4e-3)
  assert screened.epsilon <= target
  # The attained end: the same route from named clipped inputs' divergences.
  assert 0 < screened.epsilon_attained <= screened.epsilon
  if not use_profile:   # there RQM's domination at a wide Δ reaches it
    unreachable = run(1e-3, **SCHEDULE, dim=1000, bits=3)[0]   # all bounded
    monkeypatch.undo()
    assert 'not reachable' in unreachable
    assert unreachable == run(1e-3, **SCHEDULE, dim=1000, bits=3)[0]


# ℓ2 route, d = 1000, n = 40: PBM's and RQM's proved ε is 1.1x-1.6x what
# named inputs attain at the calibrated point.
L2_SCHEDULE = dict(delta=1 / 3400, rounds=300, clients_per_round=40,
                   total_clients=3400, dim=1000, l2_clip=1.0,
                   coordinate_clip=3 / 1000**0.5)


@pytest.mark.parametrize('name, bits', [('pbm', 4), ('rqm', 3)])
def test_the_attained_bound_calibrates_to_no_more_noise_than_the_proved(
    name, bits):
  """bound='attained': the optimistic end. Every candidate's attained ε is at
  most its proved ε, so the proved calibration is feasible there and the
  optimistic one has no more error; its ε is the attained one, and under the
  proved bound it misses the target (not a guarantee: the report says so)."""
  proved = calibration.calibration_report(name, 10.0, **L2_SCHEDULE, bits=bits,
                                          compare_gaussian=False)
  hopeful = calibration.calibration_report(name, 10.0, **L2_SCHEDULE,
                                           bits=bits, bound='attained',
                                           compare_gaussian=False)
  assert proved.bound == 'proved' and hopeful.bound == 'attained'
  assert hopeful.debiased_error < proved.debiased_error
  assert hopeful.epsilon <= 10.0
  assert hopeful.epsilon_attained == hopeful.epsilon
  assert hopeful.assumptions == calibration.ATTAINED_NOTE
  assert 'NOT a privacy guarantee' in hopeful.assumptions
  assert 'others' in hopeful.attained_inputs
  schedule = dict(L2_SCHEDULE)
  del schedule['coordinate_clip']   # in the mechanism
  account = lambda mech: composition.RoundAccountant(
      mech, 40, 3400, 1 / 3400, 1000, calibration.FAST_ORDERS, 1.0)
  acc = account(hopeful.mechanism)
  assert acc.epsilon_attained(300)[0] == pytest.approx(hopeful.epsilon,
                                                       rel=1e-6)
  assert acc.epsilon_rdp(300)[0] > 10.0   # proved: over the target
  if name == 'pbm':   # one parameter: less noise (a larger θ) on its own
    assert hopeful.params['theta'] > proved.params['theta']


@pytest.mark.parametrize('name, bits', [('gaussian', None), ('skellam', 7)])
def test_closed_forms_calibrate_the_same_on_either_bound(name, bits):
  """Exact per-coordinate divergences on the coordinate route: the attained
  per-round RDP is the proved one (the Gaussian's closed form; Skellam's
  (+c, -c) pair, to the lower rounding of its power sums), so the two ends
  coincide."""
  ends = [calibration.calibration_report(name, 2.0, **SCHEDULE, bits=bits,
                                         bound=b, compare_gaussian=False)
          for b in calibration.BOUNDS]
  assert ends[0].tunables == pytest.approx(ends[1].tunables, rel=1e-6)
  assert ends[1].epsilon == ends[1].epsilon_attained
  assert ends[0].epsilon == pytest.approx(ends[1].epsilon, rel=1e-6)
  assert ends[0].debiased_error == pytest.approx(ends[1].debiased_error,
                                                 rel=1e-6)
  assert ends[1].attained_inputs == ('exact (closed form)' if name == 'gaussian'
                                     else 'target 1 coordinate at (+1c, -1c); '
                                     'others 9 at +0c')


def test_a_bad_bound_is_refused_naming_it():
  with pytest.raises(ValueError, match=r"`bound` must be one of .*'optimistic'"):
    calibration.calibrate('pbm', 2.0, **SCHEDULE, bits=4, bound='optimistic')
  with pytest.raises(ValueError, match="`bound`='attained'.*use_pld"):
    calibration.calibrate('pbm', 2.0, **SCHEDULE, bits=4, bound='attained',
                          use_pld=True)


def test_no_attained_value_is_an_error_not_the_proved_end():
  """Where the attained search does not apply (its cost), the optimistic
  end is unknown: AttainedUnavailable, not a silent proved ε."""
  tiny = calibration.Limits(
      accountant=secure_sum.Limits(attained_operations=1.0))
  with pytest.raises(calibration.AttainedUnavailable,
                     match='Limits.attained_operations'):
    calibration.calibration_report('pbm', 2.0, **SCHEDULE, bits=4,
                                   bound='attained', limits=tiny)
  proved = calibration.calibration_report('pbm', 2.0, **SCHEDULE, bits=4,
                                          compare_gaussian=False, limits=tiny)
  assert proved.epsilon <= 2.0 and proved.epsilon_attained is None


def test_a_long_calibration_reports_its_progress():
  """Past `Limits.progress_after` seconds each grid point is reported with an ETA;
  a quick calibration says nothing."""
  lines = []
  calibration.calibration_report(   # a cheaper search: said nothing all the same
      'pbm', 2.0, **SCHEDULE, bits=1, progress=lines.append,
      limits=calibration.Limits(progress_after=1e9))
  assert not lines
  calibration.calibration_report(
      'rqm', 2.0, **SCHEDULE, bits=4, progress=lines.append,
      limits=calibration.Limits(progress_after=0.0))
  assert lines and all(l.startswith('calibrating rqm: grid point ') and
                       's left at the pace so far)' in l for l in lines)


_VERTEX_RQM = dict(num_levels=16, delta_ratio=16.0)   # the ends are vertices


def test_end_mixes_that_lower_epsilon_stay_in_the_search():
  """n = 30: the ±c mixes are far tighter than the mixture bound (ε 3.99
  against 6.99 at the answer), so the search keeps them. The answer is as
  tight as the search's width, which is in q: here ε moves about 10x as
  fast as q, so within 0.5% of the target (a search on the mixture alone
  would stop far under it), and its ε is the accountant's at the report's
  orders."""
  schedule = dict(delta=1e-5, rounds=20, clients_per_round=30,
                  total_clients=1000, dim=100, l2_clip=1.0,
                  coordinate_clip=0.3)
  rep = calibration.calibration_report('rqm', 4.0, **schedule, tune='q',
                                       compare_gaussian=False, **_VERTEX_RQM)
  assert 4.0 * (1 - 5e-3) <= rep.epsilon <= 4.0
  del schedule['coordinate_clip']
  again = composition.training_guarantee(rep.mechanism, orders=rep.orders,
                                         attained=False, **schedule)
  assert again.epsilon == pytest.approx(rep.epsilon, rel=1e-9)


def test_an_answer_whose_skipped_mixes_matter_is_searched_again(monkeypatch):
  """RQM 16 levels, Δ = 32c, n = 200: the mixes lower ε (at the answer the
  full accountant gives 3.199 where the mixture alone gives 3.332). A
  search told they do not (as one that measured them at another grid
  point, Δ = 16c, where they do not) ends with its answer evaluated in
  full, out of the window, and searched again with them: tight, and the
  accountant's ε at the report's orders."""
  monkeypatch.setattr(oracle, 'Epsilon', functools.partial(
      oracle.Epsilon, mixes_matter=False))   # told they do not matter
  schedule = dict(delta=1e-5, rounds=20, clients_per_round=200,
                  total_clients=1000, dim=100, l2_clip=1.0)
  rep = calibration.calibration_report(
      'rqm', 3.2, **schedule, coordinate_clip=0.3, tune='q',
      compare_gaussian=False, num_levels=16, delta_ratio=32.0)
  assert 3.2 * (1 - 2e-3) <= rep.epsilon <= 3.2
  assert rep.mechanism.q == pytest.approx(0.793, rel=5e-3)
  whole = composition.training_guarantee(rep.mechanism, orders=rep.orders,
                                         attained=False, **schedule)
  assert whole.epsilon == pytest.approx(rep.epsilon, rel=1e-9)


# The served registry mechanisms at a small ℓ2-route setting (bits each needs
# there): a calibration must report exactly what `Calibration.guarantee`
# (= training_guarantee at its orders and routes) recomputes.
ROUND_TRIP = dict(epsilon=10.0, delta=1e-5, rounds=2, clients_per_round=3,
                  total_clients=20, dim=64, l2_clip=1.0, coordinate_clip=3 / 8,
                  compare_gaussian=False)
SERVED_BITS = {'rqm': 4, 'pbm': 4, 'quantized_gaussian': 4, 'ddgauss': 8,
               'skellam': 8, 'qmgeo': 4, 'randomized_projection': 4,
               'bq': 8}


def test_round_trip_covers_the_registry():
  ours = {name for name, cls in mechanisms.registry().items()
          if cls.__module__.startswith('tff_quant.')}   # not tests' toys
  assert set(SERVED_BITS) == ours


@pytest.mark.parametrize('name', sorted(SERVED_BITS))
def test_reported_epsilon_is_the_guarantees(name):
  cal = calibration.calibration_report(name, bits=SERVED_BITS[name],
                                       **ROUND_TRIP)
  s = cal.setting
  assert (s.mechanism, s.dim, s.l2_clip, s.rounds, s.epsilon) == (
      name, 64, 1.0, 2, cal.epsilon)
  assert s.coordinate_clip == pytest.approx(3 / 8, rel=1e-12)
  assert s.params() == cal.tunables
  assert cal.params == dict(cal.tunables, calibrated_for=s)
  assert tuple(cal.orders) == s.orders
  # Exactly the reported ε: the same accountant, orders and routes.
  assert cal.guarantee(attained=False).epsilon == cal.epsilon
  g = composition.training_guarantee(cal.mechanism, 2, 3, 20, 1e-5, 64,
                                     orders=s.orders, use_pld=False,
                                     l2_clip=1.0, attained=False)
  assert g.epsilon == cal.epsilon
  assert type(cal.mechanism).for_coordinate_bound(
      s.coordinate_clip, **cal.tunables).params() == cal.mechanism.params()




def test_guarantee_at_fewer_rounds_is_smaller_and_needs_a_setting():
  cal = calibration.calibration_report('pbm', bits=4, **ROUND_TRIP)
  assert cal.guarantee(rounds=1, attained=False).epsilon < cal.epsilon
  bare = calibration.Calibration(cal.mechanism, cal.tunables, cal.epsilon,
                                 10.0, 1e-5, cal.mse)
  with pytest.raises(ValueError, match='setting'):
    bare.guarantee()


@pytest.mark.parametrize('name', ['ddgauss', 'skellam'])
def test_a_modular_sum_started_at_the_gaussians_noise_calibrates_the_same(
    name):
  """The search from `gaussian_matched` (the default) against the same
  calibration with guesses off (`SearchLimits(guess_steps=0)`): both meet
  the target within rtol at the same rounding steps and noise (to the
  window's width). At 40 clients, d = 1,000 and 10 bits (ddgauss: 4
  rounding steps) the two searches are like those at the issue's 100
  clients and d = 8,192, at half the cost."""
  args = dict(ISSUE, clients_per_round=40, dim=1000,
              coordinate_clip=3 / 1000**0.5, bits=10)
  counted = {}
  for steps in (0, interface.SearchLimits().guess_steps):
    limits = calibration.Limits(search=interface.SearchLimits(
        guess_steps=steps))
    report = calibration.calibration_report(name, 10.0, **args,
                                            limits=limits)
    counted[steps] = report
  off, on = counted[0], counted[interface.SearchLimits().guess_steps]
  for report in (off, on):
    assert 10.0 * (1 - 1e-2) <= report.epsilon <= 10.0
  assert on.mechanism.steps == off.mechanism.steps
  assert on.mechanism.noise_std == pytest.approx(off.mechanism.noise_std,
                                                 rel=2e-2)
  assert on.ratio_to_gaussian == pytest.approx(off.ratio_to_gaussian,
                                               rel=2e-2)


# --- Dropouts: a calibration for a cohort that may shrink to a minimum.

DROPOUTS = dict(epsilon=5.0, delta=1e-4, rounds=3, clients_per_round=5,
                total_clients=30, dim=16, l2_clip=1.0, compare_gaussian=False)


@pytest.mark.parametrize('name, bits', [('rqm', 4), ('pbm', 4)])
def test_a_dropout_tolerant_calibration_holds_at_every_cohort_size(name, bits):
  """Calibrated for 5 of 30 with at least 3 contributing: the accountant's ε
  of a run whose every round has k contributors is at most the target for
  each k in [3, 5], as the sum of k sampled at 5/30 (any data-independent
  dropouts) and as k sampled of 30 (uniform dropouts); k = 3 is the ε
  calibration reported. The calibration without the tolerance misses the
  target at 3 contributors."""
  cal = calibration.calibration_report(name, bits=bits, **DROPOUTS,
                                       min_clients_per_round=3)
  s = cal.setting
  assert (s.min_clients_per_round, s.smallest_cohort, s.clients_per_round) == (
      3, 3, 5)
  assert 'at least 3 contributing' in s.describe()
  assert cal.guarantee(attained=False).epsilon == cal.epsilon <= 5.0
  dropout_eps, uniform_eps = [], []
  for k in range(3, 6):
    g = cal.guarantee(attained=False, smallest_cohort=k)
    assert g.epsilon <= 5.0, (k, g.epsilon)
    dropout_eps.append(g.epsilon)
    uniform = composition.training_guarantee(
        cal.mechanism, 3, k, 30, 1e-4, 16, orders=s.orders, use_pld=False,
        l2_clip=1.0, attained=False)
    assert uniform.epsilon <= g.epsilon + 1e-12, (k, uniform.epsilon)
    uniform_eps.append(uniform.epsilon)
  assert dropout_eps[0] == cal.epsilon
  for outside in (2, 6):
    with pytest.raises(ValueError, match=r'`smallest_cohort`'):
      cal.guarantee(smallest_cohort=outside)
  assert dropout_eps == sorted(dropout_eps, reverse=True)   # more clients, less ε
  assert 'at least 3 contribute' in cal.guarantee(attained=False).assumptions
  plain = calibration.calibration_report(name, bits=bits, **DROPOUTS)
  assert plain.setting.smallest_cohort == 5
  shrunk = composition.training_guarantee(
      plain.mechanism, 3, 5, 30, 1e-4, 16, orders=plain.setting.orders,
      use_pld=False, l2_clip=1.0, attained=False, min_clients_per_round=3)
  assert shrunk.epsilon > 5.0


def test_a_larger_cohort_than_calibrated_can_cost_more_epsilon():
  """Why a calibrated factory refuses more clients than clients_per_round:
  more clients add noise, but sample each client more often, and the
  accountant's ε can go either way (here up at 6 of 30, down at 10)."""
  mech = mechanisms.RQM.for_coordinate_bound(1 / 8, num_levels=16, q=0.42,
                                             delta_ratio=1.0)
  eps = {n: composition.training_guarantee(
      mech, 3, n, 30, 1e-4, dim=64, l2_clip=1.0, use_pld=False,
      attained=False).epsilon for n in (5, 6, 10)}
  assert eps[6] > eps[5] > eps[10]


def test_a_smaller_cohort_is_accounted_as_the_sum_of_the_fewest():
  """The accountant's `min_clients_per_round`: the round's RDP is the
  unsampled RDP of the sum of n_min clients, subsampled at n/N (WBK19 Thm 9)."""
  mech = mechanisms.PBM.for_coordinate_bound(1.0, num_levels=16, theta=0.1)
  orders = list(range(2, 11))
  fewest = composition.RoundAccountant(mech, 3, 30, 1e-5, 4, orders)
  dropout = composition.RoundAccountant(mech, 5, 30, 1e-5, 4, orders,
                                        min_clients_per_round=3)
  assert dropout.rdp == fewest.rdp
  assert dropout.gamma == 5 / 30
  eps, _ = dropout.epsilon_rdp(7)
  expected, _ = rdp_route.epsilon_from_rdp(orders, [
      rdp_route.subsampled_rdp_without_replacement(fewest.rdp, 5 / 30, a)
      for a in orders], 7, 1e-5)
  assert eps == expected
  same = composition.RoundAccountant(mech, 5, 30, 1e-5, 4, orders,
                                     min_clients_per_round=5)
  assert same.epsilon_rdp(7) == composition.RoundAccountant(
      mech, 5, 30, 1e-5, 4, orders).epsilon_rdp(7)


def test_dropouts_are_refused_where_the_sum_is_accounted_by_conditioning():
  """BQ's RDP routes condition the sum on a window fixed by the number of
  clients summed; a larger sum is no post-processing of that conditioned
  sum, so no dropout tolerance is claimed for it."""
  with pytest.raises(ValueError, match=r'`min_clients_per_round`=3 < '
                     r'`clients_per_round`=5 is not available for BQ.*'
                     r'Conditioning on a window'):
    calibration.calibration_report('bq', bits=8, **DROPOUTS,
                                   min_clients_per_round=3)
  bq = mechanisms.BQ(1.0, 2, 251)
  composition.RoundAccountant(bq, 5, 30, 1e-4, min_clients_per_round=5)


@pytest.mark.parametrize('kwargs, match', [
    (dict(min_clients_per_round=6), r'`min_clients_per_round`=6 exceeds '
     r'`clients_per_round`=5.*1 <= min_clients_per_round <= 5'),
    (dict(min_clients_per_round=0), 'min_clients_per_round'),
    (dict(min_clients_per_round=2.5), 'min_clients_per_round')])
def test_a_bad_minimum_cohort_names_the_parameter_and_its_range(kwargs, match):
  with pytest.raises((ValueError, TypeError), match=match):
    calibration.calibration_report('pbm', bits=4, **DROPOUTS, **kwargs)
  with pytest.raises((ValueError, TypeError), match='min_clients_per_round'):
    composition.training_guarantee(
        mechanisms.PBM(1.0, 16, 0.1), 3, 5, 30, 1e-4,
        **{'min_clients_per_round': 6, **kwargs})


def test_the_dropout_bound_covers_the_exact_divergence_of_larger_cohorts():
  """The per-round RDP of the sum of n_min clients (the accountant's, any
  inputs of the others) bounds the exact Rényi divergence of a round whose
  sum holds n' >= n_min clients, by data processing: brute force over the
  target at ±c and the others on a grid, PBM at 4 levels, one coordinate."""
  import itertools  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  mech = mechanisms.PBM.for_coordinate_bound(1.0, num_levels=4, theta=0.2)
  orders = list(range(2, 9))
  bound = composition.RoundAccountant(mech, 4, 30, 1e-5, 1, orders,
                                      min_clients_per_round=2).rdp
  grid = [-1.0, -0.3, 0.0, 0.6, 1.0]
  worst = {a: 0.0 for a in orders}
  for size in (2, 3, 4):
    for others in itertools.combinations_with_replacement(grid, size - 1):
      rest = np.ones(1)
      for x in others:
        rest = np.convolve(rest, mech.pmf(x))
      p = np.convolve(rest, mech.pmf(1.0))
      q = np.convolve(rest, mech.pmf(-1.0))
      for a in orders:
        div = math.log(np.sum(p**a * q**(1 - a))) / (a - 1)
        worst[a] = max(worst[a], div)
        assert div <= bound[a] * (1 + 1e-9), (size, others, a, div, bound[a])
  assert worst[2] > 0.5 * bound[2]   # the bound is not vacuous here
  # Without the tolerance the accountant's bound (the sum of 4) is below what
  # a round of 2 attains: fewer clients, less noise.
  full = composition.RoundAccountant(mech, 4, 30, 1e-5, 1, orders).rdp
  assert worst[2] > full[2]


def test_the_old_name_clip_warns_that_it_is_the_coordinate_bound():
  schedule = dict(rounds=2, clients_per_round=5, total_clients=30, dim=4)
  with pytest.warns(FutureWarning, match=r'`clip`=0\.5 is the per-coordinate '
                    r'bound c∞: pass it as `coordinate_clip`.*`l2_clip` here'):
    old = calibration.calibrate('pbm', 20.0, 1e-4, clip=0.5, bits=2, **schedule)
  new = calibration.calibrate('pbm', 20.0, 1e-4, coordinate_clip=0.5, bits=2,
                              **schedule)
  assert old.params() == new.params()


def test_a_profile_route_calibration_is_what_the_run_recomputes():
  """use_profile=True: PBM at ε = 1 on the ℓ2 route is calibrated through
  its Gaussian domination, the reference Gaussian through its exact
  profile; the setting records the route, its guarantee recomputes the
  calibrated ε on it, and PBM's ratio to the Gaussian is what its rate
  predicts, (κ₁/Fisher)² (1.42 here: θ = 0.084 at n = 50 is far from the
  Gaussian limit), well below the RDP route's calibration's."""
  dim, n, total, delta, rounds = 1000, 50, 2000, 1 / 2000, 100
  kw = dict(bits=1, l2_clip=1.0, coordinate_clip=2 / math.sqrt(dim))
  rep = calibration.calibration_report('pbm', 1.0, delta, rounds, n, total,
                                       dim, use_profile=True, **kw)
  assert rep.setting.use_profile and rep.epsilon <= 1.0
  g = rep.guarantee(attained=False)
  assert g.epsilon == pytest.approx(rep.epsilon, rel=1e-12)
  assert g.route == 'profile' and 'Gaussian domination' in g.assumptions
  theta = rep.mechanism.theta
  fisher = (theta / kw['coordinate_clip']) / math.sqrt(n * (0.25 - theta**2))
  excess = (gaussian_domination.pbm_trial_rate(
      theta, kw['coordinate_clip'], n) / fisher)**2
  assert 0.95 * excess < rep.ratio_to_gaussian < 1.05 * excess
  plain = calibration.calibration_report('pbm', 1.0, delta, rounds, n, total,
                                         dim, **kw)
  assert not plain.setting.use_profile
  assert plain.debiased_error > 1.5 * rep.debiased_error
  # One reference, the Gaussian at its best, whatever route PBM took; the
  # RDP route's own Gaussian needs more noise.
  assert plain.gaussian.sigma == rep.gaussian.sigma
  assert plain.gaussian_route == 'profile'
  assert plain.ratio_to_gaussian > plain.ratio_to_gaussian_same_route
  assert rep.ratio_to_gaussian == rep.ratio_to_gaussian_same_route


# --- Searches the profile route's Gaussian domination opens
# (`Mechanism.calibrated_at`, `Mechanism.profile_searches`).

_SMALL = dict(delta=1e-3, rounds=20, clients_per_round=10, total_clients=100,
              dim=100, l2_clip=1.0, coordinate_clip=0.2, use_profile=True)


def test_rqm_at_two_levels_bisects_delta_alone():
  """q does not enter RQM's law at 2 levels: Δ is bisected (not scanned
  over its powers of 2), q stays at its default, and ε is tight."""
  cls = mechanisms.get('rqm')
  assert cls.calibrated_at({'num_levels': 2}) == ('delta_ratio',)
  assert cls.calibrated_at({'num_levels': 4}) == cls.CALIBRATED
  report = calibration.calibration_report('rqm', 1.0, bits=1, **_SMALL)
  params = dict(report.setting.tunables)
  assert params['q'] == cls.tunable('q').default
  assert not math.log2(params['delta_ratio']).is_integer()
  assert 0.97 <= report.epsilon <= 1.0
  assert report.ratio_to_gaussian < 1.6


def test_qmgeo_on_the_profile_route_also_searches_its_range_without_walk():
  """The further search (p = WALKLESS_P, W bisected) wins where the
  domination binds, and beats the default search's answer; it is not run
  off the profile route or where the caller fixed p."""
  cls = mechanisms.get('qmgeo')
  assert cls.profile_searches({}) == ((('range_ratio',),
                                       {'p': cls.WALKLESS_P}),)
  assert cls.profile_searches({'p': 0.5}) == ()
  both = calibration.calibration_report('qmgeo', 1.0, bits=1, **_SMALL)
  default = calibration.calibration_report('qmgeo', 1.0, bits=1,
                                           tune=cls.CALIBRATED, **_SMALL)
  assert dict(both.setting.tunables)['p'] == cls.WALKLESS_P
  assert both.debiased_error < 0.95 * default.debiased_error
  assert 0.97 <= both.epsilon <= 1.0


def test_rqm_profile_search_keeps_every_level_where_a_central_bin_can_apply():
  cls = mechanisms.get('rqm')
  assert cls.profile_searches({'num_levels': 16}) == (
      (('delta_ratio',), {'q': cls.KEEP_ALL_Q}),)
  for fixed in ({'num_levels': 2}, {'num_levels': 7},
                {'num_levels': 16, 'q': 0.5},
                {'num_levels': 16, 'delta_ratio': 4.0}):
    assert cls.profile_searches(fixed) == ()
  assert mechanisms.get('qmgeo').profile_searches({'num_levels': 5}) == ()
