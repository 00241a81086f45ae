import copy
import csv
import glob
import json
import os

import numpy as np
import pytest

from tff_quant import aggregators
from tff_quant import data as data_lib
from tff_quant.training import federated_training as ft
from tff_quant.training import privacy_plan
from tff_quant.program import runtime

pytestmark = pytest.mark.usefixtures('tff_context')


@pytest.fixture(scope='module')
def mnist():
  return data_lib.load('mnist', num_clients=20, seed=0)


def small_config(**kw):
  cfg = dict(mechanism='rqm', model='logreg', rounds=2, clients_per_round=4,
             total_clients=20, clip_norm=1.0, client_lr=0.1, eval_every=1,
             noise_seed=3)
  cfg.update(kw)
  return ft.TrainingConfig(**cfg)


def rounds_in(run_dir):
  with open(os.path.join(run_dir, 'metrics.csv')) as f:
    return [int(r['round']) for r in csv.DictReader(f)]


def test_run_resume_and_every_round_exactly_once(mnist, tmp_path):
  run_dir = str(tmp_path / 'run')
  s1 = ft.run(small_config(), mnist, run_dir, log=lambda _: None)
  assert rounds_in(run_dir) == [1, 2]
  assert 0 <= s1['test_accuracy'] <= 1 and s1['epsilon'] > 0
  assert s1['bits_per_client_per_round'] == 4 * 7850
  # Killed after writing metrics for round 3 but before its checkpoint:
  with open(os.path.join(run_dir, 'metrics.csv'), 'a') as f:
    f.write('3' + ',0' * 15 + '\n')
  logs = []
  s2 = ft.run(small_config(rounds=4), mnist, run_dir, log=logs.append)
  assert any('Resuming' in l and 'round 2' in l for l in logs)
  assert rounds_in(run_dir) == [1, 2, 3, 4]
  assert s2['rounds_completed'] == 4
  events = glob.glob(os.path.join(run_dir, 'tensorboard', '**', 'events.*'),
                     recursive=True)
  assert events, 'no TensorBoard event file'
  with open(os.path.join(run_dir, 'metrics.csv')) as f:
    last = list(csv.DictReader(f))[-1]
  assert int(last['upload_bits_per_client']) >= int(last['bits_per_client'])
  assert 0.0 <= float(last['clipped_clients_fraction']) <= 1.0
  with open(os.path.join(run_dir, 'summary.json')) as f:
    assert json.load(f)['data'].startswith('MNIST')


def test_changed_settings_and_corrupt_checkpoint_are_errors(mnist, tmp_path):
  run_dir = str(tmp_path / 'run')
  ft.run(small_config(rounds=1), mnist, run_dir, log=lambda _: None)
  with pytest.raises(ValueError, match='client_lr'):
    ft.run(small_config(rounds=2, client_lr=0.5), mnist, run_dir,
           log=lambda _: None)
  latest = max(glob.glob(os.path.join(run_dir, 'checkpoints', 'program_state_*')))
  for path in glob.glob(os.path.join(latest, '**', '*'), recursive=True):
    if os.path.isfile(path):
      with open(path, 'wb') as f:
        f.write(b'garbage')
  with pytest.raises(ft.CorruptCheckpointError, match='program_state_1'):
    ft.run(small_config(rounds=2), mnist, run_dir, log=lambda _: None)
  assert rounds_in(run_dir) == [1]  # nothing lost, nothing restarted


def test_no_privacy_parameters_fail_before_training(mnist, tmp_path):
  with pytest.raises(ValueError, match='no privacy'):
    ft.run(small_config(mechanism='qmgeo',
                        mechanism_params=dict(full_support=False)), mnist,
           str(tmp_path / 'q'), log=lambda _: None)
  assert not os.path.exists(str(tmp_path / 'q'))


def test_two_workers_a_worker_dies_and_the_run_resumes(mnist, tmp_path):
  run_dir = str(tmp_path / 'run')
  addresses, procs = runtime.start_local_workers(2)

  def log(line):
    if line.startswith('round 1/'):
      procs[1].kill()  # the second worker dies after round 1
  try:
    with pytest.raises(runtime.WorkerUnavailableError, match=addresses[1]):
      ft.run(small_config(rounds=3), mnist, run_dir, log=log, workers=addresses)
    assert rounds_in(run_dir) == [1]
    runtime.stop_processes(procs)
    addresses, procs = runtime.start_local_workers(2)  # other ports: still resumes
    logs = []   # resumed packed (2 clients per slot): also through the workers
    summary = ft.run(small_config(rounds=3), mnist, run_dir, log=logs.append,
                     workers=addresses, clients_per_slot=2)
    assert any('Resuming' in l and 'round 1' in l for l in logs)
    assert any('2 TFF workers' in l for l in logs)
    assert rounds_in(run_dir) == [1, 2, 3] and summary['rounds_completed'] == 3
  finally:
    runtime.stop_processes(procs)
    runtime.use_secure_sum_simulation()


@pytest.mark.parametrize('mechanism, rotate', [('rqm', False), ('pbm', True)])
def test_the_whole_process_is_secure_only(mnist, mechanism, rotate):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_quant import models  # pylint: disable=g-import-not-at-top
  plan = privacy_plan.make(small_config(mechanism=mechanism, rotate=rotate),
                           7850)
  assert plan.dim == (8192 if rotate else 7850)  # rotation pads to 2^13
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  with aggregators.recording() as used:
    process = ft.build_process(
        plan, lambda: models.get('logreg', mnist.input_shape, 10), spec)
  tff.test.assert_not_contains_unsecure_aggregation(process.next)
  # The factory built what the plan accounts, once.
  assert [(u.dim, repr(u.mechanism)) for u in used] == [
      (plan.dim, repr(plan.mechanism))]


def test_packed_run_resumes_unpacked_with_the_same_accounting(mnist, tmp_path):
  """Packing is how a run executes, not what it is: the checkpoint state and the
  accountant are the same, so a packed run resumes unpacked."""
  run_dir = str(tmp_path / 'packed')
  ft.run(small_config(), mnist, run_dir, log=lambda _: None, clients_per_slot=2)
  assert rounds_in(run_dir) == [1, 2]
  logs = []
  resumed = ft.run(small_config(rounds=3), mnist, run_dir, log=logs.append,
                   clients_per_slot=1)
  assert any('Resuming' in l and 'round 2' in l for l in logs)
  assert any(l.startswith('packing: K=1 client per TFF client slot (given)')
             for l in logs)
  assert rounds_in(run_dir) == [1, 2, 3]
  plain = ft.run(small_config(rounds=3), mnist, str(tmp_path / 'plain'),
                 log=lambda _: None)
  assert resumed['epsilon'] == plain['epsilon'] and resumed['dim'] == plain['dim']
  with open(os.path.join(run_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert all(0 <= float(r['train_accuracy']) <= 1 for r in rows)


@pytest.mark.parametrize('kw, k, match', [
    (dict(), 3, r'clients_per_round \(4\) must be a multiple of clients_per_slot \(3\)'),
    (dict(), -1, r'`clients_per_slot` must be 0 or None \(automatic\) or an '
     r'integer in \[1, clients_per_round\], got -1'),
    (dict(), 2.0, r'`clients_per_slot` must be 0 or None .* got 2.0 \(float\)'),
    (dict(mechanism='tff_skellam', mechanism_params=dict(noise_multiplier=1.0)),
     3, r'clients_per_round \(4\) must be a multiple of clients_per_slot \(3\)')])
def test_bad_packing_raises_before_anything_is_written(mnist, tmp_path, kw, k, match):
  with pytest.raises((ValueError, TypeError), match=match):
    ft.run(small_config(**kw), mnist, str(tmp_path / 'r'), log=lambda _: None,
           clients_per_slot=k)
  assert not os.path.exists(str(tmp_path / 'r'))


def test_a_default_run_packs_automatically_and_says_so(mnist, tmp_path,
                                                        monkeypatch):
  """No packing argument: K from the clients per round and the cores (here 2),
  trained vectorized; the log names both and every round shows its ETA."""
  monkeypatch.setattr(ft.packed_clients, 'parallel_units', lambda workers=0: 2)
  logs = []
  summary = ft.run(small_config(rounds=2), mnist, str(tmp_path / 'auto'),
                   log=logs.append)
  assert ('packing: K=2 clients per TFF client slot (auto; override with '
          '--clients_per_slot); 2 slots a round') in logs
  assert any(l.startswith('local training: vectorized, the 2 clients') for l in logs)
  rounds = [l for l in logs if l.startswith('round ')]
  assert len(rounds) == 2 and all('ETA' in l for l in rounds)
  assert summary['rounds_completed'] == 2


@pytest.mark.parametrize('kw, k, lines', [
    (dict(), None, ['packing: K=2 clients per TFF client slot (auto',
                    'local training: vectorized']),
    (dict(clients_per_round=6), 0, ['packing: K=3 clients per TFF client slot '
                                    '(auto', 'local training: vectorized']),
    (dict(), 4, ['packing: K=4 clients per TFF client slot (given); 1 slots',
                 'local training: vectorized']),
    (dict(mechanism='none'), None, ['packing: K=2 clients per TFF client slot '
                                    '(auto', 'local training: vectorized']),
    (dict(mechanism='gaussian', mechanism_params=dict(noise_multiplier=1.0)),
     None, ['packing: K=2 clients per TFF client slot (auto',
            'local training: vectorized']),
    (dict(mechanism='tff_skellam', mechanism_params=dict(noise_multiplier=1.0)),
     None, ['packing: K=2 clients per TFF client slot (auto',
            'local training: vectorized'])])
def test_choose_packing(mnist, monkeypatch, kw, k, lines):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_quant import models  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(ft.packed_clients, 'parallel_units', lambda workers=0: 2)
  config = small_config(**kw)
  config.validate()
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  model_fn = models.tff_model_fn(lambda: models.get('logreg', (28, 28, 1), 10), spec)
  packing = ft.choose_packing(config, k, model_fn, 7850)
  assert len(packing.lines) == len(lines)
  for got, want in zip(packing.lines, lines):
    assert got.startswith(want), got
  assert packing.vectorized == (packing.clients_per_slot > 1)


def test_a_model_that_cannot_vectorize_packs_sequentially(monkeypatch):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_quant import models  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(ft.packed_clients, 'parallel_units', lambda workers=0: 2)
  config = small_config()
  config.validate()

  def batch_norm():
    return tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(4,)),
                                tf.keras.layers.BatchNormalization(),
                                tf.keras.layers.Dense(2)])
  spec = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))
  packing = ft.choose_packing(config, None, models.tff_model_fn(batch_norm, spec), 20)
  assert packing.clients_per_slot == 2 and not packing.vectorized
  assert packing.lines[1].startswith(
      'local training: the 2 clients of a slot one after another (logreg cannot '
      'be vectorized: it has non-trainable weights')


def test_a_packed_round_moves_the_model_as_the_plain_round(mnist):
  """One noise-free round ('none') from the same weights on the same clients,
  packed vectorized (K = 2) and plain (K = 1): the same new model to float
  rounding, two of the four clients clipped (the mechanisms' packed law:
  packed_clients_test)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_quant import models  # pylint: disable=g-import-not-at-top
  from tff_quant.training import packed_clients  # pylint: disable=g-import-not-at-top
  config = small_config(mechanism='none', noise_seed=None, clip_norm=1.0)
  plan = privacy_plan.make(config, 7850)
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  keras_fn = lambda: models.get('logreg', mnist.input_shape, 10)
  plain = ft.build_process(plan, keras_fn, spec)
  packed = ft.build_process(plan, keras_fn, spec, clients_per_slot=2,
                            vectorized=True)
  weights = plain.get_model_weights(plain.initialize())   # zeros: deterministic
  weights = type(weights)(trainable=[np.zeros_like(w) for w in weights.trainable],
                          non_trainable=list(weights.non_trainable))
  start = plain.set_model_weights(plain.initialize(), weights)
  packed_state = packed.set_model_weights(packed.initialize(), weights)
  ids = mnist.train.client_ids[:4]
  plain_out = plain.next(start, [
      mnist.train.create_tf_dataset_for_client(c).batch(config.batch_size)
      .map(lambda e: (e['x'], e['y'])) for c in ids])
  packed_out = packed.next(packed_state, packed_clients.pack_datasets(
      mnist.client_examples, ids, 2, config.batch_size))
  clipped = plain_out.metrics['aggregator']['clipped_count']
  assert packed_out.metrics['aggregator']['clipped_count'] == clipped == 2
  got = packed.get_model_weights(packed_out.state).trainable
  want = plain.get_model_weights(plain_out.state).trainable
  for g, w, b in zip(got, want, weights.trainable):
    assert np.any(w != b)   # the round moved the model
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)
  for key in ('loss', 'num_examples'):
    np.testing.assert_allclose(packed_out.metrics['client_work']['train'][key],
                               plain_out.metrics['client_work']['train'][key],
                               rtol=1e-5)


def _metrics(run_dir):
  with open(os.path.join(run_dir, 'metrics.csv')) as f:
    return [{k: v for k, v in r.items() if k != 'seconds'}
            for r in csv.DictReader(f)]


@pytest.mark.parametrize('kw', [
    dict(mechanism='rqm'),
    dict(mechanism='gaussian', mechanism_params=dict(noise_multiplier=1.0)),
], ids=['rqm', 'gaussian'])
def test_the_same_config_twice_writes_the_same_metrics(mnist, tmp_path, kw):
  """Seeds are blocks: --seed fixes the initial model, the client sampling
  and the data order, --noise_seed the noise (registry mechanisms and the
  packed Gaussian), so two runs write the same metrics, to the digit."""
  runs = []
  for i in range(2):
    run_dir = str(tmp_path / f'run{i}')
    ft.run(small_config(rounds=1, **kw), mnist, run_dir, log=lambda _: None,
           clients_per_slot=2)
    runs.append(_metrics(run_dir))
  assert runs[0] == runs[1]
  other = str(tmp_path / 'other_noise')
  ft.run(small_config(rounds=1, noise_seed=4, **kw), mnist, other,
         log=lambda _: None,
         clients_per_slot=2)
  assert _metrics(other)[0]['train_loss'] == runs[0][0]['train_loss']  # same init
  # One round: its train loss is the clients' before the noisy update; the
  # test loss after it differs with the noise.
  assert _metrics(other)[-1]['test_loss'] != runs[0][-1]['test_loss']


def test_initial_weights_depend_on_the_seed_only():
  from tff_quant import models  # pylint: disable=g-import-not-at-top
  keras_fn = lambda: models.get('small_cnn', (28, 28, 1), 10)
  a, b, c = ([np.asarray(w) for w in ft.initial_weights(keras_fn, s).trainable]
             for s in (0, 0, 1))
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)
  assert any((x != z).any() for x, z in zip(a, c))
  with pytest.raises(ValueError, match='seed'):
    ft.initial_weights(keras_fn, -1)


def test_a_calibrated_run_reports_the_calibrated_epsilon(mnist, tmp_path):
  """Calibrated once before TFF, the process built once from the plan, the
  config passed in unchanged, and the summary's ε the plan's."""
  config = small_config(target_epsilon=10.0, coordinate_clip_multiple=3,
                        rotate=True)
  before = copy.deepcopy(config)
  logs = []
  run_dir = str(tmp_path / 'run')
  with aggregators.recording() as used:   # every QuantizationFactory.create
    summary = ft.run(config, mnist, run_dir, log=logs.append,
                     clients_per_slot=2)
  assert len(used) == 1 and used[0].dim == summary['dim'] == 8192
  assert used[0].calibrated_for is not None
  assert config == before
  line = next(l for l in logs if l.startswith('Calibrated'))
  assert len([l for l in logs if l.startswith('Calibrated')]) == 1
  assert summary['epsilon'] <= 10.0
  assert summary['epsilon_route'] == 'RDP'
  assert f'{summary["epsilon"]:.4g}' in line
  # The plan of the same config (its calibration reused from the run's
  # folder) gives the summary's privacy figures and the config it ran.
  plan = privacy_plan.make(config, 7850, lambda _: None, stored_in=run_dir)
  assert plan.setting == used[0].calibrated_for
  assert summary['config'] == ft.config_record(plan.config)
  for key, value in plan.summary(summary['rounds_completed'], [4]).items():
    assert summary[key] == value, key


def test_only_an_unpacked_tff_peer_needs_the_python_protobuf():
  """TFF's distributed DP inside FedAvg at K = 1 nests past upb's limit;
  packed, or any other mechanism, runs on whichever protobuf is loaded."""
  from google.protobuf.internal import api_implementation  # pylint: disable=g-import-not-at-top
  for name, k in (('tff_dgauss', 50), ('tff_skellam', 2), ('rqm', 1),
                  ('gaussian', 1)):
    ft.check_protobuf_for_peer(name, k)
  if api_implementation.Type() == 'upb':
    with pytest.raises(ValueError, match='tff_dgauss at one client per TFF '
                       'slot.*PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python'):
      ft.check_protobuf_for_peer('tff_dgauss', 1)
  else:
    ft.check_protobuf_for_peer('tff_dgauss', 1)


def test_a_calibrated_run_reuses_its_calibration_and_refuses_other_rounds_first(
    mnist, tmp_path):
  run_dir = str(tmp_path / 'run')
  cfg = lambda **kw: small_config(target_epsilon=8.0, rotate=True,
                                  coordinate_clip_multiple=3.0, **kw)
  first = []
  s1 = ft.run(cfg(), mnist, run_dir, log=first.append)
  assert any(l.startswith('Calibrated rqm') for l in first)
  assert os.path.exists(os.path.join(run_dir, ft.CALIBRATION_FILE))
  # The same command again: the stored calibration, no new search.
  again = []
  s2 = ft.run(cfg(), mnist, run_dir, log=again.append)
  assert any(l.startswith('Calibration reused') for l in again), again
  cal_line = [l for l in again if l.startswith('Calibrated rqm')]
  assert len(cal_line) == 1 and cal_line[0].endswith('(0 s)'), cal_line
  assert s2['epsilon'] == s1['epsilon']
  assert s2['config']['mechanism_params'] == s1['config']['mechanism_params']
  # More rounds than calibrated for: refused before any calibration, naming
  # --rounds, and nothing of the run changes.
  before = sorted(os.listdir(run_dir))
  extended = []
  with pytest.raises(ValueError, match=r'--rounds=3: .* calibrated to ε <= 8'):
    ft.run(cfg(rounds=3), mnist, run_dir, log=extended.append)
  assert extended == [] and sorted(os.listdir(run_dir)) == before
  # Another setting of the calibration: refused naming the flag.
  with pytest.raises(ValueError, match=r'--clip_norm: 1\.0 there, 0\.5 now'):
    ft.run(cfg(clip_norm=0.5), mnist, run_dir, log=lambda _: None)


def test_a_dropout_tolerant_run_reports_its_cohorts_and_their_epsilon(mnist,
                                                                      tmp_path):
  cfg = small_config(target_epsilon=8.0, rotate=True,
                     coordinate_clip_multiple=3.0, min_clients_per_round=3)
  s = ft.run(cfg, mnist, str(tmp_path / 'run'), log=lambda _: None)
  assert s['config']['min_clients_per_round'] == 3
  assert s['cohort_sizes'] == [4]   # no client dropped here
  assert s['epsilon'] <= 8.0
  # Every round had all 4: the ε for the cohorts that occurred is smaller.
  assert s['epsilon_for_cohorts_that_occurred'] < s['epsilon']
  assert 'of whom at least 3 contribute' in s['privacy_assumptions']


def test_a_distributed_dp_peer_trains_with_secure_metrics_only(mnist, tmp_path):
  # build_process checks the whole process (check_secure_only): TFF's own
  # tff_skellam with TFF's default metrics would sum them in the clear.
  cfg = small_config(mechanism='tff_skellam', rounds=1,
                     mechanism_params=dict(noise_multiplier=1.0, bits=16))
  s = ft.run(cfg, mnist, str(tmp_path / 'run'), clients_per_slot=2,
             log=lambda _: None)
  assert s['rounds_completed'] == 1 and s['epsilon'] > 0
