import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from scipy import integrate, stats

from tff_quant import mechanisms
from tff_quant.accounting import calibration, secure_sum
from tff_quant.program import frontier

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_cell_past_its_time_limit_is_inf_with_the_reason():
  rows = list(frontier.run_cells(
      [('rqm', 8, 10.0, 0.01, 1000, 40, 100, 10)], 1, 0.5, 1e15, [3.0], 1e-2))
  assert rows[0]['mse_per_coordinate'] == math.inf
  assert '--max_seconds_per_cell' in rows[0]['reason']


def test_cells_in_parallel_match_one_at_a_time():
  cells = [('gaussian', 'inf', e, 0.01, 1000, 4, 100, 10) for e in (3.0, 10.0)]
  one = {r['epsilon']: r['mse_per_coordinate'] for r in frontier.run_cells(
      cells, 1, 600, 1e9, [3.0], 1e-2)}
  two = {r['epsilon']: r['mse_per_coordinate'] for r in frontier.run_cells(
      cells, 2, 600, 1e9, [3.0], 1e-2)}
  assert one == two and one[3.0] > one[10.0]


def test_clip_bias_is_the_expected_squared_excess():
  for k in (1.0, 2.0, 3.0):
    want, _ = integrate.quad(lambda z: (abs(z) - k)**2 * stats.norm.pdf(z)
                             if abs(z) > k else 0.0, -12, 12, points=[-k, k])
    assert np.isclose(frontier.clip_bias_sq(k, 1), want, rtol=1e-6)
    assert np.isclose(frontier.clip_bias_sq(k, 50), want / 50, rtol=1e-6)


def test_cell_cost_is_that_of_the_cheapest_scanned_grid_point():
  """RQM's Δ grid: 256 levels put ~200 critical inputs inside ±c at Δ = c/4
  but a few at the grid's top; the cell is refused only if even the cheapest
  is over."""
  c = 3 / math.sqrt(61_706)
  rungs = len(secure_sum.order_ladder(calibration.FAST_ORDERS))
  at = lambda ratio: secure_sum.estimated_operations(
      mechanisms.RQM(c, ratio * c, 256, 0.42), 100, rungs)
  grid = mechanisms.RQM.tunable('delta_ratio').grid
  assert frontier._cell_cost('rqm', 8, 100, c) == pytest.approx(
      min(at(r) for r in grid))
  raw = lambda ratio: secure_sum.search_operations(   # all 100 clients searched
      mechanisms.RQM(c, ratio * c, 256, 0.42), 100, rungs,
      secure_sum.DEFAULT_T_POINTS, secure_sum.DEFAULT_CELLS)
  assert raw(grid[-1]) < raw(1.0) / 10
  assert frontier._cell_cost('skellam', 8, 100, c) == 0.0   # exact law


def test_rows_are_rebased_on_their_settings_current_gaussian():
  base = dict(epsilon='10.0', delta='0.001', dim='100', clients_per_round='40',
              total_clients='1000', rounds='300', gaussian_noise_to_signal='')
  rows = [dict(base, mechanism='gaussian', mse_per_coordinate='0.002',
               debiased_error_per_coordinate='0.002', gaussian_mse='0.002',
               mse_ratio_to_gaussian='1.0', ratio_to_gaussian='1.0'),
          dict(base, mechanism='rqm', mse_per_coordinate='0.003',
               debiased_error_per_coordinate='0.004', gaussian_mse='0.0025',
               mse_ratio_to_gaussian='1.2', ratio_to_gaussian='1.6'),
          dict(base, mechanism='pbm', mse_per_coordinate='inf', gaussian_mse='',
               debiased_error_per_coordinate='inf', mse_ratio_to_gaussian='inf',
               ratio_to_gaussian='inf'),
          dict(base, rounds='2000', mechanism='rqm', mse_per_coordinate='0.003',
               debiased_error_per_coordinate='0.004', gaussian_mse='0.0025',
               mse_ratio_to_gaussian='1.2', ratio_to_gaussian='1.6')]
  out = frontier.on_one_reference(rows)
  assert float(out[1]['ratio_to_gaussian']) == pytest.approx(2.0)
  assert float(out[1]['mse_ratio_to_gaussian']) == pytest.approx(1.5)
  assert float(out[1]['gaussian_noise_to_signal']) == pytest.approx(0.2)
  assert out[2] == rows[2]   # nothing calibrated: untouched
  assert out[3] == rows[3]   # no Gaussian row for its setting: untouched


def test_rows_are_rebased_on_the_gaussian_at_its_best_not_its_rdp_row():
  """On the RDP route the Gaussian's own row (Thm 27) needs more noise than
  its best route: the setting's reference is that row's `gaussian_mse`
  (the best route's), and the Gaussian row reads its ratio against it."""
  base = dict(epsilon='1.0', delta='0.001', dim='100', clients_per_round='40',
              total_clients='1000', rounds='300', gaussian_noise_to_signal='')
  rows = [dict(base, mechanism='gaussian', mse_per_coordinate='0.006',
               debiased_error_per_coordinate='0.006', gaussian_mse='0.002',
               mse_ratio_to_gaussian='3.0', ratio_to_gaussian='3.0'),
          dict(base, mechanism='pbm', mse_per_coordinate='0.0065',
               debiased_error_per_coordinate='0.0065', gaussian_mse='0.006',
               mse_ratio_to_gaussian='1.08', ratio_to_gaussian='1.08',
               ratio_to_gaussian_wire='1.2')]
  out = frontier.on_one_reference(rows)
  assert float(out[0]['ratio_to_gaussian']) == pytest.approx(3.0)
  assert float(out[1]['ratio_to_gaussian']) == pytest.approx(3.25)
  assert float(out[1]['ratio_to_gaussian_wire']) == pytest.approx(3.6)
  assert float(out[1]['gaussian_mse']) == pytest.approx(0.002)


def test_fewest_bits_are_found_per_setting():
  """Rows group by setting_of (ε, δ, d, n, N, rounds); a mechanism with no
  bits within the factor of the Gaussian's debiased error is listed as None
  (plain MSE does not count: rqm's 0.5 below)."""
  base = dict(epsilon='10.0', delta='0.01', dim='100', clients_per_round='40',
              total_clients='100', rounds='10')
  rows = [dict(base, mechanism='pbm', bits='4', ratio_to_gaussian='1.3'),
          dict(base, mechanism='pbm', bits='8', ratio_to_gaussian='1.05'),
          dict(base, mechanism='rqm', bits='8', ratio_to_gaussian='2.0',
               mse_ratio_to_gaussian='0.5'),
          dict(base, epsilon='3.0', mechanism='pbm', bits='2',
               ratio_to_gaussian='1.0')]
  out = frontier.fewest_bits_within(rows)
  assert out == {frontier.setting_of(rows[0]): {'pbm': 8, 'rqm': None},
                 frontier.setting_of(rows[3]): {'pbm': 2}}


def test_a_cell_bounded_loosely_over_the_cost_limit_says_so():
  """compute_cell with a limit no search fits: the quantized Gaussian is
  calibrated through its local bound, and the row's reason names it (at
  k = 6: at k = 3 its noise swamps its range, slope 0.496, and it is refused)."""
  row = frontier.compute_cell(('quantized_gaussian', 2, 10.0, 0.01, 100, 10,
                               1000, 10), 1.0, [6.0], 1e-2)
  assert math.isfinite(row['debiased_error_per_coordinate'])
  assert 0.5 <= row['slope'] < 1
  assert row['ratio_to_gaussian'] == pytest.approx(
      row['debiased_error_per_coordinate'] / row['gaussian_mse'])
  assert 'a looser bound over --max_operations: local' in row['reason']


def test_a_cell_that_cannot_carry_the_signal_is_inf_with_the_bits_it_needs():
  """Skellam at 8 bits, n = 100, d = 1000: its modulus cannot hold the summed
  noise as TFF sizes it (plain MSE ranked such cells far below the
  Gaussian); the row is inf and the reason names the bits it needs."""
  row = frontier.compute_cell(('skellam', 8, 10.0, 1 / 3400, 1000, 100, 3400,
                               300), 1e9, [3.0], 1e-2)
  assert row['debiased_error_per_coordinate'] == math.inf
  assert row['ratio_to_gaussian'] == math.inf
  assert 'cannot carry the signal in 8 bits' in row['reason']
  assert re.search(r'in 8 bits: it needs \d+ bits: calibrated', row['reason'])


def test_rows_shaped_by_a_limit_are_recognised_and_counted():
  base = dict(mechanism='rqm', bits='4', epsilon='10.0', delta='0.01',
              dim='100', clients_per_round='10', total_clients='1000',
              rounds='10', debiased_error_per_coordinate='2.0', reason='')
  loose = dict(base, reason=f'k=3: {frontier.LOOSER}: local')
  assert not frontier.limited_by_budget(base)
  assert frontier.limited_by_budget(loose)
  assert frontier.limited_by_budget(dict(
      base, reason='calibration still running after --max_seconds_per_cell=9 s'))
  assert frontier.limited_by_budget(dict(
      base, reason=frontier._memory_reason(2**30, 'Unable to allocate')))  # pylint: disable=protected-access
  pbm = dict(base, mechanism='pbm', debiased_error_per_coordinate='1.0')
  counts = lambda v: (v.both, v.rqm_lower, v.loose)
  assert counts(frontier.rqm_vs_pbm([base, pbm])) == (1, 0, 0)
  assert counts(frontier.rqm_vs_pbm([loose, pbm])) == (1, 0, 1)
  assert counts(frontier.rqm_vs_pbm(
      [dict(base, debiased_error_per_coordinate='inf'), pbm])) == (0, 0, 0)


def test_a_capped_worker_gets_memory_error_not_the_oom_killer():
  """`limit_memory` (what each cell worker sets): an allocation past the cap
  raises MemoryError in that process, and the default cap shares 80% of
  physical memory among the workers."""
  code = ('import numpy as np\n'
          'from tff_quant.program import frontier\n'
          'frontier.limit_memory(4 * 2**30)\n'
          'try:\n'
          '  np.ones(2**30)   # 8 GiB\n'
          '  print("allocated")\n'
          'except MemoryError:\n'
          '  print("refused")\n'
          'np.ones(2**20)   # 8 MiB still fine\n'
          'print("small ok")\n')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.split() == ['refused', 'small', 'ok']
  assert frontier.worker_memory_bytes(2) == pytest.approx(
      0.4 * frontier.physical_memory_bytes(), rel=1e-9)


def test_rqm_vs_pbm_is_also_counted_per_bit_width():
  base = dict(mechanism='rqm', bits='4', epsilon='10.0', delta='0.01',
              dim='100', clients_per_round='10', total_clients='1000',
              rounds='10', debiased_error_per_coordinate='2.0', reason='')
  rows = [base, dict(base, mechanism='pbm', debiased_error_per_coordinate='1.0'),
          dict(base, bits='8', debiased_error_per_coordinate='1.0'),
          dict(base, bits='8', mechanism='pbm', debiased_error_per_coordinate='1.5'),
          dict(base, bits='8', epsilon='3.0', debiased_error_per_coordinate='inf'),
          dict(base, bits='8', epsilon='3.0', mechanism='pbm')]
  by_bits = frontier.rqm_vs_pbm_by_bits(rows)
  assert {b: (v.both, v.rqm_lower) for b, v in by_bits.items()} == {
      4: (1, 0), 8: (1, 1)}


# Every client in every round (n = N): a report's generic-subsampling penalty
# of an unsampled Gaussian costs nothing (at n/N = 0.4 its bisection over
# WOR-sampled RDP curves takes ~8 s, once per process), and no test of these
# rows depends on subsampling.
SETTING = dict(epsilon='10.0', delta='0.01', dim='100', clients_per_round='40',
               total_clients='40', rounds='10', reason='')


def _row(mechanism, bits, hi, lo, **kwargs):
  """A row whose figure is [lo, hi] (ratio and error alike; lo 'nan':
  the optimistic end unknown)."""
  return dict(SETTING, mechanism=mechanism, bits=str(bits), ratio_to_gaussian=hi,
              debiased_error_per_coordinate=hi, ratio_to_gaussian_attained=lo,
              debiased_error_attained=lo, **kwargs)


def test_rqm_vs_pbm_holds_only_where_the_intervals_separate():
  """Proved figures rank every cell; the intervals [optimistic, proved]
  separate in two; the others flip (an unknown optimistic end is 0)."""
  rows = [_row('rqm', 2, '2.0', 'nan'), _row('pbm', 2, '1.0', '1.0'),
          _row('rqm', 4, '2.0', '0.9'), _row('pbm', 4, '1.0', '1.0'),
          _row('rqm', 8, '1.2', '1.15'), _row('pbm', 8, '1.6', '1.5'),
          _row('rqm', 12, '3.0', '1.5'), _row('pbm', 12, '1.4', '1.2')]
  v = frontier.rqm_vs_pbm(rows)
  assert (v.both, v.rqm_lower, v.rqm_sure, v.pbm_sure) == (4, 1, 1, 1)
  assert [c[1] for c in v.flips] == ['2', '4']
  by_bits = frontier.rqm_vs_pbm_by_bits(rows)
  assert [len(by_bits[b].flips) for b in (2, 4, 8, 12)] == [1, 1, 0, 0]
  assert by_bits[12].pbm_sure == 1 and by_bits[8].rqm_sure == 1
  marks = frontier.cell_flips(rows)
  assert marks[frontier.key(rows[2])] == ['within 1.1×', 'vs PBM']
  assert marks[frontier.key(rows[3])] == ['vs RQM']
  assert marks[frontier.key(rows[0])] == ['within 1.1×?', 'vs PBM']
  assert frontier.key(rows[4]) not in marks   # separate, over 1.1× at both ends


def test_fewest_bits_flip_where_an_optimistic_end_reaches_the_factor():
  rows = [_row('pbm', 2, '1.5', '1.3'), _row('pbm', 4, '1.3', '1.05'),
          _row('pbm', 8, '1.05', '1.0'),
          _row('qmgeo', 2, '1.05', '1.05'),
          _row('rqm', 8, '1.5', '1.2'), _row('rqm', 16, 'inf', 'nan'),
          _row('bq', 4, 'inf', 'inf')]
  out = frontier.fewest_bits_interval(rows)[frontier.setting_of(rows[0])]
  assert out == {'pbm': (8, 4, False), 'qmgeo': (2, 2, False),
                 'rqm': (None, 16, True), 'bq': (None, None, False)}
  assert frontier.fewest_bits_within(rows)[frontier.setting_of(rows[0])] == {
      m: v[0] for m, v in out.items()}


def test_the_least_per_bits_names_only_the_mechanisms_it_is_not_separated_from():
  """At 4 bits PBM's proved 1.1 is least; RQM's interval [1.05, 1.3] reaches
  below it (not separated), QMGeo's [1.2, 1.4] does not, BQ's unknown end
  does; at 8 bits RQM is alone among the served (BQ inf)."""
  rows = [_row('pbm', 4, '1.1', '1.0'), _row('rqm', 4, '1.3', '1.05'),
          _row('qmgeo', 4, '1.4', '1.2'), _row('bq', 4, '2.0', 'nan'),
          _row('rqm', 8, '1.02', '1.0'), _row('bq', 8, 'inf', 'nan')]
  setting = frontier.setting_of(rows[0])
  least = frontier.least_by_bits(rows)
  assert least[(setting, 4)] == ('pbm', ['rqm', 'bq'])
  assert least[(setting, 8)] == ('rqm', [])
  lines = frontier.matrix_lines(rows)
  assert '| mechanism | 4 bits | 8 bits |' in lines
  table = {l.split(' | ')[0][2:]: l for l in lines if l.startswith('| ')}
  assert table['pbm'] == '| pbm | **1.1** [1] † |  |'   # no accountant: †
  assert table['bq'] == '| bq | 2 [?] † | — † |'
  assert table['rqm'].endswith('| **1.02** [1] † |')
  assert any('4 bits: pbm (not separated from rqm, bq); 8 bits: rqm '
             '(separated from every other)' in l for l in lines)


def test_the_generic_subsampling_penalty_on_both_routes():
  """One test, so the RDP route's penalty at ε = 1 (seconds of bisection over
  WOR-sampled RDP curves) is computed once for both of its uses.

  RDP route: WBK19 Thm 9 (what the quantized mechanisms get) against the
  Gaussian's own Thm 27: about 2x in variance at ε = 1 in the frontier's
  setting (its ε at the reference σ: 1.24 instead of 1.0), nothing at ε = 10
  (both bounds give the same ε there); the report's line names Thm 9.

  use_profile: the Gaussian accounted from its RDP curve alone (what a
  mechanism without a proved Gaussian domination gets) against its exact
  profile: 1.65x in variance at ε = 1 in the frontier's setting
  (docs/privacy.md), and the report's line says PBM pays none of it."""
  setting = (1 / 3400, 300, 100, 3400, 61706)
  small = frontier.generic_subsampling_penalty(1.0, *setting, False)
  assert 1.8 < small < 2.3
  assert frontier.generic_subsampling_penalty(10.0, *setting) == pytest.approx(
      1.0, abs=1e-4)
  # The reference is the Gaussian at its best: the RDP route's own Gaussian
  # (Thm 27) is 3.38x in variance at ε = 1 here (docs/privacy.md), and the
  # line states that factor and its product with Thm 9's.
  route = frontier.rdp_route_factor(1.0, *setting)
  assert 3.2 < route < 3.6
  text = frontier.penalty_text(
      ('1.0', str(1 / 3400), '61706', '100', '3400', '300'))
  assert 'WBK19 Thm 9' in text and f'{route:.3g}×' in text
  assert f'{route * small:.3g}×' in text
  penalty = frontier.generic_subsampling_penalty(1.0, *setting, True)
  assert 1.55 < penalty < 1.75
  text = frontier.penalty_text(('1.0', str(1 / 3400), '61706', '100',
                                '3400', '300'), use_profile=True)
  assert f'{penalty:.3g}×' in text and 'no accounting penalty (1.0)' in text
  assert 'not served above' in frontier.penalty_text(
      ('1.0', str(1 / 3400), '61706', '3400', '3400', '300'), use_profile=True)


def test_the_report_marks_flips_and_writes_no_number_by_hand(tmp_path):
  gauss = dict(SETTING, mechanism='gaussian', bits='inf', ratio_to_gaussian='1.0',
               debiased_error_per_coordinate='1.0', mse_per_coordinate='1.0',
               gaussian_mse='1.0', gaussian_noise_to_signal='100.0')
  extra = dict(slope='1.0', mse_per_coordinate='1.0', mse_ratio_to_gaussian='1.0',
               coordinate_clip_multiple='3.0', params='{}', gaussian_mse='1.0',
               gaussian_noise_to_signal='100.0', epsilon_attained='7.5')
  rows = [dict(gauss, **dict(extra, ratio_to_gaussian_attained='1.0',
                             debiased_error_attained='1.0')),
          _row('pbm', 4, '1.3', '1.05', **extra),
          _row('pbm', 8, '1.05', '1.0', **extra),
          _row('rqm', 4, '1.2', '1.15', **extra),
          _row('rqm', 8, '1.04', 'nan', **extra, reason_attained='too costly')]
  verdicts = frontier.write_report(rows, str(tmp_path))
  text = (tmp_path / 'frontier.md').read_text()
  assert 'pbm 8 (flips: 4 at the optimistic end)' in verdicts[2]
  assert 'rqm 8' in verdicts[2] and 'rqm 8 (' not in verdicts[2]
  # RQM lower in both cells on the proved figures; neither survives (at 4
  # bits PBM's interval reaches below RQM's, at 8 RQM's end is unknown).
  assert ('RQM lower in 2 of 2 on the proved figures; intervals: RQM lower in '
          '0, PBM lower in 0, 2 overlap') in verdicts[0]
  assert 'flips (the proved ranking does not survive' in verdicts[0]
  assert ('Flips between the attained and the proved ε: 1 of 2 fewest-bits '
          'verdicts, 2 of 2 RQM-vs-PBM cells') in verdicts[-1]
  assert '| [1.05, 1.3] | within 1.1×' in text
  assert '[?, 1.04]' in text and 'optimistic end: too costly' in text
  assert '| rqm | **1.2** [1.15] † | **1.04** [?] † |' in text   # the matrix
  assert (tmp_path / 'frontier.png').exists()


def test_the_attained_ratio_is_rebased_on_the_one_gaussian_reference():
  rows = [dict(SETTING, mechanism='gaussian', mse_per_coordinate='0.002',
               debiased_error_per_coordinate='0.002', gaussian_mse='0.002',
               gaussian_noise_to_signal='', ratio_to_gaussian='1.0',
               mse_ratio_to_gaussian='1.0'),
          dict(SETTING, mechanism='pbm', mse_per_coordinate='0.003',
               debiased_error_per_coordinate='0.004', gaussian_mse='0.0025',
               gaussian_noise_to_signal='', mse_ratio_to_gaussian='1.2',
               ratio_to_gaussian='1.6', debiased_error_attained='0.003',
               ratio_to_gaussian_attained='1.2')]
  out = frontier.on_one_reference(rows)
  assert float(out[1]['ratio_to_gaussian_attained']) == pytest.approx(1.5)


# Every client in every round at δ = 0.01: both ends, the peers' rows and the
# limits checked with it do not depend on subsampling, and the modular sum's
# two ends cost a third of those at n/N = 40/3400.
CELL = ('pbm', 4, 10.0, 0.01, 1000, 40, 40, 300)


def test_a_cell_carries_both_ends():
  """PBM on the ℓ2 route: the optimistic end (calibrated on the attained ε)
  is below the proved one, and the proved calibration's attained ε below
  its ε; so do a modular sum's (its ℓ2 round bound is a chord majorant above
  what named inputs attain)."""
  row = frontier.compute_cell(CELL, 1e9, [3.0], 1e-2)
  assert row['ratio_to_gaussian_attained'] < row['ratio_to_gaussian']
  assert row['ratio_to_gaussian_attained'] == pytest.approx(
      row['debiased_error_attained'] / row['gaussian_mse'])
  assert row['epsilon_attained'] < row['epsilon_achieved'] <= 10.0
  assert json.loads(row['params_attained'])['theta'] > json.loads(
      row['params'])['theta']
  modular = frontier.compute_cell(('skellam', 12) + CELL[2:], 1e9, [2.0],
                                  1e-2)
  assert (modular['ratio_to_gaussian_attained'] <=
          modular['ratio_to_gaussian'])
  assert modular['epsilon_attained'] < modular['epsilon_achieved'] <= 10.0
  assert 'exact divergences' not in modular['reason_attained']


def test_an_optimistic_end_out_of_reach_is_unknown_with_the_reason():
  row = frontier.compute_cell(
      CELL, 1e9, [3.0], 1e-2,
      limits=secure_sum.Limits(attained_operations=1.0))
  assert math.isfinite(row['ratio_to_gaussian'])
  assert math.isnan(row['ratio_to_gaussian_attained'])
  assert math.isnan(row['epsilon_attained'])
  assert 'Limits.attained_operations' in row['reason_attained']
  assert frontier.ends(row) == (0.0, row['ratio_to_gaussian'], False)


def test_a_cell_stopped_in_its_optimistic_end_keeps_its_proved_end(monkeypatch):
  monkeypatch.setattr(frontier, 'with_attained_end',
                      lambda *args, **kwargs: time.sleep(60))   # the forked worker's
  # The reference (the Gaussian at its best route, seconds) computed here:
  # the forked worker inherits it, so its proved end fits in 2 s.
  frontier.best_reference(3.0, 0.01, 10, 4, 100, 1000, 1e-2)
  rows = list(frontier.run_cells([('gaussian', 'inf', 3.0, 0.01, 1000, 4, 100,
                                   10)], 1, 2.0, 1e9, [3.0], 1e-2))
  assert math.isfinite(rows[0]['ratio_to_gaussian'])
  assert math.isnan(rows[0]['ratio_to_gaussian_attained'])
  assert '--max_seconds_per_cell' in rows[0]['reason_attained']
  assert frontier.limited_by_budget(rows[0])


def _wire_row(name, bits, ratio, **params):
  return dict(SETTING, mechanism=name, bits=str(bits), ratio_to_gaussian=ratio,
              debiased_error_per_coordinate='0.0002',
              params=json.dumps(params))


def test_wire_columns_are_the_proved_field_of_the_calibrated_sum():
  from tff_quant import mechanisms
  from tff_quant.mechanisms import wire
  row = _wire_row('pbm', 8, '1.01', clip=0.012, num_levels=256, theta=0.0026)
  got = frontier.wire_columns(row)
  mech = mechanisms.build('pbm', 0.012, num_levels=256, theta=0.0026)
  n = int(SETTING['clients_per_round'])
  assert got['level_bits'] == 8
  assert got['wire_bits'] == wire.wire_bits_needed(mech, n) < wire.unreduced_bits(
      256, n)
  assert 0 < got['wrap_probability'] <= 1e-4
  assert got['ratio_to_gaussian_wire'] >= 1.01   # the wraps only add error
  modular = frontier.wire_columns(_wire_row(
      'ddgauss', 12, '1.02', clip=0.012, num_levels=4096, steps=32,
      noise_fraction=0.005))
  assert (modular['wire_bits'], modular['ratio_to_gaussian_wire']) == (12, 1.02)
  assert frontier.wire_columns(dict(SETTING, mechanism='gaussian', bits='inf',
                                    params='{}'))['wire_bits'] == ''
  refused = frontier.wire_columns(dict(_wire_row('rqm', 16, 'inf'), params=''))
  assert (refused['level_bits'], refused['wire_bits']) == ('16', '')


def test_fewest_wire_bits_counts_the_wraps_and_names_the_level_bits():
  rows = [dict(_wire_row('pbm', 1, '1.05'), level_bits='1', wire_bits='6',
               ratio_to_gaussian_wire='1.2'),
          dict(_wire_row('pbm', 2, '1.02'), level_bits='2', wire_bits='7',
               ratio_to_gaussian_wire='1.03'),
          dict(_wire_row('rqm', 1, '1.5'), level_bits='1', wire_bits='6',
               ratio_to_gaussian_wire='1.6')]
  (found,) = frontier.fewest_wire_bits_within(rows).values()
  assert found == {'pbm': (7, 2), 'rqm': (None, None)}


def test_a_peer_row_is_its_calibrated_noise_at_its_own_wire_bits():
  """TFF's tff_dgauss at 16 wire bits: peers.calibrate's z, the noise part
  z²/n² over the Gaussian reference's error (said to be a lower bound), ε
  at the target, the wire columns its own bits; at 4 bits out of reach, with
  peers.calibrate's reason; the two ends one value (the noise part is
  already the optimistic figure)."""
  from tff_quant.aggregators import peers
  name, bits, eps, delta, dim, n, total, rounds = ('tff_dgauss', 16) + CELL[2:]
  row = frontier.compute_cell(('tff_dgauss', 16) + CELL[2:], 1e9, [3.0], 1e-2)
  z = peers.calibrate(name, eps, delta, rounds, n, total, dim, 1.0,
                      bits=16).noise_multiplier
  assert json.loads(row['params']) == dict(noise_multiplier=z, bits=16)
  assert row['debiased_error_per_coordinate'] == z**2 / n**2
  gauss = frontier.best_reference(eps, delta, rounds, n, total, dim, 1e-2)
  assert row['ratio_to_gaussian'] == pytest.approx(
      z**2 / n**2 / gauss.debiased_error, rel=1e-12)
  assert row['ratio_to_gaussian'] > 1 and 'lower bound' in row['reason']
  assert row['epsilon_achieved'] <= eps
  assert row['ratio_to_gaussian_attained'] == row['ratio_to_gaussian']
  assert 'noise part only' in row['reason_attained']
  wire = frontier.wire_columns(row)
  assert (wire['level_bits'], wire['wire_bits']) == (16, 16)
  assert wire['ratio_to_gaussian_wire'] == row['ratio_to_gaussian']
  low = frontier.compute_cell(('tff_skellam', 4) + CELL[2:], 1e9, [3.0], 1e-2)
  assert math.isinf(low['ratio_to_gaussian'])
  assert 'raise `bits`' in low['reason']   # TFF's scale heuristic: nan
  with pytest.raises(ValueError, match='mechanism'):
    frontier.peer_error('gaussian', eps, delta, rounds, n, total, dim, 16)


def test_the_gaussian_reference_row_carries_the_papers_convention(tmp_path):
  """The reference's noise multiplier √n·σ (ℓ2 clip 1) in the papers'
  convention (add/remove, Poisson at n/N), labelled; below our ε, which is
  for replace-one and fixed-size cohorts; absent where params lack σ."""
  from tff_quant.accounting import conventions
  eps, delta, rounds, n, total, dim = 3.0, 1 / 3400, 300, 100, 3400, 1000
  gauss = frontier.gaussian_reference(eps, delta, rounds, n, total, dim, 1e-2)
  row = frontier.compute_cell(('gaussian', frontier.CENTRAL_BITS, eps, delta,
                               dim, n, total, rounds), 1e9, [3.0], 1e-2)
  sigma = json.loads(row['params'])['sigma']
  want = conventions.papers_epsilon_gaussian(sigma * math.sqrt(n), n / total,
                                             rounds, delta)[0]
  assert frontier.papers_epsilon_of_reference(row) == want < eps
  # √n·σ is the central std over the clip: the reference's error σ²/n.
  assert gauss.debiased_error == pytest.approx(sigma**2 / n, rel=1e-12)
  frontier.write_report([row], str(tmp_path))
  text = (tmp_path / 'frontier.md').read_text()
  assert (f'for comparison with papers only, ε = {want:.3g} in the '
          f'{conventions.LABEL}') in text
  assert frontier.papers_epsilon_of_reference(dict(row, params='{}')) is None
