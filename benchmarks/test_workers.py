"""Wall time of a part of the test suite at each pytest-xdist worker count.

`make test` runs `-n $(TEST_WORKERS)`; this measures what that count is
worth here. Each worker count runs the same selection in a fresh pytest
(`--dist worksteal`, as `make test`), the counts interleaved, `--repeats`
passes; per count the min/median/max wall seconds and the share of CPU time
left idle (/proc/stat, the whole machine: run it on an otherwise idle one).
The default selection is the TensorFlow-heavy part of the suite (training
runs, binaries in subprocesses, TFF's worker processes), where a worker
waits on another process part of its time.
  python -m benchmarks.test_workers [--workers=2,3] [--repeats=2]
      [--tests=tests/training,tests/experiments/fl_emnist_test.py]
"""

import os
import statistics
import subprocess
import sys
import time

from absl import app
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_list('workers', ['2', '3'], 'pytest-xdist worker counts (-n).')
flags.DEFINE_integer('repeats', 2, 'Passes over the counts.', lower_bound=1)
flags.DEFINE_list('tests', ['tests/training', 'tests/experiments/fl_emnist_test.py',
                            'tests/experiments/fl_table_test.py'],
                  'Test paths to run (relative to the repository root).')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cpu_times():
  """(idle, total) jiffies of all CPUs since boot (idle includes iowait)."""
  with open('/proc/stat') as f:
    fields = [int(v) for v in f.readline().split()[1:8]]
  return fields[3] + fields[4], sum(fields)


def run_once(workers: int, tests) -> tuple:
  """(wall seconds, idle share, pytest's last line) of one run.

  Raises:
    RuntimeError: pytest failed (a failing suite times nothing).
  """
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}
  idle0, total0 = _cpu_times()
  t0 = time.perf_counter()
  proc = subprocess.run(
      [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', '-n',
       str(workers), '--dist', 'worksteal', *tests],
      cwd=ROOT, env=env, capture_output=True, text=True)
  wall = time.perf_counter() - t0
  idle1, total1 = _cpu_times()
  last = (proc.stdout.strip().splitlines() or [''])[-1]
  if proc.returncode != 0:
    raise RuntimeError(f'-n {workers}: pytest exited {proc.returncode}: {last}')
  return wall, (idle1 - idle0) / max(total1 - total0, 1), last


def main(argv):
  del argv
  counts = [int(w) for w in FLAGS.workers]
  walls = {w: [] for w in counts}
  idles = {w: [] for w in counts}
  print(f'{os.cpu_count()} CPUs; tests: {" ".join(FLAGS.tests)}; '
        f'{FLAGS.repeats} passes, counts interleaved', flush=True)
  for rep in range(FLAGS.repeats):
    for w in counts:
      wall, idle, last = run_once(w, FLAGS.tests)
      walls[w].append(wall)
      idles[w].append(idle)
      print(f'  pass {rep + 1}, -n {w}: {wall:.0f} s, CPU idle {idle:.0%} '
            f'({last})', flush=True)
  base = statistics.median(walls[counts[0]])
  print(f'\n| -n | wall s min / median / max | CPU idle (median) | '
        f'median vs -n {counts[0]} |')
  print('|---|---|---|---|')
  for w in counts:
    v = walls[w]
    print(f'| {w} | {min(v):.0f} / {statistics.median(v):.0f} / {max(v):.0f} '
          f'| {statistics.median(idles[w]):.0%} | '
          f'{statistics.median(v) / base:.2f}x |')


if __name__ == '__main__':
  app.run(main)
