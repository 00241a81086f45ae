"""Which accountant computed an ε: a digest of the source it ran from.

A result (a calibration, a run's summary) that carries an ε also carries
`SOURCE_DIGEST`, so a later process can tell whether the ε it would compute
for the same mechanism comes from the same code. The FL table
(experiments/fl_table.py) uses it to recheck a stored calibration before it
trains with it: a calibration stored under other code is re-accounted, and
recalibrated where its ε has left the target.
"""

import hashlib
import os
from typing import Sequence

# The packages whose code decides an ε: the accountant itself, the
# mechanisms' laws it reads, and the shared law helpers.
PACKAGES = ('accounting', 'mechanisms', 'common')


def source_digest(root: str, packages: Sequence[str] = PACKAGES) -> str:
  """A 16-hex-digit SHA-256 digest of every `.py` file under `packages`.

  Args:
    root: the folder holding the packages (tff_quant/).
    packages: sub-folders of `root` to digest.

  Returns:
    The digest of the files' relative paths and bytes, in sorted order.

  Raises:
    ValueError: if a package folder is missing under `root`.
  """
  h = hashlib.sha256()
  for package in packages:
    top = os.path.join(root, package)
    if not os.path.isdir(top):
      raise ValueError(f'packages: {package!r} is not a folder under {root}.')
    files = []
    for folder, dirs, names in os.walk(top):
      dirs[:] = sorted(d for d in dirs if d != '__pycache__')
      files += [os.path.join(folder, n) for n in names if n.endswith('.py')]
    for path in sorted(files):
      h.update(os.path.relpath(path, root).encode() + b'\0')
      with open(path, 'rb') as f:
        h.update(f.read() + b'\0')
  return h.hexdigest()[:16]


#: The tff_quant/ folder this accountant was imported from.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Taken when the accountant is imported, which is when its code is read: a
#: later edit of the files on disk changes neither the code this process runs
#: nor this value (`on_disk` reads the files as they are now).
SOURCE_DIGEST = source_digest(ROOT)


def on_disk() -> str:
  """The digest of the accountant's code as it is on disk now (what a
  process started now would run), which may differ from SOURCE_DIGEST."""
  return source_digest(ROOT)
