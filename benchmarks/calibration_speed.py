"""Seconds to calibrate every registry mechanism at 8 bits (issue target:
< 60 s each, a clear refusal counting as an answer): d = 61,706, whole-model
ε = 10, δ = 1/3,400, 300 rounds, 100 and 1,000 of 3,400 clients, ℓ2 route
(l2_clip 1, c∞ = 3/√d). Each calibration runs in a fresh process (the
mechanisms cache their laws), the continuous Gaussian's in the same pass as
the baseline; --repeats passes, interleaved, and min/median/max per row.
  python -m benchmarks.calibration_speed [--repeats=2] [--clients=100,1000]
      [--limit_s=600]   (a calibration still running then is stopped and
                         its row says so) [--mechanisms=rqm,qmgeo] (default:
                         every registry mechanism; the Gaussian always)
      [--epsilon=10] [--bits=8] [--use_profile] (every calibration, the
                         Gaussian's too, on the profile route)
"""

import math
import os
import sys
import time

import numpy as np

from tff_quant import accounting
from tff_quant import mechanisms
from tff_quant.program import isolated

DIM = 61_706
TARGET = 10.0


def _one(name, clients, target=TARGET, bits=8, use_profile=False):
  t0 = time.perf_counter()
  try:
    r = accounting.calibration_report(
        name, target, 1 / 3400, 300, clients, 3400, DIM,
        bits=None if name == 'gaussian' else bits, l2_clip=1.0,
        coordinate_clip=3 / math.sqrt(DIM), use_profile=use_profile)
    low = r.epsilon_attained
    what = (f'{r.mechanism!r}; ε ∈ [{low:.4g}, {r.epsilon:.4g}]'
            if low is not None else f'{r.mechanism!r}; ε = {r.epsilon:.4g}')
    if r.ratio_to_gaussian is not None:
      what += f'; debiased error {r.ratio_to_gaussian:.3g}x the Gaussian\'s'
  except ValueError as err:   # a refusal is an answer
    what = 'refused: ' + str(err).splitlines()[0][:150]
  return time.perf_counter() - t0, what


def timed(name, clients, limit_s, target=TARGET, bits=8, use_profile=False):
  """(seconds, answer) of one calibration in a fresh process, stopped after
  `limit_s` (then the seconds are the limit and the answer says so); a
  process that dies without answering is said at once."""
  out = isolated.call_in_child(_one, (name, clients, target, bits,
                                      use_profile), limit_s)
  if out.ended == isolated.RETURNED:
    return out.value
  if out.ended == isolated.DIED:
    return out.seconds, f'the process died (exit code {out.exitcode})'
  return limit_s, f'stopped after {limit_s:g} s (over the limit)'


def main():
  repeats = 2
  clients = (100, 1000)
  limit_s = 600.0
  chosen = None
  target, bits, use_profile = TARGET, 8, False
  for arg in sys.argv[1:]:
    if arg.startswith('--epsilon='):
      target = float(arg.split('=')[1])
    if arg.startswith('--bits='):
      bits = int(arg.split('=')[1])
    if arg == '--use_profile':
      use_profile = True
    if arg.startswith('--repeats='):
      repeats = int(arg.split('=')[1])
    if arg.startswith('--clients='):
      clients = tuple(int(c) for c in arg.split('=')[1].split(','))
    if arg.startswith('--limit_s='):
      limit_s = float(arg.split('=')[1])
    if arg.startswith('--mechanisms='):
      chosen = arg.split('=')[1].split(',')
      for name in chosen:
        mechanisms.get(name)   # an unknown name: the registry's error
  names = ['gaussian'] + [n for n in mechanisms.registry() if n != 'gaussian'
                          and (chosen is None or n in chosen)]
  route = 'the profile route' if use_profile else 'the RDP route'
  print(f'Calibration at {bits} bits on {route}, d = {DIM}, ε = {target:g}, '
        '300 rounds '
        f'({os.cpu_count()} cores; load average at start '
        f'{os.getloadavg()[0]:.1f}); seconds over {repeats} interleaved passes.\n')
  print('| mechanism | n | min s | median s | max s | answer |\n|---|---|---|---|---|---|')
  for n in clients:
    times = {name: [] for name in names}
    answer = {}
    for repeat in range(repeats):
      for name in names:
        seconds, answer[name] = timed(name, n, limit_s, target, bits,
                                      use_profile)
        times[name].append(seconds)
        if repeat == repeats - 1:   # its row, as soon as it is complete
          t = np.array(times[name])
          print(f'| {name} | {n} | {t.min():.1f} | {np.median(t):.1f} | '
                f'{t.max():.1f} | {answer[name]} |', flush=True)


if __name__ == '__main__':
  main()
