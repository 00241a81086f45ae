"""Seconds per FedAvg round of a TFF peer, packed vs one client per TFF slot.

TFF's tff_dgauss (or tff_skellam) peer at the FL table's setting (small_cnn on
federated Fashion-MNIST, 100 clients a round, 16 bits): `unpacked` is TFF's
DistributedDpSumFactory with one TFF client per client (K = 1), `packed` is
`Peer.factory(clients_per_value=K)` (`aggregators.packed_peers`) with K
clients per slot trained vectorized, K as federated_training chooses it. Both
are built by `federated_training.build_process` and run on the same clients,
interleaved round by round; one warm-up round each, then --repeats timed
rounds: min / median / max seconds.
  python -m benchmarks.packed_peer_round [--peer=tff_dgauss] [--repeats=3]
"""

import os

# TFF's DistributedDpSumFactory inside FedAvg nests deeper than the upb
# protobuf parser accepts (as experiments/fl_emnist.py says).
os.environ.setdefault('PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION', 'python')

# pylint: disable=g-bad-import-order,g-import-not-at-top,wrong-import-position
from tff_quant.program import quiet
quiet.import_tensorflow()

import statistics
import time

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from tff_quant import data, models
from tff_quant.program import runtime
from tff_quant.training import federated_training as ft
from tff_quant.training import packed_clients
from tff_quant.training import privacy_plan

FLAGS = flags.FLAGS
flags.DEFINE_enum('peer', 'tff_dgauss', ('tff_dgauss', 'tff_skellam'), 'TFF peer.')
flags.DEFINE_integer('repeats', 3, 'Timed rounds per path (after one warm-up).')
flags.DEFINE_integer('clients', 100, 'Clients per round.')
flags.DEFINE_integer('total_clients', 3400, 'Population the clients are drawn from.')


def main(argv):
  del argv
  runtime.use_secure_sum_simulation()
  fed = data.load('fashion_mnist', num_clients=FLAGS.total_clients, seed=0)
  config = ft.TrainingConfig(
      mechanism=FLAGS.peer, model='small_cnn', clients_per_round=FLAGS.clients,
      total_clients=FLAGS.total_clients, rounds=300,
      mechanism_params=dict(noise_multiplier=1.0, bits=16))
  config = config.validate()
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32),
          tf.TensorSpec([None], tf.int32))
  keras_fn = lambda: models.get('small_cnn', (28, 28, 1), 10)
  dim = models.num_params(keras_fn())
  plan = privacy_plan.make(config, dim)
  k = packed_clients.auto_clients_per_slot(FLAGS.clients, dim,
                                           packed_clients.parallel_units())
  processes = {'unpacked': ft.build_process(plan, keras_fn, spec),
               'packed': ft.build_process(plan, keras_fn, spec, k,
                                          vectorized=True)}
  states = {p: proc.initialize() for p, proc in processes.items()}

  def datasets(path, ids):
    if path == 'unpacked':
      return [fed.train.create_tf_dataset_for_client(c).batch(config.batch_size)
              .map(lambda e: (e['x'], e['y'])) for c in ids]
    return packed_clients.pack_datasets(fed.client_examples, ids, k,
                                        config.batch_size)

  times = {p: [] for p in processes}
  population = fed.train.client_ids
  for rnd in range(FLAGS.repeats + 1):   # round 0 warms up
    rng = np.random.default_rng([0, rnd])
    ids = [population[i] for i in rng.choice(len(population), FLAGS.clients,
                                             replace=False)]
    for path, process in processes.items():
      t0 = time.perf_counter()
      out = process.next(states[path], datasets(path, ids))
      states[path] = out.state
      ft.check_peer_measurements(plan.peer, out.metrics)
      if rnd:
        times[path].append(time.perf_counter() - t0)
  print(f'{FLAGS.peer}, small_cnn (d={dim}), {FLAGS.clients} clients a round, '
        f'packed K={k}; seconds per round (min / median / max of '
        f'{FLAGS.repeats}, interleaved):')
  for path, ts in times.items():
    print(f'  {path:9s} {min(ts):7.2f} {statistics.median(ts):7.2f} '
          f'{max(ts):7.2f}')
  runtime.stop_workers()


if __name__ == '__main__':
  app.run(main)
