"""Tests for experiments/fl_table.py: a tiny table end to end (calibration,
runs through fl_emnist, the report with its endpoint and plots), resumed
without re-running, refused on a folder of other settings, a refused cell
reported with its reason, and stopped by SIGTERM with its calibration child."""

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# logreg: the rotated d of small_cnn (8,192), the runs several times faster.
TINY = ['--epsilons=10', '--bits=4', '--seeds=1', '--rounds=1',
        '--clients_per_round=4', '--total_clients=20', '--eval_every=1',
        '--model=logreg']


def _table(out, *extra):
  return subprocess.run(
      [sys.executable, '-m', 'experiments.fl_table', f'--output_dir={out}',
       *TINY, *extra], cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_bad_flags_are_refused(tmp_path):
  bad = _table(str(tmp_path / 't'), '--mechanisms=nope', '--plan')
  assert bad.returncode != 0 and '--mechanisms' in bad.stderr
  limit = _table(str(tmp_path / 't'), '--max_calibration_seconds=0', '--plan')
  assert limit.returncode != 0 and '--max_calibration_seconds' in limit.stderr
  assert not os.path.exists(str(tmp_path / 't'))   # refused before writing


def test_mechanism_bits_replace_the_bits_of_the_mechanisms_named(tmp_path):
  """pbm at --bits (4), skellam at its own 16 and 12: three cells; a name
  not in --mechanisms, the Gaussian, or bits that are not integers in
  1..24 are refused naming the flag."""
  plan = _table(str(tmp_path / 't'), '--mechanisms=pbm,skellam',
                '--mechanism_bits=skellam=16+12', '--plan')
  assert plan.returncode == 0, plan.stderr[-2000:]
  assert '2 cells' not in plan.stdout and '3 cells, 3 runs' in plan.stdout
  for bad in ('rqm=8', 'gaussian=8', 'pbm=x', 'pbm=30', 'pbm'):
    got = _table(str(tmp_path / 'u'), '--mechanisms=pbm,gaussian',
                 f'--mechanism_bits={bad}', '--plan')
    assert got.returncode != 0 and '--mechanism_bits' in got.stderr, bad


def _children(pid):
  path = f'/proc/{pid}/task/{pid}/children'
  return [int(c) for c in open(path).read().split()] if os.path.exists(path) else []


def test_sigterm_stops_the_table_and_its_calibration_child(tmp_path):
  # RQM at 16 bits, 100 clients: a calibration of minutes, in a child process.
  table = subprocess.Popen(
      [sys.executable, '-m', 'experiments.fl_table',
       f'--output_dir={tmp_path / "t"}', '--mechanisms=rqm', '--bits=16',
       '--epsilons=10', '--seeds=1', '--rounds=300'],
      cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 120
  while not _children(table.pid) and time.time() < deadline:
    time.sleep(0.5)
  children = _children(table.pid)
  try:
    assert children and table.poll() is None
    time.sleep(3)   # the child is calibrating
    table.send_signal(signal.SIGTERM)
    assert table.wait(timeout=60) == 128 + signal.SIGTERM
    time.sleep(1)
    alive = [c for c in children if os.path.exists(f'/proc/{c}') and
             open(f'/proc/{c}/stat').read().split()[2] != 'Z']
    assert not alive
  finally:   # on a failure, leave nothing running
    for pid in [table.pid] + children:
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass



def test_tuned_settings_enter_the_folder_and_a_missing_epsilon_is_refused(
    tmp_path):
  choice = tmp_path / 'choice.json'
  choice.write_text(json.dumps({
      '10': dict(client_lr=0.2, server_momentum=0.9, server_lr=0.1,
                 clip_norm=0.5, clip_multiple=1.0)}))
  out = str(tmp_path / 'table')
  plan = _table(out, '--mechanisms=gaussian', f'--tuned={choice}', '--plan')
  assert plan.returncode == 0, plan.stderr[-3000:]
  with open(os.path.join(out, 'config.json')) as f:
    config = json.load(f)
  assert config['tuned'] == {'10': dict(client_lr=0.2, server_momentum=0.9,
                                        server_lr=0.1, clip_norm=0.5)}
  assert 'server_momentum' not in config and 'use_profile' not in config
  routes = _table(out, '--mechanisms=gaussian', f'--tuned={choice}', '--plan',
                  '--use_profile')   # the profile route: another setting
  assert routes.returncode != 0 and 'other settings' in routes.stderr
  profile = str(tmp_path / 'profile')
  plan = _table(profile, '--mechanisms=gaussian', f'--tuned={choice}',
                '--plan', '--use_profile')
  assert plan.returncode == 0, plan.stderr[-3000:]
  with open(os.path.join(profile, 'config.json')) as f:
    assert json.load(f)['use_profile'] is True
  missing = _table(str(tmp_path / 'other'), '--mechanisms=gaussian',
                   f'--tuned={choice}', '--epsilons=3', '--plan')
  assert missing.returncode != 0 and 'no setting for ε = 3' in missing.stderr


def test_a_tuned_schedule_is_kept_and_its_rounds_must_match(tmp_path):
  choice = tmp_path / 'choice.json'
  choice.write_text(json.dumps({
      '10': dict(client_lr=0.2, server_momentum=0.0, server_lr=1.0,
                 clip_norm=0.5, clip_multiple=1.0, rounds=500,
                 server_lr_schedule='cosine')}))
  out = str(tmp_path / 'table')
  plan = _table(out, '--mechanisms=gaussian', f'--tuned={choice}',
                '--rounds=500', '--eval_every=10', '--plan')
  assert plan.returncode == 0, plan.stderr[-3000:]
  with open(os.path.join(out, 'config.json')) as f:
    tuned = json.load(f)['tuned']['10']
  assert tuned['server_lr_schedule'] == 'cosine'
  other = _table(str(tmp_path / 'other'), '--mechanisms=gaussian',
                 f'--tuned={choice}', '--rounds=300', '--plan')
  assert other.returncode != 0 and '--rounds=500' in other.stderr
  bad = tmp_path / 'bad.json'
  bad.write_text(json.dumps({'10': dict(
      client_lr=0.2, server_momentum=0.0, server_lr=1.0, clip_norm=0.5,
      rounds=500, server_lr_schedule='linear')}))
  refused = _table(str(tmp_path / 'bad'), '--mechanisms=gaussian',
                   f'--tuned={bad}', '--rounds=500', '--eval_every=10',
                   '--plan')
  assert refused.returncode != 0 and 'server_lr_schedule' in refused.stderr


def test_a_tiny_table_runs_reports_resumes_retries_and_rechecks(tmp_path):
  """One folder for both halves, so the pbm cell's first calibration and run
  serve both (one test, not two sharing a fixture: pytest-xdist's worksteal
  may run two tests on two workers, each making the fixture).

  A tiny table end to end: a refused cell (skellam: 4 bits cannot serve it
  here) reported with its reason, the runs, the report with its endpoint and
  plots; resumed without re-running; planned; refused on other settings.

  The time limit is not a refusal: the cell has no runs in that start,
  and the next start calibrates it again (once a start). A stored
  calibration whose accountant digest is not the code's is re-accounted
  before the cell trains again: kept (and its runs) where its ε still holds;
  recalibrated, its runs moved to superseded/ and run again, where it does
  not."""
  out = str(tmp_path / 'table')
  cal_path = os.path.join(out, 'calibrations.json')
  stopped = _table(out, '--mechanisms=pbm', '--max_calibration_seconds=0.01')
  assert stopped.returncode == 0, stopped.stderr[-3000:]
  with open(cal_path) as f:
    cal = json.load(f)['pbm_eps10_b4']
  assert cal.get('transient') and 'did not finish in 0.01 s' in cal['reason']
  assert stopped.stdout.count('[calibrate] pbm_eps10_b4') == 1
  assert not os.path.exists(os.path.join(out, 'runs', 'pbm_eps10_b4_s0'))

  first = _table(out, '--mechanisms=pbm,skellam,none')
  assert first.returncode == 0, first.stderr[-3000:]
  assert first.stdout.count('[calibrate] pbm_eps10_b4') == 1   # again, once
  for run in ('pbm_eps10_b4_s0', 'none_s0'):
    assert os.path.exists(os.path.join(out, 'runs', run, 'summary.json'))
  with open(cal_path) as f:
    cal = json.load(f)
  assert 'reason' in cal['skellam_eps10_b4']   # 4 bits cannot serve it here
  fresh = cal['pbm_eps10_b4']
  assert 'params' in fresh and len(fresh['accountant']) == 16
  with open(os.path.join(out, 'runs', 'pbm_eps10_b4_s0', 'summary.json')) as f:
    assert json.load(f)['accountant'] == fresh['accountant']
  text = open(os.path.join(out, 'table.md')).read()
  assert 'Which mechanism should I use?' in text and 'SIMULATED' in text
  # One round, evaluated once: the endpoint is the last round, said so.
  assert '**Endpoint:** test accuracy at the last round' in text
  assert 'departs from the pre-specified endpoint' in text
  for image in ('table.png', 'differences.png'):
    assert os.path.getsize(os.path.join(out, image)) > 1000
  again = _table(out, '--mechanisms=pbm,skellam,none')
  assert again.returncode == 0 and '[run ' not in again.stdout
  plan = _table(out, '--mechanisms=pbm,skellam,none', '--plan')
  assert '3 cells, 3 runs (2 finished)' in plan.stdout
  other = _table(out, '--mechanisms=pbm', '--rounds=2')
  assert other.returncode != 0 and 'other settings' in other.stderr

  def rewrite(**entry):
    cal['pbm_eps10_b4'] = dict(fresh, **entry)
    with open(cal_path, 'w') as f:
      json.dump(cal, f)

  rewrite(accountant='0' * 16)   # same mechanism, other code: ε still holds
  kept = _table(out, '--mechanisms=pbm')
  assert kept.returncode == 0, kept.stderr[-3000:]
  assert '[recheck] pbm_eps10_b4' in kept.stdout and '[run ' not in kept.stdout
  with open(cal_path) as f:
    assert json.load(f)['pbm_eps10_b4']['accountant'] == fresh['accountant']

  # A mechanism the code now puts off the target (PBM's θ halved: ε well
  # below 10): recalibrated, its run moved aside and run again.
  params = dict(fresh['params'], theta=fresh['params']['theta'] / 2)
  rewrite(accountant='0' * 16, params=params)
  redone = _table(out, '--mechanisms=pbm')
  assert redone.returncode == 0, redone.stderr[-3000:]
  assert '[superseded]' in redone.stdout and '[run 1/1]' in redone.stdout
  assert os.path.isdir(os.path.join(out, 'superseded',
                                    'pbm_eps10_b4_s0_' + '0' * 16))
  with open(cal_path) as f:
    again = json.load(f)['pbm_eps10_b4']
  assert again['params'] == fresh['params']
  assert os.path.exists(os.path.join(out, 'runs', 'pbm_eps10_b4_s0',
                                     'summary.json'))
