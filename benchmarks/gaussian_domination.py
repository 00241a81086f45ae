"""Seconds of PBM's round profile by Gaussian domination against its RDP
curve, the baseline the profile route otherwise converts (both cold: caches
cleared, each in a fresh process), and the ε each gives at the frontier's
setting (d = 61,706, ℓ2 route, 100 of 3,400 clients, 300 rounds,
δ = 1/3,400; θ as calibrated to ε = 1 on the profile route at 1 level bit).
Rows interleaved over --repeats passes; min/median/max per row. With
--calibrations, also PBM calibrated at the FL table's setting (d = 8,192,
100 of 3,400, 300 rounds, c = 3/√d) on each route, one pass, each in a
fresh process: seconds and × Gaussian (each against the Gaussian on the
same routes).
  python -m benchmarks.gaussian_domination [--repeats=3]
      [--clients=10,100,1000] [--calibrations] [--blanket]
With --blanket, the same comparison for the quantized Gaussian and the
randomized projection above two levels (`blanket_domination`: the rate
through the others' blanket, against the RDP curve) at n = 100, at their
parameters calibrated to ε = 1 on the profile route (range 32c).
"""

import math
import sys
import time

import numpy as np

from tff_quant.program import isolated

DIM, TOTAL, ROUNDS = 61_706, 3400, 300
CLIP = 2 / math.sqrt(DIM)


def _rate(theta, n):
  from tff_quant.accounting import gaussian_domination  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  kappa = gaussian_domination.pbm_trial_rate(theta, CLIP, n)
  fisher = (theta / CLIP) / math.sqrt(n * (0.25 - theta * theta))
  return time.perf_counter() - t0, kappa / fisher


def _rdp(theta, n):
  from tff_quant import mechanisms  # pylint: disable=g-import-not-at-top
  from tff_quant.accounting import composition  # pylint: disable=g-import-not-at-top
  acc = composition.RoundAccountant(mechanisms.PBM(CLIP, 2, theta), n, TOTAL,
                                    1 / TOTAL, DIM, l2_clip=1.0)
  t0 = time.perf_counter()
  _ = acc.rdp
  return time.perf_counter() - t0, None


def _epsilons(theta, n):
  from tff_quant import mechanisms  # pylint: disable=g-import-not-at-top
  from tff_quant.accounting import composition  # pylint: disable=g-import-not-at-top
  acc = composition.RoundAccountant(mechanisms.PBM(CLIP, 2, theta), n, TOTAL,
                                    1 / TOTAL, DIM, l2_clip=1.0)
  generic = composition.RoundAccountant.from_round_rdp(
      dict(acc.rdp), n, TOTAL, 1 / TOTAL, DIM, 'RDP curve')
  return (acc.epsilon_rdp(ROUNDS)[0], generic.epsilon_profile(ROUNDS)[0],
          acc.epsilon_profile(ROUNDS)[0])


def _calibration(eps, bits, use_profile):
  from tff_quant import accounting  # pylint: disable=g-import-not-at-top
  dim = 8192
  t0 = time.perf_counter()
  rep = accounting.calibration_report(
      'pbm', eps, 1 / TOTAL, ROUNDS, 100, TOTAL, dim, bits=bits, l2_clip=1.0,
      coordinate_clip=3 / math.sqrt(dim), use_profile=use_profile)
  return time.perf_counter() - t0, rep.ratio_to_gaussian, rep.mechanism.theta


def _calibrations():
  print('PBM calibrated at d = 8,192, 100 of 3,400, 300 rounds, c = 3/√d')
  print('| ε | level bits | seconds: RDP route / profile route | '
        '× Gaussian: RDP route / profile route | θ: RDP route / profile '
        'route |')
  print('|---|---|---|---|---|')
  for eps in (1.0, 10.0):
    for bits in (4, 8):
      got = [isolated.call_in_child(_calibration, (eps, bits, p), 900).value
             for p in (False, True)]
      print(f'| {eps:g} | {bits} | {got[0][0]:.1f} / {got[1][0]:.1f} | '
            f'{got[0][1]:.4g} / {got[1][1]:.4g} | {got[0][2]:.4g} / '
            f'{got[1][2]:.4g} |')


#: (name, parameters) at ε = 1 on the profile route (results/frontier_profile).
BLANKET = (('quantized_gaussian 16 levels',
            dict(num_levels=16, range_ratio=32.0, noise_multiplier=21.825)),
           ('quantized_gaussian 256 levels',
            dict(num_levels=256, range_ratio=32.0, noise_multiplier=21.848)),
           ('randomized_projection 4 bits',
            dict(bits=4, q=0.9, range_ratio=32.0, noise_multiplier=40.289)))


def _blanket_mech(which):
  from tff_quant import mechanisms  # pylint: disable=g-import-not-at-top
  name, params = BLANKET[which]
  return mechanisms.get(name.split()[0]).for_coordinate_bound(CLIP, **params)


def _blanket_accountant(which):
  from tff_quant.accounting import composition  # pylint: disable=g-import-not-at-top
  return composition.RoundAccountant(_blanket_mech(which), 100, TOTAL,
                                     1 / TOTAL, DIM, l2_clip=1.0)


def _blanket_rate(which):
  from tff_quant.accounting import blanket_domination  # pylint: disable=g-import-not-at-top
  mech = _blanket_mech(which)
  t0 = time.perf_counter()
  rate = blanket_domination.rate(mech, 100)
  seconds = time.perf_counter() - t0
  # μ' over the sum's Fisher rate times S (the Gaussian approximation).
  levels = np.arange(mech.num_levels)
  h = mech.lattice_step
  p0, p1 = mech.pmf(0.0), mech.pmf(h)
  mean0 = p0 @ levels
  fisher = (p1 @ levels - mean0) / h / math.sqrt(
      100 * (p0 @ (levels - mean0)**2))
  return seconds, rate.round_mu(2.0, DIM) / (2.0 * fisher)


def _blanket_rdp(which):
  acc = _blanket_accountant(which)
  t0 = time.perf_counter()
  _ = acc.rdp
  return time.perf_counter() - t0, None


def _blanket_epsilons(which):
  from tff_quant.accounting import composition  # pylint: disable=g-import-not-at-top
  acc = _blanket_accountant(which)
  generic = composition.RoundAccountant.from_round_rdp(
      dict(acc.rdp), 100, TOTAL, 1 / TOTAL, DIM, 'RDP curve')
  return (acc.epsilon_rdp(ROUNDS)[0], generic.epsilon_profile(ROUNDS)[0],
          acc.epsilon_domination(ROUNDS))


def _blankets(repeats):
  times = {(w, what): [] for w in range(len(BLANKET))
           for what in ('rate', 'rdp')}
  ratio = {}
  for _ in range(repeats):
    for w in range(len(BLANKET)):
      for what, fn in (('rate', _blanket_rate), ('rdp', _blanket_rdp)):
        out = isolated.call_in_child(fn, (w,), 900)
        if out.ended != isolated.RETURNED:
          raise SystemExit(f'{what} of {BLANKET[w][0]} did not finish')
        times[w, what].append(out.value[0])
        if out.value[1] is not None:
          ratio[w] = out.value[1]
  print('The blanket mixture at n = 100, c = 2/√d, d = 61,706, ℓ2 route, '
        f'300 rounds; seconds min / median / max over {repeats} cold passes')
  print('| mechanism | μ′ / (Fisher·S) | rate (s) | RDP curve, the baseline '
        '(s) | ε: RDP route / RDP curve → profile / blanket domination |')
  print('|---|---|---|---|---|')
  for w, (name, _) in enumerate(BLANKET):
    eps = isolated.call_in_child(_blanket_epsilons, (w,), 900).value
    print(f'| {name} | {ratio[w]:.5f} | {_stats(times[w, "rate"])} | '
          f'{_stats(times[w, "rdp"])} | '
          + ' / '.join(f'{e:.4g}' for e in eps) + ' |', flush=True)


def _stats(values):
  return (f'{min(values):.3g} / {float(np.median(values)):.3g} / '
          f'{max(values):.3g}')


def main():
  repeats, clients, calibrations = 3, (10, 100, 1000), False
  for arg in sys.argv[1:]:
    if arg == '--blanket':
      _blankets(int(next((a.split('=', 1)[1] for a in sys.argv[1:]
                          if a.startswith('--repeats=')), 3)))
      return
    if arg == '--calibrations':
      calibrations = True
    elif arg.startswith('--repeats='):
      repeats = int(arg.split('=', 1)[1])
    elif arg.startswith('--clients='):
      clients = tuple(int(v) for v in arg.split('=', 1)[1].split(','))
    else:
      raise SystemExit(f'unknown argument {arg!r}; see the module docstring')
  theta = 0.0106   # PBM at 1 level bit, ε = 1 on the profile route, n = 100
  times = {(n, what): [] for n in clients for what in ('rate', 'rdp')}
  ratio = {}
  for _ in range(repeats):
    for n in clients:
      for what, fn in (('rate', _rate), ('rdp', _rdp)):
        out = isolated.call_in_child(fn, (theta, n), 600)
        if out.ended != isolated.RETURNED:
          raise SystemExit(f'{what} at n = {n} did not finish')
        seconds, value = out.value
        times[n, what].append(seconds)
        if value is not None:
          ratio[n] = value
  print('PBM, 1 level bit, θ = 0.0106, c = 2/√d, d = 61,706, ℓ2 route; '
        'seconds min / median / max over', repeats, 'cold passes')
  print('| n | κ₁ / Fisher | rate (s) | RDP curve, the baseline (s) | '
        'ε: RDP route / RDP curve → profile / Gaussian domination |')
  print('|---|---|---|---|---|')
  for n in clients:
    eps = isolated.call_in_child(_epsilons, (theta, n), 600).value
    print(f'| {n} | {ratio[n]:.5f} | {_stats(times[n, "rate"])} | '
          f'{_stats(times[n, "rdp"])} | '
          + ' / '.join(f'{e:.4g}' for e in eps) + ' |')
  if calibrations:
    _calibrations()


if __name__ == '__main__':
  main()
