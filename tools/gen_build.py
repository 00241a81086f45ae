"""Regenerates BUILD from the sources: python tools/gen_build.py (run from anywhere)."""
import os, re
os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
def target(path): return path[:-3].replace('/', '_')
def module_file(mod):
  for c in (mod.replace('.','/') + '.py', mod.replace('.','/') + '/__init__.py'):
    if os.path.exists(c): return c
def deps_of(p):
  src=open(p).read(); out=set()
  for mod, names in re.findall(r'^from (tff_quant(?:\.\w+)*) import \(?([\w, \n]+)\)?', src, re.M):
    for name in re.findall(r'\w+', names):
      f = module_file(f'{mod}.{name}') or module_file(mod)
      if f and f != p: out.add(':'+target(f))
  for mod in re.findall(r'^import (tff_quant(?:\.\w+)*)', src, re.M):
    f = module_file(mod)
    if f and f != p: out.add(':'+target(f))
  return sorted(out)
lines = ['# Bazel targets mirroring the modules (tests/build_test.py keeps this in sync).',
         'load("@rules_python//python:defs.bzl", "py_binary", "py_library", "py_test")', '',
         'package(default_visibility = ["//visibility:public"])', '']
def block(kind, name, p, deps, extra=()):
  return [f'{kind}(', f'    name = "{name}",', f'    srcs = ["{p}"' + ''.join(f', "{e}"' for e in extra) + '],',
          *( [f'    main = "{p}",'] if kind != 'py_library' else []),
          '    deps = [' + ', '.join(f'"{d}"' for d in deps) + '],', ')', '']
for root,_,files in sorted(os.walk('tff_quant')):
  for f in sorted(files):
    if f.endswith('.py'):
      p=os.path.join(root,f); lines += block('py_library', target(p), p, deps_of(p))
for folder in ('experiments', 'benchmarks'):
  for f in sorted(os.listdir(folder)):
    if f.endswith('.py') and f != '__init__.py':
      p=f'{folder}/{f}'; lines += block('py_binary', f[:-3], p, deps_of(p))
for root,_,files in sorted(os.walk('tests')):
  for f in sorted(files):
    if f.endswith('_test.py'):
      p=os.path.join(root,f); lines += block('py_test', target(p), p, deps_of(p), ('tests/conftest.py',))
open('BUILD','w').write('\n'.join(lines))
print('BUILD written')
