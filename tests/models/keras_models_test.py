import pytest

from tff_quant import models


def test_parameter_counts_match_the_papers():
  assert models.num_params(models.get('emnist_cnn', (28, 28, 1), 62)) == 1_206_590
  assert models.num_params(models.get('mlp', (100,), 10)) == 3_562  # QMGeo's d
  for name in models.MODELS:
    shape = (100,) if name == 'mlp' else (28, 28, 1)
    assert models.get(name, shape, 10).output_shape == (None, 10)


def test_unknown_model_raises():
  with pytest.raises(ValueError, match='Unknown model'):
    models.get('resnet18', (28, 28, 1), 10)


def test_update_dim_is_what_the_rotating_factory_sends():
  lenet = models.get('lenet5', (28, 28, 1), 10)
  assert models.num_params(lenet) == 61_706
  assert models.update_dim(lenet) == 65_536
  assert models.update_dim(lenet, rotate=False) == 61_706
  # logreg on 784 inputs: 7,850 parameters, padded to 8,192 (the FL table's d).
  assert models.update_dim(models.get('logreg', (784,), 10)) == 8_192
