#!/usr/bin/env python
"""One prepared run on a CUDA GPU (NVIDIA H100 or H200): every CUDA path of rope_lit against its float64 CPU
reference, transformers models patched with rope_lit, the GPU cells of the pages, the kernels timed against their
peers and the floor, a ~1B-parameter model end to end, and the translation model's plain code (eager against
torch.compile, decoding against the CPU). Parts run in that order, each in its own process under its
own time limit, so that one that hangs or fails does not cost the others; everything goes under --out (at most
seven files) and a summary table is printed last.

  python tools/gpu_run.py --out DIR                 # on the GPU machine, from the repository root
  python tools/gpu_run.py --dry-run --out DIR       # on a CPU: Triton's interpreter, tiny sizes, about a minute

--parts picks parts (default: correctness,hf,cells,kernels,e2e,translation); --scale multiplies every time limit.
Packages the GPU machine lacks (it has no network) are installed from wheels in .whl/ when that folder exists.
Files: correctness.csv, hf.csv, bench_results.csv, bench_meta.json, e2e.json, summary.json, run.log.
"""
import argparse, csv, json, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMITS = dict(correctness=90, hf=45, cells=120, kernels=180, e2e=100, translation=45)   # seconds, in priority
# order: 9.7 min at most (a part that ends early leaves its time unused)
TOLERANCE = {'float32': 1e-4, 'float16': 4e-3, 'bfloat16': 3e-2}         # largest relative error accepted

# ------------------------------------------------------------------ the parts (each runs in a child process)
def _setup(dry:bool):
    import torch
    device = 'cpu' if dry else 'cuda'
    if not dry: assert torch.cuda.is_available(), "no CUDA device: run with --dry-run on a CPU"
    dtypes = ('float32',) if dry else ('float32', 'bfloat16', 'float16')
    return torch, device, dtypes

def _rel(a, b)->float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))

def part_correctness(out:Path, dry:bool)->dict:
    "Every rotation path on the device against the same call in float64 on the CPU, forward and backward"
    torch, device, dtypes = _setup(dry)
    from rope_lit.rope import RotaryEmbedding, grid_positions
    from rope_lit.attention import RotaryMultiHeadAttention, KVCache
    from rope_lit.kernels import rotary_append
    B, H, S, D = (1, 2, 8, 16) if dry else (2, 8, 64, 128)
    torch.manual_seed(0)
    def case(name, make, call):            # make(device, backend) -> module; call(module, q, k) -> (q, k)
        rows = []
        for dt in dtypes:
            q64, k64 = torch.randn(B, H, S, D, dtype=torch.float64), torch.randn(B, H // 2, S, D, dtype=torch.float64)
            want = call(make('cpu', 'eager'), q64.requires_grad_(), k64.requires_grad_())
            g_want = torch.autograd.grad(want, (q64, k64), [torch.ones_like(w) for w in want])
            q = q64.detach().to(device, getattr(torch, dt)).requires_grad_()
            k = k64.detach().to(device, getattr(torch, dt)).requires_grad_()
            got = call(make(device, 'triton'), q, k)
            g_got = torch.autograd.grad(got, (q, k), [torch.ones_like(g) for g in got])
            fwd = max(_rel(a, b) for a, b in zip(got, want))
            bwd = max(_rel(a, b) for a, b in zip(g_got, g_want))
            rows.append(dict(path=name, dtype=dt, forward=f"{fwd:.2e}", backward=f"{bwd:.2e}",
                             ok=fwd <= TOLERANCE[dt] and bwd <= TOLERANCE[dt]))
        return rows
    rope = lambda **o: (lambda dev, be: RotaryEmbedding(D, backend=be, **o).to(dev))
    pos = torch.randint(0, 4 * S, (B, S))
    rows = []
    rows += case('split pairing', rope(), lambda m, q, k: m(q, k))
    rows += case('interleaved pairing', rope(interleaved=True), lambda m, q, k: m(q, k))
    rows += case('partial rotation (half)', rope(rotary_dim=D // 2), lambda m, q, k: m(q, k))
    rows += case('positions and offsets', rope(),
                 lambda m, q, k: m(q, k, positions=pos.to(q.device), offset=torch.arange(B, device=q.device)))
    streams = lambda m, q, k: m(q, k, positions=torch.stack([pos, pos // 2, pos % 3]).to(q.device))
    half = D // 2
    rows += case('M-RoPE sections', rope(mrope_section=(half // 2, half // 4, half - half // 2 - half // 4)), streams)
    sections = (4, 2, 2) if half == 8 else (24, 20, 20)                 # Qwen3-VL's for head_dim 128
    rows += case('M-RoPE interleaved', rope(mrope_section=sections, mrope_interleaved=True), streams)
    rows += case('2-D axial', rope(axial_2d=True),
                 lambda m, q, k: m(q, k, positions=grid_positions(2, S // 2, device=q.device)))
    def packed(m, q, k):
        cu = torch.tensor([0, S // 2, S], dtype=torch.int32, device=q.device)
        qs, ks = q[0].transpose(0, 1), k[0].transpose(0, 1)          # (S, heads, D)
        a, b = m.varlen(qs, ks, cu)
        return a.transpose(0, 1)[None], b.transpose(0, 1)[None]
    rows += case('varlen (packed)', rope(), packed)
    rows += _append_rows(torch, device, dtypes, rotary_append, B, H, S, D)
    rows += _attention_rows(torch, device, dtypes, RotaryMultiHeadAttention, KVCache, D)
    _write_csv(out / 'correctness.csv', rows)
    return dict(cases=len(rows), failed=[f"{r['path']} {r['dtype']}" for r in rows if not r['ok']])

def _append_rows(torch, device, dtypes, rotary_append, B, H, S, D)->list:
    "Rotate-and-append into a KV cache: the Triton launch against rotate-then-copy in float64 on the CPU"
    from rope_lit.rope import rotary_cos_sin
    from rope_lit.frequencies import rope_frequencies
    rows, L = [], 2 * S
    cos, sin = rotary_cos_sin(torch.arange(L), rope_frequencies(D, dtype=torch.float64))
    for dt in dtypes:
        q, k, v = (torch.randn(B, n, S // 2, D, dtype=torch.float64) for n in (H, H // 2, H // 2))
        caches = [torch.zeros(B, H // 2, L, D, dtype=torch.float64) for _ in range(2)]
        want = rotary_append(q, k, v, *caches, cos.double(), sin.double(), 3, backend='eager')
        on = lambda t: t.to(device, getattr(torch, dt))
        kc, vc = on(torch.zeros(B, H // 2, L, D)), on(torch.zeros(B, H // 2, L, D))
        got = rotary_append(on(q), on(k), on(v), kc, vc, cos.to(device), sin.to(device), 3, backend='triton')
        err = max(_rel(got, want), _rel(kc, caches[0]), _rel(vc, caches[1]))
        rows.append(dict(path='rotate-and-append', dtype=dt, forward=f"{err:.2e}", backward='',
                         ok=err <= TOLERANCE[dt]))
    return rows

def _attention_rows(torch, device, dtypes, Attention, KVCache, D)->list:
    "GQA attention decoding token by token with the KV cache against one full causal call"
    rows = []
    for dt in dtypes:
        torch.manual_seed(1)
        m = Attention(4 * D // 2, 4, n_kv_heads=2).to(device, getattr(torch, dt)).eval()
        x = torch.randn(2, 6, 4 * D // 2, device=device, dtype=getattr(torch, dt))
        with torch.no_grad():
            full = m(x, is_causal=True)
            cache = KVCache()
            steps = torch.cat([m(x[:, t:t + 1], cache=cache) for t in range(x.shape[1])], 1)
        err = _rel(steps, full)
        rows.append(dict(path='GQA attention, KV cache', dtype=dt, forward=f"{err:.2e}", backward='',
                         ok=err <= 4 * TOLERANCE[dt]))
    return rows

def part_hf(out:Path, dry:bool)->dict:
    "rope_lit.hf.patch on tiny random-init transformers models: logits, a training step's gradients, generate()"
    torch, device, _ = _setup(dry)
    import transformers
    from rope_lit import hf
    dtype = torch.float32 if dry else torch.bfloat16
    tol = 1e-4 if dry else 3e-2
    tiny = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, max_position_embeddings=256)
    families = {'Llama': ('LlamaConfig', 'LlamaForCausalLM', dict(num_key_value_heads=2)),
                'Qwen2': ('Qwen2Config', 'Qwen2ForCausalLM', dict(num_key_value_heads=2)),
                'Phi': ('PhiConfig', 'PhiForCausalLM', dict(partial_rotary_factor=0.5)),
                'GPT-J': ('GPTJConfig', 'GPTJForCausalLM', dict(n_embd=64, n_head=4, n_layer=2, rotary_dim=8,
                                                               n_positions=256))}
    rows, n_new = [], 4 if dry else 32
    for name, (config_cls, model_cls, extra) in families.items():
        torch.manual_seed(0)
        config = getattr(transformers, config_cls)(**{**tiny, **extra})
        ref = getattr(transformers, model_cls)(config).to(device, dtype)
        ours = getattr(transformers, model_cls)(config).to(device, dtype)
        ours.load_state_dict(ref.state_dict()); hf.patch(ours)
        ids = torch.randint(0, 128, (2, 24), device=device)
        la, lb = ref(ids).logits, ours(ids).logits
        ga = torch.autograd.grad(ref(ids, labels=ids).loss, list(ref.parameters()))
        gb = torch.autograd.grad(ours(ids, labels=ids).loss, list(ours.parameters()))
        with torch.no_grad():
            gen = [m.generate(ids[:, :8], max_new_tokens=n_new, do_sample=False) for m in (ref, ours)]
        rows.append(dict(family=name, dtype=str(dtype).split('.')[-1], logits=f"{_rel(lb, la):.2e}",
                         gradients=f"{max(_rel(b, a) for a, b in zip(ga, gb)):.2e}",
                         generate_same=bool(torch.equal(*gen)), ok=_rel(lb, la) <= tol))
    _write_csv(out / 'hf.csv', rows)
    return dict(families=len(rows), failed=[r['family'] for r in rows if not r['ok']])

def part_cells(out:Path, dry:bool)->dict:
    "The pages' GPU cells (on a CPU they skip themselves with one line each)"
    log, failed = [], []
    for nb, mod in (('02_rope', 'rope_lit.rope'), ('03_attention', 'rope_lit.attention'),
                    ('04_kernels', 'rope_lit.kernels')):
        page = str(ROOT / 'nbs' / f'{nb}.ipynb')
        # 02 and 03 are short, and their GPU cells use the pages' own helpers: the whole page, GPU cells included;
        # 04's GPU cells need only its module (the whole page takes minutes)
        whole = not dry and nb != '04_kernels'
        cmd = ([str(ROOT / 'tools' / 'run_tests.py'), page, '--flags', 'gpu'] if whole else
               [str(ROOT / 'tools' / 'run_gpu_cells.py'), page, mod])
        r = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, cwd=ROOT / 'nbs')
        log.append(f"== {nb}\n{r.stdout[-4000:]}{r.stderr[-4000:]}")
        if r.returncode: failed.append(nb)
    (out / 'cells.log').write_text('\n'.join(log))
    return dict(notebooks=3, failed=failed)

def part_kernels(out:Path, dry:bool)->dict:
    "rope-lit-bench: the module end to end, the fused call, the floor, compiled transformers, liger-kernel, CUDA graphs"
    with tempfile.TemporaryDirectory() as d:
        args = ['--device', 'cpu', '--shapes', '1x2x8x16', '--modes', 'fwd'] if dry else \
               ['--device', 'cuda', '--shapes', '32x32x1x128', '8x32x4096x128', '--dtype', 'bfloat16']
        r = subprocess.run([sys.executable, '-c', 'from rope_lit.bench_cli import main; main()', *args,
                            '--out', d, '--no-progress'], capture_output=True, text=True)
        if r.returncode: raise RuntimeError(r.stderr[-2000:])
        shutil.copy(Path(d) / 'results.csv', out / 'bench_results.csv')
        shutil.copy(Path(d) / 'meta.json', out / 'bench_meta.json')
    rows = list(csv.DictReader(open(out / 'bench_results.csv')))
    return dict(rows=len(rows), methods=sorted({r['method'] for r in rows}))

def part_e2e(out:Path, dry:bool)->dict:
    "A Llama-like model with random weights: training tokens/s and generate() tokens/s, unpatched and patched"
    torch, device, _ = _setup(dry)
    import transformers
    from rope_lit import hf
    size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=256) \
        if dry else dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
                         num_key_value_heads=8, vocab_size=32000)        # about 1.1B parameters
    batch, seq, steps, new = (2, 32, 2, 4) if dry else (8, 2048, 10, 128)
    dtype = torch.float32 if dry else torch.bfloat16
    result = dict(parameters=None)
    for variant in ('unpatched', 'rope_lit'):
        torch.manual_seed(0)
        with torch.device(device):                    # initialised where it runs: no 4 GB copy from the host
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**size)).to(dtype)
        result['parameters'] = sum(p.numel() for p in model.parameters())
        if variant == 'rope_lit': hf.patch(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not dry)
        ids = torch.randint(0, size['vocab_size'], (batch, seq), device=device)
        def step():
            model(ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        step(); _sync(torch, device)
        start = time.perf_counter()
        for _ in range(steps): step()
        _sync(torch, device)
        result[f'{variant} train tokens/s'] = round(batch * seq * steps / (time.perf_counter() - start))
        with torch.no_grad():
            model.generate(ids[:1, :16], max_new_tokens=2, do_sample=False); _sync(torch, device)
            start = time.perf_counter()
            model.generate(ids[:1, :16], max_new_tokens=new, min_new_tokens=new, do_sample=False)
            _sync(torch, device)
        result[f'{variant} decode tokens/s'] = round(new / (time.perf_counter() - start), 1)
        del model, opt
    (out / 'e2e.json').write_text(json.dumps(result, indent=1))
    return result

def part_translation(out:Path, dry:bool)->dict:
    """The translation model's plain code on the device: a bf16-autocast training step eager and under torch.compile
    (same loss and gradients; the time of each), and greedy and beam decoding on the device against the CPU"""
    torch, device, _ = _setup(dry)
    import copy
    from rope_lit.translation.model import Seq2SeqTransformer, greedy_decode, beam_search
    size, (V, B, T) = ((dict(N=1, d_model=32, d_ff=64, h=4), (100, 4, 8)) if dry else
                       (dict(N=6, d_model=512, d_ff=2048, h=8), (8000, 64, 24)))
    tol = 1e-4 if dry else 3e-2
    amp = dict(device_type='cuda' if not dry else 'cpu', dtype=torch.bfloat16, enabled=not dry)
    rows = {}
    for position in ('sinusoidal', 'rope'):
        torch.manual_seed(0)
        m = Seq2SeqTransformer(V, **size, dropout=0.0, position=position, max_len=128).to(device).train()
        src, tgt = torch.randint(4, V, (B, T), device=device), torch.randint(4, V, (B, T + 1), device=device)
        def step(fwd):
            with torch.autocast(**amp): loss = fwd(src, tgt[:, :-1], tgt[:, 1:], 0.1)
            grads = torch.autograd.grad(loss, list(m.parameters()))
            return loss.float(), torch.cat([g.float().flatten() for g in grads])
        def seconds(fwd, n=3 if dry else 10):
            for _ in range(2): step(fwd)
            _sync(torch, device); t0 = time.perf_counter()
            for _ in range(n): step(fwd)
            _sync(torch, device); return (time.perf_counter() - t0) / n
        compiled = m if dry else torch.compile(m, dynamic=True)   # the dry run: no compilation (minutes on a CPU)
        (le, ge), (lc, gc) = step(m), step(compiled)
        r = dict(loss_rel=_rel(lc.reshape(1), le.reshape(1)), grad_rel=float((gc - ge).norm() / ge.norm()),
                 eager_step_ms=round(1e3 * seconds(m), 2), compiled_step_ms=round(1e3 * seconds(compiled), 2))
        m.eval(); cpu = copy.deepcopy(m).cpu().float()
        with torch.no_grad():
            r['greedy_same_as_cpu'] = bool(torch.equal(greedy_decode(m, src[:4], 24).cpu(),
                                                       greedy_decode(cpu, src[:4].cpu(), 24)))
            r['beam_same_as_cpu'] = bool(torch.equal(beam_search(m, src[:4], 4, max_len=24).cpu(),
                                                     beam_search(cpu, src[:4].cpu(), 4, max_len=24)))
        r['ok'] = r['loss_rel'] <= tol and r['grad_rel'] <= tol
        rows[position] = r
    return dict(rows=rows, failed=[p for p, r in rows.items() if not r['ok']])

def _sync(torch, device):
    if device == 'cuda': torch.cuda.synchronize()

def _write_csv(path:Path, rows:list):
    with open(path, 'w', newline='') as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)

PARTS = dict(correctness=part_correctness, hf=part_hf, cells=part_cells, kernels=part_kernels, e2e=part_e2e,
             translation=part_translation)

# ------------------------------------------------------------------ the driver
def _wheels():
    "Install what the GPU machine lacks from the wheels carried in .whl/ (it has no network)"
    whl = ROOT / '.whl'
    if not whl.is_dir(): return
    missing = [m for m in ('fastcore', 'numpy') if subprocess.run([sys.executable, '-c', f'import {m}']).returncode]
    if missing:
        site = Path(tempfile.gettempdir()) / 'rope_lit_site'
        subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--target', str(site),
                        *map(str, whl.glob('*.whl'))], check=True)
        os.environ['PYTHONPATH'] = f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', required=True, help='folder for the result files')
    ap.add_argument('--dry-run', action='store_true', help="on a CPU: Triton's interpreter, tiny sizes")
    ap.add_argument('--parts', default=','.join(PARTS), help='comma-separated parts, in the order to run them')
    ap.add_argument('--scale', type=float, default=1.0, help='multiplies every part\'s time limit')
    ap.add_argument('--part', help=argparse.SUPPRESS)          # a child process: run this part only
    args = ap.parse_args()
    out = Path(args.out); out.mkdir(parents=True, exist_ok=True)
    if args.part:                                              # the child: one part, its result as JSON
        print(json.dumps(PARTS[args.part](out, args.dry_run), default=str)); return
    parts = [p for p in args.parts.split(',') if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown: sys.exit(f"gpu_run: --parts: unknown {unknown}, expected some of {list(PARTS)}")
    os.environ['PYTHONPATH'] = f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
    if args.dry_run: os.environ['TRITON_INTERPRET'] = '1'     # read when triton is imported, in each child
    else: _wheels()
    summary, log = [], open(out / 'run.log', 'w')
    for name in parts:
        limit = LIMITS[name] * args.scale * (2 if args.dry_run else 1)   # a CPU shared with other work: room
        start = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, __file__, '--out', str(out), '--part', name,
                                *(['--dry-run'] if args.dry_run else [])], capture_output=True, text=True,
                               timeout=limit, cwd=ROOT)
            log.write(f"== {name} (exit {r.returncode})\n{r.stdout}\n{r.stderr}\n"); log.flush()
            detail = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else r.stderr.strip()[-300:]
            status = 'ok' if r.returncode == 0 and not (isinstance(detail, dict) and detail.get('failed')) else 'FAIL'
        except subprocess.TimeoutExpired as e:
            log.write(f"== {name}: stopped at its {limit:.0f} s limit\n{e.stdout or ''}\n{e.stderr or ''}\n")
            status, detail = 'TIMEOUT', f'stopped at {limit:.0f} s'
        summary.append(dict(part=name, status=status, seconds=round(time.perf_counter() - start, 1), detail=detail))
    log.close()
    cells = out / 'cells.log'
    if cells.exists():                                      # seven files at most: the cells' log joins run.log
        with open(out / 'run.log', 'a') as fh: fh.write(cells.read_text())
        cells.unlink()
    (out / 'summary.json').write_text(json.dumps(dict(dry_run=args.dry_run, parts=summary), indent=1, default=str))
    print(f"{'part':<12} {'status':<8} {'seconds':>8}  detail")
    for s in summary: print(f"{s['part']:<12} {s['status']:<8} {s['seconds']:>8}  {str(s['detail'])[:150]}")
    sys.exit(0 if all(s['status'] == 'ok' for s in summary) else 1)

if __name__ == '__main__': main()
