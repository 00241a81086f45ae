"""The FL validation's runs (docs/fl_validation.md): the central
Gaussian's dose–response at ε ∈ {3, 10}, noise variance multiplied by
m ∈ {1, 1.25, 1.5, 2, 3}, and the mechanism cells of cells.json (written
once by --choose_cells), 10 block seeds (100–109) each, with the tuned
training of results/fl_table_tuned (tff_quant.program.fl_validation).

Each ε's Gaussian is calibrated once (the tuned table's stored calibration
where its schedule is this one, else `peers.calibrate`) into
calibrations.json; dose m runs `experiments.fl_emnist` at noise multiplier
z_ε·√m into runs/gaussian_eps<ε>_m<m>_s<seed>/, whose summary.json then gets
the validation's fields (variance_multiplier, predicted_ratio = m,
level_bits and wire_bits null: floats, no secure sum; also in
validation.json). A mechanism cell runs its calibrated parameters at its
wire budget into runs/<cell>_s<seed>/, predicted_ratio its position m on
the dose axis. A finished run is skipped and an interrupted one resumes;
several starts may share the folder (each run is locked while it trains),
and --runs / --max_runs split the work. The whole process is niced.

  python -m experiments.fl_validation                 # every run left
  python -m experiments.fl_validation --plan          # cells, runs, commands
  python -m experiments.fl_validation --runs=gaussian_eps3_m2_s100
  python -m experiments.fl_validation --report_only   # once all have finished
  python -m experiments.fl_validation --choose_cells  # the mechanism cells
"""

import contextlib
import json
import math
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

from tff_quant.program import cli, fl_validation as fv, isolated, results_io, runtime

FLAGS = flags.FLAGS
flags.DEFINE_string('output_dir', 'results/fl_validation', 'Results folder.')
flags.DEFINE_list('runs', [], 'Run names (e.g. gaussian_eps3_m2_s100) to do, '
                  'in this order; default: every planned run, seed-major.')
flags.DEFINE_integer('max_runs', 0, 'Stop after training this many runs (0: '
                     'no limit).', lower_bound=0)
flags.DEFINE_bool('plan', False, 'Dry run: print the cells, the runs with '
                  'their state and the fl_emnist command of each run left; '
                  'train and calibrate nothing.')
flags.DEFINE_bool('choose_cells', False, 'Scan every mechanism\'s ×G over '
                  'the wire budgets at the training\'s setting (resumable: '
                  'cell_scan.json) and write cells.json by the plan\'s rule '
                  '(refused once cells.json exists).')
flags.DEFINE_list('cell_mechanisms', list(fv.CELL_MECHANISMS), 'With '
                  '--choose_cells: the mechanisms scanned (the plan: all).')
flags.DEFINE_bool('report_only', False, 'Write report.md from the finished '
                  'runs (refused until every planned run has finished, '
                  'unless --partial).')
flags.DEFINE_bool('partial', False, 'With --report_only: analyse the runs '
                  'finished so far (marked PARTIAL: not the pre-registered '
                  'analysis).')
flags.DEFINE_integer('nice', 15, 'Niceness added to this process and its runs.',
                     lower_bound=0, upper_bound=19)
flags.DEFINE_string('data_dir', None, 'Folder with the Fashion-MNIST IDX files.')
# The pre-registered plan; other values make another folder's setting (tests).
flags.DEFINE_list('epsilons', [f'{e:g}' for e in fv.EPSILONS], 'Target ε.')
flags.DEFINE_list('multipliers', [f'{m:g}' for m in fv.MULTIPLIERS],
                  'Noise variance multipliers (>= 1; 1 included).')
flags.DEFINE_list('seeds', [str(s) for s in fv.SEEDS], 'Block seeds.')
flags.DEFINE_integer('rounds', fv.ROUNDS, 'Rounds per run.', lower_bound=1)
flags.DEFINE_integer('clients_per_round', fv.SETTING['clients_per_round'],
                     'Clients per round.', lower_bound=1)
flags.DEFINE_integer('total_clients', fv.SETTING['total_clients'],
                     'Population.', lower_bound=1)
flags.DEFINE_integer('eval_every', fv.EVAL_EVERY, 'Evaluate every k rounds.',
                     lower_bound=1)
flags.DEFINE_string('stored_calibrations',
                    'results/fl_table_tuned/calibrations.json', 'An FL '
                    'table\'s calibrations, reused for the Gaussian where its '
                    'schedule is this one.')


def setting():
  """This folder's setting (config.json): the plan's, from the flags."""
  out = dict(fv.SETTING, rounds=FLAGS.rounds,
             clients_per_round=FLAGS.clients_per_round,
             total_clients=FLAGS.total_clients, eval_every=FLAGS.eval_every,
             delta=1 / FLAGS.total_clients,
             training={f'{e:g}': t for e, t in fv.TRAINING.items()})
  return out


def mechanism_cells():
  """The mechanism cells of cells.json in --output_dir (none before
  `--choose_cells` wrote it), at the --epsilons planned."""
  path = os.path.join(FLAGS.output_dir, 'cells.json')
  if not os.path.exists(path):
    return []
  with open(path) as f:
    cells = fv.planned_cells(json.load(f))
  epsilons = set(cli.numbers('epsilons', FLAGS.epsilons, 0, strict=True))
  return [c for c in cells if c.epsilon in epsilons]


def plan():
  """(cells, [(cell, seed)] to do, every planned (cell, seed)): the dose
  cells, then the mechanism cells of cells.json once it exists."""
  cells = fv.dose_cells(cli.numbers('epsilons', FLAGS.epsilons, 0,
                                    strict=True),
                        cli.numbers('multipliers', FLAGS.multipliers, 1))
  for c in cells:
    if c.epsilon not in fv.TRAINING:
      raise ValueError(f'--epsilons: no tuned training for ε = '
                       f'{c.epsilon:g} (tuned: {sorted(fv.TRAINING)}).')
  cells = cells + mechanism_cells()
  seeds = fv.check_seeds(cli.numbers('seeds', FLAGS.seeds, 0, integer=True))
  every = fv.planned_runs(cells, seeds)
  if not FLAGS.runs:
    return cells, every, every
  by_name = {fv.run_name(c, s): (c, s) for c, s in every}
  unknown = [r for r in FLAGS.runs if r not in by_name]
  if unknown:
    raise ValueError(f'--runs: {unknown} are not planned runs (e.g. '
                     f'{fv.run_name(*every[0])}; see --plan).')
  return cells, [by_name[r] for r in FLAGS.runs], every


def run_dir(cell, seed) -> str:
  return os.path.join(FLAGS.output_dir, 'runs', fv.run_name(cell, seed))


def calibration(epsilon, calibrations, cal_path):
  """The Gaussian's noise multiplier at ε: from calibrations.json; else the
  stored table's where compatible; else `peers.calibrate` (written)."""
  key = f'gaussian_eps{epsilon:g}'
  if key not in calibrations:
    s = setting()
    t0 = time.time()
    z = fv.stored_calibration(FLAGS.stored_calibrations, epsilon, s)
    source = f'{FLAGS.stored_calibrations} (gaussian_eps{epsilon:g}_b32)'
    if z is None:   # a fresh process, as experiments/fl_table.py calibrates
      out = isolated.call_in_child(
          fv.calibrate_gaussian,
          (epsilon, s, fv.TRAINING[epsilon]['clip_norm']), 1800)
      if out.ended != isolated.RETURNED:
        raise ValueError(f'the Gaussian\'s calibration at ε = {epsilon:g} '
                         f'{out.ended} after {out.seconds:.0f} s; start '
                         'again.')
      z, source = out.value, 'aggregators.peers.calibrate'
    calibrations[key] = dict(noise_multiplier=z, source=source,
                             seconds=time.time() - t0)
    results_io.write_json(cal_path, calibrations)
    print(f'[calibrate] ε = {epsilon:g}: noise multiplier {z:.6g} ({source})',
          flush=True)
  return calibrations[key]['noise_multiplier']


def run_args(cell, seed, zs):
  """fl_emnist's flags for one planned run (a dose of the Gaussian, or a
  mechanism cell's calibrated parameters and wire budget)."""
  training = fv.TRAINING[cell.epsilon]
  if isinstance(cell, fv.PlannedCell):
    return fv.cell_args(setting(), training, cell, seed, run_dir(cell, seed),
                        FLAGS.data_dir)
  return fv.fl_emnist_args(
      setting(), training, fv.scaled_noise_multiplier(zs[cell.epsilon],
                                                      cell.multiplier),
      seed, run_dir(cell, seed), FLAGS.data_dir)


def train(cell, seed, zs) -> float:
  """One run through experiments.fl_emnist (its own process: TFF's workers
  end with it); returns its wall seconds."""
  args = [sys.executable, '-m', 'experiments.fl_emnist'] + run_args(
      cell, seed, zs)
  return isolated.run_command(args)


def show_plan(cells, todo, every, calibrations) -> None:
  done = [(c, s) for c, s in every if fv.finished(run_dir(c, s))]
  print(f'{len(cells)} cells, {len(every)} runs ({len(done)} finished); '
        f'seeds {FLAGS.seeds[0]}..{FLAGS.seeds[-1]} (noise seed '
        f'{fv.NOISE_SEED_OFFSET} + seed)')
  for c in cells:
    if isinstance(c, fv.PlannedCell):
      print(f'  {c.name}: ε = {c.epsilon:g}, {c.mechanism}, predicted ×G '
            f'{c.ratio:.4g} (dose axis m = {c.dose:.4g}), {c.level_bits} '
            f'level bits, {c.wire_bits} wire bits')
    else:
      print(f'  {c.name}: ε = {c.epsilon:g}, variance ×{c.multiplier:g}, '
            f'predicted ×G {c.multiplier:g}, level/wire bits n/a (floats)')
  zs = {}
  for e in {c.epsilon for c in cells}:
    zs[e] = calibrations.get(f'gaussian_eps{e:g}', {}).get(
        'noise_multiplier') or fv.stored_calibration(
            FLAGS.stored_calibrations, e, setting())
  for c, s in todo:
    if fv.finished(run_dir(c, s)):
      continue
    state = 'started' if os.path.isdir(run_dir(c, s)) else 'to do'
    needs_z = not isinstance(c, fv.PlannedCell) and zs[c.epsilon] is None
    command = ('(not calibrated yet)' if needs_z else 'python -m '
               'experiments.fl_emnist ' + ' '.join(run_args(c, s, zs)))
    print(f'[{state}] {fv.run_name(c, s)}: {command}')


def choose_cells(calibrations, cal_path) -> str:
  """The mechanism cells by the plan's rule (`fv.scan_budgets`,
  `fv.choose_cells`): each answer the proved end of
  `which_mechanism.compute_end` at the training's setting (d = fv.CELL_DIM
  after rotation, c∞ = 3·clip/√d, the schedule of the dose runs), in this
  process, each level count calibrated once per mechanism and ε over the
  budgets; written to cells.json once."""
  # pylint: disable=g-import-not-at-top
  from tff_quant.program import frontier, which_mechanism as wm
  cells_path = os.path.join(FLAGS.output_dir, 'cells.json')
  if os.path.exists(cells_path):
    raise ValueError(f'{cells_path} exists: the plan fixes the cells once, '
                     'before the first mechanism run (an amendment changes '
                     'them, docs/fl_validation.md).')
  s = setting()
  n, total, rounds = s['clients_per_round'], s['total_clients'], s['rounds']
  delta = 1 / total
  epsilons = [float(e) for e in FLAGS.epsilons]
  zs = {e: calibration(e, calibrations, cal_path) for e in epsilons}
  refs = {e: frontier.gaussian_reference(e, delta, rounds, n, total,
                                         fv.CELL_DIM, wm.DEFAULT_RTOL)
          for e in epsilons}

  reuse = {}   # per (mechanism, ε): each level count calibrated once

  def answer(mech, eps, bits):
    end = wm.compute_end(
        mech, wm.Setting(eps, delta, fv.CELL_DIM, n, total, rounds, bits),
        (fv.CELL_MULTIPLE,), wm.DEFAULT_RTOL, 'proved',
        refs[eps].debiased_error, reuse=reuse.setdefault((mech, eps), {}))
    return fv.BudgetAnswer(end.error / refs[eps].debiased_error,
                           end.level_bits, end.wire_bits, end.params,
                           wm.kind_of(mech) == wm.PEER, end.reason)

  scan_path = os.path.join(FLAGS.output_dir, 'cell_scan.json')
  store = {}
  if os.path.exists(scan_path):
    with open(scan_path) as f:
      store = json.load(f)
  answers = fv.scan_budgets(
      answer, store, lambda st: results_io.write_json(scan_path, st),
      mechanisms=FLAGS.cell_mechanisms, epsilons=epsilons,
      progress=lambda line: print(line, flush=True))
  # ×G compares with the Gaussian at noise multiplier z_ref = n·√E_G (ℓ2
  # clip 1); the dose runs' is z_ε: a cell sits at m = ×G·(z_ref/z_ε)².
  scale = {e: (n * math.sqrt(refs[e].debiased_error) / zs[e])**2
           for e in epsilons}
  cells, amendments = fv.choose_cells(answers, scale)
  table = fv.cells_json(cells, amendments, dict(
      s, delta=delta, dim=fv.CELL_DIM,
      coordinate_clip_multiple=fv.CELL_MULTIPLE,
      gaussian_reference_noise_multiplier={
          f'{e:g}': n * math.sqrt(refs[e].debiased_error) for e in epsilons},
      dose_noise_multiplier={f'{e:g}': zs[e] for e in epsilons}))
  results_io.write_json(cells_path, table)
  return (f'{len(cells)} cells written to {cells_path}' +
          ('; amendments called for: ' + '; '.join(amendments)
           if amendments else ''))


def write_report(every) -> str:
  left = [fv.run_name(c, s) for c, s in every if not fv.finished(run_dir(c, s))]
  if left and not FLAGS.partial:
    raise ValueError(f'{len(left)} planned runs have not finished (e.g. '
                     f'{left[0]}): the pre-registered analysis waits for all '
                     'of them (--partial analyses the finished ones).')
  analysis = fv.analyse(os.path.join(FLAGS.output_dir, 'runs'))
  text = fv.report(analysis, len(every), not left)
  with open(os.path.join(FLAGS.output_dir, 'report.md'), 'w') as f:
    f.write(text)
  return text


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  runtime.exit_on_sigterm()
  with cli.user_errors_exit():
    cells, todo, every = plan()
    cal_path = os.path.join(FLAGS.output_dir, 'calibrations.json')
    calibrations = {}
    if os.path.exists(cal_path):
      with open(cal_path) as f:
        calibrations = json.load(f)
    config_path = os.path.join(FLAGS.output_dir, 'config.json')
    if os.path.exists(config_path):
      with open(config_path) as f:
        if json.load(f) != setting():
          raise ValueError(f'{FLAGS.output_dir} holds runs of another setting '
                           f'({config_path}); use another --output_dir.')
    if FLAGS.plan:
      show_plan(cells, todo, every, calibrations)
      return
    if FLAGS.report_only:
      print(write_report(every))
      return
    if FLAGS.choose_cells:
      os.nice(FLAGS.nice)
      print(choose_cells(calibrations, cal_path))
      return
    os.nice(FLAGS.nice)
    with results_io.exclusive(FLAGS.output_dir, 'FL validation set-up'):
      results_io.write_json(config_path, setting())
      zs = {e: calibration(e, calibrations, cal_path)
            for e in sorted({c.epsilon for c, _ in todo
                             if not isinstance(c, fv.PlannedCell)})}
    trained = 0
    for k, (cell, seed) in enumerate(todo):
      name, path = fv.run_name(cell, seed), run_dir(cell, seed)
      if FLAGS.max_runs and trained >= FLAGS.max_runs:
        print(f'--max_runs={FLAGS.max_runs} reached; a later start goes on.')
        break
      if fv.finished(path):
        continue
      fields = (fv.cell_fields(cell) if isinstance(cell, fv.PlannedCell)
                else fv.dose_fields(cell, zs[cell.epsilon]))
      with contextlib.ExitStack() as stack:
        try:   # several starts may share the folder: one trains each run
          stack.enter_context(results_io.exclusive(
              os.path.join(FLAGS.output_dir, 'locks', name), 'start on ' + name))
        except ValueError:
          print(f'  {name}: another start is training it; skipped', flush=True)
          continue
        if not fv.trained(path):
          print(f'[run {k + 1}/{len(todo)}] {name}', flush=True)
          try:
            seconds = train(cell, seed, zs)
          except subprocess.CalledProcessError as err:
            print(f'  run failed (exit {err.returncode}); a later start '
                  'resumes it', flush=True)
            continue
          trained += 1
          print(f'  {name}: {seconds:.0f} s', flush=True)
        fv.complete(path, fields)
    left = sum(not fv.finished(run_dir(c, s)) for c, s in every)
    print(f'{len(every) - left} of {len(every)} planned runs finished.')


def entry_point():
  """Runs `main` as `python -m experiments.fl_validation` does."""
  cli.run(main)


if __name__ == '__main__':
  entry_point()
