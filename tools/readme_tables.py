"""Writes README.md's generated tables from the results files: python tools/readme_tables.py

The "Which mechanism should I use?" table is the section of that name in
results/fl_table_tuned/table.md (written by experiments/fl_table.py through
tff_quant/program/fl_table.py). It is copied, as is, between the markers

  <!-- which-mechanism:begin -->
  <!-- which-mechanism:end -->

in README.md. While the results file does not exist, the block is the one line
`ABSENT`. tests/docs_test.py checks that README.md holds what this tool writes.

  python tools/readme_tables.py           # rewrite the block in README.md
  python tools/readme_tables.py --check   # exit 1 if README.md is out of date
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, 'README.md')
TABLE = os.path.join(ROOT, 'results', 'fl_table_tuned', 'table.md')
SECTION = '## Which mechanism should I use?'
BEGIN = '<!-- which-mechanism:begin -->'
END = '<!-- which-mechanism:end -->'
ABSENT = ('*No FL table yet: `results/fl_table_tuned/table.md` does not '
          'exist (`bash results/fl_table_tuned/commands.sh` writes it).*')


def which_mechanism(table_path: str = TABLE) -> str:
  """The block's text (no markers): the section's body from `table_path`,
  without its heading, or `ABSENT` when the file does not exist."""
  if not os.path.exists(table_path):
    return ABSENT
  with open(table_path, encoding='utf-8') as f:
    lines = f.read().splitlines()
  try:
    start = lines.index(SECTION) + 1
  except ValueError as e:
    raise ValueError(f'{table_path} has no line {SECTION!r}') from e
  body = []
  for line in lines[start:]:
    if line.startswith('## '):
      break
    body.append(line)
  text = '\n'.join(body).strip()
  if not text:
    raise ValueError(f'{table_path}: the section {SECTION!r} is empty')
  return _links_from_root(text, table_path)


def _links_from_root(text: str, table_path: str) -> str:
  """`text` with its relative Markdown link targets (a file beside the
  table, e.g. its plot) made relative to the repository root, where
  README.md is."""
  folder = os.path.relpath(os.path.dirname(os.path.abspath(table_path)), ROOT)
  return re.sub(r'\]\(([^/():]+)\)',
                lambda m: f']({folder}/{m.group(1)})'.replace(os.sep, '/'),
                text)


def current_block(readme_text: str) -> str:
  """What README.md holds between the markers (stripped)."""
  if readme_text.count(BEGIN) != 1 or readme_text.count(END) != 1:
    raise ValueError(f'README.md must hold {BEGIN} and {END} once each')
  start = readme_text.index(BEGIN) + len(BEGIN)
  end = readme_text.index(END)
  if end < start:
    raise ValueError(f'{END} comes before {BEGIN} in README.md')
  return readme_text[start:end].strip()


def with_block(readme_text: str, block: str) -> str:
  """`readme_text` with the text between the markers replaced by `block`."""
  current_block(readme_text)   # the markers are there, once, in order
  head, rest = readme_text.split(BEGIN)
  _, tail = rest.split(END)
  return f'{head}{BEGIN}\n{block}\n{END}{tail}'


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--check', action='store_true',
                      help='only check; exit 1 if README.md is out of date')
  args = parser.parse_args(argv)
  with open(README, encoding='utf-8') as f:
    text = f.read()
  block = which_mechanism()
  if args.check:
    if current_block(text) != block:
      print('README.md is out of date: run python tools/readme_tables.py',
            file=sys.stderr)
      return 1
    return 0
  new = with_block(text, block)
  if new != text:
    with open(README, 'w', encoding='utf-8') as f:
      f.write(new)
    print('README.md: "Which mechanism should I use?" rewritten from '
          f'{os.path.relpath(TABLE, ROOT)}')
  else:
    print('README.md is up to date')
  return 0


if __name__ == '__main__':
  sys.exit(main())
