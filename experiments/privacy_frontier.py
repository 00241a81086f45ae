"""The equal-privacy frontier: every mechanism calibrated to one whole-model (ε, δ).

For each (mechanism, bits, ε, d, n, rounds) the mechanism's free parameters are
calibrated (`accounting.calibration_report`, ℓ2 route, updates of ℓ2 norm <= 1
after a random rotation, c∞ = k/√d) so that the whole run meets (ε, δ = 1/N),
and the cell records the exact worst-case MSE per coordinate of the decoded
mean of n clients next to the continuous Gaussian's at the same target (its MSE
does not depend on k: it needs no coordinate bound). ddgauss and skellam are
the two mechanisms of TFF's DistributedDpSumFactory, accounted exactly here.

k: each cell tries every k of --coordinate_clip_multiples and keeps the one with
the smallest MSE + clipping bias², the bias under the usual model of a rotated
update of norm 1 (coordinates ≈ N(0, 1/d)): E[(|Z| - k)_+²]/d.

Cost: a cell whose exact search is estimated (before it starts) above
--max_operations per ε evaluation is written as inf with the estimate; so is a
target no setting reaches (with the best ε) or bits a mechanism cannot use.
Cells are independent: --workers processes, and a killed run started again
with the same flags resumes (finished cells are kept; other flags: an error,
or --fresh). numpy/scipy only.

  python -m experiments.privacy_frontier --dims=61706 --clients=1000 \
      --rounds=300 --output_dir=results/frontier
"""

import functools
import json
import math
import multiprocessing
import os
import time

from absl import app
from absl import flags
from scipy import stats

from tff_quant import accounting, mechanisms
from tff_quant.accounting import calibration, vector
from tff_quant.program import cli, results_io

FLAGS = flags.FLAGS
flags.DEFINE_list('mechanisms', None, 'Registry mechanisms (default: every one '
                  'behind the secure sum); the continuous Gaussian is always '
                  'calibrated, as the reference.')
flags.DEFINE_list('bits', ['1', '2', '4', '8', '12', '16'], 'Bits per coordinate.')
flags.DEFINE_list('epsilons', ['1', '3', '10', '30'], 'Whole-model ε targets.')
flags.DEFINE_list('dims', ['61706', '1206590'], 'Model sizes d.')
flags.DEFINE_list('clients', ['40', '100', '1000'], 'Clients per round n.')
flags.DEFINE_list('rounds', ['300', '2000'], 'Training rounds.')
flags.DEFINE_integer('total_clients', 3400, 'Population N (δ = 1/N by default).')
flags.DEFINE_float('delta', None, 'Target δ (default 1 / total_clients).')
flags.DEFINE_list('coordinate_clip_multiples', ['2', '3', '4'],
                  'k values tried per cell (c∞ = k·clip/√d).')
flags.DEFINE_float('max_operations', 1e9, 'Per-evaluation cost limit of the '
                   'exact search (vector.estimated_operations; ~20 s at 1e9).')
flags.DEFINE_float('rtol', 1e-2, 'Relative width at which calibration stops.')
flags.DEFINE_integer('workers', 1, 'Processes computing cells in parallel.')
flags.DEFINE_float('max_seconds_per_cell', 900, 'A cell still running after '
                   'this is stopped and written as inf with the reason.')
flags.DEFINE_string('output_dir', 'results/frontier', 'Where frontier.csv, '
                    'frontier.md and frontier.png go.')
flags.DEFINE_bool('fresh', False, 'Discard earlier cells in output_dir.')

COLUMNS = ('mechanism', 'bits', 'epsilon', 'delta', 'dim', 'clients_per_round',
           'total_clients', 'rounds', 'params', 'mse_per_coordinate',
           'mse_ratio_to_gaussian', 'epsilon_achieved', 'bits_used',
           'coordinate_clip_multiple', 'clip_bias_sq', 'gaussian_mse',
           'gaussian_noise_to_signal', 'seconds', 'reason')
KEY = COLUMNS[:8]
GAUSSIAN = 'gaussian'
CENTRAL_BITS = 'inf'   # the Gaussian's bits column: not quantized


def clip_bias_sq(k: float, dim: int) -> float:
  """E[(|Z| - k)_+²]/d, Z ~ N(0, 1): the squared clipping error per coordinate of
  a rotated update of norm 1 clipped at k/√d (averaging clients cannot lower it)."""
  tail = stats.norm.sf(k)
  return 2 * ((1 + k * k) * tail - k * stats.norm.pdf(k)) / dim


def _key(row):
  return tuple(str(row[c]) for c in KEY)


def _cell_cost(name, bits, clients, coordinate_clip):
  """Estimated operations of one ε evaluation at the default parameters (0 where
  the law is exact, or the defaults do not build: calibration scans further)."""
  try:
    mech = calibration.mechanism_for_bits(name, coordinate_clip, bits)
  except ValueError:
    return 0.0
  if mech.has_exact_divergences:
    return 0.0
  orders = vector.order_ladder(calibration.FAST_ORDERS)
  return vector.estimated_operations(mech, clients, len(orders))


def empty_row(cell, reason=''):
  """The row of a cell with nothing calibrated (MSE inf)."""
  return dict(zip(KEY, cell), params='', mse_per_coordinate=math.inf,
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
  """One row: the calibration at the k with the least MSE + bias² (or inf + reason)."""
  name, bits, eps, delta, dim, n, total, rounds = cell
  t0 = time.time()
  row = empty_row(cell)
  schedule = dict(epsilon=eps, delta=delta, rounds=rounds, clients_per_round=n,
                  total_clients=total, dim=dim, l2_clip=1.0, rtol=rtol)
  gauss = gaussian_reference(eps, delta, rounds, n, total, dim, rtol)
  row['gaussian_mse'] = gauss.mse
  # d·MSE against ‖update‖² = 1: above 1 the Gaussian's decoded mean is mostly
  # noise, and a bounded quantizer's MSE (<= its range²) can undercut it.
  row['gaussian_noise_to_signal'] = dim * gauss.mse
  if name == GAUSSIAN:
    row.update(params=json.dumps(gauss.mechanism.params()), mse_per_coordinate=gauss.mse,
               mse_ratio_to_gaussian=1.0, epsilon_achieved=gauss.epsilon,
               clip_bias_sq=0.0, seconds=time.time() - t0)
    return row
  reasons, best = [], None
  for k in ks:
    c = k / math.sqrt(dim)
    cost = _cell_cost(name, bits, n, c)
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
    total_err = rep.mse + clip_bias_sq(k, dim)
    if best is None or total_err < best[0]:
      best = (total_err, k, c, rep)
  row['seconds'] = time.time() - t0
  if best is None:
    row['reason'] = ' | '.join(reasons).replace('\n', ' ')
    return row
  _, k, c, rep = best
  row.update(params=json.dumps(dict(clip=c, **rep.params), default=float),
             mse_per_coordinate=rep.mse,
             mse_ratio_to_gaussian=rep.mse / gauss.mse,
             epsilon_achieved=rep.epsilon,
             bits_used=rep.mechanism.bits_per_coordinate,
             coordinate_clip_multiple=k, clip_bias_sq=clip_bias_sq(k, dim),
             reason=' | '.join(reasons).replace('\n', ' '))
  return row


def _as_float(v):
  try:
    return float(v)
  except (TypeError, ValueError):
    return math.nan


def fewest_bits_within(rows, factor=1.1):
  """{(ε, d, n, rounds): {mechanism: fewest bits with MSE <= factor × Gaussian}}."""
  out = {}
  for r in rows:
    if r['mechanism'] == GAUSSIAN:
      continue
    setting = (r['epsilon'], r['dim'], r['clients_per_round'], r['rounds'])
    mine = out.setdefault(setting, {})
    if _as_float(r['mse_ratio_to_gaussian']) <= factor:
      b = int(r['bits'])
      mine[r['mechanism']] = min(b, mine.get(r['mechanism']) or b)
    else:
      mine.setdefault(r['mechanism'], None)
  return out


def rqm_vs_pbm(rows):
  """(cells where both are finite, cells where RQM's MSE is lower)."""
  by = {}
  for r in rows:
    if r['mechanism'] in ('rqm', 'pbm'):
      by.setdefault(_key(dict(r, mechanism='')), {})[r['mechanism']] = _as_float(
          r['mse_per_coordinate'])
  both = [v for v in by.values() if len(v) == 2 and all(map(math.isfinite, v.values()))]
  return len(both), sum(v['rqm'] < v['pbm'] for v in both)


def write_report(rows, output_dir):
  """frontier.md (table + verdicts) and frontier.png; returns the verdict lines."""
  rows = sorted(rows, key=lambda r: tuple(_as_float(r[c]) if c != 'mechanism'
                                          else 0 for c in KEY) + (r['mechanism'],))
  lines = ['| mechanism | bits | ε | d | n | rounds | MSE/coord | ratio to Gaussian '
           '| k | params or reason |', '|---|---|---|---|---|---|---|---|---|---|']
  for r in rows:
    ratio = _as_float(r['mse_ratio_to_gaussian'])
    lines.append(f'| {r["mechanism"]} | {r["bits"]} | {r["epsilon"]} | {r["dim"]} | '
                 f'{r["clients_per_round"]} | {r["rounds"]} | '
                 f'{_as_float(r["mse_per_coordinate"]):.3g} | {ratio:.3g} | '
                 f'{r["coordinate_clip_multiple"]} | '
                 f'{r["params"] if math.isfinite(ratio) else r["reason"][:160]} |')
  both, wins = rqm_vs_pbm(rows)
  verdicts = [f'RQM vs PBM at equal whole-model (ε, δ) and bits: RQM has the lower '
              f'MSE in {wins} of {both} cells where both are calibrated.']
  for setting, mechs in sorted(fewest_bits_within(rows).items(),
                               key=lambda kv: tuple(map(_as_float, kv[0]))):
    eps, dim, n, rounds = setting
    parts = [f'{m} {b}' if b is not None else f'{m} none'
             for m, b in sorted(mechs.items())]
    verdicts.append(f'ε={eps}, d={dim}, n={n}, {rounds} rounds: fewest bits within '
                    f'1.1× of the Gaussian: ' + ', '.join(parts))
  text = '\n'.join(['# Equal-privacy frontier', '',
                    'Data: none (exact accounting; MSE of the decoded mean for '
                    'updates of ℓ2 norm <= 1).', ''] + verdicts + [''] + lines) + '\n'
  with open(os.path.join(output_dir, 'frontier.md.tmp'), 'w') as f:
    f.write(text)
  os.replace(os.path.join(output_dir, 'frontier.md.tmp'),
             os.path.join(output_dir, 'frontier.md'))
  plot(rows, os.path.join(output_dir, 'frontier.png'))
  return verdicts


def plot(rows, path):
  """MSE ratio to the Gaussian vs bits: one panel per ε, one line per mechanism
  (the first (d, n, rounds) setting of the rows)."""
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
  for ax, eps in zip(axes[0], epsilons):
    for mech in sorted({r['mechanism'] for r in quantized}):
      pts = sorted((int(r['bits']), _as_float(r['mse_ratio_to_gaussian']))
                   for r in quantized if r['mechanism'] == mech and
                   r['epsilon'] == eps and all(r[c] == v for c, v in setting.items()))
      pts = [(b, v) for b, v in pts if math.isfinite(v)]
      if pts:
        ax.plot(*zip(*pts), marker='o', label=mech)
    ax.axhline(1.0, color='k', lw=0.8, ls='--')
    ax.set_yscale('log')
    ax.set_xlabel('bits per coordinate')
    ax.set_title(f'ε = {eps}')
  axes[0][0].set_ylabel('MSE / Gaussian MSE')
  axes[0][-1].legend(fontsize=7)
  fig.suptitle(f'd={setting["dim"]}, n={setting["clients_per_round"]}, '
               f'{setting["rounds"]} rounds (no data: exact accounting)', fontsize=9)
  fig.tight_layout()
  fig.savefig(path + '.tmp.png', dpi=110)
  plt.close(fig)
  os.replace(path + '.tmp.png', path)


def cells_from_flags():
  """Every (mechanism, bits, ε, δ, d, n, N, rounds) cell the flags ask for."""
  names = FLAGS.mechanisms or list(mechanisms.registry())
  for name in names:
    mechanisms.get(name)   # ValueError naming the known ones
  names = [n for n in names if n != GAUSSIAN]
  total = FLAGS.total_clients
  delta = FLAGS.delta if FLAGS.delta is not None else 1.0 / total
  ints = lambda flag, lo: [cli_int(flag, v, lo) for v in FLAGS[flag].value]
  bits, dims = ints('bits', 1), ints('dims', 1)
  clients, rounds = ints('clients', 1), ints('rounds', 1)
  epsilons = [cli_positive('epsilons', v) for v in FLAGS.epsilons]
  for n in clients:
    if n > total:
      raise ValueError(f'--clients: {n} exceeds --total_clients={total}.')
  if not 0 < delta < 1:
    raise ValueError(f'--delta must be in (0, 1), got {delta}.')
  cells = []
  for dim in dims:
    for n in clients:
      for r in rounds:
        for eps in epsilons:
          cells.append((GAUSSIAN, CENTRAL_BITS, eps, delta, dim, n, total, r))
          cells += [(name, b, eps, delta, dim, n, total, r)
                    for name in names for b in bits]
  return cells


def cli_int(flag, value, low):
  try:
    v = int(value)
  except ValueError:
    raise ValueError(f'--{flag}: {value!r} is not an integer.') from None
  if v < low:
    raise ValueError(f'--{flag}: {v} must be >= {low}.')
  return v


def cli_positive(flag, value):
  try:
    v = float(value)
  except ValueError:
    raise ValueError(f'--{flag}: {value!r} is not a number.') from None
  if not v > 0 or not math.isfinite(v):
    raise ValueError(f'--{flag}: {v} must be a finite number > 0.')
  return v


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    cells = cells_from_flags()
    ks = [cli_positive('coordinate_clip_multiples', v)
          for v in FLAGS.coordinate_clip_multiples]
    cli_int('workers', FLAGS.workers, 1)
    cli_positive('max_operations', FLAGS.max_operations)
    if not 0 < FLAGS.rtol <= 0.5:
      raise ValueError(f'--rtol must be in (0, 0.5], got {FLAGS.rtol}.')
    out = FLAGS.output_dir
    csv_path = os.path.join(out, 'frontier.csv')
    settings = dict(coordinate_clip_multiples=ks, rtol=FLAGS.rtol,
                    max_operations=FLAGS.max_operations, l2_clip=1.0)
    cfg_path = os.path.join(out, 'frontier_config.json')
    rows = []
    if os.path.exists(csv_path) and not FLAGS.fresh:
      earlier = None
      if os.path.exists(cfg_path):
        with open(cfg_path) as f:
          earlier = json.load(f)
      if earlier != json.loads(json.dumps(settings)):
        raise ValueError(f'{out} holds cells computed with {earlier}; these flags '
                         f'give {settings}. Use another --output_dir or --fresh.')
      rows = results_io.read_csv(csv_path)
    results_io.write_json(cfg_path, settings)
    done = {_key(r) for r in rows}
    todo = [c for c in cells if _key(dict(zip(KEY, c))) not in done]
    print(f'[privacy_frontier] {len(cells)} cells, {len(cells) - len(todo)} already '
          f'in {csv_path}, {len(todo)} to compute with {FLAGS.workers} worker(s).',
          flush=True)
    cli_positive('max_seconds_per_cell', FLAGS.max_seconds_per_cell)
    for row in run_cells(todo, FLAGS.workers, FLAGS.max_seconds_per_cell,
                         FLAGS.max_operations, ks, FLAGS.rtol):
      row = {k: str(v) for k, v in row.items()}
      rows.append(row)
      results_io.write_csv(csv_path, COLUMNS, [[r[c] for c in COLUMNS]
                                               for r in rows])
      ratio = _as_float(row['mse_ratio_to_gaussian'])
      print(f'  {row["mechanism"]:>18} bits={row["bits"]:>3} ε={row["epsilon"]:>4} '
            f'd={row["dim"]} n={row["clients_per_round"]} rounds={row["rounds"]}: '
            f'ratio {ratio:.3g} ({_as_float(row["seconds"]):.0f} s)'
            + ('' if math.isfinite(ratio) else f' [{row["reason"][:120]}]'),
            flush=True)
    verdicts = write_report(rows, out)
  print('Data: none (exact accounting of the mechanisms; no training).')
  print('\n'.join(verdicts))
  print(f'Wrote {csv_path}, frontier.md, frontier.png')


if __name__ == '__main__':
  app.run(main)
