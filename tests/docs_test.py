"""README.md and docs/: links resolve, Python runs as written, generated
tables are current, and the public API a reader meets is documented."""

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, 'README.md')
DOCS = os.path.join(ROOT, 'docs')
PAGES = [README] + sorted(
    os.path.join(DOCS, f) for f in os.listdir(DOCS) if f.endswith('.md'))
#: A ```python block preceded by this comment is not run; the comment must
#: say why (e.g. "<!-- not run: needs a second machine -->").
SKIP = re.compile(r'<!--\s*not run:\s*(.*?)\s*-->')
#: Slow blocks get this long (the README's pipeline takes ~30 s on 2 cores).
BLOCK_TIMEOUT_S = 300


def _read(path):
  with open(path, encoding='utf-8') as f:
    return f.read()


def _rel(path):
  return os.path.relpath(path, ROOT)


def _without_code(text):
  """The Markdown outside fenced code blocks and inline code spans."""
  text = re.sub(r'```.*?```', '', text, flags=re.S)
  return re.sub(r'`[^`\n]*`', '', text)


def _links(text):
  """Targets of [text](target) links outside code."""
  return re.findall(r'\[[^\]]*\]\(([^)\s]+)\)', _without_code(text))


def _slug(heading):
  """GitHub's anchor for a heading: lower case, punctuation dropped, spaces
  to hyphens."""
  heading = re.sub(r'[`*]', '', heading.strip().lower())
  heading = re.sub(r'[^\w\- ]', '', heading)
  return heading.replace(' ', '-')


def _anchors(path):
  text = re.sub(r'```.*?```', '', _read(path), flags=re.S)
  return {_slug(h) for h in re.findall(r'^#+\s+(.*)$', text, flags=re.M)}


def _python_blocks(text):
  """[(line number, reason to skip or None, source)] of ```python blocks."""
  blocks = []
  for m in re.finditer(r'^```python\n(.*?)^```', text, flags=re.S | re.M):
    line = text.count('\n', 0, m.start()) + 1
    before = text[:m.start()].rstrip().splitlines()
    skip = SKIP.fullmatch(before[-1].strip()) if before else None
    blocks.append((line, skip.group(1) if skip else None, m.group(1)))
  return blocks


def test_the_docs_pages_exist():
  names = {os.path.basename(p) for p in PAGES[1:]}
  assert {'mechanisms.md', 'privacy.md', 'utility.md', 'frontier.md',
          'fl_table.md', 'experiments.md', 'performance.md',
          'scaling.md'} <= names


@pytest.mark.parametrize('page', PAGES, ids=_rel)
def test_every_relative_link_resolves(page):
  broken = []
  for target in _links(_read(page)):
    if re.match(r'[a-z]+:', target):   # http:, https:, mailto:
      continue
    path, _, anchor = target.partition('#')
    full = (os.path.normpath(os.path.join(os.path.dirname(page), path))
            if path else page)
    if not os.path.exists(full):
      broken.append(f'{target} (no file {_rel(full)})')
    elif anchor and full.endswith('.md') and anchor not in _anchors(full):
      broken.append(f'{target} (no heading #{anchor} in {_rel(full)})')
  assert not broken, f'{_rel(page)}: broken links {broken}'


def test_the_readme_is_short_and_in_the_present():
  text = _read(README)
  assert len(text.splitlines()) <= 300
  head = '\n'.join(text.splitlines()[:60])
  assert 'make demo' in head and 'make test' in head
  for page in PAGES:
    found = re.findall(r'\bsessions? \d+', _read(page), flags=re.I)
    assert not found, f'{_rel(page)} dates itself by session: {found}'


@pytest.mark.parametrize('page', PAGES, ids=_rel)
def test_python_blocks_run_as_written(page, tmp_path):
  blocks = _python_blocks(_read(page))
  if page == README:
    assert blocks, 'the README has a pipeline example'
  for line, skip, source in blocks:
    if skip is not None:
      assert skip, f'{_rel(page)}:{line}: a skipped block must say why'
      continue
    script = tmp_path / f'block_{line}.py'
    script.write_text(source)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    run = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env,
                         capture_output=True, text=True,
                         timeout=BLOCK_TIMEOUT_S)
    assert run.returncode == 0, (
        f'{_rel(page)}:{line} failed:\n{run.stdout[-3000:]}\n'
        f'{run.stderr[-5000:]}')
    if page == README and 'training_guarantee' in source:
      assert re.search(r'ε ∈ \[[0-9.e+-]+, [0-9.e+-]+\]', run.stdout), run.stdout


def test_which_mechanism_table_is_what_the_tool_writes(repo_tool):
  tool = repo_tool('readme_tables')
  block = tool.current_block(_read(README))
  if os.path.exists(tool.TABLE):
    assert block == tool.which_mechanism(), (
        'README.md\'s "Which mechanism should I use?" block differs from '
        f'{_rel(tool.TABLE)}: run python tools/readme_tables.py')
  else:
    assert block == tool.ABSENT


def test_the_tool_copies_the_section_and_says_when_it_is_absent(tmp_path, repo_tool):
  tool = repo_tool('readme_tables')
  table = tmp_path / 'table.md'
  table.write_text('# T\n\n| a |\n\n## Which mechanism should I use?\n\n'
                   '| ε | best |\n|---|---|\n| 3 | pbm |\n\n## Later\n\nx\n')
  assert tool.which_mechanism(str(table)) == '| ε | best |\n|---|---|\n| 3 | pbm |'
  assert tool.which_mechanism(str(tmp_path / 'missing.md')) == tool.ABSENT
  readme = f'a\n{tool.BEGIN}\nold\n{tool.END}\nb\n'
  assert tool.with_block(readme, 'new') == f'a\n{tool.BEGIN}\nnew\n{tool.END}\nb\n'
  with pytest.raises(ValueError, match='once each'):
    tool.current_block('no markers')
  table.write_text('# T\n')
  with pytest.raises(ValueError, match='has no line'):
    tool.which_mechanism(str(table))


def test_the_tools_block_links_files_beside_the_table_from_the_root(
    tmp_path, repo_tool):
  """A plot linked beside the table is linked from README.md's folder (the
  root); links with a folder or a scheme stay as they are."""
  tool = repo_tool('readme_tables')
  table = tmp_path / 'table.md'
  table.write_text('## Which mechanism should I use?\n\n| a |\n\n'
                   '![d](differences.png) [t](docs/x.md) [w](https://e.org)\n')
  folder = os.path.relpath(str(tmp_path), tool.ROOT).replace(os.sep, '/')
  assert tool.which_mechanism(str(table)).splitlines()[-1] == (
      f'![d]({folder}/differences.png) [t](docs/x.md) [w](https://e.org)')


PUBLIC = ('tff_quant.aggregators', 'tff_quant.accounting', 'tff_quant.mechanisms')


def _documented_in_mro(cls, name):
  for klass in cls.__mro__:
    if name in klass.__dict__:
      value = klass.__dict__[name]
      fn = value.fget if isinstance(value, property) else getattr(
          value, '__func__', value)
      if getattr(fn, '__doc__', None):
        return True
  return False


def test_every_export_of_the_public_packages_is_documented():
  missing = []
  for package in PUBLIC:
    module = importlib.import_module(package)
    if not module.__doc__:
      missing.append(package)
    names = getattr(module, '__all__', None) or [
        n for n in vars(module) if not n.startswith('_')]
    for name in names:
      obj = getattr(module, name)
      own = (obj.__dict__.get('__doc__') if inspect.isclass(obj)
             else obj.__doc__)
      if not own:
        missing.append(f'{package}.{name}')
      if inspect.isclass(obj):
        for attr, value in vars(obj).items():
          if attr.startswith('_'):
            continue
          if (isinstance(value, (property, classmethod, staticmethod)) or
              inspect.isfunction(value)) and not _documented_in_mro(obj, attr):
            missing.append(f'{package}.{name}.{attr}')
  assert not missing, f'undocumented public names: {missing}'


# Modules the README's code and prose name with a dotted prefix.
_PREFIXES = {'aggregators': 'tff_quant.aggregators',
             'accounting': 'tff_quant.accounting',
             'mechanisms': 'tff_quant.mechanisms', 'data': 'tff_quant.data',
             'models': 'tff_quant.models', 'runtime': 'tff_quant.program.runtime',
             'training': 'tff_quant.training'}


def _is_submodule(package, name):
  try:
    return importlib.util.find_spec(f'{package}.{name}') is not None
  except ModuleNotFoundError:   # `package` is a module, not a package
    return False


def test_every_name_the_readme_uses_is_one_attribute_away():
  text = _read(README)
  missing = set()
  for prefix, name in re.findall(
      r'(?<![\w./])(' + '|'.join(_PREFIXES) + r')\.([A-Za-z_]\w*)', text):
    module = importlib.import_module(_PREFIXES[prefix])
    if not hasattr(module, name) and not _is_submodule(_PREFIXES[prefix], name):
      missing.add(f'{prefix}.{name}')
  assert not missing, f'README names that do not exist: {sorted(missing)}'
