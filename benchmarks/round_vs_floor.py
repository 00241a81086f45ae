"""Seconds per FedAvg round: the project's loop vs plain TensorFlow doing the same work.

For each model and clients-per-round n, every round draws n clients of the
population (federated Fashion-MNIST: real images, simulated split) and times,
on the same clients, interleaved round by round:
  plain RQM            TFF's FedAvg with the RQM secure-sum factory, one TFF
                       client per client, tf.data pipelines built for the
                       round (federated_training with --clients_per_slot=1);
  packed sequential   `training.packed_clients`: K clients per TFF client
                       slot, trained one after another in the slot, clipped
                       and encoded per client before the secure sum;
  packed vectorized   the same, the slot's K clients trained as one batched
                       computation (`training.vectorized_clients`): what
                       federated_training runs by default;
  floor                the same clients' local training in one process, no
                       TFF: one tf.function per client over its batches,
                       sequential (no aggregation);
  vectorized floor     the same batched training as `packed vectorized`, in
                       this process, no TFF, no aggregation: the best plain TF
                       does with that batching.
Packing (numpy arrays to datasets) is inside every packed and floor time. K is
federated_training's automatic choice (`packed_clients.auto_clients_per_slot`)
unless --clients_per_slot is given. Each setting: one warm-up round, then
--repeats timed rounds; min / median / max seconds per path. The header names
the CPU, its AVX-512 support and whether TensorFlow's oneDNN kernels are on
(`vectorized_clients.cpu_facts`): with them off (TF_ENABLE_ONEDNN_OPTS=0, or
TF 2.14's default on a CPU without AVX-512 when nothing set it) the vectorized
paths run one convolution per client (in one loop) instead of one grouped one.
  python -m benchmarks.round_vs_floor [--models=small_cnn,lenet5]
      [--clients=100,400] [--repeats=3] [--clients_per_slot=0] [--paths=...]
"""

import os
import resource
import statistics
import time

# pylint: disable=g-bad-import-order,g-import-not-at-top
from tff_quant.program import quiet
quiet.import_tensorflow()   # without TF's CUDA start-up noise

from absl import app
from absl import flags
from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import aggregators, data, models
from tff_quant.program import cli, runtime
from tff_quant.training import packed_clients, vectorized_clients

PATHS = ('plain RQM', 'packed sequential', 'packed vectorized', 'floor',
         'vectorized floor')
FLAGS = flags.FLAGS
flags.DEFINE_list('models', ['small_cnn'], 'Models to time.')
flags.DEFINE_list('clients', ['100', '400'], 'Clients per round.')
flags.DEFINE_integer('repeats', 3, 'Timed rounds per setting (after one warm-up).')
flags.DEFINE_integer('clients_per_slot', 0, 'K of the packed paths; 0: the '
                     'automatic choice of federated_training.')
flags.DEFINE_list('paths', list(PATHS), 'Paths to time (floor always runs).')
flags.DEFINE_integer('total_clients', 3400, 'Population the clients are drawn from.')
flags.DEFINE_integer('batch_size', 32, 'Local batch size.')
flags.DEFINE_float('client_lr', 0.05, 'Local SGD learning rate.')
flags.DEFINE_float('clip_norm', 1.0, 'ℓ2 clip of each client update.')


def floor_trainer(keras_fn, input_shape, batch_size, lr):
  """Plain TF: (weights, [(x, y)]) -> trains each client from `weights` in turn."""
  model = keras_fn()
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function(input_signature=[
      tf.TensorSpec([None] + list(input_shape), tf.float32),
      tf.TensorSpec([None], tf.int32)])
  def train_client(xs, ys):
    for start in tf.range(0, tf.shape(ys)[0], batch_size):
      x, y = xs[start:start + batch_size], ys[start:start + batch_size]
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      for v, g in zip(model.trainable_variables,
                      tape.gradient(loss, model.trainable_variables)):
        v.assign_sub(lr * g)

  def run(weights, clients):
    for x, y in clients:
      for v, w in zip(model.trainable_variables, weights):
        v.assign(w)
      train_client(x, y)
  return run


def vectorized_floor_trainer(model_fn, clients_per_slot, batch_size, lr):
  """Plain TF, batched as the vectorized packed path: (weights, [(x, y)]) ->
  trains each slot of K clients with `vectorized_clients.vectorized_update`."""
  optimizer = tff.learning.optimizers.build_sgdm(lr)
  update = vectorized_clients.vectorized_update(model_fn, clients_per_slot)
  hparams = optimizer.get_hparams(optimizer.initialize(
      tf.TensorSpec([], tf.float32)))

  def run(weights, clients):
    initial = tff.learning.models.ModelWeights(trainable=list(weights),
                                               non_trainable=[])
    for first in range(0, len(clients), clients_per_slot):
      steps = vectorized_clients.pack_steps(
          clients[first:first + clients_per_slot], batch_size, 1)
      result, _ = update(optimizer, hparams, initial,
                         vectorized_clients.slot_dataset(steps))
      tf.nest.map_structure(lambda t: t.numpy(), result.update)
  return run


def peak_rss_mib():
  """(this process, all TFF workers) peak resident memory in MiB."""
  own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  workers = 0.0
  for pid in runtime.worker_pids():
    try:
      with open(f'/proc/{pid}/status') as f:
        for line in f:
          if line.startswith('VmHWM:'):
            workers += int(line.split()[1]) / 1024
    except OSError:
      pass
  return own, workers


def time_setting(fed, model_name, n, repeats, k, paths):
  """{path: [seconds per round]} for the paths in `paths` and the floor."""
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  keras_fn = lambda: models.get(model_name, (28, 28, 1), 10)
  model_fn = models.tff_model_fn(keras_fn, spec)
  sgd = tff.learning.optimizers.build_sgdm
  rqm = lambda per_value: aggregators.mechanism_factory(
      'rqm', FLAGS.clip_norm, dict(num_levels=16), clients_per_value=per_value)
  batch = FLAGS.batch_size
  processes = {}
  if 'plain RQM' in paths:
    processes['plain RQM'] = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, sgd(FLAGS.client_lr), sgd(1.0), model_aggregator=rqm(1),
        metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize)
  for path, vectorized in (('packed sequential', False),
                           ('packed vectorized', True)):
    if path in paths:
      processes[path] = packed_clients.build_packed_fed_avg(
          model_fn, k, sgd(FLAGS.client_lr), sgd(1.0), rqm(k),
          vectorized=vectorized)
  floors = {'floor': floor_trainer(keras_fn, (28, 28, 1), batch, FLAGS.client_lr)}
  if 'vectorized floor' in paths:
    floors['vectorized floor'] = vectorized_floor_trainer(model_fn, k, batch,
                                                          FLAGS.client_lr)
  states = {p: proc.initialize() for p, proc in processes.items()}
  population = fed.train.client_ids[:FLAGS.total_clients]
  first = next(iter(processes.values()), None)
  weights = [w.numpy() for w in keras_fn().trainable_weights]

  def datasets(path, ids):
    if path == 'plain RQM':
      return [fed.train.create_tf_dataset_for_client(c).batch(batch)
              .map(lambda e: (e['x'], e['y'])) for c in ids]
    return packed_clients.pack_datasets(fed.client_examples, ids, k, batch,
                                        vectorized=path == 'packed vectorized')

  times = {p: [] for p in list(processes) + list(floors)}
  for rnd in range(repeats + 1):   # round 0 warms up (traces, compiles)
    rng = np.random.default_rng([0, rnd])
    ids = [population[i] for i in rng.choice(len(population), n, replace=False)]
    for path, process in processes.items():
      t0 = time.perf_counter()
      states[path] = process.next(states[path], datasets(path, ids)).state
      if rnd:
        times[path].append(time.perf_counter() - t0)
    if first is not None:
      weights = [np.asarray(w) for w in first.get_model_weights(
          states[next(iter(processes))]).trainable]
    for path, train in floors.items():
      t0 = time.perf_counter()
      train(weights, [fed.client_examples(c) for c in ids])
      if rnd:
        times[path].append(time.perf_counter() - t0)
  return times


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    clients = cli.numbers('clients', FLAGS.clients, 1, integer=True)
    for name in FLAGS.models:
      if name not in models.MODELS:
        raise ValueError(f'--models: unknown {name!r}; choose from {models.MODELS}.')
    for path in FLAGS.paths:
      if path not in PATHS:
        raise ValueError(f'--paths: unknown {path!r}; choose from {PATHS}.')
    cli.check_flags(FLAGS, at_least_one=('repeats', 'total_clients',
                                         'batch_size'))
    if FLAGS.clients_per_slot < 0:
      raise ValueError('--clients_per_slot must be 0 (automatic) or an integer '
                       f'>= 1 dividing every --clients, got {FLAGS.clients_per_slot}.')
    for n in clients:
      if FLAGS.clients_per_slot and n % FLAGS.clients_per_slot:
        raise ValueError(f'--clients: {n} is not a multiple of '
                         f'--clients_per_slot={FLAGS.clients_per_slot}.')
      if n > FLAGS.total_clients:
        raise ValueError(f'--clients: {n} exceeds --total_clients={FLAGS.total_clients}.')
  logging.set_verbosity(logging.WARNING)   # not TFF's per-model INFO lines
  units = packed_clients.parallel_units()
  with cli.secure_sum_simulation():
    fed = data.load('fashion_mnist', num_clients=FLAGS.total_clients, seed=0)
    print(f'Data: {fed.description}. {FLAGS.repeats} timed rounds after one '
          f'warm-up; paths interleaved round by round; {os.cpu_count()} CPU '
          f'cores ({units} parallel slots); batch {FLAGS.batch_size}, one local '
          'epoch, RQM 16 levels.', flush=True)
    print(vectorized_clients.cpu_facts().describe() + '.', flush=True)
    print('| model | clients/round | K | path | min (s) | median (s) | max (s) | '
          'median / floor | median / vectorized floor |\n'
          '|---|---|---|---|---|---|---|---|---|', flush=True)
    for name in FLAGS.models:
      dim = models.num_params(models.get(name, (28, 28, 1), 10))
      for n in clients:
        k = FLAGS.clients_per_slot or packed_clients.auto_clients_per_slot(
            n, dim, units)
        times = time_setting(fed, name, n, FLAGS.repeats, k, FLAGS.paths)
        med = {p: statistics.median(t) for p, t in times.items()}
        for path in PATHS:
          if path not in times:
            continue
          t = times[path]
          vfloor = (f'{med[path] / med["vectorized floor"]:.2f}x'
                    if 'vectorized floor' in med else 'n/a')
          print(f'| {name} | {n} | {1 if path == "plain RQM" else k} | {path} | '
                f'{min(t):.3f} | {med[path]:.3f} | {max(t):.3f} | '
                f'{med[path] / med["floor"]:.2f}x | {vfloor} |', flush=True)
        own, workers = peak_rss_mib()
        print(f'| {name} | {n} | | peak RSS (MiB): Python {own:.0f}, TFF '
              f'workers {workers:.0f} | | | | | |', flush=True)


if __name__ == '__main__':
  app.run(main)
