"""One call in a fresh process, with a time limit and its death noticed.

Calibrations and benchmark cells run in a spawned process of their own: its
imports are the code on disk now, its memory peak and caches are its own, a
time limit can stop it, and a crash in C (an abort, the kernel's OOM killer)
ends it without ending the caller. `call_in_child` is that pattern once: the
caller learns within `poll_s` seconds that the child died without answering,
instead of waiting out the limit.
"""

import dataclasses
import multiprocessing
import pickle
import queue as queue_lib
import signal
import subprocess
import time
from typing import Any, Callable, Optional, Sequence

RETURNED, DIED, STOPPED = 'returned', 'died', 'stopped'
_EXIT_GRACE_S = 10.0


@dataclasses.dataclass(frozen=True)
class ChildOutcome:
  """How a `call_in_child` ended.

  Attributes:
    ended: `RETURNED` (the target returned `value`), `DIED` (the process
      ended without an answer: `exitcode` says how; negative is the signal) or
      `STOPPED` (still running at the limit, then terminated).
    seconds: wall seconds from the child's start to the answer (to the limit
      when stopped).
    value: what the target returned (None unless `RETURNED`).
    exitcode: the process's exit code where it ended by itself.
  """
  ended: str
  seconds: float
  value: Any = None
  exitcode: Optional[int] = None


def _child_main(target, args, answers):
  # Ctrl-C is the parent's to handle: it terminates this child.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    answer = (RETURNED, target(*args))
  except BaseException as err:  # pylint: disable=broad-except
    try:
      pickle.dumps(err)
      answer = ('raised', err)
    except Exception:  # pylint: disable=broad-except
      answer = ('raised', RuntimeError(f'{type(err).__name__}: {err}'))
  answers.put(answer)


def call_in_child(target: Callable[..., Any], args: Sequence[Any] = (),
                  limit_s: Optional[float] = None,
                  poll_s: float = 5.0) -> ChildOutcome:
  """target(*args) in a fresh 'spawn' process.

  Args:
    target: a module-level function (the child imports it by name).
    args: its arguments (pickled).
    limit_s: seconds after which a child still running is terminated (None:
      no limit).
    poll_s: how often the parent checks that the child is alive (> 0).

  Returns:
    A `ChildOutcome`. The child is always ended and reaped when this returns
    or raises.

  Raises:
    ValueError: `limit_s` or `poll_s` not positive.
    Exception: what the target raised, re-raised here (a RuntimeError naming
      it where it cannot be pickled).
  """
  if limit_s is not None and not limit_s > 0:
    raise ValueError(f'`limit_s` must be > 0 or None, got {limit_s!r}.')
  if not poll_s > 0:
    raise ValueError(f'`poll_s` must be > 0, got {poll_s!r}.')
  context = multiprocessing.get_context('spawn')
  answers = context.Queue()
  child = context.Process(target=_child_main, args=(target, tuple(args),
                                                   answers))
  start = time.perf_counter()
  child.start()
  answered = False
  try:
    while True:
      left = (None if limit_s is None
              else limit_s - (time.perf_counter() - start))
      if left is not None and left <= 0:
        return ChildOutcome(STOPPED, limit_s)
      try:
        kind, value = answers.get(
            timeout=poll_s if left is None else max(1e-3, min(poll_s, left)))
        answered, seconds = True, time.perf_counter() - start
        break
      except queue_lib.Empty:
        if child.exitcode is not None:   # ended; an answer may be in flight
          try:
            kind, value = answers.get(timeout=1.0)
            answered, seconds = True, time.perf_counter() - start
            break
          except queue_lib.Empty:
            return ChildOutcome(DIED, time.perf_counter() - start,
                                exitcode=child.exitcode)
  finally:
    if answered:   # it is exiting: a moment to end by itself
      child.join(timeout=_EXIT_GRACE_S)
    if child.exitcode is None:
      child.terminate()
    child.join()
    answers.close()
  if kind == 'raised':
    raise value
  return ChildOutcome(RETURNED, seconds, value=value,
                      exitcode=child.exitcode)


def run_command(args: Sequence[str], grace_s: float = 60.0,
                timeout_s: Optional[float] = None) -> float:
  """Runs `args` (a training binary) in a child process and waits for it.

  A Ctrl-C reaches the child too (same process group): it checkpoints and
  ends by itself, and is terminated only if it has not within `grace_s`. Any
  other stop of the caller (SIGTERM, an exception) terminates the child
  (SIGTERM: the binary ends its TFF workers), so no child outlives its
  caller.

  With `timeout_s`, a child still running then is terminated the same way
  (a training binary checkpoints and ends its workers) and the timeout is
  raised: a later start resumes it.

  Args:
    args: the command line (`subprocess.Popen` argv).
    grace_s: seconds the child has to end after a Ctrl-C or a terminate
      (> 0).
    timeout_s: None, or the seconds after which the child is terminated.

  Returns:
    The child's wall seconds.

  Raises:
    ValueError: `grace_s` not positive.
    subprocess.CalledProcessError: the child exited with a non-zero code.
    subprocess.TimeoutExpired: `timeout_s` passed (the child has ended).
    KeyboardInterrupt: re-raised after the child has ended.
  """
  if not grace_s > 0:
    raise ValueError(f'`grace_s` must be > 0, got {grace_s!r}.')
  start = time.perf_counter()
  child = subprocess.Popen(list(args))
  try:
    code = child.wait(timeout=timeout_s)
  except KeyboardInterrupt:   # the child got the Ctrl-C too: it checkpoints
    try:
      child.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
      child.terminate()
      child.wait(timeout=grace_s)
    raise
  except BaseException:   # stopped: SIGTERM lets the run end its TFF workers
    child.terminate()
    child.wait(timeout=grace_s)
    raise
  if code:
    raise subprocess.CalledProcessError(code, list(args))
  return time.perf_counter() - start
