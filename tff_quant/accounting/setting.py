"""What a calibrated ε rests on, and the coordinate clip c∞ = k·S/√d.

* `coordinate_clip(clip_norm, dim, multiple)`: the per-coordinate range
  c∞ = k·S/√d of an update of ℓ2 norm at most S sent as d coordinates (the
  RQM/PBM EMNIST setup, k = 1; k > 1 with a rotation, accounted by the ℓ2
  route). The one place it is computed: the training run's privacy plan,
  the factories (`aggregators.mechanism_factory`, `QuantizationFactory`)
  and the calibration's default read it here.
* `CalibratedSetting`: every assumption a calibration's ε rests on (the
  mechanism, c∞, S, d, the schedule, how ε was computed). A factory built
  with `calibrated_for=setting` checks its arguments against it
  (`CalibratedSetting.checked_clip`); `CalibratedSetting.round_accountant`
  is the accountant that reproduces its ε (the one a run with it uses, and
  `Calibration.guarantee`'s).
"""

import dataclasses
import math
from typing import Dict, Optional, Tuple

from tff_quant import mechanisms
from tff_quant.accounting import composition
from tff_quant.accounting import provenance
from tff_quant.common import validation


def coordinate_clip(clip_norm: float, dim: int, multiple: float = 1.0) -> float:
  """c∞ = k·S/√d: the per-coordinate bound of an update of ℓ2 norm <= S.

  With k = 1 a coordinate at c∞ is the rms coordinate of an update at the ℓ2
  clip (the RQM/PBM EMNIST setup, RQM paper Sec. 6.2); k > 1 (with a random
  rotation, few coordinates exceed it) is accounted by the ℓ2 route
  (`RoundAccountant`, docs/privacy.md).

  Args:
    clip_norm: S > 0, the ℓ2 clip of a client's whole update.
    dim: d >= 1, the coordinates each client sends (after any padding).
    multiple: k > 0.

  Returns:
    (k·S)/√d, computed in that order.

  Raises:
    TypeError: a non-number, or a non-integer `dim`.
    ValueError: S or k not finite and > 0, or d < 1 (naming it and the range).
  """
  validation.check_positive('clip_norm', clip_norm)
  validation.check_integer('dim', dim, 1)
  validation.check_positive('coordinate_clip_multiple', multiple)
  return multiple * clip_norm / math.sqrt(dim)


def dropouts(fewest: int, clients_per_round: int) -> Optional[int]:
  """The accountant's `min_clients_per_round` for a cohort of at least
  `fewest` of `clients_per_round`: None where every sampled client
  contributes (the accountant's default, its own analyses kept).

  Args:
    fewest: n_min, the fewest contributing clients.
    clients_per_round: n, the clients sampled.

  Returns:
    `fewest` where it is below n, else None.
  """
  return fewest if fewest < clients_per_round else None


@dataclasses.dataclass(frozen=True)
class CalibratedSetting:
  """Every assumption a calibration's ε rests on: what a factory must match.

  The accountant's ε is a function of the mechanism (name, tunables and the
  coordinate clip c∞), the ℓ2 clip S, the coordinates d each client sends, the
  schedule (rounds, n of N clients a round, the fewest n_min of them whose
  outputs a round's sum may hold, δ) and how it was computed (Rényi orders,
  PLD, the others' inputs). A factory built with `calibrated_for=setting`
  (`aggregators.mechanism_factory`) runs exactly this mechanism, refuses a
  setting that would change its ε, and refuses, before its output is
  released, a round past `rounds` or with a cohort outside [n_min, n]
  (docs/privacy.md, "From calibration to run" and "Dropouts").

  Args:
    mechanism: the registry name.
    tunables: the mechanism's tunables, as sorted (name, value) pairs.
    coordinate_clip: c∞, the per-coordinate range the mechanism was built for.
    l2_clip: S, the ℓ2 clip of a client's update (None: the coordinate route,
      each coordinate moving end to end).
    dim: d, the coordinates each client sends (after any padding).
    rounds, clients_per_round, total_clients, delta: the schedule and δ.
    target_epsilon: the ε asked for.
    epsilon: the ε calibration reported (<= target_epsilon when bound is
      'proved').
    orders: the Rényi orders `epsilon` was computed from.
    use_pld: whether the PLD route was used too.
    others: the other clients' inputs covered ('any' or 'extremes').
    bound: 'proved' (a guarantee) or 'attained' (not a guarantee).
    accountant: the digest of the accountant code that computed `epsilon`
      (`provenance.SOURCE_DIGEST` of the calibrating process); a factory in
      a process running other accountant code refuses the setting.
    min_clients_per_round: n_min, the fewest of a round's clients_per_round
      sampled clients whose outputs its sum may hold (dropouts; `epsilon`
      holds for every cohort from n_min to clients_per_round); None: every
      sampled client's (n_min = clients_per_round).
    use_profile: whether the profile route was used too (absent from
      settings stored before it existed: False).
  """
  mechanism: str
  tunables: Tuple[Tuple[str, object], ...]
  coordinate_clip: float
  l2_clip: Optional[float]
  dim: int
  rounds: int
  clients_per_round: int
  total_clients: int
  delta: float
  target_epsilon: float
  epsilon: float
  orders: Tuple[int, ...]
  use_pld: bool
  others: str
  bound: str
  accountant: str = provenance.SOURCE_DIGEST
  min_clients_per_round: Optional[int] = None
  use_profile: bool = False

  @property
  def smallest_cohort(self) -> int:
    """n_min: the fewest contributing clients a round may have.

    Returns:
      `min_clients_per_round`, or `clients_per_round` where it is None.
    """
    return self.min_clients_per_round or self.clients_per_round

  def params(self) -> Dict[str, object]:
    """The mechanism's tunables as a dict.

    Returns:
      A new dict {tunable name: value} from `tunables`.
    """
    return dict(self.tunables)

  def build_mechanism(self) -> mechanisms.Mechanism:
    """The mechanism this setting describes, built as a factory built with it
    builds it (`aggregators.mechanism_factory`): the registry class at c∞
    with the tunables.

    Returns:
      `registry()[mechanism].for_coordinate_bound(coordinate_clip,
      **tunables)`.
    """
    cls = mechanisms.get(self.mechanism)
    return cls.for_coordinate_bound(self.coordinate_clip,
                                    **cls.complete_params(self.params()))

  def round_accountant(self, mechanism: Optional[mechanisms.Mechanism] = None,
                       smallest_cohort: Optional[int] = None
                       ) -> composition.RoundAccountant:
    """The accountant that computed `epsilon`: the same Rényi orders, ℓ2
    clip, d, schedule, others' inputs and dropout tolerance. Its
    `guarantee(rounds, use_pld=self.use_pld, use_profile=self.use_profile)`
    at the calibrated rounds is the calibrated ε (bound='proved').

    Args:
      mechanism: the mechanism accounted (default `build_mechanism()`; a
        calibration passes the one its search evaluated).
      smallest_cohort: the fewest clients that contributed to any round, in
        [smallest_cohort, clients_per_round] of this setting (default: the
        calibrated minimum): the accountant of the cohorts that occurred (a
        round of m clients is accounted as the sum of m sampled at n/N;
        docs/privacy.md, "Dropouts").

    Returns:
      The `composition.RoundAccountant`.

    Raises:
      ValueError: `smallest_cohort` outside the calibrated range (named,
        with it).
    """
    fewest = self.smallest_cohort
    if smallest_cohort is not None:
      validation.check_integer('smallest_cohort', smallest_cohort, fewest,
                               self.clients_per_round)
      fewest = smallest_cohort
    return composition.RoundAccountant(
        mechanism if mechanism is not None else self.build_mechanism(),
        self.clients_per_round, self.total_clients, self.delta, self.dim,
        self.orders, self.l2_clip, self.others,
        min_clients_per_round=dropouts(fewest, self.clients_per_round))

  def checked_clip(self, name: str, params: Dict[str, object],
                   clip_norm: float, given_clip: Optional[float] = None,
                   multiple: Optional[float] = None) -> float:
    """The calibrated c∞, after checking that a factory's arguments leave
    this setting's ε as it is (`aggregators.mechanism_factory` with
    `calibrated_for`).

    Args:
      name: the registry name the factory runs.
      params: its complete tunables.
      clip_norm: its ℓ2 clip (at most `l2_clip`).
      given_clip: its `coordinate_clip` (None, or the calibrated c∞).
      multiple: its `coordinate_clip_multiple` k (None, or one with
        `coordinate_clip(clip_norm, dim, k)` = the calibrated c∞).

    Returns:
      `coordinate_clip`, the calibrated c∞.

    Raises:
      ValueError: an attained (not proved) setting, another mechanism,
        accountant code, tunable, c∞ or k, or an ℓ2 clip above the
        calibrated one (naming the argument, its value and the calibrated
        one).
    """
    if self.bound != 'proved':
      raise ValueError(
          f'`calibrated_for` is a bound={self.bound!r} calibration, which is '
          'NOT a privacy guarantee; calibrate with bound=\'proved\' to train.')
    if name != self.mechanism:
      raise ValueError(f'`calibrated_for` calibrated {self.mechanism!r}, not '
                       f'{name!r}.')
    if self.accountant != provenance.SOURCE_DIGEST:
      raise ValueError(
          f'`calibrated_for` was computed by accountant code '
          f'{self.accountant}, and this process runs {provenance.SOURCE_DIGEST}'
          f': its ε ({self.epsilon:.6g}) is not what this code proves for '
          'the mechanism. Calibrate again here (accounting.calibrate), or '
          're-account the mechanism (accounting.training_guarantee) and build '
          'the factory without `calibrated_for`.')
    calibrated = self.params()
    changed = {key: (params[key], calibrated[key]) for key in params
               if params[key] != calibrated.get(key)}
    if changed:
      raise ValueError(
          'these parameters differ from the calibrated ones (given, calibrated): '
          f'{changed}; the calibrated ε ({self.epsilon:.6g}) would not hold. '
          'Pass the calibration\'s params unchanged, or calibrate again.')
    c = self.coordinate_clip
    if given_clip is not None and not math.isclose(given_clip, c,
                                                   rel_tol=1e-9):
      raise ValueError(f'`coordinate_clip`={given_clip:.6g}, but the mechanism '
                       f'was calibrated for c∞ = {c:.6g}: omit it.')
    if multiple is not None:
      implied = coordinate_clip(clip_norm, self.dim, multiple)
      if not math.isclose(implied, c, rel_tol=1e-9):
        raise ValueError(
            f'`coordinate_clip_multiple`={multiple:g} gives c∞ = {implied:.6g} at '
            f'the calibrated d = {self.dim}, but the mechanism was calibrated '
            f'for c∞ = {c:.6g}: omit it (the calibrated c∞ is used).')
    if self.l2_clip is not None and clip_norm > self.l2_clip * (1 + 1e-12):
      raise ValueError(f'`clip_norm`={clip_norm:g} exceeds the ℓ2 clip '
                       f'{self.l2_clip:g} the mechanism was calibrated for: the '
                       'calibrated ε would not hold. Pass clip_norm <= '
                       f'{self.l2_clip:g}.')
    return c

  def describe(self) -> str:
    """One line: the mechanism, c∞, S, d and the schedule it was calibrated for.

    Returns:
      The line, ending with the ε reached and the target.
    """
    l2 = 'none (coordinate route)' if self.l2_clip is None else f'{self.l2_clip:g}'
    fewest = ('' if self.smallest_cohort == self.clients_per_round else
              f' (at least {self.smallest_cohort} contributing)')
    return (f'{self.mechanism} {self.params()} at c∞ = {self.coordinate_clip:.6g}, '
            f'ℓ2 clip {l2}, d = {self.dim}, {self.rounds} rounds of '
            f'{self.clients_per_round} of {self.total_clients} clients{fewest}, '
            f'δ = {self.delta:.3g}: ε = {self.epsilon:.6g} ({self.bound}) for a '
            f'target of {self.target_epsilon:g}')
