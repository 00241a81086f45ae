"""Every Bazel py_test's main: runs pytest on the test file named in its args.

BUILD (written by tools/gen_build.py) gives each py_test this file as `main`
and the repository-relative path of its pytest file as `args`. Bazel runs it in
the test's runfiles tree, which has the repository's layout (tests/, tff_quant/,
pytest.ini), so pytest collects the file with the repository's pytest.ini and
tests/conftest.py, as `make test` does. The JUnit XML goes where Bazel asks
(XML_OUTPUT_FILE), so `bazel test` records each test case.

Every first-party module must come from the runfiles, so that a dependency
BUILD lacks fails under Bazel: the editable install of `make setup` (`pip
install -e .`) puts a finder on sys.meta_path that would load a direct
submodule of tff_quant missing from the runfiles from the checkout instead,
and it is taken off first.
"""

import os
import sys

import pytest


def pytest_args(argv, environ):
  """pytest's arguments for the test files `argv` under Bazel's `environ`."""
  args = ['-q', '-p', 'no:cacheprovider']
  if environ.get('XML_OUTPUT_FILE'):
    args.append('--junitxml=' + environ['XML_OUTPUT_FILE'])
  return args + list(argv)


def sandbox_environ(environ):
  """`environ` with what Bazel's sandbox needs: the home folder is read-only
  there, so matplotlib (imported by the binaries the tests run) gets its
  cache folder in the test's TEST_TMPDIR instead of ~/.config/matplotlib
  (else it warns on stderr, which tests read)."""
  out = dict(environ)
  if 'TEST_TMPDIR' in out:
    out.setdefault('MPLCONFIGDIR', os.path.join(out['TEST_TMPDIR'], 'matplotlib'))
  return out


def without_editable_finders(meta_path):
  """`meta_path` less the finders of editable installs (setuptools names
  their modules __editable___<project>_<version>_finder)."""
  return [f for f in meta_path
          if not getattr(f, '__module__', '').startswith('__editable__')]


if __name__ == '__main__':
  if len(sys.argv) < 2:
    sys.exit('usage: pytest_main.py TEST_FILE... (the args BUILD gives a py_test)')
  sys.meta_path[:] = without_editable_finders(sys.meta_path)
  os.environ.update(sandbox_environ(os.environ))
  sys.exit(pytest.main(pytest_args(sys.argv[1:], os.environ)))
