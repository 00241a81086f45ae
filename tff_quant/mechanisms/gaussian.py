"""The continuous Gaussian mechanism: the floor every quantization mechanism is compared with.

Each of n clients adds N(0, σ²) to each coordinate in [-c, c] (equivalently, a
server adds N(0, nσ²) to the sum). It sends floats, so it does not go through
the secure sum (`central`): the registry lists it for accounting and
calibration (`registry(include_central=True)`), and TFF's
`DifferentiallyPrivateFactory.gaussian_fixed` is its aggregator. Its round RDP
is closed form: D_α(N(0, nσ²) || N(t, nσ²)) = α t² / (2nσ²), D∞ = inf. Under
sampling, dp-accounting's Gaussian-specific bound for sampling without
replacement (WBK19 Thm 27) is tighter than the generic one, and is used too.
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
    """dp-accounting's RDP of the sampled-without-replacement Gaussian, z = √n·σ/S."""
    from dp_accounting import dp_event  # pylint: disable=g-import-not-at-top
    from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
    z = math.sqrt(num_clients) * self.sigma / l2_sensitivity
    accountant = rdp_privacy_accountant.RdpAccountant(
        list(orders), rdp_privacy_accountant.NeighborRel.REPLACE_ONE)
    accountant.compose(dp_event.SampledWithoutReplacementDpEvent(
        total_clients, num_clients, dp_event.GaussianDpEvent(z)))
    return np.asarray(accountant._rdp)  # pylint: disable=protected-access

  @property
  def divergence_breakpoint_step(self) -> float:
    """0: exp((α-1)·α t²/(2nσ²)) is convex in t everywhere."""
    return 0.0

  def sum_divergences(self, orders, num_clients, distances):
    t = np.asarray(distances, np.float64)
    var = num_clients * self.sigma**2
    return {a: (np.full(t.shape, math.inf) if math.isinf(a)
                else a * t**2 / (2 * var)) for a in orders}
