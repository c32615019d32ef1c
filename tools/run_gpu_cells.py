#!/usr/bin/env python
"""Run only the `#| gpu` cells of a notebook against the exported module (for a short GPU lease).

Usage: python tools/run_gpu_cells.py nbs/04_kernels.ipynb rope_lit.kernels
The namespace starts as the module's globals (private names included) plus fastcore.test, as if the
notebook's export cells had run, plus every import-only cell of the notebook (the imports its cells rely on), then the
notebook's own test helpers (unflagged or hidden cells of imports, definitions and plain assignments only);
each gpu cell then runs in order. Exits 1 on the first failure.
The full notebook run (`python tools/run_tests.py NB --flags gpu`) checks the same cells and the CPU ones.
"""
import ast, importlib, json, sys, time, traceback
nb, modname = sys.argv[1], sys.argv[2]
ns = dict(vars(importlib.import_module(modname)))
exec('from fastcore.test import *', ns)
cells = [c for c in json.load(open(nb))['cells'] if c['cell_type'] == 'code']
def import_only(src):
    lines = [l for l in src.splitlines() if l.strip() and not l.lstrip().startswith('#')]
    return bool(lines) and all(l.startswith(('import ', 'from ')) for l in lines)
def helpers_only(src):
    "A cell of the page's own test helpers: unflagged, and nothing but imports, definitions and plain assignments"
    flags = [l for l in src.splitlines() if l.startswith('#|')]
    if any(l.split()[1:2] != ['hide'] for l in flags): return False     # exported, gpu, slow: not helpers
    try: body = ast.parse(src).body
    except SyntaxError: return False
    plain = lambda n: isinstance(n, (ast.Assign, ast.AnnAssign)) and not any(
        isinstance(x, ast.Call) for x in ast.walk(n))
    return bool(body) and all(isinstance(n, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef))
                              or plain(n) for n in body)
for src in (''.join(c['source']) for c in cells):
    if import_only(src): exec(compile(src, f'{nb}:imports', 'exec'), ns)
for src in (''.join(c['source']) for c in cells):
    if helpers_only(src) and not import_only(src): exec(compile(src, f'{nb}:helpers', 'exec'), ns)
gpu = [''.join(c['source']) for c in cells if ''.join(c['source']).lstrip().startswith('#| gpu')]
for i, src in enumerate(gpu):
    t = time.time()
    try: exec(compile(src, f'{nb}:gpu-cell-{i}', 'exec'), ns)
    except Exception:
        traceback.print_exc(); print(f"FAIL gpu cell {i} of {len(gpu)}:\n{src[:300]}"); sys.exit(1)
    print(f"PASS gpu cell {i} ({time.time() - t:.1f} s): {src.splitlines()[1][:90]}")
print(f"gpu cells: {len(gpu)} passed")
