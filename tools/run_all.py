#!/usr/bin/env python
"""Run every notebook top to bottom in a fresh Jupyter kernel, as JupyterLab's "Run All" does, on a machine
without the project's data and without a GPU; close with `run-all: N passed, M failed`.

Usage: python tools/run_all.py [--jobs N] [--cell-timeout S] [--keep DIR] [NOTEBOOK ...]

Unlike the test command (nbdev's runner, which skips the cells flagged `slow` and `gpu`), this runs *every*
cell, flagged or not, with nbclient in a real kernel. It works on a copy of the checkout (the files git tracks,
plus new files it does not ignore) in a temporary folder, so that:
  - no `shared/` folder sits beside it, `$ROPE_LIT_MULTI30K` and `$ROPE_LIT_TINY_SHAKESPEARE` name files that
    do not exist, and CUDA is hidden: cells that need data or a GPU must skip themselves with one line;
  - `IN_TEST` is set, so long cells run their small variants;
  - the copy's tracked files are compared before and after: a notebook that writes over a committed file fails.
A notebook also fails on an error in any cell, and on a warning printed in any output.
The native kernels are taken from the usual cache (`$ROPE_LIT_CACHE`), as a user's second run would.
"""
import argparse, hashlib, os, shutil, subprocess, sys, tempfile, time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

def copy_checkout(dest:Path)->list:
    "Copy the files git tracks (and new files it does not ignore) into `dest`; return the tracked paths"
    ls = lambda *a: subprocess.run(['git', 'ls-files', '-z', *a], cwd=ROOT, capture_output=True,
                                   check=True).stdout.decode().split('\0')
    tracked = [p for p in ls() if p and (ROOT / p).is_file()]
    for p in tracked + [p for p in ls('--others', '--exclude-standard') if p and (ROOT / p).is_file()]:
        (dest / p).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / p, dest / p)
    return tracked

def digests(root:Path, paths:list)->dict:
    return {p: hashlib.sha256((root / p).read_bytes()).hexdigest() if (root / p).is_file() else None for p in paths}

def problems_in(nb)->list:
    "Errors and warnings shown in the executed notebook's outputs"
    found = []
    for i, c in enumerate(nb.cells):
        for o in c.get('outputs', []):
            text = o.get('text', '') if o.get('output_type') == 'stream' else ''
            if o.get('output_type') == 'error': found.append(f"cell {i}: {o.get('ename')}: {o.get('evalue', '')[:200]}")
            elif 'Warning' in text or 'warning:' in text.lower():
                line = next(l for l in text.splitlines() if 'arning' in l)
                found.append(f"cell {i}: a warning in the output: {line.strip()[:160]}")
    return found

def run_one(path:Path, cell_timeout:int)->tuple:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    nb = nbformat.read(path, as_version=4)
    start = time.time()
    try:
        NotebookClient(nb, timeout=cell_timeout, kernel_name='python3',
                       resources={'metadata': {'path': str(path.parent)}}).execute()
        found = problems_in(nb)
    except CellExecutionError as e:
        found = [str(e).strip().splitlines()[-1][:300]] + problems_in(nb)
    except Exception as e:  # a timeout, a dead kernel
        found = [f"{type(e).__name__}: {str(e).strip()[:300]}"]
    return found, time.time() - start

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('notebooks', nargs='*', help='notebook names in nbs/ (default: all)')
    ap.add_argument('--jobs', type=int, default=2, help='notebooks run at once (default 2)')
    ap.add_argument('--cell-timeout', type=int, default=900, help='seconds a single cell may take')
    ap.add_argument('--keep', help='work in this folder (kept afterwards) instead of a temporary one')
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix='rope_lit_run_all_'))
    checkout = work / 'checkout'
    if checkout.exists(): shutil.rmtree(checkout)
    checkout.mkdir(parents=True)
    tracked = copy_checkout(checkout)
    from rope_lit.cpp_build import native_cache_dir
    cache = str(native_cache_dir())          # before the environment changes: the builds already made
    missing = work / 'no-data'
    os.environ.update(PYTHONPATH=str(checkout), IN_TEST='1', CUDA_VISIBLE_DEVICES='', ROPE_LIT_CACHE=cache,
                      ROPE_LIT_MULTI30K=str(missing / 'multi30k'),
                      ROPE_LIT_TINY_SHAKESPEARE=str(missing / 'tinyshakespeare' / 'input.txt'))
    nbs = checkout / 'nbs'
    names = args.notebooks or sorted(p.name for p in nbs.glob('*.ipynb') if not p.name.startswith('_'))
    before = digests(checkout, tracked)
    print(f"run-all: {len(names)} notebooks in a fresh kernel each, {args.jobs} at a time, in {checkout}", flush=True)
    passed = failed = 0
    log = open(work / 'kernels.log', 'w')     # the kernels' own start-up chatter goes here, not to the terminal
    saved_stderr = os.dup(2); os.dup2(log.fileno(), 2)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {pool.submit(run_one, nbs / Path(n).name, args.cell_timeout): n for n in names}
        for fut in as_completed(futures):
            found, secs = fut.result()
            print(f"{'FAIL' if found else 'PASS'}  {futures[fut]}  ({secs:.0f} s)", flush=True)
            for f in found: print(f"        {f}")
            passed, failed = passed + (not found), failed + bool(found)
    os.dup2(saved_stderr, 2); log.close()
    changed = [p for p, h in digests(checkout, tracked).items() if h != before[p]]
    for p in changed: print(f"FAIL  a committed file was written: {p}")
    failed += bool(changed)
    print(f"run-all: {passed} passed, {failed} failed")
    if not args.keep: shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)

if __name__ == '__main__': main()
