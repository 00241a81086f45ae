"""Convenience constructors: one line per mechanism, all built on QuantizationFactory.

Each takes the l2 `clip_norm` of a client's whole update. The per-coordinate range
c_inf is clip_norm / sqrt(d) (d known in `create`), as in the RQM/PBM EMNIST setup,
unless `coordinate_clip` fixes it. `rotate=True` wraps the factory in TFF's own
`HadamardTransformFactory`, so coordinate clipping is not biased toward large
coordinates (the rotation preserves the l2 norm; d becomes the padded size).
"""

from typing import Callable, Optional

import tensorflow_federated as tff

from tff_quant import mechanisms
from tff_quant.aggregators import quantization_factory
from tff_quant.mechanisms import base


def _build(builder: Callable[[float], base.Mechanism], clip_norm: float,
           coordinate_clip: Optional[float], rotate: bool, seed: Optional[int],
           max_clients_per_round: Optional[int]):
  base.check_in_range('clip_norm', clip_norm, 0, None, low_open=True)
  if coordinate_clip is not None:
    base.check_in_range('coordinate_clip', coordinate_clip, 0, None, low_open=True)
    mechanism = builder(float(coordinate_clip))
  else:
    mechanism = builder
    builder(1.0)  # validate the other parameters now, not at create()
  factory = quantization_factory.QuantizationFactory(
      mechanism, clip_norm=clip_norm, seed=seed,
      max_clients_per_round=max_clients_per_round)
  if not isinstance(rotate, bool):
    raise ValueError(f'`rotate` must be a bool, got {rotate!r}.')
  return tff.aggregators.HadamardTransformFactory(factory) if rotate else factory


def rqm_factory(clip_norm: float, num_levels: int = 16, q: float = 0.42,
                delta_ratio: float = 1.0, *, coordinate_clip=None, rotate=False,
                seed=None, max_clients_per_round=None):
  """RQM with Δ = delta_ratio * c_inf (paper: (Δ/c, q) = (1, .42), (2, .57), ...)."""
  base.check_in_range('delta_ratio', delta_ratio, 0, None, low_open=True)
  return _build(lambda c: mechanisms.RQM(c, delta_ratio * c, num_levels, q),
                clip_norm, coordinate_clip, rotate, seed, max_clients_per_round)


def pbm_factory(clip_norm: float, num_levels: int = 16, theta: float = 0.25, *,
                coordinate_clip=None, rotate=False, seed=None,
                max_clients_per_round=None):
  """PBM: Binomial(m-1, 1/2 + θ x / c_inf)."""
  return _build(lambda c: mechanisms.PBM(c, num_levels, theta), clip_norm,
                coordinate_clip, rotate, seed, max_clients_per_round)


def bq_factory(clip_norm: float, s: int, m: int, *, coordinate_clip=None,
               rotate=False, seed=None, max_clients_per_round=None):
  """BQ: s-level sign/magnitude quantization + Binomial(m, 1/2) noise."""
  return _build(lambda c: mechanisms.BQ(c, s, m), clip_norm, coordinate_clip,
                rotate, seed, max_clients_per_round)


def qmgeo_factory(clip_norm: float, num_levels: int = 8, p: float = 0.5,
                  full_support: bool = False, *, coordinate_clip=None,
                  rotate=False, seed=None, max_clients_per_round=None):
  """QMGeo (full_support=True is the variant with a finite ε)."""
  return _build(lambda c: mechanisms.QMGeo(c, num_levels, p, full_support),
                clip_norm, coordinate_clip, rotate, seed, max_clients_per_round)


def quantized_gaussian_factory(clip_norm: float, num_levels: int = 16,
                               noise_multiplier: float = 1.0, *,
                               coordinate_clip=None, rotate=False, seed=None,
                               max_clients_per_round=None):
  """Quantized Gaussian: inputs in [-Cq/2, Cq/2] = [-c_inf, c_inf], σ = z * Cq."""
  base.check_in_range('noise_multiplier', noise_multiplier, 0, None, low_open=True)
  return _build(
      lambda c: mechanisms.QuantizedGaussian(2 * c, num_levels,
                                             noise_multiplier * 2 * c),
      clip_norm, coordinate_clip, rotate, seed, max_clients_per_round)


def clipped_mean_factory(clip_norm: float):
  """Noise-free baseline: l2 clip then the plain mean (no privacy, no secure sum)."""
  base.check_in_range('clip_norm', clip_norm, 0, None, low_open=True)
  return tff.aggregators.clipping_factory(
      clip_norm, tff.aggregators.UnweightedMeanFactory())


FACTORIES = {
    'rqm': rqm_factory, 'pbm': pbm_factory, 'bq': bq_factory,
    'qmgeo': qmgeo_factory, 'quantized_gaussian': quantized_gaussian_factory,
}
