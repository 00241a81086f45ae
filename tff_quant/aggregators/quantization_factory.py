"""One generic TFF aggregation factory for every mechanism in tff_quant.mechanisms.

client: flatten + concat -> non-finite to 0 (counted) -> l2 clip to `clip_norm`
        -> (with `rotate`: zero-pad to 2^m, random signs, orthonormal Hadamard)
        -> per-coordinate clip to the mechanism's range (counted) -> mechanism.encode
        -> integer levels in [0, L-1]
secure: `sum_factory` (default tff.aggregators.SecureSumFactory(L-1, 0), or
        SecureModularSumFactory(M) for mechanisms with a `modulus`): the
        server only sees the sum; its state is carried across rounds
server: (calibrated: refuse a round outside the calibrated schedule) ->
        mechanism.decode(level_sum, n) / n -> (rotation undone) -> the
        original structure (a mean)

The calibrated schedule. A factory built with `calibrated_for` (an
`accounting.CalibratedSetting`; `aggregators.mechanism_factory` passes the one
`Calibration.params` carries) checks every round, on the server and before
anything of the round is output: the round is within the calibrated `rounds`
(the round counter of its state) and its contributors n (the secure-summed
count, public) lie in [min_clients_per_round, clients_per_round] of the
calibration. Otherwise the computation fails (a TensorFlow assertion that the
decode and the measurements depend on): TFF raises, nothing of the round is
returned, the state does not advance, and `program.runtime.
readable_round_errors()` turns it into a `RoundCheckError` naming the count
or round, the calibrated value and the fix. A factory built without a
calibration (raw parameters) promised no ε, so it has no schedule to enforce:
any round and any count up to `max_clients_per_round` run (docs/privacy.md,
"From calibration to run" and "Dropouts").

Seeds: by default every client draws its own sampling seed from its local RNG
(TF's OS-seeded generator), so the server cannot predict the noise. `seed=int` is
the reproducible mode for experiments: client seeds are derived from (seed, round,
a fingerprint of the client's own update); a server that knows the seed and the
update could then predict the noise, so never use it in deployment.
"""

import collections
import collections.abc
import contextlib
import contextvars
import inspect
import logging
import math
from typing import Callable, NamedTuple, Optional, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_quant.accounting import setting as setting_lib
from tff_quant.common import dims
from tff_quant.common import validation
from tff_quant.aggregators.no_privacy import refuse_no_privacy
from tff_quant.mechanisms import base
from tff_quant.mechanisms import wire

MechanismOrBuilder = Union[base.Mechanism, Callable[[float], base.Mechanism]]
_INT32_MAX = 2**31 - 1
_STATE_TYPE = tff.TensorType(np.int64)
# The lists of the `recording()` blocks open in this context (a tuple: each
# block adds its list for its duration, and only there).
_RECORDERS = contextvars.ContextVar('tff_quant_recorders', default=())
_ROTATION_SALT = 0x5EED_0F_2D   # second word of the rotation's (public) seed


class _DropUnusedAssertReports(logging.Filter):
  """Drops TensorFlow's "Object was never used ... assert_less_equal" reports.

  TFF's own secure quantized sum (`tff.aggregators` primitives, behind
  `tff.learning.metrics.secure_sum_then_finalize` and the secure sums of
  this factory's counts) builds a `tf.debugging.assert_less_equal` in graph
  mode and discards it; TensorFlow logs a block for each (dozens in a small
  run).
  They say that TFF's bound check is not run, nothing about this library's
  checks (which are used: `_server_decode`).
  """

  def filter(self, record):
    message = record.getMessage()
    return not ('Object was never used' in message
                and 'assert_less_equal' in message)


logging.getLogger('tensorflow').addFilter(_DropUnusedAssertReports())

class Created(NamedTuple):
  """What one `create` built: the mechanism and the coordinates d it encodes.

  Args:
    mechanism: the mechanism its clients encode with.
    dim: d, coordinates per client (after any padding).
    value_type: the TFF type `create` was called with.
    calibrated_for: see the attribute.
  """
  mechanism: base.Mechanism
  dim: int
  value_type: object
  #: The `accounting.CalibratedSetting` the factory enforced (None: built
  #: without one; then no ε was promised and `training_guarantee` says it).
  calibrated_for: Optional[object] = None


def secure_sum_bits(num_clients: int, num_levels: int,
                    modulus: Optional[int] = None) -> int:
  """Bits the secure-sum field needs for the sum of n values in [0, L-1]
  (wire bits per coordinate; `_measurements` computes the same in TF).

  Args:
    num_clients: n, clients summed.
    num_levels: L, levels each client sends.
    modulus: the field of a modular mechanism (`Mechanism.modulus`), which
      sets the bits whatever n; None for the others.
  """
  size = modulus if modulus is not None else num_clients * (num_levels - 1) + 1
  return max(1, math.ceil(math.log2(size)))


class QuantizationFactory(tff.aggregators.UnweightedAggregationFactory):
  """Mean of client vectors privatized by a quantization mechanism over secure sum.

  Args:
    mechanism: a `tff_quant.mechanisms.Mechanism` (its `input_bound` is the
      per-coordinate clip), or a callable `c_inf -> Mechanism` called in `create`
      with c_inf = k·clip_norm / sqrt(d), k = `coordinate_clip_multiple`
      (`accounting.setting.coordinate_clip`; k = 1: the RQM/PBM EMNIST setup).
    clip_norm: l2 clipping norm of each client's whole (flattened) update, > 0;
      None skips l2 clipping (then `mechanism` must be an instance).
    max_clients_per_round: the most clients one round may have; n (L-1) must fit
      the int32 secure sum. Default: the largest n that fits. A round with more
      clients fails with an error instead of wrapping around.
    seed: None (default, client-side unpredictable seeds) or an int for the
      reproducible experiment mode described in the module docstring.
    allow_no_privacy: False (default) refuses a mechanism that gives no
      privacy: one whose output laws for some two inputs overlap so little that
      no (ε, δ) with δ < 1/2 exists (`accounting.impossible_mass` >= 1/2; e.g.
      PBM θ = 1/2, QMGeo as written). True admits it, for studying such samplers.
    sum_factory: the `tff.aggregators.UnweightedAggregationFactory` that sums the
      int32 level vectors, values in [0, L-1]; default
      `tff.aggregators.SecureSumFactory(L-1, 0)`. Its state lives in this
      factory's state and is carried across rounds (as in `MeanFactory`). It
      must return the exact sum: the accountant assumes the server sees the sum.
    rotate: False (default) or True: each client's clipped update is
      zero-padded to the next power of two D and rotated by this round's
      randomized Hadamard transform (signs from a public per-round seed, as in
      TFF's HadamardTransformFactory), so few coordinates exceed c∞ = k·clip/√D;
      the server undoes it. The rotation is per client (per row when packed),
      which TFF's factory around a packed value could not do. d becomes D.
    diagnostics: False (default): besides the level sum the server learns
      only n, the clients in the round (public under the accountant's
      neighbouring relation). True: each client also sends its counts of
      clipped coordinates, non-finite values and whether its ℓ2 norm was
      clipped, summed securely; the server learns these sums EXACTLY, a
      release outside the ε the accountant reports (docs/privacy.md). For
      simulations and debugging, not deployment.
    calibrated_for: None, or the `accounting.CalibratedSetting` the mechanism
      was calibrated for (`aggregators.mechanism_factory` passes it): then
      `create` refuses a value whose d (after any padding) is not the
      calibrated d, since ε depends on d, and every round outside the
      calibrated schedule is refused before its output is released (module
      docstring): a round past `rounds`, or fewer contributing clients than
      `smallest_cohort` (min_clients_per_round) or more than
      `clients_per_round`.
    coordinate_clip_multiple: k > 0 (default 1) in the c_inf a builder
      `mechanism` is called with; unused with a Mechanism instance.
    wire_bits: None (default: the exact level sum, ⌈log2(n(L−1)+1)⌉ bits per
      coordinate, docs/bits.md) or b in [1, 31]: clients send their levels
      mod 2^b through `tff.aggregators.SecureModularSumFactory(2^b)` and the
      server decodes the residue nearest the zero-signal sum n·c₁
      (`mechanisms.wire`). Refused at `create` unless the proved wrap
      probability at the most clients per round, for inputs anywhere in
      [−c∞, c∞], is at most `utility.MODCLIP_PROB` per coordinate (the
      message names the bits needed). Not with `sum_factory`, nor with a
      modular mechanism (its modulus is its field). The accountant is
      unchanged: the server's view is a function of the exact sum.
    clients_per_value: K >= 1 (default 1). With K > 1 every client value stacks
      K clients' updates on a leading axis (the packed simulation path,
      `tff_quant.training.packed_clients`): each row is clipped and encoded on
      its own and the K level vectors are added before the secure sum, which
      then reveals the same sum of independent encodings as K separate clients
      (proof in that module's docstring). The result has no leading axis.

  State: (round number, the level-sum state, the client-count-sum state).

  Measurements of `next` (an OrderedDict):
    quantization: num_clients (int32), bits_per_coordinate (int32, ⌈log2 L⌉),
      bits_per_client (int64, ⌈log2 L⌉·d: the quantized message),
      secure_sum_bits (int32, ⌈log2(n(L−1)+1)⌉: the field of the secure sum),
      upload_bits_per_client (int64, secure_sum_bits·d: what a client uploads
      through secure aggregation), clipped_fraction (float32, coordinates
      clipped to c∞ over n·d), clipped_clients_fraction (float32, clients whose
      update exceeded the ℓ2 clip_norm, over n), nonfinite_count (int32,
      coordinates that were NaN/inf).
      Without `diagnostics` the three counts are not sent: clipped_fraction
      and clipped_clients_fraction are NaN and nonfinite_count is -1.
    secure_sum: the measurements of `sum_factory` on the levels.

  After `create`, `created` holds the mechanism and dimension that process uses
  (d after any padding by an outer factory such as HadamardTransformFactory).

  This is a MEAN factory (it returns the mean of the clients' values). Inside
  a factory that treats its inner factory as a sum (`tff.aggregators.
  MeanFactory`, `UnweightedMeanFactory`, `DifferentiallyPrivateFactory`)
  the result would be divided or noised again; `create` refuses there (found
  on the call stack) and names `aggregators.weighted`, the weighted form.
  """

  def __init__(self, mechanism: MechanismOrBuilder,
               clip_norm: Optional[float] = None,
               max_clients_per_round: Optional[int] = None,
               seed: Optional[int] = None, sum_factory=None,
               allow_no_privacy: bool = False, clients_per_value: int = 1,
               rotate: bool = False, diagnostics: bool = False,
               calibrated_for=None, coordinate_clip_multiple: float = 1.0,
               wire_bits: Optional[int] = None):
    if not (isinstance(mechanism, base.Mechanism) or callable(mechanism)):
      raise TypeError('`mechanism` must be a tff_quant Mechanism or a callable '
                      f'c_inf -> Mechanism, got {type(mechanism).__name__}.')
    if clip_norm is not None:
      validation.check_positive('clip_norm', clip_norm)
    elif not isinstance(mechanism, base.Mechanism):
      raise ValueError('`clip_norm` is required when `mechanism` is a builder '
                       '(c_inf = k·clip_norm / sqrt(d)).')
    validation.check_optional(validation.check_integer, 'max_clients_per_round',
                              max_clients_per_round, 1)
    validation.check_optional(validation.check_integer, 'seed', seed, 0,
                              2**63 - 1)
    if sum_factory is not None and not isinstance(
        sum_factory, tff.aggregators.UnweightedAggregationFactory):
      raise TypeError('`sum_factory` must be a tff.aggregators.'
                      'UnweightedAggregationFactory, got '
                      f'{type(sum_factory).__name__}.')
    self._sum_factory = sum_factory
    self._allow_no_privacy = validation.check_bool('allow_no_privacy',
                                                   allow_no_privacy)
    self.created: Optional[Created] = None
    self._mechanism = mechanism
    self._clip_norm = None if clip_norm is None else float(clip_norm)
    self._max_clients = max_clients_per_round
    self._seed = seed
    self._per_value = validation.check_integer('clients_per_value',
                                               clients_per_value, 1)
    self._rotate = validation.check_bool('rotate', rotate)
    self._multiple = validation.check_positive('coordinate_clip_multiple',
                                               coordinate_clip_multiple)
    self._calibrated_for = calibrated_for
    self._diagnostics = validation.check_bool('diagnostics', diagnostics)
    self._wire_bits = validation.check_optional(
        validation.check_integer, 'wire_bits', wire_bits, 1,
        wire.MAX_WIRE_BITS)
    if self._wire_bits is not None and sum_factory is not None:
      raise ValueError('`wire_bits` sets the sum (SecureModularSumFactory('
                       '2**wire_bits)); omit `sum_factory`.')
    if calibrated_for is not None and not hasattr(calibrated_for,
                                                  'smallest_cohort'):
      raise TypeError('`calibrated_for` must be an accounting.CalibratedSetting '
                      f'(`Calibration.setting`), got '
                      f'{type(calibrated_for).__name__}.')
    self._schedule = _Schedule.of(calibrated_for)
    if self._schedule is not None and max_clients_per_round is not None and (
        max_clients_per_round < self._schedule.most):
      raise ValueError(
          f'`max_clients_per_round`={max_clients_per_round} is below the '
          f'{self._schedule.most} clients per round of the calibration: the '
          'calibrated cohort could not be summed. Allowed: '
          f'max_clients_per_round >= {self._schedule.most}, or omit it.')
    if isinstance(mechanism, base.Mechanism):
      self._check_capacity(mechanism)
      self._check_privacy(mechanism)

  @property
  def clip_norm(self):
    """The ℓ2 clip of each client's whole update."""
    return self._clip_norm

  @property
  def reproducible(self) -> bool:
    """True when client seeds derive from `seed` (experiments only; see the
    module docstring)."""
    return self._seed is not None

  def mechanism_for_dimension(self, dim: int) -> base.Mechanism:
    """The mechanism used on a `dim`-coordinate update (what the accountant needs)."""
    validation.check_integer('dim', dim, 1)
    if isinstance(self._mechanism, base.Mechanism):
      return self._mechanism
    mech = self._mechanism(setting_lib.coordinate_clip(self._clip_norm, dim,
                                                       self._multiple))
    if not isinstance(mech, base.Mechanism):
      raise TypeError(f'The mechanism builder returned {type(mech).__name__}.')
    return mech

  def check_mechanism(self, mech: base.Mechanism) -> None:
    """The checks `create` runs on the mechanism it builds, run now."""
    self._check_capacity(mech)
    self._check_privacy(mech)

  def _check_privacy(self, mech):
    if not self._allow_no_privacy:
      refuse_no_privacy(mech)

  def max_clients_for(self, mech: base.Mechanism) -> int:
    """Clients per round whose level sum fits the int32 secure sum (or the
    `max_clients_per_round` given); with `wire_bits`, the most clients its
    wrap bound was proved for (the calibrated cohort, else
    `max_clients_per_round`)."""
    if self._wire_bits is not None:
      most = (self._schedule.most if self._schedule is not None
              else self._max_clients)
      if most is None:
        raise ValueError('`wire_bits` needs the most clients per round (the '
                         'field must hold their sum): pass '
                         '`max_clients_per_round` or `calibrated_for`.')
      return most
    return self._max_clients or _INT32_MAX // (mech.num_levels - 1)

  def _check_capacity(self, mech):
    if mech.central:
      raise ValueError(f'{mech} does not go through the secure sum (central); '
                       'use tff.aggregators.DifferentiallyPrivateFactory for it.')
    if mech.modulus is not None:   # a modular sum cannot overflow
      if self._wire_bits is not None:
        raise ValueError(f'`wire_bits` does not apply to {mech!r}: a modular '
                         'sum travels in its own modulus (set its num_levels).')
      return
    n = self.max_clients_for(mech)
    if self._wire_bits is not None:   # a modular field: wraps, no overflow
      wire.check_wire_bits(mech, n, self._wire_bits)
      return
    if n * (mech.num_levels - 1) > _INT32_MAX:
      raise ValueError(
          f'`max_clients_per_round`={n} with {mech.num_levels} levels needs a '
          f'secure-sum range of {n * (mech.num_levels - 1)}, above int32 '
          f'({_INT32_MAX}); allowed: max_clients_per_round <= '
          f'{_INT32_MAX // (mech.num_levels - 1)}.')
    if self._schedule is not None and self._schedule.most > n:
      raise ValueError(
          f'The calibration samples {self._schedule.most} clients per round, '
          f'but the int32 secure sum of {mech.num_levels} levels holds at most '
          f'{n}: calibrate for clients_per_round <= {n}, or fewer levels.')

  def create(self, value_type) -> tff.templates.AggregationProcess:
    _refuse_sum_consumer()
    specs, raw_dim = self._layout(value_type)
    dim = dims.sent_dim(raw_dim, self._rotate)
    self._check_calibrated_dim(raw_dim, dim)
    mech = self.mechanism_for_dimension(dim)
    self._check_capacity(mech)
    self._check_privacy(mech)
    self.created = Created(mech, dim, value_type, self._calibrated_for)
    for found in _RECORDERS.get():
      found.append(self.created)
    plan = _Plan(mech, specs, raw_dim, dim, self._per_value, self._rotate,
                 self._clip_norm, self._seed, self.max_clients_for(mech),
                 self._diagnostics, self._schedule,
                 None if self._wire_bits is None else 2**self._wire_bits)
    client_encode = _client_encode(plan, value_type)
    levels_type, counts_type = client_encode.type_signature.result
    modulus = mech.modulus or plan.wire_modulus
    default_sum = (tff.aggregators.SecureModularSumFactory(modulus)
                   if modulus is not None else
                   tff.aggregators.SecureSumFactory(
                       plan.per_value * (mech.num_levels - 1), 0))
    level_sum = (self._sum_factory or default_sum).create(levels_type)
    count_sum = tff.aggregators.SecureSumFactory(plan.per_value * dim, 0).create(
        counts_type)
    server_decode = _server_decode(plan, levels_type, counts_type)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip(collections.OrderedDict(
          round_num=tff.federated_value(np.int64(0), tff.SERVER),
          level_sum=level_sum.initialize(), count_sum=count_sum.initialize()))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      round_num = tff.federated_broadcast(state.round_num)
      levels, counts = tff.federated_map(client_encode, (value, round_num))
      summed = level_sum.next(state.level_sum, levels)
      counted = count_sum.next(state.count_sum, counts)
      result, measurements = tff.federated_map(
          server_decode, (summed.result, counted.result, state.round_num))
      new_state = tff.federated_zip(collections.OrderedDict(
          round_num=tff.federated_map(
              tff.tensorflow.computation(lambda s: s + 1, _STATE_TYPE),
              state.round_num),
          level_sum=summed.state, count_sum=counted.state))
      all_measurements = tff.federated_zip(collections.OrderedDict(
          quantization=measurements,
          secure_sum=summed.measurements))
      return tff.templates.MeasuredProcessOutput(
          state=new_state, result=result, measurements=all_measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)

  def _check_calibrated_dim(self, raw_dim: int, dim: int) -> None:
    """ValueError unless d is the calibrated one (ε depends on d)."""
    setting = self._calibrated_for
    if setting is None or dim == setting.dim:
      return
    padded = dims.sent_dim(raw_dim, rotate=True)
    if self._rotate:
      how = f'this value has {raw_dim} coordinates, padded to {dim} by rotate=True'
    else:
      how = f'this value has {raw_dim} coordinates (rotate=False)'
    fix = (' Pass rotate=True (it pads to that d), or calibrate again at '
           f'dim={dim}.' if padded == setting.dim and not self._rotate else
           f' Calibrate again at dim={dim}.')
    raise ValueError(
        f'The mechanism was calibrated for d = {setting.dim} coordinates per '
        f'client, but {how}: its ε ({setting.epsilon:.6g} for d = '
        f'{setting.dim}) would not hold.{fix}')

  def _layout(self, value_type):
    """(one client's tensor specs, their coordinate count), checked: floats
    of fully defined shapes, stacking clients_per_value on the first axis."""
    if not tff.types.is_structure_of_floats(value_type):
      raise TypeError(f'Expected a structure of float tensors, got {value_type}.')
    per_value = self._per_value
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    flat_specs = tf.nest.flatten(specs)
    if any(not s.shape.is_fully_defined() for s in flat_specs):
      raise TypeError('QuantizationFactory needs fully defined tensor shapes (it '
                      f'encodes a fixed number of coordinates), got {value_type}.')
    if per_value > 1:
      if any(s.shape.rank < 1 or s.shape[0] != per_value for s in flat_specs):
        raise TypeError(f'clients_per_value={per_value} needs every tensor to '
                        f'stack {per_value} clients on its first axis, got '
                        f'{value_type}.')
      specs = tf.nest.map_structure(
          lambda s: tf.TensorSpec(s.shape[1:], s.dtype), specs)
    raw_dim = int(sum(s.shape.num_elements() for s in tf.nest.flatten(specs)))
    return specs, raw_dim


class _Schedule(NamedTuple):
  """The calibrated schedule a round must lie in (module docstring).

  Args:
    rounds: the calibrated number of rounds.
    fewest: n_min, the fewest contributing clients a round may have.
    most: n, the clients per round the calibration sampled.
    total: N, the population.
    epsilon: the calibrated ε (for the messages).
  """
  rounds: int
  fewest: int
  most: int
  total: int
  epsilon: float

  @classmethod
  def of(cls, setting) -> Optional['_Schedule']:
    """The schedule a calibration fixed.

    Args:
      setting: an `accounting.CalibratedSetting`, or None.

    Returns:
      Its `_Schedule`, or None for None (no schedule to enforce).
    """
    if setting is None:
      return None
    return cls(int(setting.rounds), int(setting.smallest_cohort),
               int(setting.clients_per_round), int(setting.total_clients),
               float(setting.epsilon))

  def checks(self, n, round_num) -> list:
    """The round's assertions, to be run before anything of it is output.

    Args:
      n: the round's contributing clients (int32 tensor, the secure-summed
        count): must lie in [fewest, most].
      round_num: the round's index from 0 (int64 tensor, the state's
        counter): must be below `rounds`.

    Returns:
      The `tf.debugging.Assert` ops; each failing one's message (the first
      datum) names the count or round, the calibrated value, the allowed
      range and the fix.
    """
    eps = f'its ε = {self.epsilon:.6g}'
    cohort = (f'{self.most} of {self.total} clients per round' +
              (f', at least {self.fewest} contributing'
               if self.fewest < self.most else ''))
    allowed = f'Allowed: {self.fewest} to {self.most} clients per round.'
    fewest_name = ('clients_per_round' if self.fewest == self.most else
                   'min_clients_per_round')
    keep = ('let every one contribute' if self.fewest == self.most else
            f'lose at most {self.most - self.fewest} of them')
    fewer = (
        f'{SCHEDULE_REFUSED} {{}} clients contributed to round {{}}, fewer than '
        f'the {self.fewest} ({fewest_name}) the mechanism was '
        f'calibrated for ({cohort}): fewer clients add less noise, so {eps} '
        f'would not hold. Nothing of this round was released. {allowed} '
        f'Sample {self.most} clients per round and {keep}, or calibrate '
        'for dropouts '
        '(accounting.calibration_report(..., min_clients_per_round=k), k the '
        'fewest you accept) and build the factory from that calibration.')
    more = (
        f'{SCHEDULE_REFUSED} {{}} clients contributed to round {{}}, more than '
        f'the {self.most} clients per round (clients_per_round) the mechanism '
        f'was calibrated for ({cohort}): a larger cohort samples each client '
        f'more often than the accounted rate {self.most}/{self.total}, and '
        f'{eps} is not proved for it (more clients add noise, but the '
        'accountant\'s ε can go either way). Nothing of this round was '
        f'released. {allowed} Sample at most {self.most} clients per round, '
        'or calibrate for the larger clients_per_round.')
    late = (
        f'{SCHEDULE_REFUSED} round {{}} of a mechanism calibrated for '
        f'{self.rounds} rounds (rounds={self.rounds}): {eps} holds for '
        f'{self.rounds} rounds only. Nothing of this round was released. '
        f'Allowed: rounds 1 to {self.rounds}. Stop here, or calibrate for all '
        'the rounds to run (accounting.calibration_report(..., rounds=R)) and '
        'train anew with a factory built from that calibration.')
    this_round = round_num + 1
    return [
        tf.debugging.Assert(round_num < self.rounds,
                            [tf.strings.format(late, [this_round])]),
        tf.debugging.Assert(n >= self.fewest, [tf.strings.format(
            fewer, [n, this_round])]),
        tf.debugging.Assert(n <= self.most, [tf.strings.format(
            more, [n, this_round])])]


#: How every message of a round refused for the calibrated schedule begins.
SCHEDULE_REFUSED = 'Outside the calibrated schedule:'


class _Plan(NamedTuple):
  """What `create` fixed for its computations."""
  mech: base.Mechanism
  specs: object          # one client's tensor specs (nested)
  raw_dim: int
  dim: int               # raw_dim, padded to 2^m when rotating
  per_value: int
  rotate: bool
  clip_norm: Optional[float]
  seed: Optional[int]
  max_clients: int
  diagnostics: bool      # whether clients send their clipping counts
  schedule: Optional[_Schedule] = None   # the calibrated one, enforced
  wire_modulus: Optional[int] = None   # 2**wire_bits, or None (exact sum)


def _client_seed(plan: _Plan, flat, round_num):
  """The client's sampling seed: its own RNG's, or (reproducible mode) from
  (seed, round, a fingerprint of its update)."""
  if plan.seed is None:
    return tf.random.uniform([2], minval=tf.int64.min, maxval=tf.int64.max,
                             dtype=tf.int64)
  bits = tf.cast(tf.bitcast(flat, tf.int32), tf.int64)
  mix = tf.range(1, tf.size(bits, out_type=tf.int64) + 1) * 2654435761
  fingerprint = tf.reduce_sum(bits * mix)
  return tf.random.stateless_uniform(
      [2], seed=tf.stack([tf.constant(plan.seed, tf.int64) + round_num,
                          fingerprint]),
      minval=None, maxval=None, dtype=tf.int64)


def _client_encode(plan: _Plan, value_type):
  """tff computation: a value (one client's update, or K stacked) -> (summed
  levels, counts: clipped coordinates, non-finite, clients, ℓ2-clipped)."""
  per_value, dim, mech = plan.per_value, plan.dim, plan.mech
  c_inf = float(mech.input_bound)

  @tff.tensorflow.computation(value_type, _STATE_TYPE)
  def client_encode(value, round_num):
    # Rows: the value's clients (one unless packed), each clipped on its own.
    flat = tf.concat([tf.reshape(tf.cast(t, tf.float32), [per_value, -1])
                      for t in tf.nest.flatten(value)], axis=1)
    finite = tf.math.is_finite(flat)
    nonfinite = tf.reduce_sum(tf.cast(tf.logical_not(finite), tf.int32))
    flat = tf.where(finite, flat, tf.zeros_like(flat))
    l2_clipped = tf.constant(0, tf.int32)
    if plan.clip_norm is not None:
      norm = tf.norm(flat, axis=1, keepdims=True)
      l2_clipped = tf.reduce_sum(tf.cast(norm > plan.clip_norm, tf.int32))
      flat = flat * tf.minimum(1.0, plan.clip_norm / tf.maximum(norm, 1e-30))
    if plan.rotate:
      flat = hadamard(tf.pad(flat, [[0, 0], [0, dim - plan.raw_dim]]) *
                      rotation_signs(round_num, dim))
    flat = tf.reshape(flat, [-1])
    clipped = tf.reduce_sum(tf.cast(tf.abs(flat) > c_inf, tf.int32))
    seed = _client_seed(plan, flat, round_num)
    # Per-coordinate independent encoding: one call encodes every row.
    levels = tf.reduce_sum(tf.reshape(mech.encode(flat, seed), [per_value, dim]),
                           axis=0)
    if mech.modulus is not None:
      levels = tf.math.floormod(levels, mech.modulus)
    elif plan.wire_modulus is not None:
      levels = wire.reduce_levels(levels, plan.wire_modulus)
    if not plan.diagnostics:   # the server learns n only (constructor)
      clipped = nonfinite = l2_clipped = tf.constant(0, tf.int32)
    counts = tf.stack([clipped, nonfinite, tf.constant(per_value, tf.int32),
                       l2_clipped])
    return levels, counts

  return client_encode


def _server_decode(plan: _Plan, levels_type, counts_type):
  """tff computation: (level sum, count sum, round) -> (the mean in the
  value's structure, measurements)."""
  mech, dim = plan.mech, plan.dim
  flat_specs = tf.nest.flatten(plan.specs)

  @tff.tensorflow.computation(levels_type, counts_type, _STATE_TYPE)
  def server_decode(levels_total, counts_total, round_num):
    n = counts_total[2]
    why = (f'the wrap bound of its {plan.wire_modulus.bit_length() - 1}-bit '
           'field holds only up to it.' if plan.wire_modulus is not None else
           f'the int32 secure sum of levels in [0, {mech.num_levels - 1}] '
           'could overflow.')
    checks = [tf.debugging.Assert(n <= plan.max_clients, [
        f'More clients in this round than max_clients_per_round='
        f'{plan.max_clients}: {why}']),
              tf.debugging.Assert(n > 0, ['No clients in round.'])]
    if plan.schedule is not None:   # before anything of the round is output
      checks += plan.schedule.checks(n, round_num)
    # Every output depends on every check: a failed one fails the round.
    # (TensorFlow's should-use wrapper does not count a control dependency
    # as a use: unmarked, each check is logged as "never used".)
    for check in checks:
      getattr(check, 'mark_used', lambda: None)()
    with tf.control_dependencies(checks):
      n = tf.identity(n)
      levels_total = tf.identity(levels_total)
      counts_total = tf.identity(counts_total)
    if plan.wire_modulus is not None:   # the residue nearest n·c₁
      levels_total = wire.centred_sum(levels_total, wire.sum_centre(mech, n),
                                      plan.wire_modulus)
    mean = mech.decode(levels_total, n) / tf.cast(n, tf.float32)
    if plan.rotate:   # the transform is its own inverse; then the signs
      mean = hadamard(mean[None])[0] * rotation_signs(round_num, dim)
    pieces, start = [], 0
    for spec in flat_specs:
      size = spec.shape.num_elements()
      pieces.append(tf.cast(tf.reshape(mean[start:start + size], spec.shape),
                            spec.dtype))
      start += size
    return (tf.nest.pack_sequence_as(plan.specs, pieces),
            _measurements(plan, n, counts_total))

  return server_decode


def _measurements(plan: _Plan, n, counts_total):
  """The round's measurements: clients, bits sent and summed, clipped fractions."""
  mech, dim = plan.mech, plan.dim
  n64 = tf.cast(n, tf.int64)
  modulus = mech.modulus or plan.wire_modulus
  field_size = (tf.constant(modulus, tf.float64) if modulus is not None
                else tf.cast(n64 * (mech.num_levels - 1) + 1, tf.float64))
  field_bits = tf.math.ceil(tf.math.log(field_size) / math.log(2.0))
  sum_bits = tf.cast(tf.maximum(field_bits, 1.0), tf.int32)
  clipped = tf.cast(counts_total[0], tf.float32) / tf.cast(n * dim, tf.float32)
  clipped_clients = (tf.cast(counts_total[3], tf.float32) /
                     tf.cast(n, tf.float32))
  nonfinite = counts_total[1]
  if not plan.diagnostics:   # not sent: not measured
    clipped = clipped_clients = tf.constant(math.nan, tf.float32)
    nonfinite = tf.constant(-1, tf.int32)
  return collections.OrderedDict(
      num_clients=n,
      bits_per_coordinate=tf.constant(mech.bits_per_coordinate, tf.int32),
      bits_per_client=tf.constant(mech.bits_per_coordinate * dim, tf.int64),
      secure_sum_bits=sum_bits,
      upload_bits_per_client=tf.cast(sum_bits, tf.int64) * dim,
      clipped_fraction=clipped, clipped_clients_fraction=clipped_clients,
      nonfinite_count=nonfinite)


def _sum_factories():
  """TFF factories that treat their inner factory as a sum."""
  return (tff.aggregators.MeanFactory, tff.aggregators.UnweightedMeanFactory,
          tff.aggregators.DifferentiallyPrivateFactory)


def _refuse_sum_consumer() -> None:
  """TypeError when a factory that treats its inner factory as a sum is
  creating this mean factory (found on the call stack: TFF's wrappers call
  `create` of their inner factories from their own `create`)."""
  frame = inspect.currentframe()
  try:
    frame = frame.f_back.f_back if frame and frame.f_back else None
    while frame is not None:
      owner = frame.f_locals.get('self')
      if frame.f_code.co_name == 'create' and isinstance(owner,
                                                         _sum_factories()):
        raise TypeError(
            f'A tff_quant QuantizationFactory returns a MEAN, but '
            f'{type(owner).__name__} uses it as a sum (it would divide or '
            'noise the mean again). For weighted algorithms pass '
            '`aggregators.weighted(factory)` as the model aggregator; use the '
            'factory itself where TFF takes an unweighted aggregator.')
      frame = frame.f_back
  finally:
    del frame


def rotation_signs(round_num, size: int):
  """This round's ±1 per coordinate of the randomized Hadamard rotation, from a
  public seed (round number, salt): clients and server derive the same signs."""
  seed = tf.stack([tf.cast(round_num, tf.int64), tf.constant(_ROTATION_SALT, tf.int64)])
  bits = tf.random.stateless_uniform([size], seed=seed, minval=0, maxval=2,
                                     dtype=tf.int32)
  return tf.cast(2 * bits - 1, tf.float32)


def hadamard(x):
  """The orthonormal Walsh–Hadamard transform of each row of x [rows, 2^m]
  (symmetric and orthogonal, so its own inverse); m butterfly stages."""
  rows, size = x.shape
  if size & (size - 1):
    raise ValueError(f'hadamard needs a power-of-two row length, got {size}.')
  half = 1
  while half < size:
    pairs = tf.reshape(x, [-1, size // (2 * half), 2, half])
    a, b = pairs[:, :, 0, :], pairs[:, :, 1, :]
    x = tf.reshape(tf.stack([a + b, a - b], axis=2), [-1, size])
    half *= 2
  return tf.reshape(x, [rows if rows is not None else -1, size]) / math.sqrt(size)


@contextlib.contextmanager
def recording():
  """Collects a `Created` for every QuantizationFactory.create run inside the
  block, however deeply the factory is wrapped (TFF's Hadamard, clipping,
  concat, weighted forms, a user's own): no private attribute is read.

  with aggregators.recording() as used:
    process = tff.learning.algorithms.build_weighted_fed_avg(...)
  used[0].mechanism, used[0].dim   # what the accountant needs

  Blocks nest (each gets every create run while it is open); a block sees
  the creates of its own thread or asyncio task only (a context variable,
  not a list shared by the process).
  """
  found = []
  token = _RECORDERS.set(_RECORDERS.get() + (found,))
  try:
    yield found
  finally:
    _RECORDERS.reset(token)


def mechanisms_used(factory, value_type, weight_type=None):
  """[Created] of every QuantizationFactory inside `factory` for `value_type`.

  Args:
    factory: the (possibly wrapped) aggregation factory a user passes to TFF.
    value_type: the TFF type it aggregates (e.g. the model's trainable weights).
    weight_type: for a weighted factory, the weight type (default float32).

  Returns:
    A list of `Created(mechanism, dim, value_type)`, one per quantized part (a
    factory that splits the value, e.g. per tensor, yields several: their
    per-round privacy costs add up).
  """
  with recording() as found:
    if isinstance(factory, tff.aggregators.WeightedAggregationFactory):
      factory.create(value_type, weight_type or tff.TensorType(np.float32))
    else:
      factory.create(value_type)
  return found


def find_measurements(measurements, key: str = 'quantization'):
  """The `quantization` measurements inside any nesting (FedAvg, Hadamard, concat).

  Args:
    measurements: a (nested) mapping of measurements.
    key: the key to find.
  """
  if isinstance(measurements, collections.abc.Mapping):
    if key in measurements:
      return measurements[key]
    for value in measurements.values():
      found = find_measurements(value, key)
      if found is not None:
        return found
  return None
