"""Cells of the equal-privacy frontier: calibrate one (mechanism, bits, ε, d, n,
rounds) cell, run cells in time-limited processes, and write the report.

A cell's figure is its debiased error (`mechanisms.utility`: the worst
Var/slope² of the decoded mean of n clients sharing an input |x| <= 1/√d,
what calibration minimises) and its ratio to the continuous Gaussian's at the
same target; plain MSE stays as extra columns. A mechanism that cannot carry
the signal at those bits is inf with calibration's reason (for a modular sum,
the bits it needs).

Each figure is an interval [optimistic, proved]. The proved end calibrates
so that the accountant's proved ε meets the target (a guarantee for any
inputs of the other clients). The optimistic end calibrates so that the ε
named inputs attain on the same route meets it (`calibration_report(...,
bound='attained')`): the best a perfect bound over the others' inputs could
allow, NOT a guarantee. The continuous Gaussian's reference is exact (its
two ends are one value); the modular sums' (skellam, ddgauss) are calibrated
at both ends like the rest (their ℓ2 round bound is a chord majorant).
Verdicts (`rqm_vs_pbm`, `fewest_bits_interval`) hold only where the
intervals separate; one that holds on the proved figures alone is reported
as flipping. Where the attained search does not apply (its cost), the
optimistic end is unknown (nan) and taken as 0: no verdict against it holds.

Used by experiments/privacy_frontier.py (the flags and the loop live there).
"""

import dataclasses
import functools
import json
import math
import multiprocessing
import os
import resource
import time

from scipy import stats

from tff_quant import accounting
from tff_quant import mechanisms
from tff_quant.accounting import (calibration, composition, gaussian_domination,
                                  secure_sum)
from tff_quant.common import validation
from tff_quant.mechanisms import wire

COLUMNS = ('mechanism', 'bits', 'epsilon', 'delta', 'dim', 'clients_per_round',
           'total_clients', 'rounds', 'params', 'debiased_error_per_coordinate',
           'ratio_to_gaussian', 'slope', 'mse_per_coordinate',
           'mse_ratio_to_gaussian', 'epsilon_achieved', 'bits_used',
           'coordinate_clip_multiple', 'clip_bias_sq', 'gaussian_mse',
           'gaussian_noise_to_signal', 'seconds', 'reason',
           # The proved calibration's attained ε (nan: none computed).
           'epsilon_attained',
           # The optimistic end (module docstring): nan where unknown.
           'debiased_error_attained', 'ratio_to_gaussian_attained',
           'params_attained', 'coordinate_clip_multiple_attained',
           'seconds_attained', 'reason_attained',
           # The digest of the accountant code that computed the row
           # (accounting.provenance; 'unrecorded' for rows written before).
           'accountant',
           # Bits as secure aggregation carries them (docs/bits.md), from
           # the row's calibrated parameters at its cohort (`wire_columns`).
           'level_bits', 'wire_bits', 'wrap_probability',
           'ratio_to_gaussian_wire')
#: The columns `wire_columns` derives from a row (not part of a cell's
#: calibration: filled in for rows written before them).
WIRE_COLUMNS = COLUMNS[-4:]
#: Written to the results folder's config: cells ranked by another metric
#: (plain MSE before it) are not resumed into one report.
METRIC = 'debiased_error'
#: Written to the config too: the ends each cell is computed at (a folder
#: without the optimistic end is not resumed into one report).
ENDS = 'attained,proved'
KEY = COLUMNS[:8]
GAUSSIAN = 'gaussian'
#: The exact search's cost limit per ε evaluation: the accountant's default,
#: so a cell gets the bound a calibration with the library's defaults gets.
DEFAULT_MAX_OPERATIONS = secure_sum.DEFAULT_LIMITS.max_operations
CENTRAL_BITS = 'inf'   # the Gaussian's bits column: not quantized


def clip_bias_sq(k: float, dim: int) -> float:
  """E[(|Z| - k)_+²]/d, Z ~ N(0, 1): the squared clipping error per coordinate of
  a rotated update of norm 1 clipped at k/√d (averaging clients cannot lower it)."""
  tail = stats.norm.sf(k)
  return 2 * ((1 + k * k) * tail - k * stats.norm.pdf(k)) / dim


def key(row):
  return tuple(str(row[c]) for c in KEY)


# The columns of KEY that a Gaussian reference serves: every mechanism and bits.
SETTING = ('epsilon', 'delta', 'dim', 'clients_per_round', 'total_clients',
           'rounds')


#: TFF's distributed aggregators (`aggregators.peers`): rows at their own
#: wire bits (the cell's bits), calibrated by `peers.calibrate`.
PEERS = ('tff_dgauss', 'tff_skellam')
#: What a peer's row counts of its error (`peer_error`).
PEER_REASON = ('noise part only: (z/z_G)², a lower bound on its × Gaussian '
               '(TFF\'s rounding to its integer grid and its modular clipping '
               'not counted)')


#: Why a peer's two ends are one value (`with_attained_end`).
PEER_ENDS = ('TFF\'s peer: calibrated on its own accounting, its error the '
             'noise part only (already the optimistic figure): the two ends '
             'are one value')


def peer_error(name, epsilon, delta, rounds, clients_per_round, total_clients,
               dim, bits, use_profile=False):
  """TFF's distributed aggregator `name` calibrated to ε at `bits` wire bits
  (ℓ2 clip 1), and the noise part of its debiased error: central noise std
  z·clip on the sum of n, z²/n² per coordinate of the mean.

  Args:
    name: one of PEERS.
    epsilon, delta, rounds, clients_per_round, total_clients, dim: the
      setting (`peers.calibrate`).
    bits: its secure-sum bits per coordinate.
    use_profile: calibrate on the profile route too (`peers.calibrate`).

  Returns:
    (z²/n², the calibrated `aggregators.peers.Peer`).

  Raises:
    ValueError: the target out of reach at these bits (peers.calibrate's
      reason), or an argument out of range.
  """
  from tff_quant.aggregators import peers  # pylint: disable=g-import-not-at-top
  from tff_quant.program import quiet  # pylint: disable=g-import-not-at-top
  validation.check_one_of('mechanism', name, PEERS)
  quiet.import_tensorflow()   # TFF's own functions size the peer (silenced)
  peer = peers.calibrate(name, epsilon, delta, rounds, clients_per_round,
                         total_clients, dim, 1.0, bits=bits,
                         use_profile=use_profile)
  return peer.noise_multiplier**2 / clients_per_round**2, peer


def setting_of(row):
  """(ε, δ, d, n, N, rounds): the setting a row's cell belongs to."""
  return tuple(str(row[c]) for c in SETTING)


def _cell_cost(name, bits, clients, coordinate_clip,
               limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS):
  """Estimated operations of one ε evaluation at the cheapest point of the first
  scanned parameter's grid, the others at their defaults (0 where the law is
  exact, or nothing builds: calibration scans further), under `limits`."""
  cls = mechanisms.get(name)
  first = cls.tunable(cls.CALIBRATED[0])
  grid = first.grid if len(cls.CALIBRATED) > 1 and first.grid else (None,)
  orders = secure_sum.order_ladder(calibration.FAST_ORDERS)
  costs = []
  for value in grid:
    params = {} if value is None else {first.name: value}
    try:
      mech = calibration.mechanism_for_bits(name, coordinate_clip, bits, **params)
    except ValueError:
      continue
    if mech.has_exact_divergences:
      return 0.0
    costs.append(secure_sum.estimated_operations(mech, clients, len(orders),
                                                 limits=limits))
  return min(costs, default=0.0)


def empty_row(cell, reason=''):
  """The row of a cell with nothing calibrated (errors inf)."""
  return dict(zip(KEY, cell), params='', debiased_error_per_coordinate=math.inf,
              ratio_to_gaussian=math.inf, slope='', mse_per_coordinate=math.inf,
              mse_ratio_to_gaussian=math.inf, epsilon_achieved=math.nan,
              bits_used='', coordinate_clip_multiple='', clip_bias_sq='',
              gaussian_mse='', gaussian_noise_to_signal='', seconds='',
              reason=reason, epsilon_attained=math.nan,
              accountant=accounting.provenance.SOURCE_DIGEST,
              **_unknown_optimistic_end(
                  'not computed: the proved end has no calibration'
                  if reason else ''))


def wire_columns(row) -> dict:
  """The row's bits as secure aggregation carries them (docs/bits.md).

  level_bits: ⌈log2 L⌉ of the calibrated mechanism (the cell's bits where
  nothing was calibrated). wire_bits: the fewest bits of a secure-sum field
  2^b that holds the cohort's level sum with a proved wrap probability of at
  most `utility.MODCLIP_PROB` per coordinate and round, for any inputs
  (`mechanisms.wire.wire_bits_needed`); a modular sum's own modulus bits.
  wrap_probability: that bound at wire_bits. ratio_to_gaussian_wire: the
  proved ratio with the wraps counted, (√E + s)²/E_G, where s is the
  root-error shift the wraps add (`wire.debiased_error_with_wraps`, by
  Minkowski). The accountant's ε is unchanged: the server's view is a
  function of the exact sum (docs/privacy.md, "Wire budget").

  Args:
    row: a frontier row (its mechanism, bits, params, clients_per_round,
      debiased error and ratio).

  Returns:
    {column: value} for WIRE_COLUMNS; '' where not applicable (the central
    Gaussian; a cell with nothing calibrated, or whose params lack the
    clip, has level bits only). One of TFF's PEERS: its bits on the wire
    (its field; its wrap target is TFF's own), its ratio unchanged.
  """
  out = dict.fromkeys(WIRE_COLUMNS, '')
  if row['mechanism'] == GAUSSIAN:
    return out
  out['level_bits'] = row['bits']
  if row['mechanism'] in PEERS:   # its field is its bits
    out.update(wire_bits=row['bits'], ratio_to_gaussian_wire=(
        as_float(row['ratio_to_gaussian']) if row.get('params') else ''))
    return out
  params = json.loads(row.get('params') or '{}')
  if 'clip' not in params:   # nothing calibrated: no mechanism to rebuild
    return out
  mech = mechanisms.build(row['mechanism'], params.pop('clip'), **params)
  ratio = as_float(row['ratio_to_gaussian'])
  out['level_bits'] = mech.bits_per_coordinate
  if mech.modulus is not None:
    out.update(wire_bits=int(round(math.log2(mech.modulus))),
               wrap_probability='', ratio_to_gaussian_wire=ratio)
    return out
  n = int(row['clients_per_round'])
  bits = wire.wire_bits_needed(mech, n)
  found = wire.debiased_error_with_wraps(mech, n, bits)
  shift = math.sqrt(found.error) - math.sqrt(found.error_without_wraps)
  error = as_float(row[ERROR])
  out.update(wire_bits=bits, wrap_probability=found.wrap_probability,
             ratio_to_gaussian_wire=ratio * (
                 (math.sqrt(error) + shift) / math.sqrt(error))**2)
  return out


def with_wire_columns(row) -> dict:
  """`row` with WIRE_COLUMNS filled in where it lacks them (a row written
  before them), else unchanged."""
  if row.get('wire_bits') not in (None, ''):
    return row
  return dict(row, **wire_columns(row))


def fewest_wire_bits_within(rows, factor=1.1):
  """{setting_of(row): {mechanism: (fewest wire bits with the proved ratio
  (wraps counted) <= factor, the level bits there)}}; (None, None) where no
  row of that mechanism is within."""
  out = {}
  for r in rows:
    if r['mechanism'] == GAUSSIAN:
      continue
    mine = out.setdefault(setting_of(r), {})
    mine.setdefault(r['mechanism'], (None, None))
    ratio = as_float(r.get('ratio_to_gaussian_wire'))
    if r.get('wire_bits') in (None, '') or not ratio <= factor:
      continue
    bits, level = int(float(r['wire_bits'])), int(float(r['level_bits']))
    best = mine[r['mechanism']]
    if best[0] is None or (bits, level) < best:
      mine[r['mechanism']] = (bits, level)
  return out


def _unknown_optimistic_end(reason):
  """The optimistic end's columns when it is unknown (nan + why)."""
  return dict(debiased_error_attained=math.nan,
              ratio_to_gaussian_attained=math.nan, params_attained='',
              coordinate_clip_multiple_attained='', seconds_attained='',
              reason_attained=reason)


def physical_memory_bytes() -> int:
  """This machine's physical memory."""
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')


def worker_memory_bytes(workers: int) -> int:
  """A cell worker's default address-space cap: 80% of physical memory shared
  by `workers` (what `--max_memory_gb` defaults to)."""
  return int(0.8 * physical_memory_bytes() / workers)


def limit_memory(max_bytes: int) -> None:
  """Caps this process's address space at `max_bytes` (RLIMIT_AS): an
  allocation beyond it raises MemoryError here instead of waking the
  kernel's OOM killer, which may end any process of the machine."""
  _, hard = resource.getrlimit(resource.RLIMIT_AS)
  if hard != resource.RLIM_INFINITY:
    max_bytes = min(max_bytes, hard)
  resource.setrlimit(resource.RLIMIT_AS, (max_bytes, hard))


def _memory_reason(max_bytes, err) -> str:
  return (f'out of memory: over the worker\'s {max_bytes / 2**30:.3g} GiB '
          f'(--max_memory_gb): {err}')


def _cell_worker(cell, max_operations, ks, rtol, conn, max_bytes=None,
                 use_profile=False):
  """Sends ('proved', row) and then ('both', row): a cell stopped in its
  optimistic end keeps its proved one. With `max_bytes`, the worker's
  address space is capped there (`limit_memory`) and a cell that needs more
  is a row whose reason says so."""
  if max_bytes:
    limit_memory(max_bytes)
  try:
    row = proved_row(cell, max_operations, ks, rtol, use_profile=use_profile)
  except MemoryError as e:
    conn.send(('both', empty_row(cell, _memory_reason(max_bytes, e))))
    conn.close()
    return
  except Exception as e:  # pylint: disable=broad-except
    conn.send(('both', empty_row(cell, f'{type(e).__name__}: {e}')))
    conn.close()
    return
  conn.send(('proved', row))
  try:
    row = with_attained_end(row, cell, ks, rtol, use_profile=use_profile)
  except MemoryError as e:
    row = dict(row, **_unknown_optimistic_end(_memory_reason(max_bytes, e)))
  except Exception as e:  # pylint: disable=broad-except
    row = dict(row, **_unknown_optimistic_end(f'{type(e).__name__}: {e}'))
  conn.send(('both', row))
  conn.close()


def run_cells(todo, workers, max_seconds, max_operations, ks, rtol,
              max_bytes=None, use_profile=False):
  """Yields each cell's row as it ends: one forked process per cell, at most
  `workers` at a time. Each of a cell's two ends gets `max_seconds`: a cell
  still in its proved end then is stopped (row inf + reason); one still in
  its optimistic end keeps its proved end (the optimistic one unknown +
  reason_attained). With `max_bytes`, each worker's address space is capped
  there (`limit_memory`)."""
  ctx = multiprocessing.get_context('fork')
  todo, running = list(todo), {}
  while todo or running:
    while todo and len(running) < workers:
      cell = todo.pop(0)
      recv, send = ctx.Pipe(duplex=False)
      proc = ctx.Process(target=_cell_worker,
                         args=(cell, max_operations, ks, rtol, send, max_bytes,
                               use_profile),
                         daemon=True)
      proc.start()
      send.close()
      running[proc] = (cell, time.time(), recv, None)
    time.sleep(0.05)
    for proc, (cell, start, recv, proved) in list(running.items()):
      row = None
      stopped = (f'calibration still running after '
                 f'--max_seconds_per_cell={max_seconds:g} s')
      if recv.poll():
        try:
          end, got = recv.recv()
        except EOFError:
          end, got = 'both', empty_row(
              cell, f'worker ended with code {proc.exitcode}')
        if end == 'proved':   # the optimistic end's clock starts
          running[proc] = (cell, time.time(), recv, got)
          continue
        row = got
      elif not proc.is_alive():
        why = f'worker ended with code {proc.exitcode} (out of memory?)'
        row = (empty_row(cell, why) if proved is None else
               dict(proved, **_unknown_optimistic_end(why)))
      elif time.time() - start > max_seconds:
        proc.terminate()
        if proved is None:
          row = empty_row(cell, stopped)
          row['seconds'] = time.time() - start
        else:
          row = dict(proved, **_unknown_optimistic_end(stopped))
          row['seconds_attained'] = time.time() - start
      if row is not None:
        proc.join()
        recv.close()
        del running[proc]
        yield row


@functools.lru_cache(maxsize=None)
def gaussian_reference(eps, delta, rounds, n, total, dim, rtol,
                       use_profile=False):
  """The continuous Gaussian calibrated to the cell's target (no coordinate
  bound); with `use_profile`, by the least of its RDP route (WBK19 Thm 27)
  and its exact profile sampled and composed (`profile_route`)."""
  return accounting.calibration_report(
      GAUSSIAN, eps, delta, rounds, n, total, dim, l2_clip=1.0, rtol=rtol,
      compare_gaussian=False, use_profile=use_profile)


@functools.lru_cache(maxsize=None)
def best_reference(eps, delta, rounds, n, total, dim, rtol):
  """Every ratio's reference: the Gaussian at its best sound route
  (`gaussian_reference` with the profile route), whatever route the
  mechanisms took, so that no route's looser bound flatters them."""
  return gaussian_reference(eps, delta, rounds, n, total, dim, rtol,
                            use_profile=True)


@functools.lru_cache(maxsize=None)
def rdp_route_factor(eps, delta, rounds, n, total, dim, rtol=1e-2) -> float:
  """The Gaussian's debiased error on the RDP route alone (WBK19 Thm 27)
  over its error at its best route (`best_reference`): >= 1, the part of an
  RDP-route ratio that is the route (1.48 at ε = 10, 2.30 at ε = 3, 3.38 at
  ε = 1 in the committed setting)."""
  args = (eps, delta, rounds, n, total, dim, rtol)
  return (gaussian_reference(*args, use_profile=False).debiased_error /
          best_reference(*args).debiased_error)


def accounting_factor(eps, delta, rounds, n, total, dim, use_profile=False):
  """The Gaussian accounted as the quantized mechanisms are on the cells'
  route, over the reference (the Gaussian at its best): the share of every
  ratio that is the accounting. Profile route: `generic_subsampling_penalty`;
  RDP route: that penalty times `rdp_route_factor` (6.92 at ε = 1 in the
  committed setting)."""
  penalty = generic_subsampling_penalty(eps, delta, rounds, n, total, dim,
                                        use_profile)
  if use_profile:
    return penalty
  return penalty * rdp_route_factor(eps, delta, rounds, n, total, dim)


@functools.lru_cache(maxsize=None)
def generic_subsampling_penalty(eps, delta, rounds, n, total, dim,
                                use_profile=False):
  """The Gaussian's own debiased error at the target when it is accounted
  only as a quantized mechanism is, from its round's RDP curve, over its
  error under its own best bound: (σ_generic/σ_own)², each σ the least
  meeting (ε, δ) (bisection to 1e-4).

  Without `use_profile` (the RDP route): generic = WBK19 Thm 9, own = Thm
  27 (dp-accounting). With it: generic = the lesser of Thm 9 and the
  profile route from the RDP curve (CKS20 Prop. 12, what a mechanism
  without a proved Gaussian domination gets), own = the lesser of Thm 27
  and its exact profile sampled and composed. A mechanism with a proved
  Gaussian domination (PBM; RQM and QMGeo in their central bin;
  `accounting.gaussian_domination`) pays none of it.

  Args:
    eps, delta, rounds, n, total, dim: the setting (as in a cell).
    use_profile: the routes (above).

  Returns:
    The ratio, >= 1 up to the bisection's width: the part of a quantized
    mechanism's ratio to the Gaussian that the accounting, not the
    mechanism, accounts for (RDP route: 2.05 at ε = 1, 1.0 at ε = 10 in
    the committed setting; profile route: 1.65 at ε = 1; docs/frontier.md).
  """
  def epsilon(sigma, generic):
    acc = composition.RoundAccountant(
        mechanisms.Gaussian(1 / math.sqrt(dim), sigma), n, total, delta, dim)
    if generic:
      acc = composition.RoundAccountant.from_round_rdp(
          dict(acc.rdp), n, total, delta, dim, 'the Gaussian\'s RDP curve')
    return acc.epsilon_from_curve(rounds, use_profile)

  def least_sigma(generic):
    lo, hi = 1e-3, 1.0
    while epsilon(hi, generic) > eps:
      lo, hi = hi, 2 * hi
    while (hi - lo) > 1e-4 * hi:   # the ratio is printed to 3 digits
      mid = (lo + hi) / 2
      lo, hi = (lo, mid) if epsilon(mid, generic) <= eps else (mid, hi)
    return hi
  return (least_sigma(True) / least_sigma(False))**2


def _closed_form(name) -> bool:
  """True when `name`'s round divergences are exact in closed form (the
  central Gaussian's): its attained RDP is its proved RDP, the two ends one
  value. The modular sums' per-coordinate divergences are exact too, but on
  the ℓ2 route their round bound (the chord majorant) is above what named
  inputs attain (`accounting.attained.is_modular`): both ends calibrated."""
  cls = mechanisms.get(name)
  return cls.central and (cls.sum_divergences is not
                          mechanisms.Mechanism.sum_divergences)


def compute_cell(cell, max_operations, ks, rtol,
                 limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS,
                 use_profile=False):
  """One row, both ends: `proved_row`, then `with_attained_end`, both
  under `limits` (the proved end's max_operations from the argument) and
  on the same routes (`use_profile`)."""
  row = proved_row(cell, max_operations, ks, rtol, limits, use_profile)
  return with_attained_end(row, cell, ks, rtol, limits, use_profile)


def proved_row(cell, max_operations, ks, rtol,
               limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS,
               use_profile=False):
  """One row's proved end: the calibration at the k with the least debiased
  error + clipping bias² (or inf + reason); the optimistic end unknown.
  `use_profile`: every calibration, the reference's too, also on the
  profile route (`accounting.calibration_report`)."""
  name, bits, eps, delta, dim, n, total, rounds = cell
  t0 = time.time()
  row = empty_row(cell)
  schedule = dict(epsilon=eps, delta=delta, rounds=rounds, clients_per_round=n,
                  total_clients=total, dim=dim, l2_clip=1.0, rtol=rtol,
                  use_profile=use_profile)
  gauss = best_reference(eps, delta, rounds, n, total, dim, rtol)
  row['gaussian_mse'] = gauss.mse   # its debiased error too (slope 1)
  # d·MSE against ‖update‖² = 1: above 1 the Gaussian's decoded mean is mostly
  # noise (where plain MSE let a bounded quantizer undercut it).
  row['gaussian_noise_to_signal'] = dim * gauss.mse
  if name in PEERS:
    return _peer_row(row, cell, gauss, t0, use_profile)
  if name == GAUSSIAN:   # on the cells' route, against itself at its best
    own = gauss if use_profile else gaussian_reference(
        eps, delta, rounds, n, total, dim, rtol, use_profile=False)
    row.update(params=json.dumps(own.mechanism.params()),
               debiased_error_per_coordinate=own.debiased_error,
               ratio_to_gaussian=own.debiased_error / gauss.debiased_error,
               slope=own.slope, mse_per_coordinate=own.mse,
               mse_ratio_to_gaussian=own.mse / gauss.mse,
               epsilon_achieved=own.epsilon, clip_bias_sq=0.0,
               epsilon_attained=_number(own.epsilon_attained),
               seconds=time.time() - t0)
    return row
  reasons = []
  best = best_over_multiples(name, bits, dim, ks, max_operations, schedule,
                             reasons, limits)
  row['seconds'] = time.time() - t0
  if best is None:
    row['reason'] = ' | '.join(reasons).replace('\n', ' ')
    return row
  _, k, c, rep = best
  if rep.refused:
    reasons.append(f'k={k:g}: not evaluated (over --max_operations): {rep.refused}')
  method = rep.assumptions.partition(composition.DIVERGENCES_NOTE)[2].rstrip('.')
  if secure_sum.is_loose_method(method):
    reasons.append(f'k={k:g}: {LOOSER}: {method}')
  row.update(params=json.dumps(dict(clip=c, **rep.tunables), default=float),
             debiased_error_per_coordinate=rep.debiased_error,
             ratio_to_gaussian=rep.debiased_error / gauss.debiased_error,
             slope=rep.slope, mse_per_coordinate=rep.mse,
             mse_ratio_to_gaussian=rep.mse / gauss.mse,
             epsilon_achieved=rep.epsilon,
             epsilon_attained=_number(rep.epsilon_attained),
             bits_used=rep.mechanism.bits_per_coordinate,
             coordinate_clip_multiple=k, clip_bias_sq=clip_bias_sq(k, dim),
             reason=' | '.join(reasons).replace('\n', ' '))
  return row


def _peer_row(row, cell, gauss, t0, use_profile=False):
  """`row` of one of TFF's PEERS at its wire bits (`peer_error`, on the
  same routes); its reason where the target is out of reach there."""
  name, bits, eps, delta, dim, n, total, rounds = cell
  try:
    err, peer = peer_error(name, eps, delta, rounds, n, total, dim, bits,
                           use_profile)
  except ValueError as e:
    row.update(reason=str(e).replace('\n', ' '), seconds=time.time() - t0)
    return row
  row.update(params=json.dumps(dict(noise_multiplier=peer.noise_multiplier,
                                    bits=bits)),
             debiased_error_per_coordinate=err,
             ratio_to_gaussian=err / gauss.debiased_error, slope=1.0,
             mse_per_coordinate=err, mse_ratio_to_gaussian=err / gauss.mse,
             epsilon_achieved=peer.epsilon(total, delta, rounds,
                                           use_profile),
             bits_used=bits, clip_bias_sq=0.0, reason=PEER_REASON,
             seconds=time.time() - t0)
  return row


def _number(value):
  return math.nan if value is None else value


def with_attained_end(row, cell, ks, rtol,
                      limits: secure_sum.Limits = secure_sum.DEFAULT_LIMITS,
                      use_profile=False):
  """`row` (its proved end, `proved_row`) with the optimistic end: the same
  cell calibrated with bound='attained' (module docstring) at each k, the k
  with the least debiased error + clipping bias² kept. The proved
  calibration meets the attained bound too, so the optimistic figure is the
  lesser of the two (choosing k by error + bias could otherwise put it above
  the proved one by the bias's difference, ~1e-7). Unknown (nan + why)
  where the attained search does not apply (its cost over `limits`); the
  proved end's copy where the divergences are exact."""
  name, bits, eps, delta, dim, n, total, rounds = cell
  row = dict(row)
  t0 = time.time()
  if name == GAUSSIAN or name in PEERS or _closed_form(name):
    row.update(debiased_error_attained=row['debiased_error_per_coordinate'],
               ratio_to_gaussian_attained=row['ratio_to_gaussian'],
               params_attained=row['params'],
               coordinate_clip_multiple_attained=row['coordinate_clip_multiple'],
               seconds_attained=0.0,
               reason_attained=(PEER_ENDS if name in PEERS else
                                'exact divergences: the two ends are one value'))
    return row
  schedule = dict(epsilon=eps, delta=delta, rounds=rounds, clients_per_round=n,
                  total_clients=total, dim=dim, l2_clip=1.0, rtol=rtol,
                  bound='attained', use_profile=use_profile)
  gauss = best_reference(eps, delta, rounds, n, total, dim, rtol)
  reasons = []
  try:
    best = best_over_multiples(name, bits, dim, ks, None, schedule, reasons,
                               limits)
  except calibration.AttainedUnavailable as e:
    row.update(_unknown_optimistic_end(str(e)),
               seconds_attained=time.time() - t0)
    return row
  proved_err = as_float(row['debiased_error_per_coordinate'])
  proved_total = proved_err + (as_float(row['clip_bias_sq'])
                               if math.isfinite(proved_err) else 0.0)
  if best is not None and best[0] <= proved_total:
    _, k, c, rep = best
    err = min(rep.debiased_error, proved_err)
    params = json.dumps(dict(clip=c, **rep.tunables), default=float)
  elif math.isfinite(proved_err):
    k, err, params = row['coordinate_clip_multiple'], proved_err, row['params']
    reasons.append('the proved calibration (which meets the attained bound '
                   'too) has the lesser error')
  else:
    k, err, params = '', math.inf, ''
  row.update(debiased_error_attained=err,
             ratio_to_gaussian_attained=err / gauss.debiased_error,
             params_attained=params, coordinate_clip_multiple_attained=k,
             seconds_attained=time.time() - t0,
             reason_attained=' | '.join(reasons).replace('\n', ' '))
  return row


def plain_calibration(name, bits, coordinate_clip, schedule, limits):
  """(debiased error, `Calibration`): `accounting.calibration_report` at
  `bits` and c∞ = `coordinate_clip` under `limits` (`calibration.Limits`),
  the schedule's keyword arguments passed through: a frontier cell's
  calibration at one k, `best_over_multiples`' default."""
  rep = accounting.calibration_report(
      name, bits=bits, coordinate_clip=coordinate_clip, compare_gaussian=False,
      limits=limits, **schedule)
  return rep.debiased_error, rep


def best_over_multiples(name, bits, dim, ks, max_operations, schedule, reasons,
                        limits=secure_sum.DEFAULT_LIMITS, calibrate=None):
  """(debiased error + clip bias², k, c, result) at the best
  coordinate-clip multiple k, or None; why each other k failed is appended
  to `reasons`.

  Args:
    name, bits, dim: the mechanism, the bits its cost is estimated at (and
      `plain_calibration`'s bits), d (c = k/√d).
    ks: the multiples tried.
    max_operations: the accountant's search runs under `limits` with this
      max_operations (`secure_sum.Limits`), and a k whose estimated cost
      (`_cell_cost` at `bits`) is above it is skipped with the reason; None:
      no cost check and `limits` as given (the optimistic end: the proved
      accountant's cost does not apply).
    schedule: the keyword arguments of the calibration (target, schedule,
      l2_clip, rtol, bound).
    reasons: a list the reasons are appended to.
    limits: the accountant's `secure_sum.Limits`.
    calibrate: (name, bits, c, schedule, `calibration.Limits`) -> (debiased
      error, result); a ValueError is a refusal at that k (its message
      appended to `reasons`). Default `plain_calibration` (result: its
      `Calibration`); `which_mechanism` passes the wire-budget scan.

  Returns:
    The best (error + `clip_bias_sq(k, dim)`, k, c, result), or None.

  Raises:
    calibration.AttainedUnavailable: from the calibration (the optimistic
      end is unknown).
  """
  best = None
  calibrate = calibrate or plain_calibration
  if max_operations is not None:
    limits = dataclasses.replace(limits, max_operations=max_operations)
  for k in ks:
    c = k / math.sqrt(dim)
    cost = (0.0 if max_operations is None else
            _cell_cost(name, bits, schedule['clients_per_round'], c, limits))
    if max_operations is not None and cost > max_operations:
      reasons.append(f'k={k:g}: exact search ~{cost:.2g} operations per evaluation '
                     f'> --max_operations={max_operations:.2g}')
      continue
    try:
      error, result = calibrate(name, bits, c, schedule,
                                calibration.Limits(accountant=limits))
    except calibration.AttainedUnavailable:
      raise
    except ValueError as e:
      reasons.append(f'k={k:g}: {e}')
      continue
    total_err = error + clip_bias_sq(k, dim)
    if best is None or total_err < best[0]:
      best = (total_err, k, c, result)
  return best


def as_float(v):
  try:
    return float(v)
  except (TypeError, ValueError):
    return math.nan


ERROR = 'debiased_error_per_coordinate'
RATIO = 'ratio_to_gaussian'
_OPTIMISTIC = {ERROR: 'debiased_error_attained',
               RATIO: 'ratio_to_gaussian_attained'}


def ends(row, column=RATIO):
  """(optimistic, proved, known): a row's figure (`column`: the ratio to the
  Gaussian or the debiased error) as the interval [optimistic, proved]. An
  unknown optimistic end (nan: the attained search did not apply, or the
  cell stopped) is 0 with known False, so no verdict against it holds."""
  hi = as_float(row[column])
  lo = as_float(row.get(_OPTIMISTIC[column], math.nan))
  if math.isnan(lo):
    return 0.0, hi, False
  return min(lo, hi), hi, True


def fewest_bits_within(rows, factor=1.1, end='proved'):
  """{setting_of(row): {mechanism: fewest bits with debiased error <= factor ×
  the Gaussian's}} on the proved figures, or (end='attained') on the
  optimistic ends (an unknown one counts as within)."""
  out = {}
  for r in rows:
    if r['mechanism'] == GAUSSIAN:
      continue
    mine = out.setdefault(setting_of(r), {})
    lo, hi, _ = ends(r)
    if (hi if end == 'proved' else lo) <= factor:
      b = int(r['bits'])
      mine[r['mechanism']] = min(b, mine.get(r['mechanism']) or b)
    else:
      mine.setdefault(r['mechanism'], None)
  return out


def fewest_bits_interval(rows, factor=1.1):
  """{setting_of(row): {mechanism: (proved, optimistic, unknown)}}: the fewest
  bits within `factor` × the Gaussian's debiased error on the proved figures
  and on the optimistic ends (None: no bits), and whether the optimistic
  bits are there only because that end is unknown. The proved verdict holds
  on the intervals only where the two agree; else it flips (at fewer bits
  the interval straddles the factor)."""
  proved = fewest_bits_within(rows, factor)
  hopeful = fewest_bits_within(rows, factor, end='attained')
  known = {(setting_of(r), r['mechanism'], int(r['bits'])): ends(r)[2]
           for r in rows if r['mechanism'] != GAUSSIAN}
  return {s: {m: (b, hopeful[s][m], hopeful[s][m] is not None and
                  not known[(s, m, hopeful[s][m])])
              for m, b in mechs.items()} for s, mechs in proved.items()}


LOOSER = 'a looser bound over --max_operations'   # a row's reason, see compute_cell
_LIMIT_FLAGS = ('--max_operations', '--max_seconds_per_cell',
                '--max_memory_gb')


def limited_by_budget(row) -> bool:
  """True when a cost or time limit shaped the row: a k refused or a cell
  stopped (inf) at either end, or divergences bounded loosely over the cost
  limit; such a cell may come out tighter under larger limits
  (`--retry_limited`)."""
  return any(flag in row.get(col, '') for flag in _LIMIT_FLAGS
             for col in ('reason', 'reason_attained'))


@dataclasses.dataclass
class Versus:
  """RQM against PBM over cells (same bits, ε and schedule)."""
  both: int = 0        # cells where both proved figures are finite
  rqm_lower: int = 0   # of those, RQM's proved debiased error is lower
  loose: int = 0       # of those, either bounded loosely over the cost limit
  rqm_sure: int = 0    # the intervals separate, RQM lower
  pbm_sure: int = 0    # the intervals separate, PBM lower
  #: key(cell with mechanism '') where the proved figures rank the two but
  #: the intervals [optimistic, proved] overlap: the verdict flips.
  flips: list = dataclasses.field(default_factory=list)


def rqm_vs_pbm(rows) -> Versus:
  """RQM vs PBM per cell on the proved debiased errors and on the intervals
  (`Versus`); a loose bound makes the comparison one of bounds, not of
  mechanisms (counted)."""
  by = {}
  for r in rows:
    if r['mechanism'] in ('rqm', 'pbm'):
      by.setdefault(key(dict(r, mechanism='')), {})[r['mechanism']] = r
  out = Versus()
  for cell, v in sorted(by.items()):
    if len(v) < 2:
      continue
    (r_lo, r_hi, _), (p_lo, p_hi, _) = ends(v['rqm'], ERROR), ends(v['pbm'], ERROR)
    if not (math.isfinite(r_hi) and math.isfinite(p_hi)):
      continue
    out.both += 1
    out.rqm_lower += r_hi < p_hi
    out.loose += LOOSER in v['rqm']['reason'] or LOOSER in v['pbm']['reason']
    out.rqm_sure += r_hi < p_lo
    out.pbm_sure += p_hi < r_lo
    if r_hi != p_hi and not (r_hi < p_lo or p_hi < r_lo):
      out.flips.append(cell)
  return out


def rqm_vs_pbm_by_bits(rows):
  """{bits: `Versus`} where both are calibrated at those bits somewhere."""
  out = {}
  for bits in sorted({int(r['bits']) for r in rows if r['mechanism'] == 'rqm'}):
    versus = rqm_vs_pbm([r for r in rows if r['bits'] == str(bits)])
    if versus.both:
      out[bits] = versus
  return out


def cell_flips(rows, factor=1.1):
  """{key(row): [verdicts of that cell that flip]}: 'within 1.1×' where the
  proved figure is over the factor and the optimistic end is not (or is
  unknown: '?'), 'vs PBM'/'vs RQM' where the RQM-vs-PBM verdict flips."""
  out = {}
  for r in rows:
    if r['mechanism'] == GAUSSIAN:
      continue
    lo, hi, known = ends(r)
    if hi > factor >= lo:
      out.setdefault(key(r), []).append(
          f'within {factor:g}×' + ('' if known else '?'))
  for cell in rqm_vs_pbm(rows).flips:
    for mine, other in (('rqm', 'PBM'), ('pbm', 'RQM')):
      out.setdefault((mine,) + cell[1:], []).append(f'vs {other}')
  return out


def on_one_reference(rows):
  """Rows whose Gaussian reference (gaussian_mse and the ratios and
  noise-to-signal from it) is their setting's current Gaussian row's
  reference (its `gaussian_mse`: the Gaussian at its best route,
  `best_reference`), the ratio with the wraps counted too: cells computed
  in earlier runs keep their own calibration, but one setting has one
  reference (a fix to the Gaussian's calibration otherwise left old rows
  against an older one). The Gaussian's ends are one value: both ratios
  are taken against it."""
  ref = {setting_of(r): as_float(r['gaussian_mse']) for r in rows
         if r['mechanism'] == GAUSSIAN}
  out = []
  for r in rows:
    g = ref.get(setting_of(r))
    if g is not None and math.isfinite(g) and g > 0 and r['gaussian_mse'] != '':
      wire = as_float(r.get('ratio_to_gaussian_wire') or 'nan')
      if math.isfinite(wire):   # the same error over the new reference
        r = dict(r, ratio_to_gaussian_wire=str(
            wire * as_float(r['gaussian_mse']) / g))
      r = dict(r, gaussian_mse=str(g),
               gaussian_noise_to_signal=str(as_float(r['dim']) * g),
               ratio_to_gaussian=str(
                   as_float(r['debiased_error_per_coordinate']) / g),
               mse_ratio_to_gaussian=str(as_float(r['mse_per_coordinate']) / g))
      if 'debiased_error_attained' in r:
        r['ratio_to_gaussian_attained'] = str(
            as_float(r['debiased_error_attained']) / g)
    out.append(r)
  return out


def _interval(row) -> str:
  lo, hi, known = ends(row)
  if not known:
    return f'[?, {hi:.3g}]'
  return f'{hi:.3g}' if lo == hi else f'[{lo:.3g}, {hi:.3g}]'


def _versus_text(v: Versus) -> str:
  return (f'RQM lower in {v.rqm_lower} of {v.both} on the proved figures; '
          f'intervals: RQM lower in {v.rqm_sure}, PBM lower in {v.pbm_sure}, '
          f'{v.both - v.rqm_sure - v.pbm_sure} overlap')


def least_by_bits(rows):
  """{(setting_of(row), bits): (least, ties)}: per setting and bits, the
  mechanism with the least proved ratio to the Gaussian (ties broken by
  name), and the others whose interval [optimistic, proved] overlaps its
  (an unknown optimistic end overlaps everything below its proved figure):
  the proved ranking puts `least` first, but only a mechanism outside `ties`
  is shown to do worse."""
  by = {}
  for r in rows:
    if r['mechanism'] == GAUSSIAN or not math.isfinite(ends(r)[1]):
      continue
    by.setdefault((setting_of(r), int(r['bits'])), []).append(r)
  out = {}
  for cell, mine in by.items():
    mine.sort(key=lambda r: (ends(r)[1], r['mechanism']))
    lo, hi, _ = ends(mine[0])
    out[cell] = (mine[0]['mechanism'],
                 [r['mechanism'] for r in mine[1:] if ends(r)[0] <= hi])
  return out


def penalty_text(setting, use_profile=False) -> str:
  """What of a setting's ratios the accounting, not the mechanism, accounts
  for (`accounting_factor` on the routes the cells used)."""
  eps, delta, dim, n, total, rounds = setting
  args = (float(eps), float(delta), int(rounds), int(n), int(total), int(dim))
  penalty = accounting_factor(*args, use_profile)
  if not use_profile:
    return ('RDP route: the reference is the Gaussian at its best route (the '
            'lesser of WBK19 Thm 27 and its exact profile); accounted on the '
            f'RDP route alone (Thm 27) it would have '
            f'{rdp_route_factor(*args):.3g}× its reference\'s error, and '
            'under the generic bound the quantized mechanisms get (WBK19 Thm '
            f'9) {penalty:.3g}×: that much of every ratio here is the '
            'accounting, not the mechanism.')
  if int(n) <= gaussian_domination.MAX_CLIENTS:
    pbm = ('PBM\'s rounds, RQM\'s and QMGeo\'s with [−c, c] in their '
           'central bin, and the quantized Gaussian\'s and randomized '
           'projection\'s with the input lattice are a proved Gaussian '
           'domination (docs/privacy.md, "Gaussian domination"; above two '
           'levels through the others\' blanket, "Above two levels"): no '
           'accounting penalty (1.0); what they keep is the rate over the '
           'Fisher value, squared. ')
  else:
    pbm = (f'PBM\'s Gaussian domination is not served above '
           f'{gaussian_domination.MAX_CLIENTS} clients: it is '
           'accounted from its RDP curve too (the quantized Gaussian\'s and '
           'randomized projection\'s blanket mixture is, within its cost '
           'limit). ')
  return ('Profile route: the reference is the Gaussian by the lesser of Thm 27 '
          'and its exact profile. ' + pbm + 'The Gaussian accounted from its '
          'RDP curve alone, as every other mechanism is, would be '
          f'{penalty:.3g}× its reference: that much of their ratios is the '
          'accounting, not the mechanism.')


def matrix_lines(rows, use_profile=False):
  """Markdown: per setting, the proved ratio to the Gaussian's debiased error
  of each mechanism (rows) at each bits (columns), the optimistic end in
  brackets where it differs ('?' where unknown), '—' where not served, † a
  row of other accountant code, and the least proved figure per bits in
  bold (`least_by_bits`); `use_profile`: the cells' routes (`penalty_text`)."""
  current = accounting.provenance.SOURCE_DIGEST
  least = least_by_bits(rows)
  out = []
  settings = sorted({setting_of(r) for r in rows},
                    key=lambda s: tuple(map(as_float, s)))
  for setting in settings:
    mine = [r for r in rows if setting_of(r) == setting and
            r['mechanism'] != GAUSSIAN]
    if not mine:
      continue
    bits = sorted({int(r['bits']) for r in mine})
    eps, _, dim, n, _, rounds = setting
    out += [f'ε = {eps}, d = {dim}, n = {n}, {rounds} rounds: proved × the '
            'Gaussian [optimistic end]; bold: the least proved figure at '
            'those bits. ' + penalty_text(setting, use_profile), '',
            '| mechanism | ' + ' | '.join(f'{b} bit' + 's' * (b != 1) for b in bits) + ' |',
            '|---|' + '---|' * len(bits)]
    for mech in sorted({r['mechanism'] for r in mine}):
      cells = []
      for b in bits:
        r = next((r for r in mine if r['mechanism'] == mech and
                  int(r['bits']) == b), None)
        if r is None:
          cells.append('')
          continue
        lo, hi, known = ends(r)
        if not math.isfinite(hi):
          text = '—'
        else:
          text = f'{hi:.3g}'
          if (setting, b) in least and least[(setting, b)][0] == mech:
            text = f'**{text}**'
          if not known:
            text += ' [?]'
          elif lo < hi and f'{lo:.3g}' != f'{hi:.3g}':
            text += f' [{lo:.3g}]'
        if r.get('accountant', UNRECORDED) != current:
          text += ' †'
        cells.append(text)
      out.append(f'| {mech} | ' + ' | '.join(cells) + ' |')
    ties = [f'{b} bit' + 's' * (b != 1) + f': {least[(setting, b)][0]}'
            + (f' (not separated from {", ".join(least[(setting, b)][1])})'
               if least[(setting, b)][1] else ' (separated from every other)')
            for b in bits if (setting, b) in least]
    out += ['', 'Least proved figure: ' + '; '.join(ties) + '.', '']
  return out


def _cell_text(cell) -> str:
  _, bits, eps, _, dim, n, _, rounds = cell
  return f'{bits} bits ε={eps} d={dim} n={n} {rounds} rounds'


def papers_epsilon_of_reference(row):
  """The Gaussian reference row's ε in the papers' convention (add/remove,
  Poisson at q = n/N; `accounting.conventions`), for comparison with
  published results only; None where its params lack σ.

  Its noise multiplier is the central std over the ℓ2 clip (1 here): √n·σ,
  σ the per-client std whose mean has variance σ²/n (the row's error).

  Args:
    row: a GAUSSIAN row (its params, clients_per_round, total_clients,
      rounds, delta).

  Returns:
    ε (float) or None.
  """
  sigma = json.loads(row.get('params') or '{}').get('sigma')
  if sigma is None:
    return None
  n = int(as_float(row['clients_per_round']))
  return accounting.conventions.papers_epsilon_gaussian(
      sigma * math.sqrt(n), n / as_float(row['total_clients']),
      int(as_float(row['rounds'])), as_float(row['delta']))[0]


def write_report(rows, output_dir, use_profile=False):
  """frontier.md (table + verdicts) and frontier.png; returns the verdict
  lines. `use_profile`: the cells were calibrated on the profile route too
  (the accounting penalty is that route's, `penalty_text`)."""
  rows = sorted(rows, key=lambda r: tuple(as_float(r[c]) if c != 'mechanism'
                                          else 0 for c in KEY) + (r['mechanism'],))
  flips = cell_flips(rows)
  rows = [with_wire_columns(r) for r in rows]
  lines = ['| mechanism | level bits | wire bits (× Gaussian, wraps counted) '
           '| ε | d | n | rounds | debiased error/coord '
           '[optimistic, proved] | × Gaussian [optimistic, proved] | flips '
           '| slope | MSE/coord | MSE × Gaussian | k | ε attained (proved '
           'calibration) | params or reason |',
           '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|']
  current = accounting.provenance.SOURCE_DIGEST
  for r in rows:
    ratio = as_float(r['ratio_to_gaussian'])
    lo, hi, known = ends(r, ERROR)
    error = (f'{hi:.3g}' if known and lo == hi else
             f'[{lo:.3g}, {hi:.3g}]' if known else f'[?, {hi:.3g}]')
    what = r['params'] if math.isfinite(ratio) else r['reason'][:300]
    if r.get('accountant', UNRECORDED) != current:
      what = f'† {what}'
    if not known and r['mechanism'] != GAUSSIAN:
      what += f' · optimistic end: {r.get("reason_attained", "")[:200]}'
    papers = (papers_epsilon_of_reference(r)
              if r['mechanism'] == GAUSSIAN and math.isfinite(ratio) else None)
    if papers is not None:
      what += (f' · for comparison with papers only, ε = {papers:.3g} in the '
               f'{accounting.conventions.LABEL}')
    wire_ratio = as_float(r.get('ratio_to_gaussian_wire'))
    wired = ('' if r.get('wire_bits') in (None, '') else
             f'{r["wire_bits"]} ({wire_ratio:.3g})')
    lines.append(f'| {r["mechanism"]} | {r["bits"]} | {wired} | {r["epsilon"]} | {r["dim"]} | '
                 f'{r["clients_per_round"]} | {r["rounds"]} | {error} | '
                 f'{_interval(r)} | {", ".join(flips.get(key(r), []))} | '
                 f'{as_float(r["slope"]):.3g} | '
                 f'{as_float(r["mse_per_coordinate"]):.3g} | '
                 f'{as_float(r["mse_ratio_to_gaussian"]):.3g} | '
                 f'{r["coordinate_clip_multiple"]} | '
                 f'{as_float(r.get("epsilon_attained")):.4g} | {what} |')
  versus = rqm_vs_pbm(rows)
  verdicts = [f'RQM vs PBM at equal whole-model (ε, δ) and bits, debiased '
              f'error in {versus.both} cells where both are calibrated: '
              + _versus_text(versus)
              + (f' ({versus.loose} of them with a looser bound over the cost '
                 'limit for one of the two)' if versus.loose else '')
              + '; flips (the proved ranking does not survive the attained '
              'end): ' + (', '.join(_cell_text(c) for c in versus.flips)
                          or 'none') + '.',
              'RQM vs PBM by bits: ' + '; '.join(
                  f'{b}: {_versus_text(v)}'
                  for b, v in rqm_vs_pbm_by_bits(rows).items()) + '.']
  flipped = total = 0
  for setting, mechs in sorted(fewest_bits_interval(rows).items(),
                               key=lambda kv: tuple(map(as_float, kv[0]))):
    eps, _, dim, n, _, rounds = setting
    parts = []
    for m, (b, b_hope, unknown) in sorted(mechs.items()):
      total += 1
      part = f'{m} {b if b is not None else "none"}'
      if b_hope != b:
        flipped += 1
        part += (f' (flips: {b_hope}? at the optimistic end, not computed '
                 'there)' if unknown else f' (flips: {b_hope} at the '
                 'optimistic end)')
      parts.append(part)
    nsr = [as_float(r['gaussian_noise_to_signal']) for r in rows
           if setting_of(r) == setting]
    nsr = max(nsr) if nsr else math.nan
    note = (f' [the Gaussian\'s noise energy is {nsr:.3g}× the update\'s]'
            if nsr > 1 else '')
    penalty = accounting_factor(float(eps), float(setting[1]), int(rounds),
                                int(n), int(setting[4]), int(dim), use_profile)
    if penalty > 1.01:
      note += (f' [the Gaussian by the quantized mechanisms\' '
               + ('accounting from its RDP curve' if use_profile else
                  'RDP route and subsampling bound') + f': {penalty:.3g}×]')
    verdicts.append(f'ε={eps}, d={dim}, n={n}, {rounds} rounds: fewest bits within '
                    f'1.1× of the Gaussian\'s debiased error (proved): '
                    + ', '.join(parts) + note)
  for setting, mechs in sorted(fewest_wire_bits_within(rows).items(),
                               key=lambda kv: tuple(map(as_float, kv[0]))):
    eps, _, dim, n, _, rounds = setting
    verdicts.append(
        f'ε={eps}, d={dim}, n={n}, {rounds} rounds: fewest WIRE bits (the '
        'secure sum\'s field per coordinate, what a client uploads) within '
        '1.1× of the Gaussian\'s debiased error, wraps counted (proved): '
        + ', '.join(f'{m} {b} (at {lv} level bits)' if b is not None else
                    f'{m} none' for m, (b, lv) in sorted(mechs.items())))
  verdicts.append(f'Flips between the attained and the proved ε: {flipped} of '
                  f'{total} fewest-bits verdicts, {len(versus.flips)} of '
                  f'{versus.both} RQM-vs-PBM cells; cells marked in the table\'s '
                  '"flips" column.')
  text = '\n'.join(['# Equal-privacy frontier', '',
                    'Data: none (exact accounting; debiased error of the decoded '
                    'mean, Var/slope² at the worst shared input |x| <= 1/√d, for '
                    'updates of ℓ2 norm <= 1; plain MSE beside it).', '',
                    'Each figure is an interval [optimistic, proved]: proved = '
                    'calibrated so that the accountant\'s proved ε meets the '
                    'target (a guarantee); optimistic = calibrated so that the '
                    'ε named inputs attain on the same route meets it '
                    '(calibration bound=\'attained\': the best a perfect bound '
                    'over the other clients\' inputs could allow; not a '
                    'guarantee). The Gaussian\'s reference is exact: one '
                    'value. "?": the '
                    'optimistic end was not computed (attained search over its '
                    'cost limit, or stopped); no verdict against it holds. A '
                    'verdict holds only where the intervals separate; one that '
                    'holds on the proved figures alone is marked "flips".', '',
                    accountants_line(rows), '']
                   + verdicts + [''] + matrix_lines(rows, use_profile) + lines
                   ) + '\n'
  with open(os.path.join(output_dir, 'frontier.md.tmp'), 'w') as f:
    f.write(text)
  os.replace(os.path.join(output_dir, 'frontier.md.tmp'),
             os.path.join(output_dir, 'frontier.md'))
  plot(rows, os.path.join(output_dir, 'frontier.png'))
  return verdicts


UNRECORDED = 'unrecorded'


def accountants_line(rows) -> str:
  """Which accountant code computed the rows (`accounting.provenance`
  digests): all the current one, or how many rows another (marked † in the
  table: recomputed by the next run that asks for their cells)."""
  current = accounting.provenance.SOURCE_DIGEST
  other = sum(r.get('accountant', UNRECORDED) != current for r in rows)
  line = f'Accountant: {current} (the code that wrote this report)'
  if not other:
    return line + ' computed every row.'
  return (line + f' computed {len(rows) - other} of {len(rows)} rows; the '
          f'{other} marked † come from other accountant code (earlier, '
          'looser or different bounds) and are recomputed by the next run '
          'that asks for their cells.')


def plot(rows, path):
  """Debiased error's ratio to the Gaussian's vs bits: one panel per ε, one
  colour per mechanism, its proved end solid and its optimistic end dotted
  (where known and different; the first (d, n, rounds) setting of the
  rows)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  quantized = [r for r in rows if r['mechanism'] != GAUSSIAN]
  if not quantized:
    return
  first = quantized[0]
  setting = {c: first[c] for c in ('dim', 'clients_per_round', 'rounds')}
  epsilons = sorted({r['epsilon'] for r in quantized}, key=float)
  fig, axes = plt.subplots(1, len(epsilons), figsize=(4 * len(epsilons), 3.4),
                           squeeze=False, sharey=True)
  mechs = sorted({r['mechanism'] for r in quantized})
  color = {m: f'C{i % 10}' for i, m in enumerate(mechs)}   # one per mechanism
  shown = {}
  for ax, eps in zip(axes[0], epsilons):
    for mech in mechs:
      mine = sorted(((int(r['bits']),) + ends(r) for r in quantized
                     if r['mechanism'] == mech and r['epsilon'] == eps and
                     all(r[c] == v for c, v in setting.items())))
      pts = [(b, hi) for b, _, hi, _ in mine if math.isfinite(hi)]
      if pts:
        shown[mech], = ax.plot(*zip(*pts), marker='o', color=color[mech])
      low = [(b, lo) for b, lo, hi, known in mine
             if known and math.isfinite(lo) and lo > 0]
      if low and any(lo < hi for _, lo, hi, known in mine if known):
        ax.plot(*zip(*low), marker='v', ls=':', color=color[mech], lw=1)
    ax.axhline(1.0, color='k', lw=0.8, ls='--')
    ax.set_yscale('log')
    ax.set_xlabel('bits per coordinate')
    ax.set_title(f'ε = {eps}')
  axes[0][0].set_ylabel('debiased error / Gaussian\'s')
  axes[0][-1].legend([shown[m] for m in mechs if m in shown],
                     [m for m in mechs if m in shown], fontsize=7)
  fig.suptitle(f'd={setting["dim"]}, n={setting["clients_per_round"]}, '
               f'{setting["rounds"]} rounds (no data: exact accounting); solid: '
               'proved ε, dotted: the attained ε\'s optimistic end', fontsize=9)
  fig.tight_layout()
  fig.savefig(path + '.tmp.png', dpi=110)
  plt.close(fig)
  os.replace(path + '.tmp.png', path)
