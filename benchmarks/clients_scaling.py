"""Seconds and peak memory per FedAvg round vs clients per round (RQM factory).

Each setting runs in a fresh subprocess (so peak RSS is per setting) on real
Fashion-MNIST clients (simulated split of 3,400 clients), small CNN; clients'
data are packed per round. Rounds run as federated_training runs them by
default: K clients per TFF client slot, trained vectorized, K chosen by
`packed_clients.auto_clients_per_slot` (--clients_per_slot=1: one TFF client
per client, per-client tf.data pipelines). Peak memory of the Python process
(ru_maxrss) and of TFF's worker_binary (VmHWM), where the C++ execution
happens, are both reported.
  python -m benchmarks.clients_scaling [--clients=10,40,100,400,1000] [--rounds=2]
      [--clients_per_slot=0]
"""

import json
import resource
import subprocess
import sys
import time

from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_list('clients', ['10', '40', '100', '400', '1000'], 'Clients per round.')
flags.DEFINE_integer('rounds', 2, 'Timed rounds per setting (after one warm-up).')
flags.DEFINE_integer('population', 3400, 'Clients in the population.')
flags.DEFINE_integer('clients_per_slot', 0, 'K clients per TFF client slot; 0: '
                     'automatic (as federated_training), 1: unpacked.')
flags.DEFINE_integer('worker_n', 0, 'Internal: run one setting with this many clients.')


def _worker_hwm_kb():
  from tff_quant.program import runtime  # pylint: disable=g-import-not-at-top
  peak = 0
  for pid in runtime.worker_pids():
    with open(f'/proc/{pid}/status') as f:
      for line in f:
        if line.startswith('VmHWM:'):
          peak = max(peak, int(line.split()[1]))
  return peak


def one_setting(n):
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_quant import aggregators, data, models  # pylint: disable=g-import-not-at-top
  from tff_quant.program import runtime  # pylint: disable=g-import-not-at-top
  from tff_quant.training import packed_clients  # pylint: disable=g-import-not-at-top
  runtime.use_secure_sum_simulation()
  fed = data.load('fashion_mnist', num_clients=FLAGS.population, seed=0)
  spec = (tf.TensorSpec([None, 28, 28, 1], tf.float32), tf.TensorSpec([None], tf.int32))
  keras_fn = lambda: models.get('small_cnn', (28, 28, 1), 10)
  model_fn = models.tff_model_fn(keras_fn, spec, accuracy=False)
  with tf.Graph().as_default():   # TF here is imported after absl: no eager Keras
    dim = models.num_params(keras_fn())
  k = FLAGS.clients_per_slot or packed_clients.auto_clients_per_slot(
      n, dim, packed_clients.parallel_units())
  sgd = tff.learning.optimizers.build_sgdm
  if k == 1:
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, client_optimizer_fn=sgd(0.05),
        model_aggregator=aggregators.rqm_factory(1.0))
  else:
    process = packed_clients.build_packed_fed_avg(
        model_fn, k, sgd(0.05), sgd(1.0),
        aggregators.rqm_factory(1.0, clients_per_value=k))
  state = process.initialize()
  rng = np.random.default_rng(0)
  times = []
  for r in range(FLAGS.rounds + 1):
    ids = rng.choice(fed.train.client_ids, n, replace=False)
    t0 = time.perf_counter()
    if k == 1:
      batches = [fed.train.create_tf_dataset_for_client(c).batch(32)
                 .map(lambda e: (e['x'], e['y'])) for c in ids]
    else:
      batches = packed_clients.pack_datasets(fed.client_examples, list(ids), k, 32)
    state = process.next(state, batches).state
    if r:
      times.append(time.perf_counter() - t0)
  out = dict(clients=n, k=k, seconds=float(np.median(times)),
             python_peak_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
             worker_peak_mb=_worker_hwm_kb() / 1024)
  runtime.stop_workers()
  print('RESULT ' + json.dumps(out), flush=True)


def main(argv):
  del argv
  if FLAGS.worker_n:
    one_setting(FLAGS.worker_n)
    return
  print(f'RQM factory, small CNN, {FLAGS.rounds} timed rounds after 1 warm-up, '
        f'population {FLAGS.population} (Fashion-MNIST, simulated split); '
        'K: clients per TFF client slot')
  print('| clients/round | K | s/round | s/round per client | Python peak MB | '
        'worker peak MB |')
  print('|---|---|---|---|---|---|')
  for n in [int(c) for c in FLAGS.clients]:
    res = subprocess.run([sys.executable, '-m', 'benchmarks.clients_scaling',
                          f'--worker_n={n}', f'--rounds={FLAGS.rounds}',
                          f'--population={FLAGS.population}',
                          f'--clients_per_slot={FLAGS.clients_per_slot}'],
                         capture_output=True, text=True)
    line = [l for l in res.stdout.splitlines() if l.startswith('RESULT ')]
    if res.returncode or not line:
      print(f'| {n} | | failed: {res.stderr.strip().splitlines()[-1:]} | | | |')
      continue
    r = json.loads(line[0][7:])
    print(f'| {n} | {r["k"]} | {r["seconds"]:.2f} | {r["seconds"] / n:.4f} | '
          f'{r["python_peak_mb"]:.0f} | {r["worker_peak_mb"]:.0f} |', flush=True)


if __name__ == '__main__':
  app.run(main)
