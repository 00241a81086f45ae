"""Tests for tff_quant/program/fl_validation.py: the plan's constants against
the committed runs they come from, the dose cells and their runs, the resume
logic of a run folder, and the analysis on synthetic run folders with known
answers (the fit, its band, the residuals, the validation count, the
equivalence family), on partial data too."""

import csv
import glob
import json
import math
import os

import numpy as np
import pytest
from scipy import stats

from tff_quant.program import comparisons, fl_table
from tff_quant.program import fl_validation as fv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
TUNED = os.path.join(ROOT, 'results', 'fl_table_tuned')


def test_seeds_avoid_every_seed_of_the_committed_runs():
  """The plan's seeds and noise seeds are in no committed FL run (every
  summary.json and config.json under results/, this plan's folder aside),
  and the refusal names the seeds that clash."""
  seeds, noise = set(), set()
  for path in (glob.glob(os.path.join(ROOT, 'results', '**', '*.json'),
                         recursive=True)):
    if os.sep + 'fl_validation' + os.sep in path or not path.endswith(
        ('summary.json', 'config.json')):
      continue
    with open(path) as f:
      try:
        record = json.load(f)
      except ValueError:
        continue
    config = record.get('config', record) if isinstance(record, dict) else {}
    if isinstance(config, dict):
      seeds.add(config.get('seed'))
      noise.add(config.get('noise_seed'))
  seeds.discard(None)
  noise.discard(None)
  assert seeds and noise   # the scan found the committed runs
  assert seeds <= fv.USED_SEEDS and noise <= fv.USED_NOISE_SEEDS
  assert fv.check_seeds(fv.SEEDS) == list(fv.SEEDS)
  assert not set(fv.SEEDS) & seeds
  assert not {fv.NOISE_SEED_OFFSET + s for s in fv.SEEDS} & noise
  with pytest.raises(ValueError, match=r'seeds \[0, 3\]'):
    fv.check_seeds([0, 3, 100])
  with pytest.raises(ValueError, match=r'seeds \[1\]'):   # noise seed 1001
    fv.check_seeds([1])
  with pytest.raises(ValueError, match='distinct'):
    fv.check_seeds([100, 100])
  with pytest.raises(ValueError, match='seeds'):
    fv.check_seeds([-1])


def test_training_and_margins_are_the_tuned_tables():
  with open(os.path.join(TUNED, 'config.json')) as f:
    config = json.load(f)
  for key in ('dataset', 'model', 'rounds', 'clients_per_round',
              'total_clients', 'split_seed', 'rotate',
              'coordinate_clip_multiple'):
    assert fv.SETTING[key] == config[key], key
  for eps, tuned in config['tuned'].items():
    want = dict(tuned, server_lr_schedule=tuned.get('server_lr_schedule',
                                                    'constant'))
    assert fv.TRAINING[float(eps)] == want
  with open(os.path.join(TUNED, 'table.csv')) as f:
    rows = list(csv.DictReader(f))
  mean = {(r['mechanism'], r['epsilon']): float(r['endpoint_mean'])
          for r in rows}
  assert fv.NOISE_FREE_ENDPOINT == pytest.approx(mean['none', ''], abs=5e-5)
  for eps, value in fv.GAUSSIAN_ENDPOINT.items():
    assert value == pytest.approx(mean['gaussian', str(eps)], abs=5e-5)
  assert fv.MARGINS[3.0] == pytest.approx(0.016775)
  assert fv.MARGINS[10.0] == pytest.approx(0.007325)
  # The endpoint: rounds 400, 410, ..., 500 of the evaluations every 10.
  evals = [(r, r / 1000) for r in range(10, 501, 10)]
  assert [r for r, _ in evals if r >= fv.ENDPOINT.first_round(500)] == list(
      range(400, 501, 10))
  assert fv.ENDPOINT.value(evals, 500) == pytest.approx(0.45)
  with pytest.raises(ValueError, match='needs 11'):   # every 20 rounds: 6
    fv.ENDPOINT.value(evals[1::2], 500)


def test_dose_cells_runs_and_noise():
  cells = fv.dose_cells()
  assert [c.name for c in cells[:5]] == [
      'gaussian_eps3_m1', 'gaussian_eps3_m1.25', 'gaussian_eps3_m1.5',
      'gaussian_eps3_m2', 'gaussian_eps3_m3']
  assert len(cells) == 10
  runs = fv.planned_runs(cells, fv.SEEDS)
  assert len(runs) == 100
  assert {s for _, s in runs[:10]} == {100}   # seed-major
  assert fv.run_name(cells[3], 104) == 'gaussian_eps3_m2_s104'
  for m in fv.MULTIPLIERS:   # the variance ratio is m
    z = fv.scaled_noise_multiplier(3.65, m)
    assert (z / 3.65)**2 == pytest.approx(m, rel=1e-14)
  with pytest.raises(ValueError, match='multipliers'):
    fv.dose_cells(multipliers=[0.5, 1])
  with pytest.raises(ValueError, match='must include 1'):
    fv.dose_cells(multipliers=[2])
  with pytest.raises(ValueError, match='multiplier'):
    fv.scaled_noise_multiplier(1.0, 0)
  fields = fv.dose_fields(cells[3], 3.65)
  assert fields['predicted_ratio'] == fields['variance_multiplier'] == 2.0
  assert fields['level_bits'] is None and fields['wire_bits'] is None
  args = fv.fl_emnist_args(fv.SETTING, fv.TRAINING[3.0], 5.0, 104,
                           '/r/runs/gaussian_eps3_m2_s104')
  for want in ('--mechanism=gaussian', '--mechanism_params=noise_multiplier=5.0',
               '--seed=104', '--noise_seed=1104', '--split_seed=0',
               '--server_lr_schedule=cosine', '--eval_every=10',
               '--rounds=500', '--root_output_dir=/r/runs',
               '--experiment_name=gaussian_eps3_m2_s104'):
    assert want in args


def test_stored_calibration_is_reused_only_for_the_same_schedule(tmp_path):
  setting = dict(fv.SETTING, delta=1 / 3400)
  z3 = fv.stored_calibration(os.path.join(TUNED, 'calibrations.json'), 3.0,
                             setting)
  assert z3 == pytest.approx(3.6507149952758047)
  other = tmp_path / 'table'
  other.mkdir()
  with open(os.path.join(TUNED, 'config.json')) as f:
    config = json.load(f)
  (other / 'config.json').write_text(json.dumps(dict(config, rounds=300)))
  (other / 'calibrations.json').write_text(json.dumps(
      {'gaussian_eps3_b32': {'params': {'noise_multiplier': 9.0}}}))
  assert fv.stored_calibration(str(other / 'calibrations.json'), 3.0,
                               setting) is None
  (other / 'config.json').write_text(json.dumps(config))
  assert fv.stored_calibration(str(other / 'calibrations.json'), 3.0,
                               setting) == 9.0
  assert fv.stored_calibration(str(other / 'calibrations.json'), 10.0,
                               setting) is None
  assert fv.stored_calibration(str(tmp_path / 'none.json'), 3.0,
                               setting) is None


def _write_run(runs_dir, name, seed, accuracy, fields, rounds=500, every=10,
               epsilon=3.0):
  """A run folder as fl_emnist leaves it (accuracy constant after round
  300), with the validation's fields where `fields` is given."""
  path = os.path.join(runs_dir, name)
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'metrics.csv'), 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(['round', 'test_accuracy', 'train_loss',
                'clipped_clients_fraction'])
    for r in range(1, rounds + 1):
      acc = '' if r % every else (accuracy if r > 300 else 0.5)
      w.writerow([r, acc, 2.3 - r / rounds, 0.9])
  summary = dict(config=dict(rounds=rounds, seed=seed), epsilon=epsilon)
  with open(os.path.join(path, 'summary.json'), 'w') as f:
    json.dump(summary, f)
  if fields is not None:
    fv.complete(path, fields)
  return path


def test_complete_marks_a_run_finished_and_refuses_a_conflict(tmp_path):
  cell = fv.DoseCell(3.0, 2.0)
  path = str(tmp_path / 'runs' / 'gaussian_eps3_m2_s100')
  assert not fv.trained(path) and not fv.finished(path)
  with pytest.raises(ValueError, match='no summary.json'):
    fv.complete(path, fv.dose_fields(cell, 3.65))
  _write_run(str(tmp_path / 'runs'), 'gaussian_eps3_m2_s100', 100, 0.7, None)
  assert fv.trained(path) and not fv.finished(path)   # resumed: no retrain
  fv.complete(path, fv.dose_fields(cell, 3.65))
  assert fv.finished(path)
  with open(os.path.join(path, fv.SIDECAR)) as f:
    assert json.load(f) == fv.dose_fields(cell, 3.65)
  with open(os.path.join(path, 'summary.json')) as f:
    summary = json.load(f)
  assert summary['epsilon'] == 3.0 and summary['predicted_ratio'] == 2.0
  fv.complete(path, fv.dose_fields(cell, 3.65))   # again: unchanged
  with pytest.raises(ValueError, match='holds validation_cell'):
    fv.complete(path, fv.dose_fields(fv.DoseCell(3.0, 3.0), 3.65))
  with pytest.raises(ValueError, match='missing'):
    fv.complete(path, {'predicted_ratio': 2.0})


A, B = 0.80, -0.03   # the synthetic truth: y = A + u_s + B·√m (+ noise)


def _cell_fields(name, eps, ratio):
  return dict(validation_cell=name, validation_kind=fv.CELL,
              epsilon_target=eps, variance_multiplier=None,
              predicted_ratio=ratio, level_bits=6, wire_bits=9,
              noise_multiplier_calibrated=None)


def test_the_fit_recovers_a_known_line_and_the_residuals_a_known_shift(
    tmp_path):
  """Noise-free doses around per-seed block effects u_s: every seed's line
  is the truth, so the slope is B exactly and the band at m is the t
  interval of u_s. A cell 0.01 above the curve misses; one at the curve
  with ±0.002 noise covers 0 with the t half-width of that noise."""
  runs = str(tmp_path / 'runs')
  seeds = list(fv.SEEDS)
  u = np.linspace(-0.01, 0.01, len(seeds))
  for eps in fv.EPSILONS:
    for m in fv.MULTIPLIERS:
      for s, us in zip(seeds, u):
        cell = fv.DoseCell(eps, m)
        _write_run(runs, fv.run_name(cell, s), s, A + us + B * math.sqrt(m),
                   fv.dose_fields(cell, 1.0), epsilon=eps)
  wiggle = 0.002 * (-1.0)**np.arange(len(seeds))
  for s, us, w in zip(seeds, u, wiggle):
    _write_run(runs, f'pbm_eps3_w6_s{s}', s, A + us + B * math.sqrt(2) + 0.01,
               _cell_fields('pbm_eps3_w6', 3.0, 2.0))
    _write_run(runs, f'rqm_eps3_w7_s{s}', s, A + us + B * math.sqrt(1.5) + w,
               _cell_fields('rqm_eps3_w7', 3.0, 1.5))
  # An unfinished run (no validation fields) is left out.
  _write_run(runs, 'qmgeo_eps3_w6_s100', 100, 0.1, None)
  analysis = fv.analyse(runs)
  assert len(analysis.records) == 120
  fit = analysis.fits[3.0]
  assert fit.seeds == seeds
  mean, low, high = fit.slope()
  assert (mean, low, high) == pytest.approx((B, B, B), abs=1e-9)
  mean, low, high = fit.curve(2.0)
  half = stats.t.ppf(0.975, 9) * np.std(u, ddof=1) / math.sqrt(10)
  assert mean == pytest.approx(A + B * math.sqrt(2), abs=1e-9)
  assert (high - low) / 2 == pytest.approx(half, rel=1e-6)
  for m, (d, lo, hi, n) in fit.lack_of_fit().items():
    assert abs(d) < 1e-9 and n == 10
  by_cell = {r.cell: r for r in analysis.residuals}
  shifted, centred = by_cell['pbm_eps3_w6'], by_cell['rqm_eps3_w7']
  assert shifted.mean == pytest.approx(0.01, abs=1e-9)
  assert not shifted.covers_zero and not shifted.extrapolated
  assert centred.mean == pytest.approx(0.0, abs=1e-9) and centred.covers_zero
  half = stats.t.ppf(0.975, 9) * np.std(wiggle, ddof=1) / math.sqrt(10)
  assert (centred.high - centred.low) / 2 == pytest.approx(half, rel=1e-6)
  assert analysis.misses == 1 and fv.allowed_misses(2) == 1
  assert analysis.validated()
  # Equivalence: each cell minus the Gaussian at m = 1, at ε = 3's margin.
  got = {c.a[0]: c for c in analysis.comparisons}
  d = np.array([A + us + B * math.sqrt(2) + 0.01 - (A + us + B)
                for us in u])
  assert got['pbm_eps3_w6'].mean == pytest.approx(d.mean(), abs=1e-9)
  assert got['pbm_eps3_w6'].margin == fv.MARGINS[3.0]
  text = fv.report(analysis, 120, True)
  assert 'validated' in text and 'PARTIAL' not in text
  assert '| 3 | pbm_eps3_w6 | 2.000 | 10 | +0.010' in text


def test_equivalence_is_one_holm_family_at_each_epsilons_margin():
  """Two cells at two ε: the p-values are TOST's at each ε's own margin
  (unchanged by the scaling), adjusted by Holm over all four hypotheses."""
  rng = np.random.default_rng(7)
  records = []
  diffs = {3.0: rng.normal(0.004, 0.008, 10), 10.0: rng.normal(-0.002, 0.008,
                                                                 10)}
  for eps, d in diffs.items():
    for k, s in enumerate(fv.SEEDS):
      base = 0.78 + rng.normal(0, 0.01)
      records.append(fv.Record(f'g{eps}{s}', fv.DoseCell(eps, 1.0).name,
                               fv.DOSE, eps, s, 1.0, base, eps, 0, 0))
      records.append(fv.Record(f'c{eps}{s}', f'cell{eps:g}', fv.CELL, eps, s,
                               1.5, base + d[k], eps, 0, 0))
  family = fv.equivalence(records)
  p_diff = [float(comparisons.p_difference(diffs[e])) for e in (3.0, 10.0)]
  p_eq = [float(comparisons.p_equivalence(diffs[e], fv.MARGINS[e]))
          for e in (3.0, 10.0)]
  holm = comparisons.holm(p_diff + p_eq, groups=[0, 1, 0, 1])
  for k, c in enumerate(family):
    assert c.p_difference == pytest.approx(p_diff[k], rel=1e-9)
    assert c.p_equivalence == pytest.approx(p_eq[k], rel=1e-9)
    assert c.p_difference_holm == pytest.approx(holm[k], rel=1e-9)
    assert c.p_equivalence_holm == pytest.approx(holm[2 + k], rel=1e-9)
    assert c.mean == pytest.approx(diffs[c.a[1]].mean(), abs=1e-12)
  with pytest.raises(ValueError, match='no equivalence margin'):
    fv.equivalence(records, margins={3.0: 0.01})


def test_partial_data_uses_the_seeds_each_statement_has(tmp_path):
  """Seed 100 has one dose only (no line); seed 101 lacks the cell's run:
  the curve uses seeds 101–102, the residual seed 102 alone."""
  runs = str(tmp_path / 'runs')
  doses = {100: [1.0], 101: [1.0, 3.0], 102: [1.0, 2.0, 3.0]}
  for s, ms in doses.items():
    for m in ms:
      cell = fv.DoseCell(3.0, m)
      _write_run(runs, fv.run_name(cell, s), s, A + B * math.sqrt(m),
                 fv.dose_fields(cell, 1.0))
  for s in (100, 102):
    _write_run(runs, f'pbm_eps3_w6_s{s}', s, A + B * 2,
               _cell_fields('pbm_eps3_w6', 3.0, 4.0))
  analysis = fv.analyse(runs)
  fit = analysis.fits[3.0]
  assert fit.seeds == [101, 102]
  assert fit.curve(2.0)[0] == pytest.approx(A + B * math.sqrt(2), abs=1e-9)
  (res,) = analysis.residuals
  assert res.seeds == (102,) and res.extrapolated   # ×G 4 > the top dose 3
  assert res.mean == pytest.approx(0.0, abs=1e-9) and res.low == -math.inf
  (comparison,) = analysis.comparisons
  assert comparison.n == 2 and comparison.mean == pytest.approx(B)
  assert 'PARTIAL' in fv.report(analysis, 100, False)
  assert fv.analyse(str(tmp_path / 'empty')).fits == {}


def test_band_and_residual_intervals_cover_at_their_level():
  """Monte Carlo of the plan at n = 10 seeds, 5 doses, within-seed noise
  σ = 0.0064 and block effects sd 0.005: the band at m = 2 covers the true
  curve, and a right predictor's residual interval at ×G 1.5 covers 0, in
  95% of 2,000 repetitions (tolerance 4 binomial sds: ±0.020)."""
  rng = np.random.default_rng(2024)
  reps, hits_band, hits_res = 2000, 0, 0
  for _ in range(reps):
    records = []
    for s in fv.SEEDS:
      u = rng.normal(0, 0.005)
      for m in fv.MULTIPLIERS:
        y = A + u + B * math.sqrt(m) + rng.normal(0, 0.0064)
        records.append(fv.Record('', 'd', fv.DOSE, 3.0, s, m, y, 3.0, 0, 0))
      y = A + u + B * math.sqrt(1.5) + rng.normal(0, 0.0064)
      records.append(fv.Record('', 'c', fv.CELL, 3.0, s, 1.5, y, 3.0, 0, 0))
    fit = fv.fit_dose(records, 3.0)
    _, low, high = fit.curve(2.0)
    hits_band += low <= A + B * math.sqrt(2) <= high
    hits_res += fv.residuals(fit, records)[0].covers_zero
  tol = 4 * math.sqrt(0.95 * 0.05 / reps)
  assert abs(hits_band / reps - 0.95) <= tol
  assert abs(hits_res / reps - 0.95) <= tol


def test_allowed_misses_is_the_binomial_quantile():
  assert [fv.allowed_misses(k) for k in (4, 8, 14, 17, 30)] == [1, 2, 2, 3, 4]
  for k in (5, 20, 30):
    q = fv.allowed_misses(k)
    assert stats.binom.cdf(q, k, 0.05) >= 0.95 > stats.binom.cdf(q - 1, k,
                                                                 0.05)
  with pytest.raises(ValueError, match='cells'):
    fv.allowed_misses(0)


# --- The mechanism cells' rule (docs/fl_validation.md, "Mechanism cells").

def _answers(ratios):
  return {w: fv.BudgetAnswer(r, level_bits=1 if math.isfinite(r) else None)
          for w, r in ratios.items()}


@pytest.mark.parametrize('ratios, want', [
    ({2: math.inf, 3: 5.0, 4: 2.5, 5: 1.3, 6: 1.05, 7: 1.01}, (6, 4)),
    ({2: math.inf, 3: 1.05}, (3, None)),        # ≤ 3 first where ≤ 1.1: one
    ({2: math.inf, 3: math.inf}, (None, None)),
    ({2: 2.9, 3: 1.5}, (None, 2)),               # never ≤ 1.1
    ({4: 1.2, 2: 3.0, 3: 1.09}, (3, 2)),         # order of the keys is free
])
def test_wire_thresholds_are_the_fewest_bits_meeting_each_bound(ratios, want):
  assert fv.wire_thresholds(ratios) == want


def test_the_scan_may_stop_once_a_budget_reaches_the_high_bound():
  assert not fv.scan_is_enough({2: math.inf, 3: 2.0})
  assert fv.scan_is_enough({2: math.inf, 3: 2.0, 4: fv.HI_RATIO})


def test_cells_follow_the_rule_and_sit_on_the_dose_axis():
  """ε = 3: w_hi and w_lo; ε = 10: w_lo only; the dose is ×G times the
  ε's scale; mechanisms in the plan's order; no amendment when the counts
  and the spread of ×G are there."""
  answers = {}
  for m in fv.CELL_MECHANISMS:
    answers[(m, 10.0)] = _answers({2: 2.5, 3: 1.05})
    answers[(m, 3.0)] = _answers({2: math.inf, 3: 2.2, 4: 1.08})
  cells, amend = fv.choose_cells(answers, {3.0: 1.5, 10.0: 0.5})
  assert amend == []
  assert len(cells) == 3 * len(fv.CELL_MECHANISMS)
  first = [c for c in cells if c.mechanism == fv.CELL_MECHANISMS[0]]
  assert [(c.epsilon, c.role, c.wire_bits) for c in first] == [
      (3.0, 'w_hi', 4), (3.0, 'w_lo', 3), (10.0, 'w_lo', 2)]
  assert [c.dose for c in first] == pytest.approx([1.08 * 1.5, 2.2 * 1.5,
                                                   2.5 * 0.5])
  assert first[0].name == 'pbm_eps3_w4'
  table = fv.cells_json(cells, amend, dict(dim=fv.CELL_DIM))
  assert table['cells'][0]['predicted_ratio'] == 1.08
  assert json.loads(json.dumps(table)) == table


def test_the_committed_cells_run_their_parameters_at_their_wire_budget():
  """cells.json (committed before any mechanism run) read back: each cell's
  calibrated parameters without the clip (the run derives c∞ itself), a
  registry mechanism at --wire_bits, a TFF peer with its own bits; its
  summary gets the dose-axis position as predicted_ratio."""
  with open(os.path.join(ROOT, 'results', 'fl_validation', 'cells.json')) as f:
    table = json.load(f)
  cells = fv.planned_cells(table)
  assert [c.name for c in cells] == [e['name'] for e in table['cells']]
  by_name = {c.name: c for c in cells}
  qmgeo = next(c for c in cells if c.mechanism == 'qmgeo')
  args = fv.cell_args(fv.SETTING, fv.TRAINING[qmgeo.epsilon], qmgeo, 101,
                      f'/r/runs/{qmgeo.name}_s101')
  params = next(a for a in args if a.startswith('--mechanism_params='))
  assert 'clip=' not in params and 'full_support=true' in params
  assert f'--wire_bits={qmgeo.wire_bits}' in args and '--noise_seed=1101' in args
  peer = by_name['tff_dgauss_eps3_w13']
  args = fv.cell_args(fv.SETTING, fv.TRAINING[3.0], peer, 100, '/r/runs/x')
  assert not any(a.startswith('--wire_bits') for a in args)
  assert any(a.startswith('--mechanism_params=') and 'bits=13' in a
             for a in args)
  # A modular sum's field is its modulus (fl_emnist refuses --wire_bits).
  modular = fv.cell_args(fv.SETTING, fv.TRAINING[3.0],
                         by_name['ddgauss_eps3_w11'], 100, '/r/runs/y')
  assert not any(a.startswith('--wire_bits') for a in modular)
  assert any('num_levels=2048' in a for a in modular)
  fields = fv.cell_fields(qmgeo)
  assert set(fields) == set(fv.FIELDS) and fields['validation_kind'] == fv.CELL
  assert fields['predicted_ratio'] == qmgeo.dose != qmgeo.ratio
  assert fields['wire_bits'] == qmgeo.wire_bits
  with pytest.raises(ValueError, match='without its fields'):
    fv.planned_cells({'cells': [{'name': 'x'}]})


def test_too_few_cells_or_no_spread_call_for_an_amendment():
  answers = {('pbm', 3.0): _answers({2: 1.05}),       # w_hi only
             ('pbm', 10.0): _answers({2: 1.5, 3: 1.0})}
  cells, amend = fv.choose_cells(answers, {3.0: 1.0, 10.0: 1.0})
  assert [c.name for c in cells] == ['pbm_eps3_w2', 'pbm_eps10_w2']
  assert any('ε = 3: 1 cells' in a for a in amend)
  assert any('ε = 10: 1 cells' in a for a in amend)
  assert any('×G >= 2' in a for a in amend)


def test_more_cells_than_the_plan_allows_are_refused():
  answers = {(f'm{i}', 3.0): _answers({2: 2.0, 3: 1.0}) for i in range(16)}
  with pytest.raises(ValueError, match='more than 30'):
    fv.choose_cells(answers, {3.0: 1.0})
  with pytest.raises(ValueError, match='dose_scale'):
    fv.choose_cells({('pbm', 3.0): _answers({2: 1.0})}, {10.0: 1.0})


def test_the_scan_goes_upward_until_the_high_bound_and_resumes():
  """Budgets are asked upward and the scan stops at the first ×G <= 1.1;
  a second start with the saved store asks nothing again."""
  ratios = {2: math.inf, 3: 2.5, 4: 1.05, 5: 1.01}
  asked, saved = [], []

  def answer(mech, eps, w):
    asked.append((mech, eps, w))
    return fv.BudgetAnswer(ratios[w], level_bits=1)

  store = {}
  got = fv.scan_budgets(answer, store, lambda s: saved.append(dict(s)),
                        mechanisms=('pbm',), epsilons=(3.0,), budgets=(5, 4, 3, 2),
                        progress=lambda line: None)
  assert asked == [('pbm', 3.0, 2), ('pbm', 3.0, 3), ('pbm', 3.0, 4)]
  assert sorted(got[('pbm', 3.0)]) == [2, 3, 4] and len(saved) == 3
  again = fv.scan_budgets(answer, json.loads(json.dumps(saved[-1])),
                          lambda s: None, mechanisms=('pbm',), epsilons=(3.0,),
                          budgets=(2, 3, 4, 5), progress=lambda line: None)
  assert len(asked) == 3 and again == got
