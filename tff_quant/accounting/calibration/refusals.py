"""Why a calibration has no answer, in words: the errors and their wording.

A candidate that meets the target is refused when it cannot carry the
signal (`why_unusable`): a modular sum whose modulus does not hold its
summed noise as TFF's DistributedDpSumFactory sizes it (KLS21, AKL21), or a
decoded mean with slope < `utility.MIN_SLOPE`. When no candidate is left,
`no_answer` says why: every candidate refused (`CannotCarrySignal`), every
evaluation over its cost (`secure_sum.CostError`), too few bits, or a target no
candidate reaches (naming the smallest ε reached and where).
"""

import dataclasses
import math
from typing import Dict, List, Optional

from tff_quant.accounting import secure_sum
from tff_quant.mechanisms import utility


class CannotCarrySignal(ValueError):
  """Every candidate meeting the target was refused for not carrying the
  signal (`calibration_report` names why, and the bits a modular sum needs).

  Args:
    message: the error's text.
    bits_needed: for a modular sum, the fewest bits its modulus needs at the
      candidates searched (a lower bound); None otherwise. Kept as the
      attribute of the same name.
  """

  def __init__(self, message, bits_needed=None):
    super().__init__(message)
    self.bits_needed = bits_needed


@dataclasses.dataclass(frozen=True)
class Unusable:
  """A candidate that met the target but cannot carry the signal.

  Attributes:
    why: the reason, in words.
    grid_point: the scanned parameters it was found at.
    mechanism: the candidate.
    bits_needed: for a modular sum, the bits its modulus needs; else None.
    utility: its `utility.SignalUtility`.
  """
  why: str
  grid_point: Dict[str, object]
  mechanism: object
  bits_needed: Optional[int]
  utility: object


@dataclasses.dataclass(frozen=True)
class Reached:
  """The ε at a grid point's most private value, where it missed the target.

  Attributes:
    epsilon: that ε (a lower bound when `bounded` is set).
    grid_point: the scanned parameters.
    bounded: the mechanism whose ε is known only by a lower bound, else None.
  """
  epsilon: float
  grid_point: Dict[str, object]
  bounded: object = None


@dataclasses.dataclass(frozen=True)
class Refused:
  """A grid point not evaluated: its cost over `secure_sum.Limits.max_operations`.

  Attributes:
    grid_point: the scanned parameters.
    why: the `secure_sum.CostError`'s text.
  """
  grid_point: Dict[str, object]
  why: str


def why_unusable(mech, util, clients, signal, grid_point) -> Optional[Unusable]:
  """None when `mech` carries the signal, else why not.

  A modular sum must hold its summed noise as TFF's DistributedDpSumFactory
  sizes its field (`utility.modulus_needed`: k = 3.89 standard deviations of
  n clients' noise, rounding and common signal inside the modulus); past it
  the sum wraps toward uniform and its mean loses the input. Any mechanism's
  decoded mean must keep slope >= `utility.MIN_SLOPE` over |x| <= a: the
  factory returns that mean, not a debiased one.

  Args:
    mech: the candidate.
    util: its `signal_utility(clients, signal)`.
    clients: n, the clients a round.
    signal: a, the common input's bound.
    grid_point: where it was found (recorded in the answer).

  Returns:
    An `Unusable`, or None.
  """
  needed = getattr(mech, 'modulus_needed', None)
  if mech.modulus is not None and needed is not None:
    need = needed(clients, signal)
    if mech.modulus < need:
      return Unusable(
          f'modulus {mech.modulus} < {need:.4g} (TFF DistributedDpSumFactory '
          f'sizing; slope {util.slope:.3g})', grid_point, mech,
          max(1, math.ceil(math.log2(need))), util)
  if not util.carries_signal:
    return Unusable(f'slope {util.slope:.3g} < {utility.MIN_SLOPE}',
                    grid_point, mech, None, util)
  return None


def needs(bits) -> str:
  """The claim a modular refusal starts with (`report` replaces it with the
  fewest bits that carry the signal).

  Args:
    bits: the bits the modulus needs at least.

  Returns:
    The claim's text.
  """
  return f'it needs at least {bits} bits'


def _skipped(refused) -> str:
  return (f' (settings {[r.grid_point for r in refused]} were not evaluated: '
          'cost over secure_sum.Limits.max_operations)' if refused else '')


def cannot_carry(mechanism, epsilon, bits, tune, clients, signal,
                 unusable: List[Unusable], refused: List[Refused]
                 ) -> CannotCarrySignal:
  """The error for candidates that met the target but were all refused.

  Args:
    mechanism: the registry name.
    epsilon: the target.
    bits: the bit budget (None: none).
    tune: the searched parameters' names.
    clients, signal: n and a (`why_unusable`).
    unusable: the refused candidates (not empty).
    refused: the grid points not evaluated.

  Returns:
    For a modular sum, a `CannotCarrySignal` naming the fewest bits any
    candidate needs; otherwise one naming the best slope reached.
  """
  budget = f' in {bits} bits' if bits is not None else ''
  modular_rule = [u for u in unusable if u.bits_needed is not None]
  if modular_rule:
    u = min(modular_rule, key=lambda u: u.bits_needed)
    k = utility.modclip_stddevs()
    return CannotCarrySignal(
        f'{mechanism} cannot carry the signal{budget}: {needs(u.bits_needed)} '
        '(a larger power-of-two modulus cannot need less noise: the sum mod M '
        'is a function of the sum mod 2M). At every setting of '
        f'{", ".join(tune)} searched that meets ε={epsilon}, the modulus does '
        f'not hold the summed noise of {clients} clients as TFF\'s '
        'DistributedDpSumFactory sizes it (M >= 2k·√(n(σ² + 1/4) + (n·a/γ)²) '
        f'in rounding steps γ, k = {k:.3g} standard deviations for '
        f'modclip_prob {utility.MODCLIP_PROB:g}, a = {signal:.4g} the common '
        f'signal). Closest: {u.grid_point or "its only setting"} at noise_std='
        f'{u.mechanism.noise_std:.4g}: {u.why}{_skipped(refused)}.',
        bits_needed=u.bits_needed)
  u = max(unusable, key=lambda u: u.utility.slope)
  return CannotCarrySignal(
      f'{mechanism} cannot carry the signal{budget}: calibrated to ε={epsilon}, '
      f'the decoded mean of {clients} clients sharing an input |x| <= '
      f'{signal:.4g} has {u.why} at best ({u.mechanism}; '
      f'{u.grid_point or "its only setting"}): '
      'the mean QuantizationFactory returns is then more bias (1 - slope)·x '
      'than signal slope·x. Its output barely moves with its input (noise '
      'saturating its range): a wider coordinate clip, fewer rounds or a '
      f'larger ε raise the slope{_skipped(refused)}.')


@dataclasses.dataclass(frozen=True)
class Closest:
  """The smallest ε reached at a grid point's most private value.

  Attributes:
    epsilon: that ε.
    grid_point: where.
    exact: whether it was computed (False: only a lower bound, every exact
      evaluation over its cost).
  """
  epsilon: float
  grid_point: Dict[str, object]
  exact: bool


def closest(reached: List[Reached], oracle) -> Optional[Closest]:
  """The `Closest` of `reached`, or None when nothing was reached.

  Values known only by a lower bound are evaluated (`oracle.exact`) in
  increasing order of their bound until no bound is below the smallest
  exact ε, so the error names an ε computed, not bounded.

  Args:
    reached: the grid points' most private ε.
    oracle: the `oracle.Epsilon` that bounded them.

  Returns:
    A `Closest`, or None.
  """
  if not reached:
    return None
  exact = [(r.epsilon, r.grid_point) for r in reached if r.bounded is None]
  for r in sorted((r for r in reached if r.bounded is not None),
                  key=lambda r: r.epsilon):
    if exact and min(exact, key=lambda e: e[0])[0] <= r.epsilon:
      break
    try:
      exact.append((oracle.exact(r.bounded), r.grid_point))
    except secure_sum.CostError:
      continue
  if not exact:
    r = min(reached, key=lambda r: r.epsilon)
    return Closest(r.epsilon, r.grid_point, False)
  return Closest(*min(exact, key=lambda e: e[0]), True)


def no_answer(scan, bound: str, use_pld: bool) -> ValueError:
  """The error when no candidate met the target and carried the signal.

  Args:
    scan: the finished `scan.Scan` (what it refused, reached and fit).
    bound: 'proved' or 'attained'.
    use_pld: whether the PLD route was used.

  Returns:
    The `CannotCarrySignal`, `secure_sum.CostError` or `ValueError` to raise.
  """
  if scan.unusable:
    return cannot_carry(scan.mechanism, scan.epsilon, scan.bits, scan.tune,
                        scan.clients, scan.signal, scan.unusable, scan.refused)
  near = closest(scan.reached, scan.epsilon_of)
  if scan.refused and not (near and near.exact):
    return _over_cost(scan, near)
  if not scan.fits and scan.bits is not None:
    return ValueError(f'`bits`={scan.bits} is below what {scan.mechanism} '
                      f'needs: no setting of {", ".join(scan.tune)} with '
                      f'{scan.fixed} fits in {scan.bits} bits per coordinate.')
  return _unreachable(scan, near, bound, use_pld)


def _over_cost(scan, near) -> secure_sum.CostError:
  """Every grid point refused for its cost, or bounded out of reach."""
  refused = scan.refused
  bounded = [r.grid_point for r in scan.reached if r.bounded is not None]
  return secure_sum.CostError(
      f'{refused[0].why} No setting of {", ".join(scan.tune)} could be '
      f'evaluated: {[r.grid_point for r in refused]} were refused'
      + (f' (larger {scan.stopped_after} costs more and was not tried)'
         if scan.stopped_after else '')
      + (f', and {bounded} are out of reach (ε >= {near.epsilon:.4g} by a '
         'lower bound, lower_bound.py)' if bounded else '') + '.')


def _unreachable(scan, near, bound, use_pld) -> ValueError:
  """The target out of reach: the smallest ε reached, where, and why."""
  budget = f' within {scan.bits} bits' if scan.bits is not None else ''
  others = {k: v for k, v in scan.fixed.items() if k not in scan.tune}
  where = f' at {near.grid_point}' if near.grid_point else ''
  unresolved = scan.epsilon_of.unresolved
  refused = scan.refused
  return ValueError(
      f'Target ε={scan.epsilon} is not reachable for {scan.mechanism}{budget}'
      + (' even on the attained ε (bound=\'attained\')'
         if bound == 'attained' else '') + ': the most '
      f'private value of {", ".join(scan.tune)} gives ε={near.epsilon:.4g}'
      f'{where} (other parameters {others}); raise the target or change the '
      'schedule'
      + (f'; its exact law is out of reach there ({unresolved})'
         if math.isinf(near.epsilon) and unresolved else
         '; every RDP order is infinite for it: try use_pld=True'
         if math.isinf(near.epsilon) and not use_pld else '')
      + (f'; settings {[r.grid_point for r in refused]} were not evaluated '
         '(cost over secure_sum.Limits.max_operations)' if refused else '') + '.')
