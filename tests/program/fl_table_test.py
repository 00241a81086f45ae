"""Tests for tff_quant/program/fl_table.py: Student-t intervals, verdicts only
where intervals separate, recommendations with their ties, the report files."""

import math
import os

import numpy as np
import pytest
from scipy import stats

from tff_quant.program import fl_table


def _cell(name, accs, eps=10.0, bits=8):
  return fl_table.Cell(name, eps, bits, dict(enumerate(accs)),
                       {i: eps for i in range(len(accs))})


def test_interval_is_the_student_t_interval_of_the_mean():
  accs = [0.70, 0.72, 0.75]
  mean, lo, hi = _cell('a', accs).interval()
  half = stats.t.ppf(0.975, 2) * np.std(accs, ddof=1) / math.sqrt(3)
  assert mean == pytest.approx(np.mean(accs))
  assert (lo, hi) == pytest.approx((mean - half, mean + half))
  assert _cell('a', [0.7]).interval()[1] == -math.inf
  assert math.isnan(_cell('a', []).interval()[0])


def test_coverage_of_the_interval_is_95_percent():
  """Seeded Monte Carlo: 4,000 cells of 3 normal draws; the interval holds
  the true mean in 95% of them (binomial sd 0.34%: tolerance 4 sd)."""
  rng = np.random.default_rng(0)
  hits = 0
  for _ in range(4000):
    _, lo, hi = _cell('a', list(rng.normal(0.7, 0.02, 3))).interval()
    hits += lo <= 0.7 <= hi
  assert abs(hits / 4000 - 0.95) < 4 * math.sqrt(0.95 * 0.05 / 4000)


def test_verdicts_only_where_intervals_separate():
  high = _cell('high', [0.80, 0.81, 0.80])
  low = _cell('low', [0.60, 0.61, 0.60])
  near = _cell('near', [0.79, 0.81, 0.80])
  lines = fl_table.verdicts([high, low, near])
  assert any('high' in l and '> low' in l for l in lines)
  assert not any('near' in l and 'high' in l for l in lines[:-1])
  assert lines[-1].startswith('1 pairs')   # high vs near
  assert fl_table.separated(high, near) == 0
  assert fl_table.separated(low, high) == -1


def test_recommendation_names_the_best_and_its_ties_within_the_budget():
  cells = [_cell('a', [0.80, 0.81, 0.80], bits=8),
           _cell('b', [0.79, 0.81, 0.80], bits=4),
           _cell('c', [0.50, 0.51, 0.50], bits=4),
           _cell('d', [0.90, 0.91, 0.90], bits=16)]
  rec = {(e, b): (best, tied) for e, b, best, tied in
         fl_table.recommendations(cells, [4, 8, 16])}
  assert rec[(10.0, 4)][0].startswith('b (4 bits)')
  assert rec[(10.0, 8)][0].startswith('a (8 bits)')
  assert 'b (4 bits)' in rec[(10.0, 8)][1] and 'c' not in rec[(10.0, 8)][1]
  assert rec[(10.0, 16)][0].startswith('d (16 bits)')


def test_a_single_run_is_never_recommended_over_a_cell_with_an_interval():
  cells = [_cell('a', [0.80, 0.81, 0.80]), _cell('one', [0.95])]
  (_, _, best, tied), = fl_table.recommendations(cells, [8])
  assert best.startswith('a (8 bits)') and 'one (8 bits): 0.950, 1 seed' in tied
  (_, _, best, _), = fl_table.recommendations([_cell('one', [0.95])], [8])
  assert best == 'one (8 bits): 0.950, 1 seed'


def test_report_and_plot_are_written(tmp_path):
  cells = [_cell('a', [0.80, 0.81, 0.80]), _cell('b', [0.6, 0.62, 0.61]),
           fl_table.Cell('skellam', 10.0, 4, reason='needs 11 bits'),
           fl_table.Cell('none', None, fl_table.FLOAT_BITS, {0: 0.85, 1: 0.86})]
  text = fl_table.write_report(cells, str(tmp_path), [4, 8], '# T')
  assert 'needs 11 bits' in text and 'Which mechanism' in text
  assert os.path.exists(tmp_path / 'table.csv')
  fl_table.plot(cells, str(tmp_path / 't.png'), 'title')
  assert os.path.getsize(tmp_path / 't.png') > 1000


def test_eta_takes_each_run_at_its_mechanisms_pace():
  """Two finished PBM runs at 60 s and 120 s and one TFF run at 2,400 s: a
  PBM run, a TFF run and a run of an unseen mechanism (at the mean of all,
  860 s) take (90 + 2,400 + 860) s; nothing finished: no ETA."""
  done = [('pbm', 60.0), ('pbm', 120.0), ('tff_skellam', 2400.0)]
  hours = fl_table.eta_hours(['pbm', 'tff_skellam', 'qmgeo'], done)
  assert abs(hours * 3600 - (90 + 2400 + 860)) < 1e-6
  assert fl_table.eta_hours(['pbm'], []) is None
