"""Tests for tff_quant/accounting/conventions.py: the papers' convention ε
(add/remove, Poisson at q = n/N) set beside ours."""

import math

import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

from tff_quant.accounting import bounds
from tff_quant.accounting import composition
from tff_quant.accounting import conventions

# The FL table's tff_dgauss/tff_skellam cell at ε = 10 (inputs: TFF's scaled,
# inflated ℓ2 and ℓ1 bounds and per-client std; 100 of 3,400, 500 rounds).
L2, L1, STD, N, D_PADDED, D = 4302.0, 3.894e5, 702.0, 100, 8192, 5994
Q, T, DELTA = 100 / 3400, 500, 1 / 3400


@pytest.mark.parametrize('alpha', [2, 3, 8, 32, 128, 256])
def test_per_round_formulas_match_ours_at_the_same_sensitivities(alpha):
  # Ours (bounds.*, used at doubled sensitivities for replace-one) and the
  # papers' evaluations agree once the neighbouring relation is the same.
  central = math.sqrt(N) * STD
  tau = conventions.ddgauss_tau(STD, N)
  ours = bounds.ddgauss_vector_rdp(alpha, L2, STD, N, D_PADDED)
  theirs = conventions.ddgauss_round_rdp(alpha, L2 / central, L1 / central,
                                         tau, D_PADDED)
  assert ours == pytest.approx(theirs, rel=3e-5)
  ours = bounds.skellam_vector_rdp(alpha, L2, L1, STD, N)
  theirs = conventions.skellam_round_rdp(alpha, L2, L1, N * STD**2)
  assert ours == pytest.approx(theirs, rel=3e-5)


@pytest.mark.parametrize('z', [0.7, 1.0, 3.0])
def test_zhu_wang_bound_is_above_the_exact_sampled_gaussian(z):
  # Thm 5 is an upper bound for any mechanism: for the Gaussian it must not
  # fall below dp-accounting's exact Poisson-subsampled Gaussian RDP.
  orders = list(range(2, 41))
  for q in [0.01, Q, 0.3]:
    acc = rdp_privacy_accountant.RdpAccountant(
        orders, rdp_privacy_accountant.NeighborRel.ADD_OR_REMOVE_ONE)
    from dp_accounting import dp_event  # pylint: disable=g-import-not-at-top
    acc.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(z)))
    exact = np.asarray(acc._rdp)  # pylint: disable=protected-access
    bound = [conventions.poisson_subsampled_rdp(lambda a: a / (2 * z * z), q, a)
             for a in orders]
    # At α = 2 the two coincide: equal up to the logs' float rounding
    # (absolute, a few ulps of log(1 + x) at x = O(1)).
    assert np.all(np.asarray(bound) >= exact - 1e-13)
    assert all(b <= a / (2 * z * z) for a, b in zip(orders, bound))


def test_q_one_is_the_unsampled_rdp():
  assert conventions.poisson_subsampled_rdp(lambda a: 0.3 * a, 1.0, 7) == 0.3 * 7


def test_the_gap_is_the_relation_and_the_sampling():
  # The same noise: ours (replace-one: sensitivities doubled; fixed-size
  # cohorts: WBK19 Thm 9) against the papers' convention. Each change alone
  # moves ε up; both together give ours.
  theirs, _ = conventions.papers_epsilon_ddgauss(L2, L1, STD, N, D_PADDED, Q,
                                                 T, DELTA)
  doubled, _ = conventions.papers_epsilon_ddgauss(2 * L2, 2 * L1, STD, N,
                                                  D_PADDED, Q, T, DELTA)

  def ours_at(scale):
    rdp = {a: bounds.ddgauss_vector_rdp(a, scale * L2, STD, N, D_PADDED)
           for a in range(2, 257)}
    rdp[math.inf] = math.inf
    acc = composition.RoundAccountant.from_round_rdp(rdp, N, 3400, DELTA, D,
                                                     'test')
    return acc.epsilon_rdp(T)[0]
  fixed_size = ours_at(1)
  ours = ours_at(2)
  assert theirs < doubled < ours
  assert theirs < fixed_size < ours
  assert 1.9 < theirs < 2.2 and 9.5 < ours < 10.5   # the FL table's 2.02 / 10.00


def test_skellam_and_gaussian_conventions_are_below_ours():
  theirs, _ = conventions.papers_epsilon_skellam(L2, L1, STD, N, Q, T, DELTA)
  rdp = {a: bounds.skellam_vector_rdp(a, 2 * L2, 2 * L1, STD, N)
         for a in range(2, 257)}
  rdp[math.inf] = math.inf
  ours = composition.RoundAccountant.from_round_rdp(
      rdp, N, 3400, DELTA, D, 'test').epsilon_rdp(T)[0]
  assert theirs < ours
  z = 1.6
  theirs, _ = conventions.papers_epsilon_gaussian(z, Q, T, DELTA)
  from tff_quant import mechanisms  # pylint: disable=g-import-not-at-top
  mech = mechanisms.Gaussian(1 / math.sqrt(D), z / math.sqrt(N))
  ours = composition.RoundAccountant(mech, N, 3400, DELTA, D,
                                     l2_clip=1.0).epsilon_rdp(T)[0]
  assert theirs < ours


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(q=0.0), ValueError, r'`q` must be in \(0, 1\]'),
    (dict(rounds=0), ValueError, r'`rounds` must be in \[1, inf\)'),
    (dict(delta=1.0), ValueError, '`delta`'),
    (dict(local_std=0.0), ValueError, '`local_std`'),
    (dict(num_clients=0), ValueError, r'`num_clients` must be in \[1, inf\)')])
def test_bad_input_names_the_parameter(kwargs, error, match):
  args = dict(l2_sensitivity=L2, l1_sensitivity=L1, local_std=STD,
              num_clients=N, dim=D_PADDED, q=Q, rounds=T, delta=DELTA)
  args.update(kwargs)
  with pytest.raises(error, match=match):
    conventions.papers_epsilon_ddgauss(**args)
