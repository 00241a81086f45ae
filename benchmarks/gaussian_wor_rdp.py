"""Seconds for the sampled-without-replacement Gaussian's RDP (WBK19 Thm 27)
at the accountant's orders: dp-accounting's `RdpAccountant` (the baseline: a
table of forward differences per order) against
`mechanisms.gaussian.sampled_without_replacement_rdp` (one table for every
order), interleaved, --repeats times each, min/median/max; and whether the
two agree to the last bit. Every Gaussian calibration with sampled clients
(the reference of every ×G figure, `peers.calibrate('gaussian', ...)`) asks
this at each candidate noise multiplier.
  python -m benchmarks.gaussian_wor_rdp [--repeats=7]
"""

import sys
import time

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from tff_quant import accounting
from tff_quant.mechanisms import gaussian

CASES = [(100, 3400, 1.47), (100, 3400, 43.6), (4, 20, 2.0), (1000, 3400, 0.8)]


def _baseline(n, total, z, orders):
  acc = rdp_privacy_accountant.RdpAccountant(
      list(orders), rdp_privacy_accountant.NeighborRel.REPLACE_ONE)
  acc.compose(dp_event.SampledWithoutReplacementDpEvent(
      total, n, dp_event.GaussianDpEvent(z)))
  return np.asarray(acc._rdp)  # pylint: disable=protected-access


def _ours(n, total, z, orders):
  return gaussian.sampled_without_replacement_rdp(n / total, z, orders)


def main(argv):
  repeats = 7
  for arg in argv[1:]:
    if arg.startswith('--repeats='):
      repeats = int(arg.split('=', 1)[1])
    else:
      raise SystemExit(f'error: unknown flag {arg} (--repeats=N)')
  orders = accounting.rdp_route.DEFAULT_ORDERS
  print(f'{len(orders)} orders (up to {max(orders)}), {repeats} repeats each, '
        'interleaved')
  print('| n of N | z | dp-accounting s (min/median/max) | one table s '
        '(min/median/max) | speed-up (medians) | equal to the last bit |')
  print('|---|---|---|---|---|---|')
  for n, total, z in CASES:
    times = {_baseline: [], _ours: []}
    for _ in range(repeats):
      for fn in times:
        t0 = time.perf_counter()
        fn(n, total, z, orders)
        times[fn].append(time.perf_counter() - t0)
    equal = np.array_equal(_baseline(n, total, z, orders),
                           _ours(n, total, z, orders))
    cells = [f'{min(t):.3f} / {np.median(t):.3f} / {max(t):.3f}'
             for t in times.values()]
    ratio = np.median(times[_baseline]) / np.median(times[_ours])
    print(f'| {n} of {total} | {z:g} | {cells[0]} | {cells[1]} | '
          f'{ratio:.1f}x | {equal} |')


if __name__ == '__main__':
  main(sys.argv)
