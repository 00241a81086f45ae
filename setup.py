"""tff_quant: TFF aggregation factories for DP through randomized quantization.

Install with `make setup` (see Makefile): TFF 0.87.0 must be installed with
--no-deps because it pins jax/jaxlib 0.4.14, which is not on the package index;
its real requirements are the pins in requirements.txt (jax/jaxlib 0.4.13).
install_requires below is read from those same files, so it tells the truth.

What is installed: the package tff_quant with all its subpackages, and the
experiment binaries of experiments/ as the package `experiments` with one
console script each: experiments/fl_emnist.py is `tff-quant-fl-emnist` (its
`entry_point`), the same program as `python -m experiments.fl_emnist`, run from
any folder. tests/install_test.py builds the wheel and checks both.
"""

import pathlib

import setuptools

_HERE = pathlib.Path(__file__).parent


def _pins(name):
  lines = (_HERE / name).read_text().splitlines()
  return [l.split('#')[0].strip() for l in lines if l.split('#')[0].strip()]


def _console_scripts():
  """`tff-quant-<name, '_' as '-'> = experiments.<name>:entry_point` for every
  binary experiments/<name>.py (each defines `entry_point`)."""
  names = sorted(p.stem for p in (_HERE / 'experiments').glob('*.py')
                 if p.stem != '__init__')
  return [f'tff-quant-{n.replace("_", "-")} = experiments.{n}:entry_point'
          for n in names]


setuptools.setup(
    name='tff_quant',
    version='0.1.0',
    description='Differentially private FL via randomized quantization, on TFF secure sum.',
    packages=setuptools.find_packages(
        include=['tff_quant', 'tff_quant.*', 'experiments']),
    entry_points={'console_scripts': _console_scripts()},
    # What the pins allow: tensorflow 2.14.1 has wheels for CPython 3.9-3.11 only and
    # tensorflow-federated 0.87.0 declares Requires-Python <3.12,>=3.9 (one wheel,
    # manylinux_2_31_x86_64), so no Python 3.12, which Colab's default runtime runs.
    python_requires='>=3.9,<3.12',
    # TFF itself is listed so the dependency is visible; install it --no-deps.
    install_requires=_pins('requirements.txt') + _pins('requirements-tff.txt'),
)
