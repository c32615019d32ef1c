"""A/B in one process: a torch.compile'd CPU model whose rotation is the native kernel as an operator
(rope_lit::native_rotary_qk, now) against the same model whose rotation the compiler traces as the plain formula
(before the operator existed; rope_lit's `compiled` backend still does that).

Run from nbs/, with the benchmark page's allocator settings:
  GLIBC_TUNABLES=$CPU_TUNABLES python bench_results/cpu/compiled_native_ab.py   (writes compiled_native_ab.csv beside it)
"""
import datetime, os, platform, statistics, sys, time
from pathlib import Path
import torch
from rope_lit.attention import RotaryMultiHeadAttention
from rope_lit.rope import RotaryEmbedding

def cpu_name():
    try: return next(l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name'))
    except (OSError, StopIteration): return platform.processor()

def rotation(backend, B=1, H=32, S=2048, D=128):
    rope = RotaryEmbedding(D, max_seq_len=S, backend=backend)
    q, k = torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    f = torch.compile(lambda q, k: rope(q, k), fullgraph=True)
    return lambda: f(q, k)

def attention_step(backend, B=4, S=512, d=512, h=8):
    torch.manual_seed(0)
    m = RotaryMultiHeadAttention(d, h, max_seq_len=S, backend=backend)
    x = torch.randn(B, S, d)
    f = torch.compile(m, fullgraph=True)
    def step():
        m.zero_grad(set_to_none=True)
        f(x, is_causal=True).sum().backward()
    return step

def main(rounds=41):
    torch.manual_seed(0)
    rows = []
    for name, make in (('rotation, forward (1, 32, 2048, 128)', rotation),
                       ('attention block, forward+backward (4, 512, 512), 8 heads', attention_step)):
        fns = {'traced formula (before)': make('compiled'), 'native operator (now)': make('native')}
        for fn in fns.values():
            for _ in range(3): fn()                         # compile and warm up
        times = {v: [] for v in fns}
        for r in range(rounds):                             # round-robin: drift hits both alike
            for v in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                t0 = time.perf_counter(); fns[v](); times[v].append(time.perf_counter() - t0)
        before, now = (statistics.median(times[v]) for v in fns)
        ratios = [a / b for a, b in zip(*times.values())]   # round by round: before / now
        rows.append(dict(case=name, before_ms=1e3 * before, now_ms=1e3 * now,
                         speedup=statistics.median(ratios), rounds=rounds, threads=torch.get_num_threads(),
                         cpu=cpu_name(), torch=torch.__version__,
                         date=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')))
        print(rows[-1], flush=True)
    import csv
    out = Path(__file__).with_suffix('.csv')
    with open(out, 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)

if __name__ == '__main__': main()
