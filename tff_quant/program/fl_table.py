"""The equal-privacy FL table: seeds per cell, 95% intervals, verdicts only
where intervals separate, and the "which mechanism should I use?" table.

A cell is (mechanism, ε, bits); its runs differ in the seed (client sampling
and the mechanism's noise). Its figure is the mean final test accuracy with a
95% Student-t interval over its seeds (t_{0.975, s-1}·sd/√s). Two cells are
ranked only where their intervals do not overlap; a recommendation names the
best mean and every mechanism whose interval overlaps it (a tie).

Used by experiments/fl_table.py (the runs live there).
"""

import dataclasses
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

from tff_quant.program import results_io

NOISE_FREE = 'none'
FLOAT_BITS = 32   # the central Gaussian sends floats


@dataclasses.dataclass
class Cell:
  """One (mechanism, ε, bits) cell and its seeds' final test accuracies.

  Args:
    mechanism, epsilon, bits: the cell (epsilon None: noise-free).
    accuracies: {seed: final test accuracy} of the finished runs.
    epsilons: {seed: the whole-model ε its run reports (proved)}.
    reason: why the cell has no runs (calibration refused it), else ''.
    params: the calibrated parameters, as text.
  """
  mechanism: str
  epsilon: Optional[float]
  bits: int
  accuracies: Dict[int, float] = dataclasses.field(default_factory=dict)
  epsilons: Dict[int, float] = dataclasses.field(default_factory=dict)
  reason: str = ''
  params: str = ''

  @property
  def seeds(self) -> int:
    return len(self.accuracies)

  def interval(self) -> Tuple[float, float, float]:
    """(mean, low, high): the 95% Student-t interval of the mean accuracy
    (nan without runs; a single run has an infinite interval)."""
    values = np.array(list(self.accuracies.values()), np.float64)
    if not values.size:
      return math.nan, math.nan, math.nan
    mean = float(values.mean())
    if values.size == 1:
      return mean, -math.inf, math.inf
    half = float(stats.t.ppf(0.975, values.size - 1) *
                 values.std(ddof=1) / math.sqrt(values.size))
    return mean, mean - half, mean + half


def eta_hours(left: Sequence[str], done: Sequence[Tuple[str, float]]
              ) -> Optional[float]:
  """Hours the runs left should take (`left`: each one's mechanism), each at
  the mean of its mechanism's finished runs (`done`: (mechanism, seconds);
  TFF's take 30-45 min here, the packed ones minutes), else at the mean of
  all; None before any run has finished."""
  if not done:
    return None
  per = {}
  for name, seconds in done:
    per.setdefault(name, []).append(seconds)
  overall = sum(t for _, t in done) / len(done)
  return sum(sum(per[n]) / len(per[n]) if n in per else overall
             for n in left) / 3600


def separated(a: Cell, b: Cell) -> int:
  """+1 when a's interval lies above b's, -1 below, 0 where they overlap."""
  _, a_lo, a_hi = a.interval()
  _, b_lo, b_hi = b.interval()
  if a_lo > b_hi:
    return 1
  if a_hi < b_lo:
    return -1
  return 0


def verdicts(cells: Sequence[Cell]) -> List[str]:
  """'A > B' lines for every pair of private cells at the same ε and bits
  whose intervals separate (and a count of the pairs that do not)."""
  lines, ties = [], 0
  groups = {}
  for cell in cells:
    if cell.seeds and cell.epsilon is not None:
      groups.setdefault((cell.epsilon, cell.bits), []).append(cell)
  for (eps, bits), group in sorted(groups.items()):
    group = sorted(group, key=lambda c: -c.interval()[0])
    for i, a in enumerate(group):
      for b in group[i + 1:]:
        if separated(a, b) > 0:
          lines.append(f'ε = {eps:g}, {bits} bits: {a.mechanism} '
                       f'({_fmt(a)}) > {b.mechanism} ({_fmt(b)})')
        else:
          ties += 1
  lines.append(f'{ties} pairs at equal ε and bits are not separated by their '
               '95% intervals (no verdict).')
  return lines


def _fmt(cell: Cell) -> str:
  mean, lo, hi = cell.interval()
  if not math.isfinite(lo):
    return f'{mean:.3f}, 1 seed'
  return f'{mean:.3f} ± {(hi - lo) / 2:.3f}'


def recommendations(cells: Sequence[Cell], budgets: Sequence[int]
                    ) -> List[Tuple[float, int, str, str]]:
  """[(ε, bit budget, recommended, the tied)]: among trained cells at that ε
  with bits <= the budget (each mechanism at its best bits), the best mean
  accuracy of those with an interval (2+ seeds; a single run only where no
  cell has more), and every other mechanism whose interval overlaps it (a
  single run's always does)."""
  out = []
  for eps in sorted({c.epsilon for c in cells if c.epsilon is not None}):
    for budget in budgets:
      best_of = {}
      for c in cells:
        if c.epsilon == eps and c.seeds and c.bits <= budget:
          if (c.mechanism not in best_of or
              c.interval()[0] > best_of[c.mechanism].interval()[0]):
            best_of[c.mechanism] = c
      if not best_of:
        out.append((eps, budget, 'none trained', ''))
        continue
      ranked = sorted(best_of.values(), key=lambda c: -c.interval()[0])
      top = next((c for c in ranked if math.isfinite(c.interval()[1])),
                 ranked[0])
      tied = [c for c in ranked if c is not top and separated(top, c) == 0]
      out.append((eps, budget,
                  f'{top.mechanism} ({top.bits} bits): {_fmt(top)}',
                  ', '.join(f'{c.mechanism} ({c.bits} bits): {_fmt(c)}'
                            for c in tied)))
  return out


COLUMNS = ('mechanism', 'epsilon', 'bits', 'seeds', 'mean_accuracy',
           'ci95_low', 'ci95_high', 'accuracies', 'epsilons_reported',
           'params', 'reason')


def write_report(cells: Sequence[Cell], output_dir: str, budgets: Sequence[int],
                 header: str) -> str:
  """table.csv and table.md (cells, verdicts, recommendations) in
  `output_dir`; returns the Markdown."""
  rows = []
  for c in sorted(cells, key=lambda c: (c.epsilon or math.inf, c.bits,
                                        c.mechanism)):
    mean, lo, hi = c.interval()
    rows.append([c.mechanism, '' if c.epsilon is None else c.epsilon, c.bits,
                 c.seeds, mean, lo, hi,
                 ' '.join(f'{s}:{a:.4f}' for s, a in sorted(c.accuracies.items())),
                 ' '.join(f'{s}:{e:.4g}' for s, e in sorted(c.epsilons.items())),
                 c.params, c.reason])
  results_io.write_csv(os.path.join(output_dir, 'table.csv'), COLUMNS, rows)
  md = [header, '', '| mechanism | ε | bits | seeds | accuracy (95% CI) | '
        'ε reported | note |', '|---|---|---|---|---|---|---|']
  for row in rows:
    name, eps, bits, seeds, mean, lo, hi = row[:7]
    acc = ('' if not seeds else
           f'{mean:.3f} [{lo:.3f}, {hi:.3f}]' if math.isfinite(lo)
           else f'{mean:.3f} (1 seed)')
    reported = row[8].replace(' ', ', ')
    note = row[10] or (row[9] if seeds else 'not run yet')
    md.append(f'| {name} | {eps} | {bits} | {seeds} | {acc} | {reported} | '
              f'{note} |')
  md += ['', '## Verdicts (only where the 95% intervals separate)', '']
  md += [f'- {line}' for line in verdicts(cells)]
  md += ['', '## Which mechanism should I use?', '',
         '| ε | bits per coordinate at most | recommended (mean ± 95% half-width) '
         '| not separable from it |', '|---|---|---|---|']
  for eps, budget, best, tied in recommendations(cells, budgets):
    md.append(f'| {eps:g} | {budget} | {best} | {tied or "—"} |')
  text = '\n'.join(md) + '\n'
  with open(os.path.join(output_dir, 'table.md'), 'w') as f:
    f.write(text)
  return text


def plot(cells: Sequence[Cell], path: str, title: str) -> None:
  """Accuracy against bits, one panel per ε, a line with 95% error bars per
  mechanism (the noise-free run as a band)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  eps_values = sorted({c.epsilon for c in cells if c.epsilon is not None})
  fig, axes = plt.subplots(1, max(1, len(eps_values)), sharey=True,
                           figsize=(6 * max(1, len(eps_values)), 4.5))
  axes = np.atleast_1d(axes)
  names = sorted({c.mechanism for c in cells if c.epsilon is not None})
  colours = {n: plt.cm.tab20(i % 20) for i, n in enumerate(names)}
  free = [c for c in cells if c.epsilon is None and c.seeds]
  for ax, eps in zip(axes, eps_values):
    for name in names:
      pts = sorted((c.bits, c) for c in cells
                   if c.mechanism == name and c.epsilon == eps and c.seeds)
      if not pts:
        continue
      xs = [b for b, _ in pts]
      means = np.array([c.interval()[0] for _, c in pts])
      lo = np.array([c.interval()[1] for _, c in pts])
      hi = np.array([c.interval()[2] for _, c in pts])
      err = np.nan_to_num(np.stack([means - lo, hi - means]), posinf=0.0)
      ax.errorbar(xs, means, yerr=err, marker='o', capsize=3, label=name,
                  color=colours[name])
    for c in free:
      mean, lo, hi = c.interval()
      ax.axhline(mean, color='k', ls='--', lw=1, label='noise-free')
      if math.isfinite(lo):
        ax.axhspan(lo, hi, color='k', alpha=0.08)
    ax.set_xscale('log', base=2)
    ax.set_xlabel('bits per coordinate')
    ax.set_title(f'ε = {eps:g}')
  axes[0].set_ylabel('final test accuracy (mean, 95% CI)')
  axes[-1].legend(fontsize=7, loc='lower right')
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
