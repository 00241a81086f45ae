"""Seconds and exact ε evaluations of the modular sums' calibrations at 16
bits, in the FL table's setting (benchmarks/served_cells.py: d = 8,192, n =
100 of 3,400, 300 rounds, δ = 1/3,400, ℓ2 clip 1, c∞ = 3/√d), for one or
more source trees: the tree under test and a baseline (e.g. a git worktree
of an earlier commit), each calibration in a fresh process, interleaved
(repeat by repeat, cell by cell, tree by tree), min/median/max per row. The
exact evaluations (`oracle.Epsilon.exact` calls with a finite ε, counted in
the child; those at a law out of reach return at once) do not depend on the
machine's load; the seconds do.

  git worktree add /tmp/base <commit>
  python -m benchmarks.modular_calibration --trees=.,/tmp/base
      [--cells=ddgauss:10,skellam:10] [--repeats=3]
"""

import json
import os
import subprocess
import sys

import numpy as np

CHILD = r'''
import json, math, sys, time
from tff_quant import accounting
from tff_quant.accounting.calibration import oracle
name, eps = sys.argv[1], float(sys.argv[2])
count = [0, 0]
exact = oracle.Epsilon.exact
def counted(self, mech):
  eps = exact(self, mech)
  count[math.isfinite(eps)] += 1
  return eps
oracle.Epsilon.exact = counted
t0 = time.perf_counter()
r = accounting.calibration_report(
    name, eps, 1 / 3400, 300, 100, 3400, 8192, l2_clip=1.0,
    coordinate_clip=3 / math.sqrt(8192), bits=16)
print(json.dumps(dict(seconds=time.perf_counter() - t0, exact=count[1],
                      out_of_reach=count[0],
                      answer=repr(r.mechanism), epsilon=r.epsilon,
                      ratio=r.ratio_to_gaussian)))
'''


def run(tree, name, eps):
  """One calibration in a fresh process in `tree`: its JSON line."""
  tree = os.path.abspath(tree)
  env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL='3')
  out = subprocess.run([sys.executable, '-c', CHILD, name, str(eps)],
                       cwd=tree, env=env, capture_output=True, text=True,
                       check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def main():
  trees, repeats = ['.'], 3
  cells = [('ddgauss', 10.0), ('skellam', 10.0)]
  for arg in sys.argv[1:]:
    key, _, value = arg.partition('=')
    if key == '--trees':
      trees = value.split(',')
    elif key == '--repeats':
      repeats = int(value)
    elif key == '--cells':
      cells = [(c.split(':')[0], float(c.split(':')[1]))
               for c in value.split(',')]
    else:
      raise SystemExit(f'unknown argument {arg!r} (see the docstring)')
  got = {}
  for rep in range(repeats):
    for cell in cells:
      for tree in trees:
        r = run(tree, *cell)
        got.setdefault((cell, tree), []).append(r)
        print(f'[{rep + 1}/{repeats}] {cell[0]} ε={cell[1]:g} {tree}: '
              f'{r["seconds"]:.1f} s, {r["exact"]} exact', flush=True)
  print('\n| cell | tree | seconds min / median / max | exact evaluations | '
        'answer | ε | ×G |\n|---|---|---|---|---|---|---|')
  for (cell, tree), rs in got.items():
    s = np.array([r['seconds'] for r in rs])
    last = rs[-1]
    print(f'| {cell[0]} ε = {cell[1]:g} | {tree} | {s.min():.0f} / '
          f'{np.median(s):.0f} / {s.max():.0f} | '
          f'{sorted({r["exact"] for r in rs})} | {last["answer"]} | '
          f'{last["epsilon"]:.4f} | {last["ratio"]:.4f} |')


if __name__ == '__main__':
  main()
