"""Which mechanism at my wire budget: every mechanism calibrated to one setting.

For a user's (ε, δ, d, n of N clients, rounds) and a budget of B wire bits per
coordinate (the secure sum's field 2^B, what a client uploads:
docs/bits.md), every mechanism is calibrated to the whole run's (ε, δ) on
the ℓ2 route (updates of ℓ2 norm <= 1 after a random rotation, c∞ = k/√d,
the best k of --coordinate_clip_multiples) within B: the bounded mechanisms'
level counts chosen for B with the wraps counted, the modular sums with
modulus 2^B, TFF's distributed peers at bits = B (their noise part only).
It prints a table (level bits, the wire bits the cohort needs, × the
Gaussian's debiased error as [optimistic, proved], the calibrated
parameters, seconds) and a one-line recommendation that says whether its
ranking survives the intervals (tff_quant.program.which_mechanism).

Each end of each mechanism runs in a process of its own, stopped after
--max_seconds_per_mechanism (the row then says so). numpy/scipy (and
TensorFlow Federated for TFF's peers); no data.

  python -m experiments.which_mechanism --epsilon=10 --dim=8192 \
      --clients_per_round=100 --total_clients=3400 --rounds=300 --wire_bits=8
"""

import os
import time

from absl import app
from absl import flags

from tff_quant.program import cli
from tff_quant.program import which_mechanism

FLAGS = flags.FLAGS
flags.DEFINE_float('epsilon', None, 'Whole-run ε target (> 0).')
flags.DEFINE_float('delta', None, 'Target δ in (0, 1) (default 1 / '
                   'total_clients).')
flags.DEFINE_integer('dim', None, 'd: coordinates each client sends (the '
                     'model\'s size, padded to a power of two if rotated).',
                     lower_bound=1)
flags.DEFINE_integer('clients_per_round', None, 'n: clients per round.',
                     lower_bound=1)
flags.DEFINE_integer('total_clients', None, 'N: the population.',
                     lower_bound=1)
flags.DEFINE_integer('rounds', None, 'T: training rounds.', lower_bound=1)
flags.DEFINE_integer('wire_bits', None, 'B: wire bits per coordinate (the '
                     'secure sum\'s field 2^B).', lower_bound=1,
                     upper_bound=31)
flags.DEFINE_list('mechanisms', None, 'Mechanisms (default: every registry '
                  'mechanism behind the secure sum, then TFF\'s tff_dgauss and '
                  'tff_skellam).')
flags.DEFINE_list('coordinate_clip_multiples',
                  [f'{k:g}' for k in which_mechanism.DEFAULT_MULTIPLES],
                  'k values tried per mechanism (c∞ = k/√d); the one with the '
                  'least error + clipping bias² is kept.')
flags.DEFINE_float('max_seconds_per_mechanism',
                   which_mechanism.DEFAULT_MAX_SECONDS,
                   'Each end (proved, optimistic) of a mechanism gets this '
                   'long; one still running is stopped and its row says so.')
flags.DEFINE_integer('workers', 1, 'Mechanisms computed at once (each end a '
                     'process).', lower_bound=1)
flags.DEFINE_float('rtol', which_mechanism.DEFAULT_RTOL,
                   'Relative width at which calibration stops.')
flags.DEFINE_bool('optimistic', True, 'Also calibrate on the attained ε (the '
                  'optimistic end of each interval); --nooptimistic is faster '
                  'and leaves those ends unknown (no ranking against them '
                  'holds).')
flags.DEFINE_bool('use_profile', True, 'Calibrate every mechanism on the '
                  'profile route too, the lesser of it and the RDP route (PBM '
                  'by its proved Gaussian domination; docs/privacy.md, '
                  '"Gaussian domination"); --nouse_profile: the RDP route '
                  'alone, faster and conservative for the mechanisms. The '
                  'Gaussian reference takes its best route either way.')
flags.DEFINE_string('output', None, 'Also write the Markdown here (a .md '
                    'path).')

_REQUIRED = ('epsilon', 'dim', 'clients_per_round', 'total_clients', 'rounds',
             'wire_bits')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  with cli.user_errors_exit():
    for name in _REQUIRED:
      if FLAGS[name].value is None:
        raise ValueError(f'--{name} is required.')
    delta = (FLAGS.delta if FLAGS.delta is not None
             else 1.0 / FLAGS.total_clients)
    ks = cli.numbers('coordinate_clip_multiples',
                     FLAGS.coordinate_clip_multiples, 0, strict=True)
    if FLAGS.output is not None and not FLAGS.output.endswith('.md'):
      raise ValueError(f'--output must be a .md path, got {FLAGS.output!r}.')
    setting = which_mechanism.Setting(
        FLAGS.epsilon, delta, FLAGS.dim, FLAGS.clients_per_round,
        FLAGS.total_clients, FLAGS.rounds, FLAGS.wire_bits, FLAGS.use_profile)
    start, cpu = time.time(), time.process_time()

    def progress(row):
      lo, hi, known = row.interval()
      what = (f'{hi:.3g}× the Gaussian (optimistic end '
              + (f'{lo:.3g}' if known else '?') + ')' if row.fits
              else f'does not fit: {row.proved.reason[:150]}')
      print(f'[which_mechanism] {row.mechanism}: {what} '
            f'({row.seconds:.0f} s + {row.seconds_optimistic:.0f} s)',
            flush=True)

    rows = which_mechanism.answer(
        setting.epsilon, setting.delta, setting.dim,
        setting.clients_per_round, setting.total_clients, setting.rounds,
        setting.wire_bits, FLAGS.mechanisms, ks,
        FLAGS.max_seconds_per_mechanism, FLAGS.optimistic, FLAGS.rtol,
        FLAGS.workers, progress, setting.use_profile)
    text = which_mechanism.report(rows, setting)
    child_cpu = sum(r.proved.cpu_seconds + r.optimistic.cpu_seconds
                    for r in rows)
    text += (f'\nAnswered in {time.time() - start:.0f} s wall, '
             f'{child_cpu + time.process_time() - cpu:.0f} s CPU '
             f'(calibrations {child_cpu:.0f} s), {FLAGS.workers} worker(s).\n')
    if FLAGS.output:
      folder = os.path.dirname(FLAGS.output)
      if folder:
        os.makedirs(folder, exist_ok=True)
      with open(FLAGS.output, 'w') as f:
        f.write(text)
  print(text, end='')
  if FLAGS.output:
    print(f'Wrote {FLAGS.output}')


def entry_point():
  """The console script `tff-quant-which-mechanism` (setup.py): runs `main` as
  `python -m experiments.which_mechanism` does, from any folder."""
  cli.run(main)


if __name__ == '__main__':
  entry_point()
