"""Seconds per FedAvg round: the project's loop vs plain TensorFlow doing the same work.

For each model and clients-per-round n, every round draws n clients of the
population (federated Fashion-MNIST: real images, simulated split) and times,
on the same clients, interleaved round by round:
  plain RQM    TFF's FedAvg with the RQM secure-sum factory, one TFF client
               per client, tf.data pipelines built for the round (as
               federated_training does); `of which pipelines` is that build;
  noise-free   the same with the clipped plain mean (no secure sum);
  packed RQM   `training.packed_clients`: K = n / --slots clients per TFF
               client slot, clipped and encoded per client before the
               secure sum (the same server view), packing included;
  floor        the same clients' local training in one process, no TFF:
               one tf.function per client over its batches, sequential.
Peak RSS is the Python process's and its TFF workers' high-water marks.
  python -m benchmarks.round_vs_floor [--models=small_cnn,lenet5]
      [--clients=40,100,400,1000] [--rounds=2] [--slots=2]
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
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import aggregators, data, models
from tff_quant.program import cli, runtime
from tff_quant.training import packed_clients

FLAGS = flags.FLAGS
flags.DEFINE_list('models', ['small_cnn', 'lenet5'], 'Models to time.')
flags.DEFINE_list('clients', ['40', '100', '400', '1000'], 'Clients per round.')
flags.DEFINE_integer('rounds', 2, 'Timed rounds per setting (after one warm-up).')
flags.DEFINE_integer('slots', 2, 'TFF client slots of the packed path (K = n / slots).')
flags.DEFINE_integer('total_clients', 3400, 'Population the clients are drawn from.')
flags.DEFINE_integer('batch_size', 32, 'Local batch size.')
flags.DEFINE_float('client_lr', 0.05, 'Local SGD learning rate.')
flags.DEFINE_float('clip_norm', 1.0, 'ℓ2 clip of each client update.')
PATHS = ('plain RQM', 'noise-free', 'packed RQM', 'floor')


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


def time_setting(fed, model_name, n, rounds, slots):
  """{path: [seconds per round]} and the pipeline-build seconds of plain RQM."""
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  keras_fn = lambda: models.get(model_name, (28, 28, 1), 10)
  model_fn = models.tff_model_fn(keras_fn, spec)
  sgd = tff.learning.optimizers.build_sgdm
  rqm = lambda k: aggregators.mechanism_factory(
      'rqm', FLAGS.clip_norm, dict(num_levels=16), clients_per_value=k)
  plain = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, sgd(FLAGS.client_lr), sgd(1.0), model_aggregator=rqm(1),
      metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize)
  free = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, sgd(FLAGS.client_lr), sgd(1.0),
      model_aggregator=aggregators.clipped_mean_factory(FLAGS.clip_norm))
  per_slot = n // slots
  packed = packed_clients.build_packed_fed_avg(
      model_fn, per_slot, sgd(FLAGS.client_lr), sgd(1.0), rqm(per_slot))
  floor = floor_trainer(keras_fn, (28, 28, 1), FLAGS.batch_size, FLAGS.client_lr)
  states = {'plain RQM': plain.initialize(), 'noise-free': free.initialize(),
            'packed RQM': packed.initialize()}
  population = fed.train.client_ids[:FLAGS.total_clients]
  batch = FLAGS.batch_size

  def pipelines(ids):
    return [fed.train.create_tf_dataset_for_client(c).batch(batch)
            .map(lambda e: (e['x'], e['y'])) for c in ids]

  times = {p: [] for p in PATHS}
  build = []
  for rnd in range(rounds + 1):   # round 0 warms up (traces, compiles)
    rng = np.random.default_rng([0, rnd])
    ids = [population[i] for i in rng.choice(len(population), n, replace=False)]
    t0 = time.perf_counter()
    ds = pipelines(ids)
    t1 = time.perf_counter()
    states['plain RQM'] = plain.next(states['plain RQM'], ds).state
    t2 = time.perf_counter()
    states['noise-free'] = free.next(states['noise-free'], pipelines(ids)).state
    t3 = time.perf_counter()
    states['packed RQM'] = packed.next(states['packed RQM'], packed_clients.pack_datasets(
        fed.client_examples, ids, per_slot, batch)).state
    t4 = time.perf_counter()
    weights = [np.asarray(w) for w in plain.get_model_weights(states['plain RQM']).trainable]
    floor(weights, [fed.client_examples(c) for c in ids])
    t5 = time.perf_counter()
    if rnd:
      build.append(t1 - t0)
      for path, sec in zip(PATHS, (t2 - t0, t3 - t2, t4 - t3, t5 - t4)):
        times[path].append(sec)
  return times, statistics.median(build)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    clients = cli.numbers('clients', FLAGS.clients, 1, integer=True)
    for name in FLAGS.models:
      if name not in models.MODELS:
        raise ValueError(f'--models: unknown {name!r}; choose from {models.MODELS}.')
    cli.check_flags(FLAGS, at_least_one=('rounds', 'slots', 'total_clients',
                                         'batch_size'))
    for n in clients:
      if n % FLAGS.slots:
        raise ValueError(f'--clients: {n} is not a multiple of --slots={FLAGS.slots}.')
      if n > FLAGS.total_clients:
        raise ValueError(f'--clients: {n} exceeds --total_clients={FLAGS.total_clients}.')
  with cli.secure_sum_simulation():
    fed = data.load('fashion_mnist', num_clients=FLAGS.total_clients, seed=0)
    print(f'Data: {fed.description}. Median of {FLAGS.rounds} rounds after one '
          f'warm-up; paths interleaved round by round; {os.cpu_count()} CPU cores; '
          f'packed: {FLAGS.slots} TFF client slots.', flush=True)
    print('| model | clients/round | plain RQM (s) | of which pipelines (s) | '
          'noise-free (s) | packed RQM (s) | floor (s) | plain / floor | '
          'packed / floor | peak RSS: Python, workers (MiB) |\n'
          '|---|---|---|---|---|---|---|---|---|---|', flush=True)
    for name in FLAGS.models:
      for n in clients:
        times, build = time_setting(fed, name, n, FLAGS.rounds, FLAGS.slots)
        med = {p: statistics.median(t) for p, t in times.items()}
        own, workers = peak_rss_mib()
        print(f'| {name} | {n} | {med["plain RQM"]:.2f} | {build:.2f} | '
              f'{med["noise-free"]:.2f} | {med["packed RQM"]:.2f} | '
              f'{med["floor"]:.2f} | {med["plain RQM"] / med["floor"]:.2f}x | '
              f'{med["packed RQM"] / med["floor"]:.2f}x | {own:.0f}, {workers:.0f} |',
              flush=True)


if __name__ == '__main__':
  app.run(main)
