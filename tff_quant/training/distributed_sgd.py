"""Distributed SGD through TFF: each client sends one clipped mini-batch gradient per round.

The setting of BQ-SGD (paper 003, Alg. 1) and QMGeo (paper 001, Sec. II): the
server broadcasts w_t, every client computes the gradient of its mini-batch,
clips it, and the aggregation factory (e.g. a tff_quant QuantizationFactory over
secure sum) returns the mean; the server steps w_{t+1} = w_t - η·mean. Built
with tff.learning.templates.compose_learning_process, so the result is a
tff.learning LearningProcess (state, get_model_weights, metrics).

Clipping (`clip`):
* 'per_example_linf' (BQ-SGD eq. 6): each example's gradient g is scaled to
  g / max(1, ||g||_∞ / C), then averaged: per-example gradients come from one
  vectorised tape.jacobian, not a loop over examples.
* 'elementwise' (QMGeo eq. 3): the batch-mean gradient is clipped to [-C, C].
* 'none': the batch-mean gradient.
"""

import collections
from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import models
from tff_quant.aggregators import quantization_factory
from tff_quant.common import validation
from tff_quant.program import runtime
from tff_quant.program import round_loop

CLIPS = ('per_example_linf', 'elementwise', 'none')


def clipped_batch_gradient(model: tf.keras.Model, x, y, clip: str,
                           clip_value: float):
  """Mean gradient of the sparse softmax cross-entropy over the batch, clipped as `clip`."""
  variables = model.trainable_variables
  with tf.GradientTape() as tape:
    logits = model(x, training=True)
    losses = tf.keras.losses.sparse_categorical_crossentropy(
        y, logits, from_logits=True)
    mean_loss = tf.reduce_mean(losses)
  if clip != 'per_example_linf':
    grads = tape.gradient(mean_loss, variables)
    if clip == 'elementwise':
      grads = [tf.clip_by_value(g, -clip_value, clip_value) for g in grads]
    return grads
  jac = tape.jacobian(losses, variables)  # per example: [batch, *var.shape]
  batch = tf.shape(losses)[0]
  linf = tf.reduce_max(tf.stack(
      [tf.reduce_max(tf.abs(tf.reshape(j, [batch, -1])), axis=1) for j in jac]),
                       axis=0)
  scale = 1.0 / tf.maximum(1.0, linf / clip_value)
  return [tf.tensordot(scale, j, axes=1) / tf.cast(batch, tf.float32) for j in jac]


def _check(clip, clip_value, learning_rate):
  validation.check_one_of('clip', clip, CLIPS)
  if clip != 'none':
    if clip_value is None:
      raise ValueError(f'`clip_value` is required with clip={clip!r}.')
    validation.check_positive('clip_value', clip_value)
  validation.check_positive('learning_rate', learning_rate)


def build_distributed_sgd(keras_model_fn: Callable[[], tf.keras.Model],
                          element_spec, aggregation_factory,
                          learning_rate: float, clip: str = 'none',
                          clip_value: float = None):
  """LearningProcess for distributed SGD with `aggregation_factory` on the gradients.

  Args:
    keras_model_fn: no-arg callable returning a fresh, uncompiled Keras model
      that outputs logits (trainable weights only: no batch-norm statistics).
    element_spec: (x, y) spec of the client datasets; each round a client's
      dataset is its mini-batch(es), and their clipped gradients are averaged.
    aggregation_factory: an unweighted TFF aggregation factory (the mean).
    learning_rate: server step η.
    clip, clip_value: see the module docstring.
  """
  _check(clip, clip_value, learning_rate)

  tff_model_fn = models.tff_model_fn(keras_model_fn, element_spec, accuracy=False)

  weights_type = tff.learning.models.weights_type_from_model(tff_model_fn)
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(element_spec))

  @tff.tensorflow.computation
  def initial_weights_fn():
    return tff.learning.models.ModelWeights.from_model(keras_model_fn())

  @tff.tensorflow.computation(weights_type, data_type)
  def client_gradient(weights, dataset):
    model = keras_model_fn()

    @tf.function  # orders the weight assignment before the gradient reads
    def compute(trainable, dataset):
      for var, value in zip(model.trainable_variables, trainable):
        var.assign(value)
      zeros = tuple(tf.zeros_like(v) for v in model.trainable_variables)

      def add_batch(acc, batch):
        total, count = acc
        grads = clipped_batch_gradient(model, batch[0], batch[1], clip, clip_value)
        return tuple(t + g for t, g in zip(total, grads)), count + 1.0

      total, count = dataset.reduce((zeros, tf.constant(0.0)), add_batch)
      return [t / tf.maximum(count, 1.0) for t in total]

    return compute(weights.trainable, dataset)

  @tff.federated_computation
  def client_init():
    return tff.federated_value((), tff.SERVER)

  @tff.federated_computation(
      client_init.type_signature.result,
      tff.FederatedType(weights_type, tff.CLIENTS),
      tff.FederatedType(data_type, tff.CLIENTS))
  def client_next(state, weights, data):
    grads = tff.federated_map(client_gradient, (weights, data))
    ones = tff.federated_value(np.float32(1.0), tff.CLIENTS)
    result = tff.federated_zip(
        tff.learning.templates.ClientResult(update=grads, update_weight=ones))
    return tff.templates.MeasuredProcessOutput(
        state, result, tff.federated_value((), tff.SERVER))

  client_work = tff.learning.templates.ClientWorkProcess(client_init, client_next)
  distributor = tff.learning.templates.build_broadcast_process(weights_type)
  if isinstance(aggregation_factory, tff.aggregators.UnweightedAggregationFactory):
    aggregation_factory = tff.aggregators.as_weighted_aggregator(aggregation_factory)
  aggregator = aggregation_factory.create(client_gradient.type_signature.result,
                                          tff.TensorType(np.float32))
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      tff.learning.optimizers.build_sgdm(learning_rate), weights_type)
  return tff.learning.templates.compose_learning_process(
      initial_weights_fn, distributor, client_work, aggregator, finalizer)


def evaluate(keras_model_fn, weights, x, y, batch_size: int = 1000) -> float:
  """Test accuracy of `weights` (tff.learning ModelWeights) on arrays (x, y)."""
  model = keras_model_fn()
  weights.assign_weights_to(model)
  logits = model.predict(x, batch_size=batch_size, verbose=0)
  return float(np.mean(np.argmax(logits, axis=1) == y))


ClientBatches = collections.namedtuple('ClientBatches', ['datasets', 'indices'])


def sample_client_batches(client_arrays, batch_size: int, rng: np.random.Generator):
  """One mini-batch per client, drawn uniformly without replacement from its data."""
  datasets, indices = [], []
  for x, y in client_arrays:
    idx = rng.choice(len(y), size=batch_size, replace=False)
    indices.append(idx)
    datasets.append(tf.data.Dataset.from_tensors((x[idx], y[idx])))
  return ClientBatches(datasets, indices)


def split_among_clients(x, y, num_clients: int, seed: int = 0):
  """IID split of (x, y) into `num_clients` equal shards (the papers' setting)."""
  perm = np.random.default_rng(seed).permutation(len(y))
  size = len(y) // num_clients
  return [(x[perm[i * size:(i + 1) * size]], y[perm[i * size:(i + 1) * size]])
          for i in range(num_clients)]


def train(process, keras_model_fn, client_arrays, test_arrays, rounds: int,
          batch_size: int, run_dir: str, seed: int = 0, eval_every: int = 10,
          log=print, checkpoint_every: int = 10):
  """Runs `rounds` rounds (resumable, see round_loop); returns (final accuracy, rows).

  Round r's batches come from np.random.default_rng([seed, r]), so a resumed run
  draws the same batches it would have drawn.
  """
  if batch_size > min(len(y) for _, y in client_arrays):
    raise ValueError(f'`batch_size`={batch_size} exceeds the smallest client dataset '
                     f'({min(len(y) for _, y in client_arrays)} examples).')
  test_x, test_y = test_arrays

  def step(state, rnd):
    batches = sample_client_batches(client_arrays, batch_size,
                                    np.random.default_rng([seed, rnd]))
    with runtime.readable_round_errors():
      out = process.next(state, batches.datasets)
    row = dict(test_accuracy=float('nan'))
    if rnd % eval_every == 0 or rnd == rounds:
      row['test_accuracy'] = evaluate(keras_model_fn, process.get_model_weights(
          out.state), test_x, test_y)
      log(f'round {rnd}/{rounds} test_acc={row["test_accuracy"]:.4f}')
    quant = quantization_factory.find_measurements(out.metrics['aggregator'])
    if quant is not None:
      row['clipped_fraction'] = float(quant['clipped_fraction'])
      row['bits_per_client'] = int(quant['bits_per_client'])
    return out.state, row

  state, rows, _ = round_loop.run_rounds(process.initialize(), rounds, run_dir, step, log,
                                      checkpoint_every)
  acc = evaluate(keras_model_fn, process.get_model_weights(state), test_x, test_y)
  return acc, rows
