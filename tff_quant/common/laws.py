"""Laws of sums of independent integer variables, and Rényi divergences between laws.

The primitives the mechanisms (modular sums) and the accountant share, in
numpy. The law of a sum of independent integer variables is a convolution. Its
tails underflow float64 (PBM with n >~ 36 already), so convolutions run on
exponentially tilted pmfs: tilting by e^(λk) commutes with convolution, an FFT
of the tilted pmfs is accurate (relative) near the tilted mode, and the
saddlepoint equation picks λ so that every index of the support is near the
mode of some tilt. The result is a log-pmf with full relative precision down to
e^-10000 and beyond.
"""

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np
from scipy import special

from tff_quant.common import exact_laws

#: Unit roundoff and one elementary function's relative error (docs/privacy.md, "Numerics").
U = exact_laws.U
LIB = 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U   # exp, log: relative

# An index is trusted from a tilt when its tilted value is within this many
# e-folds of the tilted maximum (FFT error is ~1e-16 * log(size) relative to
# the max, so a trusted entry is accurate to ~1e-16 * 20 * e^12 ~ 3e-10 relative;
# measured ~1e-12 against a direct log-domain convolution, PBM n = 40).
_TRUST = 12.0
_MAX_TILTS = 4000
# A tilt's FFT covers a window holding all but 2e^-_ALIAS of the tilted mass.
_ALIAS = 80.0
_AHEAD = 2.5   # tilted stds a tilt is aimed beyond the first unresolved index

#: Assumed norm-wise accuracy of one numpy FFT (pocketfft) of a power-of-two
#: size N: ||computed - exact||_2 <= FFT_ERROR_CONSTANT·log2(N)·u·||exact||_2,
#: for rfft and irfft alike (on the full Hermitian spectrum). Higham (2002),
#: Theorem 24.2, proves (log2 N)·η/(1 - (log2 N)·η), η = μ + γ4(√2 + μ), for
#: the radix-2 Cooley-Tukey FFT with twiddle factors within μ; pocketfft
#: computes its twiddles to about 1 ulp (μ <= 2u), so η <= 7.7u. pocketfft's
#: radix-4 and real-input passes are assumed to satisfy the same per-level
#: constant, like ELEMENTARY_ULPS an assumption about a library (checked
#: against long-double transforms in tests/common/laws_test.py).
FFT_ERROR_CONSTANT = 8.0
# |fl(xy) - xy| <= √2·γ2·|xy| for a complex product (Higham 2002, Lemma 3.5;
# with a fused multiply-add each component's error is no larger).
_COMPLEX_MUL = math.sqrt(2) * 2 * exact_laws.U / (1 - 2 * exact_laws.U)
# Tilted pmf entries with log below this are carried as absolute errors
# (e^-699 each): exp's result may be subnormal there.
_LOG_TINY = -700.0


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


def log_sum_exp_rows(t: np.ndarray) -> np.ndarray:
  """log Σ_j exp(t[i, j]) for each row i of a 2-d array, overwriting `t`.

  The same floating-point operations as scipy.special.logsumexp(t, axis=1)
  (max, shift, exp, sum, log; a row without a finite max is shifted by 0),
  so the same bits, without its copies: on 2^20-entry blocks of 65,536-point
  laws, 1.4 s where scipy's took 1.85 s (docs/performance.md).

  Args:
    t: a 2-d float64 array; its contents are destroyed.

  Returns:
    The [rows] array of row sums in the log domain.
  """
  top = np.max(t, axis=1, keepdims=True)
  top[~np.isfinite(top)] = 0
  np.subtract(t, top, out=t)
  np.exp(t, out=t)
  with np.errstate(divide='ignore'):
    out = np.log(np.sum(t, axis=1))
  out += top[:, 0]
  return out


def _bool_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  n = a.size + b.size - 1
  size = 1 << (n - 1).bit_length()
  return np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:n] > 0.5


def support(parts, length: int) -> np.ndarray:
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


def sum_length(parts: Sequence[Tuple[np.ndarray, int]]) -> int:
  """Length of the law of the sum of `parts` ((pmf or log-pmf, count) pairs
  on {0, 1, ...}): sum(count * (len - 1)) + 1."""
  return sum(c * (np.asarray(lp).size - 1) for lp, c in parts) + 1


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
  return sum_log_pmf_with_error(parts, log_floor)[:2]


def sum_log_pmf_with_error(parts: Sequence[Tuple[np.ndarray, int]],
                           log_floor: float = -np.inf
                           ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`sum_log_pmf_above` with a proved bound on each entry's rounding.

  The bound is on |log_pmf[k] - log P(S=k)|, P the exact convolution of the
  given log-pmfs (taken as exact: their own error is the mechanism's η,
  carried by `accounting.numerics`). It rests on the model of arithmetic of
  docs/privacy.md, "Numerics" (correct rounding, ELEMENTARY_ULPS for exp and
  log) and on FFT_ERROR_CONSTANT for numpy's FFTs. Per tilt λ (`_TiltedSum.
  tilt`): the tilted parts ŵ_j are within e^±ρ_j of exact tilts of the
  inputs (the roundings of lp + λk - s and exp; sums folding a part);
  the FFT's absolute error A on the circular convolution (norm-wise, so
  at most its 2-norm at every entry) is bounded from the transforms'
  FFT_ERROR_CONSTANT·log2(N)·u, the spectra's moduli (<= the parts' masses),
  the complex powers' (c - 1) products and the parts' products (√2·γ2 each);
  aliasing adds at most 2e^-79 (`_TiltedSum.window`). An entry v̂ of the
  convolution then has log-error R + A/(v̂ - A) (R = Σ c_j ρ_j), plus the
  untilting's roundings. Entries with v̂ <= A have an infinite bound.

  Args:
    parts: (log_pmf, count) pairs, as for `sum_log_pmf_above`.
    log_floor: as for `sum_log_pmf_above` (-inf: resolve every index).

  Returns:
    (log_pmf, log_upper, log_error): the first two as `sum_log_pmf_above`
    returns them (log_upper now also raised by its own rounding); log_error
    [length] bounds |log_pmf - exact| at every finite entry (0 at -inf
    entries, which are exact: off the support; NaN at unresolved ones).
  """
  parts = [(np.asarray(lp, np.float64), int(c)) for lp, c in parts if c > 0]
  if not parts:
    return np.zeros(1), np.zeros(1), np.zeros(1)
  full_length = sum_length(parts)
  # Trim each part to its support range; remember the offset.
  offset, trimmed = 0, []
  for lp, c in parts:
    nz = np.nonzero(np.isfinite(lp))[0]
    trimmed.append((lp[nz[0]:nz[-1] + 1], c))
    offset += c * nz[0]
  out = np.full(full_length, -np.inf)
  out_upper = np.full(full_length, -np.inf)
  out_error = np.zeros(full_length)
  if len(trimmed) == 1 and trimmed[0][1] == 1:   # one variable: its own law
    out[offset:offset + trimmed[0][0].size] = trimmed[0][0]
    return out, out.copy(), out_error
  if sum_length(trimmed) == 1:
    out[offset] = sum(c * lp[0] for lp, c in trimmed)
    # Each product c·lp and each partial sum rounded once (u of its value).
    out_error[offset] = 2.02 * U * sum(c * abs(lp[0]) for lp, c in trimmed)
    out_upper[offset] = out[offset] + out_error[offset]
    return out, out_upper, out_error
  best, upper, error = _TiltedSum(trimmed).resolve(log_floor)
  out[offset:offset + best.size] = best
  out_upper[offset:offset + best.size] = upper
  out_error[offset:offset + best.size] = error
  return out, out_upper, out_error


def complex_power(z: np.ndarray, count: int) -> np.ndarray:
  """z**count by binary powering: count - 1 complex products at most, so the
  result is within (1 + √2·γ2)^(count-1) - 1 of z**count, relative (each
  product's factor multiplies into the powers it feeds; Higham 2002, Sec.
  3.6). numpy's `**` takes the C library's cpow from count 100 on, whose
  error no stated model bounds.

  Args:
    z: complex array.
    count: the power, >= 1.

  Returns:
    z**count, elementwise.
  """
  out, power = None, z
  while True:
    if count & 1:
      out = power.copy() if out is None else out * power
    count >>= 1
    if not count:
      return out
    power = power * power


def fft_error(parts, errors, n_fft: int, vals: np.ndarray) -> float:
  """A bound on max_k |vals[k] - circular convolution of the parts| (the
  computed irfft against the exact convolution of the computed parts ŵ_j).

  Per part (ŵ, c): X = DFT(ŵ) (||X||_2 = √N||ŵ||_2), computed within
  ε_F||X||_2 (FFT_ERROR_CONSTANT), so every entry within e = ε_F√N||ŵ||_2;
  |X| <= m = Σŵ, |X̂| <= M = m + e. Then |X̂^c - X^c| <= c|ΔX|M^(c-1) and the
  power's products add g_c = (1+μ)^(c-1) - 1 of |X̂|^c (μ = √2γ2), so in
  2-norm ΔZ <= √N||ŵ||_2·M^(c-1)(c·ε_F + g_c(1+ε_F)), with |Z|, |Ẑ| <= B =
  M^c(1+g_c). The product over parts (telescoped) is within Σ_j ΔZ_j
  Π_{i≠j} B_i, plus g_P (P - 1 products) of its modulus. irfft: ε_F of its
  output plus the spectrum's error over √N (F/√N is unitary); a 2-norm
  bounds every entry.

  Args:
    parts: [(ŵ, c)]: the non-negative vectors given to rfft (length N) and
      the powers taken (`complex_power`).
    errors: per part (ρ, tiny, ||ŵ||_2, Σŵ); only the last two are read.
    n_fft: N.
    vals: the irfft's output (its 2-norm enters its own rounding).

  Returns:
    A bound on the 2-norm of (vals - the exact circular convolution of the
    parts' powers), hence on every entry's error.
  """
  u = exact_laws.U
  eps_f = FFT_ERROR_CONSTANT * math.log2(n_fft) * u
  root_n = math.sqrt(n_fft)
  bounds, deltas, norms = [], [], []
  for (w, c), (_, _, norm2, mass) in zip(parts, errors):
    e = eps_f * root_n * norm2
    big_m = mass + e
    g_c = math.expm1((c - 1) * math.log1p(_COMPLEX_MUL))
    base = big_m**(c - 1)
    deltas.append(root_n * norm2 * base * (c * eps_f + g_c * (1 + eps_f)))
    norms.append(root_n * norm2 * base * (1 + g_c) * (1 + eps_f))
    bounds.append(big_m**c * (1 + g_c))
  total_b = math.prod(bounds)
  spectrum = sum(d * total_b / b for d, b in zip(deltas, bounds))
  g_p = math.expm1((len(parts) - 1) * math.log1p(_COMPLEX_MUL))
  spectrum += g_p * min(n * total_b / b for n, b in zip(norms, bounds))
  out_norm = float(np.linalg.norm(vals)) * (1 + (vals.size + 4) * u)
  return 1.01 * (eps_f * out_norm / (1 - eps_f) + spectrum / root_n)


def _tilt_part_errors(w: np.ndarray, t: np.ndarray, s: float, lam_k: np.ndarray,
                      rows: int) -> Tuple[float, int, float, float]:
  """(ρ, tiny, ||ŵ||_2, Σŵ) of one tilted part ŵ = fl(exp(fl(t - s))), t =
  fl(lp + fl(λk)), against the exact tilt exp(lp + λk - s) (s as computed:
  the same s is added back, so its own error cancels).

  ρ bounds the log-error of every entry with t - s >= _LOG_TINY: u of each of
  the three roundings (of λk, of t, of t - s, each <= u|result|), exp's
  ELEMENTARY_ULPS, and γ_(rows-1) for the sums folding the part (non-negative
  terms, any order: Higham 2002, Sec. 3.1). `tiny` counts the other finite
  entries (exact and computed both <= e^(_LOG_TINY+1)); the norm and mass are
  of the computed (folded) ŵ, rounded up.
  """
  x = t - s
  fin = np.isfinite(x)
  rel = fin & (x >= _LOG_TINY)
  spread = np.abs(lam_k) + np.abs(t) + np.abs(x)
  rho = 1.01 * (U * float(np.max(spread[rel], initial=0.0)) + LIB)
  rho += (rows - 1) * U / (1 - (rows - 1) * U)
  up = 1 + (w.size + 4) * U
  return (rho, int(np.sum(fin & ~rel)), float(np.linalg.norm(w)) * up,
          float(np.sum(w)) * up)


def _logsumexp_error(t: np.ndarray, s: float, lam_k: np.ndarray) -> float:
  """A bound on |s - log Σ exp(lp + λk)| for s = `_logsumexp`(t), t = fl(lp +
  fl(λk)): t's two roundings and t - top's (u each), exp's ELEMENTARY_ULPS,
  the sum's N·u (non-negative terms), log's ELEMENTARY_ULPS of log Σ, the
  last addition's u|s|; entries that underflow add at most N·e^-700."""
  fin = np.isfinite(t)
  if not fin.any():
    return 0.0
  top = float(np.max(t))
  spread = np.abs(lam_k[fin]) + np.abs(t[fin]) + np.abs(t[fin] - top)
  return 1.01 * (U * float(np.max(spread)) + LIB + t.size * U +
                 LIB * abs(s - top) + U * abs(s)) + t.size * math.exp(-700)


class _TiltedSum:
  """The law of Σ of `trimmed` parts (each (log-pmf from index 0, count)),
  resolved index by index by exponentially tilted FFTs (module docstring)."""

  def __init__(self, trimmed):
    self.parts = trimmed
    self.length = sum_length(trimmed)
    self.size = 1 << (self.length - 1).bit_length()
    self.on_support = support([(np.isfinite(lp), c) for lp, c in trimmed],
                               self.length)
    self.aranges = [np.arange(lp.size) for lp, _ in trimmed]
    self.memo = {}
    self.best = np.full(self.length, -np.inf)
    self.best_margin = np.full(self.length, -np.inf)
    self.best_error = np.full(self.length, np.inf)
    self.lines = []   # (K(λ), λ): log P(S=k) <= K(λ) - λk (Chernoff)
    self.line_errors = []   # a bound on each line's K(λ) rounding

  def log_normaliser(self, lam):
    """K(λ) = log E e^(λS) (unnormalised parts: plus the parts' log masses)."""
    return sum(c * _logsumexp(lp + lam * k)
               for (lp, c), k in zip(self.parts, self.aranges))

  def tilted(self, lam):
    """([(pmf of a part tilted by e^(λk), count)], K(λ), mean, variance of the
    tilted sum); the last λ is remembered (a tilt and its next saddle share it)."""
    if lam in self.memo:
      return self.memo[lam]
    parts, shift, mean, var = [], 0.0, 0.0, 0.0
    for (lp, c), k in zip(self.parts, self.aranges):
      t = lp + lam * k
      s = _logsumexp(t)
      w = np.exp(t - s)
      m = float(np.dot(w, k))
      parts.append((w, c, t, s))
      shift += c * s
      mean += c * m
      var += c * float(np.dot(w, (k - m)**2))
    self.memo.clear()
    self.memo[lam] = parts, shift, mean, var
    return self.memo[lam]

  def window(self, lam, shift, mean, var):
    """[lo, hi] holding all but 2e^-_ALIAS of the tilted sum's mass (Chernoff:
    P_λ(S >= mean + x) <= exp(K(λ+η) - K(λ) - η(mean + x)) for every η > 0,
    taken at the Gaussian optimum η = √(2A)/σ and below it, for exponential
    tails; any η is valid, a poor one only widens the window)."""
    ends = []
    for sign in (1, -1):
      xs = []
      for scale in (0.25, 0.5, 1.0):
        eta = scale * math.sqrt(2 * _ALIAS / max(var, 1e-300))
        xs.append((self.log_normaliser(lam + sign * eta) - shift + _ALIAS) / eta
                  - sign * mean)
      ends.append(min(xs))
    lo = max(0, math.floor(mean - ends[1]))
    hi = min(self.length - 1, math.ceil(mean + ends[0]))
    return lo, max(hi, lo)

  def tilt(self, lam):
    """(first index, log-pmf estimates, margins below the tilted peak, K(λ),
    tilted variance, the estimates' proved errors, a bound on K(λ)'s
    rounding) on the window of the sum's law tilted by e^(λk).

    The FFT runs at the window's size with every part folded modulo it: the
    circular convolution is the sum's law folded, so each window index is
    exact up to the <= 2e^-_ALIAS of mass outside the window (negligible
    against the trust margin; `window`). The errors: `sum_log_pmf_with_error`."""
    parts, shift, mean, var = self.tilted(lam)
    lo, hi = self.window(lam, shift, mean, var)
    n_fft = 1 << (hi - lo).bit_length()
    if n_fft >= self.size:
      n_fft, lo, hi = self.size, 0, self.length - 1
    spec = np.ones(n_fft // 2 + 1, complex)
    folded, stats = [], []
    for (w, c, t, s), k in zip(parts, self.aranges):
      rows = -(-w.size // n_fft)
      if w.size > n_fft:
        w = np.concatenate([w, np.zeros(-w.size % n_fft)]).reshape(-1, n_fft).sum(0)
      spec *= complex_power(np.fft.rfft(w, n_fft), c)
      folded.append((w, c))
      stats.append(_tilt_part_errors(w, t, s, lam * k, rows))
    full = np.fft.irfft(spec, n_fft)
    ks = np.arange(lo, hi + 1)
    vals = full[ks % n_fft]
    with np.errstate(divide='ignore', invalid='ignore'):
      log_vals = np.log(np.where(vals > 0, vals, np.nan))
    margin = np.nan_to_num(log_vals - math.log(vals.max()), nan=-np.inf)
    est = log_vals + shift - lam * ks
    # Absolute error on the tilted window's values: the FFT's, aliasing
    # (the folded mass outside the window, <= 2e^-_ALIAS of the parts'
    # product mass; e^1 covers `window`'s own rounding), and the parts'
    # entries carried as absolute (_LOG_TINY).
    product_mass = math.prod(st[3]**c for (_, c), st in zip(folded, stats))
    absolute = fft_error(folded, stats, n_fft, full)
    if n_fft < self.length:
      absolute += 2 * math.exp(1 - _ALIAS) * product_mass
    absolute += 2 * math.exp(_LOG_TINY + 1) * product_mass * sum(
        c * st[1] for (_, c), st in zip(folded, stats))
    relative = sum(c * st[0] for (_, c), st in zip(folded, stats))
    # The shift Σ c_j·s_j: each product and partial sum rounded once.
    shift_err, partial = 0.0, 0.0
    for (_, c, _, s) in parts:
      partial += c * s
      shift_err += U * (abs(c * s) + abs(partial))
    line_err = shift_err + sum(c * _logsumexp_error(t, s, lam * k)
                               for (_, c, t, s), k in zip(parts, self.aranges))
    with np.errstate(divide='ignore', invalid='ignore'):
      share = absolute / vals
      error = (relative + share / (1 - share) + LIB * np.abs(log_vals) +
               U * (np.abs(log_vals + shift) + np.abs(lam * ks) + np.abs(est)) +
               shift_err) * 1.01
    error = np.where(vals > absolute, error, np.inf)
    return lo, est, margin, shift, var, error, 1.01 * line_err

  def saddle(self, target, lam):
    """λ with tilted mean of the sum == target: safeguarded Newton (d mean/dλ = var),
    its steps capped by a reach that doubles while the root is not bracketed
    (pmfs spanning 1e5 e-folds per level need |λ| ~ 1e5)."""
    lo, hi, reach = -np.inf, np.inf, 50.0
    for _ in range(200):
      _, _, mean, var = self.tilted(lam)
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

  def apply(self, lam):
    """Tilts by e^(λk), keeps each index's best-resolved estimate; the tilted std."""
    lo, est, margin, shift, var, error, line_err = self.tilt(lam)
    self.lines.append((shift, lam))
    self.line_errors.append(line_err)
    view = self.best[lo:lo + est.size]
    view_margin = self.best_margin[lo:lo + est.size]
    view_error = self.best_error[lo:lo + est.size]
    better = margin > view_margin
    view[better] = est[better]
    view_margin[better] = margin[better]
    view_error[better] = error[better]
    return math.sqrt(var)

  def next_todo(self, pos, step):
    """First on-support index from `pos` in direction `step` not yet resolved."""
    while 0 <= pos < self.length:
      seg = slice(pos, min(self.length, pos + 4096)) if step > 0 else slice(
          max(0, pos - 4095), pos + 1)
      todo = np.flatnonzero(self.on_support[seg] &
                            ~(self.best_margin[seg] > -_TRUST))
      if todo.size:
        return seg.start + int(todo[0] if step > 0 else todo[-1])
      pos = seg.stop if step > 0 else seg.start - 1
    return None

  def sweep(self, step, sigma0, log_floor):
    """Tilts outward from the mode in direction `step` until every index
    beyond is resolved or provably below `log_floor`. Each tilt is aimed
    _AHEAD tilted stds beyond the first unresolved index (its window, ~±5
    stds trusted, covers it and fresh ground); if that leaves the index
    unresolved, a tilt aimed at it exactly; if that fails too, it is skipped
    (and must end up below the floor)."""
    lam, sigma, last, tries = 0.0, sigma0, None, 0
    pos = int(np.argmax(self.best_margin))
    while len(self.lines) < _MAX_TILTS:
      k = self.next_todo(pos, step)
      if k is None or min([s - l * k for s, l in self.lines if l * step > 0],
                          default=np.inf) < log_floor:
        return
      tries = tries + 1 if k == last else 0
      last = k
      target = min(max(k + step * _AHEAD * sigma * (tries == 0), 0),
                   self.length - 1)
      new_lam = self.saddle(target, lam)
      if tries >= 2 or abs(new_lam - lam) < 1e-12:
        pos = k + step   # no tilt resolves it: skip
        continue
      lam = new_lam
      sigma = self.apply(lam)

  def resolve(self, log_floor):
    """(log-pmf with NaN where provably below `log_floor`, rigorous log upper
    bounds, the log-pmf's proved errors), on the trimmed support."""
    sigma0 = self.apply(0.0)
    for step in (1, -1):
      self.sweep(step, sigma0, log_floor)
    resolved = self.on_support & (self.best_margin > -_TRUST)
    envelope = _lower_envelope(self.lines, self.length)
    stuck = np.flatnonzero(self.on_support & ~resolved &
                           (np.minimum(envelope, np.where(resolved, self.best,
                                                          np.inf)) >= log_floor))
    if stuck.size:
      raise UnresolvedSumError(
          f'sum_log_pmf: {stuck.size} indices of {self.length} unresolved '
          f'after {len(self.lines)} tilts (first: {stuck[:5].tolist()})')
    # The envelope s - λk as computed: its lines' K(λ) roundings, then the
    # product and difference (u of each).
    slope = max(abs(l) for _, l in self.lines)
    envelope += 1.01 * (max(self.line_errors) + U * (
        slope * (self.length - 1) + np.abs(envelope)))
    error = np.where(resolved, self.best_error, np.nan)
    upper = np.minimum(envelope, np.where(resolved, self.best + error, np.inf))
    best = self.best.copy()
    best[self.on_support & ~resolved] = np.nan  # below the floor
    best[~self.on_support] = -np.inf
    upper[~self.on_support] = -np.inf
    error[~self.on_support] = 0.0
    return best, upper, error


def renyi_divergence(log_p: np.ndarray, log_q: np.ndarray, alpha: float,
                     log_p_upper: Optional[np.ndarray] = None,
                     max_log_ratio: float = math.inf,
                     log_p_error=0.0, log_q_error=0.0) -> float:
  """D_α(P || Q) for pmfs on the same support, from log-pmfs; α in [1, inf].

  NaN entries are unresolved tail indices (see `sum_log_pmf_above`): their
  contribution is bounded by P(k) (P/Q)^(α-1) <= upper_P(k) e^((α-1) max_log_ratio)
  and added, so the result stays an upper bound.

  Where the log-pmfs carry proved errors (`sum_log_pmf_with_error`: δ_P,
  δ_Q, per entry), the result bounds D_α of every pair of laws within them:
  for α > 1 the power sum's terms t_k may be e^(αδ_P + (α-1)δ_Q) larger, so
  log Σ t_k gains at most log(1 + Σ_k s_k·expm1(αδ_P(k) + (α-1)δ_Q(k))),
  s_k = t_k/Σ t the terms' shares (an average over the sum, not the worst
  entry); α = 1 takes each term P·log(P/Q) at its worst (P within e^±δ_P,
  the log-ratio within δ_P + δ_Q); α = ∞ adds δ_P + δ_Q entrywise.

  Args:
    log_p, log_q: log-pmfs on the same support (NaN = unresolved tail of P).
    alpha: the order, in [1, inf] (1: KL, inf: max log-ratio).
    log_p_upper: upper bounds on log P where log_p is NaN.
    max_log_ratio: an upper bound on log(P/Q) over the unresolved indices.
    log_p_error, log_q_error: bounds (scalars or arrays like log_p, >= 0)
      on |log_p - log P|, |log_q - log Q| at finite entries; 0: the laws are
      taken as exact.

  Returns:
    An upper bound on D_α, rounded up by its own evaluation's error
    (docs/privacy.md, "Numerics"), >= 0; inf where P charges an entry Q
    does not.

  Raises:
    ValueError: `alpha` below 1, or unresolved entries without a finite α,
      `max_log_ratio` and `log_p_upper`.
  """
  if alpha < 1:
    raise ValueError(f'`alpha` must be in [1, inf], got {alpha!r}.')
  log_p, log_q = np.asarray(log_p), np.asarray(log_q)
  err_p = np.broadcast_to(np.asarray(log_p_error, np.float64), log_p.shape)
  err_q = np.broadcast_to(np.asarray(log_q_error, np.float64), log_q.shape)
  has_err = bool(np.any(err_p[np.isfinite(log_p)] != 0) or
                 np.any(err_q[np.isfinite(log_q)] != 0))
  tail = np.isnan(log_p) | np.isnan(log_q)
  if tail.any():
    if math.isinf(alpha) or math.isinf(max_log_ratio) or log_p_upper is None:
      raise ValueError('Unresolved tails need a finite α and max_log_ratio.')
    tail_ub = np.where(np.isnan(log_p), log_p_upper,
                       np.nan_to_num(log_p + err_p, nan=-np.inf))[tail]
    log_tail = special.logsumexp(tail_ub)
    keep = ~tail
    log_p, log_q = log_p[keep], log_q[keep]
    err_p, err_q = err_p[keep], err_q[keep]
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
  dp, dq = err_p[p_pos], err_q[p_pos]
  # Each result is rounded up by a bound on its own float evaluation (for
  # the laws as given; docs/privacy.md, "Numerics"): u = 2^-53 per
  # operation, ELEMENTARY_ULPS (lib) per exp and log, N·u for a sum of N
  # terms (Higham 2002, Sec. 3.1).
  u, lib = exact_laws.U, 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U
  if alpha == 1:
    ratio = lp - lq
    if has_err:   # each term at its worst: two more additions, exp, product
      ratio = ratio + (dp + dq)
      terms = np.exp(lp) * np.exp(np.where(ratio >= 0, dp, -dp)) * ratio
      ops = 12 * u + 3 * lib
    else:
      terms = np.exp(lp) * ratio
      ops = 8 * u + 2 * lib
    size = float(np.sum(np.abs(terms)))
    allowance = (lp.size * u + ops) * size * 1.01
    return float(max(np.sum(terms) + extra + allowance, 0.0))
  if math.isinf(alpha):
    diff = lp - lq
    if has_err:
      diff = diff + (dp + dq)
    value = float(np.max(diff)) if lp.size else 0.0
    return float(max(value + (3 if has_err else 2) * u * abs(value), 0.0))
  t = alpha * lp + (1 - alpha) * lq
  log_sum = special.logsumexp(t)
  if has_err and np.isfinite(log_sum):
    log_sum = (log_sum + _power_sum_error(t, log_sum, alpha * dp + (alpha - 1) * dq)
               + 1.01 * u * abs(log_sum))   # and this addition's rounding
  val = np.logaddexp(log_sum, log_extra)
  # t: three roundings of terms <= T = max(α|lp| + (α-1)|lq|); the shift
  # t - top (2T), the exps (lib), the sum (N·u), the log (lib·|log sum|,
  # plus the shift added back u·|val|), the tail's logaddexp (u + 2·lib).
  big_t = float(np.max(alpha * np.abs(lp) + (alpha - 1) * np.abs(lq),
                       initial=0.0))
  allowance = 1.01 * (u * (5 * big_t + lp.size + abs(float(val)) + 4) +
                      lib * (4 + abs(float(log_sum) if np.isfinite(log_sum) else 0.0)))
  return float(max((val + allowance) / (alpha - 1), 0.0))


def _power_sum_error(t: np.ndarray, log_sum: float, gain: np.ndarray) -> float:
  """A bound on how much log Σ e^(t_k) may grow when each term grows by at
  most e^(gain_k): log(1 + Σ_k s_k·expm1(gain_k)), s_k = e^(t_k - log_sum) /
  Σ_j e^(t_j - log_sum) (normalised by the computed shares' own sum, so
  log_sum's rounding cancels). Each computed share is within u·|t_k - log_sum|
  + lib + u of its value (and a share below e^-700 is counted as e^-700),
  the sums within N·u: all well under the 1% the bound is raised by while
  N·u and u·max|t_k - log_sum| are below 1e-3."""
  u, lib = exact_laws.U, 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U
  x = t - log_sum
  grow = np.expm1(gain)
  shares = np.exp(x)
  tiny = x < -700
  ratio = float(np.dot(shares, grow)) / float(np.sum(shares))
  ratio += math.exp(-700) * float(np.sum(grow[tiny]))
  spread = u * float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0)) + t.size * u
  if spread > 1e-3 or not (lib < 1e-3):
    raise ValueError('The power sum is too large to bound its error this way.')
  return 1.01 * math.log1p(ratio * 1.01)
