"""Tests for experiments/fl_tune.py and the driver behind it
(tff_quant.training.tuning.Tuning): a tiny tuning (2 grid points, 2 rounds,
4 of 20 clients) writes its norms, runs, results and choice; the choice is
the stated rule's; a second start skips every finished
run; a folder of other settings is refused, by the binary too."""

import csv
import json
import os
import subprocess
import sys

import pytest

from tff_quant.training import tuning
from tff_quant.training import tuning_settings

pytestmark = pytest.mark.usefixtures('tff_context')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = dict(epsilons=(10.0,), client_lrs=(0.1,), server_momenta=(0.0, 0.9),
            clip_multiples=(1.0,), rounds=2, norm_rounds=1,
            clients_per_round=4, total_clients=20, eval_every=1, rerun_top=1,
            seeds_top=1, noise_free_at_choice=False, model='logreg')
FLAGS = ['--epsilons=10', '--client_lrs=0.1', '--server_momenta=0,0.9',
         '--clip_multiples=1', '--rounds=2', '--norm_rounds=1',
         '--clients_per_round=4', '--total_clients=20', '--eval_every=1',
         '--rerun_top=1', '--seeds_top=1', '--nonoise_free_at_choice',
         '--model=logreg']


def test_a_tiny_tuning_chooses_by_the_rule_resumes_and_refuses_other_settings(
    tmp_path):
  """One tuning serves three checks (one test, not three sharing a module
  fixture: pytest-xdist's worksteal may run them on different workers, each
  tuning again): its results and choice by the rule; a second start skips
  every finished run and writes the same report, and other settings are
  refused; the binary reads its flags and refuses the folder's other
  settings."""
  out = str(tmp_path / 'tune')
  lines = []
  text = tuning.Tuning(tuning_settings.Settings(out, **TINY),
                       log=lines.append).run_all()
  with open(os.path.join(out, 'norms.json')) as f:
    norms = json.load(f)['noise_free_lr0.1']
  assert norms['round 1']['n'] == 4 and norms['pooled']['q50'] > 0
  with open(os.path.join(out, 'results.csv')) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 2
  for row in rows:   # the clip is the median update norm (multiple 1)
    assert float(row['clip_norm']) == pytest.approx(norms['pooled']['q50'],
                                                    rel=2e-3)
    assert float(row['epsilon_reported']) <= 10.0 + 1e-9
  endpoints = {float(r['server_momentum']): float(r['endpoint']) for r in rows}
  with open(os.path.join(out, 'choice.json')) as f:
    choice = json.load(f)['10']
  # The rule: the argmax, unless within the tolerance of the simpler point.
  if endpoints[0.9] > endpoints[0.0] + tuning.TIE_TOLERANCE:
    assert choice['server_momentum'] == 0.9
  else:
    assert choice['server_momentum'] == 0.0
  assert choice['points_run'] == 2 and choice['seeds'] == 1
  # Every output says which data it used; the test set is never evaluated.
  assert 'VALIDATION split' in text and 'test set is not used' in text
  for name in os.listdir(os.path.join(out, 'runs')):
    with open(os.path.join(out, 'runs', name, 'summary.json')) as f:
      summary = json.load(f)
    assert 'test_accuracy' not in summary and 'VALIDATION' in summary['data']
  assert sum('[fl_tune] run ' in l for l in lines) == 2
  # A second start.
  again = []
  text_again = tuning.Tuning(tuning_settings.Settings(out, **TINY),
                             log=again.append).run_all()
  assert not any('[fl_tune] run ' in l or 'update norms (pooled)' in l
                 for l in again)
  assert text_again == text
  other = tuning.Tuning(tuning_settings.Settings(out, **dict(TINY, rounds=3)))
  with pytest.raises(ValueError, match='other settings'):
    other.run_all()
  # The binary, on the same folder.
  binary = subprocess.run(
      [sys.executable, '-m', 'experiments.fl_tune', f'--output_dir={out}',
       *FLAGS, '--rounds=3', '--report_only'],
      cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert binary.returncode == 2 and 'other settings' in binary.stderr
  assert "'rounds': 2" in binary.stderr   # the folder's, from the same flags


def test_the_binary_loads_without_tensorflow_and_refuses_bad_flags_by_name(
    tmp_path):
  code = ('import sys; import experiments.fl_tune; '
          'print("tensorflow" in sys.modules)')
  loaded = subprocess.run([sys.executable, '-c', code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          check=True)
  assert loaded.stdout.strip() == 'False'
  for flag, name in (('--client_lrs=0.1,x', '--client_lrs'),
                     ('--deadline=25:00', 'deadline'),
                     ('--server_momenta=1.5', 'server_momenta')):
    out = tmp_path / name.strip('-')
    bad = subprocess.run(
        [sys.executable, '-m', 'experiments.fl_tune', f'--output_dir={out}',
         *FLAGS, flag], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and name in bad.stderr, bad.stderr
    assert not out.exists()   # refused before writing anything
