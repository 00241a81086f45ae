"""TFF execution context for secure-sum simulation, and worker-process hygiene.

Why a special context: TFF's default (Python) execution context cannot run the
secure-sum intrinsics (`federated_secure_sum_bitwidth` fails with "Cannot embed a
federated value"). `tff.backends.test.set_sync_test_cpp_execution_context()` runs
them by simulating secure aggregation (a plain sum, which is what SecAgg reveals).
That context starts `worker_binary` child processes; they can outlive Python and
keep a pipe open, so everything that starts them must end them (`stop_workers`).
"""

import atexit
import os
import signal
import time
from typing import List

_REGISTERED = False


def use_secure_sum_simulation():
  """Sets TFF's C++ test context (runs secure sum) and ends its workers at exit."""
  global _REGISTERED
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  tff.backends.test.set_sync_test_cpp_execution_context()
  if not _REGISTERED:
    atexit.register(stop_workers)
    _REGISTERED = True


def worker_pids(only_children: bool = True) -> List[int]:
  """PIDs of TFF `worker_binary` processes (by default: started by this process)."""
  pids = []
  me = os.getpid()
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/cmdline', 'rb') as f:
        cmd = f.read().replace(b'\0', b' ')
      if b'worker_binary' not in cmd or b'tensorflow_federated' not in cmd:
        continue
      if only_children:
        with open(f'/proc/{entry}/stat') as f:
          ppid = int(f.read().rsplit(')', 1)[1].split()[1])
        if ppid != me:
          continue
      pids.append(int(entry))
    except (OSError, ValueError, IndexError):
      continue
  return pids


def stop_workers(timeout_s: float = 5.0, only_children: bool = True) -> int:
  """Terminates TFF worker processes (SIGTERM, then SIGKILL); returns how many.

  TFF's context cannot reconnect to a killed worker: call
  `use_secure_sum_simulation()` again before running another computation.
  """
  pids = worker_pids(only_children)
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
