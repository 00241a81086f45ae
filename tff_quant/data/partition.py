"""Simulated federated splits of centralised data (Dirichlet over labels, seeded)."""

import numpy as np


def dirichlet_partition(labels: np.ndarray, num_clients: int, alpha: float,
                        seed: int) -> list:
  """Splits example indices among clients: class shares ~ Dirichlet(alpha).

  Small alpha -> each client sees few classes (non-IID); alpha -> inf -> IID.
  Every client gets at least one example.
  """
  labels = np.asarray(labels)
  if isinstance(num_clients, bool) or not isinstance(num_clients, (int, np.integer)):
    raise ValueError(f'`num_clients` must be an integer, got {num_clients!r}.')
  if not 1 <= num_clients <= labels.size:
    raise ValueError(f'`num_clients` must be in [1, {labels.size}] (the number of '
                     f'examples), got {num_clients}.')
  if not alpha > 0:
    raise ValueError(f'`alpha` must be > 0, got {alpha!r}.')
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
