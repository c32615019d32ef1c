"""Time the training loss of the translation model with its rows in C++ and in PyTorch operations; quoted on the model
page. argv[1]: folder holding rope_lit, argv[2]: the JSON file to write. Run from `nbs/`:
`python mt_results/loss_rows_probe.py .. mt_results/loss_rows.json`.

`linear_smoothed_ce` forward and backward (label smoothing 0.1, the step's gradient scale 1/640) on 640 rows of width
256 and a vocabulary of 8,000 (the small model's batch of 32 × 20 target tokens), with `native=True` (the C++
`smoothed_ce_rows`) and `native=False` (PyTorch operations), alternating, best of 7 repeats of 10 calls each; and the
loss's three matrix products alone (logits, and the gradients of the hidden states and of E), chunk by chunk as it makes
them.
Written for rope_lit as it was on 2026-11-24 (argv[1] must hold that version): `linear_smoothed_ce` has since
been replaced by the loss in one pass of `rope_lit.translation.fast`, so it does not import later versions.
"""
import sys, json, time, timeit, platform, os
sys.path.insert(0, sys.argv[1])
import torch
import rope_lit
assert rope_lit.__file__.startswith(os.path.abspath(sys.argv[1])), rope_lit.__file__
from rope_lit.translation.model import linear_smoothed_ce, native_decoder
from rope_lit.translation.train import tune_cpu_malloc
torch.set_num_threads(2)
tune_cpu_malloc()
assert native_decoder() is not None, "the C++ rows could not be built"
out = dict(date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), torch=torch.__version__, threads=2,
           cpu=next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')),
                    platform.machine()), load_before=os.getloadavg()[0], rows=640, d=256, vocab=8000)
torch.manual_seed(0)
h, w = torch.randn(640, 256, requires_grad=True), (torch.randn(8000, 256) * 0.06).requires_grad_()
t = torch.randint(4, 8000, (640,))
def loss(native):
    return lambda: linear_smoothed_ce(h, w, t, 0.1, grad_scale=1 / 640, native=native).backward()
def products():
    with torch.no_grad():
        for s in range(0, 640, 131):   # the loss's chunks of rows
            z = h[s:s + 131] @ w.T
            torch.mm(z, w); torch.mm(z.T, h[s:s + 131])
best = {k: [] for k in ('cpp_rows_ms', 'pytorch_rows_ms', 'products_ms')}
fns = dict(cpp_rows_ms=loss(True), pytorch_rows_ms=loss(False), products_ms=products)
for f in fns.values(): f()                       # warm up
for _ in range(7):
    for k, f in fns.items(): best[k].append(timeit.timeit(f, number=10) / 10 * 1e3)
out.update({k: min(v) for k, v in best.items()})
out['load_after'] = os.getloadavg()[0]
json.dump(out, open(sys.argv[2], 'w'), indent=1)
print(json.dumps(out, indent=1))
