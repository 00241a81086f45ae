"""TFF execution context for secure-sum simulation, and worker-process hygiene.

Why a special context: TFF's default (Python) execution context cannot run the
secure-sum intrinsics (`federated_secure_sum_bitwidth` fails with "Cannot embed a
federated value"). `tff.backends.test.set_sync_test_cpp_execution_context()` runs
them by simulating secure aggregation (a plain sum, which is what SecAgg reveals).
That context starts `worker_binary` child processes; they can outlive Python and
keep a pipe open, so everything that starts them must end them (`stop_workers`).
"""

import atexit
import contextlib
import os
import re
import signal
import sys
import threading
import time
from typing import List, Tuple

from tff_quant.program.errors import RoundCheckError, WorkerUnavailableError  # pylint: disable=unused-import

_REGISTERED = False


def use_secure_sum_simulation():
  """Sets TFF's C++ test context (runs secure sum) and ends its workers at exit."""
  global _REGISTERED
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()
  if not _REGISTERED:
    atexit.register(stop_workers)
    exit_on_sigterm()
    _REGISTERED = True


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
  return _pids_where(lambda cmd, ppid: ppid == me)


def stop_children(timeout_s: float = 5.0) -> int:
  """Terminates every child process of this one (SIGTERM, then SIGKILL)."""
  return _terminate(child_pids(), timeout_s)


def worker_pids(only_children: bool = True) -> List[int]:
  """PIDs of TFF `worker_binary` processes (by default: started by this process)."""
  me = os.getpid()
  return _pids_where(lambda cmd, ppid: (
      b'worker_binary' in cmd and b'tensorflow_federated' in cmd
      and (ppid == me or not only_children)))


def _pids_where(keep) -> List[int]:
  """PIDs of processes (zombies too, to be reaped) for which
  keep(cmdline bytes, parent pid) holds."""
  pids = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        cmd = f.read().replace(b'\0', b' ')
      with open(f'/proc/{entry}/stat') as f:
        fields = f.read().rsplit(')', 1)[1].split()
      if keep(cmd, int(fields[1])):
        pids.append(int(entry))
    except (OSError, ValueError, IndexError):
      continue
  return pids


def stop_workers(timeout_s: float = 5.0, only_children: bool = True) -> int:
  """Terminates TFF worker processes (SIGTERM, then SIGKILL); returns how many.

  TFF's context cannot reconnect to a killed worker: call
  `use_secure_sum_simulation()` again before running another computation.
  """
  return _terminate(worker_pids(only_children), timeout_s)


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
# Several machines: TFF's own executor services (worker_binary over gRPC).
# ----------------------------------------------------------------------------
_ASSERTION = re.compile(r'assertion failed: \[([^\]]+)\]')


@contextlib.contextmanager
def readable_round_errors():
  """Turns a failed in-computation check, which TFF's C++ executor reports as a
  gRPC INTERNAL error, into a RoundCheckError carrying the check's message.

  with runtime.readable_round_errors():
    state, metrics = process.next(state, client_data)
  """
  try:
    yield
  except Exception as e:  # pylint: disable=broad-except
    found = _ASSERTION.search(str(e))
    if not found:
      raise
    raise RoundCheckError(found.group(1)) from e


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

  def __init__(self, addresses, ready_timeout_s: float = 30.0):
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


def use_remote_workers(addresses) -> RemoteWorkers:
  """Sets the default TFF context to `RemoteWorkers(addresses)` and returns it."""
  return RemoteWorkers(addresses)


def start_local_workers(num: int) -> Tuple[List[str], List[object]]:
  """Starts `num` worker_binary services on free 127.0.0.1 ports (tests, demos).

  Returns (addresses, Popen handles); end them with `stop_processes(handles)`.
  """
  import subprocess  # pylint: disable=g-import-not-at-top
  import portpicker  # pylint: disable=g-import-not-at-top
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
