"""The anchor's scale: the distributed discrete Gaussian paper's EMNIST setting
(Kairouz, Liu, Steinke 2021, docs/references.md), prepared for a lent
accelerator and measured here (docs/fl_validation.md, "The anchor's scale").

The setting: `emnist_cnn` (1.2M parameters, 2^21 coordinates after the
rotation's padding), 100 of 3,400 clients per round, 1,500 rounds, ε = 10,
δ = 1/3,400. The cells: the central Gaussian (calibrated by
`aggregators.peers.calibrate`), TFF's `tff_dgauss` at 12 and 16 wire bits,
and PBM and RQM at their fewest wire bits within 1.1× of the Gaussian (the
proved ×G of `which_mechanism` at this setting, scanned upward as the FL
validation's cells are). The data: EMNIST from TFF's cache file
`emnist_all.sqlite` where it exists, else Fashion-MNIST (real images, a
simulated split), named in every output.

  python -m experiments.anchor_scale --choose          # cells.json (calibrations)
  python -m experiments.anchor_scale --plan            # runs and their commands
  python -m experiments.anchor_scale --measure_rounds=3   # seconds per round here
  python -m experiments.anchor_scale --max_seconds=530    # train; rerun to resume

Every run is `experiments.fl_emnist` in <output_dir>/runs/<cell>_s<seed>/;
with --max_seconds each start stops (SIGTERM: the run checkpoints and exits)
before that many seconds, so one start fits an accelerator's per-command
limit, and the next start resumes where it stopped. The training's learning
rates and clip are flags (defaults: the library's, not tuned at this scale).
"""

import json
import math
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

from tff_quant import data as data_lib
from tff_quant import models
from tff_quant.common import dims
from tff_quant.program import cli, fl_validation as fv, isolated, quiet
from tff_quant.program import results_io, runtime

FLAGS = flags.FLAGS
flags.DEFINE_string('output_dir', 'results/anchor_scale', 'Results folder.')
flags.DEFINE_bool('choose', False, 'Calibrate the cells and write cells.json '
                  '(resumable: scan.json; refused once cells.json exists).')
flags.DEFINE_bool('plan', False, 'Print the cells and each run\'s command; '
                  'train nothing.')
flags.DEFINE_integer('measure_rounds', 0, 'Train the Gaussian cell (calibrated '
                     'here; no cells.json needed) this many rounds in '
                     '<output_dir>/measure/ and print the seconds per round '
                     'and the projected hours of the plan.',
                     lower_bound=0)
flags.DEFINE_float('max_seconds', 0, 'Stop each start of a run after this '
                   'many seconds (0: no limit): SIGTERM, and the run has up to '
                   '60 s to checkpoint and end; a later start resumes.',
                   lower_bound=0)
flags.DEFINE_list('seeds', ['200', '201', '202'], 'Block seeds (noise seed '
                  f'{fv.NOISE_SEED_OFFSET} + seed).')
flags.DEFINE_integer('rounds', 1500, 'Rounds per run.', lower_bound=1)
flags.DEFINE_integer('clients_per_round', 100, 'Clients per round.',
                     lower_bound=1)
flags.DEFINE_integer('total_clients', 3400, 'Population.', lower_bound=1)
flags.DEFINE_float('epsilon', 10.0, 'Target ε of every cell.', lower_bound=0)
flags.DEFINE_float('clip_norm', 0.03, 'ℓ2 clip of each client update.',
                   lower_bound=0)
flags.DEFINE_float('client_lr', 0.05, 'Client SGD learning rate.', lower_bound=0)
flags.DEFINE_float('server_lr', 1.0, 'Server SGD learning rate.', lower_bound=0)
flags.DEFINE_integer('eval_every', 50, 'Evaluate every k rounds.', lower_bound=1)
flags.DEFINE_string('data_dir', None, 'Folder with the Fashion-MNIST IDX files '
                    '(where no EMNIST cache exists).')
flags.DEFINE_string('emnist_cache_dir', None, 'Folder with emnist_all.sqlite.')

MODEL = 'emnist_cnn'
#: TFF's distributed discrete Gaussian at these wire bits (the paper's).
PEER_BITS = (12, 16)
#: PBM and RQM at their fewest wire bits within this ×G (the frontier's).
WITHIN = fv.HI_RATIO
MECHANISMS = ('pbm', 'rqm')


def dataset() -> str:
  """'emnist' where TFF's cache file exists, else 'fashion_mnist'."""
  return ('emnist' if os.path.exists(
      data_lib.emnist_cache_path(FLAGS.emnist_cache_dir)) else 'fashion_mnist')


def setting() -> dict:
  """The run's setting and training, in `fl_validation`'s keys."""
  return dict(dataset=dataset(), model=MODEL, rounds=FLAGS.rounds,
              clients_per_round=FLAGS.clients_per_round,
              total_clients=FLAGS.total_clients, delta=1 / FLAGS.total_clients,
              epsilon=FLAGS.epsilon, coordinate_clip_multiple=fv.CELL_MULTIPLE,
              rotate=True, split_seed=0, eval_every=FLAGS.eval_every,
              training=dict(clip_norm=FLAGS.clip_norm,
                            client_lr=FLAGS.client_lr,
                            server_lr=FLAGS.server_lr, server_momentum=0.0,
                            server_lr_schedule='constant'))


def sent_dim(data: str) -> int:
  """The coordinates each client sends: the model's, padded by the rotation
  (counted from its layer shapes, `models.param_count`: no TensorFlow)."""
  return dims.sent_dim(models.param_count(MODEL, *data_lib.SHAPES[data]),
                       rotate=True)


def choose(path: str) -> str:
  """cells.json: the Gaussian's noise multiplier, tff_dgauss at PEER_BITS,
  PBM and RQM at their fewest wire bits with proved ×G <= WITHIN."""
  # pylint: disable=g-import-not-at-top
  from tff_quant.program import frontier, which_mechanism as wm
  if os.path.exists(path):
    raise ValueError(f'{path} exists: the cells are chosen once.')
  quiet.import_tensorflow()   # tff_dgauss's scale is TFF's own (TF eager)
  s = setting()
  d = sent_dim(s['dataset'])
  n, total, rounds, eps = (s['clients_per_round'], s['total_clients'],
                           s['rounds'], s['epsilon'])
  t0 = time.time()
  z = gaussian_multiplier(s, d)
  ref = frontier.gaussian_reference(eps, s['delta'], rounds, n, total, d,
                                    wm.DEFAULT_RTOL)
  print(f'[choose] Gaussian: noise multiplier {z:.6g} ({time.time() - t0:.0f} s)',
        flush=True)
  scan_path = os.path.join(FLAGS.output_dir, 'scan.json')
  store = {}
  if os.path.exists(scan_path):
    with open(scan_path) as f:
      store = json.load(f)
  reuse = {}

  def answer(mech, e, bits):
    end = wm.compute_end(
        mech, wm.Setting(e, s['delta'], d, n, total, rounds, bits),
        (fv.CELL_MULTIPLE,), wm.DEFAULT_RTOL, 'proved', ref.debiased_error,
        reuse=reuse.setdefault(mech, {}))
    return fv.BudgetAnswer(end.error / ref.debiased_error, end.level_bits,
                           end.wire_bits, end.params,
                           wm.kind_of(mech) == wm.PEER, end.reason)

  save = lambda st: results_io.write_json(scan_path, st)
  progress = lambda line: print(line, flush=True)
  found = fv.scan_budgets(answer, store, save, MECHANISMS, [eps],
                          progress=progress)
  found.update(fv.scan_budgets(answer, store, save, ['tff_dgauss'], [eps],
                               budgets=PEER_BITS, progress=progress))
  scale = (n * math.sqrt(ref.debiased_error) / z)**2
  cells = []
  for mech in MECHANISMS:
    ratios = {w: a.ratio for w, a in found[(mech, eps)].items()}
    fit = [w for w, r in ratios.items() if r <= WITHIN]
    if fit:
      cells.append(fv.MechanismCell(mech, eps, min(fit), 'w_hi',
                                    found[(mech, eps)][min(fit)],
                                    found[(mech, eps)][min(fit)].ratio * scale))
  for w in PEER_BITS:
    a = found[('tff_dgauss', eps)][w]
    cells.append(fv.MechanismCell('tff_dgauss', eps, w, 'fixed', a,
                                  a.ratio * scale))
  table = fv.cells_json(cells, [], dict(s, dim=d, gaussian_noise_multiplier=z))
  results_io.write_json(path, table)
  return f'{len(cells)} mechanism cells and the Gaussian written to {path}'


def planned():
  """[(cell, seed)]: the Gaussian ('gaussian', z) and cells.json's, seed-major."""
  path = os.path.join(FLAGS.output_dir, 'cells.json')
  if not os.path.exists(path):
    raise ValueError(f'{path} does not exist: run --choose first.')
  with open(path) as f:
    table = json.load(f)
  z = table['setting']['gaussian_noise_multiplier']
  cells = [('gaussian', z)] + fv.planned_cells(table)
  seeds = cli.numbers('seeds', FLAGS.seeds, 0, integer=True)
  return [(c, s) for s in seeds for c in cells], table['setting']


def name_of(cell, seed) -> str:
  base = f'gaussian_eps{FLAGS.epsilon:g}' if isinstance(cell, tuple) else cell.name
  return f'{base}_s{seed}'


def args_of(cell, seed, s, run_dir):
  """fl_emnist's flags for one run."""
  training = s['training']
  if isinstance(cell, tuple):
    args = fv.fl_emnist_args(s, training, cell[1], seed, run_dir,
                             FLAGS.data_dir)
  else:
    args = fv.cell_args(s, training, cell, seed, run_dir, FLAGS.data_dir)
  if FLAGS.emnist_cache_dir:
    args.append(f'--emnist_cache_dir={FLAGS.emnist_cache_dir}')
  return args


def gaussian_multiplier(s, d) -> float:
  """The central Gaussian's noise multiplier at the setting's ε."""
  from tff_quant.aggregators import peers  # pylint: disable=g-import-not-at-top
  return peers.calibrate('gaussian', s['epsilon'], s['delta'], s['rounds'],
                         s['clients_per_round'], s['total_clients'], d,
                         s['training']['clip_norm']).noise_multiplier


def measure() -> str:
  """Seconds per round of the Gaussian cell here (calibrated, seed 200's
  first run), and the plan's projected hours; written to measured_cost.json."""
  s = setting()
  seeds = cli.numbers('seeds', FLAGS.seeds, 0, integer=True)
  cell = ('gaussian', gaussian_multiplier(s, sent_dim(s['dataset'])))
  out = os.path.join(FLAGS.output_dir, 'measure', name_of(cell, seeds[0]))
  args = args_of(cell, seeds[0], dict(s, rounds=FLAGS.measure_rounds,
                                      eval_every=FLAGS.measure_rounds), out)
  t0 = time.time()
  isolated.run_command([sys.executable, '-m', 'experiments.fl_emnist',
                        *args, '--fresh'])
  wall = time.time() - t0
  with open(os.path.join(out, 'metrics.csv')) as f:
    rows = [line.split(',') for line in f.read().splitlines()]
  col = rows[0].index('seconds')
  per_round = [float(r[col]) for r in rows[1:]]
  steady = per_round[1:] or per_round   # the first round traces and compiles
  mean = sum(steady) / len(steady)
  runs = (1 + len(MECHANISMS) + len(PEER_BITS)) * len(seeds)
  hours = runs * s['rounds'] * mean / 3600
  record = dict(dataset=s['dataset'], model=MODEL,
                clients_per_round=s['clients_per_round'],
                rounds_measured=len(per_round), seconds_per_round=per_round,
                steady_mean=mean, wall_seconds=wall, runs=runs,
                rounds=s['rounds'], projected_hours=hours,
                cpus=os.cpu_count(), note='the Gaussian cell; a registry '
                'mechanism adds its encode and secure-sum simulation')
  results_io.write_json(os.path.join(FLAGS.output_dir, 'measured_cost.json'),
                        record)
  return (f'{s["dataset"]}: {mean:.2f} s per round after the first '
          f'({per_round[0]:.1f} s), {wall:.0f} s in all for '
          f'{len(per_round)} rounds on {os.cpu_count()} CPUs; the plan\'s '
          f'{runs} runs of {s["rounds"]} rounds: ~{hours:.0f} hours here')


def train(runs, s) -> str:
  done = 0
  for cell, seed in runs:
    name = name_of(cell, seed)
    run_dir = os.path.join(FLAGS.output_dir, 'runs', name)
    if fv.trained(run_dir):
      done += 1
      continue
    command = [sys.executable, '-m', 'experiments.fl_emnist',
               *args_of(cell, seed, s, run_dir)]
    print(f'[run] {name}', flush=True)
    try:
      isolated.run_command(command, timeout_s=FLAGS.max_seconds or None)
    except subprocess.TimeoutExpired:
      return (f'{name} stopped after --max_seconds={FLAGS.max_seconds:g} '
              f'(checkpointed); {done} of {len(runs)} runs finished: start '
              'again to resume.')
    done += 1
  return f'{done} of {len(runs)} runs finished.'


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  runtime.exit_on_sigterm()
  with cli.user_errors_exit():
    if FLAGS.choose:
      print(choose(os.path.join(FLAGS.output_dir, 'cells.json')))
      return
    if FLAGS.measure_rounds:
      print(measure())
      return
    runs, s = planned()
    if FLAGS.plan:
      for cell, seed in runs:
        run_dir = os.path.join(FLAGS.output_dir, 'runs', name_of(cell, seed))
        state = 'finished' if fv.trained(run_dir) else 'to do'
        print(f'[{state}] python -m experiments.fl_emnist ' +
              ' '.join(args_of(cell, seed, s, run_dir)))
      return
    print(train(runs, s))


def check_flags() -> None:
  """Refuses bad seeds before anything starts (`cli.run`'s check). This
  process builds no Keras model (`sent_dim` counts the layers; the runs are
  processes of their own), so TensorFlow is imported only where TFF's own
  functions are called (`choose`)."""
  cli.numbers('seeds', FLAGS.seeds, 0, integer=True)


def entry_point():
  """Runs `main` as `python -m experiments.anchor_scale` does."""
  cli.run(main, check=check_flags, tensorflow=False)


if __name__ == '__main__':
  entry_point()
