#!/usr/bin/env python
"""The version matrix: the transformers page's tests in throwaway environments, one per release pair.

  python tools/compat.py                      # the default matrix: oldest and newest allowed, and 5.17.0
  python tools/compat.py --pairs 5.0.0:1.0.0  # chosen pairs, TRANSFORMERS:ACCELERATE ('latest' allowed)
  python tools/compat.py --out nbs/hf_results/compat.csv

Each pair gets a fresh virtual environment (under .venv-compat/, ignored by git) with the same torch as the one
running this script, rope_lit installed from this checkout with its `dev` extra, and the pinned transformers and
accelerate; then `tools/run_tests.py` runs the transformers page and the page of its patch's steps in it. The table
printed last (and the CSV, if --out is given) says, per pair, the versions installed, whether the pages' tests
passed, and how long they took.
The oldest releases are the lower bounds in pyproject.toml: a bound is one this script has passed.
"""
import argparse, csv, datetime, subprocess, sys, time, venv
from pathlib import Path
from environments import lower_bounds   # every direct requirement's bound, read from pyproject.toml

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ['nbs/06_transformers.ipynb', 'nbs/06a_hf_patch.ipynb']   # tested together in each environment

def default_pairs()->list:
    low = lower_bounds()
    return [(low['transformers'], low['accelerate']), ('5.17.0', 'latest'), ('latest', 'latest')]

def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)

def check_pair(transformers:str, accelerate:str, torch_version:str)->dict:
    "Build the environment for one pair and run the transformers page's tests in it"
    name = f"{transformers}-{accelerate}".replace('latest', 'new')
    env_dir = ROOT / '.venv-compat' / name
    if env_dir.exists(): subprocess.run(['rm', '-rf', str(env_dir)], check=True)
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / 'bin' / 'python')
    pins = [f"transformers{'' if transformers == 'latest' else '==' + transformers}",
            f"accelerate{'' if accelerate == 'latest' else '==' + accelerate}"]
    start = time.time()
    setup = run([py, '-m', 'pip', 'install', '-q', f'torch=={torch_version}', '-e', '.[dev]', *pins], cwd=ROOT)
    row = {'transformers asked': transformers, 'accelerate asked': accelerate}
    if setup.returncode != 0:
        return {**row, 'transformers': '-', 'accelerate': '-', 'result': 'install failed',
                'seconds': round(time.time() - start), 'detail': setup.stderr.strip().splitlines()[-1:]}
    got = run([py, '-c', 'import transformers, accelerate; print(transformers.__version__, accelerate.__version__)'])
    versions = got.stdout.split()
    test = run([py, 'tools/run_tests.py', *NOTEBOOKS], cwd=ROOT)
    summary = next((l for l in test.stdout.splitlines() if l.startswith('notebooks:')), 'no summary')
    return {**row, 'transformers': versions[0] if versions else '?', 'accelerate': versions[1] if versions else '?',
            'result': 'passed' if test.returncode == 0 else 'failed', 'seconds': round(time.time() - start),
            'detail': summary if test.returncode == 0 else (test.stdout + test.stderr)[-600:].replace('\n', ' ')}

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--pairs', nargs='*', help="TRANSFORMERS:ACCELERATE versions (default: the matrix above)")
    ap.add_argument('--out', help='also write the table to this CSV file')
    args = ap.parse_args()
    import torch
    torch_version = torch.__version__.split('+')[0]
    pairs = [tuple(p.split(':')) for p in args.pairs] if args.pairs else default_pairs()
    rows = []
    for t, a in pairs:
        print(f"compat: transformers {t}, accelerate {a} ...", flush=True)
        rows.append(check_pair(t, a, torch_version))
        print(f"compat:   {rows[-1]['result']} ({rows[-1]['seconds']} s)", flush=True)
    date = datetime.date.today().isoformat()
    for r in rows: r.update(torch=torch_version, python='.'.join(map(str, sys.version_info[:2])), date=date)
    cols = ['transformers', 'accelerate', 'torch', 'python', 'result', 'seconds', 'date']
    print('| ' + ' | '.join(cols) + ' |\n|' + '---|' * len(cols))
    for r in rows: print('| ' + ' | '.join(str(r[c]) for c in cols) + ' |')
    if args.out:
        with open(args.out, 'w', newline='') as f:
            w = csv.DictWriter(f, fieldnames=cols + ['detail']); w.writeheader()
            for r in rows: w.writerow({c: r[c] for c in cols + ['detail']})
    failed = sum(r['result'] != 'passed' for r in rows)
    print(f"compat: {len(rows) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)

if __name__ == '__main__': main()
