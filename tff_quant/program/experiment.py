"""The skeleton of a multi-setting experiment binary: one behaviour for all of them.

Each setting runs in its own folder under the output root, holding config.json
(what defines the setting; a restart with other values is refused, never a silent
retrain: use another output folder or --fresh), whatever the setting's own
training writes there (checkpoints, metrics.csv: resumed mid-run), and
summary.json when it is done (a finished setting with the same config is reused,
not re-run). Outputs are written atomically. At the end: one summary CSV and the
markdown table printed. A setting whose folder holds no finished work (no
checkpointed round, no summary.json: its start failed) takes a changed config.

Ctrl-C: `run_settings` raises `runtime.Interrupted` naming the setting (and the
round, from `round_loop`); `cli.user_errors_exit`, around every binary's run,
prints it as one line and exits with status 130. The same command resumes:
finished settings are reused, an interrupted one resumes from its checkpoint.
"""

import dataclasses
import json
import math
import os
from typing import Callable, Dict, List, Optional, Sequence

from tff_quant.program import results_io
from tff_quant.program import round_loop
from tff_quant.program import runtime


@dataclasses.dataclass
class Setting:
  """One setting: its folder name, the config that defines it, and run data."""
  name: str
  config: Dict[str, object]
  payload: object = None   # handed to the runner; not part of the config


@dataclasses.dataclass
class Column:
  """A column of the summary CSV and the printed table."""
  key: str
  header: str
  fmt: Callable[[object], str] = str


def _same_config(path: str, config: Dict) -> bool:
  with open(path) as f:
    done = json.load(f)
  return done.get('config') == json.loads(json.dumps(config, default=float))


def run_settings(root_dir: str, settings: Sequence[Setting],
                 run_one: Callable[[Setting, str], Dict[str, object]],
                 fresh: bool = False,
                 log: Callable[[str], None] = print) -> List[Dict[str, object]]:
  """Runs (or reuses, or resumes) every setting; returns their summaries in order.

  `run_one(setting, run_dir)` trains one setting and returns its summary dict;
  it may resume from checkpoints it keeps in run_dir. Config changes other than
  a larger 'rounds' raise ValueError before anything is overwritten (unless
  the setting's run never got anywhere: see `round_loop.prepare_run_dir`).

  Raises:
    ValueError: duplicate names, or a started setting's config changed.
    runtime.Interrupted: Ctrl-C; its text names the setting (and the round).
  """
  names = [s.name for s in settings]
  if len(set(names)) != len(names):
    raise ValueError(f'Setting names must be unique, got {names}.')
  for s in settings:   # refuse a changed config before any setting runs
    round_loop.check_run_dir(os.path.join(root_dir, s.name), s.config, fresh)
  summaries = []
  for s in settings:
    run_dir = os.path.join(root_dir, s.name)
    summary_path = os.path.join(run_dir, 'summary.json')
    if not fresh and os.path.exists(summary_path) and _same_config(summary_path,
                                                                   s.config):
      with open(summary_path) as f:
        summary = json.load(f)
      log(f'--- {s.name}: done before, reusing {summary_path}')
    else:
      round_loop.prepare_run_dir(run_dir, s.config, fresh, log=log)
      log(f'--- {s.name}')
      try:
        summary = dict(run_one(s, run_dir), setting=s.name, config=s.config)
      except KeyboardInterrupt as e:
        raise runtime.Interrupted(
            f'{s.name}: {runtime.interrupt_message(e)}') from None
      results_io.write_json(summary_path, summary)
    summaries.append(summary)
  return summaries


def _cell(column: Column, summary: Dict) -> str:
  value = summary.get(column.key)
  if value is None or value == '' or (isinstance(value, float) and math.isnan(value)):
    return '—'
  return column.fmt(value)


def report(summaries: Sequence[Dict], columns: Sequence[Column], csv_path: str,
           title: str, log: Callable[[str], None] = print,
           note: Optional[str] = None) -> None:
  """Writes summary CSV (raw values) atomically and prints the markdown table."""
  results_io.write_csv(csv_path, [c.key for c in columns],
                       [[s.get(c.key, '') for c in columns] for s in summaries])
  lines = [f'\n{title}', '| ' + ' | '.join(c.header for c in columns) + ' |',
           '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(_cell(c, s) for c in columns) + ' |'
            for s in summaries]
  if note:
    lines.append(note)
  log('\n'.join(lines))
