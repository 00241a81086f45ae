"""TFF execution context for secure-sum simulation, and worker-process hygiene.

Why a special context: TFF's default (Python) execution context cannot run the
secure-sum intrinsics (`federated_secure_sum_bitwidth` fails with "Cannot embed a
federated value"). `tff.backends.test.set_sync_test_cpp_execution_context()` runs
them by simulating secure aggregation (a plain sum, which is what SecAgg reveals).
That context starts `worker_binary` child processes; they can outlive Python and
keep a pipe open, so everything that starts them must end them (`stop_workers`).

Importing this module registers an exit hook (`end_tff`) for any process that
imports TFF: TFF sets its own C++ context at import, whose `ServiceManager`
starts a worker at the first computation and ends it in `__del__`; run at
interpreter shutdown, after the `subprocess` module is torn down, that
`__del__` prints "Exception ignored in ... ServiceManager.__del__" and the
worker outlives the script. The hook cancels the computations in flight, ends
the workers and retires the ServiceManagers while Python is still whole.

Ctrl-C: `exit_after_interrupt` (what `cli.user_errors_exit` calls) prints one
line, stops TFF's work and exits with status 130.
"""

import asyncio
import atexit
import contextlib
import gc
import os
import signal
import sys
import threading
import time
from typing import List, Optional, Tuple
import warnings
import weakref

from tff_quant.program import network
from tff_quant.program.errors import RoundCheckError, WorkerUnavailableError  # pylint: disable=unused-import

_REGISTERED = False
# The contexts this module set (they run secure sum): a "Cannot embed a
# federated value" there has another cause than a missing context.
_SECURE_SUM_CONTEXTS = weakref.WeakSet()


def use_secure_sum_simulation(isolate_network: bool = True) -> bool:
  """Sets TFF's C++ test context (runs secure sum); its workers end at exit.

  TFF's workers listen on every interface and run unauthenticated
  computations; by default this process first moves into a private network
  namespace (`network.isolate_local_run`), so the workers it starts are
  reachable from it alone, or says in one line why it could not.

  Args:
    isolate_network: False keeps the process on the machine's network (its
      workers are then reachable by anyone who reaches the machine).

  Returns:
    Whether the workers are private to this process.
  """
  global _REGISTERED
  private = network.isolate_local_run() if isolate_network else False
  _let_workers_be_interrupted()
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()
  _remember_current_context()
  if not _REGISTERED:   # the workers end in `end_tff`, registered at import
    exit_on_sigterm()
    _REGISTERED = True
  return private


def _let_workers_be_interrupted() -> bool:
  """Gives SIGINT back its Python default where this process ignores it.

  TFF stops a worker with SIGINT and waits for it (its `ServiceManager`:
  `__del__`, and a restart in `get_stub`). A worker inherits an ignored
  SIGINT from the process that starts it, as a shell's background job (`cmd
  &`) or a pytest-xdist worker started from one has it; that wait then
  never ends. Python's default handler is not inherited across exec, so
  the workers this process starts from now on can be stopped. Main thread
  only (signal handlers can be set only there).

  Returns:
    Whether the handler was changed.
  """
  if (threading.current_thread() is threading.main_thread() and
      signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return True
  return False


def _remember_current_context():
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
  _SECURE_SUM_CONTEXTS.add(context_stack_impl.context_stack.current)


SIGTERM_GRACE_S = 120.0


def exit_on_sigterm(grace_s: float = SIGTERM_GRACE_S):
  """SIGTERM exits through SystemExit, so the atexit hook ends the workers (the
  default action kills Python outright and orphans them). A handler someone
  else installed is kept; so is the default outside the main thread.

  The exit is made sure of twice. A SystemExit raised where Python ignores
  exceptions (a gc or weakref callback, `__del__`) reaches `sys.unraisablehook`,
  which delivers the signal again. And a daemon timer, armed by the signal,
  ends this process's children and calls `os._exit` if the process is still
  alive `grace_s` seconds later (a clean exit, children included, takes less).
  """
  if grace_s <= 0:
    raise ValueError(f'`grace_s` must be > 0 seconds, got {grace_s}.')
  if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
    return

  def _raise(signum, frame):  # pylint: disable=unused-argument
    _arm_backstop(signum, grace_s)
    raise SystemExit(128 + signum)
  try:
    signal.signal(signal.SIGTERM, _raise)
  except ValueError:   # not the main thread
    return
  previous_hook = sys.unraisablehook

  def _redeliver(unraisable):
    previous_hook(unraisable)
    if (_TERMINATING and isinstance(unraisable.exc_value, SystemExit)
        and unraisable.exc_value.code == 128 + signal.SIGTERM
        and threading.main_thread().is_alive()):
      # Again from another thread: the handler then runs in the main thread's
      # next check, outside this hook (where it would be ignored once more).
      # (A real signal, so it also breaks a blocking call such as sleep.)
      # Not once the interpreter is exiting: a SystemExit swallowed in an
      # atexit hook must not abort the next one (`stop_workers`).
      delivered = len(_TERMINATING)

      def again():
        if (threading.main_thread().is_alive() and
            len(_TERMINATING) == delivered):   # not handled again meanwhile
          signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
      timer = threading.Timer(0.1, again)
      timer.daemon = True
      timer.start()
  sys.unraisablehook = _redeliver


_TERMINATING = []   # the SIGTERMs handled so far


def _arm_backstop(signum: int, grace_s: float):
  """Counts the signal; the first starts the timer that forces the exit
  after `grace_s` seconds."""
  _TERMINATING.append(signum)
  if len(_TERMINATING) > 1:
    return

  def force_exit():
    try:
      sys.stderr.write(f'Signal {signum}: the exit did not finish in '
                       f'{grace_s:g} s; ending child processes and exiting.\n')
      sys.stderr.flush()
    except BaseException:  # pylint: disable=broad-except
      pass   # no usable stderr: exit all the same
    try:
      stop_children()
    finally:
      os._exit(128 + signum)  # pylint: disable=protected-access
  timer = threading.Timer(grace_s, force_exit)
  timer.daemon = True
  timer.start()


def child_pids() -> List[int]:
  """PIDs of this process's child processes (any program)."""
  me = os.getpid()
  return _pids_where(lambda cmd, ppid, sid: ppid == me)


def stop_children(timeout_s: float = 5.0) -> int:
  """Terminates every child process of this one (SIGTERM, then SIGKILL)."""
  return _terminate(child_pids(), timeout_s)


def worker_pids(only_children: bool = True,
                session: Optional[int] = None) -> List[int]:
  """PIDs of TFF `worker_binary` processes.

  Args:
    only_children: only those started by this process.
    session: if given, only those in this session (a process started with
      `start_new_session=True` leads the session numbered by its PID; its
      workers stay in it after it exits, so an orphan left behind by a
      finished program is found without counting other programs' workers).

  Returns:
    The PIDs, zombies included.
  """
  me = os.getpid()
  return _pids_where(lambda cmd, ppid, sid: (
      b'worker_binary' in cmd and b'tensorflow_federated' in cmd
      and (ppid == me or not only_children)
      and (session is None or sid == session)))


def _pids_where(keep) -> List[int]:
  """PIDs of processes (zombies too, to be reaped) for which
  keep(cmdline bytes, parent pid, session id) holds."""
  pids = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        cmd = f.read().replace(b'\0', b' ')
      with open(f'/proc/{entry}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
      if keep(cmd, int(fields[1]), int(fields[3])):
        pids.append(int(entry))
    except (OSError, ValueError, IndexError):
      continue
  return pids


def stop_workers(timeout_s: float = 5.0, only_children: bool = True) -> int:
  """Terminates TFF worker processes (SIGTERM, then SIGKILL); returns how many.

  A worker of a TFF context of this process is ended through the context's
  ServiceManager, which forgets it: the context's next computation starts a
  new worker, and TFF's `__del__` does not signal the ended one again (that
  raised ProcessLookupError, reported as "Exception ignored").
  """
  pids = worker_pids(only_children)
  ended = set()
  for manager in _tff_objects()[1]:
    process = manager.__dict__.get('_process')
    if getattr(process, 'pid', None) in pids:
      _end_process(process, timeout_s)
      ended.add(process.pid)
      manager.__dict__['_process'] = None
      manager.__dict__['_stub'] = None
  _terminate([p for p in pids if p not in ended], timeout_s)
  return len(pids)


def _end_process(process, timeout_s: float) -> None:
  """Terminates a subprocess.Popen (SIGKILL after `timeout_s`) and reaps it."""
  try:
    if process.poll() is None:
      process.terminate()
      try:
        process.wait(timeout_s)
      except Exception:  # pylint: disable=broad-except
        process.kill()
        process.wait()
  except OSError:
    pass


def _terminate(pids: List[int], timeout_s: float) -> int:
  """SIGTERM to `pids`, SIGKILL to those alive after `timeout_s`; reaps ours."""
  for pid in pids:
    try:
      os.kill(pid, signal.SIGTERM)
    except OSError:
      pass
  deadline = time.time() + timeout_s
  while time.time() < deadline and any(_alive(p) for p in pids):
    time.sleep(0.05)
  for pid in pids:
    if _alive(pid):
      try:
        os.kill(pid, signal.SIGKILL)
      except OSError:
        pass
  for pid in pids:  # reap zombies of our own children
    try:
      os.waitpid(pid, os.WNOHANG)
    except OSError:
      pass
  return len(pids)


def _alive(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except OSError:
    return False


# ----------------------------------------------------------------------------
# Ending TFF's work: at exit (every process that imports TFF), after Ctrl-C.
# ----------------------------------------------------------------------------
_SERVICE_MANAGER = ('tensorflow_federated.python.core.impl.executor_stacks.'
                    'executor_factory', 'local_cpp_executor_factory.<locals>.'
                    'ServiceManager')
INTERRUPT_EXIT_STATUS = 130   # 128 + SIGINT, as a shell reports Ctrl-C
INTERRUPT_GRACE_S = 60.0
INTERRUPTED = 'interrupted; rerun the same command to resume'


class Interrupted(KeyboardInterrupt):
  """Ctrl-C, told where the run stood: its text is the one line a binary
  prints (e.g. 'interrupted at round 7; rerun the same command to resume
  from round 7')."""


def interrupt_message(interrupt: BaseException) -> str:
  """The one line that reports `interrupt` (a KeyboardInterrupt)."""
  if isinstance(interrupt, Interrupted) and str(interrupt):
    return str(interrupt)
  return INTERRUPTED


def _tff_objects():
  """(TFF's AsyncThreadRunners, its local ServiceManagers) alive now; ([], [])
  if TFF was not imported. Found by their type alone: no attribute of the
  other objects is read (some are proxies)."""
  if 'tensorflow_federated' not in sys.modules:
    return [], []
  try:
    from tensorflow_federated.python.common_libs import async_utils  # pylint: disable=g-import-not-at-top
  except ImportError:
    return [], []
  runner_cls = async_utils.AsyncThreadRunner
  runners, managers = [], []
  for obj in gc.get_objects():
    cls = type(obj)
    if cls is runner_cls:
      runners.append(obj)
    elif (getattr(cls, '__qualname__', None) == _SERVICE_MANAGER[1] and
          getattr(cls, '__module__', None) == _SERVICE_MANAGER[0]):
      managers.append(obj)
  return runners, managers


def _running_loop(runner):
  """The event loop of a TFF AsyncThreadRunner if it runs, else None."""
  loop = getattr(runner, '_event_loop', None)
  if (isinstance(loop, asyncio.AbstractEventLoop) and loop.is_running() and
      not loop.is_closed()):
    return loop
  return None


async def _cancel_the_other_tasks(timeout_s: float) -> int:
  """In a TFF event loop: cancels every task but this one, waits for them."""
  me = asyncio.current_task()
  tasks = [t for t in asyncio.all_tasks() if t is not me]
  for task in tasks:
    task.cancel()
  if tasks:
    await asyncio.wait(tasks, timeout=timeout_s)
  return len(tasks)


def _cancel_in(runners, timeout_s: float) -> list:
  """Schedules `_cancel_the_other_tasks` in the running loops of `runners`;
  returns (runner, future) pairs."""
  pending = []
  for runner in runners:
    loop = _running_loop(runner)
    if loop is None:
      continue
    try:
      pending.append((runner, asyncio.run_coroutine_threadsafe(
          _cancel_the_other_tasks(timeout_s), loop)))
    except RuntimeError:   # stopped or closed meanwhile
      pass
  return pending


def _wait(pending, timeout_s: float) -> bool:
  """Whether every future of `pending` finished within `timeout_s` (all
  together)."""
  deadline = time.time() + timeout_s
  for _, future in pending:
    try:
      future.result(max(0.0, deadline - time.time()))
    except Exception:  # pylint: disable=broad-except
      if not future.done():
        return False
  return True


def stop_computations(timeout_s: float = 1.0) -> bool:
  """Cancels the TFF computations in flight. TFF runs each in an event loop
  of its own thread, which goes on after the caller's Ctrl-C, and retries a
  call whose worker died by starting another worker. Workers are left
  running.

  Args:
    timeout_s: how long to wait for the loops to take the cancellation (a
      loop blocked in a call to a worker takes it when the call returns).

  Returns:
    Whether every loop took it in time.
  """
  return _wait(_cancel_in(_tff_objects()[0], timeout_s), timeout_s)


def _cancel_then_end_workers(runners, managers, timeout_s: float) -> list:
  """Cancels the computations in `runners`' loops, then ends the workers.

  A loop takes the cancellation at its next await. One still busy after a
  second is in a call to a live worker (ending the worker ends the call), or
  in TFF's wait for a worker it restarted to answer (`ServiceManager.get_stub`,
  a loop that never ends once that worker is gone, unless the manager's stub
  is dropped): both are ended, until the loops take it or `timeout_s` passes.

  Args:
    runners: TFF's AsyncThreadRunners.
    managers: TFF's ServiceManagers.
    timeout_s: the longest wait.

  Returns:
    The runners whose loop did not take it (stuck in a call that does not end).
  """
  pending = _cancel_in(runners, timeout_s)
  deadline = time.time() + timeout_s
  if not _wait(pending, min(1.0, timeout_s)):
    while True:
      for manager in managers:
        manager.__dict__['_stub'] = None
      stop_workers(timeout_s)
      left = deadline - time.time()
      if _wait(pending, max(0.0, min(0.5, left))) or left <= 0:
        break
  stop_workers(timeout_s)
  return [runner for runner, future in pending if not future.done()]


def end_tff(timeout_s: float = 10.0) -> None:
  """Ends TFF's work in this process: cancels the computations in flight,
  ends the worker processes and retires TFF's ServiceManagers (their
  `__del__`, run at interpreter shutdown once the `subprocess` module is torn
  down, fails and leaves the worker running). Registered at exit. A later
  computation still runs (a ServiceManager starts another worker, which the
  exit hook ends).

  Args:
    timeout_s: the longest wait of each step.
  """
  runners, managers = _tff_objects()
  # First: then nothing restarts a worker.
  stuck = _cancel_then_end_workers(runners, managers, timeout_s)
  for manager in managers:
    _retire(manager, timeout_s)
  for runner in stuck:   # TFF's __del__ would wait for its thread forever
    runner._finalizer = lambda *_: None  # pylint: disable=protected-access


def _retire(manager, timeout_s: float) -> None:
  """Ends a ServiceManager's worker and makes its `__del__` a no-op."""
  process = manager.__dict__.get('_process')
  if process is not None and hasattr(process, 'poll'):
    _end_process(process, timeout_s)
  manager.__dict__['_process'] = None
  manager.__dict__['_stub'] = None
  type(manager).__del__ = _retired_del


def _retired_del(self):  # pylint: disable=unused-argument
  """A retired ServiceManager's `__del__`: its worker was ended already."""


def _end_tff_at_exit():
  try:
    end_tff()
  except BaseException as e:  # pylint: disable=broad-except
    # Nothing may stop the exit; say why the cleanup was cut short.
    try:
      sys.stderr.write(f'Ending TFF at exit: {type(e).__name__}: {e}\n')
    except BaseException:  # pylint: disable=broad-except
      pass
    stop_workers()


atexit.register(_end_tff_at_exit)


def exit_after_interrupt(interrupt: BaseException,
                         grace_s: float = INTERRUPT_GRACE_S):
  """Ends the process after Ctrl-C: one line on stderr, TFF's computations
  cancelled and its workers ended, exit status 130.

  The exit is made sure of: a second Ctrl-C, or `grace_s` seconds without
  the exit done, ends the child processes and exits at once (`os._exit`).

  Args:
    interrupt: the KeyboardInterrupt (an `Interrupted` says where the run
      stood).
    grace_s: the longest the exit may take.

  Raises:
    SystemExit: always, with status 130.
  """
  _arm_backstop(signal.SIGINT, grace_s)
  try:
    signal.signal(signal.SIGINT, _exit_now)
  except ValueError:   # not the main thread
    pass
  _quiet_absl()
  # A coroutine that Ctrl-C stopped before it started is reported at exit.
  warnings.filterwarnings('ignore', message='coroutine .* was never awaited',
                          category=RuntimeWarning)
  try:
    sys.stderr.write(interrupt_message(interrupt) + '\n')
    sys.stderr.flush()
  except (OSError, ValueError):
    pass
  _cancel_then_end_workers(*_tff_objects(), 5.0)
  _end_multiprocessing_children(5.0)
  raise SystemExit(INTERRUPT_EXIT_STATUS)


class _AfterFork:
  """What `multiprocessing.util.register_after_fork` keys its hook by."""


_AFTER_FORK = []


def leave_interrupts_to_parent() -> None:
  """Processes that `multiprocessing` forks from now on ignore Ctrl-C.

  A terminal's Ctrl-C reaches every process of its foreground group: each
  forked worker would print its own KeyboardInterrupt traceback. The parent
  handles it (`exit_after_interrupt` ends them). Processes started by
  `subprocess` or multiprocessing's 'spawn' are not affected.
  """
  if not _AFTER_FORK:
    import multiprocessing.util  # pylint: disable=g-import-not-at-top
    _AFTER_FORK.append(_AfterFork())
    multiprocessing.util.register_after_fork(_AFTER_FORK[0], _ignore_sigint)


def _ignore_sigint(_):
  signal.signal(signal.SIGINT, signal.SIG_IGN)


def _end_multiprocessing_children(timeout_s: float) -> None:
  """Terminates the processes `multiprocessing` started here (the children
  of `leave_interrupts_to_parent` ignore Ctrl-C, and Python waits for the
  non-daemon ones at exit)."""
  mp = sys.modules.get('multiprocessing')
  if mp is None:
    return
  children = mp.active_children()
  for child in children:
    child.terminate()
  deadline = time.time() + timeout_s
  for child in children:
    child.join(max(0.0, deadline - time.time()))
    if child.is_alive():
      child.kill()
      child.join(1.0)


def _exit_now(signum, frame):  # pylint: disable=unused-argument
  """A second Ctrl-C while exiting: end the children and exit at once."""
  try:
    stop_children(2.0)
  finally:
    os._exit(INTERRUPT_EXIT_STATUS)  # pylint: disable=protected-access


def _quiet_absl():
  """Only errors from absl's logging: TFF's threads log each retry of a call
  to a worker that Ctrl-C ended (multi-line INFO records)."""
  absl_logging = sys.modules.get('absl.logging')
  if absl_logging is not None:
    try:
      absl_logging.set_verbosity(absl_logging.ERROR)
    except Exception:  # pylint: disable=broad-except
      pass


# ----------------------------------------------------------------------------
# A round's errors, which TFF reports at length, as one line.
# ----------------------------------------------------------------------------
_ASSERTION = 'assertion failed: ['
_NOT_EMBEDDABLE = 'Cannot embed a federated value'


class SecureSumContextError(RoundCheckError):
  """A computation with secure sum ran in a TFF context that cannot run it
  (TFF's default: "Cannot embed a federated value")."""


def assertion_message(text: str):
  """The message of the first failed TensorFlow assert named in `text`, whole.

  TF writes a failed assert as `assertion failed: [message] [datum] ...` (the
  asserts of `tf.debugging` give `[Condition ...]` as the first datum), ended
  by a newline. The message may hold brackets itself ("levels in [0, 15]"), so
  it ends at the first "] [" of that line, or at the line's last "]" when no
  datum follows.

  Args:
    text: an error's text (e.g. TFF's gRPC INTERNAL error).

  Returns:
    The message, or None if `text` names no failed assert.
  """
  start = text.find(_ASSERTION)
  if start < 0:
    return None
  line = text[start + len(_ASSERTION):].split('\n', 1)[0]
  end = line.find('] [')
  if end < 0:
    end = line.rfind(']')
  return (line[:end] if end >= 0 else line).strip()


@contextlib.contextmanager
def readable_round_errors():
  """Turns TFF's long errors of a round into one-line errors.

  A failed in-computation check, which TFF's C++ executor reports as a gRPC
  INTERNAL error, becomes a RoundCheckError carrying the check's whole
  message; secure sum run in a context without it (TFF's default: "Cannot
  embed a federated value") becomes a SecureSumContextError naming the call
  that sets one. TFF's error stays in `__context__`.

  with runtime.readable_round_errors():
    state, metrics = process.next(state, client_data)

  Raises:
    RoundCheckError: a check inside the computation failed.
    SecureSumContextError: no context that runs secure sum was set.
  """
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    text = str(e)
    message = assertion_message(text)
    if message is not None:
      raise RoundCheckError(message) from None
    if _NOT_EMBEDDABLE in text and not _in_secure_sum_context():
      raise SecureSumContextError(
          'TFF\'s current execution context cannot run secure sum ("Cannot '
          'embed a federated value"): call tff_quant.program.runtime.'
          'use_secure_sum_simulation() before building and running the '
          'process.') from None
    raise


def _in_secure_sum_context() -> bool:
  """Whether TFF's current context was set here (runs secure sum)."""
  try:
    from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top
    return context_stack_impl.context_stack.current in _SECURE_SUM_CONTEXTS
  except (ImportError, AttributeError, TypeError):
    return False


# ----------------------------------------------------------------------------
# Several machines: TFF's own executor services (worker_binary over gRPC).
# ----------------------------------------------------------------------------
def worker_binary_path() -> str:
  """Path of TFF's C++ executor service binary (start it with --port=N)."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  return os.path.join(os.path.dirname(tff.__file__), 'data', 'worker_binary')


def parse_workers(spec) -> List[str]:
  """'host:port,host:port' (or a list) -> ['host:port', ...], validated."""
  items = spec.split(',') if isinstance(spec, str) else list(spec)
  out = []
  for item in (i.strip() for i in items):
    host, _, port = item.rpartition(':')
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
      raise ValueError(f'`workers` entries must be host:port with a port in '
                       f'[1, 65535], got {item!r}.')
    out.append(item)
  if not out:
    raise ValueError('`workers` must name at least one host:port.')
  return out


class RemoteWorkers:
  """A TFF context that spreads each round's clients over remote executor services.

  Each address is a running `worker_binary --port=N` (any machine). Every
  computation is compiled to TFF's mergeable form (secure sum lowered to its
  simulation first, as in the local test context): each worker runs the client
  work of its share of the clients up to the aggregation, the partial
  aggregates are merged, and the server part runs once. `unreachable()` names
  the workers that do not answer, for error messages.
  """

  def __init__(self, addresses, ready_timeout_s: float = 30.0,
               trusted_network: bool = False):
    # pylint: disable=g-import-not-at-top
    import grpc
    from tensorflow_federated.python.core.backends.native import compiler as native_compiler
    from tensorflow_federated.python.core.backends.native import mergeable_comp_compiler
    from tensorflow_federated.python.core.backends.test import compiler as test_compiler
    from tensorflow_federated.python.core.environments.tensorflow_frontend import tensorflow_computation
    from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
    from tensorflow_federated.python.core.impl.execution_contexts import async_execution_context
    from tensorflow_federated.python.core.impl.execution_contexts import mergeable_comp_execution_context
    from tensorflow_federated.python.core.impl.executor_stacks import executor_factory
    from tensorflow_federated.python.core.impl.executor_stacks import python_executor_stacks
    from tensorflow_federated.python.core.impl.executors import remote_executor
    from tensorflow_federated.python.core.impl.types import placements
    # pylint: enable=g-import-not-at-top
    self.addresses = parse_workers(addresses)
    network.check_worker_addresses(self.addresses, trusted_network)
    self._stubs = {}
    contexts = []
    deadline = time.time() + ready_timeout_s
    for address in self.addresses:
      channel = grpc.insecure_channel(address, executor_factory._GRPC_CHANNEL_OPTIONS)  # pylint: disable=protected-access
      stub = _fail_fast_stub(channel, address)
      while not stub.is_ready:
        if time.time() > deadline:
          raise WorkerUnavailableError(
              f'TFF worker {address} is not reachable (waited {ready_timeout_s:.0f} '
              f's). Start it with: {worker_binary_path()} --port=<port>')
        time.sleep(0.1)
      self._stubs[address] = stub

      def stack_fn(cardinalities, stub=stub):
        cardinalities.setdefault(placements.CLIENTS, 0)
        ex = remote_executor.RemoteExecutor(stub)
        ex.set_cardinalities(cardinalities)
        return ex

      def lower(comp):
        comp = test_compiler.replace_secure_intrinsics_with_bodies(comp)
        return native_compiler.desugar_and_transform_to_native(comp)

      contexts.append(async_execution_context.AsyncExecutionContext(
          executor_fn=python_executor_stacks.ResourceManagingExecutorFactory(
              executor_stack_fn=stack_fn),
          compiler_fn=lower,
          transform_args=tensorflow_computation.transform_args,
          transform_result=tensorflow_computation.transform_result))
    self.context = mergeable_comp_execution_context.MergeableCompExecutionContext(
        async_contexts=contexts,
        compiler_fn=lambda comp: mergeable_comp_compiler.compile_to_mergeable_comp_form(
            test_compiler.replace_secure_intrinsics_with_bodies(comp)),
        transform_args=tensorflow_computation.transform_args,
        transform_result=tensorflow_computation.transform_result)
    context_stack_impl.context_stack.set_default_context(self.context)
    _SECURE_SUM_CONTEXTS.add(self.context)

  def unreachable(self) -> List[str]:
    """Addresses whose executor service does not answer now."""
    return [a for a, stub in self._stubs.items() if not stub.is_ready]


def _fail_fast_stub(channel, address):
  """A gRPC executor stub that raises WorkerUnavailableError instead of retrying.

  TFF retries calls that fail with a retryable gRPC status (UNAVAILABLE) forever,
  so a dead worker would hang the run; this stub fails the round and names it.
  """
  # pylint: disable=g-import-not-at-top
  import grpc
  from tensorflow_federated.python.core.impl.executors import executors_errors
  from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub
  # pylint: enable=g-import-not-at-top
  base_cls = remote_executor_grpc_stub.RemoteExecutorGrpcStub

  def wrap(name):
    def method(self, request):
      try:
        return getattr(base_cls, name)(self, request)
      except (executors_errors.RetryableGRPCError, grpc.RpcError) as e:
        raise WorkerUnavailableError(
            f'TFF worker {address} failed a {name} call: {e}') from e
    return method

  names = ('get_executor', 'create_value', 'create_struct', 'create_call',
           'create_selection', 'compute', 'dispose', 'dispose_executor')
  cls = type('FailFastStub', (base_cls,), {n: wrap(n) for n in names})
  return cls(channel)


def use_remote_workers(addresses, trusted_network: bool = False
                       ) -> RemoteWorkers:
  """Sets the default TFF context to `RemoteWorkers(addresses)` and returns
  it (an address outside loopback needs `trusted_network`)."""
  return RemoteWorkers(addresses, trusted_network=trusted_network)


def start_local_workers(num: int) -> Tuple[List[str], List[object]]:
  """Starts `num` worker_binary services on free ports (tests, demos).

  worker_binary listens on every interface (it has only --port); this
  process first moves into a private network namespace where Linux allows
  it (`network.isolate_local_run`), so the workers are reachable from it and
  its children at 127.0.0.1 only.

  Returns (addresses, Popen handles); end them with `stop_processes(handles)`.
  """
  import subprocess  # pylint: disable=g-import-not-at-top
  import portpicker  # pylint: disable=g-import-not-at-top
  network.isolate_local_run()
  addresses, procs = [], []
  for _ in range(num):
    port = portpicker.pick_unused_port()
    procs.append(subprocess.Popen(
        [worker_binary_path(), f'--port={port}'],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    addresses.append(f'127.0.0.1:{port}')
  return addresses, procs


def stop_processes(procs, timeout_s: float = 5.0) -> None:
  """Terminates Popen handles (SIGTERM, then SIGKILL) and reaps them."""
  for p in procs:
    if p.poll() is None:
      p.terminate()
  for p in procs:
    try:
      p.wait(timeout=timeout_s)
    except Exception:  # pylint: disable=broad-except
      p.kill()
      p.wait()
