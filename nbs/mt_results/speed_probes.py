"""Side measurements quoted on the translation results page and the model page; argv[1]: folder holding rope_lit,
argv[2]: the JSON file to write. Run from `nbs/`: `python mt_results/speed_probes.py .. mt_results/speed_probes.json`.

- dropout: `F.dropout` against `FastDropout` on (32, 20, 1024) float32, the matrix product that makes them, and a
  copy (`clone`) of them
- train_compile: the small model's training step (`train_step`), eager against `torch.compile` of the model
- train_profile: self CPU time per step of a few operators under torch.profiler (small model); no longer quoted:
  the profiler's first steps in a process count page faults as operator time (see floor_methods.py), and
  train_breakdown.py times each operator call instead
- decode: one sentence to 72 tokens, small and base: `greedy_decode`, the decoder's own matrix-vector products with
  their biases (nothing else), and `decode_weight_floor`; small only: a static-shape step (masked cache), eager and
  compiled with inductor's C++ wrapper
Written for rope_lit as it was on 2026-11-24 (argv[1] must hold that version): `FastDropout`,
`DecodingWeights` and `IncrementalDecoder` have since moved to `rope_lit.translation.fast` and `decode_weight_floor`
to `rope_lit.translation.speed`, so it does not import later versions.
"""
import sys, json, math, time, timeit, platform, os
sys.path.insert(0, sys.argv[1])
import torch, torch.nn.functional as F
import rope_lit
assert rope_lit.__file__.startswith(os.path.abspath(sys.argv[1])), rope_lit.__file__
from rope_lit.translation.model import Seq2SeqTransformer, greedy_decode, DecodingWeights, IncrementalDecoder, FastDropout
from rope_lit.translation.train import make_config, make_optimizer, train_step, tune_cpu_malloc
from rope_lit.translation.results import decode_weight_floor
torch.set_num_threads(2)
tune_cpu_malloc()
SIZES = {'small': dict(N=3, d_model=256, d_ff=1024, h=4), 'base': dict(N=6, d_model=512, d_ff=2048, h=8)}
out = dict(date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()), torch=torch.__version__, threads=2,
           cpu=next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')),
                    platform.machine()), load_before=os.getloadavg()[0])
best = lambda f, number, repeat=5: min(timeit.repeat(f, number=number, repeat=repeat)) / number

# dropout
x, w1 = torch.randn(32, 20, 1024), torch.randn(32, 20, 256)
lin = torch.nn.Linear(256, 1024)
fd = FastDropout(0.1).train()
with torch.no_grad():
    out['dropout'] = dict(shape=[32, 20, 1024], F_dropout_ms=best(lambda: F.dropout(x, 0.1, True), 20) * 1e3,
                          FastDropout_ms=best(lambda: fd(x), 20) * 1e3,
                          linear_256_to_1024_ms=best(lambda: lin(w1), 20) * 1e3,
                          clone_ms=best(lambda: x.clone(), 20) * 1e3)

def step_fn(size, compiled):
    torch.manual_seed(0)
    cfg = make_config('tiny', **size, device='cpu')
    model = Seq2SeqTransformer(8000, size['N'], size['d_model'], size['d_ff'], size['h'], 0.1, 'sinusoidal', 128).train()
    opt, sched = make_optimizer(model, cfg)
    fwd = torch.compile(model) if compiled else model
    src, tgt = torch.randint(4, 8000, (32, 20)), torch.randint(4, 8000, (32, 21))
    return lambda: train_step(model, fwd, opt, sched, [(src, tgt)], cfg, torch.device('cpu'))

def median_step(step, n=7):
    for _ in range(2): step()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); step(); ts.append(time.perf_counter() - t0)
    return sorted(ts)[n // 2]

from torch.profiler import profile, ProfilerActivity
step = step_fn(SIZES['small'], False)
for _ in range(3): step()
with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
    for _ in range(3): step()
prof_ms = dict(matrix_products=0, dropout=0, attention_dropout=0, attention_core=0, zero_embedding_grads=0,
               adam=0, layer_norm=0, copies=0, copies_4d=0, all=0)
for e in prof.key_averages(group_by_input_shape=True):
    k, t = e.key, e.self_cpu_time_total
    if k == 'aten::_fused_adam_': prof_ms['adam'] += t
    elif k in ('_Dropout', '_DropoutBackward', 'aten::random_', 'aten::ge'): prof_ms['dropout'] += t
    elif k == 'aten::bernoulli_': prof_ms['attention_dropout'] += t
    elif k in ('_DropoutAttention', '_DropoutAttentionBackward'): prof_ms['attention_core'] += t
    elif k == 'aten::fill_' and e.input_shapes and e.input_shapes[0] == [8000, 256]: prof_ms['zero_embedding_grads'] += t
    elif k in ('aten::mm', 'aten::addmm', 'aten::addmm_', 'aten::bmm', 'aten::baddbmm'): prof_ms['matrix_products'] += t
    elif k in ('aten::native_layer_norm', 'aten::native_layer_norm_backward'): prof_ms['layer_norm'] += t
    elif k == 'aten::copy_':
        prof_ms['copies'] += t
        if e.input_shapes and len(e.input_shapes[0]) == 4: prof_ms['copies_4d'] += t   # head layouts
    prof_ms['all'] += t
out['train_profile'] = dict(size='small', ms_per_step={k: v / 3e3 for k, v in prof_ms.items()},
                            note='self CPU time under torch.profiler, 3 steps; dropout: FastDropout forward and '
                                 'backward (random_ and ge too, for masks made with PyTorch operations), the '
                                 "attention core's dropout calls included; attention_dropout: bernoulli_ (SDPA); "
                                 "attention_core: the CPU training attention's own Python and autograd time "
                                 '(its products, softmax and dropout are counted in their own rows); copies_4d: '
                                 'the copies of 4-D tensors among copies (between the heads layouts)')

# the fixed cost of a step: the same step on a model with every size tiny (d_model 8, vocabulary 50, batch 1)
torch.manual_seed(0)
tiny = dict(N=3, d_model=8, d_ff=16, h=4)
cfg = make_config('tiny', **tiny, device='cpu')
model = Seq2SeqTransformer(50, tiny['N'], tiny['d_model'], tiny['d_ff'], tiny['h'], 0.1, 'sinusoidal', 128).train()
opt, sched = make_optimizer(model, cfg)
src, tgt = torch.randint(4, 50, (1, 20)), torch.randint(4, 50, (1, 21))
tiny_step = lambda: train_step(model, model, opt, sched, [(src, tgt)], cfg, torch.device('cpu'))
out['train_fixed_cost'] = dict(size=dict(tiny, vocab=50, batch=1, src_len=20, tgt_len=20),
                               step_s=median_step(tiny_step, 21))

# compiled against eager: after the profile, which the compiler's background workers would slow down
eager = step_fn(SIZES['small'], False)
comp = step_fn(SIZES['small'], True)
t0 = time.perf_counter(); comp(); compile_s = time.perf_counter() - t0
out['train_compile'] = dict(size='small', eager_s=median_step(eager), compiled_s=median_step(comp),
                            first_compiled_step_s=compile_s)

# decoding
def best_call(f, r=5):
    b = math.inf
    for _ in range(r):
        t0 = time.perf_counter(); f(); b = min(b, time.perf_counter() - t0)
    return b

out['decode'] = {}
for name, size in SIZES.items():
    torch.manual_seed(0)
    m = Seq2SeqTransformer(8000, size['N'], size['d_model'], size['d_ff'], size['h'], 0.1, 'sinusoidal', 128).eval()
    src = torch.randint(4, 8000, (1, 20))
    W = DecodingWeights(m)
    d = size['d_model']
    mats = [L[k] for L in W.layers for k in ('qkv', 'self_out', 'cross_q', 'ff1', 'ff2', 'cross_out')]
    xs = {i: torch.randn(1, 1, i) for i in (d, size['d_ff'])}
    def linears():
        with torch.inference_mode():
            for _ in range(71):
                for Wm, b in mats: F.linear(xs[Wm.shape[1]], Wm, b)
                F.linear(xs[d][:, 0], W.final['embed'])
    r = dict(greedy_s=best_call(lambda: greedy_decode(m, src, 72, min_len=72, weights=W)),
             model_linears_s=best_call(linears),
             floor_s=decode_weight_floor(size['N'], d, size['d_ff'], 8000, repeats=5))
    if name == 'small':
        h, dk, L = size['h'], d // size['h'], 71
        with torch.inference_mode():
            mem, mask = m.encode(src)
            dec = IncrementalDecoder(m, mem, mask, 72, None, W)
        cross, fin = dec.cross, W.final
        def one(tok, t, kv, tbias, pe_t):   # the lean step, static shapes: every cache slot, future ones masked
            x = F.embedding(tok[:, None], fin['embed']) * math.sqrt(d) + pe_t
            for w, (ck, cv), c in zip(W.layers, cross, kv):
                n1, n2, n3 = w['norms']
                qkv = F.linear(F.layer_norm(x, (d,), *n1), *w['qkv']).unflatten(-1, (3, h, dk)).permute(2, 0, 3, 1, 4)
                c.index_copy_(3, t.view(1), qkv[1:])
                a = ((qkv[0] @ c[0].transpose(-1, -2)) + tbias).softmax(-1) @ c[1]
                x = x + F.linear(a.transpose(1, 2).flatten(2), *w['self_out'])
                q = F.linear(F.layer_norm(x, (d,), *n2), *w['cross_q']).unflatten(-1, (h, dk)).transpose(1, 2)
                a = (q @ ck.transpose(-1, -2)).softmax(-1) @ cv
                x = x + F.linear(a.transpose(1, 2).flatten(2), *w['cross_out'])
                x = x + F.linear(F.relu(F.linear(F.layer_norm(x, (d,), *n3), *w['ff1'])), *w['ff2'])
            return F.linear(F.layer_norm(x[:, 0], (d,), *fin['norm']), fin['embed'])
        import torch._inductor.config as ic
        ic.cpp_wrapper = True
        compiled = torch.compile(one, dynamic=False)
        def run(f):
            with torch.inference_mode():
                kv = [torch.zeros(2, 1, h, L, dk) for _ in W.layers]
                tok, ys = torch.tensor([1]), [1]
                for t in range(71):
                    tb = torch.full((1, 1, 1, L), float('-inf')); tb[..., :t + 1] = 0
                    tok = f(tok, torch.tensor(t), kv, tb, fin['pe'][t]).argmax(-1); ys.append(int(tok))
            return ys
        same = run(compiled) == run(one) == greedy_decode(m, src, 72, min_len=72, weights=W)[0].tolist()
        r.update(static_eager_s=best_call(lambda: run(one)), static_compiled_s=best_call(lambda: run(compiled)),
                 static_same_tokens=same)
    out['decode'][name] = r
out['load_after'] = os.getloadavg()[0]
json.dump(out, open(sys.argv[2], 'w'), indent=1)
print(json.dumps(out, indent=1))
