"""A local run's TFF workers are private to it; remote ones need a trusted network."""

import os
import socket
import subprocess
import sys

import pytest

from tff_quant.program import network, runtime

# A local run as every binary makes it: the secure-sum context, one round of
# a factory, then the workers' namespace and listening ports, kept alive
# until the test has tried to reach them.
_LOCAL_RUN = r'''
import os, sys
import numpy as np
import tensorflow_federated as tff
from tff_quant import aggregators
from tff_quant.program import runtime
private = runtime.use_secure_sum_simulation()
p = aggregators.rqm_factory(1.0).create(tff.TensorType(np.float32, [3]))
p.next(p.initialize(), [np.zeros(3, np.float32)] * 2)
ports = set()
for pid in runtime.worker_pids():
  for table in ('tcp', 'tcp6'):
    with open(f'/proc/{pid}/net/{table}') as f:
      for line in f.readlines()[1:]:
        fields = line.split()
        if fields[3] == '0A':   # LISTEN
          ports.add(int(fields[1].split(':')[1], 16))
print('PRIVATE', private, flush=True)
print('NS', os.readlink('/proc/self/ns/net'), *[os.readlink(f'/proc/{w}/ns/net')
                                                for w in runtime.worker_pids()])
print('PORTS', *sorted(ports), flush=True)
sys.stdin.readline()
runtime.stop_workers()
'''


def _addresses():
  """This machine's addresses: loopback and every other IPv4 one."""
  out = ['127.0.0.1']
  try:
    ip = subprocess.run(['ip', '-o', '-4', 'addr'], capture_output=True,
                        text=True, timeout=10).stdout
    out += [l.split()[3].split('/')[0] for l in ip.splitlines()
            if ' lo ' not in l]
  except OSError:
    pass
  return out


def _reachable(host, port):
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.settimeout(2)
    return s.connect_ex((host, port)) == 0


def test_a_local_runs_workers_listen_only_in_its_private_namespace():
  child = subprocess.Popen([sys.executable, '-c', _LOCAL_RUN],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
  try:
    lines = {}
    for line in child.stdout:
      key, *rest = line.split()
      lines[key] = rest
      if key == 'PORTS':
        break
    assert 'PORTS' in lines, child.stderr.read()[-3000:]
    if lines['PRIVATE'] == ['False']:   # no CAP_SYS_ADMIN: said, not hidden
      child.stdin.write('\n')
      child.stdin.flush()
      child.wait(timeout=60)
      assert 'warning: TFF\'s worker_binary processes listen on every' in (
          child.stderr.read())
      pytest.skip('isolation needs root here; the warning was printed')
    run_ns, *worker_ns = lines['NS']
    assert worker_ns and set(worker_ns) == {run_ns}   # the run's namespace
    assert run_ns != network.namespace()
    if os.access('/proc/1/ns/net', os.R_OK):
      assert run_ns != os.readlink('/proc/1/ns/net')
    ports = [int(p) for p in lines['PORTS']]
    assert ports, 'the worker listens on some port'
    for host in _addresses():
      for port in ports:
        assert not _reachable(host, port), (host, port)
  finally:
    if child.poll() is None:
      child.stdin.write('\n')
      child.stdin.flush()
      child.wait(timeout=60)
  assert child.returncode == 0


@pytest.mark.parametrize('address, loopback', [
    ('127.0.0.1:8001', True), ('127.3.2.1:1', True), ('localhost:9', True),
    ('[::1]:8001', True), ('10.1.2.3:8001', False), ('host1:8001', False),
    ('[2001:db8::1]:1', False)])
def test_is_loopback(address, loopback):
  assert network.is_loopback(address) is loopback


def test_a_remote_worker_outside_loopback_needs_a_trusted_network():
  with pytest.raises(ValueError, match='--trusted_network') as e:
    runtime.RemoteWorkers(['127.0.0.1:1', '10.1.2.3:8001'])
  assert '10.1.2.3:8001' in str(e.value) and '127.0.0.1:1' not in str(e.value)
  # Stated trusted, the same addresses pass the check.
  network.check_worker_addresses(['127.0.0.1:1', '10.1.2.3:8001'],
                                 trusted_network=True)
