import json
import os

import pytest

from tff_quant.program import experiment, results_io


def _settings(lr=0.1, rounds=3):
  return [experiment.Setting(name, dict(lr=lr, rounds=rounds, which=name), name)
          for name in ('a', 'b')]


def test_runs_each_setting_once_then_reuses_and_refuses_a_changed_config(tmp_path):
  calls = []

  def run_one(setting, run_dir):
    calls.append(setting.payload)
    assert os.path.exists(os.path.join(run_dir, 'config.json'))
    return dict(score=len(setting.name) * setting.config['lr'])

  root = str(tmp_path)
  out = experiment.run_settings(root, _settings(), run_one, log=lambda s: None)
  assert calls == ['a', 'b'] and [s['setting'] for s in out] == ['a', 'b']
  with open(tmp_path / 'a' / 'summary.json') as f:
    assert json.load(f)['config'] == {'lr': 0.1, 'rounds': 3, 'which': 'a'}
  again = experiment.run_settings(root, _settings(), run_one, log=lambda s: None)
  assert calls == ['a', 'b'] and again == out          # reused, not re-run
  longer = experiment.run_settings(root, _settings(rounds=5), run_one,
                                   log=lambda s: None)
  assert calls == ['a', 'b', 'a', 'b'] and longer[0]['config']['rounds'] == 5
  with pytest.raises(ValueError, match='lr'):
    experiment.run_settings(root, _settings(lr=0.2), run_one, log=lambda s: None)
  assert calls == ['a', 'b', 'a', 'b']                  # nothing ran, nothing lost
  with open(tmp_path / 'b' / 'summary.json') as f:
    assert json.load(f)['config']['lr'] == 0.1
  fresh = experiment.run_settings(root, _settings(lr=0.2), run_one, fresh=True,
                                  log=lambda s: None)
  assert fresh[1]['score'] == pytest.approx(0.2)


def test_duplicate_names_are_refused(tmp_path):
  s = _settings()
  with pytest.raises(ValueError, match='unique'):
    experiment.run_settings(str(tmp_path), s + s[:1], lambda *_: {},
                            log=lambda s: None)


def test_report_writes_raw_csv_and_prints_a_markdown_table(tmp_path):
  lines = []
  columns = [experiment.Column('setting', 'setting'),
             experiment.Column('acc', 'accuracy', '{:.2f}'.format)]
  experiment.report([dict(setting='a', acc=0.5), dict(setting='none')], columns,
                    str(tmp_path / 'summary.csv'), 'Title', log=lines.append)
  assert results_io.read_csv(str(tmp_path / 'summary.csv')) == [
      {'setting': 'a', 'acc': '0.5'}, {'setting': 'none', 'acc': ''}]
  table = lines[0].split('\n')
  assert table[1] == 'Title'
  assert table[2:] == ['| setting | accuracy |', '|---|---|', '| a | 0.50 |',
                       '| none | — |']
