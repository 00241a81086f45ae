"""Tests for tff_quant/program/fl_table.py: the endpoint and its fall-backs,
the excursion counts beside it, the two families of comparisons, the
precision figures, "which mechanism should I use?", and the report files."""

import math
import os

import numpy as np
import pytest
from scipy import stats

from tff_quant.program import comparisons, fl_table

#: rqm, ε = 3, 8 bits, seed 1 of the committed table: evaluated every 50
#: rounds, it fell from 0.572 at round 250 to 0.225 at 300.
EXCURSION = [(50, 0.555), (100, 0.542), (150, 0.581), (200, 0.584),
             (250, 0.572), (300, 0.225)]


def _cell(name, accs, eps=10.0, bits=8):
  return fl_table.Cell(name, eps, bits, dict(enumerate(accs)),
                       {i: eps for i in range(len(accs))})


def test_cell_interval_is_the_student_t_interval_of_the_mean():
  accs = [0.70, 0.72, 0.75]
  mean, lo, hi = _cell('a', accs).interval()
  half = stats.t.ppf(0.975, 2) * np.std(accs, ddof=1) / math.sqrt(3)
  assert mean == pytest.approx(np.mean(accs))
  assert (lo, hi) == pytest.approx((mean - half, mean + half))
  assert _cell('a', [0.7]).interval()[1] == -math.inf
  assert math.isnan(_cell('a', []).interval()[0])


def test_the_endpoint_is_the_pre_specified_window_where_the_schedule_allows():
  every5 = [(r, 0.5 + r / 1000) for r in range(5, 301, 5)]
  assert fl_table.PRESPECIFIED.first_round(300) == 270
  assert len(fl_table.PRESPECIFIED.window(every5, 300)) == 7   # 270..300
  assert fl_table.choose_endpoint([every5], 300) is fl_table.PRESPECIFIED
  assert fl_table.PRESPECIFIED.value(every5, 300) == pytest.approx(0.785)
  # Every 6 rounds: 270, 276, ..., 300 (6); every 10: 270, 280, 290, 300 (4).
  every6 = [(r, 0.5) for r in range(6, 301, 6)]
  every10 = [(r, 0.5) for r in range(10, 301, 10)]
  assert fl_table.choose_endpoint([every5, every6],
                                  300) is fl_table.PRESPECIFIED
  assert fl_table.choose_endpoint([every5, every10], 300) is fl_table.LAST_THIRD


def test_the_committed_schedule_falls_to_the_last_third():
  """Every 50 rounds of 300: the last third is rounds 200, 250 and 300."""
  assert fl_table.choose_endpoint([EXCURSION], 300) is fl_table.LAST_THIRD
  assert fl_table.LAST_THIRD.first_round(300) == 200
  assert fl_table.LAST_THIRD.value(EXCURSION, 300) == pytest.approx(
      (0.584 + 0.572 + 0.225) / 3)
  with pytest.raises(ValueError, match='needs 5'):
    fl_table.PRESPECIFIED.value(EXCURSION, 300)
  # One evaluation at the end only: the last round.
  assert fl_table.choose_endpoint([[(1, 0.3)]], 1) is fl_table.LAST
  with pytest.raises(ValueError, match='no evaluation at round 300'):
    fl_table.choose_endpoint([[(250, 0.5)]], 300)


def test_excursions_are_counted_beside_the_endpoint():
  assert fl_table.drops(EXCURSION) == 1   # 0.572 -> 0.225
  assert fl_table.drops(EXCURSION, drop=0.5) == 0
  # Ten rounds: the first (settling 10%) is skipped; rounds above the first
  # round's loss or not finite count, whatever the clipping rate.
  losses = [2.3, 2.4, 1.9, 1.0, 0.9, 2.31, math.nan, 0.8, math.inf, 0.7]
  assert fl_table.diverged_rounds(losses) == 4
  assert fl_table.diverged_rounds(losses, settling=0.5) == 3
  assert fl_table.diverged_rounds(None) is None
  assert fl_table.median_clipped([0.9, 0.8, math.nan, 1.0]) == 0.9
  assert fl_table.median_clipped(None) is None
  cell = fl_table.Cell('rqm', 3.0, 8)
  for seed, (evals, clipped, losses) in enumerate([
      (EXCURSION, [0.9, 0.8, 1.0], [2.3, 1.0, 4.9]),
      ([(200, 0.5), (250, 0.5), (300, 0.5)], [0.7, 0.7, 0.7],
       [2.3, 1.0, 0.9])]):
    cell.add_run(seed, fl_table.Run(evals, clipped, losses),
                 fl_table.LAST_THIRD, 300, 2.98)
  assert cell.accuracies[0] == pytest.approx(0.460333, abs=1e-6)
  assert cell.finals == {0: 0.225, 1: 0.5}
  assert cell.excursions() == ('1 of 2 (seed 0)', '1 in 1 of 2',
                               '0.80 (0.70–0.90)')
  peer = fl_table.Cell('tff_dgauss', 3.0, 16)
  peer.add_run(0, fl_table.Run(EXCURSION), fl_table.LAST_THIRD, 300, 3.0)
  assert peer.excursions() == ('1 of 1 (seed 0)', 'not recorded',
                               'not recorded')


def test_read_run_reads_evaluations_clipping_and_loss(tmp_path):
  (tmp_path / 'metrics.csv').write_text(
      'round,clipped_clients_fraction,test_accuracy,train_loss\n'
      '1,0.0,nan,2.3\n2,0.4,0.5,1.5\n3,0.05,0.55,nan\n')
  run = fl_table.read_run(str(tmp_path))
  assert run.evaluations == [(2, 0.5), (3, 0.55)]
  assert run.clipped == [0.0, 0.4, 0.05]
  assert run.losses[:2] == [2.3, 1.5] and math.isnan(run.losses[2])
  (tmp_path / 'metrics.csv').write_text('round,test_accuracy\n1,0.5\n')
  run = fl_table.read_run(str(tmp_path))
  assert run.clipped is None and run.losses is None


def _table(gap=0.0, spread=0.001, eps=10.0):
  """Cells at one ε sharing a seed effect: the Gaussian; 'near' at 4 bits
  within a hair of it; 'far' at 4 bits 0.05 below; 'mid' at 8 bits `gap`
  above with noise `spread`; 'wide' at 16 bits with noise of sd 0.05."""
  rng = np.random.default_rng(0)
  block = np.array([0.60, 0.66, 0.70, 0.64, 0.68])

  def cell(name, bits, shift, sd):
    return _cell(name, block + shift + rng.normal(0, sd, 5), eps, bits)
  return [cell('gaussian', fl_table.FLOAT_BITS, 0, 0.0005),
          cell('near', 4, 0.001, 0.001), cell('far', 4, -0.05, 0.001),
          cell('mid', 8, gap, spread), cell('wide', 16, 0, 0.05),
          fl_table.Cell('refused', eps, 4, reason='needs 11 bits'),
          fl_table.Cell('none', None, fl_table.FLOAT_BITS, {0: 0.8, 1: 0.81})]


def test_the_two_families():
  cells = _table() + _table(eps=3.0)[:3]
  ref = fl_table.reference_family(cells)
  assert [(a.mechanism, a.epsilon, b.mechanism) for a, b in ref] == [
      ('far', 3.0, 'gaussian'), ('near', 3.0, 'gaussian'),
      ('far', 10.0, 'gaussian'), ('near', 10.0, 'gaussian'),
      ('mid', 10.0, 'gaussian'), ('wide', 10.0, 'gaussian')]
  pairs = fl_table.equal_bits_family(cells)
  assert [(a.mechanism, b.mechanism, a.bits, a.epsilon) for a, b in pairs] == [
      ('far', 'near', 4, 3.0), ('far', 'near', 4, 10.0)]
  # No Gaussian at an ε: no comparison there.
  assert fl_table.reference_family(_table()[1:]) == []


def test_analysis_verdicts_and_which_mechanism():
  analysis = fl_table.analyse(_table())
  verdicts = {c.a.mechanism: c.verdict for c in analysis.against_reference}
  assert verdicts == {'near': 'equivalent', 'far': 'worse',
                      'mid': 'equivalent', 'wide': 'inconclusive'}
  (pair,) = analysis.equal_bits
  assert (pair.a.mechanism, pair.b.mechanism, pair.verdict) == (
      'far', 'near', 'worse')
  rows = {b: r for _, b, *r in fl_table.which_mechanism(analysis, [4, 8, 16])}
  assert rows[4][:2] == ['near (4 bits)', 'near (4 bits)']
  assert rows[8][:2] == ['near (4 bits), mid (8 bits)', 'near (4 bits)']
  assert rows[4][2].startswith('far (4 bits): -0.05')
  assert '**worse**' in rows[4][2]
  assert rows[8][2].startswith('mid (8 bits): ')   # new at 8 bits only
  assert rows[16][2].startswith('wide (16 bits)')


def test_none_shown_equivalent_says_why():
  cells = [c for c in _table(gap=0.01, spread=0.05) if c.mechanism in
           ('gaussian', 'mid')]
  ((_, _, same, cheapest, _),) = fl_table.which_mechanism(
      fl_table.analyse(cells), [8])
  assert same.startswith('none shown equivalent (5 seeds; half-width 0.')
  assert same.endswith('> margin 0.02)') and cheapest == '—'
  # A 95% interval narrower than the margin, but not inside it at 90%: the
  # differences 0.012, 0.017, 0.007 (half-width 0.012; TOST p 0.055).
  gaussian = [0.60, 0.66, 0.70]
  cells = [_cell('gaussian', gaussian, bits=32),
           _cell('x', np.add(gaussian, [0.012, 0.017, 0.007]), bits=8)]
  ((_, _, same, _, _),) = fl_table.which_mechanism(
      fl_table.analyse(cells), [8])
  assert same == ('none shown equivalent (3 seeds; half-width 0.012; '
                  'smallest Holm-adjusted TOST p 0.055 > 0.05)')


def test_precision_pools_the_gaussian_family():
  analysis = fl_table.analyse(_table())
  (p,) = fl_table.precision(analysis)
  diffs = [c.differences for c in analysis.against_reference]
  sd, df = comparisons.pooled_sd(diffs)
  assert (p.epsilon, p.comparisons, p.seeds, p.df) == (10.0, 4, 5, 16)
  assert p.sd == pytest.approx(sd) and p.target == 0.02
  assert p.half_width == pytest.approx(
      stats.t.ppf(0.975, 4) * sd / math.sqrt(5))
  assert p.seeds_for_target == comparisons.seeds_for_half_width(sd, 0.02)
  assert p.seeds_for_tost_holm >= p.seeds_for_tost
  assert p.family_size == 4


def _rows_have_their_headers_columns(text):
  lines = text.splitlines()
  for i, line in enumerate(lines):
    if line.startswith('|---'):
      width = lines[i - 1].count('|')
      j = i + 1
      while j < len(lines) and lines[j].startswith('|'):
        assert lines[j].count('|') == width, lines[j]
        j += 1


def test_report_and_plots_are_written(tmp_path):
  cells = _table()
  text = fl_table.write_report(cells, str(tmp_path), [4, 8, 16], '# T',
                               fl_table.LAST_THIRD)
  assert 'needs 11 bits' in text and 'Which mechanism' in text
  assert 'departs from the pre-specified endpoint' in text
  assert '## Against the Gaussian (paired by seed)' in text
  assert '## Pairs at equal ε and bits' in text and '## Precision' in text
  _rows_have_their_headers_columns(text)
  assert text.rstrip().splitlines()[-1].startswith('| 10 | 16 |')
  assert os.path.exists(tmp_path / 'table.csv')
  assert '(pre-specified)' in fl_table.write_report(cells, str(tmp_path), [4],
                                                    '# T')
  fl_table.plot(cells, str(tmp_path / 't.png'), 'title')
  assert os.path.getsize(tmp_path / 't.png') > 1000
  fl_table.plot_differences(fl_table.analyse(cells), str(tmp_path / 'd.png'),
                            'title')
  assert os.path.getsize(tmp_path / 'd.png') > 1000
  # Without a Gaussian (nothing to compare), the report and plot still come.
  fl_table.write_report(cells[1:], str(tmp_path), [4], '# T')
  fl_table.plot_differences(fl_table.analyse(cells[1:]),
                            str(tmp_path / 'e.png'), 'title')


def test_eta_takes_each_run_at_its_mechanisms_pace():
  """Two finished PBM runs at 60 s and 120 s and one TFF run at 2,400 s: a
  PBM run, a TFF run and a run of an unseen mechanism (at the mean of all,
  860 s) take (90 + 2,400 + 860) s; nothing finished: no ETA."""
  done = [('pbm', 60.0), ('pbm', 120.0), ('tff_skellam', 2400.0)]
  hours = fl_table.eta_hours(['pbm', 'tff_skellam', 'qmgeo'], done)
  assert abs(hours * 3600 - (90 + 2400 + 860)) < 1e-6
  assert fl_table.eta_hours(['pbm'], []) is None


def test_equal_epsilon_names_the_cells_outside_the_tolerance(tmp_path):
  """A run at 9.987 for a target of 10 is 0.13% off, over EQUAL_EPSILON_RTOL
  (0.1%): the report names its cell and distance; at 9.995 (0.05%) every
  cell is within it. The noise-free cell has no target."""
  cells = [_cell('gaussian', [0.80, 0.81], bits=32), _cell('pbm', [0.8, 0.8])]
  cells[1].epsilons[1] = 9.987
  assert cells[1].epsilon_gap() == pytest.approx(1.3e-3)
  assert fl_table.Cell('none', None, 32).epsilon_gap() == 0.0
  text = fl_table.write_report(cells, str(tmp_path), [8], '# T')
  assert 'within 0.1% of its target except pbm (8 bits) at ε = 10 (0.13%)' in text
  cells[1].epsilons[1] = 9.995
  text = fl_table.write_report(cells, str(tmp_path), [8], '# T')
  assert "every run's reported ε is within 0.1% of its target." in text


def test_epsilon_holds_at_most_the_target_and_within_rtol_below():
  rtol = fl_table.EQUAL_EPSILON_RTOL
  assert fl_table.epsilon_holds(3.0, 3.0)
  assert fl_table.epsilon_holds(3.0 * (1 - rtol), 3.0)
  assert not fl_table.epsilon_holds(3.0 * (1 - rtol) * 0.9999, 3.0)
  assert not fl_table.epsilon_holds(3.0 * (1 + 1e-12), 3.0)   # above: never
  assert not fl_table.epsilon_holds(3.087, 3.0)
  assert fl_table.epsilon_holds(9.95, 10.0, rtol=0.01)


def test_read_run_takes_the_secure_sums_field_bits(tmp_path):
  (tmp_path / 'metrics.csv').write_text(
      'round,secure_sum_bits,test_accuracy\n1,14,nan\n2,15,0.5\n3,nan,0.6\n')
  assert fl_table.read_run(str(tmp_path)).wire_bits == 15
  (tmp_path / 'metrics.csv').write_text('round,test_accuracy\n1,0.5\n')
  assert fl_table.read_run(str(tmp_path)).wire_bits is None


def test_a_cells_wire_bits_are_its_widest_runs():
  cell = fl_table.Cell('pbm', 10.0, 4, wire_bits=9)
  assert (cell.budget_bits, cell.label) == (9, 'pbm (4 level, 9 wire bits)')
  cell.add_run(0, fl_table.Run([(1, 0.6)], wire_bits=11), fl_table.LAST, 1,
               10.0)
  cell.add_run(1, fl_table.Run([(1, 0.6)]), fl_table.LAST, 1, 10.0)
  assert cell.wire_bits == 11
  assert fl_table.Cell('x', 10.0, 16).label == 'x (16 bits)'


def test_which_mechanism_budgets_are_wire_bits():
  # 'near' sends 4 level bits in an 11-bit field: a 4-bit budget does not
  # hold it, an 11-bit one does.
  cells = _table()
  next(c for c in cells if c.mechanism == 'near').wire_bits = 11
  rows = {b: r for _, b, *r in fl_table.which_mechanism(
      fl_table.analyse(cells), [4, 11])}
  assert 'near' not in rows[4][0] and 'near' not in rows[4][2]
  assert rows[11][2].startswith('mid (8 bits): ')   # ordered by wire bits
  assert '; near (4 level, 11 wire bits): ' in rows[11][2]
