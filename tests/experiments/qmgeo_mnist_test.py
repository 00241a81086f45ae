import os
import subprocess
import sys

from tff_quant.program import results_io, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, *flags):
  return subprocess.run(
      [sys.executable, '-m', 'experiments.qmgeo_mnist', f'--root_output_dir={tmp_path}',
       *flags], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_smoke_two_settings_then_bad_flags(tmp_path):
  before = set(runtime.worker_pids(only_children=False))
  res = _run(tmp_path, '--rounds=2', '--eval_every=1', '--settings=none,8:0.5',
             '--noise_seed=1')
  assert res.returncode == 0, res.stderr[-3000:]
  rows = results_io.read_csv(str(tmp_path / 'summary.csv'))
  assert [r['setting'] for r in rows] == ['none', 'R8_p0.5']
  qm = rows[1]
  assert qm['paper_reported_eps_per_round'] == '0.784'
  assert float(qm['paper_eq27_at_paper_kappa']) < 0  # the paper's ε is |eq. 27|
  assert float(qm['exact_rdp2_per_round_secure_sum']) > 0
  assert 'MNIST' in res.stdout and 'PCA to 100' in res.stdout
  assert len(results_io.read_csv(str(tmp_path / 'R8_p0.5' / 'metrics.csv'))) == 2
  assert os.path.getsize(tmp_path / 'accuracy_vs_rounds.png') > 0
  assert not set(runtime.worker_pids(only_children=False)) - before  # none left behind
  bad = _run(tmp_path / 'bad', '--settings=8:1.5')
  assert bad.returncode == 2 and '`p`' in bad.stderr
  bad = _run(tmp_path / 'bad', '--settings=8-0.5')
  assert bad.returncode == 2 and 'R:p' in bad.stderr
  assert not os.path.exists(tmp_path / 'bad')
