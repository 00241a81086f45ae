"""One run's privacy plan, made once, before TFF builds anything.

`make(config, num_params)` takes d from the model (the coordinates a client
sends: padded to 2^m where a registry mechanism rotates), then calibrates
the mechanism to the config's target ε (or takes the given parameters, or
calibrates / takes a TFF peer's noise), and returns one `PrivacyPlan`: the
config as it runs (the calibrated parameters set), d, the coordinate clip
c∞ (`accounting.setting.coordinate_clip`), the mechanism with its
`CalibratedSetting` or the TFF peer, and the accountant. The aggregation
factory (`federated_training.build_aggregator`), each round's ε and the
summary all read the plan; nothing is learned back from the built process
(`federated_training.build_process` only checks that the factory built the
mechanism and d the plan accounts).

A calibrated run is accounted as its calibration was
(`CalibratedSetting.round_accountant`: the same orders, routes, ℓ2 clip, d,
schedule and dropout tolerance), so it reports the ε calibration proved,
and its factory enforces that setting (`aggregators.mechanism_factory(...,
calibrated_for=...)`). The calibration is kept in the run's folder
(`PrivacyPlan.keep`, CALIBRATION_FILE) under its `calibration_key`, so the
same command resumes it at once (`make(..., stored_in=run_dir)`).

A binary may make the plan before TensorFlow starts (d counted from the
model's layer shapes, `models.param_count`), so that a setting without
privacy, a target out of reach or a wire budget too small is refused first,
and hand it to `federated_training.run(plan=...)`, which checks it was made
for that run (`PrivacyPlan.check_made_for`) instead of making it again.
"""

import collections
import dataclasses
import functools
import json
import math
import os
import pickle
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

from tff_quant import accounting, aggregators, mechanisms
from tff_quant.accounting import setting as setting_lib
from tff_quant.aggregators import peers
from tff_quant.common import dims
from tff_quant.training import config as config_lib

#: A calibrated run's calibration, kept so that the same command resumes it
#: at once (`stored_calibration`).
CALIBRATION_FILE = 'calibration.pkl'


@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
  """What a run's privacy rests on, fixed before its process is built.

  Args:
    config: the config as it runs: validated, its `mechanism_params` complete
      and, where calibrated, the calibrated ones (a peer's noise multiplier).
    dim: d, the coordinates each client sends: a registry mechanism's after
      any padding (`common.dims.sent_dim`), else the model's parameters.
    mechanism: the registry mechanism every client encodes with (None for a
      peer or 'none').
    peer: the TFF peer (`aggregators.peers.Peer`), or None.
    coordinate_clip: c∞ of `mechanism` (None without one).
    calibration: the `accounting.Calibration` a target ε gave (None: the
      parameters run as given).
    calibration_key: what `calibration` depends on (`calibration_key`).
    request: (config, num_params) as `make` was given them (the config
      validated): what a plan made beforehand is checked against
      (`check_made_for`).
  """
  config: config_lib.TrainingConfig
  dim: int
  mechanism: Optional[mechanisms.Mechanism] = None
  peer: Optional[peers.Peer] = None
  coordinate_clip: Optional[float] = None
  calibration: Optional[accounting.Calibration] = None
  calibration_key: Optional[Dict[str, object]] = None
  request: Optional[Tuple[config_lib.TrainingConfig, int]] = None

  def check_made_for(self, config: config_lib.TrainingConfig,
                     num_params: int) -> None:
    """Refuses to serve a run other than the one it was made for.

    Args:
      config: the run's config.
      num_params: the run's model's trainable parameters.

    Raises:
      ValueError: the plan was not made by `make(config, num_params)`.
    """
    if self.request != (config.validate(), num_params):
      made = ('by hand' if self.request is None else
              f'for {self.request[1]} parameters and {self.request[0]}')
      raise ValueError(f'This privacy plan was made {made}, not for '
                       f'{num_params} parameters and {config}: make it for '
                       'the run (`privacy_plan.make`).')

  @property
  def setting(self) -> Optional[accounting.CalibratedSetting]:
    """The `CalibratedSetting` the factory enforces (None: not calibrated)."""
    return None if self.calibration is None else self.calibration.setting

  @property
  def private(self) -> bool:
    """False for the noise-free baseline ('none')."""
    return self.mechanism is not None or self.peer is not None

  @property
  def shown(self):
    """The mechanism or peer, for the run's log (None for 'none')."""
    return self.mechanism or self.peer

  @property
  def bits_per_client(self) -> int:
    """Bits a client's message has per round: the mechanism's levels
    (⌈log2 L⌉·d), a peer's (`peer_bits_per_client`), or 32-bit floats."""
    if self.mechanism is not None:
      return self.mechanism.bits_per_coordinate * self.dim
    if self.peer is not None:
      return peer_bits_per_client(self.peer)
    return 32 * self.dim

  @functools.cached_property
  def accountant(self) -> Optional[accounting.RoundAccountant]:
    """The run's whole-model accountant (None for 'none'): the calibration's
    (`CalibratedSetting.round_accountant`), the peer's (`Peer.accountant`),
    or, for parameters given, the registry mechanism's at the default
    orders with the ℓ2 clip.

    Raises:
      ValueError: a mechanism whose per-round Rényi divergence is infinite
        at every order (ε = inf).
    """
    config = self.config
    if self.peer is not None:
      return self.peer.accountant(config.total_clients, config.target_delta)
    if self.mechanism is None:
      return None
    if self.setting is not None:
      acct = self.setting.round_accountant(self.mechanism)
    else:
      acct = accounting.RoundAccountant(
          self.mechanism, config.clients_per_round, config.total_clients,
          config.target_delta, self.dim, l2_clip=config.clip_norm,
          min_clients_per_round=config.min_clients_per_round)
    if not acct.gives_privacy:
      raise ValueError(f'{self.mechanism} gives no privacy: its per-round '
                       'Rényi divergence is infinite at every order (ε = inf). '
                       'Change its parameters.')
    return acct

  @functools.cached_property
  def coordinate_accountant(self) -> Optional[accounting.RoundAccountant]:
    """The papers' scalar figure: one coordinate, the others at ±c (their
    setting); None without a registry mechanism."""
    if self.mechanism is None:
      return None
    config = self.config
    return accounting.RoundAccountant(self.mechanism, config.clients_per_round,
                                      config.total_clients,
                                      config.target_delta, 1, others='extremes')

  def epsilon(self, rounds: int):
    """(whole-model ε, per-coordinate ε) after `rounds` rounds, RDP route.

    Args:
      rounds: T >= 1.

    Returns:
      (inf, inf) for 'none'; a peer's per-coordinate ε is nan (an ℓ2
      mechanism has no scalar figure).
    """
    if not self.private:
      return math.inf, math.inf
    whole = self.accountant.epsilon_rdp(rounds)[0]
    if self.coordinate_accountant is None:
      return whole, math.nan
    return whole, self.coordinate_accountant.epsilon_rdp(rounds)[0]

  def summary(self, rounds_done: int, cohorts: Sequence[int] = ()
              ) -> Dict[str, object]:
    """The privacy part of summary.json after `rounds_done` rounds.

    A calibrated run's guarantee is computed as calibration computed its ε
    (its orders and routes), so the ε printed is the one calibration
    reported; else PLD where its grid fits, else why.

    Args:
      rounds_done: T >= 1.
      cohorts: the numbers of contributing clients the rounds had; with a
        dropout tolerance, the ε for the smallest that occurred is added
        (`Calibration.guarantee`).

    Returns:
      An ordered dict: mechanism, epsilon (and its route, RDP and PLD ends,
      assumptions, attained end), bits; for a TFF peer also its ε in the
      papers' convention (`epsilon_papers_convention`, with its label
      `papers_convention`: not a guarantee of this run); 'none' gives
      mechanism and epsilon = inf only.
    """
    out = collections.OrderedDict()
    if not self.private:
      out.update(mechanism='none (clipped mean, no privacy)', epsilon=math.inf)
      return out
    config = self.config
    use_pld = self.setting is None or self.setting.use_pld
    use_profile = (config.use_profile if self.setting is None
                   else self.setting.use_profile)
    g = self.accountant.guarantee(rounds_done, use_pld=use_pld,
                                  use_profile=use_profile)
    if cohorts:
      out['cohort_sizes'] = list(cohorts)
    if (config.min_clients_per_round is not None and cohorts
        and self.calibration is not None):
      # The calibrated ε holds for every cohort down to the minimum; the
      # cohorts that occurred may allow less (docs/privacy.md, "Dropouts").
      out['epsilon_for_cohorts_that_occurred'] = (
          self.calibration.guarantee(rounds_done,
                                     smallest_cohort=min(cohorts)).epsilon)
    if not use_pld:
      g = dataclasses.replace(g, pld_note=(
          'PLD route not used: a calibrated run is accounted as its '
          'calibration was, Calibration.guarantee'))
    out.update(mechanism=repr(self.shown), epsilon=g.epsilon,
               epsilon_route=g.route, epsilon_rdp=g.epsilon_rdp,
               epsilon_pld=g.epsilon_pld, pld_note=g.pld_note,
               privacy_assumptions=g.assumptions,
               epsilon_attained=g.epsilon_attained,
               attained_inputs=g.attained_inputs,
               accountant=accounting.provenance.SOURCE_DIGEST)
    mech = self.mechanism
    if mech is not None:
      field_bits = (config.wire_bits if config.wire_bits is not None else
                    aggregators.secure_sum_bits(
                        config.clients_per_round, mech.num_levels,
                        mech.modulus))
      out.update(
          epsilon_per_coordinate=self.coordinate_accountant.epsilon_rdp(
              rounds_done)[0],
          bits_per_coordinate=mech.bits_per_coordinate,
          bits_per_client_per_round=self.bits_per_client,
          secure_sum_bits=field_bits,
          upload_bits_per_client_per_round=field_bits * self.dim)
    else:
      # Beside our guarantee, for comparison with published results only
      # (docs/privacy.md, "Comparing with published results").
      papers, _ = accounting.conventions.papers_epsilon_peer(
          self.peer, config.total_clients, rounds_done, config.target_delta)
      out.update(epsilon_per_coordinate=math.nan,
                 bits_per_coordinate=self.peer.bits_per_coordinate,
                 bits_per_client_per_round=self.bits_per_client,
                 epsilon_papers_convention=papers,
                 papers_convention=accounting.conventions.LABEL)
    return out

  def keep(self, run_dir: str) -> None:
    """Writes the calibration (if any) to run_dir's CALIBRATION_FILE, under
    its `calibration_key` (`stored_calibration` reads it back).

    Args:
      run_dir: the run's folder (existing).
    """
    if self.calibration is None:
      return
    with open(os.path.join(run_dir, CALIBRATION_FILE), 'wb') as f:
      pickle.dump(dict(key=self.calibration_key, calibration=self.calibration),
                  f)


def make(config: config_lib.TrainingConfig, num_params: int,
         log: Callable[[str], None] = print,
         stored_in: Optional[str] = None) -> PrivacyPlan:
  """The run's `PrivacyPlan`: d from the model, then calibrate or take the
  parameters given.

  Args:
    config: the run's config (not changed; validated here).
    num_params: the model's trainable parameters (`models.num_params`).
    log: where the calibration's progress and result lines go.
    stored_in: a run folder whose CALIBRATION_FILE may hold this setting's
      calibration (`stored_calibration`), used as it is; None: calibrate.

  Returns:
    The plan.

  Raises:
    TypeError, ValueError: a bad config (`TrainingConfig.validate`),
      parameters that give no privacy (`aggregators.refuse_no_privacy`),
      or a target out of reach (the calibration's message).
  """
  config = config.validate()
  request = (config, num_params)
  if config.mechanism == config_lib.NO_PRIVACY:
    return PrivacyPlan(config, num_params, request=request)
  if config.is_peer:
    peer = build_peer(config, num_params, log)
    return PrivacyPlan(dataclasses.replace(config, mechanism_params=dict(
        config.mechanism_params, noise_multiplier=peer.noise_multiplier)),
                       num_params, peer=peer, request=request)
  cls = mechanisms.get(config.mechanism)
  dim = dims.sent_dim(num_params, config.rotate)
  clip = setting_lib.coordinate_clip(config.clip_norm, dim,
                                     config.coordinate_clip_multiple)
  given = cls.for_coordinate_bound(clip, **config.mechanism_params)
  # Parameters given that give no privacy are refused first, before any
  # calibration (whether or not it would choose them anew).
  aggregators.refuse_no_privacy(given)
  if config.target_epsilon is None:
    return PrivacyPlan(config, dim, given, coordinate_clip=clip,
                       request=request)
  key = calibration_key(config, dim)
  stored = stored_calibration(stored_in, key) if stored_in else None
  calibration = _calibrate(config, dim, clip, log, stored)
  setting = calibration.setting
  return PrivacyPlan(
      dataclasses.replace(config, mechanism_params=cls.complete_params(
          calibration.tunables)),
      dim, setting.build_mechanism(), coordinate_clip=setting.coordinate_clip,
      calibration=calibration, calibration_key=key, request=request)


def calibration_key(config: config_lib.TrainingConfig,
                    dim: int) -> Dict[str, object]:
  """What a calibration of `config` at model size `dim` depends on.

  Args:
    config: a validated config with a registry mechanism.
    dim: d.

  Returns:
    The run's config record with only the mechanism parameters calibration
    does not set, d, and the accountant's code
    (`accounting.provenance.SOURCE_DIGEST`), as JSON values.
  """
  cls = mechanisms.get(config.mechanism)
  record = config_lib.config_record(config)
  record['mechanism_params'] = {k: v for k, v in config.mechanism_params.items()
                                if k not in cls.CALIBRATED}
  return json.loads(json.dumps(dict(config=record, dim=dim,
                                    accountant=accounting.provenance.SOURCE_DIGEST),
                               sort_keys=True, default=float))


def stored_calibration(run_dir: str, key: Dict[str, object]):
  """The calibration run_dir's CALIBRATION_FILE holds for `key`.

  Args:
    run_dir: a run folder.
    key: a `calibration_key`.

  Returns:
    The stored `accounting.Calibration` where the file holds one for this
    key (the same setting, made by the same accountant code), else None.
  """
  path = os.path.join(run_dir, CALIBRATION_FILE)
  if not os.path.exists(path):
    return None
  with open(path, 'rb') as f:
    stored = pickle.load(f)   # the run's own folder, written by `keep`
  return stored['calibration'] if stored.get('key') == key else None


def _calibrate(config: config_lib.TrainingConfig, dim: int, clip: float, log,
               stored=None) -> accounting.Calibration:
  """The calibration for config.target_epsilon (`stored` where given).

  The whole run (rounds, clients_per_round of total_clients, δ) at model
  size `dim` and c∞ = `clip` (k·clip_norm/√d), meets the target with the smallest
  debiased error (signal-aware: `mechanisms.utility`) over the class's
  calibrated parameters, within the bits per coordinate the given
  parameters use; the given ones stay fixed. ValueError when the target is
  out of reach.
  """
  cls = mechanisms.get(config.mechanism)
  fixed = {k: v for k, v in config.mechanism_params.items()
           if k not in cls.CALIBRATED}
  # The bit budget the given (or default) parameters use.
  bits = cls.for_coordinate_bound(
      1.0, **cls.complete_params(config.mechanism_params)).bits_per_coordinate
  t0 = time.time()
  schedule = (config.target_delta, config.rounds, config.clients_per_round,
              config.total_clients, dim)
  common = dict(l2_clip=config.clip_norm, coordinate_clip=clip, progress=log,
                min_clients_per_round=config.min_clients_per_round,
                use_profile=config.use_profile)
  if stored is not None:
    report = stored
    log('Calibration reused: this run\'s folder holds one for the same '
        'setting, made by the same accountant code.')
  elif config.wire_bits is not None:   # the level count chosen under b too
    found = accounting.calibration.calibrate_for_wire_bits(
        config.mechanism, config.wire_bits, config.target_epsilon, *schedule,
        compare_gaussian=True, **common,
        **{k: v for k, v in fixed.items() if k not in _LEVEL_COUNTS})
    report = found.calibration
    log(f'Wire budget {config.wire_bits} bits: {found.level_bits} level bits '
        f'chosen (proved wrap probability {found.utility.wrap_probability:.3g}'
        ' per coordinate and round; ' + '; '.join(
            f'{c.level_bits} level bits: {c.why or "fits"}'
            for c in found.candidates) + ')')
  else:
    report = accounting.calibration_report(
        config.mechanism, config.target_epsilon, *schedule, bits=bits,
        **common, **fixed)
  interval = (f'ε ∈ [{report.epsilon_attained:.4g}, {report.epsilon:.4g}] '
              '[attained, proved]' if report.epsilon_attained is not None
              else f'ε = {report.epsilon:.4g}')
  log(f'Calibrated {config.mechanism} to whole-model ε <= {config.target_epsilon:g} '
      f'(δ={config.target_delta:.3g}, {config.rounds} rounds): {report.mechanism}; '
      f'{interval}; debiased error {report.debiased_error:.3g} per coordinate = '
      f'{report.ratio_to_gaussian:.3g}× the Gaussian\'s at the same ε, the '
      f'Gaussian by its best route ({report.gaussian_route}'
      + ('' if report.ratio_to_gaussian_same_route == report.ratio_to_gaussian
         else f'; {report.ratio_to_gaussian_same_route:.3g}× the Gaussian '
              'held to this route') +
      f') (plain MSE {report.mse:.3g}) ({time.time() - t0:.0f} s)')
  return report


#: The tunables that set a mechanism's level count: chosen by the wire-budget
#: calibration (`calibrate_for_wire_bits`), not fixed from the config.
_LEVEL_COUNTS = ('num_levels', 'bits')


def build_peer(config: config_lib.TrainingConfig, dim: int,
               log: Callable[[str], None] = print) -> peers.Peer:
  """The TFF peer of `config`: calibrated to config.target_epsilon (ℓ2
  route) when given, else at its noise multiplier.

  Args:
    config: a validated config with a peer mechanism.
    dim: the model's parameters.
    log: where the calibration's line goes.

  Returns:
    The `aggregators.peers.Peer`.

  Raises:
    ValueError: a target out of reach (`peers.calibrate`).
  """
  bits = config.mechanism_params.get('bits')
  if config.target_epsilon is not None:
    t0 = time.time()
    peer = _calibrated_peer(config.mechanism, config.target_epsilon,
                            config.target_delta, config.rounds,
                            config.clients_per_round, config.total_clients,
                            dim, config.clip_norm, bits,
                            use_profile=config.use_profile)
    log(f'Calibrated {peer} to whole-model ε <= {config.target_epsilon:g} '
        f'(δ={config.target_delta:.3g}, {config.rounds} rounds; '
        f'{time.time() - t0:.0f} s)')
    return peer
  return peers.Peer(config.mechanism, config.mechanism_params['noise_multiplier'],
                    config.clip_norm, config.clients_per_round, dim, bits)


_PEER_CALIBRATIONS = {}


def _calibrated_peer(*args, use_profile: bool = False) -> peers.Peer:
  """peers.calibrate(*args, use_profile=...), computed once per process for
  the same arguments (a tuning's runs share them; a bisection takes ~5-10
  s), a fresh copy each time."""
  key = args + (use_profile,)
  if key not in _PEER_CALIBRATIONS:
    _PEER_CALIBRATIONS[key] = peers.calibrate(*args, use_profile=use_profile)
  return dataclasses.replace(_PEER_CALIBRATIONS[key])


def peer_bits_per_client(peer: peers.Peer) -> int:
  """Bits a client uploads per round: 32-bit floats (central Gaussian) or
  `bits` per coordinate of the rotated, padded vector (tff_*).

  Args:
    peer: the TFF peer.

  Returns:
    The bits.
  """
  if peer.name == 'gaussian':
    return 32 * peer.dim
  return peer.bits * peer.padded_dim
