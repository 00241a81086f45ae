import json
import os

import pytest

from tff_quant.program import experiment, results_io, runtime


def _settings(lr=0.1, rounds=3):
  return [experiment.Setting(name, dict(lr=lr, rounds=rounds, which=name), name)
          for name in ('a', 'b')]


def test_runs_each_setting_once_then_reuses_and_refuses_a_changed_config(tmp_path):
  calls = []

  def run_one(setting, run_dir):
    calls.append(setting.payload)
    assert os.path.exists(os.path.join(run_dir, 'config.json'))
    return dict(score=len(setting.name) * setting.config['lr'])

  root = str(tmp_path)
  out = experiment.run_settings(root, _settings(), run_one, log=lambda s: None)
  assert calls == ['a', 'b'] and [s['setting'] for s in out] == ['a', 'b']
  with open(tmp_path / 'a' / 'summary.json') as f:
    assert json.load(f)['config'] == {'lr': 0.1, 'rounds': 3, 'which': 'a'}
  again = experiment.run_settings(root, _settings(), run_one, log=lambda s: None)
  assert calls == ['a', 'b'] and again == out          # reused, not re-run
  longer = experiment.run_settings(root, _settings(rounds=5), run_one,
                                   log=lambda s: None)
  assert calls == ['a', 'b', 'a', 'b'] and longer[0]['config']['rounds'] == 5
  with pytest.raises(ValueError, match='lr'):
    experiment.run_settings(root, _settings(lr=0.2), run_one, log=lambda s: None)
  assert calls == ['a', 'b', 'a', 'b']                  # nothing ran, nothing lost
  with open(tmp_path / 'b' / 'summary.json') as f:
    assert json.load(f)['config']['lr'] == 0.1
  fresh = experiment.run_settings(root, _settings(lr=0.2), run_one, fresh=True,
                                  log=lambda s: None)
  assert fresh[1]['score'] == pytest.approx(0.2)


def test_duplicate_names_are_refused(tmp_path):
  s = _settings()
  with pytest.raises(ValueError, match='unique'):
    experiment.run_settings(str(tmp_path), s + s[:1], lambda *_: {},
                            log=lambda s: None)


def test_report_writes_raw_csv_and_prints_a_markdown_table(tmp_path):
  lines = []
  columns = [experiment.Column('setting', 'setting'),
             experiment.Column('acc', 'accuracy', '{:.2f}'.format)]
  experiment.report([dict(setting='a', acc=0.5), dict(setting='none')], columns,
                    str(tmp_path / 'summary.csv'), 'Title', log=lines.append)
  assert results_io.read_csv(str(tmp_path / 'summary.csv')) == [
      {'setting': 'a', 'acc': '0.5'}, {'setting': 'none', 'acc': ''}]
  table = lines[0].split('\n')
  assert table[1] == 'Title'
  assert table[2:] == ['| setting | accuracy |', '|---|---|', '| a | 0.50 |',
                       '| none | — |']


def test_ctrl_c_names_the_setting_and_the_round(tmp_path):
  def interrupted_plain(setting, run_dir):
    del setting, run_dir
    raise KeyboardInterrupt

  with pytest.raises(runtime.Interrupted,
                     match='^a: interrupted; rerun the same command to resume$'):
    experiment.run_settings(str(tmp_path), _settings(), interrupted_plain,
                            log=lambda s: None)

  def interrupted_in_a_round(setting, run_dir):
    del setting, run_dir
    raise runtime.Interrupted('interrupted at round 3; rerun the same command '
                              'to resume from round 3')

  with pytest.raises(runtime.Interrupted,
                     match='^a: interrupted at round 3; .* from round 3$'):
    experiment.run_settings(str(tmp_path), _settings(), interrupted_in_a_round,
                            log=lambda s: None)


def test_a_setting_whose_start_failed_takes_a_corrected_config(tmp_path):
  """The first try fails before any work is kept (no checkpoint, no
  summary): the retry with another config runs without --fresh."""
  def fails(setting, run_dir):
    del setting, run_dir
    raise ValueError('calibration failed')

  with pytest.raises(ValueError, match='calibration failed'):
    experiment.run_settings(str(tmp_path), _settings(lr=0.1), fails,
                            log=lambda s: None)
  logs = []
  out = experiment.run_settings(str(tmp_path), _settings(lr=0.2),
                                lambda s, d: dict(score=1.0), log=logs.append)
  assert [s['config']['lr'] for s in out] == [0.2, 0.2]
  replaced = [l for l in logs if 'never checkpointed a round' in l]
  assert len(replaced) == 1 and str(tmp_path / 'a') in replaced[0]


_INTERRUPTIBLE = '''
import sys, time
from tff_quant.program import quiet
quiet.import_tensorflow()
import numpy as np
from tff_quant.program import cli, experiment, round_loop

def run_one(setting, run_dir):
  def step(state, rnd):
    print(f'round {rnd}', flush=True)
    time.sleep(0.3)
    return state + 1, {'value': float(state)}
  done = round_loop.run_rounds(np.int32(0), 8, run_dir, step,
                               log=lambda s: print(s, flush=True),
                               checkpoint_every=5)
  return dict(final=int(done.state))

with cli.user_errors_exit():
  experiment.run_settings(sys.argv[1], [experiment.Setting('s', dict(lr=0.1))],
                          run_one, log=lambda s: print(s, flush=True))
print('done', flush=True)
'''


def test_ctrl_c_is_one_line_exit_130_and_the_rerun_resumes(tmp_path):
  import signal  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  args = [sys.executable, '-c', _INTERRUPTIBLE, str(tmp_path)]
  child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
  try:
    for line in child.stdout:
      if line.strip() == 'round 3':
        break
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
  finally:
    child.kill()
    child.wait()
  assert child.returncode == 130, err
  assert 'done' not in out
  lines = err.strip().splitlines()
  assert len(lines) == 1, err
  assert lines[0] in (f's: interrupted at round {r}; rerun the same command to '
                      f'resume from round {r}' for r in (3, 4)), err
  interrupted_at = int(lines[0].split('round ')[1].split(';')[0])
  again = subprocess.run(args, capture_output=True, text=True, timeout=120,
                         check=False)
  assert again.returncode == 0, again.stderr
  assert f'from round {interrupted_at - 1}' in again.stdout
  assert f'round {interrupted_at}\n' in again.stdout
  assert 'round 1\n' not in again.stdout and again.stdout.endswith('done\n')
  rows = results_io.read_csv(str(tmp_path / 's' / 'metrics.csv'))
  assert [int(r['round']) for r in rows] == list(range(1, 9))
