#!/usr/bin/env python
"""Run only the `#| gpu` cells of a notebook against the exported module (for a short GPU lease).

Usage: python tools/run_gpu_cells.py nbs/04_kernels.ipynb rope_lit.kernels [--only 0,2] [--exec CODE] [--check-names]
The namespace starts as the module's globals (private names included) plus fastcore.test, as if the
notebook's export cells had run, plus every import statement of the notebook's cells (the imports its cells rely
on), then the notebook's own test helpers (unflagged or hidden cells of imports, definitions and plain assignments only);
each gpu cell then runs in order. Exits 1 on the first failure.
--only N,M runs only those gpu cells (counted from 0 in page order); --exec CODE runs CODE in the same namespace
instead of the cells (how tools/gpu_run.py spreads the Triton compilations of one long cell over processes);
--check-names runs no cell but reports names a gpu cell reads that nothing defines (on a CPU the cells skip
themselves, so a missing import shows only on the GPU: this finds it before).
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
    for src in sources:                 # every page's imports, also those in cells that do more than import
        if src.lstrip().startswith('#| gpu'): continue
        try: body = ast.parse(src).body
        except SyntaxError: continue
        for node in (n for n in body if isinstance(n, (ast.Import, ast.ImportFrom))):
            try: exec(compile(ast.Module([node], type_ignores=[]), f'{nb}:imports', 'exec'), ns)
            except ImportError as e: print(f"run_gpu_cells: skipped an import ({e}); a cell that needs it fails")
    for src in sources:
        if helpers_only(src) and not import_only(src): exec(compile(transform(src), f'{nb}:helpers', 'exec'), ns)
    return ns, [src for src in sources if src.lstrip().startswith('#| gpu')]

def unbound_names(src:str, ns:dict)->list:
    "Names a cell reads that neither it, the namespace nor the builtins define (what would raise NameError)"
    import builtins
    tree = ast.parse(src)
    defined = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    defined |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    defined |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    defined |= {(a.asname or a.name).split('.')[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    defined |= {n.name for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler) and n.name}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return sorted(used - defined - set(ns) - set(dir(builtins)))

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('notebook'); ap.add_argument('module')
    ap.add_argument('--only', help='comma-separated indices of the gpu cells to run (default: all)')
    ap.add_argument('--exec', dest='code', help='code to run in the namespace instead of the gpu cells')
    ap.add_argument('--check-names', action='store_true',
                    help="only check that every name the gpu cells read is defined (no cell runs); exit 1 if not")
    args = ap.parse_args()
    nb = args.notebook
    ns, gpu = page_namespace(nb, args.module)
    if args.check_names:
        missing = {i: m for i, src in enumerate(gpu) if (m := unbound_names(src, ns))}
        for i, m in missing.items(): print(f"gpu cell {i} reads undefined names: {', '.join(m)}")
        print(f"names: {len(gpu) - len(missing)} of {len(gpu)} gpu cells have every name they read"); sys.exit(bool(missing))
    if args.code is not None:
        t = time.time()
        exec(compile(args.code, f'{nb}:--exec', 'exec'), ns)
        print(f"--exec done ({time.time() - t:.1f} s)"); return
    picked = [int(i) for i in args.only.split(',')] if args.only else list(range(len(gpu)))
    bad = [i for i in picked if not 0 <= i < len(gpu)]
    if bad: sys.exit(f"run_gpu_cells: --only {bad}: expected indices below {len(gpu)}, the page's gpu cells")
    for i in picked:                    # numbered as on the page: its gpu cells counted from 0
        src, t = gpu[i], time.time()
        try: exec(compile(src, f'{nb}:gpu-cell-{i}', 'exec'), ns)
        except Exception:
            traceback.print_exc(); print(f"FAIL gpu cell {i} of {len(gpu)}:\n{src[:300]}"); sys.exit(1)
        print(f"PASS gpu cell {i} ({time.time() - t:.1f} s): {src.splitlines()[1][:90]}")
    print(f"gpu cells: {len(picked)} passed")

if __name__ == '__main__': main()
