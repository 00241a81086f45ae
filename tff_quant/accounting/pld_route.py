"""The PLD route: (ε, δ) from the exact privacy-loss distribution of one pair.

Valid for sampling `clients_per_round` of `total_clients` uniformly (fixed
size, without replacement) or by Poisson sampling at that rate. The exact
loss pmf of the worst-mix pair, composed d times (loss_pmf, FFT, pessimistic
rounding), mixed with a point mass at loss 0 of weight 1-γ (the target not
sampled; pessimistic: as if the server could tell), then composed over
rounds with its rounding carried (`profile_route.composed_epsilon`). It composes one named pair, so it runs
only where that pair is the worst case (`pld_epsilon` says why not
elsewhere), and is skipped, with the reason, when its grid would exceed
pld_max_points.
"""

import math

from tff_quant.accounting import divergence
from tff_quant.accounting import loss_pmf
from tff_quant.accounting import numerics
from tff_quant.accounting import profile_route
from tff_quant.accounting import secure_sum
from tff_quant.common import validation

# Largest PLD loss grid allocated by default: 2^26 points (0.5 GiB per float64
# array; an FFT convolution holds a few): the `make demo` run's PLD fits, a
# 1.2M-coordinate model does not (measured peaks: docs/performance.md,
# "Measured costs behind accounting choices").
DEFAULT_PLD_MAX_POINTS = 2**26


def pld_epsilon(mech, clients_per_round: int, dim: int, rounds: int,
                gamma: float, delta: float, *, use_pld: bool, l2_route: bool,
                others: str, limits: secure_sum.Limits, pld_interval: float,
                pld_max_points: int):
  """(ε by the PLD route, '') or (None, why it was not computed).

  It composes the ±c pair's exact loss distribution: with the others at
  their worst ±c mix under others='extremes', and for any others where the
  sum reduces exactly to one client (`SumReduction.exact`: BQ).

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
    clients_per_round, dim, rounds: the schedule (`RoundAccountant`).
    gamma, delta: the sampling rate and the target δ.
    use_pld: False: not computed.
    l2_route: whether the ℓ2 route accounts the run (then not computed).
    others: 'any' or 'extremes' (`RoundAccountant`).
    limits: the `secure_sum.Limits` the target-pair search runs under.
    pld_interval: PLD loss discretisation (pessimistic rounding), > 0.
    pld_max_points: the largest loss grid the route may allocate, >= 2.

  Returns:
    (ε, '') or (None, the reason the route was not computed or skipped).

  Raises:
    ValueError: pld_interval not finite and > 0, or pld_max_points < 2 (checked
      only where the route applies).
    TypeError: pld_interval not a number or pld_max_points not an integer
      (likewise).
  """
  red = mech.sum_reduction(clients_per_round)
  exact_one = red is not None and red.exact and red.num_clients == 1
  if not use_pld:
    return None, 'PLD route not requested (use_pld=False)'
  if mech.has_exact_divergences:
    return None, (f'PLD route not implemented for {type(mech).__name__} '
                  '(its divergences are exact in closed form / by '
                  'translation invariance); the RDP route is reported')
  if l2_route:
    return None, ('PLD route not used: it composes d coordinates each moving '
                  'end to end, which ℓ2 clipping with c > l2_clip/√d rules '
                  'out; the ℓ2 RDP route is reported')
  if others == 'any' and not exact_one:
    return None, ('PLD route not used: it composes the worst mix of the '
                  'others at ±c, an assumption (others=\'extremes\'); the '
                  'RDP route holds for any inputs of the others')
  mech, n = (red.mechanism, 1) if exact_one else (mech, clients_per_round)
  if not secure_sum.end_pair_is_worst(mech, n, limits=limits):
    return None, ('PLD route not used: it composes the ±c target pair, and '
                  'an interior pair of critical inputs is worse here; the '
                  'RDP route (every vertex pair) is reported')
  # Also when every RDP order is infinite (BQ): δ can absorb that mass.
  validation.check_positive('pld_interval', pld_interval)
  validation.check_integer('pld_max_points', pld_max_points, 2)
  worst = {divergence.renyi_divergence_of_sum(mech, a, n).worst_num_plus
           for a in (1, 2, 8)}
  return _composed_epsilon(mech, n, dim, rounds, gamma, delta, sorted(worst),
                           pld_interval, pld_max_points)


def _composed_epsilon(mech, clients_per_round, dim, rounds, gamma, delta,
                      mixes, interval, max_points):
  """(ε by the PLD route, '') or (None, why it was skipped).

  Per worst mix: the exact one-coordinate loss pmf, composed over `dim`
  coordinates (loss_pmf, FFT), mixed with loss 0 w.p. 1-γ, and composed
  over `rounds` (`profile_route.composed_epsilon`, its rounding carried). Each composition's
  grid is bounded first; above `max_points` the route is skipped, not tried.
  """
  # The input laws' proved error (`numerics`): each pair's laws are within
  # e^(±κ), κ = nη, of the computed ones, so are the mixed and composed
  # ones within e^(±dTκ) of theirs; an event's P <= e^(dTκ)(e^ε̃ Q̃ + δ̃) <=
  # e^(ε̃ + 2dTκ) Q + e^(dTκ) δ̃: ε̃ at δ e^(-dTκ), plus 2dTκ.
  kappa = dim * rounds * clients_per_round * numerics.law_error(mech)
  eps = 0.0
  for k in mixes:
    (lp, up, ep), (lq, _, eq) = divergence.sum_pair_log_pmfs(
        mech, clients_per_round, k)
    one = loss_pmf.LossPmf.from_log_pmfs(lp, lq, interval, ep, eq, up)
    need = max(one.composed_points(dim),
               one.round_then_rounds_points(dim, gamma, rounds))
    if need > max_points:
      return None, (f'PLD route skipped: {dim} coordinates × {rounds} rounds need '
                    f'up to {need:.3g} loss-grid points at interval {interval:g}, '
                    f'above pld_max_points={max_points:.3g} (memory); the RDP '
                    'route is reported')
    per_round = one.compose(dim) if dim > 1 else one
    if gamma < 1:
      per_round = per_round.mix_with_zero(gamma)
    # The rounds compose with their rounding carried (the pair is taken
    # symmetric, as dp-accounting's rounded-probability PLD takes it).
    eps = max(eps, profile_route.composed_epsilon(
        per_round.as_dict(), per_round.inf_mass, rounds,
        delta * math.exp(-kappa), interval) + 2 * kappa)
  return eps, ''
