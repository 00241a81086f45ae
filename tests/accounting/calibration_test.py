import pytest

from tff_quant.accounting import calibration, composition

SCHEDULE = dict(delta=1e-5, rounds=20, clients_per_round=10, total_clients=1000)


@pytest.mark.parametrize('name, attr', [('rqm', 'q'), ('pbm', 'theta'),
                                        ('qmgeo', 'p')])
def test_calibrated_parameter_meets_target_and_is_tight(name, attr):
  target = 1.5
  mech = calibration.calibrate(name, target, **SCHEDULE, num_levels=8)
  eps = composition.training_guarantee(mech, use_pld=False, **SCHEDULE,
                                       orders=calibration._FAST_ORDERS).epsilon
  assert eps <= target
  params = mech.params()
  params[attr] = min(getattr(mech, attr) * 1.05, 0.5 if name == 'pbm' else 0.9999)
  looser = type(mech)(**params)
  assert composition.training_guarantee(
      looser, use_pld=False, **SCHEDULE,
      orders=calibration._FAST_ORDERS).epsilon > target * 0.999


def test_unknown_mechanism_and_unreachable_target_raise():
  with pytest.raises(ValueError, match='mechanism'):
    calibration.calibrate('laplace', 1.0, **SCHEDULE)
  with pytest.raises(ValueError, match='not reachable'):
    calibration.calibrate('rqm', 1e-6, **SCHEDULE)
