"""Resumable FedAvg with a tff_quant aggregator: checkpoints, metrics, accounting.

Shared by experiments/fl_emnist.py, the notebooks and the demo. A run lives in
`run_dir`: config.json (the hyper-parameters; a restart with different ones is an
error, never a silent mix), checkpoints/ (tff.program.FileProgramStateManager,
one per round), metrics.csv (tff.program.CSVFileReleaseManager keyed by round, so
a resumed run ends with every round exactly once), tensorboard/ (the same
per-round numbers through tff.program.TensorBoardReleaseManager: loss, accuracy,
ε, bits, clipped fractions) and summary.json at the end;
the rounds themselves run in `round_loop.run_rounds`, the one checkpointed loop.

One direction: the run validates its config (`training.config`), takes d
from the model, makes its privacy plan once (`privacy_plan.make`: calibrate,
or take the parameters given), builds the FedAvg process once from the plan
(`build_process`), and the rounds and the summary read the same plan. The
config passed in is never changed (a `TrainingConfig` is frozen).
"""

import asyncio
import collections
import collections.abc
import dataclasses
import math
import os
import random
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import aggregators, models
from tff_quant.aggregators import peers
from tff_quant.common import validation
from tff_quant.program import network, results_io, runtime
from tff_quant.program import round_loop
from tff_quant.training import packed_clients
from tff_quant.training import privacy_plan
# The run's config and its privacy plan live in their own modules; their
# names stay importable from here for the callers of this module.
from tff_quant.training.config import (DEFAULT_TARGET_EPSILON, NO_PRIVACY,  # pylint: disable=unused-import
                                       PEER_PARAMS, SERVER_LR_SCHEDULES,
                                       TrainingConfig, check_packing,
                                       config_record, peer_params,
                                       with_default_target)
from tff_quant.training.privacy_plan import CALIBRATION_FILE  # pylint: disable=unused-import


def build_process(plan: privacy_plan.PrivacyPlan, keras_fn, input_spec,
                  clients_per_slot: int = 1, vectorized: bool = False):
  """The FedAvg process of a run, its aggregator built from `plan`.

  With a registry mechanism or a TFF distributed-DP peer (tff_skellam,
  tff_dgauss) the whole `next` is secure-only, and checked to be
  (`aggregators.check_secure_only`): the model update goes through the secure
  sum and the training metrics through
  `tff.learning.metrics.secure_sum_then_finalize` (TFF's default metrics
  aggregator would add a plain federated_sum). The central Gaussian peer,
  whose server sees every update anyway, keeps TFF's default metrics.
  `clients_per_slot` K > 1: the packed path (`packed_clients`; its `next`
  takes one packed dataset per K clients), its K clients trained as one
  batched computation when `vectorized`.

  Args:
    plan: the run's `privacy_plan.PrivacyPlan` (`build_aggregator` reads it).
    keras_fn: no-arg callable -> a fresh Keras model.
    input_spec: the model's input spec (`models.tff_model_fn`).
    clients_per_slot: K >= 1.
    vectorized: train a slot's K clients as one computation.

  Returns:
    The `tff.learning.templates.LearningProcess`.

  Raises:
    aggregators.UnsecuredReleaseError: something leaves the clients outside
      the secure sum.
    RuntimeError: the factory built another mechanism or d than the plan
      accounts (the model's update is not what the plan was told).
  """
  config = plan.config
  secure = plan.private and (plan.peer is None or plan.peer.name != 'gaussian')
  model_fn = models.tff_model_fn(keras_fn, input_spec)
  client_opt = tff.learning.optimizers.build_sgdm(config.client_lr)
  server_opt = server_optimizer(config)
  aggregator = build_aggregator(plan, clients_per_slot)
  if clients_per_slot > 1:
    process = packed_clients.build_packed_fed_avg(
        model_fn, clients_per_slot, client_opt, server_opt,
        aggregator, vectorized=vectorized,
        metrics_aggregator=(tff.learning.metrics.secure_sum_then_finalize
                            if secure else
                            tff.learning.metrics.sum_then_finalize))
  else:
    process = tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, client_optimizer_fn=client_opt, server_optimizer_fn=server_opt,
        model_aggregator=aggregator,
        metrics_aggregator=(tff.learning.metrics.secure_sum_then_finalize
                            if secure else None))
  if secure:   # the mechanism's ε covers the secure sum and nothing else
    aggregators.check_secure_only(
        process, what=f'the FedAvg process of {config.mechanism}')
  if plan.mechanism is not None:   # what runs is what the plan accounts
    created = aggregator.created
    if (created is None or created.dim != plan.dim or
        repr(created.mechanism) != repr(plan.mechanism)):
      raise RuntimeError(
          f'The factory built {created and created.mechanism} on d = '
          f'{created and created.dim} coordinates, but the privacy plan '
          f'accounts {plan.mechanism} on d = {plan.dim}.')
  return process


def server_lr_at(config: TrainingConfig, round_index):
  """The server learning rate of round `round_index` (0 for the first).

  Args:
    config: the run's TrainingConfig (server_lr, server_lr_schedule, rounds).
    round_index: the round, counted from 0; an int or an integer tf.Tensor
      (TFF's `schedule_learning_rate` calls it inside a computation).

  Returns:
    config.server_lr for 'constant'; for 'cosine' the cosine decay
    server_lr·(1 + cos(π·t/R))/2 at t = round_index, R = config.rounds
    (LH17 Eq. 5 with η_min = 0, one period, no restart;
    docs/references.md): server_lr at the
    first round, server_lr·(1 + cos(π(R−1)/R))/2 ≈ 0 at the last.
  """
  if config.server_lr_schedule == 'constant':
    return config.server_lr
  t = tf.cast(round_index, tf.float32)
  return config.server_lr * 0.5 * (1.0 + tf.cos(math.pi * t / config.rounds))


def server_optimizer(config: TrainingConfig):
  """The server's optimizer: SGD at config.server_lr, with heavy-ball
  momentum config.server_momentum when > 0 (`build_sgdm(lr, momentum)`);
  at 0 exactly the plain SGD of earlier runs. A 'cosine'
  config.server_lr_schedule wraps it in TFF's `schedule_learning_rate`
  (`server_lr_at`); its round counter is part of the optimizer's state, so
  a resumed run continues the schedule."""
  if config.server_momentum:
    opt = tff.learning.optimizers.build_sgdm(config.server_lr,
                                             momentum=config.server_momentum)
  else:
    opt = tff.learning.optimizers.build_sgdm(config.server_lr)
  if config.server_lr_schedule == 'constant':
    return opt
  return tff.learning.optimizers.schedule_learning_rate(
      opt, lambda t: server_lr_at(config, t))


def sampled_clients(config: TrainingConfig, population: Sequence[str],
                    rnd: int) -> list:
  """The ids of round `rnd`'s clients: config.clients_per_round of
  `population` without replacement, drawn from (config.seed, rnd)."""
  rng = np.random.default_rng([config.seed, rnd])
  chosen = rng.choice(len(population), config.clients_per_round,
                      replace=False)
  return [population[i] for i in chosen]


def build_aggregator(plan: privacy_plan.PrivacyPlan,
                     clients_per_value: int = 1):
  """The model aggregator of a run, read from its privacy plan.

  A registry mechanism: `aggregators.mechanism_factory` at the plan's c∞
  and parameters, with its `CalibratedSetting` where calibrated (the factory
  then enforces it); a TFF peer: `Peer.factory` (packed central Gaussian:
  `packed_clients.StackedClippedMeanFactory` with its noise); 'none': the
  clipped plain mean.

  Args:
    plan: the run's `privacy_plan.PrivacyPlan`.
    clients_per_value: K >= 1 clients per value (`QuantizationFactory`).

  Returns:
    The `tff.aggregators.UnweightedAggregationFactory`.
  """
  config, peer = plan.config, plan.peer
  if peer is not None:
    if clients_per_value == 1:
      return peer.factory()
    if peer.name == 'gaussian':
      return packed_clients.StackedClippedMeanFactory(
          config.clip_norm, clients_per_value,
          peer.noise_multiplier * config.clip_norm, seed=config.noise_seed)
    return peer.factory(clients_per_value=clients_per_value)
  if plan.mechanism is None:
    if clients_per_value > 1:
      return packed_clients.StackedClippedMeanFactory(config.clip_norm,
                                                      clients_per_value)
    return aggregators.clipped_mean_factory(config.clip_norm)
  return aggregators.mechanism_factory(
      config.mechanism, config.clip_norm, config.mechanism_params,
      coordinate_clip=plan.coordinate_clip, rotate=config.rotate,
      seed=config.noise_seed, clients_per_value=clients_per_value,
      calibrated_for=plan.setting, wire_bits=config.wire_bits,
      max_clients_per_round=(config.clients_per_round
                             if config.wire_bits is not None else None),
      diagnostics=True)   # a simulation: the clipping counts are logged


@dataclasses.dataclass(frozen=True)
class Packing:
  """How a run's rounds execute (not part of its config): K clients per TFF
  client slot, trained vectorized or one after another, and why."""
  clients_per_slot: int
  vectorized: bool
  lines: Tuple[str, ...]   # what the run's output says about it


def choose_packing(config: TrainingConfig, clients_per_slot: Optional[int],
                   model_fn, dim: int, num_workers: int = 0) -> Packing:
  """The run's `Packing`: K as given, or automatic (None / 0):
  `packed_clients.auto_clients_per_slot` for every mechanism, 'none' and
  TFF's peers (the tff_* peers packed by `aggregators.packed_peers`).
  Vectorized whenever K > 1 and the model allows it."""
  given = check_packing(config, clients_per_slot)
  if given is None:
    k = packed_clients.auto_clients_per_slot(
        config.clients_per_round, dim, packed_clients.parallel_units(num_workers))
    how = 'auto; override with --clients_per_slot'
  else:
    k, how = given, 'given'
  if k == 1:
    return Packing(1, False, (
        f'packing: K=1 client per TFF client slot ({how}): TFF runs every '
        'client on its own',))
  reason = packed_clients.vectorization_reason(model_fn)
  line = (f'packing: K={k} clients per TFF client slot ({how}); '
          f'{config.clients_per_round // k} slots a round')
  if reason:
    return Packing(k, False, (line, (
        f'local training: the {k} clients of a slot one after another ('
        f'{config.model} cannot be vectorized: {reason})')))
  return Packing(k, True, (line, (
      f'local training: vectorized, the {k} clients of a slot as one batched '
      'computation')))


def check_protobuf_for_peer(name: str, clients_per_slot: int) -> None:
  """ValueError before any work when an unpacked tff_* peer (K = 1) would hit
  the upb protobuf parser's nesting limit: TFF's DistributedDpSumFactory
  inside FedAvg, one client per slot, nests deeper than upb accepts. Packed
  (K > 1, `aggregators.packed_peers`) it runs on upb.

  Args:
    name: the mechanism's name.
    clients_per_slot: K, the run's clients per TFF client slot.

  Raises:
    ValueError: for a tff_* peer at K = 1 under the upb protobuf.
  """
  from google.protobuf.internal import api_implementation  # pylint: disable=g-import-not-at-top
  if (name.startswith('tff_') and clients_per_slot == 1 and
      api_implementation.Type() == 'upb'):
    raise ValueError(f'{name} at one client per TFF slot needs '
                     'PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python set before '
                     'Python starts (TFF\'s DistributedDpSumFactory inside '
                     'FedAvg nests deeper than the upb parser accepts); '
                     'experiments.fl_emnist sets it for --clients_per_slot=1. '
                     'Packed (--clients_per_slot above 1) it runs on upb.')


def check_peer_measurements(peer: peers.Peer, measurements) -> None:
  """RoundCheckError unless TFF's DistributedDpSumFactory reports the scale,
  sensitivity and noise the accountant used (to 1e-4 relative)."""
  if peer.name == 'gaussian':
    return
  ours = peer.ddp_parameters()
  for key, theirs in (('scale', 'scale_factor'),
                      ('scaled_inflated_l2', 'scaled_inflated_l2'),
                      ('scaled_local_std', 'scaled_local_stddev')):
    value = aggregators.find_measurements(measurements, theirs)
    if value is None or not math.isclose(float(value), ours[key], rel_tol=1e-4):
      raise runtime.RoundCheckError(
          f'TFF {peer.name} reports {theirs}={value}, the accountant used '
          f'{ours[key]}: the privacy figure would not describe the run.')


CorruptCheckpointError = round_loop.CorruptCheckpointError


def check_schedule(run_dir: str, config: TrainingConfig, fresh: bool) -> None:
  """Refuses, before anything is calibrated or written, to continue a
  started run with other settings.

  Where a target ε is set, the mechanism's parameters are calibrated for the
  whole schedule: a run calibrated for R rounds cannot be extended (its later
  rounds would spend privacy the guarantee does not have), and the
  calibrated parameters are not compared (they are recomputed or reused).
  Without a target, `round_loop.check_run_dir` applies (more rounds resume).

  Raises:
    ValueError: naming the differing flags (--rounds first).
  """
  if fresh or config.target_epsilon is None:
    return
  old, diff = round_loop.config_diff(run_dir, config_record(config),
                                     ignore=('mechanism_params',))
  if not diff or not round_loop.run_started(run_dir):
    return
  new = config_record(config)
  if 'rounds' in diff:
    raise ValueError(
        f'--rounds={config.rounds}: {run_dir} holds a run calibrated to '
        f'ε <= {old.get("target_epsilon")} for --rounds={old.get("rounds")}; '
        'its noise was sized for that schedule, so it cannot run other rounds '
        'under the same guarantee. Start another run (--experiment_name) '
        'calibrated for the new rounds, or --fresh to discard this one.')
  if diff:
    raise ValueError(
        f'{run_dir} holds a run with other settings ('
        + ', '.join(f'--{k}: {old.get(k)!r} there, {new.get(k)!r} now'
                    for k in diff)
        + '). Use another --experiment_name, or --fresh to discard it.')

#: The trained model, saved in Keras' own format at the end of a run.
MODEL_FILE = 'model.keras'


def prepare_run_dir(run_dir: str, config: TrainingConfig, fresh: bool):
  """Creates run_dir or checks that an existing run used the same config."""
  round_loop.prepare_run_dir(run_dir, config_record(config), fresh)


def _next_round(process, state, datasets, remote, rnd):
  """process.next, naming the dead worker when a remote one stops answering."""
  try:
    with runtime.readable_round_errors():
      out = process.next(state, datasets)
  except runtime.RoundCheckError:
    raise
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
        workers: Optional[Sequence[str]] = None,
        clients_per_slot: Optional[int] = None,
        trusted_network: bool = False,
        observe: Optional[Callable[[int, object], None]] = None,
        plan: Optional[privacy_plan.PrivacyPlan] = None
        ) -> Dict[str, object]:
  """Trains (or resumes) and returns the summary dict (also in summary.json).

  `workers`: None (one machine, TFF's local C++ test context) or 'host:port'
  addresses of running TFF worker services that share each round's clients
  (runtime.RemoteWorkers; an address outside loopback needs
  `trusted_network`: anyone who reaches a worker can run code on it). `clients_per_slot`: K clients per TFF client slot
  (`packed_clients`: the server sees the same law, several times faster);
  None or 0 chooses K (`choose_packing`; the log says what it chose), 1 runs
  every client in its own slot. Neither is part of the run's config: a run
  may resume on other workers or packed otherwise. `observe(round, weights)`,
  if given, is called after each round trained here with the round's
  global `tff.learning.models.ModelWeights` (e.g. to measure client updates
  from it; not called for rounds a resumed run skips). `config` is not
  changed: summary['config'] is the config as run (calibrated parameters
  set). `plan`: the run's privacy plan made beforehand
  (`privacy_plan.make(config, num_params of the model, stored_in=run_dir
  unless fresh)`; checked to be for this config and model), or None: made
  here.
  """
  config = config.validate()
  check_packing(config, clients_per_slot)
  if workers:   # refused before anything is written
    network.check_worker_addresses(runtime.parse_workers(workers),
                                   trusted_network)
  held_out = getattr(data, 'validation_fraction', 0.0)
  if config.validation_fraction != held_out:
    raise ValueError(
        f'config.validation_fraction ({config.validation_fraction:g}) differs '
        f'from the data\'s ({held_out:g}): load the data with the same '
        '`validation_fraction`.')
  if config.total_clients > len(data.train.client_ids):
    raise ValueError(f'`total_clients` ({config.total_clients}) exceeds the '
                     f'{len(data.train.client_ids)} clients of {data.name}.')
  check_schedule(run_dir, config, fresh)
  rounds = _Rounds(config, data, clients_per_slot, workers, log,
                   max_test_examples, trusted_network,
                   None if fresh else run_dir, plan)
  prepare_run_dir(run_dir, rounds.config, fresh)
  rounds.plan.keep(run_dir)
  rounds.start(run_dir)
  step = rounds.step
  if observe is not None:
    def step(state, rnd):
      state, row = rounds.step(state, rnd)
      observe(rnd, rounds.weights(state))
      return state, row
  done = round_loop.run_rounds(rounds.initial_state(), config.rounds,
                               run_dir, step, log=log)
  rounds_done = max(done.start, config.rounds)
  if done.start >= config.rounds:
    log(f'{run_dir} already finished {done.start} rounds.')
  summary = rounds.summary(done.state, rounds_done, _cohort_sizes(run_dir))
  summary['model_file'] = rounds.export(done.state, run_dir)
  results_io.write_json(os.path.join(run_dir, 'summary.json'), summary)
  return summary


def _cohort_sizes(run_dir: str) -> list:
  """The distinct numbers of contributing clients in run_dir's metrics.csv
  (rounds of runs of before the column existed are left out)."""
  path = os.path.join(run_dir, 'metrics.csv')
  if not os.path.exists(path):
    return []
  return sorted({int(float(row['num_clients']))
                 for row in results_io.read_csv(path)
                 if row.get('num_clients') not in (None, '', 'nan')})


def initial_weights(keras_fn, seed: int) -> tff.learning.models.ModelWeights:
  """The initial model of a run at `seed`: `keras_fn()` built right after
  `tf.keras.utils.set_random_seed(seed)` (TensorFlow's, Python's and NumPy's
  seeds: Keras draws an unseeded initializer's seed from Python's `random`),
  so its initializers draw the same weights for every mechanism and every run
  at this seed (TFF's `initialize` builds the model in a graph with unseeded
  initializers). Python's and NumPy's global states are restored after.

  Args:
    keras_fn: no-arg callable -> a fresh Keras model.
    seed: an int >= 0.

  Returns:
    The model's `tff.learning.models.ModelWeights`.
  """
  validation.check_integer('seed', seed, 0)
  python_state, numpy_state = random.getstate(), np.random.get_state()
  try:
    tf.keras.utils.set_random_seed(seed)
    return tff.learning.models.ModelWeights.from_model(keras_fn())
  finally:
    random.setstate(python_state)
    np.random.set_state(numpy_state)


class _Rounds:
  """One run's process, evaluation and round step (`run`); its privacy (the
  mechanism, d, the accountant) is its `privacy_plan.PrivacyPlan`."""

  def __init__(self, config, data, clients_per_slot, workers, log,
               max_test_examples, trusted_network=False, stored_in=None,
               plan=None):
    self.data, self.log = data, log
    self.workers, self.trusted_network = workers, trusted_network
    self.max_test_examples = max_test_examples
    element_spec = data.train.element_type_structure
    self.input_spec = (
        tf.TensorSpec([None] + list(element_spec['x'].shape), tf.float32),
        tf.TensorSpec([None], tf.int32))
    self.keras_fn = lambda: models.get(config.model, data.input_shape,
                                       data.num_classes)
    model = self.keras_fn()
    num_params = models.num_params(model)
    self.packing = choose_packing(
        config, clients_per_slot,
        models.tff_model_fn(self.keras_fn, self.input_spec), num_params,
        len(workers or ()))
    if config.is_peer:
      check_protobuf_for_peer(config.mechanism, self.packing.clients_per_slot)
    # d from the model, then calibrate (or take the parameters given): once,
    # here or before (then for this config and model).
    if plan is None:
      plan = privacy_plan.make(config, num_params, log, stored_in)
    else:
      plan.check_made_for(config, num_params)
    self.plan = plan
    self.config = config = self.plan.config
    self.process = build_process(self.plan, self.keras_fn, self.input_spec,
                                 self.packing.clients_per_slot,
                                 self.packing.vectorized)
    # The accountant now: a mechanism without privacy is refused before
    # anything is written.
    accountant = self.plan.accountant
    if self.plan.mechanism is not None and self.plan.calibration is None:
      eps, _ = accountant.epsilon_rdp(config.rounds)
      log(f'Not calibrated (no target ε): {self.plan.mechanism} as given gives '
          f'whole-model ε = {eps:.4g} at δ = {config.target_delta:.3g} over '
          f'{config.rounds} rounds.')
    dropout = [layer.name for layer in model.layers
               if isinstance(layer, tf.keras.layers.Dropout)]
    if dropout:
      log(f'{config.model} has dropout ({", ".join(dropout)}), whose masks are '
          'drawn unseeded inside TFF\'s client work: runs of it do not '
          'reproduce exactly.')
    if config.noise_seed is not None and self.plan.peer is not None and (
        self.plan.peer.name != 'gaussian' or self.packing.clients_per_slot == 1):
      log(f'--noise_seed does not reach TFF\'s own {config.mechanism} '
          'aggregator (its noise is unseeded): this run\'s noise does not '
          'reproduce.')
    self.remote = None
    self.times = []

  def initial_state(self):
    """The process's initial state with the model `initial_weights` gives:
    the same for every mechanism at one seed (seeds are blocks)."""
    weights = initial_weights(self.keras_fn, self.config.seed)
    return self.process.set_model_weights(self.process.initialize(), weights)

  def start(self, run_dir):
    """The execution context, the evaluation model and the run's log header."""
    config, data = self.config, self.data
    remote = runtime.parse_workers(self.workers) if self.workers else None
    if remote:
      self.remote = runtime.use_remote_workers(
          remote, trusted_network=self.trusted_network)
      self.log(f'Running on {len(self.remote.addresses)} TFF workers: '
               f'{", ".join(self.remote.addresses)} (they run unauthenticated '
               'computations for whoever reaches their ports: keep them on a '
               'trusted network, docs/scaling.md)')
    elif runtime.use_secure_sum_simulation():
      self.log('TFF workers: local, in this run\'s private network namespace '
               '(reachable from this run only)')
    self.population = data.train.client_ids[:config.total_clients]
    self.eval_model = self.keras_fn()
    self.eval_model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])
    self.test_x, self.test_y = data.test_x, data.test_y
    # The evaluation split: the test set, or the validation split held out
    # of the train clients (then the test set is never evaluated).
    self.split = config.evaluation_split
    if self.split == 'validation':
      self.test_x, self.test_y = data.validation_x, data.validation_y
    elif self.max_test_examples:
      self.test_x = self.test_x[:self.max_test_examples]
      self.test_y = self.test_y[:self.max_test_examples]
    self.tensorboard = tff.program.TensorBoardReleaseManager(
        os.path.join(run_dir, 'tensorboard'))
    self.log(f'Data: {data.description}')
    self.log(f'Evaluation: the {self.split} split ({len(self.test_y)} '
             'examples)' + ('; the test set is not used'
                            if self.split == 'validation' else ''))
    if config.server_momentum or config.server_lr_schedule != 'constant':
      self.log(f'Server optimizer: SGD lr {config.server_lr:g}, momentum '
               f'{config.server_momentum:g}, schedule '
               f'{config.server_lr_schedule}')
    shown = self.plan.shown
    self.log(f'Model: {config.model} ({self.plan.dim} coordinates sent per '
             f'client); aggregator: {config.mechanism}' +
             (f' = {shown}' if shown else ''))
    for line in self.packing.lines:
      self.log(line)

  def weights(self, state) -> tff.learning.models.ModelWeights:
    """The global model of `state`."""
    weights = self.process.get_model_weights(state)
    if isinstance(weights, collections.abc.Mapping):  # mergeable context
      weights = tff.learning.models.ModelWeights(**weights)
    return weights

  def export(self, state, run_dir) -> str:
    """Saves the trained global model where Keras alone can load it.

    `tf.keras.models.load_model(path)` gives the model with these weights
    (uncompiled: train or evaluate it with your own loss), without TFF or
    this library.

    Args:
      state: the process state after the last round.
      run_dir: the run's folder.

    Returns:
      The file's name inside run_dir ('model.keras').
    """
    model = self.keras_fn()
    self.weights(state).assign_weights_to(model)
    model.save(os.path.join(run_dir, MODEL_FILE))
    return MODEL_FILE

  def evaluate(self, state):
    self.weights(state).assign_weights_to(self.eval_model)
    loss, acc = self.eval_model.evaluate(self.test_x, self.test_y,
                                         batch_size=1000, verbose=0)
    return float(loss), float(acc)

  def _datasets(self, rnd):
    """This round's clients (sampled from (seed, round)), packed or one each."""
    config, packing = self.config, self.packing
    ids = sampled_clients(config, self.population, rnd)
    if packing.clients_per_slot > 1:
      return packed_clients.pack_datasets(
          self.data.client_examples, ids, packing.clients_per_slot,
          config.batch_size, config.local_epochs, vectorized=packing.vectorized)
    return [self.data.train.create_tf_dataset_for_client(c)
            .repeat(config.local_epochs).batch(config.batch_size)
            .map(lambda e: (e['x'], e['y'])) for c in ids]

  def step(self, state, rnd):
    """One round: train, measure, account, release the metrics, log."""
    config = self.config
    t0 = time.time()
    state, metrics = _next_round(self.process, state, self._datasets(rnd),
                                 self.remote, rnd)
    train = metrics['client_work']['train']
    loss_key, acc_key = f'{self.split}_loss', f'{self.split}_accuracy'
    row = collections.OrderedDict(
        train_loss=float(train['loss']),
        train_accuracy=float(train['sparse_categorical_accuracy']))
    row[loss_key] = row[acc_key] = math.nan
    if rnd % config.eval_every == 0 or rnd == config.rounds:
      row[loss_key], row[acc_key] = self.evaluate(state)
    row.update(self._privacy_row(metrics['aggregator'], rnd))
    asyncio.run(self.tensorboard.release(
        {k: float(v) for k, v in row.items() if math.isfinite(v)}, key=rnd))
    self.times.append(time.time() - t0)
    eta = np.mean(self.times[-10:]) * (config.rounds - rnd)
    short = 'test' if self.split == 'test' else 'val'
    test = (f' {short}_acc={row[acc_key]:.4f}'
            if not math.isnan(row[acc_key]) else '')
    # A quantized client's level indices (bits/client) travel in the secure
    # sum's field, which must hold the cohort's sum (upload bits/client).
    bits = (f'bits/client={row["bits_per_client"]} (levels; '
            f'upload {row["upload_bits_per_client"]} in the secure sum\'s field)'
            if 'upload_bits_per_client' in row
            else f'bits/client={row["bits_per_client"]}')
    self.log(f'round {rnd}/{config.rounds} loss={row["train_loss"]:.4f} '
             f'train_acc={row["train_accuracy"]:.4f}{test} '
             f'eps={row["epsilon"]:.4g} {bits} '
             f'clipped={row.get("clipped_fraction", row.get("clipped_clients_fraction", 0)):.3f} '
             f'({self.times[-1]:.1f}s, ETA {eta:.0f}s)')
    return state, row

  def _privacy_row(self, measurements, rnd):
    """The round's bits, clipping and cumulative ε (the plan's accountant)."""
    row = collections.OrderedDict()
    quant = aggregators.find_measurements(measurements)
    if quant is not None:
      for key in ('num_clients', 'bits_per_client', 'bits_per_coordinate',
                  'secure_sum_bits', 'upload_bits_per_client',
                  'nonfinite_count'):
        row[key] = int(quant[key])
      for key in ('clipped_fraction', 'clipped_clients_fraction'):
        row[key] = float(quant[key])
    else:
      if self.plan.peer is not None:
        check_peer_measurements(self.plan.peer, measurements)
      row['bits_per_client'] = self.plan.bits_per_client
    row['epsilon'], row['epsilon_per_coordinate'] = self.plan.epsilon(rnd)
    if quant is None:
      # The packed central Gaussian and noise-free mean count the clients
      # they clip (packed_clients.StackedClippedMeanFactory): recorded too.
      clipped = aggregators.find_measurements(measurements, 'clipped_count')
      if clipped is not None:
        row['clipped_clients_fraction'] = (float(clipped) /
                                           self.config.clients_per_round)
    row['delta'] = self.config.target_delta
    return row

  def summary(self, state, rounds_done, cohorts=()):
    """summary.json: data, config, final test metrics, ε ∈ [attained, proved]
    (`PrivacyPlan.summary`).

    `cohorts`: the numbers of contributing clients the rounds had; with a
    dropout tolerance, the ε for the smallest that occurred is added."""
    config = self.config
    test_loss, test_acc = self.evaluate(state)
    summary = collections.OrderedDict(
        data=self.data.description, config=config_record(config),
        dim=self.plan.dim, rounds_completed=rounds_done)
    summary[f'{self.split}_loss'] = test_loss
    summary[f'{self.split}_accuracy'] = test_acc
    if self.split != 'test':
      summary['evaluated_on'] = (f'the {self.split} split ({len(self.test_y)} '
                                 'examples); the test set was not used')
    summary.update(delta=config.target_delta,
                   bits_per_client_per_round=self.plan.bits_per_client)
    summary.update(self.plan.summary(rounds_done, cohorts))
    return summary
