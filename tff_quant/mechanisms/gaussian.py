"""The continuous Gaussian mechanism: the floor every quantization mechanism is compared with.

Each of n clients adds N(0, σ²) to each coordinate in [-c, c] (equivalently, a
server adds N(0, nσ²) to the sum). It sends floats, so it does not go through
the secure sum (`central`): the registry lists it for accounting and
calibration (`registry(include_central=True)`), and TFF's
`DifferentiallyPrivateFactory.gaussian_fixed` is its aggregator. Its round RDP
is closed form: D_α(N(0, nσ²) || N(t, nσ²)) = α t² / (2nσ²), D∞ = inf. Under
sampling, dp-accounting's Gaussian-specific bound for sampling without
replacement (WBK19 Thm 27) is tighter than the generic one, and is used too
(`sampled_without_replacement_rdp`: dp-accounting's numbers, its table of
forward differences built once for every order).
"""

import math

import numpy as np

from tff_quant.common import validation
from tff_quant.mechanisms import base
from tff_quant.mechanisms import utility


class Gaussian(base.Mechanism):
  """Gaussian(clip=c, sigma=σ): σ per client and coordinate, inputs in [-c, c]."""

  name = 'gaussian'
  central = True
  TUNABLES = (
      base.Tunable('noise_multiplier', 1.0, 0, None, low_open=True,
                   more_private='higher',
                   doc='σ / c∞ per client (the sum of n has std √n·σ)'),
  )
  CALIBRATED = ('noise_multiplier',)

  def __init__(self, clip: float, sigma: float):
    self.clip = float(validation.check_positive('clip', clip))
    self.sigma = float(validation.check_positive('sigma', sigma))

  @classmethod
  def for_coordinate_bound(cls, c_inf, **params):
    p = cls.complete_params(params)
    return cls(c_inf, p['noise_multiplier'] * c_inf)

  def params(self):
    return dict(clip=self.clip, sigma=self.sigma)

  @classmethod
  def gaussian_matched(cls, sigma, c_inf, params):
    """σ/c∞: the Gaussian at another route's calibration (the profile
    route's search starts from the RDP route's σ, which it meets)."""
    del params
    return sigma / c_inf

  @property
  def num_levels(self):
    return 2**32   # a float32 per coordinate

  @property
  def input_bound(self):
    return self.clip

  @property
  def level_offset(self):
    raise TypeError('The continuous Gaussian has no levels.')

  @property
  def level_step(self):
    raise TypeError('The continuous Gaussian has no levels.')

  def critical_inputs(self):
    return np.array([-self.clip, self.clip])

  def log_pmf(self, x):
    raise TypeError('The continuous Gaussian has a density, not a pmf; its RDP '
                    'is closed form (sum_divergences).')

  def _encode(self, x, seed):
    """No sampler (`central`: accounted, never encoded), so no support to
    stay inside; TFF's Gaussian aggregator adds the noise."""
    raise TypeError('The continuous Gaussian sends floats, not levels through '
                    'the secure sum: use tff.aggregators.DifferentiallyPrivate'
                    'Factory.gaussian_fixed.')

  def worst_case_variance(self):
    return self.sigma**2

  def signal_utility(self, num_clients, signal_bound=None):
    """σ²/n at slope 1: the decoded mean is x plus N(0, σ²/n) for every x."""
    n = validation.check_integer('num_clients', num_clients, 1)
    a = utility.resolve_signal_bound(self, signal_bound)
    var = self.sigma**2 / n
    return utility.SignalUtility(var, 1.0, var, 0.0, a, n)

  def decoded_moments(self, num_clients, x):
    """(clip(x), σ²/n, 1): the mean of n clients' x + N(0, σ²), x clipped."""
    n = validation.check_integer('num_clients', num_clients, 1)
    return self.clip_input(x), self.sigma**2 / n, 1.0

  def subsampled_rdp(self, orders, num_clients, total_clients, l2_sensitivity):
    """dp-accounting's RDP of the sampled-without-replacement Gaussian (WBK19
    Thm 27), z = √n·σ/S, q = n/N: `sampled_without_replacement_rdp`."""
    z = math.sqrt(num_clients) * self.sigma / l2_sensitivity
    return sampled_without_replacement_rdp(num_clients / total_clients, z,
                                           orders)

  @property
  def divergence_breakpoint_step(self) -> float:
    """0: exp((α-1)·α t²/(2nσ²)) is convex in t everywhere."""
    return 0.0

  def sum_divergences(self, orders, num_clients, distances):
    t = np.asarray(distances, np.float64)
    var = num_clients * self.sigma**2
    return {a: (np.full(t.shape, math.inf) if math.isinf(a)
                else a * t**2 / (2 * var)) for a in orders}


# dp-accounting computes Thm 27 exactly up to this order (Stirling above).
_EXACT_MAX_ORDER = 256


def sampled_without_replacement_rdp(q: float, z: float, orders) -> np.ndarray:
  """The RDP of the Gaussian of noise multiplier z under sampling without
  replacement at rate q (WBK19 Thm 27, replace-one), at each order: the same
  numbers as dp-accounting's `RdpAccountant` composing one
  `SampledWithoutReplacementDpEvent`, computed once for all orders.

  For an integer order α <= 256, Thm 27 sums j = 2..α terms, each the lesser
  of 4·√(Δ^{2⌊j/2⌋}·Δ^{2⌈j/2⌉}) and 2·e^{(j−1)ε(j)}, Δ^k the k-th forward
  difference at 0 of e^{x(x+1)/(2z²)} (ε(j) = j/(2z²) the Gaussian's RDP).
  dp-accounting builds the table of differences anew for every order, at
  O(α²); Δ^k reads the function at 0..k only, so the table built once for
  the largest order holds the same numbers, made by the same operations,
  for every smaller one. Each order's sum is then added in dp-accounting's
  order with its helpers, so the results are equal to the last bit (tested);
  the other orders (fractional, above 256, inf) and q ∈ {0, 1} go to
  dp-accounting's own function.

  Args:
    q: the sampling rate n/N in [0, 1].
    z: the noise multiplier σ/S (> 0).
    orders: Rényi orders α >= 1.

  Returns:
    The per-round RDP at each order (float64 array; inf where unbounded).

  Raises:
    AssertionError: q outside [0, 1] or an order below 1 (dp-accounting's
      own checks).
  """
  from dp_accounting.rdp import rdp_privacy_accountant as rdp_lib  # pylint: disable=g-import-not-at-top
  # pylint: disable=protected-access
  orders = np.asarray(orders, np.float64)
  exact = [int(a) for a in orders
           if a.is_integer() and 2 <= a <= _EXACT_MAX_ORDER]
  out = np.zeros(len(orders))
  if not 0 < q < 1 or not exact:
    out += rdp_lib._compute_rdp_sample_wor_gaussian(q, z, orders)
    return out
  two_var = 2.0 * z**2
  cgf = lambda x: x * 1.0 * (x + 1) / two_var
  deltas, _ = rdp_lib._get_forward_diffs(cgf, max(exact))
  log_q = np.log(q)
  eps2 = 1.0 * 2.0 / two_var
  second = np.minimum(np.log(4) + (eps2 + np.log(1 - np.exp(-eps2))),
                      eps2 + np.log(2))
  for k, alpha in enumerate(orders):
    if alpha.is_integer() and 2 <= alpha <= _EXACT_MAX_ORDER:
      a = int(alpha)
      log_a = rdp_lib._log_add(
          0, 2 * log_q + rdp_lib._log_comb(a, 2) + second)
      for j in range(3, a + 1):
        term = np.log(4) + 0.5 * (deltas[int(2 * np.floor(j / 2.0)) - 1] +
                                  deltas[int(2 * np.ceil(j / 2.0)) - 1])
        term = np.minimum(term, np.log(2) + cgf(j - 1))
        log_a = rdp_lib._log_add(
            log_a, term + (j * log_q + rdp_lib._log_comb(a, j)))
      out[k] += float(log_a) / (alpha - 1)
    else:
      out[k] += rdp_lib._compute_rdp_sample_wor_gaussian_scalar(q, z, alpha)
  return out
