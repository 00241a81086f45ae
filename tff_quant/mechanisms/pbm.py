"""Poisson Binomial Mechanism (PBM), Chen, Özgür, Kairouz (ICML 2022).

A client with x in [-c, c] sends k ~ Binomial(m-1, 1/2 + θ x / c), θ in (0, 1/2].
E[k] = (m-1)(1/2 + θx/c), so value(k) = c (k - (m-1)/2) / (θ (m-1)) is unbiased.
θ = 1/2 makes the output at x = +-c deterministic, hence D-infinity = inf: the
accountant reports that honestly rather than refusing the parameter.
"""

import numpy as np

from tff_quant.common import exact_laws
from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf


class PBM(base.Mechanism):
  """PBM(clip=c, num_levels=m, theta=θ)."""

  name = 'pbm'
  unbiased = True
  TUNABLES = (
      base.levels_tunable(16, 'm'),
      # Calibrated θ falls like 1/√(levels): 1e-4 at 2^16 levels, n = 40.
      base.Tunable('theta', 0.25, 0, 0.5, low_open=True, more_private='lower',
                   doc='success-probability spread θ', search_low=1e-9),
  )
  CALIBRATED = ('theta',)

  def __init__(self, clip: float, num_levels: int, theta: float):
    self.clip = float(validation.check_positive('clip', clip))
    self.m = self.tunable('num_levels').check(num_levels)
    self.theta = float(self.tunable('theta').check(theta))
    # The sampler snaps p within τ of 0 or 1 (`base.snap_to_integers`): a θ
    # whose end probabilities lie that close, but not on 0 and 1, would be
    # sampled as θ = 1/2 and accounted as less.
    tau = 2 * base.SNAP_ULPS * 2.0**-53
    if 0 < 0.5 - self.theta and (1 - (0.5 + self.theta) <= tau or
                                 0.5 - self.theta <= tau):
      raise ValueError(
          f'`theta`={self.theta!r} puts the trials\' success probabilities '
          f'within {tau:.3g} of 0 and 1, which the sampler rounds to 0 and 1 '
          '(theta = 1/2, a deterministic output at the ends): allowed '
          f'0 < theta <= {0.5 - 2 * tau!r}, or theta = 0.5.')
    # XLA has no binomial kernel; TF's sampler serves more trials.
    self.jit_encode = self.m - 1 <= base.INVERSION_MAX_TRIALS

  @property
  def piecewise_affine(self):
    """One trial (2 levels): P_x(1) = 1/2 + θx/c is affine on [-c, c]."""
    return self.m == 2

  def _sum_reduction(self, num_clients):
    """m - 1 Bernoulli trials, each the 2-level PBM at the same θ and clip.

    The server's view is a function of the m - 1 per-trial secure sums (data
    processing), and Rényi divergence adds over independent releases, for any
    inputs of the others. Per trial the law is affine in x, so its search is
    exact; cell envelopes over x charged each cell's whole spread (~θ/32 per
    coordinate at 64 cells), which dwarfs the true θ²t²/c²-sized divergence at
    calibrated θ.
    """
    if self.m == 2:
      return None
    return base.SumReduction(
        PBM(self.clip, 2, self.theta), self.m - 1, num_clients,
        f'{self.m - 1} independent one-trial releases bound the secure sum '
        '(data processing, composition)')

  def params(self):
    return dict(clip=self.clip, num_levels=self.m, theta=self.theta)

  @property
  def num_levels(self):
    return self.m

  @property
  def input_bound(self):
    return self.clip

  @property
  def level_step(self):
    return self.clip / (self.theta * (self.m - 1))

  @property
  def level_offset(self):
    return -0.5 * (self.m - 1) * self.level_step

  def success_prob(self, x: float) -> float:
    """½ + θ·x/c: each trial's success probability at input x (clipped to [-c, c])."""
    return 0.5 + self.theta * self.clip_input(x) / self.clip

  def log_pmf(self, x):
    """Binomial(m - 1, p(x)), proved to `log_pmf_error` (`exact_laws`)."""
    return exact_laws.log_binomial(self.m - 1, self.success_prob(x))[0].copy()

  @property
  def log_pmf_error(self) -> float:
    """`exact_laws.log_binomial_error_bound` over p in [1/2 - θ, 1/2 + θ]
    (the float p = 1/2 + θx/c stays in it: each operation is monotone)."""
    return exact_laws.log_binomial_error_bound(
        self.m - 1, max(0.5 - self.theta, 0.0), min(0.5 + self.theta, 1.0))

  def positive_everywhere(self) -> bool:
    """θ < 1/2: p(x) >= fl(1/2 - θ) > 0 and <= fl(1/2 + θ) < 1 at every
    input (each operation of `success_prob` is monotone), and
    `exact_laws.log_binomial` is finite everywhere for p in (0, 1)."""
    return 0.0 < 0.5 - self.theta and 0.5 + self.theta < 1.0

  def critical_inputs(self):
    # P_x(k) is unimodal in p = 1/2 + θx/c with mode p = k/(m-1): min at +-c,
    # max at the mode when it lies inside the range.
    p_modes = np.arange(self.m) / (self.m - 1)
    x_modes = (p_modes - 0.5) * self.clip / self.theta
    inside = x_modes[(x_modes > -self.clip) & (x_modes < self.clip)]
    return np.concatenate([[-self.clip], inside, [self.clip]])

  def _encode(self, x, seed):
    """Binomial(m - 1, p) for the float64 input `sanitize` clipped.

    Inside the support: p = ½ + θ·x/c is `success_prob`'s (float64, the same
    operations on the same clipped x, up to the compiler's roundings),
    clamped to [½ - θ, ½ + θ] ∩ [0, 1] and snapped to 0 or 1 within
    rounding error (`base.snap_to_integers`: where the pmf's p is 1, at
    θ = ½ and x = c, the sampler's is 1 too); `base.binomial` returns a
    count in [0, m - 1], and at p = 1 or 0 the one level the pmf allows.
    The law at x >= c is the pmf's at c (a float32 p at float32(c) > c was
    a law past the range), computed in float64.
    """
    x = tf.cast(x, tf.float64)
    p = 0.5 + self.theta * x / self.clip
    p = tf.clip_by_value(p, max(0.0, 0.5 - self.theta), min(1.0, 0.5 + self.theta))
    return base.binomial(seed, self.m - 1, base.snap_to_integers(p, 1.0))
