"""Resumable FedAvg with a tff_quant aggregator: checkpoints, metrics, accounting.

Shared by experiments/fl_emnist.py, the notebooks and the demo. A run lives in
`run_dir`: config.json (the hyper-parameters; a restart with different ones is an
error, never a silent mix), checkpoints/ (tff.program.FileProgramStateManager,
one per round), metrics.csv (tff.program.CSVFileReleaseManager keyed by round, so
a resumed run ends with every round exactly once), tensorboard/ (the same
per-round numbers through tff.program.TensorBoardReleaseManager: loss, accuracy,
ε, bits, clipped fractions) and summary.json at the end;
the rounds themselves run in `round_loop.run_rounds`, the one checkpointed loop.
"""

import asyncio
import collections
import collections.abc
import dataclasses
import json
import math
import os
import pickle
import random
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import accounting, aggregators, mechanisms, models
from tff_quant.accounting import rdp_route
from tff_quant.aggregators import peers
from tff_quant.common import validation
from tff_quant.program import network, results_io, runtime
from tff_quant.program import round_loop
from tff_quant.training import packed_clients

NO_PRIVACY = 'none'   # the clipped plain mean (noise-free baseline)
PEER_PARAMS = ('noise_multiplier', 'bits')   # mechanism_params of a TFF peer
#: The whole-model ε a private run without a target or privacy parameters is
#: calibrated to (`default_target`).
DEFAULT_TARGET_EPSILON = 10.0


@dataclasses.dataclass
class TrainingConfig:
  """Hyper-parameters of one federated run (defaults: the RQM paper's EMNIST setup).

  `mechanism` is a name in `tff_quant.mechanisms.registry()`, 'none', or one
  of TFF's own DP aggregators (`aggregators.peers.PEERS`: 'gaussian',
  'tff_skellam', 'tff_dgauss'; their params noise_multiplier and bits);
  `mechanism_params` its tunables (omitted ones at their defaults). With
  `target_epsilon`, the class's calibrated parameters are set at start so the
  whole run meets (target_epsilon, δ) for the whole model (ℓ2 route when
  coordinate_clip_multiple > 1); the others stay as given.
  """
  mechanism: str = 'rqm'
  mechanism_params: Dict[str, object] = dataclasses.field(default_factory=dict)
  clip_norm: float = 0.03
  coordinate_clip_multiple: float = 1.0   # c∞ = k·clip_norm/√d
  target_epsilon: Optional[float] = None  # calibrate the mechanism to it at start
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
  # The tuning options; at their defaults they are left out of
  # config.json (`config_record`), so earlier runs resume unchanged.
  server_momentum: float = 0.0   # 0: plain server SGD (tff build_sgdm)
  # 'constant', or 'cosine': server_lr·(1 + cos(π·t/rounds))/2 at round t
  # (from 0), decaying to near 0 at the last round (`server_lr_at`).
  server_lr_schedule: str = 'constant'
  # > 0: the data holds out this fraction of each client's examples as a
  # validation split (`data.hold_out_validation`); the run trains on the
  # rest and evaluates on the validation split, never on the test set.
  validation_fraction: float = 0.0
  # Dropout tolerance: the fewest of a round's sampled clients whose update
  # may reach the sum (a calibrated run: ε holds for every cohort from it to
  # clients_per_round, and the factory refuses a round below it). None:
  # every sampled client contributes; then left out of config.json.
  min_clients_per_round: Optional[int] = None

  def validate(self):
    """TypeError for a wrong type, ValueError naming the parameter and its range."""
    names = (NO_PRIVACY,) + tuple(mechanisms.registry()) + peers.PEERS
    validation.check_one_of('mechanism', self.mechanism, names)
    if self.is_peer:
      self.mechanism_params = peer_params(self.mechanism, self.mechanism_params,
                                          self.target_epsilon is not None)
    elif self.mechanism != NO_PRIVACY:
      self.mechanism_params = mechanisms.get(self.mechanism).complete_params(
          self.mechanism_params)
    elif self.mechanism_params:
      raise ValueError('`mechanism_params` must be empty for mechanism '
                       f'{NO_PRIVACY!r}, got {self.mechanism_params}.')
    validation.check_one_of('model', self.model, models.MODELS)
    validation.check_optional(validation.check_positive, 'target_epsilon',
                              self.target_epsilon)
    if self.target_epsilon is not None and self.mechanism == NO_PRIVACY:
      raise ValueError('`target_epsilon` needs a private mechanism, not '
                       f'{NO_PRIVACY!r}.')
    for name in ('clip_norm', 'client_lr', 'server_lr', 'coordinate_clip_multiple'):
      validation.check_positive(name, getattr(self, name))
    for name in ('rounds', 'clients_per_round', 'total_clients', 'batch_size',
                 'local_epochs', 'eval_every'):
      validation.check_integer(name, getattr(self, name), 1)
    validation.check_bool('rotate', self.rotate)
    validation.check_integer('seed', self.seed, 0)
    validation.check_optional(validation.check_integer, 'noise_seed',
                              self.noise_seed, 0)
    validation.check_at_most('clients_per_round', self.clients_per_round,
                             'total_clients', self.total_clients)
    validation.check_optional(validation.check_probability, 'delta', self.delta)
    validation.check_number('server_momentum', self.server_momentum, 0, 1,
                            high_open=True)
    validation.check_number('validation_fraction', self.validation_fraction, 0,
                            1, high_open=True)
    validation.check_one_of('server_lr_schedule', self.server_lr_schedule,
                            SERVER_LR_SCHEDULES)
    if self.min_clients_per_round is not None:
      validation.check_integer('min_clients_per_round',
                               self.min_clients_per_round, 1,
                               self.clients_per_round)
      if self.target_epsilon is None or self.is_peer:
        raise ValueError(
            '`min_clients_per_round` needs a registry mechanism calibrated to '
            'a `target_epsilon`: the calibration sizes the noise for the '
            'smallest cohort and the factory enforces it.')

  @property
  def evaluation_split(self) -> str:
    """'validation' when the run holds a validation split out, else 'test'."""
    return 'validation' if self.validation_fraction else 'test'

  @property
  def is_peer(self) -> bool:
    """True for one of TFF's own DP aggregators (`aggregators.peers`)."""
    return self.mechanism in peers.PEERS

  @property
  def target_delta(self) -> float:
    return self.delta if self.delta is not None else 1.0 / self.total_clients


def default_target(config: TrainingConfig) -> bool:
  """Sets config.target_epsilon to DEFAULT_TARGET_EPSILON when a private
  mechanism has neither a target nor any of the parameters calibration would
  choose (a DP run's defaults must be private); True when it did.

  Args:
    config: the run's config (changed in place).

  Returns:
    Whether the default target was set.
  """
  if config.target_epsilon is not None or config.mechanism == NO_PRIVACY:
    return False
  if config.is_peer:
    chosen = ('noise_multiplier',)
  else:
    chosen = mechanisms.get(config.mechanism).CALIBRATED
  if any(name in (config.mechanism_params or {}) for name in chosen):
    return False
  config.target_epsilon = DEFAULT_TARGET_EPSILON
  return True


def peer_params(name: str, params, calibrated: bool) -> Dict[str, object]:
  """A TFF peer's noise_multiplier (> 0; set by calibration when `calibrated`)
  and bits (tff_* only, default 16), checked."""
  params = dict(params or {})
  unknown = set(params) - set(PEER_PARAMS)
  if unknown:
    raise ValueError(f'{name} takes parameters {PEER_PARAMS}, got {sorted(unknown)}.')
  if name == 'gaussian':
    if 'bits' in params:
      raise ValueError('`bits` does not apply to the central Gaussian (floats).')
  else:
    params['bits'] = validation.check_integer('bits', params.get('bits', 16), 1, 32)
  if 'noise_multiplier' in params:
    params['noise_multiplier'] = float(validation.check_positive(
        'noise_multiplier', params['noise_multiplier']))
  elif not calibrated:
    raise ValueError(f'{name} needs noise_multiplier=... in `mechanism_params` '
                     'or a `target_epsilon` to calibrate it.')
  return params


def build_peer(config: TrainingConfig, dim: int, log=print) -> peers.Peer:
  """The TFF peer of `config` (calibrated to config.target_epsilon, ℓ2 route,
  when given; config.mechanism_params then records its noise multiplier)."""
  bits = config.mechanism_params.get('bits')
  if config.target_epsilon is not None:
    t0 = time.time()
    peer = _calibrated_peer(config.mechanism, config.target_epsilon,
                            config.target_delta, config.rounds,
                            config.clients_per_round, config.total_clients,
                            dim, config.clip_norm, bits)
    config.mechanism_params['noise_multiplier'] = peer.noise_multiplier
    log(f'Calibrated {peer} to whole-model ε <= {config.target_epsilon:g} '
        f'(δ={config.target_delta:.3g}, {config.rounds} rounds; '
        f'{time.time() - t0:.0f} s)')
    return peer
  return peers.Peer(config.mechanism, config.mechanism_params['noise_multiplier'],
                    config.clip_norm, config.clients_per_round, dim, bits)


_PEER_CALIBRATIONS = {}


def _calibrated_peer(*args) -> peers.Peer:
  """peers.calibrate(*args), computed once per process for the same
  arguments (a tuning's runs share them; a bisection takes ~5-10 s), a
  fresh copy each time."""
  if args not in _PEER_CALIBRATIONS:
    _PEER_CALIBRATIONS[args] = peers.calibrate(*args)
  return dataclasses.replace(_PEER_CALIBRATIONS[args])


def build_process(config: TrainingConfig, keras_fn, input_spec, peer=None,
                  clients_per_slot: int = 1, vectorized: bool = False,
                  calibrated_for=None):
  """(FedAvg process, [Created]) for `config`: its aggregator and what it uses.

  With a registry mechanism or a TFF distributed-DP peer (tff_skellam,
  tff_dgauss) the whole `next` is secure-only, and checked to be
  (`aggregators.check_secure_only`): the model update goes through the secure
  sum and the training metrics through
  `tff.learning.metrics.secure_sum_then_finalize` (TFF's default metrics
  aggregator would add a plain federated_sum). The central Gaussian peer,
  whose server sees every update anyway, keeps TFF's default metrics. `clients_per_slot` K > 1:
  the packed path (`packed_clients`; its `next` takes one packed dataset per
  K clients), its K clients trained as one batched computation when
  `vectorized`; a tff_* peer then runs `peer.factory(K)` (`packed_peers`:
  TFF's own per-client pipeline on each of the K rows), the central Gaussian
  `packed_clients.StackedClippedMeanFactory`. `calibrated_for`: the `accounting.CalibratedSetting` the
  registry mechanism must match (`aggregators.mechanism_factory`).
  """
  secure = config.mechanism != NO_PRIVACY and (peer is None or
                                                peer.name != 'gaussian')
  model_fn = models.tff_model_fn(keras_fn, input_spec)
  client_opt = tff.learning.optimizers.build_sgdm(config.client_lr)
  server_opt = server_optimizer(config)
  with aggregators.recording() as used:  # the mechanism and d (padded if rotated)
    if clients_per_slot > 1:
      if peer is None:
        aggregator = build_aggregator(config, clients_per_slot, calibrated_for)
      elif peer.name == 'gaussian':
        aggregator = packed_clients.StackedClippedMeanFactory(
            config.clip_norm, clients_per_slot,
            peer.noise_multiplier * config.clip_norm, seed=config.noise_seed)
      else:
        aggregator = peer.factory(clients_per_value=clients_per_slot)
      process = packed_clients.build_packed_fed_avg(
          model_fn, clients_per_slot, client_opt, server_opt,
          aggregator, vectorized=vectorized,
          metrics_aggregator=(tff.learning.metrics.secure_sum_then_finalize
                              if secure else
                              tff.learning.metrics.sum_then_finalize))
    else:
      process = tff.learning.algorithms.build_unweighted_fed_avg(
          model_fn, client_optimizer_fn=client_opt, server_optimizer_fn=server_opt,
          model_aggregator=(peer.factory() if peer is not None
                            else build_aggregator(config, 1, calibrated_for)),
          metrics_aggregator=(tff.learning.metrics.secure_sum_then_finalize
                              if secure else None))
  if secure:   # the mechanism's ε covers the secure sum and nothing else
    aggregators.check_secure_only(
        process, what=f'the FedAvg process of {config.mechanism}')
  return process, used


SERVER_LR_SCHEDULES = ('constant', 'cosine')


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


def config_record(config: TrainingConfig) -> Dict[str, object]:
  """What defines a run (config.json, summary.json): the config's fields,
  without those added later (server_momentum, validation_fraction,
  server_lr_schedule) where they hold their defaults, so a run of before they existed resumes."""
  record = dataclasses.asdict(config)
  for name in ('server_momentum', 'validation_fraction'):
    if not record[name]:
      del record[name]
  if record['server_lr_schedule'] == 'constant':
    del record['server_lr_schedule']
  if record['min_clients_per_round'] is None:
    del record['min_clients_per_round']
  return record


def sampled_clients(config: TrainingConfig, population: Sequence[str],
                    rnd: int) -> list:
  """The ids of round `rnd`'s clients: config.clients_per_round of
  `population` without replacement, drawn from (config.seed, rnd)."""
  rng = np.random.default_rng([config.seed, rnd])
  chosen = rng.choice(len(population), config.clients_per_round,
                      replace=False)
  return [population[i] for i in chosen]


def build_aggregator(config: TrainingConfig, clients_per_value: int = 1,
                     calibrated_for=None):
  """The model aggregator for `config` (a clipped plain mean for 'none');
  `clients_per_value` as in `QuantizationFactory`; `calibrated_for` as in
  `aggregators.mechanism_factory`."""
  if config.mechanism == NO_PRIVACY:
    if clients_per_value > 1:
      return packed_clients.StackedClippedMeanFactory(config.clip_norm,
                                                      clients_per_value)
    return aggregators.clipped_mean_factory(config.clip_norm)
  return aggregators.mechanism_factory(
      config.mechanism, config.clip_norm, config.mechanism_params,
      coordinate_clip_multiple=config.coordinate_clip_multiple,
      rotate=config.rotate, seed=config.noise_seed,
      clients_per_value=clients_per_value, calibrated_for=calibrated_for,
      diagnostics=True)   # a simulation: the clipping counts are logged


def check_packing(config: TrainingConfig, clients_per_slot: Optional[int]
                  ) -> Optional[int]:
  """`clients_per_slot`, checked: None or 0 (automatic), else K >= 1 dividing
  clients_per_round (every mechanism and peer takes packed clients)."""
  if clients_per_slot is None:
    return None
  allowed = ('`clients_per_slot` must be 0 or None (automatic) or an integer in '
             f'[1, clients_per_round], got {clients_per_slot!r}')
  if (isinstance(clients_per_slot, (bool, np.bool_)) or
      not isinstance(clients_per_slot, (int, np.integer))):
    raise TypeError(f'{allowed} ({type(clients_per_slot).__name__}).')
  k = int(clients_per_slot)
  if k == 0:
    return None
  if k < 0:
    raise ValueError(f'{allowed}.')
  if k == 1:
    return k
  if config.clients_per_round % k:
    raise ValueError(f'clients_per_round ({config.clients_per_round}) must be a '
                     f'multiple of clients_per_slot ({k}).')
  return k


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


def calibration_key(config: TrainingConfig, dim: int) -> Dict[str, object]:
  """What a calibration of `config` at model size `dim` depends on: the
  run's config with only the mechanism parameters calibration does not set,
  d, and the accountant's code (`accounting.provenance.SOURCE_DIGEST`)."""
  cls = mechanisms.get(config.mechanism)
  record = config_record(config)
  record['mechanism_params'] = {k: v for k, v in config.mechanism_params.items()
                                if k not in cls.CALIBRATED}
  return json.loads(json.dumps(dict(config=record, dim=dim,
                                    accountant=accounting.provenance.SOURCE_DIGEST),
                               sort_keys=True, default=float))


def stored_calibration(run_dir: str, key: Dict[str, object]):
  """The calibration run_dir's CALIBRATION_FILE holds for `key` (the same
  setting, made by the same accountant code), else None."""
  path = os.path.join(run_dir, CALIBRATION_FILE)
  if not os.path.exists(path):
    return None
  with open(path, 'rb') as f:
    stored = pickle.load(f)   # the run's own folder, written by `run`
  return stored['calibration'] if stored.get('key') == key else None


def calibrate_config(config: TrainingConfig, dim: int, log=print,
                     stored=None):
  """Sets config.mechanism_params to the calibration for config.target_epsilon.

  The whole run (rounds, clients_per_round of total_clients, δ) at model size
  `dim` meets the target with the smallest debiased error (signal-aware:
  `mechanisms.utility`) over the class's calibrated parameters, within the bits per coordinate the given parameters
  use; the given ones stay fixed. ValueError (nothing written)
  when the target is out of reach. `stored`: a calibration made before for
  the same `calibration_key` (`stored_calibration`), used as it is.
  """
  cls = mechanisms.get(config.mechanism)
  fixed = {k: v for k, v in config.mechanism_params.items()
           if k not in cls.CALIBRATED}
  # The bit budget the given (or default) parameters use.
  bits = cls.for_coordinate_bound(
      1.0, **cls.complete_params(config.mechanism_params)).bits_per_coordinate
  t0 = time.time()
  if stored is not None:
    report = stored
    log('Calibration reused: this run\'s folder holds one for the same '
        'setting, made by the same accountant code.')
  else:
    report = accounting.calibration_report(
        config.mechanism, config.target_epsilon, config.target_delta,
        config.rounds, config.clients_per_round, config.total_clients, dim,
        l2_clip=config.clip_norm,
        coordinate_clip=config.coordinate_clip_multiple * config.clip_norm /
        math.sqrt(dim), bits=bits, progress=log,
        min_clients_per_round=config.min_clients_per_round, **fixed)
  config.mechanism_params = cls.complete_params(report.tunables)
  interval = (f'ε ∈ [{report.epsilon_attained:.4g}, {report.epsilon:.4g}] '
              '[attained, proved]' if report.epsilon_attained is not None
              else f'ε = {report.epsilon:.4g}')
  log(f'Calibrated {config.mechanism} to whole-model ε <= {config.target_epsilon:g} '
      f'(δ={config.target_delta:.3g}, {config.rounds} rounds): {report.mechanism}; '
      f'{interval}; debiased error {report.debiased_error:.3g} per coordinate = '
      f'{report.ratio_to_gaussian:.3g}× the Gaussian\'s at the same ε (plain '
      f'MSE {report.mse:.3g}) ({time.time() - t0:.0f} s)')
  return report


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


def peer_bits_per_client(peer: peers.Peer) -> int:
  """Bits a client uploads per round: 32-bit floats (central Gaussian) or
  `bits` per coordinate of the rotated, padded vector (tff_*)."""
  if peer.name == 'gaussian':
    return 32 * peer.dim
  return peer.bits * peer.padded_dim


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

#: A calibrated run's calibration, kept so that the same command resumes it
#: at once (`stored_calibration`).
CALIBRATION_FILE = 'calibration.pkl'


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
        observe: Optional[Callable[[int, object], None]] = None
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
  from it; not called for rounds a resumed run skips).
  """
  config.validate()
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
                   None if fresh else run_dir)
  prepare_run_dir(run_dir, config, fresh)
  rounds.keep_calibration(run_dir)
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
  """One run's process, accountants and round step (`run`)."""

  def __init__(self, config, data, clients_per_slot, workers, log,
               max_test_examples, trusted_network=False, stored_in=None):
    self.config, self.data, self.log = config, data, log
    self.trusted_network = trusted_network
    element_spec = data.train.element_type_structure
    self.input_spec = (
        tf.TensorSpec([None] + list(element_spec['x'].shape), tf.float32),
        tf.TensorSpec([None], tf.int32))
    self.keras_fn = lambda: models.get(config.model, data.input_shape,
                                       data.num_classes)
    self.packing = choose_packing(
        config, clients_per_slot,
        models.tff_model_fn(self.keras_fn, self.input_spec),
        models.num_params(self.keras_fn()), len(workers or ()))
    self.peer = None
    if config.is_peer:
      check_protobuf_for_peer(config.mechanism, self.packing.clients_per_slot)
      self.peer = build_peer(config, models.num_params(self.keras_fn()), log)
    self.calibration = None
    self._build()
    orders = rdp_route.DEFAULT_ORDERS
    if config.target_epsilon is not None and self.used:
      # The run is accounted as its calibration was (`Calibration.guarantee`:
      # the same orders and routes), so it reports the ε calibration proved,
      # and its factory enforces the calibrated setting.
      self.calibration_key = calibration_key(config, self.used[0].dim)
      self.calibration = calibrate_config(
          config, self.used[0].dim, log,
          stored_calibration(stored_in, self.calibration_key)
          if stored_in else None)
      orders = self.calibration.orders
      self._build()
    self.mech, self.dim = ((self.used[0].mechanism, self.used[0].dim)
                           if self.used else
                           (None, models.num_params(self.keras_fn())))
    self.acct, self.coord_acct = self._accountants(orders)
    if self.mech is not None and self.calibration is None:
      eps, _ = self.acct.epsilon_rdp(config.rounds)
      log(f'Not calibrated (no target ε): {self.mech} as given gives whole-model '
          f'ε = {eps:.4g} at δ = {config.target_delta:.3g} over {config.rounds} '
          'rounds.')
    dropout = [layer.name for layer in self.keras_fn().layers
               if isinstance(layer, tf.keras.layers.Dropout)]
    if dropout:
      log(f'{config.model} has dropout ({", ".join(dropout)}), whose masks are '
          'drawn unseeded inside TFF\'s client work: runs of it do not '
          'reproduce exactly.')
    if config.noise_seed is not None and self.peer is not None and (
        self.peer.name != 'gaussian' or self.packing.clients_per_slot == 1):
      log(f'--noise_seed does not reach TFF\'s own {config.mechanism} '
          'aggregator (its noise is unseeded): this run\'s noise does not '
          'reproduce.')
    self.workers = workers
    self.remote = None
    self.max_test_examples = max_test_examples
    self.times = []

  def _build(self):
    self.process, self.used = build_process(
        self.config, self.keras_fn, self.input_spec, self.peer,
        self.packing.clients_per_slot, self.packing.vectorized,
        self.calibration.setting if self.calibration else None)

  def initial_state(self):
    """The process's initial state with the model `initial_weights` gives:
    the same for every mechanism at one seed (seeds are blocks)."""
    weights = initial_weights(self.keras_fn, self.config.seed)
    return self.process.set_model_weights(self.process.initialize(), weights)

  def _accountants(self, orders):
    """(the run's accountant, the papers' per-coordinate one; None, None
    for the noise-free baseline)."""
    config, mech = self.config, self.mech
    delta = config.target_delta
    if self.peer is not None:
      return self.peer.accountant(config.total_clients, delta), None
    if mech is None:
      return None, None
    acct = accounting.RoundAccountant(
        mech, config.clients_per_round, config.total_clients, delta, self.dim,
        orders=orders, l2_clip=config.clip_norm,
        min_clients_per_round=config.min_clients_per_round)
    if not acct.gives_privacy:
      raise ValueError(f'{mech} gives no privacy: its per-round Rényi divergence '
                       'is infinite at every order (ε = inf). Change its '
                       'parameters.')
    # The papers' scalar figure: one coordinate, the others at ±c (their setting).
    coord_acct = accounting.RoundAccountant(mech, config.clients_per_round,
                                            config.total_clients, delta, 1,
                                            others='extremes')
    return acct, coord_acct

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
    shown = self.mech or self.peer
    self.log(f'Model: {config.model} ({self.dim} coordinates sent per client); '
             f'aggregator: {config.mechanism}' + (f' = {shown}' if shown else ''))
    for line in self.packing.lines:
      self.log(line)

  def weights(self, state) -> tff.learning.models.ModelWeights:
    """The global model of `state`."""
    weights = self.process.get_model_weights(state)
    if isinstance(weights, collections.abc.Mapping):  # mergeable context
      weights = tff.learning.models.ModelWeights(**weights)
    return weights

  def keep_calibration(self, run_dir) -> None:
    """Writes the run's calibration (if any) to run_dir's CALIBRATION_FILE."""
    if self.calibration is None:
      return
    with open(os.path.join(run_dir, CALIBRATION_FILE), 'wb') as f:
      pickle.dump(dict(key=self.calibration_key, calibration=self.calibration), f)

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
    """The round's bits, clipping and cumulative ε."""
    row = collections.OrderedDict()
    quant = aggregators.find_measurements(measurements)
    if quant is not None:
      for key in ('num_clients', 'bits_per_client', 'bits_per_coordinate',
                  'secure_sum_bits', 'upload_bits_per_client',
                  'nonfinite_count'):
        row[key] = int(quant[key])
      for key in ('clipped_fraction', 'clipped_clients_fraction'):
        row[key] = float(quant[key])
      row['epsilon'], _ = self.acct.epsilon_rdp(rnd)
      row['epsilon_per_coordinate'], _ = self.coord_acct.epsilon_rdp(rnd)
    elif self.peer is not None:
      check_peer_measurements(self.peer, measurements)
      row['bits_per_client'] = peer_bits_per_client(self.peer)
      row['epsilon'], _ = self.acct.epsilon_rdp(rnd)
      row['epsilon_per_coordinate'] = math.nan   # ℓ2 mechanism: no scalar figure
    else:
      row['bits_per_client'] = 32 * self.dim
      row['epsilon'] = row['epsilon_per_coordinate'] = math.inf
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
    """summary.json: data, config, final test metrics, ε ∈ [attained, proved].

    `cohorts`: the numbers of contributing clients the rounds had; with a
    dropout tolerance, the ε for the smallest that occurred is added."""
    config, mech, peer = self.config, self.mech, self.peer
    test_loss, test_acc = self.evaluate(state)
    summary = collections.OrderedDict(
        data=self.data.description, config=config_record(config),
        dim=self.dim, rounds_completed=rounds_done)
    summary[f'{self.split}_loss'] = test_loss
    summary[f'{self.split}_accuracy'] = test_acc
    if self.split != 'test':
      summary['evaluated_on'] = (f'the {self.split} split ({len(self.test_y)} '
                                 'examples); the test set was not used')
    summary.update(delta=config.target_delta,
                   bits_per_client_per_round=32 * self.dim)
    if mech is None and peer is None:
      summary.update(mechanism='none (clipped mean, no privacy)',
                     epsilon=math.inf)
      return summary
    # A calibrated run: the guarantee as calibration computed it (its orders
    # and routes), so the ε printed is the one calibration reported; else
    # PLD where its grid fits, else why.
    use_pld = (self.calibration is None or self.calibration.setting is None
               or self.calibration.setting.use_pld)
    g = self.acct.guarantee(rounds_done, use_pld=use_pld)
    if cohorts:
      summary['cohort_sizes'] = list(cohorts)
    if (config.min_clients_per_round is not None and cohorts
        and self.calibration is not None):
      # The calibrated ε holds for every cohort down to the minimum; the
      # cohorts that occurred may allow less (docs/privacy.md, "Dropouts").
      summary['epsilon_for_cohorts_that_occurred'] = (
          self.calibration.guarantee(rounds_done,
                                     smallest_cohort=min(cohorts)).epsilon)
    if not use_pld:
      g = dataclasses.replace(g, pld_note=(
          'PLD route not used: a calibrated run is accounted as its '
          'calibration was, Calibration.guarantee'))
    summary.update(mechanism=repr(mech or peer), epsilon=g.epsilon,
                   epsilon_route=g.route, epsilon_rdp=g.epsilon_rdp,
                   epsilon_pld=g.epsilon_pld, pld_note=g.pld_note,
                   privacy_assumptions=g.assumptions,
                   epsilon_attained=g.epsilon_attained,
                   attained_inputs=g.attained_inputs,
                   accountant=accounting.provenance.SOURCE_DIGEST)
    if mech is not None:
      field_bits = aggregators.secure_sum_bits(
          config.clients_per_round, mech.num_levels, mech.modulus)
      summary.update(
          epsilon_per_coordinate=self.coord_acct.epsilon_rdp(rounds_done)[0],
          bits_per_coordinate=mech.bits_per_coordinate,
          bits_per_client_per_round=mech.bits_per_coordinate * self.dim,
          secure_sum_bits=field_bits,
          upload_bits_per_client_per_round=field_bits * self.dim)
    else:
      summary.update(epsilon_per_coordinate=math.nan,
                     bits_per_coordinate=peer.bits_per_coordinate,
                     bits_per_client_per_round=peer_bits_per_client(peer))
    return summary
