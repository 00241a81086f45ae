import json
import math
import os
import subprocess
import sys

import pytest

from experiments import reaccount_runs
from tff_quant import accounting
from tff_quant import mechanisms

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_run(run_dir, mechanism, params, epsilon=9.5):
  """config.json / summary.json as fl_emnist writes them (the fields read)."""
  os.makedirs(run_dir)
  config = dict(mechanism=mechanism, mechanism_params=params, clip_norm=1.0,
                coordinate_clip_multiple=3.0, clients_per_round=20,
                total_clients=500)
  summary = dict(rounds_completed=10, test_accuracy=0.5, epsilon=epsilon,
                 delta=1 / 500, dim=256)
  for name, obj in (('config.json', config), ('summary.json', summary)):
    with open(os.path.join(run_dir, name), 'w') as f:
      json.dump(obj, f)


def test_reaccounts_a_registry_run_from_what_it_ran(tmp_path):
  params = dict(num_levels=8, delta_ratio=8.0, q=0.2)
  write_run(str(tmp_path / 'rqm'), 'rqm', params)
  row = reaccount_runs.reaccount(str(tmp_path / 'rqm'))
  mech = mechanisms.get('rqm').for_coordinate_bound(3 / math.sqrt(256), **params)
  want = accounting.training_guarantee(mech, 10, 20, 500, 1 / 500, dim=256,
                                       l2_clip=1.0, use_pld=False)
  assert row['epsilon_now'] == pytest.approx(want.epsilon, rel=1e-12)
  assert row['epsilon_attained'] == pytest.approx(want.epsilon_attained,
                                                  rel=1e-12)
  assert 0 < row['epsilon_attained'] <= row['epsilon_now']
  assert 'others 19 at' in row['attained_by']
  assert row['epsilon_reported'] == 9.5 and row['others'] == 'any'
  assumed = reaccount_runs.reaccount(str(tmp_path / 'rqm'), 'extremes')
  assert 'ASSUMED' in assumed['note'] and 'ASSUMED' not in row['note']


def test_peers_are_listed_as_reported(tmp_path):
  write_run(str(tmp_path / 'tff'), 'tff_skellam', dict(bits=16), epsilon=3.0)
  row = reaccount_runs.reaccount(str(tmp_path / 'tff'))
  assert row['epsilon_now'] == 3.0 and 'peer' in row['note']


def test_binary_writes_the_csv_and_refuses_an_empty_folder(tmp_path):
  write_run(str(tmp_path / 'runs' / 'rqm'), 'rqm',
            dict(num_levels=8, delta_ratio=8.0, q=0.2))
  run = lambda d: subprocess.run(
      [sys.executable, '-m', 'experiments.reaccount_runs', f'--runs_dir={d}'],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  res = run(tmp_path / 'runs')
  assert res.returncode == 0, res.stderr
  assert os.path.exists(tmp_path / 'runs' / 'reaccounted.csv')
  os.makedirs(tmp_path / 'empty')
  res = run(tmp_path / 'empty')
  assert res.returncode == 2 and 'no finished run' in res.stderr
  assert not os.path.exists(tmp_path / 'empty' / 'reaccounted.csv')
