"""Calibration under a wire budget: the level count and the mechanism's
parameters chosen jointly for a secure-sum field of 2^b (issue 64).

For a registry mechanism and b wire bits, `calibrate_for_wire_bits` tries
level counts 2^1, 2^2, ... (level bits l = ⌈log2 L⌉, `calibration_report`'s
`bits`), calibrates each to the target with the public calibration, and
keeps the one with the least debiased error including the wraps
(`mechanisms.wire.debiased_error_with_wraps`) among those whose calibrated
mechanism fits b: its proved wrap probability at 2^b is at most
`modclip_prob` (`mechanisms.wire.wire_bits_needed` <= b; a level count
whose exact sum fits b, `unreduced_bits` <= b, never wraps).

Pruning: the scan stops at the first level count whose calibrated mechanism
does not fit. A larger L at the same noise spreads the level sum over more
levels (the calibrated noise per level grows with L at a fixed target), so
the field it needs only grows; this is a heuristic of the search (it
decides which level counts are tried, never an ε or a wrap bound: every
answer's ε is the calibration's, its wrap bound is proved). A level count
the target cannot be met at is recorded and the scan goes on. The cost is
one calibration per level count tried, plus a wrap bound each (a few
hundred pmfs at most, well under a second): the joint search adds level
counts, it does not multiply the calibration's own cost.

The accountant is unchanged: the server's view S mod 2^b is a function of
the exact sum S it bounds (post-processing).
"""

import dataclasses
import math
import time
from typing import Dict, Optional, Tuple

from tff_quant.accounting.calibration import oracle
from tff_quant.accounting.calibration import report as report_lib
from tff_quant.common import validation
from tff_quant.mechanisms import utility
from tff_quant.mechanisms import wire


@dataclasses.dataclass(frozen=True)
class LevelCandidate:
  """One level count tried.

  Attributes:
    level_bits: l, the calibration's `bits` (L <= 2^l levels).
    num_levels: L of the calibrated mechanism (None: not calibrated).
    wire_bits_needed: the fewest wire bits its proved wrap bound admits
      (None: not calibrated).
    error: its debiased error with the wraps at b (inf: not admitted).
    cpu_seconds: the CPU time of its calibration and wrap bound.
    why: '' when admitted, else why not (a refusal's first line, or the
      bits it needs).
    calibration: its `Calibration` (None where refused).
  """
  level_bits: int
  num_levels: Optional[int]
  wire_bits_needed: Optional[int]
  error: float
  cpu_seconds: float
  why: str = ''
  calibration: Optional[report_lib.Calibration] = None


@dataclasses.dataclass(frozen=True)
class WireCalibration:
  """The answer: the level count and parameters with the least debiased
  error including wraps within b wire bits.

  Attributes:
    wire_bits: b.
    calibration: the winner's `Calibration` (its mechanism, ε, setting).
    utility: its `mechanisms.wire.WireUtility` at b.
    candidates: every level count tried, in order.
  """
  wire_bits: int
  calibration: report_lib.Calibration
  utility: wire.WireUtility
  candidates: Tuple[LevelCandidate, ...]

  @property
  def mechanism(self):
    """The calibrated mechanism (to run with wire_bits = `wire_bits`)."""
    return self.calibration.mechanism

  @property
  def level_bits(self) -> int:
    """⌈log2 L⌉ of the winner: one client's level index."""
    return self.calibration.mechanism.bits_per_coordinate


def calibrate_for_wire_bits(mechanism: str, wire_bits: int, epsilon: float,
                            delta: float, rounds: int, clients_per_round: int,
                            total_clients: int, dim: int = 1,
                            modclip_prob: float = utility.MODCLIP_PROB,
                            signal_bound: Optional[float] = None,
                            max_level_bits: Optional[int] = None,
                            reuse: Optional[Dict[int, object]] = None,
                            **kwargs) -> WireCalibration:
  """The mechanism calibrated to (ε, δ) with its levels chosen for b wire bits.

  Args:
    mechanism: a bounded registry name (pbm, rqm, quantized_gaussian,
      randomized_projection, qmgeo, bq).
    wire_bits: b in [1, `wire.MAX_WIRE_BITS`], bits per coordinate on the
      wire (the secure-sum field 2^b).
    epsilon, delta, rounds, clients_per_round, total_clients, dim: the
      target and schedule, as `accounting.calibration_report`.
    modclip_prob: the wrap probability allowed per coordinate and round
      (default TFF's 1e-4).
    signal_bound: the inputs' bound the wrap probability is proved for
      (default each mechanism's input bound c∞: every input).
    max_level_bits: the most level bits tried (default b: a client's level
      index no wider than the field).
    reuse: None, or a dict {level bits: its `Calibration`, or its refusal's
      first line} that this call reads and fills: a level count's
      calibration does not depend on b, so scans of one mechanism, target
      and schedule over several budgets (each call with the same other
      arguments) calibrate each level count once.
    **kwargs: passed to `calibration_report` (l2_clip, coordinate_clip,
      use_pld, rtol, tune, fixed parameters, ...); `bits` is set here, and
      `compare_gaussian` defaults to False.

  Returns:
    A `WireCalibration`.

  Raises:
    ValueError: bad numbers (named, with the range), `bits` or
      `num_levels` in kwargs (the scan sets the level count), or no level
      count that meets the target fits b (the message lists each level
      count tried and why, with the fewest wire bits any of them needed).
    oracle.AttainedUnavailable: with bound='attained', a level count whose
      attained ε cannot be computed (the optimistic answer is then unknown).
  """
  b = validation.check_integer('wire_bits', wire_bits, 1, wire.MAX_WIRE_BITS)
  validation.check_probability('modclip_prob', modclip_prob)
  n = validation.check_integer('clients_per_round', clients_per_round, 1)
  top = validation.check_integer(
      'max_level_bits', b if max_level_bits is None else max_level_bits, 1, 24)
  for key in ('bits', 'num_levels'):
    if key in kwargs:
      raise ValueError(f'`{key}` is chosen by the wire-budget scan; omit it '
                       '(pass max_level_bits to bound the level counts tried).')
  kwargs.setdefault('compare_gaussian', False)
  tried, best = [], None
  for level_bits in range(1, top + 1):
    start = time.process_time()
    cal = None if reuse is None else reuse.get(level_bits)
    if cal is None:
      try:
        cal = report_lib.calibration_report(
            mechanism, epsilon, delta, rounds, n, total_clients, dim,
            bits=level_bits, **kwargs)
      except oracle.AttainedUnavailable as err:
        # The optimistic end of this level count is unknown, so the scan's
        # optimistic answer is too: not a refusal to pass over.
        raise oracle.AttainedUnavailable(
            f'{level_bits} level bits: {str(err).splitlines()[0]}') from err
      except ValueError as err:   # out of reach, refused, over its cost
        cal = str(err).splitlines()[0][:300]
      if reuse is not None:
        reuse[level_bits] = cal
    if isinstance(cal, str):
      tried.append(LevelCandidate(level_bits, None, None, math.inf,
                                  time.process_time() - start, cal))
      continue
    mech = cal.mechanism
    levels = mech.num_levels
    need = wire.wire_bits_needed(mech, n, signal_bound, modclip_prob)
    if need > b:
      tried.append(LevelCandidate(
          level_bits, levels, need, math.inf, time.process_time() - start,
          f'needs {need} wire bits > {b}', cal))
      break   # pruned: larger level counts need more (module docstring)
    util = utility.SignalUtility(cal.debiased_error, cal.slope, math.nan,
                                 math.nan, cal.signal_bound, n)
    found = wire.debiased_error_with_wraps(mech, n, b, signal_bound, util)
    tried.append(LevelCandidate(level_bits, levels, need, found.error,
                                time.process_time() - start, '', cal))
    if best is None or found.error < best[1].error:
      best = (cal, found)
  if best is None:
    lines = '; '.join(f'{t.level_bits} level bits: {t.why}' for t in tried)
    needs = [t.wire_bits_needed for t in tried if t.wire_bits_needed]
    fewest = (f' The fewest wire bits any calibrated level count needed: '
              f'{min(needs)}; allowed wire_bits >= {min(needs)}.'
              if needs else '')
    raise ValueError(f'No level count of {mechanism} meets ε = {epsilon:g} '
                     f'within `wire_bits`={b} ({lines}).{fewest}')
  return WireCalibration(b, best[0], best[1], tuple(tried))
