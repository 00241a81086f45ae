"""Offline LiRA membership inference (Carlini et al., "Membership Inference Attacks
From First Principles", IEEE S&P 2022), for a model trained with ANY aggregator.

The attack only needs logits: of the target model on the candidate examples, and
of K shadow models trained the same way on data that excludes every candidate
("out" models, the offline variant). Per candidate, the out-distribution of the
logit-scaled confidence φ = log(p_y / (1 - p_y)) is fitted by a Gaussian, and
the membership score is the one-sided likelihood test P(φ_out <= φ_target).
With few shadow models the per-example variance is unreliable; `global_variance`
pools it over examples (Carlini et al.'s fixed-variance variant).
"""

from typing import Dict

import numpy as np
from scipy import special, stats


def logit_confidence(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
  """φ = log p_y - log(1 - p_y), computed stably from logits [N, C] and labels [N]."""
  logits = np.asarray(logits, np.float64)
  labels = np.asarray(labels)
  if logits.ndim != 2 or labels.shape != logits.shape[:1]:
    raise ValueError(f'`logits` must be [N, C] and `labels` [N], got {logits.shape} '
                     f'and {labels.shape}.')
  idx = np.arange(len(labels))
  true = logits[idx, labels]
  others = logits.copy()
  others[idx, labels] = -np.inf
  return true - special.logsumexp(others, axis=1)


def fit_out_distribution(shadow_phi: np.ndarray, global_variance: bool = True):
  """(μ [N], σ [N]) of the out-models' φ per candidate; shadow_phi is [K, N], K >= 2."""
  shadow_phi = np.asarray(shadow_phi, np.float64)
  if shadow_phi.ndim != 2 or shadow_phi.shape[0] < 2:
    raise ValueError('`shadow_phi` must be [K, N] with K >= 2 shadow models, got '
                     f'shape {shadow_phi.shape}.')
  mu = shadow_phi.mean(0)
  var = shadow_phi.var(0, ddof=1)
  if global_variance:
    var = np.full_like(var, var.mean())
  return mu, np.sqrt(np.maximum(var, 1e-12))


def offline_lira_scores(target_phi: np.ndarray, mu: np.ndarray,
                        sigma: np.ndarray) -> np.ndarray:
  """Membership score in [0, 1]: Φ((φ_target - μ_out) / σ_out); higher = member."""
  return stats.norm.cdf((np.asarray(target_phi) - mu) / sigma)


def attack_metrics(scores: np.ndarray, is_member: np.ndarray) -> Dict[str, float]:
  """Balanced accuracy at the best threshold, ROC AUC, and TPR at FPR <= 1%."""
  scores = np.asarray(scores, np.float64)
  is_member = np.asarray(is_member, bool)
  if scores.shape != is_member.shape or is_member.all() or not is_member.any():
    raise ValueError('`scores` and `is_member` must have the same shape and both '
                     'members and non-members.')
  pos, neg = scores[is_member], scores[~is_member]
  # AUC = P(score_member > score_nonmember) + 1/2 P(tie) (Mann-Whitney).
  ranks = stats.rankdata(np.concatenate([pos, neg]))
  auc = (ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg))
  thresholds = np.unique(scores)
  tpr = np.array([(pos >= t).mean() for t in thresholds])
  fpr = np.array([(neg >= t).mean() for t in thresholds])
  acc = float(np.max(0.5 * (tpr + 1 - fpr)))
  low = fpr <= 0.01
  return dict(accuracy=max(acc, 0.5), auc=float(auc),
              tpr_at_1pct_fpr=float(tpr[low].max()) if low.any() else 0.0,
              members=int(len(pos)), non_members=int(len(neg)))
