"""Calibration under a wire budget (`accounting.calibration.wire`): the level
count and parameters chosen jointly within b wire bits, the pruning, the
refusals."""

import math

import pytest

from tff_quant import accounting
from tff_quant.accounting.calibration import wire as calibration_wire
from tff_quant.mechanisms import utility
from tff_quant.mechanisms import wire

# A small schedule: each calibration takes about a second.
SETTING = dict(epsilon=4.0, delta=1e-5, rounds=5, clients_per_round=10,
               total_clients=100, dim=1)


@pytest.fixture(scope='module')
def pbm_at_6_bits():
  return calibration_wire.calibrate_for_wire_bits('pbm', 6, **SETTING)


def test_the_answer_fits_the_budget_and_meets_the_target(pbm_at_6_bits):
  found = pbm_at_6_bits
  mech = found.mechanism
  n = SETTING['clients_per_round']
  assert found.calibration.epsilon <= SETTING['epsilon']
  assert wire.wrap_probability(mech, n, 6) <= utility.MODCLIP_PROB
  assert wire.wire_bits_needed(mech, n) <= 6
  assert found.level_bits == mech.bits_per_coordinate
  # Its error with wraps is recomputed from the mechanism and b alone.
  again = wire.debiased_error_with_wraps(mech, n, 6, signal_utility=utility.
                                         SignalUtility(
                                             found.calibration.debiased_error,
                                             found.calibration.slope, math.nan,
                                             math.nan,
                                             found.calibration.signal_bound, n))
  assert again == found.utility


def test_the_winner_is_the_least_error_among_the_admitted(pbm_at_6_bits):
  found = pbm_at_6_bits
  admitted = [c for c in found.candidates if not c.why]
  assert admitted
  assert found.utility.error == min(c.error for c in admitted)
  for c in admitted:
    assert c.wire_bits_needed <= 6
  # The scan stopped at the first level count that did not fit, and tried
  # the level counts in order from 1 bit.
  assert [c.level_bits for c in found.candidates] == list(
      range(1, len(found.candidates) + 1))
  refused = [c for c in found.candidates if c.wire_bits_needed and c.why]
  assert len(refused) <= 1 and (not refused or refused[0] is
                                found.candidates[-1])
  if refused:
    assert refused[0].wire_bits_needed > 6


def test_each_candidate_is_the_plain_calibration_at_its_level_bits(
    pbm_at_6_bits):
  """The joint scan calls the public calibration; it does not change it."""
  c = next(c for c in pbm_at_6_bits.candidates if c.calibration is not None)
  plain = accounting.calibration_report('pbm', bits=c.level_bits,
                                        compare_gaussian=False, **SETTING)
  assert repr(plain.mechanism) == repr(c.calibration.mechanism)


def test_a_budget_no_level_count_fits_is_refused_naming_the_bits():
  with pytest.raises(ValueError, match=r'`wire_bits`=2 .*allowed wire_bits '
                     r'>= \d+'):
    calibration_wire.calibrate_for_wire_bits('pbm', 2, **SETTING)


def test_an_unknown_optimistic_end_is_raised_not_passed_over():
  """bound='attained' where a level count's attained search does not apply:
  the scan's optimistic answer is unknown, so it raises AttainedUnavailable
  naming the level count instead of recording a refusal and going on."""
  tiny = accounting.calibration.Limits(
      accountant=accounting.secure_sum.Limits(attained_operations=1.0))
  with pytest.raises(accounting.calibration.AttainedUnavailable,
                     match='1 level bits: .*Limits.attained_operations'):
    calibration_wire.calibrate_for_wire_bits('pbm', 6, **SETTING,
                                             bound='attained', limits=tiny)


@pytest.mark.parametrize('bad,match', [
    (dict(wire_bits=0), r'`wire_bits`.*\[1, 31\]'),
    (dict(wire_bits=6, bits=3), '`bits` is chosen by the wire-budget scan'),
    (dict(wire_bits=6, num_levels=8), '`num_levels` is chosen'),
    (dict(wire_bits=6, modclip_prob=0.0), '`modclip_prob`'),
    (dict(wire_bits=6, max_level_bits=25), r'`max_level_bits`.*\[1, 24\]'),
])
def test_bad_arguments_name_the_parameter(bad, match):
  with pytest.raises(ValueError, match=match):
    calibration_wire.calibrate_for_wire_bits('pbm', **bad, **SETTING)


def test_a_scan_over_budgets_calibrates_each_level_count_once(pbm_at_6_bits):
  """With `reuse`, a second budget reads the level counts the first one
  calibrated (the same Calibration objects, refusals included) and gives
  the answer a fresh scan gives."""
  reuse = {}
  low = calibration_wire.calibrate_for_wire_bits('pbm', 5, **SETTING,
                                                 reuse=reuse)
  kept = dict(reuse)
  assert sorted(kept) == [c.level_bits for c in low.candidates]
  high = calibration_wire.calibrate_for_wire_bits('pbm', 6, **SETTING,
                                                  reuse=reuse)
  for c in high.candidates:
    if c.level_bits in kept and c.calibration is not None:
      assert c.calibration is kept[c.level_bits]
  fresh = pbm_at_6_bits
  assert high.level_bits == fresh.level_bits
  assert high.utility.error == fresh.utility.error
