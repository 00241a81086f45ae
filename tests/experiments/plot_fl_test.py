import csv
import json
import os

import pytest

from experiments import plot_fl


def write_run(run_dir, mechanism, rows):
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, 'config.json'), 'w') as f:
    json.dump({'mechanism': mechanism}, f)
  with open(os.path.join(run_dir, 'metrics.csv'), 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=['round', 'train_loss', 'test_accuracy',
                                      'epsilon', 'epsilon_per_coordinate'])
    w.writeheader()
    w.writerows(rows)


def test_plot_writes_png(tmp_path):
  rows = [dict(round=r, train_loss=2.0 / r, test_accuracy=0.1 * r if r % 2 else 'nan',
               epsilon=5.0 * r, epsilon_per_coordinate=0.5 * r) for r in range(1, 5)]
  write_run(str(tmp_path / 'a'), 'rqm', rows)
  write_run(str(tmp_path / 'b'), 'none', [dict(r, epsilon='inf', epsilon_per_coordinate='inf')
                                          for r in rows])
  out = plot_fl.plot([str(tmp_path / 'a'), str(tmp_path / 'b')],
                     str(tmp_path / 'p.png'))
  assert os.path.getsize(out) > 10_000


def test_missing_run_raises(tmp_path):
  with pytest.raises(FileNotFoundError, match='metrics.csv'):
    plot_fl.plot([str(tmp_path / 'nope')], str(tmp_path / 'p.png'))


def test_binary_missing_run_is_one_line_and_exit_2(tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  res = subprocess.run([sys.executable, '-m', 'experiments.plot_fl',
                        '--run_dirs=/nonexistent/run',
                        f'--output={tmp_path / "p.png"}'], cwd=root,
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == 2
  assert res.stderr.strip().splitlines() == [
      'error: /nonexistent/run/metrics.csv not found: is /nonexistent/run an '
      'fl_emnist run?']
