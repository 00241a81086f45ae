"""Shared behaviour of the absl experiment binaries: clear errors, no stray
workers, and a `--help` that exits 0 however the binary was started."""

import contextlib
import math
import sys
from typing import Callable, List, Optional, Sequence

from absl import app
from absl import flags

from tff_quant.common import validation
from tff_quant.program import quiet
from tff_quant.program import runtime
from tff_quant.program.errors import USER_ERRORS


def parse_flags(argv: Sequence[str]) -> List[str]:
  """Parses the command line into absl's FLAGS, as `app.run` does by default
  (`app.parse_flags_with_usage`), except that asking for help is a success
  and a flag error is one line and status 2 (absl prints the usage, exits 1):
  --help, -?, --helpshort, --helpfull and --helpxml print the help and exit
  with status 0 (absl exits with 1).

  Args:
    argv: the command line, program name first.

  Returns:
    The arguments left after the flags, program name first.

  Raises:
    SystemExit: status 0 after the help; status 2 after a flag error (an
      unknown flag, a value of the wrong type or outside the flag's bounds),
      with one line on stderr naming the flag ('error: ...'), as for every
      other bad input of a binary (`user_errors_exit`).
  """
  try:
    return flags.FLAGS(list(argv))
  except SystemExit as e:
    # Only absl's help flags (--help, -?, --helpshort, --helpfull, --helpxml)
    # exit from inside the parse, each with status 1 after printing; an
    # error raises flags.Error instead.
    sys.exit(0 if e.code == 1 else e.code)
  except flags.Error as e:
    print(f'error: {e}', file=sys.stderr)
    sys.exit(2)


def _help_for_module(module_name: str) -> None:
  """Makes absl's short help describe the binary `module_name` when it does
  not run as __main__ (a console-script entry point after `pip install`).

  absl's short help shows __main__'s docstring and the flags defined by the
  module named sys.argv[0]; an entry point's __main__ is pip's wrapper
  script, which has neither. Under `python -m` the binary is __main__ and
  nothing changes.
  """
  main_module = sys.modules['__main__']
  if module_name == '__main__' or module_name not in sys.modules:
    return
  if not main_module.__doc__:
    main_module.__doc__ = sys.modules[module_name].__doc__
  program = sys.argv[0]
  for flag in flags.FLAGS.get_key_flags_for_module(module_name):
    flags.FLAGS.register_key_flag_for_module(program, flag)


def run(main: Callable[[List[str]], object],
        check: Optional[Callable[[], object]] = None,
        tensorflow: bool = True) -> None:
  """Runs an experiment binary's `main` under absl (`app.run`), with the
  shared flag parsing (`parse_flags`: help exits 0).

  The one way every binary starts: its `if __name__ == '__main__'` block
  (`python -m experiments.X`) and its console-script entry point
  (`tff-quant-X`, setup.py) both call it, so both give the same help and
  behave alike.

  With `check`, the flags are parsed and `check()` runs before TensorFlow
  is imported (quietly, `quiet.import_tensorflow`), so a bad flag or
  setting is refused in about a second (`user_errors_exit`) instead of
  after TensorFlow's start-up; SIGTERM exits with 143 from then on. The
  check must stay cheap (flags, files): it runs before main, and work that
  starts children belongs in main. TensorFlow must be imported before
  `app.run` starts: Keras built inside `app.run` by a TensorFlow imported
  there fails (TF 2.14: `Flatten(input_shape=...)` converts None). A binary
  whose own process builds no Keras model (it plans, reports, and starts
  the runs as processes of their own) passes `tensorflow=False` and starts
  without it (about 6 s less a start).

  Args:
    main: the binary's main(argv); absl passes it the arguments left after
      the flags.
    check: None, or a no-argument callable that raises one of
      `errors.USER_ERRORS` for bad input (it may read FLAGS).
    tensorflow: whether TensorFlow (and TFF) is imported after `check`, before
      main (only with `check`; a binary without one imports what it needs).

  Raises:
    SystemExit: always, as `app.run` does (main's return value, 0 after the
      help, 2 after a flag error or a refusal by `check`).
  """
  _help_for_module(main.__module__)
  if check is not None:
    # SIGTERM during the check or TensorFlow's import exits as it does in
    # main (SystemExit, workers and children ended), not by the default
    # action (`runtime.exit_on_sigterm`; main's own call then keeps it).
    runtime.exit_on_sigterm()
    app.define_help_flags()   # as app.run does before it parses (guarded)
    parse_flags(sys.argv)
    with user_errors_exit():
      check()
    if tensorflow:
      quiet.import_tensorflow()
  app.run(main, flags_parser=parse_flags)


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
