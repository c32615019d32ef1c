"""Time the translation training step of two versions of rope_lit in turn: each run is a fresh process that builds
the model of one size, runs 3 untimed steps and then `--steps` timed ones, and reports their median; the two
versions alternate, `--rounds` runs each per size. One JSON line per run goes to stdout.

Usage, from `nbs/` (DIR_A, DIR_B: folders holding the rope_lit to time, LABEL_A, LABEL_B their names):
  python mt_results/train_step_ab.py DIR_A LABEL_A DIR_B LABEL_B [--rounds 6] >> mt_results/FILE.jsonl
"""
import argparse, json, os, subprocess, sys, time

SIZES = dict(small=dict(N=3, d_model=256, d_ff=1024, h=4, steps=15),
             base=dict(N=6, d_model=512, d_ff=2048, h=8, steps=7))

ONE = r'''
import json, os, statistics, sys, time
sys.path.insert(0, os.path.abspath(sys.argv[1]))
import torch
torch.set_num_threads(2)
import rope_lit.translation.results as R
assert R.__file__.startswith(os.path.abspath(sys.argv[1])), R.__file__
from rope_lit.translation.train import tune_cpu_malloc
tuned = tune_cpu_malloc()
kw = json.loads(sys.argv[2]); steps = kw.pop('steps')
step = R._training_step(vocab_size=8000, batch=32, src_len=20, tgt_len=20, position='sinusoidal', **kw)
for _ in range(3): step()
ts = []
for _ in range(steps):
    t0 = time.perf_counter(); step(); ts.append(time.perf_counter() - t0)
print(json.dumps(dict(malloc_tuned=tuned, step_s=round(statistics.median(ts), 4),
                      step_min_s=round(min(ts), 4), steps=steps)))
'''

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument('dir_a'); ap.add_argument('label_a'); ap.add_argument('dir_b'); ap.add_argument('label_b')
ap.add_argument('--rounds', type=int, default=6, help='runs of each version per size (default 6)')
args = ap.parse_args()
if args.rounds < 1: sys.exit(f"--rounds must be >= 1, got {args.rounds}")
for d in (args.dir_a, args.dir_b):
    if not os.path.isdir(os.path.join(d, 'rope_lit')): sys.exit(f"{d} holds no rope_lit folder")
for name, size in SIZES.items():
    for r in range(args.rounds):
        order = [(args.dir_a, args.label_a), (args.dir_b, args.label_b)]
        for d, label in (order if r % 2 == 0 else order[::-1]):
            load = os.getloadavg()[0]
            res = subprocess.run([sys.executable, '-c', ONE, d, json.dumps(size)], capture_output=True,
                                 text=True, check=True)
            line = json.loads(res.stdout.strip().splitlines()[-1])
            print(json.dumps(dict(code=label, size=name, round=r,
                                  date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()),
                                  load_before=round(load, 2), **line)), flush=True)
