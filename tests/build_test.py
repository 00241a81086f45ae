"""BUILD: every module, experiment and test has a target, with deps = its imports."""

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


def test_every_target_depends_on_exactly_what_its_file_imports(repo_tool):
  gen = repo_tool('gen_build')
  with open(os.path.join(ROOT, 'BUILD')) as f:
    build = f.read()
  targets = re.findall(r'srcs = \["([^"]+)"[^\]]*\],\n(?:    main = "[^"]+",\n)?'
                       r'    deps = \[([^\]]*)\]', build)
  assert targets, 'no targets parsed from BUILD'
  wrong = {}
  for path, deps in targets:
    listed = sorted(re.findall(r'"([^"]+)"', deps))
    if listed != gen.deps_of(path):
      wrong[path] = (listed, gen.deps_of(path))
  assert not wrong, f'BUILD deps differ from the imports (listed, imported): {wrong}'


def test_imports_are_read_with_ast_not_line_patterns(tmp_path, repo_tool):
  gen = repo_tool('gen_build')
  # A parenthesised multi-line import and one inside a function both count;
  # the line after an import is not swallowed.
  rel = 'tests/_build_probe_test.py'
  path = os.path.join(ROOT, rel)
  with open(path, 'w') as f:
    f.write('from tff_quant import (\n    accounting,\n    data)\n'
            'from tff_quant.program import cli\n\n\n'
            'def f():\n  from tff_quant.mechanisms import rqm\n  return rqm\n')
  try:
    assert gen.deps_of(rel) == sorted([
        ':tff_quant_accounting___init__', ':tff_quant_data___init__',
        ':tff_quant_program_cli', ':tff_quant_mechanisms_rqm'])
  finally:
    os.remove(path)


def test_no_import_cycle_between_packages(repo_tool):
  """The packages of tff_quant import each other one way only (the layers:
  common < mechanisms < accounting < aggregators < program < training), at
  any depth, function-level imports included."""
  gen = repo_tool('gen_build')
  edges = {}
  for path in python_files('tff_quant', r'.*\.py'):
    parts = path.split('/')
    if len(parts) < 3:
      continue
    for dep in gen.imported_files(path):
      dep_parts = dep.split('/')
      if dep_parts[0] == 'tff_quant' and len(dep_parts) > 2 and (
          dep_parts[1] != parts[1]):
        edges.setdefault(parts[1], set()).add(dep_parts[1])
  reach = {a: set(b) for a, b in edges.items()}
  for _ in edges:   # transitive closure (a handful of packages)
    for a in reach:
      reach[a] |= set().union(*(reach.get(b, set()) for b in reach[a]))
  cycles = sorted(a for a in reach if a in reach[a])
  assert not cycles, f'packages on an import cycle: {cycles} ({edges})'
