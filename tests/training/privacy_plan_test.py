"""Tests for training/privacy_plan.py: one plan, made before TFF, that the
factory and the summary read."""

import copy
import math

import pytest

from tff_quant import accounting
from tff_quant.accounting import setting
from tff_quant.training import config as config_lib
from tff_quant.training import privacy_plan

NUM_PARAMS = 50   # a model's update: padded to 64 where rotated


def small_config(**kw):
  cfg = dict(mechanism='rqm', model='logreg', rounds=2, clients_per_round=3,
             total_clients=20, clip_norm=1.0, delta=1e-5, rotate=True,
             coordinate_clip_multiple=3.0, mechanism_params=dict(num_levels=16))
  cfg.update(kw)
  return config_lib.TrainingConfig(**cfg)


@pytest.fixture(scope='module')
def calibrated():
  """(config, the log, its plan): RQM at 4 bits calibrated to ε <= 10."""
  config = small_config(target_epsilon=10.0)
  logs = []
  return config, logs, privacy_plan.make(config, NUM_PARAMS, logs.append)


def test_the_noise_free_baseline_has_no_privacy():
  plan = privacy_plan.make(small_config(mechanism='none', mechanism_params={}),
                           NUM_PARAMS)
  assert not plan.private and plan.dim == NUM_PARAMS   # nothing rotates it
  assert plan.accountant is None and plan.epsilon(2) == (math.inf, math.inf)
  assert plan.bits_per_client == 32 * NUM_PARAMS
  assert dict(plan.summary(2)) == dict(
      mechanism='none (clipped mean, no privacy)', epsilon=math.inf)


def test_parameters_given_run_as_given_at_the_padded_d():
  config = small_config(mechanism_params=dict(q=0.3))
  before = copy.deepcopy(config)
  plan = privacy_plan.make(config, NUM_PARAMS)
  assert config == before   # the config passed in is left as it was
  assert plan.config.mechanism_params == dict(num_levels=16, q=0.3,
                                              delta_ratio=1.0)
  assert plan.dim == 64 and plan.calibration is None and plan.setting is None
  assert plan.coordinate_clip == setting.coordinate_clip(1.0, 64, 3.0) == 0.375
  assert plan.mechanism.input_bound == 0.375
  assert plan.mechanism.params()['q'] == 0.3
  # Its ε is the accountant's for this mechanism, d and schedule.
  g = accounting.training_guarantee(plan.mechanism, 2, 3, 20, 1e-5, dim=64,
                                    l2_clip=1.0, use_pld=False, attained=False)
  assert plan.epsilon(2)[0] == g.epsilon_rdp
  summary = plan.summary(2)
  assert summary['mechanism'] == repr(plan.mechanism)
  assert summary['bits_per_client_per_round'] == 4 * 64
  assert summary['upload_bits_per_client_per_round'] == 64 * (
      summary['secure_sum_bits'])


def test_a_calibrated_plan_meets_its_target_and_the_summary_reads_it(
    calibrated):
  config, logs, plan = calibrated
  assert config.target_epsilon == 10.0 and config.mechanism_params == dict(
      num_levels=16)   # unchanged
  s = plan.setting
  assert s is plan.calibration.setting and s.dim == plan.dim == 64
  assert s.coordinate_clip == plan.coordinate_clip == 0.375
  assert plan.config.mechanism_params == s.params()   # the calibrated ones
  assert repr(plan.mechanism) == repr(plan.calibration.mechanism)
  summary = plan.summary(config.rounds)
  # The summary's ε is the calibration's, computed as calibration did.
  assert summary['epsilon'] == plan.calibration.guarantee().epsilon
  assert summary['epsilon'] <= plan.calibration.epsilon <= 10.0
  assert summary['epsilon_route'] == 'RDP'
  assert plan.epsilon(config.rounds)[0] == summary['epsilon_rdp']
  assert 'calibrated run is accounted as its calibration' in summary['pld_note']
  line = next(l for l in logs if l.startswith('Calibrated rqm'))
  assert f'{summary["epsilon"]:.4g}' in line


def test_a_plan_serves_only_the_run_it_was_made_for(calibrated):
  """A plan made beforehand (a binary makes it before TensorFlow starts) is
  checked against the run's config and model size
  (`federated_training.run(plan=...)`)."""
  config, _, plan = calibrated
  assert plan.request == (config.validate(), NUM_PARAMS)
  plan.check_made_for(config, NUM_PARAMS)   # the calibrated config's request
  with pytest.raises(ValueError, match='made for 50 parameters'):
    plan.check_made_for(config, NUM_PARAMS + 1)
  with pytest.raises(ValueError, match='not for 50 parameters'):
    plan.check_made_for(small_config(target_epsilon=10.0, rounds=3),
                        NUM_PARAMS)
  given = small_config(mechanism_params=dict(q=0.3))
  privacy_plan.make(given, NUM_PARAMS).check_made_for(given, NUM_PARAMS)
  with pytest.raises(ValueError, match='made by hand'):
    privacy_plan.PrivacyPlan(given, 64).check_made_for(given, NUM_PARAMS)


def test_a_kept_calibration_is_reused_for_the_same_setting_only(calibrated,
                                                                tmp_path):
  config, _, plan = calibrated
  plan.keep(str(tmp_path))
  logs = []
  again = privacy_plan.make(config, NUM_PARAMS, logs.append,
                            stored_in=str(tmp_path))
  assert any(l.startswith('Calibration reused') for l in logs)
  assert again.setting == plan.setting and again.config == plan.config
  assert again.calibration_key == privacy_plan.calibration_key(
      config.validate(), 64)
  other = small_config(target_epsilon=10.0, clients_per_round=4)
  assert privacy_plan.stored_calibration(
      str(tmp_path), privacy_plan.calibration_key(other.validate(), 64)) is None


def test_a_dropout_tolerant_plan_reports_the_cohorts_that_occurred():
  plan = privacy_plan.make(
      small_config(target_epsilon=10.0, clients_per_round=4,
                   min_clients_per_round=3), NUM_PARAMS, lambda _: None)
  assert plan.setting.smallest_cohort == 3
  summary = plan.summary(2, cohorts=[4])
  assert summary['cohort_sizes'] == [4]
  assert summary['epsilon_for_cohorts_that_occurred'] < summary['epsilon']
  assert 'of whom at least 3 contribute' in summary['privacy_assumptions']


def test_a_peer_at_a_given_noise_is_accounted_on_the_model_size():
  plan = privacy_plan.make(small_config(
      mechanism='tff_skellam', mechanism_params=dict(noise_multiplier=1.0)),
                           NUM_PARAMS)
  assert plan.peer.dim == plan.dim == NUM_PARAMS and plan.mechanism is None
  assert plan.config.mechanism_params == dict(noise_multiplier=1.0, bits=16)
  assert plan.bits_per_client == 16 * 64   # TFF pads to 2^m for its rotation
  whole, per_coordinate = plan.epsilon(2)
  assert whole == plan.peer.accountant(20, 1e-5).epsilon_rdp(2)[0]
  assert math.isnan(per_coordinate)


@pytest.mark.parametrize('name', ['gaussian', 'tff_skellam', 'tff_dgauss'])
def test_a_peer_summary_carries_the_papers_convention_beside_our_epsilon(name):
  """The papers' convention (add/remove, Poisson at n/N) is the
  conventions module's figure for the noise the peer runs, labelled; our ε
  (replace-one, fixed-size cohorts) is above it for the same noise."""
  plan = privacy_plan.make(small_config(
      mechanism=name, mechanism_params=dict(noise_multiplier=2.0)), NUM_PARAMS)
  summary = plan.summary(2)
  q = 3 / 20
  if name == 'gaussian':
    papers = accounting.conventions.papers_epsilon_gaussian(2.0, q, 2, 1e-5)[0]
  else:
    papers = accounting.conventions.papers_epsilon_peer(plan.peer, 20, 2,
                                                        1e-5)[0]
  assert summary['epsilon_papers_convention'] == papers
  assert summary['papers_convention'] == accounting.conventions.LABEL
  assert 0 < papers < summary['epsilon']


def test_a_registry_mechanism_has_no_papers_convention_figure(calibrated):
  """Not computed for our mechanisms (conventions module docstring)."""
  assert 'epsilon_papers_convention' not in calibrated[2].summary(2)


def test_an_unreachable_target_is_refused_before_anything():
  with pytest.raises(ValueError, match='not reachable'):
    privacy_plan.make(small_config(target_epsilon=1e-6), NUM_PARAMS,
                      lambda _: None)


def test_parameters_without_privacy_are_refused_before_calibrating():
  logs = []
  with pytest.raises(ValueError, match='gives no privacy'):
    privacy_plan.make(small_config(
        mechanism='qmgeo', target_epsilon=10.0,
        mechanism_params=dict(full_support=False)), NUM_PARAMS, logs.append)
  assert logs == []   # no calibration started


def test_a_profile_route_plan_calibrates_and_reports_on_that_route():
  """use_profile: the central Gaussian peer at a given noise is accounted
  by its exact profile (below its RDP route: its calibration there is
  peers_test's), and a PBM plan's summary ε is its calibration's, on the
  profile route."""
  base = dict(rounds=20, clients_per_round=10, total_clients=200)
  gauss = dict(base, mechanism='gaussian',
               mechanism_params=dict(noise_multiplier=2.0))
  profile = privacy_plan.make(small_config(use_profile=True, **gauss),
                              NUM_PARAMS).summary(20)
  plain = privacy_plan.make(small_config(**gauss), NUM_PARAMS).summary(20)
  assert profile['epsilon_route'] == 'profile'
  assert profile['epsilon'] < plain['epsilon']
  base['target_epsilon'] = 1.0
  pbm = privacy_plan.make(small_config(
      use_profile=True, mechanism='pbm', mechanism_params=dict(num_levels=4),
      **base), NUM_PARAMS)
  summary = pbm.summary(20)
  assert pbm.setting.use_profile
  assert summary['epsilon'] == pytest.approx(pbm.calibration.epsilon,
                                             rel=1e-12)
  assert summary['epsilon_route'] == 'profile'
