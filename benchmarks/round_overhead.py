"""Seconds per FedAvg round with each factory vs tff.aggregators.UnweightedMeanFactory.

Same model (the ~1.2M-parameter EMNIST CNN, 62 outputs), same 40 clients (real
Fashion-MNIST clients, simulated split), same process, one run. Target: <= 1.15x.
  python -m benchmarks.round_overhead [--rounds=3] [--clients=40]
"""

import statistics
import time

from absl import app
from absl import flags
import tensorflow_federated as tff

from tff_quant import aggregators, data, mechanisms, models
from tff_quant.program import runtime

FLAGS = flags.FLAGS
flags.DEFINE_integer('rounds', 3, 'Timed rounds per factory (after one warm-up).')
flags.DEFINE_integer('clients', 40, 'Clients per round.')
flags.DEFINE_string('model', 'emnist_cnn', 'Model.')
flags.DEFINE_list('only', None, 'Names of the factories to time after the '
                  'no-privacy baseline (default: all).')


def main(argv):
  del argv
  runtime.use_secure_sum_simulation()
  fed = data.load('fashion_mnist', num_clients=max(200, FLAGS.clients), seed=0)
  ids = fed.train.client_ids[:FLAGS.clients]
  datasets = [fed.train.create_tf_dataset_for_client(c).batch(32)
              .map(lambda e: (e['x'], e['y'])) for c in ids]
  spec = datasets[0].element_spec

  model_fn = models.tff_model_fn(
      lambda: models.get(FLAGS.model, (28, 28, 1), 62), spec, accuracy=False)
  # Every registered mechanism (16 levels where it has levels) and its variants.
  factories = [('UnweightedMeanFactory (no privacy)',
                tff.aggregators.UnweightedMeanFactory())]
  for name, params in mechanisms.variants(num_levels=16):
    label = name + ''.join(f' {k}={v}' for k, v in params.items() if k != 'num_levels')
    factories.append((label, aggregators.mechanism_factory(name, 0.03, params)))
  factories.append(('clipped mean (noise-free)', aggregators.clipped_mean_factory(0.03)))
  if FLAGS.only:
    unknown = set(FLAGS.only) - {n for n, _ in factories}
    if unknown:
      raise app.UsageError(f'--only: unknown factories {sorted(unknown)}')
    factories = factories[:1] + [f for f in factories[1:] if f[0] in FLAGS.only]
  d = models.num_params(models.get(FLAGS.model, (28, 28, 1), 62))
  print(f'{FLAGS.model} (d={d}), {FLAGS.clients} clients/round, median of '
        f'{FLAGS.rounds} rounds after 1 warm-up, factories interleaved round by '
        f'round; data: {fed.description}', flush=True)
  processes, states = [], []
  for _, factory in factories:
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.01),
        model_aggregator=factory)
    state = process.initialize()
    states.append(process.next(state, datasets).state)  # warm-up (traces, compiles)
    processes.append(process)
  # Interleaving exposes every factory to the same machine conditions: the
  # ratios below compare rounds run minutes apart at most.
  times = [[] for _ in factories]
  for _ in range(FLAGS.rounds):
    for i, process in enumerate(processes):
      t0 = time.perf_counter()
      states[i] = process.next(states[i], datasets).state
      times[i].append(time.perf_counter() - t0)
  print('| aggregator | s/round | vs no privacy |\n|---|---|---|', flush=True)
  base = statistics.median(times[0])
  for (name, _), ts in zip(factories, times):
    sec = statistics.median(ts)
    print(f'| {name} | {sec:.2f} | {sec / base:.2f}x |', flush=True)


if __name__ == '__main__':
  app.run(main)
