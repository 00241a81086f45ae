"""Distributed discrete Gaussian (Kairouz, Liu, Steinke, ICML 2021), as TFF's `DistributedDpSumFactory` runs it.

Each client adds a discrete Gaussian N_Z(0, σ²) (P(z) ∝ e^(-z²/2σ²) on the
integers) to its stochastically rounded coordinate, mod M (`modular`). The sum
of n such noises is not a discrete Gaussian; its law mod M is computed exactly
by convolution (`ModularNoiseMechanism.noise_sum_log_pmf`). KLS21 bound its RDP
in closed form (`accounting.bounds.ddgauss_rdp`); ours is exact and below it.
"""

import math

import numpy as np

from tff_quant.common import exact_laws
from tff_quant.mechanisms import modular


class DistributedDiscreteGaussian(modular.ModularNoiseMechanism):
  """DistributedDiscreteGaussian(clip=c, num_levels=M, steps=r, noise_std=σ)."""

  name = 'ddgauss'

  def _window(self) -> np.ndarray:
    """The integers |w| <= WINDOW_MODULI·M (>= 20σ each side) the normaliser sums."""
    half = int(np.ceil(modular.WINDOW_MODULI * self.m))
    return np.arange(-half, half + 1, dtype=np.float64)

  def _log_norm(self) -> float:
    """log Σ_w e^(-w²/(2σ²)) over the window, as log1p(2·fsum(e^(-w²/(2σ²)),
    w >= 1)): the w = 0 term is 1 exactly (`noise_log_pmf_error` bounds it);
    cached."""
    cached = self.__dict__.get('_log_norm_value')
    if cached is None:
      w = self._window()
      w = w[w >= 1]
      scale = 2.0 * (self.noise_std * self.noise_std)
      cached = math.log1p(2.0 * math.fsum(np.exp(-(w * w) / scale)))
      self.__dict__['_log_norm_value'] = cached
    return cached

  def noise_log_pmf(self, z):
    z = np.asarray(z, np.float64)
    scale = 2.0 * (self.noise_std * self.noise_std)
    return -(z * z) / scale - self._log_norm()

  def noise_log_tail(self, t: int) -> float:
    """log of an upper bound on P(|Z| > t), t >= 0 an integer: the terms
    e^(-z²/(2σ²)), z >= t + 1, fall at least by e^(-(2t+3)/(2σ²)) per step,
    and the normaliser is >= 1 (its z = 0 term), so P(|Z| > t) <=
    2e^(-(t+1)²/(2σ²)) / (1 - e^(-(2t+3)/(2σ²))); raised by 1e-12 for its
    own few roundings."""
    v2 = 2.0 * self.noise_std**2
    return (math.log(2.0) - (t + 1)**2 / v2 -
            math.log(-math.expm1(-(2 * t + 3) / v2))) + 1e-12

  def noise_log_pmf_error(self, z):
    """[z.size] proved bounds on |noise_log_pmf(z) - log P(Z = z)|, P the
    discrete Gaussian on all integers, |z| within the window.

    Model of arithmetic: docs/privacy.md, "Numerics" (u = 2^-53 per
    operation, exp/log/log1p within ELEMENTARY_ULPS, lib = 2·ELEMENTARY_ULPS·u
    relative). z·z is exact (|z| < 2^26), the scale 2σ·σ carries u, the
    quotient q̃ = z²/scale one more: |q̃ - q| <= 2.0001u·q. The normaliser
    L̃ = log1p(2·fsum(e^(-q̃_w))): each term is within e^(2.0001u·q_w + lib)
    of exact, and the terms pass into log1p weighted by their share of the
    whole normaliser (S/(1+S) <= 1: log1p's derivative), so L̃ moves by at
    most 2.0001u·E[q] + lib (E[q] = Σ_w P(w)·q_w, computed and raised by 1%
    plus 1e-6: a bound of a bound), the doubling exact, fsum's single
    rounding u, log1p's lib·|L̃|; the window leaves out the mass
    `noise_log_tail`(half) (relative to a normaliser >= 1, so log1p of it).
    The entry -q̃ - L̃ adds u·|value|. Everything raised by 1.01 (second
    order).

    Args:
      z: integers with |z| <= WINDOW_MODULI·M.

    Returns:
      The bounds, float64, >= 0.
    """
    z = np.asarray(z, np.float64)
    u, lib = exact_laws.U, 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U
    scale = 2.0 * (self.noise_std * self.noise_std)
    window = self._window()
    q_w = (window * window) / scale
    p_w = np.exp(-q_w - self._log_norm())
    mean_q = 1.01 * float(np.dot(p_w, q_w)) + 1e-6
    log_norm = self._log_norm()
    half = int(window[-1])
    norm_err = (2.0001 * u * mean_q + lib + u + lib * abs(log_norm) +
                math.exp(self.noise_log_tail(half)))
    q = (z * z) / scale
    value = np.abs(q + log_norm)
    return 1.01 * (2.0001 * u * q + norm_err + u * value)
