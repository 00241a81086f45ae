"""Regenerates BUILD from the sources: python tools/gen_build.py (run from anywhere).

BUILD is Bazel's (4.2.3, native py_* rules, offline: WORKSPACE, .bazelrc and
README "Building with Bazel"). Its targets:

* a py_library for every module of tff_quant/, every helper module, package
  __init__ and conftest of tests/, and the __init__ of experiments/ and
  benchmarks/;
* a py_binary for every other module of experiments/ and benchmarks/;
* a py_test for every tests/**/*_test.py, whose main is
  tools/bazel/pytest_main.py (it runs pytest on the file named in `args`);
  those in CHECKOUT_TESTS are tagged "checkout" and not run by `bazel test`;
* a test_suite per folder of tests/ (`tests_mechanisms`, `tests_accounting`,
  ..., and `tests` for all);
* a filegroup of the source files of each package that a module reads at run
  time (READS_AT_RUN_TIME).

A target's deps are the first-party targets its file imports (libraries, and
the py_binary of a binary module a test imports), read with
`ast` (every `import tff_quant...` / `from tff_quant... import ...` / `from
tests...` / `from experiments...`, at any depth, including imports inside
functions and, in a test, in the code it runs in a child process). Third-party packages are not targets: the toolchain's interpreter
is the repository's .venv (tools/bazel/python_venv.bzl), whose site-packages
has them all. A binary or test (what Bazel runs) also depends on what Python
and pytest run before its own imports: the __init__ of every package its
modules sit in (importing a.b.c runs a/__init__.py and a/b/__init__.py), and,
for a test, the conftest.py of its folder and the folders above.

What a file needs at run time but does not import goes in `data`: for a test,
pytest.ini, the non-Python files of its folder (tests/accounting/data/...),
the binaries it runs by module name ('experiments.fl_emnist' in the source,
or f'experiments.{binary}' and 'fl_emnist': it starts `python -m
experiments.fl_emnist`), the scripts of experiments/ it
names ('run_fl_comparison.sh'), and the tools/ scripts it loads
through the `repo_tool` fixture; for a module in READS_AT_RUN_TIME, the files
of the packages it reads. tests/build_test.py checks that BUILD is what this
writes.
"""

import ast
import functools
import os
from typing import List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Top-level folders of first-party Python (a dotted import of one is ours).
PACKAGES = ('tff_quant', 'tests', 'experiments', 'benchmarks')
BINARY_FOLDERS = ('experiments', 'benchmarks')
LAUNCHER = '//tools/bazel:pytest_main.py'

#: Modules that read project files at run time, which their imports do not
#: show: {module: folders whose .py files are its data}. They are data (files,
#: not targets), so no dependency cycle goes through them.
READS_AT_RUN_TIME = {
    # Digests the behaviour of every module of these packages
    # (provenance.PACKAGES; tests/build_test.py checks they agree).
    'tff_quant/accounting/provenance.py': (
        'tff_quant/accounting', 'tff_quant/mechanisms', 'tff_quant/common'),
    # `registry()` imports every module of its package (pkgutil).
    'tff_quant/mechanisms/registry.py': ('tff_quant/mechanisms',),
}


#: Tests of the checkout as a whole, not of modules: {test: what it reads}.
#: Their py_tests carry the tag "checkout", which .bazelrc's
#: --test_tag_filters=-checkout leaves out of `bazel test` (they are built, and
#: run by `make test`): in Bazel's runfiles tree that whole is not there.
CHECKOUT_TESTS = {
    'tests/build_test.py': 'BUILD against every module of the checkout',
    'tests/colab_test.py': 'the notebooks of colab/ and the install recipe',
    'tests/docs_test.py': 'README.md, docs/ and the files they link',
    'tests/install_test.py': 'setup.py: builds and installs a wheel of the checkout',
}


def target(path: str) -> str:
  return path[:-3].replace('/', '_')


def module_file(module: str) -> Optional[str]:
  """The file of a dotted module name under ROOT, or None."""
  base = module.replace('.', '/')
  for candidate in (base + '.py', base + '/__init__.py'):
    if os.path.exists(os.path.join(ROOT, candidate)):
      return candidate
  return None


def _tree(path: str, source: Optional[str] = None) -> ast.AST:
  """The syntax tree of `path` (of `source` as that file, when given)."""
  if source is None:
    with open(os.path.join(ROOT, path)) as f:
      source = f.read()
  return ast.parse(source, path)


def _child_programs(tree: ast.AST) -> List[ast.AST]:
  """The string constants of a test that are Python programs with imports
  (the code a test runs in a child process: `python -c CODE`)."""
  out = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        'import' in node.value):
      try:
        out.append(ast.parse(node.value))
      except SyntaxError:
        pass
  return out


def imported_files(path: str, source: Optional[str] = None) -> List[str]:
  """Project files `path` imports (a `from pkg import name` names a submodule
  file when there is one, else the package's __init__); for a test, also
  those the programs it runs in a child process import. A file on disk is
  read and parsed once per process (`_imported_files_on_disk`)."""
  if source is None:
    return list(_imported_files_on_disk(path))
  return _imported_files(path, source)


@functools.lru_cache(maxsize=None)
def _imported_files_on_disk(path: str) -> Tuple[str, ...]:
  return tuple(_imported_files(path, None))


def _imported_files(path: str, source: Optional[str]) -> List[str]:
  found = set()
  tree = _tree(path, source)
  trees = [tree] + (_child_programs(tree) if is_test(path) else [])
  for node in (n for t in trees for n in ast.walk(t)):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split('.')[0] in PACKAGES:
          found.add(module_file(alias.name))
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      if node.module.split('.')[0] not in PACKAGES:
        continue
      for alias in node.names:
        found.add(module_file(f'{node.module}.{alias.name}') or
                  module_file(node.module))
  return sorted(f for f in found if f and f != path)


def is_binary(path: str) -> bool:
  return (path.split('/')[0] in BINARY_FOLDERS and path.count('/') == 1 and
          not path.endswith('__init__.py'))


def is_test(path: str) -> bool:
  return path.startswith('tests/') and path.endswith('_test.py')


def package_inits(path: str) -> List[str]:
  """The __init__.py of every package `path` sits in, outermost first."""
  parts = path.split('/')[:-1]
  inits = ['/'.join(parts[:i] + ['__init__.py']) for i in range(1, len(parts) + 1)]
  return [f for f in inits if f != path and os.path.exists(os.path.join(ROOT, f))]


def conftests(path: str) -> List[str]:
  """The conftest.py of the folder of `path` and of each folder above it."""
  parts = path.split('/')[:-1]
  found = ['/'.join(parts[:i] + ['conftest.py']) for i in range(1, len(parts) + 1)]
  return [f for f in found if os.path.exists(os.path.join(ROOT, f))]


def read_at_run_time(path: str) -> List[str]:
  """The .py files that `path` reads at run time (READS_AT_RUN_TIME)."""
  out = []
  for folder in READS_AT_RUN_TIME.get(path, ()):
    out += python_files(folder)
  return out


def run_time_closure(path: str, source: Optional[str] = None) -> Set[str]:
  """Every project file Python loads when running `path` (a binary or a
  test, with its conftests): their imports, the imports of those, the package
  inits on the way, and what the modules read at run time."""
  seen = {path}
  todo = (imported_files(path, source) + package_inits(path) +
          (conftests(path) if is_test(path) else []))
  while todo:
    f = todo.pop()
    if f in seen:
      continue
    seen.add(f)
    todo += imported_files(f) + package_inits(f) + read_at_run_time(f)
  return seen


def target_of(path: str) -> str:
  """The label of the target of a first-party file (a binary's is its name)."""
  return ':' + (os.path.basename(path)[:-3] if is_binary(path) else target(path))


def import_deps(path: str, source: Optional[str] = None) -> List[str]:
  """The targets of the first-party files `path` imports (a test that imports
  a binary's module depends on the py_binary, which Bazel allows)."""
  return sorted(target_of(f) for f in imported_files(path, source))


def deps_of(path: str, source: Optional[str] = None) -> List[str]:
  """A target's deps: its imports; for what Bazel runs (binaries and tests),
  also the package inits of everything it loads and its conftests."""
  deps = set(import_deps(path, source))
  if is_binary(path) or is_test(path):
    roots = [path] + (conftests(path) if is_test(path) else [])
    loaded = run_time_closure(path, source)
    deps |= {target_of(f) for f in loaded if f.endswith('/__init__.py')}
    deps |= {target_of(f) for f in roots[1:]}
  deps.discard(target_of(path))
  return sorted(deps)


def _strings(path: str, source: Optional[str] = None) -> Set[str]:
  return {node.value for node in ast.walk(_tree(path, source))
          if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def binaries_run(path: str, source: Optional[str] = None) -> List[str]:
  """Binary targets `path` runs by module name (`python -m experiments.X`):
  every string constant that is exactly a binary's dotted module name, and,
  where the file formats names as f'experiments.{binary}', every constant
  that is a binary's name in that folder."""
  tree = _tree(path, source)
  strings = _strings(path, source)
  formatted = {node.values[0].value for node in ast.walk(tree)
               if isinstance(node, ast.JoinedStr) and node.values and
               isinstance(node.values[0], ast.Constant)}
  found = set()
  for folder in BINARY_FOLDERS:
    for f in python_files(folder):
      if is_binary(f) and (f[:-3].replace('/', '.') in strings or (
          folder + '.' in formatted and os.path.basename(f)[:-3] in strings)):
        found.add(target_of(f))
  return sorted(found)


def scripts_named(path: str, source: Optional[str] = None) -> List[str]:
  """Non-Python files of experiments/ and benchmarks/ (shell scripts) that
  `path` names by file name or repository path (a test that runs one)."""
  strings = _strings(path, source)
  return sorted(f for folder in BINARY_FOLDERS for f in folder_files(folder)
                if f.count('/') == 1 and (f in strings or os.path.basename(f) in strings))


def tools_loaded(path: str, source: Optional[str] = None) -> List[str]:
  """tools/ scripts `path` loads with the `repo_tool` fixture (conftest)."""
  found = set()
  for node in ast.walk(_tree(path, source)):
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and
        node.func.id == 'repo_tool' and node.args and
        isinstance(node.args[0], ast.Constant)):
      found.add(f'tools/{node.args[0].value}.py')
  return sorted(f for f in found if os.path.exists(os.path.join(ROOT, f)))


def folder_files(folder: str) -> List[str]:
  """The non-Python files under `folder` (a test's data: fixtures it reads)."""
  out = []
  for root, dirs, files in os.walk(os.path.join(ROOT, folder)):
    dirs[:] = sorted(d for d in dirs if d != '__pycache__')
    out += [os.path.relpath(os.path.join(root, f), ROOT) for f in files
            if not f.endswith(('.py', '.pyc'))]
  return sorted(out)


def filegroup_name(folder: str) -> str:
  return folder.replace('/', '_') + '_py_files'


def data_of(path: str, source: Optional[str] = None) -> List[str]:
  """What `path` needs at run time but does not import (module docstring)."""
  data = [':' + filegroup_name(f) for f in READS_AT_RUN_TIME.get(path, ())]
  if is_test(path):
    data += (['pytest.ini'] + folder_files(os.path.dirname(path)) +
             binaries_run(path, source) + scripts_named(path, source) +
             tools_loaded(path, source))
  return data


def python_files(folder: str) -> List[str]:
  out = []
  for root, dirs, files in os.walk(os.path.join(ROOT, folder)):
    dirs[:] = sorted(d for d in dirs if d != '__pycache__')
    out += [os.path.relpath(os.path.join(root, f), ROOT)
            for f in sorted(files) if f.endswith('.py')]
  return out


def _list(values) -> str:
  return '[' + ', '.join(f'"{v}"' for v in values) + ']'


def block(kind: str, name: str, path: str) -> List[str]:
  lines = [f'{kind}(', f'    name = "{name}",']
  if kind == 'py_test':
    lines += [f'    srcs = {_list([path, LAUNCHER])},', f'    main = "{LAUNCHER}",',
              f'    args = ["{path}"],']
    if path in CHECKOUT_TESTS:
      lines.append('    tags = ["checkout"],')
  else:
    lines.append(f'    srcs = ["{path}"],')
    if kind == 'py_binary':
      lines.append(f'    main = "{path}",')
  data = data_of(path)
  if data:
    lines.append(f'    data = {_list(data)},')
  lines += [f'    deps = {_list(deps_of(path))},', ')', '']
  return lines


def test_suites(tests: List[str]) -> List[str]:
  """`tests` (every py_test) and one suite per folder of tests/, holding the
  tests under it: `bazel test //:tests_mechanisms //:tests_accounting`."""
  folders = sorted({'/'.join(os.path.dirname(t).split('/')[:i])
                    for t in tests
                    for i in range(1, os.path.dirname(t).count('/') + 2)})
  lines = []
  for folder in folders:
    members = [':' + target(t) for t in tests if t.startswith(folder + '/')]
    lines += ['test_suite(', f'    name = "{folder.replace("/", "_")}",',
              f'    tests = {_list(members)},', ')', '']
  return lines


def build_text() -> str:
  lines = ['# Bazel targets mirroring the modules, written by python tools/gen_build.py',
           '# (tests/build_test.py checks it is up to date). Native py_* rules of',
           '# Bazel 4.2.3, offline; third-party imports come from the .venv toolchain',
           '# (WORKSPACE). README "Building with Bazel" says how to run it.',
           '', 'package(default_visibility = ["//visibility:public"])', '']
  for folder in sorted({f for folders in READS_AT_RUN_TIME.values() for f in folders}):
    lines += ['filegroup(', f'    name = "{filegroup_name(folder)}",',
              f'    srcs = {_list(python_files(folder))},', ')', '']
  tests = []
  for package in PACKAGES:
    for path in python_files(package):
      if is_test(path):
        tests.append(path)
        lines += block('py_test', target(path), path)
      elif is_binary(path):
        lines += block('py_binary', os.path.basename(path)[:-3], path)
      else:
        lines += block('py_library', target(path), path)
  return '\n'.join(lines + test_suites(tests))


if __name__ == '__main__':
  with open(os.path.join(ROOT, 'BUILD'), 'w') as f:
    f.write(build_text())
  print('BUILD written')
