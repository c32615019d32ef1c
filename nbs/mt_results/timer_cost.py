"""What `ProductTimer` counts beyond the profiler's self time of the products, two measurements:
- call_us: one 1 x 1 `torch.mm` timed by `ProductTimer` (its seconds / calls) against the same call in a plain Python
  loop (5,000 calls each, best of 5);
- inside_products_ms: in the small translation model's training step, the time of the operators the profiler records
  inside a product's call (its total minus its self time, per product operator), per step, after 3 steps of the
  profiler's own warm-up (so without the page faults of its first steps).
argv[1]: the folder holding rope_lit; argv[2]: the JSON file to write. From `nbs/`:
`python mt_results/timer_cost.py .. mt_results/timer_cost.json`.
"""
import sys, os, json, time, platform
sys.path.insert(0, sys.argv[1])
import torch
import rope_lit.translation.results as R
from rope_lit.translation.train import tune_cpu_malloc
assert R.__file__.startswith(os.path.abspath(sys.argv[1])), R.__file__
torch.set_num_threads(2)
tune_cpu_malloc()
out = dict(date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), torch=torch.__version__, threads=2,
           cpu=next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')),
                    platform.machine()), load_before=os.getloadavg()[0])
a, b, n = torch.randn(1, 1), torch.randn(1, 1), 5000
timed, plain = [], []
for _ in range(5):
    with R.ProductTimer() as t:
        for _ in range(n): torch.mm(a, b)
    timed.append(t.seconds / t.calls)
    t0 = time.perf_counter()
    for _ in range(n): torch.mm(a, b)
    plain.append((time.perf_counter() - t0) / n)
out['call_us'] = dict(product_timer=min(timed) * 1e6, plain_loop=min(plain) * 1e6)

from torch.profiler import profile, ProfilerActivity, schedule
step = R._training_step(vocab_size=8000, batch=32, src_len=20, tgt_len=20, position='sinusoidal',
                        N=3, d_model=256, d_ff=1024, h=4)
for _ in range(3): step()
box = []
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=3, active=3),
             on_trace_ready=lambda p: box.append(p.key_averages())) as prof:
    for _ in range(6): step(); prof.step()
PROFILED = ('aten::mm', 'aten::addmm', 'aten::addmm_', 'aten::bmm', 'aten::baddbmm')
out['inside_products_ms'] = {e.key[6:]: (e.cpu_time_total - e.self_cpu_time_total) / 3e3
                             for e in box[0] if e.key in PROFILED}
out['products_self_ms'] = sum(e.self_cpu_time_total for e in box[0] if e.key in PROFILED) / 3e3
out['load_after'] = os.getloadavg()[0]
json.dump(out, open(sys.argv[2], 'w'), indent=1)
print(json.dumps(out, indent=1))
