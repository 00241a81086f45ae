"""The notebooks in colab/: each opens with what it needs and a setup cell, ships
the outputs of a real run, and executes headless with small parameters."""

import importlib.util
import os
import platform
import subprocess
import sys

import nbclient
import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = {
    'quickstart.ipynb': ('ROUNDS = 2\nCLIENTS_PER_ROUND = 3\nTOTAL_CLIENTS = 20\nCLIP_NORM = 1.0\n'
                         'TARGET_EPSILON = 10.0'),
    'privacy_accounting.ipynb': ('MAX_N = 4\nTARGET_EPS = 8.0\nROUNDS = 5\n'
                                 'CLIENTS_PER_ROUND = 5\nTOTAL_CLIENTS = 100'),
    'reproduce_papers.ipynb': None,  # reads the committed results/ as is
}
NOTEBOOKS = sorted(SMALL)
RECIPE = [  # README.md "Install recipe", as the setup cell runs it
    ['-r', 'requirements.txt'], ['--no-deps', '-r', 'requirements-tff.txt'], ['--no-deps', '-e', '']]


def _read(name):
  return nbformat.read(os.path.join(ROOT, 'colab', name), as_version=4)


def _first_code_index(nb):
  return next(i for i, c in enumerate(nb.cells) if c.cell_type == 'code')


def _text(cell):
  return ''.join(o.get('text', '') for o in cell.outputs if o.output_type == 'stream')


def test_every_notebook_is_covered():
  assert sorted(f for f in os.listdir(os.path.join(ROOT, 'colab'))
                if f.endswith('.ipynb')) == NOTEBOOKS


@pytest.mark.parametrize('name', NOTEBOOKS)
def test_opens_with_its_requirements_then_the_setup_cell(name):
  nb = _read(name)
  i = _first_code_index(nb)
  setup = nb.cells[i].source
  assert 'sys.version_info' in setup and "REPO_URL = ''" in setup, (
      'the first code cell is the setup cell (Python version check, then get and install the code)')
  assert setup.index('sys.version_info') < setup.index('find_spec'), 'the version is checked first'
  needs = nb.cells[i - 1]
  assert needs.cell_type == 'markdown'
  for words in ('Python 3.9, 3.10 or 3.11', 'Python 3.12', 'Colab', 'local runtime', 'REPO_URL'):
    assert words in needs.source, f'the cell before the setup cell names {words!r}'


def test_the_setup_cell_is_the_same_in_every_notebook():
  setups = set()
  for name in NOTEBOOKS:
    nb = _read(name)
    setups.add(nb.cells[_first_code_index(nb)].source)
  assert len(setups) == 1, 'edit the setup cell in all notebooks alike'


@pytest.mark.parametrize('name', NOTEBOOKS)
def test_ships_the_outputs_of_a_full_run(name):
  path = os.path.join(ROOT, 'colab', name)
  code = [c for c in _read(name).cells if c.cell_type == 'code']
  assert any(c.outputs for c in code), 'no stored outputs: execute the notebook and save it'
  assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
      'stored outputs come from one run, top to bottom (Restart & Run All, then save)')
  assert not [o for c in code for o in c.outputs if o.output_type == 'error']
  assert 'nothing to install' in _text(code[0])
  assert os.path.getsize(path) < 1_000_000, 'keep stored outputs small'
  assert max(_text(c).count('\n') for c in code) < 100, 'no long logs in stored outputs'


# The setup cell's branches, run in this process with pip and git replaced by a recorder.


def _run_setup(monkeypatch, cwd, importable, repo_url=''):
  nb = _read(NOTEBOOKS[0])
  source = nb.cells[_first_code_index(nb)].source
  if repo_url:
    source = source.replace("REPO_URL = ''", f'REPO_URL = {repo_url!r}', 1)
  monkeypatch.chdir(cwd)
  find_spec = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, 'find_spec', lambda n, *a, **k: (
      find_spec(n, *a, **k) if importable or n != 'tff_quant' else None))
  calls = []

  def check_call(cmd, *unused_args, **unused_kwargs):
    calls.append(list(cmd))
    if cmd[:2] == ['git', 'clone']:  # a checkout's files, as a real clone would leave them
      for f in ('setup.py', 'requirements.txt', 'requirements-tff.txt', 'tff_quant/__init__.py'):
        os.makedirs(os.path.dirname(os.path.join(cmd[-1], f)), exist_ok=True)
        open(os.path.join(cmd[-1], f), 'w').close()
    return 0

  monkeypatch.setattr(subprocess, 'check_call', check_call)
  namespace = {}
  try:
    exec(compile(source, 'setup cell', 'exec'), namespace)  # pylint: disable=exec-used
    stopped = None
  except SystemExit as e:
    stopped = str(e)
  return namespace, calls, stopped


def _recipe(repo_dir):
  pip = [sys.executable, '-m', 'pip', 'install', '-q']
  return [pip + args[:-1] + [os.path.join(repo_dir, args[-1]) if args[-1] else repo_dir]
          for args in RECIPE]


@pytest.fixture
def linux_x86_64(monkeypatch):
  monkeypatch.setattr(platform, 'system', lambda: 'Linux')
  monkeypatch.setattr(platform, 'machine', lambda: 'x86_64')


@pytest.mark.parametrize('version', [(3, 12, 1, 'final', 0), (3, 8, 18, 'final', 0)])
def test_setup_cell_stops_on_a_python_without_wheels(monkeypatch, version):
  monkeypatch.setattr(sys, 'version_info', version)
  _, calls, stopped = _run_setup(monkeypatch, os.path.join(ROOT, 'colab'), importable=False)
  assert calls == []
  assert stopped and '\n' not in stopped
  assert 'Python 3.9, 3.10 or 3.11' in stopped and '%d.%d.%d' % version[:3] in stopped


def test_setup_cell_does_nothing_when_tff_quant_is_importable(monkeypatch):
  ns, calls, stopped = _run_setup(monkeypatch, os.path.join(ROOT, 'colab'), importable=True)
  assert (calls, stopped, ns['REPO_DIR']) == ([], None, ROOT)


def test_setup_cell_installs_from_the_enclosing_checkout(monkeypatch, linux_x86_64):
  ns, calls, stopped = _run_setup(monkeypatch, os.path.join(ROOT, 'colab'), importable=False)
  assert calls == _recipe(ROOT)
  assert ns['REPO_DIR'] == ROOT and 'restart the kernel' in stopped


def test_setup_cell_outside_a_checkout_asks_for_repo_url(monkeypatch, tmp_path, linux_x86_64):
  ns, calls, stopped = _run_setup(monkeypatch, tmp_path, importable=False)
  assert calls == [] and ns['REPO_DIR'] is None
  assert 'set REPO_URL' in stopped


def test_setup_cell_clones_repo_url_and_installs_from_the_clone(monkeypatch, tmp_path,
                                                               linux_x86_64):
  url = 'https://git.example/tff_quant.git'
  ns, calls, stopped = _run_setup(monkeypatch, tmp_path, importable=False, repo_url=url)
  clone = str(tmp_path / 'tff_quant_repo')
  assert calls == [['git', 'clone', '--depth', '1', url, clone]] + _recipe(clone)
  assert ns['REPO_DIR'] == clone and 'restart the kernel' in stopped


def test_setup_cell_refuses_to_install_off_linux_x86_64(monkeypatch):
  monkeypatch.setattr(platform, 'system', lambda: 'Darwin')
  monkeypatch.setattr(platform, 'machine', lambda: 'arm64')
  _, calls, stopped = _run_setup(monkeypatch, os.path.join(ROOT, 'colab'), importable=False)
  assert calls == [] and 'Linux x86-64' in stopped


@pytest.mark.parametrize('name', NOTEBOOKS)
def test_notebook_runs(name):
  nb = _read(name)
  params = [c for c in nb.cells if 'parameters' in c.metadata.get('tags', [])]
  assert len(params) == 1, 'each notebook has one cell tagged "parameters"'
  if SMALL[name] is not None:
    params[0].source = SMALL[name]
  env_dir = os.path.join(ROOT, 'colab')
  client = nbclient.NotebookClient(nb, timeout=900, kernel_name='python3',
                                   resources={'metadata': {'path': env_dir}})
  client.execute()  # raises CellExecutionError on any failing cell
  assert 'nothing to install' in _text(nb.cells[_first_code_index(nb)]), (
      'the tests run from an installed checkout: the setup cell must not install')
