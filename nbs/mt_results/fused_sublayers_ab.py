"""The training step with each sublayer as one autograd function, against the same step through the modules.

One process per call, one model per size; in every round the two ways run one step each, in turn (the first of the
two alternating from round to round), then one more step each under `ProductTimer` for the time in matrix products.
The two ways are the same code: `fuse_sublayers` on the encoder and decoder layers switches between them. A second
comparison, small size only, times the embedding's gradient rows added into E's dense gradient against the way it
was made before (the lookups' gradients as sparse tensors, added by autograd), emulated here by replacing `_embed`
and `_DenseGradLast` with their earlier code. argv[1]: the folder holding rope_lit; argv[2]: the JSON file to write.
From `nbs/`: `python mt_results/fused_sublayers_ab.py .. mt_results/fused_sublayers_ab.json`.
Written for rope_lit as it was from 2026-11-24 to 2026-11-27 (argv[1] must hold such a version): the fused
sublayers and the embedding's gradient rows have since been removed, so it does not run on later versions.
"""
import sys, os, json, math, time, platform, statistics
sys.path.insert(0, sys.argv[1])
import torch, torch.nn.functional as F
import rope_lit.translation.model as M
from rope_lit.translation.results import _training_step, ProductTimer
from rope_lit.translation.train import tune_cpu_malloc
assert M.__file__.startswith(os.path.abspath(sys.argv[1])), M.__file__
torch.set_num_threads(2)
tune_cpu_malloc()
SIZES = {'small': dict(N=3, d_model=256, d_ff=1024, h=4), 'base': dict(N=6, d_model=512, d_ff=2048, h=8)}
ROUNDS = {'small': 40, 'base': 10}
out = dict(date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), torch=torch.__version__, threads=2,
           cpu=next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')),
                    platform.machine()), load_before=os.getloadavg()[0], rounds=ROUNDS)

def fuse(on): M.EncoderLayer.fuse_sublayers = M.DecoderLayer.fuse_sublayers = bool(on)

def timed(step):
    t0 = time.perf_counter(); step(); return time.perf_counter() - t0

for size, kw in SIZES.items():
    step = _training_step(vocab_size=8000, batch=32, src_len=20, tgt_len=20, position='sinusoidal', **kw)
    for on in (0, 1, 0, 1): fuse(on); step()
    t, p = {0: [], 1: []}, {0: [], 1: []}
    for r in range(ROUNDS[size]):
        for on in ((0, 1) if r % 2 == 0 else (1, 0)):
            fuse(on); t[on].append(timed(step))
            with ProductTimer() as timer: step()
            p[on].append(timer.seconds)
    out[size] = {name: dict(step_s=statistics.median(t[on]), products_s=statistics.median(p[on]),
                            ratio=statistics.median(t[on]) / statistics.median(p[on]))
                 for on, name in ((0, 'modules'), (1, 'fused'))}
    out[size]['paired_step_difference_s'] = statistics.median(b - a for a, b in zip(t[0], t[1]))
    out[size]['paired_products_difference_s'] = statistics.median(b - a for a, b in zip(p[0], p[1]))
fuse(1)

# the embedding's gradient: rows added in place (now) against sparse gradients added by autograd (before)
rows_embed, rows_dense = M.Seq2SeqTransformer._embed, M._DenseGradLast.apply
def sparse_embed(self, ids, positions, grad_rows=None):
    if grad_rows is None: return rows_embed(self, ids, positions)
    e = self.embed
    x = F.embedding(ids, e.weight, e.padding_idx, sparse=True) * math.sqrt(self.d_model)
    if self.pe is not None: x = x + (self.pe[:ids.shape[1]] if positions is None else self.pe[positions])
    return self.drop(x)
class _Before(torch.autograd.Function):   # the identity on E whose backward ran after the lookups'
    @staticmethod
    def forward(ctx, w, rows): return w.view_as(w)
    @staticmethod
    def backward(ctx, g): return g, None
def rows(on):
    M.Seq2SeqTransformer._embed = rows_embed if on else sparse_embed
    M._DenseGradLast.apply = rows_dense if on else _Before.apply
step = _training_step(vocab_size=8000, batch=32, src_len=20, tgt_len=20, position='sinusoidal', **SIZES['small'])
for on in (0, 1, 0, 1): rows(on); step()
t = {0: [], 1: []}
for r in range(30):
    for on in ((0, 1) if r % 2 == 0 else (1, 0)):
        rows(on); t[on].append(timed(step))
rows(1)
out['embedding_rows'] = dict(size='small', rounds=30, sparse_step_s=statistics.median(t[0]),
                             rows_step_s=statistics.median(t[1]),
                             paired_step_difference_s=statistics.median(b - a for a, b in zip(t[0], t[1])))
out['load_after'] = os.getloadavg()[0]
json.dump(out, open(sys.argv[2], 'w'), indent=1)
print(json.dumps(out, indent=1))
