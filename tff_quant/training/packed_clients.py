"""FedAvg with several simulated clients per TFF client slot (the fast simulation path).

TFF's per-client overhead, not local training, dominates a simulated round
(benchmarks/round_vs_floor.py). Here each TFF client slot trains K clients, each
from the same broadcast weights with its own optimizer state, and hands the
aggregator their K updates stacked on a leading axis. By default the K clients
train as one batched computation (`vectorized_clients`: stacked weights,
grouped convolutions, batched matmuls); a model it cannot re-implement trains
them one after another inside one TensorFlow loop (`vectorized=False`).
`auto_clients_per_slot` is the K federated_training uses when none is given.
A `QuantizationFactory(clients_per_value=K)` clips and encodes every row on its
own and adds the K integer level vectors before the secure sum; TFF's own
distributed DP peers do the same through `aggregators.packed_peers`
(`Peer.factory(clients_per_value=K)`: TFF's per-client rotation, clip,
rounding, noise and modular clip on each row, the K rows added modulo 2^bits),
the central Gaussian through `StackedClippedMeanFactory`.

Why the server's view is unchanged: the secure sum reveals only
S = Σ_slots Σ_{k<K} Q(x_{slot,k}), where each Q(x) is the mechanism's encoding of
one client's clipped update with fresh, independent randomness (encoding is per
coordinate and independent, which the accountant already assumes). Regrouping a
finite sum of independent terms does not change it: S has exactly the law of
Σ_i Q(x_i) over the n clients, the variable the accountant bounds. The training
metrics are per-client sums (loss and accuracy totals) added the same way and
still go through `secure_sum_then_finalize`. Local training is TFF's model-delta
client work (update = initial − trained weights; a client whose update is not
finite contributes zeros), batches cut per client exactly as
`dataset.repeat(epochs).batch(batch_size)` cuts them; a client without
examples contributes zeros, as in TFF's client work.
"""

import collections
import collections.abc
import os
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant.common import validation
from tff_quant.training import vectorized_clients

vectorization_reason = vectorized_clients.vectorization_reason


# Most coordinates one stacked copy of the K clients' weights may hold (K * d;
# 128 MiB of float32): the vectorized training keeps a few such copies.
MAX_STACKED_COORDINATES = 2**25


def parallel_units(num_workers: int = 0) -> int:
  """Slots that run at once: this machine's CPU cores (TFF's executor runs
  each slot on one), times the TFF workers when there are remote ones
  (assumed alike)."""
  try:
    cores = len(os.sched_getaffinity(0))
  except AttributeError:   # not Linux
    cores = os.cpu_count() or 1
  return max(1, cores) * max(1, num_workers)


def auto_clients_per_slot(clients_per_round: int, dim: int, units: int) -> int:
  """K for `clients_per_round` clients of a `dim`-coordinate model on `units`
  parallel slots: the smallest divisor of n that is >= n / units, so the n / K
  slots keep every unit busy with as few slots as possible (a slot costs TFF
  a fixed overhead; its K clients train as one computation), lowered to the
  largest divisor with K * dim <= MAX_STACKED_COORDINATES when the stacked
  weights would not fit. E.g. n = 100 on 2 cores: K = 50; n = 37: K = 37."""
  n = validation.check_integer('clients_per_round', clients_per_round, 1)
  validation.check_integer('dim', dim, 1)
  validation.check_integer('units', units, 1)
  divisors = [k for k in range(1, n + 1) if n % k == 0]
  k = min(k for k in divisors if k * units >= n)
  fits = [d for d in divisors if d * dim <= MAX_STACKED_COORDINATES]
  return min(k, max(fits, default=1))


def pack_datasets(examples: Callable[[str], Tuple[np.ndarray, np.ndarray]],
                  client_ids: Sequence[str], clients_per_slot: int,
                  batch_size: int, local_epochs: int = 1,
                  vectorized: bool = True) -> List[tf.data.Dataset]:
  """One dataset per slot of `clients_per_slot` consecutive clients.

  Args:
    examples: client id -> (x, y) numpy arrays in the client's dataset order
      (a client may have none: its update is zeros, as in TFF's client work).
    client_ids: the round's clients; their number must be a multiple of K.
    clients_per_slot: K >= 1.
    batch_size, local_epochs: as the plain path's `repeat(epochs).batch(B)`.
    vectorized: the layout of `build_packed_fed_avg(vectorized=...)`.

  Returns:
    A dataset per slot. vectorized: its one element is a
    `vectorized_clients.SlotData` (the clients' examples and the steps that
    train them); otherwise its elements are
    ((x [b, ...], y [b]), k): a batch of client k of the slot (0 <= k < K), all
    of client k's batches before client k + 1's.
  """
  k = validation.check_integer('clients_per_slot', clients_per_slot, 1)
  validation.check_integer('batch_size', batch_size, 1)
  validation.check_integer('local_epochs', local_epochs, 1)
  if len(client_ids) % k:
    raise ValueError(f'clients_per_round ({len(client_ids)}) must be a multiple of '
                     f'clients_per_slot ({k}).')
  out = []
  for first in range(0, len(client_ids), k):
    arrays = [examples(cid) for cid in client_ids[first:first + k]]
    if vectorized:
      out.append(vectorized_clients.slot_dataset(vectorized_clients.pack_steps(
          arrays, batch_size, local_epochs)))
      continue
    xs, ys, starts, sizes, owners = [], [], [], [], []
    offset = 0
    for j, (x, y) in enumerate(arrays):
      x, y = np.concatenate([x] * local_epochs), np.concatenate([y] * local_epochs)
      for s in range(0, len(y), batch_size):
        starts.append(offset + s)
        sizes.append(min(batch_size, len(y) - s))
        owners.append(j)
      xs.append(x)
      ys.append(y)
      offset += len(y)
    all_x = tf.constant(np.concatenate(xs))
    all_y = tf.constant(np.concatenate(ys))
    batches = tf.data.Dataset.from_tensor_slices(
        (np.array(starts, np.int64), np.array(sizes, np.int64),
         np.array(owners, np.int32)))
    out.append(batches.map(
        lambda s, z, j, x=all_x, y=all_y: ((x[s:s + z], y[s:s + z]), j)))
  return out


def _xy_specs(input_spec):
  """(x spec, y spec) of a model's input_spec: an (x, y) pair or {'x', 'y'}."""
  if isinstance(input_spec, collections.abc.Mapping):
    return input_spec['x'], input_spec['y']
  x_spec, y_spec = input_spec
  return x_spec, y_spec


def stacked_type(value_type, clients_per_slot: int):
  """The TFF type of K stacked values of `value_type` (a leading axis K)."""
  specs = tff.types.type_to_tf_tensor_specs(value_type)
  return tff.types.tensorflow_to_type(tf.nest.map_structure(
      lambda s: tf.TensorSpec([clients_per_slot] + s.shape.as_list(), s.dtype),
      specs))


def _packed_update(model_fn, clients_per_slot: int):
  """The tf.function training the K clients of one slot (see module docstring)."""
  model = model_fn()
  num = clients_per_slot

  @tf.function
  def update(optimizer, hparams, initial_weights, data):
    weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda a, b: a.assign(b), weights, initial_weights)
    trainable = tuple(tf.nest.flatten(weights.trainable))
    start = tuple(tf.nest.flatten(initial_weights.trainable))
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)

    def fresh_optimizer():
      return optimizer.set_hparams(optimizer.initialize(specs), hparams)

    def finish(rows, client):
      """Writes client's update (zeros if not finite) and resets the weights."""
      delta = [a - b for a, b in zip(start, trainable)]
      finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in delta])
      rows = tuple(r.write(client, tf.where(finite, t, tf.zeros_like(t)))
                   for r, t in zip(rows, delta))
      with tf.control_dependencies([r.flow for r in rows]):
        for v, s in zip(trainable, start):
          v.assign(s)
      return rows

    def step(carry, element):
      """One batch; a new client first stores the last one's update."""
      rows, opt_state, current = carry
      batch, client = element
      rows, opt_state = tf.cond(
          tf.equal(client, current), lambda: (rows, opt_state),
          lambda: (finish(rows, current), fresh_optimizer()))
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      grads = tape.gradient(output.loss, trainable)
      opt_state, new = optimizer.next(opt_state, trainable, grads)
      for v, w in zip(trainable, new):
        v.assign(w)
      return rows, opt_state, client

    # A dataset.reduce, as TFF's own client work: an autograph `for` loop over
    # the dataset computed wrong updates for clients with several batches under
    # TFF's C++ executor (tests/training/packed_clients_test.py catches it).
    rows = tuple(tf.TensorArray(v.dtype, size=num, element_shape=v.shape)
                 for v in trainable)
    rows, _, current = data.reduce(
        (rows, fresh_optimizer(), tf.constant(0, tf.int32)), step)
    rows = finish(rows, current)
    update = tf.nest.pack_sequence_as(weights.trainable, [
        tf.reshape(r.stack(), [num] + v.shape.as_list())
        for r, v in zip(rows, trainable)])
    return (tff.learning.templates.ClientResult(
        update=update, update_weight=tf.constant(float(num), tf.float32)),
            model.report_local_unfinalized_metrics())

  return update


def build_packed_client_work(model_fn, optimizer, clients_per_slot: int,
                             metrics_aggregator, vectorized: bool = True):
  """A `tff.learning.templates.ClientWorkProcess` training K clients per slot.

  Args:
    model_fn: no-arg callable -> `tff.learning.models.VariableModel` (fresh).
    optimizer: the clients' `tff.learning.optimizers.Optimizer`.
    clients_per_slot: K >= 1.
    metrics_aggregator: e.g. `tff.learning.metrics.secure_sum_then_finalize`.
    vectorized: train the K clients as one batched computation
      (`vectorized_clients`; ValueError naming what the model lacks when it
      cannot) instead of one after another; data from `pack_datasets` with the
      same `vectorized`.

  Its result's update has a leading axis K (one row per client).
  """
  num = validation.check_integer('clients_per_slot', clients_per_slot, 1)
  validation.check_bool('vectorized', vectorized)
  if vectorized:
    reason = vectorized_clients.vectorization_reason(model_fn)
    if reason:
      raise ValueError(f'vectorized=True: cannot vectorize this model ({reason}); '
                       'pass vectorized=False to train the clients one after '
                       'another.')
  with tf.Graph().as_default():
    model = model_fn()
    metrics_fn = metrics_aggregator(model.metric_finalizers())
    weights_type = tff.learning.models.weights_type_from_model(model)
    element = tff.types.tensorflow_to_type(model.input_spec)
    if vectorized:
      data_type = vectorized_clients.slot_type(*_xy_specs(model.input_spec))
  if vectorized:
    train = vectorized_clients.vectorized_update
  else:
    data_type = tff.SequenceType(tff.StructWithPythonType(
        [element, tff.TensorType(np.int32)], tuple))
    train = _packed_update
  hparams = optimizer.get_hparams(optimizer.initialize(
      tf.TensorSpec([], tf.float32)))

  @tff.federated_computation()
  def init_fn():
    return tff.federated_value(hparams, tff.SERVER)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def client_update(state, initial, dataset):
    return train(model_fn, num)(optimizer, state, initial, dataset)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, data):
    result, metrics = tff.federated_map(
        client_update, (tff.federated_broadcast(state), weights, data))
    measurements = tff.federated_zip(collections.OrderedDict(
        train=metrics_fn(metrics)))
    return tff.templates.MeasuredProcessOutput(state, result, measurements)

  @tff.tensorflow.computation(state_type)
  def get_hparams(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams(state, new):
    del state
    return new

  return tff.learning.templates.ClientWorkProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams, set_hparams_fn=set_hparams)


class StackedClippedMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """The clipped mean for K clients stacked per value: the noise-free baseline
  ('none'), or with `noise_std` the central Gaussian ('gaussian').

  Each client's update (one row) is clipped to ℓ2 norm `clip_norm` over the
  whole update, as `aggregators.clipped_mean_factory` (TFF's clipping_factory)
  clips it, and the result is the mean over all clients, through a plain
  federated_sum. With `noise_std` > 0 the server adds N(0, noise_std²) to each
  coordinate of the sum before dividing, as TFF's
  DifferentiallyPrivateFactory.gaussian_fixed (noise_std = z·clip) does: the
  server's output has the same law however the clients are packed (central
  DP: the server is trusted with the sum). Measurements: clipped_count, the
  clients clipped.

  Args:
    clip_norm: ℓ2 clip of each client's update, > 0.
    clients_per_value: K >= 1 clients stacked per value.
    noise_std: the server's Gaussian noise per coordinate of the sum, >= 0.
    seed: None (the noise from TF's OS-seeded generator) or an int >= 0: the
      noise of round r is `tf.random.stateless_normal` at seed (seed, r),
      reproducible (experiments only: who knows the seed knows the noise).
      State: the round number.
  """

  def __init__(self, clip_norm: float, clients_per_value: int,
               noise_std: float = 0.0, seed: Optional[int] = None):
    self.clip_norm = float(validation.check_positive('clip_norm', clip_norm))
    self.clients_per_value = validation.check_integer(
        'clients_per_value', clients_per_value, 1)
    self.noise_std = float(validation.check_number('noise_std', noise_std, 0))
    self.seed = validation.check_optional(validation.check_integer, 'seed',
                                          seed, 0, 2**62)

  def create(self, value_type):
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    k, clip = self.clients_per_value, self.clip_norm
    for spec in tf.nest.flatten(specs):
      if spec.shape.rank < 1 or spec.shape[0] != k:
        raise TypeError(f'StackedClippedMeanFactory(clients_per_value={k}) needs '
                        f'values that stack {k} clients on their first axis, '
                        f'got {spec}.')
    row_type = tff.types.tensorflow_to_type(tf.nest.map_structure(
        lambda s: tf.TensorSpec(s.shape[1:], s.dtype), specs))

    @tff.tensorflow.computation(value_type)
    def clip_and_add(value):
      flat = tf.nest.flatten(value)
      squares = [tf.sqrt(tf.reduce_sum(tf.square(t), list(range(1, t.shape.rank))
                                       )) ** 2 for t in flat]
      norm = tf.sqrt(tf.add_n(squares))   # [K]: each client's global norm
      over = norm > clip
      divisor = tf.where(over, norm / clip, 1.0)
      rows = [t / tf.reshape(divisor, [k] + [1] * (t.shape.rank - 1))
              for t in flat]
      total = tf.nest.pack_sequence_as(value, [tf.reduce_sum(r, 0) for r in rows])
      return total, tf.reduce_sum(tf.cast(over, tf.int32))

    noise_std, seed = self.noise_std, self.seed

    def noise(shape, dtype, round_num, index):
      if seed is None:
        return tf.random.normal(shape, stddev=noise_std, dtype=dtype)
      return tf.random.stateless_normal(
          shape, tf.stack([tf.constant(seed, tf.int64) + round_num,
                           tf.constant(index, tf.int64)]),
          stddev=noise_std, dtype=dtype)

    @tff.tensorflow.computation(row_type, np.int32, np.int64)
    def divide(total, count, round_num):
      if noise_std > 0:   # central DP: the server's noise on the sum
        flat = tf.nest.flatten(total)
        total = tf.nest.pack_sequence_as(total, [
            t + noise(tf.shape(t), t.dtype, round_num, i)
            for i, t in enumerate(flat)])
      return tf.nest.map_structure(lambda t: t / tf.cast(count, t.dtype), total)

    @tff.tensorflow.computation()
    def clients():
      return np.int32(k)

    @tff.tensorflow.computation(np.int64)
    def advance(round_num):
      return round_num + 1

    @tff.federated_computation()
    def init_fn():
      return tff.federated_value(np.int64(0), tff.SERVER)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      total, clipped = tff.federated_map(clip_and_add, value)
      count = tff.federated_sum(tff.federated_eval(clients, tff.CLIENTS))
      mean = tff.federated_map(divide, (tff.federated_sum(total), count, state))
      measurements = tff.federated_zip(collections.OrderedDict(
          clipped_count=tff.federated_sum(clipped)))
      return tff.templates.MeasuredProcessOutput(
          tff.federated_map(advance, state), mean, measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)


def build_packed_fed_avg(model_fn, clients_per_slot: int, client_optimizer,
                         server_optimizer, model_aggregator,
                         metrics_aggregator=None, vectorized: bool = True):
  """FedAvg (uniform weights) whose client slots each train K clients.

  Args:
    model_fn: no-arg callable -> a fresh `tff.learning.models.VariableModel`.
    clients_per_slot: K >= 1; `next` takes one packed dataset per slot
      (`pack_datasets`).
    client_optimizer, server_optimizer: `tff.learning.optimizers.Optimizer`s.
    model_aggregator: an unweighted factory that takes K stacked updates per
      value and returns their mean over all clients, e.g.
      `aggregators.mechanism_factory(..., clients_per_value=K)`.
    metrics_aggregator: default `tff.learning.metrics.secure_sum_then_finalize`
      (the whole round stays secure-only).
    vectorized: as in `build_packed_client_work` (`vectorization_reason`
      says whether a model can).

  Returns:
    A `tff.learning.templates.LearningProcess` with the state, metrics and
    get/set_model_weights of TFF's FedAvg.
  """
  from tff_quant.aggregators import constructors  # pylint: disable=g-import-not-at-top
  num = validation.check_integer('clients_per_slot', clients_per_slot, 1)

  @tff.tensorflow.computation()
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_weights.type_signature.result
  aggregator = constructors.weighted(model_aggregator).create(
      stacked_type(weights_type.trainable, num), tff.TensorType(np.float32))
  return tff.learning.templates.compose_learning_process(
      initial_weights,
      tff.learning.templates.build_broadcast_process(weights_type),
      build_packed_client_work(
          model_fn, client_optimizer, num,
          metrics_aggregator or tff.learning.metrics.secure_sum_then_finalize,
          vectorized),
      aggregator,
      tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                             weights_type))
