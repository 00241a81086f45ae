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
