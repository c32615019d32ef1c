#!/usr/bin/env python
"""Run the notebook tests (`nbdev-test`'s own runner) and close with `notebooks: N passed, M failed`.

Usage: python tools/run_tests.py [--flags "slow gpu"] [--n-workers N] [PATH ...]
PATH is a notebook or a folder (default: the project's `nbs/`). Cells whose flag is in
`tst_flags` (pyproject.toml) are skipped unless named in --flags, exactly as with `nbdev-test`.
"""
import argparse, os, sys
from pathlib import Path
from nbdev.config import get_config
from nbdev.doclinks import nbglob

# Each notebook is run by nbdev's own `test_nb`, and then torch.compile's caches are cleared while the notebook's
# objects still exist. Left to the interpreter's exit (after IPython's exit handler has emptied the notebooks'
# namespaces), their weak-reference callbacks find entries already gone and print "Exception ignored ... KeyError:
# '__builtins_dict___N'" tracebacks after a run whose notebooks all passed. The function lives in a module made
# from this source in every process (the workers' `__main__` is replaced by the notebooks' shells, so a function
# of this script could not be found there).
_WORKER_SOURCE = """
import sys
from nbdev.test import test_nb

def test_notebook(*args, **kwargs):
    "nbdev's test_nb(*args, **kwargs), then torch.compile's caches cleared"
    try: return test_nb(*args, **kwargs)
    finally:
        if 'torch._dynamo' in sys.modules: sys.modules['torch']._dynamo.reset()
"""
_INSTALL = (f"import sys, types; m = types.ModuleType('rope_lit_test_worker'); exec({_WORKER_SOURCE!r}, m.__dict__); "
            "sys.modules[m.__name__] = m")

def _notebooks(paths, cfg):
    files = []
    for p in paths or [cfg.nbs_path]:
        p = Path(p).absolute()
        if p.is_dir(): files += nbglob(p, as_path=True)
        elif p.suffix == '.ipynb' and p.exists(): files.append(p)
        else: sys.exit(f"run_tests: PATH {p} is neither a notebook nor a folder")
    keep = [f for f in files if not f.name.startswith('_') and not (f.parent/'.notest').exists()]
    return sorted(set(keep))

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('paths', nargs='*', help='notebooks or folders to test (default: nbs/)')
    ap.add_argument('--flags', default='', help='space-separated test flags to run (e.g. "gpu" or "slow gpu")')
    ap.add_argument('--n-workers', type=int, default=None, help='notebooks run at once (default: CPU count, at most 4)')
    ap.add_argument('--cell-timeout', type=int, default=900, help='seconds a single cell may take')
    args = ap.parse_args()
    cfg = get_config()
    files = _notebooks(args.paths, cfg)
    if not files: sys.exit('run_tests: no notebooks found to test')
    skip = cfg.tst_flags.split() if isinstance(cfg.tst_flags, str) else list(cfg.tst_flags)
    force = args.flags.split()
    n_workers = args.n_workers if args.n_workers is not None else min(os.cpu_count() or 1, 4)
    if len(files) == 1: n_workers = 0
    os.chdir(cfg.nbs_path)
    # `test_nb` (nbdev's own per-notebook runner) lives in an importable module, so worker processes
    # can unpickle it even after a notebook's shell has replaced `__main__`. Each result is printed as it
    # comes in, so a long run is never silent.
    passed = failed = 0
    def report(f, ok, secs):
        nonlocal passed, failed
        name = f.relative_to(cfg.config_path) if f.is_relative_to(cfg.config_path) else f
        print(f"{'PASS' if ok else 'FAIL'}  {name}  ({secs:.0f} s)", flush=True)
        passed, failed = passed + ok, failed + (not ok)
    exec(_INSTALL); test_notebook = sys.modules['rope_lit_test_worker'].test_notebook
    kw = dict(skip_flags=skip, force_flags=force, basepath=cfg.config_path, cell_timeout=args.cell_timeout)
    print(f"run_tests: {len(files)} notebooks, {max(n_workers, 1)} at a time", flush=True)
    if n_workers == 0:
        for f in files: report(f, *test_notebook(f, **kw))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        with ProcessPoolExecutor(n_workers, mp_context=multiprocessing.get_context('spawn'),
                                 initializer=exec, initargs=(_INSTALL,)) as pool:
            futures = {pool.submit(test_notebook, f, **kw): f for f in files}
            for fut in as_completed(futures): report(futures[fut], *fut.result())
    flags = f" (flags: {args.flags})" if args.flags else ''
    print(f"notebooks: {passed} passed, {failed} failed{flags}")
    sys.exit(0 if failed == 0 else 1)

if __name__ == '__main__': main()
