import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from tff_quant import mechanisms
from tff_quant.accounting import composition, divergence, loss_pmf

INTERVAL = 1e-3


def _delta(pmf, eps):
  """δ(ε) = E_P[(1 - e^(ε-L))_+] + P(L = inf), from a LossPmf."""
  losses = (pmf.lower + np.arange(len(pmf.probs))) * pmf.interval
  gain = -np.expm1(np.minimum(eps - losses, 0.0))   # (1 - e^(ε-L))_+
  return float(np.sum(pmf.probs * gain) + pmf.inf_mass)


def _pbm_pmf():
  lp, lq = divergence.sum_pair_log_pmfs(mechanisms.PBM(1.0, 16, 0.25), 3, 1)
  return loss_pmf.LossPmf.from_log_pmfs(lp, lq, INTERVAL)


def test_losses_are_rounded_up_and_mass_kept():
  with np.errstate(divide='ignore'):
    log_p = np.log(np.array([0.5, 0.3, 0.2, 0.0]))
    log_q = np.log(np.array([0.25, 0.5, 0.0, 0.25]))
  pmf = loss_pmf.LossPmf.from_log_pmfs(log_p, log_q, 0.1)
  assert pmf.inf_mass == pytest.approx(0.2)
  losses = (pmf.lower + np.nonzero(pmf.probs)[0]) * 0.1
  exact = sorted([math.log(0.3 / 0.5), math.log(2.0)])
  assert np.all(losses >= np.array(exact) - 1e-12)
  assert np.all(losses - np.array(exact) < 0.1)
  assert pmf.probs.sum() + pmf.inf_mass == pytest.approx(1.0)


def test_composition_matches_direct_convolution_and_dp_accounting():
  one = _pbm_pmf()
  direct = one.probs
  for _ in range(4):
    direct = np.convolve(direct, one.probs)
  five = one.compose(5)
  start = five.lower - 5 * one.lower
  np.testing.assert_allclose(
      five.probs, direct[start:start + len(five.probs)], atol=1e-14)
  ours = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
      five.as_dict(), five.inf_mass, INTERVAL)
  theirs = pld_lib.PrivacyLossDistribution.create_from_rounded_probability(
      one.as_dict(), one.inf_mass, INTERVAL).self_compose(5)
  for delta in (1e-3, 1e-6):
    assert ours.get_epsilon_for_delta(delta) == pytest.approx(
        theirs.get_epsilon_for_delta(delta), rel=1e-6)


def test_truncation_is_pessimistic_and_grid_bound_holds():
  one = _pbm_pmf()
  many = one.compose(300)
  assert len(many.probs) <= one.composed_points(300)
  untruncated = one.compose(300, tail=0.0)
  # The two compositions are FFTs of different lengths: their entries differ
  # by rounding of order u per point, so δ (a sum over the points) may differ
  # by up to points·u either way; the truncation itself only adds.
  rounding = len(untruncated.probs) * np.finfo(float).eps
  for eps in (0.5, 2.0, 5.0):
    assert _delta(many, eps) >= _delta(untruncated, eps) - rounding


def test_mix_with_zero_keeps_mass():
  mixed = _pbm_pmf().compose(3).mix_with_zero(0.1)
  assert mixed.probs.sum() + mixed.inf_mass == pytest.approx(1.0)
  assert mixed.probs[-mixed.lower] >= 0.9


def test_a_large_model_skips_pld_with_a_reason_instead_of_allocating():
  d = 1_206_590
  c = 0.03 / math.sqrt(d)
  g = composition.training_guarantee(mechanisms.RQM(c, c, 16, 0.42), 2000, 40,
                                     3400, 1 / 3400, dim=d, others='extremes')
  assert g.epsilon_pld is None and g.route == 'RDP'
  assert 'PLD route skipped' in g.pld_note and 'pld_max_points' in g.pld_note
  assert 'skipped' in g.summary()


def test_bq_gets_a_finite_epsilon_from_the_pld_route():
  g = composition.training_guarantee(mechanisms.BQ(1.0, 3, 8), 10, 4, 100, 1e-3,
                                     dim=3, others='extremes')
  assert math.isinf(g.epsilon_rdp) and g.route == 'PLD'
  assert 0 < g.epsilon < math.inf and g.pld_note == ''
