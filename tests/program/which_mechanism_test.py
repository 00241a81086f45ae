"""Which mechanism at a wire budget (`program.which_mechanism`): rows agree
with the public calibrations, refusals name the bits needed, and the
recommendation ranks only where the intervals separate."""

import math
import re

import pytest

from tff_quant import accounting
from tff_quant.accounting import calibration
from tff_quant.mechanisms import wire
from tff_quant.program import frontier
from tff_quant.program import which_mechanism as wm

# A tiny setting: each calibration takes a second or two. Every client in
# every round (n = N): a report's generic-subsampling penalty of an
# unsampled Gaussian costs nothing (at n/N = 0.05 its bisection over
# WOR-sampled RDP curves takes ~8 s, once per process); nothing checked
# here depends on subsampling.
SETTING = dict(epsilon=10.0, delta=1 / 200, dim=64, clients_per_round=10,
               total_clients=10, rounds=5)
# The mechanisms on the RDP route alone (ten times faster here); the
# Gaussian reference takes its best route whatever they take.
RDP = dict(use_profile=False)
K = 3.0
SCHEDULE = dict(SETTING, l2_clip=1.0, rtol=wm.DEFAULT_RTOL,
                coordinate_clip=K / math.sqrt(SETTING['dim']))


def gaussian_error():
  return frontier.gaussian_reference(
      SETTING['epsilon'], SETTING['delta'], SETTING['rounds'],
      SETTING['clients_per_round'], SETTING['total_clients'], SETTING['dim'],
      wm.DEFAULT_RTOL, use_profile=True).debiased_error


def test_the_rows_are_their_calibrations_and_the_report_names_them():
  """One answer serves three checks (one test, not three sharing a module
  fixture: pytest-xdist's worksteal may run them on different workers, each
  computing the answer again): a bounded row is the wire-budget
  calibration, a modular row its calibration with modulus 2^b, and the
  report names the data, the setting and every mechanism."""
  rows = {r.mechanism: r for r in wm.answer(
      **SETTING, **RDP, wire_bits=6, mechanism_names=['pbm', 'ddgauss'],
      coordinate_clip_multiples=[K])}
  row = rows['pbm']
  found = calibration.calibrate_for_wire_bits('pbm', 6, **SCHEDULE)
  n = SETTING['clients_per_round']
  assert row.kind == wm.BOUNDED and row.fits
  assert row.proved.error == found.utility.error
  assert row.proved.level_bits == found.level_bits
  assert row.proved.wire_bits == wire.wire_bits_needed(found.mechanism, n)
  assert row.proved.wire_bits <= 6
  assert row.proved.wrap_probability == found.utility.wrap_probability
  assert row.proved.coordinate_clip_multiple == K
  assert row.ratio == pytest.approx(found.utility.error / gaussian_error(),
                                    rel=1e-12)
  # The optimistic end (the attained ε) is at most the proved one.
  lo, hi, known = row.interval()
  assert known and lo <= hi == row.ratio
  # The modular row.
  row = rows['ddgauss']
  rep = accounting.calibration_report('ddgauss', bits=6,
                                      compare_gaussian=False, **SCHEDULE)
  assert row.kind == wm.MODULAR and row.fits
  assert row.proved.error == rep.debiased_error
  assert row.proved.wire_bits == row.proved.level_bits == 6
  assert row.optimistic.error <= row.proved.error
  # The report.
  text = wm.report(list(rows.values()),
                   wm.Setting(**SETTING, **RDP, wire_bits=6))
  assert 'Data: none (exact accounting' in text
  rdp_line = wm.accounting_line(wm.Setting(**SETTING, **RDP, wire_bits=6))
  assert rdp_line in text.splitlines()
  assert ('Accounting: every mechanism by the RDP route alone' in rdp_line and
          'the Gaussian reference by its best sound method' in rdp_line)
  # On the RDP route the report says how much of each ratio the route is
  # (the reference being at its best): at least 1.
  route = re.search(r'RDP route alone \(Thm 27\) it would have '
                    r'([0-9.]+)× its reference\'s error', text)
  assert route and float(route.group(1)) >= 1
  profile_line = wm.accounting_line(wm.Setting(**SETTING, wire_bits=6))
  assert ('by the lesser of the RDP and profile routes' in profile_line and
          'the Gaussian reference by its best sound method' in profile_line)
  assert 'ε = 10, δ = 0.005, d = 64, n = 10 of N = 10' in text
  assert '| pbm | ' in text and '| ddgauss | 6 | 6 | ' in text
  assert '**Recommendation**: Least proved × Gaussian: ' in text


def test_a_budget_too_small_gives_the_reason_with_the_bits_needed():
  small = wm.answer(**SETTING, **RDP, wire_bits=3,
                    mechanism_names=['pbm', 'ddgauss'],
                    coordinate_clip_multiples=[K], optimistic=False)
  by = {r.mechanism: r for r in small}
  for row in small:
    assert not row.fits and math.isinf(row.ratio)
    assert row.proved.bits_needed is not None and row.proved.bits_needed > 3
  # PBM: the fewest wire bits any calibrated level count needed.
  assert f'allowed wire_bits >= {by["pbm"].proved.bits_needed}' in (
      by['pbm'].proved.reason)
  assert f'it needs {by["ddgauss"].proved.bits_needed} bits' in (
      by['ddgauss'].proved.reason)
  line = wm.recommend(small)
  assert line.startswith('No quantized mechanism fits')
  fewest = min(r.proved.bits_needed for r in small)
  assert f'The fewest wire bits a refusal names: {fewest}' in line
  text = wm.report(small, wm.Setting(**SETTING, **RDP, wire_bits=3))
  assert f'does not fit: needs {by["pbm"].proved.bits_needed}' in text


def test_a_mechanism_past_its_time_limit_is_stopped_with_the_reason():
  row, = wm.answer(**SETTING, **RDP, wire_bits=6, mechanism_names=['rqm'],
                   coordinate_clip_multiples=[K],
                   max_seconds_per_mechanism=0.1)
  assert not row.fits
  assert 'stopped after --max_seconds_per_mechanism=0.1 s' in row.proved.reason


def synthetic(name, proved, optimistic=None, kind=wm.BOUNDED):
  """A row with ×G [optimistic, proved] against a Gaussian error of 1."""
  end = wm.End(error=proved, coordinate_clip_multiple=K, level_bits=3,
               wire_bits=6)
  other = (wm.End(reason='not computed', unknown=True) if optimistic is None
           else wm.End(error=optimistic, coordinate_clip_multiple=K))
  return wm.Row(name, kind, end, other, 1.0)


def test_separated_intervals_give_a_firm_answer():
  line = wm.recommend([synthetic('b', 1.3, 1.2), synthetic('a', 1.1, 1.0)])
  assert line.startswith('Least proved × Gaussian: a at [1, 1.1]')
  assert 'The ranking holds' in line and 'b shown worse' in line
  assert 'cannot separate' not in line


def test_overlapping_or_unknown_intervals_cannot_separate():
  line = wm.recommend([synthetic('a', 1.1, 1.0), synthetic('b', 1.2, 1.05),
                       synthetic('c', 1.5, 1.4), synthetic('d', 2.0)])
  assert 'Least proved × Gaussian: a' in line
  assert 'cannot separate it from b [1.05, 1.2], d [?, 2]' in line
  assert 'shown worse: c.' in line
  assert 'The ranking holds' not in line


def test_peers_are_reported_as_noise_only_and_not_ranked():
  rows_ = [synthetic('a', 1.1, 1.0),
           synthetic('tff_dgauss', 0.5, kind=wm.PEER)]
  line = wm.recommend(rows_)
  assert line.startswith('Least proved × Gaussian: a')
  assert 'noise part alone' in line and 'tff_dgauss 0.5×' in line
  assert '>= 0.5 (noise only)' in wm.report(
      rows_, wm.Setting(**SETTING, **RDP, wire_bits=6))


def test_kinds():
  assert wm.kind_of('pbm') == wm.BOUNDED
  assert wm.kind_of('skellam') == wm.MODULAR
  assert wm.kind_of('tff_skellam') == wm.PEER
  assert set(wm.PEERS) < set(wm.default_mechanisms())


@pytest.mark.parametrize('bad,match', [
    (dict(clients_per_round=11), r'`clients_per_round`.*\[1, 10\]'),
    (dict(wire_bits=0), r'`wire_bits`.*\[1, 31\]'),
    (dict(wire_bits=32), r'`wire_bits`.*\[1, 31\]'),
    (dict(delta=1.0), r'`delta`.*\(0, 1\)'),
    (dict(epsilon=0.0), '`epsilon`'),
    (dict(mechanism_names=['gaussian']), "`mechanisms` must be one of"),
    (dict(mechanism_names=['nope']), "`mechanisms` must be one of"),
    (dict(coordinate_clip_multiples=[0.0]), '`coordinate_clip_multiples`'),
    (dict(max_seconds_per_mechanism=0), '`max_seconds_per_mechanism`'),
    (dict(workers=0), r'`workers`.*\[1, inf\)'),
    (dict(use_profile='yes'), '`use_profile`'),
])
def test_bad_arguments_name_the_parameter_and_range(bad, match):
  args = dict(SETTING, wire_bits=6, mechanism_names=['pbm'])
  args.update(bad)
  with pytest.raises((ValueError, TypeError), match=match):
    wm.answer(**args)


def test_the_profile_route_is_the_default_and_reaches_every_calibration():
  """use_profile (default True): the schedule every calibration gets
  carries it."""
  setting = wm.Setting(**SETTING, wire_bits=6)
  assert setting.schedule(0.01, 'proved')['use_profile'] is True
  assert wm.Setting(**SETTING, **RDP, wire_bits=6).schedule(
      0.01, 'proved')['use_profile'] is False
