"""Where `RotaryEmbedding`'s extra time over its kernel goes, forward+backward, on the CPU: the gap module - kernel
timed for four kinds of call, in paired rounds (as host_overhead.py does), float32, split halves, hot inputs:
  fwd, no_grad     `rope(q, k)` against `rotary_qk_native(q, k, cos, sin)` under `torch.no_grad()`
  fwd, grad mode   the same calls on q, k that require grad, the outputs dropped (no backward)
  bwd only         `torch.autograd.grad(outputs, (q, k), grads, retain_graph=True)` on outputs made once
                   by each (the same autograd node, so the same work)
  fwd+bwd          `torch.autograd.grad(f(), (q, k), grads)`, as host_overhead.py's fwd+bwd rows
and, against the bare kernel call the module makes (`native_qk_direct`, no argument handling) instead of
`rotary_qk_native`: "fwd, no_grad, direct" and "fwd+bwd, direct".
Per round each method runs one loop of n calls (n the same for both, a loop of about 3 ms), the order alternating;
the gap is the median over the rounds of the module's time per call less the kernel's in the same round.

Usage, from `nbs/`: python bench_results/cpu/host_overhead_parts.py .. [--rounds 301] > bench_results/cpu/host_overhead_parts.json
"""
import argparse, datetime, json, os, platform, statistics, sys, time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument('root', help='folder holding the rope_lit package to time')
ap.add_argument('--rounds', type=int, default=301, help='paired rounds per case (default 301)')
args = ap.parse_args()
if args.rounds < 2: sys.exit(f"--rounds must be >= 2, got {args.rounds}")
sys.path.insert(0, os.path.abspath(args.root))
import torch
torch.set_num_threads(2)
from rope_lit.rope import RotaryEmbedding
from rope_lit.kernels import rotary_qk_native, native_qk_direct


def loop(f, n):
    t = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t) / n * 1e6


def paired(module, kernel, rounds):
    "Median and quartiles over rounds of module - kernel (µs per call), and each one's median"
    for f in (module, kernel): loop(f, 20)
    n = 1
    while loop(module, n) * n < 3e3 and n < 1 << 16: n *= 2      # a loop of about 3 ms
    gaps, tm, tk = [], [], []
    for r in range(rounds):
        if r % 2: a = loop(module, n); b = loop(kernel, n)
        else: b = loop(kernel, n); a = loop(module, n)
        gaps.append(a - b); tm.append(a); tk.append(b)
    q1, _, q3 = statistics.quantiles(gaps, n=4)
    return dict(calls_per_loop=n, module_us=round(statistics.median(tm), 2),
                kernel_us=round(statistics.median(tk), 2), gap_us=round(statistics.median(gaps), 2),
                gap_q1_us=round(q1, 2), gap_q3_us=round(q3, 2))


out = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
           command=f"python bench_results/cpu/host_overhead_parts.py .. --rounds {args.rounds}",
           cpu=next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')),
                    platform.machine()) if os.path.exists('/proc/cpuinfo') else platform.machine(),
           cores=os.cpu_count(), torch=torch.__version__,
           torch_threads=torch.get_num_threads(), rounds=args.rounds,
           load_average_before=[round(x, 2) for x in os.getloadavg()], cases={})
for shape in ((1, 8, 512, 64), (32, 32, 1, 128)):
    rope = RotaryEmbedding(shape[-1])
    q, k = torch.randn(shape), torch.randn(shape)
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    grads = (torch.randn(shape), torch.randn(shape))
    cos, sin = rope.cos_sin(shape[2])
    rope(q, k)                                          # the module's plan for this shape, made once
    kern = lambda a, b: rotary_qk_native(a, b, cos, sin)
    bare = native_qk_direct(False)
    if bare is None: sys.exit("the native kernel cannot be built here")
    om, ok = rope(qg, kg), kern(qg, kg)                 # outputs for the backward-only case
    with torch.no_grad():
        nograd = paired(lambda: rope(q, k), lambda: kern(q, k), args.rounds)
    cases = {'fwd, no_grad': nograd,
             'fwd, grad mode': paired(lambda: rope(qg, kg), lambda: kern(qg, kg), args.rounds),
             'bwd only': paired(lambda: torch.autograd.grad(om, (qg, kg), grads, retain_graph=True),
                                lambda: torch.autograd.grad(ok, (qg, kg), grads, retain_graph=True),
                                args.rounds),
             'fwd+bwd': paired(lambda: torch.autograd.grad(rope(qg, kg), (qg, kg), grads),
                               lambda: torch.autograd.grad(kern(qg, kg), (qg, kg), grads), args.rounds)}
    with torch.no_grad():
        cases['fwd, no_grad, direct'] = paired(lambda: rope(q, k), lambda: bare(q, k, cos, sin), args.rounds)
    cases['fwd+bwd, direct'] = paired(lambda: torch.autograd.grad(rope(qg, kg), (qg, kg), grads),
                                      lambda: torch.autograd.grad(bare(qg, kg, cos, sin), (qg, kg), grads),
                                      args.rounds)
    out['cases']['x'.join(map(str, shape))] = cases
out['load_average_after'] = [round(x, 2) for x in os.getloadavg()]
print(json.dumps(out, indent=1))
