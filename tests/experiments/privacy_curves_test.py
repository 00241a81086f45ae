import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_smoke_writes_csv_png_and_verdicts(tmp_path):
  res = subprocess.run(
      [sys.executable, '-m', 'experiments.privacy_curves', '--max_clients=3',
       '--alphas=2,10', f'--output_dir={tmp_path}'], cwd=ROOT, capture_output=True,
      text=True, timeout=600)
  assert res.returncode == 0, res.stderr[-2000:]
  assert 'Exception ignored' not in res.stderr, res.stderr[-2000:]
  for name in ['rqm_vs_pbm.png', 'rqm_vs_pbm_vs_n.csv', 'rqm_vs_pbm_vs_alpha.csv',
               'quantized_gaussian_eps_vs_k.csv', 'qmgeo_eps_vs_p.csv',
               'verdicts.txt']:
    assert os.path.getsize(tmp_path / name) > 0, name
  assert 'CONFIRMED' in res.stdout
  bad = subprocess.run([sys.executable, '-m', 'experiments.privacy_curves',
                        '--alphas=0.5', f'--output_dir={tmp_path}'], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert bad.returncode != 0 and 'alphas' in bad.stderr


def test_bad_flags_are_one_line_and_exit_2(tmp_path):
  for flag, name in [('--alphas=abc', '--alphas'), ('--max_clients=0', '--max_clients')]:
    res = subprocess.run([sys.executable, '-m', 'experiments.privacy_curves', flag,
                          f'--output_dir={tmp_path / "out"}'], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    assert res.stderr.startswith('error: ') and name in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
