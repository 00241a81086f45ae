"""ε in the literature's convention, beside ours: for comparison with papers only.

tff_quant's guarantee (`composition`) is for replace-one neighbours (one
client's update replaced by any other; the count public) and fixed-size
cohorts (n of N without replacement), which is what runs. Papers on
distributed DP for FL (KLS21, AKL21 and google-research/federated's
`distributed_dp/accounting_utils.py`, which the TFF aggregators come from)
state ε for add/remove neighbours (one client's update present or absent)
under Poisson sampling at q = n/N. That ε certifies nothing about a run
with fixed-size cohorts (Lebeda, Regehr, Kamath, Steinke 2024: the two are
not interchangeable), nor about replacing a client: replace-one is at most
the composition of a removal and an addition, so an add/remove ε bounds
replace-one only after doubling the sensitivity (what ours does). The
functions here replicate those papers' computations (the same formulas, the
same subsampling theorem, the same orders) so that a published number can be
set beside ours; they are labelled as the papers' convention wherever printed
(docs/privacy.md, "Comparing with published results").

* `poisson_subsampled_rdp`: Zhu & Wang (ICML 2019) Thm 5, the general upper
  bound for Poisson subsampling under add/remove that distributed_dp applies
  (its `_compute_rdp_subsampled(upper_bound=True)`), capped by the
  unsampled RDP as distributed_dp does.
* `papers_epsilon_gaussian`: the Poisson-subsampled Gaussian (Mironov, Talwar,
  Zhang 2019; dp-accounting), noise multiplier z over the add/remove
  sensitivity (the ℓ2 clip).
* `papers_epsilon_ddgauss`, `papers_epsilon_skellam`: KLS21 Prop. 14 and
  AKL21 Thm 3.5 per round (distributed_dp's `compute_rdp_dgaussian` and
  `_skellam_rdp`), at the add/remove sensitivities (not doubled).
Registry mechanisms: not computed. Our per-round bound is for replace-one
pairs (the target's output at x against x'); an add/remove pair (the
target's output present against absent, the count changing) is a different
pair, which per_round does not bound, and halving the replace-one distance
is sound only for translation-invariant laws (the Gaussians).
"""

import math
from typing import Callable, Sequence

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from tff_quant.accounting import rdp_route
from tff_quant.common import validation

#: distributed_dp's RDP orders (`accounting_utils.RDP_ORDERS`).
PAPERS_ORDERS = tuple(range(2, 129)) + (256,)

#: How a papers'-convention ε is labelled wherever it is printed.
LABEL = ('papers\' convention: add/remove neighbours, Poisson sampling at '
         'q = n/N; not a guarantee for replace-one or for fixed-size cohorts')


def _check_schedule(q, rounds, delta):
  validation.check_number('q', q, 0, 1, low_open=True)
  validation.check_integer('rounds', rounds, 1)
  validation.check_probability('delta', delta)


def _check_distributed(q, rounds, delta, local_std, num_clients):
  """The schedule and a distributed mechanism's noise, checked (named)."""
  _check_schedule(q, rounds, delta)
  validation.check_positive('local_std', local_std)
  validation.check_integer('num_clients', num_clients, 1)


def poisson_subsampled_rdp(rdp: Callable[[int], float], q: float,
                           alpha: int) -> float:
  """Zhu & Wang (ICML 2019) Thm 5: RDP at integer α of a mechanism with
  add/remove RDP ε(·) run on a Poisson sample at rate q, capped by ε(α)
  (distributed_dp's `_compute_rdp_subsampled(upper_bound=True)` and min).

  log[(1-q)^(α-1)(αq - q + 1) + C(α,2)q²(1-q)^(α-2)e^ε(2)
      + 3 Σ_{ℓ=3..α} C(α,ℓ)(1-q)^(α-ℓ) q^ℓ e^((ℓ-1)ε(ℓ))] / (α-1).

  Args:
    rdp: ε(order) of the unsampled mechanism under add/remove, at every
      integer order 2..alpha, each >= 0.
    q: the Poisson sampling rate, in (0, 1].
    alpha: the integer order >= 2.

  Returns:
    The subsampled RDP at alpha (the papers' convention; module docstring).

  Raises:
    TypeError: alpha not an integer or q not a number.
    ValueError: q outside (0, 1] or alpha < 2.
  """
  validation.check_number('q', q, 0, 1, low_open=True)
  validation.check_integer('alpha', alpha, 2)
  if q >= 1:
    return float(rdp(alpha))
  log_q, log_1q = math.log(q), math.log1p(-q)
  terms = [(alpha - 1) * log_1q + math.log(alpha * q - q + 1),
           float(special.gammaln(alpha + 1) - special.gammaln(3) -
                 special.gammaln(alpha - 1)) + 2 * log_q +
           (alpha - 2) * log_1q + rdp(2)]
  for ell in range(3, alpha + 1):
    terms.append(math.log(3) + float(
        special.gammaln(alpha + 1) - special.gammaln(ell + 1) -
        special.gammaln(alpha - ell + 1)) + ell * log_q +
                 (alpha - ell) * log_1q + (ell - 1) * rdp(ell))
  return min(float(special.logsumexp(terms)) / (alpha - 1), float(rdp(alpha)))


def _epsilon(per_round: Callable[[int], float], q, rounds, delta, orders):
  sub = [poisson_subsampled_rdp(per_round, q, int(a)) for a in orders]
  return rdp_route.epsilon_from_rdp(list(orders), sub, rounds, delta)


def ddgauss_round_rdp(alpha: int, l2_scale: float, l1_scale: float,
                      tau: float, dim: int) -> float:
  """KLS21 Prop. 14 as distributed_dp evaluates it (`compute_rdp_dgaussian`):
  min(α/2·Δ2² + τd, α/2·(Δ2² + 2Δ1τ + τ²d), α/2·(Δ2 + τ√d)²), Δ the
  sensitivities over the central std √n·σ.

  Args:
    alpha: the Rényi order, an integer >= 2.
    l2_scale, l1_scale: Δ2/(√n σ), Δ1/(√n σ), >= 0.
    tau: the inflation τ = 10 Σ_{k<n} exp(-2π²σ² k/(k+1)), >= 0.
    dim: d, coordinates (after padding).

  Returns:
    The per-round RDP at alpha.
  """
  return min(alpha / 2 * l2_scale**2 + tau * dim,
             alpha / 2 * (l2_scale**2 + 2 * l1_scale * tau + tau**2 * dim),
             alpha / 2 * (l2_scale + math.sqrt(dim) * tau)**2)


def ddgauss_tau(local_std: float, num_clients: int) -> float:
  """τ = 10 Σ_{k=1}^{n-1} exp(-2π²σ² k/(k+1)) (KLS21 Thm 1), σ in scaled units."""
  return 10 * sum(math.exp(-2 * (math.pi * local_std)**2 * k / (k + 1))
                  for k in range(1, num_clients))


def papers_epsilon_ddgauss(l2_sensitivity: float, l1_sensitivity: float,
                           local_std: float, num_clients: int, dim: int,
                           q: float, rounds: int, delta: float,
                           orders: Sequence[int] = PAPERS_ORDERS):
  """The distributed discrete Gaussian's ε in the papers' convention
  (KLS21 Prop. 14 per round, Zhu & Wang Thm 5 Poisson subsampling; as
  distributed_dp's `ddgauss_epsilon` computes it from the same numbers).

  Args:
    l2_sensitivity, l1_sensitivity: the add/remove sensitivities in scaled
      integer units (TFF's inflated ℓ2 bound and ℓ1 bound, not doubled).
    local_std: each client's discrete Gaussian std, scaled units, > 0.
    num_clients: n >= 1 in the sum.
    dim: d >= 1, coordinates after padding.
    q: the Poisson rate n/N, in (0, 1].
    rounds: T >= 1.
    delta: δ in (0, 1).
    orders: integer Rényi orders >= 2 (distributed_dp's by default).

  Returns:
    (ε, order): the papers' convention (`LABEL`), not our guarantee.

  Raises:
    TypeError, ValueError: an argument out of range (named).
  """
  _check_distributed(q, rounds, delta, local_std, num_clients)
  validation.check_integer('dim', dim, 1)
  central = math.sqrt(num_clients) * local_std
  l2, l1 = l2_sensitivity / central, l1_sensitivity / central
  tau = ddgauss_tau(local_std, num_clients)
  return _epsilon(lambda a: ddgauss_round_rdp(a, l2, l1, tau, dim), q, rounds,
                  delta, orders)


def skellam_round_rdp(alpha: int, l2_sensitivity: float,
                      l1_sensitivity: float, variance: float) -> float:
  """AKL21 Thm 3.5 as distributed_dp evaluates it (`_skellam_rdp`), in scaled
  units: αΔ2²/(2μ) + min(((2α-1)Δ2² + 6Δ1)/(4μ²), 3Δ1/(2μ)), μ = nσ².

  Args:
    alpha: the Rényi order, an integer >= 2.
    l2_sensitivity, l1_sensitivity: Δ2, Δ1 >= 0.
    variance: μ > 0, the central Skellam variance.

  Returns:
    The per-round RDP at alpha.
  """
  return alpha * l2_sensitivity**2 / (2 * variance) + min(
      ((2 * alpha - 1) * l2_sensitivity**2 + 6 * l1_sensitivity) /
      (4 * variance**2), 3 * l1_sensitivity / (2 * variance))


def papers_epsilon_skellam(l2_sensitivity: float, l1_sensitivity: float,
                           local_std: float, num_clients: int, q: float,
                           rounds: int, delta: float,
                           orders: Sequence[int] = PAPERS_ORDERS):
  """Distributed Skellam's ε in the papers' convention (AKL21 Thm 3.5 per
  round, Zhu & Wang Thm 5; distributed_dp's `skellam_epsilon`).

  Args:
    l2_sensitivity, l1_sensitivity: add/remove sensitivities, scaled units
      (not doubled).
    local_std: each client's Skellam std, scaled units, > 0.
    num_clients: n >= 1.
    q, rounds, delta, orders: as in `papers_epsilon_ddgauss`.

  Returns:
    (ε, order): the papers' convention (`LABEL`), not our guarantee.

  Raises:
    TypeError, ValueError: an argument out of range (named).
  """
  _check_distributed(q, rounds, delta, local_std, num_clients)
  variance = num_clients * local_std**2
  return _epsilon(lambda a: skellam_round_rdp(a, l2_sensitivity,
                                              l1_sensitivity, variance),
                  q, rounds, delta, orders)


def papers_epsilon_gaussian(noise_multiplier: float, q: float, rounds: int,
                            delta: float,
                            orders: Sequence[int] = PAPERS_ORDERS):
  """The Gaussian's ε in the papers' convention: the Poisson-subsampled
  Gaussian under add/remove (Mironov, Talwar, Zhang 2019; dp-accounting,
  as tensorflow_privacy's `compute_rdp` in distributed_dp), z = σ/clip.

  Args:
    noise_multiplier: z > 0, the central noise std over the ℓ2 clip.
    q, rounds, delta, orders: as in `papers_epsilon_ddgauss`.

  Returns:
    (ε, order): the papers' convention (`LABEL`), not our guarantee.

  Raises:
    TypeError, ValueError: an argument out of range (named).
  """
  _check_schedule(q, rounds, delta)
  validation.check_positive('noise_multiplier', noise_multiplier)
  accountant = rdp_privacy_accountant.RdpAccountant(
      list(orders), rdp_privacy_accountant.NeighborRel.ADD_OR_REMOVE_ONE)
  accountant.compose(dp_event.PoissonSampledDpEvent(
      q, dp_event.GaussianDpEvent(noise_multiplier)))
  per_round = np.asarray(accountant._rdp)  # pylint: disable=protected-access
  return rdp_route.epsilon_from_rdp(list(orders), list(per_round), rounds,
                                    delta)


def papers_epsilon_peer(peer, total_clients: int, rounds: int, delta: float):
  """The papers' convention ε of a TFF peer (`aggregators.peers.Peer`) at its
  own parameters: the Gaussian's, or distributed_dp's from TFF's enforced
  (scaled, inflated) sensitivities and noise, not doubled.

  Args:
    peer: an `aggregators.peers.Peer`.
    total_clients: N >= peer.clients_per_round.
    rounds: T >= 1.
    delta: δ in (0, 1).

  Returns:
    (ε, order): the papers' convention (`LABEL`), not our guarantee.

  Raises:
    TypeError, ValueError: an argument out of range (named).
  """
  validation.check_integer('total_clients', total_clients,
                           peer.clients_per_round)
  q = peer.clients_per_round / total_clients
  if peer.name == 'gaussian':
    return papers_epsilon_gaussian(peer.noise_multiplier, q, rounds, delta)
  p = peer.ddp_parameters()
  if peer.name == 'tff_skellam':
    return papers_epsilon_skellam(p['scaled_inflated_l2'], p['scaled_l1'],
                                  p['scaled_local_std'],
                                  peer.clients_per_round, q, rounds, delta)
  return papers_epsilon_ddgauss(p['scaled_inflated_l2'], p['scaled_l1'],
                                p['scaled_local_std'], peer.clients_per_round,
                                peer.padded_dim, q, rounds, delta)
