import os
import subprocess
import sys
import time

from tff_quant.program import results_io
from tests.experiments import binaries

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(tmp_path, *flags):
  return binaries.run('experiments.qmgeo_mnist',
                      [f'--root_output_dir={tmp_path}', *flags])


def test_smoke_two_settings_then_bad_flags(tmp_path):
  res = _run(tmp_path, '--rounds=2', '--eval_every=1', '--settings=none,8:0.5',
             '--noise_seed=1')
  assert res.returncode == 0, res.stderr[-3000:]
  assert 'Exception ignored' not in res.stderr, res.stderr[-3000:]
  rows = results_io.read_csv(str(tmp_path / 'summary.csv'))
  assert [r['setting'] for r in rows] == ['none', 'R8_p0.5']
  qm = rows[1]
  assert qm['paper_reported_eps_per_round'] == '0.784'
  assert float(qm['paper_eq27_at_paper_kappa']) < 0  # the paper's ε is |eq. 27|
  assert float(qm['exact_rdp2_per_round_secure_sum']) > 0
  assert 'MNIST' in res.stdout and 'PCA to 100' in res.stdout
  assert len(results_io.read_csv(str(tmp_path / 'R8_p0.5' / 'metrics.csv'))) == 2
  assert os.path.getsize(tmp_path / 'accuracy_vs_rounds.png') > 0
  assert not res.leftover_workers  # none left behind
  bad = _run(tmp_path / 'bad', '--settings=8:1.5')
  assert bad.returncode == 2 and '`p`' in bad.stderr
  bad = _run(tmp_path / 'bad', '--settings=8-0.5')
  assert bad.returncode == 2 and 'R:p' in bad.stderr
  assert not os.path.exists(tmp_path / 'bad')


def _group_alive(pgid):
  """PIDs of live processes in process group `pgid` (the run and its workers)."""
  alive = []
  for entry in os.listdir('/proc'):
    if entry.isdigit():
      try:
        with open(f'/proc/{entry}/stat') as f:
          fields = f.read().rsplit(')', 1)[1].split()
      except OSError:
        continue
      if int(fields[2]) == pgid and fields[0] != 'Z':
        alive.append(int(entry))
  return alive


def test_ctrl_c_mid_run_is_one_line_exit_130_and_the_rerun_resumes(tmp_path):
  """Ctrl-C from a terminal (SIGINT to the run and its TFF worker): one line
  naming the setting and the round, status 130, no process of the run left;
  the same command resumes from the round it was interrupted in."""
  import signal  # pylint: disable=g-import-not-at-top
  args = [sys.executable, '-m', 'experiments.qmgeo_mnist',
          f'--root_output_dir={tmp_path}', '--rounds=50', '--eval_every=1',
          '--settings=8:0.5', '--noise_seed=1']
  child = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
  try:
    for line in child.stdout:
      if line.startswith('round 2/'):
        break
    os.killpg(child.pid, signal.SIGINT)
    out, err = child.communicate(timeout=120)
  finally:
    if child.poll() is None:
      os.killpg(child.pid, signal.SIGKILL)
    child.wait()
  assert child.returncode == 130, err[-3000:]
  assert 'Traceback' not in err and 'Exception ignored' not in err, err[-3000:]
  last = err.strip().splitlines()[-1]
  assert last.startswith('R8_p0.5: interrupted at round '), err[-3000:]
  stopped = int(last.split('round ')[1].split(';')[0])
  assert last.endswith(f'; rerun the same command to resume from round {stopped}')
  assert sum('interrupted' in l for l in err.splitlines()) == 1
  assert 'round 50/50' not in out
  deadline = time.time() + 10   # the worker too (it got the SIGINT as well)
  while time.time() < deadline and _group_alive(child.pid):
    time.sleep(0.1)
  assert not _group_alive(child.pid)
  again = _run(tmp_path, f'--rounds={stopped + 1}', '--eval_every=1',
               '--settings=8:0.5', '--noise_seed=1')
  assert again.returncode == 0, again.stderr[-3000:]
  assert f'from round {stopped - 1}' in again.stdout
  assert 'round 1/' not in again.stdout
  rows = results_io.read_csv(str(tmp_path / 'R8_p0.5' / 'metrics.csv'))
  assert [int(r['round']) for r in rows] == list(range(1, stopped + 2))
