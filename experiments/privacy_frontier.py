"""The equal-privacy frontier: every mechanism calibrated to one whole-model (ε, δ).

For each (mechanism, bits, ε, d, n, rounds) the mechanism's free parameters are
calibrated (`accounting.calibration_report`, ℓ2 route, updates of ℓ2 norm <= 1
after a random rotation, c∞ = k/√d) so that the whole run meets (ε, δ = 1/N),
and the cell records the exact debiased error per coordinate of the decoded
mean of n clients (the worst Var/slope² over shared inputs |x| <= 1/√d, the
error of its best debiased use: `tff_quant.mechanisms.utility`) next to the
continuous Gaussian's at the same target (σ²/n: it needs no coordinate
bound), with the slope and the plain MSE beside them. ddgauss and skellam are
the two mechanisms of TFF's DistributedDpSumFactory, accounted exactly here.

Two ends per cell (`tff_quant.program.frontier`): the proved end calibrates
on the accountant's proved ε (a guarantee); the optimistic end on the ε that
named inputs attain on the same route (calibration bound='attained': the best
a perfect bound over the other clients' inputs could allow, not a guarantee),
with epsilon_attained of the proved calibration beside them. The report's
verdicts (RQM vs PBM, fewest bits within 1.1× of the Gaussian) treat each
figure as the interval [optimistic, proved] and mark those that flip
between the two ends.

k: each cell tries every k of --coordinate_clip_multiples and keeps the one with
the smallest debiased error + clipping bias², the bias under the usual model
of a rotated update of norm 1 (coordinates ≈ N(0, 1/d)): E[(|Z| - k)_+²]/d.

Cost: a cell whose exact search is estimated (before it starts) above
--max_operations per ε evaluation is written as inf with the estimate (the
proved end; the optimistic end has only --max_seconds_per_cell); so is a
target no setting reaches (with the best ε), bits a mechanism cannot use, or a
mechanism that cannot carry the signal there (a modular sum wider than its
modulus: the reason names the bits it needs; a decoded mean with slope < 1/2).
Cells are independent: --workers processes, and a killed run started again
with the same flags resumes (finished cells are kept, those the accountant
code on disk computed: a row carries its digest, accounting.provenance, and
a row of other code is recomputed; other flags: an error, or --fresh). --max_operations may change between runs (each row it shaped says
so); --retry_limited recomputes those rows under the new limits. numpy/scipy
only.

  python -m experiments.privacy_frontier --dims=61706 --clients=1000 \
      --rounds=300 --output_dir=results/frontier
"""

import json
import math
import os
import time

from absl import app
from absl import flags

from tff_quant import accounting
from tff_quant import mechanisms
from tff_quant.program import cli, frontier, results_io
from tff_quant.program.frontier import COLUMNS, GAUSSIAN, KEY

FLAGS = flags.FLAGS
flags.DEFINE_list('mechanisms', None, 'Registry mechanisms and TFF\'s '
                  'distributed aggregators tff_dgauss/tff_skellam, these at '
                  '--bits as their wire bits (default: every one); the '
                  'continuous Gaussian is always calibrated, as the '
                  'reference.')
flags.DEFINE_list('bits', ['1', '2', '4', '8', '12', '16'], 'Bits per coordinate.')
flags.DEFINE_list('epsilons', ['1', '3', '10', '30'], 'Whole-model ε targets.')
flags.DEFINE_list('dims', ['61706', '1206590'], 'Model sizes d.')
flags.DEFINE_list('clients', ['40', '100', '1000'], 'Clients per round n.')
flags.DEFINE_list('rounds', ['300', '2000'], 'Training rounds.')
flags.DEFINE_integer('total_clients', 3400, 'Population N (δ = 1/N by default).',
                     lower_bound=1)
flags.DEFINE_float('delta', None, 'Target δ (default 1 / total_clients).')
flags.DEFINE_list('coordinate_clip_multiples', ['2', '3', '4'],
                  'k values tried per cell (c∞ = k·clip/√d).')
flags.DEFINE_float('max_operations', frontier.DEFAULT_MAX_OPERATIONS,
                   'Per-evaluation cost limit of the exact search over the '
                   'other clients (the accountant\'s own default, so a cell '
                   'gets the bound a user of the library gets). It shapes '
                   'the proved end only: the optimistic end (bound='
                   '\'attained\') is bounded by --max_seconds_per_cell.')
flags.DEFINE_float('rtol', 1e-2, 'Relative width at which calibration stops.')
flags.DEFINE_integer('workers', 1, 'Processes computing cells in parallel.',
                     lower_bound=1)
flags.DEFINE_float('max_seconds_per_cell', 900, 'Each end of a cell gets this '
                   'long: a cell still in its proved end is stopped and written '
                   'as inf with the reason; one still in its optimistic end '
                   'keeps its proved end (the optimistic one unknown).')
flags.DEFINE_float('max_memory_gb', None, 'Address-space cap of each cell '
                   'worker, GiB (default: 80% of physical memory over '
                   '--workers); a cell that needs more is written as inf with '
                   'the reason instead of meeting the kernel\'s OOM killer.')
flags.DEFINE_string('output_dir', 'results/frontier', 'Where frontier.csv, '
                    'frontier.md and frontier.png go.')
flags.DEFINE_bool('use_profile', False, 'Calibrate every cell, the Gaussian '
                  'reference too, on the profile route as well (the round\'s '
                  'privacy profile sampled and composed as a PLD; PBM by its '
                  'proved Gaussian domination, the Gaussian by its exact '
                  'profile; docs/privacy.md, "Gaussian domination"). A folder '
                  'holds cells of one choice.')
flags.DEFINE_bool('fresh', False, 'Discard earlier cells in output_dir.')
flags.DEFINE_bool('retry_limited', False, 'Recompute the asked-for cells whose '
                  'earlier row a cost or time limit shaped (refused, stopped, '
                  'or loosely bounded: frontier.limited_by_budget), e.g. after '
                  'raising --max_operations; each row is replaced only when '
                  'its new one is written.')

def cells_from_flags():
  """Every (mechanism, bits, ε, δ, d, n, N, rounds) cell the flags ask for."""
  known = list(mechanisms.registry()) + list(frontier.PEERS)
  names = FLAGS.mechanisms or known
  for name in names:
    if name not in known:
      raise ValueError(f'--mechanisms: {name!r} is not a registry mechanism '
                       f'or one of TFF\'s peers; the known ones: '
                       f'{sorted(known)}.')
  names = [n for n in names if n != GAUSSIAN]
  total = FLAGS.total_clients
  delta = FLAGS.delta if FLAGS.delta is not None else 1.0 / total
  ints = lambda flag, lo: cli.numbers(flag, FLAGS[flag].value, lo, integer=True)
  bits, dims = ints('bits', 1), ints('dims', 1)
  clients, rounds = ints('clients', 1), ints('rounds', 1)
  epsilons = cli.numbers('epsilons', FLAGS.epsilons, 0, strict=True)
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
          cells.append((GAUSSIAN, frontier.CENTRAL_BITS, eps, delta, dim, n, total, r))
          cells += [(name, b, eps, delta, dim, n, total, r)
                    for name in names for b in bits]
  return cells


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    cells = cells_from_flags()
    ks = cli.numbers('coordinate_clip_multiples', FLAGS.coordinate_clip_multiples,
                     0, strict=True)
    cli.number('workers', FLAGS.workers, 1, integer=True)
    cli.number('max_operations', FLAGS.max_operations, 0, strict=True)
    cli.number('max_seconds_per_cell', FLAGS.max_seconds_per_cell, 0, strict=True)
    if FLAGS.max_memory_gb is not None:
      cli.number('max_memory_gb', FLAGS.max_memory_gb, 0, strict=True)
    if not 0 < FLAGS.rtol <= 0.5:
      raise ValueError(f'--rtol must be in (0, 0.5], got {FLAGS.rtol}.')
    out = FLAGS.output_dir
    # others: the accountant's default, any inputs of the other clients (proved).
    settings = dict(coordinate_clip_multiples=ks, rtol=FLAGS.rtol,
                    max_operations=FLAGS.max_operations, l2_clip=1.0,
                    others='any', metric=frontier.METRIC, ends=frontier.ENDS)
    if FLAGS.use_profile:   # absent otherwise: folders of before it resume
      settings['use_profile'] = True
    with results_io.exclusive(out, 'privacy_frontier run'):
      verdicts = _run(cells, settings, ks, out)
  print('Data: none (exact accounting of the mechanisms; no training).')
  print('\n'.join(verdicts))
  print(f'Wrote frontier.csv, frontier.md and frontier.png in {out}')


def _run(cells, settings, ks, out):
  """Resumes the cells in out/frontier.csv (same settings) and writes the report."""
  csv_path = os.path.join(out, 'frontier.csv')
  cfg_path = os.path.join(out, 'frontier_config.json')
  rows = []
  if os.path.exists(csv_path) and not FLAGS.fresh:
    earlier = None
    if os.path.exists(cfg_path):
      with open(cfg_path) as f:
        earlier = json.load(f)
    # The cost limit only decides which cells are refused or loosely
    # bounded, and each such row says so in its reason: it may change.
    same = lambda cfg: {k: v for k, v in (cfg or {}).items()
                        if k != 'max_operations'}
    if same(earlier) != same(json.loads(json.dumps(settings))):
      raise ValueError(f'{out} holds cells computed with {earlier}; these flags '
                       f'give {settings}. Use another --output_dir or --fresh.')
    rows = results_io.read_csv(csv_path)
    for r in rows:   # written before rows carried their accountant
      r.setdefault('accountant', frontier.UNRECORDED)
  results_io.write_json(cfg_path, settings)
  # A row counts as finished only if this accountant's code computed it.
  done = {frontier.key(r) for r in rows
          if r['accountant'] == accounting.provenance.SOURCE_DIGEST and
          not (FLAGS.retry_limited and frontier.limited_by_budget(r))}
  todo = [c for c in cells if frontier.key(dict(zip(KEY, c))) not in done]
  print(f'[privacy_frontier] {len(cells)} cells, {len(cells) - len(todo)} already '
        f'in {csv_path}, {len(todo)} to compute with {FLAGS.workers} worker(s).',
        flush=True)
  max_bytes = (int(FLAGS.max_memory_gb * 2**30) if FLAGS.max_memory_gb
               else frontier.worker_memory_bytes(FLAGS.workers))
  start = time.time()
  for count, row in enumerate(frontier.run_cells(
      todo, FLAGS.workers, FLAGS.max_seconds_per_cell, FLAGS.max_operations,
      ks, FLAGS.rtol, max_bytes, FLAGS.use_profile), 1):
    row = {k: str(v) for k, v in row.items()}
    eta = (time.time() - start) / count * (len(todo) - count)
    print(f'[{count}/{len(todo)}, ETA ~{eta / 60:.0f} min]', end='')
    row = frontier.with_wire_columns(row)
    rows = [r for r in rows if frontier.key(r) != frontier.key(row)] + [row]
    results_io.write_csv(csv_path, COLUMNS, [[r[c] for c in COLUMNS]
                                             for r in rows])
    ratio = frontier.as_float(row['ratio_to_gaussian'])
    lo, _, known = frontier.ends(row)
    print(f'  {row["mechanism"]:>18} bits={row["bits"]:>3} ε={row["epsilon"]:>4} '
          f'd={row["dim"]} n={row["clients_per_round"]} rounds={row["rounds"]}: '
          f'{ratio:.3g}× the Gaussian\'s debiased error (optimistic end '
          + (f'{lo:.3g}' if known else '?') + ') '
          f'({frontier.as_float(row["seconds"]):.0f} s + '
          f'{frontier.as_float(row["seconds_attained"]):.0f} s)'
          + ('' if math.isfinite(ratio) else f' [{row["reason"][:120]}]'),
          flush=True)
  rows = [frontier.with_wire_columns(r)
          for r in frontier.on_one_reference(rows)]
  results_io.write_csv(csv_path, COLUMNS, [[r[c] for c in COLUMNS] for r in rows])
  return frontier.write_report(rows, out, FLAGS.use_profile)


def entry_point():
  """The console script `tff-quant-privacy-frontier` (setup.py): runs `main` as
  `python -m experiments.privacy_frontier` does, from any folder."""
  cli.run(main)


if __name__ == '__main__':
  entry_point()
