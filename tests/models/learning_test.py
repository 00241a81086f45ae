import numpy as np
import tensorflow as tf

from tff_quant import models


def test_tff_model_fn_wraps_a_fresh_keras_model_with_loss_and_accuracy():
  spec = (tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.int32))
  keras_fn = lambda: models.get('mlp', (4,), 3)
  with_acc = models.tff_model_fn(keras_fn, spec)()
  without = models.tff_model_fn(keras_fn, spec, accuracy=False)()
  assert 'sparse_categorical_accuracy' in with_acc.report_local_unfinalized_metrics()
  assert 'sparse_categorical_accuracy' not in (
      without.report_local_unfinalized_metrics())
  batch = (np.ones([2, 4], np.float32), np.array([0, 2], np.int32))
  out = with_acc.forward_pass(batch, training=False)
  assert out.predictions.shape == (2, 3) and np.isfinite(float(out.loss))
  assert with_acc.trainable_variables is not without.trainable_variables
