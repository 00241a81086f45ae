"""How many coordinates a client sends for a model update (numpy-free).

The aggregators rotate an update by a randomized Hadamard transform, which
needs a power-of-two length: the update is zero-padded to the next power of
two first. The accountant must be told that padded d (the factory refuses a
calibration made for another one), so the number is computed here, once.
"""

import math


def sent_dim(num_coordinates: int, rotate: bool) -> int:
  """The coordinates each client encodes and sends.

  Args:
    num_coordinates: the update's coordinates (a model's trainable
      parameters), >= 1.
    rotate: whether the factory rotates (`rotate=True` pads to 2^m).

  Returns:
    2^⌈log2 num_coordinates⌉ when rotating, else num_coordinates.

  Raises:
    ValueError: num_coordinates not an integer >= 1.
  """
  if (isinstance(num_coordinates, bool) or not isinstance(num_coordinates, int)
      or num_coordinates < 1):
    raise ValueError(f'`num_coordinates` must be an integer >= 1, got '
                     f'{num_coordinates!r}.')
  return 2**math.ceil(math.log2(num_coordinates)) if rotate else num_coordinates
