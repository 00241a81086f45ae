"""Which mechanism at a user's wire budget: every mechanism calibrated to one
setting (ε, δ, d, n of N clients, rounds) within B wire bits (issue 64).

The frontier's machinery (`program.frontier`) for one setting, on the wire:
each mechanism's free parameters and, for the bounded ones, its level count
are calibrated to the whole run's (ε, δ) on the ℓ2 route (updates of ℓ2
norm <= 1 after a random rotation, c∞ = k/√d, each k of the
coordinate-clip multiples tried and the one with the least error + clipping
bias² kept: `frontier.best_over_multiples`), so that the cohort's sum fits
a secure-sum field of 2^B (docs/bits.md):

* bounded mechanisms (pbm, rqm, quantized_gaussian, randomized_projection,
  qmgeo, bq): the level count and parameters chosen jointly for B
  (`accounting.calibration.calibrate_for_wire_bits`): each client uploads
  its levels mod 2^B, the wrap probability is proved <= 1e-4 per coordinate
  and round, and the error counts the wraps
  (`mechanisms.wire.debiased_error_with_wraps`). The wire bits the cohort
  needs (`wire.wire_bits_needed`, <= B) are reported beside B.
* modular sums (ddgauss, skellam): calibrated with their modulus 2^B
  (`calibration_report(bits=B)`); a refusal names the bits they need.
* TFF's peers (tff_dgauss, tff_skellam): `aggregators.peers.calibrate` at
  bits = B. The library has no debiased-error model for them: their figure
  is their noise variance over the Gaussian's, (z/z_G)² (z_G = n·√E_G, the
  Gaussian reference's noise multiplier at ℓ2 clip 1), the noise part only:
  a lower bound on their × Gaussian (rounding and modular clipping add to
  it), reported as such and not ranked.

× Gaussian (×G) is the debiased error per coordinate of the decoded mean
(wraps counted) over the continuous Gaussian's at the same target
(`frontier.gaussian_reference`, docs/utility.md), the Gaussian accounted by
its best sound method whatever route the mechanisms take (the lesser of
WBK19 Thm 27's RDP route and its exact profile sampled and composed; at the
FL setting, ε = 10, the RDP route alone gives it 1.49x the variance, and a
ratio to that would flatter every mechanism by as much), as the interval
[optimistic, proved]: proved = calibrated on the accountant's proved ε (a
guarantee), optimistic = on the ε named inputs attain (bound='attained',
not a guarantee; docs/frontier.md, "Two ends"). `recommend` names the
least proved figure and says whether the intervals separate it from the
others: a ranking holds only where they do.

Cost: before a mechanism starts, its exact search's operations per ε
evaluation are estimated at the cheapest level count (`frontier._cell_cost`);
a mechanism whose estimate is over the accountant's cost limit at every k is
skipped with the estimate. Each end of each mechanism runs in a process of
its own (`isolated.call_in_child`, address space capped as the frontier's
workers: `frontier.limit_memory`) stopped after `max_seconds_per_mechanism`,
its row then saying so: an answer never hangs on one mechanism. The
calibration's own limits (refused grid points, looser bounds over
`secure_sum.Limits.max_operations`) apply inside.
"""

import concurrent.futures
import dataclasses
import json
import math
import re
import time
from typing import Callable, List, Optional, Sequence

from tff_quant import mechanisms
from tff_quant.accounting import calibration
from tff_quant.common import validation
from tff_quant.mechanisms import wire
from tff_quant.program import frontier
from tff_quant.program import isolated

#: TFF's distributed aggregators (`aggregators.peers`), answered at bits = B.
PEERS = frontier.PEERS
BOUNDED, MODULAR, PEER = 'bounded', 'modular', 'peer'
DEFAULT_MULTIPLES = (2.0, 3.0, 4.0)   # the frontier's default k
DEFAULT_MAX_SECONDS = 600.0
DEFAULT_RTOL = 1e-2                    # the frontier's calibration width
# The bits a refusal names: `calibrate_for_wire_bits`' (the fewest wire bits
# any calibrated level count needed) and a modular sum's
# (`calibration.refusals.needs`, or the width `calibration_report` confirmed).
_BITS_NEEDED = re.compile(
    r'allowed wire_bits >= (\d+)|it needs (?:at least )?(\d+) bits')


@dataclasses.dataclass(frozen=True)
class Setting:
  """One user's setting and wire budget (validated).

  Attributes:
    epsilon: the whole run's ε > 0.
    delta: δ in (0, 1).
    dim: d >= 1, the coordinates each client sends.
    clients_per_round: n in [1, total_clients].
    total_clients: N >= 1.
    rounds: T >= 1.
    wire_bits: B in [1, `wire.MAX_WIRE_BITS`], bits per coordinate on the
      wire (the secure-sum field 2^B).
    use_profile: calibrate every mechanism on the profile route too (the
      lesser of both routes; `accounting.calibration_report`); False: the
      RDP route alone, faster and conservative for the mechanisms. The
      Gaussian reference takes its best route either way.

  Raises:
    ValueError: a number outside its range (named, with the range).
  """
  epsilon: float
  delta: float
  dim: int
  clients_per_round: int
  total_clients: int
  rounds: int
  wire_bits: int
  use_profile: bool = True

  def __post_init__(self):
    validation.check_positive('epsilon', self.epsilon)
    validation.check_number('delta', self.delta, 0, 1, low_open=True,
                            high_open=True)
    validation.check_integer('dim', self.dim, 1)
    validation.check_integer('total_clients', self.total_clients, 1)
    validation.check_integer('clients_per_round', self.clients_per_round, 1,
                             self.total_clients)
    validation.check_integer('rounds', self.rounds, 1)
    validation.check_integer('wire_bits', self.wire_bits, 1,
                             wire.MAX_WIRE_BITS)
    validation.check_bool('use_profile', self.use_profile)

  def schedule(self, rtol: float, bound: str) -> dict:
    """The calibration's keyword arguments (the frontier's ℓ2 route)."""
    return dict(epsilon=self.epsilon, delta=self.delta, rounds=self.rounds,
                clients_per_round=self.clients_per_round,
                total_clients=self.total_clients, dim=self.dim, l2_clip=1.0,
                rtol=rtol, bound=bound, use_profile=self.use_profile)


@dataclasses.dataclass(frozen=True)
class End:
  """One end (proved or optimistic) of one mechanism's answer.

  Attributes:
    error: its debiased error per coordinate, wraps counted (a peer's: its
      noise variance per coordinate of the mean); inf where nothing fits.
    coordinate_clip_multiple: k of the kept calibration (None: none).
    level_bits: ⌈log2 L⌉ of the calibrated mechanism.
    wire_bits: the fewest wire bits the cohort needs (<= B).
    wrap_probability: the proved wrap bound at B (bounded mechanisms).
    params: the calibrated parameters (JSON), or a peer's noise multiplier.
    bits_needed: where nothing fits in B, the fewest wire bits a refusal
      named (None: not named).
    reason: why nothing fits, or what shaped the answer ('' if nothing).
    unknown: True where the end was not computed (its figure unknown).
    cpu_seconds: the CPU time of the process that computed it.
  """
  error: float = math.inf
  coordinate_clip_multiple: Optional[float] = None
  level_bits: Optional[int] = None
  wire_bits: Optional[int] = None
  wrap_probability: float = math.nan
  params: str = ''
  bits_needed: Optional[int] = None
  reason: str = ''
  unknown: bool = False
  cpu_seconds: float = 0.0


@dataclasses.dataclass(frozen=True)
class Row:
  """One mechanism at the setting's wire budget.

  Attributes:
    mechanism: its name.
    kind: BOUNDED, MODULAR or PEER (module docstring).
    proved: the proved `End`.
    optimistic: the optimistic `End` (unknown where not computed).
    gaussian_error: the continuous Gaussian's debiased error per coordinate
      at the same target (the ×G denominator).
    estimated_operations: the exact search's estimated operations per ε
      evaluation at the cheapest level count and k (0: a closed form).
    seconds: wall seconds of the proved end's process.
    seconds_optimistic: wall seconds of the optimistic end's (0: none).
  """
  mechanism: str
  kind: str
  proved: End
  optimistic: End
  gaussian_error: float
  estimated_operations: float = 0.0
  seconds: float = 0.0
  seconds_optimistic: float = 0.0

  @property
  def fits(self) -> bool:
    """True when the proved end calibrated within the budget."""
    return math.isfinite(self.proved.error)

  @property
  def ratio(self) -> float:
    """The proved ×G (a peer's: its noise part only)."""
    return self.proved.error / self.gaussian_error

  @property
  def ratio_optimistic(self) -> float:
    """The optimistic ×G (nan where unknown)."""
    if self.optimistic.unknown:
      return math.nan
    return self.optimistic.error / self.gaussian_error

  def interval(self):
    """(optimistic, proved, known) ×G, as `frontier.ends` reads a frontier
    row: an unknown optimistic end is 0, so no verdict against it holds."""
    return frontier.ends({frontier.RATIO: self.ratio,
                          'ratio_to_gaussian_attained': self.ratio_optimistic})


def kind_of(name: str) -> str:
  """BOUNDED, MODULAR or PEER for a mechanism name.

  Args:
    name: a registry mechanism behind the secure sum, or one of PEERS.

  Returns:
    Its kind: MODULAR where the mechanism sums modulo its own modulus.

  Raises:
    ValueError: an unknown name or the central Gaussian (the reference),
      listing the names allowed.
  """
  if name in PEERS:
    return PEER
  validation.check_one_of('mechanisms', name, default_mechanisms())
  mech = mechanisms.build(name, 1.0)   # its defaults: the kind only
  return BOUNDED if mech.modulus is None else MODULAR


def default_mechanisms() -> List[str]:
  """Every registry mechanism behind the secure sum, then TFF's peers."""
  return list(mechanisms.registry()) + list(PEERS)


def _wire_scan(setting: Setting, reuse: Optional[dict] = None):
  """`frontier.best_over_multiples`' calibration for a bounded mechanism:
  the wire-budget scan at B (`calibrate_for_wire_bits`) with its error
  including wraps. A level count whose attained search did not apply makes
  the optimistic end unknown (AttainedUnavailable): the scan's answer
  without it could sit above the optimistic end. `reuse`: {c: the scan's
  `reuse` dict} shared by calls at other budgets (same mechanism, target,
  schedule and bound)."""
  def calibrate(name, bits, c, schedule, limits):
    del bits   # the scan chooses the level count
    found = calibration.calibrate_for_wire_bits(
        name, setting.wire_bits, coordinate_clip=c, limits=limits,
        reuse=None if reuse is None else reuse.setdefault(c, {}), **schedule)
    return found.utility.error, found
  return calibrate


def _bits_needed(reason: str) -> Optional[int]:
  """The fewest bits a refusal's text names (`_BITS_NEEDED`), or None."""
  found = [int(a or b) for a, b in _BITS_NEEDED.findall(reason)]
  return min(found, default=None)


def _first_bits(kind: str, setting: Setting) -> int:
  """The level bits a calibration's cost is estimated at: the wire scan's
  first level count (bounded), the modulus's bits (modular)."""
  return 1 if kind == BOUNDED else setting.wire_bits


def estimated_operations(name: str, setting: Setting,
                         ks: Sequence[float]) -> float:
  """The least estimated operations of one ε evaluation of `name`'s exact
  search over the multiples k, at the level count its calibration starts
  from (`frontier._cell_cost`, the accountant's default limits); 0 for a
  peer (closed form)."""
  kind = kind_of(name)
  if kind == PEER:
    return 0.0
  return min(frontier._cell_cost(  # pylint: disable=protected-access
      name, _first_bits(kind, setting), setting.clients_per_round,
      k / math.sqrt(setting.dim)) for k in ks)


def compute_end(name: str, setting: Setting, ks: Sequence[float],
                rtol: float, bound: str, gaussian_error: float,
                max_bytes: Optional[int] = None,
                reuse: Optional[dict] = None) -> End:
  """One end of one mechanism (what a child process computes).

  Args:
    name: the mechanism (`kind_of`).
    setting: the `Setting`.
    ks: the coordinate-clip multiples tried (c∞ = k/√d).
    rtol: the calibration's relative width.
    bound: 'proved' or 'attained' (the optimistic end).
    gaussian_error: the Gaussian reference's debiased error (a peer's z_G).
    max_bytes: this process's address-space cap (`frontier.limit_memory`);
      None: uncapped.
    reuse: None, or a dict the bounded mechanisms' level-count calibrations
      are kept in and read from (`calibrate_for_wire_bits`' reuse, per k):
      pass the same dict for one mechanism at several budgets of one
      setting (the same ε, schedule, ks, rtol and bound).

  Returns:
    The `End`: inf + reason where nothing fits; unknown + reason where the
    attained search did not apply or memory ran out.
  """
  start = time.process_time()
  if max_bytes:
    frontier.limit_memory(max_bytes)
  try:
    end = _compute_end(name, setting, ks, rtol, bound, gaussian_error,
                       reuse)
  except MemoryError as err:
    end = End(reason=f'out of memory: over {max_bytes / 2**30:.3g} GiB: {err}',
              unknown=bound != 'proved')
  return dataclasses.replace(end, cpu_seconds=time.process_time() - start)


def _compute_end(name, setting, ks, rtol, bound, gaussian_error,
                 reuse=None) -> End:
  kind = kind_of(name)
  n = setting.clients_per_round
  if kind == PEER:
    try:
      error, peer = frontier.peer_error(
          name, setting.epsilon, setting.delta, setting.rounds, n,
          setting.total_clients, setting.dim, setting.wire_bits,
          setting.use_profile)
    except ValueError as err:
      return End(reason=str(err).replace('\n', ' '))
    return End(error=error,
               level_bits=setting.wire_bits, wire_bits=setting.wire_bits,
               params=json.dumps(dict(noise_multiplier=peer.noise_multiplier,
                                      bits=setting.wire_bits)),
               reason=frontier.PEER_REASON)
  reasons = []
  calibrate = (_wire_scan(setting, reuse) if kind == BOUNDED else
               frontier.plain_calibration)
  max_ops = frontier.DEFAULT_MAX_OPERATIONS if bound == 'proved' else None
  try:
    best = frontier.best_over_multiples(
        name, _first_bits(kind, setting), setting.dim, ks, max_ops,
        setting.schedule(rtol, bound), reasons, calibrate=calibrate)
  except calibration.AttainedUnavailable as err:
    return End(reason=str(err).replace('\n', ' '), unknown=True)
  if best is None:   # the k whose refusal names the fewest bits first
    needs = [_bits_needed(r) for r in reasons]
    order = sorted(range(len(reasons)), key=lambda i: (needs[i] or math.inf, i))
    return End(bits_needed=min(filter(None, needs), default=None),
               reason=' | '.join(reasons[i] for i in order).replace('\n', ' '))
  why = ' | '.join(reasons).replace('\n', ' ')
  _, k, c, found = best
  if kind == BOUNDED:
    cal, util = found.calibration, found.utility
    need = next(cand.wire_bits_needed for cand in found.candidates
                if cand.calibration is cal)
    return End(error=util.error, coordinate_clip_multiple=k,
               level_bits=found.level_bits, wire_bits=need,
               wrap_probability=util.wrap_probability,
               params=json.dumps(dict(clip=c, **cal.tunables), default=float),
               reason=why)
  mech = found.mechanism
  return End(error=found.debiased_error, coordinate_clip_multiple=k,
             level_bits=mech.bits_per_coordinate,
             wire_bits=int(round(math.log2(mech.modulus))),
             params=json.dumps(dict(clip=c, **found.tunables), default=float),
             reason=why)


def _lesser(proved: End, attained: End, dim: int) -> End:
  """The optimistic end as `frontier.with_attained_end` keeps it: the
  proved calibration meets the attained bound too (and fits the same
  budget), so the attained search's answer is kept only where its error +
  clipping bias² is at most the proved one's, its error capped there."""
  if attained.unknown:
    return attained
  bias = lambda end: frontier.clip_bias_sq(end.coordinate_clip_multiple, dim)
  if (math.isfinite(attained.error) and
      attained.error + bias(attained) <= proved.error + bias(proved)):
    return dataclasses.replace(attained, error=min(attained.error,
                                                   proved.error))
  return dataclasses.replace(
      proved, cpu_seconds=attained.cpu_seconds, reason=(
          'the proved calibration (which meets the attained bound too) has '
          'the lesser error'))


def _in_child(args, limit_s):
  """(End, wall seconds) of `compute_end(*args)` in a child process stopped
  after `limit_s`; a stop, a death or an error is an End saying so."""
  bound = args[4]
  unknown = bound != 'proved'
  try:
    out = isolated.call_in_child(compute_end, args, limit_s)
  except Exception as err:  # pylint: disable=broad-except
    return End(reason=f'{type(err).__name__}: {err}', unknown=unknown), 0.0
  if out.ended == isolated.RETURNED:
    return out.value, out.seconds
  if out.ended == isolated.DIED:
    return End(reason=f'its process ended with exit code {out.exitcode} '
               '(out of memory?)', unknown=unknown), out.seconds
  return End(reason=f'stopped after --max_seconds_per_mechanism='
             f'{limit_s:g} s', unknown=unknown), out.seconds


def _unknown(reason: str) -> End:
  return End(reason=reason, unknown=True)


def answer_one(name: str, setting: Setting, ks: Sequence[float],
               max_seconds: float, optimistic: bool, rtol: float,
               gaussian_error: float, max_bytes: Optional[int] = None) -> Row:
  """One mechanism's `Row`: its cost estimated first, then each end in a
  child process (`compute_end`) stopped after `max_seconds`.

  Args:
    name, setting, ks, rtol, gaussian_error, max_bytes: as `compute_end`.
    max_seconds: each end's time limit (seconds > 0).
    optimistic: also compute the optimistic end (bounded and modular
      mechanisms whose proved end fits).

  Returns:
    The `Row`.
  """
  kind = kind_of(name)
  ops = estimated_operations(name, setting, ks)
  limit = frontier.DEFAULT_MAX_OPERATIONS
  if ops > limit:
    why = (f'skipped: its exact search needs ~{ops:.2g} operations per ε '
           f'evaluation at its cheapest level count and k, over the '
           f'accountant\'s limit {limit:.2g} (secure_sum.Limits.'
           'max_operations)')
    return Row(name, kind, End(reason=why), _unknown('not computed'),
               gaussian_error, ops)
  proved, seconds = _in_child(
      (name, setting, tuple(ks), rtol, 'proved', gaussian_error, max_bytes),
      max_seconds)
  if kind == PEER:
    other, other_s = _unknown('no attained ε for TFF\'s closed forms'), 0.0
  elif not optimistic:
    other, other_s = _unknown('not computed (--nooptimistic)'), 0.0
  elif not math.isfinite(proved.error):
    other, other_s = _unknown('not computed: the proved end does not fit'), 0.0
  else:
    other, other_s = _in_child(
        (name, setting, tuple(ks), rtol, 'attained', gaussian_error,
         max_bytes), max_seconds)
    other = _lesser(proved, other, setting.dim)
  return Row(name, kind, proved, other, gaussian_error, ops, seconds, other_s)


def answer(epsilon: float, delta: float, dim: int, clients_per_round: int,
           total_clients: int, rounds: int, wire_bits: int,
           mechanism_names: Optional[Sequence[str]] = None,
           coordinate_clip_multiples: Sequence[float] = DEFAULT_MULTIPLES,
           max_seconds_per_mechanism: float = DEFAULT_MAX_SECONDS,
           optimistic: bool = True, rtol: float = DEFAULT_RTOL,
           workers: int = 1,
           progress: Optional[Callable[[Row], None]] = None,
           use_profile: bool = True) -> List[Row]:
  """Every mechanism at one setting and wire budget (module docstring).

  Args:
    epsilon, delta, dim, clients_per_round, total_clients, rounds,
      wire_bits: the `Setting`.
    mechanism_names: registry mechanisms behind the secure sum and PEERS
      (default `default_mechanisms()`).
    coordinate_clip_multiples: the k tried (c∞ = k/√d), each > 0.
    max_seconds_per_mechanism: each end's time limit, seconds > 0.
    optimistic: compute the optimistic end (False: faster; those ends
      unknown, no verdict against them holds).
    rtol: the calibration's relative width, in (0, 0.5].
    workers: mechanisms computed at once (>= 1), each end a process.
    progress: called with each `Row` as it is finished.
    use_profile: the `Setting`'s (every mechanism's calibration on the
      profile route too; the Gaussian reference takes its best route
      either way).

  Returns:
    The rows, in the order of `mechanism_names`.

  Raises:
    ValueError: a bad number or name (named, with the range).
  """
  setting = Setting(epsilon, delta, dim, clients_per_round, total_clients,
                    rounds, wire_bits, use_profile)
  names = list(mechanism_names or default_mechanisms())
  if not names:
    raise ValueError('`mechanism_names`: give at least one mechanism.')
  for name in names:
    kind_of(name)
  ks = tuple(coordinate_clip_multiples)
  if not ks:
    raise ValueError('`coordinate_clip_multiples`: give at least one k > 0.')
  for k in ks:
    validation.check_positive('coordinate_clip_multiples', k)
  validation.check_positive('max_seconds_per_mechanism',
                            max_seconds_per_mechanism)
  validation.check_number('rtol', rtol, 0, 0.5, low_open=True)
  workers = validation.check_integer('workers', workers, 1)
  gaussian = frontier.best_reference(   # whatever route the others take
      setting.epsilon, setting.delta, setting.rounds,
      setting.clients_per_round, setting.total_clients, setting.dim, rtol)
  max_bytes = frontier.worker_memory_bytes(workers)
  rows = {}
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    futures = {pool.submit(answer_one, name, setting, ks,
                           max_seconds_per_mechanism, optimistic, rtol,
                           gaussian.debiased_error, max_bytes): name
               for name in names}
    for done in concurrent.futures.as_completed(futures):
      row = done.result()
      rows[futures[done]] = row
      if progress:
        progress(row)
  return [rows[name] for name in names]


def _ratio_text(row: Row) -> str:
  if not row.fits:
    return '—'
  if row.kind == PEER:
    return f'>= {row.ratio:.3g} (noise only)'
  lo, hi, known = row.interval()
  if not known:
    return f'[?, {hi:.3g}]'
  return f'{hi:.3g}' if f'{lo:.3g}' == f'{hi:.3g}' else f'[{lo:.3g}, {hi:.3g}]'


def recommend(rows: Sequence[Row]) -> str:
  """One line: the mechanism(s) with the least proved ×G and whether that
  ranking survives the [optimistic, proved] intervals.

  A mechanism is shown to do worse than the least only where its optimistic
  end is above the least's proved figure (the intervals separate; an
  unknown optimistic end separates nothing), as `frontier.least_by_bits`
  reads the frontier. TFF's peers (noise part only) are not ranked.

  Args:
    rows: `answer`'s rows.

  Returns:
    The line.
  """
  ranked = sorted((r for r in rows if r.fits and r.kind != PEER),
                  key=lambda r: (r.ratio, r.mechanism))
  peers = [r for r in rows if r.fits and r.kind == PEER]
  peer_text = ('' if not peers else ' TFF\'s peers, noise part alone (a '
               'lower bound on their × Gaussian, not ranked): ' + ', '.join(
                   f'{r.mechanism} {r.ratio:.3g}×' for r in peers) + '.')
  if not ranked:
    needs = [(r.proved.bits_needed, r.mechanism) for r in rows
             if r.proved.bits_needed]
    fewest = (f' The fewest wire bits a refusal names: {min(needs)[0]} '
              f'({min(needs)[1]}).' if needs else '')
    return ('No quantized mechanism fits this wire budget at this target '
            f'(reasons in the table).{fewest}{peer_text}')
  best = ranked[0]
  hi = best.ratio
  leaders = [r for r in ranked if r.ratio == hi]
  rest = [r for r in ranked if r.ratio != hi]
  unseparated = [r for r in rest if r.interval()[0] <= hi]
  names = ' and '.join(r.mechanism for r in leaders)
  line = (f'Least proved × Gaussian: {names} at {_ratio_text(best)} '
          f'({best.proved.level_bits} level bits, '
          f'{best.proved.wire_bits} wire bits needed, k = '
          f'{best.proved.coordinate_clip_multiple:g}). ')
  if not rest:
    line += 'No other quantized mechanism fits to rank it against.'
  elif not unseparated:
    line += ('The ranking holds: its interval separates it from every other '
             'mechanism that fits (' + ', '.join(r.mechanism for r in rest)
             + ' shown worse).')
  else:
    line += ('The answer cannot separate it from ' + ', '.join(
        f'{r.mechanism} {_ratio_text(r)}' for r in unseparated)
             + ' (their intervals overlap its proved figure: any of them may '
             'do as well)')
    worse = [r.mechanism for r in rest if r not in unseparated]
    line += ('; shown worse: ' + ', '.join(worse) + '.' if worse else '.')
  return line + peer_text


def _params_text(row: Row) -> str:
  if not row.fits:
    return row.proved.reason[:300] or 'no answer'
  text = row.proved.params
  if row.proved.reason and row.kind != PEER:
    text += f' · {row.proved.reason[:200]}'
  if row.kind != PEER and row.optimistic.unknown:
    text += f' · optimistic end: {row.optimistic.reason[:200]}'
  return text


def _seconds_text(row: Row) -> str:
  cpu = row.proved.cpu_seconds + row.optimistic.cpu_seconds
  if row.seconds_optimistic:
    return (f'{row.seconds:.0f} + {row.seconds_optimistic:.0f} (CPU '
            f'{cpu:.0f})')
  return f'{row.seconds:.0f} (CPU {cpu:.0f})'


def accounting_line(setting: Setting) -> str:
  """The report's line naming the routes: the mechanisms' (the setting's)
  and the Gaussian reference's (its best, whatever theirs).

  Args:
    setting: the `Setting` answered.

  Returns:
    One line of Markdown.
  """
  ours = ('every mechanism by the lesser of the RDP and profile routes'
          if setting.use_profile else 'every mechanism by the RDP route '
          'alone (--nouse_profile: faster, conservative for them)')
  return (f'Accounting: {ours}; the Gaussian reference by its best sound '
          'method (the lesser of WBK19 Thm 27 and its exact profile sampled '
          'and composed).')


def report(rows: Sequence[Row], setting: Setting) -> str:
  """Markdown: the setting, the data used, a table of every mechanism at
  the budget, the recommendation and how to read the figures.

  Args:
    rows: `answer`'s rows.
    setting: the `Setting` they answer.

  Returns:
    The Markdown text.
  """
  s = setting
  b = s.wire_bits
  gauss = rows[0].gaussian_error if rows else math.nan
  lines = [
      f'## Which mechanism at {b} wire bits', '',
      f'ε = {s.epsilon:g}, δ = {s.delta:.3g}, d = {s.dim:,}, n = '
      f'{s.clients_per_round:,} of N = {s.total_clients:,} clients per round, '
      f'{s.rounds:,} rounds; a budget of {b} wire bits per coordinate (the '
      f'secure sum\'s field 2^{b}: what a client uploads; docs/bits.md).', '',
      'Data: none (exact accounting; debiased error of the decoded mean, '
      'Var/slope² at the worst shared input |x| <= 1/√d, for updates of ℓ2 '
      'norm <= 1 after a random rotation, c∞ = k/√d; wraps counted).', '',
      accounting_line(s), '',
      f'| mechanism | level bits | wire bits needed (<= {b}) | × Gaussian '
      '[optimistic, proved] | k | calibrated parameters, or why not | '
      'seconds |',
      '|---|---|---|---|---|---|---|']
  for r in rows:
    if r.fits:
      wired = str(r.proved.wire_bits)
    elif r.proved.bits_needed:
      wired = f'does not fit: needs {r.proved.bits_needed}'
    else:
      wired = 'does not fit'
    k = r.proved.coordinate_clip_multiple
    lines.append(
        f'| {r.mechanism} | {r.proved.level_bits or "—"} | {wired} | '
        f'{_ratio_text(r)} | {"—" if k is None else f"{k:g}"} | '
        f'{_params_text(r)} | {_seconds_text(r)} |')
  penalty = frontier.generic_subsampling_penalty(
      s.epsilon, s.delta, s.rounds, s.clients_per_round, s.total_clients,
      s.dim, s.use_profile)
  lines += [
      '', f'**Recommendation**: {recommend(rows)}', '',
      '× Gaussian: the debiased error per coordinate with the wraps counted '
      'over the continuous Gaussian\'s at the same (ε, δ) '
      f'({gauss:.4g} per coordinate). Proved: calibrated on the '
      'accountant\'s proved ε (a guarantee); optimistic: on the ε named '
      'inputs attain (not a guarantee; "?": not computed). A ranking holds '
      'only where the intervals separate. TFF\'s peers (tff_*): their noise '
      'variance over the Gaussian\'s, (z/z_G)², the noise part only, a lower '
      'bound on their × Gaussian (rounding and modular clipping add to it). '
      'Seconds: wall time of the proved + optimistic ends\' processes (CPU: '
      'their calibrations\' CPU time).']
  if (not s.use_profile and rows) or penalty > 1.01:
    lines += ['', frontier.penalty_text(
        (s.epsilon, s.delta, s.dim, s.clients_per_round, s.total_clients,
         s.rounds), s.use_profile)]
  return '\n'.join(lines) + '\n'
