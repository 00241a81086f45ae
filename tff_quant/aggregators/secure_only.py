"""One check that a TFF process releases client values only through secure sums.

The accountant bounds what the server sees of the model update: the secure
sum of the clients' levels, and the public number of contributors. A process
that also aggregates client values in the clear — TFF's default metrics
aggregator, the clipped/zeroed-client counts of `tff.aggregators.
clipping_factory` / `zeroing_factory`, an adaptive clip's quantile estimate —
releases more than that, and no ε of this library covers it.
`check_secure_only` finds every such aggregation in the process's
computations (TFF's own tree analysis: an intrinsic whose aggregation kind is
not SECURE, e.g. `federated_sum`, `federated_mean`, `federated_aggregate`),
names each with the type it aggregates and, where a model aggregator is
given, whether the aggregator itself or another part of the process (the
metrics) releases it, and how to make it secure.
"""

from typing import List, Sequence

import numpy as np
import tensorflow_federated as tff
# TFF's public `tff.test.assert_not_contains_unsecure_aggregation` only says
# that some call is unsecured; its tree analysis lists them, so the error can
# name each one.
from tensorflow_federated.python.core.impl.compiler import tree_analysis


class UnsecuredReleaseError(ValueError):
  """A TFF computation aggregates client values outside a secure sum."""


#: How each unsecured release is usually made secure.
_FIXES = (
    'metrics: build the process with metrics_aggregator='
    'tff.learning.metrics.secure_sum_then_finalize (TFF\'s default sums '
    'metrics in the clear)',
    'tff.aggregators.clipping_factory / zeroing_factory: pass '
    'clipped_count_sum_factory= / zeroed_count_sum_factory='
    'tff.aggregators.SecureSumFactory(upper_bound_threshold=1) (their '
    'default counts clipped or zeroed clients with an unsecured SumFactory)',
    'adaptive clipping (a quantile estimator) aggregates its estimate in the '
    'clear: use a fixed clip norm, which is what the calibration assumed',
)


def unsecured_aggregations(comp) -> List[str]:
  """Each aggregation of client values in `comp` that is not a secure sum.

  Args:
    comp: a `tff.Computation` (e.g. `process.next`).

  Returns:
    One line per unsecured intrinsic call: its URI and the type of what it
    aggregates (e.g. 'federated_sum of <int32>@CLIENTS'); empty when every
    aggregation is secure.

  Raises:
    TypeError: if `comp` is not a TFF computation.
  """
  if not hasattr(comp, 'to_building_block'):
    raise TypeError(f'comp: expected a tff.Computation (e.g. process.next), '
                    f'got {type(comp).__name__}.')
  calls = tree_analysis.find_unsecure_aggregation_in_tree(
      comp.to_building_block())
  lines = []
  for call in calls:
    uri = getattr(call.function, 'uri', str(call.function))
    arg = call.argument.type_signature if call.argument is not None else None
    lines.append(f'{uri} of {arg}')
  return lines


def _computations(process) -> Sequence:
  """The computations of `process` that take client values."""
  if hasattr(process, 'next'):
    return [process.next]
  return [process]


def check_secure_only(process, model_aggregator=None, value_type=None,
                      what: str = 'this process') -> None:
  """Raises unless `process` aggregates client values only by secure sums.

  Use it on every process whose model aggregator is one of this library's
  factories: an ε reported for the factory holds for the whole process only
  if nothing else leaves the clients in the clear.

  Args:
    process: a `tff.templates.IterativeProcess` (its `next` is checked,
      learning and aggregation processes included) or a `tff.Computation`.
    model_aggregator: optionally, the factory the process aggregates the
      model with (as passed to TFF, wrappers included); with `value_type` the
      error says whether the aggregator itself releases in the clear.
    value_type: the model update's TFF type, for `model_aggregator`.
    what: how the error names the process.

  Raises:
    UnsecuredReleaseError: naming each unsecured aggregation, where it sits
      (the model aggregator or elsewhere, e.g. the metrics) and the fix.
    TypeError: if `process` is neither a process nor a computation.
  """
  found = []
  for comp in _computations(process):
    found += unsecured_aggregations(comp)
  if not found:
    return
  fixes = list(_FIXES)
  where = ''
  if model_aggregator is not None and value_type is not None:
    inner = _aggregator_releases(model_aggregator, value_type)
    if inner:
      where = (f' The model aggregator ({type(model_aggregator).__name__}) '
               f'itself releases {"; ".join(inner)}: a wrapper around the '
               'calibrated factory.')
      fixes = fixes[1:]
    else:
      where = (' The model aggregator is secure: the release is elsewhere '
               '(the metrics aggregator or another part of the algorithm).')
      fixes = fixes[:1]
  raise UnsecuredReleaseError(
      f'{what} aggregates client values outside a secure sum: '
      f'{"; ".join(found)}.{where} The ε of a calibrated factory does not '
      'cover such a release. To make it secure: ' + '; '.join(fixes) + '.')


def _aggregator_releases(factory, value_type) -> List[str]:
  if isinstance(factory, tff.aggregators.WeightedAggregationFactory):
    agg = factory.create(value_type, tff.TensorType(np.float32))
  else:
    agg = factory.create(value_type)
  return unsecured_aggregations(agg.next)

