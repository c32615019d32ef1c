"""Where `RotaryEmbedding`'s extra time over its kernel goes, forward+backward, on the CPU: the gap module - kernel
timed for several kinds of call, in the paired rounds of host_overhead.py (`paired_times`: same n for both, a loop
of about 3 ms, alternating order, gc off), float32, split halves, hot inputs, the environment this process has:
  fwd, no_grad     `rope(q, k)` against `rotary_qk_native(q, k, cos, sin)` under `torch.no_grad()`
  fwd, grad mode   the same calls on q, k that require grad, the outputs dropped (no backward)
  bwd only         `torch.autograd.grad(outputs, (q, k), grads, retain_graph=True)` on outputs made once
                   by each (the same autograd node, so the same work)
  fwd+bwd          `torch.autograd.grad(f(), (q, k), grads)`, as host_overhead.py's fwd+bwd rows
and, against the bare kernel call the module makes (`native_qk_direct`, no argument handling) instead of
`rotary_qk_native`: "fwd, no_grad, direct" and "fwd+bwd, direct". Per case: the median and quartiles over the
rounds of module - kernel within a round, and each one's median.

Usage, from `nbs/`: python bench_results/cpu/host_overhead_parts.py .. [--rounds 1001] > bench_results/cpu/epyc/host_overhead_parts.json
"""
import argparse, datetime, json, os, statistics, sys

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument('root', help='folder holding the rope_lit package to time')
ap.add_argument('--rounds', type=int, default=1001, help='paired rounds per case (default 1001)')
args = ap.parse_args()
if args.rounds < 2: sys.exit(f"--rounds must be >= 2, got {args.rounds}")
sys.path.insert(0, os.path.abspath(args.root))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
torch.set_num_threads(2)
from host_overhead import paired_times, _cpu
from rope_lit.rope import RotaryEmbedding
from rope_lit.kernels import rotary_qk_native, native_qk_direct
from rope_lit.bench import cpu_environment

us = lambda s: round(s * 1e6, 2)


def gap(fns, no_grad):
    "Paired rounds of {'module': ..., 'kernel': ...}: module - kernel (median, quartiles) and medians, µs"
    times, n = paired_times(fns, args.rounds, 3.0, no_grad)
    d = [a - b for a, b in zip(times['module'], times['kernel'])]
    q1, _, q3 = statistics.quantiles(d, n=4)
    return dict(calls_per_loop=n, module_us=us(statistics.median(times['module'])),
                kernel_us=us(statistics.median(times['kernel'])), gap_us=us(statistics.median(d)),
                gap_q1_us=us(q1), gap_q3_us=us(q3))


bare = native_qk_direct(False)
if bare is None: sys.exit("the native kernel cannot be built here")
out = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
           command=f"python bench_results/cpu/host_overhead_parts.py .. --rounds {args.rounds}",
           environment=cpu_environment(), **_cpu(), torch=torch.__version__,
           torch_threads=torch.get_num_threads(), rounds=args.rounds,
           load_average_before=[round(x, 2) for x in os.getloadavg()], cases={})
for shape in ((1, 8, 512, 64), (32, 32, 1, 128)):
    torch.manual_seed(0)
    rope = RotaryEmbedding(shape[-1])
    q, k = torch.randn(shape), torch.randn(shape)
    qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
    grads = (torch.randn(shape), torch.randn(shape))
    cos, sin = rope.cos_sin(shape[2])                    # the rows the module passes on
    kern = lambda a, b: rotary_qk_native(a, b, cos, sin)
    om, ok = rope(qg, kg), kern(qg, kg)                  # outputs for the backward-only case
    grad = lambda f: (lambda: torch.autograd.grad(f(), (qg, kg), grads))
    again = lambda o: (lambda: torch.autograd.grad(o, (qg, kg), grads, retain_graph=True))
    out['cases']['x'.join(map(str, shape))] = {
        'fwd, no_grad': gap(dict(module=lambda: rope(q, k), kernel=lambda: kern(q, k)), True),
        'fwd, grad mode': gap(dict(module=lambda: rope(qg, kg), kernel=lambda: kern(qg, kg)), False),
        'bwd only': gap(dict(module=again(om), kernel=again(ok)), False),
        'fwd+bwd': gap(dict(module=grad(lambda: rope(qg, kg)), kernel=grad(lambda: kern(qg, kg))), False),
        'fwd, no_grad, direct': gap(dict(module=lambda: rope(q, k), kernel=lambda: bare(q, k, cos, sin)), True),
        'fwd+bwd, direct': gap(dict(module=grad(lambda: rope(qg, kg)),
                                    kernel=grad(lambda: bare(qg, kg, cos, sin))), False)}
out['load_average_after'] = [round(x, 2) for x in os.getloadavg()]
print(json.dumps(out, indent=1))
