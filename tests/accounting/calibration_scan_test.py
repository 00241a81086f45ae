"""calibration.scan: the grid scan, its steering and its incumbent."""

import pytest

from tff_quant import mechanisms
from tff_quant.accounting import calibration
from tff_quant.accounting.calibration import interface
from tff_quant.accounting.calibration import scan as scan_lib
from tff_quant.accounting.calibration import search

SCHEDULE = dict(delta=1e-5, rounds=20, clients_per_round=10, total_clients=1000)


class _ConstantOracle:
  """Every candidate's ε is `eps` (the searches are stubbed)."""

  def __init__(self, eps):
    self.eps = eps

  def epsilon(self, mech, screen=True):
    return calibration.EpsilonEstimate(self.eps)

  def lower_bound(self, mech):
    return None

  def looseness(self):
    return None


def test_a_near_tie_at_the_scans_width_is_searched_to_rtol_before_a_rise(
    monkeypatch):
  """A grid point that can beat the incumbent (ε at the tying value meets
  the target) but whose answer at the scan's width (1%) does not is
  searched again to rtol; its better answer becomes the incumbent instead
  of counting as a rise (RQM, 16 levels; the searches stubbed)."""
  scan = scan_lib.Scan('rqm', 10.0, 0.1, None, 4, 2e-3, {},
                       _ConstantOracle(9.95), 0.1, 100)
  build = lambda q: mechanisms.RQM.for_coordinate_bound(
      0.1, num_levels=16, delta_ratio=8.0, q=q)
  tie, better = 0.30, 0.31
  incumbent = build(tie).signal_utility(100, 0.1)
  scan.best = scan_lib.Incumbent(incumbent.error, build(0.2), {'q': 0.2},
                                 9.99, incumbent)
  monkeypatch.setattr(search, 'least_private_to_beat',
                      lambda *args, **kwargs: tie)
  widths = []

  def stub(build_, spec, target, epsilon_of, bits, rtol, hint, hint_eps,
           known=None, **kwargs):
    widths.append(rtol)
    return (search.SearchResult(tie, 9.946, 9.946) if len(widths) == 1
            else search.SearchResult(better, 9.99, 9.946))
  monkeypatch.setattr(search, 'search_last', stub)
  assert scan.visit({'delta_ratio': 8.0}) is scan_lib.Steer.CONTINUE
  assert widths == [calibration.SCAN_RTOL, 2e-3]
  assert scan.best.params['q'] == better and scan.rising == 0


@pytest.mark.parametrize('to_beat, rises', [(0.5, 0), (2.0, 1)])
def test_a_point_pruned_only_by_another_searchs_bar_is_not_a_rise(
    monkeypatch, to_beat, rises):
  """With an incumbent at error 1 and `to_beat` below it, a grid point that
  cannot beat `to_beat` may still beat the incumbent: the scan's own error
  may be falling, so it does not count toward the two rises that end the
  scan (independent review). Against the incumbent's own bar it does."""
  scan = scan_lib.Scan('rqm', 10.0, 0.1, None, 4, 2e-3, {},
                       _ConstantOracle(20.0), 0.1, 100, to_beat=to_beat)
  mech = mechanisms.RQM.for_coordinate_bound(0.1, num_levels=16,
                                             delta_ratio=8.0, q=0.2)
  util = mech.signal_utility(100, 0.1)
  scan.best = scan_lib.Incumbent(1.0, mech, {'q': 0.2}, 9.99, util)
  monkeypatch.setattr(search, 'least_private_to_beat',
                      lambda *args, **kwargs: 0.3)   # ε there: 20 > 10
  for ratio in (16.0, 32.0):
    assert scan.visit({'delta_ratio': ratio}) is (
        scan_lib.Steer.STOP if rises and ratio == 32.0
        else scan_lib.Steer.CONTINUE)
  assert scan.pruned == 2 and scan.rising == 2 * rises


def test_a_scan_toward_less_privacy_ends_at_the_first_point_that_misses(
    monkeypatch):
  # BQ's s (more private lower) is scanned upward: once the most private m
  # misses the target at some s, every larger s misses too. At 12 bits there
  # are ~2,000 values of s; the scan stops after the first.
  visited = []
  visit = scan_lib.Scan.visit
  monkeypatch.setattr(scan_lib.Scan, 'visit',
                      lambda self, point: visited.append(point) or visit(
                          self, point))
  with pytest.raises(ValueError, match='not reachable for bq within 12 bits'):
    calibration.calibrate('bq', 0.05, **SCHEDULE, bits=12)
  assert visited == [{'s': 1}]


def test_the_grid_top_is_probed_first_and_points_ruled_out_are_out_of_reach(
    monkeypatch):
  """RQM's Δ (more private when higher): the top of the grid is calibrated
  first, then the grid from the bottom, skipping the points the lower bound
  at the most private q rules out (bisection); each skipped point,
  calibrated alone, is indeed out of reach, and the report names them."""
  schedule = dict(delta=1 / 3400, rounds=300, clients_per_round=40,
                  total_clients=3400, dim=1000, l2_clip=1.0,
                  coordinate_clip=3 / 1000**0.5)
  visited = []
  visit = scan_lib.Scan.visit
  monkeypatch.setattr(scan_lib.Scan, 'visit', lambda self, g: (
      visited.append(g.get('delta_ratio')), visit(self, g))[1])
  report = calibration.calibration_report('rqm', 10.0, **schedule, bits=3,
                                          compare_gaussian=False)
  grid = mechanisms.RQM.tunable('delta_ratio').grid
  assert visited[0] == max(grid) and visited[1:] == sorted(visited[1:])
  skipped = [r for r in grid if r < visited[1]]
  monkeypatch.setattr(scan_lib.Scan, 'visit', visit)
  assert skipped, 'the bound rules out the smallest Δ here'
  for ratio in skipped:
    with pytest.raises(ValueError, match='not reachable'):
      calibration.calibrate('rqm', 10.0, **schedule, bits=3, tune='q',
                            delta_ratio=ratio)
  assert report.epsilon <= 10.0


def test_a_grid_point_out_of_reach_at_its_least_private_end_is_pruned_on_its_evaluations(
    monkeypatch):
  """A modular sum's least private values are out of reach, so the floor
  to beat the incumbent cannot be found; the search is given `hopeless`
  instead: true where a value's error reaches the incumbent's (that value
  and any more private one cannot win), false below it and where the law
  is out of reach. A search ended so prunes the point and counts a rise
  (the search stubbed; discrete Gaussian, 12 bits)."""
  clip, signal = 0.03, 0.01
  scan = scan_lib.Scan('ddgauss', 10.0, clip, None, 12, 2e-3, {},
                       _ConstantOracle(12.0), signal, 100)
  build = lambda f: mechanisms.get('ddgauss').for_coordinate_bound(
      clip, num_levels=4096, steps=16, noise_fraction=f)
  level = 0.004
  incumbent = build(level).signal_utility(100, signal)
  scan.best = scan_lib.Incumbent(incumbent.error, build(level),
                                 {'steps': 8, 'noise_fraction': level}, 9.99,
                                 incumbent)
  given = {}

  def stub(build_, spec, target, epsilon_of, bits, rtol, hint, hint_eps,
           known=None, **kwargs):
    given.update(kwargs)
    return search.SearchResult(None, 12.0, 12.0, hopeless=True)
  monkeypatch.setattr(search, 'search_last', stub)
  assert scan.visit({'steps': 16}) is scan_lib.Steer.CONTINUE
  assert scan.pruned == 1 and scan.rising == 1 and scan.best.params['steps'] == 8
  hopeless = given['hopeless']
  assert hopeless(level * 1.01) and not hopeless(level * 0.9)
  assert not hopeless(1e-6)   # out of reach: no answer there either way


def _pbm_scan(to_beat):
  schedule = dict(SCHEDULE, dim=1, use_pld=False, l2_clip=None, others='any')
  return scan_lib.Scan(
      'pbm', 2.0, 1.0, None, 4, 1e-2, {},
      calibration.oracle.Epsilon(schedule, 2.0, 'proved'), 1.0,
      SCHEDULE['clients_per_round'], to_beat=to_beat)


def test_an_error_to_beat_from_another_search_prunes_like_an_incumbent():
  """`to_beat` (a profile search's answer): a bar no candidate reaches
  prunes the grid point and leaves the scan without an answer; a bar every
  candidate beats leaves the answer as it was, to the search's width (its
  search starts from the bar's floor instead)."""
  plain = _pbm_scan(None)
  plain.run(None)
  unbeatable = _pbm_scan(plain.best.error * 1e-3)
  unbeatable.run(None)
  assert unbeatable.best is None and unbeatable.pruned == 1
  loose = _pbm_scan(plain.best.error * 1e3)
  loose.run(None)
  assert loose.best.params['theta'] == pytest.approx(
      plain.best.params['theta'], rel=1e-2)
  assert 2.0 * (1 - 1e-2) <= loose.best.epsilon <= 2.0


class _CountingOracle(_ConstantOracle):
  """`_ConstantOracle` that records each candidate it is asked about."""

  def __init__(self, eps):
    super().__init__(eps)
    self.asked = []

  def epsilon(self, mech, screen=True):
    self.asked.append(mech)
    return super().epsilon(mech, screen)


@pytest.mark.parametrize('q, searched', [(0.9999, False), (0.5, True)])
def test_refine_leaves_a_winner_at_the_least_private_end_as_it_is(q,
                                                                  searched):
  """Every q meets the target (ε = 0.3 against 10): a winner at q's least
  private end (0.9999) cannot be beaten and is not searched again (the
  search would repeat its whole bracket); one inside the axis is."""
  oracle = _CountingOracle(0.3)
  scan = scan_lib.Scan('rqm', 10.0, 0.1, None, 4, 2e-3, {}, oracle, 0.1, 100)
  assert interface.Axis.of(scan.last).unsafe == 0.9999
  mech = mechanisms.RQM.for_coordinate_bound(0.1, num_levels=16,
                                             delta_ratio=64.0, q=q)
  util = mech.signal_utility(100, 0.1)
  params = {'delta_ratio': 64.0, 'num_levels': 16, 'q': q}
  scan.best = scan_lib.Incumbent(util.error, mech, params, 0.3, util)
  scan.refine()
  assert bool(oracle.asked) is searched
  if not searched:
    assert scan.best.params == params and scan.best.epsilon == 0.3
