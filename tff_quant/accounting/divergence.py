"""Exact Rényi divergences of what the server sees: the secure sum of n clients' levels.

The law of a sum of independent integer variables is a convolution. Its tails
underflow float64 (PBM with n >~ 36 already), so convolutions run on exponentially
tilted pmfs: tilting by e^(λk) commutes with convolution, an FFT of the tilted
pmfs is accurate (relative) near the tilted mode, and the saddlepoint equation
picks λ so that every index of the support is near the mode of some tilt. The
result is a log-pmf with full relative precision down to e^-10000 and beyond.
"""

import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from scipy import special

from tff_quant.common import validation

# An index is trusted from a tilt when its tilted value is within this many
# e-folds of the tilted maximum (FFT error is ~1e-16 * log(size) relative to
# the max, so a trusted entry is accurate to ~1e-16 * 20 * e^12 ~ 3e-10 relative;
# measured ~1e-12 against a direct log-domain convolution, PBM n = 40).
_TRUST = 12.0
_MAX_TILTS = 4000
# A tilt's FFT covers a window holding all but 2e^-_ALIAS of the tilted mass.
_ALIAS = 80.0
_AHEAD = 2.5   # tilted stds a tilt is aimed beyond the first unresolved index


def _lower_envelope(lines: Sequence[Tuple[float, float]], length: int) -> np.ndarray:
  """min over (s, λ) in `lines` of s - λk for k = 0..length-1, in O(T log T + length)."""
  hull: List[Tuple[float, float]] = []   # (slope -λ decreasing, intercept s)
  for slope, icpt in sorted({(-l, s) for s, l in lines}, key=lambda t: (-t[0], t[1])):
    if hull and hull[-1][0] == slope:
      continue   # same slope, larger intercept: never the minimum
    while len(hull) >= 2:
      (a1, b1), (a2, b2) = hull[-2], hull[-1]
      # hull[-1] is never the minimum when the new line undercuts hull[-2]
      # no later than hull[-1] does.
      if (icpt - b1) * (a1 - a2) <= (b2 - b1) * (a1 - slope):
        hull.pop()
      else:
        break
    hull.append((slope, icpt))
  slopes = np.array([h[0] for h in hull])
  icpts = np.array([h[1] for h in hull])
  cuts = (icpts[1:] - icpts[:-1]) / (slopes[:-1] - slopes[1:])
  # Line i is the minimum on (cuts[i-1], cuts[i]]: consecutive runs of k.
  ends = np.concatenate([[0], np.clip(np.ceil(cuts), 0, length).astype(np.int64),
                         [length]])
  out = np.empty(length)
  for i in np.flatnonzero(ends[1:] > ends[:-1]):
    k = np.arange(ends[i], ends[i + 1], dtype=np.float64)
    out[ends[i]:ends[i + 1]] = icpts[i] + slopes[i] * k
  return out


def _logsumexp(t: np.ndarray) -> float:
  """log Σ exp(t) for a 1-d array (-inf entries allowed; scipy's, without its overhead)."""
  top = float(np.max(t))
  if not math.isfinite(top):
    return top
  return top + math.log(float(np.sum(np.exp(t - top))))


def _bool_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  n = a.size + b.size - 1
  size = 1 << (n - 1).bit_length()
  return np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:n] > 0.5


def _support(parts, length: int) -> np.ndarray:
  """Where the sum has positive probability (boolean convolution powers)."""
  out = np.ones(1, bool)
  for mask, count in parts:
    if mask.all():  # contiguous support: the sum's support is an interval
      power = np.ones(count * (mask.size - 1) + 1, bool)
    else:
      power, base_mask = np.ones(1, bool), mask.astype(np.float64)
      while count:
        if count & 1:
          power = _bool_convolve(power.astype(np.float64), base_mask)
        count >>= 1
        if count:
          base_mask = _bool_convolve(base_mask, base_mask).astype(np.float64)
    if out.all() and power.all():   # intervals add to an interval
      out = np.ones(out.size + power.size - 1, bool)
    else:
      out = _bool_convolve(out.astype(np.float64), power.astype(np.float64))
  assert out.size == length
  return out


class UnresolvedSumError(RuntimeError):
  """A sum's law spans more orders of magnitude than the tilted FFTs resolve."""


def sum_log_pmf(parts: Sequence[Tuple[np.ndarray, int]]) -> np.ndarray:
  """Exact log-pmf of a sum of independent variables on {0, 1, ...}.

  Args:
    parts: (log_pmf, count) pairs: `count` iid copies of a variable with that
      log-pmf (entries may be -inf).

  Returns:
    log-pmf of the sum, length sum(count * (len - 1)) + 1; -inf off the support.
  """
  return sum_log_pmf_above(parts, -np.inf)[0]


def sum_log_pmf_above(parts: Sequence[Tuple[np.ndarray, int]],
                      log_floor: float) -> Tuple[np.ndarray, np.ndarray]:
  """Like `sum_log_pmf`, but indices provably below `log_floor` may stay unresolved.

  Returns:
    (log_pmf, log_upper): log_upper[k] is a rigorous upper bound on log P(S=k)
    (the Chernoff bound K(λ) - λk, minimised over the tilts used); where an index
    was not resolved, log_pmf[k] is NaN and log_upper[k] < log_floor.

  Args:
    parts: [(log-pmf of one client's level, how many clients send it)].
    log_floor: indices whose log-probability is provably below this may be
      left unresolved (NaN), with a rigorous upper bound.
  """
  parts = [(np.asarray(lp, np.float64), int(c)) for lp, c in parts if c > 0]
  if not parts:
    return np.zeros(1), np.zeros(1)
  full_length = sum(c * (lp.size - 1) for lp, c in parts) + 1
  # Trim each part to its support range; remember the offset.
  offset, trimmed = 0, []
  for lp, c in parts:
    nz = np.nonzero(np.isfinite(lp))[0]
    lo, hi = nz[0], nz[-1]
    trimmed.append((lp[lo:hi + 1], c))
    offset += c * lo
  length = sum(c * (lp.size - 1) for lp, c in trimmed) + 1
  if length == 1:
    out = np.full(full_length, -np.inf)
    out[offset] = sum(c * lp[0] for lp, c in trimmed)
    return out, out.copy()
  size = 1 << (length - 1).bit_length()
  on_support = _support([(np.isfinite(lp), c) for lp, c in trimmed], length)
  aranges = [np.arange(lp.size) for lp, _ in trimmed]

  def log_normaliser(lam):
    """K(λ) = log E e^(λS) (unnormalised parts: plus the parts' log masses)."""
    return sum(c * _logsumexp(lp + lam * k) for (lp, c), k in zip(trimmed, aranges))

  memo = {}

  def tilted(lam):
    """([(pmf of a part tilted by e^(λk), count)], K(λ), mean, variance of the
    tilted sum); the last λ is remembered (a tilt and its next saddle share it)."""
    if lam in memo:
      return memo[lam]
    parts, shift, mean, var = [], 0.0, 0.0, 0.0
    for (lp, c), k in zip(trimmed, aranges):
      t = lp + lam * k
      s = _logsumexp(t)
      w = np.exp(t - s)
      m = float(np.dot(w, k))
      parts.append((w, c))
      shift += c * s
      mean += c * m
      var += c * float(np.dot(w, (k - m)**2))
    memo.clear()
    memo[lam] = parts, shift, mean, var
    return memo[lam]

  def window(lam, shift, mean, var):
    """[lo, hi] holding all but 2e^-_ALIAS of the tilted sum's mass (Chernoff:
    P_λ(S >= mean + x) <= exp(K(λ+η) - K(λ) - η(mean + x)) for every η > 0,
    taken at the Gaussian optimum η = √(2A)/σ and below it, for exponential
    tails; any η is valid, a poor one only widens the window)."""
    ends = []
    for sign in (1, -1):
      xs = []
      for scale in (0.25, 0.5, 1.0):
        eta = scale * math.sqrt(2 * _ALIAS / max(var, 1e-300))
        xs.append((log_normaliser(lam + sign * eta) - shift + _ALIAS) / eta
                  - sign * mean)
      ends.append(min(xs))
    lo = max(0, math.floor(mean - ends[1]))
    hi = min(length - 1, math.ceil(mean + ends[0]))
    return lo, max(hi, lo)

  def tilt(lam):
    """(first index, log-pmf estimates, margins below the tilted peak, K(λ),
    tilted variance) on the window of the sum's law tilted by e^(λk).

    The FFT runs at the window's size with every part folded modulo it: the
    circular convolution is the sum's law folded, so each window index is
    exact up to the <= 2e^-_ALIAS of mass outside the window (negligible
    against the trust margin; `window`)."""
    parts, shift, mean, var = tilted(lam)
    lo, hi = window(lam, shift, mean, var)
    n_fft = 1 << (hi - lo).bit_length()
    if n_fft >= size:
      n_fft, lo, hi = size, 0, length - 1
    spec = np.ones(n_fft // 2 + 1, complex)
    for w, c in parts:
      if w.size > n_fft:
        w = np.concatenate([w, np.zeros(-w.size % n_fft)]).reshape(-1, n_fft).sum(0)
      spec *= np.fft.rfft(w, n_fft)**c
    ks = np.arange(lo, hi + 1)
    vals = np.fft.irfft(spec, n_fft)[ks % n_fft]
    with np.errstate(divide='ignore', invalid='ignore'):
      log_vals = np.log(np.where(vals > 0, vals, np.nan))
    margin = np.nan_to_num(log_vals - math.log(vals.max()), nan=-np.inf)
    return lo, log_vals + shift - lam * ks, margin, shift, var

  def saddle(target, lam):
    """λ with tilted mean of the sum == target: safeguarded Newton (d mean/dλ = var),
    its steps capped by a reach that doubles while the root is not bracketed
    (pmfs spanning 1e5 e-folds per level need |λ| ~ 1e5)."""
    lo, hi, reach = -np.inf, np.inf, 50.0
    for _ in range(200):
      _, _, mean, var = tilted(lam)
      if abs(mean - target) < max(0.25, 0.5 * math.sqrt(var)):
        break
      if mean < target:
        lo = lam
      else:
        hi = lam
      step = (target - mean) / max(var, 1e-300)
      new = lam + float(np.clip(step, -reach, reach))
      if not lo < new < hi:  # Newton left the bracket: bisect (or expand)
        new = (0.5 * (lo + hi) if np.isfinite(lo) and np.isfinite(hi)
               else (lam + reach if mean < target else lam - reach))
      if not (np.isfinite(lo) and np.isfinite(hi)):
        reach *= 2
      if abs(new - lam) < 1e-13 or abs(new) > 1e7:
        break
      lam = new
    return lam

  best = np.full(length, -np.inf)
  best_margin = np.full(length, -np.inf)
  lines = []   # (log normaliser K(λ), λ): log P(S=k) <= K(λ) - λk (Chernoff)

  def apply(lam):
    """Tilts by e^(λk), keeps each index's best-resolved estimate; the tilted std."""
    lo, est, margin, shift, var = tilt(lam)
    lines.append((shift, lam))
    view, view_margin = best[lo:lo + est.size], best_margin[lo:lo + est.size]
    better = margin > view_margin
    view[better] = est[better]
    view_margin[better] = margin[better]
    return math.sqrt(var)

  def next_todo(pos, step):
    """First on-support index from `pos` in direction `step` not yet resolved."""
    while 0 <= pos < length:
      seg = slice(pos, min(length, pos + 4096)) if step > 0 else slice(
          max(0, pos - 4095), pos + 1)
      todo = np.flatnonzero(on_support[seg] & ~(best_margin[seg] > -_TRUST))
      if todo.size:
        return seg.start + int(todo[0] if step > 0 else todo[-1])
      pos = seg.stop if step > 0 else seg.start - 1
    return None

  # Sweep out from the mode in each direction. Each tilt is aimed _AHEAD tilted
  # stds beyond the first unresolved index (so its window, ~±5 stds trusted,
  # covers it and fresh ground); if that leaves the index unresolved, a tilt
  # aimed at it exactly; if that fails too, it is skipped (and must end up
  # below the floor). Everything beyond an index is provably below `log_floor`
  # once a tilt with λ of the sweep's sign bounds it there.
  sigma0 = apply(0.0)
  centre = int(np.argmax(best_margin))
  for step in (1, -1):
    lam, sigma, pos, last, tries = 0.0, sigma0, centre, None, 0
    while len(lines) < _MAX_TILTS:
      k = next_todo(pos, step)
      if k is None or min([s - l * k for s, l in lines if l * step > 0],
                          default=np.inf) < log_floor:
        break
      tries = tries + 1 if k == last else 0
      last = k
      target = min(max(k + step * _AHEAD * sigma * (tries == 0), 0), length - 1)
      new_lam = saddle(target, lam)
      if tries >= 2 or abs(new_lam - lam) < 1e-12:
        pos = k + step   # no tilt resolves it: skip
        continue
      lam = new_lam
      sigma = apply(lam)
  resolved = on_support & (best_margin > -_TRUST)
  upper = np.minimum(_lower_envelope(lines, length), np.where(resolved, best, np.inf))
  stuck = np.flatnonzero(on_support & ~resolved & (upper >= log_floor))
  if stuck.size:
    raise UnresolvedSumError(f'sum_log_pmf: {stuck.size} indices of {length} unresolved '
                       f'after {len(lines)} tilts (first: {stuck[:5].tolist()})')
  best[on_support & ~resolved] = np.nan  # below the floor
  best[~on_support] = -np.inf
  upper[~on_support] = -np.inf
  out = np.full(full_length, -np.inf)
  out_upper = np.full(full_length, -np.inf)
  out[offset:offset + length] = best
  out_upper[offset:offset + length] = upper
  return out, out_upper


def renyi_divergence(log_p: np.ndarray, log_q: np.ndarray, alpha: float,
                     log_p_upper: Optional[np.ndarray] = None,
                     max_log_ratio: float = math.inf) -> float:
  """D_α(P || Q) for pmfs on the same support, from log-pmfs; α in [1, inf].

  NaN entries are unresolved tail indices (see `sum_log_pmf_above`): their
  contribution is bounded by P(k) (P/Q)^(α-1) <= upper_P(k) e^((α-1) max_log_ratio)
  and added, so the result stays an upper bound.

  Args:
    log_p, log_q: log-pmfs on the same support (NaN = unresolved tail of P).
    alpha: the order, in [1, inf] (1: KL, inf: max log-ratio).
    log_p_upper: upper bounds on log P where log_p is NaN.
    max_log_ratio: an upper bound on log(P/Q) over the unresolved indices.
  """
  if alpha < 1:
    raise ValueError(f'`alpha` must be in [1, inf], got {alpha!r}.')
  log_p, log_q = np.asarray(log_p), np.asarray(log_q)
  tail = np.isnan(log_p) | np.isnan(log_q)
  if tail.any():
    if math.isinf(alpha) or math.isinf(max_log_ratio) or log_p_upper is None:
      raise ValueError('Unresolved tails need a finite α and max_log_ratio.')
    tail_ub = np.where(np.isnan(log_p), log_p_upper,
                       np.nan_to_num(log_p, nan=-np.inf))[tail]
    log_tail = special.logsumexp(tail_ub)
    keep = ~tail
    log_p, log_q = log_p[keep], log_q[keep]
    if alpha == 1:
      extra = math.exp(log_tail) * max_log_ratio
    else:
      log_extra = log_tail + (alpha - 1) * max_log_ratio
  else:
    extra, log_extra = 0.0, -np.inf
  p_pos = np.isfinite(log_p)
  if np.any(p_pos & ~np.isfinite(log_q)):
    return math.inf
  lp, lq = log_p[p_pos], log_q[p_pos]
  if alpha == 1:
    return float(max(np.dot(np.exp(lp), lp - lq) + extra, 0.0))
  if math.isinf(alpha):
    return float(max(np.max(lp - lq), 0.0))
  val = np.logaddexp(special.logsumexp(alpha * lp + (1 - alpha) * lq),
                     log_extra) / (alpha - 1)
  return float(max(val, 0.0))


@dataclasses.dataclass
class SumDivergence:
  """D_α of the secure sum, maximised over the other clients' inputs.

  Args:
    alpha: the order.
    num_clients: n, clients in the secure sum.
    value: the maximum of D_α over the mixes evaluated.
    worst_num_plus: the mix attaining it (others at +clip).
    per_mix: D_α for every mix evaluated.
  """
  alpha: float
  num_clients: int
  value: float
  worst_num_plus: int                 # how many of the n-1 others sit at +clip
  per_mix: Dict[int, float]           # num_plus -> D_α for every mix evaluated


def _mixes(others, num_others: int) -> List[int]:
  if isinstance(others, str):
    if others == 'extremes':
      return list(range(num_others + 1))
    if others == 'balanced':
      return [num_others // 2]
    raise ValueError("`others` must be 'extremes', 'balanced' or a list of "
                     f'counts in [0, {num_others}], got {others!r}.')
  mixes = sorted(set(int(k) for k in others))
  if not mixes or mixes[0] < 0 or mixes[-1] > num_others:
    raise ValueError(f'`others` counts must be in [0, {num_others}], got {others!r}.')
  return mixes


def sum_log_pmf_at_extremes(mech, num_plus: int, num_minus: int,
                            log_floor: float = -np.inf):
  """(log-pmf, log upper bound) of the secure sum: `num_plus` clients at +clip, `num_minus` at -clip.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    num_plus, num_minus: clients with input +clip and -clip.
    log_floor: see `sum_log_pmf_above`.
  """
  at_plus, at_minus = end_log_pmfs(mech)
  return sum_log_pmf_above([(at_plus, num_plus), (at_minus, num_minus)], log_floor)


def end_log_pmfs(mech) -> Tuple[np.ndarray, np.ndarray]:
  """(log_pmf(+c), log_pmf(-c)), computed once per mechanism object (an
  accounting call asks for them many times; RQM at 2^16 levels takes 0.1 s)."""
  cached = mech.__dict__.get('_end_log_pmfs')
  if cached is None:
    c = mech.input_bound
    cached = (mech.log_pmf(c), mech.log_pmf(-c))
    mech.__dict__['_end_log_pmfs'] = cached
  return cached


def sum_pair_log_pmfs(mech, num_clients: int, num_plus: int):
  """Log-pmfs of the secure sum when one client is at +clip vs -clip.

  The other n-1 clients: `num_plus` at +clip, the rest at -clip.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    num_clients: n, clients in the secure sum (the target included).
    num_plus: how many of the n-1 others sit at +clip.
  """
  others_minus = num_clients - 1 - num_plus
  return (sum_log_pmf_at_extremes(mech, num_plus + 1, others_minus)[0],
          sum_log_pmf_at_extremes(mech, num_plus, others_minus + 1)[0])


def renyi_divergence_of_sum(mech, alpha: Union[float, Sequence[float]],
                            num_clients: int, others='extremes'):
  """Exact D_α between the secure sums when one client moves from +clip to -clip.

  Args:
    mech: a tff_quant mechanism.
    alpha: an order in [1, inf] (1 = KL, inf = D∞), or a sequence of orders.
    num_clients: n >= 1 clients in the sum (n = 1 is the local guarantee).
    others: 'extremes' (every mix of the n-1 others at +-clip; the maximum is
      reported with the mix that attains it), 'balanced', or a list of counts.

  Returns:
    SumDivergence (or a list of them, one per order when `alpha` is a sequence).
  """
  validation.check_integer('num_clients', num_clients, 1)
  alphas = validation.check_orders('alpha', alpha, low_open=False)
  own = mech.sum_divergences(alphas, num_clients, [2 * mech.input_bound])
  if own is not None:   # exact for any others (closed form / translation invariance)
    results = [SumDivergence(float(a), num_clients, float(own[a][0]), 0,
                             {0: float(own[a][0])}) for a in alphas]
    return results[0] if np.isscalar(alpha) else results
  mixes = _mixes(others, num_clients - 1)
  per = {a: {} for a in alphas}
  # Where the sum at +clip can take values the sum at -clip cannot, D_α = inf
  # for every α >= 1; decided exactly on the supports (boolean convolutions),
  # before any tail bound is needed (BQ at its range ends, for example).
  at_plus, at_minus = end_log_pmfs(mech)
  sup_hi, sup_lo = np.isfinite(at_plus), np.isfinite(at_minus)
  if not np.array_equal(sup_hi, sup_lo):
    length = num_clients * (sup_hi.size - 1) + 1
    for k in list(mixes):
      sp = _support([(sup_hi, k + 1), (sup_lo, num_clients - 1 - k)], length)
      sq = _support([(sup_hi, k), (sup_lo, num_clients - k)], length)
      if (sp & ~sq).any():
        for a in alphas:
          per[a][k] = math.inf
    mixes = [k for k in mixes if k not in per[alphas[0]]]
  # Tails that cannot matter for the largest finite order are only bounded:
  # terms are <= P e^((α-1) D∞_local), and the sum's D∞ <= the local D∞ at +-clip.
  # Each sum serves as P for one mix and as Q for the next; where only Q is
  # below the floor, P <= Q e^D∞, so the floor sits one D∞ lower than P needs:
  # every bounded term is then <= e^-80.
  d_inf_local = renyi_divergence(at_plus, at_minus, math.inf)
  finite = [a for a in alphas if not math.isinf(a)]
  if len(finite) == len(alphas) and math.isfinite(d_inf_local):
    log_floor = -max(finite) * d_inf_local - 80.0
  else:
    log_floor = -np.inf
  # The pair for mix k is (S_{k+1}, S_k), S_j = j clients at +clip, n-j at -clip:
  # n+1 sums serve all n mixes.
  sums = {}
  for j in sorted(set(mixes) | {k + 1 for k in mixes}):
    sums[j] = sum_log_pmf_at_extremes(mech, j, num_clients - j, log_floor)
  for k in mixes:
    (lp, lp_up), (lq, _) = sums[k + 1], sums[k]
    for a in alphas:
      per[a][k] = renyi_divergence(lp, lq, a, lp_up, d_inf_local)
  results = []
  for a in alphas:
    worst = max(per[a], key=lambda k: per[a][k])
    results.append(SumDivergence(float(a), num_clients, per[a][worst], worst,
                                 per[a]))
  return results[0] if np.isscalar(alpha) else results


def epsilon_infinity(mech) -> float:
  """Exact local D∞ = sup_{x,x'} max_i log P_x(i)/P_x'(i) over the whole input range.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted). Its `extreme_log_pmfs()`
      must attain every level's sup and inf over the input range.
  """
  own = mech.sum_divergences([math.inf], 1, [2 * mech.input_bound])
  if own is not None:
    return float(own[math.inf][0])
  rows = mech.extreme_log_pmfs()
  hi, lo = rows.max(axis=0), rows.min(axis=0)
  possible = np.isfinite(hi)
  if np.any(possible & ~np.isfinite(lo)):
    return math.inf
  return float(np.max(hi[possible] - lo[possible]))


IMPOSSIBLE_MASS_MAX_INPUTS = 65


def impossible_mass(mech) -> Tuple[float, float, float]:
  """(δ₀, x, x'): the largest P_x(levels impossible under x') found over inputs.

  No (ε, δ)-DP guarantee with δ < δ₀ exists for one client's coordinate; δ₀ = 1
  means two inputs have disjoint output laws (no privacy at all). Evaluated at
  the critical inputs (where each level's probability attains its extremes, so
  its zero sets are among theirs), thinned to at most
  IMPOSSIBLE_MASS_MAX_INPUTS evenly spaced ones (range ends kept) so that a
  mechanism with 2^16 levels costs O(65 L), not O(L²) memory: the value is
  exact for the pair it names, and a lower bound on the sup when thinned.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism`.
  """
  inputs = np.unique(mech.critical_inputs())
  if len(inputs) > IMPOSSIBLE_MASS_MAX_INPUTS:
    pick = np.linspace(0, len(inputs) - 1, IMPOSSIBLE_MASS_MAX_INPUTS)
    inputs = inputs[np.unique(np.round(pick).astype(int))]
  log_p = np.stack([mech.log_pmf(x) for x in inputs])   # [K, L]
  probs = np.exp(log_p)
  zero = (log_p == -np.inf).astype(np.float64)   # impossible, not underflowed
  mass = probs @ zero.T           # mass[i, j] = P_{x_i}(levels impossible under x_j)
  i, j = np.unravel_index(np.argmax(mass), mass.shape)
  return min(float(mass[i, j]), 1.0), float(inputs[i]), float(inputs[j])


def epsilon_infinity_local(mech, sensitivity: float, grid_size: int = 2001) -> float:
  """Upper bound on sup_{|x-x'| <= Δ} max_i log P_x(i)/P_x'(i) over the input range.

  For one SGD step the neighbouring inputs differ by a sensitivity Δ (e.g.
  2ηC/m in RQP-SGD), not by the whole range. Valid for mechanisms whose level
  probabilities are unimodal in x (RQM, PBM, BQ, QuantizedGaussian,
  RandomizedProjection): the critical inputs (modes) are grid points, so on each
  grid cell the max of log P_x(i) is at a cell end, and the min over the
  Δ-widened cell is at its ends. The bound tightens as `grid_size` grows.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    sensitivity: Δ > 0, the most two neighbouring inputs differ by.
    grid_size: grid points over the input range, >= 2.
  """
  validation.check_positive('sensitivity', sensitivity)
  validation.check_integer('grid_size', grid_size, 2)
  b = mech.input_bound
  grid = np.union1d(np.linspace(-b, b, int(grid_size)), mech.critical_inputs())
  lp = np.stack([mech.log_pmf(x) for x in grid])
  lo_x = np.clip(grid[:-1] - sensitivity, -b, b)
  hi_x = np.clip(grid[1:] + sensitivity, -b, b)
  lp_lo = np.stack([mech.log_pmf(x) for x in lo_x])
  lp_hi = np.stack([mech.log_pmf(x) for x in hi_x])
  top = np.maximum(lp[:-1], lp[1:])
  bottom = np.minimum(lp_lo, lp_hi)
  with np.errstate(invalid='ignore'):
    gap = np.where(np.isfinite(top), top - bottom, 0.0)
  return float(np.max(gap))
