"""Which accountant computed an ε: a digest of the behaviour of its source.

A result (a calibration, a run's summary) that carries an ε also carries
`SOURCE_DIGEST`, so a later process can tell whether the ε it would compute
for the same mechanism comes from the same code. The FL table
(experiments/fl_table.py) uses it to recheck a stored calibration before it
trains with it: a calibration stored under other code is re-accounted, and
recalibrated where its ε has left the target.

The digest is of each module's syntax tree, not its bytes: comments, blank
lines, line breaks, quoting and the spelling of a number (`1e3`, `1000.0`) are
not in the tree, and docstrings and other bare string statements (which
compile to nothing) are dropped from it, so editing them keeps every stored
calibration current. Any change to what the code does (a constant, an
operator, a name, an import, a file added, moved or removed) gives another
digest. The tree is the one this Python's parser builds: the versions
setup.py allows (3.9-3.11) build the same nodes for syntax that 3.9 accepts,
and the code here uses no newer syntax.
"""

import ast
import hashlib
import os
from typing import List, Sequence

# The packages whose code decides an ε: the accountant itself, the
# mechanisms' laws it reads, and the shared law helpers.
PACKAGES = ('accounting', 'mechanisms', 'common')

# Fields of the tree that record how the source was written, not what it does:
# the 'u' prefix of a string constant, and type comments (never parsed here).
_FORMATTING_FIELDS = frozenset({'kind', 'type_comment'})


def _is_bare_string(statement: ast.stmt) -> bool:
  """Whether `statement` is a string on its own (a docstring, or a string
  used as a comment), which compiles to nothing."""
  return (isinstance(statement, ast.Expr) and
          isinstance(statement.value, ast.Constant) and
          isinstance(statement.value.value, str))


def _without_bare_strings(tree: ast.AST) -> ast.AST:
  """`tree` with every bare string statement removed, in place.

  A body left empty (a function whose only statement was its docstring) gets
  `pass`, so it digests as the function written with `pass` would.
  """
  for node in ast.walk(tree):
    for field in ('body', 'orelse', 'finalbody'):
      body = getattr(node, field, None)
      if not isinstance(body, list) or not body or not isinstance(
          body[0], ast.stmt):
        continue
      kept = [s for s in body if not _is_bare_string(s)]
      setattr(node, field, kept or [ast.Pass()])
  return tree


def _serialize(node, out: List[str]) -> None:
  """Appends to `out` a canonical serialization of a syntax (sub)tree: each
  node's type and its fields in the grammar's order, constants by type and
  repr. Positions (line, column) are attributes, not fields, so they are
  never read.

  Written out rather than `ast.dump` so that the digest does not follow
  `ast.dump`'s format, which changes between Python versions (3.13 leaves out
  empty fields).
  """
  if isinstance(node, ast.AST):
    out.append(type(node).__name__ + '(')
    for field in node._fields:  # pylint: disable=protected-access
      if field not in _FORMATTING_FIELDS:
        out.append(field + '=')
        _serialize(getattr(node, field, None), out)
    out.append(')')
  elif isinstance(node, list):
    out.append('[')
    for item in node:
      _serialize(item, out)
    out.append(']')
  else:   # a constant, an identifier or None
    out.append(f'{type(node).__name__}:{node!r},')


def behaviour(source, path: str = '<source>') -> str:
  """The canonical text of the syntax tree of a module's source, without its
  docstrings, comments and formatting (what `source_digest` hashes).

  Args:
    source: a module's Python source (str, or bytes as read from its file).
    path: the module's file, for the error message.

  Returns:
    The canonical serialization of the tree: the same for two sources that
    differ only in comments, docstrings, other bare string statements or
    formatting; different where they differ in anything the code does.

  Raises:
    ValueError: if `source` is not valid Python (naming `path`).
  """
  try:
    tree = ast.parse(source, filename=path)
  except SyntaxError as e:
    raise ValueError(f'{path}: not valid Python, so its behaviour cannot be '
                     f'digested ({e.msg}, line {e.lineno}).') from None
  out = []
  _serialize(_without_bare_strings(tree), out)
  return ''.join(out)


def _python_files(root: str, package: str) -> List[str]:
  top = os.path.join(root, package)
  if not os.path.isdir(top):
    raise ValueError(f'packages: {package!r} is not a folder under {root}.')
  files = []
  for folder, dirs, names in os.walk(top):
    dirs[:] = sorted(d for d in dirs if d != '__pycache__')
    files += [os.path.join(folder, n) for n in names if n.endswith('.py')]
  return sorted(files)


def source_digest(root: str, packages: Sequence[str] = PACKAGES) -> str:
  """A 16-hex-digit SHA-256 digest of the behaviour of every `.py` file under
  `packages`: of its path and its syntax tree without docstrings (`behaviour`),
  so comments, docstrings and formatting do not change it.

  Args:
    root: the folder holding the packages (tff_quant/).
    packages: sub-folders of `root` to digest.

  Returns:
    The digest of the files' relative paths and syntax trees, in sorted order.

  Raises:
    ValueError: if a package folder is missing under `root`, or a file is not
      valid Python (naming it).
  """
  h = hashlib.sha256()
  for package in packages:
    for path in _python_files(root, package):
      h.update(os.path.relpath(path, root).encode() + b'\0')
      with open(path, 'rb') as f:
        source = f.read()
      h.update(behaviour(source, path).encode() + b'\0')
  return h.hexdigest()[:16]


#: The tff_quant/ folder this accountant was imported from.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Taken when the accountant is imported, which is when its code is read: a
#: later edit of the files on disk changes neither the code this process runs
#: nor this value (`on_disk` reads the files as they are now).
SOURCE_DIGEST = source_digest(ROOT)


def on_disk() -> str:
  """The digest of the accountant's code as it is on disk now (what a
  process started now would run), which may differ from SOURCE_DIGEST.

  Returns:
    `source_digest(ROOT)`.
  """
  return source_digest(ROOT)
