"""Tests for experiments/fl_validation.py: --help, the dry run (--plan)
listing the pre-registered cells and the fl_emnist command of each run,
refused flags, the report refused before every run has finished, and one
tiny run end to end: trained once, its summary.json carrying the
validation's fields, skipped at the next start."""

import json
import os

from tests.experiments import binaries

MODULE = 'experiments.fl_validation'
TINY = ['--epsilons=10', '--multipliers=1', '--seeds=100', '--rounds=2',
        '--clients_per_round=4', '--total_clients=20', '--eval_every=1']


def test_help_exits_zero_and_names_the_flags():
  got = binaries.run(MODULE, ['--help'], timeout=120)
  assert got.returncode == 0, got.stderr[-2000:]
  for flag in ('--runs', '--plan', '--report_only', '--max_runs', '--nice'):
    assert flag in got.stdout


def test_plan_lists_the_preregistered_cells_and_writes_nothing(tmp_path):
  out = str(tmp_path / 'v')
  got = binaries.run(MODULE, [f'--output_dir={out}', '--plan'], timeout=120)
  assert got.returncode == 0, got.stderr[-2000:]
  assert '10 cells, 100 runs (0 finished); seeds 100..109' in got.stdout
  for eps in ('3', '10'):
    for m in ('1', '1.25', '1.5', '2', '3'):
      assert f'gaussian_eps{eps}_m{m}: ε = {eps}, variance ×{m}' in got.stdout
  # The tuned table's calibration, scaled by √m, and the block's seeds.
  line = next(l for l in got.stdout.splitlines()
              if l.startswith('[to do] gaussian_eps3_m1_s107:'))
  for want in ('--mechanism_params=noise_multiplier=3.6507149952758047',
               '--seed=107', '--noise_seed=1107', '--rounds=500',
               '--server_lr_schedule=cosine', '--clip_norm=0.518'):
    assert want in line
  assert '--mechanism_params=noise_multiplier=2.307483445810294' in (
      got.stdout)   # ε = 10, m = 2: 1.6316371920081603·√2
  assert not os.path.exists(out)


def test_plan_adds_the_mechanism_cells_once_cells_json_exists(tmp_path):
  out = tmp_path / 'v'
  out.mkdir()
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
      __file__))))
  with open(os.path.join(root, 'results', 'fl_validation', 'cells.json')) as f:
    table = json.load(f)
  (out / 'cells.json').write_text(json.dumps(table))
  got = binaries.run(MODULE, [f'--output_dir={out}', '--plan'], timeout=120)
  assert got.returncode == 0, got.stderr[-2000:]
  cells = len(table['cells'])
  assert f'{10 + cells} cells, {10 * (10 + cells)} runs' in got.stdout
  line = next(l for l in got.stdout.splitlines()
              if l.startswith('[to do] pbm_eps3_w6_s103:'))
  for want in ('--mechanism=pbm', '--wire_bits=6', '--seed=103',
               '--noise_seed=1103', 'theta=0.043898168585944336'):
    assert want in line


def test_bad_flags_and_an_early_report_are_refused(tmp_path):
  out = f'--output_dir={tmp_path / "v"}'
  for flags, name in ((['--seeds=3'], 'seeds'),
                      (['--seeds=x'], '--seeds'),
                      (['--multipliers=0.5,1'], '--multipliers'),
                      (['--multipliers=2'], 'multipliers'),
                      (['--epsilons=5'], '--epsilons'),
                      (['--runs=nope'], '--runs')):
    got = binaries.run(MODULE, [out, '--plan', *flags], timeout=120)
    assert got.returncode == 2 and name in got.stderr, (flags, got.stderr)
  early = binaries.run(MODULE, [out, '--report_only'], timeout=120)
  assert early.returncode == 2 and 'have not finished' in early.stderr


def test_a_tiny_run_trains_once_and_carries_the_fields(tmp_path):
  out = str(tmp_path / 'v')
  first = binaries.run(MODULE, [f'--output_dir={out}', *TINY], timeout=900)
  assert first.returncode == 0, first.stderr[-3000:]
  assert not first.leftover_workers
  run = os.path.join(out, 'runs', 'gaussian_eps10_m1_s100')
  with open(os.path.join(run, 'summary.json')) as f:
    summary = json.load(f)
  with open(os.path.join(out, 'calibrations.json')) as f:
    z = json.load(f)['gaussian_eps10']['noise_multiplier']
  assert summary['predicted_ratio'] == summary['variance_multiplier'] == 1.0
  assert summary['level_bits'] is None and summary['wire_bits'] is None
  assert summary['config']['mechanism_params'] == {'noise_multiplier': z}
  assert summary['config']['seed'] == 100
  assert summary['config']['noise_seed'] == 1100
  # The tuned table's schedule differs (rounds, population): calibrated here.
  assert abs(summary['epsilon'] - 10) <= 0.01
  again = binaries.run(MODULE, [f'--output_dir={out}', *TINY], timeout=600)
  assert again.returncode == 0 and '[run ' not in again.stdout
  assert '1 of 1 planned runs finished' in again.stdout
  plan = binaries.run(MODULE, [f'--output_dir={out}', '--plan', *TINY],
                      timeout=120)
  assert '1 cells, 1 runs (1 finished)' in plan.stdout
  other = binaries.run(MODULE, [f'--output_dir={out}', '--plan', '--rounds=3',
                                *TINY[:3]], timeout=120)
  assert other.returncode == 2 and 'another setting' in other.stderr
