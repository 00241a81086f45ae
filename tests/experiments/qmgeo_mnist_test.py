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


def test_ctrl_c_mid_run_then_the_rerun_resumes_and_reports_two_settings(
    tmp_path):
  """One interrupted run and its rerun check what two runs did (a TensorFlow
  process fewer):

  Ctrl-C from a terminal (SIGINT to the run and its TFF worker): one line
  naming the setting and the round, status 130, no process of the run left;
  the same command resumes from the round it was interrupted in.

  The smoke of two settings (R8_p0.5, then the noise-free one): the
  summary's rows with the paper's figures, MNIST with PCA to 100, the
  metrics of every round, the plot, no worker left; then bad flags
  refused before anything is written."""
  import signal  # pylint: disable=g-import-not-at-top
  args = [sys.executable, '-m', 'experiments.qmgeo_mnist',
          f'--root_output_dir={tmp_path}', '--rounds=50', '--eval_every=1',
          '--settings=8:0.5,none', '--noise_seed=1']
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
               '--settings=8:0.5,none', '--noise_seed=1')
  assert again.returncode == 0, again.stderr[-3000:]
  assert 'Exception ignored' not in again.stderr, again.stderr[-3000:]
  assert f'from round {stopped - 1}' in again.stdout
  # R8_p0.5 resumed (its lines end where the noise-free setting's begin).
  resumed = again.stdout.split('R8_p0.5: ')[1].split('\nnone: ')[0]
  assert 'round 1/' not in resumed and f'round {stopped + 1}/' in resumed
  rows = results_io.read_csv(str(tmp_path / 'R8_p0.5' / 'metrics.csv'))
  assert [int(r['round']) for r in rows] == list(range(1, stopped + 2))
  rows = results_io.read_csv(str(tmp_path / 'summary.csv'))
  assert [r['setting'] for r in rows] == ['R8_p0.5', 'none']
  qm = rows[0]
  assert qm['paper_reported_eps_per_round'] == '0.784'
  assert float(qm['paper_eq27_at_paper_kappa']) < 0  # the paper's ε is |eq. 27|
  assert float(qm['exact_rdp2_per_round_secure_sum']) > 0
  assert 'MNIST' in again.stdout and 'PCA to 100' in again.stdout
  assert len(results_io.read_csv(str(tmp_path / 'none' / 'metrics.csv'))) == (
      stopped + 1)
  assert os.path.getsize(tmp_path / 'accuracy_vs_rounds.png') > 0
  assert not again.leftover_workers  # none left behind
  bad = _run(tmp_path / 'bad', '--settings=8:1.5')
  assert bad.returncode == 2 and '`p`' in bad.stderr
  bad = _run(tmp_path / 'bad', '--settings=8-0.5')
  assert bad.returncode == 2 and 'R:p' in bad.stderr
  assert not os.path.exists(tmp_path / 'bad')
