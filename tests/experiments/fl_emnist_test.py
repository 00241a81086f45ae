import json
import os
import subprocess
import sys

import pytest

from tests.experiments import binaries


def run_binary(args, timeout=600):
  return binaries.run('experiments.fl_emnist', args, timeout=timeout)


def test_smoke_two_rounds_calibrated_to_a_whole_model_target(tmp_path):
  # RQM: QMGeo at 3 clients a round cannot carry the signal at this ε (slope
  # < 1/2), which calibration now refuses (accounting/calibration.py).
  res = run_binary(['--dataset=mnist', '--mechanism=rqm', '--model=logreg',
                    '--rounds=2', '--clients_per_round=3', '--total_clients=10',
                    '--clip_norm=1.0', '--eval_every=1', '--target_epsilon=8',
                    '--rotate', '--coordinate_clip_multiple=3',
                    f'--root_output_dir={tmp_path}', '--experiment_name=s'])
  assert res.returncode == 0, res.stderr[-2000:]
  out = res.stdout
  assert 'Final test accuracy' in out and 'ε=' in out and 'Bits per client' in out
  assert 'MNIST' in out and 'SIMULATED' in out
  assert 'round 2/2' in out and 'ETA' in out
  assert 'Calibrated rqm to whole-model ε <= 8' in out
  # The calibration and the run's guarantee read ε ∈ [attained, proved].
  assert '[attained, proved]' in out and 'debiased error' in out
  assert 'ε ∈ [' in out.split('Privacy of the whole model update')[1]
  # Packed by default: K = 3 on up to 2 cores (K = 1 from 3 cores on).
  from tff_quant.training import packed_clients  # pylint: disable=g-import-not-at-top
  k = packed_clients.auto_clients_per_slot(3, 7850, packed_clients.parallel_units())
  if k == 1:
    assert 'packing: K=1 client per TFF client slot (auto' in out
  else:
    assert ('packing: K=3 clients per TFF client slot (auto; override with '
            '--clients_per_slot); 1 slots a round') in out
    assert 'local training: vectorized, the 3 clients of a slot' in out
  lines = out.splitlines()
  whole = [i for i, l in enumerate(lines) if l.startswith('Privacy of the whole model')]
  coord = [i for i, l in enumerate(lines) if l.startswith('Per-coordinate ε')]
  assert whole and coord and whole[0] < coord[0]   # whole model first
  with open(tmp_path / 's' / 'summary.json') as f:
    summary = json.load(f)
  assert summary['rounds_completed'] == 2
  # The trained model loads with Keras alone (no TFF, no tff_quant).
  model_path = tmp_path / 's' / summary['model_file']
  load = subprocess.run(
      [sys.executable, '-c', 'import sys, tensorflow as tf; '
       f'm = tf.keras.models.load_model({str(model_path)!r}); '
       'print(m.count_params(), "tensorflow_federated" in sys.modules, '
       '"tff_quant" in sys.modules)'],
      capture_output=True, text=True, timeout=300, cwd=tmp_path)
  assert load.returncode == 0, load.stderr[-2000:]
  assert load.stdout.split()[-3:] == ['7850', 'False', 'False']
  assert summary['epsilon'] <= 8.0 and summary['epsilon_route'] == 'RDP'
  assert 'ℓ2 route' in summary['privacy_assumptions']
  assert summary['config']['mechanism_params']['q'] != 0.42   # calibrated
  assert not res.leftover_workers, f'worker_binary left behind: {res.leftover_workers}'


def test_parameters_given_run_as_given(tmp_path):
  """Parameters given (no --target_epsilon): they run as given, and the run
  prints their ε first (no default target: that is
  test_default_flags_and_a_wire_budget_calibrate_to_the_default_target)."""
  res = run_binary(['--dataset=mnist', '--mechanism=pbm', '--model=logreg',
                    '--rounds=1', '--clients_per_round=3',
                    '--total_clients=10', '--clip_norm=1.0',
                    f'--root_output_dir={tmp_path}',
                    '--mechanism_params=theta=0.05', '--experiment_name=p'])
  assert res.returncode == 0, res.stderr[-2000:]
  assert 'Not calibrated (no target ε)' in res.stdout
  assert 'default whole-model' not in res.stdout


def test_tff_gaussian_peer_runs_through_the_same_loop_and_accountant(tmp_path):
  res = run_binary(['--dataset=mnist', '--mechanism=gaussian', '--model=logreg',
                    '--rounds=2', '--clients_per_round=3', '--total_clients=10',
                    '--clip_norm=1.0', '--eval_every=2', '--target_epsilon=8',
                    f'--root_output_dir={tmp_path}', '--experiment_name=g'])
  assert res.returncode == 0, res.stderr[-2000:]
  assert 'Calibrated gaussian(noise_multiplier=' in res.stdout
  assert 'Per-coordinate ε: n/a' in res.stdout
  # The central Gaussian packs: the server's noise on the sum has one law
  # however the clients are grouped.
  assert 'packing: K=3 clients per TFF client slot' in res.stdout
  with open(tmp_path / 'g' / 'summary.json') as f:
    summary = json.load(f)
  assert summary['epsilon'] <= 8.0 and summary['bits_per_coordinate'] == 32
  assert summary['config']['mechanism_params']['noise_multiplier'] > 0
  # The papers' convention beside our guarantee, labelled as such.
  papers = summary['epsilon_papers_convention']
  assert 0 < papers < summary['epsilon']
  assert (f'For comparison with papers only: ε = {papers:.4g} in the papers\' '
          'convention') in res.stdout


def test_default_flags_and_a_wire_budget_calibrate_to_the_default_target(
    tmp_path):
  """One run checks both (a TensorFlow process fewer):

  No --target_epsilon and no privacy parameter: a DP run's defaults are
  private (ε = 10 for the whole run), and the run says so.

  --wire_bits=5: the calibration chooses the level count under 5 wire
  bits (fewer level counts to calibrate than under 8), the run's secure sum
  carries 5 bits per coordinate (summary and every round's metrics), and
  its ε is the calibrated one (post-processing)."""
  res = run_binary(['--dataset=mnist', '--mechanism=pbm', '--model=logreg',
                    '--rounds=2', '--clients_per_round=10',
                    '--total_clients=40', '--eval_every=2', '--rotate',
                    '--coordinate_clip_multiple=3', '--wire_bits=5',
                    f'--root_output_dir={tmp_path}', '--experiment_name=w'])
  assert res.returncode == 0, res.stderr[-2000:]
  assert 'calibrating pbm to the default whole-model ε = 10' in res.stdout
  assert 'Wire budget 5 bits:' in res.stdout
  with open(tmp_path / 'w' / 'summary.json') as f:
    summary = json.load(f)
  assert summary['config']['target_epsilon'] == 10.0
  assert summary['secure_sum_bits'] == 5
  assert summary['config']['wire_bits'] == 5
  assert summary['upload_bits_per_client_per_round'] == 5 * 8192
  assert summary['bits_per_coordinate'] <= 5 and summary['epsilon'] <= 10.0
  with open(tmp_path / 'w' / 'metrics.csv') as f:
    header, *rows = [line.strip().split(',') for line in f]
  column = header.index('secure_sum_bits')
  assert [int(r[column]) for r in rows] == [5, 5]
  assert not res.leftover_workers, f'worker_binary left behind: {res.leftover_workers}'


@pytest.mark.parametrize('args, message', [
    (['--mechanism=foo'], 'mechanism'),
    (['--clients_per_round=50', '--total_clients=10'], 'clients_per_round'),
    (['--rounds=0'], 'rounds'), (['--client_lr=0'], 'client_lr'),
    (['--dataset=emnist', '--emnist_cache_dir=/nonexistent'], 'emnist_all.sqlite'),
    (['--mechanism=qmgeo', '--noqmgeo_full_support', '--dataset=mnist',
      '--model=logreg', '--total_clients=10', '--clients_per_round=2'], 'no privacy'),
    (['--target_epsilon=-3'], 'target_epsilon'),   # the rest: federated_training_test
    (['--workers=10.9.8.7:8001', '--dataset=mnist', '--model=logreg',
      '--total_clients=10', '--clients_per_round=2'], '--trusted_network'),
    (['--mechanism=bq', '--target_epsilon=5', '--dataset=mnist',
      '--model=logreg', '--total_clients=10', '--clients_per_round=2',
      '--rounds=2'], 'not reachable'),
    (['--mechanism=tff_skellam', '--dataset=mnist', '--model=logreg',
      '--total_clients=10', '--clients_per_round=2',
      '--mechanism_params=bits=99'], 'bits'),
    (['--mechanism=gaussian', '--mechanism_params=bits=8', '--target_epsilon=5',
      '--dataset=mnist', '--model=logreg', '--total_clients=10',
      '--clients_per_round=2'], 'bits'),
    (['--clients_per_slot=3', '--clients_per_round=4', '--dataset=mnist',
      '--model=logreg', '--total_clients=10'], 'multiple of clients_per_slot'),
    (['--mechanism=pbm', '--mechanism_params=num_levels=256', '--wire_bits=3',
      '--dataset=mnist', '--model=logreg', '--total_clients=40',
      '--clients_per_round=10'], 'allowed wire_bits >= 4'),
    (['--mechanism=skellam', '--wire_bits=8', '--dataset=mnist',
      '--model=logreg', '--total_clients=10', '--clients_per_round=2'],
     '`wire_bits` applies to a bounded registry mechanism'),
    (['--clients_per_slot=-2', '--dataset=mnist', '--model=logreg',
      '--total_clients=10', '--clients_per_round=2'],
     'flag --clients_per_slot=-2: -2 is not a non-negative integer'),
])
def test_bad_input_is_a_clear_error(args, message, tmp_path):
  res = run_binary(args + [f'--root_output_dir={tmp_path}'], timeout=300)
  assert res.returncode != 0
  assert message in (res.stderr + res.stdout)
  assert len((res.stderr + res.stdout).strip().splitlines()) <= 3
  assert not os.listdir(tmp_path)   # nothing written
