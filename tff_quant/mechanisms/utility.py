"""Signal-aware utility: the error of the best debiased use of a decoded mean.

n clients share one input x per coordinate, |x| <= a (the signal bound); the
server sees the secure sum (wrapped mod M for a modular mechanism) and decodes
D, the mean `QuantizationFactory` returns. With m(x) = E[D | x], v(x) =
Var[D | x] and the slope s(x) = m'(x), an estimate of x from D that is
unbiased to first order (m⁻¹(D); locally D/s) has mean squared error
v(x)/s(x)² (the delta method), so the debiased error is

    E_a = max over |x| <= a of v(x) / s(x)²,

inf when s <= 0 somewhere (two inputs then share a mean: no estimate from D
is unbiased at both). An unbiased mechanism has s = 1 and E_a = max v; the
continuous Gaussian's is σ²/n. Plain MSE (`decoded_mean_mse`) rewards an
output that stays near 0 whatever x is (a modular sum wrapped past its
modulus, a quantizer clipping noise far wider than its range); E_a charges
it 1/s²: infinite for the wrapped sum (s -> 0), and for the clipped
quantizer about (π/2)σ²/n (s ≈ 2Cq/(√(2π)σ), its output ≈ ±Cq), which is
what its signal is worth once rescaled.

Why the derivative, not a secant over [-a, a]: it is the local exchange rate
between input and output that the delta method needs, it is 1 exactly for an
unbiased mechanism, and it sees a mean that turns back inside the range (a
wrapping sum), which a secant between the ends can average away.

The refusal rules calibration applies (`carries_signal`, `modulus_needed`)
live here too, with their reasons.
"""

import dataclasses
import math
from typing import Optional

import numpy as np
from scipy import special

from tff_quant.common import validation

#: A configuration whose decoded mean has slope below this somewhere in the
#: signal range is refused: QuantizationFactory returns D itself, not D/s, so
#: below 1/2 the bias (1 - s)·x of what training receives exceeds the signal
#: s·x at every such input (a run silently shrinks its updates by s, and
#: E_a, which assumes the server rescales, no longer describes it).
MIN_SLOPE = 0.5
#: TFF's DistributedDpSumFactory default target probability that the modular
#: sum wraps (its `modclip_prob`).
MODCLIP_PROB = 1e-4
_DIFF_STEP = 1e-4   # central-difference step for a biased mean, × input bound
# `per_client` refuses beyond this many pmf operations (~30 s here): RQM at
# 65,536 levels and q = 1e-4 sums 4.3e9 terms per pmf (17 s), 541 inputs.
MAX_OPERATIONS = 3e9
_GRID = 17          # evenly spaced inputs added to the critical ones
_MAX_CRITICAL = 256   # critical inputs evaluated in the range, at most


class CostError(ValueError):
  """A utility refused before it starts: its pmfs cost over MAX_OPERATIONS."""


@dataclasses.dataclass(frozen=True)
class SignalUtility:
  """Debiased error of the decoded mean of n clients sharing |x| <= a.

  Args:
    error: E_a = max_x v(x)/s(x)² (per coordinate; inf where s <= 0).
    slope: the least slope s(x) = d E[D | x]/dx over the inputs evaluated.
    variance: v(x) = Var[D | x] at the input attaining `error`.
    x: that input.
    signal_bound: a, the largest |x| evaluated.
    num_clients: n.
  """
  error: float
  slope: float
  variance: float
  x: float
  signal_bound: float
  num_clients: int

  @property
  def carries_signal(self) -> bool:
    """True when the slope is at least `MIN_SLOPE` over the whole range."""
    return self.slope >= MIN_SLOPE


def worst_case(xs, slopes, variances, signal_bound, num_clients
               ) -> SignalUtility:
  """`SignalUtility` from the slope and variance of D at the inputs `xs`."""
  slopes = np.asarray(slopes, np.float64)
  variances = np.asarray(variances, np.float64)
  low = float(np.min(slopes))
  if not low > 0:
    i = int(np.argmin(slopes))
    error = math.inf
  else:
    ratios = variances / slopes**2
    i = int(np.argmax(ratios))
    error = float(ratios[i])
  return SignalUtility(error, low, float(variances[i]), float(xs[i]),
                       float(signal_bound), int(num_clients))


def resolve_signal_bound(mech, signal_bound: Optional[float]) -> float:
  """a: `signal_bound` validated (> 0), at most the input bound; default the
  input bound (inputs beyond it are clipped to it)."""
  if signal_bound is None:
    return float(mech.input_bound)
  validation.check_positive('signal_bound', signal_bound)
  return min(float(signal_bound), float(mech.input_bound))


def evaluation_points(mech, signal_bound: float) -> np.ndarray:
  """Inputs in [-a, a] E_a is evaluated at: the mechanism's critical inputs
  (where each level's probability peaks), the ends, an even grid, and the
  midpoints between consecutive ones (where rounding variance peaks).

  Beyond 256 critical inputs in the range (levels far denser than the
  noise: 10+ bits of the quantized Gaussian or the randomized projection,
  whose pmfs at 2^16 levels made a call take 300-6,000 s), an even subset of
  them: between two kept ones, stochastic rounding over the skipped levels
  moves a client's variance by at most step²/4, far below the noise there.
  """
  a = signal_bound
  crit = np.asarray(mech.critical_inputs(), np.float64)
  crit = crit[np.abs(crit) < a]
  if crit.size > _MAX_CRITICAL:
    crit = crit[::math.ceil(crit.size / _MAX_CRITICAL)]
  pts = np.concatenate([crit, [-a, a], np.linspace(-a, a, _GRID)])
  pts = np.unique(pts)
  return np.unique(np.concatenate([pts, 0.5 * (pts[1:] + pts[:-1])]))


def per_client_moments(mech, num_clients: int, x: float):
  """(m(x), v(x), s(x)) of a mechanism behind the integer secure sum.

  decode is affine in the level sum (`Mechanism.decode`), so D is the mean of
  n independent client values: m = E[value], v = Var[value]/n, exact sums
  over `pmf(x)`. s = 1 for an unbiased mechanism; otherwise the central
  difference of the exact mean over ±1e-4 of the input bound (one-sided at
  the range ends; truncation error O(step²·m‴)).
  """
  n = validation.check_integer('num_clients', num_clients, 1)
  x = mech.clip_input(x)
  values = mech.levels
  p = mech.pmf(x)
  m = float(np.dot(p, values))
  var = float(np.dot(p, (values - m)**2)) / n
  if mech.unbiased:
    return m, var, 1.0
  bound = float(mech.input_bound)
  h = _DIFF_STEP * bound
  lo, hi = max(x - h, -bound), min(x + h, bound)
  mean = lambda t: float(np.dot(mech.pmf(t), values))
  return m, var, (mean(hi) - mean(lo)) / (hi - lo)


def per_client(mech, num_clients: int, signal_bound: Optional[float] = None
               ) -> SignalUtility:
  """E_a of a mechanism behind the integer secure sum, exactly from its law
  (`per_client_moments` at `evaluation_points`)."""
  n = validation.check_integer('num_clients', num_clients, 1)
  a = resolve_signal_bound(mech, signal_bound)
  xs = evaluation_points(mech, a)
  calls = xs.size * (1 if mech.unbiased else 3)   # biased: ± a step too
  cost = calls * mech.pmf_operations()
  if cost > MAX_OPERATIONS:
    raise CostError(
        f'The debiased error of {mech!r} needs ~{cost:.2g} operations ({calls} '
        f'pmfs of ~{mech.pmf_operations():.2g}; limit {MAX_OPERATIONS:.2g}, '
        'about 30 s): fewer levels, or a larger q for RQM.')
  _, variances, slopes = zip(*(per_client_moments(mech, n, x) for x in xs))
  return worst_case(xs, slopes, variances, a, n)


def modclip_stddevs(modclip_prob: float = MODCLIP_PROB) -> float:
  """k = √2·erfc⁻¹(p): TFF's `_clip_prob_to_num_stddevs` (distributed_dp.py),
  the standard deviations of the server's sum the modulus must hold so that
  it wraps with probability about p (3.89 at TFF's default 1e-4)."""
  validation.check_number('modclip_prob', modclip_prob, 0, 1, low_open=True,
                          high_open=True)
  return math.sqrt(2) * float(special.erfcinv(modclip_prob))


def modulus_needed(noise_std: float, num_clients: int, signal_steps: float,
                   modclip_prob: float = MODCLIP_PROB) -> float:
  """The least modulus TFF's DistributedDpSumFactory sizing admits:
  2k·√(n(σ² + 1/4) + (n·a/γ)²), everything in rounding steps γ.

  TFF (distributed_dp.py, `_heuristic_scale_factor`, solved for 2^b) sets
  2^b = 2k·√(ρ/d·(cn)² + (γ²/4 + σ²)·n)/γ with k = `modclip_stddevs`: k
  standard deviations of the server's sum (the n clients' common rotated
  signal, rms c/√d = a per coordinate at ρ = 1, plus n clients' noise σ² and
  stochastic rounding <= γ²/4) fit in [-2^(b-1), 2^(b-1)). `signal_steps` is
  a/γ, `noise_std` σ/γ.
  """
  validation.check_number('noise_std', noise_std, 0, None)
  n = validation.check_integer('num_clients', num_clients, 1)
  validation.check_number('signal_steps', signal_steps, 0, None)
  k = modclip_stddevs(modclip_prob)
  return 2 * k * math.sqrt(n * (noise_std**2 + 0.25) + (n * signal_steps)**2)
