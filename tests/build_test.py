"""Every module, experiment and test file has a Bazel target in BUILD."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_files(folder, pattern):
  out = []
  for root, _, files in os.walk(os.path.join(ROOT, folder)):
    out += [os.path.relpath(os.path.join(root, f), ROOT) for f in files
            if re.fullmatch(pattern, f)]
  return sorted(out)


def test_every_file_has_a_target():
  with open(os.path.join(ROOT, 'BUILD')) as f:
    build = f.read()
  srcs = set(re.findall(r'srcs = \["([^"]+)"', build))
  kinds = {v: k for k, v in re.findall(
      r'(py_\w+)\(\n    name = "[^"]+",\n    srcs = \["([^"]+)"', build)}
  missing = []
  for path in python_files('tff_quant', r'.*\.py'):
    if kinds.get(path) != 'py_library':
      missing.append(('py_library', path))
  for folder in ('experiments', 'benchmarks'):
    for path in python_files(folder, r'(?!__init__).*\.py'):
      if kinds.get(path) != 'py_binary':
        missing.append(('py_binary', path))
  for path in python_files('tests', r'.*_test\.py'):
    if kinds.get(path) != 'py_test':
      missing.append(('py_test', path))
  assert not missing, f'BUILD lacks targets for {missing}'
  stale = [s for s in srcs if not os.path.exists(os.path.join(ROOT, s))]
  assert not stale, f'BUILD names files that do not exist: {stale}'
