"""The small translation model's time in matrix products per training step, taken two ways in turn in one process:
`torch.profiler`'s self time of the product operators (3 profiled steps after 2 untimed ones, each round on a fresh
model: how rope_lit measured it until 2026-11-24 02:12 UTC) and `ProductTimer` as `training_seconds` uses it (5
timed steps after 3 untimed ones and one under the timer, each round on a fresh model), with the minor page faults
per timed step. argv[1]: the folder holding rope_lit; argv[2]: rounds. One JSON line per round to stdout. From `nbs/`: `python mt_results/floor_methods.py .. 4 > mt_results/floor_methods.jsonl`.
"""
import sys, os, json, time, resource, contextlib
sys.path.insert(0, sys.argv[1])
import torch
import rope_lit.translation.results as R
from rope_lit.translation.train import tune_cpu_malloc
assert R.__file__.startswith(os.path.abspath(sys.argv[1])), R.__file__
torch.set_num_threads(2)
tune_cpu_malloc()
size = dict(N=3, d_model=256, d_ff=1024, h=4)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
@contextlib.contextmanager
def quiet_native_output():
    "Send the process's stdout and stderr (file descriptors 1 and 2) to /dev/null while active"
    # torch.profiler's native layer (Kineto) prints `USDT … profiler_start` lines; they say nothing about the result
    sys.stdout.flush(); sys.stderr.flush()
    saved, null = [os.dup(1), os.dup(2)], os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1); os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        for fd in (*saved, null): os.close(fd)

PROFILED = ('aten::mm', 'aten::addmm', 'aten::addmm_', 'aten::bmm', 'aten::baddbmm')

new_step = lambda: R._training_step(vocab_size=8000, batch=32, src_len=20, tgt_len=20, position='sinusoidal', **size)

def profiler_seconds(steps=3, warmup=2):   # the measurement until 2026-11-24 02:12 UTC
    step = new_step()
    for _ in range(warmup): step()
    with quiet_native_output():
        from torch.profiler import profile, ProfilerActivity
        f0 = faults()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps): step()
        f = faults() - f0
    return sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in PROFILED) / 1e6 / steps, f // steps

def timer_seconds(steps=5, warmup=3):      # `training_seconds`' products, faults counted in the timed steps
    step = new_step()
    for _ in range(warmup): step()
    with R.ProductTimer() as timer:
        step()
        timer.seconds, f0 = 0.0, faults()
        for _ in range(steps): step()
        f = faults() - f0
    return timer.seconds / steps, f // steps

for r in range(int(sys.argv[2])):
    load = os.getloadavg()[0]
    (prof_s, prof_f), (timer_s, timer_f) = profiler_seconds(), timer_seconds()
    print(json.dumps(dict(round=r, date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), load_before=round(load, 2),
                          profiler_s=round(prof_s, 4), profiler_faults_per_step=prof_f, timer_s=round(timer_s, 4),
                          timer_faults_per_step=timer_f)), flush=True)
