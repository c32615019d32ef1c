"""Where the small translation model's CPU training step spends its time, operator by operator.

Every call to a PyTorch operator is timed from its start to its return by a `TorchDispatchMode`, the forward and the
backward pass alike, and so is every call into rope_lit's C++ dropout, layer norm and loss kernels; the times are
summed by kind.
What no timed call covers is Python, autograd's bookkeeping and dispatch (made larger here by the timing's own cost,
which is why the step under the timing takes longer than without it). argv[1]: the folder holding rope_lit; argv[2]:
the JSON file to write. From `nbs/`: `python mt_results/train_breakdown.py .. mt_results/train_breakdown.json`.
Written for rope_lit as it was on 2026-11-24 (argv[1] must hold that version): the C++ pieces it times have
since moved to `rope_lit.translation.fast` and `_training_step`, `MATMUL_OPS` to `rope_lit.translation.speed`, so it
does not import later versions.
"""
import sys, os, json, time, platform, statistics, collections
sys.path.insert(0, sys.argv[1])
import torch
from torch.utils._python_dispatch import TorchDispatchMode
import rope_lit.translation.model as M
from rope_lit.translation.results import _training_step, MATMUL_OPS
from rope_lit.translation.train import tune_cpu_malloc
assert M.__file__.startswith(os.path.abspath(sys.argv[1])), M.__file__
torch.set_num_threads(2)
tune_cpu_malloc()
KINDS = {  # operator (aten overload packet, or C++ kernel) -> kind
    **{op: 'matrix_products' for op in MATMUL_OPS},
    '_fused_adam_': 'adam', 'dropout_forward': 'dropout', 'dropout_relu_backward': 'dropout',
    'dropout_backward': 'dropout', 'layer_norm_backward': 'layer_norm',
    'smoothed_ce_rows': 'loss_rows', 'clone': 'copies', 'copy_': 'copies',
    'native_layer_norm': 'layer_norm', 'native_layer_norm_backward': 'layer_norm',
    'add': 'additions', 'add_': 'additions', 'sum': 'bias_gradient_sums',
    '_softmax': 'softmax', '_softmax_backward_data': 'softmax'}
seconds, calls = collections.Counter(), collections.Counter()
on, inside = [False], [0]   # counting; how deep in timed calls (operators a kernel calls count in its time)

def record(name, t):
    if on[0] and inside[0] == 0:
        seconds[KINDS.get(name, 'other_operators')] += t; calls[KINDS.get(name, 'other_operators')] += 1

class Timer(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.perf_counter(); out = func(*args, **(kwargs or {}))
        record(func.overloadpacket.__name__, time.perf_counter() - t0); return out

class Timed:   # a C++ extension module whose calls are timed
    def __init__(self, ext): self.ext = ext
    def __getattr__(self, name):
        f = getattr(self.ext, name)
        def call(*a):
            inside[0] += 1
            try: t0 = time.perf_counter(); out = f(*a); t = time.perf_counter() - t0
            finally: inside[0] -= 1
            record(name, t); return out
        return call

drop, dec = Timed(M.native_dropout()), Timed(M.native_decoder())
M.native_dropout, M.native_decoder = (lambda verbose=False: drop), (lambda verbose=False: dec)
out = dict(date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), torch=torch.__version__, threads=2,
           cpu=next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')),
                    platform.machine()), load_before=os.getloadavg()[0],
           size=dict(N=3, d_model=256, d_ff=1024, h=4, vocab=8000, batch=32, src_len=20, tgt_len=20))
step = _training_step(vocab_size=8000, batch=32, src_len=20, tgt_len=20, position='sinusoidal',
                      N=3, d_model=256, d_ff=1024, h=4)
for _ in range(4): step()
ts = []
for _ in range(9):
    t0 = time.perf_counter(); step(); ts.append(time.perf_counter() - t0)
n = 5
with Timer():
    step()                       # the timing's first step, not counted
    on[0] = True; t0 = time.perf_counter()
    for _ in range(n): step()
    timed_s = (time.perf_counter() - t0) / n
out.update(step_s=statistics.median(ts), timed_step_s=timed_s,
           ms_per_step={k: 1e3 * v / n for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])},
           calls_per_step={k: v // n for k, v in calls.items()})
out['ms_per_step']['not_in_any_timed_call'] = 1e3 * timed_s - sum(out['ms_per_step'].values())
out['load_after'] = os.getloadavg()[0]
json.dump(out, open(sys.argv[2], 'w'), indent=1)
print(json.dumps(out, indent=1))
