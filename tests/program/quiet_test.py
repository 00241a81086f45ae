import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _stderr_of(code):
  env = dict(os.environ)
  env.pop('TF_CPP_MIN_LOG_LEVEL', None)
  return subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300).stderr


def test_tensorflow_imports_without_cuda_noise_and_stderr_comes_back():
  err = _stderr_of('from tff_quant.program import quiet\n'
                   'quiet.import_tensorflow()\n'
                   'import sys; print("after", file=sys.stderr)')
  assert 'cuDNN' not in err and 'TensorRT' not in err
  assert err.strip().splitlines()[-1] == 'after'


def test_the_noise_is_there_without_it():
  # The baseline this module exists for (TF 2.14 on a machine without CUDA).
  assert 'cuDNN' in _stderr_of('import tensorflow')
