"""`models.param_count` (no TensorFlow) against Keras's count of every model."""

import pytest

from tff_quant import models

#: Input shapes and class counts the experiments build the models with.
SHAPES = [((28, 28, 1), 10), ((28, 28, 1), 62), ((32, 32, 3), 10)]


@pytest.mark.parametrize('name', models.MODELS)
def test_param_count_is_keras_count_params(name):
  shapes = SHAPES + [((100,), 10), ((784,), 10)] if name in ('mlp', 'logreg') else SHAPES
  for shape, classes in shapes:
    model = models.get(name, shape, classes)
    assert models.param_count(name, shape, classes) == model.count_params(), (
        name, shape, classes)
    assert model.count_params() == models.num_params(model)   # all trainable


def test_param_count_refuses_what_keras_cannot_build():
  with pytest.raises(ValueError, match='Unknown model'):
    models.param_count('resnet18', (28, 28, 1), 10)
  with pytest.raises(ValueError, match='Conv2D needs an input of shape'):
    models.param_count('small_cnn', (784,), 10)
  with pytest.raises(ValueError, match='does not fit'):
    models.param_count('small_cnn', (4, 4, 1), 10)
