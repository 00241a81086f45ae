"""Seconds for exact secure-sum Rényi divergences (issue targets: n=40, L=16 well
under 0.1 s; n=1000, L=256 under 2 s; n=100, L=2^16, one order under 5 s), next
to the naive float64 convolution baseline measured in the same run (which also
shows where it underflows; skipped where it would take hours); then
whole-run `training_guarantee` calls with their seconds and peak memory (each in
a fresh process, so the peaks do not mix).
  python -m benchmarks.accounting_speed
"""

import math
import resource
import time

import numpy as np

from tff_quant import accounting, mechanisms
from tff_quant.program import isolated


NAIVE_MAX_SUPPORT = 1e6   # the float64 baseline is O(n² L²): skipped beyond


def timed(fn, repeats=3):
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn()
    times.append(time.perf_counter() - t0)
  return float(np.median(times)), out


def naive(mech, n, k, alpha):
  """Float64 np.convolve of pmfs (no log domain): the baseline."""
  c = mech.input_bound
  pp, pm = mech.pmf(c), mech.pmf(-c)
  o = np.array([1.0])
  for _ in range(k):
    o = np.convolve(o, pp)
  for _ in range(n - 1 - k):
    o = np.convolve(o, pm)
  p, q = np.convolve(o, pp), np.convolve(o, pm)
  with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
    return accounting.renyi_divergence(np.log(p), np.log(q), alpha)


def main():
  cases = [(mechanisms.PBM(1.0, 16, 0.25), 40, 'balanced', 2.0),
           (mechanisms.RQM(1.0, 1.0, 16, 0.42), 40, 'balanced', 2.0),
           (mechanisms.PBM(1.0, 16, 0.25), 40, 'extremes', 2.0),
           (mechanisms.PBM(1.0, 16, 0.25), 40, 'balanced', math.inf),
           (mechanisms.PBM(1.0, 256, 0.25), 1000, 'balanced', 2.0),
           (mechanisms.RQM(1.0, 1.0, 256, 0.42), 1000, 'balanced', 2.0),
           (mechanisms.PBM(1.0, 256, 0.25), 1000, 'balanced', 8.0),
           (mechanisms.PBM(1.0, 2**16, 0.25), 100, 'balanced', 2.0),
           (mechanisms.RQM(1.0, 1.0, 2**16, 0.42), 100, 'balanced', 2.0)]
  print('| mechanism | n | L | others | α | tff_quant s | D_α | naive float64 s | naive D_α |')
  print('|---|---|---|---|---|---|---|---|---|')
  for mech, n, others, alpha in cases:
    t, res = timed(lambda: accounting.renyi_divergence_of_sum(mech, alpha, n, others))
    k = res.worst_num_plus
    if n * mech.num_levels > NAIVE_MAX_SUPPORT:
      naive_cells = f'not run (n·L > {NAIVE_MAX_SUPPORT:.0e}: O(n²L²)) | —'
    else:
      tn, dn = timed(lambda: naive(mech, n, k, alpha), repeats=1)
      naive_cells = f'{tn:.3f} | {dn:.6g}'
    print(f'| {mech.name} | {n} | {mech.num_levels} | {others} | {alpha:g} | {t:.3f} | '
          f'{res.value:.6g} | {naive_cells} |')


def _peak_mb():
  """This process's peak RSS. VmHWM, not ru_maxrss: Linux carries ru_maxrss
  across exec, so a spawned child would report its (large) parent's peak."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('VmHWM:'):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _in_fresh_process(target, args):
  """target(args)'s row, computed in a spawned process (so peaks and caches
  do not mix); an error, not a hang, if it dies without one (e.g. killed for
  memory)."""
  out = isolated.call_in_child(target, (args,))
  if out.ended != isolated.RETURNED:
    raise RuntimeError(f'{target.__name__}{args!r} exited with code '
                       f'{out.exitcode} before reporting a row.')
  return out.value


def _guarantee_row(args):
  name, c_inf, rounds, n, total, dim, others = args
  mech = mechanisms.build(name, c_inf)   # defaults: RQM (Δ = c, q = 0.42, m = 16)
  t0 = time.perf_counter()
  g = accounting.training_guarantee(mech, rounds, n, total, 1 / total, dim=dim,
                                    others=others)
  seconds = time.perf_counter() - t0
  peak_mb = _peak_mb()
  return g.epsilon, g.route, g.pld_note, seconds, peak_mb


def guarantees():
  """training_guarantee with defaults at growing d: any inputs of the others
  (RDP), and others='extremes' (the PLD route where its grid fits)."""
  cases = [('rqm', 0.01, 20, 30, 300, 6_000, others)
           for others in ('any', 'extremes')] + [
               ('rqm', 0.03 / math.sqrt(d), 2000, 40, 3400, d, 'extremes')
               for d in (61_706, 1_206_590)]
  print('\n| training_guarantee | others | rounds | n of N | d | ε (δ = 1/N) | '
        'route | s | peak MB | note |\n|---|---|---|---|---|---|---|---|---|---|')
  for case in cases:
    name, _, rounds, n, total, dim, others = case
    eps, route, note, seconds, peak = _in_fresh_process(_guarantee_row, case)
    print(f'| {name} | {others} | {rounds} | {n} of {total} | {dim} | {eps:.4g} | '
          f'{route} | {seconds:.1f} | {peak:.0f} | {note or "—"} |')


def _calibration_row(args):
  name, bits, target, schedule = args
  t0 = time.perf_counter()
  try:
    r = accounting.calibration_report(name, target, bits=bits, **schedule)
    row = (repr(r.mechanism), r.epsilon, r.epsilon_attained, r.mse,
           r.ratio_to_gaussian, f'{r.candidates} ({r.pruned} pruned)', '')
  except ValueError as err:   # infeasible or refused: the reason is the row
    row = ('—', math.nan, None, math.nan, math.nan, 0, str(err)[:160])
  return row + (time.perf_counter() - t0,)


def calibrations(names=('gaussian', 'skellam', 'ddgauss', 'qmgeo', 'rqm', 'pbm'),
                 clients=40, bits=8, rounds=2000):
  """calibration_report per mechanism (ℓ2 route, c∞ = 3·clip/√d, `bits`) at
  d = 61,706, `rounds` rounds, n of 3,400, whole-model ε = 10 (issue: < 60 s each
  at n = 100, L <= 2^8)."""
  dim = 61_706
  schedule = dict(delta=1 / 3400, rounds=rounds, clients_per_round=clients,
                  total_clients=3400, dim=dim, l2_clip=1.0,
                  coordinate_clip=3 / math.sqrt(dim))
  print(f'\n| calibrate (ε = 10, δ = 1/3400, d = {dim}, {rounds} rounds, n = '
        f'{clients}, {bits} bits, '
        'k = 3) | s | ε | attained ε | MSE/coord | debiased error / Gaussian\'s | '
        'candidates | mechanism or reason |\n|---|---|---|---|---|---|---|---|')
  for name in names:
    mech, eps, low, var, ratio, cands, why, seconds = _in_fresh_process(
        _calibration_row, (name, None if name == 'gaussian' else bits, 10.0,
                           schedule))
    low = '—' if low is None else f'{low:.4g}'
    print(f'| {name} | {seconds:.1f} | {eps:.4g} | {low} | {var:.3g} | '
          f'{ratio:.3g} | {cands} | {why or mech} |')


if __name__ == '__main__':
  main()
  guarantees()
  calibrations()
  calibrations(('gaussian', 'qmgeo', 'rqm', 'skellam', 'pbm'), bits=4)
  calibrations(('gaussian', 'skellam', 'rqm', 'pbm'), clients=100, bits=4)
  calibrations(('gaussian', 'skellam', 'ddgauss', 'qmgeo', 'rqm', 'pbm',
                'quantized_gaussian', 'randomized_projection', 'bq'),
               clients=100, bits=8)   # the issue's < 60 s case: every mechanism
