"""Tests for tff_quant.training.tuning: the choice rule, the trend,
the quantiles, and the client updates it measures (equal to the global step
of a noise-free, unclipped FedAvg round)."""

import math

import numpy as np
import pytest

from tff_quant import data as data_lib
from tff_quant import models
from tff_quant.program import fl_table
from tff_quant.training import tuning
from tff_quant.training import tuning_settings
from tff_quant.training import federated_training as ft


def test_choose_takes_the_argmax_and_breaks_ties_toward_the_simpler():
  simple = tuning_settings.Point(3, 0.05, 0.0, 1.0)
  momentum = tuning_settings.Point(3, 0.05, 0.9, 1.0)
  big_lr = tuning_settings.Point(3, 0.2, 0.0, 1.0)
  wide_clip = tuning_settings.Point(3, 0.05, 0.0, 2.0)
  # A clear winner: the argmax, however complex.
  chosen, tied = tuning.choose({simple: [0.60], momentum: [0.70],
                                big_lr: [0.65]})
  assert chosen == momentum and tied == [momentum]
  # Within the tolerance of the best: the simplest of the tied.
  chosen, tied = tuning.choose({simple: [0.695], momentum: [0.70],
                                big_lr: [0.65]})
  assert chosen == simple and set(tied) == {simple, momentum}
  # No momentum beats momentum; today's lr beats another; clip nearest 1×.
  chosen, _ = tuning.choose({momentum: [0.70], big_lr: [0.699],
                             wide_clip: [0.698]})
  assert chosen == wide_clip
  # A constant server lr is simpler than a decaying one.
  cosine = tuning_settings.Point(3, 0.05, 0.0, 1.0, 1.0, 'cosine')
  assert tuning.choose({cosine: [0.70], simple: [0.695]})[0] == simple
  assert tuning.choose({cosine: [0.72], simple: [0.70]})[0] == cosine
  # A point's figure is the mean over its seeds.
  chosen, _ = tuning.choose({simple: [0.70, 0.60], momentum: [0.68]})
  assert chosen == momentum
  # The tolerance is a parameter, stated before the runs.
  assert tuning.choose({simple: [0.695], momentum: [0.70]},
                       tolerance=0.001)[0] == momentum
  with pytest.raises(ValueError, match='one ε'):
    tuning.choose({simple: [0.7], tuning_settings.Point(10, 0.05, 0, 1): [0.7]})
  with pytest.raises(ValueError, match='no finished run'):
    tuning.choose({simple: []})


def test_the_endpoint_is_the_tables():
  assert tuning.ENDPOINT is fl_table.PRESPECIFIED
  evals = [(r, r / 1000) for r in range(5, 301, 5)]
  assert tuning.endpoint(evals, 300) == pytest.approx(
      np.mean([r / 1000 for r in range(270, 301, 5)]))
  assert 'validation accuracy' in tuning.endpoint_name(tuning.ENDPOINT)


def test_trend_tells_rising_from_flat():
  rising = [(r, 0.5 + r / 3000) for r in range(5, 301, 5)]
  t = tuning.trend(rising, 300)
  assert t.rising and t.slope == pytest.approx(1 / 30) and t.evaluations == 21
  rng = np.random.default_rng(0)
  flat = [(r, 0.7 + 0.01 * rng.standard_normal()) for r in range(5, 301, 5)]
  assert not tuning.trend(flat, 300).rising
  assert 'flat' in tuning.trend(flat, 300).describe()
  assert tuning.try_trend([(1, 0.5), (2, 0.6)], 2) is None


def test_quantiles():
  q = tuning.quantiles(np.arange(101.0))
  assert q['n'] == 101 and q['q50'] == 50 and q['q10'] == 10 and q['max'] == 100
  with pytest.raises(ValueError):
    tuning.quantiles([])


@pytest.fixture(scope='module')
def small_data():
  return data_lib.load('fashion_mnist', num_clients=3400, seed=0,
                       validation_fraction=0.1)


def test_client_updates_are_the_runs_own(small_data, tmp_path):
  """The mean of the measured updates of round 2's clients is the global
  step of round 2 in a noise-free, unclipped run at server lr 1 (up to
  float32 round-off, which grows over a large client's many steps)."""
  data = small_data
  config = ft.TrainingConfig(
      mechanism='none', clip_norm=1e6, rounds=2, clients_per_round=4,
      total_clients=3400, client_lr=0.1, model='logreg', eval_every=2,
      validation_fraction=0.1)
  population = data.train.client_ids
  keras_fn = lambda: models.get('logreg', data.input_shape, 10)
  weights, updates = {}, {}

  def observe(rnd, w):
    weights[rnd] = np.concatenate([np.asarray(v).ravel() for v in w.trainable])
    if rnd == 1:
      ids = ft.sampled_clients(config, population, 2)
      updates['u'] = tuning.client_updates(
          keras_fn, w, [data.client_examples(i) for i in ids], 0.1, 32)
      hook = tuning.UpdateNorms(keras_fn, data.client_examples,
                                lambda r: ft.sampled_clients(config,
                                                             population, r),
                                config, [1])
      hook(1, w)
      updates['hook'] = hook.summary()

  ft.run(config, data, str(tmp_path / 'run'), observe=observe,
         log=lambda line: None)
  step = weights[2] - weights[1]
  mean = updates['u'].mean(0)
  assert np.linalg.norm(step - mean) <= 2e-3 * np.linalg.norm(step)
  norms = np.linalg.norm(updates['u'], axis=1)
  assert updates['hook']['round 1']['q50'] == pytest.approx(np.median(norms))
  assert updates['hook']['pooled']['n'] == 4


def test_max_runs_stops_after_that_many_started_runs(tmp_path):
  s = tuning_settings.Settings(output_dir=str(tmp_path), max_runs=1)
  t = tuning.Tuning(s, data=object())
  assert not t.stopping()
  t.trained = 1
  assert t.stopping()
  assert not tuning.Tuning(tuning_settings.Settings(output_dir=str(tmp_path)),
                           data=object()).stopping()
