"""The seed mechanisms at the FL table's setting: each cell calibrated on the
proved ε, its error against the continuous Gaussian, its slope from the exact
law and measured through TensorFlow encode/decode, the width of ε ∈
[attained, proved], and the seconds the calibration took.

Setting (the FL table's): d = 8,192 after rotation, n = 100 of 3,400 clients
a round, 300 rounds, δ = 1/3,400, ℓ2 clip 1, c∞ = 3/√d, ℓ2 route. ×G is the
debiased error over the continuous Gaussian's at the same ε.

The codec slope: `--draws` encodes of x = +b and of x = -b (b = the signal
bound l2_clip/√d, where the calibration's slope is taken), each decoded as
one client's sum (`Mechanism.decode(levels, 1)`); slope = (mean(+b) -
mean(-b)) / 2b, with a 95% interval from the two samples' variances. The
calibration's slope is the least over the signal range from the exact pmf;
at ±b the two agree for the mechanisms whose decoded mean is affine there.

Each cell is calibrated in a fresh process (the mechanisms cache their laws)
and written to --output as soon as it ends with the digest of the accountant
that computed it (`accounting.provenance`), so a rerun skips the cells this
accountant finished and redoes those of other code.

  python -m benchmarks.served_cells [--cells=qmgeo:4:10,bq:8:3]
      [--draws=1000000] [--output=results/served_cells.json]
"""

import json
import math
import os
import sys
import time

import numpy as np

from tff_quant import accounting
from tff_quant.program import isolated

DIM = 8192
CLIENTS, POPULATION, ROUNDS = 100, 3400, 300
DELTA = 1 / POPULATION
L2_CLIP = 1.0
COORDINATE_CLIP = 3 / math.sqrt(DIM)
SIGNAL_BOUND = L2_CLIP / math.sqrt(DIM)
#: (mechanism, bits, ε): 4 and 8 bits for the smooth mechanisms, BQ within 8 and 10 bits, the modular sums at 16.
CELLS = tuple(
    [(m, b, e) for m in ('quantized_gaussian', 'randomized_projection', 'qmgeo')
     for b in (4, 8) for e in (10.0, 3.0)] +
    [('bq', b, e) for b in (8, 10) for e in (10.0, 3.0)] +
    [(m, 16, e) for m in ('ddgauss', 'skellam') for e in (10.0, 3.0)])


def codec_slope(mech, draws: int, seed: int = 0):
  """(slope, 95% half-width) of the decoded value at ±SIGNAL_BOUND, measured
  through `mech.encode` and `mech.decode`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  means, variances = [], []
  for k, x in enumerate((SIGNAL_BOUND, -SIGNAL_BOUND)):
    levels = mech.encode(tf.fill([draws], tf.constant(x, tf.float32)),
                         tf.constant([seed, k], tf.int64))
    values = mech.decode(levels, 1).numpy().astype(np.float64)
    means.append(values.mean())
    variances.append(values.var(ddof=1))
  slope = (means[0] - means[1]) / (2 * SIGNAL_BOUND)
  half = 1.96 * math.sqrt(sum(variances) / draws) / (2 * SIGNAL_BOUND)
  return slope, half


def _one(cell, draws):
  name, bits, eps = cell
  t0 = time.perf_counter()
  row = dict(mechanism=name, bits=bits, epsilon_target=eps)
  try:
    cal = accounting.calibration_report(
        name, eps, DELTA, ROUNDS, CLIENTS, POPULATION, DIM, bits=bits,
        l2_clip=L2_CLIP, coordinate_clip=COORDINATE_CLIP)
    row.update(seconds=time.perf_counter() - t0, params=repr(cal.mechanism),
               epsilon=cal.epsilon, epsilon_attained=cal.epsilon_attained,
               ratio_to_gaussian=cal.ratio_to_gaussian, slope=cal.slope)
    row['codec_slope'], row['codec_half_width'] = codec_slope(cal.mechanism,
                                                              draws)
  except ValueError as err:   # a refusal is an answer
    row.update(seconds=time.perf_counter() - t0,
               refused=str(err).splitlines()[0][:200])
  return row


def run_cell(cell, draws: int, limit_s: float):
  """The cell's row, computed in a fresh process stopped after `limit_s`;
  a process that dies without a row (e.g. a C abort) is reported at once."""
  out = isolated.call_in_child(_one, (cell, draws), limit_s)
  if out.ended == isolated.RETURNED:
    return out.value
  name, bits, eps = cell
  why = (f'the calibration process died (exit code {out.exitcode})'
         if out.ended == isolated.DIED
         else f'stopped after {limit_s:g} s (over the limit)')
  return dict(mechanism=name, bits=bits, epsilon_target=eps,
              seconds=out.seconds, refused=why)


def table(rows) -> str:
  """The markdown table of `rows`; † marks a row another accountant's code
  computed (its `accountant` digest is not this one's)."""
  lines = ['| mechanism | bits | ε | ×G | slope (pmf) | slope (codec, 95%) | '
           'proved/attained | seconds |', '|---|---|---|---|---|---|---|---|']
  for r in rows:
    mark = ('' if r.get('accountant') == accounting.provenance.SOURCE_DIGEST
            else ' †')
    head = (f'| {r["mechanism"]}{mark} | {r["bits"]} | '
            f'{r["epsilon_target"]:g} |')
    if 'refused' in r:
      lines.append(f'{head} refused: {r["refused"]} | | | | {r["seconds"]:.0f} |')
      continue
    width = (r['epsilon'] / r['epsilon_attained']
             if r.get('epsilon_attained') else math.nan)
    lines.append(
        f'{head} {r["ratio_to_gaussian"]:.3f} | {r["slope"]:.3f} | '
        f'{r["codec_slope"]:.3f} ± {r["codec_half_width"]:.3f} | {width:.3f} '
        f'| {r["seconds"]:.0f} |')
  return '\n'.join(lines)


def _flag(name, default):
  for arg in sys.argv[1:]:
    if arg.startswith(f'--{name}='):
      return arg.split('=', 1)[1]
  return default


def main():
  output = _flag('output', 'results/served_cells.json')
  draws = int(_flag('draws', '1000000'))
  limit_s = float(_flag('limit_s', '900'))
  cells = CELLS
  if _flag('cells', None):
    cells = [(n, int(b), float(e)) for n, b, e in
             (c.split(':') for c in _flag('cells', '').split(','))]
  done = json.load(open(output)) if os.path.exists(output) else []
  key = lambda r: (r['mechanism'], r['bits'], float(r['epsilon_target']))
  # A row counts as finished only if this accountant's code computed it.
  finished = {key(r) for r in done
              if r.get('accountant') == accounting.provenance.SOURCE_DIGEST}
  for cell in cells:
    if cell in finished:
      continue
    row = dict(run_cell(cell, draws, limit_s),
               accountant=accounting.provenance.SOURCE_DIGEST)
    done = [r for r in done if key(r) != cell] + [row]
    print(table([row]).splitlines()[-1], flush=True)
    os.makedirs(os.path.dirname(output) or '.', exist_ok=True)
    with open(output + '.tmp', 'w') as f:
      json.dump(done, f, indent=1)
    os.replace(output + '.tmp', output)
  order = {c: i for i, c in enumerate(cells)}
  print(f'FL table setting: d={DIM}, {CLIENTS} of {POPULATION} clients, '
        f'{ROUNDS} rounds, δ=1/{POPULATION}, ℓ2 clip {L2_CLIP:g}, c∞=3/√d; '
        f'codec slope from {draws} draws at ±{SIGNAL_BOUND:.4g}.')
  print(table(sorted((r for r in done if key(r) in order),
                     key=lambda r: order[key(r)])))


if __name__ == '__main__':
  main()
