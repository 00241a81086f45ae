"""TFF aggregation factories: any tff_quant mechanism behind TFF's secure sum.

What each export is for:
* `QuantizationFactory`: the one generic `tff.aggregators.
  UnweightedAggregationFactory` (clip, optional rotation, encode, secure sum,
  decode, mean) for any mechanism.
* `check_secure_only(process, model_aggregator, value_type)`: raises
  `UnsecuredReleaseError` naming every aggregation of client values outside a
  secure sum (TFF's default metrics, the counts of TFF's clipping/zeroing
  wrappers), where it sits, and the fix: the ε of a calibrated factory covers
  nothing else.
* `mechanism_factory(name, clip_norm, params, ...)`: it, for a name in
  `tff_quant.mechanisms.registry()`; the shorthands `rqm_factory`,
  `pbm_factory`, `bq_factory`, `qmgeo_factory`, `quantized_gaussian_factory`;
  `clipped_mean_factory`: the noise-free baseline.
* `weighted(factory)` / `UniformlyWeighted`: a factory for TFF's weighted
  algorithms (client weights dropped on purpose).
* `recording()`, `mechanisms_used(factory, value_type)` -> [`Created`]: what
  every QuantizationFactory inside a (wrapped) factory built: the mechanism
  and dimension the accountant needs.
* `find_measurements(metrics)`: the per-round measurements in a process's
  metrics; `secure_sum_bits(n, L)`: the field the secure sum needs;
  `refuse_no_privacy(mech)` (no TensorFlow): the factories' check that a
  mechanism gives some privacy.
TFF's own DP aggregators as peers on the same accountant: the `peers` module;
`packed_peers`: TFF's distributed DP sum with K clients per value (the packed
path), each row through TFF's own per-client pipeline.

Importing the package (or `peers`) does not start TensorFlow: the factories
are imported when first read (PEP 562), so a binary refuses a bad flag first.
"""

from tff_quant.aggregators.no_privacy import refuse_no_privacy

_EXPORTS = {
    'constructors': ('UniformlyWeighted', 'bq_factory', 'clipped_mean_factory',
                     'mechanism_factory', 'pbm_factory', 'qmgeo_factory',
                     'quantized_gaussian_factory', 'rqm_factory', 'weighted'),
    'secure_only': ('UnsecuredReleaseError', 'check_secure_only',
                    'unsecured_aggregations'),
    'quantization_factory': ('Created', 'QuantizationFactory',
                             'find_measurements', 'mechanisms_used',
                             'recording', 'secure_sum_bits'),
}
__all__ = ['refuse_no_privacy'] + [name for names in _EXPORTS.values()
                                   for name in names]


def __getattr__(name):
  """The TensorFlow-backed exports, imported when first read."""
  # pylint: disable=g-import-not-at-top
  if name in _EXPORTS['constructors']:
    from tff_quant.aggregators import constructors
    return getattr(constructors, name)
  if name in _EXPORTS['secure_only']:
    from tff_quant.aggregators import secure_only
    return getattr(secure_only, name)
  if name in _EXPORTS['quantization_factory']:
    from tff_quant.aggregators import quantization_factory
    return getattr(quantization_factory, name)
  raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
  return sorted(set(globals()) | set(__all__))
