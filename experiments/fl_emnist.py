"""Federated training with any registered mechanism (RQM, PBM, BQ, ...) or noise-free.

The RQM paper's main experiment (Sec. 6.2, App. C): FedAvg on EMNIST (3,400
writers, 40 per round, CNN, m = 16, clip 0.03, PBM θ = .25, RQM (Δ, q) = (c, .42)).
--dataset=auto (default) uses real EMNIST when TFF's emnist_all.sqlite is in the
cache, else federated Fashion-MNIST (simulated split); every output says which.
A killed run started again with the same command resumes from its checkpoint.
Rounds run packed by default: K clients per TFF client slot, trained as one
vectorized computation, K chosen from the clients per round and the CPU cores
(the run prints it; --clients_per_slot overrides, 1 runs one client per slot).

  python -m experiments.fl_emnist --mechanism=rqm --rounds=200 \
      --mechanism_params=q=0.42,delta_ratio=1 \
      --root_output_dir=results/fl --experiment_name=rqm
On several machines: start `worker_binary --port=N` on each (path:
tff_quant.program.runtime.worker_binary_path()) and add --workers=host1:N,host2:N.
"""

import dataclasses
import functools
import os
import sys

# TFF's DistributedDpSumFactory inside FedAvg, one client per slot, nests
# deeper than the upb protobuf parser accepts (DecodeError): an unpacked tff_*
# peer runs on the pure-Python protobuf (set before anything imports protobuf;
# the first round then takes minutes). Packed (the default), it runs on upb.
if (any(a.startswith(('--mechanism=tff_', '-mechanism=tff_')) for a in sys.argv)
    and any(a in ('--clients_per_slot=1', '-clients_per_slot=1')
            for a in sys.argv)):
  os.environ.setdefault('PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION', 'python')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging

from tff_quant import data as data_lib
from tff_quant import mechanisms
from tff_quant import models
from tff_quant.aggregators import peers
from tff_quant.common import validation
from tff_quant.training import config as config_lib
from tff_quant.training import privacy_plan
from tff_quant.program import cli
from tff_quant.program import network
from tff_quant.program import quiet
from tff_quant.program import runtime

_D = config_lib.TrainingConfig()
FLAGS = flags.FLAGS
flags.DEFINE_string('mechanism', _D.mechanism, 'Aggregation mechanism: a name in '
                    'tff_quant.mechanisms.registry() (' +
                    ', '.join(mechanisms.registry()) +
                    f'), {config_lib.NO_PRIVACY!r}, or '
                    'one of TFF\'s own DP aggregators run through the same loop '
                    'and accountant: gaussian (DifferentiallyPrivateFactory.'
                    'gaussian_fixed, central), tff_skellam, tff_dgauss '
                    '(DistributedDpSumFactory; --mechanism_params=bits=16).')
flags.DEFINE_string('mechanism_params', '', 'The mechanism\'s parameters as '
                    'key=value,... (e.g. q=0.42,num_levels=16); omitted ones take '
                    'their defaults. See each class\'s TUNABLES.')
flags.DEFINE_float('clip_norm', _D.clip_norm, 'l2 clip of each client update; '
                   'c_inf = k * clip_norm / sqrt(d), k = --coordinate_clip_multiple.')
flags.DEFINE_float('coordinate_clip_multiple', _D.coordinate_clip_multiple,
                   'k > 0: per-coordinate bound c_inf = k * clip_norm / sqrt(d) '
                   '(k > 1 with --rotate; accounted by the l2 route).')
flags.DEFINE_float('target_epsilon', None, 'Calibrate the mechanism\'s free '
                   'parameters at start so that the whole model update meets '
                   '(target_epsilon, delta) over all --rounds. Default: '
                   f'{config_lib.DEFAULT_TARGET_EPSILON:g}, unless '
                   '--mechanism_params (or '
                   'an alias flag) sets a parameter calibration would choose '
                   '(then they run as given and the run prints their ε).')
# Aliases kept from before the registry: each sets one entry of --mechanism_params.
ALIASES = {
    'num_levels': (None, 'num_levels', 'Levels m (RQM, PBM, QMGeo, QG).'),
    'rqm_delta_ratio': ('rqm', 'delta_ratio', 'RQM Δ / c_inf.'),
    'rqm_q': ('rqm', 'q', 'RQM level keep probability q.'),
    'pbm_theta': ('pbm', 'theta', 'PBM θ in (0, 1/2].'),
    'bq_s': ('bq', 's', 'BQ quantization level s.'),
    'bq_m': ('bq', 'm', 'BQ binomial noise trials m.'),
    'qmgeo_p': ('qmgeo', 'p', 'QMGeo geometric parameter p.'),
    'qmgeo_full_support': ('qmgeo', 'full_support',
                           'QMGeo sound variant (as written, QMGeo has ε = inf).'),
    'qg_noise_multiplier': ('quantized_gaussian', 'noise_multiplier',
                            'Quantized Gaussian σ / Cq.'),
}

def _define_alias(flag, owner, param, help_text):
  tunable = mechanisms.get(owner or 'rqm').tunable(param)
  help_text = f'{help_text} Alias of --mechanism_params={param}=...'
  if tunable.kind is int:   # the tunable's range, checked as the flag is read
    flags.DEFINE_integer(flag, None, help_text, lower_bound=tunable.low,
                         upper_bound=tunable.high)
  else:   # a float's open ends are checked by the mechanism (one line, exit 2)
    {bool: flags.DEFINE_bool, float: flags.DEFINE_float}[tunable.kind](
        flag, None, help_text)


for _flag, (_owner, _param, _help) in ALIASES.items():
  _define_alias(_flag, _owner, _param, _help)
flags.DEFINE_bool('rotate', _D.rotate, 'Randomized Hadamard rotation before clipping.')
flags.DEFINE_integer('rounds', _D.rounds, 'Training rounds.', lower_bound=1)
flags.DEFINE_integer('clients_per_round', _D.clients_per_round, 'Clients per round.',
                     lower_bound=1)
flags.DEFINE_integer('total_clients', _D.total_clients, 'Population sampled from.',
                     lower_bound=1)
flags.DEFINE_float('client_lr', _D.client_lr, 'Client SGD learning rate.')
flags.DEFINE_float('server_lr', _D.server_lr, 'Server SGD learning rate.')
flags.DEFINE_float('server_momentum', _D.server_momentum, 'Server SGD '
                   'heavy-ball momentum in [0, 1) (tff.learning.optimizers.'
                   'build_sgdm); 0: plain server SGD.')
flags.DEFINE_enum('server_lr_schedule', _D.server_lr_schedule,
                  list(config_lib.SERVER_LR_SCHEDULES), 'Server learning-rate '
                  'schedule: constant, or cosine (server_lr·(1 + cos(π·t/'
                  'rounds))/2 at round t from 0).')
flags.DEFINE_float('validation_fraction', _D.validation_fraction, 'In [0, 1): '
                   'hold out this fraction of each simulated client\'s '
                   'examples (seeded by --split_seed) as a validation split; '
                   'training uses the rest and evaluation the validation '
                   'split, never the test set. 0: no split, evaluate on test.')
flags.DEFINE_integer('batch_size', _D.batch_size, 'Client batch size.', lower_bound=1)
flags.DEFINE_integer('local_epochs', _D.local_epochs, 'Client epochs per round.',
                     lower_bound=1)
flags.DEFINE_enum('model', _D.model, models.MODELS, 'Keras model.')
flags.DEFINE_integer('seed', _D.seed, 'Fixes the initial model, the client '
                     'sampling and the data order (and the data split, unless '
                     '--split_seed): seed s is the same block for every '
                     'mechanism.', lower_bound=0)
flags.DEFINE_integer('split_seed', None, 'Seed of the simulated federated split '
                     '(default: --seed); fixed across seeds to vary only client '
                     'sampling and noise.', lower_bound=0)
flags.DEFINE_integer('noise_seed', None, 'Reproducible noise of every registry '
                     'mechanism and of the packed central Gaussian (experiments '
                     'only: who knows it can predict the noise); TFF\'s own '
                     'aggregators are not seeded (the run says so). Default: '
                     'client-side unpredictable seeds.', lower_bound=0)
flags.DEFINE_float('delta', None, 'Target δ (default 1 / total_clients).')
flags.DEFINE_integer('eval_every', _D.eval_every, 'Evaluate every k rounds.',
                     lower_bound=1)
flags.DEFINE_enum('dataset', 'auto', ('auto',) + data_lib.DATASETS,
                  'auto: emnist if emnist_all.sqlite is cached, else fashion_mnist.')
flags.DEFINE_string('data_dir', None, 'Folder with the Fashion-MNIST IDX files.')
flags.DEFINE_string('emnist_cache_dir', None, 'Folder with emnist_all.sqlite '
                    '(default ~/.tff).')
flags.DEFINE_float('dirichlet_alpha', 0.5, 'Label skew of simulated splits.')
flags.DEFINE_integer('max_test_examples', None, 'Evaluate on a prefix of the test set.',
                     lower_bound=1)
flags.DEFINE_list('workers', None, 'host:port,... of running TFF worker services '
                  '(worker_binary --port=N) that share each round\'s clients; '
                  'default: one machine, its workers in a private network '
                  'namespace where Linux allows it.')
flags.DEFINE_bool('trusted_network', False, 'State that only trusted machines '
                  'can reach the --workers ports (a private network, SSH '
                  'tunnels): TFF workers run unauthenticated computations, so '
                  'an address outside loopback is refused without it.')
flags.DEFINE_integer('min_clients_per_round', None, 'Dropout tolerance: the '
                     'fewest of a round\'s sampled clients that may contribute. '
                     'The calibration sizes the noise so that ε holds for every '
                     'cohort from it to --clients_per_round, and a round with '
                     'fewer is refused before its output is released. Needs '
                     '--target_epsilon (default: every sampled client).',
                     lower_bound=1)
flags.DEFINE_integer('wire_bits', None, 'Wire budget: b bits per coordinate in '
                     'the secure sum\'s field (SecureModularSumFactory(2^b), '
                     'docs/bits.md) for a bounded registry mechanism; refused '
                     'where the field cannot hold the cohort\'s sum (naming the '
                     'bits needed). Default: the exact level sum, '
                     'ceil(log2(n(L-1)+1)) bits.', lower_bound=1, upper_bound=31)
flags.DEFINE_bool('use_profile', False, 'Calibrate and account with the '
                  'profile route too: the round\'s privacy profile (from its '
                  'RDP curve, or a dominating Gaussian where one is proved: '
                  'PBM) sampled and composed as a PLD (docs/privacy.md, '
                  '"Gaussian domination"); the Gaussian reference the same '
                  'way.')
flags.DEFINE_integer('clients_per_slot', None, 'K clients trained per TFF client '
                     'slot (vectorized when the model allows), each clipped and '
                     'encoded on its own before the secure sum (same server '
                     'view, several times faster; registry mechanisms and '
                     'none, not TFF\'s own aggregators; must '
                     'divide --clients_per_round). Default (or 0): chosen from '
                     '--clients_per_round and the CPU cores, the run prints it; '
                     '1: one client per slot.', lower_bound=0)
flags.DEFINE_string('root_output_dir', 'runs', 'Where run folders go.')
flags.DEFINE_string('experiment_name', None, 'Run folder name (default: mechanism).')
flags.DEFINE_bool('fresh', False, 'Discard an existing run with this name.')


def peer_param(key: str, value: str):
  """A TFF peer's `key=value` entry: bits an integer, others numbers."""
  try:
    return (int if key == 'bits' else float)(value)
  except ValueError:
    raise ValueError(f'--mechanism_params: {key}={value!r} is not a number.') from None


def mechanism_params_from_flags(name: str):
  """--mechanism_params plus any alias flag given for this mechanism."""
  if name == config_lib.NO_PRIVACY:
    return {}
  if name in peers.PEERS:
    params = validation.parse_key_values(
        '--mechanism_params', FLAGS.mechanism_params, peer_param)
    for flag, (owner, _, _) in ALIASES.items():
      if FLAGS[flag].value is not None:
        raise ValueError(f'--{flag} does not apply to --mechanism={name}.')
    return params
  cls = mechanisms.get(name)
  params = cls.parse_params(FLAGS.mechanism_params)
  for flag, (owner, param, _) in ALIASES.items():
    value = FLAGS[flag].value
    if value is None:
      continue
    if owner not in (None, name):
      raise ValueError(f'--{flag} applies to --mechanism={owner}, not {name}.')
    if param in params and params[param] != value:
      raise ValueError(f'--{flag}={value} contradicts --mechanism_params '
                       f'{param}={params[param]}.')
    params[param] = cls.tunable(param).check(value)
  return params


def check_flags() -> None:
  """Refuses a bad config, a missing EMNIST cache, or a privacy setting that
  cannot run (parameters without privacy, a target out of reach, a wire
  budget too small) before TensorFlow starts: the run's privacy plan is made
  here (`privacy_plan_from_flags`), and main runs it. (`cli.run`'s check;
  main checks the rest again, with TensorFlow.)

  Raises:
    ValueError, FileNotFoundError: the input and what to change.
  """
  config = config_from_flags(announce=False).validate()
  config_lib.check_packing(config, FLAGS.clients_per_slot)
  if FLAGS.workers:
    network.check_worker_addresses(runtime.parse_workers(FLAGS.workers),
                                   FLAGS.trusted_network)
  if resolve_dataset(FLAGS.dataset) == 'emnist':
    data_lib.existing_emnist_cache(FLAGS.emnist_cache_dir)
  privacy_plan_from_flags()


@functools.lru_cache(maxsize=None)
def privacy_plan_from_flags() -> privacy_plan.PrivacyPlan:
  """The run's privacy plan (`privacy_plan.make`), made once a process: by
  the check, before TensorFlow starts (d counted from the model's layer
  shapes, `models.param_count`; TFF's distributed peers are calibrated by
  TFF's own functions, so they import it first), then read by main.

  Raises:
    ValueError: the setting cannot run (the plan's refusal).
  """
  config = config_from_flags().validate()
  if config.is_peer and config.mechanism != 'gaussian':
    quiet.import_tensorflow()
  shape, classes = data_lib.SHAPES[resolve_dataset(FLAGS.dataset)]
  return privacy_plan.make(
      config, models.param_count(config.model, shape, classes),
      stored_in=None if FLAGS.fresh else run_dir_from_flags(config))


def run_dir_from_flags(config: config_lib.TrainingConfig) -> str:
  """The run's folder: --root_output_dir/(--experiment_name or mechanism)."""
  return os.path.join(FLAGS.root_output_dir,
                      FLAGS.experiment_name or config.mechanism)


def config_from_flags(announce: bool = True) -> config_lib.TrainingConfig:
  """The run's config from the flags: the default target ε where a private
  mechanism has neither a target nor a parameter calibration would choose
  (`config.with_default_target`; printed where `announce`)."""
  names = [f.name for f in dataclasses.fields(config_lib.TrainingConfig)
           if f.name != 'mechanism_params']
  values = {n: FLAGS[n].value for n in names}
  validation.check_one_of('--mechanism', values['mechanism'],
                          (config_lib.NO_PRIVACY,) +
                          tuple(mechanisms.registry()) + peers.PEERS)
  given = config_lib.TrainingConfig(
      mechanism_params=mechanism_params_from_flags(values['mechanism']),
      **values)
  config = config_lib.with_default_target(given)
  if announce and config.target_epsilon != given.target_epsilon:
    print(f'[fl_emnist] calibrating {config.mechanism} to the default whole-model '
          f'ε = {config.target_epsilon:g} (set --target_epsilon, or the '
          'mechanism\'s parameters, to change it).')
  return config


def resolve_dataset(name: str) -> str:
  if name != 'auto':
    return name
  path = data_lib.emnist_cache_path(FLAGS.emnist_cache_dir)
  return 'emnist' if os.path.exists(path) else 'fashion_mnist'


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  # SIGTERM -> normal exit, so atexit ends TFF's worker processes.
  runtime.exit_on_sigterm()
  with cli.user_errors_exit():
    plan = privacy_plan_from_flags()   # made by the check, before TensorFlow
    config = config_from_flags(announce=False).validate()
    dataset = resolve_dataset(FLAGS.dataset)
    from tff_quant.training import federated_training as ft  # pylint: disable=g-import-not-at-top
    if dataset != 'emnist' and config.model == 'emnist_cnn':
      print(f'[fl_emnist] dataset={dataset}: real EMNIST not found at '
            f'{data_lib.emnist_cache_path(FLAGS.emnist_cache_dir)}; using {dataset}.')
    split_seed = config.seed if FLAGS.split_seed is None else FLAGS.split_seed
    validation.check_integer('--split_seed', split_seed, 0)
    data = data_lib.load(dataset, num_clients=config.total_clients,
                         alpha=FLAGS.dirichlet_alpha, seed=split_seed,
                         data_dir=FLAGS.data_dir,
                         emnist_cache_dir=FLAGS.emnist_cache_dir,
                         max_test_examples=FLAGS.max_test_examples,
                         validation_fraction=config.validation_fraction)
    run_dir = run_dir_from_flags(config)
    summary = ft.run(config, data, run_dir, fresh=FLAGS.fresh, workers=FLAGS.workers,
                     clients_per_slot=FLAGS.clients_per_slot,
                     trusted_network=FLAGS.trusted_network, plan=plan)
  print('=' * 78)
  print(f'Data: {summary["data"]}')
  print(f'Mechanism: {summary["mechanism"]}')
  split = config.evaluation_split
  print(f'Final {split} accuracy: {summary[f"{split}_accuracy"]:.4f} '
        f'(loss {summary[f"{split}_loss"]:.4f}) after '
        f'{summary["rounds_completed"]} rounds' +
        (' (the validation split; the test set was not used)'
         if split != 'test' else ''))
  upload = summary.get('upload_bits_per_client_per_round')
  print(f'Bits per client per round: {summary["bits_per_client_per_round"]} '
        f'({summary["dim"]} coordinates' + (
            f'; the level indices: each travels in the secure sum\'s '
            f'{summary["secure_sum_bits"]}-bit field, {upload} bits uploaded'
            if upload is not None else '') + ')')
  if summary['epsilon'] != float('inf'):
    print(f'Privacy of the whole model update seen by the server: '
          f'(ε={summary["epsilon"]:.4g}, δ={summary["delta"]:.3g}) '
          f'[{summary["epsilon_route"]}]')
    if summary.get('epsilon_attained') is not None:
      print(f'  ε ∈ [{summary["epsilon_attained"]:.4g}, {summary["epsilon"]:.4g}]'
            ' [attained by named inputs, proved for any inputs of the others]; '
            f'attained with {summary["attained_inputs"]}')
    elif summary.get('attained_inputs'):
      print(f'  (no attained value: {summary["attained_inputs"]})')
    if summary['pld_note']:
      print(f'  ({summary["pld_note"]})')
    if summary['epsilon_per_coordinate'] == summary['epsilon_per_coordinate']:
      print(f'Per-coordinate ε (the papers\' scalar figure; others at ±c): '
            f'{summary["epsilon_per_coordinate"]:.4g} at δ={summary["delta"]:.3g}')
    else:
      print('Per-coordinate ε: n/a (an ℓ2 mechanism of TFF; no scalar figure)')
    print(f'Assumptions: {summary["privacy_assumptions"]}')
    if summary.get('epsilon_papers_convention') is not None:
      print(f'For comparison with papers only: ε = '
            f'{summary["epsilon_papers_convention"]:.4g} in the '
            f'{summary["papers_convention"]}')
  else:
    print('Privacy: none (noise-free clipped baseline)')
  print(f'Run folder: {run_dir} (the trained model: '
        f'{os.path.join(run_dir, summary["model_file"])}, which '
        'tf.keras.models.load_model reads without TFF)')


def entry_point():
  """The console script `tff-quant-fl-emnist` (setup.py): runs `main` as
  `python -m experiments.fl_emnist` does, from any folder."""
  cli.run(main, check=check_flags)


if __name__ == '__main__':
  entry_point()
