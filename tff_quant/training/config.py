"""What defines one federated run: `TrainingConfig`, checked and never changed.

A config is frozen: `TrainingConfig.validate` returns a checked copy with
the mechanism's parameters completed, `with_default_target` one with the
default target ε, and the run's privacy plan (`privacy_plan.make`) one with
the calibrated parameters; the config a caller passes is left as it was.
`config_record` is what config.json and summary.json hold of it.
"""

import dataclasses
from typing import Dict, Optional

import numpy as np

from tff_quant import mechanisms, models
from tff_quant.aggregators import peers
from tff_quant.common import validation

NO_PRIVACY = 'none'   # the clipped plain mean (noise-free baseline)
PEER_PARAMS = ('noise_multiplier', 'bits')   # mechanism_params of a TFF peer
#: The whole-model ε a private run without a target or privacy parameters is
#: calibrated to (`with_default_target`).
DEFAULT_TARGET_EPSILON = 10.0
SERVER_LR_SCHEDULES = ('constant', 'cosine')


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """Hyper-parameters of one federated run (defaults: the RQM paper's EMNIST setup).

  `mechanism` is a name in `tff_quant.mechanisms.registry()`, 'none', or one
  of TFF's own DP aggregators (`aggregators.peers.PEERS`: 'gaussian',
  'tff_skellam', 'tff_dgauss'; their params noise_multiplier and bits);
  `mechanism_params` its tunables (omitted ones at their defaults). With
  `target_epsilon`, the class's calibrated parameters are set at start so the
  whole run meets (target_epsilon, δ) for the whole model (ℓ2 route when
  coordinate_clip_multiple > 1); the others stay as given. Frozen: a changed
  config is a new one (`dataclasses.replace`).
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
  # Wire budget (docs/bits.md): b bits per coordinate in the secure sum's
  # field (SecureModularSumFactory(2^b), `mechanisms.wire`) for a bounded
  # registry mechanism. None: the exact level sum; then left out of
  # config.json.
  wire_bits: Optional[int] = None
  # Account (and calibrate) with the profile route too (docs/privacy.md,
  # "Gaussian domination"): the round's privacy profile sampled and
  # composed as a PLD. False: left out of config.json.
  use_profile: bool = False

  def validate(self) -> 'TrainingConfig':
    """The config, checked, with its mechanism's parameters completed.

    Returns:
      A new TrainingConfig: this one with `mechanism_params` validated and
      every omitted tunable at its default (a peer's: `peer_params`); this
      one is not changed.

    Raises:
      TypeError: a field of the wrong type.
      ValueError: a field out of range, naming it and the allowed range.
    """
    names = (NO_PRIVACY,) + tuple(mechanisms.registry()) + peers.PEERS
    validation.check_one_of('mechanism', self.mechanism, names)
    if self.is_peer:
      params = peer_params(self.mechanism, self.mechanism_params,
                           self.target_epsilon is not None)
    elif self.mechanism != NO_PRIVACY:
      params = mechanisms.get(self.mechanism).complete_params(
          self.mechanism_params)
    elif self.mechanism_params:
      raise ValueError('`mechanism_params` must be empty for mechanism '
                       f'{NO_PRIVACY!r}, got {self.mechanism_params}.')
    else:
      params = {}
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
    validation.check_bool('use_profile', self.use_profile)
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
    if self.wire_bits is not None:
      from tff_quant.mechanisms import wire  # pylint: disable=g-import-not-at-top
      validation.check_integer('wire_bits', self.wire_bits, 1,
                               wire.MAX_WIRE_BITS)
      if (self.mechanism == NO_PRIVACY or self.is_peer or
          mechanisms.get(self.mechanism).modulus is not None):
        raise ValueError(
            f'`wire_bits` applies to a bounded registry mechanism, not '
            f'{self.mechanism!r} (a modular sum or TFF peer sets its field '
            'by its own bits).')
    return dataclasses.replace(self, mechanism_params=params)

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
    """δ: `delta`, or 1 / total_clients where it is None."""
    return self.delta if self.delta is not None else 1.0 / self.total_clients


def with_default_target(config: TrainingConfig) -> TrainingConfig:
  """`config` with target_epsilon = DEFAULT_TARGET_EPSILON where a private
  mechanism has neither a target nor any of the parameters calibration would
  choose (a DP run's defaults must be private).

  Args:
    config: the run's config (not changed).

  Returns:
    A new config with the default target, or `config` itself where it keeps
    its own (a target, a chosen parameter, or no privacy).
  """
  if config.target_epsilon is not None or config.mechanism == NO_PRIVACY:
    return config
  if config.is_peer:
    chosen = ('noise_multiplier',)
  else:
    chosen = mechanisms.get(config.mechanism).CALIBRATED
  if any(name in (config.mechanism_params or {}) for name in chosen):
    return config
  return dataclasses.replace(config, target_epsilon=DEFAULT_TARGET_EPSILON)


def peer_params(name: str, params, calibrated: bool) -> Dict[str, object]:
  """A TFF peer's parameters, checked: noise_multiplier (> 0; set by
  calibration when `calibrated`) and bits (tff_* only, default 16).

  Args:
    name: one of `aggregators.peers.PEERS`.
    params: the given parameters (a mapping, or None).
    calibrated: whether a target ε will set the noise multiplier.

  Returns:
    A new dict of the checked parameters.

  Raises:
    ValueError: an unknown parameter, `bits` for the central Gaussian, a
      value out of range, or no noise multiplier and no target.
  """
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


def config_record(config: TrainingConfig) -> Dict[str, object]:
  """What defines a run (config.json, summary.json).

  Args:
    config: the run's config.

  Returns:
    The config's fields as a dict, without those added later
    (server_momentum, validation_fraction, server_lr_schedule,
    min_clients_per_round, wire_bits, use_profile) where they hold their
    defaults, so a run of before they existed resumes.
  """
  record = dataclasses.asdict(config)
  for name in ('server_momentum', 'validation_fraction', 'use_profile'):
    if not record[name]:
      del record[name]
  if record['server_lr_schedule'] == 'constant':
    del record['server_lr_schedule']
  for name in ('min_clients_per_round', 'wire_bits'):
    if record[name] is None:
      del record[name]
  return record


def check_packing(config: TrainingConfig, clients_per_slot: Optional[int]
                  ) -> Optional[int]:
  """`clients_per_slot`, checked without TensorFlow: None or 0 (automatic),
  else K >= 1 dividing clients_per_round (every mechanism and peer takes
  packed clients).

  Args:
    config: the run's config.
    clients_per_slot: None, 0, or K.

  Returns:
    None (automatic packing) or K.

  Raises:
    TypeError: not an integer.
    ValueError: negative, or not a divisor of clients_per_round.
  """
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
