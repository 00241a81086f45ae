"""Every mechanism, found from the package: adding a mechanism is adding its module.

`registry()` imports each module of `tff_quant.mechanisms` (pkgutil) and keys every
concrete `Mechanism` subclass that declares its own `name`. The factory
constructors, the binaries' --mechanism, calibration, benchmarks and the contract
tests enumerate this; nobody keeps a list of names.
"""

import importlib
import inspect
import pkgutil
from typing import Dict, Iterator, Optional, Tuple, Type

from tff_quant.common import validation
from tff_quant.mechanisms import base


def _import_all_modules():
  package = importlib.import_module('tff_quant.mechanisms')
  for info in pkgutil.iter_modules(package.__path__):
    importlib.import_module(f'{package.__name__}.{info.name}')


def _subclasses(cls):
  for sub in cls.__subclasses__():
    yield sub
    yield from _subclasses(sub)


def registry(include_central: bool = False) -> Dict[str, Type[base.Mechanism]]:
  """{name: class} of every concrete mechanism in the package, sorted by name.

  Re-scans the package on every call (a module added at run time is found).
  Raises ValueError if two classes claim one name. Reference mechanisms that do
  not go through the secure sum (`central`, the continuous Gaussian) are listed
  only with `include_central`: they are accounted and calibrated, not encoded.
  """
  _import_all_modules()
  out = {}
  for cls in _subclasses(base.Mechanism):
    name = cls.__dict__.get('name')
    if not name or inspect.isabstract(cls):
      continue
    if name in out and out[name] is not cls:
      raise ValueError(f'Mechanism name {name!r} is claimed by both '
                       f'{out[name].__module__}.{out[name].__name__} and '
                       f'{cls.__module__}.{cls.__name__}.')
    out[name] = cls
  return {name: cls for name, cls in sorted(out.items())
          if include_central or not cls.central}


def get(name: str) -> Type[base.Mechanism]:
  """The mechanism class registered as `name` (central ones included);
  ValueError listing the names."""
  mechanisms = registry(include_central=True)
  validation.check_one_of('mechanism', name, mechanisms)
  return mechanisms[name]


def build(name: str, c_inf: float, **params) -> base.Mechanism:
  """registry()[name].for_coordinate_bound(c_inf, **params)."""
  return get(name).for_coordinate_bound(c_inf, **params)


def variants(num_levels: Optional[int] = None
             ) -> Iterator[Tuple[str, Dict[str, object]]]:
  """(name, params) of every mechanism at its defaults, and with each bool
  tunable flipped: what tests and benchmarks enumerate. `num_levels` overrides
  the default level count of the mechanisms that have one."""
  for name, cls in registry().items():
    base_params = {}
    if num_levels is not None and any(t.name == 'num_levels' for t in cls.TUNABLES):
      base_params['num_levels'] = num_levels
    yield name, base_params
    for t in cls.TUNABLES:
      if t.kind is bool:
        yield name, dict(base_params, **{t.name: not t.default})
