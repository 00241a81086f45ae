"""TFF's distributed DP sum for K clients packed per value (the peers' fast path).

`PackedDistributedDpSumFactory(K, ...)` is TFF's `DistributedDpSumFactory`
(Kairouz, Liu & Steinke 2021, Alg. 1 "DDGauss"; Agarwal, Kairouz & Liu 2021,
Alg. 1 "distributed Skellam") for values that stack K clients' updates on a
leading axis (`tff_quant.training.packed_clients`). Each row goes through
TFF's own per-client pipeline, by TFF's own functions, in TFF's order:

  concat -> zero-pad to D = 2^⌈log2 d⌉, this round's 'hd' rotation (the signs
  from the round's public seed in TFF's state, shared by every client) ->
  ℓ2 clip to `l2_clip` (robust._clip_by_global_l2_norm) -> scale by the
  state's scale_factor and stochastic rounding with its inflated-norm
  conditioning (discretization._stochastic_rounding, a seed of its own per
  row) -> the DP query's per-client ℓ2 (and, Skellam, ℓ1) norm checks
  (DistributedSkellamSumQuery / DistributedDiscreteGaussianSumQuery
  .preprocess_record) -> the query's own local noise sampler
  (add_noise_to_sample / _add_local_noise), one call for the K x D entries
  -> modular clip to [-2^(b-1), 2^(b-1)) then [0, 2^b)
  (modular_clipping.modular_clip_by_value),

then adds the K rows modulo 2^b, and hands the slot's vector to TFF's own
secure chain (ModularClippingSumFactory x 2 around SecureSumFactory(2^b-1, 0),
built as DistributedDpSumFactory builds it). The server side is TFF's too: the
query's get_noised_result, unscaling, the inverse rotation, un-concat.

Why the law is TFF's: TFF's client i sends v_i = (q_i + ξ_i) mod 2^b, with q_i
the rounded, scaled, rotated, clipped update (its rounding randomness its own)
and ξ_i the query's noise vector (i.i.d. coordinates, independent of every
other client's). Here each row k draws its rounding from its own seed and its
noise as entries of one i.i.d. draw over K x D coordinates, so the K rows are K
independent copies of TFF's v_i; the slot sends Σ_k v_k mod 2^b. The secure
sum's output reduced modulo 2^b (TFF's inner-server modular clip, what a
modular SecAgg reveals and what the accountant's bound, a post-processing of
Σ_i (q_i + ξ_i), covers) is then Σ_i v_i mod 2^b, a finite sum of independent
terms regrouped: exactly the law of the n unpacked clients'. (TFF's simulated
SecureSumFactory also reveals the integer sum before that reduction, i.e. how
often Σ_i v_i wrapped; that extra, unaccounted number differs between the
two forms: packed it counts slots' wraps, unpacked clients'.)

State: TFF's DistributedDpSumFactory state, the same type and the same update
(the rotation seed advances by one, the DP query state and event as TFF's
DifferentiallyPrivateFactory sets them), so a state moves between the packed and
the unpacked process. Measurements: TFF's (l2_clip, scale_factor,
scaled_inflated_l2, scaled_local_stddev, actual_num_clients, padded_dim,
dp_query_metrics); actual_num_clients counts clients, K per value.

`StackedMeanFactory(sum_factory, K)` divides such a sum by the clients summed,
as `tff.aggregators.UnweightedMeanFactory` does for one client per value.

Only the fixed ℓ2 clip and the 'hd' rotation are supported (what
`aggregators.peers` runs). TFF's clients count the updates they clip through a
secure sum whose result TFF then drops from its measurements; the packed form
does not compute it.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp
# pylint: disable=g-bad-import-order
from tensorflow_federated.python.aggregators import concat
from tensorflow_federated.python.aggregators import differential_privacy
from tensorflow_federated.python.aggregators import discretization
from tensorflow_federated.python.aggregators import distributed_dp
from tensorflow_federated.python.aggregators import hadamard
from tensorflow_federated.python.aggregators import modular_clipping
from tensorflow_federated.python.aggregators import robust
from tensorflow_federated.python.aggregators import rotation
# pylint: enable=g-bad-import-order

from tff_quant.common import dims, validation

MECHANISMS = ('distributed_dgauss', 'distributed_skellam')
_INT32_MAX = 2**31 - 1


def _stacked_row_specs(value_type, clients_per_value: int, owner: str):
  """The TensorSpecs of one row of the value (the leading K axis dropped).

  Args:
    value_type: the value's TFF type.
    clients_per_value: K.
    owner: the factory's name, for the error.

  Returns:
    The structure of the row's TensorSpecs.

  Raises:
    TypeError: a tensor without leading axis K, or not floating point.
  """
  specs = tff.types.type_to_tf_tensor_specs(value_type)
  for spec in tf.nest.flatten(specs):
    if spec.shape.rank is None or spec.shape.rank < 1 or (
        spec.shape[0] != clients_per_value) or not spec.dtype.is_floating:
      raise TypeError(f'{owner}(clients_per_value={clients_per_value}) needs '
                      f'float values that stack {clients_per_value} clients on '
                      f'their first axis, got {spec}.')
  return tf.nest.map_structure(
      lambda s: tf.TensorSpec(s.shape[1:], s.dtype), specs)


def _num_coordinates(specs) -> int:
  """d: the coordinates of a structure of TensorSpecs."""
  return sum(s.shape.num_elements() for s in tf.nest.flatten(specs))


def _secure_sum_process(bits: int, padded: int):
  """TFF's secure chain, as DistributedDpSumFactory._build_aggregation_factory
  builds it (fixed bounds: stateless): modular clips to [-2^(b-1), 2^(b-1))
  and [0, 2^b) around SecureSumFactory(2^b - 1, 0).

  Args:
    bits: b.
    padded: D, the length of the int32 vectors summed.

  Returns:
    Its `tff.templates.AggregationProcess`.

  Raises:
    TypeError: the chain has state.
  """
  half = 2**(bits - 1)
  secure_factory = modular_clipping.ModularClippingSumFactory(
      clip_range_lower=-half, clip_range_upper=half,
      inner_agg_factory=modular_clipping.ModularClippingSumFactory(
          clip_range_lower=0, clip_range_upper=2**bits,
          inner_agg_factory=tff.aggregators.SecureSumFactory(
              upper_bound_threshold=2**bits - 1, lower_bound_threshold=0)))
  secure_process = secure_factory.create(tff.TensorType(np.int32, [padded]))
  if tff.types.type_to_tf_tensor_specs(
      secure_process.initialize.type_signature.result.member):
    raise TypeError('TFF\'s secure chain has state here; this factory assumes '
                    'a stateless one (fixed bounds).')
  return secure_process


class PackedDistributedDpSumFactory(tff.aggregators.UnweightedAggregationFactory):
  """TFF's DistributedDpSumFactory (a sum) for K clients stacked per value.

  See the module docstring for the pipeline and why the sum has the law of
  K·(values) independent clients through TFF's own factory.

  Args:
    clients_per_value: K >= 1 clients stacked on each value's leading axis.
    noise_multiplier: z >= 0, TFF's: the central noise std over `l2_clip`
      (each client adds std z·l2_clip/√n before scaling).
    expected_clients_per_round: n >= 1 clients a round (not slots).
    bits: secure-sum bits per coordinate, an integer in [1, 22] (TFF's range),
      with K·(2^bits − 1) <= 2^31 − 1 (the slot's sum of K rows is int32).
    l2_clip: ℓ2 clip of each client's update, > 0.
    modclip_prob: TFF's target probability of modular wrap, in (0, 1).
    beta: TFF's conditional-rounding parameter, in [0, 1) (0: unconditional).
    mechanism: 'distributed_dgauss' or 'distributed_skellam'.

  Raises:
    ValueError: a parameter out of its range (TFF's own checks name the
      parameters it validates).
  """

  def __init__(self, clients_per_value: int, noise_multiplier: float,
               expected_clients_per_round: int, bits: int, l2_clip: float,
               modclip_prob: float = 1e-4, beta: float = 0.0,
               mechanism: str = 'distributed_skellam'):
    self.clients_per_value = validation.check_integer(
        'clients_per_value', clients_per_value, 1)
    self.mechanism = validation.check_one_of('mechanism', mechanism, MECHANISMS)
    validation.check_integer('bits', bits, 1, 22)
    if self.clients_per_value * (2**bits - 1) > _INT32_MAX:
      raise ValueError(
          f'clients_per_value * (2**bits - 1) must be <= 2**31 - 1 (the sum of '
          f'a slot\'s rows is int32): clients_per_value={clients_per_value}, '
          f'bits={bits}; lower either.')
    self.bits = int(bits)
    self.l2_clip = float(validation.check_positive('l2_clip', l2_clip))
    self.beta = float(beta)
    # TFF's factory checks the rest and owns the state and the scale.
    self._ddp = distributed_dp.DistributedDpSumFactory(
        noise_multiplier=noise_multiplier,
        expected_clients_per_round=expected_clients_per_round, bits=bits,
        l2_clip=self.l2_clip, modclip_prob=modclip_prob, beta=beta,
        mechanism=mechanism, rotation_type='hd', auto_l2_clip=False)

  def _query(self):
    """The DP query class TFF uses; its constructor numbers only make an
    initial state, and every call here takes its numbers from the round's
    state (TFF's), so they are placeholders."""
    if self.mechanism == 'distributed_dgauss':
      return tfp.DistributedDiscreteGaussianSumQuery(l2_norm_bound=1.0,
                                                     local_stddev=1.0)
    return tfp.DistributedSkellamSumQuery(l1_norm_bound=1, l2_norm_bound=1.0,
                                          local_stddev=1.0)

  def _add_noise(self, query, rows, local_stddev):
    """The query's own local-noise sampler on all rows in one draw (i.i.d.
    entries, so each row gets an independent client's noise); none at std 0,
    as its preprocess_record."""
    if self.mechanism == 'distributed_dgauss':
      noisy = lambda: query._add_local_noise(rows, local_stddev)  # pylint: disable=protected-access
    else:
      noisy = lambda: query.add_noise_to_sample(local_stddev, rows)
    return tf.cond(tf.equal(local_stddev, 0), lambda: rows, noisy)

  def create(self, value_type):
    """The packed sum's process for `value_type` (the module docstring's
    round).

    TFF's own process for one row (K·(values) clients of the row type) gives
    the initial state; each round maps `client_slot` over the values, sums
    the slots through TFF's secure chain, `decode`s the sum and `advance`s
    the state.

    Args:
      value_type: the clients' value: float tensors stacking K clients on
        their leading axis.

    Returns:
      A `tff.templates.AggregationProcess` whose result is the sum over
      every row of every value, with TFF's state and measurements.

    Raises:
      TypeError: a tensor without leading axis K or not floating point, or
        TFF's secure chain has state.
    """
    row_specs = _stacked_row_specs(value_type, self.clients_per_value,
                                   type(self).__name__)
    tff_process = self._ddp.create(tff.types.tensorflow_to_type(row_specs))
    padded = self._padded_dim(row_specs)
    query = self._query()
    state_type = tff_process.initialize.type_signature.result
    secure_process = _secure_sum_process(self.bits, padded)
    round_params = self._round_params(state_type.member)
    params_type = round_params.type_signature.result
    client_slot = self._client_slot(query, value_type, params_type, padded)
    decode = self._decode(
        query, secure_process.next.type_signature.result.result.member,
        params_type, row_specs)
    advance = self._advance(state_type.member,
                            *decode.type_signature.result[1:])
    server_measurements = self._server_measurements(query, state_type.member,
                                                    padded)
    k = self.clients_per_value

    @tff.federated_computation(state_type,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      params = tff.federated_map(round_params, state)
      slots = tff.federated_map(client_slot,
                                (value, tff.federated_broadcast(params)))
      summed = secure_process.next(secure_process.initialize(), slots)
      result, new_query_state, event = tff.federated_map(
          decode, (summed.result, params))
      new_state = tff.federated_map(advance, (state, new_query_state, event))
      l2, scale, inflated, std, dim, metrics = tff.federated_map(
          server_measurements, new_state)
      clients = tff.federated_secure_sum_bitwidth(
          tff.federated_value(k, tff.CLIENTS), bitwidth=k.bit_length())
      measurements = collections.OrderedDict(
          l2_clip=l2, scale_factor=scale, scaled_inflated_l2=inflated,
          scaled_local_stddev=std, actual_num_clients=clients, padded_dim=dim,
          dp_query_metrics=metrics)
      return tff.templates.MeasuredProcessOutput(
          new_state, result, tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(tff_process.initialize, next_fn)

  def _padded_dim(self, row_specs) -> int:
    """D = 2^⌈log2 d⌉ of a row of d coordinates, as TFF's factory pads it.

    Args:
      row_specs: the TensorSpecs of one row.

    Returns:
      D.

    Raises:
      AssertionError: TFF's factory padded to another D.
    """
    padded = dims.sent_dim(max(1, _num_coordinates(row_specs)), rotate=True)
    assert padded == self._ddp._padded_dim, (padded, self._ddp._padded_dim)  # pylint: disable=protected-access
    return padded

  def _round_params(self, state_member):
    """The round's numbers from TFF's state: the rotation seed, the scale,
    the prior norm bound and the DP query's state.

    Args:
      state_member: the server state's type (TFF's).

    Returns:
      A TF computation: state -> OrderedDict(seed, scale, prior_norm_bound,
      query_state).
    """
    ddp = self._ddp

    @tff.tensorflow.computation(state_member)
    def round_params(state):
      _, discrete, dp = ddp._unpack_state(state)  # pylint: disable=protected-access
      return collections.OrderedDict(
          seed=state[1], scale=discrete['scale_factor'],
          prior_norm_bound=discrete['prior_norm_bound'],
          query_state=dp.query_state)

    return round_params

  def _encode_row(self, query, row, round_seed, rounding_seed, scale,
                  prior_norm_bound, check_params):
    """TFF's client pipeline for one row, up to the noise: rotate, clip,
    scale and round, check the norms.

    Args:
      query: the DP query (`_query`).
      row: one client's flattened update, float [d].
      round_seed: the round's rotation seed (TFF's state).
      rounding_seed: this row's own seed for the stochastic rounding.
      scale, prior_norm_bound: the round's (`_round_params`).
      check_params: the query's sample params with local_stddev 0.

    Returns:
      int32 [D]: the rounded, scaled, rotated, clipped row.
    """
    # HadamardTransformFactory's client_transform (num_repeats=1).
    x = rotation._flatten_and_pad_zeros_pow2(row)  # pylint: disable=protected-access
    seed = rotation._unique_seeds_for_struct(x, round_seed, stride=1)  # pylint: disable=protected-access
    x *= rotation.sample_rademacher(tf.shape(x), x.dtype, seed)
    x = tf.squeeze(hadamard.fast_walsh_hadamard_transform(
        tf.expand_dims(x, axis=0)), axis=0)
    # clipping_factory's clip_fn.
    x, _ = robust._clip_by_global_l2_norm(x, self.l2_clip)  # pylint: disable=protected-access
    # DiscretizationFactory's discretize_tensor (stochastic=True), with
    # this row's own seed (TFF's default, the time in microseconds, could
    # repeat between rows computed in the same microsecond).
    scaled = x * scale
    rounded = discretization._stochastic_rounding(  # pylint: disable=protected-access
        scaled, prior_norm_bound * scale, scale, self.beta, seed=rounding_seed)
    ints = tf.cast(rounded, discretization.OUTPUT_TF_TYPE)
    # The DP query's per-client norm checks (its noise comes after).
    return query.preprocess_record(check_params, ints)

  def _client_slot(self, query, value_type, params_type, padded: int):
    """What a slot sends: its K rows encoded (`_encode_row`), noised by the
    query in one draw, each wrapped modulo 2^b, then their sum modulo 2^b.

    Args:
      query: the DP query (`_query`).
      value_type: the slot's value (K rows).
      params_type: `_round_params`'s result type.
      padded: D.

    Returns:
      A TF computation: (value, round params) -> int32 [D].
    """
    k, bits = self.clients_per_value, self.bits
    half = 2**(bits - 1)

    @tff.tensorflow.computation(value_type, params_type)
    def client_slot(value, params):
      flat = [tf.reshape(t, [k, -1]) for t in tf.nest.flatten(value)]
      rows = tf.concat(flat, axis=1)   # concat_factory's _concat_impl, per row
      sample = query.derive_sample_params(params['query_state'])
      check = sample._replace(local_stddev=tf.zeros_like(sample.local_stddev))
      seeds = tf.random.uniform([k], tf.int64.min, tf.int64.max, tf.int64)
      ints = tf.map_fn(
          lambda a: self._encode_row(query, a[0], params['seed'], a[1],
                                     params['scale'],
                                     params['prior_norm_bound'], check),
          (rows, seeds), fn_output_signature=tf.TensorSpec([padded], tf.int32))
      noisy = self._add_noise(query, ints, sample.local_stddev)
      wrapped = modular_clipping.modular_clip_by_value(
          modular_clipping.modular_clip_by_value(noisy, -half, half), 0, 2**bits)
      return modular_clipping.modular_clip_by_value(
          tf.reduce_sum(wrapped, axis=0), 0, 2**bits)

    return client_slot

  @staticmethod
  def _decode(query, total_type, params_type, row_specs):
    """TFF's server side: the query's noised result, unscaled, rotated back
    and un-concatenated.

    Args:
      query: the DP query (`_query`).
      total_type: the secure sum's result type.
      params_type: `_round_params`'s result type.
      row_specs: the TensorSpecs of one row.

    Returns:
      A TF computation: (total, round params) -> (the sum in the row's
      structure, the query's new state, its event).
    """
    vector_spec = tf.TensorSpec([_num_coordinates(row_specs)], tf.float32)

    @tff.tensorflow.computation(total_type, params_type)
    def decode(total, params):
      result, new_query_state, event = query.get_noised_result(
          total, params['query_state'])
      x = discretization._undiscretize_struct(result, params['scale'], tf.float32)  # pylint: disable=protected-access
      # HadamardTransformFactory's server_transform (num_repeats=1).
      seed = rotation._unique_seeds_for_struct(x, params['seed'], stride=1)  # pylint: disable=protected-access
      x = tf.squeeze(hadamard.fast_walsh_hadamard_transform(
          tf.expand_dims(x, axis=0)), axis=0)
      x *= rotation.sample_rademacher(tf.shape(x), x.dtype, seed)
      x = rotation._slice_and_reshape_to_template_spec(x, vector_spec)  # pylint: disable=protected-access
      return (concat._unconcat_impl(x, row_specs), new_query_state,  # pylint: disable=protected-access
              event.to_named_tuple())

    return decode

  def _advance(self, state_member, new_query_type, event_type):
    """TFF's state update: DifferentiallyPrivateFactory's new DP state, the
    rotation seed by _build_next_global_seed_fn(stride=1).

    Args:
      state_member: the server state's type.
      new_query_type, event_type: `_decode`'s query state and event types.

    Returns:
      A TF computation: (state, new query state, event) -> the next state.
    """
    ddp = self._ddp

    @tff.tensorflow.computation(state_member, new_query_type, event_type)
    def advance(state, new_query_state, event):
      l2_clip_state, discrete, dp = ddp._unpack_state(state)  # pylint: disable=protected-access
      discrete['inner_agg_process'] = differential_privacy.DPAggregatorState(
          new_query_state, dp.agg_state, event, False)
      seed = state[1]
      return l2_clip_state, tf.convert_to_tensor([seed[0], seed[1] + 1])

    return advance

  def _server_measurements(self, query, state_member, padded: int):
    """TFF's measurements that the state holds.

    Args:
      query: the DP query (`_query`).
      state_member: the server state's type.
      padded: D.

    Returns:
      A TF computation: state -> (l2_clip, scale_factor, scaled_inflated_l2,
      scaled_local_stddev, padded_dim, dp_query_metrics).
    """
    ddp, clip = self._ddp, self.l2_clip

    @tff.tensorflow.computation(state_member)
    def server_measurements(state):
      _, discrete, dp = ddp._unpack_state(state)  # pylint: disable=protected-access
      return (np.float32(clip), discrete['scale_factor'],
              dp.query_state.l2_norm_bound, dp.query_state.local_stddev,
              np.int32(padded), query.derive_metrics(dp.query_state))

    return server_measurements



class StackedMeanFactory(tff.aggregators.UnweightedAggregationFactory):
  """The mean over clients of a sum factory for K clients stacked per value.

  TFF's `UnweightedMeanFactory` with a secure count: the sum's result divided
  by K · (values), the count summed by `SecureSumFactory(K, 0)` from K per
  value. State and measurements as UnweightedMeanFactory's (mean_value,
  mean_count).

  Args:
    value_sum_factory: an unweighted factory summing stacked values (e.g.
      `PackedDistributedDpSumFactory`).
    clients_per_value: K >= 1.

  Raises:
    ValueError: clients_per_value not an integer >= 1.
  """

  def __init__(self, value_sum_factory, clients_per_value: int):
    if not isinstance(value_sum_factory,
                      tff.aggregators.UnweightedAggregationFactory):
      raise TypeError('value_sum_factory must be a tff.aggregators.'
                      f'UnweightedAggregationFactory, got {value_sum_factory!r}.')
    self.value_sum_factory = value_sum_factory
    self.clients_per_value = validation.check_integer(
        'clients_per_value', clients_per_value, 1)

  def create(self, value_type):
    """The mean's process for `value_type`.

    Args:
      value_type: the clients' value (K clients stacked per value).

    Returns:
      A `tff.templates.AggregationProcess`: the sum factory's result over
      the secure count of the clients, state (the sum's, the count's) and
      measurements as UnweightedMeanFactory's.
    """
    k = self.clients_per_value
    sum_process = self.value_sum_factory.create(value_type)
    count_process = tff.aggregators.SecureSumFactory(
        upper_bound_threshold=k, lower_bound_threshold=0).create(
            tff.TensorType(np.int32))
    sum_type = sum_process.next.type_signature.result.result.member

    @tff.tensorflow.computation(sum_type, np.int32)
    def divide(total, count):
      return tf.nest.map_structure(lambda t: t / tf.cast(count, t.dtype), total)

    @tff.federated_computation()
    def init_fn():
      return tff.federated_zip((sum_process.initialize(),
                                count_process.initialize()))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      sum_state, count_state = state
      total = sum_process.next(sum_state, value)
      count = count_process.next(count_state,
                                 tff.federated_value(k, tff.CLIENTS))
      mean = tff.federated_map(divide, (total.result, count.result))
      return tff.templates.MeasuredProcessOutput(
          tff.federated_zip((total.state, count.state)), mean,
          tff.federated_zip(collections.OrderedDict(
              mean_value=total.measurements, mean_count=count.measurements)))

    return tff.templates.AggregationProcess(init_fn, next_fn)
