"""Running an experiment binary as a user would, in a session of its own.

The binary runs with `start_new_session=True`, so every process it starts
(TFF's worker_binary among them) carries its session id, also after it exits.
What the binary left running is then found by that id alone: TFF workers of
other tests running at the same time (pytest-xdist) are not counted, and
whatever was left is ended before the test asserts on it.
"""

import os
import signal
import subprocess
import sys
from typing import Sequence

from tff_quant.program import runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(module: str, args: Sequence[str], timeout: float = 600,
        env=None) -> subprocess.CompletedProcess:
  """`python -m module *args` from the repository root.

  Args:
    module: e.g. 'experiments.fl_emnist'.
    args: its flags.
    timeout: seconds before the whole session is killed (then TimeoutExpired).
    env: the environment (default: this process's).

  Returns:
    The CompletedProcess (text stdout/stderr) with `leftover_workers`: the
    PIDs of TFF worker_binary processes of its session still alive after it
    exited (ended here before returning; a test asserts the list is empty).
  """
  proc = subprocess.Popen([sys.executable, '-m', module, *args], cwd=ROOT,
                          env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          start_new_session=True)
  try:
    out, err = proc.communicate(timeout=timeout)
  except subprocess.TimeoutExpired:
    _kill_session(proc.pid)
    proc.communicate()
    raise
  result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
  result.leftover_workers = runtime.worker_pids(only_children=False,
                                                session=proc.pid)
  if result.leftover_workers:
    _kill_session(proc.pid)
  return result


def _kill_session(pid: int) -> None:
  try:
    os.killpg(pid, signal.SIGKILL)
  except ProcessLookupError:
    pass
