"""The equal-privacy FL table: a pre-specified endpoint per run, paired
comparisons by seed against the Gaussian and at equal bits (Holm, TOST), the
excursions beside the endpoint, the seeds the precision targets need, and the
"which mechanism should I use?" table.

A cell is (mechanism, ε, bits); its runs differ in the seed, and seed s of
every cell is one block (the same client sampling; where the training seeds
them, the same initial model and noise streams). The design, in order:

* **Endpoint** (`ENDPOINTS`): a run's figure is its mean test accuracy over
  the evaluations at rounds >= 0.9·R (R rounds), at least 5 of them
  (`PRESPECIFIED`; --eval_every 5 gives 7 at R = 300). A table whose schedule
  cannot give that falls to the mean over the last third of the rounds (at
  least 3 evaluations), then to the last evaluation; the report names the
  endpoint it used.
* **Excursions**, reported beside the endpoint and not folded into it: per
  run, the evaluations more than `DROP` below the previous one, and the
  diverged rounds: after the first `SETTLING` of the rounds, those whose
  training loss is above the run's first round (the untrained model) or not
  finite. Beside them the median fraction of clients clipped per round,
  which describes the clip (a tuned clip binds for most clients) and is not
  an excursion.
* **Comparisons** (tff_quant.program.comparisons): two families, each with
  family-wise error rate `comparisons.ALPHA` by Holm's step-down: every cell
  against the Gaussian at its ε (`REFERENCE`), and every pair of cells at the
  same ε and bits. Verdicts: better / worse / equivalent (TOST at ±`MARGIN`)
  / inconclusive.
* **Precision**: from the pooled sd of the paired differences against the
  Gaussian at each ε, the seeds a 95% half-width of `HALF_WIDTH_TARGETS[ε]`
  needs, and the seeds TOST needs to show a zero difference equivalent.
* **Which mechanism should I use?** Per ε and bit budget: the cells within
  the budget shown equivalent to the Gaussian, and the cheapest in bits of
  them; "none shown equivalent" otherwise, with the seeds and half-widths.

Used by experiments/fl_table.py (the runs live there).
"""

import dataclasses
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from tff_quant.program import comparisons, results_io

FLOAT_BITS = 32   # the central Gaussian sends floats
REFERENCE = 'gaussian'   # every cell is compared with it at the same ε
MARGIN = comparisons.MARGIN
ALPHA = comparisons.ALPHA
#: An excursion: an evaluation more than DROP below the run's previous one.
DROP = 0.10
#: A divergence: after this fraction of the rounds, a round whose training
#: loss (metrics.csv train_loss) is above the run's first or not finite.
SETTLING = 0.10
#: The 95% half-widths of a paired difference the table aims at, per ε.
HALF_WIDTH_TARGETS = {3.0: 0.03, 10.0: 0.02}
#: The power the seed counts for TOST are computed at.
POWER = 0.8
#: "Equal ε": every run's reported ε within this relative distance of its
#: cell's target (the table's calibrations search to this width).
EQUAL_EPSILON_RTOL = 1e-3


def epsilon_holds(epsilon: float, target: float,
                  rtol: float = EQUAL_EPSILON_RTOL) -> bool:
  """Whether a calibrated mechanism's ε still serves its cell: at most the
  target (never above what the table says) and within `rtol` below it.

  Args:
    epsilon: the ε the accountant now computes for the mechanism.
    target: the cell's ε.
    rtol: the relative width of "equal ε".

  Returns:
    target·(1 - rtol) <= epsilon <= target.
  """
  return target * (1 - rtol) <= epsilon <= target


@dataclasses.dataclass(frozen=True)
class Endpoint:
  """The mean test accuracy over the evaluations at rounds >= R - ⌊f·R⌋.

  Args:
    fraction: f, the last part of the R rounds the window spans.
    min_evaluations: the fewest evaluations the window must hold.
    name: how the report names it.
  """
  fraction: float
  min_evaluations: int
  name: str

  def first_round(self, rounds: int) -> int:
    """The window's first round."""
    return rounds - math.floor(self.fraction * rounds + 1e-9)

  def window(self, evaluations: Sequence[Tuple[int, float]], rounds: int
             ) -> List[float]:
    """The accuracies at rounds in [first_round, rounds]."""
    first = self.first_round(rounds)
    return [a for r, a in evaluations if first <= r <= rounds]

  def holds(self, evaluations: Sequence[Tuple[int, float]], rounds: int
            ) -> bool:
    """Whether the window holds at least min_evaluations."""
    return len(self.window(evaluations, rounds)) >= self.min_evaluations

  def value(self, evaluations: Sequence[Tuple[int, float]], rounds: int
            ) -> float:
    """The endpoint of one run.

    Raises:
      ValueError: fewer than min_evaluations in the window.
    """
    values = self.window(evaluations, rounds)
    if len(values) < self.min_evaluations:
      raise ValueError(f'{len(values)} evaluations at rounds >= '
                       f'{self.first_round(rounds)}; the endpoint '
                       f'"{self.name}" needs {self.min_evaluations}')
    return float(np.mean(values))


PRESPECIFIED = Endpoint(0.1, 5, 'mean test accuracy over the evaluations in '
                        'the last 10% of rounds (at least 5)')
LAST_THIRD = Endpoint(1 / 3, 3, 'mean test accuracy over the evaluations in '
                      'the last third of rounds (at least 3)')
LAST = Endpoint(0.0, 1, 'test accuracy at the last round')
ENDPOINTS = (PRESPECIFIED, LAST_THIRD, LAST)


def choose_endpoint(runs: Sequence[Sequence[Tuple[int, float]]], rounds: int
                    ) -> Endpoint:
  """The first of ENDPOINTS that every run's evaluations can give (the table's
  evaluation schedule decides it, before any result).

  Args:
    runs: each finished run's [(round, test accuracy)].
    rounds: the rounds of every run.

  Returns:
    PRESPECIFIED where the schedule allows it; else LAST_THIRD; else LAST.

  Raises:
    ValueError: a run without an evaluation at its last round.
  """
  for endpoint in ENDPOINTS:
    if all(endpoint.holds(run, rounds) for run in runs):
      return endpoint
  raise ValueError(f'a finished run has no evaluation at round {rounds}')


@dataclasses.dataclass
class Run:
  """One finished run's evaluations, per-round clipping and training loss,
  from metrics.csv.

  Args:
    evaluations: [(round, test accuracy)] where the run evaluated.
    clipped: the fraction of each round's clients clipped, or None where the
      run does not record it (TFF's aggregators).
    losses: each round's training loss, or None where not recorded.
    wire_bits: the bits per coordinate the run's secure sum carried (its
      field: metrics.csv's `secure_sum_bits`, the largest over rounds), or
      None where not recorded (TFF's aggregators).
  """
  evaluations: List[Tuple[int, float]]
  clipped: Optional[List[float]] = None
  losses: Optional[List[float]] = None
  wire_bits: Optional[int] = None


def _number(text) -> float:
  try:
    return float(text)
  except (TypeError, ValueError):
    return math.nan


def read_run(run_dir: str, column: str = 'test_accuracy') -> Run:
  """The Run of `run_dir`/metrics.csv (columns round, `column` (the
  evaluations: test_accuracy, or validation_accuracy for a run evaluated on
  a validation split) and, where recorded, clipped_clients_fraction and
  train_loss)."""
  rows = results_io.read_csv(os.path.join(run_dir, 'metrics.csv'))
  evaluations = [(int(row['round']), _number(row.get(column)))
                 for row in rows]
  evaluations = [(r, a) for r, a in evaluations if math.isfinite(a)]
  def column_of(name):
    if not rows or name not in rows[0]:
      return None
    return [_number(row[name]) for row in rows]
  sum_bits = [b for b in column_of('secure_sum_bits') or ()
              if math.isfinite(b)]
  return Run(evaluations, column_of('clipped_clients_fraction'),
             column_of('train_loss'),
             int(max(sum_bits)) if sum_bits else None)


def drops(evaluations: Sequence[Tuple[int, float]], drop: float = DROP) -> int:
  """The evaluations more than `drop` below the one before."""
  accs = [a for _, a in sorted(evaluations)]
  return sum(b < a - drop for a, b in zip(accs, accs[1:]))


def diverged_rounds(losses: Optional[Sequence[float]],
                    settling: float = SETTLING) -> Optional[int]:
  """Rounds after the first `settling` fraction of them whose training loss
  is above the first round's (the untrained model's) or not finite (None:
  not recorded). A run that learns stays below it; one that blows up climbs
  above it, whatever its clipping rate."""
  if not losses:
    return None
  first = losses[0]
  return sum(not loss <= first
             for loss in losses[int(len(losses) * settling):])


def median_clipped(fractions: Optional[Sequence[float]]) -> Optional[float]:
  """The median over rounds of the fraction of clients clipped (None: not
  recorded)."""
  finite = [f for f in fractions or () if math.isfinite(f)]
  return float(np.median(finite)) if finite else None


@dataclasses.dataclass
class Cell:
  """One (mechanism, ε, bits) cell and its seeds' figures.

  Args:
    mechanism, epsilon, bits: the cell (epsilon None: noise-free); `bits` are
      its level bits (docs/bits.md): ⌈log2 L⌉ of one client's level index,
      the modulus bits of a modular sum or TFF peer, 32 for floats.
    accuracies: {seed: the endpoint} of the finished runs.
    epsilons: {seed: the whole-model ε its run reports (proved)}.
    reason: why the cell has no runs (calibration refused it), else ''.
    params: the calibrated parameters, as text.
    finals: {seed: test accuracy at the last round}.
    drops: {seed: evaluations more than DROP below the previous one}.
    diverged: {seed: its diverged rounds, or None where not recorded}.
    clipped: {seed: its median fraction of clients clipped per round, or
      None where not recorded}.
    wire_bits: the bits per coordinate its secure sum carries (docs/bits.md;
      what each client uploads per coordinate), from its runs where they
      record it, else as given (a TFF peer's modulus bits, 32 for floats);
      None where unknown (no run).
    papers_epsilon: the same noise's ε in the papers' convention
      (add/remove, Poisson; `accounting.conventions`), printed beside ours
      for comparison with published results; None where not computed.
  """
  mechanism: str
  epsilon: Optional[float]
  bits: int
  accuracies: Dict[int, float] = dataclasses.field(default_factory=dict)
  epsilons: Dict[int, float] = dataclasses.field(default_factory=dict)
  reason: str = ''
  params: str = ''
  finals: Dict[int, float] = dataclasses.field(default_factory=dict)
  drops: Dict[int, int] = dataclasses.field(default_factory=dict)
  diverged: Dict[int, Optional[int]] = dataclasses.field(default_factory=dict)
  clipped: Dict[int, Optional[float]] = dataclasses.field(
      default_factory=dict)
  wire_bits: Optional[int] = None
  papers_epsilon: Optional[float] = None

  @property
  def seeds(self) -> int:
    return len(self.accuracies)

  @property
  def budget_bits(self) -> int:
    """The bits it costs on the wire per coordinate: `wire_bits` where
    known, else `bits`."""
    return self.bits if self.wire_bits is None else self.wire_bits

  @property
  def label(self) -> str:
    if self.budget_bits == self.bits:
      return f'{self.mechanism} ({self.bits} bits)'
    return f'{self.mechanism} ({self.bits} level, {self.wire_bits} wire bits)'

  def epsilon_gap(self) -> float:
    """The largest relative distance of a run's reported ε from the
    cell's target (0 without runs or for the noise-free cell)."""
    if self.epsilon is None or not self.epsilons:
      return 0.0
    return max(abs(e - self.epsilon) / self.epsilon
               for e in self.epsilons.values())

  def add_run(self, seed: int, run: Run, endpoint: Endpoint, rounds: int,
              epsilon: float) -> None:
    """Records one finished run under `seed`."""
    self.accuracies[seed] = endpoint.value(run.evaluations, rounds)
    self.finals[seed] = LAST.value(run.evaluations, rounds)
    self.epsilons[seed] = epsilon
    self.drops[seed] = drops(run.evaluations)
    self.diverged[seed] = diverged_rounds(run.losses)
    self.clipped[seed] = median_clipped(run.clipped)
    if run.wire_bits is not None:
      self.wire_bits = max(run.wire_bits, self.wire_bits or 0)

  def interval(self) -> Tuple[float, float, float]:
    """(mean, low, high): the 95% Student-t interval of the mean endpoint
    over the seeds (nan without runs; a single run has an infinite one)."""
    values = np.array(list(self.accuracies.values()), np.float64)
    if not values.size:
      return math.nan, math.nan, math.nan
    mean, low, high = comparisons.interval(values)
    return float(mean), float(low), float(high)

  def excursions(self) -> Tuple[str, str, str]:
    """(runs with a drop, rounds diverged, clients clipped): e.g.
    ('1 of 3 (seed 1)', '7 in 1 of 3', '0.84 (0.80–0.88)'), with
    'not recorded' where no run records the column."""
    if not self.seeds:
      return '', '', ''
    hit = sorted(s for s, k in self.drops.items() if k)
    drop = f'{len(hit)} of {self.seeds}' + (
        f' (seed {", ".join(map(str, hit))})' if hit else '')
    counts = [k for k in self.diverged.values() if k is not None]
    diverged = ('not recorded' if not counts else
                f'{sum(counts)} in {sum(k > 0 for k in counts)} of '
                f'{len(counts)}')
    medians = sorted(m for m in self.clipped.values() if m is not None)
    clipped = ('not recorded' if not medians else
               f'{np.median(medians):.2f}' + (
                   f' ({medians[0]:.2f}–{medians[-1]:.2f})'
                   if len(medians) > 1 else ''))
    return drop, diverged, clipped


def eta_hours(left: Sequence[str], done: Sequence[Tuple[str, float]]
              ) -> Optional[float]:
  """Hours the runs left should take (`left`: each one's mechanism), each at
  the mean of its mechanism's finished runs (`done`: (mechanism, seconds)),
  else at the mean of all; None before any run has finished."""
  if not done:
    return None
  per = {}
  for name, seconds in done:
    per.setdefault(name, []).append(seconds)
  overall = sum(t for _, t in done) / len(done)
  return sum(sum(per[n]) / len(per[n]) if n in per else overall
             for n in left) / 3600


def _private(cells: Sequence[Cell]) -> List[Cell]:
  return sorted((c for c in cells if c.epsilon is not None and c.seeds),
                key=lambda c: (c.epsilon, c.bits, c.mechanism))


def reference_family(cells: Sequence[Cell]) -> List[Tuple[Cell, Cell]]:
  """(cell, the Gaussian at its ε) for every trained private cell but the
  Gaussian's: the first family."""
  private = _private(cells)
  ref = {c.epsilon: c for c in private if c.mechanism == REFERENCE}
  return [(c, ref[c.epsilon]) for c in private
          if c.mechanism != REFERENCE and c.epsilon in ref]


def equal_bits_family(cells: Sequence[Cell]) -> List[Tuple[Cell, Cell]]:
  """(a, b) for every pair of trained private cells at the same ε and bits,
  a before b by name: the second family."""
  groups = {}
  for c in _private(cells):
    groups.setdefault((c.epsilon, c.bits), []).append(c)
  return [(a, b) for _, group in sorted(groups.items())
          for i, a in enumerate(group) for b in group[i + 1:]]


@dataclasses.dataclass
class Analysis:
  """The two families' comparisons (comparisons.Comparison, a and b Cells)."""
  against_reference: List[comparisons.Comparison]
  equal_bits: List[comparisons.Comparison]
  margin: float
  alpha: float


def analyse(cells: Sequence[Cell], margin: float = MARGIN,
            alpha: float = ALPHA) -> Analysis:
  """Both families, each Holm-adjusted on its own.

  Args:
    cells: the table's cells.
    margin: the equivalence margin (fixed before the runs).
    alpha: the family-wise error rate of each family.

  Returns:
    The Analysis.
  """
  def run(family):
    return comparisons.compare(
        [(a, b, a.accuracies, b.accuracies) for a, b in family], margin, alpha)
  return Analysis(run(reference_family(cells)), run(equal_bits_family(cells)),
                  margin, alpha)


@dataclasses.dataclass
class Precision:
  """What the Gaussian family at one ε says about the seeds needed.

  Args:
    epsilon: the ε.
    comparisons: the comparisons pooled.
    seeds: the paired seeds most comparisons have.
    sd, df: the pooled sd of the paired differences and its degrees of
      freedom (the comparisons share the Gaussian's runs, so df overstates
      the information).
    half_width: the 95% half-width that sd gives at `seeds`.
    target: the half-width aimed at.
    seeds_for_target: the fewest seeds whose half-width at sd meets it.
    seeds_for_target_assured: the fewest whose own half-width meets it with
      probability POWER.
    seeds_for_tost: the fewest with which TOST at alpha shows a zero
      difference equivalent with probability POWER.
    seeds_for_tost_holm: the same at alpha/m, Holm's first step in a family
      of m comparisons.
    family_size: that m.
  """
  epsilon: float
  comparisons: int
  seeds: int
  sd: float
  df: int
  half_width: float
  target: float
  seeds_for_target: int
  seeds_for_target_assured: int
  seeds_for_tost: int
  seeds_for_tost_holm: int
  family_size: int


def precision(analysis: Analysis,
              targets: Optional[Dict[float, float]] = None) -> List[Precision]:
  """A Precision per ε with two or more paired seeds against the Gaussian.

  Args:
    analysis: from `analyse`.
    targets: {ε: 95% half-width aimed at}; default HALF_WIDTH_TARGETS, and
      the margin at any other ε.

  Returns:
    One per ε, in order.
  """
  targets = HALF_WIDTH_TARGETS if targets is None else targets
  family = analysis.against_reference
  out = []
  for eps in sorted({c.a.epsilon for c in family}):
    these = [c for c in family if c.a.epsilon == eps and c.n >= 2]
    if not these:
      continue
    sd, df = comparisons.pooled_sd([c.differences for c in these])
    if not sd > 0:
      continue
    seeds = int(np.bincount([c.n for c in these]).argmax())
    target = targets.get(eps, analysis.margin)
    out.append(Precision(
        eps, len(these), seeds, sd, df,
        comparisons.expected_half_width(sd, seeds), target,
        comparisons.seeds_for_half_width(sd, target),
        comparisons.seeds_for_half_width(sd, target, assurance=POWER),
        comparisons.seeds_for_equivalence(sd, analysis.margin, analysis.alpha,
                                          POWER),
        comparisons.seeds_for_equivalence(
            sd, analysis.margin, analysis.alpha / len(family), POWER),
        len(family)))
  return out


def _diff(c: comparisons.Comparison) -> str:
  if c.n < 2:
    return f'{c.mean:+.3f} ({c.n} seed)' if c.n else 'no shared seed'
  return f'{c.mean:+.3f} [{c.low:+.3f}, {c.high:+.3f}]'


def _range(values: Sequence[float]) -> str:
  low, high = min(values), max(values)
  return f'{low:.3f}' if f'{low:.3f}' == f'{high:.3f}' else (
      f'{low:.3f}–{high:.3f}')


def _seeds(values: Sequence[int]) -> str:
  low, high = min(values), max(values)
  return f'{low} seeds' if low == high else f'{low}–{high} seeds'


def which_mechanism(analysis: Analysis, budgets: Sequence[int]
                    ) -> List[Tuple[float, int, str, str, str]]:
  """[(ε, bit budget, equivalent, cheapest, at these bits)] per ε and budget.

  Among the cells at that ε whose wire bits (`Cell.budget_bits`: what the
  secure sum carries per coordinate) are <= the budget (the Gaussian's
  floats excepted): those shown equivalent to the Gaussian, and the cheapest
  in wire bits of them (all of the fewest). The last entry lists the cells
  the budget adds to the one before (bits in (previous budget, budget]) with
  their difference to the Gaussian, its 95% interval, and the verdict unless
  inconclusive.

  Args:
    analysis: from `analyse`.
    budgets: wire bits per coordinate, increasing.

  Returns:
    The rows. Where no candidate is equivalent: "none shown equivalent (n
    seeds; half-width h > margin m)", or, where some interval is narrower than
    the margin, the smallest Holm-adjusted TOST p-value instead.
  """
  family = analysis.against_reference
  out = []
  for eps in sorted({c.a.epsilon for c in family}):
    below = -math.inf
    for budget in budgets:
      cands = sorted((c for c in family
                      if c.a.epsilon == eps and c.a.budget_bits <= budget),
                     key=lambda c: (c.a.budget_bits, c.a.mechanism))
      new = [c for c in cands if c.a.budget_bits > below]
      below = budget
      listed = '; '.join(
          f'{c.a.label}: {_diff(c)}' +
          ('' if c.verdict == 'inconclusive' else f' **{c.verdict}**')
          for c in new) or '—'
      if not cands:
        out.append((eps, budget, 'no trained cell within the budget', '—',
                    listed))
        continue
      same = [c for c in cands if c.verdict == 'equivalent']
      if same:
        fewest = min(c.a.budget_bits for c in same)
        out.append((eps, budget, ', '.join(c.a.label for c in same),
                    ', '.join(c.a.label for c in same
                              if c.a.budget_bits == fewest),
                    listed))
        continue
      halves = [c.half_width for c in cands]
      why = (f' > margin {analysis.margin:g}' if min(halves) > analysis.margin
             else '; smallest Holm-adjusted TOST p '
             f'{_p(min(c.p_equivalence_holm for c in cands))} > '
             f'{analysis.alpha:g}')
      out.append((eps, budget,
                  f'none shown equivalent ({_seeds([c.n for c in cands])}; '
                  f'half-width {_range(halves)}{why})', '—', listed))
  return out


COLUMNS = ('mechanism', 'epsilon', 'bits', 'wire_bits', 'seeds',
           'endpoint_mean',
           'ci95_low', 'ci95_high', 'endpoints', 'last_round_accuracies',
           'runs_with_drop', 'diverged_rounds', 'clients_clipped_median',
           'epsilons_reported', 'params', 'reason')


def _p(p: float) -> str:
  return '<0.001' if p < 0.001 else f'{p:.3f}'


def _comparison_table(family: Sequence[comparisons.Comparison], first: str,
                      pair) -> List[str]:
  md = [f'| ε | {first} | seeds | difference [95% CI] | no difference: p / '
        'Holm | TOST (outside ±margin): p / Holm | verdict |',
        '|---|---|---|---|---|---|---|']
  for c in family:
    md.append(f'| {c.a.epsilon:g} | {pair(c)} | {c.n} | {_diff(c)} | '
              f'{_p(c.p_difference)} / {_p(c.p_difference_holm)} | '
              f'{_p(c.p_equivalence)} / {_p(c.p_equivalence_holm)} | '
              f'**{c.verdict}** |')
  return md


def _csv_rows(ordered: Sequence[Cell]) -> List[list]:
  """table.csv's rows, one per cell (COLUMNS)."""
  rows = []
  for c in ordered:
    mean, lo, hi = c.interval()
    drop, diverged, clip = c.excursions()
    rows.append([c.mechanism, '' if c.epsilon is None else c.epsilon, c.bits,
                 '' if c.wire_bits is None else c.wire_bits, c.seeds, mean,
                 lo, hi,
                 ' '.join(f'{s}:{a:.4f}' for s, a in sorted(c.accuracies.items())),
                 ' '.join(f'{s}:{a:.4f}' for s, a in sorted(c.finals.items())),
                 drop, diverged, clip,
                 ' '.join(f'{s}:{e:.4g}' for s, e in sorted(c.epsilons.items())),
                 c.params, c.reason])
  return rows


def _endpoint_section(endpoint: Endpoint, rounds: Optional[int]) -> List[str]:
  """The endpoint named (and whether it is the pre-specified one), and how
  excursions are counted beside it."""
  window = ('' if rounds is None else
            f', the evaluations at rounds {endpoint.first_round(rounds)} to '
            f'{rounds}')
  return [f'**Endpoint:** {endpoint.name}{window}' + (
      ' (pre-specified).' if endpoint == PRESPECIFIED else
      '. This departs from the pre-specified endpoint '
      f'({PRESPECIFIED.name}): these runs were not evaluated often '
      'enough for it.'), '',
          f'Excursions are counted beside it, not folded in: runs with an '
          f'evaluation more than {DROP:g} below the previous one, and diverged '
          f'rounds (after the first {SETTLING:.0%} of the rounds, a training '
          'loss above the run\'s first round or not finite). Beside them the '
          'median over rounds of the fraction of clients clipped (median over '
          'the runs, and their range; not recorded by TFF\'s aggregators): it '
          'describes the clip, not an excursion.']


def _cells_section(ordered: Sequence[Cell], rows: Sequence[list]) -> List[str]:
  """The cells' table (from their csv rows) and the equal-ε line."""
  md = ['## Cells', '',
        '| mechanism | ε | level bits | wire bits | seeds | endpoint (95% CI) '
        '| last round | runs with a drop | rounds diverged (in runs) | '
        'clients clipped | ε reported | note |',
        '|---|---|---|---|---|---|---|---|---|---|---|---|']
  for c, row in zip(ordered, rows):
    name, eps, bits, wire, seeds, mean, lo, hi = row[:8]
    acc = ('' if not seeds else
           f'{mean:.3f} [{lo:.3f}, {hi:.3f}]' if math.isfinite(lo)
           else f'{mean:.3f} (1 seed)')
    last = f'{np.mean(list(c.finals.values())):.3f}' if c.finals else ''
    reported = row[13].replace(' ', ', ')
    if c.papers_epsilon is not None:
      reported += f' (papers\' convention: {c.papers_epsilon:.3g})'
    note = row[15] or (row[14] if seeds else 'not run yet')
    md.append(f'| {name} | {eps} | {bits} | {wire or "—"} | {seeds} | {acc} '
              f'| {last} | {row[10]} | {row[11]} | {row[12]} | {reported} | '
              f'{note} |')
  unequal = [f'{c.label} at ε = {c.epsilon:g} ({c.epsilon_gap():.2%})'
             for c in ordered if c.epsilon_gap() > EQUAL_EPSILON_RTOL]
  md += ['', f'Equal ε: every run\'s reported ε is within '
         f'{EQUAL_EPSILON_RTOL:.1%} of its target' + (
             '.' if not unequal else
             ' except ' + '; '.join(unequal) + ' (largest distance).')]
  return md


def _comparisons_section(analysis: Analysis, margin: float,
                         alpha: float) -> List[str]:
  """Both families: against the Gaussian, and pairs at equal ε and bits."""
  n_ref, n_bits = len(analysis.against_reference), len(analysis.equal_bits)
  md = ['## Against the Gaussian (paired by seed)', '',
        f'Each cell minus the Gaussian at its ε, seed by seed. Family: these '
        f'{n_ref} comparisons ({2 * n_ref} hypotheses: no difference, and a '
        f'difference of at least ±{margin:g}), Holm\'s step-down at '
        f'family-wise {alpha:g}, counting comparisons. Verdicts: '
        f'*equivalent* where TOST shows the difference inside ±{margin:g}; '
        '*better*/*worse* where "no difference" is rejected; else '
        '*inconclusive* (not a tie: these runs cannot tell). The 95% '
        'intervals are per comparison, not simultaneous.', '']
  md += _comparison_table(analysis.against_reference, 'cell (minus the '
                          'Gaussian)', lambda c: c.a.label)
  md += ['', '## Pairs at equal ε and bits', '',
         f'a minus b, seed by seed. Family: these {n_bits} comparisons, Holm '
         f'as above, on its own.', '']
  md += _comparison_table(analysis.equal_bits, 'a − b (bits)',
                          lambda c: f'{c.a.mechanism} − {c.b.mechanism} '
                          f'({c.a.bits})')
  return md


def _precision_section(analysis: Analysis, alpha: float) -> List[str]:
  """Half-widths now, and the seeds each precision target needs."""
  md = ['## Precision', '',
        'From the pooled sd s of the paired differences against the Gaussian '
        'at each ε: the 95% half-width at n seeds is t₀.₉₇₅,ₙ₋₁·s/√n; the '
        'seeds a target needs are the fewest n meeting it (at s; and with '
        f'probability {POWER:g} for the run\'s own sd, (n−1)S²/s² ~ χ²ₙ₋₁); '
        'TOST shows a zero difference equivalent when |mean| + '
        't₁₋α,ₙ₋₁·S/√n < margin.', '',
        '| ε | comparisons | pooled sd (df) | 95% half-width now | target | '
        f'seeds for it (at s / with {POWER:g} probability) | seeds for TOST '
        f'(power {POWER:g}, zero difference; α = {alpha:g} / Holm\'s first '
        'step) |', '|---|---|---|---|---|---|---|']
  for p in precision(analysis):
    md.append(f'| {p.epsilon:g} | {p.comparisons} | {p.sd:.4f} ({p.df}) | '
              f'{p.half_width:.3f} at {p.seeds} seeds | {p.target:g} | '
              f'{p.seeds_for_target} / {p.seeds_for_target_assured} | '
              f'{p.seeds_for_tost} / {p.seeds_for_tost_holm} (α = '
              f'{alpha:g}/{p.family_size}) |')
  return md


def _which_section(analysis: Analysis, budgets: Sequence[int],
                   margin: float) -> List[str]:
  """"Which mechanism should I use?" per ε and bit budget."""
  md = ['## Which mechanism should I use?', '',
        f'| ε | wire bits per coordinate at most | equivalent to the Gaussian '
        f'(TOST ±{margin:g}, Holm) | cheapest of them | cells at these bits '
        'minus the Gaussian [95% CI] |', '|---|---|---|---|---|']
  for eps, budget, same, cheapest, listed in which_mechanism(analysis, budgets):
    md.append(f'| {eps:g} | {budget} | {same} | {cheapest} | {listed} |')
  return md


def write_report(cells: Sequence[Cell], output_dir: str, budgets: Sequence[int],
                 header: str, endpoint: Endpoint = PRESPECIFIED,
                 margin: float = MARGIN, alpha: float = ALPHA,
                 rounds: Optional[int] = None, provenance: str = '') -> str:
  """table.csv and table.md (cells, comparisons, precision, which mechanism)
  in `output_dir`.

  Args:
    cells: the table's cells (their accuracies: `endpoint`).
    output_dir: where to write.
    budgets: the bit budgets of "which mechanism should I use?".
    header: the Markdown above the cells (title and setting).
    endpoint: the endpoint the cells hold, named in the report.
    margin: the equivalence margin.
    alpha: each family's family-wise error rate.
    rounds: the runs' rounds, to name the endpoint's window (optional).
    provenance: Markdown closing "which mechanism" (e.g. the runs and hours
      behind it, and the differences' plot).

  Returns:
    The Markdown.
  """
  analysis = analyse(cells, margin, alpha)
  ordered = sorted(cells, key=lambda c: (c.epsilon or math.inf, c.bits,
                                         c.mechanism))
  rows = _csv_rows(ordered)
  results_io.write_csv(os.path.join(output_dir, 'table.csv'), COLUMNS, rows)
  md = [header, '']
  for section in (_endpoint_section(endpoint, rounds),
                  _cells_section(ordered, rows),
                  _comparisons_section(analysis, margin, alpha),
                  _precision_section(analysis, alpha),
                  _which_section(analysis, budgets, margin)):
    md += section + ['']
  md = md[:-1] + (['', provenance] if provenance else [])
  text = '\n'.join(md) + '\n'
  with open(os.path.join(output_dir, 'table.md'), 'w') as f:
    f.write(text)
  return text


def plot(cells: Sequence[Cell], path: str, title: str) -> None:
  """The endpoint against wire bits, one panel per ε, a line with 95% error bars
  per mechanism (the noise-free run as a band)."""
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
      pts = sorted(((c.budget_bits, c) for c in cells
                    if c.mechanism == name and c.epsilon == eps and c.seeds),
                   key=lambda p: p[0])
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
    ax.set_xlabel('wire bits per coordinate (the secure sum\'s field)')
    ax.set_title(f'ε = {eps:g}')
  axes[0].set_ylabel('endpoint test accuracy (mean, 95% CI)')
  axes[-1].legend(fontsize=7, loc='lower right')
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


_COLOURS = {'better': 'tab:green', 'worse': 'tab:red',
            'equivalent': 'tab:blue', 'inconclusive': 'tab:gray'}


def plot_differences(analysis: Analysis, path: str, title: str) -> None:
  """The paired differences with their 95% intervals: one column per ε, the
  comparisons with the Gaussian above and the pairs at equal bits below;
  each seed's difference as a dot, the ±margin band shaded, the colour the
  verdict."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  from matplotlib.lines import Line2D  # pylint: disable=g-import-not-at-top
  families = [('minus the Gaussian', analysis.against_reference,
               lambda c: c.a.label),
              ('pairs at equal bits (a − b)', analysis.equal_bits,
               lambda c: f'{c.a.mechanism} − {c.b.mechanism} ({c.a.bits})')]
  eps_values = sorted({c.a.epsilon for _, f, _ in families for c in f})
  ncol = max(1, len(eps_values))
  heights = [max(1, max([sum(c.a.epsilon == e for c in f)
                          for e in eps_values] or [1])) for _, f, _ in families]
  fig, axes = plt.subplots(2, ncol, squeeze=False,
                           figsize=(6.5 * ncol, 1.5 + 0.32 * sum(heights)),
                           gridspec_kw=dict(height_ratios=heights))
  for row, (what, family, label) in enumerate(families):
    for col, eps in enumerate(eps_values or [None]):
      ax = axes[row][col]
      these = [c for c in family if c.a.epsilon == eps]
      ax.axvspan(-analysis.margin, analysis.margin, color='tab:blue',
                 alpha=0.08)
      ax.axvline(0, color='k', lw=0.8)
      for y, c in enumerate(these):
        colour = _COLOURS[c.verdict]
        if c.n >= 2:
          ax.plot([c.low, c.high], [y, y], color=colour, lw=2)
        ax.plot([c.mean], [y], marker='o', color=colour)
        ax.plot(c.differences, [y + 0.22] * c.n, ls='', marker='.',
                color=colour, alpha=0.6, ms=5)
      ax.set_yticks(range(len(these)))
      ax.set_yticklabels([label(c) for c in these], fontsize=7)
      ax.set_ylim(-0.6, max(len(these), 1) - 0.4)
      ax.invert_yaxis()
      ax.set_title(f'ε = {eps:g}: {what}' if eps is not None else what,
                   fontsize=9)
      ax.set_xlabel('paired difference in endpoint accuracy (95% CI; dots: '
                    'seeds)', fontsize=8)
  handles = [Line2D([], [], color=c, marker='o', lw=2, label=v)
             for v, c in _COLOURS.items()]
  handles.append(plt.Rectangle((0, 0), 1, 1, color='tab:blue', alpha=0.15,
                               label=f'±{analysis.margin:g} (margin)'))
  fig.legend(handles=handles, fontsize=8, loc='lower center',
             ncol=len(handles), frameon=False)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout(rect=(0, 0.04, 1, 1))
  fig.savefig(path, dpi=120)
  plt.close(fig)
