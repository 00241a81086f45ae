"""The answer of a calibration: `calibrate`, `calibration_report`, `Calibration`.

`calibration_report` validates its arguments, runs the grid scan
(`scan.Scan`) against the ε oracle (`oracle.Epsilon`), and returns the
winner with its ε, errors, the ε its named inputs attain, and the
continuous Gaussian calibrated to the same target. A modular sum refused
for its modulus is calibrated again at more bits (`_fewest_bits`), so the
error names the fewest that carry the signal.
"""

import dataclasses
import functools
import math
import warnings
from typing import Callable, Dict, Optional, Sequence, Union

from tff_quant import mechanisms
from tff_quant.accounting import composition
from tff_quant.accounting import secure_sum
from tff_quant.accounting import setting as setting_lib
from tff_quant.accounting.calibration import interface
from tff_quant.accounting.calibration import oracle
from tff_quant.accounting.calibration import refusals
from tff_quant.accounting.calibration import scan as scan_lib
from tff_quant.accounting.calibration.oracle import FAST_ORDERS
from tff_quant.accounting.setting import CalibratedSetting
from tff_quant.common import validation

_RTOL = 2e-3              # the root search stops at this relative width


@dataclasses.dataclass(frozen=True)
class Limits:
  """The limits a calibration runs under (passed in, never patched).

  Attributes:
    search: the root search's `interface.SearchLimits`.
    progress_after: seconds a calibration runs before `progress` is called.
    max_modular_bits: the widest modulus tried (TFF's
      DistributedDpSumFactory allows bits <= 22).
    confirm_support: `_fewest_bits` confirms a bit width by calibrating
      there only while the exact law of the clients' noise sum has at most
      this many points (n·2^bits; n = 100 at 11 bits: 2e5; the cost of a
      confirmation: docs/performance.md).
    accountant: the `secure_sum.Limits` the accountant's target-pair search
      runs under (over its cost a grid point is refused).
  """
  search: interface.SearchLimits = interface.SearchLimits()
  progress_after: float = scan_lib.PROGRESS_AFTER
  max_modular_bits: int = 22
  confirm_support: int = 2**20
  accountant: secure_sum.Limits = secure_sum.DEFAULT_LIMITS


#: The key of `Calibration.params` that carries its `CalibratedSetting`.
CALIBRATED_FOR = 'calibrated_for'


@dataclasses.dataclass
class Calibration:
  """A calibrated mechanism and what it costs in accuracy next to the Gaussian.

  Args:
    mechanism: the registry mechanism meeting the target and carrying the
      signal with the smallest debiased error among the candidates searched.
    params: the keyword arguments of the mechanism's factory that rebuild it
      and nothing else: its tunables plus `calibrated_for` (the
      `CalibratedSetting`), so `aggregators.rqm_factory(clip, **cal.params)`
      runs this mechanism or refuses (`aggregators.mechanism_factory`).
      `tunables` holds the tunables alone.
    epsilon: its whole-run ε (RDP route) at `delta`; <= target_epsilon. With
      bound='attained', its attained ε: NOT a guarantee (`bound`).
    target_epsilon, delta: the target.
    mse: plain worst-case mean squared error per coordinate of the decoded
      mean of clients_per_round clients sharing any input in the range.
    gaussian: the continuous Gaussian calibrated to the same target and
      schedule by its own best sound accounting (None when not asked for):
      the least noise of WBK19 Thm 27 (the RDP route) and its exact profile
      sampled and composed (the profile route), whichever route this
      mechanism was calibrated on, so no route's looser bound flatters a
      mechanism; gaussian_mse its MSE, which is also its debiased error
      (slope 1).
    ratio_to_gaussian: debiased_error / gaussian_mse.
    gaussian_route: which route gave `gaussian` ('rdp' or 'profile').
    ratio_to_gaussian_same_route: debiased_error over the Gaussian's on this
      calibration's own route (equal to ratio_to_gaussian where that route
      is the Gaussian's best; above it, the ratio to a Gaussian held to the
      same accounting route, not to the Gaussian at its best).
    candidates: grid points searched.
    refused: grid points not evaluated because one evaluation's estimated cost
      exceeds `secure_sum.Limits.max_operations` (the optimum may lie among
      them).
    pruned: grid points skipped after one ε evaluation: at the least private
      value whose error beats the incumbent's, ε already missed the target.
    assumptions: the chosen mechanism's guarantee text (`Guarantee.assumptions`).
    epsilon_attained: the lower end of ε ∈ [attained, proved]: the same
      route's ε from the divergences named inputs attain (`accounting.attained`).
      Not a lower bound on the true ε (WBK19 and the RDP conversion are
      upper bounds both share). None with the PLD route.
    attained_inputs: the inputs attaining it (at the order of its ε).
    orders: the Rényi orders `epsilon` was computed from: an accountant given
      these reproduces it (with all orders it may go over
      `secure_sum.Limits.max_operations` and fall back to a looser sub-sum).
    debiased_error: what calibration minimises: the worst Var/slope² per
      coordinate of the decoded mean of n clients sharing an input |x| <=
      signal_bound (`Mechanism.signal_utility(n, a).error`).
    slope: the least slope d E[decoded mean]/dx over that range (1: unbiased).
    signal_bound: a: ℓ2 clip/√d on the ℓ2 route, else the coordinate clip.
    mse_ratio_to_gaussian: mse / gaussian_mse.
    unusable: grid points that met the target but were refused for not
      carrying the signal (each with `why`).
    bound: which ε met the target: 'proved' or 'attained' (NOT a guarantee;
      `epsilon` and `epsilon_attained` are then both the attained ε, and
      `assumptions` is `ATTAINED_NOTE`).
    setting: every assumption `epsilon` rests on (`CalibratedSetting`); None
      only for a Calibration built by hand.
  """
  mechanism: object
  params: Dict[str, object]
  epsilon: float
  target_epsilon: float
  delta: float
  mse: float
  gaussian: Optional[object] = None
  gaussian_mse: Optional[float] = None
  ratio_to_gaussian: Optional[float] = None
  gaussian_route: Optional[str] = None
  ratio_to_gaussian_same_route: Optional[float] = None
  candidates: int = 0
  refused: Sequence[Dict[str, object]] = ()
  pruned: int = 0
  assumptions: str = ''
  epsilon_attained: Optional[float] = None
  attained_inputs: str = ''
  orders: Sequence[int] = FAST_ORDERS
  debiased_error: float = math.nan
  slope: float = math.nan
  signal_bound: float = math.nan
  mse_ratio_to_gaussian: Optional[float] = None
  unusable: Sequence[Dict[str, object]] = ()
  bound: str = 'proved'
  setting: Optional[CalibratedSetting] = None

  @property
  def tunables(self) -> Dict[str, object]:
    """The mechanism's tunables (`params` without `calibrated_for`)."""
    return {k: v for k, v in self.params.items() if k != CALIBRATED_FOR}

  def guarantee(self, rounds: Optional[int] = None,
                attained: bool = True,
                smallest_cohort: Optional[int] = None) -> composition.Guarantee:
    """The run's guarantee, computed as calibration computed `epsilon`.

    The same accountant (`CalibratedSetting.round_accountant`, of this
    calibration's mechanism) at the same Rényi orders,
    routes (PLD and profile only if calibration used them), ℓ2 clip, d, schedule and
    others' inputs: at the calibrated rounds and cohorts its `epsilon`
    equals this calibration's (bound='proved').

    Args:
      rounds: rounds run so far (default: the calibrated number).
      attained: also the lower end ε_attained.
      smallest_cohort: the fewest clients that contributed to any round of
        the run, in [setting.smallest_cohort, clients_per_round] (default:
        the calibrated minimum): the ε that holds for the cohorts that
        occurred (a round of m clients is accounted as the sum of m sampled
        at n/N; dropouts depend neither on the data nor on who the client
        is, so conditioning on the cohorts that occurred is sound:
        docs/privacy.md, "Dropouts").

    Returns:
      The `composition.Guarantee`.

    Raises:
      ValueError: a Calibration without a `setting`, rounds < 1, or
        `smallest_cohort` outside the calibrated range (named, with it).
    """
    s = self.setting
    if s is None:
      raise ValueError('This Calibration has no `setting` (not made by '
                       '`calibration_report`): call training_guarantee.')
    return s.round_accountant(self.mechanism, smallest_cohort).guarantee(
        s.rounds if rounds is None else rounds, s.use_pld, attained=attained,
        use_profile=s.use_profile)


def mechanism_for_bits(mechanism: str, clip: float, bits: Optional[int],
                       **params):
  """The registry mechanism at its default parameters, the starting point
  calibration searches from.

  Args:
    mechanism: the registry name.
    clip: c∞.
    bits: bits per coordinate (num_levels = 2^bits unless given; None: the
      defaults).
    **params: parameters given.

  Returns:
    The mechanism.
  """
  cls = mechanisms.get(mechanism)
  return cls.for_coordinate_bound(
      clip, **cls.complete_params(scan_lib.levels_from_bits(cls, params, (),
                                                            bits)))


def calibrate(mechanism: str, epsilon: float, delta: float, rounds: int,
              clients_per_round: int, total_clients: int, dim: int = 1,
              clip: Optional[float] = None,
              tune: Union[None, str, Sequence[str]] = None,
              bits: Optional[int] = None, use_pld: bool = False,
              rtol: float = _RTOL, l2_clip: Optional[float] = None,
              coordinate_clip: Optional[float] = None, others: str = 'any',
              bound: str = 'proved',
              progress: Optional[Callable[[str], None]] = None,
              limits: Limits = Limits(),
              min_clients_per_round: Optional[int] = None,
              use_profile: bool = False, **params):
  """The mechanism `mechanism` calibrated to (ε, δ) for a training run.

  Among the candidates meeting the target that carry the signal, the one
  with the smallest debiased error (package docstring; the search: `scan.py`).

  Args:
    mechanism: a name in `tff_quant.mechanisms.registry(include_central=True)`.
    epsilon: target ε of the whole run, > 0.
    delta: target δ in (0, 1).
    rounds: training rounds.
    clients_per_round: clients sampled (without replacement) per round, n.
    total_clients: population size.
    dim: coordinates each client sends (the accountant's d).
    clip: the per-coordinate bound c∞, the old name of `coordinate_clip`
      (a FutureWarning says so: it is not the factories' ℓ2 `clip_norm`,
      which is `l2_clip` here). Default 1, or l2_clip/√dim when `l2_clip` is
      given.
    tune: the parameter(s) to search; default the class's `calibrated_at`
      the fixed parameters (`CALIBRATED` less any without effect there). The
      last is searched along its `more_private` direction; earlier ones are
      scanned over their `grid` (or the integers within `bits`).
    bits: bits per coordinate: 2^bits levels (unless `num_levels` is given),
      and scanned integers stay within.
    use_pld: also use the PLD route (slower, tighter).
    rtol: relative width at which the root search stops (the grid is scanned
      at `scan.SCAN_RTOL` where wider, the winner searched again to rtol).
    l2_clip: the ℓ2 bound of each update (the ℓ2 route, `vector_rdp`).
    coordinate_clip: c∞ (see `clip`).
    others: 'any' (proved) or 'extremes' (±c); `RoundAccountant`.
    bound: 'proved' (default; a guarantee) or 'attained' (the optimistic
      end, NOT a privacy guarantee; package docstring). RDP route only.
    progress: None, or a callable given a line per grid point once the
      calibration has run `limits.progress_after` seconds.
    limits: the `Limits` it runs under.
    min_clients_per_round: dropout tolerance: n_min in [1, clients_per_round],
      the fewest of a round's sampled clients whose outputs its sum may hold
      (the survivor threshold of secure aggregation). ε then holds for every
      cohort from n_min to clients_per_round: each round is accounted as the
      sum of n_min clients, sampled at n/N, for dropouts that depend neither
      on the data nor on who the client is (docs/privacy.md, "Dropouts";
      refused for BQ, accounted by conditioning). None (default): every
      sampled client contributes.
    use_profile: also use the profile route (`RoundAccountant.
      epsilon_profile`: the round's profile from its RDP curve or a
      dominating Gaussian, amplified by sampling and composed as a PLD);
      the setting records it, so the run recomputes the same ε. The
      Gaussian reference (`calibration_report`) is accounted by its best
      route either way. Not with bound='attained' ... it combines: the attained end uses
      the same routes.
    **params: the other parameters, fixed (defaults for the omitted ones).

  Returns:
    The calibrated `tff_quant.mechanisms.Mechanism`.

  Raises:
    ValueError: unknown mechanism or parameter, bad numbers, a `bound` not
      in `BOUNDS` (or 'attained' with use_pld), or a target no candidate
      reaches (the message names the smallest ε reached and where).
    CannotCarrySignal: candidates reach the target but none carries the
      signal (for a modular sum, the message names the bits it needs).
    AttainedUnavailable: bound='attained' where a candidate's attained ε
      cannot be computed.
  """
  return calibration_report(
      mechanism, epsilon, delta, rounds, clients_per_round, total_clients,
      dim, clip, tune, bits, use_pld, rtol, l2_clip, coordinate_clip,
      compare_gaussian=False, others=others, bound=bound, progress=progress,
      limits=limits, min_clients_per_round=min_clients_per_round,
      use_profile=use_profile, **params).mechanism


def calibration_report(mechanism: str, epsilon: float, delta: float,
                       rounds: int, clients_per_round: int, total_clients: int,
                       dim: int = 1, clip: Optional[float] = None,
                       tune: Union[None, str, Sequence[str]] = None,
                       bits: Optional[int] = None, use_pld: bool = False,
                       rtol: float = _RTOL, l2_clip: Optional[float] = None,
                       coordinate_clip: Optional[float] = None,
                       compare_gaussian: bool = True, others: str = 'any',
                       bound: str = 'proved',
                       progress: Optional[Callable[[str], None]] = None,
                       limits: Limits = Limits(),
                       min_clients_per_round: Optional[int] = None,
                       use_profile: bool = False,
                       **params) -> Calibration:
  """`calibrate`, returning a `Calibration`.

  The mechanism, its ε, debiased error, slope and plain MSE, and (with
  `compare_gaussian`) the continuous Gaussian calibrated to the same target
  and both ratios. A modular sum refused at `bits` (`CannotCarrySignal`) is
  calibrated again at more bits, from the lower bound its refusal proves up
  to `limits.max_modular_bits`, and the error names the fewest bits that
  carry the signal and what they give.

  Args:
    mechanism, epsilon, delta, rounds, clients_per_round, total_clients,
      dim, clip, tune, bits, use_pld, rtol, l2_clip, coordinate_clip,
      others, bound, progress, limits, min_clients_per_round, use_profile,
      **params: as for `calibrate`.
    compare_gaussian: also calibrate the continuous Gaussian, by its best
      sound route (the lesser noise of its RDP and profile routes; on the
      RDP route this is a second calibration, a few seconds, once a
      setting in a process).

  Returns:
    The `Calibration`.

  Raises:
    ValueError, CannotCarrySignal, AttainedUnavailable: as `calibrate`.
  """
  args = dict(mechanism=mechanism, epsilon=epsilon, delta=delta, rounds=rounds,
              clients_per_round=clients_per_round, total_clients=total_clients,
              dim=dim, clip=clip, tune=tune, bits=bits, use_pld=use_pld,
              rtol=rtol, l2_clip=l2_clip, coordinate_clip=coordinate_clip,
              compare_gaussian=compare_gaussian, others=others, bound=bound,
              progress=progress, limits=limits,
              min_clients_per_round=min_clients_per_round,
              use_profile=use_profile, **params)
  try:
    return _calibration_report(**args)
  except refusals.CannotCarrySignal as err:
    if err.bits_needed is None or bits is None or 'num_levels' in params:
      raise
    raise _fewest_bits(err, args) from None


def _fewest_bits(err, args):
  """`err` (a modular sum refused at args['bits']) with the fewest bits that
  carry the signal, found by calibrating at each from its lower bound on;
  past `confirm_support` points the refusal names the first width it did
  not calibrate, every narrower one having been refused."""
  limits = args['limits']
  lower, b = err.bits_needed, err.bits_needed
  why = ''
  while b <= limits.max_modular_bits:
    support = args['clients_per_round'] * 2**b
    if support > limits.confirm_support:
      why = (f' (not confirmed by calibrating at {b} bits: the exact law of '
             f'{args["clients_per_round"]} clients\' noise sum there has '
             f'{support:.3g} points, over {limits.confirm_support:.3g}, '
             'minutes per evaluation)')
      lower = b   # every width below was calibrated and refused
      break
    try:
      rep = _calibration_report(**dict(args, bits=b, compare_gaussian=False))
    except refusals.CannotCarrySignal as again:
      b = max(b + 1, again.bits_needed or b + 1)
      continue
    except ValueError as other:   # out of reach there (cost, exact law)
      why = f' (at {b} bits: {str(other)[:300]})'
      break
    found = (f'it needs {b} bits: calibrated at bits={b}, {rep.mechanism} '
             f'meets ε <= {rep.epsilon:.4g} with debiased error '
             f'{rep.debiased_error:.4g} per coordinate (slope {rep.slope:.4g})')
    return refusals.CannotCarrySignal(
        str(err).replace(refusals.needs(lower), found, 1), bits_needed=b)
  else:
    why = (f' (none up to {limits.max_modular_bits}, TFF\'s limit, carries '
           'it)')
  return refusals.CannotCarrySignal(
      str(err).replace(refusals.needs(err.bits_needed),
                       refusals.needs(lower) + why, 1),
      bits_needed=lower)


def _checked_cohort(clients_per_round, min_clients_per_round) -> Optional[int]:
  """min_clients_per_round validated against clients_per_round (ValueError
  naming both and the range); None where it equals clients_per_round."""
  validation.check_integer('clients_per_round', clients_per_round, 1)
  if min_clients_per_round is None:
    return None
  validation.check_integer('min_clients_per_round', min_clients_per_round, 1)
  if min_clients_per_round > clients_per_round:
    raise ValueError(
        f'`min_clients_per_round`={min_clients_per_round} exceeds '
        f'`clients_per_round`={clients_per_round}, the clients sampled per '
        f'round: allowed 1 <= min_clients_per_round <= {clients_per_round}.')
  return setting_lib.dropouts(min_clients_per_round, clients_per_round)


def _checked_clip(epsilon, l2_clip, rtol, others, bound, use_pld, clip,
                  coordinate_clip, dim, bits):
  """The arguments validated; c∞ from `clip`, `coordinate_clip` or S/√d."""
  validation.check_positive('epsilon', epsilon)
  validation.check_optional(validation.check_positive, 'l2_clip', l2_clip)
  validation.check_number('rtol', rtol, 0, 0.5, low_open=True)
  secure_sum.check_others(others)
  validation.check_one_of('bound', bound, oracle.BOUNDS)
  if bound == 'attained' and use_pld:
    raise ValueError("`bound`='attained' is the RDP route's attained ε; it "
                     'does not combine with use_pld=True.')
  if clip is not None and coordinate_clip is not None and clip != coordinate_clip:
    raise ValueError(f'`clip` ({clip}) and `coordinate_clip` ({coordinate_clip}) '
                     'name the same bound; pass one.')
  if clip is not None:
    warnings.warn(
        f'`clip`={clip:g} is the per-coordinate bound c∞: pass it as '
        '`coordinate_clip` (the name `clip` is kept for old callers). The ℓ2 '
        'clip of an update, the factories\' `clip_norm`, is `l2_clip` here.',
        FutureWarning, stacklevel=4)
  clip = coordinate_clip if coordinate_clip is not None else clip
  if clip is None:
    clip = 1.0 if l2_clip is None else setting_lib.coordinate_clip(l2_clip, dim)
  validation.check_positive('coordinate_clip', clip)
  validation.check_optional(validation.check_integer, 'bits', bits, 1, 64)
  return clip


def _calibration_report(mechanism, epsilon, delta, rounds, clients_per_round,
                        total_clients, dim=1, clip=None, tune=None, bits=None,
                        use_pld=False, rtol=_RTOL, l2_clip=None,
                        coordinate_clip=None, compare_gaussian=True,
                        others='any', bound='proved', progress=None,
                        limits=Limits(), min_clients_per_round=None,
                        use_profile=False, **params) -> Calibration:
  """`calibration_report` without the search for the bits a refused modular
  sum needs."""
  clip = _checked_clip(epsilon, l2_clip, rtol, others, bound, use_pld, clip,
                       coordinate_clip, dim, bits)
  fewest = _checked_cohort(clients_per_round, min_clients_per_round)
  schedule = dict(rounds=rounds, clients_per_round=clients_per_round,
                  total_clients=total_clients, delta=delta, dim=dim,
                  use_pld=use_pld, l2_clip=l2_clip, others=others)
  if fewest is not None:   # absent otherwise: the accountant's default
    schedule['min_clients_per_round'] = fewest
  if use_profile:   # absent otherwise: the accountant's default
    schedule['use_profile'] = True
  gauss = None
  # The Gaussian on this route (the guide; the Gaussian's own guide, on the
  # profile route, is its RDP route's: it meets the target there too).
  if (compare_gaussian or _guided(mechanism)) and not (
      mechanism == 'gaussian' and not use_profile):
    gauss = calibration_report('gaussian', epsilon, delta, rounds,
                               clients_per_round, total_clients, dim,
                               coordinate_clip=clip,
                               use_pld=use_pld, rtol=rtol, l2_clip=l2_clip,
                               compare_gaussian=False, limits=limits,
                               min_clients_per_round=fewest,
                               use_profile=(use_profile and
                                            mechanism != 'gaussian'))
  epsilon_of = oracle.Epsilon(schedule, epsilon, bound, limits=limits.accountant)
  # The profile route's further searches first (one bisection each): the
  # default scan then prunes every grid point that cannot beat them.
  searches = []
  if use_profile and tune is None:
    cls = mechanisms.get(mechanism)
    searches = [(more, dict(params, **fixed)) for more, fixed in
                cls.profile_searches(scan_lib.levels_from_bits(
                    cls, params, cls.CALIBRATED, bits))]
  searches.append((tune, params))
  scans = []
  for search_tune, search_params in searches:
    answers = [s.best.utility.error for s in scans if s.best is not None]
    scans.append(scan_lib.Scan(
        mechanism, epsilon, clip, search_tune, bits, rtol, search_params,
        epsilon_of,
        # The signal the debiased error is judged on (package docstring).
        clip if l2_clip is None else min(
            clip, setting_lib.coordinate_clip(l2_clip, dim)),
        clients_per_round, limits.search,
        gaussian_sigma=None if gauss is None else gauss.mechanism.sigma,
        to_beat=min(answers, default=None)))
    scans[-1].run(progress, limits.progress_after)
  answered = [s for s in scans if s.best is not None]
  if not answered:
    raise refusals.no_answer(scans[-1], bound, use_pld)
  scan = min(answered, key=lambda s: s.best.utility.error)
  report = _report(scan, schedule, mechanism, epsilon, bound)
  _attach_attained(report, scan, schedule, bound, limits.accountant)
  if compare_gaussian:
    if mechanism == 'gaussian':   # the guide is on another route
      gauss = report
    best, route = gauss, 'profile' if use_profile else 'rdp'
    if not use_profile:
      other = _gaussian_at_best(epsilon, delta, rounds, clients_per_round,
                                total_clients, dim, clip, use_pld, rtol,
                                l2_clip, limits, fewest)
      if other.debiased_error < gauss.debiased_error:
        best, route = other, 'profile'
    report.gaussian = best.mechanism
    report.gaussian_mse = best.mse
    report.gaussian_route = route
    report.ratio_to_gaussian = report.debiased_error / best.debiased_error
    report.ratio_to_gaussian_same_route = (report.debiased_error /
                                           gauss.debiased_error)
    report.mse_ratio_to_gaussian = report.mse / best.mse
  return report


@functools.lru_cache(maxsize=64)
def _gaussian_at_best(epsilon, delta, rounds, clients_per_round, total_clients,
                      dim, clip, use_pld, rtol, l2_clip, limits, fewest):
  """The continuous Gaussian calibrated by the lesser of its routes
  (`calibration_report('gaussian', ..., use_profile=True)`), once a
  setting: the reference an RDP-route calibration's ratio is taken
  against."""
  return calibration_report('gaussian', epsilon, delta, rounds,
                            clients_per_round, total_clients, dim,
                            coordinate_clip=clip, use_pld=use_pld, rtol=rtol,
                            l2_clip=l2_clip, compare_gaussian=False,
                            limits=limits, min_clients_per_round=fewest,
                            use_profile=True)


def _guided(mechanism) -> bool:
  """Whether the mechanism's searches start from the Gaussian's noise
  (it overrides `Mechanism.gaussian_matched`)."""
  cls = mechanisms.get(mechanism)
  return (cls.gaussian_matched.__func__ is not
          mechanisms.Mechanism.gaussian_matched.__func__)


def _report(scan, schedule, mechanism, epsilon, bound) -> Calibration:
  """The `Calibration` of a scan's incumbent (its attained end not yet)."""
  best, s = scan.best, schedule
  mech = best.mechanism
  evaluated = scan.epsilon_of.seen.get(repr(mech),
                                       oracle.Evaluated('', FAST_ORDERS))
  l2_clip = s['l2_clip']
  setting = CalibratedSetting(
      mechanism=mechanism, tunables=tuple(sorted(
          mechanisms.get(mechanism).complete_params(best.params).items())),
      coordinate_clip=float(mech.input_bound),
      l2_clip=None if l2_clip is None else float(l2_clip), dim=int(s['dim']),
      rounds=int(s['rounds']), clients_per_round=int(s['clients_per_round']),
      total_clients=int(s['total_clients']), delta=float(s['delta']),
      target_epsilon=float(epsilon), epsilon=float(best.epsilon),
      orders=tuple(evaluated.orders), use_pld=bool(s['use_pld']),
      others=s['others'], bound=bound,
      min_clients_per_round=int(s.get('min_clients_per_round',
                                      s['clients_per_round'])),
      use_profile=bool(s.get('use_profile', False)))
  return Calibration(
      mech, dict(best.params, **{CALIBRATED_FOR: setting}), best.epsilon,
      epsilon, s['delta'], mech.decoded_mean_mse(s['clients_per_round']),
      candidates=scan.evaluated,
      refused=[r.grid_point for r in scan.refused], pruned=scan.pruned,
      assumptions=evaluated.assumptions, orders=evaluated.orders,
      debiased_error=best.utility.error, slope=best.utility.slope,
      signal_bound=scan.signal,
      unusable=[dict(u.grid_point, why=u.why) for u in scan.unusable],
      bound=bound, setting=setting)


def _attach_attained(report, scan, schedule, bound,
                     limits: secure_sum.Limits) -> None:
  """`report`'s attained end: the ε that met the target with
  bound='attained', else (RDP route) the attained ε at its orders, searched
  under `limits`."""
  if bound == 'attained':   # the ε that met the target is the attained one
    end = scan.epsilon_of.attained_ends[repr(report.mechanism)]
    report.epsilon_attained = report.epsilon
    report.attained_inputs = _attained_inputs(end.accountant, end.order)
  elif schedule['use_pld']:
    pass   # no attained end on the PLD route
  elif isinstance(report.mechanism, mechanisms.Gaussian):
    # Closed form on every route: the attained curve is the proved one, so
    # the same ε (computing it again cost a profile-route evaluation).
    report.epsilon_attained = report.epsilon
    report.attained_inputs = 'exact (closed form)'
  else:
    s = schedule
    low = composition.RoundAccountant(
        report.mechanism, s['clients_per_round'], s['total_clients'],
        s['delta'], s['dim'], report.orders, s['l2_clip'], s['others'],
        limits=limits,
        min_clients_per_round=s.get('min_clients_per_round'))
    report.epsilon_attained, at = low.epsilon_attained(
        s['rounds'], s.get('use_profile', False))
    report.attained_inputs = _attained_inputs(low, at)


def _attained_inputs(accountant, order) -> str:
  """The inputs attaining an accountant's attained ε at `order` ('' where
  none is attained)."""
  if accountant.attained is None:
    return ''
  if accountant.attained.configurations and math.isfinite(order):
    return accountant.attained.describe(order)
  return 'exact (closed form)'
