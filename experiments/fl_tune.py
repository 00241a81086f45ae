"""Tunes the FL table's training per ε on a validation split.

The FL table's setting (experiments/fl_table.py: small_cnn, federated
Fashion-MNIST, 100 of 3,400 clients a round, 300 rounds, δ = 1/3,400,
rotation, c∞ multiple 3), with a validation split of --validation_fraction of
every client's examples held out (the clients train on the rest; every
evaluation is on the validation split, never on the test set):

1. **Update norms.** Per candidate client learning rate, a noise-free,
   unclipped run (--norm_rounds) measures the ℓ2 norms of the client updates
   (the clients of the next round, from the global model after rounds 1, 10,
   25 and every 50th); their median sets the clip grid (--clip_multiples ×
   median). These runs are also the noise-free accuracy curves.
2. **The grid.** Per ε, the calibrated central Gaussian ('gaussian',
   target ε) at every (client lr, server momentum, clip multiple, server lr);
   one run per point at seed 0, then per ε the chosen point and the best
   others (--rerun_top in all) at seeds 1 .. --seeds_top - 1. The endpoint: fl_table.PRESPECIFIED on validation
   accuracy. The choice: tuning.choose (argmax; ties within --tie_tolerance
   go to the simpler setting).
3. **Noise-free at the choice.** The chosen training without noise (clipped
   at the chosen clip).

Every run lives in --output_dir (runs/, noise_free/) and resumes from its
checkpoint; a finished run (summary.json) is skipped. --deadline HH:MM (UTC)
starts no run after that time. The report (tuning.md, results.csv,
choice.json, norms.json) is rewritten after every run
(tff_quant.training.tuning does the work).

  nice -n 15 python -m experiments.fl_tune --output_dir=results/fl_tune
  python -m experiments.fl_tune --report_only
"""

from absl import app
from absl import flags
from absl import logging

from tff_quant.program import cli, results_io, runtime
from tff_quant.training import tuning_settings

FLAGS = flags.FLAGS
_D = tuning_settings.Settings('')
flags.DEFINE_string('output_dir', 'results/fl_tune', 'Results folder.')
flags.DEFINE_list('epsilons', [f'{v:g}' for v in _D.epsilons],
                  'Whole-model ε targets.')
flags.DEFINE_list('client_lrs', [f'{v:g}' for v in _D.client_lrs],
                  'Client learning rates.')
flags.DEFINE_list('server_momenta', [f'{v:g}' for v in _D.server_momenta],
                  'Server SGD momenta.')
flags.DEFINE_list('clip_multiples', [f'{v:g}' for v in _D.clip_multiples],
                  'ℓ2 clips as multiples of the median update norm at the '
                  'client lr.')
flags.DEFINE_list('server_lrs', [f'{v:g}' for v in _D.server_lrs],
                  'Server learning rates.')
flags.DEFINE_list('server_lr_schedules', list(_D.server_lr_schedules),
                  'Server learning-rate schedules (constant, cosine).')
flags.DEFINE_integer('rerun_top', _D.rerun_top, 'Per ε, this many points '
                     '(the chosen one, then the best others) run again at '
                     'seeds 1 .. --seeds_top - 1.', lower_bound=0)
flags.DEFINE_integer('seeds_top', _D.seeds_top, 'Seeds of the re-run points.',
                     lower_bound=1)
flags.DEFINE_integer('rounds', _D.rounds, 'Rounds per run.', lower_bound=1)
flags.DEFINE_integer('norm_rounds', _D.norm_rounds, 'Rounds of the noise-free '
                     'runs that measure the update norms.', lower_bound=1)
flags.DEFINE_integer('clients_per_round', _D.clients_per_round,
                     'Clients per round.', lower_bound=1)
flags.DEFINE_integer('total_clients', _D.total_clients, 'Population.', lower_bound=1)
flags.DEFINE_string('model', _D.model, 'Keras model (tff_quant.models).')
flags.DEFINE_float('coordinate_clip_multiple', _D.coordinate_clip_multiple,
                   'c∞ = k·clip/√d (with rotation; the Gaussian itself is an '
                   'ℓ2 mechanism).')
flags.DEFINE_float('validation_fraction', _D.validation_fraction, 'Fraction '
                   'of each client\'s examples held out as the validation '
                   'split.')
flags.DEFINE_integer('eval_every', _D.eval_every, 'Evaluate every k rounds '
                     '(the endpoint needs 5 evaluations in the last 10%).',
                     lower_bound=1)
flags.DEFINE_integer('split_seed', _D.split_seed, 'Seed of the federated '
                     'split and of its validation split (fixed).', lower_bound=0)
flags.DEFINE_integer('clients_per_slot', None, 'K clients per TFF slot '
                     '(default: automatic).', lower_bound=0)
flags.DEFINE_float('tie_tolerance', _D.tie_tolerance, 'Points within this of '
                   'the best validation endpoint are tied (fixed before the '
                   'runs).')
flags.DEFINE_bool('noise_free_at_choice', _D.noise_free_at_choice, 'After the '
                  'grid, run the chosen setting of each ε without noise.')
flags.DEFINE_string('deadline', None, 'HH:MM (UTC): no run starts after it.')
flags.DEFINE_integer('max_runs', None, 'Start at most this many runs, then '
                     'write the report and exit (a loop of such calls gives '
                     'every run a fresh process and TFF context).', lower_bound=1)
flags.DEFINE_string('data_dir', None, 'Folder with the Fashion-MNIST IDX files.')
flags.DEFINE_integer('tf_threads', 0, 'TensorFlow intra/inter-op threads '
                     '(0: TensorFlow\'s default).', lower_bound=0)
flags.DEFINE_bool('report_only', False, 'Write the report from finished runs.')


def settings() -> tuning_settings.Settings:
  """The tuning the flags ask for (checked by `check_flags`)."""

  def floats(name):
    try:
      return tuple(float(v) for v in FLAGS[name].value)
    except ValueError:
      raise ValueError(f'--{name} must be a list of numbers, got '
                       f'{",".join(FLAGS[name].value)!r}.') from None

  return tuning_settings.Settings(
      output_dir=FLAGS.output_dir, epsilons=floats('epsilons'),
      client_lrs=floats('client_lrs'), server_momenta=floats('server_momenta'),
      clip_multiples=floats('clip_multiples'), server_lrs=floats('server_lrs'),
      server_lr_schedules=tuple(FLAGS.server_lr_schedules),
      rerun_top=FLAGS.rerun_top, seeds_top=FLAGS.seeds_top,
      rounds=FLAGS.rounds, norm_rounds=FLAGS.norm_rounds,
      clients_per_round=FLAGS.clients_per_round,
      total_clients=FLAGS.total_clients, model=FLAGS.model,
      coordinate_clip_multiple=FLAGS.coordinate_clip_multiple,
      validation_fraction=FLAGS.validation_fraction,
      eval_every=FLAGS.eval_every, split_seed=FLAGS.split_seed,
      clients_per_slot=FLAGS.clients_per_slot,
      tie_tolerance=FLAGS.tie_tolerance,
      noise_free_at_choice=FLAGS.noise_free_at_choice,
      deadline=FLAGS.deadline, max_runs=FLAGS.max_runs,
      data_dir=FLAGS.data_dir)


def check_flags() -> None:
  """Refuses bad flags before TensorFlow starts (`cli.run`'s check): a
  list value that is not a number, the settings' ranges, the grid, and an
  output folder that holds a tuning with other settings.

  Raises:
    ValueError: naming the flag (or the folder and both settings).
  """
  s = settings()
  s.check()
  s.check_folder()


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  logging.set_verbosity(logging.WARNING)
  runtime.exit_on_sigterm()
  with cli.user_errors_exit():
    check_flags()
    # pylint: disable-next=g-import-not-at-top
    from tff_quant.training import tuning   # TensorFlow's modules
    if FLAGS.tf_threads:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
      tf.config.threading.set_intra_op_parallelism_threads(FLAGS.tf_threads)
      tf.config.threading.set_inter_op_parallelism_threads(FLAGS.tf_threads)
    tuner = tuning.Tuning(settings(), log=lambda line: print(line, flush=True))
    if FLAGS.report_only:   # reads the runs; may run beside a tuning
      tuner.check_folder()
      print(tuner.report()[0])
      return
    with results_io.exclusive(FLAGS.output_dir, 'FL tuning'):
      print(tuner.run_all())


def entry_point():
  """The console script `tff-quant-fl-tune` (setup.py): runs `main` as
  `python -m experiments.fl_tune` does, from any folder."""
  cli.run(main, check=check_flags)


if __name__ == '__main__':
  entry_point()
