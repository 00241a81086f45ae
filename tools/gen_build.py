"""Regenerates BUILD from the sources: python tools/gen_build.py (run from anywhere).

Each target's deps are the project libraries its file imports, read with `ast`
(every `import tff_quant...` / `from tff_quant... import ...` / `from tests...`,
at any depth, including imports inside functions). Experiment binaries that
tests import are not deps (a py_test cannot depend on a py_binary).
tests/build_test.py checks BUILD against the same reading.
"""

import ast
import os
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ('tff_quant', 'tests')


def target(path: str) -> str:
  return path[:-3].replace('/', '_')


def module_file(module: str) -> Optional[str]:
  """The file of a dotted module name under ROOT, or None."""
  base = module.replace('.', '/')
  for candidate in (base + '.py', base + '/__init__.py'):
    if os.path.exists(os.path.join(ROOT, candidate)):
      return candidate
  return None


def imported_files(path: str) -> List[str]:
  """Project files `path` imports (a `from pkg import name` names a submodule
  file when there is one, else the package's __init__)."""
  with open(os.path.join(ROOT, path)) as f:
    tree = ast.parse(f.read(), path)
  found = set()
  for node in ast.walk(tree):
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


def has_library_target(path: str) -> bool:
  """tff_quant modules and the tests' helper modules are py_library targets."""
  if path.startswith('tff_quant/'):
    return True
  return path.startswith('tests/') and not path.endswith(
      ('_test.py', '__init__.py', 'conftest.py'))


def deps_of(path: str) -> List[str]:
  return [':' + target(f) for f in imported_files(path) if has_library_target(f)]


def python_files(folder: str, binaries: bool = False) -> List[str]:
  out = []
  for root, _, files in sorted(os.walk(os.path.join(ROOT, folder))):
    for f in sorted(files):
      if not f.endswith('.py') or (binaries and f == '__init__.py'):
        continue
      out.append(os.path.relpath(os.path.join(root, f), ROOT))
  return out


def block(kind: str, name: str, path: str, deps, extra=()) -> List[str]:
  lines = [f'{kind}(', f'    name = "{name}",',
           f'    srcs = ["{path}"' + ''.join(f', "{e}"' for e in extra) + '],']
  if kind != 'py_library':
    lines.append(f'    main = "{path}",')
  lines += ['    deps = [' + ', '.join(f'"{d}"' for d in deps) + '],', ')', '']
  return lines


def build_text() -> str:
  lines = ['# Bazel targets mirroring the modules (tests/build_test.py keeps this in sync;',
           '# regenerate with python tools/gen_build.py).',
           'load("@rules_python//python:defs.bzl", "py_binary", "py_library", "py_test")',
           '', 'package(default_visibility = ["//visibility:public"])', '']
  for path in python_files('tff_quant'):
    lines += block('py_library', target(path), path, deps_of(path))
  for folder in ('experiments', 'benchmarks'):
    for path in python_files(folder, binaries=True):
      lines += block('py_binary', os.path.basename(path)[:-3], path, deps_of(path))
  for path in python_files('tests'):
    if path.endswith('_test.py'):
      lines += block('py_test', target(path), path, deps_of(path),
                     ('tests/conftest.py',))
    elif has_library_target(path):
      lines += block('py_library', target(path), path, deps_of(path))
  return '\n'.join(lines)


if __name__ == '__main__':
  with open(os.path.join(ROOT, 'BUILD'), 'w') as f:
    f.write(build_text())
  print('BUILD written')
