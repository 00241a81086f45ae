"""Empirical privacy audits of trained models (membership inference)."""

from tff_quant.audit.lira import (attack_metrics, fit_out_distribution,
                                  logit_confidence, offline_lira_scores)
