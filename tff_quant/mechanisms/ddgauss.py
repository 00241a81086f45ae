"""Distributed discrete Gaussian (Kairouz, Liu, Steinke, ICML 2021), as TFF's `DistributedDpSumFactory` runs it.

Each client adds a discrete Gaussian N_Z(0, σ²) (P(z) ∝ e^(-z²/2σ²) on the
integers) to its stochastically rounded coordinate, mod M (`modular`). The sum
of n such noises is not a discrete Gaussian; its law mod M is computed exactly
by convolution (`ModularNoiseMechanism.noise_sum_log_pmf`). KLS21 bound its RDP
in closed form (`accounting.bounds.ddgauss_rdp`); ours is exact and below it.
"""

import numpy as np
from scipy import special

from tff_quant.mechanisms import modular


class DistributedDiscreteGaussian(modular.ModularNoiseMechanism):
  """DistributedDiscreteGaussian(clip=c, num_levels=M, steps=r, noise_std=σ)."""

  name = 'ddgauss'

  def noise_log_pmf(self, z):
    z = np.asarray(z, np.float64)
    half = int(np.ceil(modular.WINDOW_MODULI * self.m))
    window = np.arange(-half, half + 1, dtype=np.float64)   # >= 20σ each side
    log_norm = special.logsumexp(-window**2 / (2 * self.noise_std**2))
    return -z**2 / (2 * self.noise_std**2) - log_norm
