"""tff_quant/__init__.py: an uncaught TFF round error is one readable line."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_SCRIPT = r'''
import sys
import numpy as np, tensorflow_federated as tff
from tff_quant import aggregators
from tff_quant.program import runtime
case = sys.argv[1]
if case == 'other':
  raise KeyError('not a round error')
if case == 'capacity':
  runtime.use_secure_sum_simulation()
kw = dict(max_clients_per_round=2) if case == 'capacity' else {}
process = aggregators.rqm_factory(1.0, **kw).create(tff.TensorType(np.float32, [3]))
process.next(process.initialize(), [np.zeros(3, np.float32)] * 3)
'''


def _stderr_lines(case):
  res = subprocess.run([sys.executable, '-c', _SCRIPT, case], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert res.returncode == 1
  # TensorFlow's and TFF's C++ logs (timestamped lines and the failed node's
  # name under them) are theirs, not the Python error this is about.
  return [l for l in res.stderr.splitlines()
          if l.strip() and not re.match(r'\d{4}-\d\d-\d\d |\s+\[\[\{\{node ', l)
          and 'W0000' not in l and 'E0000' not in l]


@pytest.mark.parametrize('case, first', [
    ('no_context', 'tff_quant.program.runtime.SecureSumContextError: TFF\'s '
     'current execution context cannot run secure sum'),
    ('capacity', 'tff_quant.program.errors.RoundCheckError: More clients in '
     'this round than max_clients_per_round=2'),
])
def test_an_uncaught_round_error_is_one_line(case, first):
  lines = _stderr_lines(case)
  assert len(lines) == 1 and lines[0].startswith(first), lines


def test_other_errors_keep_their_traceback():
  lines = _stderr_lines('other')
  assert lines[0].startswith('Traceback') and lines[-1].startswith('KeyError')
