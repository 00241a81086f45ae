"""experiments/run_fl_comparison.sh: help and bad arguments before any run."""

import os
import subprocess

import pytest

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), 'experiments', 'run_fl_comparison.sh')


def _run(*args):
  return subprocess.run(['bash', SCRIPT, *args], capture_output=True,
                        text=True, timeout=60)


@pytest.mark.parametrize('flag', ['--help', '-h'])
def test_help_prints_usage_and_exits_0_without_training(flag):
  res = _run(flag)
  assert res.returncode == 0 and res.stdout.startswith('Usage: ')
  assert '--output_dir' in res.stdout and 'runs/fl_comparison' in res.stdout
  assert res.stderr == ''


@pytest.mark.parametrize('args, message', [
    (['--bogus'], "error: unknown argument '--bogus'"),
    (['--rounds=-1'], 'error: --rounds=-1 must be an integer >= 1'),
    (['--rounds=x'], 'error: --rounds=x must be an integer >= 1'),
])
def test_bad_arguments_exit_2_with_one_line(args, message):
  res = _run(*args)
  assert res.returncode == 2
  assert res.stderr.strip().splitlines() == [res.stderr.strip()]
  assert res.stderr.startswith(message)
  assert res.stdout == ''
