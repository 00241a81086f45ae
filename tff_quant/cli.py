"""Shared behaviour of the absl experiment binaries: clear errors, no stray workers."""

import contextlib
import sys

from tff_quant import round_loop, runtime

USER_ERRORS = (ValueError, FileNotFoundError, round_loop.CorruptCheckpointError,
               runtime.WorkerUnavailableError)


@contextlib.contextmanager
def user_errors_exit():
  """Bad flags, missing data, a corrupt checkpoint or a dead worker: one line on
  stderr ('error: ...') and exit status 2, never a traceback or a silent restart."""
  try:
    yield
  except USER_ERRORS as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


@contextlib.contextmanager
def secure_sum_simulation():
  """TFF's local C++ context (runs secure sum); its worker processes end on exit."""
  runtime.use_secure_sum_simulation()
  try:
    yield
  finally:
    runtime.stop_workers()


def check_flags(values, at_least_one=(), positive=()) -> None:
  """ValueError naming the first flag in `at_least_one` below 1 or in `positive` not > 0.

  `values`: a dict of flag values, or absl's FLAGS (read by attribute).
  """
  get = values.get if isinstance(values, dict) else lambda n: getattr(values, n)
  for name in at_least_one:
    if get(name) < 1:
      raise ValueError(f'--{name} must be >= 1, got {get(name)}')
  for name in positive:
    if not get(name) > 0:
      raise ValueError(f'--{name} must be > 0, got {get(name)}')
