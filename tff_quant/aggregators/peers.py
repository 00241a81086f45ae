"""TFF's own DP aggregators as peers of the registry's mechanisms, on one accountant.

* 'gaussian': `tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`, central
  DP (a trusted server adds N(0, (z·clip)²) to the sum of ℓ2-clipped updates; no
  secure sum). Accounted as the registry's continuous Gaussian with that total
  variance (ℓ2 route, closed form, dp-accounting's subsampled Gaussian).
* 'tff_skellam', 'tff_dgauss': TFF's `DistributedDpSumFactory` (random
  rotation 'hd', ℓ2 clip, scaling and stochastic rounding, per-client Skellam or
  discrete Gaussian noise, sum modulo 2^bits through the secure sum). Accounted
  by the closed forms published with them (AKL21 Thm 3.5, KLS21 Prop. 14 /
  Thm 1; `accounting.bounds`) at the sensitivities the factory itself enforces
  (its scaled, inflated ℓ2 bound and its ℓ1 bound), doubled for replace-one.
  The scale is TFF's own heuristic, computed by TFF's functions so the
  accountant and the factory cannot disagree (a test checks the numbers against
  the factory's round measurements). `Peer.factory(clients_per_value=K)` runs
  them with K clients per value (`packed_peers`: TFF's own per-client
  pipeline on each row, the same law at the server), as the packed path of
  `tff_quant.training.packed_clients` needs.
z (noise_multiplier) is set by `calibrate` for a target whole-model (ε, δ).
"""

import dataclasses
import math
from typing import Dict, Optional, Sequence

from tff_quant import accounting, mechanisms
from tff_quant.accounting import setting
from tff_quant.common import dims, validation

PEERS = ('gaussian', 'tff_skellam', 'tff_dgauss')
_TFF_MECHANISM = {'tff_skellam': 'distributed_skellam',
                  'tff_dgauss': 'distributed_dgauss'}
_Z_RANGE = (1e-3, 1e4)   # noise multipliers searched by `calibrate`


@dataclasses.dataclass
class Peer:
  """One of TFF's DP aggregators with the parameters it runs with.

  Args:
    name: one of PEERS.
    noise_multiplier: z > 0, the central noise std over clip_norm.
    clip_norm: ℓ2 clip of each client update.
    clients_per_round: n (TFF's expected_clients_per_round).
    dim: coordinates of the model update.
    bits: secure-sum bits per coordinate (tff_*; None for 'gaussian').
    modclip_prob: TFF's modular-clipping probability target (tff_*).
  """
  name: str
  noise_multiplier: float
  clip_norm: float
  clients_per_round: int
  dim: int
  bits: Optional[int] = None
  modclip_prob: float = 1e-4

  def __post_init__(self):
    validation.check_one_of('mechanism', self.name, PEERS)
    validation.check_positive('noise_multiplier', self.noise_multiplier)
    validation.check_positive('clip_norm', self.clip_norm)
    validation.check_integer('clients_per_round', self.clients_per_round, 1)
    validation.check_integer('dim', self.dim, 1)
    if self.name == 'gaussian':
      if self.bits is not None:
        raise ValueError('`bits` does not apply to the central Gaussian (it '
                         'sends floats); leave it unset.')
    else:
      validation.check_integer('bits', self.bits, 1, 32)
      validation.check_number('modclip_prob', self.modclip_prob, 0, 1,
                              low_open=True, high_open=True)

  @property
  def bits_per_coordinate(self) -> int:
    return 32 if self.name == 'gaussian' else self.bits

  @property
  def padded_dim(self) -> int:
    """d after TFF's Hadamard rotation pads it to a power of two (tff_*)."""
    return dims.sent_dim(self.dim, rotate=True)

  def ddp_parameters(self) -> Dict[str, float]:
    """TFF's DistributedDpSumFactory numbers for this peer: scale, the scaled
    inflated ℓ2 bound, the scaled ℓ1 bound and the per-client noise std (in
    scaled units), by TFF's own functions (TF eager).

    Raises:
      ValueError: TFF's heuristic finds no scale (nan) at these bits: the
        field is too small for the cohort's sum (naming `bits`).
    """
    # pylint: disable=g-import-not-at-top,protected-access
    from tensorflow_federated.python.aggregators import discretization
    from tensorflow_federated.python.aggregators import distributed_dp
    local_std = self.noise_multiplier * self.clip_norm / math.sqrt(
        self.clients_per_round)
    k_stddevs = distributed_dp._clip_prob_to_num_stddevs(self.modclip_prob)
    scale = float(distributed_dp._heuristic_scale_factor(
        local_std, self.clip_norm, self.bits, self.clients_per_round,
        self.padded_dim, k_stddevs).numpy())
    if not scale > 0:   # nan: TFF's heuristic has no scale at these bits
      raise ValueError(
          f'{self.name} at bits={self.bits}: TFF\'s scale heuristic finds no '
          f'scale (got {scale}) for {self.clients_per_round} clients\' sum '
          f'in a field of 2^{self.bits}; raise `bits`.')
    scale = min(scale, distributed_dp.MAX_SCALE_FACTOR)
    inflated = float(discretization.inflated_l2_norm_bound(
        l2_norm_bound=self.clip_norm, gamma=1.0 / scale, beta=0.0,
        dim=self.padded_dim).numpy())
    l2 = (inflated + 1e-5) * scale
    l1 = math.ceil(l2 * min(math.sqrt(self.padded_dim), l2))
    return dict(scale=scale, scaled_inflated_l2=l2, scaled_l1=l1,
                scaled_local_std=local_std * scale)

  def round_rdp(self, orders: Sequence[int]) -> Dict[float, float]:
    """{order: RDP} of one round (before sampling) under replace-one, every
    integer order 2..max(orders) and math.inf."""
    top = int(max(orders))
    if self.name == 'gaussian':
      return accounting.per_round_rdp(self.reference_mechanism(),
                                      self.clients_per_round, self.dim,
                                      list(range(2, top + 1)))
    p = self.ddp_parameters()
    l2, l1, std = 2 * p['scaled_inflated_l2'], 2 * p['scaled_l1'], p['scaled_local_std']
    n = self.clients_per_round
    if self.name == 'tff_skellam':
      rdp = {a: accounting.bounds.skellam_vector_rdp(a, l2, l1, std, n)
             for a in range(2, top + 1)}
    else:
      rdp = {a: accounting.bounds.ddgauss_vector_rdp(a, l2, std, n,
                                                     self.padded_dim)
             for a in range(2, top + 1)}
    rdp[math.inf] = math.inf   # unbounded likelihood ratio in the tails
    return rdp

  def reference_mechanism(self):
    """The registry's continuous Gaussian with this peer's noise on the sum
    (σ per client = z·clip/√n) at coordinate bound clip/√d: the Gaussian's
    divergence depends on the ℓ2 distance alone, so d coordinates moving
    2·clip/√d each is exactly its ℓ2 worst case (and the accountant's closed
    form, not the ℓ2 route's grid bound, applies)."""
    return mechanisms.Gaussian(setting.coordinate_clip(self.clip_norm, self.dim),
                               self.noise_multiplier * self.clip_norm /
                               math.sqrt(self.clients_per_round))

  def epsilon(self, total_clients: int, delta: float, rounds: int,
              use_profile: bool = False) -> float:
    """The whole run's ε: its accountant's RDP route, and with
    `use_profile` the lesser of it and the profile route."""
    return self.accountant(total_clients, delta).epsilon_from_curve(
        rounds, use_profile)

  def accountant(self, total_clients: int, delta: float):
    """The `accounting.RoundAccountant` of a run with this peer."""
    if self.name == 'gaussian':
      return accounting.RoundAccountant(
          self.reference_mechanism(), self.clients_per_round, total_clients,
          delta, self.dim, l2_clip=self.clip_norm)
    rdp = self.round_rdp(accounting.rdp_route.DEFAULT_ORDERS)
    p = self.ddp_parameters()
    assumptions = (
        f'replace-one neighbouring; {self.clients_per_round} of {total_clients} '
        'clients per round, fixed-size without replacement (WBK19 Thm 9); '
        f'TFF {_TFF_MECHANISM[self.name]} at its enforced sensitivities (scaled '
        f'ℓ2 {p["scaled_inflated_l2"]:.4g}, ℓ1 {p["scaled_l1"]:.4g}, doubled '
        f'for replace-one) and per-client noise std {p["scaled_local_std"]:.4g} '
        f'(scale {p["scale"]:.4g}); '
        + ('AKL21 Thm 3.5' if self.name == 'tff_skellam' else 'KLS21 Prop. 14')
        + ' closed form (an upper bound, not exact).')
    return accounting.RoundAccountant.from_round_rdp(
        rdp, self.clients_per_round, total_clients, delta, self.dim, assumptions)

  def factory(self, clients_per_value: int = 1):
    """The TFF aggregation factory (a mean over clients) this peer runs as.

    Args:
      clients_per_value: K >= 1 clients stacked per value (the packed path,
        `tff_quant.training.packed_clients`); K > 1 for 'tff_skellam' /
        'tff_dgauss' gives `packed_peers.PackedDistributedDpSumFactory`, TFF's
        own per-client pipeline on each row, the same law at the server
        (that module's docstring). The central 'gaussian' takes K = 1 here
        (packed: `packed_clients.StackedClippedMeanFactory`).

    Raises:
      ValueError: clients_per_value not an integer >= 1, or > 1 for 'gaussian'.
    """
    # pylint: disable=g-import-not-at-top
    import tensorflow_federated as tff
    # TFF 0.87 exports the class only inside tff.learning.ddp_secure_aggregator
    # (adaptive clip, zeroing); the fixed-clip factory is this module's.
    from tensorflow_federated.python.aggregators import distributed_dp
    k = validation.check_integer('clients_per_value', clients_per_value, 1)
    if self.name == 'gaussian':
      if k > 1:
        raise ValueError(f'clients_per_value={k}: the central gaussian peer takes '
                         'one client per value here (1); packed, use '
                         'packed_clients.StackedClippedMeanFactory.')
      return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          noise_multiplier=self.noise_multiplier,
          clients_per_round=self.clients_per_round, clip=self.clip_norm)
    if k > 1:
      from tff_quant.aggregators import packed_peers
      return packed_peers.StackedMeanFactory(
          packed_peers.PackedDistributedDpSumFactory(
              k, noise_multiplier=self.noise_multiplier,
              expected_clients_per_round=self.clients_per_round,
              bits=self.bits, l2_clip=self.clip_norm,
              modclip_prob=self.modclip_prob,
              mechanism=_TFF_MECHANISM[self.name]), k)
    ddp = distributed_dp.DistributedDpSumFactory(
        noise_multiplier=self.noise_multiplier,
        expected_clients_per_round=self.clients_per_round, bits=self.bits,
        l2_clip=self.clip_norm, modclip_prob=self.modclip_prob,
        mechanism=_TFF_MECHANISM[self.name], rotation_type='hd')
    return tff.aggregators.UnweightedMeanFactory(
        value_sum_factory=ddp,
        count_sum_factory=tff.aggregators.SecureSumFactory(
            upper_bound_threshold=1, lower_bound_threshold=0))

  def __repr__(self):
    extra = f', bits={self.bits}' if self.bits is not None else ''
    return (f'{self.name}(noise_multiplier={self.noise_multiplier:.5g}, '
            f'clip_norm={self.clip_norm:g}{extra})')


def calibrate(name: str, epsilon: float, delta: float, rounds: int,
              clients_per_round: int, total_clients: int, dim: int,
              clip_norm: float, bits: Optional[int] = None,
              rtol: float = 1e-4, use_profile: bool = False) -> Peer:
  """The peer with the smallest noise multiplier whose whole run meets (ε, δ)
  (RDP route, and with `use_profile` the profile route too, the lesser:
  the central Gaussian by its exact profile, TFF's distributed peers from
  their RDP curves; geometric bisection over z in [1e-3, 1e4] to relative
  width `rtol`). ε falls about 3× as fast as z rises here, so the default puts the
  run within ~0.03% below the target: comparisons at equal ε stay equal.

  With `use_profile` the bisection runs on a bracket found first: the RDP
  route's answer to 10% (it meets the target on the lesser route too), then
  halved until the lesser route misses. A profile at a far smaller noise
  than the answer holds an ε of thousands on a long loss grid (~9 s each,
  against ~1 s near the target); the bracket keeps every such z out.

  Raises:
    ValueError: bad input, or a target not met even at z = 1e4 (names the ε
      reached there).
  """
  validation.check_positive('epsilon', epsilon)
  validation.check_integer('rounds', rounds, 1)
  peer_at = lambda z: Peer(name, z, clip_norm, clients_per_round, dim, bits)
  eps_at = lambda z, profile: peer_at(z).epsilon(total_clients, delta, rounds,
                                                 profile)
  meets = lambda profile: lambda z: eps_at(z, profile) <= epsilon
  lo, hi = _Z_RANGE
  best = eps_at(hi, use_profile)
  if best > epsilon:
    raise ValueError(f'Target ε={epsilon} is not reachable for {name}: noise '
                     f'multiplier {hi:g} gives ε={best:.4g}; raise the target or '
                     'change the schedule.')
  lo_fails = False
  if use_profile:
    hi = _least(meets(False), lo, hi, 0.1)
    while hi / 2 >= lo and meets(True)(hi / 2):
      hi /= 2
    if hi / 2 >= lo:
      lo, lo_fails = hi / 2, True
  return peer_at(_least(meets(use_profile), lo, hi, rtol, lo_fails))


def _least(meets, lo: float, hi: float, rtol: float,
           lo_fails: bool = False) -> float:
  """The geometric bisection of `calibrate`: with meets(hi) true, the least
  z found in [lo, hi] that meets, to relative width `rtol`; lo itself where
  the bisection reaches it and lo meets (asked only then, and not where
  `lo_fails` says it misses)."""
  low = lo
  while hi / lo > 1 + rtol:
    mid = math.sqrt(lo * hi)
    if meets(mid):
      hi = mid
    else:
      lo = mid
  if lo == low and hi != lo and not lo_fails and meets(lo):
    return lo
  return hi
