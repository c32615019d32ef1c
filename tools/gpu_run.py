#!/usr/bin/env python
"""One prepared run on a CUDA GPU (NVIDIA H100 or H200): every CUDA path of rope_lit against its float64 CPU
reference, transformers models patched with rope_lit, the GPU cells of the pages (the kernels page's Triton
compilations spread over processes first), the kernels timed against their peers and the floor (the benchmark
page's GPU cell), a ~1B-parameter model end to end, and the translation model's plain code (eager against
torch.compile, decoding against the CPU); packed sequences and rotate-and-append are timed too. Parts run in that
order, each in its own process group under its own time limit, so that one that hangs or fails does not cost the
others; everything goes under --out (at most eight files) and a summary table is printed last.

  python tools/gpu_run.py --out DIR                 # on the GPU machine, from the repository root
  python tools/gpu_run.py --dry-run --out DIR       # on a CPU: Triton's interpreter, tiny sizes, about a minute

--parts picks parts (default: build,correctness,hf,cells,kernels,varlen_append,e2e,translation); --scale multiplies
every part's time limit; --deadline caps the whole run (a part gets at most what is left).
Packages the GPU machine lacks (it has no network) are installed from wheels in .whl/ when that folder exists.
Files: correctness.csv, hf.csv, bench_results.csv, bench_meta.json, varlen_append.csv, e2e.json, summary.json,
run.log.
"""
import argparse, csv, json, math, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMITS = dict(build=90, correctness=100, hf=40, cells=220, kernels=200, varlen_append=25, e2e=80, translation=260)
# seconds, in priority order; a part that ends early leaves its time to the next, and --deadline caps the whole run
# (on an NVIDIA H200 on 2026-11-27: build 49 s, correctness 23 s, hf 29 s, kernels 65 s, varlen_append 10 s, e2e 46 s;
# the cells stopped at 110 and 162 s, the translation part at 75 s and, after its first compiled step, at 165 s; on an
# NVIDIA H100 the same day: build 56 s, cells 132 s, kernels 88 s, varlen_append 17 s, e2e 44 s, hf 25 s, correctness
# 20 s; the translation part, at 64 pairs of 24 tokens, compiled RoPE's step in 91 s and stopped at 170 s while
# compiling the sinusoidal model's)
TOLERANCE = {'float32': 1e-4, 'float16': 4e-3, 'bfloat16': 3e-2}         # largest relative error accepted

# ------------------------------------------------------------------ the parts (each runs in a child process)
def _setup(dry:bool):
    import torch
    device = 'cpu' if dry else 'cuda'
    if not dry: assert torch.cuda.is_available(), "no CUDA device: run with --dry-run on a CPU"
    dtypes = ('float32',) if dry else ('float32', 'bfloat16', 'float16')
    return torch, device, dtypes

def _rel(a, b)->float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))

def part_build(out:Path, dry:bool)->dict:
    "Build (or load from its cache) the native CPU kernel that the CPU references use, once, before the parts time out"
    t0 = time.perf_counter()
    from rope_lit.kernels import native_kernel
    return dict(native_kernel=native_kernel() is not None, seconds=round(time.perf_counter() - t0, 1))

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
            with torch.no_grad():   # the CPU's own fast backend, same inputs and dtype
                cpu = call(make('cpu', 'cpu_fused'), q.detach().cpu(), k.detach().cpu())
            fwd = max(_rel(a, b) for a, b in zip(got, want))
            bwd = max(_rel(a, b) for a, b in zip(g_got, g_want))
            vs_cpu = max(_rel(a, b) for a, b in zip(got, cpu))
            rows.append(dict(path=name, dtype=dt, forward=f"{fwd:.2e}", backward=f"{bwd:.2e}",
                             vs_cpu_backend=f"{vs_cpu:.2e}",
                             ok=fwd <= TOLERANCE[dt] and bwd <= TOLERANCE[dt] and vs_cpu <= 2 * TOLERANCE[dt]))
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
    rows += _inplace_rows(torch, device, dtypes, B, H, S, D)
    rows += _append_rows(torch, device, dtypes, rotary_append, B, H, S, D)
    rows += _attention_rows(torch, device, dtypes, RotaryMultiHeadAttention, KVCache, D)
    _write_csv(out / 'correctness.csv', rows)
    return dict(cases=len(rows), failed=[f"{r['path']} {r['dtype']}" for r in rows if not r['ok']])

def _inplace_rows(torch, device, dtypes, B, H, S, D)->list:
    "In-place rotation (no gradient): the kernel writes into q and k themselves"
    from rope_lit.rope import rotary_cos_sin
    from rope_lit.frequencies import rope_frequencies
    from rope_lit.rotation import rotary_qk as rotary_qk_eager
    from rope_lit.triton_rope import rotary_qk_triton
    rows = []
    cos, sin = rotary_cos_sin(torch.arange(S), rope_frequencies(D, dtype=torch.float64))
    for dt in dtypes:
        q, k = torch.randn(B, H, S, D, dtype=torch.float64), torch.randn(B, H // 2, S, D, dtype=torch.float64)
        want = rotary_qk_eager(q, k, cos, sin)
        qd, kd = q.to(device, getattr(torch, dt)), k.to(device, getattr(torch, dt))
        ptrs = (qd.data_ptr(), kd.data_ptr())
        with torch.no_grad():
            got = rotary_qk_triton(qd, kd, cos.float().to(device), sin.float().to(device), inplace=True)
        same = tuple(t.data_ptr() for t in got) == ptrs
        err = max(_rel(qd, want[0]), _rel(kd, want[1]))
        rows.append(dict(path='in-place', dtype=dt, forward=f"{err:.2e}", backward='', vs_cpu_backend='',
                         ok=same and err <= TOLERANCE[dt]))
    return rows

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
                         vs_cpu_backend='', ok=err <= TOLERANCE[dt]))
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
                         vs_cpu_backend='', ok=err <= 4 * TOLERANCE[dt]))
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
                'Phi': ('PhiConfig', 'PhiForCausalLM', dict(partial_rotary_factor=0.5, pad_token_id=None)),  # 5.0: no default
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
            kw = dict(max_new_tokens=n_new, do_sample=False, output_logits=True, return_dict_in_generate=True)
            gen = [m.generate(ids[:, :8], **kw) for m in (ref, ours)]
            # bf16 logits differ in their last bits, which can flip a near-tie of random weights' greedy choice:
            # the same greedy generation again in float32, where the two agree to about 1e-6
            gen32 = [m.float().generate(ids[:, :8], max_new_tokens=n_new, do_sample=False)[:, 8:]
                     for m in (ref, ours)]
        (a, la_steps), (b, lb_steps) = [(g.sequences[:, 8:], g.logits) for g in gen]
        n = min(a.shape[1], b.shape[1])                      # generation may stop early at an end token
        same = (a[:, :n] == b[:, :n]).all(0)
        row = dict(family=name, dtype=str(dtype).split('.')[-1], logits=f"{_rel(lb, la):.2e}",
                   gradients=f"{max(_rel(y, x) for x, y in zip(ga, gb)):.2e}",
                   generate_same=a.shape == b.shape and bool(same.all()),
                   tokens_same_before_first_difference=int((~same).nonzero()[0, 0]) if (~same).any() else n,
                   margin_steps=None, difference_steps=None,
                   generate_same_float32=gen32[0].shape == gen32[1].shape and bool(torch.equal(*gen32)))
        if (~same).any():   # the first step where they part: the reference's top-2 margin and the two models'
            # largest logit difference there, in bfloat16 steps (its spacing at the top logit); a fault would part
            # where the choice was clear (see the transformers page: partings there come at margins of 0-4 steps)
            t = row['tokens_same_before_first_difference']
            r = int((a[:, t] != b[:, t]).nonzero()[0, 0])
            top2 = la_steps[t][r].float().topk(2).values
            step = 2.0 ** (math.floor(math.log2(max(abs(float(top2[0])), 2.0 ** -126))) - 7)
            row.update(margin_steps=float(top2[0] - top2[1]) / step,
                       difference_steps=float((la_steps[t][r].float() - lb_steps[t][r].float()).abs().max()) / step)
        row['ok'] = (_rel(lb, la) <= tol and row['generate_same_float32']
                     and (row['generate_same'] or (row['margin_steps'] is not None and row['margin_steps'] <= 8)))
        rows.append(row)
        _write_csv(out / 'hf.csv', rows)                     # after each family: a later failure keeps these
        partial(dict(families=len(rows), failed=[r['family'] for r in rows if not r['ok']]))
    return dict(families=len(rows), failed=[r['family'] for r in rows if not r['ok']])

def _gpu_cells(page:str)->int:
    "How many `#| gpu` cells a page has"
    cells = json.loads((ROOT / 'nbs' / f'{page}.ipynb').read_text())['cells']
    return sum(''.join(c['source']).lstrip().startswith('#| gpu') for c in cells if c['cell_type'] == 'code')

# the kernels page's first GPU cell checks 288 cases, about 150 Triton specialisations, each compiled on its first
# launch (0.24 s each ahead of time on a 2-core Xeon, tools/triton_specialisations.py); these workers each run every
# n-th of its cases first, sharing Triton's cache, so that the cell as written finds them compiled
WARM_SHARE = 0.6            # of the part's own limit, at most, for the warm-up before the cells as written
_WARM_CHECK = ("import itertools\n_every = _cases\n_cases = lambda full, dtypes: itertools.islice("
               "_every(full, dtypes), {i}, {stop}, {n})\n"
               "check_backend(rotary_qk_triton, device={device!r}, dtypes={dtypes}, full={full})")

def part_cells(out:Path, dry:bool)->dict:
    """The pages' GPU cells (on a CPU they skip themselves with one line each): the rotary embedding and attention
    pages whole, GPU cells included, beside the kernels page's Triton compilations spread over processes; then the
    kernels page's GPU cells as written (their kernels now compiled) and the benchmark page's timing example. Each
    page's output goes to the log, so a page stopped at the part's limit still shows how far it got."""
    failed, passed = [], []
    run = lambda *a: [sys.executable, '-u', *map(str, a)]
    runner, cells = ROOT / 'tools' / 'run_gpu_cells.py', ROOT / 'nbs'
    logs = {nb: out / f'cells.{nb}.log' for nb in ('02_rope', '03_attention', 'warm')}
    handles = []
    def start(cmd, log, **env):
        handles.append(open(log, 'a'))
        return subprocess.Popen(cmd, stdout=handles[-1], stderr=subprocess.STDOUT, cwd=cells,
                                env={**os.environ, **env})
    # 02 and 03 are short, and their GPU cells use the pages' own helpers: the whole pages, each cell stopped after
    # 120 s, in the background (the dry run: their GPU cells alone, which skip themselves)
    pages = {nb: start(run(ROOT / 'tools' / 'run_tests.py', cells / f'{nb}.ipynb', '--flags', 'gpu',
                           '--cell-timeout', '120') if not dry else
                       run(runner, cells / f'{nb}.ipynb', mod), logs[nb], OMP_NUM_THREADS='2')
             for nb, mod in (('02_rope', 'rope_lit.rope'), ('03_attention', 'rope_lit.attention'))}
    # the pages whose GPU cells run alone: every name those cells read must be defined (on a CPU the cells skip
    # themselves, so a missing import would otherwise show only on the GPU)
    with open(out / 'cells.log', 'a') as log:
        for nb, mod in (('04_kernels', 'rope_lit.kernels'), ('04a_benchmark', 'rope_lit.bench')):
            r = subprocess.run(run(runner, cells / f'{nb}.ipynb', mod, '--check-names'), cwd=cells, text=True,
                               capture_output=True)
            log.write(f"== {nb}: names\n{r.stdout}{r.stderr[-1000:]}")
            if r.returncode: failed.append(f'{nb} (names)')
    others = _gpu_cells('04_kernels') - 1                 # 04's other GPU cells: one warm-up worker each
    n = 2 if dry else max(2, min(12, (os.cpu_count() or 4) - 2 * len(pages) - others - 2))   # cores left
    check = dict(device='cpu', dtypes='(torch.float32,)', full=False) if dry else \
            dict(device='cuda', dtypes='(torch.float32, torch.bfloat16, torch.float16)', full=True)
    kernels_page = cells / '04_kernels.ipynb'
    one = dict(OMP_NUM_THREADS='1')                      # many processes on the cores: one thread each
    warm = [start(run(runner, kernels_page, 'rope_lit.kernels', '--exec',
                      _WARM_CHECK.format(i=i, n=n, stop=n if dry else None, **check)), logs['warm'], **one)
            for i in range(n)]
    warm += [start(run(runner, kernels_page, 'rope_lit.kernels', '--only', j), logs['warm'], **one)
             for j in range(1, others + 1)]
    t0, stopped = time.perf_counter(), []
    warm_limit = WARM_SHARE * float(os.environ.get('GPU_RUN_PART_LIMIT', 220))
    for p in warm:                                       # a warm-up that hangs must not cost the cells themselves
        try: p.wait(timeout=max(1, warm_limit - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired: p.kill(); p.wait(); stopped.append(p)
    # the warm-up only fills Triton's cache (its failures are logged): the cells as written below decide
    warm_failed = sum(p.returncode != 0 and p not in stopped for p in warm)
    with open(out / 'cells.log', 'a') as log:
        log.write(f"== warm: {len(warm)} processes ({n} share the first GPU cell's cases), {warm_failed} "
                  f"failed, {len(stopped)} stopped at {warm_limit:.0f} s, {time.perf_counter() - t0:.0f} s\n"); log.flush()
        for nb, cmd in (('04_kernels', run(runner, kernels_page, 'rope_lit.kernels')),
                        ('04a_benchmark', run(runner, cells / '04a_benchmark.ipynb', 'rope_lit.bench', '--only', 0))):
            log.write(f"== {nb}\n"); log.flush()
            t0 = time.perf_counter()
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=cells)
            log.write(f"-- {nb}: exit {r.returncode} after {time.perf_counter() - t0:.0f} s\n"); log.flush()
            (failed if r.returncode else passed).append(nb)
            partial(dict(passed=passed, failed=failed))
        for nb, p in pages.items():
            code = p.wait()
            log.write(f"== {nb} (whole page)\n{logs[nb].read_text()}-- {nb}: exit {code}\n"); log.flush()
            (failed if code else passed).append(nb)
            partial(dict(passed=passed, failed=failed))
        log.write(f"== warm-up output\n{logs['warm'].read_text()}\n")
    for h in handles: h.close()
    for f in logs.values(): f.unlink(missing_ok=True)
    return dict(notebooks=4, passed=passed, failed=failed, warm_failed=warm_failed, warm_stopped=len(stopped))

def part_kernels(out:Path, dry:bool)->dict:
    """The benchmark page's GPU cell as written (`rope-lit-bench --device cuda --sweep`: the module end to end, the
    fused call, the floor, compiled transformers, liger-kernel, CUDA graphs, the methods taking turns, at the decode
    shape and two long ones, and the Triton tile sweep); the dry run: the same command on the CPU, tiny"""
    if dry:
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, '-c', 'from rope_lit.bench_cli import main; main()', '--device', 'cpu',
                                '--shapes', '1x2x8x16', '--modes', 'fwd', '--out', d, '--no-progress'],
                               capture_output=True, text=True)
            if r.returncode: raise RuntimeError(r.stderr[-2000:])
            _copy_bench(Path(d), out)
    else:
        # its output goes straight to this part's own (so a part stopped at its limit still shows it)
        r = subprocess.run([sys.executable, '-u', str(ROOT / 'tools' / 'run_gpu_cells.py'),
                            str(ROOT / 'nbs' / '04a_benchmark.ipynb'), 'rope_lit.bench', '--only', '1'],
                           cwd=ROOT / 'nbs', stdout=sys.stderr)
        if r.returncode: raise RuntimeError(f"the benchmark page's GPU cell failed (exit {r.returncode}): see the log")
        _copy_bench(BENCH_RERUN, out)
    rows = list(csv.DictReader(open(out / 'bench_results.csv')))
    return dict(rows=len(rows), methods=sorted({r['method'] for r in rows}))

BENCH_RERUN = ROOT / 'nbs' / 'bench_rerun' / 'gpu'      # where the benchmark page's GPU cell writes

def _copy_bench(src:Path, out:Path, say=print):
    "The benchmark's results and run description into `out` (the tile sweep, if any, to `say`: the log)"
    shutil.copy(src / 'results.csv', out / 'bench_results.csv')
    shutil.copy(src / 'meta.json', out / 'bench_meta.json')
    if (src / 'sweep.csv').exists(): say(f"sweep.csv:\n{(src / 'sweep.csv').read_text()}\n")

def part_varlen_append(out:Path, dry:bool)->dict:
    """Packed sequences (`RotaryEmbedding.varlen`) and rotate-and-append into a KV cache, timed against the floor
    (a copy of what they read) and the two-step way (rotate, then copy into the cache), and the decode-shape call
    piece by piece: device time (CUDA events) and end-to-end time per call from Python"""
    torch, device, _ = _setup(dry)
    from rope_lit.rope import RotaryEmbedding, rotary_cos_sin
    from rope_lit.frequencies import rope_frequencies
    from rope_lit.kernels import rotary_append
    dt = torch.float32 if dry else torch.bfloat16
    D, Hq, Hkv = (16, 4, 2) if dry else (128, 32, 8)
    def timed(f):
        if dry:
            t0 = time.perf_counter(); [f() for _ in range(3)]; s = (time.perf_counter() - t0) / 3
            return s * 1e6, s * 1e6
        import triton.testing
        dev = triton.testing.do_bench(f, warmup=25, rep=100)
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(200): f()
        torch.cuda.synchronize()
        return dev * 1e3, (time.perf_counter() - t0) / 200 * 1e6
    rows = []
    def add(case, method, f):
        dev_us, e2e_us = timed(f)
        rows.append(dict(case=case, method=method, device_us=round(dev_us, 2), end_to_end_us=round(e2e_us, 2)))
    rope = RotaryEmbedding(D).to(device)
    # packed: 8 sequences of unequal lengths, (tokens, heads, head_dim)
    lens = [8, 3, 5, 2, 7, 1, 4, 6] if dry else [4096, 1024, 3000, 512, 2048, 8000, 700, 4000]
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=device)
    T = int(cu[-1])
    q, k = torch.randn(T, Hq, D, device=device, dtype=dt), torch.randn(T, Hkv, D, device=device, dtype=dt)
    case = f"varlen {len(lens)} sequences, {T} tokens, {Hq}/{Hkv} heads of {D}"
    from rope_lit.rope import varlen_positions
    qc, kc_ = q.transpose(0, 1)[None].contiguous(), k.transpose(0, 1)[None].contiguous()   # (1, heads, T, d)
    with torch.no_grad():
        add(case, 'copy q, k (floor)', lambda: (q.clone(), k.clone()))
        add(case, 'rope_lit varlen', lambda: rope.varlen(q, k, cu))
        # where varlen's time goes: its positions and cos/sin rows alone, and the kernel on the same tokens laid
        # out as one contiguous (1, heads, tokens, d) sequence
        add(case, 'varlen positions and cos/sin rows only',
            lambda: rope.cos_sin(T, varlen_positions(cu, T)[None], 0, 1, q.device, q.dtype))
        add(case, 'RotaryEmbedding, same tokens as one contiguous sequence', lambda: rope(qc, kc_))
    # rotate-and-append at the decode shape: one new token per row into a cache of 4096 slots
    B, L = (2, 16) if dry else (32, 4096)
    cos, sin = rotary_cos_sin(torch.arange(L, device=device), rope_frequencies(D, device=device))
    q, k, v = (torch.randn(B, n, 1, D, device=device, dtype=dt) for n in (Hq, Hkv, Hkv))
    kc, vc = (torch.zeros(B, Hkv, L, D, device=device, dtype=dt) for _ in range(2))
    at = torch.randint(0, L - 1, (B,), device=device)
    case = f"rotate-and-append, batch {B}, 1 token, {Hq}/{Hkv} heads of {D}, cache {L}"
    def two_step():
        qr, kr = rope(q, k, offset=at)
        rows_ = torch.arange(B, device=device)
        kc[rows_, :, at] = kr[:, :, 0]; vc[rows_, :, at] = v[:, :, 0]
        return qr
    with torch.no_grad():
        add(case, 'copy q, k, v (floor)', lambda: (q.clone(), k.clone(), v.clone()))
        add(case, 'rope_lit rotary_append', lambda: rotary_append(q, k, v, kc, vc, cos, sin, at))
        # a tensor of offsets is read on the host before anything is written (a check that syncs); an int is not
        add(case, 'rope_lit rotary_append, one int offset', lambda: rotary_append(q, k, v, kc, vc, cos, sin, L // 2))
        add(case, 'rotate, then copy into the cache', two_step)
    # the fused call at the decode shape, piece by piece: where its host time goes (the GPU's share is a few µs)
    from rope_lit.rotation import check_qk_args, offset_rows
    from rope_lit.triton_rope import triton_rotary, rotary_qk_triton
    q, k = (torch.randn(B, Hq, 1, D, device=device, dtype=dt) for _ in range(2))
    c1, s1 = rotary_cos_sin(torch.arange(1, device=device), rope_frequencies(D, device=device))
    case = f"decode call, batch {B}, 1 token, {Hq} heads of {D}"
    with torch.no_grad():
        add(case, 'copy q, k (floor)', lambda: (q.clone(), k.clone()))
        add(case, 'two empty_like (allocation only)', lambda: (torch.empty_like(q), torch.empty_like(k)))
        add(case, 'argument checks only', lambda: (check_qk_args(q, k, c1, s1, None, False),
                                                    offset_rows(q, c1, s1, None, None)))
        if not dry:          # the Triton launcher itself (under the CPU interpreter it means nothing)
            add(case, 'triton_rotary (the launch, no checks)', lambda: triton_rotary(q, k, c1, s1))
        add(case, 'rotary_qk_triton (checks and launch)' if not dry else 'rotary_qk_triton',
            lambda: rotary_qk_triton(q, k, c1, s1))
        add(case, "RotaryEmbedding's call", lambda: rope(q, k))
    _write_csv(out / 'varlen_append.csv', rows)
    return dict(rows=rows)

def part_e2e(out:Path, dry:bool)->dict:
    """A Llama-like model with random weights: training tokens/s and generate() tokens/s, unpatched, patched with
    rope_lit and with liger-kernel's rope-only patch, the variants taking turns step by step (round-robin), so that
    none gains from running later (warmer caches, a settled clock)"""
    torch, device, _ = _setup(dry)
    import importlib.util, statistics, transformers
    from transformers.models.llama import modeling_llama
    from rope_lit import hf
    size = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=256) \
        if dry else dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
                         num_key_value_heads=8, vocab_size=32000)        # about 0.9B parameters
    batch, seq, steps, new, rounds = (2, 32, 2, 4, 2) if dry else (8, 2048, 10, 64, 3)
    dtype = torch.float32 if dry else torch.bfloat16
    result, formula = dict(parameters=None), modeling_llama.apply_rotary_pos_emb
    rotations = dict(unpatched=formula, rope_lit=formula)
    # liger-kernel's rope-only patch replaces transformers' function for every Llama model: it is swapped in only
    # while its own model runs
    if importlib.util.find_spec('liger_kernel') and not dry:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb
        rotations['liger-kernel rope'] = liger_rotary_pos_emb
    else: result['liger-kernel rope'] = 'not run: ' + ('a CPU dry run' if dry else 'liger-kernel not installed')
    models, opts = {}, {}
    for variant in rotations:
        torch.manual_seed(0)
        with torch.device(device):                    # initialised where it runs: no 4 GB copy from the host
            models[variant] = transformers.LlamaForCausalLM(transformers.LlamaConfig(**size)).to(dtype)
        if variant == 'rope_lit': hf.patch(models[variant])
        opts[variant] = torch.optim.AdamW(models[variant].parameters(), lr=1e-4, fused=not dry)
    result['parameters'] = sum(p.numel() for p in models['unpatched'].parameters())
    ids = torch.randint(0, size['vocab_size'], (batch, seq), device=device)
    def timed(variant, f):
        modeling_llama.apply_rotary_pos_emb = rotations[variant]
        try:
            _sync(torch, device); t0 = time.perf_counter(); f(); _sync(torch, device)
            return time.perf_counter() - t0
        finally: modeling_llama.apply_rotary_pos_emb = formula
    def train_step(v):
        models[v](ids, labels=ids).loss.backward(); opts[v].step(); opts[v].zero_grad(set_to_none=True)
    order = list(rotations)
    turns = lambda r: order[r % len(order):] + order[:r % len(order)]      # each variant first in its turn
    train = {v: [] for v in rotations}
    for v in rotations: timed(v, lambda: train_step(v))                     # warm-up
    for r in range(steps):
        for v in turns(r): train[v].append(timed(v, lambda: train_step(v)))
    for v in rotations: result[f'{v} train tokens/s'] = round(batch * seq * steps / sum(train[v]))
    partial(result)
    decode = {v: [] for v in rotations}
    with torch.no_grad():
        gen = lambda v, n: models[v].generate(ids[:1, :16], max_new_tokens=n, min_new_tokens=n, do_sample=False)
        for v in rotations: timed(v, lambda: gen(v, 2))                      # warm-up
        for r in range(rounds):
            for v in turns(r): decode[v].append(timed(v, lambda: gen(v, new)))
    for v in rotations: result[f'{v} decode tokens/s'] = round(new / statistics.median(decode[v]), 1)
    result['method'] = (f'batch {batch} x {seq} tokens, {steps} training steps per variant and {rounds} generate() '
                        f'calls of {new} tokens, variants in turn')
    (out / 'e2e.json').write_text(json.dumps(result, indent=1))
    return result

def part_translation(out:Path, dry:bool)->dict:
    """The translation model's plain code on the device: greedy and beam decoding on the device against the CPU, a
    bf16-autocast training step eager, then under torch.compile as training uses it (`dynamic=True`): same loss and
    gradients, the time of each and the compile time. Eager results are printed before anything is compiled."""
    torch, device, _ = _setup(dry)
    import copy
    from rope_lit.translation.model import Seq2SeqTransformer, greedy_decode, beam_search
    # the base preset's model at its batch size: 250 pairs of 24 source and 24 target tokens, 12,000 in all
    size, (V, B, T) = ((dict(N=1, d_model=32, d_ff=64, h=4), (100, 4, 8)) if dry else
                       (dict(N=6, d_model=512, d_ff=2048, h=8), (8000, 250, 24)))
    tol = 1e-4 if dry else 3e-2
    amp = dict(device_type='cuda' if not dry else 'cpu', dtype=torch.bfloat16, enabled=not dry)
    rows, models = {}, {}
    for position in ('sinusoidal', 'rope'):              # first everything eager, for both schemes
        torch.manual_seed(0)
        m = Seq2SeqTransformer(V, **size, dropout=0.0, position=position, max_len=128).to(device).train()
        src, tgt = torch.randint(4, V, (B, T), device=device), torch.randint(4, V, (B, T + 1), device=device)
        def step(fwd, m=m, src=src, tgt=tgt):
            with torch.autocast(**amp): loss = fwd(src, tgt[:, :-1], tgt[:, 1:], 0.1)
            grads = torch.autograd.grad(loss, list(m.parameters()))
            return loss.float(), torch.cat([g.float().flatten() for g in grads])
        def seconds(fwd, step=step, n=3 if dry else 10):
            for _ in range(2): step(fwd)
            _sync(torch, device); t0 = time.perf_counter()
            for _ in range(n): step(fwd)
            _sync(torch, device); return (time.perf_counter() - t0) / n
        r = dict(eager_step_ms=round(1e3 * seconds(m), 2))
        m.eval(); cpu = copy.deepcopy(m).cpu().float()
        with torch.no_grad():
            r['greedy_same_as_cpu'] = bool(torch.equal(greedy_decode(m, src[:4], 24).cpu(),
                                                       greedy_decode(cpu, src[:4].cpu(), 24)))
            r['beam_same_as_cpu'] = bool(torch.equal(beam_search(m, src[:4], 4, max_len=24).cpu(),
                                                     beam_search(cpu, src[:4].cpu(), 4, max_len=24)))
        m.train(); rows[position], models[position] = r, (m, step, seconds)
        partial(dict(rows=rows, failed=[]))
    # then compiled, as training compiles it: about a minute each on an H200's host, RoPE first
    for position in ('rope', 'sinusoidal'):
        m, step, seconds = models[position]
        t0 = time.perf_counter()
        compiled = m if dry else torch.compile(m, dynamic=True)   # the dry run: no compilation (minutes on a CPU)
        (le, ge), (lc, gc) = step(m), step(compiled)
        r = rows[position]
        r.update(first_compiled_step_s=round(time.perf_counter() - t0, 1), loss_rel=_rel(lc.reshape(1), le.reshape(1)),
                 grad_rel=float((gc - ge).norm() / ge.norm()), compiled_step_ms=round(1e3 * seconds(compiled), 2))
        r['ok'] = r['loss_rel'] <= tol and r['grad_rel'] <= tol
        partial(dict(rows=rows, failed=[p for p, x in rows.items() if x.get('ok') is False]))
    return dict(rows=rows, failed=[p for p, r in rows.items() if not r.get('ok')])

def _sync(torch, device):
    if device == 'cuda': torch.cuda.synchronize()

def _write_csv(path:Path, rows:list):
    with open(path, 'w', newline='') as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)

PARTS = dict(build=part_build, correctness=part_correctness, hf=part_hf, cells=part_cells, kernels=part_kernels,
             varlen_append=part_varlen_append, e2e=part_e2e,
             translation=part_translation)

# ------------------------------------------------------------------ the driver
def partial(result:dict):
    "A part's result so far, printed as one JSON line: if the part is stopped at its limit, the last one is kept"
    print(json.dumps(result, default=str), flush=True)

def _last_json(text:str):
    "The last line of `text` that is a JSON object (what `partial` printed), or None"
    for line in reversed(text.strip().splitlines()):
        try: value = json.loads(line)
        except ValueError: continue
        if isinstance(value, dict): return value
    return None

def _run_part(name:str, out:Path, dry:bool, limit:float)->tuple:
    """Run one part in its own process group under `limit` seconds: (status, detail, stdout, stderr). A part
    stopped at its limit is killed with everything it started (the pages' test runners, compiler workers), so that
    nothing of it runs on beside the next part's timings; its last printed result is kept."""
    import signal
    env = {**os.environ, 'GPU_RUN_PART_LIMIT': f'{limit:.0f}'}   # a part may share out its own time
    p = subprocess.Popen([sys.executable, __file__, '--out', str(out), '--part', name, *(['--dry-run'] if dry else [])],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
                         env=env)
    try:
        stdout, stderr = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        stdout, stderr = p.communicate()
        return 'TIMEOUT', dict(stopped_at_s=round(limit), last_result=_last_json(stdout)), stdout, stderr
    detail = _last_json(stdout) if p.returncode == 0 else stderr.strip()[-300:]
    failed = p.returncode != 0 or (isinstance(detail, dict) and detail.get('failed'))
    return ('FAIL' if failed else 'ok'), detail, stdout, stderr

def _wheels():
    "Install what the GPU machine lacks from the wheels carried in .whl/ (it has no network)"
    whl = ROOT / '.whl'
    if not whl.is_dir(): return
    missing = [m for m in ('fastcore', 'numpy', 'IPython', 'execnb', 'matplotlib_inline', 'nbdev')
               if subprocess.run([sys.executable, '-c', f'import {m}']).returncode]
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
    ap.add_argument('--deadline', type=float, default=None,
                    help='seconds for the whole run: each part gets at most what is left of it')
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
    began, began_wall = time.perf_counter(), time.time()
    probe = ("import json, platform, torch, importlib.metadata as m\n"
             "v = {}\nfor p in ('torch', 'triton', 'transformers', 'accelerate', 'liger-kernel'):\n"
             "    try: v[p] = m.version(p)\n    except m.PackageNotFoundError: v[p] = None\n"
             "gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None\n"
             "import subprocess as sp\n"
             "try: mode = sp.run(['nvidia-smi', '--query-gpu=compute_mode', '--format=csv,noheader'], capture_output=True,"
             " text=True, timeout=20).stdout.strip() or None\n"
             "except Exception: mode = None\n"
             "print(json.dumps(dict(gpu=gpu, compute_mode=mode, cuda=torch.version.cuda, python=platform.python_version(),"
             " versions=v)))")
    r = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True)
    env = json.loads(r.stdout) if r.returncode == 0 else dict(error=r.stderr[-300:])
    env['date'] = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    for name in parts:
        limit = LIMITS[name] * args.scale * (2 if args.dry_run else 1)   # a CPU shared with other work: room
        start = time.perf_counter()
        if args.deadline is not None:
            limit = min(limit, args.deadline - (start - began))
            if limit < 5:
                summary.append(dict(part=name, status='SKIPPED', seconds=0, detail='no time left before --deadline'))
                continue
        status, detail, stdout, stderr = _run_part(name, out, args.dry_run, limit)
        if name == 'kernels' and status != 'ok' and not args.dry_run and (BENCH_RERUN / 'results.csv').exists() \
                and (BENCH_RERUN / 'results.csv').stat().st_mtime > began_wall:   # the shapes it finished
            _copy_bench(BENCH_RERUN, out, log.write)
        log.write(f"== {name} ({status}, limit {limit:.0f} s)\n{stdout}\n{stderr}\n"); log.flush()
        summary.append(dict(part=name, status=status, seconds=round(time.perf_counter() - start, 1), detail=detail))
        for cells in sorted(out.glob('cells*.log')):       # eight files at most: the cells' logs join run.log
            log.write(f"-- {cells.name}\n{cells.read_text()}"); log.flush(); cells.unlink()
        # written after every part, so that a run stopped from outside still leaves what it finished
        (out / 'summary.json').write_text(json.dumps(dict(dry_run=args.dry_run, environment=env, parts=summary),
                                                     indent=1, default=str))
    log.close()
    print(f"{'part':<12} {'status':<8} {'seconds':>8}  detail")
    for s in summary: print(f"{s['part']:<12} {s['status']:<8} {s['seconds']:>8}  {str(s['detail'])[:150]}")
    sys.exit(0 if all(s['status'] == 'ok' for s in summary) else 1)

if __name__ == '__main__': main()
