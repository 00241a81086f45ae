"""tff_quant/data/sources.py, and the packages whose names it lets a binary
read before TensorFlow starts (`tff_quant.data`, `models`, `aggregators`)."""

import os
import subprocess
import sys

import pytest

from tff_quant.data import sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_emnist_cache_path_defaults_to_the_tff_folder(tmp_path):
  assert sources.emnist_cache_path() == os.path.join(
      os.path.expanduser('~'), '.tff', 'emnist_all.sqlite')
  assert sources.emnist_cache_path(str(tmp_path)) == str(tmp_path / 'emnist_all.sqlite')


def test_a_missing_emnist_cache_says_where_to_put_it(tmp_path):
  with pytest.raises(FileNotFoundError, match='emnist_all.sqlite.*--emnist_cache_dir'):
    sources.existing_emnist_cache(str(tmp_path))
  (tmp_path / 'emnist_all.sqlite').write_bytes(b'')
  assert sources.existing_emnist_cache(str(tmp_path)) == str(tmp_path / 'emnist_all.sqlite')


_NAMES_ONLY = r'''
import sys
from tff_quant import aggregators, data, models
from tff_quant.aggregators import peers
from tff_quant.training import config
assert data.DATASETS and models.MODELS and peers.PEERS and config.TrainingConfig
assert models.param_count('small_cnn', *data.SHAPES['fashion_mnist']) == 5994
print('tensorflow' in sys.modules)
print(callable(aggregators.secure_sum_bits), 'tensorflow' in sys.modules)
assert sorted(dir(aggregators)) == sorted(set(dir(aggregators)))
assert set(aggregators.__all__) <= set(dir(aggregators))
try:
  aggregators.no_such_name
except AttributeError as err:
  print(err)
'''


def test_the_packages_names_are_read_without_tensorflow():
  """A binary reads its flags' choices (datasets, models, peers, the config)
  and counts a model's parameters without starting TensorFlow; the
  factories start it when first read."""
  res = subprocess.run([sys.executable, '-c', _NAMES_ONLY], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == 0, res.stderr[-2000:]
  assert res.stdout.splitlines() == [
      'False', 'True True',
      "module 'tff_quant.aggregators' has no attribute 'no_such_name'"]
