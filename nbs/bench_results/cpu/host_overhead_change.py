"""The earlier timing script, kept for the before/after table it made (host_overhead_change.csv).

Time RotaryEmbedding vs rotary_qk_native vs clone (and autograd floor); argv[1]: dir holding rope_lit.
Each method is timed in a block of its own, 2000 calls, 7 repeats; one JSON list of rows on stdout, per
environment (the CSV adds the columns run and environment). Superseded by host_overhead.py, which times
the methods in paired rounds."""
import sys, json, time, statistics
sys.path.insert(0, sys.argv[1])
import torch
torch.manual_seed(0)
from rope_lit.rope import RotaryEmbedding
from rope_lit.kernels import rotary_qk_native, native_kernel
import rope_lit
assert rope_lit.__file__.startswith(sys.argv[1]), rope_lit.__file__
CALLS = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
REPEATS = int(sys.argv[3]) if len(sys.argv) > 3 else 7
ext = native_kernel()

def per_call(f):
    t0 = time.perf_counter_ns()
    for _ in range(CALLS): f()
    return (time.perf_counter_ns() - t0) / CALLS / 1e3

rows = []
for shape in ((1, 8, 512, 64), (32, 32, 1, 128)):
    for il in (False, True):
        B, H, S, D = shape
        rope = RotaryEmbedding(D, interleaved=il)
        q, k = torch.randn(shape), torch.randn(shape)
        gq, gk = torch.randn(shape), torch.randn(shape)
        cos, sin = rope.cos_sin(S)                  # the same rows the module passes on
        qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
        def grad(f): return lambda: torch.autograd.grad(f(), (qg, kg), (gq, gk))
        fns = {
            ('fwd', 'module'): lambda: rope(q, k),
            ('fwd', 'kernel'): lambda: rotary_qk_native(q, k, cos, sin, interleaved=il),
            ('fwd', 'clone'): lambda: (q.clone(), k.clone()),
            ('fwd+bwd', 'module'): grad(lambda: rope(qg, kg)),
            ('fwd+bwd', 'kernel'): grad(lambda: rotary_qk_native(qg, kg, cos, sin, interleaved=il)),
            ('fwd+bwd', 'clone'): grad(lambda: ext.copy_qk_autograd(qg, kg)),
        }
        times = {key: [] for key in fns}
        for f in fns.values():
            for _ in range(50): f()
        for r in range(REPEATS):
            for key, f in fns.items():
                if key[0] == 'fwd':
                    with torch.no_grad(): times[key].append(per_call(f))
                else: times[key].append(per_call(f))
        for key, ts in times.items():
            rows.append(dict(shape=str(shape), pairing='interleaved' if il else 'split',
                             mode=key[0], method=key[1], us=statistics.median(ts)))
print(json.dumps(rows))
