import os

from tff_quant.program import results_io
from tests.experiments import binaries


def _run(tmp_path, *flags):
  return binaries.run(
      'experiments.qgauss_mia',
      [f'--root_output_dir={tmp_path}', '--members=30', '--num_shadows=2',
       '--rounds=1', '--local_epochs=1', '--num_clients=3', *flags])


def test_smoke_one_setting_resumes_and_rejects_bad_flags(tmp_path):
  res = _run(tmp_path, '--levels=4', '--sigma_levels=', '--clean=false')
  assert res.returncode == 0, res.stderr[-3000:]
  assert 'Exception ignored' not in res.stderr, res.stderr[-3000:]
  rows = results_io.read_csv(str(tmp_path / 'summary.csv'))
  assert [r['setting'] for r in rows] == ['k4_z0.1']
  assert 0.5 <= float(rows[0]['accuracy']) <= 1 and 0 <= float(rows[0]['auc']) <= 1
  assert 'Fashion-MNIST (70,000 real' in res.stdout
  assert os.path.getsize(tmp_path / 'mia.png') > 0
  assert not res.leftover_workers  # none left behind
  # Same flags again: the finished setting is reused, not retrained.
  again = _run(tmp_path, '--levels=4', '--sigma_levels=', '--clean=false')
  assert again.returncode == 0 and 'k4_z0.1: done before' in again.stdout
  assert results_io.read_csv(str(tmp_path / 'summary.csv')) == rows
  # Other settings in the same folder: refused, nothing overwritten.
  changed = _run(tmp_path, '--levels=4', '--sigma_levels=', '--clean=false',
                 '--client_lr=0.3')
  assert changed.returncode == 2 and 'client_lr' in changed.stderr
  assert 'data: ' not in changed.stdout   # refused before the data loads
  assert results_io.read_csv(str(tmp_path / 'summary.csv')) == rows
  bad = _run(tmp_path / 'bad', '--levels=1')
  assert bad.returncode == 2 and '--levels' in bad.stderr
  assert not os.path.exists(tmp_path / 'bad')
