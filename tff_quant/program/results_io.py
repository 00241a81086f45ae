"""Atomic result files: a CSV/JSON is either complete or absent, never half-written."""

import contextlib
import csv
import fcntl
import json
import os
from typing import Iterable, Sequence


def _replace(path: str, write) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + '.tmp'
  with open(tmp, 'w', newline='') as f:
    write(f)
  os.replace(tmp, path)


def write_csv(path: str, header: Sequence[str], rows: Iterable[Sequence]) -> None:
  """Writes header + rows to `path` via a temporary file and an atomic rename."""
  rows = list(rows)

  def write(f):
    w = csv.writer(f)
    w.writerow(header)
    w.writerows(rows)
  _replace(path, write)


def write_json(path: str, obj) -> None:
  """Writes `obj` as indented JSON to `path` atomically (floats via float())."""
  _replace(path, lambda f: json.dump(obj, f, indent=1, sort_keys=True,
                                     default=float))


def read_csv(path: str):
  """Rows of a CSV written by `write_csv`, as dicts of strings."""
  with open(path, newline='') as f:
    return list(csv.DictReader(f))


@contextlib.contextmanager
def exclusive(directory: str, what: str):
  """One writer at a time for `directory` (an advisory lock on its `.lock`):
  two runs resuming the same results would each rewrite them from their own
  rows and drop the other's. A second one fails at once with ValueError."""
  os.makedirs(directory, exist_ok=True)
  handle = open(os.path.join(directory, '.lock'), 'w')
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    handle.close()
    raise ValueError(f'Another {what} is writing to {directory}: wait for it to '
                     'end (or stop it), or use another output folder.') from None
  try:
    yield
  finally:
    handle.close()   # closing releases the lock
