"""Tuning the FL table's training on a validation split.

Per ε, the calibrated central Gaussian is trained at every point of a small
grid over the client learning rate, the server momentum and the ℓ2 clip, on
the train clients less a validation split held out of each client
(`data.hold_out_validation`), and evaluated on that split only; the point
with the best validation endpoint, ties within `TIE_TOLERANCE` broken toward
the simpler setting (`choose`), is fixed for every mechanism.

* **The clip binds.** The clip grid is multiples of the median ℓ2 norm of
  the client updates, measured in a noise-free, unclipped run at each
  candidate learning rate (`UpdateNorms`, `client_update_norms`: the updates
  the clients sampled for the next round would send from the round's global
  model, recomputed with the clients' own SGD).
* **The endpoint** is the table's (`fl_table.PRESPECIFIED`: the mean over the
  evaluations in the last 10% of rounds, at least 5), on validation accuracy.
* **The trend** (`trend`): the least-squares slope of validation accuracy
  over the evaluations of the last third of the rounds, with its standard
  error: whether accuracy still rises, and whether the noise-free run has
  converged.

`Tuning` runs it all (resumable: a finished run is skipped, an unfinished
one resumes from its checkpoint) and writes the report; experiments/fl_tune.py
is its command line.
"""

import dataclasses
import json
import math
import os
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from tff_quant import data as data_lib
from tff_quant import models
from tff_quant.program import fl_table, results_io
from tff_quant.training import federated_training as ft
from tff_quant.training import tuning_settings
# The grid and the settings: a TensorFlow-free module (fl_tune checks its
# flags with them before TensorFlow starts).
from tff_quant.training.tuning_settings import (DEFAULT_CLIENT_LR,
                                                FIXED_TRAINING, MECHANISM,
                                                TIE_TOLERANCE, Point, Settings)

#: The endpoint (the table's, on the validation split).
ENDPOINT = fl_table.PRESPECIFIED
#: The quantiles of the update norms reported.
QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
#: The metrics.csv column a validation run evaluates into.
VALIDATION_COLUMN = 'validation_accuracy'


def quantiles(norms: Sequence[float]) -> Dict[str, float]:
  """n, mean, the QUANTILES (q10 ... q90; q50 is the median) and max."""
  norms = np.asarray(norms, np.float64)
  if not norms.size:
    raise ValueError('no norms')
  out = dict(n=int(norms.size), mean=float(norms.mean()))
  for q in QUANTILES:
    out[f'q{round(100 * q)}'] = float(np.quantile(norms, q))
  out['max'] = float(norms.max())
  return out


def client_update_norms(keras_fn: Callable[[], tf.keras.Model], weights,
                        examples: Sequence[Tuple[np.ndarray, np.ndarray]],
                        client_lr: float, batch_size: int,
                        local_epochs: int = 1) -> np.ndarray:
  """The ℓ2 norm of each client's model update from `weights`
  (`client_updates`), float64 [clients]."""
  return np.linalg.norm(client_updates(keras_fn, weights, examples, client_lr,
                                       batch_size, local_epochs), axis=1)


def client_updates(keras_fn: Callable[[], tf.keras.Model], weights,
                   examples: Sequence[Tuple[np.ndarray, np.ndarray]],
                   client_lr: float, batch_size: int,
                   local_epochs: int = 1) -> np.ndarray:
  """Each client's model update from `weights`, flattened.

  The clients' work as in the runs: plain SGD at client_lr on the batches
  of `repeat(local_epochs).batch(batch_size)` of the client's examples in
  order, on the mean sparse cross-entropy of each batch (logits); the
  update is the local model minus `weights` (trainable variables). A client
  without examples sends zeros.

  Args:
    keras_fn: no-arg callable -> a fresh Keras model (logits out).
    weights: the global `tff.learning.models.ModelWeights`.
    examples: each client's (x, y).
    client_lr, batch_size, local_epochs: the clients' training.

  Returns:
    float64 [clients, trainable coordinates].
  """
  model = keras_fn()
  start = [np.asarray(w) for w in weights.trainable]
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  variables = model.trainable_variables
  lr = tf.constant(client_lr, tf.float32)

  @tf.function(reduce_retracing=True)
  def step(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    for v, g in zip(variables, tape.gradient(loss, variables)):
      v.assign_sub(lr * g)

  out = []
  for x, y in examples:
    for v, w in zip(variables, start):
      v.assign(w)
    x = np.concatenate([x] * local_epochs)
    y = np.concatenate([y] * local_epochs)
    for s in range(0, len(y), batch_size):
      step(tf.constant(x[s:s + batch_size]), tf.constant(y[s:s + batch_size]))
    out.append(np.concatenate([(v.numpy() - w).astype(np.float64).ravel()
                               for v, w in zip(variables, start)]))
  return np.stack(out)


class UpdateNorms:
  """A `federated_training.run(observe=...)` hook: after each round in
  `rounds`, the update norms of the clients the next round samples, from
  the round's global model (`client_update_norms`).

  Args:
    keras_fn: the run's model.
    client_examples: client id -> (x, y) (`FederatedData.client_examples`).
    sample: round -> that round's client ids
      (`federated_training.sampled_clients`).
    config: the run's TrainingConfig (client_lr, batch_size, local_epochs).
    rounds: the rounds after which to measure.
  """

  def __init__(self, keras_fn, client_examples, sample, config,
               rounds: Sequence[int]):
    self.keras_fn, self.client_examples = keras_fn, client_examples
    self.sample, self.config = sample, config
    self.rounds = set(int(r) for r in rounds)
    self.norms: Dict[int, List[float]] = {}

  def __call__(self, rnd: int, weights) -> None:
    if rnd not in self.rounds:
      return
    ids = self.sample(rnd + 1)
    c = self.config
    self.norms[rnd] = client_update_norms(
        self.keras_fn, weights, [self.client_examples(i) for i in ids],
        c.client_lr, c.batch_size, c.local_epochs).tolist()

  def summary(self) -> Dict[str, Dict[str, float]]:
    """{'round r': quantiles, ..., 'pooled': quantiles over all}."""
    out = {f'round {r}': quantiles(v) for r, v in sorted(self.norms.items())}
    out['pooled'] = quantiles([n for v in self.norms.values() for n in v])
    return out


def endpoint(evaluations: Sequence[Tuple[int, float]], rounds: int,
             which: fl_table.Endpoint = ENDPOINT) -> float:
  """A run's validation endpoint (`which`: ENDPOINT, or what
  `fl_table.choose_endpoint` allows for a schedule too short for it)."""
  return which.value(evaluations, rounds)


def endpoint_name(which: fl_table.Endpoint) -> str:
  """`which`'s name, on the validation split."""
  return which.name.replace('test accuracy', 'validation accuracy')


def try_trend(evaluations, rounds, fraction: float = 1 / 3):
  """`trend`, or None where the window holds fewer than 3 evaluations."""
  try:
    return trend(evaluations, rounds, fraction)
  except ValueError:
    return None


def _describe(tr: Optional['Trend']) -> str:
  """`tr.describe()`, or why there is no trend (`try_trend`'s None)."""
  return tr.describe() if tr else 'n/a (under 3 evaluations)'


@dataclasses.dataclass(frozen=True)
class Trend:
  """The least-squares slope of accuracy per 100 rounds over a window, its
  standard error, the evaluations it uses, and the accuracy at the window's
  start and end (means of its first and last 3 evaluations)."""
  slope: float
  se: float
  evaluations: int
  first: float
  last: float

  @property
  def rising(self) -> bool:
    """The slope is above 0 by more than 2 standard errors."""
    return self.slope > 2 * self.se

  def describe(self) -> str:
    verdict = ('still rising' if self.rising else
               'flat (slope within 2 se of 0 or below)')
    return (f'{verdict}: slope {self.slope:+.4f} ± {self.se:.4f} (se) per 100 '
            f'rounds over {self.evaluations} evaluations; {self.first:.4f} → '
            f'{self.last:.4f}')


def trend(evaluations: Sequence[Tuple[int, float]], rounds: int,
          fraction: float = 1 / 3) -> Trend:
  """The Trend over the evaluations at rounds >= rounds - ⌊fraction·rounds⌋
  (default: the last third).

  Raises:
    ValueError: fewer than 3 evaluations there.
  """
  first = rounds - math.floor(fraction * rounds + 1e-9)
  pts = sorted((r, a) for r, a in evaluations if first <= r <= rounds)
  if len(pts) < 3:
    raise ValueError(f'{len(pts)} evaluations at rounds >= {first}; a trend '
                     'needs 3')
  x = np.array([r for r, _ in pts], np.float64) / 100
  y = np.array([a for _, a in pts], np.float64)
  xc = x - x.mean()
  slope = float(np.sum(xc * (y - y.mean())) / np.sum(xc**2))
  resid = y - y.mean() - slope * xc
  se = float(math.sqrt(np.sum(resid**2) / (len(y) - 2) / np.sum(xc**2)))
  return Trend(slope, se, len(y), float(np.mean(y[:3])), float(np.mean(y[-3:])))


def choose(endpoints: Dict[Point, Sequence[float]],
           tolerance: float = TIE_TOLERANCE) -> Tuple[Point, List[Point]]:
  """The rule: the argmax of the validation endpoint (a point's mean over
  its seeds), ties broken toward the simpler setting: among the points
  within `tolerance` of the best, the one with the smallest
  `Point.simplicity()` (then the higher endpoint).

  Args:
    endpoints: {point: [endpoint per seed]} of one ε (points without runs
      are left out).
    tolerance: the tie tolerance, fixed before the runs.

  Returns:
    (the chosen point, the tied points best first).

  Raises:
    ValueError: no point has a run, or points of several ε.
  """
  means = {p: float(np.mean(v)) for p, v in endpoints.items() if len(v)}
  if not means:
    raise ValueError('no finished run to choose from')
  if len({p.epsilon for p in means}) > 1:
    raise ValueError('choose among the points of one ε')
  best = max(means.values())
  tied = sorted((p for p, m in means.items() if m >= best - tolerance),
                key=lambda p: -means[p])
  return min(tied, key=lambda p: (p.simplicity(), -means[p])), tied


# -- the driver ---------------------------------------------------------------

NOISE_FREE_CLIP = 1e6   # the norm runs are unclipped: they see the raw updates
#: The columns of results.csv, a grid run a row (`Tuning._grid_row`).
RESULTS_COLUMNS = ('epsilon', 'client_lr', 'server_momentum', 'server_lr',
                   'server_lr_schedule', 'clip_multiple', 'clip_norm', 'seed',
                   'endpoint', 'last_accuracy',
                   'last_third_slope_per_100_rounds', 'slope_se',
                   'clipped_clients_fraction_mean', 'epsilon_reported',
                   'noise_multiplier', 'minutes')


class Tuning:
  """One tuning folder: the norm runs, the grid runs, the report.

  Args:
    settings: the Settings.
    data: the FederatedData with its validation split (default: loaded
      from the settings on first use).
    log: where progress lines go.
  """

  def __init__(self, settings: Settings, data=None, log=print):
    settings.check()
    self.s, self.data, self.log = settings, data, log
    self.out = settings.output_dir
    os.makedirs(self.out, exist_ok=True)
    self.norms_path = os.path.join(self.out, 'norms.json')
    self.times_path = os.path.join(self.out, 'run_seconds.json')
    self.norms = tuning_settings.load_json(self.norms_path)
    self.times = tuning_settings.load_json(self.times_path)
    self.trained = 0   # runs this process started (`Settings.max_runs`)

  def stopping(self) -> bool:
    """No further run starts: past the deadline, or `max_runs` started."""
    return self.s.past_deadline() or (
        self.s.max_runs is not None and self.trained >= self.s.max_runs)

  def check_folder(self) -> None:
    """config.json: written, or ValueError if it holds other settings
    (`tuning_settings.Settings.check_folder`)."""
    results_io.write_json(os.path.join(self.out, 'config.json'),
                          self.s.check_folder())

  def load_data(self):
    if self.data is None:
      self.data = data_lib.load(
          self.s.dataset, num_clients=self.s.total_clients,
          seed=self.s.split_seed, data_dir=self.s.data_dir,
          validation_fraction=self.s.validation_fraction)
      self.log(f'[fl_tune] Data: {self.data.description}')
      results_io.write_json(os.path.join(self.out, 'data.json'),
                            dict(description=self.data.description))
    if self.data.validation_fraction != self.s.validation_fraction:
      raise ValueError('the data\'s validation split is not the settings\'')
    return self.data

  def _train(self, key, config, run_dir, observe=None, fresh=False):
    data = self.load_data()
    lines = []
    t0 = time.time()

    def log(line):
      lines.append(line)
      if not line.startswith('round ') or (
          ' val_acc=' in line and line.split('/')[0].endswith(('00', '50'))):
        self.log(f'  [{key}] {line}')
    summary = ft.run(config, data, run_dir, fresh=fresh, log=log,
                     clients_per_slot=self.s.clients_per_slot, observe=observe)
    with open(os.path.join(run_dir, 'log.txt'), 'a') as f:
      f.write('\n'.join(lines) + '\n')
    self.trained += 1
    self.times[key] = self.times.get(key, 0.0) + time.time() - t0
    results_io.write_json(self.times_path, self.times)
    return summary

  def measure_norms(self, lr: float) -> bool:
    """The noise-free, unclipped run at `lr`, measuring the update norms
    after rounds 1, 10, 25 and every 50th (False: measured before)."""
    key = f'noise_free_lr{lr:g}'
    if key in self.norms:
      return False
    data = self.load_data()
    config = self.s.config(ft.NO_PRIVACY, self.s.norm_rounds, lr,
                           NOISE_FREE_CLIP)
    keras_fn = lambda: models.get(config.model, data.input_shape,
                                  data.num_classes)
    population = data.train.client_ids[:config.total_clients]
    rounds = sorted(r for r in {1, 10, 25} | set(range(50, 10**6, 50))
                    if r <= self.s.norm_rounds)
    hook = UpdateNorms(keras_fn, data.client_examples,
                       lambda r: ft.sampled_clients(config, population, r),
                       config, rounds)
    self.log(f'[fl_tune] {key}: noise-free, unclipped, {self.s.norm_rounds} '
             f'rounds; update norms after rounds {rounds}')
    # Fresh: the norms are measured along the whole run, in one go.
    self._train(key, config, os.path.join(self.out, 'noise_free', key),
                observe=hook, fresh=True)
    self.norms[key] = dict(client_lr=lr, **hook.summary())
    results_io.write_json(self.norms_path, self.norms)
    self.log(f'[fl_tune] {key} update norms (pooled): '
             f'{self.norms[key]["pooled"]}')
    return True

  def medians(self) -> Dict[float, float]:
    return {v['client_lr']: v['pooled']['q50'] for v in self.norms.values()}

  def run_point(self, point: Point, seed: int) -> bool:
    """One grid run (False: finished before, skipped)."""
    key = f'{point.name}_s{seed}'
    run_dir = os.path.join(self.out, 'runs', key)
    if os.path.exists(os.path.join(run_dir, 'summary.json')):
      return False
    clip = point.clip_norm(self.medians())
    config = self.s.config('gaussian', self.s.rounds, point.client_lr, clip,
                           point.server_momentum, point.server_lr,
                           point.epsilon, seed, point.schedule)
    self.log(f'[fl_tune] run {key}: clip {clip:g}')
    self._train(key, config, run_dir)
    return True

  def run_noise_free_at(self, point: Point) -> bool:
    """The point's training without noise (clipped at its clip)."""
    key = 'noise_free_' + point.name.split('_', 1)[1]   # any ε: no noise
    run_dir = os.path.join(self.out, 'noise_free', key)
    if os.path.exists(os.path.join(run_dir, 'summary.json')):
      return False
    config = self.s.config(ft.NO_PRIVACY, self.s.rounds, point.client_lr,
                           point.clip_norm(self.medians()),
                           point.server_momentum, point.server_lr,
                           schedule=point.schedule)
    self.log(f'[fl_tune] run {key} (noise-free at the choice)')
    self._train(key, config, run_dir)
    return True

  def run_all(self) -> str:
    """Norms, the grid at seed 0, the re-runs (per ε the chosen point and
    the best others, `rerun_top` in all), the noise-free runs at the
    choices (each skipped once finished; none started once `stopping`);
    returns the report."""
    self.check_folder()
    grid_ = self.s.grid()
    self.log(f'[fl_tune] {len(grid_)} grid points: ' +
             ', '.join(p.name for p in grid_))
    for lr in self.s.client_lrs:
      if not self.stopping():
        self.measure_norms(lr)
    for point in grid_:
      if self.stopping():
        self.log('[fl_tune] past the deadline or --max_runs: no more runs')
        break
      if self.run_point(point, 0):
        self.report()
    _, choices = self.report()
    for eps in self.s.epsilons:
      if eps not in choices:
        continue
      chosen, _, endpoints = choices[eps]
      # The chosen point first, then the best others (mean endpoint).
      top = [chosen] + sorted((p for p in endpoints if p != chosen),
                              key=lambda p: -np.mean(endpoints[p]))
      for point in top[:self.s.rerun_top]:
        for seed in range(1, self.s.seeds_top):
          if not self.stopping() and self.run_point(point, seed):
            self.report()
    if self.s.noise_free_at_choice:
      _, choices = self.report()
      for eps, (chosen, _, _) in sorted(choices.items()):
        if not self.stopping() and self.run_noise_free_at(chosen):
          self.report()
    return self.report()[0]

  # -- the report ------------------------------------------------------------

  @staticmethod
  def finished(run_dir):
    """(summary, fl_table.Run on validation accuracy) or None."""
    path = os.path.join(run_dir, 'summary.json')
    if not os.path.exists(path):
      return None
    with open(path) as f:
      summary = json.load(f)
    return summary, fl_table.read_run(run_dir, column=VALIDATION_COLUMN)

  def collect(self):
    """{point: {seed: (summary, Run)}} of every finished grid run in the
    folder (at the settings' ε values): the grid may have been run in parts
    (config.json holds the fixed setting they share)."""
    out = {}
    root = os.path.join(self.out, 'runs')
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
      base, _, seed = name.rpartition('_s')
      point = Point.from_name(base)
      if point is None or point.epsilon not in self.s.epsilons:
        continue
      got = self.finished(os.path.join(root, name))
      if got:
        out.setdefault(point, {})[int(seed)] = got
    return out

  def which_endpoint(self, runs) -> fl_table.Endpoint:
    """fl_table.choose_endpoint over the finished grid runs' schedules."""
    evaluations = [r.evaluations for seeds in runs.values()
                   for _, r in seeds.values()]
    if not evaluations:
      return ENDPOINT
    return fl_table.choose_endpoint(evaluations, self.s.rounds)

  def choices(self, runs):
    """{ε: (chosen, tied, {point: [endpoint per seed]})}."""
    out = {}
    which = self.which_endpoint(runs)
    for eps in self.s.epsilons:
      endpoints = {p: [endpoint(r.evaluations, self.s.rounds, which)
                       for _, (_, r) in sorted(seeds.items())]
                   for p, seeds in runs.items() if p.epsilon == eps}
      if endpoints:
        chosen, tied = choose(endpoints, self.s.tie_tolerance)
        out[eps] = (chosen, tied, endpoints)
    return out

  def report(self):
    """Writes tuning.md, results.csv and choice.json.

    Returns:
      (the Markdown, `choices`).
    """
    runs = self.collect()
    choices = self.choices(runs)
    which = self.which_endpoint(runs)
    grid_md, rows = self._grid_table(runs, which)
    results_io.write_csv(os.path.join(self.out, 'results.csv'),
                         RESULTS_COLUMNS, rows)
    choice_md, choice_json = self._choice_section(runs, choices, which)
    results_io.write_json(os.path.join(self.out, 'choice.json'), choice_json)
    sections = (self._preamble(which), self._norms_table(),
                self._noise_free_table(), grid_md, choice_md)
    text = '\n\n'.join('\n'.join(lines) for lines in sections) + '\n'
    with open(os.path.join(self.out, 'tuning.md'), 'w') as f:
      f.write(text)
    return text, choices

  def _preamble(self, which: fl_table.Endpoint) -> List[str]:
    """The report's title, its data and its setting, endpoint and rule.

    Args:
      which: the endpoint of the grid runs (`which_endpoint`).

    Returns:
      The Markdown lines.
    """
    s = self.s
    data_line = (f'{s.dataset} (Fashion-MNIST: real images, /usr/share/'
                 f'datasets/fashion-mnist), SIMULATED federated split: '
                 f'{s.total_clients} clients, Dirichlet(0.5) over labels, '
                 f'split seed {s.split_seed}; VALIDATION split: '
                 f'{s.validation_fraction:g} of each client\'s examples held '
                 f'out (seed {s.split_seed}); training on the rest; every '
                 'accuracy below is on the validation split (the test set '
                 'is not used).')
    loaded = tuning_settings.load_json(os.path.join(self.out, 'data.json'))
    if loaded:
      data_line += f' Loaded: {loaded["description"]}.'
    setting_line = (
        f'Setting: {s.model}, {s.clients_per_round} of {s.total_clients} '
        f'clients a round, {s.rounds} rounds, batch '
        f'{FIXED_TRAINING["batch_size"]}, {FIXED_TRAINING["local_epochs"]} '
        f'local epoch, δ = 1/{s.total_clients}, rotation, c∞ multiple '
        f'{s.coordinate_clip_multiple:g}; the calibrated central Gaussian '
        f'(`{MECHANISM}`, target ε), noise seed 1000 + seed. Endpoint: ' +
        endpoint_name(which) + (
            '' if which == ENDPOINT else ' (the runs\' schedule cannot '
            'give the pre-specified ' + endpoint_name(ENDPOINT) + ')') +
        '. Rule: the argmax of the endpoint (a point\'s mean over its '
        f'seeds); the points within {s.tie_tolerance:g} of the best are '
        'tied and the simplest of them wins (no server momentum, then '
        f'server lr 1, then client lr {DEFAULT_CLIENT_LR:g}, then the clip '
        'nearest the median, then the smaller clip).')
    return ['# FL tuning on the validation split', '', f'Data: {data_line}',
            '', setting_line]

  def _norms_table(self) -> List[str]:
    """The update norms of each norm run (norms.json), after each round
    measured and pooled.

    Returns:
      The Markdown lines, from the section's heading.
    """
    md = ['## Client update norms (noise-free, unclipped runs)', '',
          'The ℓ2 norms of the updates the clients sampled for the next round '
          'would send from the global model after the round.', '',
          '| client lr | after | n | median | q10 | q25 | q75 | q90 | max |',
          '|---|---|---|---|---|---|---|---|---|']
    order = lambda w: (w == 'pooled', int(w.split()[-1]) if w != 'pooled'
                       else 0)
    for _, v in sorted(self.norms.items()):
      for where in sorted((w for w in v if w != 'client_lr'), key=order):
        q = v[where]
        md.append(f'| {v["client_lr"]:g} | {where} | {q["n"]} | '
                  f'{q["q50"]:.4f} | {q["q10"]:.4f} | {q["q25"]:.4f} | '
                  f'{q["q75"]:.4f} | {q["q90"]:.4f} | {q["max"]:.4f} |')
    return md

  def _noise_free_table(self) -> List[str]:
    """Each finished run under noise_free/: its validation accuracy every 50
    rounds, its endpoint (what its schedule allows) and its last third.

    Returns:
      The Markdown lines, from the section's heading.
    """
    md = ['## Noise-free runs (validation accuracy)', '',
          '| run | rounds | accuracy every 50 rounds | endpoint | last third '
          '| minutes |', '|---|---|---|---|---|---|']
    nf_root = os.path.join(self.out, 'noise_free')
    for name in sorted(os.listdir(nf_root)) if os.path.isdir(nf_root) else []:
      got = self.finished(os.path.join(nf_root, name))
      if not got:
        continue
      summary, run = got
      rounds = summary['rounds_completed']
      acc = dict(run.evaluations)
      marks = ' / '.join(f'{acc[r]:.3f}' for r in range(50, rounds + 1, 50)
                         if r in acc)
      nf_which = fl_table.choose_endpoint([run.evaluations], rounds)
      md.append(f'| {name} (clip {summary["config"]["clip_norm"]:g}) | '
                f'{rounds} | {marks} | '
                f'{endpoint(run.evaluations, rounds, nf_which):.4f} | '
                f'{_describe(try_trend(run.evaluations, rounds))} | '
                f'{self.times.get(name, math.nan) / 60:.1f} |')
    return md

  def _grid_table(self, runs, which: fl_table.Endpoint
                  ) -> Tuple[List[str], List[list]]:
    """Every finished grid run, by point then seed.

    Args:
      runs: `collect()`.
      which: their endpoint (`which_endpoint`).

    Returns:
      (the Markdown lines from the section's heading, the results.csv rows
      in RESULTS_COLUMNS).
    """
    md = ['## Grid runs', '',
          '| ε | client lr | server momentum | server lr | schedule | '
          'clip (× median) | seed | endpoint | last | last-third slope /100 '
          'rounds | clients clipped (mean) | ε reported | σ/clip | minutes |',
          '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
    rows = []
    for p in sorted(runs):
      for seed, (summary, run) in sorted(runs[p].items()):
        row = self._grid_row(p, seed, summary, run, which)
        (eps, lr, momentum, server_lr, schedule, multiple, clip, seed, ep,
         last, slope, se, clip_mean, reported, z, minutes) = row
        rows.append(row)
        md.append(f'| {eps:g} | {lr:g} | {momentum:g} | {server_lr:g} | '
                  f'{schedule} | {clip:g} ({multiple:g}×) | {seed} | '
                  f'{ep:.4f} | {last:.4f} | {slope:+.3f} ± {se:.3f} | '
                  f'{clip_mean:.3f} | {reported:.4g} | {z:.4g} | '
                  f'{minutes:.1f} |')
    return md, rows

  def _grid_row(self, point: Point, seed: int, summary, run,
                which: fl_table.Endpoint) -> list:
    """One grid run's results.csv row.

    Args:
      point, seed: the run's.
      summary, run: its summary.json and its `fl_table.Run` (`finished`).
      which: the grid's endpoint.

    Returns:
      The values of RESULTS_COLUMNS (NaN for a trend under 3 evaluations,
      no clipping record, no noise multiplier or no recorded time).
    """
    tr = try_trend(run.evaluations, self.s.rounds)
    slope, se = (tr.slope, tr.se) if tr else (math.nan, math.nan)
    clipped = [c for c in (run.clipped or []) if math.isfinite(c)]
    clip_mean = float(np.mean(clipped)) if clipped else math.nan
    z = summary['config']['mechanism_params'].get('noise_multiplier',
                                                  math.nan)
    minutes = self.times.get(f'{point.name}_s{seed}', math.nan) / 60
    return [point.epsilon, point.client_lr, point.server_momentum,
            point.server_lr, point.schedule, point.clip_multiple,
            summary['config']['clip_norm'], seed,
            endpoint(run.evaluations, self.s.rounds, which),
            run.evaluations[-1][1], slope, se, clip_mean, summary['epsilon'],
            z, minutes]

  def _choice_section(self, runs, choices, which: fl_table.Endpoint
                      ) -> Tuple[List[str], Dict[str, dict]]:
    """Per ε, the chosen point, its ties and the trend of its seeds.

    Args:
      runs: `collect()`.
      choices: `choices(runs)`.
      which: the grid's endpoint.

    Returns:
      (the Markdown lines from the section's heading, choice.json: {'ε':
      the choice}).
    """
    md = ['## The choice', '']
    medians = self.medians()
    choice_json = {}
    for eps, (chosen, tied, endpoints) in sorted(choices.items()):
      line, choice_json[f'{eps:g}'] = self._choice(
          eps, chosen, tied, endpoints, runs[chosen],
          chosen.clip_norm(medians), which)
      md.append(line)
    return md, choice_json

  def _choice(self, eps: float, chosen: Point, tied: Sequence[Point],
              endpoints: Dict[Point, List[float]], seeds, clip: float,
              which: fl_table.Endpoint) -> Tuple[str, dict]:
    """One ε's choice: its point, endpoint and ties, and the last-third trend
    of its seeds' mean curve (the rounds every seed evaluated) and of each.

    Args:
      eps: the ε.
      chosen, tied, endpoints: its `choices` entry.
      seeds: the chosen point's runs, {seed: (summary, Run)}.
      clip: the chosen ℓ2 clip.
      which: the grid's endpoint.

    Returns:
      (the Markdown bullet, its choice.json entry).
    """
    s = self.s
    means = {p: float(np.mean(v)) for p, v in endpoints.items()}
    tr, rising, n_seeds = self._seed_trends(seeds)
    line = (f'* ε = {eps:g} ({len(endpoints)} points run): '
            f'**client lr {chosen.client_lr:g}, server momentum '
            f'{chosen.server_momentum:g}, server lr {chosen.server_lr:g} '
            f'({chosen.schedule}), {s.rounds} rounds, clip {clip:g} '
            f'({chosen.clip_multiple:g}× the median update '
            f'norm)**, endpoint {means[chosen]:.4f} over '
            f'{len(endpoints[chosen])} seed(s); tied within '
            f'{s.tie_tolerance:g}: ' +
            ', '.join(f'{p.name} {means[p]:.4f}' for p in tied) +
            f'. Last third, the mean curve of its {n_seeds} '
            f'seed(s): {_describe(tr)}; rising at {rising} of '
            f'{n_seeds} seeds.')
    entry = dict(
        name=chosen.name, client_lr=chosen.client_lr,
        server_momentum=chosen.server_momentum,
        server_lr=chosen.server_lr, server_lr_schedule=chosen.schedule,
        rounds=s.rounds, clip_multiple=chosen.clip_multiple,
        clip_norm=clip, endpoint=means[chosen],
        seeds=len(endpoints[chosen]), points_run=len(endpoints),
        tied=[p.name for p in tied], endpoint_used=endpoint_name(which),
        last_third_slope=tr.slope if tr else None,
        last_third_slope_se=tr.se if tr else None,
        last_third_rising=tr.rising if tr else None,
        last_third_rising_seeds=rising)
    return line, entry

  def _seed_trends(self, seeds) -> Tuple[Optional[Trend], int, int]:
    """The last-third trends of one point's seeds.

    Args:
      seeds: the point's runs, {seed: (summary, Run)}.

    Returns:
      (the trend of the seeds' mean curve over the rounds every seed
      evaluated (None: under 3 evaluations), how many seeds rise on their
      own, how many seeds).
    """
    curves = [dict(r.evaluations) for _, (_, r) in sorted(seeds.items())]
    common = sorted(set.intersection(*(set(c) for c in curves)))
    mean_curve = [(k, float(np.mean([c[k] for c in curves]))) for k in common]
    per_seed = [try_trend(sorted(c.items()), self.s.rounds) for c in curves]
    return (try_trend(mean_curve, self.s.rounds),
            sum(bool(t and t.rising) for t in per_seed), len(curves))
