#!/usr/bin/env python
"""The oldest and the newest world rope_lit claims: the whole test suite in two throwaway environments.

  python tools/environments.py                 # both environments
  python tools/environments.py --only oldest
  python tools/environments.py --out nbs/compat_results/environments.csv   # rows of the others kept

- **oldest**: the oldest Python that pyproject.toml allows (`requires-python`), and for every dependency the lowest
  release its bounds allow (uv's `--resolution lowest-direct`), with the `dev` and `triton` extras (the oldest
  torch's CUDA build pins the same Triton), so the CUDA kernels' tests run under Triton's interpreter there too.
  The environment fails unless every direct requirement's lower bound (the library's, and those of the
  `experiments`, `dev` and `triton` extras that apply to this platform) is the release installed: a bound another
  package lifts (nbdev lifting fastcore, say) was never tested. The `bench` extra's liger-kernel runs only on CUDA
  and is not checked.
- **newest**: the newest Python found here, and today's releases of everything (`.[dev,triton]`, torch unpinned:
  PyPI's CUDA build, which runs on the CPU when there is no GPU).

Each environment is made fresh under .venv-compat/ (ignored by git) with uv (installed with pip if missing),
rope_lit installed from this checkout in editable mode; then the README's test command, `python tools/run_tests.py`,
runs in it (its output kept in .venv-compat/<name>/tests.log), with ROPE_LIT_WRITING_ENVIRONMENTS=1 so that the
index page leaves its checks of this table (the previous run's, which this run rewrites) to the next test run.
The table printed last (and the CSV, if --out is given) gives per environment the versions installed, the
notebooks passed and failed, and how long the install and the tests took. About 3 minutes of install and 10 of
tests each on a 2-core machine; each environment takes about 6 GB of disk (the CUDA build of torch).
"""
import argparse, csv, datetime, glob, os, platform, re, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ['torch', 'triton', 'numpy', 'transformers', 'accelerate', 'nbdev', 'fastcore']
EXTRAS = ['experiments', 'dev', 'triton']   # the extras whose lower bounds the oldest environment tests

def lower_bounds()->dict:
    "Each direct requirement's lower bound, {name: 'X'} from 'name>=X', over the library and EXTRAS (this platform's)"
    try:
        import tomllib
        from packaging.requirements import Requirement
        from packaging.utils import canonicalize_name
    except ImportError as e:
        sys.exit(f"environments: needs Python 3.11 or later (tomllib) and `packaging` ({e}): "
                 "run it from the dev environment")
    project = tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']
    reqs = project['dependencies'] + [r for e in EXTRAS for r in project['optional-dependencies'][e]]
    bounds = {}
    for text in reqs:
        req = Requirement(text)
        if canonicalize_name(req.name) == canonicalize_name(project['name']): continue   # an extra naming another
        if req.marker is not None and not req.marker.evaluate(): continue   # not for this platform: not installed
        low = [s.version for s in req.specifier if s.operator == '>=']
        if not low: sys.exit(f"environments: pyproject.toml's {text!r} has no lower bound (name>=X)")
        bounds[req.name] = low[0]
    return bounds

def bounds_missed(installed:dict, bounds:dict)->list:
    "'name>=X (installed Y)' for each lower bound that is not the release installed (local tags like '+cpu' aside)"
    from packaging.version import Version
    return [f"{name}>={low} (installed {installed.get(name, '-')})" for name, low in bounds.items()
            if installed.get(name, '-') == '-' or Version(Version(installed[name]).public) != Version(low)]

def oldest_python_claimed()->str:
    "The minor version `requires-python` starts at, e.g. '3.10'"
    m = re.search(r'requires-python\s*=\s*">=\s*(3\.\d+)', (ROOT / 'pyproject.toml').read_text())
    if not m: sys.exit("environments: pyproject.toml has no requires-python lower bound")
    return m.group(1)

def find_python(minor:str)->str|None:
    "An interpreter of that minor version: `python3.X` on PATH, else one of pyenv's"
    for cand in [shutil.which(f'python{minor}')] + sorted(glob.glob(os.path.expanduser(f'~/.pyenv/versions/{minor}.*/bin/python'))):
        if cand and subprocess.run([cand, '-c', 'pass'], capture_output=True).returncode == 0: return cand
    return None

def newest_python()->tuple:
    "The newest Python 3 found here (3.10 to 3.14), as (minor, path)"
    for minor in ['3.14', '3.13', '3.12', '3.11', '3.10']:
        if (p := find_python(minor)): return minor, p
    sys.exit("environments: no Python 3.10 or newer found")

def cpu_name()->str:
    "The CPU's model name, as /proc/cpuinfo gives it (else platform's guess)"
    try:
        with open('/proc/cpuinfo') as f: line = next(l for l in f if l.startswith('model name'))
    except (OSError, StopIteration): return platform.processor() or platform.machine()
    return ' '.join(line.split(':', 1)[1].split())

def gpu_name()->str:
    "The first GPU nvidia-smi names, or 'no GPU'"
    if not shutil.which('nvidia-smi'): return 'no GPU'
    r = subprocess.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'], capture_output=True, text=True)
    return (r.stdout.strip().splitlines() or ['no GPU'])[0] if r.returncode == 0 else 'no GPU'

def uv()->str:
    "uv's executable, installed with pip into this interpreter's environment if it is missing"
    if (u := shutil.which('uv')): return u
    subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', 'uv'], check=True)
    return shutil.which('uv') or str(Path(sys.executable).parent / 'uv')

def build(name:str, python:str, install:list)->tuple:
    "A fresh environment .venv-compat/<name> with `install` (uv pip arguments) in it; (its python, seconds, error)"
    env_dir = ROOT / '.venv-compat' / name
    if env_dir.exists(): shutil.rmtree(env_dir)
    start = time.time()
    made = subprocess.run([uv(), 'venv', '-q', '-p', python, str(env_dir)], capture_output=True, text=True)
    py = str(env_dir / 'bin' / 'python')
    # uv does not read pip's configuration: a pip constraint file on this machine does not cap its torch
    got = made if made.returncode else subprocess.run([uv(), 'pip', 'install', '-q', '-p', py, *install],
                                                      capture_output=True, text=True, cwd=ROOT)
    error = ' / '.join(got.stderr.strip().splitlines()[-4:] or ['?']) if got.returncode else ''
    return py, round(time.time() - start), error

def versions(py:str, names:list)->dict:
    "The versions of `names` (distributions) and of Python in that environment"
    code = ("import importlib.metadata as m, sys\n"
            f"for p in {names!r}:\n"
            "    try: print(p, m.version(p))\n"
            "    except m.PackageNotFoundError: print(p, '-')\n"
            "print('python', '.'.join(map(str, sys.version_info[:3])))")
    out = subprocess.run([py, '-c', code], capture_output=True, text=True).stdout
    return dict(line.split(' ', 1) for line in out.splitlines() if ' ' in line)

def test(py:str)->tuple:
    "The README's test command in that environment, activated: (passed, summary line, failed notebooks, seconds)"
    env_dir = Path(py).parents[1]
    # as `source bin/activate` would: the notebooks' own commands (rope-lit-bench, python3, ninja) from this environment
    env = {**os.environ, 'VIRTUAL_ENV': str(env_dir), 'PATH': f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           'ROPE_LIT_WRITING_ENVIRONMENTS': '1'}   # the index page's checks of the table this run is about to rewrite wait
    env.pop('PYTHONHOME', None)
    start = time.time()
    r = subprocess.run([py, 'tools/run_tests.py'], capture_output=True, text=True, cwd=ROOT, env=env)
    (Path(py).parents[1] / 'tests.log').write_text(r.stdout + r.stderr)   # the failures' tracebacks
    summary = next((l for l in reversed(r.stdout.splitlines()) if l.startswith('notebooks:')), 'no summary')
    failed = [l.split()[1] for l in r.stdout.splitlines() if l.startswith('FAIL ')]
    passed = r.returncode == 0 and not failed and ' 0 failed' in summary
    return passed, summary, failed, round(time.time() - start)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--only', choices=['oldest', 'newest'], help='build and test one environment only')
    ap.add_argument('--out', help='also write the table to this CSV file')
    args = ap.parse_args()
    low_minor = oldest_python_claimed()
    low_py = find_python(low_minor)
    high_py = newest_python()[1]
    plans = {'oldest': (low_py, ['--resolution', 'lowest-direct', '-e', '.[dev,triton]']),
             'newest': (high_py, ['--resolution', 'highest', 'torch', '-e', '.[dev,triton]'])}
    if low_py is None: sys.exit(f"environments: no Python {low_minor} here for the oldest environment")
    bounds = lower_bounds()
    names = list(dict.fromkeys(PACKAGES + list(bounds)))   # the CSV's package columns: every direct requirement
    rows = []
    for name, (python, install) in plans.items():
        if args.only and name != args.only: continue
        print(f"environments: {name}: building ({python}) ...", flush=True)
        py, setup_s, error = build(name, python, install)
        row = {'environment': name, 'install_s': setup_s}
        if error:
            rows.append({**row, 'result': 'install failed', 'detail': error}); print(f"environments:   {error}"); continue
        row.update(versions(py, names))
        print(f"environments: {name}: " + ', '.join(f"{p} {row.get(p, '-')}" for p in ['python'] + PACKAGES), flush=True)
        missed = bounds_missed(row, bounds) if name == 'oldest' else []
        if missed: print(f"environments: {name}: lower bounds not installed: {'; '.join(missed)}", flush=True)
        passed, summary, failed, test_s = test(py)
        row.update(result='passed' if passed and not missed else 'failed', tests=summary.split(': ', 1)[-1],
                   test_s=test_s, detail=' '.join(failed + [f"lower bound not installed: {m}" for m in missed]))
        print(f"environments: {name}: {summary} ({test_s} s)", flush=True)
        rows.append(row)
    date, machine = datetime.date.today().isoformat(), f"{cpu_name()}, {os.cpu_count()} cores, {gpu_name()}"
    cols = ['environment', 'python'] + names + ['result', 'tests', 'install_s', 'test_s', 'date', 'machine', 'detail']
    for r in rows: r.update(date=date, machine=machine)
    print('| ' + ' | '.join(cols) + ' |\n|' + '---|' * len(cols))
    for r in rows: print('| ' + ' | '.join(str(r.get(c, '-')) for c in cols) + ' |')
    if args.out:   # the rows of environments not built this time stay as they were
        out = Path(args.out); out.parent.mkdir(parents=True, exist_ok=True)
        kept = [r for r in csv.DictReader(open(out))] if out.exists() else []
        built = {r['environment'] for r in rows}
        order = lambda r: list(plans).index(r['environment']) if r['environment'] in plans else len(plans)
        table = sorted([r for r in kept if r['environment'] not in built] + rows, key=order)
        fields = cols + [c for r in kept for c in r if c not in cols]
        with open(out, 'w', newline='') as f:
            w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(fields))); w.writeheader()
            for r in table: w.writerow({c: r.get(c, '-') for c in dict.fromkeys(fields)})
    failed = sum(r.get('result') != 'passed' for r in rows)
    print(f"environments: {len(rows) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)

if __name__ == '__main__': main()
