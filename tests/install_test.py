"""The package as a user installs it: a wheel built from the sources, installed
into a folder of its own, used from a folder outside the checkout.

What this verifies (one wheel built and installed once for the module):
  1. the wheel holds every module of tff_quant/ and experiments/ (a package
     folder without __init__.py is left out by setuptools.find_packages), and
     a console script `tff-quant-<binary>` for every binary of experiments/;
  2. every one of those modules imports from the installed copy, and from it
     alone (not the checkout, which .venv also has as an editable install):
     each module's __file__ is checked; importing tff_quant.program or
     tff_quant.training alone does not import TensorFlow;
  3. two binaries run from their console scripts outside the checkout:
     `tff-quant-privacy-curves` computes and writes its results under the
     working folder (and an unknown flag exits 2 with one line naming it),
     `tff-quant-fl-emnist --help` prints the binary's docstring and flags and
     exits 0.

The installed folder reuses the pinned dependencies of the running
interpreter (`pip install --no-deps --target`, then PYTHONPATH), so nothing
is downloaded. The wheel is built from a copy of what setup.py reads, so the
build writes no build/ or egg-info into the checkout.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ('tff_quant', 'experiments')
#: What setup.py reads to build (its requirement pins, the packages).
SOURCES = ('setup.py', 'requirements.txt', 'requirements-tff.txt') + PACKAGES
#: Files in the packages' folders that are not shipped, and why.
NOT_SHIPPED = {
    'experiments/run_fl_comparison.sh': 'a checkout script (cd .., .venv)',
}


def _python_files(folder):
  """The .py files under ROOT/folder, relative to ROOT, '/'-separated."""
  out = []
  for where, dirs, names in os.walk(os.path.join(ROOT, folder)):
    dirs[:] = [d for d in dirs if d != '__pycache__']
    out += [os.path.relpath(os.path.join(where, n), ROOT).replace(os.sep, '/')
            for n in names if n.endswith('.py')]
  return sorted(out)


def _binaries():
  return sorted(os.path.basename(p)[:-3] for p in _python_files('experiments')
                if p.count('/') == 1 and not p.endswith('__init__.py'))


def _script(binary):
  return 'tff-quant-' + binary.replace('_', '-')


def _run(args, cwd, site, timeout=300):
  """Runs `args` in `cwd` with only the installed folder on PYTHONPATH."""
  env = dict(os.environ, PYTHONPATH=site, TF_CPP_MIN_LOG_LEVEL='2',
             PIP_DISABLE_PIP_VERSION_CHECK='1')
  return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=timeout, check=False)


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
  """Builds the wheel and installs it with --no-deps into a folder of its own.

  Returns:
    A dict: 'wheel' (its path), 'site' (the folder installed into), 'outside'
    (an empty working folder outside the checkout).
  """
  tmp = tmp_path_factory.mktemp('install')
  src = tmp / 'src'
  src.mkdir()
  for name in SOURCES:
    path = os.path.join(ROOT, name)
    if os.path.isdir(path):
      shutil.copytree(path, src / name,
                      ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
    else:
      shutil.copy(path, src / name)
  pip = [sys.executable, '-m', 'pip', '--disable-pip-version-check', '-q']
  build = subprocess.run(
      pip + ['wheel', '--no-deps', '--no-build-isolation', '--no-index',
             '--wheel-dir', str(tmp / 'dist'), str(src)],
      cwd=str(tmp), capture_output=True, text=True, timeout=300, check=False)
  assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
  (wheel,) = (tmp / 'dist').iterdir()
  site = tmp / 'site'
  install = subprocess.run(
      pip + ['install', '--no-deps', '--no-index', '--target', str(site),
             str(wheel)],
      cwd=str(tmp), capture_output=True, text=True, timeout=300, check=False)
  assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
  outside = tmp / 'outside'
  outside.mkdir()
  assert not str(outside).startswith(ROOT + os.sep)
  return {'wheel': str(wheel), 'site': str(site), 'outside': str(outside)}


def test_1_every_package_folder_is_a_package_and_has_nothing_unshipped():
  missing, unshipped = [], []
  for package in PACKAGES:
    for where, dirs, names in os.walk(os.path.join(ROOT, package)):
      dirs[:] = [d for d in dirs if d != '__pycache__']
      rel = os.path.relpath(where, ROOT).replace(os.sep, '/')
      if any(n.endswith('.py') for n in names) and '__init__.py' not in names:
        missing.append(rel)
      unshipped += [f'{rel}/{n}' for n in names if not n.endswith(('.py', '.pyc'))
                    and f'{rel}/{n}' not in NOT_SHIPPED]
  assert not missing, f'folders of modules without __init__.py: {missing}'
  # A data file the code reads at run time would need package_data in setup.py.
  assert not unshipped, f'non-Python files the wheel leaves out: {unshipped}'


def test_1_the_wheel_holds_every_module_and_a_console_script_per_binary(installed):
  with zipfile.ZipFile(installed['wheel']) as whl:
    names = whl.namelist()
    (entry_points,) = [n for n in names if n.endswith('.dist-info/entry_points.txt')]
    scripts = whl.read(entry_points).decode()
  shipped = sorted(n for n in names if n.endswith('.py'))
  expected = sorted(f for p in PACKAGES for f in _python_files(p))
  assert shipped == expected, (
      f'left out: {sorted(set(expected) - set(shipped))}; '
      f'not in the checkout: {sorted(set(shipped) - set(expected))}')
  lines = {l.strip() for l in scripts.splitlines()}
  want = {f'{_script(b)} = experiments.{b}:entry_point' for b in _binaries()}
  assert want <= lines, f'console scripts missing: {sorted(want - lines)}'
  for binary in _binaries():
    assert os.path.exists(os.path.join(installed['site'], 'bin', _script(binary)))


# Run in the installed folder's interpreter: imports every installed module
# (a binary's flags are removed after its import: binaries share flag names)
# and reports where each came from.
_IMPORT_ALL = textwrap.dedent('''
    import importlib, json, os, sys
    site = os.environ['PYTHONPATH']
    light = {}
    for name in ('tff_quant.program', 'tff_quant.training'):
      importlib.import_module(name)
      light[name] = 'tensorflow' not in sys.modules
    from absl import flags
    names = []
    for package in ('tff_quant', 'experiments'):
      for where, dirs, files in sorted(os.walk(os.path.join(site, package))):
        dirs[:] = sorted(d for d in dirs if d != '__pycache__')
        rel = os.path.relpath(where, site).replace(os.sep, '.')
        names += [rel if f == '__init__.py' else f'{rel}.{f[:-3]}'
                  for f in sorted(files) if f.endswith('.py')]
    for name in names:
      importlib.import_module(name)
      if name.startswith('experiments.'):
        for flag in flags.FLAGS.get_flags_for_module(name):
          delattr(flags.FLAGS, flag.name)
    files = {m: getattr(sys.modules[m], '__file__', None) for m in sys.modules
             if m.split('.')[0] in ('tff_quant', 'experiments')}
    print(json.dumps({'names': names, 'files': files, 'light': light}))
''')


def test_2_every_module_imports_from_the_installed_copy_outside_the_checkout(
    installed):
  res = _run([sys.executable, '-c', _IMPORT_ALL], installed['outside'],
             installed['site'])
  assert res.returncode == 0, res.stderr[-5000:]
  out = json.loads(res.stdout.strip().splitlines()[-1])
  expected = sorted(f[:-3].replace('/', '.').replace('.__init__', '')
                    for p in PACKAGES for f in _python_files(p))
  assert sorted(out['names']) == expected
  site = installed['site'] + os.sep
  elsewhere = {m: f for m, f in out['files'].items()
               if not (f or '').startswith(site)}
  assert not elsewhere, f'modules not from the installed copy: {elsewhere}'
  assert set(out['names']) <= set(out['files'])
  assert out['light'] == {'tff_quant.program': True, 'tff_quant.training': True}


def test_3_a_binary_computes_from_its_console_script_outside_the_checkout(
    installed):
  """`tff-quant-privacy-curves` with small flags: its default --output_dir
  (results/privacy) is under the working folder."""
  script = os.path.join(installed['site'], 'bin', 'tff-quant-privacy-curves')
  res = _run([script, '--max_clients=2', '--alphas=2'], installed['outside'],
             installed['site'])
  assert res.returncode == 0, res.stderr[-3000:]
  out = os.path.join(installed['outside'], 'results', 'privacy')
  assert os.path.getsize(os.path.join(out, 'verdicts.txt')) > 0
  assert 'CONFIRMED' in res.stdout
  bad = _run([script, '--no_such_flag'], installed['outside'], installed['site'])
  assert bad.returncode == 2, bad.stderr[-3000:]
  assert bad.stderr.strip().splitlines() == [
      "error: Unknown command line flag 'no_such_flag'"], bad.stderr[-3000:]


def test_3_fl_emnist_help_from_its_console_script_exits_0(installed):
  script = os.path.join(installed['site'], 'bin', 'tff-quant-fl-emnist')
  res = _run([script, '--help'], installed['outside'], installed['site'])
  assert res.returncode == 0, res.stderr[-3000:]
  # The binary's own docstring and flags (absl shows __main__'s, which for a
  # console script is pip's wrapper: cli.run points it at the binary).
  assert res.stdout.startswith('Federated training with any registered mechanism')
  for flag in ('--mechanism:', '--target_epsilon:', '--rounds:'):
    assert flag in res.stdout, flag
  assert 'Traceback' not in res.stderr, res.stderr[-3000:]
