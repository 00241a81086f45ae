import numpy as np
import pytest

from tff_quant.data import partition


def test_partition_covers_every_index_once_and_is_seeded():
  labels = np.repeat(np.arange(10), 50)
  shards = partition.dirichlet_partition(labels, 30, 0.5, seed=3)
  allidx = np.concatenate(shards)
  assert sorted(allidx.tolist()) == list(range(labels.size))
  assert all(len(s) >= 1 for s in shards)
  again = partition.dirichlet_partition(labels, 30, 0.5, seed=3)
  assert all(np.array_equal(a, b) for a, b in zip(shards, again))
  other = partition.dirichlet_partition(labels, 30, 0.5, seed=4)
  assert any(not np.array_equal(a, b) for a, b in zip(shards, other))


def test_small_alpha_is_label_skewed():
  labels = np.repeat(np.arange(10), 200)
  skewed = partition.dirichlet_partition(labels, 20, 0.05, seed=0)
  iid = partition.dirichlet_partition(labels, 20, 1000.0, seed=0)
  classes = lambda shards: np.mean([len(np.unique(labels[s])) for s in shards])
  assert classes(skewed) < 5 < classes(iid)


@pytest.mark.parametrize('num_clients, error', [(0, ValueError), (501, ValueError),
                                                (2.5, TypeError)])
def test_bad_client_count_raises(num_clients, error):
  with pytest.raises(error, match='num_clients'):
    partition.dirichlet_partition(np.zeros(500), num_clients, 0.5, 0)
