"""BUILD: what tools/gen_build.py writes; every module, experiment and test has a
target, with deps = its imports (plus, for what Bazel runs, the package inits
and conftests Python and pytest load first)."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_files(folder, pattern):
  out = []
  for root, _, files in os.walk(os.path.join(ROOT, folder)):
    out += [os.path.relpath(os.path.join(root, f), ROOT) for f in files
            if re.fullmatch(pattern, f)]
  return sorted(out)


def read_build():
  with open(os.path.join(ROOT, 'BUILD')) as f:
    return f.read()


def targets(build):
  """{src: (kind, {attribute: [values]})} of every py_* rule of BUILD."""
  out = {}
  for kind, body in re.findall(r'^(py_\w+)\(\n(.*?)\n\)', build, re.M | re.S):
    attrs = {k: re.findall(r'"([^"]*)"', v)
             for k, v in re.findall(r'^    (\w+) = (.*),$', body, re.M)}
    out[attrs['srcs'][0]] = (kind, attrs)
  return out


def test_build_is_what_gen_build_writes(repo_tool):
  gen = repo_tool('gen_build')
  assert read_build() == gen.build_text(), (
      'BUILD is stale: run python tools/gen_build.py')


def test_every_file_has_a_target():
  build = read_build()
  kinds = {src: kind for src, (kind, _) in targets(build).items()}
  missing = []
  for package in ('tff_quant', 'tests', 'experiments', 'benchmarks'):
    for path in python_files(package, r'.*\.py'):
      if path.endswith('_test.py') and package == 'tests':
        want = 'py_test'
      elif package in ('experiments', 'benchmarks') and path.count('/') == 1 and (
          not path.endswith('__init__.py')):
        want = 'py_binary'
      else:
        want = 'py_library'
      if kinds.get(path) != want:
        missing.append((want, path))
  assert not missing, f'BUILD lacks targets for {missing}'
  srcs = set(re.findall(r'"((?:tff_quant|tests|experiments|benchmarks|tools)/[^"]+)"',
                        build))
  stale = [s for s in srcs if not os.path.exists(os.path.join(ROOT, s))]
  assert not stale, f'BUILD names files that do not exist: {stale}'


def test_every_target_depends_on_exactly_what_its_file_imports(repo_tool):
  """A library's deps are its imports; a binary's or test's are its imports
  and only package __init__s and conftests besides."""
  gen = repo_tool('gen_build')
  parsed = targets(read_build())
  assert parsed, 'no targets parsed from BUILD'
  wrong = {}
  for path, (kind, attrs) in parsed.items():
    listed, imported = set(attrs['deps']), set(gen.import_deps(path))
    extra = {d for d in listed - imported
             if not d.endswith(('___init__', '_conftest'))}
    if not imported <= listed or extra or (kind == 'py_library' and listed != imported):
      wrong[path] = (sorted(listed), sorted(imported))
  assert not wrong, f'BUILD deps differ from the imports (listed, imported): {wrong}'


def test_what_bazel_runs_has_its_package_inits_and_conftests():
  """Python runs tff_quant/__init__.py before tff_quant/x.py, and pytest runs
  tests/conftest.py before a test: a py_test or py_binary lists the inits of
  its own packages and its conftests (inits of what it imports come through
  those targets' own package chains, checked transitively by gen_build)."""
  parsed = targets(read_build())
  lacking = {}
  for path, (kind, attrs) in parsed.items():
    if kind == 'py_library':
      continue
    parts = path.split('/')[:-1]
    needed = {':' + '_'.join(parts[:i]) + '___init__' for i in range(1, len(parts) + 1)
              if os.path.exists(os.path.join(ROOT, *parts[:i], '__init__.py'))}
    if kind == 'py_test':
      needed.add(':tests_conftest')
      assert attrs['main'] == ['//tools/bazel:pytest_main.py'] and (
          attrs['args'] == [path]), path
      assert 'pytest.ini' in attrs['data'], path
    if not needed <= set(attrs['deps']):
      lacking[path] = sorted(needed - set(attrs['deps']))
  assert not lacking, f'targets lacking package inits or conftests: {lacking}'


def test_only_tests_that_read_the_whole_checkout_are_left_to_make_test(repo_tool):
  """.bazelrc leaves the tests tagged "checkout" out of `bazel test`; they are
  the ones gen_build names, and each exists."""
  gen = repo_tool('gen_build')
  tagged = sorted(path for path, (_, attrs) in targets(read_build()).items()
                  if attrs.get('tags') == ['checkout'])
  assert tagged == sorted(gen.CHECKOUT_TESTS)
  with open(os.path.join(ROOT, '.bazelrc')) as f:
    assert 'test --test_tag_filters=-checkout' in f.read().splitlines()


def test_imports_are_read_with_ast_not_line_patterns(repo_tool):
  gen = repo_tool('gen_build')
  # A parenthesised multi-line import and one inside a function both count;
  # the line after an import is not swallowed. (The probe is never written to
  # the checkout, where a test running beside this one would see it.)
  rel = 'tests/_build_probe_test.py'
  source = ('from tff_quant import (\n    accounting,\n    data)\n'
            'from tff_quant.program import cli\n\n\n'
            'def f():\n  from tff_quant.mechanisms import rqm\n  return rqm\n')
  assert gen.import_deps(rel, source) == sorted([
      ':tff_quant_accounting___init__', ':tff_quant_data___init__',
      ':tff_quant_program_cli', ':tff_quant_mechanisms_rqm'])
  # The code a test runs with `python -c` counts too.
  child = 'CODE = """\nfrom tff_quant.accounting import blankets\n"""\n'
  assert gen.import_deps(rel, child) == [':tff_quant_accounting_blankets']
  assert {':tests___init__', ':tests_conftest', ':tff_quant___init__',
          ':tff_quant_program___init__', ':tff_quant_mechanisms___init__'} <= set(
              gen.deps_of(rel, source))


def test_data_holds_the_binaries_tools_and_files_a_test_uses(repo_tool):
  """What a test runs or reads but does not import is in its data: the
  binaries it starts by module name, the scripts of experiments/ it names,
  the tools/ scripts it loads, the files beside it, pytest.ini."""
  gen = repo_tool('gen_build')
  source = ('import subprocess, sys\n\n\n'
            'def test_x(repo_tool):\n'
            '  repo_tool("gen_build")\n'
            '  subprocess.run([sys.executable, "-m", "experiments.fl_emnist"])\n'
            '  subprocess.run(["bash", "run_fl_comparison.sh"])\n')
  data = gen.data_of('tests/accounting/_build_probe_test.py', source)
  assert data[0] == 'pytest.ini'
  formatted = ('import subprocess, sys\nfor b in ("bq_sgd", "fl_table"):\n'
               '  subprocess.run([sys.executable, "-m", f"experiments.{b}"])\n')
  assert gen.binaries_run('tests/program/_build_probe_test.py', formatted) == [
      ':bq_sgd', ':fl_table']
  assert {':fl_emnist', 'tools/gen_build.py', 'experiments/run_fl_comparison.sh',
          'tests/accounting/data/shift_program_qmgeo_8bits.npz'} <= set(data)


def test_the_provenance_digest_reads_what_its_data_holds(repo_tool):
  """provenance digests the sources of its PACKAGES at run time: under Bazel
  those files must be in its runfiles, or the digest differs from the
  checkout's (gen_build.READS_AT_RUN_TIME gives them as data)."""
  gen = repo_tool('gen_build')
  with open(os.path.join(ROOT, 'tff_quant/accounting/provenance.py')) as f:
    tree = ast.parse(f.read())
  packages = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and
                  [t.id for t in node.targets if isinstance(t, ast.Name)] == ['PACKAGES'])
  assert gen.READS_AT_RUN_TIME['tff_quant/accounting/provenance.py'] == tuple(
      'tff_quant/' + p for p in packages)


def test_the_launcher_runs_pytest_on_the_file_and_writes_bazels_xml():
  path = os.path.join(ROOT, 'tools', 'bazel', 'pytest_main.py')
  namespace = {}
  with open(path) as f:
    exec(compile(f.read(), path, 'exec'), namespace)  # pylint: disable=exec-used
  args = namespace['pytest_args'](['tests/x_test.py'], {'XML_OUTPUT_FILE': '/o/t.xml'})
  assert args[-1] == 'tests/x_test.py' and '--junitxml=/o/t.xml' in args
  assert namespace['pytest_args'](['a_test.py'], {})[-1] == 'a_test.py'
  editable = type('_EditableFinder', (), {'__module__': '__editable___tff_quant_0_1_0_finder'})
  assert namespace['without_editable_finders']([editable, os]) == [os]
  env = namespace['sandbox_environ']({'TEST_TMPDIR': '/t'})
  assert env['MPLCONFIGDIR'] == '/t/matplotlib'
  assert namespace['sandbox_environ']({}) == {}


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
