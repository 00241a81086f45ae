"""`python -m experiments.which_mechanism`: help, flag errors, and one tiny
answer end to end."""

from tests.experiments import binaries

MODULE = 'experiments.which_mechanism'
# Every client in every round (n = N) at δ = 0.005: the report's
# generic-subsampling penalty of an unsampled Gaussian costs nothing (~8 s
# of bisection over WOR-sampled RDP curves at n/N = 0.05).
TINY = ['--epsilon=10', '--delta=0.005', '--dim=64', '--clients_per_round=10',
        '--total_clients=10', '--rounds=5']


def test_help_exits_0_and_names_the_flags():
  res = binaries.run(MODULE, ['--help'], timeout=300)
  assert res.returncode == 0, res.stderr[-2000:]
  assert '--wire_bits' in res.stdout and '--max_seconds_per_mechanism' in (
      res.stdout)
  # The profile route by default; --nouse_profile for the RDP route alone.
  assert "--[no]use_profile" in res.stdout
  assert "(default: 'true')" in res.stdout.split('--[no]use_profile')[1][:700]


def test_bad_flags_exit_2_with_one_line():
  for args, name in ((TINY + ['--wire_bits=0'], 'wire_bits'),
                     (TINY, '--wire_bits is required'),
                     (TINY + ['--wire_bits=6', '--clients_per_round=11'],
                      'clients_per_round'),
                     (TINY + ['--wire_bits=6', '--output=x.txt'], '--output')):
    res = binaries.run(MODULE, args, timeout=300)
    assert res.returncode == 2, (args, res.stderr[-2000:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: '), (args, lines)
    assert name in lines[0], (args, lines)


def test_a_tiny_answer_end_to_end(tmp_path):
  out = tmp_path / 'answer.md'
  # The RDP route alone (ten times faster here than the default).
  res = binaries.run(MODULE, TINY + [
      '--wire_bits=6', '--mechanisms=pbm,ddgauss', '--nouse_profile',
      '--coordinate_clip_multiples=3', f'--output={out}'], timeout=600)
  assert res.returncode == 0, res.stderr[-2000:]
  assert res.leftover_workers == []
  assert 'Data: none (exact accounting' in res.stdout
  assert 'Accounting: every mechanism by the RDP route alone' in res.stdout
  assert '| pbm | ' in res.stdout and '| ddgauss | 6 | 6 | ' in res.stdout
  assert '**Recommendation**: Least proved × Gaussian: ' in res.stdout
  assert out.read_text() in res.stdout
