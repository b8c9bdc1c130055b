"""Write the table of docs/diagnostics.md, "Logged quantities", from the declarations in
``mmstiff/analysis/quantities.py``: one row per logged quantity (key, what it is, unit, hook,
where its formula is written, whether a non-finite value is expected).

    python tools/misc/quantity_table.py            # rewrite the table in the page
    python tools/misc/quantity_table.py --check    # exit 1 if the page's table is stale
"""
import argparse
import os.path as osp

from mmstiff.analysis.quantities import markdown_table
from mmstiff.tool_main import run_tool

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PAGE = osp.join(REPO, 'docs', 'diagnostics.md')
BEGIN = '<!-- quantity table: written by tools/misc/quantity_table.py -->'
END = '<!-- end of quantity table -->'


def with_table(text: str) -> str:
    """``text`` (the page) with the generated table between its two markers."""
    if BEGIN not in text or END not in text:
        raise ValueError(f'{PAGE} has no {BEGIN!r} ... {END!r} markers; expected them around '
                         'the table of "Logged quantities"')
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f'{head}{BEGIN}\n{markdown_table()}{END}{tail}'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('--check', action='store_true',
                        help='exit 1 when the page\'s table differs from the declarations')
    args = parser.parse_args(argv)
    with open(PAGE, encoding='utf-8') as f:
        text = f.read()
    updated = with_table(text)
    if args.check:
        if updated != text:
            raise SystemExit(f'error: the table of {PAGE} is stale; run '
                             'python tools/misc/quantity_table.py')
        print(f'{PAGE}: the quantity table is up to date')
        return
    if updated != text:
        with open(PAGE, 'w', encoding='utf-8') as f:
            f.write(updated)
    print(f'wrote the quantity table of {PAGE}')


if __name__ == '__main__':
    run_tool(main)
