"""Seconds to calibrate every registry mechanism at 8 bits (issue target:
< 60 s each, a clear refusal counting as an answer): d = 61,706, whole-model
ε = 10, δ = 1/3,400, 300 rounds, 100 and 1,000 of 3,400 clients, ℓ2 route
(l2_clip 1, c∞ = 3/√d). Each calibration runs in a fresh process (the
mechanisms cache their laws), the continuous Gaussian's in the same pass as
the baseline; --repeats passes, interleaved, and min/median/max per row.
  python -m benchmarks.calibration_speed [--repeats=2] [--clients=100,1000]
"""

import math
import multiprocessing
import os
import sys
import time

import numpy as np

from tff_quant import accounting
from tff_quant import mechanisms

DIM = 61_706
TARGET = 10.0


def _one(args, queue):
  name, clients = args
  t0 = time.perf_counter()
  try:
    r = accounting.calibration_report(
        name, TARGET, 1 / 3400, 300, clients, 3400, DIM,
        bits=None if name == 'gaussian' else 8, l2_clip=1.0,
        coordinate_clip=3 / math.sqrt(DIM))
    low = r.epsilon_attained
    what = (f'{r.mechanism!r}; ε ∈ [{low:.4g}, {r.epsilon:.4g}]'
            if low is not None else f'{r.mechanism!r}; ε = {r.epsilon:.4g}')
    if r.ratio_to_gaussian is not None:
      what += f'; debiased error {r.ratio_to_gaussian:.3g}x the Gaussian\'s'
  except ValueError as err:   # a refusal is an answer
    what = 'refused: ' + str(err).splitlines()[0][:150]
  queue.put((time.perf_counter() - t0, what))


def timed(name, clients):
  context = multiprocessing.get_context('spawn')
  queue = context.Queue()
  child = context.Process(target=_one, args=((name, clients), queue))
  child.start()
  out = queue.get()
  child.join()
  return out


def main():
  repeats = 2
  clients = (100, 1000)
  for arg in sys.argv[1:]:
    if arg.startswith('--repeats='):
      repeats = int(arg.split('=')[1])
    if arg.startswith('--clients='):
      clients = tuple(int(c) for c in arg.split('=')[1].split(','))
  names = ['gaussian'] + [n for n in mechanisms.registry() if n != 'gaussian']
  print(f'Calibration at 8 bits, d = {DIM}, ε = {TARGET:g}, 300 rounds '
        f'({os.cpu_count()} cores; load average at start '
        f'{os.getloadavg()[0]:.1f}); seconds over {repeats} interleaved passes.\n')
  print('| mechanism | n | min s | median s | max s | answer |\n|---|---|---|---|---|---|')
  for n in clients:
    times = {name: [] for name in names}
    answer = {}
    for _ in range(repeats):
      for name in names:
        seconds, answer[name] = timed(name, n)
        times[name].append(seconds)
    for name in names:
      t = np.array(times[name])
      print(f'| {name} | {n} | {t.min():.1f} | {np.median(t):.1f} | '
            f'{t.max():.1f} | {answer[name]} |', flush=True)


if __name__ == '__main__':
  main()
