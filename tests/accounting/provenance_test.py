"""Tests for accounting/provenance.py: the digest follows what the code it
covers does, and nothing else (not comments, docstrings or formatting)."""

import os
import shutil

import pytest

from tff_quant.accounting import provenance

_MODULE = '''"""A module's docstring."""

import math

# The scale of the law.
SCALE = 2.5


class Law:
  """A law."""

  def log_pmf(self, k):
    """Its log-pmf."""
    "A string on its own: compiles to nothing."
    return -abs(k) / SCALE - math.log(2 * SCALE)  # a comment
'''

# The same code: comments, docstrings, blank lines, quoting, line breaks and
# a number's spelling changed; nothing it does.
_SAME_BEHAVIOUR = """'''Another docstring, other words.'''
import math
SCALE = 2.50   # spelled otherwise


class Law:
  '''Another docstring.'''
  def log_pmf(self,
              k):
    return (-abs(k) / SCALE
            - math.log(2 * SCALE))
"""

_EDITS_THAT_CHANGE_BEHAVIOUR = {
    'a constant': _MODULE.replace('SCALE = 2.5', 'SCALE = 2.6'),
    'an operator': _MODULE.replace('2 * SCALE', '2 + SCALE'),
    'a name': _MODULE.replace('def log_pmf', 'def log_prob'),
    'a statement': _MODULE.replace('    return', '    k = k + 1\n    return'),
}


def _tree(root, text='x = 1\n'):
  for package in provenance.PACKAGES:
    os.makedirs(os.path.join(root, package, 'sub'), exist_ok=True)
    with open(os.path.join(root, package, 'sub', 'a.py'), 'w') as f:
      f.write(text)


def _write(root, rel, text):
  with open(os.path.join(root, rel), 'w') as f:
    f.write(text)


def test_comments_docstrings_and_formatting_keep_the_digest(tmp_path):
  root = str(tmp_path)
  _tree(root, _MODULE)
  first = provenance.source_digest(root)
  assert len(first) == 16 and first == provenance.source_digest(root)
  _write(root, 'mechanisms/sub/a.py', _SAME_BEHAVIOUR)
  assert provenance.source_digest(root) == first


@pytest.mark.parametrize('edit', sorted(_EDITS_THAT_CHANGE_BEHAVIOUR))
def test_an_edit_of_what_the_code_does_changes_the_digest(tmp_path, edit):
  root = str(tmp_path)
  _tree(root, _MODULE)
  first = provenance.source_digest(root)
  _write(root, 'accounting/sub/a.py', _EDITS_THAT_CHANGE_BEHAVIOUR[edit])
  assert provenance.source_digest(root) != first


def test_a_copy_of_the_real_accountant_with_a_comment_edited_or_a_constant_changed(
    tmp_path):
  """The packages the digest covers, copied: a comment and a docstring
  edited keep the copy's digest; one numeric constant changed gives another.
  (The copy's own digest is the reference, not on_disk(): other edits of the
  checkout while the test runs do not touch the copy.)"""
  root = str(tmp_path)
  for package in provenance.PACKAGES:
    shutil.copytree(os.path.join(provenance.ROOT, package),
                    os.path.join(root, package),
                    ignore=shutil.ignore_patterns('__pycache__'))
  first = provenance.source_digest(root)
  path = os.path.join(root, 'accounting', 'provenance.py')
  with open(path) as f:
    original = f.read()
  for text in ('# The packages whose code decides an ε',
               '"""Which accountant computed an ε', 'hexdigest()[:16]'):
    assert text in original, text
  _write(root, 'accounting/provenance.py', original.replace(
      '# The packages whose code decides an ε', '# Edited: what decides an ε',
  ).replace('"""Which accountant computed an ε', '"""Edited: which accountant'))
  assert provenance.source_digest(root) == first
  _write(root, 'accounting/provenance.py', original.replace(
      "hexdigest()[:16]", "hexdigest()[:15]"))
  assert provenance.source_digest(root) != first


def test_the_digest_ignores_caches_and_other_files_and_follows_paths(tmp_path):
  root = str(tmp_path)
  _tree(root)
  first = provenance.source_digest(root)
  cache = os.path.join(root, 'accounting', '__pycache__')
  os.makedirs(cache)
  _write(root, 'accounting/__pycache__/a.py', 'y = 2\n')
  _write(root, 'accounting/notes.txt', 'not code')
  assert provenance.source_digest(root) == first
  _write(root, 'mechanisms/sub/b.py', 'y = 2\n')   # a module added
  assert provenance.source_digest(root) != first
  # A file moved keeps its code but not its path: another digest.
  os.remove(os.path.join(root, 'mechanisms', 'sub', 'b.py'))
  assert provenance.source_digest(root) == first
  os.rename(os.path.join(root, 'common', 'sub', 'a.py'),
            os.path.join(root, 'common', 'sub', 'b.py'))
  assert provenance.source_digest(root) != first


def test_a_body_of_only_a_docstring_digests_as_pass():
  assert (provenance.behaviour('def f():\n  """Doc."""\n') ==
          provenance.behaviour('def f():\n  pass\n'))
  # An f-string is evaluated (it may call code): not a bare string.
  assert (provenance.behaviour('def f():\n  f"{g()}"\n') !=
          provenance.behaviour('def f():\n  pass\n'))


def test_a_missing_package_and_a_file_that_is_not_python_are_named(tmp_path):
  with pytest.raises(ValueError, match="packages: 'accounting'"):
    provenance.source_digest(str(tmp_path))
  _tree(str(tmp_path))
  _write(str(tmp_path), 'common/sub/a.py', 'def f(:\n')
  with pytest.raises(ValueError, match=r'common/sub/a\.py: not valid Python'):
    provenance.source_digest(str(tmp_path))


def test_the_imported_digest_is_the_code_on_disk():
  assert provenance.SOURCE_DIGEST == provenance.on_disk()
  assert os.path.isdir(os.path.join(provenance.ROOT, 'accounting'))
