"""Records calibrations to JSON, or compares two such records.

A check that a restructure of `tff_quant.accounting.calibration` changes no
answer: run `record` on the code before and after (e.g. the old commit in a
`git worktree`, with PYTHONPATH pointing at it), then `compare`. Every
number a calibration reports (ε, the attained end, the tunables, the noise,
the errors, the orders, the Gaussian's), every refusal's message, and how
many accountant and lower-bound evaluations the search made are recorded.

Usage:
  python tools/compare_calibrations.py record OUT.json [--only SUBSTRING]
  python tools/compare_calibrations.py compare BEFORE.json AFTER.json
"""

import argparse
import json
import math
import sys
import time

FL = dict(delta=1 / 3400, rounds=300, clients_per_round=100,
          total_clients=3400, dim=8192, l2_clip=1.0,
          coordinate_clip=3 / 8192**0.5)   # results/fl_table, rotated d
SMALL = dict(delta=1e-5, rounds=20, clients_per_round=10, total_clients=1000)
L2 = dict(delta=1 / 3400, rounds=300, clients_per_round=40,
          total_clients=3400, dim=1000, l2_clip=1.0,
          coordinate_clip=3 / 1000**0.5)
TINY = dict(delta=1e-5, rounds=2, clients_per_round=3, total_clients=20,
            dim=64, l2_clip=1.0, coordinate_clip=3 / 8)
CO256 = dict(delta=1 / 300, rounds=10, clients_per_round=30,
             total_clients=300, dim=256)
L2_512 = dict(delta=1 / 3400, rounds=100, clients_per_round=20,
              total_clients=3400, dim=512, l2_clip=1.0,
              coordinate_clip=3 / 512**0.5)

TINY_BITS = {'rqm': 4, 'pbm': 4, 'quantized_gaussian': 4, 'ddgauss': 8,
             'skellam': 8, 'qmgeo': 4, 'randomized_projection': 4, 'bq': 8,
             'gaussian': None}


def cases():
  """(name, kwargs of calibration_report) of every recorded calibration."""
  out = []
  for name, bits in sorted(TINY_BITS.items()):
    out.append((f'tiny_{name}', dict(mechanism=name, epsilon=10.0, bits=bits,
                                     **TINY)))
  for name, bits in (('pbm', 4), ('rqm', 4), ('qmgeo', 4), ('gaussian', None),
                     ('skellam', 8)):
    for eps in (3.0, 10.0):
      out.append((f'co256_{name}_b{bits}_eps{eps:g}', dict(
          mechanism=name, epsilon=eps, bits=bits, **CO256)))
  out.append(('small_pbm_l8_eps1.5', dict(mechanism='pbm', epsilon=1.5,
                                          num_levels=8, **SMALL)))
  out.append(('small_rqm_l8_eps1.5', dict(mechanism='rqm', epsilon=1.5,
                                          num_levels=8, **SMALL)))
  out.append(('small_skellam_b6', dict(mechanism='skellam', epsilon=2.0,
                                       bits=6, **SMALL)))
  out.append(('small_bq_b2', dict(mechanism='bq', epsilon=2.0, bits=2,
                                  **SMALL)))
  out.append(('small_rqm_unreachable', dict(mechanism='rqm', epsilon=1e-6,
                                            **SMALL)))
  for name, bits in (('pbm', 4), ('rqm', 3)):
    for bound in ('proved', 'attained'):
      out.append((f'l2_{name}_b{bits}_{bound}', dict(
          mechanism=name, epsilon=10.0, bits=bits, bound=bound, **L2)))
  for name, bits in (('pbm', 8), ('rqm', 4), ('gaussian', None)):
    for eps in (3.0, 10.0):
      out.append((f'l2_512_{name}_b{bits}_eps{eps:g}', dict(
          mechanism=name, epsilon=eps, bits=bits, **L2_512)))
  out.append(('l2_512_pbm_b4_attained', dict(
      mechanism='pbm', epsilon=3.0, bits=4, bound='attained', **L2_512)))
  for name, bits in (('gaussian', None), ('pbm', 4), ('rqm', 4), ('pbm', 8),
                     ('skellam', 4), ('bq', 4), ('randomized_projection', 4)):
    for eps in (3.0, 10.0):
      out.append((f'fl_{name}_b{bits}_eps{eps:g}', dict(
          mechanism=name, epsilon=eps, bits=bits, **FL)))
  for name in ('qmgeo', 'ddgauss', 'quantized_gaussian'):
    out.append((f'fl_{name}_b4_eps10', dict(mechanism=name, epsilon=10.0,
                                           bits=4, **FL)))
  out.append(('fl_rqm_b8_eps10', dict(mechanism='rqm', epsilon=10.0, bits=8,
                                      **FL)))
  # The ±c mixes kept (n = 30) and searched again (n = 200), fixed Δ.
  mixes = dict(delta=1e-5, rounds=20, total_clients=1000, dim=100,
               l2_clip=1.0, coordinate_clip=0.3, tune='q', num_levels=16)
  out.append(('mixes_kept', dict(mechanism='rqm', epsilon=4.0,
                                 clients_per_round=30, delta_ratio=16.0,
                                 **mixes)))
  out.append(('mixes_again', dict(mechanism='rqm', epsilon=3.2,
                                  clients_per_round=200, delta_ratio=32.0,
                                  **mixes)))
  out.append(('l2_rqm_b3_rtol1e-2', dict(mechanism='rqm', epsilon=10.0,
                                         bits=3, rtol=1e-2, **L2)))
  out.append(('l2_pbm_b4_extremes', dict(mechanism='pbm', epsilon=10.0,
                                         bits=4, others='extremes', **L2)))
  out.append(('small_pbm_b4_pld', dict(mechanism='pbm', epsilon=2.0, bits=4,
                                       use_pld=True, **SMALL)))
  out.append(('small_rqm_q_only', dict(mechanism='rqm', epsilon=3.0, bits=4,
                                       tune='q', delta_ratio=4.0, **SMALL)))
  out.append(('issue_qg_papers', dict(
      mechanism='quantized_gaussian', epsilon=10.0, bits=4, lattice=0,
      tune='noise_multiplier', delta=1 / 3400, rounds=300,
      clients_per_round=100, total_clients=3400, dim=61706, l2_clip=1.0,
      coordinate_clip=3 / 61706**0.5)))
  out.append(('small_bad_bound', dict(mechanism='pbm', epsilon=2.0, bits=4,
                                      bound='optimistic', **SMALL)))
  return out


def _plain(value):
  """`value` as JSON: numbers kept, everything else its repr."""
  if isinstance(value, bool) or value is None or isinstance(value, str):
    return value
  if isinstance(value, (int, float)):
    return float(value) if isinstance(value, float) else value
  if hasattr(value, 'item') and getattr(value, 'shape', None) == ():
    return _plain(value.item())
  if isinstance(value, dict):
    return {str(k): _plain(v) for k, v in sorted(value.items(), key=str)}
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  return repr(value)


def _mechanism(mech):
  out = {'repr': repr(mech), 'params': _plain(mech.params())}
  for attr in ('noise_std', 'sigma', 'modulus', 'bits_per_coordinate'):
    if hasattr(mech, attr):
      out[attr] = _plain(getattr(mech, attr))
  return out


def _report(rep):
  fields = ('epsilon', 'epsilon_attained', 'attained_inputs', 'target_epsilon',
            'delta', 'mse', 'gaussian_mse', 'ratio_to_gaussian', 'candidates',
            'refused', 'pruned', 'assumptions', 'orders', 'debiased_error',
            'slope', 'signal_bound', 'mse_ratio_to_gaussian', 'unusable',
            'bound')
  out = {f: _plain(getattr(rep, f)) for f in fields}
  out['params'] = _plain(rep.tunables)
  out['mechanism'] = _mechanism(rep.mechanism)
  if rep.gaussian is not None:
    out['gaussian'] = _mechanism(rep.gaussian)
  s = rep.setting
  out['setting'] = {k: _plain(v) for k, v in vars(s).items()}
  return out


def record(path, only=None):
  """Runs every case (or those whose name contains `only`) into `path`."""
  from tff_quant.accounting import calibration, composition, lower_bound
  counts = {'guarantee': 0, 'lower_bound': 0}
  real_g, real_l = composition.training_guarantee, lower_bound.epsilon_at_least

  def guarantee(*args, **kwargs):
    counts['guarantee'] += 1
    return real_g(*args, **kwargs)

  def at_least(*args, **kwargs):
    counts['lower_bound'] += 1
    return real_l(*args, **kwargs)
  composition.training_guarantee = guarantee
  lower_bound.epsilon_at_least = at_least
  results = {}
  for name, kwargs in cases():
    if only and only not in name:
      continue
    counts.update(guarantee=0, lower_bound=0)
    start = time.time()
    try:
      out = _report(calibration.calibration_report(**kwargs))
    except ValueError as err:
      out = {'error': type(err).__name__, 'message': str(err),
             'bits_needed': getattr(err, 'bits_needed', None)}
    out['evaluations'] = dict(counts)
    out['seconds'] = time.time() - start
    results[name] = out
    print(f'{name}: {out["seconds"]:.1f} s '
          f'{out.get("epsilon", out.get("error"))}', flush=True)
  with open(path, 'w') as f:
    json.dump(results, f, indent=1, sort_keys=True)


def _walk(a, b, where, diffs):
  """Appends (where, relative difference) for numbers, (where, inf) for
  anything else that differs; returns how many numbers were compared."""
  if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not (
      isinstance(a, bool) or isinstance(b, bool)):
    if a == b or (math.isnan(a) and math.isnan(b)):
      return 1
    diffs.append((where, abs(a - b) / max(abs(a), abs(b))))
    return 1
  if isinstance(a, dict) and isinstance(b, dict):
    if set(a) != set(b):
      diffs.append((f'{where} keys {sorted(set(a) ^ set(b))}', math.inf))
    return sum(_walk(a[k], b[k], f'{where}.{k}', diffs)
               for k in sorted(set(a) & set(b)))
  if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
    return sum(_walk(x, y, f'{where}[{i}]', diffs)
               for i, (x, y) in enumerate(zip(a, b)))
  if a != b:
    diffs.append((f'{where}: {a!r} != {b!r}', math.inf))
  return 0


def compare(before_path, after_path, rtol=1e-9):
  """Prints every difference over `rtol`; returns the exit status."""
  with open(before_path) as f:
    before = json.load(f)
  with open(after_path) as f:
    after = json.load(f)
  for side in (before, after):
    for case in side.values():
      case.pop('seconds', None)
  diffs = []
  numbers = _walk(before, after, '', diffs)
  worst = max((d for _, d in diffs), default=0.0)
  for where, d in diffs:
    if d > rtol:
      print(f'DIFFERS {where}: {d:.3g}')
  print(f'{len(before)} calibrations, {numbers} numbers compared, max '
        f'relative difference {worst:.3g}')
  return 0 if worst <= rtol else 1


def main(argv):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  sub = parser.add_subparsers(dest='command', required=True)
  rec = sub.add_parser('record')
  rec.add_argument('out')
  rec.add_argument('--only')
  cmp_ = sub.add_parser('compare')
  cmp_.add_argument('before')
  cmp_.add_argument('after')
  args = parser.parse_args(argv)
  if args.command == 'record':
    record(args.out, args.only)
    return 0
  return compare(args.before, args.after)


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
