"""The contract every registered mechanism meets, checked over `registry()`.

A new mechanism module is covered here without any edit: pmf validity, the
sampler against the exact pmf (Monte Carlo, 5σ per level; at the defaults and at
the PARAMS its own test module lists), unbiasedness where declared, the exact D∞ against a fine-grid brute force, seeding, sanitizing,
and its declared tunables rejecting bad values with their name and range.
"""

import importlib
import math

import numpy as np
import pytest

from tests.mechanisms import mechanism_checks as checks
from tff_quant import mechanisms
from tff_quant.accounting import divergence

REGISTRY = mechanisms.registry()
C_INF = (1.0, 0.02)


CASES = [pytest.param(name, c, params, id=f'{name}-c{c}-{params}')
         for name, params in mechanisms.variants() for c in C_INF]


def specific_parameter_sets():
  """(name, constructor kwargs) from each mechanism's own test module's PARAMS
  (tests/mechanisms/<module>_test.py): the sets that exercise its special paths."""
  out = []
  for name, cls in REGISTRY.items():
    module = f'tests.mechanisms.{cls.__module__.rsplit(".", 1)[-1]}_test'
    try:
      params = importlib.import_module(module).PARAMS
    except (ImportError, AttributeError):
      continue
    out += [pytest.param(name, p, id=f'{name}-{p}') for p in params]
  return out


def test_registry_lists_every_paper_mechanism():
  assert {'rqm', 'pbm', 'bq', 'qmgeo', 'quantized_gaussian',
          'randomized_projection'} <= set(REGISTRY)
  for name, cls in REGISTRY.items():
    assert cls.name == name
    assert cls.CALIBRATED, f'{name} declares no calibrated parameter'
    assert cls.tunable(cls.CALIBRATED[-1]).more_private in ('higher', 'lower')


def _check_pmf_against_sampler(mech):
  for x in checks.standard_inputs(mech):
    checks.assert_pmf_valid(mech, x)
    checks.assert_histogram_matches_pmf(mech, x)
    if mech.unbiased:
      checks.assert_pmf_mean_is_input(mech, x)


@pytest.mark.parametrize('name, c, params', CASES)
def test_pmf_valid_and_matches_sampler(name, c, params):
  mech = mechanisms.build(name, c, **params)
  assert math.isclose(mech.input_bound, c, rel_tol=1e-12) or mech.input_bound >= c
  _check_pmf_against_sampler(mech)


@pytest.mark.parametrize('name, params', specific_parameter_sets())
def test_pmf_valid_and_matches_sampler_on_each_modules_parameter_sets(name, params):
  _check_pmf_against_sampler(REGISTRY[name](**params))


@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_decode_unbiased_where_declared(name):
  mech = mechanisms.build(name, 1.0)
  if not mech.unbiased:
    pytest.skip(f'{name} does not declare unbiasedness')
  for x in (-1.0, 0.3, 1.0):
    checks.assert_decode_unbiased(mech, x)


@pytest.mark.parametrize('name, c, params', CASES)
def test_epsilon_infinity_is_at_least_the_fine_grid_sup(name, c, params):
  mech = mechanisms.build(name, c, **params)
  grid = np.linspace(-mech.input_bound, mech.input_bound, 401)
  rows = np.stack([mech.log_pmf(x) for x in grid])
  hi, lo = rows.max(axis=0), rows.min(axis=0)
  possible = np.isfinite(hi)
  brute = (math.inf if np.any(possible & ~np.isfinite(lo))
           else float(np.max(hi[possible] - lo[possible])))
  exact = divergence.epsilon_infinity(mech)
  if math.isinf(brute):
    assert math.isinf(exact)
  else:
    assert exact >= brute - 1e-9 * max(1.0, brute), (exact, brute)


@pytest.mark.parametrize('name, c, params', CASES)
def test_seeding_and_sanitizing(name, c, params):
  mech = mechanisms.build(name, c, **params)
  checks.assert_seeding(mech)
  checks.assert_sanitizes(mech)


def bad_values(t):
  """(value, error type) pairs outside the tunable's declared type or range."""
  if t.kind is bool:
    return [(1, TypeError), ('yes', TypeError)]
  out = [('a', TypeError), (None, TypeError)]
  if t.kind is int:
    out.append((2.5, TypeError))
  else:
    out.append((float('nan'), ValueError))
  if t.low is not None:
    out.append((t.low if t.low_open else t.low - 1, ValueError))
  if t.high is not None:
    out.append((t.high if t.high_open else t.high + 1, ValueError))
  return out


@pytest.mark.parametrize('name, tunable, value, error', [
    pytest.param(name, t.name, v, e, id=f'{name}-{t.name}-{v!r}')
    for name, cls in REGISTRY.items() for t in cls.TUNABLES
    for v, e in bad_values(t)])
def test_bad_parameter_is_rejected_with_its_name_and_range(name, tunable, value,
                                                           error):
  cls = REGISTRY[name]
  with pytest.raises(error, match=f'`{tunable}`') as info:
    cls.for_coordinate_bound(1.0, **{tunable: value})
  assert cls.tunable(tunable).allowed() in str(info.value)


@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_unknown_parameter_and_bad_flag_text_are_rejected(name):
  cls = REGISTRY[name]
  with pytest.raises(ValueError, match='no parameter'):
    cls.for_coordinate_bound(1.0, not_a_parameter=1)
  with pytest.raises(ValueError, match='key=value'):
    cls.parse_params('justtext')
  first = cls.TUNABLES[0]
  assert cls.parse_params(f'{first.name}={first.default}') == {
      first.name: first.default}


@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_accounting_hooks_reject_bad_arguments_by_name(name):
  mech = REGISTRY[name].for_coordinate_bound(1.0)
  for bad in (0, -3):
    with pytest.raises(ValueError, match=r'`num_clients` must be in \[1, inf\)'):
      mech.sum_reduction(bad)
  with pytest.raises(ValueError, match=r'`orders` must be in \[1, inf\]'):
    mech.local_divergences([0.5], [0.1])
  with pytest.raises(ValueError, match='`distances`'):
    mech.local_divergences([2.0], [-0.1])
  bound = mech.local_divergences([1, 2.0, math.inf], [0.0, 0.5])
  assert bound is None or all(v[0] == 0 and v[1] > 0 for v in bound.values())
