"""Privacy of centralised private SGD: DP-SGD and RQP-SGD (paper 004), from what is run.

Neighbouring datasets differ in one example (replace-one); every step uses a batch
of m examples drawn uniformly without replacement from the n (fixed size).

* DP-SGD: Gaussian noise of std z·C on the sum of per-example gradients clipped to
  ℓ2 norm C; replace-one sensitivity 2C, so RDP(α) = 2α/z² per step, subsampled by
  WBK19 Thm 9, composed, converted to (ε, δ) by dp-accounting.
* RQP-SGD: each step releases the randomized projection of every coordinate of
  v = w - η·(clipped mean gradient). Neighbouring batches move v by a vector of ℓ2
  norm <= S = 2ηC/m. Per step, pure ε is bounded by `vector_epsilon_infinity`
  (exact per-coordinate D∞ at each shift, see below), amplified by subsampling
  (Balle et al. 2018, Thm 9: log(1 + γ(e^ε - 1))) and composed over T steps.
  The paper's own count, T·(m/n)·ε_t with ε_t of its Thm 1, is one coordinate only,
  uses a shift of C instead of 2ηC/m, and drops the e^ε - 1 >= ε amplification
  term; it is reported next to ours, not used.

References (WBK19, paper 004, Balle et al. 2018): docs/references.md.
"""

import math
from typing import Callable

import numpy as np

from tff_quant.accounting import divergence
from tff_quant.accounting import per_round
from tff_quant.accounting import rdp_route
from tff_quant.accounting import secure_sum
from tff_quant.common import validation

_ORDERS = tuple(range(2, 129)) + (160, 192, 256)


def _check_schedule(batch_size, dataset_size, steps):
  validation.check_integer('batch_size', batch_size, 1)
  validation.check_integer('dataset_size', dataset_size, batch_size)
  validation.check_integer('steps', steps, 1)


def dp_sgd_epsilon(noise_multiplier: float, batch_size: int, dataset_size: int,
                   steps: int, delta: float) -> float:
  """ε of DP-SGD (noise std = noise_multiplier · clip on the gradient sum).

  Args:
    noise_multiplier: z > 0 (noise std / clip).
    batch_size: examples per step, fixed size, drawn without replacement.
    dataset_size: examples, >= batch_size.
    steps: SGD steps, >= 1.
    delta: target δ in (0, 1).

  Returns:
    ε (a float) at `delta` after `steps` steps: per-step RDP 2α/z²,
    subsampled by WBK19, Thm 9 at the orders 2..128, 160, 192, 256, composed
    and converted by dp-accounting at the best of them
    (docs/references.md).

  Raises:
    TypeError: `batch_size`, `dataset_size` or `steps` not an integer, or
      `noise_multiplier` or `delta` not a number.
    ValueError: `batch_size` < 1, `dataset_size` < `batch_size`, `steps` < 1,
      `noise_multiplier` <= 0, or `delta` outside (0, 1).
  """
  _check_schedule(batch_size, dataset_size, steps)
  validation.check_positive('noise_multiplier', noise_multiplier)
  validation.check_probability('delta', delta)
  gamma = batch_size / dataset_size
  rdp = {a: 2.0 * a / noise_multiplier**2 for a in range(2, max(_ORDERS) + 1)}
  rdp[math.inf] = math.inf
  per_step = [rdp_route.subsampled_rdp_without_replacement(rdp, gamma, a)
              for a in _ORDERS]
  eps, _ = rdp_route.epsilon_from_rdp(_ORDERS, per_step, steps, delta)
  return eps


def _bisect_decreasing(fn: Callable[[float], float], target: float, lo: float,
                       hi: float, iters: int = 40) -> float:
  """Smallest v in [lo, hi] with fn(v) <= target, fn non-increasing (geometric bisection)."""
  if fn(hi) > target:
    raise ValueError(f'target {target} not reachable at {hi}.')
  for _ in range(iters):
    mid = math.sqrt(lo * hi)
    if fn(mid) <= target:
      hi = mid
    else:
      lo = mid
  return hi


def dp_sgd_noise_multiplier(epsilon: float, delta: float, batch_size: int,
                            dataset_size: int, steps: int) -> float:
  """Smallest noise multiplier (to 1e-6 relative) whose DP-SGD ε <= `epsilon`.

  Args:
    epsilon: target ε > 0.
    delta, batch_size, dataset_size, steps: as in `dp_sgd_epsilon`.

  Returns:
    The noise multiplier z in [1e-2, 1e3] (a float).

  Raises:
    TypeError: `epsilon` not a number, or as `dp_sgd_epsilon`.
    ValueError: `epsilon` <= 0, the target not met even at z = 1e3, or as
      `dp_sgd_epsilon`.
  """
  validation.check_positive('epsilon', epsilon)
  return _bisect_decreasing(
      lambda z: dp_sgd_epsilon(z, batch_size, dataset_size, steps, delta),
      epsilon, 1e-2, 1e3)


def vector_epsilon_infinity(mech, l2_sensitivity: float, dim: int,
                            ratio: float = 1.1, grid_size: int = 401) -> float:
  """Upper bound on D∞ of `dim` independent coordinates whose inputs move by ||Δ||2 <= S.

  D∞ = Σ_i f(|Δ_i|) with f = divergence.epsilon_infinity_local (an upper bound
  on the scalar D∞ over shifts <= Δ, non-decreasing in Δ). With g(u) = f(√u) and
  ĝ its least concave majorant on [0, S²], Σ_i g(Δ_i²) <= dim·ĝ(S²/dim) (Jensen,
  ĝ non-decreasing). g is bounded above by its values on a geometric grid of
  ratio `ratio` in u (step function), whose majorant is computed exactly.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    l2_sensitivity: S, the ℓ2 bound on the shift of the d inputs.
    dim: d, coordinates.
    ratio: the geometric grid's ratio in u = Δ² (> 1; closer to 1 is tighter).
    grid_size: grid of `divergence.epsilon_infinity_local`, >= 2.

  Returns:
    An upper bound (float in [0, inf]) on D∞ of the d coordinates' outputs,
    in nats.

  Raises:
    TypeError: `dim` not an integer, or `l2_sensitivity` or `ratio` not a
      number.
    ValueError: `dim` < 1, `l2_sensitivity` <= 0, `ratio` <= 1, or as
      `divergence.epsilon_infinity_local`.
  """
  validation.check_integer('dim', dim, 1)
  validation.check_positive('l2_sensitivity', l2_sensitivity)
  validation.check_number('ratio', ratio, 1, None, low_open=True)
  s2 = float(l2_sensitivity)**2
  target = s2 / dim
  u_min = target / 1e3
  num = int(math.ceil(math.log(s2 / u_min) / math.log(ratio)))
  u = u_min * ratio**np.arange(num + 1)
  u[-1] = s2
  u = u[u <= s2]
  f = np.array([divergence.epsilon_infinity_local(mech, math.sqrt(v), grid_size)
                for v in u])
  f = np.maximum.accumulate(f)
  # Step majorant: g <= f[j] on (u[j-1], u[j]] (and on (0, u[0]]), g(0) = 0.
  left = np.concatenate([[0.0], u[:-1]])
  pts_u = np.concatenate([[0.0], np.ravel(np.column_stack([left, u]))])
  pts_g = np.concatenate([[0.0], np.ravel(np.column_stack([f, f]))])
  # Collapse the duplicated u = 0 point to its largest value.
  order = np.lexsort((pts_g, pts_u))
  pts_u, pts_g = pts_u[order], pts_g[order]
  keep = np.append(pts_u[1:] != pts_u[:-1], True)
  pts_u, pts_g = pts_u[keep], pts_g[keep]
  # The least concave majorant at the target (its rounding carried).
  return dim * secure_sum.concave_majorant_at(pts_u, pts_g, target)


def amplified_pure_epsilon(epsilon: float, sampling_rate: float) -> float:
  """ε of an ε-DP step on a uniformly subsampled batch (replace-one, fixed size).

  Balle et al. 2018 (docs/references.md), Thm 9: log(1 + γ(e^ε - 1)).

  Args:
    epsilon: ε >= 0 of one step on the sampled batch (inf allowed).
    sampling_rate: γ = batch / dataset, in (0, 1].

  Returns:
    The amplified ε (a float; inf where `epsilon` is).

  Raises:
    TypeError: `sampling_rate` not a number.
    ValueError: `sampling_rate` outside (0, 1].
  """
  validation.check_probability('sampling_rate', sampling_rate, high_open=False)
  if math.isinf(epsilon):
    return math.inf
  if epsilon > 30:  # e^ε overflows float64 for large ε: factor it out
    return epsilon + math.log(sampling_rate + (1 - sampling_rate) * math.exp(-epsilon))
  return math.log1p(sampling_rate * math.expm1(epsilon))


def rqp_sgd_epsilon(mech, clip: float, learning_rate: float, batch_size: int,
                    dataset_size: int, steps: int, dim: int) -> dict:
  """Pure ε of RQP-SGD with randomized projection `mech` at every step (see module doc).

  Args:
    mech: the `RandomizedProjection` used at every step.
    clip: per-example ℓ2 gradient clip C > 0.
    learning_rate: η > 0.
    batch_size, dataset_size, steps: the schedule (fixed-size batches), as
      in `dp_sgd_epsilon`.
    dim: d >= 1, model coordinates.

  Returns:
    A dict: `l2_sensitivity` (S = 2ηC/m), `per_coordinate_step` (one
    coordinate's D∞ at shift S, `divergence.epsilon_infinity_local`),
    `per_step` (the whole model's, `vector_epsilon_infinity`),
    `per_step_amplified` (`amplified_pure_epsilon` at γ = m/n) and `total`
    (steps × the amplified ε: basic composition; the guarantee is (ε, 0)).

  Raises:
    TypeError: an integer argument of the schedule or `dim` not an integer,
      or `clip` or `learning_rate` not a number.
    ValueError: a schedule `dp_sgd_epsilon` rejects, `dim` < 1, or S <= 0
      (`clip` or `learning_rate` not positive; named as `sensitivity`).
  """
  _check_schedule(batch_size, dataset_size, steps)
  sens = 2.0 * learning_rate * clip / batch_size
  gamma = batch_size / dataset_size
  coord = divergence.epsilon_infinity_local(mech, sens)
  vec = vector_epsilon_infinity(mech, sens, dim)
  step = amplified_pure_epsilon(vec, gamma)
  return dict(l2_sensitivity=sens, per_coordinate_step=coord, per_step=vec,
              per_step_amplified=step, total=steps * step)


def example_level_rdp(mech, num_clients: int, dim: int, sampling_rate: float,
                      rounds: int, delta: float,
                      orders=rdp_route.DEFAULT_ORDERS) -> dict:
  """Example-level (ε, δ) of distributed SGD where each round reveals a secure sum.

  One example of one client's local data is replaced; the client's batch (fixed
  size, drawn without replacement: rate `sampling_rate`) contains it or not.
  Worst case when it does: the client's clipped gradient moves between the
  range ends in every coordinate (the gradient is clipped after averaging, or
  the range is all the clipping guarantees), the other `num_clients - 1`
  clients at their worst mix (num_clients = 1: each message seen alone, the
  papers' local model). Per-round RDP = dim × D_α(sum), WBK19-subsampled,
  composed over `rounds`.

  Args:
    mech: a `tff_quant.mechanisms.Mechanism` (its exact pmf is what is accounted).
    num_clients: clients in each round's secure sum (1: local model).
    dim: coordinates each client sends.
    sampling_rate: the client's batch size / local dataset size.
    rounds: rounds composed.
    delta: target δ in (0, 1).
    orders: integer Rényi orders >= 2.

  Returns:
    A dict: `per_round_rdp` {order: subsampled per-round RDP}, `epsilon`
    (after `rounds` rounds, at `delta`) and `delta`.

  Raises:
    TypeError: `rounds` not an integer, `sampling_rate` not a number, or as
      `per_round.per_round_rdp`.
    ValueError: `rounds` < 1, `sampling_rate` outside (0, 1], or as
      `per_round.per_round_rdp`.
  """
  validation.check_integer('rounds', rounds, 1)
  validation.check_probability('sampling_rate', sampling_rate, high_open=False)
  rdp = per_round.per_round_rdp(mech, num_clients, dim, orders)
  sub = [rdp_route.subsampled_rdp_without_replacement(rdp, sampling_rate, a)
         for a in orders]
  eps, _ = rdp_route.epsilon_from_rdp(orders, sub, rounds, delta)
  return dict(per_round_rdp=dict(zip(orders, sub)), epsilon=eps, delta=delta)

