"""Tests for the training options tuning added (issue 51): server momentum
reaches the run's server optimizer, a validation split is trained without and
evaluated on (never the test set), and the defaults keep today's runs:
the same config.json keys and the test-set columns."""

import csv
import dataclasses
import json
import os

import pytest
import tensorflow_federated as tff

from tff_quant import data as data_lib
from tff_quant.training import federated_training as ft

pytestmark = pytest.mark.usefixtures('tff_context')


@pytest.fixture(scope='module')
def mnist():
  return data_lib.load('mnist', num_clients=20, seed=0)


@pytest.fixture(scope='module')
def mnist_validation():
  return data_lib.load('mnist', num_clients=20, seed=0, validation_fraction=0.1)


def config(**kw):
  cfg = dict(mechanism='none', model='logreg', rounds=2, clients_per_round=4,
             total_clients=20, clip_norm=1.0, client_lr=0.1, eval_every=1)
  cfg.update(kw)
  return ft.TrainingConfig(**cfg)


def test_server_momentum_reaches_the_optimizer():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  spec = tf.TensorSpec([3], tf.float32)
  hparams = ft.server_optimizer(config(server_momentum=0.9)).get_hparams(
      ft.server_optimizer(config(server_momentum=0.9)).initialize(spec))
  assert hparams['momentum'] == pytest.approx(0.9)
  assert hparams['learning_rate'] == pytest.approx(1.0)
  # The default is today's plain SGD: no momentum in its state at all.
  assert 'momentum' not in ft.server_optimizer(config()).initialize(spec)
  with pytest.raises(ValueError, match='server_momentum'):
    config(server_momentum=1.0).validate()


def test_cosine_schedule_steps_the_server_lr_each_round():
  import math  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rounds = 8
  cfg = config(server_lr=0.5, rounds=rounds, server_lr_schedule='cosine')
  cfg.validate()
  expected = [0.5 * 0.5 * (1 + math.cos(math.pi * t / rounds))
              for t in range(rounds)]
  assert float(ft.server_lr_at(cfg, 0)) == pytest.approx(0.5)
  # float32: one ulp of a value <= 0.5 is <= 2^-24 ≈ 6e-8.
  assert [float(ft.server_lr_at(cfg, t)) for t in range(rounds)] == (
      pytest.approx(expected, abs=1e-7))
  # Plain SGD with a unit gradient: after k rounds the weights moved by
  # -(lr_0 + ... + lr_{k-1}), the schedule's steps in order.
  opt = ft.server_optimizer(cfg)
  weights = (tf.zeros([2]),)
  state = opt.initialize(tf.nest.map_structure(
      lambda w: tf.TensorSpec(w.shape, w.dtype), weights))
  for k in range(1, 4):
    state, weights = opt.next(state, weights, (tf.ones([2]),))
    np.testing.assert_allclose(weights[0].numpy(), -sum(expected[:k]),
                               atol=1e-6)   # k float32 roundings
  # The constant default is the plain optimizer, recorded as before.
  assert 'server_lr_schedule' not in ft.config_record(config())
  assert ft.config_record(cfg)['server_lr_schedule'] == 'cosine'
  with pytest.raises(ValueError, match='server_lr_schedule'):
    config(server_lr_schedule='linear').validate()


def test_defaults_keep_todays_records(mnist, tmp_path):
  cfg = config()
  record = ft.config_record(cfg)
  old = {f.name for f in dataclasses.fields(ft.TrainingConfig)} - {
      'server_momentum', 'validation_fraction', 'server_lr_schedule',
      'min_clients_per_round', 'wire_bits', 'use_profile'}
  assert set(record) == old   # earlier runs' config.json resume unchanged
  assert ft.config_record(config(server_momentum=0.9))['server_momentum'] == 0.9
  run_dir = str(tmp_path / 'run')
  summary = ft.run(cfg, mnist, run_dir, log=lambda _: None)
  with open(os.path.join(run_dir, 'config.json')) as f:
    assert set(json.load(f)) == old
  with open(os.path.join(run_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert 'test_accuracy' in rows[0] and 'validation_accuracy' not in rows[0]
  assert 'test_accuracy' in summary and 'evaluated_on' not in summary


def test_a_validation_run_never_evaluates_on_the_test_set(
    mnist, mnist_validation, tmp_path, monkeypatch):
  # A one-image test set: evaluating on it would say "(1 examples)".
  data = dataclasses.replace(mnist_validation,
                             test_x=mnist_validation.test_x[:1],
                             test_y=mnist_validation.test_y[:1])
  n = len(data.validation_y)
  assert n > 1
  logs, built = [], []
  build_sgdm = tff.learning.optimizers.build_sgdm

  def recording(*args, **kwargs):   # the optimizers the run builds
    built.append((args, kwargs))
    return build_sgdm(*args, **kwargs)
  monkeypatch.setattr(tff.learning.optimizers, 'build_sgdm', recording)
  run_dir = str(tmp_path / 'run')
  summary = ft.run(config(validation_fraction=0.1, server_momentum=0.5),
                   data, run_dir, log=logs.append)
  # Server momentum reaches the run's server optimizer (client: plain SGD).
  assert ((1.0,), {'momentum': 0.5}) in built and ((0.1,), {}) in built
  assert 0 <= summary['validation_accuracy'] <= 1
  assert 'test_accuracy' not in summary
  assert 'test set was not used' in summary['evaluated_on']
  assert 'VALIDATION split' in summary['data']
  with open(os.path.join(run_dir, 'metrics.csv')) as f:
    rows = list(csv.DictReader(f))
  assert 'validation_accuracy' in rows[0] and 'test_accuracy' not in rows[0]
  assert any(f'Evaluation: the validation split ({n} examples); the test '
             'set is not used' in l for l in logs)
  assert any('val_acc=' in l for l in logs)
  # The data and the config must agree on the split.
  with pytest.raises(ValueError, match='validation_fraction'):
    ft.run(config(), mnist_validation, str(tmp_path / 'x'), log=lambda _: None)
  with pytest.raises(ValueError, match='validation_fraction'):
    ft.run(config(validation_fraction=0.1), mnist, str(tmp_path / 'y'),
           log=lambda _: None)
