import numpy as np
import pytest
from scipy import special, stats

from tff_quant import audit


def test_logit_confidence_is_log_odds_of_the_true_class():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(50, 7)) * 3
  labels = rng.integers(0, 7, 50)
  p = special.softmax(logits, axis=1)[np.arange(50), labels]
  np.testing.assert_allclose(audit.logit_confidence(logits, labels),
                             np.log(p) - np.log1p(-p), rtol=1e-9, atol=1e-9)
  # Stable where p_y rounds to 1 in float64.
  assert audit.logit_confidence(np.array([[80.0, 0.0]]), np.array([0]))[0] == (
      pytest.approx(80.0, rel=1e-9))


def test_gaussian_shift_gives_the_predicted_auc():
  # Out: φ ~ N(μ_i, 1); members are shifted by s: AUC = Φ(s / √2) exactly in the
  # limit; the tolerance is 5 standard errors of the Mann-Whitney estimate.
  rng = np.random.default_rng(1)
  n, k, shift = 4000, 16, 1.0
  mu_i = rng.normal(size=2 * n)
  shadows = mu_i + rng.normal(size=(k, 2 * n))
  member = np.arange(2 * n) < n
  target = mu_i + rng.normal(size=2 * n) + shift * member
  mu, sigma = audit.fit_out_distribution(shadows)
  m = audit.attack_metrics(audit.offline_lira_scores(target, mu, sigma), member)
  expected = stats.norm.cdf(shift / np.sqrt(2 * (1 + 1 / k)))
  se = np.sqrt(expected * (1 - expected) / n)
  assert abs(m['auc'] - expected) < 5 * se
  assert m['tpr_at_1pct_fpr'] > 0.01 and m['accuracy'] > 0.6


def test_no_signal_gives_chance():
  rng = np.random.default_rng(2)
  member = np.arange(4000) < 2000
  m = audit.attack_metrics(rng.uniform(size=4000), member)
  assert abs(m['auc'] - 0.5) < 5 * np.sqrt(0.25 / 2000)
  assert m['accuracy'] < 0.5 + 5 * np.sqrt(0.25 / 2000) + 0.02


def test_bad_inputs_are_rejected():
  with pytest.raises(ValueError, match='shadow'):
    audit.fit_out_distribution(np.zeros((1, 5)))
  with pytest.raises(ValueError, match='members'):
    audit.attack_metrics(np.zeros(4), np.ones(4, bool))
  with pytest.raises(ValueError, match='logits'):
    audit.logit_confidence(np.zeros(5), np.zeros(5, int))
