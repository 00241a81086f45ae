"""Shared behaviour of the absl experiment binaries: clear errors, no stray workers."""

import contextlib
import math
import sys

from tff_quant.common import validation
from tff_quant.program import runtime
from tff_quant.program.errors import USER_ERRORS


@contextlib.contextmanager
def user_errors_exit():
  """Bad flags, missing data, a corrupt checkpoint or a dead worker: one line on
  stderr ('error: ...') and exit status 2, never a traceback or a silent restart.

  Ctrl-C: one line on stderr (where the run stood, e.g. 'interrupted at round
  7; rerun the same command to resume from round 7'), TFF's computations and
  workers ended, exit status 130 (`runtime.exit_after_interrupt`). A run
  resumes from its checkpoints when the same command runs again.

  Processes forked by `multiprocessing` from here on leave Ctrl-C to this one
  (`runtime.leave_interrupts_to_parent`): no traceback of theirs either.

  Raises:
    SystemExit: status 2 for a user error, 130 for Ctrl-C.
  """
  runtime.leave_interrupts_to_parent()
  try:
    yield
  except USER_ERRORS as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)
  except KeyboardInterrupt as e:
    runtime.exit_after_interrupt(e)


@contextlib.contextmanager
def secure_sum_simulation():
  """TFF's local C++ context (runs secure sum); its worker processes end on exit
  (a computation still in flight, after Ctrl-C, is cancelled first: it would
  start another worker)."""
  runtime.use_secure_sum_simulation()
  try:
    yield
  except KeyboardInterrupt:
    runtime.stop_computations()
    raise
  finally:
    runtime.stop_workers()


def check_flags(values, at_least_one=(), positive=()) -> None:
  """Errors naming the first flag in `at_least_one` not an integer >= 1, or in
  `positive` not a number > 0 (tff_quant.common.validation's messages).

  `values`: a dict of flag values, or absl's FLAGS (read by attribute).
  """
  get = values.get if isinstance(values, dict) else lambda n: getattr(values, n)
  for name in at_least_one:
    validation.check_integer(f'--{name}', get(name), 1)
  for name in positive:
    validation.check_positive(f'--{name}', get(name))


def number(flag: str, value, low: float, integer: bool = False,
           strict: bool = False):
  """A flag's entry as an int (`integer`) or a finite float, >= low (> low when
  `strict`); ValueError naming --flag and the allowed range otherwise."""
  kind = 'an integer' if integer else 'a finite number'
  try:
    v = int(value) if integer else float(value)
  except (TypeError, ValueError):
    raise ValueError(f'--{flag}: {value!r} is not {kind}.') from None
  if not (math.isfinite(v) and (v > low if strict else v >= low)):
    raise ValueError(f'--{flag}: {v} must be {kind} {">" if strict else ">="} {low}.')
  return v


def numbers(flag: str, values, low: float, integer: bool = False,
            strict: bool = False) -> list:
  """Every entry of a list flag through `number`; an empty list is an error."""
  if not values:
    raise ValueError(f'--{flag}: give at least one value.')
  return [number(flag, v, low, integer, strict) for v in values]
