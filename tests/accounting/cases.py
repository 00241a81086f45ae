"""Small mechanisms shared by the accounting tests (one per family)."""

from tff_quant import mechanisms

#: One small setting of each mechanism family: few levels, so brute force
#: over every input configuration stays cheap.
MECHANISMS = {
    'rqm': dict(num_levels=16, q=0.42, delta_ratio=1.0),
    'qmgeo': dict(num_levels=8, p=0.5, full_support=True),
    'pbm': dict(num_levels=8, theta=0.1),
    'quantized_gaussian': dict(num_levels=8),
    'randomized_projection': dict(bits=3, q=0.6),
    'bq': dict(s=2, m=6),
}


def mech(name, c=1.0, **params):
  """The registry mechanism `name` for input bound c."""
  return mechanisms.get(name).for_coordinate_bound(c, **params)


def sparse_power(one, times, unit):
  """{index: value} of the `times`-fold convolution of {index: value} `one`,
  term by term in the values' own arithmetic (Fraction, mpmath), starting
  from {0: unit}: an exact reference for the FFT compositions."""
  out = {0: unit}
  for _ in range(times):
    nxt = {}
    for a, pa in out.items():
      for b, pb in one.items():
        nxt[a + b] = nxt.get(a + b, 0) + pa * pb
    out = nxt
  return out
