"""Resumable FedAvg with a tff_quant aggregator: checkpoints, metrics, accounting.

Shared by experiments/fl_emnist.py, the notebooks and the demo. A run lives in
`run_dir`: config.json (the hyper-parameters; a restart with different ones is an
error, never a silent mix), checkpoints/ (tff.program.FileProgramStateManager,
one per round), metrics.csv (tff.program.CSVFileReleaseManager keyed by round, so
a resumed run ends with every round exactly once) and summary.json at the end.
"""

import asyncio
import collections
import collections.abc
import dataclasses
import math
import os
import time
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import accounting, aggregators, models, results_io, round_loop, runtime
from tff_quant.aggregators import quantization_factory

MECHANISMS = ('rqm', 'pbm', 'bq', 'qmgeo', 'quantized_gaussian', 'none')


@dataclasses.dataclass
class TrainingConfig:
  """Hyper-parameters of one federated run (defaults: the RQM paper's EMNIST setup)."""
  mechanism: str = 'rqm'
  clip_norm: float = 0.03
  num_levels: int = 16
  rqm_delta_ratio: float = 1.0
  rqm_q: float = 0.42
  pbm_theta: float = 0.25
  bq_s: int = 3
  bq_m: int = 8
  qmgeo_p: float = 0.5
  qmgeo_full_support: bool = True
  qg_noise_multiplier: float = 1.0
  rotate: bool = False
  rounds: int = 2000
  clients_per_round: int = 40
  total_clients: int = 3400
  client_lr: float = 0.01
  server_lr: float = 1.0
  batch_size: int = 32
  local_epochs: int = 1
  model: str = 'emnist_cnn'
  seed: int = 0
  noise_seed: Optional[int] = None   # None: client-side unpredictable noise
  delta: Optional[float] = None      # None: 1 / total_clients
  eval_every: int = 10

  def validate(self):
    """Raises ValueError naming the parameter and its allowed range."""
    def positive(name, integer=False):
      v = getattr(self, name)
      ok = (isinstance(v, int) and not isinstance(v, bool)) if integer else \
          isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
      if not ok or v <= 0:
        kind = 'an integer >= 1' if integer else 'a finite number > 0'
        raise ValueError(f'`{name}` must be {kind}, got {v!r}.')
    if self.mechanism not in MECHANISMS:
      raise ValueError(f'Unknown mechanism {self.mechanism!r}; choose one of '
                       f'{MECHANISMS}.')
    if self.model not in models.MODELS:
      raise ValueError(f'Unknown model {self.model!r}; choose one of {models.MODELS}.')
    for name in ('clip_norm', 'client_lr', 'server_lr'):
      positive(name)
    for name in ('rounds', 'clients_per_round', 'total_clients', 'batch_size',
                 'local_epochs', 'eval_every'):
      positive(name, integer=True)
    if self.clients_per_round > self.total_clients:
      raise ValueError(f'`clients_per_round` ({self.clients_per_round}) must be <= '
                       f'`total_clients` ({self.total_clients}).')
    if self.delta is not None and not 0 < self.delta < 1:
      raise ValueError(f'`delta` must be in (0, 1), got {self.delta!r}.')

  @property
  def target_delta(self) -> float:
    return self.delta if self.delta is not None else 1.0 / self.total_clients


def build_aggregator(config: TrainingConfig):
  """The model aggregator for `config` (a clipped plain mean for 'none')."""
  kw = dict(rotate=config.rotate, seed=config.noise_seed)
  c, m = config.clip_norm, config.num_levels
  if config.mechanism == 'none':
    return aggregators.clipped_mean_factory(c)
  if config.mechanism == 'rqm':
    return aggregators.rqm_factory(c, m, config.rqm_q, config.rqm_delta_ratio, **kw)
  if config.mechanism == 'pbm':
    return aggregators.pbm_factory(c, m, config.pbm_theta, **kw)
  if config.mechanism == 'bq':
    return aggregators.bq_factory(c, config.bq_s, config.bq_m, **kw)
  if config.mechanism == 'qmgeo':
    return aggregators.qmgeo_factory(c, m, config.qmgeo_p,
                                     config.qmgeo_full_support, **kw)
  return aggregators.quantized_gaussian_factory(c, m, config.qg_noise_multiplier,
                                                **kw)


def _padded_dim(dims, rotate: bool) -> int:
  """Coordinates the mechanism sees (Hadamard pads each tensor to a power of 2)."""
  if not rotate:
    return int(sum(dims))
  return int(sum(1 << max(0, (d - 1).bit_length()) for d in dims))


def mechanism_and_dim(config: TrainingConfig, keras_model):
  """(mechanism, d) the aggregator will use on this model; (None, d) for 'none'."""
  dims = [w.shape.num_elements() for w in keras_model.trainable_weights]
  dim = _padded_dim(dims, config.rotate)
  factory = build_aggregator(config)
  if config.mechanism == 'none':
    return None, dim
  inner = factory._inner_agg_factory if config.rotate else factory  # pylint: disable=protected-access
  return inner.mechanism_for_dimension(dim), dim


CorruptCheckpointError = round_loop.CorruptCheckpointError


def prepare_run_dir(run_dir: str, config: TrainingConfig, fresh: bool):
  """Creates run_dir or checks that an existing run used the same config."""
  round_loop.prepare_run_dir(run_dir, dataclasses.asdict(config), fresh)


def _next_round(process, state, datasets, remote, rnd):
  """process.next, naming the dead worker when a remote one stops answering."""
  try:
    out = process.next(state, datasets)
  except Exception as e:  # pylint: disable=broad-except
    dead = remote.unreachable() if remote is not None else []
    if not dead:
      raise
    raise runtime.WorkerUnavailableError(
        f'TFF worker(s) {", ".join(dead)} stopped answering during round {rnd} '
        f'({type(e).__name__}). Nothing after round {rnd - 1} was kept: start the '
        'workers again (any addresses) and rerun the same command to resume.') from e
  if isinstance(out, collections.abc.Mapping):  # the mergeable context returns dicts
    return out['state'], out['metrics']
  return out.state, out.metrics


def run(config: TrainingConfig, data, run_dir: str, fresh: bool = False,
        log: Callable[[str], None] = print, max_test_examples: Optional[int] = None,
        workers: Optional[Sequence[str]] = None) -> Dict[str, object]:
  """Trains (or resumes) and returns the summary dict (also in summary.json).

  `workers`: None (one machine, TFF's local C++ test context) or 'host:port'
  addresses of running TFF worker services that share each round's clients
  (runtime.RemoteWorkers). Not part of the run's config: a run may resume on
  other workers.
  """
  config.validate()
  if config.total_clients > len(data.train.client_ids):
    raise ValueError(f'`total_clients` ({config.total_clients}) exceeds the '
                     f'{len(data.train.client_ids)} clients of {data.name}.')
  keras_model = models.get(config.model, data.input_shape, data.num_classes)
  mech, dim = mechanism_and_dim(config, keras_model)
  delta = config.target_delta
  acct = coord_acct = None
  if mech is not None:
    acct = accounting.RoundAccountant(mech, config.clients_per_round,
                                      config.total_clients, delta, dim)
    if not acct.gives_privacy:
      raise ValueError(f'{mech} gives no privacy: its per-round Rényi divergence is '
                       'infinite at every order (ε = inf). Change its parameters.')
    coord_acct = accounting.RoundAccountant(mech, config.clients_per_round,
                                            config.total_clients, delta, 1)
  remote = runtime.parse_workers(workers) if workers else None
  prepare_run_dir(run_dir, config, fresh)
  if remote:
    remote = runtime.use_remote_workers(remote)
    log(f'Running on {len(remote.addresses)} TFF workers: {", ".join(remote.addresses)}')
  else:
    runtime.use_secure_sum_simulation()

  element_spec = data.train.element_type_structure
  input_spec = (tf.TensorSpec([None] + list(element_spec['x'].shape), tf.float32),
                tf.TensorSpec([None], tf.int32))

  def model_fn():
    return tff.learning.models.from_keras_model(
        models.get(config.model, data.input_shape, data.num_classes),
        input_spec=input_spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  process = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(config.client_lr),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(config.server_lr),
      model_aggregator=build_aggregator(config))

  ckpt_root = os.path.join(run_dir, 'checkpoints')
  manager = tff.program.FileProgramStateManager(ckpt_root, keep_total=3)
  metrics_csv = tff.program.CSVFileReleaseManager(
      os.path.join(run_dir, 'metrics.csv'), key_fieldname='round')
  state, start = round_loop.load_checkpoint(manager, process.initialize(), ckpt_root)
  if state is None:
    state = process.initialize()
  else:
    log(f'Resuming {run_dir} from round {start} (checkpoint program_state_{start}).')

  population = data.train.client_ids[:config.total_clients]
  eval_model = models.get(config.model, data.input_shape, data.num_classes)
  eval_model.compile(
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
  test_x, test_y = data.test_x, data.test_y
  if max_test_examples:
    test_x, test_y = test_x[:max_test_examples], test_y[:max_test_examples]

  def evaluate(st):
    weights = process.get_model_weights(st)
    if isinstance(weights, collections.abc.Mapping):  # mergeable context
      weights = tff.learning.models.ModelWeights(**weights)
    weights.assign_weights_to(eval_model)
    loss, acc = eval_model.evaluate(test_x, test_y, batch_size=1000, verbose=0)
    return float(loss), float(acc)

  def client_dataset(cid):
    return (data.train.create_tf_dataset_for_client(cid)
            .repeat(config.local_epochs).batch(config.batch_size)
            .map(lambda e: (e['x'], e['y'])))

  log(f'Data: {data.description}')
  log(f'Model: {config.model} ({dim} coordinates sent per client); '
      f'aggregator: {config.mechanism}' + (f' = {mech}' if mech else ''))
  times = []
  row = {}
  for rnd in range(start + 1, config.rounds + 1):
    t0 = time.time()
    rng = np.random.default_rng([config.seed, rnd])
    chosen = rng.choice(len(population), config.clients_per_round, replace=False)
    state, metrics = _next_round(
        process, state, [client_dataset(population[i]) for i in chosen], remote, rnd)
    train = metrics['client_work']['train']
    quant = quantization_factory.find_measurements(metrics['aggregator'])
    row = collections.OrderedDict(
        round=rnd, train_loss=float(train['loss']),
        train_accuracy=float(train['sparse_categorical_accuracy']),
        test_loss=math.nan, test_accuracy=math.nan)
    if rnd % config.eval_every == 0 or rnd == config.rounds:
      row['test_loss'], row['test_accuracy'] = evaluate(state)
    if quant is not None:
      row['bits_per_client'] = int(quant['bits_per_client'])
      row['bits_per_coordinate'] = int(quant['bits_per_coordinate'])
      row['secure_sum_bits'] = int(quant['secure_sum_bits'])
      row['clipped_fraction'] = float(quant['clipped_fraction'])
      row['nonfinite_count'] = int(quant['nonfinite_count'])
      row['epsilon'], _ = acct.epsilon_rdp(rnd)
      row['epsilon_per_coordinate'], _ = coord_acct.epsilon_rdp(rnd)
    else:
      row['bits_per_client'] = 32 * dim
      row['epsilon'] = row['epsilon_per_coordinate'] = math.inf
    row['delta'] = delta
    row['seconds'] = time.time() - t0
    asyncio.run(metrics_csv.release(row, key=rnd))
    asyncio.run(manager.save(state, rnd))
    times.append(row['seconds'])
    eta = np.mean(times[-10:]) * (config.rounds - rnd)
    test = (f' test_acc={row["test_accuracy"]:.4f}'
            if not math.isnan(row['test_accuracy']) else '')
    log(f'round {rnd}/{config.rounds} loss={row["train_loss"]:.4f} '
        f'train_acc={row["train_accuracy"]:.4f}{test} eps={row["epsilon"]:.4g} '
        f'bits/client={row["bits_per_client"]} clipped={row.get("clipped_fraction", 0):.3f} '
        f'({row["seconds"]:.1f}s, ETA {eta:.0f}s)')
  if start >= config.rounds:
    log(f'{run_dir} already finished {start} rounds.')
  test_loss, test_acc = evaluate(state)
  summary = collections.OrderedDict(
      data=data.description, config=dataclasses.asdict(config), dim=dim,
      rounds_completed=max(start, config.rounds), test_loss=test_loss,
      test_accuracy=test_acc, delta=delta,
      bits_per_client_per_round=(int(row['bits_per_client']) if row else None))
  if mech is not None:
    g = acct.guarantee(max(start, config.rounds), use_pld=dim <= 20000)
    summary.update(mechanism=repr(mech), epsilon=g.epsilon, epsilon_route=g.route,
                   epsilon_rdp=g.epsilon_rdp, epsilon_pld=g.epsilon_pld,
                   epsilon_per_coordinate=coord_acct.epsilon_rdp(
                       max(start, config.rounds))[0],
                   privacy_assumptions=g.assumptions,
                   bits_per_coordinate=mech.bits_per_coordinate)
    summary['bits_per_client_per_round'] = mech.bits_per_coordinate * dim
  else:
    summary.update(mechanism='none (clipped mean, no privacy)', epsilon=math.inf,
                   bits_per_client_per_round=32 * dim)
  results_io.write_json(os.path.join(run_dir, 'summary.json'), summary)
  return summary
