"""Host overhead of `RotaryEmbedding` on the CPU: the module against the kernel call it makes and a copy.

Methods, float32, hot inputs (the same q and k on every call):
  module  `rope(q, k)`, a `RotaryEmbedding` in its default (native kernel) backend
  kernel  `rotary_qk_native(q, k, cos, sin)` with the rows the module uses, `rope.cos_sin(seq)`
  floor   fwd: `q.clone(), k.clone()`; fwd+bwd: `copy_qk_autograd(q, k)` (one C++ autograd node that copies)
fwd runs under `torch.no_grad()`; fwd+bwd is `torch.autograd.grad(outputs, (q, k), output_grads)`.

Paired rounds: in each of `--rounds` rounds every method runs one loop of n calls, the methods in a rotating
order; n is the same for the three methods of a case, chosen so that the module's loop lasts about `--loop-ms`.
A method's time in a round is its loop's mean per call. Per case the CSV holds each method's median over the
rounds and the median (and quartiles) over the rounds of the differences taken within a round:
module - kernel and kernel - floor. Cases: the target shapes (1, 8, 512, 64) and (32, 32, 1, 128), both
pairings, fwd and fwd+bwd; and a sweep (1, 8, seq, 64), split halves, fwd, for seq in `--seqs`.

The environment is the one the process started with, as `rope_lit.bench.cpu_environment` names it: 'default'
(GLIBC_TUNABLES unset), 'glibc' (`CPU_TUNABLES`) or 'custom' (glibc reads GLIBC_TUNABLES only at start-up).

Usage, from the folder `nbs/` of the repository (ROOT, here `..`, is the folder that holds the `rope_lit` to time):
  python bench_results/cpu/host_overhead.py .. --both bench_results/cpu
      both environments, each in a fresh process (GLIBC_TUNABLES removed, then set to CPU_TUNABLES);
      writes host_overhead.csv and host_overhead_meta.json into bench_results/cpu
  python bench_results/cpu/host_overhead.py .. [--csv FILE] [--meta FILE]
      this process's environment only; the CSV goes to stdout unless --csv is given
"""
import argparse, csv, datetime, gc, json, os, platform, statistics, subprocess, sys, tempfile, time

TARGET_SHAPES = ((1, 8, 512, 64), (32, 32, 1, 128))
SWEEP_SEQS = (1, 4, 16, 64, 256, 512, 1024, 4096, 16384)
FIELDS = ('environment', 'shape', 'qk_bytes', 'pairing', 'mode', 'floor', 'calls_per_loop', 'rounds',
          'floor_us', 'kernel_us', 'module_us', 'module_minus_kernel_us', 'module_minus_kernel_q1_us',
          'module_minus_kernel_q3_us', 'kernel_minus_floor_us')
ENVIRONMENTS = ('default', 'glibc')


def _args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('root', help='folder holding the rope_lit package to time')
    ap.add_argument('--both', metavar='DIR', help='run both environments in fresh processes; write DIR/'
                    'host_overhead.csv and DIR/host_overhead_meta.json')
    ap.add_argument('--csv', help='one environment: write the CSV here (default: stdout)')
    ap.add_argument('--meta', help='one environment: write the run description (JSON) here')
    def at_least(low, kind=int):
        def parse(text):
            try: v = kind(text)
            except ValueError: raise argparse.ArgumentTypeError(f"expected a number >= {low}, got {text!r}")
            if v < low: raise argparse.ArgumentTypeError(f"expected a number >= {low}, got {text!r}")
            return v
        return parse
    ap.add_argument('--rounds', type=at_least(2), default=31, help='paired rounds per case, >= 2 (default 31)')
    ap.add_argument('--loop-ms', type=at_least(0.1, float), default=3.0, help="the module's loop length per round (default 3)")
    ap.add_argument('--seqs', type=at_least(1), nargs='+', default=SWEEP_SEQS, help='seq lengths of the sweep')
    return ap.parse_args(argv)


def _cpu():
    "CPU model, core count and the vector-extension flags that matter here"
    info = open('/proc/cpuinfo').read() if os.path.exists('/proc/cpuinfo') else ''
    line = lambda key: next((l.split(':', 1)[1].strip() for l in info.splitlines() if l.startswith(key)), '')
    flags = set(line('flags').split())
    return dict(cpu=line('model name') or platform.processor(), cores=os.cpu_count(),
                cpu_features=[f for f in ('avx2', 'fma', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_tile')
                              if f in flags])


def _loop(f, n, no_grad):
    "Mean seconds per call of `n` calls of `f`"
    import torch
    if no_grad:
        with torch.no_grad():
            t0 = time.perf_counter_ns()
            for _ in range(n): f()
            t1 = time.perf_counter_ns()
    else:
        t0 = time.perf_counter_ns()
        for _ in range(n): f()
        t1 = time.perf_counter_ns()
    return (t1 - t0) / n / 1e9


def _case(shape, interleaved, mode, rounds, loop_ms):
    "Times of the three methods at one case: {method: [seconds per call, one per round]}, n"
    import torch
    from rope_lit.rope import RotaryEmbedding
    from rope_lit.kernels import rotary_qk_native, native_kernel
    torch.manual_seed(0)
    B, H, S, D = shape
    rope = RotaryEmbedding(D, interleaved=interleaved)
    q, k = torch.randn(shape), torch.randn(shape)
    cos, sin = rope.cos_sin(S)                      # the same rows the module passes on
    if mode == 'fwd':
        fns = dict(floor=lambda: (q.clone(), k.clone()),
                   kernel=lambda: rotary_qk_native(q, k, cos, sin, interleaved=interleaved),
                   module=lambda: rope(q, k))
    else:
        qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
        grads = (torch.randn(shape), torch.randn(shape))
        grad = lambda f: (lambda: torch.autograd.grad(f(), (qg, kg), grads))
        copy_qk = native_kernel().copy_qk_autograd
        fns = dict(floor=grad(lambda: copy_qk(qg, kg)),
                   kernel=grad(lambda: rotary_qk_native(qg, kg, cos, sin, interleaved=interleaved)),
                   module=grad(lambda: rope(qg, kg)))
    return paired_times(fns, rounds, loop_ms, no_grad=mode == 'fwd')


def paired_times(fns:dict, rounds:int, loop_ms:float, no_grad:bool):
    "Paired rounds of the methods `fns` (name: call; one named 'module'): {name: [s per call, per round]}, n"
    for f in fns.values(): _loop(f, 3, no_grad)     # first calls: plans, caches, allocator
    m = 1                                          # calibrate on the module: a loop of about loop_ms
    while _loop(fns['module'], m, no_grad) * m < 1e-3 and m < 1 << 16: m *= 4
    t = min(_loop(fns['module'], m, no_grad) for _ in range(5))   # the least: a stall can't inflate it
    n = max(1, round(loop_ms * 1e-3 / t))
    names, times = list(fns), {name: [] for name in fns}
    for f in fns.values(): _loop(f, n, no_grad)     # one untimed round
    gc.disable()
    try:
        for r in range(rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:       # rotating order
                times[name].append(_loop(fns[name], n, no_grad))
    finally: gc.enable()
    return times, n


def measure(rounds=31, loop_ms=3.0, seqs=SWEEP_SEQS):
    "Rows of the CSV for this process's environment"
    import torch
    from rope_lit.bench import cpu_environment
    env = cpu_environment()   # 'default', 'glibc' or 'custom'
    cases = [(shape, pairing, mode) for shape in TARGET_SHAPES for pairing in ('split', 'interleaved')
             for mode in ('fwd', 'fwd+bwd')]
    cases += [c for c in (((1, 8, s, 64), 'split', 'fwd') for s in seqs) if c not in cases]
    us = lambda s: round(s * 1e6, 2)
    rows = []
    for shape, pairing, mode in cases:
        times, n = _case(shape, pairing == 'interleaved', mode, rounds, loop_ms)
        gap = [a - b for a, b in zip(times['module'], times['kernel'])]     # within a round
        q1, _, q3 = statistics.quantiles(gap, n=4)
        rows.append(dict(
            environment=env, shape='x'.join(map(str, shape)), qk_bytes=2 * 4 * torch.Size(shape).numel(),
            pairing=pairing, mode=mode, floor='clone' if mode == 'fwd' else 'copy_qk_autograd',
            calls_per_loop=n, rounds=rounds,
            **{f'{name}_us': us(statistics.median(ts)) for name, ts in times.items()},
            module_minus_kernel_us=us(statistics.median(gap)), module_minus_kernel_q1_us=us(q1),
            module_minus_kernel_q3_us=us(q3),
            kernel_minus_floor_us=us(statistics.median(
                a - b for a, b in zip(times['kernel'], times['floor'])))))
    return rows


def _write_csv(rows, fh):
    w = csv.DictWriter(fh, fieldnames=FIELDS, lineterminator='\n'); w.writeheader(); w.writerows(rows)


def _now(): return datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')


def one_environment(args):
    "Measure in this process; CSV to --csv or stdout, the run's description to --meta"
    sys.path.insert(0, os.path.abspath(args.root))
    import torch, rope_lit
    assert rope_lit.__file__.startswith(os.path.abspath(args.root)), rope_lit.__file__
    from rope_lit.bench import CPU_TUNABLES
    meta = dict(date_start=_now(), load_average_before=[round(x, 2) for x in os.getloadavg()])
    if meta['load_average_before'][0] > 0.5 * (os.cpu_count() or 1):
        print(f"host_overhead: note: load average {meta['load_average_before'][0]} at the start; other work "
              "on the machine stretches these times (two threads wait for each other)", file=sys.stderr)
    rows = measure(args.rounds, args.loop_ms, args.seqs)
    meta.update(date_end=_now(), load_average_after=[round(x, 2) for x in os.getloadavg()],
                environment=rows[0]['environment'], GLIBC_TUNABLES=os.environ.get('GLIBC_TUNABLES'),
                **_cpu(), torch=torch.__version__, torch_threads=torch.get_num_threads(),
                python=platform.python_version(), rounds=args.rounds, loop_ms=args.loop_ms)
    if args.csv:
        with open(args.csv, 'w', newline='') as fh: _write_csv(rows, fh)
    else: _write_csv(rows, sys.stdout)
    if args.meta:
        with open(args.meta, 'w') as fh: fh.write(json.dumps(meta, indent=1) + '\n')


def both_environments(args):
    "One fresh process per environment; merged CSV and description in the folder --both"
    sys.path.insert(0, os.path.abspath(args.root))
    from rope_lit.bench import CPU_TUNABLES
    rows, metas = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for env_name in ENVIRONMENTS:
            env = {k: v for k, v in os.environ.items() if k != 'GLIBC_TUNABLES'}
            if env_name == 'glibc': env['GLIBC_TUNABLES'] = CPU_TUNABLES
            out_csv, out_meta = os.path.join(tmp, env_name + '.csv'), os.path.join(tmp, env_name + '.json')
            subprocess.run([sys.executable, os.path.abspath(__file__), args.root, '--csv', out_csv,
                            '--meta', out_meta, '--rounds', str(args.rounds), '--loop-ms', str(args.loop_ms),
                            '--seqs', *map(str, args.seqs)], env=env, check=True)
            with open(out_csv) as fh: part = list(csv.DictReader(fh))
            assert {r['environment'] for r in part} == {env_name}, (env_name, part[0]['environment'])
            rows += part
            metas[env_name] = json.load(open(out_meta))
    os.makedirs(args.both, exist_ok=True)
    with open(os.path.join(args.both, 'host_overhead.csv'), 'w', newline='') as fh: _write_csv(rows, fh)
    command = 'python ' + ' '.join([os.path.relpath(os.path.abspath(__file__))] + sys.argv[1:])
    with open(os.path.join(args.both, 'host_overhead_meta.json'), 'w') as fh:
        fh.write(json.dumps(dict(command=command, environments=metas), indent=1) + '\n')


if __name__ == '__main__':
    args = _args()
    both_environments(args) if args.both else one_environment(args)
