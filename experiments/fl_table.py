"""The equal-privacy FL table: every mechanism at whole-model ε ∈ {3, 10} and
4 / 8 / 16 bits, several seeds each, compared seed by seed with the Gaussian
and at equal bits (tff_quant.program.fl_table, docs/fl_table.md).

Each (mechanism, ε, bits) cell is calibrated once, before its first run
(`accounting.calibration_report`, or `peers.calibrate` for TFF's own
aggregators, in a child process with a time limit; a refusal, e.g. bits that
cannot carry the signal, becomes the cell's reason), then trained with
`experiments.fl_emnist` once per seed: seed s is one block for every cell
(--seed, and --noise_seed 1000 + s), the federated split stays the same
(--split_seed). The endpoint needs at least 5 evaluations in the last 10% of
rounds: --eval_every at most rounds/50 (the default 5 gives 7 at 300 rounds).
Runs go seed-major (every cell's first seed before any second), cells of at
most 8 bits before wider ones; each resumes where it stopped, and a second
start on the same folder is refused while one runs. TFF's own distributed
aggregators run packed like ours (`aggregators.packed_peers`). Federated Fashion-MNIST (real images, simulated Dirichlet(0.5) split).
The table's own process plans, calibrates (in children) and reports without
TensorFlow (d from the model's layer shapes, `models.param_count`); only the
runs, and the papers' ε of TFF's distributed peers, import it.

  python -m experiments.fl_table --output_dir=results/fl_table
  python -m experiments.fl_table --plan        # cells, runs, and what is done
  python -m experiments.fl_table --report_only # the report from finished runs
"""

import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

from tff_quant import mechanisms
from tff_quant.accounting import provenance
from tff_quant.accounting import setting
from tff_quant import models
from tff_quant.common import dims, validation
from tff_quant.program import cli, fl_table, isolated, quiet, results_io
from tff_quant.program import runtime
from tff_quant.training import config as config_lib

FLAGS = flags.FLAGS
DEFAULT_MECHANISMS = ('rqm', 'pbm', 'qmgeo', 'quantized_gaussian',
                      'randomized_projection', 'bq', 'skellam', 'ddgauss',
                      'tff_skellam', 'tff_dgauss', 'gaussian', 'none')
PEERS = ('gaussian', 'tff_skellam', 'tff_dgauss')
flags.DEFINE_string('output_dir', 'results/fl_table', 'Results folder.')
flags.DEFINE_list('mechanisms', list(DEFAULT_MECHANISMS), 'Mechanisms (registry '
                  'names, TFF peers gaussian/tff_skellam/tff_dgauss, none).')
flags.DEFINE_list('epsilons', ['3', '10'], 'Whole-model ε targets.')
flags.DEFINE_list('bits', ['4', '8', '16'], 'Bits per coordinate.')
flags.DEFINE_string('mechanism_bits', '', 'Bits of single mechanisms in '
                    'place of --bits, as name=bits entries (several widths '
                    'joined by +): e.g. ddgauss=16,bq=10,qmgeo=4+8.')
flags.DEFINE_list('peer_bits', ['16'], 'Bits of TFF\'s distributed aggregators '
                  '(tff_skellam, tff_dgauss; packed as our mechanisms are: '
                  'aggregators.packed_peers).')
flags.DEFINE_integer('seeds', 3, 'Seeds per cell (client sampling and noise).',
                     lower_bound=1)
flags.DEFINE_integer('rounds', 300, 'Rounds per run.', lower_bound=1)
flags.DEFINE_integer('clients_per_round', 100, 'Clients per round.', lower_bound=1)
flags.DEFINE_integer('total_clients', 3400, 'Population.', lower_bound=1)
flags.DEFINE_string('model', 'small_cnn', 'Keras model (tff_quant.models).')
flags.DEFINE_float('clip_norm', 1.0, 'ℓ2 clip of each update.')
flags.DEFINE_float('coordinate_clip_multiple', 3.0, 'c∞ = k·clip_norm/√d.')
flags.DEFINE_float('client_lr', 0.05, 'Client learning rate.')
flags.DEFINE_float('server_momentum', 0.0, 'Server SGD momentum (0: plain '
                   'server SGD, as before).')
flags.DEFINE_string('tuned', None, 'choice.json of experiments.fl_tune: per '
                    'ε, the client lr, server momentum, server lr and ℓ2 clip '
                    'chosen on the validation split, used for every '
                    'mechanism at that ε in place of --client_lr, '
                    '--server_momentum and --clip_norm (the noise-free cell '
                    'keeps those flags). Training uses the whole train set '
                    'and evaluation the test set, as without it.')
flags.DEFINE_integer('eval_every', 5, 'Evaluate every k rounds: the endpoint '
                     '(fl_table.PRESPECIFIED) needs 5 evaluations in the last '
                     '10% of rounds, so k <= rounds/50.', lower_bound=1)
flags.DEFINE_integer('split_seed', 0, 'Seed of the federated split (fixed).',
                     lower_bound=0)
flags.DEFINE_string('data_dir', None, 'Folder with the Fashion-MNIST IDX files.')
flags.DEFINE_float('max_calibration_seconds', 600, 'A cell whose calibration '
                   'runs longer is reported with that reason.')
flags.DEFINE_bool('plan', False, 'Print the cells and runs, and what is done.')
flags.DEFINE_bool('report_only', False, 'Write the report from finished runs.')
flags.DEFINE_bool('use_profile', False, 'Calibrate and account every cell, '
                  'the references and TFF\'s peers too, on the profile route '
                  'as well (PBM by its proved Gaussian domination, the '
                  'Gaussian by its exact profile; docs/privacy.md, "Gaussian '
                  'domination"); runs pass --use_profile. A folder holds one '
                  'choice.')

DATASET = 'fashion_mnist'
INPUT_SHAPE, NUM_CLASSES = (28, 28, 1), 10


def settings():
  """The table's fixed settings (config.json): a folder holds one setting.
  server_momentum and tuned appear only when set (earlier folders resume)."""
  out = dict(dataset=DATASET, rounds=FLAGS.rounds,
             clients_per_round=FLAGS.clients_per_round,
             total_clients=FLAGS.total_clients, model=FLAGS.model,
             clip_norm=FLAGS.clip_norm,
             coordinate_clip_multiple=FLAGS.coordinate_clip_multiple,
             client_lr=FLAGS.client_lr, split_seed=FLAGS.split_seed,
             delta=1 / FLAGS.total_clients, rotate=True)
  if FLAGS.server_momentum:
    out['server_momentum'] = FLAGS.server_momentum
  if FLAGS.use_profile:
    out['use_profile'] = True
  if FLAGS.tuned:
    out['tuned'] = tuned_settings()
  return out


TUNED_KEYS = ('client_lr', 'server_momentum', 'server_lr', 'clip_norm')


def tuned_settings():
  """{'ε': {client_lr, server_momentum, server_lr, clip_norm[,
  server_lr_schedule]}} of every --epsilons value, from --tuned (ValueError
  naming a missing ε, or a choice tuned at another number of rounds than
  --rounds: a schedule and the noise per round depend on it)."""
  with open(FLAGS.tuned) as f:
    choice = json.load(f)
  out = {}
  for eps in FLAGS.epsilons:
    key = f'{float(eps):g}'
    if key not in choice:
      raise ValueError(f'--tuned={FLAGS.tuned} holds no setting for ε = '
                       f'{key} (it has {sorted(choice)}).')
    tuned_rounds = choice[key].get('rounds', FLAGS.rounds)
    if tuned_rounds != FLAGS.rounds:
      raise ValueError(f'--tuned={FLAGS.tuned} was tuned at {tuned_rounds} '
                       f'rounds (ε = {key}); pass --rounds={tuned_rounds} '
                       f'(got --rounds={FLAGS.rounds}).')
    out[key] = {k: float(choice[key][k]) for k in TUNED_KEYS}
    schedule = validation.check_one_of(
        'server_lr_schedule', choice[key].get('server_lr_schedule', 'constant'),
        config_lib.SERVER_LR_SCHEDULES)
    if schedule != 'constant':   # absent when constant: earlier folders resume
      out[key]['server_lr_schedule'] = schedule
  return out


def training(s, eps):
  """The training of the cells at `eps` (None: the noise-free cell):
  client_lr, server_momentum, server_lr and clip_norm of settings `s`."""
  out = dict(client_lr=s['client_lr'],
             server_momentum=s.get('server_momentum', 0.0), server_lr=1.0,
             clip_norm=s['clip_norm'])
  if eps is not None and 'tuned' in s:
    out.update(s['tuned'][f'{eps:g}'])
  return out


def cells():
  """[(mechanism, ε or None, bits)] in table order."""
  epsilons = [validation.check_positive('--epsilons', float(e))
              for e in FLAGS.epsilons]
  bits = [validation.check_integer('--bits', int(b), 1, 24) for b in FLAGS.bits]
  peer_bits = [validation.check_integer('--peer_bits', int(b), 1, 32)
               for b in FLAGS.peer_bits]
  known = set(mechanisms.registry()) | set(PEERS) | {'none'}
  own = mechanism_bits(FLAGS.mechanism_bits, FLAGS.mechanisms)
  out = []
  for name in FLAGS.mechanisms:
    validation.check_one_of('--mechanisms', name, sorted(known))
    if name == 'none':
      out.append((name, None, fl_table.FLOAT_BITS))
      continue
    widths = {'gaussian': [fl_table.FLOAT_BITS], 'tff_skellam': peer_bits,
              'tff_dgauss': peer_bits, **own}.get(name, bits)
    for eps in epsilons:
      for b in widths:
        out.append((name, eps, b))
  return out


#: The reference cells: the Gaussian's floats and the noise-free baseline.
REFERENCES = ('gaussian', 'none')


def mechanism_bits(text, names):
  """{name: [bits]} from --mechanism_bits' text (ValueError naming the
  flag for a name not in `names`, a reference cell, or bits that are not
  integers in 1..24)."""
  def width(b):
    if not b.strip().isdigit():
      raise ValueError(f'--mechanism_bits must be name=bits entries with '
                       f'integer bits, got {text!r}.')
    return validation.check_integer('--mechanism_bits', int(b), 1, 24)

  def parse(name, value):
    validation.check_one_of('--mechanism_bits',
                            name, sorted(set(names) - set(REFERENCES)))
    return [width(b) for b in value.split('+')]
  return validation.parse_key_values('--mechanism_bits', text, parse)


def budgets(cells_):
  """The wire-bit budgets the report answers for: every quantized cell's
  width on the wire (`fl_table.Cell.budget_bits`)."""
  return sorted({c.budget_bits for c in cells_
                 if c.mechanism not in REFERENCES})


def wide(cell) -> bool:
  """A quantized cell over 8 bits (the Gaussian's floats and the noise-free
  baseline are references: they run with the narrow cells)."""
  return cell[2] > 8 and cell[0] not in REFERENCES


def cell_name(cell) -> str:
  name, eps, bits = cell
  return name if eps is None else f'{name}_eps{eps:g}_b{bits}'


def model_dim() -> int:
  """Coordinates the aggregator encodes: the model's, padded to 2^m (rotation);
  counted from its layer shapes (`models.param_count`: no TensorFlow)."""
  return dims.sent_dim(models.param_count(FLAGS.model, INPUT_SHAPE,
                                          NUM_CLASSES), rotate=True)


def calibrate(cell, dim, stored=None):
  """{'params': ...} or {'reason': ...} for one cell, with its seconds and
  the digest of the accountant that computed it (`accountant`): in a child
  process (fresh imports: the code on disk now) stopped after
  --max_calibration_seconds (then the reason). With `stored` (a calibration
  of ours from other accountant code), its mechanism is re-accounted first
  and kept where its ε still holds (`fl_table.epsilon_holds`); else the cell
  is calibrated afresh. A calibration stopped by the time limit, ended by
  its process or raising other than a refusal is `transient`: the cell has
  no runs in this start and is calibrated again at the next (a loaded
  machine is not a refusal)."""
  limit = FLAGS.max_calibration_seconds
  try:
    out = isolated.call_in_child(
        _calibrate_child,
        (cell, dim, dict(settings(), **training(settings(), cell[1])), stored),
        limit)
  except Exception as err:  # pylint: disable=broad-except
    return dict(reason=f'calibration raised {type(err).__name__}: {err}',
                transient=True)
  if out.ended == isolated.RETURNED:
    return out.value
  if out.ended == isolated.DIED:   # e.g. out of memory
    return dict(reason=f'calibration process ended with exit code '
                f'{out.exitcode} before answering', seconds=out.seconds,
                transient=True)
  return dict(reason=f'calibration did not finish in {limit:g} s (stopped)',
              seconds=out.seconds, transient=True)


def _calibrate_child(cell, dim, s, stored=None):
  out = _rechecked(cell, dim, s, stored) if stored else None
  return out or _calibrated(cell, dim, s)


def _rechecked(cell, dim, s, stored):
  """`stored` with this accountant's ε of its mechanism (as a run computes
  it: `accounting.training_guarantee` over the whole schedule), or None
  where that ε has left the target (then the cell is calibrated afresh)."""
  from tff_quant import accounting  # pylint: disable=g-import-not-at-top
  name, eps, _ = cell
  t0 = time.time()
  mech = mechanisms.get(name).for_coordinate_bound(
      coordinate_clip(s, dim), **stored['params'])
  g = accounting.training_guarantee(
      mech, s['rounds'], s['clients_per_round'], s['total_clients'],
      s['delta'], dim=dim, l2_clip=s['clip_norm'],
      use_profile=s.get('use_profile', False))
  print(f'  [recheck] {cell_name(cell)}: calibrated under accountant '
        f'{stored.get("accountant", "unrecorded")}, ε = {g.epsilon:.6g} under '
        f'{accounting.provenance.SOURCE_DIGEST}', flush=True)
  if not fl_table.epsilon_holds(g.epsilon, eps):
    return None
  return dict(stored, epsilon=g.epsilon, epsilon_attained=g.epsilon_attained,
              accountant=accounting.provenance.SOURCE_DIGEST,
              recheck_seconds=time.time() - t0)


def coordinate_clip(s, dim) -> float:
  """c∞ of the ℓ2 route: --coordinate_clip_multiple · clip / √d."""
  return setting.coordinate_clip(s['clip_norm'], dim,
                                 s['coordinate_clip_multiple'])


def _calibrated(cell, dim, s):
  """{'params': ...} or {'reason': ...} for one cell, with its seconds."""
  from tff_quant import accounting  # pylint: disable=g-import-not-at-top
  from tff_quant.aggregators import peers  # pylint: disable=g-import-not-at-top
  name, eps, bits = cell
  t0 = time.time()
  try:
    if name in PEERS:
      peer = peers.calibrate(name, eps, s['delta'], s['rounds'],
                             s['clients_per_round'], s['total_clients'],
                             dim, s['clip_norm'],
                             None if name == 'gaussian' else bits,
                             use_profile=s.get('use_profile', False))
      params = dict(noise_multiplier=peer.noise_multiplier)
      if name != 'gaussian':
        params['bits'] = bits
      out = dict(params=params, mechanism=repr(peer))
    else:
      report = accounting.calibration_report(
          name, eps, s['delta'], s['rounds'], s['clients_per_round'],
          s['total_clients'], dim, l2_clip=s['clip_norm'],
          coordinate_clip=coordinate_clip(s, dim), bits=bits,
          rtol=fl_table.EQUAL_EPSILON_RTOL,
          progress=lambda line: print(f'  {line}', flush=True),
          use_profile=s.get('use_profile', False))
      out = dict(params=report.tunables, mechanism=repr(report.mechanism),
                 epsilon=report.epsilon,
                 epsilon_attained=report.epsilon_attained,
                 ratio_to_gaussian=report.ratio_to_gaussian)
  except ValueError as err:   # refused: out of reach, or no signal carried
    out = dict(reason=str(err).splitlines()[0][:400])
  out['seconds'] = time.time() - t0
  out['accountant'] = accounting.provenance.SOURCE_DIGEST
  return out


def stale(cell, stored) -> bool:
  """Whether `stored`, a calibration of one of ours, came from accountant
  code other than the code on disk now (or from before digests were kept):
  its ε is then rechecked before the cell trains again (`calibrate`)."""
  return (stored is not None and 'params' in stored and cell[0] not in PEERS
          and stored.get('accountant') != provenance.on_disk())


def refresh(cell, dim, calibrations, cal_path) -> bool:
  """Rechecks the cell's stored calibration where it is `stale` (then
  writes `cal_path` and moves aside the runs of a mechanism it no longer
  serves: `supersede`); returns whether it did."""
  key, stored = cell_name(cell), calibrations.get(cell_name(cell))
  if not stale(cell, stored):
    return False
  calibrations[key] = calibrate(cell, dim, stored)
  results_io.write_json(cal_path, calibrations)
  announce(key, calibrations[key])
  supersede(cell, stored, calibrations[key])
  return True


def announce(key, got) -> None:
  print(f'[calibrate] {key}: '
        f'{got.get("mechanism") or "refused: " + got["reason"]} '
        f'({got["seconds"]:.0f} s)', flush=True)


def supersede(cell, old, new) -> None:
  """Moves the cell's finished runs aside (to `superseded/`, named with the
  accountant they were calibrated under) where its calibration's parameters
  changed: they ran a mechanism the cell no longer serves. Moved before
  the table lists its runs (`main`), they run again in the same start; moved
  later, at the next start."""
  if new.get('params') == old.get('params'):
    return
  folder = os.path.join(FLAGS.output_dir, 'superseded')
  for seed in range(FLAGS.seeds):
    path = run_dir(cell, seed)
    if os.path.isdir(path):
      os.makedirs(folder, exist_ok=True)
      target = os.path.join(folder, f'{os.path.basename(path)}_'
                            f'{old.get("accountant", "unrecorded")}')
      os.replace(path, target)
      print(f'  [superseded] {path} -> {target}', flush=True)


def run_dir(cell, seed) -> str:
  return os.path.join(FLAGS.output_dir, 'runs', f'{cell_name(cell)}_s{seed}')


def train(cell, seed, calibration) -> float:
  """One run through experiments.fl_emnist (resumes; its own process, so
  TFF's workers end with it); returns its wall seconds."""
  name, _, _ = cell
  s = settings()
  t = training(s, cell[1])
  params = ','.join(f'{k}={v}' for k, v in sorted(
      calibration.get('params', {}).items()))
  args = [sys.executable, '-m', 'experiments.fl_emnist',
          f'--dataset={DATASET}', f'--mechanism={name}',
          f'--mechanism_params={params}', f'--rounds={s["rounds"]}',
          f'--clients_per_round={s["clients_per_round"]}',
          f'--total_clients={s["total_clients"]}', f'--model={s["model"]}',
          f'--clip_norm={t["clip_norm"]}', f'--client_lr={t["client_lr"]}',
          f'--coordinate_clip_multiple={s["coordinate_clip_multiple"]}',
          '--rotate', f'--seed={seed}', f'--split_seed={s["split_seed"]}',
          f'--noise_seed={1000 + seed}', f'--eval_every={FLAGS.eval_every}',
          f'--root_output_dir={os.path.dirname(run_dir(cell, seed))}',
          f'--experiment_name={os.path.basename(run_dir(cell, seed))}']
  if FLAGS.data_dir:
    args.append(f'--data_dir={FLAGS.data_dir}')
  if t['server_momentum']:
    args.append(f'--server_momentum={t["server_momentum"]}')
  if t['server_lr'] != 1.0:
    args.append(f'--server_lr={t["server_lr"]}')
  if t.get('server_lr_schedule', 'constant') != 'constant':
    args.append(f'--server_lr_schedule={t["server_lr_schedule"]}')
  if s.get('use_profile'):
    args.append('--use_profile')
  return isolated.run_command(args)


def collect(all_cells, calibrations):
  """(fl_table.Cell per cell from the finished runs, the endpoint they hold):
  the endpoint is the first of fl_table.ENDPOINTS every finished run's
  evaluations (metrics.csv) can give."""
  finished = {}
  for cell in all_cells:
    for seed in range(FLAGS.seeds):
      path = os.path.join(run_dir(cell, seed), 'summary.json')
      if os.path.exists(path):
        with open(path) as f:
          summary = json.load(f)
        finished[cell, seed] = (fl_table.read_run(run_dir(cell, seed)),
                                summary['epsilon'])
  endpoint = fl_table.choose_endpoint(
      [run.evaluations for run, _ in finished.values()], FLAGS.rounds)
  out = []
  for cell in all_cells:
    name, eps, bits = cell
    cal = calibrations.get(cell_name(cell), {})
    # TFF's peers record no secure-sum bits: their field is 2^bits; the
    # references send floats. Ours record what their secure sum carried.
    c = fl_table.Cell(name, eps, bits, reason=cal.get('reason', ''),
                      params=json.dumps(cal.get('params', {}), sort_keys=True),
                      wire_bits=(bits if name in PEERS or name in REFERENCES
                                 else None))
    for seed in range(FLAGS.seeds):
      if (cell, seed) in finished:
        run, epsilon = finished[cell, seed]
        c.add_run(seed, run, endpoint, FLAGS.rounds, epsilon)
    if name in PEERS and 'params' in cal and c.seeds:
      c.papers_epsilon = papers_epsilon(cell, cal['params'])
    out.append(c)
  return out, endpoint


def papers_epsilon(cell, params) -> float:
  """A TFF peer cell's ε in the papers' convention (add/remove, Poisson at
  n/N; `accounting.conventions`) for the noise it ran with: beside our
  guarantee, for comparison with published results only."""
  from tff_quant.accounting import conventions  # pylint: disable=g-import-not-at-top
  from tff_quant.aggregators import peers  # pylint: disable=g-import-not-at-top
  name, eps, bits = cell
  if name != 'gaussian':   # TFF's own functions scale its noise (TF eager)
    quiet.import_tensorflow()
  s = settings()
  peer = peers.Peer(name, params['noise_multiplier'],
                    training(s, eps)['clip_norm'], s['clients_per_round'],
                    model_dim(), None if name == 'gaussian' else bits)
  return conventions.papers_epsilon_peer(peer, s['total_clients'],
                                         s['rounds'], s['delta'])[0]


def tuned_line(s) -> str:
  """The training the header states beyond the clip and client lr."""
  parts = []
  if 'tuned' in s:
    parts.append('Training tuned per ε on a validation split (--tuned, '
                 'experiments.fl_tune), then trained on all train examples: ' +
                 '; '.join(f'ε = {e}: client lr {t["client_lr"]:g}, server '
                           f'momentum {t["server_momentum"]:g}, server lr '
                           f'{t["server_lr"]:g} '
                           f'({t.get("server_lr_schedule", "constant")}), '
                           f'ℓ2 clip {t["clip_norm"]:g}'
                           for e, t in s['tuned'].items()) +
                 ' (the noise-free cell: the flags above).')
  elif s.get('server_momentum'):
    parts.append(f'Server momentum {s["server_momentum"]:g}.')
  return ''.join(' ' + p for p in parts)


def report(all_cells, calibrations, seconds):
  cells_, endpoint = collect(all_cells, calibrations)
  s = settings()
  done = sum(c.seeds for c in cells_)
  header = (f'# Equal-privacy FL table\n\nData: Fashion-MNIST (real images, '
            f'/usr/share/datasets/fashion-mnist), SIMULATED federated split: '
            f'{s["total_clients"]} clients, Dirichlet(0.5) over labels, split '
            f'seed {s["split_seed"]}. {s["clients_per_round"]} clients per '
            f'round, {s["rounds"]} rounds, model {s["model"]}, ℓ2 clip '
            f'{s["clip_norm"]}, c∞ = {s["coordinate_clip_multiple"]:g}/√d '
            f'after a random rotation, whole-model δ = 1/{s["total_clients"]} '
            f'(proved for any inputs of the others). Seed s is one block: '
            f'every cell\'s run s has --seed s and --noise_seed {1000}+s '
            '(TFF\'s tff_dgauss and tff_skellam draw their noise unseeded '
            'inside TFF: their block shares the model and the cohorts only; '
            f'what they fix: docs/fl_table.md). Bits: level bits (one '
            'client\'s level index) and wire bits (the secure sum\'s field '
            f'per coordinate, what a client uploads; docs/bits.md). {done} runs, '
            f'{seconds / 3600:.1f} h of training (sum of run wall times on '
            'this 2-core machine). How to read it: docs/fl_table.md.' +
            tuned_line(s))
  provenance = (
      f'From {done} runs, {seconds / 3600:.1f} h of training (the sum of the '
      'runs\' wall times on this 2-core machine). The paired differences with '
      'their 95% intervals, each seed a dot, the ±'
      f'{fl_table.MARGIN:g} margin shaded: '
      '![paired differences to the Gaussian](differences.png)')
  text = fl_table.write_report(cells_, FLAGS.output_dir,
                               budgets(cells_), header, endpoint,
                               rounds=FLAGS.rounds, provenance=provenance)
  setting = header.splitlines()[2][:160]
  fl_table.plot(cells_, os.path.join(FLAGS.output_dir, 'table.png'), setting)
  fl_table.plot_differences(
      fl_table.analyse(cells_),
      os.path.join(FLAGS.output_dir, 'differences.png'),
      f'Paired differences in the endpoint ({endpoint.name}), 95% intervals; '
      f'verdicts by TOST (±{fl_table.MARGIN:g}) and Holm per family')
  return text


def check_flags() -> None:
  """Refuses bad flags (an unknown --model too) and a bad --tuned file
  before anything is written (`cli.run`'s check; main checks again).

  Raises:
    ValueError, OSError: the flag, its allowed values, and what to change.
  """
  validation.check_integer('--seeds', FLAGS.seeds, 1)
  validation.check_positive('--max_calibration_seconds',
                            FLAGS.max_calibration_seconds)
  cells()
  model_dim()   # an unknown --model
  check_folder()


def check_folder() -> None:
  """Refuses an --output_dir that holds a table of other settings (one
  folder, one setting: config.json).

  Raises:
    ValueError: naming the folder and its settings.
  """
  config_path = os.path.join(FLAGS.output_dir, 'config.json')
  if os.path.exists(config_path):
    with open(config_path) as f:
      old = json.load(f)
    if old != settings():
      raise ValueError(f'{FLAGS.output_dir} holds a table with other '
                       f'settings ({old}); use another --output_dir.')
  else:
    settings()   # a bad --tuned file is refused here too


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  # SIGTERM -> SystemExit, so a calibration child or a run is stopped with
  # the table (the default action would leave them running).
  runtime.exit_on_sigterm()
  with cli.user_errors_exit():
    check_flags()
    all_cells = cells()
    with results_io.exclusive(FLAGS.output_dir, 'FL table'):
      check_folder()
      results_io.write_json(os.path.join(FLAGS.output_dir, 'config.json'),
                            settings())
      cal_path = os.path.join(FLAGS.output_dir, 'calibrations.json')
      calibrations = {}
      if os.path.exists(cal_path):
        with open(cal_path) as f:
          calibrations = json.load(f)
      times_path = os.path.join(FLAGS.output_dir, 'run_seconds.json')
      times = {}
      if os.path.exists(times_path):
        with open(times_path) as f:
          times = json.load(f)
      # Cells of at most 8 bits first, seed-major (every cell's first seed
      # before any second); then those over 8 bits (their calibrations cost
      # the most).
      runs = sorted(((cell, seed) for seed in range(FLAGS.seeds)
                     for cell in all_cells),
                    key=lambda r: (wide(r[0]), r[1]))
      if FLAGS.plan or FLAGS.report_only:
        done = sum(os.path.exists(os.path.join(run_dir(c, s), 'summary.json'))
                   for c, s in runs)
        print(f'{len(all_cells)} cells, {len(runs)} runs ({done} finished); '
              f'{len(calibrations)} cells calibrated.')
        if FLAGS.report_only:
          print(report(all_cells, calibrations, sum(times.values())))
        return
      dim = model_dim()
      for cell in all_cells:   # calibrations from other code, rechecked first
        refresh(cell, dim, calibrations, cal_path)
      todo = [(c, s) for c, s in runs if not os.path.exists(
          os.path.join(run_dir(c, s), 'summary.json'))]
      tried = set()
      for k, (cell, seed) in enumerate(todo):
        key = cell_name(cell)
        # Before every run, as the code on disk may have changed since.
        if (not refresh(cell, dim, calibrations, cal_path) and
            cell[0] != 'none' and key not in tried and (
                key not in calibrations or   # its first run
                calibrations[key].get('transient'))):   # once a start
          tried.add(key)
          calibrations[key] = calibrate(cell, dim)
          results_io.write_json(cal_path, calibrations)
          announce(key, calibrations[key])
        if 'reason' in calibrations.get(key, {}):
          continue
        left = [(c, s) for c, s in todo[k:]
                if 'reason' not in calibrations.get(cell_name(c), {})]
        hours = fl_table.eta_hours(
            [c[0] for c, _ in left],
            [(c[0], times[f'{cell_name(c)}_s{s}']) for c, s in runs
             if f'{cell_name(c)}_s{s}' in times])
        eta = f'; ETA ~{hours:.1f} h' if hours is not None else ''
        print(f'[run {k + 1}/{len(todo)}] {key} seed {seed}{eta}', flush=True)
        try:
          times[f'{key}_s{seed}'] = train(cell, seed, calibrations.get(key, {}))
        except subprocess.CalledProcessError as err:   # retried next start
          print(f'  run failed (exit {err.returncode}); the table goes on and '
                'a later start resumes it', flush=True)
          continue
        results_io.write_json(times_path, times)
        report(all_cells, calibrations, sum(times.values()))
      print(report(all_cells, calibrations, sum(times.values())))


def entry_point():
  """The console script `tff-quant-fl-table` (setup.py): runs `main` as
  `python -m experiments.fl_table` does, from any folder."""
  cli.run(main, check=check_flags, tensorflow=False)


if __name__ == '__main__':
  entry_point()
