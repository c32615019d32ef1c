#!/usr/bin/env python
"""Count the Triton kernel specialisations that a page's GPU cells would compile, on a CPU, and time compiling some.

Usage: python tools/triton_specialisations.py nbs/04_kernels.ipynb rope_lit.kernels [--compile-arch 90]

Triton compiles a kernel anew for every specialisation it meets: each set of compile-time constants, the dtypes
of the pointer arguments and whether each is 16-byte aligned, and whether each integer argument is 1 or divisible
by 16. This runs the page's `#| gpu` cells on the CPU (device 'cuda' read as 'cpu') with every launch of
rope_lit's Triton kernels recorded, not run, and the cells' checks switched off (the outputs are never computed),
and prints how many specialisations each cell meets. The count is a lower bound: a cell that needs CUDA itself
(torch.compile of a CUDA custom op) or that picks a CPU backend on CPU tensors meets none here.
With --compile-arch, a few of the recorded specialisations of the busiest kernel are compiled ahead of time for
that CUDA architecture (90: H100/H200) by Triton's own compiler, which needs no GPU, and the seconds are printed.
"""
import argparse, inspect, os, re, statistics, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).parent))
from run_gpu_cells import page_namespace

def _key(args, kwargs):
    "A launch's specialisation as Triton 3.x keys it"
    import torch
    def one(a):
        if isinstance(a, torch.Tensor): return (str(a.dtype), a.data_ptr() % 16 == 0)
        if isinstance(a, bool) or not isinstance(a, int): return repr(a)
        return ('int', a == 1, a % 16 == 0)
    return tuple(map(one, args)), tuple(sorted(kwargs.items()))

def record(module):
    "Replace each Triton kernel of `module` by a recorder: {kernel name: {key: (args, kwargs)}}"
    seen = {}
    for name, obj in list(vars(module).items()):
        if type(obj).__name__ not in ('JITFunction', 'InterpretedFunction') or not name.endswith('_kernel'):
            continue                                 # launched kernels only; helpers they call stay as they are
        seen[name] = {}
        class Recorder:
            def __getitem__(self, grid, name=name):
                def launch(*args, **kwargs): seen[name].setdefault(_key(args, kwargs), (args, kwargs))
                return launch
        setattr(module, name, Recorder())
    return seen

def _spec(arg_names, args, kwargs)->dict:
    "A recorded launch as what `triton.compile` needs: signature, constants, alignment attributes, options"
    import torch
    types = {torch.float32: '*fp32', torch.bfloat16: '*bf16', torch.float16: '*fp16', torch.float64: '*fp64',
             torch.int64: '*i64', torch.int32: '*i32'}
    sig, const, attrs = {}, [], []
    for i, (name, a) in enumerate(zip(arg_names, args)):
        if isinstance(a, torch.Tensor):
            sig[name] = types[a.dtype]
            if a.data_ptr() % 16 == 0: attrs.append(i)
        elif a == 1: sig[name] = 'constexpr'; const.append((i, 1))
        else:
            sig[name] = 'i32' if abs(a) < 2 ** 31 else 'i64'
            if a % 16 == 0: attrs.append(i)
    for k, v in kwargs.items():
        if k in arg_names: sig[k] = 'constexpr'; const.append((arg_names.index(k), v))
    return dict(sig=sig, const=const, attrs=attrs, opts={k: kwargs[k] for k in ('num_warps', 'num_stages') if k in kwargs})

def _compile_child(name:str, arch:int):
    "In a process without Triton's interpreter: compile each spec read from stdin (JSON), print the seconds (JSON)"
    import json, triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from rope_lit import triton_rope
    fn, out = getattr(triton_rope, name), []
    for spec in json.load(sys.stdin):
        src = ASTSource(fn, spec['sig'], constexprs={(i,): v for i, v in spec['const']},
                        attrs={(i,): [['tt.divisibility', 16]] for i in spec['attrs']})
        t = time.perf_counter()
        triton.compile(src, target=GPUTarget('cuda', arch, 32), options=spec['opts'])
        out.append(time.perf_counter() - t)
    print(json.dumps(out))

def compile_seconds(name:str, arg_names, launches, arch:int, n:int=6)->list:
    "Seconds to compile each of the first `n` recorded launches of kernel `name` for CUDA `arch`, ahead of time"
    import json, subprocess, tempfile
    env = {k: v for k, v in os.environ.items() if k != 'TRITON_INTERPRET'}
    with tempfile.TemporaryDirectory() as cache:            # a fresh Triton cache: every compile is a real one
        r = subprocess.run([sys.executable, __file__, '--compile-child', name, str(arch)], text=True,
                           capture_output=True, env={**env, 'TRITON_CACHE_DIR': cache},
                           input=json.dumps([_spec(arg_names, a, k) for a, k in launches[:n]]))
    if r.returncode: raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])

def main():
    if sys.argv[1:2] == ['--compile-child']: return _compile_child(sys.argv[2], int(sys.argv[3]))
    os.environ['TRITON_INTERPRET'] = '1'        # before Triton is imported: kernels run as Python, no GPU needed
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('notebook'); ap.add_argument('module')
    ap.add_argument('--compile-arch', type=int, default=None, help='also compile a few for this CUDA arch (90: Hopper)')
    args = ap.parse_args()
    import torch
    from rope_lit import triton_rope
    arg_names = {n: list(inspect.signature(getattr(o, 'fn', o)).parameters)
                 for n, o in vars(triton_rope).items() if type(o).__name__ in ('JITFunction', 'InterpretedFunction')}
    seen = record(triton_rope)
    off = lambda src: re.sub(r'\braise AssertionError\b', 'AssertionError', src)       # checks: off
    ns, gpu = page_namespace(args.notebook, args.module, transform=off)
    for name in ('test_eq', 'test_close', 'test_fail', 'test_ne'): ns[name] = lambda *a, **k: None
    torch.testing.assert_close = lambda *a, **k: None
    torch.cuda.is_available = lambda: True
    total = lambda: sum(map(len, seen.values()))
    for i, src in enumerate(gpu):
        src = re.sub(r'^(\s*)assert (.*)$', r'\1_ = (\2)', src, flags=re.M)
        src = src.replace("device='cuda'", "device='cpu'").replace('.cuda()', '.cpu()')
        before, why = total(), ''
        try: exec(compile(src, f'gpu cell {i}', 'exec'), ns)
        except Exception as e: why = f" (stopped: {type(e).__name__}: {str(e).splitlines()[0][:80]})"
        print(f"gpu cell {i}: {total() - before} new specialisations{why}")
    print(f"in all: {total()} specialisations ({', '.join(f'{n} {len(k)}' for n, k in seen.items())})")
    if args.compile_arch:
        name = max(seen, key=lambda n: len(seen[n]))
        s = compile_seconds(name, arg_names[name], list(seen[name].values()), args.compile_arch)
        print(f"compiling {len(s)} of {name}'s for sm_{args.compile_arch} here: first {s[0]:.2f} s (loads the "
              f"compiler), then median {statistics.median(s[1:]):.2f} s each")

if __name__ == '__main__': main()
