#!/usr/bin/env python
"""Run a notebook top to bottom and save the outputs of chosen cells only, leaving every other cell's output as it was.

  python tools/nbrun.py NB --changed         cells whose source differs from the committed notebook (git HEAD), and new cells
  python tools/nbrun.py NB --cells 12 15     cells by index (0-based, as in the .ipynb)
  python tools/nbrun.py NB --all             every cell that runs

Outputs that carry measurements (timings, trained results) are not replaced when only a page's prose or a figure's
style changes. Careful with --changed after large edits: it selects every cell whose source differs from HEAD,
timing cells included (their fresh numbers would replace the stored ones); name the cells with --cells instead.
The whole notebook runs, and a failing cell stops the run before anything is saved. Flagged cells (`tst_flags`) are skipped as `nbdev-test` skips them, unless named in
--flags. `IN_TEST` is not set unless --in-test is given. The notebook is cleaned with `nbdev-clean` afterwards.
"""
import argparse, json, os, subprocess, sys
from pathlib import Path

def _src(c): return ''.join(c['source']) if isinstance(c['source'], list) else c['source']

def changed_cells(path:Path):
    "Indices of code cells whose source is not in the committed version of `path`"
    r = subprocess.run(['git', 'show', f'HEAD:./{path.name}'], cwd=path.parent, capture_output=True, text=True)
    old = {_src(c) for c in json.loads(r.stdout)['cells']} if r.returncode == 0 else set()
    nb = json.loads(path.read_text())
    return [i for i, c in enumerate(nb['cells']) if c['cell_type'] == 'code' and _src(c) not in old]

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('nb', help='the notebook')
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument('--cells', type=int, nargs='+', help='indices of the cells whose outputs are saved')
    g.add_argument('--changed', action='store_true', help='save the outputs of cells changed since git HEAD')
    g.add_argument('--all', action='store_true', help='save every output')
    ap.add_argument('--flags', default='', help='flagged cells to run too (e.g. "slow")')
    ap.add_argument('--in-test', action='store_true', help='set IN_TEST=1 as nbdev-test does')
    ap.add_argument('--cell-timeout', type=int, default=1200, help='seconds a cell may take')
    args = ap.parse_args()
    path = Path(args.nb).absolute()
    if not path.exists(): sys.exit(f'nbrun: NB {args.nb} does not exist')
    if args.in_test: os.environ['IN_TEST'] = '1'
    from fastcore.nbio import read_nb, write_nb
    from execnb.shell import CaptureShell
    from nbdev.config import get_config
    from nbdev.process import NBProcessor
    from nbdev.test import _skip_cell
    from fastcore.xtras import working_directory
    raw = read_nb(path)
    keep = set(range(len(raw.cells))) if args.all else set(changed_cells(path) if args.changed else args.cells)
    cfg = get_config(path.parent)
    skip = cfg.tst_flags.split() if isinstance(cfg.tst_flags, str) else list(cfg.tst_flags)
    nb = NBProcessor(path, rm_directives=False, process=True).nb
    if len(nb.cells) != len(raw.cells): sys.exit('nbrun: processing changed the number of cells')
    sh = CaptureShell(path)
    sys.path.insert(0, str(cfg.config_path))
    with working_directory(path.parent):
        sh.run_all(nb, exc_stop=True, preproc=_skip_cell(nb, skip, args.flags.split()), cell_timeout=args.cell_timeout)
    saved = []
    for i, (c, r) in enumerate(zip(nb.cells, raw.cells)):
        if i in keep and r.cell_type == 'code':
            r['outputs'] = c.get('outputs', [])
            saved.append(i)
    write_nb(raw, path)
    sys.path.insert(0, str(Path(__file__).parent))
    from shrink_figures import shrink_notebook   # the figures as 256-colour PNGs: a third of the bytes
    before, after = shrink_notebook(path)
    subprocess.run(['nbdev-clean', '--fname', str(path)], check=False)
    print(f'nbrun: {path.name}: saved the outputs of cells {saved} ({after // 1000} KB of outputs'
          + (f', figures shrunk from {before // 1000} KB' if after < before else '') + ')')

if __name__ == '__main__': main()
