"""check_secure_only: every unsecured release in a FedAvg process is named."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant import aggregators, models

SPEC = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))
VALUE_TYPE = tff.types.to_type([(np.float32, (4, 3)), (np.float32, (3,))])


def _fed_avg(model_aggregator, metrics_aggregator=None):
  model_fn = models.tff_model_fn(lambda: models.get('logreg', (4,), 3), SPEC)
  kwargs = {} if metrics_aggregator is None else dict(
      metrics_aggregator=metrics_aggregator)
  return tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      model_aggregator=model_aggregator, **kwargs)


def _rqm():
  return aggregators.rqm_factory(1.0, num_levels=4)


SECURE_METRICS = tff.learning.metrics.secure_sum_then_finalize


def test_secure_metrics_and_the_factory_pass():
  process = _fed_avg(_rqm(), SECURE_METRICS)
  aggregators.check_secure_only(process, _rqm(), VALUE_TYPE)
  assert aggregators.unsecured_aggregations(process.next) == []


def test_tffs_default_metrics_are_named_with_the_fix():
  process = _fed_avg(_rqm())
  with pytest.raises(aggregators.UnsecuredReleaseError) as err:
    aggregators.check_secure_only(process, _rqm(), VALUE_TYPE, what='my run')
  msg = str(err.value)
  assert msg.startswith('my run aggregates client values outside a secure sum')
  assert 'federated_sum of' in msg and 'loss' in msg   # the metrics' type
  assert 'The model aggregator is secure' in msg
  assert 'metrics_aggregator=tff.learning.metrics.secure_sum_then_finalize' in msg
  assert 'zeroed_count_sum_factory' not in msg


@pytest.mark.parametrize('wrap, fix', [
    (lambda f, **kw: tff.aggregators.zeroing_factory(10.0, f, **kw),
     'zeroed_count_sum_factory'),
    (lambda f, **kw: tff.aggregators.clipping_factory(10.0, f, **kw),
     'clipped_count_sum_factory'),
])
def test_tffs_robust_wrappers_are_named_and_their_secure_form_passes(wrap, fix):
  wrapped = wrap(_rqm())
  process = _fed_avg(wrapped, SECURE_METRICS)
  with pytest.raises(aggregators.UnsecuredReleaseError) as err:
    aggregators.check_secure_only(process, wrapped, VALUE_TYPE)
  msg = str(err.value)
  assert 'federated_sum of {int32}@CLIENTS' in msg   # the wrapper's count
  assert 'The model aggregator (' in msg and 'itself releases' in msg
  assert fix in msg and 'SecureSumFactory' in msg
  # The secure form the error names passes.
  count_factory = tff.aggregators.SecureSumFactory(upper_bound_threshold=1)
  secure = wrap(_rqm(), **{fix: count_factory})
  aggregators.check_secure_only(_fed_avg(secure, SECURE_METRICS), secure,
                                VALUE_TYPE)


def test_a_non_computation_is_refused_naming_the_parameter():
  with pytest.raises(TypeError, match='comp: expected a tff.Computation'):
    aggregators.unsecured_aggregations(lambda x: x)
