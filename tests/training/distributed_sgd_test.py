import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import mechanisms, models

from tff_quant.training import distributed_sgd
from tff_quant.aggregators import quantization_factory

SPEC = (tf.TensorSpec([None, 6], tf.float32), tf.TensorSpec([None], tf.int32))


def _model():
  return models.get('mlp', (6,), 3)


def _clients(num=3, size=40, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(num * size, 6)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 1).astype(np.int32)
  return distributed_sgd.split_among_clients(x, y, num, seed)


def _reference_gradient(weights, x, y, clip, clip_value):
  model = _model()
  weights.assign_weights_to(model)
  return [g.numpy() for g in distributed_sgd.clipped_batch_gradient(
      model, tf.constant(x), tf.constant(y), clip, clip_value)]


@pytest.mark.parametrize('clip, clip_value', [('none', None), ('elementwise', 0.01),
                                              ('per_example_linf', 0.02)])
def test_one_round_is_sgd_on_the_mean_clipped_gradient(tff_context, clip, clip_value):
  del tff_context
  clients = _clients()
  process = distributed_sgd.build_distributed_sgd(
      _model, SPEC, tff.aggregators.UnweightedMeanFactory(), 0.5, clip, clip_value)
  state = process.initialize()
  w0 = process.get_model_weights(state)
  batches = distributed_sgd.sample_client_batches(clients, 8, np.random.default_rng(1))
  state = process.next(state, batches.datasets).state
  w1 = process.get_model_weights(state)
  grads = [_reference_gradient(w0, x[i], y[i], clip, clip_value)
           for (x, y), i in zip(clients, batches.indices)]
  for k, (a, b) in enumerate(zip(w0.trainable, w1.trainable)):
    expect = a - 0.5 * np.mean([g[k] for g in grads], axis=0)
    np.testing.assert_allclose(b, expect, rtol=1e-5, atol=1e-6)


def test_per_example_linf_clip_bounds_each_example():
  model = _model()
  x = tf.constant(np.random.default_rng(0).normal(size=(5, 6)) * 50, tf.float32)
  y = tf.constant([0, 1, 2, 0, 1])
  grads = distributed_sgd.clipped_batch_gradient(model, x, y, 'per_example_linf', 1e-3)
  assert max(float(tf.reduce_max(tf.abs(g))) for g in grads) <= 1e-3 + 1e-9
  # Matches clipping each example's gradient on its own.
  single = [distributed_sgd.clipped_batch_gradient(model, x[i:i + 1], y[i:i + 1],
                                                   'per_example_linf', 1e-3)
            for i in range(5)]
  for k, g in enumerate(grads):
    np.testing.assert_allclose(g, np.mean([s[k] for s in single], axis=0),
                               rtol=1e-4, atol=1e-9)


def test_training_with_a_quantization_factory_learns_and_resumes(tff_context, tmp_path):
  del tff_context
  clients = _clients(num=5, size=200)
  test = (np.concatenate([c[0] for c in clients]), np.concatenate([c[1] for c in clients]))
  factory = quantization_factory.QuantizationFactory(
      mechanisms.QMGeo(0.05, 8, 0.9, full_support=True), max_clients_per_round=5,
      seed=3, diagnostics=True)
  process = distributed_sgd.build_distributed_sgd(_model, SPEC, factory, 0.5,
                                                  'elementwise', 0.05)
  acc, rows = distributed_sgd.train(process, _model, clients, test, 40, 16,
                                    str(tmp_path), eval_every=20, log=lambda s: None)
  assert acc > 0.7 and len(rows) == 40
  assert float(rows[-1]['clipped_fraction']) >= 0.0
  # Asking for more rounds resumes from the checkpoint of round 40.
  logs = []
  acc2, rows2 = distributed_sgd.train(process, _model, clients, test, 42, 16,
                                      str(tmp_path), eval_every=20, log=logs.append)
  assert any('Resuming' in s and 'round 40' in s for s in logs)
  assert [int(r['round']) for r in rows2] == list(range(1, 43))


def test_bad_arguments():
  with pytest.raises(ValueError, match='clip'):
    distributed_sgd.build_distributed_sgd(_model, SPEC, None, 0.1, 'l2', 1.0)
  with pytest.raises(ValueError, match='clip_value'):
    distributed_sgd.build_distributed_sgd(_model, SPEC, None, 0.1, 'elementwise')
  with pytest.raises(ValueError, match='learning_rate'):
    distributed_sgd.build_distributed_sgd(_model, SPEC, None, 0.0)
