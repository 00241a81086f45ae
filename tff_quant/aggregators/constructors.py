"""Factories by mechanism name, all built on QuantizationFactory.

`mechanism_factory(name, clip_norm, params)` serves every mechanism in
`tff_quant.mechanisms.registry()`. The per-coordinate range c∞ is
k·clip_norm / √d (`accounting.setting.coordinate_clip`, d known in `create`),
as in the RQM/PBM EMNIST setup, unless `coordinate_clip` fixes it (or the
calibration `calibrated_for` does). `rotate=True` rotates each client's update by a
randomized Hadamard transform inside the factory (`QuantizationFactory(rotate=
True)`), so coordinate clipping is not biased toward large coordinates (the
rotation preserves the ℓ2 norm; d becomes the padded size, a power of two).
The named constructors below are the documented shorthands of the same call.
"""

from typing import Dict, Optional

import tensorflow_federated as tff

from tff_quant import mechanisms
from tff_quant.accounting import calibration
from tff_quant.accounting import setting
from tff_quant.aggregators import quantization_factory
from tff_quant.common import validation


def mechanism_factory(name: str, clip_norm: float,
                      params: Optional[Dict[str, object]] = None, *,
                      coordinate_clip: Optional[float] = None,
                      coordinate_clip_multiple: Optional[float] = None,
                      rotate: bool = False,
                      seed: Optional[int] = None,
                      max_clients_per_round: Optional[int] = None,
                      sum_factory=None, allow_no_privacy: bool = False,
                      clients_per_value: int = 1,
                      diagnostics: bool = False,
                      calibrated_for: Optional[
                          setting.CalibratedSetting] = None,
                      wire_bits: Optional[int] = None):
  """A QuantizationFactory for the registered mechanism `name`.

  With `calibrated_for` (the `CalibratedSetting` of a calibration, which
  `Calibration.params` carries, so `rqm_factory(clip, **cal.params)` passes
  it) the factory runs exactly the calibrated mechanism: c∞ is the calibrated
  one, and every argument that would change the ε calibration reported is
  refused here, or at `create` for the dimension; and every round outside
  the calibrated schedule (past its `rounds`, fewer contributing clients than
  its `min_clients_per_round` or more than its `clients_per_round`) fails
  before its output is released (`QuantizationFactory`; docs/privacy.md,
  "From calibration to run" and "Dropouts"). Without `calibrated_for` (raw
  parameters) no ε was promised, so no schedule is enforced.

  Args:
    name: a key of `tff_quant.mechanisms.registry()`.
    clip_norm: ℓ2 clip of each client's whole update, > 0 (with
      `calibrated_for`: at most its ℓ2 clip).
    params: the mechanism's tunables (`registry()[name].TUNABLES`); omitted ones
      take their defaults. Validated now, not at `create`. May hold
      `calibrated_for` (as `Calibration.params` does).
    coordinate_clip: a fixed c∞ > 0; default k·clip_norm / √d (with
      `calibrated_for`: the calibrated c∞, and a different value is refused).
    coordinate_clip_multiple: k > 0 in that default, 1 when omitted (k > 1
      with `rotate`: few coordinates of a rotated update exceed k·clip_norm/√d;
      the accountant's ℓ2 route charges each coordinate what the ℓ2 budget
      allows). With `calibrated_for`, k·clip_norm/√d must equal its c∞.
    rotate: rotate each client's update (see `QuantizationFactory`); per
      client, so it also works with `clients_per_value` > 1.
    seed: None (unpredictable client seeds) or an int (reproducible experiments).
    max_clients_per_round: see `QuantizationFactory` (with `calibrated_for`:
      at least its clients_per_round).
    sum_factory: see `QuantizationFactory` (default TFF's SecureSumFactory).
    allow_no_privacy: see `QuantizationFactory` (default: refuse a mechanism
      that gives no privacy, checked now).
    clients_per_value: see `QuantizationFactory` (K clients stacked per value,
      the packed simulation path).
    diagnostics: see `QuantizationFactory` (default False: the server learns
      only n besides the level sum; True releases clipping counts outside ε).
    calibrated_for: an `accounting.CalibratedSetting` (see above).
    wire_bits: see `QuantizationFactory` (None: the exact level sum; b: a
      field of 2^b, refused at `create` where it cannot hold the cohort's
      sum).

  Returns:
    The factory (a `tff.aggregators.UnweightedAggregationFactory`).

  Raises:
    ValueError: an unknown name or parameter, a bad number (naming it and its
      range), or, with `calibrated_for`, a mechanism, tunable, c∞ or ℓ2 clip
      other than the calibrated ones, a bound='attained' calibration (not
      a guarantee), or a `max_clients_per_round` (or secure-sum range) that
      cannot hold the calibrated clients_per_round.
    TypeError: `calibrated_for` not an `accounting.CalibratedSetting`.
  """
  params = dict(params or {})
  if calibration.CALIBRATED_FOR in params:
    given = params.pop(calibration.CALIBRATED_FOR)
    if calibrated_for is not None and calibrated_for != given:
      raise ValueError('`calibrated_for` given twice, with two settings.')
    calibrated_for = given
  cls = mechanisms.get(name)
  full = cls.complete_params(params)
  validation.check_positive('clip_norm', clip_norm)
  validation.check_bool('rotate', rotate)
  validation.check_optional(validation.check_positive, 'coordinate_clip_multiple',
                            coordinate_clip_multiple)
  if calibrated_for is not None:
    if not isinstance(calibrated_for, setting.CalibratedSetting):
      raise TypeError('`calibrated_for` must be an accounting.CalibratedSetting '
                      f'(`Calibration.setting`), got '
                      f'{type(calibrated_for).__name__}.')
    coordinate_clip = calibrated_for.checked_clip(
        name, full, clip_norm, coordinate_clip, coordinate_clip_multiple)
  if coordinate_clip is not None:
    mechanism = cls.for_coordinate_bound(
        validation.check_positive('coordinate_clip', coordinate_clip), **full)
  else:   # c∞ = k·clip_norm/√d, d known in `create`
    mechanism = lambda c: cls.for_coordinate_bound(c, **full)
  factory = quantization_factory.QuantizationFactory(
      mechanism, clip_norm=clip_norm, seed=seed,
      max_clients_per_round=max_clients_per_round, sum_factory=sum_factory,
      allow_no_privacy=allow_no_privacy, clients_per_value=clients_per_value,
      rotate=rotate, diagnostics=diagnostics, calibrated_for=calibrated_for,
      coordinate_clip_multiple=(1.0 if coordinate_clip_multiple is None
                                else coordinate_clip_multiple),
      wire_bits=wire_bits)
  if coordinate_clip is None:  # parameters' joint constraints and privacy, now
    factory.check_mechanism(mechanism(1.0))
  return factory


def rqm_factory(clip_norm: float, num_levels: int = 16, q: float = 0.42,
                delta_ratio: float = 1.0, **kwargs):
  """RQM with Δ = delta_ratio · c∞ (paper: (Δ/c, q) = (1, .42), (2, .57), ...).

  Args:
    clip_norm: ℓ2 clip of each client update, > 0.
    num_levels, q, delta_ratio: RQM's tunables (`mechanisms.RQM.TUNABLES`).
    **kwargs: as `mechanism_factory` (coordinate_clip, rotate, seed, ...).
  """
  return mechanism_factory('rqm', clip_norm, dict(
      num_levels=num_levels, q=q, delta_ratio=delta_ratio), **kwargs)


def pbm_factory(clip_norm: float, num_levels: int = 16, theta: float = 0.25,
                **kwargs):
  """PBM: Binomial(m-1, 1/2 + θ x / c∞).

  Args:
    clip_norm: ℓ2 clip of each client update, > 0.
    num_levels, theta: PBM's tunables.
    **kwargs: as `mechanism_factory`.
  """
  return mechanism_factory('pbm', clip_norm, dict(num_levels=num_levels,
                                                  theta=theta), **kwargs)


def bq_factory(clip_norm: float, s: int, m: int, **kwargs):
  """BQ: s-level sign/magnitude quantization + Binomial(m, 1/2) noise.

  Args:
    clip_norm: ℓ2 clip of each client update, > 0.
    s, m: BQ's tunables.
    **kwargs: as `mechanism_factory`.
  """
  return mechanism_factory('bq', clip_norm, dict(s=s, m=m), **kwargs)


def qmgeo_factory(clip_norm: float, num_levels: int = 8, p: float = 0.5,
                  full_support: bool = True, **kwargs):
  """QMGeo; full_support=False is the as-written sampler, whose ε is inf.

  Args:
    clip_norm: ℓ2 clip of each client update, > 0.
    num_levels, p, full_support: QMGeo's tunables.
    **kwargs: as `mechanism_factory`.
  """
  return mechanism_factory('qmgeo', clip_norm, dict(
      num_levels=num_levels, p=p, full_support=full_support), **kwargs)


def quantized_gaussian_factory(clip_norm: float, num_levels: int = 16,
                               noise_multiplier: float = 1.0, **kwargs):
  """Quantized Gaussian: inputs in [-Cq/2, Cq/2] = [-c∞, c∞], σ = z · Cq.

  Args:
    clip_norm: ℓ2 clip of each client update, > 0.
    num_levels, noise_multiplier: the quantized Gaussian's tunables.
    **kwargs: as `mechanism_factory`.
  """
  return mechanism_factory('quantized_gaussian', clip_norm, dict(
      num_levels=num_levels, noise_multiplier=noise_multiplier), **kwargs)


def clipped_mean_factory(clip_norm: float):
  """Noise-free baseline: ℓ2 clip then the plain mean (no privacy, no secure sum).

  Args:
    clip_norm: ℓ2 clip of each client update, > 0.
  """
  validation.check_positive('clip_norm', clip_norm)
  return tff.aggregators.clipping_factory(
      clip_norm, tff.aggregators.UnweightedMeanFactory())


class UniformlyWeighted(tff.aggregators.WeightedAggregationFactory):
  """A weighted-algorithm form of an unweighted factory: every client counts once.

  TFF's weighted algorithms (`build_weighted_fed_avg`, `build_fed_sgd`,
  `build_weighted_fed_prox`, `build_weighted_mime_lite`, ...) pass client
  weights (e.g. example counts). DP aggregation must not use them: a client's
  influence on the sum is what the accountant bounds (ℓ2 clip, one client), and
  a weight would scale it without bound. So the weights are dropped here, on
  purpose and by name, and the result is the uniform mean of the clients.

  Args:
    factory: a `tff.aggregators.UnweightedAggregationFactory` (e.g. any factory
      of this package).
  """

  def __init__(self, factory: tff.aggregators.UnweightedAggregationFactory):
    if not isinstance(factory, tff.aggregators.UnweightedAggregationFactory):
      raise TypeError('`factory` must be a tff.aggregators.'
                      f'UnweightedAggregationFactory, got {type(factory).__name__}.')
    self.unweighted = factory

  def create(self, value_type, weight_type):
    inner = self.unweighted.create(value_type)

    @tff.federated_computation(inner.state_type,
                               tff.FederatedType(value_type, tff.CLIENTS),
                               tff.FederatedType(weight_type, tff.CLIENTS))
    def next_fn(state, value, weight):
      del weight  # uniform weighting: see the class docstring
      return inner.next(state, value)

    return tff.templates.AggregationProcess(inner.initialize, next_fn)


def weighted(factory) -> UniformlyWeighted:
  """`factory` for TFF's weighted algorithms, client weights ignored (see
  `UniformlyWeighted`): e.g. build_weighted_fed_avg(..., model_aggregator=
  aggregators.weighted(aggregators.rqm_factory(0.03)))."""
  return UniformlyWeighted(factory)
