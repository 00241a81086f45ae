"""Tests for training/config.py: a run's config is checked, never changed."""

import copy
import dataclasses

import pytest

from tff_quant.training import config as config_lib


def small_config(**kw):
  cfg = dict(mechanism='rqm', model='logreg', rounds=2, clients_per_round=4,
             total_clients=20, clip_norm=1.0, client_lr=0.1, eval_every=1,
             noise_seed=3)
  cfg.update(kw)
  return config_lib.TrainingConfig(**cfg)


def test_validate_returns_a_completed_copy_and_changes_nothing():
  given = small_config(mechanism_params=dict(q=0.5))
  before = copy.deepcopy(given)
  checked = given.validate()
  assert given == before   # the config passed in is left as it was
  assert checked.mechanism_params == dict(num_levels=16, q=0.5, delta_ratio=1.0)
  assert dataclasses.replace(checked, mechanism_params=given.mechanism_params
                             ) == given
  assert checked.validate() == checked   # idempotent


def test_a_config_is_frozen():
  config = small_config()
  with pytest.raises(dataclasses.FrozenInstanceError):
    config.target_epsilon = 3.0


@pytest.mark.parametrize('kw, name', [
    (dict(mechanism='laplace'), 'mechanism'), (dict(rounds=0), 'rounds'),
    (dict(client_lr=-1.0), 'client_lr'), (dict(clients_per_round=30),
                                          'clients_per_round'),
    (dict(model='vgg'), 'model'), (dict(delta=2.0), 'delta'),
    (dict(target_epsilon=0.0), 'target_epsilon'),
    (dict(target_epsilon=-3.0), 'target_epsilon'),
    (dict(target_epsilon=float('nan')), 'target_epsilon'),
    (dict(mechanism='none', target_epsilon=1.0), 'target_epsilon'),
    (dict(mechanism='none', mechanism_params=dict(q=0.5)), 'mechanism_params'),
    (dict(coordinate_clip_multiple=0.0), 'coordinate_clip_multiple'),
    (dict(server_lr_schedule='step'), 'server_lr_schedule'),
    (dict(min_clients_per_round=3), 'needs a registry mechanism calibrated'),
    (dict(min_clients_per_round=5, target_epsilon=8.0),
     'min_clients_per_round'),
    (dict(min_clients_per_round=0, target_epsilon=8.0),
     'min_clients_per_round')])
def test_bad_config_raises_naming_the_field(kw, name):
  with pytest.raises(ValueError, match=name):
    small_config(**kw).validate()


def test_the_default_target_makes_a_private_run_private_in_a_new_config():
  config = small_config()
  targeted = config_lib.with_default_target(config)
  assert targeted.target_epsilon == config_lib.DEFAULT_TARGET_EPSILON
  assert config.target_epsilon is None   # unchanged
  given = small_config(mechanism_params=dict(q=0.5))   # calibration sets q
  assert config_lib.with_default_target(given) is given
  budget = small_config(mechanism_params=dict(num_levels=8))   # not calibrated
  assert config_lib.with_default_target(budget).target_epsilon == 10.0
  none = small_config(mechanism='none')
  assert config_lib.with_default_target(none) is none
  peer = small_config(mechanism='gaussian',
                      mechanism_params=dict(noise_multiplier=2.0))
  assert config_lib.with_default_target(peer) is peer
  own = small_config(target_epsilon=3.0)
  assert config_lib.with_default_target(own) is own


@pytest.mark.parametrize('name, params, calibrated, match', [
    ('gaussian', dict(bits=8, noise_multiplier=1.0), False, 'bits'),
    ('tff_skellam', dict(sigma=1.0), True, 'takes parameters'),
    ('tff_skellam', dict(bits=40, noise_multiplier=1.0), False, 'bits'),
    ('tff_dgauss', dict(noise_multiplier=-1.0), False, 'noise_multiplier'),
    ('tff_dgauss', {}, False, 'noise_multiplier=... in `mechanism_params`'),
])
def test_bad_peer_params_raise(name, params, calibrated, match):
  with pytest.raises(ValueError, match=match):
    config_lib.peer_params(name, params, calibrated)


def test_peer_params_take_their_defaults():
  assert config_lib.peer_params('tff_dgauss', {}, True) == dict(bits=16)
  assert config_lib.peer_params('gaussian', dict(noise_multiplier=2), False) == (
      dict(noise_multiplier=2.0))


def test_the_record_leaves_later_options_out_at_their_defaults():
  record = config_lib.config_record(small_config())
  for name in ('server_momentum', 'validation_fraction', 'server_lr_schedule',
               'min_clients_per_round', 'use_profile'):
    assert name not in record
  assert config_lib.config_record(small_config(use_profile=True))[
      'use_profile'] is True
  with pytest.raises(TypeError, match='use_profile'):
    small_config(use_profile='yes').validate()
  assert record['mechanism'] == 'rqm' and record['clip_norm'] == 1.0
  record = config_lib.config_record(small_config(
      server_momentum=0.9, target_epsilon=8.0, min_clients_per_round=3))
  assert record['server_momentum'] == 0.9
  assert record['min_clients_per_round'] == 3


@pytest.mark.parametrize('slot, expected', [(None, None), (0, None), (1, 1),
                                            (2, 2), (4, 4)])
def test_packing_divides_the_cohort_or_is_automatic(slot, expected):
  assert config_lib.check_packing(small_config(), slot) == expected


@pytest.mark.parametrize('slot, error, message', [
    (3, ValueError, r'clients_per_round \(4\) must be a multiple of '
                    r'clients_per_slot \(3\)'),
    (-1, ValueError, r'`clients_per_slot` must be 0 or None'),
    (2.0, TypeError, r'\(float\)'), (True, TypeError, r'\(bool\)')])
def test_bad_packing_names_the_parameter(slot, error, message):
  with pytest.raises(error, match=message):
    config_lib.check_packing(small_config(), slot)
