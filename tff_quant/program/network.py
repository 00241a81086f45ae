"""What TFF's worker processes expose on the network, and how a run closes it.

TFF's `worker_binary` (started by its C++ test context for every local run,
and by `runtime.start_local_workers`) listens on every interface of the
machine and executes, without authentication, whatever computation a gRPC
client sends it. It has no flag to bind to loopback. Two defences:

* **A local run in a private network namespace** (`isolate_local_run`): the
  process moves itself into a new Linux network namespace holding only its
  own loopback interface before TFF starts any worker; the workers, its
  children, inherit it. They are then reachable from this process (and its
  children) only: not from another process of this machine, nor from any
  other machine. It needs Linux and CAP_SYS_ADMIN (root); it must run before
  TFF opens its first gRPC connection (afterwards the process's gRPC threads
  would stay in the old namespace). Where it cannot, the run says so in one
  line and what is exposed, and goes on.
* **Remote workers on a trusted network only** (`check_worker_addresses`):
  an address outside loopback is refused unless the caller states that the
  network between the machines is trusted (`--trusted_network`), since
  anyone who reaches a worker's port can run code there.

Standard library only.
"""

import ctypes
import fcntl
import ipaddress
import os
import socket
import struct
import sys
from typing import Callable, Optional, Sequence

_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1

#: Thread names of a process whose gRPC core has started (its threads would
#: keep the old namespace: isolating then would cut TFF off its workers).
_GRPC_THREADS = ('grpc_global_tim', 'default-executo', 'resolver-execut',
                 'event_engine')

EXPOSED = ('TFF\'s worker_binary processes listen on every network interface '
           'and run unauthenticated computations')

_STATE = {'isolated': None, 'reason': ''}


def namespace() -> str:
  """This thread's network namespace (e.g. 'net:[4026531833]')."""
  return os.readlink('/proc/thread-self/ns/net')


def isolated() -> Optional[bool]:
  """True once `isolate_local_run` moved this process into a private
  network namespace, False if it tried and could not, None if not tried."""
  return _STATE['isolated']


def _grpc_started() -> bool:
  try:
    tasks = os.listdir('/proc/self/task')
  except OSError:
    return False
  for task in tasks:
    try:
      with open(f'/proc/self/task/{task}/comm') as f:
        if f.read().strip().startswith(_GRPC_THREADS):
          return True
    except OSError:
      continue
  return False


def _loopback_up() -> None:
  """Brings `lo` up in this (new) namespace (it starts down)."""
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    request = struct.pack('16sh', b'lo', 0)
    flags = struct.unpack('16sh', fcntl.ioctl(s, _SIOCGIFFLAGS, request))[1]
    fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack('16sh', b'lo', flags | _IFF_UP))


def isolate_local_run(log: Callable[[str], None] = None) -> bool:
  """Moves this process into a private network namespace (loopback only).

  Call it before TFF starts workers (`runtime.use_secure_sum_simulation`
  does). Idempotent: a second call returns the first one's answer. The
  process keeps no network access outside itself afterwards, which a local
  run does not need (its data are files); a run with remote workers does
  not call it.

  Args:
    log: where the one line goes when isolation is impossible (default:
      stderr).

  Returns:
    True if this process (and every worker it starts from now on) is in a
    private network namespace; False if it could not be (not Linux, no
    CAP_SYS_ADMIN, gRPC already started), after saying why and what is
    exposed.
  """
  if _STATE['isolated'] is not None:
    return _STATE['isolated']
  reason = ''
  if not sys.platform.startswith('linux'):
    reason = 'network namespaces need Linux'
  elif _grpc_started():
    reason = ('TFF had already opened gRPC connections in this process '
              '(isolating now would cut it off from its workers)')
  else:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
      reason = (f'unshare(CLONE_NEWNET) failed: '
                f'{os.strerror(ctypes.get_errno())} (it needs root)')
    else:
      try:
        _loopback_up()
      except OSError as e:
        reason = f'the private namespace\'s loopback could not be brought up: {e}'
  _STATE['isolated'] = not reason
  _STATE['reason'] = reason
  if reason:
    (log or (lambda m: print(m, file=sys.stderr)))(
        f'warning: {EXPOSED}: this local run\'s workers are reachable from '
        f'the network ({reason}). Run it as root, or inside a private network '
        'namespace (e.g. `unshare -rn ...`), or on a machine whose firewall '
        'closes its ports (docs/scaling.md).')
  return _STATE['isolated']


def is_loopback(address: str) -> bool:
  """Whether a 'host:port' worker address names this machine's loopback."""
  host = address.rsplit(':', 1)[0].strip('[]')
  if host == 'localhost':
    return True
  try:
    return ipaddress.ip_address(host).is_loopback
  except ValueError:
    return False


def check_worker_addresses(addresses: Sequence[str],
                           trusted_network: bool) -> None:
  """Refuses remote worker addresses unless the network is stated trusted.

  Args:
    addresses: 'host:port' of TFF worker services.
    trusted_network: the caller states that only trusted machines can reach
      the workers' ports (a private network, an SSH tunnel, a firewall).

  Raises:
    ValueError: an address outside loopback without `trusted_network`,
      naming it and the flag.
  """
  remote = [a for a in addresses if not is_loopback(a)]
  if remote and not trusted_network:
    raise ValueError(
        f'--workers: {", ".join(remote)} is outside loopback, and {EXPOSED}: '
        'anyone who reaches such a port can run code on that machine. Run the '
        'workers on a private network or behind SSH tunnels (then name them '
        'as 127.0.0.1:PORT), or pass --trusted_network to state that only '
        'trusted machines can reach them (docs/scaling.md).')
