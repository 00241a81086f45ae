"""Cells of the equal-privacy frontier: calibrate one (mechanism, bits, ε, d, n,
rounds) cell, run cells in time-limited processes, and write the report.

A cell's figure is its debiased error (`mechanisms.utility`: the worst
Var/slope² of the decoded mean of n clients sharing an input |x| <= 1/√d,
what calibration minimises) and its ratio to the continuous Gaussian's at the
same target; plain MSE stays as extra columns. A mechanism that cannot carry
the signal at those bits is inf with calibration's reason (for a modular sum,
the bits it needs).

Used by experiments/privacy_frontier.py (the flags and the loop live there).
"""

import functools
import json
import math
import multiprocessing
import os
import time

from scipy import stats

from tff_quant import accounting
from tff_quant import mechanisms
from tff_quant.accounting import calibration, composition, vector

COLUMNS = ('mechanism', 'bits', 'epsilon', 'delta', 'dim', 'clients_per_round',
           'total_clients', 'rounds', 'params', 'debiased_error_per_coordinate',
           'ratio_to_gaussian', 'slope', 'mse_per_coordinate',
           'mse_ratio_to_gaussian', 'epsilon_achieved', 'bits_used',
           'coordinate_clip_multiple', 'clip_bias_sq', 'gaussian_mse',
           'gaussian_noise_to_signal', 'seconds', 'reason')
#: Written to the results folder's config: cells ranked by another metric
#: (plain MSE before it) are not resumed into one report.
METRIC = 'debiased_error'
KEY = COLUMNS[:8]
GAUSSIAN = 'gaussian'
CENTRAL_BITS = 'inf'   # the Gaussian's bits column: not quantized


def clip_bias_sq(k: float, dim: int) -> float:
  """E[(|Z| - k)_+²]/d, Z ~ N(0, 1): the squared clipping error per coordinate of
  a rotated update of norm 1 clipped at k/√d (averaging clients cannot lower it)."""
  tail = stats.norm.sf(k)
  return 2 * ((1 + k * k) * tail - k * stats.norm.pdf(k)) / dim


def key(row):
  return tuple(str(row[c]) for c in KEY)


# The columns of KEY that a Gaussian reference serves: every mechanism and bits.
SETTING = ('epsilon', 'delta', 'dim', 'clients_per_round', 'total_clients',
           'rounds')


def setting_of(row):
  """(ε, δ, d, n, N, rounds): the setting a row's cell belongs to."""
  return tuple(str(row[c]) for c in SETTING)


def _cell_cost(name, bits, clients, coordinate_clip):
  """Estimated operations of one ε evaluation at the cheapest point of the first
  scanned parameter's grid, the others at their defaults (0 where the law is
  exact, or nothing builds: calibration scans further)."""
  cls = mechanisms.get(name)
  first = cls.tunable(cls.CALIBRATED[0])
  grid = first.grid if len(cls.CALIBRATED) > 1 and first.grid else (None,)
  orders = vector.order_ladder(calibration.FAST_ORDERS)
  costs = []
  for value in grid:
    params = {} if value is None else {first.name: value}
    try:
      mech = calibration.mechanism_for_bits(name, coordinate_clip, bits, **params)
    except ValueError:
      continue
    if mech.has_exact_divergences:
      return 0.0
    costs.append(vector.estimated_operations(mech, clients, len(orders)))
  return min(costs, default=0.0)


def empty_row(cell, reason=''):
  """The row of a cell with nothing calibrated (errors inf)."""
  return dict(zip(KEY, cell), params='', debiased_error_per_coordinate=math.inf,
              ratio_to_gaussian=math.inf, slope='', mse_per_coordinate=math.inf,
              mse_ratio_to_gaussian=math.inf, epsilon_achieved=math.nan,
              bits_used='', coordinate_clip_multiple='', clip_bias_sq='',
              gaussian_mse='', gaussian_noise_to_signal='', seconds='',
              reason=reason)


def _cell_worker(cell, max_operations, ks, rtol, conn):
  try:
    conn.send(compute_cell(cell, max_operations, ks, rtol))
  except Exception as e:  # pylint: disable=broad-except
    conn.send(empty_row(cell, f'{type(e).__name__}: {e}'))
  conn.close()


def run_cells(todo, workers, max_seconds, max_operations, ks, rtol):
  """Yields each cell's row as it ends: one forked process per cell, at most
  `workers` at a time, stopped (row inf + reason) after `max_seconds`."""
  ctx = multiprocessing.get_context('fork')
  todo, running = list(todo), {}
  while todo or running:
    while todo and len(running) < workers:
      cell = todo.pop(0)
      recv, send = ctx.Pipe(duplex=False)
      proc = ctx.Process(target=_cell_worker,
                         args=(cell, max_operations, ks, rtol, send), daemon=True)
      proc.start()
      send.close()
      running[proc] = (cell, time.time(), recv)
    time.sleep(0.05)
    for proc, (cell, start, recv) in list(running.items()):
      row = None
      if recv.poll():
        try:
          row = recv.recv()
        except EOFError:
          row = empty_row(cell, f'worker ended with code {proc.exitcode}')
      elif not proc.is_alive():
        row = empty_row(cell, f'worker ended with code {proc.exitcode} '
                        '(out of memory?)')
      elif time.time() - start > max_seconds:
        proc.terminate()
        row = empty_row(cell, f'calibration still running after '
                        f'--max_seconds_per_cell={max_seconds:g} s')
        row['seconds'] = time.time() - start
      if row is not None:
        proc.join()
        recv.close()
        del running[proc]
        yield row


@functools.lru_cache(maxsize=None)
def gaussian_reference(eps, delta, rounds, n, total, dim, rtol):
  """The continuous Gaussian calibrated to the cell's target (no coordinate bound)."""
  return accounting.calibration_report(
      GAUSSIAN, eps, delta, rounds, n, total, dim, l2_clip=1.0, rtol=rtol,
      compare_gaussian=False)


def compute_cell(cell, max_operations, ks, rtol):
  """One row: the calibration at the k with the least debiased error + clipping
  bias² (or inf + reason)."""
  name, bits, eps, delta, dim, n, total, rounds = cell
  t0 = time.time()
  row = empty_row(cell)
  schedule = dict(epsilon=eps, delta=delta, rounds=rounds, clients_per_round=n,
                  total_clients=total, dim=dim, l2_clip=1.0, rtol=rtol)
  gauss = gaussian_reference(eps, delta, rounds, n, total, dim, rtol)
  row['gaussian_mse'] = gauss.mse   # its debiased error too (slope 1)
  # d·MSE against ‖update‖² = 1: above 1 the Gaussian's decoded mean is mostly
  # noise (where plain MSE let a bounded quantizer undercut it).
  row['gaussian_noise_to_signal'] = dim * gauss.mse
  if name == GAUSSIAN:
    row.update(params=json.dumps(gauss.mechanism.params()),
               debiased_error_per_coordinate=gauss.debiased_error,
               ratio_to_gaussian=1.0, slope=gauss.slope,
               mse_per_coordinate=gauss.mse, mse_ratio_to_gaussian=1.0,
               epsilon_achieved=gauss.epsilon, clip_bias_sq=0.0,
               seconds=time.time() - t0)
    return row
  reasons = []
  limit, vector.MAX_OPERATIONS = vector.MAX_OPERATIONS, max_operations
  try:
    best = _best_over_multiples(name, bits, dim, ks, max_operations, schedule,
                                reasons)
  finally:
    vector.MAX_OPERATIONS = limit
  row['seconds'] = time.time() - t0
  if best is None:
    row['reason'] = ' | '.join(reasons).replace('\n', ' ')
    return row
  _, k, c, rep = best
  if rep.refused:
    reasons.append(f'k={k:g}: not evaluated (over --max_operations): {rep.refused}')
  method = rep.assumptions.partition(composition.DIVERGENCES_NOTE)[2].rstrip('.')
  if vector.is_loose_method(method):
    reasons.append(f'k={k:g}: {LOOSER}: {method}')
  row.update(params=json.dumps(dict(clip=c, **rep.params), default=float),
             debiased_error_per_coordinate=rep.debiased_error,
             ratio_to_gaussian=rep.debiased_error / gauss.debiased_error,
             slope=rep.slope, mse_per_coordinate=rep.mse,
             mse_ratio_to_gaussian=rep.mse / gauss.mse,
             epsilon_achieved=rep.epsilon,
             bits_used=rep.mechanism.bits_per_coordinate,
             coordinate_clip_multiple=k, clip_bias_sq=clip_bias_sq(k, dim),
             reason=' | '.join(reasons).replace('\n', ' '))
  return row


def _best_over_multiples(name, bits, dim, ks, max_operations, schedule, reasons):
  """(debiased error + clip bias², k, c, Calibration) at the best
  coordinate-clip multiple k, or None; why each other k failed is appended
  to `reasons`."""
  best = None
  for k in ks:
    c = k / math.sqrt(dim)
    cost = _cell_cost(name, bits, schedule['clients_per_round'], c)
    if cost > max_operations:
      reasons.append(f'k={k:g}: exact search ~{cost:.2g} operations per evaluation '
                     f'> --max_operations={max_operations:.2g}')
      continue
    try:
      rep = accounting.calibration_report(name, bits=bits, coordinate_clip=c,
                                          compare_gaussian=False, **schedule)
    except ValueError as e:
      reasons.append(f'k={k:g}: {e}')
      continue
    total_err = rep.debiased_error + clip_bias_sq(k, dim)
    if best is None or total_err < best[0]:
      best = (total_err, k, c, rep)
  return best


def as_float(v):
  try:
    return float(v)
  except (TypeError, ValueError):
    return math.nan


def fewest_bits_within(rows, factor=1.1):
  """{setting_of(row): {mechanism: fewest bits with debiased error <= factor ×
  the Gaussian's}}."""
  out = {}
  for r in rows:
    if r['mechanism'] == GAUSSIAN:
      continue
    mine = out.setdefault(setting_of(r), {})
    if as_float(r['ratio_to_gaussian']) <= factor:
      b = int(r['bits'])
      mine[r['mechanism']] = min(b, mine.get(r['mechanism']) or b)
    else:
      mine.setdefault(r['mechanism'], None)
  return out


LOOSER = 'a looser bound over --max_operations'   # a row's reason, see compute_cell
_LIMIT_FLAGS = ('--max_operations', '--max_seconds_per_cell')


def limited_by_budget(row) -> bool:
  """True when a cost or time limit shaped the row: a k refused or a cell
  stopped (inf), or divergences bounded loosely over the cost limit; such a
  cell may come out tighter under larger limits (`--retry_limited`)."""
  return any(flag in row.get('reason', '') for flag in _LIMIT_FLAGS)


def rqm_vs_pbm(rows):
  """(cells where both are finite, cells where RQM's debiased error is lower,
  cells of those where either one's divergences were bounded loosely over the
  cost limit: there the comparison is of bounds, not of mechanisms)."""
  by = {}
  for r in rows:
    if r['mechanism'] in ('rqm', 'pbm'):
      by.setdefault(key(dict(r, mechanism='')), {})[r['mechanism']] = (
          as_float(r['debiased_error_per_coordinate']), LOOSER in r['reason'])
  both = [v for v in by.values()
          if len(v) == 2 and all(math.isfinite(m) for m, _ in v.values())]
  return (len(both), sum(v['rqm'][0] < v['pbm'][0] for v in both),
          sum(v['rqm'][1] or v['pbm'][1] for v in both))


def rqm_vs_pbm_by_bits(rows):
  """{bits: (cells where both are finite, cells where RQM's debiased error is
  lower)}."""
  out = {}
  for bits in sorted({int(r['bits']) for r in rows if r['mechanism'] == 'rqm'}):
    both, wins, _ = rqm_vs_pbm([r for r in rows if r['bits'] == str(bits)])
    if both:
      out[bits] = (both, wins)
  return out


def on_one_reference(rows):
  """Rows whose Gaussian reference (gaussian_mse and the ratios and
  noise-to-signal from it) is their setting's current Gaussian row: cells
  computed in earlier runs keep their own calibration, but one setting has one
  reference (a fix to the Gaussian's calibration otherwise left old rows
  against an older one)."""
  ref = {setting_of(r): as_float(r['mse_per_coordinate']) for r in rows
         if r['mechanism'] == GAUSSIAN}
  out = []
  for r in rows:
    g = ref.get(setting_of(r))
    if g is not None and math.isfinite(g) and g > 0 and r['gaussian_mse'] != '':
      r = dict(r, gaussian_mse=str(g),
               gaussian_noise_to_signal=str(as_float(r['dim']) * g),
               ratio_to_gaussian=str(
                   as_float(r['debiased_error_per_coordinate']) / g),
               mse_ratio_to_gaussian=str(as_float(r['mse_per_coordinate']) / g))
    out.append(r)
  return out


def write_report(rows, output_dir):
  """frontier.md (table + verdicts) and frontier.png; returns the verdict lines."""
  rows = sorted(rows, key=lambda r: tuple(as_float(r[c]) if c != 'mechanism'
                                          else 0 for c in KEY) + (r['mechanism'],))
  lines = ['| mechanism | bits | ε | d | n | rounds | debiased error/coord '
           '| × Gaussian | slope | MSE/coord | MSE × Gaussian | k '
           '| params or reason |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    ratio = as_float(r['ratio_to_gaussian'])
    lines.append(f'| {r["mechanism"]} | {r["bits"]} | {r["epsilon"]} | {r["dim"]} | '
                 f'{r["clients_per_round"]} | {r["rounds"]} | '
                 f'{as_float(r["debiased_error_per_coordinate"]):.3g} | '
                 f'{ratio:.3g} | {as_float(r["slope"]):.3g} | '
                 f'{as_float(r["mse_per_coordinate"]):.3g} | '
                 f'{as_float(r["mse_ratio_to_gaussian"]):.3g} | '
                 f'{r["coordinate_clip_multiple"]} | '
                 f'{r["params"] if math.isfinite(ratio) else r["reason"][:300]} |')
  both, wins, loose = rqm_vs_pbm(rows)
  verdicts = [f'RQM vs PBM at equal whole-model (ε, δ) and bits: RQM has the lower '
              f'debiased error in {wins} of {both} cells where both are calibrated'
              + (f' ({loose} of them with a looser bound over the cost limit '
                 'for one of the two)' if loose else '') + '; by bits: '
              + ', '.join(f'{b}: {w} of {n}'
                          for b, (n, w) in rqm_vs_pbm_by_bits(rows).items())
              + '.']
  for setting, mechs in sorted(fewest_bits_within(rows).items(),
                               key=lambda kv: tuple(map(as_float, kv[0]))):
    eps, _, dim, n, _, rounds = setting
    parts = [f'{m} {b}' if b is not None else f'{m} none'
             for m, b in sorted(mechs.items())]
    nsr = [as_float(r['gaussian_noise_to_signal']) for r in rows
           if setting_of(r) == setting]
    nsr = max(nsr) if nsr else math.nan
    note = (f' [the Gaussian\'s noise energy is {nsr:.3g}× the update\'s]'
            if nsr > 1 else '')
    verdicts.append(f'ε={eps}, d={dim}, n={n}, {rounds} rounds: fewest bits within '
                    f'1.1× of the Gaussian\'s debiased error: ' + ', '.join(parts)
                    + note)
  text = '\n'.join(['# Equal-privacy frontier', '',
                    'Data: none (exact accounting; debiased error of the decoded '
                    'mean, Var/slope² at the worst shared input |x| <= 1/√d, for '
                    'updates of ℓ2 norm <= 1; plain MSE beside it).', '']
                   + verdicts + [''] + lines) + '\n'
  with open(os.path.join(output_dir, 'frontier.md.tmp'), 'w') as f:
    f.write(text)
  os.replace(os.path.join(output_dir, 'frontier.md.tmp'),
             os.path.join(output_dir, 'frontier.md'))
  plot(rows, os.path.join(output_dir, 'frontier.png'))
  return verdicts


def plot(rows, path):
  """Debiased error's ratio to the Gaussian's vs bits: one panel per ε, one
  line per mechanism (the first (d, n, rounds) setting of the rows)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  quantized = [r for r in rows if r['mechanism'] != GAUSSIAN]
  if not quantized:
    return
  first = quantized[0]
  setting = {c: first[c] for c in ('dim', 'clients_per_round', 'rounds')}
  epsilons = sorted({r['epsilon'] for r in quantized}, key=float)
  fig, axes = plt.subplots(1, len(epsilons), figsize=(4 * len(epsilons), 3.4),
                           squeeze=False, sharey=True)
  mechs = sorted({r['mechanism'] for r in quantized})
  color = {m: f'C{i % 10}' for i, m in enumerate(mechs)}   # one per mechanism
  shown = {}
  for ax, eps in zip(axes[0], epsilons):
    for mech in mechs:
      pts = sorted((int(r['bits']), as_float(r['ratio_to_gaussian']))
                   for r in quantized if r['mechanism'] == mech and
                   r['epsilon'] == eps and all(r[c] == v for c, v in setting.items()))
      pts = [(b, v) for b, v in pts if math.isfinite(v)]
      if pts:
        shown[mech], = ax.plot(*zip(*pts), marker='o', color=color[mech])
    ax.axhline(1.0, color='k', lw=0.8, ls='--')
    ax.set_yscale('log')
    ax.set_xlabel('bits per coordinate')
    ax.set_title(f'ε = {eps}')
  axes[0][0].set_ylabel('debiased error / Gaussian\'s')
  axes[0][-1].legend([shown[m] for m in mechs if m in shown],
                     [m for m in mechs if m in shown], fontsize=7)
  fig.suptitle(f'd={setting["dim"]}, n={setting["clients_per_round"]}, '
               f'{setting["rounds"]} rounds (no data: exact accounting)', fontsize=9)
  fig.tight_layout()
  fig.savefig(path + '.tmp.png', dpi=110)
  plt.close(fig)
  os.replace(path + '.tmp.png', path)
