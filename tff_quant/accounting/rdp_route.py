"""The RDP route: a round's RDP after client sampling, and RDP → (ε, δ).

Both steps hold for sampling `clients_per_round` of `total_clients`
uniformly (fixed size, without replacement) under replace-one neighbours:
* Subsampling: WBK19 (Wang, Balle, Kasiviswanathan, AISTATS 2019, Thm 9;
  docs/references.md) bounds the RDP of the mechanism run on a uniformly
  drawn fixed-size subset from the unsampled per-round RDP (`per_round`) at
  every integer order up to α and D∞ (`subsampled_rdp_without_replacement`).
* Conversion: RDP composes by addition over rounds (`composition`), and
  dp_accounting.rdp.compute_epsilon converts the total to (ε, δ) at the best
  order (`epsilon_from_rdp`).
"""

import math
from typing import Mapping, Sequence, Tuple

from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from tff_quant.accounting import others as others_lib
from tff_quant.common import exact_laws
from tff_quant.common import validation

DEFAULT_ORDERS = tuple(range(2, 65)) + (80, 96, 128, 192, 256)


def _check_rdp_curve(rdp: Mapping[float, float], gamma: float, alpha: int):
  """Raises unless `rdp` maps every order the WBK19 bound at (gamma, alpha)
  reads (alpha alone at gamma = 1, else each integer 2..alpha) to a number
  in [0, inf]; math.inf (D∞) may be given too, in [0, inf]."""
  if not isinstance(rdp, Mapping):
    raise TypeError(f'`rdp` must map Rényi orders to RDP values, got '
                    f'{type(rdp).__name__}.')
  if gamma >= 1:
    needed, which = [alpha], f'order {alpha}'
  else:
    needed = list(range(2, alpha + 1))
    which = f'every integer order in [2, {alpha}] (the bound sums over them)'
  missing = [a for a in needed if a not in rdp]
  if missing:
    raise ValueError(f'`rdp` must hold {which}, missing {missing[:5]}'
                     f'{"..." if len(missing) > 5 else ""}.')
  for a in needed + ([math.inf] if math.inf in rdp else []):
    try:
      if isinstance(rdp[a], (str, bytes, bool)):
        raise TypeError
      value = float(rdp[a])
    except (TypeError, ValueError):
      raise TypeError(f'`rdp`[{a}] must be a number in [0, inf], got '
                      f'{rdp[a]!r}.') from None
    if not value >= 0:   # NaN fails too
      raise ValueError(f'`rdp`[{a}] must be in [0, inf], got {rdp[a]!r}.')


def subsampled_rdp_without_replacement(rdp: Mapping[float, float], gamma: float,
                                       alpha: int) -> float:
  """WBK19 Thm 9 bound at integer α >= 2 (docs/references.md).

  RDP at order α of the mechanism run on a uniformly drawn fixed-size subset
  (sampling without replacement, replace-one neighbours), no more than the
  unsampled rdp[α].

  Args:
    rdp: per-round RDP {order: ε} of the unsampled mechanism, each in [0, inf]:
      every integer order 2..alpha (alpha alone when gamma = 1) and optionally
      math.inf (D∞, used in the bound's j = 2 term; absent means inf).
    gamma: sampling rate clients_per_round / total_clients, in (0, 1].
    alpha: the integer order >= 2 to bound.

  Returns:
    The subsampled RDP at order alpha.

  Raises:
    TypeError: alpha not an integer, gamma not a number, rdp not a mapping
      of numbers.
    ValueError: gamma outside (0, 1], alpha < 2, an order rdp must hold
      missing, or a value outside [0, inf].
  """
  validation.check_number('gamma', gamma, 0, 1, low_open=True)
  validation.check_integer('alpha', alpha, 2)
  _check_rdp_curve(rdp, gamma, alpha)
  if gamma >= 1:
    return rdp[alpha]
  eps_inf = rdp.get(math.inf, math.inf)
  log_g = math.log(gamma)
  # j = 2 term: min{4(e^ε2 - 1), e^ε2 min{2, (e^ε∞ - 1)^2}}
  log_em1_inf = (float(others_lib.log_expm1(eps_inf)) if math.isfinite(eps_inf)
                 else math.inf)
  t2 = min(math.log(4) + float(others_lib.log_expm1(rdp[2])),
           rdp[2] + min(math.log(2), 2 * log_em1_inf))
  terms = [0.0, 2 * log_g + math.log(special.comb(alpha, 2)) + t2]
  for j in range(3, alpha + 1):
    terms.append(j * log_g + float(special.gammaln(alpha + 1) - special.gammaln(j + 1)
                                   - special.gammaln(alpha - j + 1)) +
                 (j - 1) * rdp[j] + min(math.log(2), j * log_em1_inf))
  bound = special.logsumexp(terms) / (alpha - 1)
  # Rounded up by what the float evaluation may lose (docs/privacy.md,
  # "Numerics"): each term's few operations and logs u·|term|-sized
  # (ELEMENTARY_ULPS), the exps and the sum of α terms, the log and the
  # division; 8·lib per unit of the largest term plus (α + 8)·lib.
  finite = [abs(t) for t in terms if math.isfinite(t)]
  lib = 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U
  bound += lib * (8 * max(finite, default=0.0) + alpha + 8) / (alpha - 1)
  return min(bound, rdp[alpha])


def epsilon_from_rdp(orders: Sequence[float], per_round: Sequence[float],
                     rounds: int, delta: float) -> Tuple[float, float]:
  """(ε, order) at `delta` after `rounds` rounds of per-round RDP `per_round`.

  RDP composes by addition over rounds; dp_accounting.rdp.compute_epsilon
  converts the total to (ε, δ) at the best order. Orders whose per-round RDP
  is not finite are left out (they cannot give the best ε).

  Args:
    orders: the Rényi orders of `per_round`.
    per_round: [orders] RDP of one round (after any subsampling).
    rounds: rounds composed.
    delta: target δ.

  Returns:
    (ε, the order attaining it), or (inf, nan) when no order is finite.
  """
  finite = [(o, rounds * v) for o, v in zip(orders, per_round)
            if math.isfinite(v)]
  if not finite:
    return math.inf, math.nan
  eps, order = rdp_privacy_accountant.compute_epsilon(
      [o for o, _ in finite], [v for _, v in finite], delta)
  # dp-accounting's conversion (CKS20 Prop. 12) is a handful of additions,
  # divisions and logs of terms no larger than the RDP, log(1/δ) and log α:
  # rounded up by 32·lib of their size (docs/privacy.md, "Numerics").
  if math.isfinite(eps) and math.isfinite(order):
    lib = 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U
    size = next((v for o, v in finite if o == order),
                max(v for _, v in finite))
    eps += 32 * lib * (abs(size) + abs(math.log(delta)) + math.log(order) + 1)
  return float(eps), float(order)
