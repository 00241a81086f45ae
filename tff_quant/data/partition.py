"""Simulated federated splits of centralised data (Dirichlet over labels, seeded)."""

import numpy as np

from tff_quant.common import validation


def dirichlet_partition(labels: np.ndarray, num_clients: int, alpha: float,
                        seed: int) -> list:
  """Splits example indices among clients: class shares ~ Dirichlet(alpha).

  Small alpha -> each client sees few classes (non-IID); alpha -> inf -> IID.
  Every client gets at least one example.
  """
  labels = np.asarray(labels)
  validation.check_integer('num_clients', num_clients, 1, labels.size)
  validation.check_positive('alpha', alpha)
  rng = np.random.default_rng(seed)
  shards = [[] for _ in range(num_clients)]
  for cls in np.unique(labels):
    idx = rng.permutation(np.nonzero(labels == cls)[0])
    shares = rng.dirichlet(np.full(num_clients, alpha))
    cuts = (np.cumsum(shares)[:-1] * idx.size).astype(int)
    for client, part in enumerate(np.split(idx, cuts)):
      shards[client].extend(part.tolist())
  # Give empty clients one example from the largest client.
  for client in range(num_clients):
    if not shards[client]:
      donor = max(range(num_clients), key=lambda c: len(shards[c]))
      shards[client].append(shards[donor].pop())
  return [np.sort(np.array(s, dtype=np.int64)) for s in shards]
