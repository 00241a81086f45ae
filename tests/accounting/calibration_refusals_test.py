"""calibration.refusals: the wording of a calibration without an answer,
from fake candidates and a fake oracle (no accountant)."""

import types

import pytest

from tff_quant.accounting import secure_sum
from tff_quant.accounting.calibration import refusals


class _ExactOracle:
  """`exact(candidate)` from a table; CostError for a missing one."""

  def __init__(self, table):
    self.table = table

  def exact(self, candidate):
    if candidate not in self.table:
      raise secure_sum.CostError('over the limit')
    return self.table[candidate]


def test_the_closest_names_an_exact_epsilon_before_a_bound():
  """Bounded points are evaluated in increasing order of their bound until
  none is below the smallest exact ε."""
  reached = [refusals.Reached(5.0, {'a': 1}),
             refusals.Reached(3.0, {'a': 2}, bounded='m2'),
             refusals.Reached(4.0, {'a': 3}, bounded='m3'),
             refusals.Reached(9.0, {'a': 4}, bounded='m4')]
  oracle = _ExactOracle({'m2': 6.0, 'm3': 4.5})
  assert refusals.closest(reached, oracle) == refusals.Closest(
      4.5, {'a': 3}, True)
  assert refusals.closest([], oracle) is None
  bounded_only = [refusals.Reached(3.0, {'a': 2}, bounded='m9')]
  assert refusals.closest(bounded_only, oracle) == refusals.Closest(
      3.0, {'a': 2}, False)


def _mech(modulus=None, needed=None):
  mech = types.SimpleNamespace(modulus=modulus, noise_std=1.5)
  if needed is not None:
    mech.modulus_needed = lambda clients, signal: needed
  return mech


def _util(slope):
  return types.SimpleNamespace(slope=slope, carries_signal=slope >= 0.5)


def test_a_modulus_too_small_or_a_flat_mean_is_unusable():
  wraps = refusals.why_unusable(_mech(256, 700.0), _util(0.9), 10, 0.1, {})
  assert wraps.bits_needed == 10 and 'modulus 256 < 700' in wraps.why
  flat = refusals.why_unusable(_mech(), _util(0.2), 10, 0.1, {'r': 1})
  assert flat.bits_needed is None and flat.why == 'slope 0.2 < 0.5'
  assert refusals.why_unusable(_mech(2**12, 700.0), _util(1.0), 10, 0.1,
                               {}) is None


def test_a_modular_refusal_names_the_fewest_bits_any_candidate_needs():
  unusable = [refusals.why_unusable(_mech(256, need), _util(0.9), 10, 0.1,
                                    {'steps': i})
              for i, need in enumerate((3000.0, 700.0))]
  err = refusals.cannot_carry('skellam', 3.0, 8, ('steps',), 10, 0.1,
                              unusable, [refusals.Refused({'steps': 9}, '')])
  assert isinstance(err, ValueError) and err.bits_needed == 10
  assert str(err).startswith('skellam cannot carry the signal in 8 bits: '
                             + refusals.needs(10))
  assert "Closest: {'steps': 1}" in str(err)
  assert "settings [{'steps': 9}] were not evaluated" in str(err)


@pytest.mark.parametrize('slopes, best', [((0.1, 0.3), '0.3'),
                                          ((0.4, 0.2), '0.4')])
def test_a_slope_refusal_names_the_best_slope(slopes, best):
  unusable = [refusals.why_unusable(_mech(), _util(s), 10, 0.1, {'r': s})
              for s in slopes]
  err = refusals.cannot_carry('qg', 3.0, None, ('r',), 10, 0.1, unusable, [])
  assert err.bits_needed is None
  assert f'has slope {best} < 0.5 at best' in str(err)
