import json
import os

import pytest

from tff_quant.program import results_io


def test_csv_and_json_round_trip_and_leave_no_temporary(tmp_path):
  path = str(tmp_path / 'sub' / 'a.csv')
  results_io.write_csv(path, ['x', 'y'], [[1, 'a'], [2, 'b']])
  assert results_io.read_csv(path) == [{'x': '1', 'y': 'a'}, {'x': '2', 'y': 'b'}]
  results_io.write_json(str(tmp_path / 'b.json'), {'e': 1.5})
  assert json.load(open(tmp_path / 'b.json')) == {'e': 1.5}
  assert sorted(os.listdir(tmp_path)) == ['b.json', 'sub']
  assert os.listdir(tmp_path / 'sub') == ['a.csv']


def test_failed_write_keeps_the_previous_file(tmp_path):
  path = str(tmp_path / 'a.csv')
  results_io.write_csv(path, ['x'], [[1]])

  def rows():
    yield [2]
    raise RuntimeError('interrupted')
  with pytest.raises(RuntimeError):
    results_io.write_csv(path, ['x'], rows())
  assert results_io.read_csv(path) == [{'x': '1'}]


def test_exclusive_admits_one_writer_at_a_time(tmp_path):
  out = tmp_path / 'runs'
  with results_io.exclusive(str(out), 'demo run'):
    with pytest.raises(ValueError, match=f'Another demo run is writing to {out}'):
      with results_io.exclusive(str(out), 'demo run'):
        pass
  with results_io.exclusive(str(out), 'demo run'):   # released on exit
    pass
