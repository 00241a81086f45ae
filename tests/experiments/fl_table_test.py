"""Tests for experiments/fl_table.py: a tiny table end to end (calibration,
runs through fl_emnist, the report), resumed without re-running, refused on a
folder of other settings, and a refused cell reported with its reason."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = ['--epsilons=10', '--bits=4', '--seeds=1', '--rounds=1',
        '--clients_per_round=4', '--total_clients=20', '--eval_every=1']


def _table(out, *extra):
  return subprocess.run(
      [sys.executable, '-m', 'experiments.fl_table', f'--output_dir={out}',
       *TINY, *extra], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_tiny_table_runs_reports_and_resumes(tmp_path):
  out = str(tmp_path / 'table')
  first = _table(out, '--mechanisms=pbm,skellam,none')
  assert first.returncode == 0, first.stderr[-3000:]
  for run in ('pbm_eps10_b4_s0', 'none_s0'):
    assert os.path.exists(os.path.join(out, 'runs', run, 'summary.json'))
  with open(os.path.join(out, 'calibrations.json')) as f:
    cal = json.load(f)
  assert 'reason' in cal['skellam_eps10_b4']   # 4 bits cannot serve it here
  text = open(os.path.join(out, 'table.md')).read()
  assert 'Which mechanism should I use?' in text and 'SIMULATED' in text
  assert os.path.getsize(os.path.join(out, 'table.png')) > 1000
  again = _table(out, '--mechanisms=pbm,skellam,none')
  assert again.returncode == 0 and '[run ' not in again.stdout
  plan = _table(out, '--mechanisms=pbm,skellam,none', '--plan')
  assert '3 cells, 3 runs (2 finished)' in plan.stdout
  other = _table(out, '--mechanisms=pbm', '--rounds=2')
  assert other.returncode != 0 and 'other settings' in other.stderr


def test_bad_flags_are_refused(tmp_path):
  bad = _table(str(tmp_path / 't'), '--mechanisms=nope', '--plan')
  assert bad.returncode != 0 and '--mechanisms' in bad.stderr
