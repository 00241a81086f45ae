"""Tests for accounting/provenance.py: the digest follows the source it
covers and nothing else."""

import os

import pytest

from tff_quant.accounting import provenance


def _tree(root, text='x = 1\n'):
  for package in provenance.PACKAGES:
    os.makedirs(os.path.join(root, package, 'sub'), exist_ok=True)
    with open(os.path.join(root, package, 'sub', 'a.py'), 'w') as f:
      f.write(text)


def test_digest_follows_the_source_and_ignores_caches_and_other_files(tmp_path):
  root = str(tmp_path)
  _tree(root)
  first = provenance.source_digest(root)
  assert len(first) == 16 and first == provenance.source_digest(root)
  cache = os.path.join(root, 'accounting', '__pycache__')
  os.makedirs(cache)
  with open(os.path.join(cache, 'a.py'), 'w') as f:
    f.write('y = 2\n')
  with open(os.path.join(root, 'accounting', 'notes.txt'), 'w') as f:
    f.write('not code')
  assert provenance.source_digest(root) == first
  with open(os.path.join(root, 'mechanisms', 'sub', 'a.py'), 'a') as f:
    f.write('# one more line\n')
  assert provenance.source_digest(root) != first
  # A file moved keeps its bytes but not its path: another digest.
  _tree(root)
  os.rename(os.path.join(root, 'common', 'sub', 'a.py'),
            os.path.join(root, 'common', 'sub', 'b.py'))
  assert provenance.source_digest(root) != first


def test_a_missing_package_is_named(tmp_path):
  with pytest.raises(ValueError, match="packages: 'accounting'"):
    provenance.source_digest(str(tmp_path))


def test_the_imported_digest_is_the_code_on_disk():
  assert provenance.SOURCE_DIGEST == provenance.on_disk()
  assert os.path.isdir(os.path.join(provenance.ROOT, 'accounting'))
