#!/usr/bin/env python
"""Run only the `#| gpu` cells of a notebook against the exported module (for a short GPU lease).

Usage: python tools/run_gpu_cells.py nbs/04_kernels.ipynb rope_lit.kernels [--only 0,2] [--exec CODE]
The namespace starts as the module's globals (private names included) plus fastcore.test, as if the
notebook's export cells had run, plus every import-only cell of the notebook (the imports its cells rely on), then the
notebook's own test helpers (unflagged or hidden cells of imports, definitions and plain assignments only);
each gpu cell then runs in order. Exits 1 on the first failure.
--only N,M runs only those gpu cells (counted from 0 in page order); --exec CODE runs CODE in the same namespace
instead of the cells (how tools/gpu_run.py spreads the Triton compilations of one long cell over processes).
The full notebook run (`python tools/run_tests.py NB --flags gpu`) checks the same cells and the CPU ones.
"""
import argparse, ast, importlib, json, sys, time, traceback

def import_only(src:str)->bool:
    lines = [l for l in src.splitlines() if l.strip() and not l.lstrip().startswith('#')]
    return bool(lines) and all(l.startswith(('import ', 'from ')) for l in lines)

def helpers_only(src:str)->bool:
    "A cell of the page's own test helpers: unflagged, and nothing but imports, definitions and plain assignments"
    flags = [l for l in src.splitlines() if l.startswith('#|')]
    if any(l.split()[1:2] != ['hide'] for l in flags): return False     # exported, gpu, slow: not helpers
    try: body = ast.parse(src).body
    except SyntaxError: return False
    plain = lambda n: isinstance(n, (ast.Assign, ast.AnnAssign)) and not any(
        isinstance(x, ast.Call) for x in ast.walk(n))
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
                              or plain(n) for n in body)

def page_namespace(nb:str, modname:str, transform=lambda src: src)->tuple:
    """(namespace, gpu cell sources): the module's globals, fastcore.test, the page's imports and test helpers;
    `transform` rewrites each helper cell's source before it runs"""
    ns = dict(vars(importlib.import_module(modname)))
    exec('from fastcore.test import *', ns)
    sources = [''.join(c['source']) for c in json.load(open(nb))['cells'] if c['cell_type'] == 'code']
    for src in sources:
        if import_only(src): exec(compile(src, f'{nb}:imports', 'exec'), ns)
    for src in sources:
        if helpers_only(src) and not import_only(src): exec(compile(transform(src), f'{nb}:helpers', 'exec'), ns)
    return ns, [src for src in sources if src.lstrip().startswith('#| gpu')]

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('notebook'); ap.add_argument('module')
    ap.add_argument('--only', help='comma-separated indices of the gpu cells to run (default: all)')
    ap.add_argument('--exec', dest='code', help='code to run in the namespace instead of the gpu cells')
    args = ap.parse_args()
    nb = args.notebook
    ns, gpu = page_namespace(nb, args.module)
    if args.code is not None:
        t = time.time()
        exec(compile(args.code, f'{nb}:--exec', 'exec'), ns)
        print(f"--exec done ({time.time() - t:.1f} s)"); return
    if args.only:
        picked = [int(i) for i in args.only.split(',')]
        bad = [i for i in picked if not 0 <= i < len(gpu)]
        if bad: sys.exit(f"run_gpu_cells: --only {bad}: expected indices below {len(gpu)}, the page's gpu cells")
        gpu = [gpu[i] for i in picked]
    for i, src in enumerate(gpu):
        t = time.time()
        try: exec(compile(src, f'{nb}:gpu-cell-{i}', 'exec'), ns)
        except Exception:
            traceback.print_exc(); print(f"FAIL gpu cell {i} of {len(gpu)}:\n{src[:300]}"); sys.exit(1)
        print(f"PASS gpu cell {i} ({time.time() - t:.1f} s): {src.splitlines()[1][:90]}")
    print(f"gpu cells: {len(gpu)} passed")

if __name__ == '__main__': main()
