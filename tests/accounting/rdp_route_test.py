"""Tests for tff_quant/accounting/rdp_route.py: WBK19 subsampling (its bound
and its argument checks) and the RDP → (ε, δ) conversion."""

import math

import dp_accounting
import pytest

from tff_quant import mechanisms
from tff_quant.accounting import per_round
from tff_quant.accounting import rdp_route


def test_subsampling_helps_and_is_capped():
  mech = mechanisms.RQM(clip=1.0, delta=1.0, num_levels=16, q=0.42)
  rdp = per_round.per_round_rdp(mech, 10, orders=range(2, 33))
  for a in [2, 8, 32]:
    assert rdp_route.subsampled_rdp_without_replacement(rdp, 1.0, a) == rdp[a]
    vals = [rdp_route.subsampled_rdp_without_replacement(rdp, g, a)
            for g in [0.5, 0.1, 0.01]]
    assert all(v <= rdp[a] for v in vals)
    assert vals[0] >= vals[1] >= vals[2]


_RDP = {a: 0.1 * a for a in range(2, 9)}   # a Gaussian-like RDP curve


@pytest.mark.parametrize('gamma, error, match', [
    (0.0, ValueError, r'`gamma` must be in \(0, 1\]'),
    (-0.5, ValueError, r'`gamma` must be in \(0, 1\]'),
    (1.5, ValueError, r'`gamma` must be in \(0, 1\]'),
    (math.nan, ValueError, '`gamma` must be finite'),
    ('0.5', TypeError, '`gamma` must be a number')])
def test_gamma_raises(gamma, error, match):
  with pytest.raises(error, match=match):
    rdp_route.subsampled_rdp_without_replacement(_RDP, gamma, 4)


@pytest.mark.parametrize('alpha, error, match', [
    (1, ValueError, r'`alpha` must be in \[2, inf\)'),
    (0, ValueError, r'`alpha` must be in \[2, inf\)'),
    (2.5, TypeError, '`alpha` must be an integer'),
    (4.0, TypeError, '`alpha` must be an integer')])
def test_alpha_raises(alpha, error, match):
  with pytest.raises(error, match=match):
    rdp_route.subsampled_rdp_without_replacement(_RDP, 0.1, alpha)


@pytest.mark.parametrize('rdp, gamma, error, match', [
    ({2: 0.2, 4: 0.4}, 0.1, ValueError,
     r'`rdp` must hold every integer order in \[2, 4\].*missing \[3\]'),
    ({2: 0.2, 3: 0.3}, 1.0, ValueError,
     r'`rdp` must hold order 4.*missing \[4\]'),
    ({**_RDP, 3: -0.1}, 0.1, ValueError, r'`rdp`\[3\] must be in \[0, inf\]'),
    ({**_RDP, 2: math.nan}, 0.1, ValueError,
     r'`rdp`\[2\] must be in \[0, inf\]'),
    ({**_RDP, math.inf: -1.0}, 0.1, ValueError,
     r'`rdp`\[inf\] must be in \[0, inf\]'),
    ({**_RDP, 4: 'x'}, 0.1, TypeError, r'`rdp`\[4\] must be a number'),
    ([0.2, 0.3, 0.4], 0.1, TypeError, '`rdp` must map Rényi orders')])
def test_rdp_raises(rdp, gamma, error, match):
  with pytest.raises(error, match=match):
    rdp_route.subsampled_rdp_without_replacement(rdp, gamma, 4)


def test_subsampled_rdp_edges_that_are_valid():
  # γ = 1 reads only rdp[α]; infinite values (D∞ or an order) are allowed.
  assert rdp_route.subsampled_rdp_without_replacement({4: 0.4}, 1.0, 4) == 0.4
  assert rdp_route.subsampled_rdp_without_replacement(
      {**_RDP, math.inf: math.inf}, 0.1, 4) == (
          rdp_route.subsampled_rdp_without_replacement(_RDP, 0.1, 4))
  assert rdp_route.subsampled_rdp_without_replacement(
      dict.fromkeys(range(2, 5), math.inf), 0.1, 4) == math.inf
  zero = rdp_route.subsampled_rdp_without_replacement(
      dict.fromkeys(range(2, 5), 0.0), 0.1, 4)
  assert zero == 0.0


def test_epsilon_from_rdp_matches_dp_accounting_and_skips_infinite_orders():
  orders, per_step = [2, 3, 4, 5], [0.02, 0.03, math.inf, 0.05]
  eps, order = rdp_route.epsilon_from_rdp(orders, per_step, 10, 1e-5)
  expected = dp_accounting.rdp.compute_epsilon(
      [2, 3, 5], [0.2, 0.3, 0.5], 1e-5)
  assert (eps, order) == (pytest.approx(expected[0], rel=1e-15), expected[1])
  eps, order = rdp_route.epsilon_from_rdp(orders, [math.inf] * 4, 10, 1e-5)
  assert eps == math.inf and math.isnan(order)


def test_subsampled_rdp_is_rounded_up_past_its_own_evaluation():
  """WBK19's sum evaluated at 40 digits from the same per-round RDP: the
  float bound is at or above it, by no more than its stated allowance."""
  import mpmath   # pylint: disable=g-import-not-at-top
  rdp = {a: 0.05 * a for a in range(2, 33)}
  rdp[math.inf] = 3.0
  gamma, alpha = 0.03, 32
  got = rdp_route.subsampled_rdp_without_replacement(rdp, gamma, alpha)
  with mpmath.workdps(40):
    g = mpmath.mpf(gamma)
    em1_inf = mpmath.expm1(rdp[math.inf])
    t2 = min(4 * mpmath.expm1(rdp[2]),
             mpmath.exp(rdp[2]) * min(2, em1_inf**2))
    total = 1 + g**2 * mpmath.binomial(alpha, 2) * t2
    for j in range(3, alpha + 1):
      total += (g**j * mpmath.binomial(alpha, j) * mpmath.exp((j - 1) * rdp[j])
                * min(2, em1_inf**j))
    exact = min(float(mpmath.log(total) / (alpha - 1)), rdp[alpha])
  assert got >= exact
  assert got - exact <= 1e-11


def test_epsilon_from_rdp_is_at_or_above_dp_accountings_value():
  orders, per_round = [2, 8, 32], [0.01, 0.05, 0.3]
  eps, order = rdp_route.epsilon_from_rdp(orders, per_round, 100, 1e-5)
  raw, raw_order = dp_accounting.rdp.rdp_privacy_accountant.compute_epsilon(
      orders, [100 * v for v in per_round], 1e-5)
  assert order == raw_order and eps >= raw and eps - raw <= 1e-11
