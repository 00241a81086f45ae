"""Tests for accounting/setting.py: c∞ = k·S/√d in one place, and a
calibrated setting's accountant, mechanism and factory checks."""

import dataclasses
import math
import pickle

import pytest

from tff_quant import accounting, mechanisms
from tff_quant.accounting import provenance
from tff_quant.accounting import setting
from tff_quant.accounting.calibration import report


@pytest.mark.parametrize('clip_norm, dim, multiple, expected', [
    (1.0, 64, 3.0, 0.375),          # 3·1/8, exact in binary
    (0.03, 1, 1.0, 0.03),
    (2.0, 16, 0.5, 0.25),
    (1.0, 8192, 3.0, 3 / 8192**0.5),
])
def test_coordinate_clip_is_k_times_the_clip_over_root_d(clip_norm, dim,
                                                         multiple, expected):
  assert setting.coordinate_clip(clip_norm, dim, multiple) == pytest.approx(
      expected, rel=1e-15)
  # k·S/√d in that order: the value calibration and the factories share.
  assert setting.coordinate_clip(clip_norm, dim, multiple) == (
      multiple * clip_norm / math.sqrt(dim))


@pytest.mark.parametrize('args, error, match', [
    ((0.0, 64), ValueError, 'clip_norm'), ((1.0, 0), ValueError, 'dim'),
    ((1.0, 6.5), TypeError, 'dim'),
    ((1.0, 64, -1.0), ValueError, 'coordinate_clip_multiple'),
    ((float('inf'), 64), ValueError, 'clip_norm')])
def test_coordinate_clip_refuses_bad_input_naming_it(args, error, match):
  with pytest.raises(error, match=match):
    setting.coordinate_clip(*args)


def test_dropouts_is_none_where_every_sampled_client_contributes():
  assert setting.dropouts(3, 4) == 3
  assert setting.dropouts(4, 4) is None


@pytest.fixture(scope='module')
def cal64():
  """RQM at 4 bits calibrated for 2 rounds of 3 of 20 clients, d = 64."""
  return accounting.calibration_report(
      'rqm', 10.0, 1e-5, 2, 3, 20, dim=64, bits=4, l2_clip=1.0,
      coordinate_clip=setting.coordinate_clip(1.0, 64, 3.0),
      compare_gaussian=False)


def test_the_setting_rebuilds_the_calibrated_mechanism(cal64):
  s = cal64.setting
  assert repr(s.build_mechanism()) == repr(cal64.mechanism)
  assert s.build_mechanism().input_bound == s.coordinate_clip == 0.375


def test_the_round_accountant_reproduces_the_calibrated_epsilon(cal64):
  s = cal64.setting
  acct = s.round_accountant()
  eps = acct.guarantee(s.rounds, use_pld=s.use_pld).epsilon
  assert eps == cal64.guarantee().epsilon <= cal64.epsilon <= 10.0
  # The same accountant as training_guarantee with the setting's arguments.
  g = accounting.training_guarantee(
      cal64.mechanism, 1, s.clients_per_round, s.total_clients, s.delta,
      s.dim, orders=s.orders, use_pld=False, l2_clip=s.l2_clip,
      others=s.others)
  assert acct.epsilon_rdp(1)[0] == g.epsilon_rdp < eps


def test_a_smaller_cohort_than_calibrated_is_refused_naming_it(cal64):
  with pytest.raises(ValueError, match='smallest_cohort'):
    cal64.setting.round_accountant(smallest_cohort=2)
  full = cal64.setting.round_accountant(smallest_cohort=3)
  assert full.summed == 3


def _setting(**kw):
  fields = dict(mechanism='rqm', tunables=tuple(sorted(
      mechanisms.RQM.complete_params(dict(q=0.3)).items())),
                coordinate_clip=0.375, l2_clip=1.0, dim=64, rounds=2,
                clients_per_round=3, total_clients=20, delta=1e-5,
                target_epsilon=10.0, epsilon=9.5, orders=(2, 3), use_pld=False,
                others='any', bound='proved')
  fields.update(kw)
  return setting.CalibratedSetting(**fields)


def test_checked_clip_passes_the_calibrated_arguments():
  s = _setting()
  params = s.params()
  assert s.checked_clip('rqm', params, 1.0) == 0.375
  assert s.checked_clip('rqm', params, 1.0, 0.375, 3.0) == 0.375
  assert s.checked_clip('rqm', params, 0.5) == 0.375   # a smaller ℓ2 clip


@pytest.mark.parametrize('kw, call, match', [
    (dict(bound='attained'), dict(), 'NOT a privacy guarantee'),
    (dict(), dict(name='pbm'), "calibrated 'rqm', not 'pbm'"),
    (dict(accountant='0' * 16), dict(), 'accountant code 0{16}'),
    (dict(), dict(params=dict(num_levels=16, q=0.9, delta_ratio=1.0)),
     'differ from the calibrated'),
    (dict(), dict(given_clip=0.1), '`coordinate_clip`=0.1'),
    (dict(), dict(multiple=1.0), '`coordinate_clip_multiple`=1 gives'),
    (dict(), dict(clip_norm=2.0), '`clip_norm`=2 exceeds'),
])
def test_checked_clip_refuses_what_changes_the_epsilon(kw, call, match):
  s = _setting(**kw)
  args = dict(name='rqm', params=s.params(), clip_norm=1.0)
  args.update(call)
  with pytest.raises(ValueError, match=match):
    s.checked_clip(**args)


def test_a_setting_pickles_and_old_pickles_still_load():
  s = _setting()
  assert s.accountant == provenance.SOURCE_DIGEST
  assert pickle.loads(pickle.dumps(s)) == s
  # Settings pickled when the class lived in calibration/report.py (a run's
  # calibration.pkl) name it there: the name still resolves to it.
  assert report.CalibratedSetting is setting.CalibratedSetting
  assert accounting.CalibratedSetting is setting.CalibratedSetting
  assert dataclasses.replace(s, dim=128).describe().count('d = 128') == 1
