"""The FL validation (docs/fl_validation.md, issue 65): the Gaussian's
dose–response, and the test of the predicted ×G against it.

The plan is pre-registered in docs/fl_validation.md; this module holds its
constants (seeds, doses, endpoint, margins), the runs' names and fl_emnist
commands, and the analysis of the finished run folders:

* **Dose–response** (`fit_dose`): at each ε the central Gaussian, calibrated
  to ε (noise multiplier z_ε), runs at noise multiplier z_ε·√m for the
  variance multipliers m of `MULTIPLIERS`. Its ×G (the debiased error over
  the calibrated Gaussian's, docs/utility.md) is m exactly: the debiased
  error of a Gaussian sum is its variance, m·σ²/n against σ²/n. Per seed s,
  the endpoint is fitted by least squares as a line in x = √m,
  ŷ_s(x) = a_s + b_s·x; the curve is the mean over seeds of ŷ_s(x) and its
  95% band the Student-t interval over the seeds (`comparisons.interval`):
  the seeds are the independent units, whatever one seed's runs share.
* **Residuals** (`residuals`): a cell with predicted ×G r (its
  `predicted_ratio`, on the dose axis) has, per seed, d_s = y_s − ŷ_s(√r);
  their mean and 95% t interval. The predictor is validated when at most
  `allowed_misses(K)` of the K cells' intervals exclude zero.
* **Equivalence** (`equivalence`): every cell minus the calibrated Gaussian
  (m = 1) at its ε, paired by seed, TOST at that ε's margin and Holm over
  the whole family (`comparisons.compare`).

The runner is experiments/fl_validation.py.
"""

import dataclasses
import json
import math
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

from tff_quant import data as data_lib
from tff_quant import mechanisms
from tff_quant import models
from tff_quant.aggregators import peers
from tff_quant.common import dims, validation
from tff_quant.program import comparisons, fl_table, results_io

#: The block seeds (--seed s, --noise_seed NOISE_SEED_OFFSET + s): disjoint
#: from every seed of the tuning and the earlier tables (USED_*).
SEEDS = tuple(range(100, 110))
NOISE_SEED_OFFSET = 1000
#: --seed and --noise_seed of every committed FL run (results/fl_tune,
#: fl_tune_rounds, fl_table, fl_table_tuned, frontier_fl, fl, bq_sgd, qmgeo).
USED_SEEDS = frozenset({0, 1, 2, 3,
                        200, 201, 202})   # experiments/anchor_scale.py's
USED_NOISE_SEEDS = frozenset({1, 2, 1000, 1001, 1002, 1003,
                              1200, 1201, 1202})
EPSILONS = (3.0, 10.0)
#: Noise variance multipliers of the Gaussian's dose–response.
MULTIPLIERS = (1.0, 1.25, 1.5, 2.0, 3.0)
REFERENCE_MULTIPLIER = 1.0
ROUNDS = 500
EVAL_EVERY = 10
#: The endpoint: mean test accuracy at rounds 400, 410, ..., 500.
ENDPOINT = fl_table.Endpoint(0.2, 11, 'mean test accuracy over the '
                             'evaluations in the last 20% of rounds (at '
                             'least 11: rounds 400, 410, ..., 500 at R = 500)')
#: The training that is not tuned per ε (results/fl_table_tuned/config.json).
SETTING = dict(dataset='fashion_mnist', model='small_cnn', rounds=ROUNDS,
               clients_per_round=100, total_clients=3400, split_seed=0,
               rotate=True, coordinate_clip_multiple=3.0,
               eval_every=EVAL_EVERY)
#: Per ε, the tuned training (results/fl_table_tuned/config.json "tuned").
TRAINING = {
    3.0: dict(client_lr=0.2, clip_norm=0.518, server_lr=1.0,
              server_momentum=0.0, server_lr_schedule='cosine'),
    10.0: dict(client_lr=0.2, clip_norm=0.518, server_lr=1.0,
               server_momentum=0.0, server_lr_schedule='constant'),
}
#: The tuned table's endpoints (results/fl_table_tuned/table.csv, 4 seeds):
#: the noise-free cell and the Gaussian at each ε, to 4 decimals.
NOISE_FREE_ENDPOINT = 0.8324
GAUSSIAN_ENDPOINT = {3.0: 0.7653, 10.0: 0.8031}
#: The equivalence margin: this fraction of the cost of privacy at ε
#: (noise-free minus the Gaussian).
MARGIN_FRACTION = 0.25
MARGINS = {eps: MARGIN_FRACTION * (NOISE_FREE_ENDPOINT - g)
           for eps, g in GAUSSIAN_ENDPOINT.items()}
#: The share of 95% intervals expected to cover zero under a right predictor.
COVERAGE = 0.95
#: The fields the runner adds to a run's summary.json (and validation.json).
FIELDS = ('validation_cell', 'validation_kind', 'epsilon_target',
          'variance_multiplier', 'predicted_ratio', 'level_bits', 'wire_bits',
          'noise_multiplier_calibrated')
SIDECAR = 'validation.json'
DOSE, CELL = 'dose', 'cell'


def check_seeds(seeds: Sequence[int]) -> List[int]:
  """The block seeds, refused where they reuse a committed run's seed.

  Args:
    seeds: the --seed values (the noise seed is NOISE_SEED_OFFSET + s).

  Returns:
    The seeds as a list of ints.

  Raises:
    ValueError: a seed below 0, repeated, in USED_SEEDS, or whose noise seed
      is in USED_NOISE_SEEDS (naming `seeds` and the seeds not allowed).
  """
  out = [validation.check_integer('seeds', int(s), 0) for s in seeds]
  if len(set(out)) != len(out):
    raise ValueError(f'seeds must be distinct, got {out}.')
  clash = sorted(s for s in out if s in USED_SEEDS or
                 NOISE_SEED_OFFSET + s in USED_NOISE_SEEDS)
  if clash:
    raise ValueError(
        f'seeds {clash} were used in tuning or an earlier table (seeds '
        f'{sorted(USED_SEEDS)}, noise seeds {sorted(USED_NOISE_SEEDS)}, '
        f'noise seed = {NOISE_SEED_OFFSET} + seed): seeds must avoid them.')
  return out


@dataclasses.dataclass(frozen=True)
class DoseCell:
  """The Gaussian at ε with its noise variance multiplied by `multiplier`."""
  epsilon: float
  multiplier: float

  @property
  def name(self) -> str:
    """gaussian_eps<ε>_m<m>: the cell's folder prefix."""
    return f'gaussian_eps{self.epsilon:g}_m{self.multiplier:g}'


def dose_cells(epsilons: Sequence[float] = EPSILONS,
               multipliers: Sequence[float] = MULTIPLIERS) -> List[DoseCell]:
  """The dose–response cells, ε-major.

  Raises:
    ValueError: an ε not > 0, a multiplier not >= 1 (a dose adds noise to
      the calibrated Gaussian), or no multiplier 1 (the reference).
  """
  eps = [validation.check_positive('epsilons', float(e)) for e in epsilons]
  mult = [validation.check_number('multipliers', float(m), 1.0)
          for m in multipliers]
  if REFERENCE_MULTIPLIER not in mult:
    raise ValueError(f'multipliers must include {REFERENCE_MULTIPLIER:g} '
                     f'(the calibrated Gaussian), got {mult}.')
  return [DoseCell(e, m) for e in eps for m in mult]


def run_name(cell: DoseCell, seed: int) -> str:
  """A run's folder name under runs/: <cell>_s<seed>."""
  return f'{cell.name}_s{seed}'


def planned_runs(cells: Sequence[DoseCell], seeds: Sequence[int]
                 ) -> List[Tuple[DoseCell, int]]:
  """(cell, seed) seed-major: every cell's first seed before any second, so
  a partial folder covers every dose."""
  return [(c, s) for s in seeds for c in cells]


def scaled_noise_multiplier(noise_multiplier: float, multiplier: float
                            ) -> float:
  """z·√m: the noise std that multiplies the Gaussian's variance by m.

  Raises:
    ValueError: z not > 0 or m not > 0.
  """
  validation.check_positive('noise_multiplier', noise_multiplier)
  validation.check_positive('multiplier', multiplier)
  return noise_multiplier * math.sqrt(multiplier)


def stored_calibration(path: str, epsilon: float, setting: Mapping
                       ) -> Optional[float]:
  """The Gaussian's noise multiplier an FL table folder stored for ε, where
  that table ran the same schedule (rounds, clients per round, population,
  δ = 1/population: all the central Gaussian's RDP depends on); else None.

  Args:
    path: the table's calibrations.json (its config.json beside it).
    epsilon: the target ε.
    setting: this plan's rounds, clients_per_round, total_clients.

  Returns:
    The stored noise multiplier of `gaussian_eps<ε>_b32`, or None.
  """
  config_path = os.path.join(os.path.dirname(path), 'config.json')
  if not (os.path.exists(path) and os.path.exists(config_path)):
    return None
  with open(config_path) as f:
    config = json.load(f)
  with open(path) as f:
    calibrations = json.load(f)
  same = all(config.get(k) == setting[k] for k in
             ('rounds', 'clients_per_round', 'total_clients'))
  same = same and math.isclose(config.get('delta', math.nan),
                               1 / setting['total_clients'])
  entry = calibrations.get(f'gaussian_eps{epsilon:g}_b{fl_table.FLOAT_BITS}',
                           {})
  if not same or 'noise_multiplier' not in entry.get('params', {}):
    return None
  return float(entry['params']['noise_multiplier'])


def calibrate_gaussian(epsilon: float, setting: Mapping, clip_norm: float
                       ) -> float:
  """The central Gaussian's noise multiplier z for whole-model ε over the
  setting's schedule (δ = setting['delta']), as the FL table calibrates it
  (`aggregators.peers.calibrate`, RDP of the subsampled Gaussian, z searched
  to 0.01%), d counted from the model's layer shapes (`models.param_count`:
  no TensorFlow). Run it in a child (`isolated.call_in_child`), as
  experiments/fl_table.py does.

  Args:
    epsilon: the target ε (> 0).
    setting: dataset, model, rotate, rounds, clients_per_round,
      total_clients, delta.
    clip_norm: the ℓ2 clip.

  Returns:
    z, the smallest noise multiplier meeting (ε, δ).

  Raises:
    ValueError: bad input, or a target out of reach.
  """
  dim = dims.sent_dim(models.param_count(setting['model'],
                                         *data_lib.SHAPES[setting['dataset']]),
                      rotate=setting['rotate'])
  return peers.calibrate('gaussian', epsilon, setting['delta'],
                         setting['rounds'], setting['clients_per_round'],
                         setting['total_clients'], dim,
                         clip_norm).noise_multiplier


def fl_emnist_args(setting: Mapping, training: Mapping, noise_multiplier: float,
                   seed: int, run_dir: str, data_dir: Optional[str] = None
                   ) -> List[str]:
  """The flags of `python -m experiments.fl_emnist` for one Gaussian run.

  Args:
    setting: SETTING's keys (dataset, model, rounds, ...).
    training: one ε's TRAINING entry.
    noise_multiplier: the Gaussian's z (already scaled by √m).
    seed: the block seed.
    run_dir: the run's folder.
    data_dir: the Fashion-MNIST folder, or None for the default.

  Returns:
    The flags, in a fixed order.
  """
  return _run_args(setting, training, 'gaussian',
                   f'noise_multiplier={noise_multiplier!r}', seed, run_dir,
                   data_dir)


def _run_args(setting, training, mechanism, params_text, seed, run_dir,
              data_dir, extra=()):
  args = [f'--dataset={setting["dataset"]}', f'--mechanism={mechanism}',
          f'--mechanism_params={params_text}',
          f'--rounds={setting["rounds"]}',
          f'--clients_per_round={setting["clients_per_round"]}',
          f'--total_clients={setting["total_clients"]}',
          f'--model={setting["model"]}',
          f'--clip_norm={training["clip_norm"]}',
          f'--client_lr={training["client_lr"]}',
          f'--server_lr={training["server_lr"]}',
          f'--server_momentum={training["server_momentum"]}',
          f'--server_lr_schedule={training["server_lr_schedule"]}',
          f'--coordinate_clip_multiple={setting["coordinate_clip_multiple"]}',
          '--rotate' if setting['rotate'] else '--norotate',
          f'--seed={seed}', f'--split_seed={setting["split_seed"]}',
          f'--noise_seed={NOISE_SEED_OFFSET + seed}',
          f'--eval_every={setting["eval_every"]}',
          f'--root_output_dir={os.path.dirname(run_dir)}',
          f'--experiment_name={os.path.basename(run_dir)}', *extra]
  if data_dir:
    args.append(f'--data_dir={data_dir}')
  return args


@dataclasses.dataclass(frozen=True)
class PlannedCell:
  """A mechanism cell of cells.json, as its runs use it.

  Attributes:
    name: <mechanism>_eps<ε>_w<wire bits>: the cell's folder prefix.
    mechanism: a registry name or one of TFF's peers.
    epsilon: the target ε its parameters were calibrated to.
    wire_bits: the budget: the secure-sum field's bits per coordinate
      (`--wire_bits` for a registry mechanism; a TFF peer's own `bits`).
    level_bits: ⌈log2 L⌉ of the mechanism (a peer: its bits).
    params: its calibrated parameters, the clip excluded (the run derives
      c∞ = k·clip/√d itself, as the scan did).
    ratio: its proved ×G; `dose`: m, its position on the dose axis.
  """
  name: str
  mechanism: str
  epsilon: float
  wire_bits: int
  level_bits: int
  params: Tuple[Tuple[str, object], ...]
  ratio: float
  dose: float

  @property
  def params_text(self) -> str:
    """--mechanism_params' text: key=value,... (floats as repr, bools
    lower-case)."""
    def text(v):
      return str(v).lower() if isinstance(v, bool) else repr(v)
    return ','.join(f'{k}={text(v)}' for k, v in self.params)


def planned_cells(table: Mapping) -> List[PlannedCell]:
  """The mechanism cells of a cells.json (`cells_json`), in its order.

  Raises:
    ValueError: a cell without a name, mechanism, ε, wire bits, parameters
      or dose (not a table `cells_json` wrote).
  """
  out = []
  for entry in table.get('cells', []):
    try:
      params = json.loads(entry['params'])
      params.pop('clip', None)
      out.append(PlannedCell(
          entry['name'], entry['mechanism'], float(entry['epsilon']),
          int(entry['wire_bits']), int(entry['level_bits']),
          tuple(sorted(params.items())), float(entry['predicted_ratio']),
          float(entry['dose'])))
    except (KeyError, TypeError, ValueError) as err:
      raise ValueError(f'cells.json: a cell without its fields ({err!r}): '
                       f'{entry!r}.') from None
  return out


def cell_args(setting: Mapping, training: Mapping, cell: PlannedCell,
              seed: int, run_dir: str, data_dir: Optional[str] = None
              ) -> List[str]:
  """The flags of `python -m experiments.fl_emnist` for one mechanism cell's
  run: its calibrated parameters as given (the run prints the ε they give
  under the accountant it runs), and the cell's wire budget as
  `--wire_bits` for a registry mechanism (a TFF peer carries its own
  `bits`).

  Args:
    setting, training, seed, run_dir, data_dir: as for `fl_emnist_args`.
    cell: the `PlannedCell`.

  Returns:
    The flags, in a fixed order.
  """
  # TFF's peers and the modular sums (ddgauss, skellam) carry their field in
  # their own parameters (fl_emnist refuses --wire_bits for them).
  own_field = (cell.mechanism in peers.PEERS or
               mechanisms.get(cell.mechanism).modulus is not None)
  extra = () if own_field else (f'--wire_bits={cell.wire_bits}',)
  return _run_args(setting, training, cell.mechanism, cell.params_text, seed,
                   run_dir, data_dir, extra)


def cell_fields(cell: PlannedCell) -> Dict:
  """What a mechanism cell's run adds to its summary.json: the cell, its
  position on the dose axis as `predicted_ratio` (m, the plan's), its level
  and wire bits; no variance multiplier or Gaussian calibration."""
  return dict(validation_cell=cell.name, validation_kind=CELL,
              epsilon_target=cell.epsilon, variance_multiplier=None,
              predicted_ratio=cell.dose, level_bits=cell.level_bits,
              wire_bits=cell.wire_bits, noise_multiplier_calibrated=None)


#: The mechanism cells' candidates (docs/fl_validation.md, "Mechanism
#: cells: the rule"): registry mechanisms behind the secure sum and TFF's.
CELL_MECHANISMS = ('pbm', 'rqm', 'quantized_gaussian', 'qmgeo',
                   'randomized_projection', 'bq', 'ddgauss', 'skellam',
                   'tff_dgauss', 'tff_skellam')
#: Wire budgets scanned, bits per coordinate.
CELL_WIRE_BITS = tuple(range(2, 17))
#: w_hi: the fewest wire bits with ×G <= HI_RATIO; w_lo: with ×G <= LO_RATIO
#: (the top dose, so no cell is extrapolated).
HI_RATIO, LO_RATIO = 1.10, 3.0
MAX_CELLS = 30
#: Fewer cells than these at an ε, or none with ×G >= AMEND_RATIO, is an
#: amendment made before the mechanism runs (the plan's rule).
MIN_CELLS = {3.0: 10, 10.0: 4}
AMEND_RATIO = 2.0
#: The training's coordinate bound: c∞ = k·clip/√d with this k.
CELL_MULTIPLE = 3.0
#: The model's coordinates after the rotation's padding (small_cnn: 5,994).
CELL_DIM = 8192


@dataclasses.dataclass(frozen=True)
class BudgetAnswer:
  """One mechanism at one ε and wire budget, as `which_mechanism` answers.

  Attributes:
    ratio: the proved ×G (inf where nothing fits the budget).
    level_bits: ⌈log2 L⌉ of the calibrated mechanism (None: none).
    wire_bits_needed: the fewest wire bits the cohort needs (<= the budget).
    params: its calibrated parameters (JSON text).
    lower_bound: True for TFF's peers, whose figure is the noise part only.
    reason: why nothing fits, or what shaped the answer ('' if nothing).
  """
  ratio: float
  level_bits: Optional[int] = None
  wire_bits_needed: Optional[int] = None
  params: str = ''
  lower_bound: bool = False
  reason: str = ''


@dataclasses.dataclass(frozen=True)
class MechanismCell:
  """A mechanism cell chosen by the rule.

  Attributes:
    mechanism, epsilon, wire_bits: the cell (wire bits = the budget).
    role: 'w_hi' (fewest bits with ×G <= HI_RATIO) or 'w_lo' (fewest with
      ×G <= LO_RATIO).
    answer: the `BudgetAnswer` at that budget.
    dose: its position on the dose axis, m = ×G·(z_ref/z_ε)², z_ref the
      Gaussian noise multiplier ×G compares with and z_ε the dose runs'.
  """
  mechanism: str
  epsilon: float
  wire_bits: int
  role: str
  answer: BudgetAnswer
  dose: float

  @property
  def name(self) -> str:
    """<mechanism>_eps<ε>_w<bits>: the cell's folder prefix."""
    return f'{self.mechanism}_eps{self.epsilon:g}_w{self.wire_bits}'


def wire_thresholds(ratios: Mapping[int, float]
                    ) -> Tuple[Optional[int], Optional[int]]:
  """(w_hi, w_lo) of one mechanism at one ε (the plan's rule).

  Args:
    ratios: {wire bits: proved ×G} over the budgets scanned (inf: nothing
      fits).

  Returns:
    w_hi, the fewest bits with ×G <= HI_RATIO, and w_lo, the fewest with
    ×G <= LO_RATIO where that is below w_hi (else None); None where there
    is none.
  """
  def fewest(limit):
    fit = [w for w, r in ratios.items() if r <= limit]
    return min(fit) if fit else None
  hi, lo = fewest(HI_RATIO), fewest(LO_RATIO)
  if lo is not None and hi is not None and lo >= hi:
    lo = None
  return hi, lo


def scan_is_enough(ratios: Mapping[int, float]) -> bool:
  """Whether budgets above those scanned can change `wire_thresholds`: no
  once some scanned budget reaches ×G <= HI_RATIO (both thresholds are the
  fewest bits meeting their bound). Scanning upward, stop there."""
  return any(r <= HI_RATIO for r in ratios.values())


def choose_cells(answers: Mapping[Tuple[str, float], Mapping[int,
                                                               BudgetAnswer]],
                 dose_scale: Mapping[float, float]
                 ) -> Tuple[List[MechanismCell], List[str]]:
  """The mechanism cells by the pre-registered rule, and what needs an
  amendment.

  At ε = 3: (M, w_hi) and (M, w_lo) for every M that has them; at ε = 10:
  (M, w_lo). At most MAX_CELLS (an error beyond: the rule gives no order to
  cut by).

  Args:
    answers: {(mechanism, ε): {wire bits: BudgetAnswer}} over the scanned
      budgets.
    dose_scale: {ε: (z_ref/z_ε)²}, the factor from ×G to the dose axis.

  Returns:
    (cells in the order of CELL_MECHANISMS then ε, the amendments the rule
    calls for: fewer than MIN_CELLS at an ε, or none with ×G >= AMEND_RATIO;
    empty when none).

  Raises:
    ValueError: more than MAX_CELLS cells, or an ε without a dose scale.
  """
  order = {m: i for i, m in enumerate(CELL_MECHANISMS)}
  cells = []
  for (mech, eps), by_bits in sorted(
      answers.items(), key=lambda kv: (order.get(kv[0][0], len(order)),
                                       kv[0][1])):
    if eps not in dose_scale:
      raise ValueError(f'`dose_scale` has no ε = {eps:g}.')
    hi, lo = wire_thresholds({w: a.ratio for w, a in by_bits.items()})
    roles = ([('w_hi', hi), ('w_lo', lo)] if eps == EPSILONS[0]
             else [('w_lo', lo)])
    for role, w in roles:
      if w is not None:
        a = by_bits[w]
        cells.append(MechanismCell(mech, eps, w, role, a,
                                   a.ratio * dose_scale[eps]))
  if len(cells) > MAX_CELLS:
    raise ValueError(f'The rule gives {len(cells)} cells, more than '
                     f'{MAX_CELLS}: an amendment must say which to keep.')
  amend = []
  for eps, least in MIN_CELLS.items():
    k = sum(c.epsilon == eps for c in cells)
    if k < least:
      amend.append(f'ε = {eps:g}: {k} cells, fewer than {least}')
  if not any(c.answer.ratio >= AMEND_RATIO for c in cells):
    amend.append(f'no cell with ×G >= {AMEND_RATIO:g}')
  return cells, amend


def scan_budgets(answer: Callable[[str, float, int], BudgetAnswer],
                 store: Dict[str, Dict],
                 save: Callable[[Dict[str, Dict]], None],
                 mechanisms: Sequence[str] = CELL_MECHANISMS,
                 epsilons: Sequence[float] = EPSILONS,
                 budgets: Sequence[int] = CELL_WIRE_BITS,
                 progress: Callable[[str], None] = print
                 ) -> Dict[Tuple[str, float], Dict[int, BudgetAnswer]]:
  """Each mechanism's ×G at each ε over the wire budgets, upward, until a
  budget reaches ×G <= HI_RATIO (`scan_is_enough`): resumable, each answer
  saved as it comes.

  Args:
    answer: (mechanism, ε, wire bits) -> its `BudgetAnswer` (the
      which-mechanism calibration at the training's setting).
    store: {'<mechanism>|<ε>|<bits>': BudgetAnswer fields} already computed
      (a checkpoint); updated in place.
    save: called with `store` after each new answer.
    mechanisms, epsilons, budgets: what is scanned.
    progress: where one line per answer goes.

  Returns:
    {(mechanism, ε): {wire bits: BudgetAnswer}}, each scan as far as the
    rule needs it.
  """
  out = {}
  for mech in mechanisms:
    for eps in epsilons:
      found = {}
      for w in sorted(budgets):
        key = f'{mech}|{eps:g}|{w}'
        if key not in store:
          a = answer(mech, eps, w)
          store[key] = dataclasses.asdict(a)
          save(store)
          progress(f'[scan] {mech} ε = {eps:g}, {w} wire bits: ×G '
                   f'{a.ratio:.4g}')
        found[w] = BudgetAnswer(**store[key])
        if scan_is_enough({k: v.ratio for k, v in found.items()}):
          break
      out[(mech, eps)] = found
  return out


def cells_json(cells: Sequence[MechanismCell], amendments: Sequence[str],
               setting: Mapping) -> Dict:
  """What results/fl_validation/cells.json holds: the setting the scan
  used, each cell (name, mechanism, ε, wire bits, role, level bits, wire
  bits needed, parameters, ×G, dose) and the amendments called for."""
  return dict(
      setting=dict(setting), rule=dict(hi_ratio=HI_RATIO, lo_ratio=LO_RATIO,
                                       wire_bits=list(CELL_WIRE_BITS)),
      cells=[dict(name=c.name, mechanism=c.mechanism, epsilon=c.epsilon,
                  wire_bits=c.wire_bits, role=c.role,
                  level_bits=c.answer.level_bits,
                  wire_bits_needed=c.answer.wire_bits_needed,
                  params=c.answer.params, predicted_ratio=c.answer.ratio,
                  ratio_is_lower_bound=c.answer.lower_bound, dose=c.dose)
             for c in cells],
      amendments=list(amendments))


def dose_fields(cell: DoseCell, noise_multiplier_calibrated: float) -> Dict:
  """What a dose run adds to its summary.json: the cell, its variance
  multiplier, its ×G (= the multiplier), and level_bits / wire_bits None
  (the central Gaussian sends floats: no levels, no secure-sum field)."""
  return dict(validation_cell=cell.name, validation_kind=DOSE,
              epsilon_target=cell.epsilon,
              variance_multiplier=cell.multiplier,
              predicted_ratio=cell.multiplier, level_bits=None, wire_bits=None,
              noise_multiplier_calibrated=noise_multiplier_calibrated)


def finished(run_dir: str) -> bool:
  """Whether the run trained to the end and carries the validation's fields
  (summary.json with `predicted_ratio`)."""
  path = os.path.join(run_dir, 'summary.json')
  if not os.path.exists(path):
    return False
  with open(path) as f:
    return 'predicted_ratio' in json.load(f)


def trained(run_dir: str) -> bool:
  """Whether fl_emnist finished the run (its summary.json exists)."""
  return os.path.exists(os.path.join(run_dir, 'summary.json'))


def complete(run_dir: str, fields: Mapping) -> Dict:
  """Writes `fields` to the run's validation.json and adds them to the
  summary.json fl_emnist wrote (atomically).

  Args:
    run_dir: a trained run's folder.
    fields: the keys of FIELDS.

  Returns:
    The summary with the fields.

  Raises:
    ValueError: the run has no summary.json, `fields` lacks a key of FIELDS,
      or summary.json already holds one of them with another value.
  """
  missing = [k for k in FIELDS if k not in fields]
  if missing:
    raise ValueError(f'fields must hold {list(FIELDS)}; missing {missing}.')
  path = os.path.join(run_dir, 'summary.json')
  if not os.path.exists(path):
    raise ValueError(f'{run_dir} has no summary.json: the run has not '
                     'finished.')
  with open(path) as f:
    summary = json.load(f)
  for k in FIELDS:
    if k in summary and summary[k] != fields[k]:
      raise ValueError(f'{path} holds {k}={summary[k]!r}, not '
                       f'{fields[k]!r}.')
  results_io.write_json(os.path.join(run_dir, SIDECAR), dict(fields))
  summary.update({k: fields[k] for k in FIELDS})
  results_io.write_json(path, summary)
  return summary


# ----------------------------------------------------------------------------
# The analysis.


@dataclasses.dataclass
class Record:
  """One finished run.

  Args:
    name: its folder name.
    cell: its cell (`validation_cell`).
    kind: DOSE or CELL.
    epsilon: the cell's target ε.
    seed: the block seed.
    ratio: its predicted ×G on the dose axis (a dose run: m).
    endpoint: ENDPOINT's value.
    epsilon_reported: the ε its summary reports (a dose m > 1: below ε).
    drops, diverged: fl_table's excursions (beside the endpoint).
    level_bits, wire_bits: as recorded (None for the Gaussian).
  """
  name: str
  cell: str
  kind: str
  epsilon: float
  seed: int
  ratio: float
  endpoint: float
  epsilon_reported: float
  drops: int
  diverged: Optional[int]
  level_bits: Optional[int] = None
  wire_bits: Optional[int] = None


def read_records(runs_dir: str, endpoint: fl_table.Endpoint = ENDPOINT
                 ) -> List[Record]:
  """The finished runs of `runs_dir` (folders whose summary.json carries the
  validation's fields; others, unfinished, are left out).

  Raises:
    ValueError: a finished run whose evaluations cannot give `endpoint`.
  """
  out = []
  if not os.path.isdir(runs_dir):
    return out
  for name in sorted(os.listdir(runs_dir)):
    run_dir = os.path.join(runs_dir, name)
    if not finished(run_dir):
      continue
    with open(os.path.join(run_dir, 'summary.json')) as f:
      summary = json.load(f)
    run = fl_table.read_run(run_dir)
    rounds = int(summary['config']['rounds'])
    out.append(Record(
        name, summary['validation_cell'], summary['validation_kind'],
        float(summary['epsilon_target']), int(summary['config']['seed']),
        float(summary['predicted_ratio']),
        endpoint.value(run.evaluations, rounds), float(summary['epsilon']),
        fl_table.drops(run.evaluations), fl_table.diverged_rounds(run.losses),
        summary.get('level_bits'), summary.get('wire_bits')))
  return out


def _values(records: Sequence[Record], kind: str, epsilon: float
            ) -> Dict[str, Dict[int, Record]]:
  """{cell: {seed: record}} of one kind at ε."""
  out = {}
  for r in records:
    if r.kind == kind and r.epsilon == epsilon:
      out.setdefault(r.cell, {})[r.seed] = r
  return out


@dataclasses.dataclass
class DoseFit:
  """The dose–response at one ε: a line in x = √m per seed.

  Args:
    epsilon: the ε.
    lines: {seed: (a_s, b_s)} of the seeds with two or more doses.
    doses: {m: {seed: endpoint}} of the dose runs.
  """
  epsilon: float
  lines: Dict[int, Tuple[float, float]]
  doses: Dict[float, Dict[int, float]]

  @property
  def seeds(self) -> List[int]:
    """The seeds with a line, in order."""
    return sorted(self.lines)

  def predicted(self, ratio: float) -> Dict[int, float]:
    """{seed: ŷ_s(√ratio)}."""
    x = math.sqrt(validation.check_positive('ratio', ratio))
    return {s: a + b * x for s, (a, b) in self.lines.items()}

  def curve(self, ratio: float) -> Tuple[float, float, float]:
    """(mean, low, high): the curve at ×G `ratio` and its pointwise 95% band
    over the seeds (nan without a line; ±inf with one seed)."""
    values = list(self.predicted(ratio).values())
    if not values:
      return math.nan, math.nan, math.nan
    return tuple(float(v) for v in comparisons.interval(values))

  def slope(self) -> Tuple[float, float, float]:
    """(mean, low, high) of b, accuracy per unit of √m, over the seeds."""
    values = [b for _, b in self.lines.values()]
    if not values:
      return math.nan, math.nan, math.nan
    return tuple(float(v) for v in comparisons.interval(values))

  def lack_of_fit(self) -> Dict[float, Tuple[float, float, float, int]]:
    """{m: (mean, low, high, seeds)} of y_s(m) − ŷ_s(√m) over the seeds with
    a line (reported beside the fit, not a gate)."""
    out = {}
    for m, ys in sorted(self.doses.items()):
      pred = self.predicted(m)
      d = [ys[s] - pred[s] for s in ys if s in pred]
      if d:
        mean, low, high = comparisons.interval(d)
        out[m] = (float(mean), float(low), float(high), len(d))
    return out

  @property
  def range(self) -> Tuple[float, float]:
    """The least and the largest dose m run."""
    return min(self.doses), max(self.doses)


def fit_dose(records: Sequence[Record], epsilon: float) -> DoseFit:
  """The least-squares line y = a_s + b_s·√m of each seed's dose runs at ε,
  for every seed with at least two distinct doses (partial data: the seeds
  that have them).

  Args:
    records: from `read_records`.
    epsilon: the ε.

  Returns:
    The DoseFit (no lines where no seed has two doses).
  """
  doses: Dict[float, Dict[int, float]] = {}
  for r in records:
    if r.kind == DOSE and r.epsilon == epsilon:
      doses.setdefault(r.ratio, {})[r.seed] = r.endpoint
  lines = {}
  for seed in sorted({s for ys in doses.values() for s in ys}):
    pts = [(math.sqrt(m), ys[seed]) for m, ys in doses.items() if seed in ys]
    if len(pts) >= 2:
      x, y = np.array(pts, np.float64).T
      b, a = np.polyfit(x, y, 1)
      lines[seed] = (float(a), float(b))
  return DoseFit(epsilon, lines, doses)


@dataclasses.dataclass
class Residual:
  """One cell against the dose–response at its ×G.

  Args:
    cell, epsilon, ratio: the cell, its ε and predicted ×G.
    seeds: the seeds with both the cell's run and a dose line.
    differences: y_s − ŷ_s(√ratio) per seed, in that order.
    mean, low, high: their mean and 95% t interval.
    extrapolated: the ratio lies outside the doses run.
  """
  cell: str
  epsilon: float
  ratio: float
  seeds: Tuple[int, ...]
  differences: np.ndarray
  mean: float
  low: float
  high: float
  extrapolated: bool

  @property
  def covers_zero(self) -> bool:
    """Whether the 95% interval holds 0 (the prediction)."""
    return self.low <= 0 <= self.high


def residuals(fit: DoseFit, records: Sequence[Record]) -> List[Residual]:
  """Each CELL at the fit's ε against the curve at its ×G, seed by seed.

  Raises:
    ValueError: a cell whose runs disagree on its predicted ×G.
  """
  out = []
  for cell, runs in sorted(_values(records, CELL, fit.epsilon).items()):
    ratios = {r.ratio for r in runs.values()}
    if len(ratios) != 1:
      raise ValueError(f'{cell}: its runs record predicted_ratio {ratios}.')
    ratio = ratios.pop()
    seeds, d = comparisons.paired({s: r.endpoint for s, r in runs.items()},
                                  fit.predicted(ratio))
    mean, low, high = ((float(v) for v in comparisons.interval(d)) if d.size
                       else (math.nan,) * 3)
    lo, hi = fit.range if fit.doses else (math.nan, math.nan)
    out.append(Residual(cell, fit.epsilon, ratio, seeds, d, mean, low, high,
                        not lo <= ratio <= hi))
  return out


def allowed_misses(cells: int, coverage: float = COVERAGE,
                   level: float = 0.95) -> int:
  """The most intervals that may exclude zero for the predictor to be
  validated: the `level` quantile of Binomial(cells, 1 − coverage), the
  count of misses of `cells` independent intervals of that coverage.

  Args:
    cells: K, the cells tested (>= 1).
    coverage: each interval's coverage.
    level: the chance a right predictor passes (under independence).

  Returns:
    The smallest q with P(Binomial(K, 1 − coverage) <= q) >= level.

  Raises:
    ValueError: K < 1, or coverage/level outside (0, 1).
  """
  validation.check_integer('cells', cells, 1)
  validation.check_probability('coverage', coverage)
  validation.check_probability('level', level)
  return int(stats.binom.ppf(level, cells, 1 - coverage))


def equivalence(records: Sequence[Record],
                margins: Mapping[float, float] = MARGINS,
                alpha: float = comparisons.ALPHA
                ) -> List[comparisons.Comparison]:
  """Every cell minus the calibrated Gaussian (dose m = 1) at its ε, paired
  by seed: one family across ε, Holm's (1979) step-down counting
  comparisons (`comparisons.compare`), TOST (Schuirmann 1987) at each ε's
  margin.

  Each comparison's values are divided by its ε's margin and tested at margin
  1: the t statistics, hence both p-values, are unchanged by the scale, and
  one call adjusts the whole family. The returned differences, mean and
  interval are in accuracy again, with `margin` the ε's.

  Raises:
    ValueError: a cell at an ε without a margin.
  """
  pairs, scale = [], []
  for eps in sorted({r.epsilon for r in records if r.kind == CELL}):
    if eps not in margins:
      raise ValueError(f'no equivalence margin for ε = {eps:g} (margins: '
                       f'{sorted(margins)}).')
    ref = {s: r.endpoint for s, r in _values(records, DOSE, eps).get(
        DoseCell(eps, REFERENCE_MULTIPLIER).name, {}).items()}
    m = margins[eps]
    for cell, runs in sorted(_values(records, CELL, eps).items()):
      pairs.append(((cell, eps), (DoseCell(eps, REFERENCE_MULTIPLIER).name,
                                  eps),
                    {s: r.endpoint / m for s, r in runs.items()},
                    {s: v / m for s, v in ref.items()}))
      scale.append(m)
  out = comparisons.compare(pairs, margin=1.0, alpha=alpha)
  return [dataclasses.replace(c, differences=c.differences * m,
                              mean=c.mean * m, low=c.low * m, high=c.high * m,
                              margin=m) for c, m in zip(out, scale)]


@dataclasses.dataclass
class Analysis:
  """Everything the report states (docs/fl_validation.md, "Analysis")."""
  fits: Dict[float, DoseFit]
  residuals: List[Residual]
  comparisons: List[comparisons.Comparison]
  records: List[Record]

  @property
  def misses(self) -> int:
    """Cells whose residual interval excludes zero."""
    return sum(not r.covers_zero for r in self.residuals)

  def validated(self) -> Optional[bool]:
    """Whether at most allowed_misses(K) intervals exclude zero (None
    without cells)."""
    if not self.residuals:
      return None
    return self.misses <= allowed_misses(len(self.residuals))


def analyse(runs_dir: str, endpoint: fl_table.Endpoint = ENDPOINT,
            margins: Mapping[float, float] = MARGINS) -> Analysis:
  """The pre-registered analysis of the finished runs in `runs_dir` (works
  on any subset: each statement uses the seeds it has).

  Args:
    runs_dir: results/fl_validation/runs.
    endpoint: a run's figure.
    margins: {ε: equivalence margin}.

  Returns:
    The Analysis: per ε the dose fit; each cell's residual; the
    equivalence family.
  """
  records = read_records(runs_dir, endpoint)
  fits = {eps: fit_dose(records, eps)
          for eps in sorted({r.epsilon for r in records})}
  res = [r for eps in sorted(fits) for r in residuals(fits[eps], records)]
  return Analysis(fits, res, equivalence(records, margins), records)


def _ci(mean, low, high, digits=3) -> str:
  if not math.isfinite(mean):
    return 'n/a'
  if not math.isfinite(low):
    return f'{mean:+.{digits}f} (1 seed)'
  return f'{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]'


def report(analysis: Analysis, planned: int, complete_plan: bool) -> str:
  """The Markdown report (docs/fl_validation.md, "What the analysis
  computes").

  Args:
    analysis: from `analyse`.
    planned: the runs the plan has.
    complete_plan: whether every planned run has finished; a partial report
      says it is not the pre-registered analysis.

  Returns:
    The Markdown.
  """
  md = ['# FL validation: the dose–response and the predicted ×G', '',
        f'Pre-registered in docs/fl_validation.md. {len(analysis.records)} of '
        f'{planned} planned runs finished. Endpoint: {ENDPOINT.name}.']
  if not complete_plan:
    md += ['', '**PARTIAL: not every planned run has finished; this is not '
           'the pre-registered analysis.**']
  md += ['', '## Dose–response (a line in √m per seed; 95% band over seeds)',
         '', '| ε | seeds | slope per unit √m [95% CI] | m | runs | mean '
         'endpoint | curve [95% band] | lack of fit [95% CI] |',
         '|---|---|---|---|---|---|---|---|']
  for eps, fit in sorted(analysis.fits.items()):
    lof = fit.lack_of_fit()
    for k, (m, ys) in enumerate(sorted(fit.doses.items())):
      first = (f'| {eps:g} | {len(fit.seeds)} | {_ci(*fit.slope())} ' if k == 0
               else '| | | ')
      md.append(first + f'| {m:g} | {len(ys)} | '
                f'{np.mean(list(ys.values())):.4f} | '
                f'{_ci(*fit.curve(m), digits=4)} | '
                f'{_ci(*lof[m][:3]) if m in lof else "n/a"} |')
  md += ['', '## Cells against the prediction at their ×G', '',
         '| ε | cell | ×G | seeds | observed − predicted [95% CI] | covers '
         '0 |', '|---|---|---|---|---|---|']
  for r in analysis.residuals:
    md.append(f'| {r.epsilon:g} | {r.cell} | {r.ratio:.3f}'
              f'{" (extrapolated)" if r.extrapolated else ""} | '
              f'{len(r.seeds)} | {_ci(r.mean, r.low, r.high)} | '
              f'{"yes" if r.covers_zero else "**no**"} |')
  verdict = analysis.validated()
  if verdict is not None:
    k = len(analysis.residuals)
    md += ['', f'Intervals excluding 0: {analysis.misses} of {k}; allowed '
           f'{allowed_misses(k)} (the 95% quantile of Binomial({k}, 0.05)): '
           f'the predictor is **{"validated" if verdict else "not validated"}'
           '**.']
  if analysis.comparisons:
    md += ['', '## Equivalence to the Gaussian (TOST, Holm over the family)',
           '', '| ε | cell | seeds | minus the Gaussian [95% CI] | margin | '
           'no difference: p / Holm | TOST: p / Holm | verdict |',
           '|---|---|---|---|---|---|---|---|']
    for c in analysis.comparisons:
      md.append(f'| {c.a[1]:g} | {c.a[0]} | {c.n} | '
                f'{_ci(c.mean, c.low, c.high)} | ±{c.margin:.4f} | '
                f'{c.p_difference:.3f} / {c.p_difference_holm:.3f} | '
                f'{c.p_equivalence:.3f} / {c.p_equivalence_holm:.3f} | '
                f'**{c.verdict}** |')
  excursions = [r.name for r in analysis.records
                if r.drops or (r.diverged or 0)]
  md += ['', f'Runs with an excursion (a drop > {fl_table.DROP:g} or a '
         f'diverged round; beside the endpoint, not folded in): '
         f'{", ".join(excursions) or "none"}.']
  return '\n'.join(md) + '\n'
