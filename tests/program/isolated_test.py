"""Tests of tff_quant.program.isolated (targets from the standard library, so
the spawned child imports nothing of the tests)."""

import math
import operator
import os
import signal
import subprocess
import sys
import time

import pytest

from tff_quant.program import isolated


def test_the_targets_value_comes_back():
  out = isolated.call_in_child(operator.add, (2, 3), limit_s=60)
  assert out.ended == isolated.RETURNED
  assert out.value == 5
  assert out.exitcode == 0
  assert 0 < out.seconds < 60


def test_a_child_that_dies_is_noticed_at_the_next_poll_not_at_the_limit():
  start = time.perf_counter()
  out = isolated.call_in_child(os._exit, (3,), limit_s=120, poll_s=0.2)  # pylint: disable=protected-access
  assert out.ended == isolated.DIED
  assert out.exitcode == 3
  assert out.value is None
  assert time.perf_counter() - start < 60   # the limit was 120 s


def test_a_child_still_running_at_the_limit_is_stopped_and_reaped():
  out = isolated.call_in_child(time.sleep, (600,), limit_s=3, poll_s=0.5)
  assert out.ended == isolated.STOPPED
  assert out.seconds == 3
  assert out.value is None


def test_the_targets_exception_is_raised_in_the_caller():
  with pytest.raises(ValueError, match='math domain error'):
    isolated.call_in_child(math.sqrt, (-1.0,), limit_s=60)


@pytest.mark.parametrize('kwargs, name', [(dict(limit_s=0), 'limit_s'),
                                          (dict(limit_s=-1.0), 'limit_s'),
                                          (dict(poll_s=0), 'poll_s')])
def test_bad_limits_are_refused_naming_the_parameter(kwargs, name):
  with pytest.raises(ValueError, match=name):
    isolated.call_in_child(operator.add, (1, 2), **kwargs)


def test_run_command_returns_its_seconds_and_raises_on_a_failure():
  seconds = isolated.run_command([sys.executable, '-c', 'pass'])
  assert seconds > 0
  with pytest.raises(subprocess.CalledProcessError) as err:
    isolated.run_command([sys.executable, '-c', 'raise SystemExit(3)'])
  assert err.value.returncode == 3


def test_run_command_terminates_its_child_when_the_caller_is_stopped(
    tmp_path):
  """An exception in the caller (here a SIGALRM handler's) ends the child:
  it does not outlive the call."""
  pid_file = tmp_path / 'pid'
  script = (f'import os, time; open({str(pid_file)!r}, "w").write('
            'str(os.getpid())); time.sleep(60)')

  def stop(signum, frame):
    raise TimeoutError('caller stopped')

  old = signal.signal(signal.SIGALRM, stop)
  signal.alarm(2)
  try:
    with pytest.raises(TimeoutError):
      isolated.run_command([sys.executable, '-c', script], grace_s=10)
  finally:
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
  pid = int(pid_file.read_text())
  with pytest.raises(ProcessLookupError):
    os.kill(pid, 0)


def test_run_command_terminates_a_child_past_its_timeout(tmp_path):
  """timeout_s: the child gets SIGTERM (a training binary checkpoints and
  ends its workers there), the caller gets TimeoutExpired once it ended."""
  pid_file, term_file = tmp_path / 'pid', tmp_path / 'term'
  script = ('import os, signal, sys, time\n'
            f'open({str(pid_file)!r}, "w").write(str(os.getpid()))\n'
            'def bye(*_):\n'
            f'  open({str(term_file)!r}, "w").write("term"); sys.exit(143)\n'
            'signal.signal(signal.SIGTERM, bye)\n'
            'time.sleep(60)\n')
  start = time.monotonic()
  with pytest.raises(subprocess.TimeoutExpired):
    isolated.run_command([sys.executable, '-c', script], grace_s=10,
                         timeout_s=2)
  assert time.monotonic() - start < 30
  assert term_file.read_text() == 'term'
  with pytest.raises(ProcessLookupError):
    os.kill(int(pid_file.read_text()), 0)


def test_run_command_refuses_a_bad_grace():
  with pytest.raises(ValueError, match='grace_s'):
    isolated.run_command([sys.executable, '-c', 'pass'], grace_s=0)
