"""QMGeo: stochastic quantizer with a mixed truncated geometric law (paper 001, Sec. III).

Levels Bin(r) = -W + 2rW/(R-1). For w in [Bin(r), Bin(r+1)), p_mix = (w-Bin(r))/(Bin(r+1)-Bin(r)):
with probability 1 - p_mix the output walks DOWN from Bin(r) by a truncated geometric
step (support {r, ..., 0}), otherwise UP from Bin(r+1) (support {r+1, ..., R-1}).

Departures from the paper (eqs. 9-11), derived from the sampler and checked by Monte Carlo:
* Eq. (9) attaches p_mix to the downward branch; that sends w close to Bin(r+1) down
  and makes the quantizer biased away from w. We attach p_mix to the upward branch,
  as the stochastic k-level quantizer of eq. (16) does, so p -> 1 recovers eq. (16).
* Eqs. (10)-(11) normalise TGeo1 by 1-(1-p)^r and TGeo2 by 1-(1-p)^(R-r-2), which
  do not match their supports {1..r+1} and {1..R-r-1}; the normalisers here are
  1-(1-p)^(r+1) and 1-(1-p)^(R-r-1), so each branch sums to one.
* NOT differentially private as written: an input on a level (p_mix = 0) can only be
  quantized downward, so levels above it have probability 0 for it and positive
  probability for other inputs: D-infinity = inf (and the law jumps at every level).
  The paper's eqs. (20)-(21), (25), (27) do not hold for this sampler; the accountant
  reports inf. `full_support=True` is the closest sound variant: each branch is the
  same geometric law continued on both sides of its start level (P ∝ p(1-p)^|i-r|
  over all R levels), so every level is always possible and the law is continuous in w.
* Not unbiased: the geometric walk pushes mass toward the middle (the paper does not
  claim unbiasedness); decode returns the sum of level values.
* A level range W >= c (`level_range`; tunable `range_ratio` = W/c, default 1,
  the paper's W = c): the R levels span [-W, W] while inputs are clipped to
  [-c, c], as RQM's levels span ±(c + Δ). The sampler and its law are the
  paper's with W in place of the input range; the law stays piecewise affine
  in x between levels, so the critical inputs are ±c and the levels inside
  (-c, c) and every accounting argument applies unchanged. With W = c the
  decoded mean's slope is capped near c/σ at small p (the output is near
  uniform on [-c, c] whatever x); a wider W moves the noise outside the
  input range instead.
"""

import math

import numpy as np

from tff_quant.common import exact_laws
from tff_quant.common import validation
from tff_quant.mechanisms import base

tf = base.tf


class QMGeo(base.SymmetricLevels, base.Mechanism):
  """QMGeo(clip=c, num_levels=R, p=p, full_support=False, level_range=W).

  Args:
    clip: c > 0, inputs are clipped to [-c, c].
    num_levels: R >= 2 levels, -W + 2rW/(R-1).
    p: the geometric parameter in (0, 1); lower is more private.
    full_support: the sound variant (module docstring); as written ε = inf.
    level_range: W >= c, the levels' range (default c, the paper's).

  Raises:
    ValueError: a parameter out of its range (named), or W < c.
  """

  name = 'qmgeo'
  unbiased = False
  TUNABLES = (
      base.levels_tunable(8, 'R'),
      base.Tunable('p', 0.5, 0, 1, low_open=True, high_open=True,
                   more_private='lower', doc='geometric parameter'),
      base.Tunable('full_support', True, kind=bool,
                   doc='the sound variant (as written, ε = inf)'),
      base.Tunable('range_ratio', 1.0, 1, None, more_private='higher',
                   doc='W / c∞ (levels span ±W; 1 is the paper\'s)',
                   grid=tuple(2.0**i for i in range(0, 9))),
  )
  CALIBRATED = ('range_ratio', 'p')

  def __init__(self, clip: float, num_levels: int, p: float,
               full_support: bool = False, level_range: float = None):
    self.clip = float(validation.check_positive('clip', clip))
    self.r_levels = self.tunable('num_levels').check(num_levels)
    self.p = float(self.tunable('p').check(p))
    self.full_support = self.tunable('full_support').check(full_support)
    self.level_range = (self.clip if level_range is None else
                        float(validation.check_positive('level_range',
                                                        level_range)))
    if self.level_range < self.clip * (1 - 1e-12):
      raise ValueError(f'`level_range` must be >= clip ({self.clip:g}): the '
                       f'levels must cover the inputs; got {level_range!r}.')
    # Affine in the mixing weight within a bin; continuous only with full support.
    self.piecewise_affine = self.full_support

  #: The walk's p of the profile route's further search
  #: (`profile_searches`): one client in about 5,000 leaves its start level.
  WALKLESS_P = 0.9999

  @classmethod
  def profile_searches(cls, params):
    """In its central bin QMGeo is one PBM trial at θ = c/h followed by a
    walk the Gaussian domination does not count (`accounting.
    gaussian_domination`): with the walk nearly gone (p = WALKLESS_P), W is
    bisected, not scanned over its powers of 2, as PBM's θ is. Skipped
    where the caller fixed p or W, and at an odd number of levels (a level
    at 0: no central bin holds [−c, c])."""
    if ('p' in params or 'range_ratio' in params or
        params.get('num_levels', 2) % 2):
      return ()
    return ((('range_ratio',), {'p': cls.WALKLESS_P}),)

  @classmethod
  def for_coordinate_bound(cls, c_inf, **params):
    p = cls.complete_params(params)
    return cls(c_inf, p['num_levels'], p['p'], p['full_support'],
               p['range_ratio'] * c_inf)

  def params(self):
    out = dict(clip=self.clip, num_levels=self.r_levels, p=self.p,
               full_support=self.full_support)
    if self.level_range != self.clip:
      out['level_range'] = self.level_range
    return out

  @property
  def num_levels(self):
    return self.r_levels

  @property
  def input_bound(self):
    return self.clip

  def _bin(self, x):
    t = (x + self.level_range) / self.level_step
    r = min(max(math.floor(t), 0), self.r_levels - 2)
    return r, t - r

  def _branch_log_pmf(self, start: int, down: bool) -> np.ndarray:
    """Log-law of one branch starting at level `start`."""
    big_r, lq = self.r_levels, math.log1p(-self.p)
    idx = np.arange(big_r)
    if self.full_support:
      log_w = np.abs(idx - start) * lq
      return log_w - np.logaddexp.reduce(log_w)
    out = np.full(big_r, -np.inf)
    if down:
      out[:start + 1] = base.truncated_geometric_log_pmf(self.p, start + 1)[::-1]
    else:
      out[start:] = base.truncated_geometric_log_pmf(self.p, big_r - start)
    return out

  def _log_pmf_in_bin(self, r: int, p_mix: float) -> np.ndarray:
    with np.errstate(divide='ignore'):
      return np.logaddexp(
          math.log1p(-p_mix) + self._branch_log_pmf(r, down=True)
          if p_mix < 1 else np.full(self.r_levels, -np.inf),
          math.log(p_mix) + self._branch_log_pmf(r + 1, down=False)
          if p_mix > 0 else np.full(self.r_levels, -np.inf))

  def log_pmf(self, x):
    return self._log_pmf_in_bin(*self._bin(self.clip_input(x)))

  @property
  def log_pmf_error(self) -> float:
    """η: a proved bound on the rounding of `log_pmf` at every input
    (`exact_laws`' model: ELEMENTARY_ULPS (lib) for exp, log, log1p, pow).

    Full support: lq = log1p(-p) carries lib·|lq|, so log w_i = d·lq (d < R
    exact) carries (lib + u)·|log w_i| <= (lib + u)·Λ, Λ = (R-1)·|lq|. The
    normaliser log Z (R-1 logaddexp steps in any order) passes its inputs'
    errors weighted by their shares s_i = w_i/Z (Z >= 1: w_start = 1), so by
    (lib + u)·Σ s_i·|log w_i| <= (lib + u)·2|lq|·q/(1-q)²; each step adds
    u/e (its difference), 1.2·lib (exp, log1p) and u·|partial| weighted by
    that partial's later share, <= u·max(1/e, log R). The branch log w_i -
    log Z adds u·(Λ + log R). The two branches (at r and r + 1) differ at
    each level by |lq| and their normalisers by <= log R: the mixture's gap
    (`exact_laws.two_point_mixture_error`). As written: log p + g·log q -
    log1p(-q^K) carries lib·|log p| + (R-1)·(lib + u)·|log q| + lib·q^K/(1 -
    q^K) (pow's error through log1p; <= lib·(1-p)/p) + lib·|log1p(-q^K)|
    (<= lib·|log p|) + 3u·(the values), and a branch may be impossible
    (one-sided mixture).
    """
    lib, u = 2 * exact_laws.ELEMENTARY_ULPS * exact_laws.U, exact_laws.U
    big_r = self.r_levels
    lq = abs(math.log1p(-self.p))
    lam = (big_r - 1) * lq
    log_r = math.log(big_r)
    if self.full_support:
      q = 1.0 - self.p
      shares = 2 * lq * q / (1 - q)**2
      norm = ((lib + u) * shares +
              (big_r - 1) * (u / math.e + 1.2 * lib + u * max(1 / math.e, log_r)))
      branch = (lib + u) * lam + norm + u * (lam + log_r)
      mix = exact_laws.two_point_mixture_error(
          lam + log_r, lq + log_r + 2 * branch, one_sided=False)
    else:
      # K >= 1: q^K <= q = 1 - p, so q^K/(1 - q^K) <= (1 - p)/p and
      # |log1p(-q^K)| <= |log p|.
      lp = abs(math.log(self.p))
      values = 2 * lp + lam
      branch = (lib * lp + (big_r - 1) * (lib + u) * lq
                + lib * (1.0 - self.p) / self.p + lib * lp + 3 * u * values)
      mix = exact_laws.two_point_mixture_error(values, one_sided=True)
    return (branch + mix) * (1 + 1e-6)

  def extreme_log_pmfs(self):
    # Add the left limits at each level (bin r-1 with p_mix = 1): the law as
    # written jumps there, and the supremum over inputs includes those limits.
    rows = [self.log_pmf(x) for x in self.critical_inputs()]
    inside = np.abs(self.levels) <= self.clip * (1 + 1e-12)
    rows += [self._log_pmf_in_bin(r - 1, 1.0) for r in range(1, self.r_levels)
             if inside[r]]
    return np.stack(rows)

  def _encode(self, x, seed):
    """The mixed geometric walk for the float64 input `sanitize` clipped.

    Inside the support: t = (x + W)/h is `_bin`'s (float64, the same
    operations on the same clipped x, up to the compiler's roundings),
    snapped to a level within rounding error of one
    (`base.snap_to_integers`), so where the pmf's t is a level the bin r and
    p_mix = 0 are the pmf's: as written the law jumps at levels (at
    c = 0.0331, W = 2c, an input -float32(c) past the level at -c walked up
    from it, impossible for the pmf at -c, in half the draws; a graph-mode
    t an ulp below a level did the same). The branch is taken with a
    float64 uniform, so p_mix = 0 never goes up and p_mix >= 1 always does.
    start is in [0, R - 1]; each walk is clamped to its branch's support
    (`truncated_geometric` to [0, size - 1]; the two-sided walk to
    [0, start] below and [start + 1, R - 1] above).
    """
    s_mix, s_walk = tf.unstack(base.split_seed(seed, 2))
    dtype = tf.float64   # the walk's uniform (float32 resolves only 2^-23)
    t = (tf.cast(x, tf.float64) + self.level_range) / self.level_step
    t = base.snap_to_integers(t, self.r_levels - 1)
    r64 = tf.clip_by_value(tf.floor(t), 0.0, self.r_levels - 2.0)
    r = tf.cast(r64, dtype)
    go_up = base.uniform(tf.shape(x), s_mix, tf.float64) < t - r64
    start = tf.where(go_up, r + 1.0, r)
    top = self.r_levels - 1.0
    if not self.full_support:
      # Down walks over {start..0}, up over {start..top}.
      size = tf.where(go_up, top - start + 1.0, start + 1.0)
      g = base.truncated_geometric(s_walk, self.p, size)
      return tf.where(go_up, start + g, start - g)
    # Two-sided geometric around `start`, P(i) ∝ q^|i-start|, by inversion of
    # one uniform: scaled by (1-q), the mass at or below start is
    # A = 1-q^(start+1) and above it B = q-q^(top-start+1); v = u (A+B) < A
    # walks down g = floor(log(1-v)/log q), else up from start+1 with
    # v' = (v-A)/q in place of v.
    q = tf.constant(1.0 - self.p, dtype)
    mass_down = 1.0 - tf.pow(q, start + 1.0)
    mass_up = q - tf.pow(q, top - start + 1.0)
    v = base.uniform(tf.shape(x), s_walk, dtype) * (mass_down + mass_up)
    down = v < mass_down
    w = tf.minimum(tf.where(down, v, (v - mass_down) / q), 1.0)  # rounding
    g = tf.floor(tf.math.log1p(-w) / math.log(1.0 - self.p))
    return tf.where(down, start - tf.minimum(g, start),
                    start + 1.0 + tf.minimum(g, top - start - 1.0))
