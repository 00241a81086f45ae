"""A tuning's settings, without TensorFlow: the grid (`Point`, `grid`) and
`Settings`, the fixed training every run of a tuning shares.

experiments/fl_tune.py builds and checks these from its flags before it
imports `tuning` (and so TensorFlow): a bad flag is refused in a second.
The driver that runs a tuning is `tuning.Tuning`.
"""

import dataclasses
import datetime
import json
import math
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

from tff_quant.common import validation
from tff_quant.training import config

#: Grid points whose validation endpoint is within this of the best are tied;
#: the simplest of them is chosen (`Point.simplicity`). Fixed before the runs.
TIE_TOLERANCE = 0.01
#: Today's client learning rate (experiments/fl_table.py): the simpler one.
DEFAULT_CLIENT_LR = 0.05


_NUMBER = r'([0-9.e+-]+)'
_NAME = re.compile(f'eps{_NUMBER}_lr{_NUMBER}_mom{_NUMBER}_clip{_NUMBER}x'
                   f'(?:_slr{_NUMBER})?(?:_(cosine))?')


@dataclasses.dataclass(frozen=True, order=True)
class Point:
  """One grid point.

  Args:
    epsilon: the whole-model ε the Gaussian is calibrated to.
    client_lr: the clients' SGD learning rate.
    server_momentum: the server SGD's momentum (0: none).
    clip_multiple: the ℓ2 clip as a multiple of the median update norm at
      client_lr.
    server_lr: the server SGD's learning rate.
    schedule: the server learning-rate schedule
      (`config.SERVER_LR_SCHEDULES`).
  """
  epsilon: float
  client_lr: float
  server_momentum: float
  clip_multiple: float
  server_lr: float = 1.0
  schedule: str = 'constant'

  @property
  def name(self) -> str:
    return (f'eps{self.epsilon:g}_lr{self.client_lr:g}_mom'
            f'{self.server_momentum:g}_clip{self.clip_multiple:g}x'
            + ('' if self.server_lr == 1.0 else f'_slr{self.server_lr:g}')
            + ('' if self.schedule == 'constant' else f'_{self.schedule}'))

  @classmethod
  def from_name(cls, name: str) -> Optional['Point']:
    """The Point whose `name` is `name`, or None."""
    m = _NAME.fullmatch(name)
    if not m:
      return None
    eps, lr, mom, clip, slr, schedule = m.groups()
    return cls(float(eps), float(lr), float(mom), float(clip),
               float(slr) if slr else 1.0, schedule or 'constant')

  def simplicity(self) -> Tuple:
    """Smaller is simpler: no server momentum, a constant server lr,
    server lr 1, the default client lr, the clip nearest the median (then the
    smaller clip: less noise)."""
    return (self.server_momentum != 0, self.schedule != 'constant',
            self.server_lr != 1.0,
            self.client_lr != DEFAULT_CLIENT_LR,
            abs(math.log2(self.clip_multiple)), self.clip_multiple)

  def clip_norm(self, medians: Dict[float, float]) -> float:
    """The ℓ2 clip: clip_multiple × the median norm at client_lr (3
    significant digits)."""
    return float(f'{self.clip_multiple * medians[self.client_lr]:.3g}')


def grid(epsilons: Sequence[float], client_lrs: Sequence[float],
         server_momenta: Sequence[float], clip_multiples: Sequence[float],
         server_lrs: Sequence[float] = (1.0,),
         server_lr_schedules: Sequence[str] = ('constant',)) -> List[Point]:
  """Every combination, in run order: the ε values interleaved (a grid cut
  short covers each ε alike), the clip multiples nearest 1 first within.

  The parameters are named as fl_tune's flags (--epsilons, ...), and so are
  the errors.

  Raises:
    ValueError: a list empty or a value outside its range, naming it.
  """
  for name, values in (('epsilons', epsilons), ('client_lrs', client_lrs),
                       ('clip_multiples', clip_multiples),
                       ('server_lrs', server_lrs)):
    if not values:
      raise ValueError(f'`{name}` is empty.')
    for v in values:
      validation.check_positive(name, v)
  if not server_momenta:
    raise ValueError('`server_momenta` is empty.')
  for m in server_momenta:
    validation.check_number('server_momenta', m, 0, 1, high_open=True)
  if not server_lr_schedules:
    raise ValueError('`server_lr_schedules` is empty.')
  for v in server_lr_schedules:
    validation.check_one_of('server_lr_schedules', v, config.SERVER_LR_SCHEDULES)
  per_eps = {}
  for eps in epsilons:
    points = [Point(float(eps), float(lr), float(m), float(c), float(s), sch)
              for c in clip_multiples for lr in client_lrs
              for m in server_momenta for s in server_lrs
              for sch in server_lr_schedules]
    per_eps[eps] = sorted(points, key=lambda p: (abs(math.log2(p.clip_multiple)),
                                                 p.simplicity()))
  out = []
  for i in range(max(len(v) for v in per_eps.values())):
    for eps in epsilons:
      if i < len(per_eps[eps]):
        out.append(per_eps[eps][i])
  return out


#: The FL table's training (experiments/fl_table.py): the Settings fields of
#: these names are TrainingConfig's own (`_training_fields`), at these
#: defaults; every run of a tuning takes them from its Settings.
TRAINING = dict(rounds=300, clients_per_round=100, total_clients=3400,
                model='small_cnn', coordinate_clip_multiple=3.0,
                validation_fraction=0.1, eval_every=5)
#: TrainingConfig's values that every run of every tuning shares.
FIXED_TRAINING = dict(rotate=True, batch_size=32, local_epochs=1)
#: The mechanism of the grid runs (the norm and noise-free runs: none).
MECHANISM = 'gaussian'


def _training_fields(cls):
  """Declares TrainingConfig's fields named in TRAINING on `cls`, with their
  TrainingConfig types and TRAINING's defaults, after `cls`'s own (for
  `dataclasses.dataclass`, which applies on top).

  Args:
    cls: a class about to become a dataclass.

  Returns:
    `cls`.

  Raises:
    KeyError: a TRAINING name that is not a TrainingConfig field.
  """
  types = {f.name: f.type for f in dataclasses.fields(config.TrainingConfig)}
  for name, default in TRAINING.items():
    cls.__annotations__[name] = types[name]
    setattr(cls, name, default)
  return cls


@dataclasses.dataclass
@_training_fields
class Settings:
  """A tuning: the grid, the fixed setting (the FL table's) and the schedule.

  `fixed()` is what config.json holds (a folder holds one; the grid may
  grow). `deadline` 'HH:MM' (UTC): no run starts after it. The fields named
  in TRAINING (rounds, clients_per_round, total_clients, model,
  coordinate_clip_multiple, validation_fraction, eval_every) are
  TrainingConfig's, every run's; `rounds` is the grid runs' and
  `norm_rounds` the norm runs'.
  """
  output_dir: str
  epsilons: Sequence[float] = (3.0, 10.0)
  client_lrs: Sequence[float] = (0.05, 0.2)
  server_momenta: Sequence[float] = (0.0, 0.9)
  clip_multiples: Sequence[float] = (0.5, 1.0, 2.0)
  server_lrs: Sequence[float] = (1.0,)
  server_lr_schedules: Sequence[str] = ('constant',)
  rerun_top: int = 2
  seeds_top: int = 2
  norm_rounds: int = 300
  split_seed: int = 0
  dataset: str = 'fashion_mnist'
  clients_per_slot: Optional[int] = None
  tie_tolerance: float = TIE_TOLERANCE
  noise_free_at_choice: bool = True
  deadline: Optional[str] = None
  max_runs: Optional[int] = None
  data_dir: Optional[str] = None

  def training(self) -> Dict[str, object]:
    """The TrainingConfig values every run of this tuning shares: TRAINING's
    fields as set here, FIXED_TRAINING, and δ = 1/total_clients."""
    return dict({name: getattr(self, name) for name in TRAINING},
                delta=1 / self.total_clients, **FIXED_TRAINING)

  def check_folder(self) -> Dict[str, object]:
    """Refuses an output folder whose config.json holds a tuning with other
    settings (before TensorFlow starts: `experiments.fl_tune`'s check).

    Returns:
      What config.json holds or will hold: `fixed()`, as JSON reads it.

    Raises:
      ValueError: config.json holds other settings (both named).
    """
    fixed = json.loads(json.dumps(self.fixed()))
    old = load_json(os.path.join(self.output_dir, 'config.json'))
    if old and old != fixed:
      raise ValueError(f'{self.output_dir} holds a tuning with other settings '
                       f'({old}); use another output folder.')
    return fixed

  def fixed(self) -> Dict[str, object]:
    """What every run of the tuning shares: `training()`, the mechanism of
    the grid, the data and the norm runs' rounds (config.json)."""
    return dict(self.training(), dataset=self.dataset,
                norm_rounds=self.norm_rounds, split_seed=self.split_seed,
                mechanism=MECHANISM)

  def grid(self) -> List[Point]:
    return grid(self.epsilons, self.client_lrs, self.server_momenta,
                self.clip_multiples, self.server_lrs, self.server_lr_schedules)

  def check(self) -> None:
    validation.check_integer('rerun_top', self.rerun_top, 0)
    validation.check_integer('seeds_top', self.seeds_top, 1)
    validation.check_number('validation_fraction', self.validation_fraction,
                            0, 1, low_open=True, high_open=True)
    validation.check_number('tie_tolerance', self.tie_tolerance, 0)
    validation.check_optional(validation.check_integer, 'max_runs',
                              self.max_runs, 1)
    if self.deadline is not None:
      hh, _, mm = self.deadline.partition(':')
      if not (hh.isdigit() and mm.isdigit() and int(hh) < 24 and
              int(mm) < 60):
        raise ValueError(f'`deadline` must be HH:MM (UTC), got '
                         f'{self.deadline!r}.')
    self.grid()

  def config(self, mechanism: str, rounds: int, client_lr: float,
             clip_norm: float, server_momentum: float = 0.0,
             server_lr: float = 1.0, epsilon: Optional[float] = None,
             seed: int = 0, schedule: str = 'constant') -> config.TrainingConfig:
    """A run's TrainingConfig: `training()`, these values (the noise seed
    1000 + seed, none without privacy)."""
    return config.TrainingConfig(**dict(
        self.training(), mechanism=mechanism, mechanism_params={},
        clip_norm=clip_norm, target_epsilon=epsilon, rounds=rounds,
        client_lr=client_lr, server_lr=server_lr,
        server_momentum=server_momentum, server_lr_schedule=schedule,
        seed=seed,
        noise_seed=None if mechanism == config.NO_PRIVACY else 1000 + seed))

  def past_deadline(self, now: Optional[datetime.datetime] = None) -> bool:
    if not self.deadline:
      return False
    now = now or datetime.datetime.now(datetime.timezone.utc)
    hh, mm = (int(v) for v in self.deadline.split(':'))
    return (now.hour, now.minute) >= (hh, mm)


def load_json(path: str):
  """The JSON object in `path`, or {} where there is no such file."""
  if os.path.exists(path):
    with open(path) as f:
      return json.load(f)
  return {}
