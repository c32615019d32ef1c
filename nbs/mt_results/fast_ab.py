"""A/B of the translation model's CPU speed wing, piece by piece, in one run.

Usage, from `nbs/`:  python mt_results/fast_ab.py OUT.json [--rounds 7] [--tiny]

Every variant lives in a worker process that builds its models once; the parent asks the worker for one timing at a
time, round-robin in a shuffled order each round, so that every variant sees the same machine. Workers never run at
the same time. Training: seconds per optimizer step (forward, label-smoothed loss, backward, Adam) on a fixed batch of
32 sentences of 20 source and 20 target tokens; decoding: seconds to decode one 20-token sentence greedily to exactly
72 tokens. Pieces whose effect on the whole step is small are also timed on the step they target: the loss, its
forward and backward pass from fixed logits of those 32 × 20 target tokens; attention's dropout core, forward and backward of one self-attention core with a padding
mask and dropout 0.1 on the weights. A piece's gain is the median over rounds of (time without it) / (time with it) - 1,
paired round by round; the whole wing's gain compares the plain model with the model after `speed_up` in the same way.
The two sizes are those of the `cpu` and `base` presets of rope_lit.translation.train, vocabulary included.
"""
import argparse, datetime, json, os, platform, random, re, statistics, subprocess, sys, time

SIZES = {'small': dict(N=3, d_model=256, d_ff=512, h=4, vocab_size=6000),      # the `cpu` preset's model
         'base': dict(N=6, d_model=512, d_ff=2048, h=8, vocab_size=8000)}      # the `base` preset's
TINY = {'small': dict(N=1, d_model=32, d_ff=64, h=2, vocab_size=100)}
TRAIN = ('plain', 'wing', 'wing-dropout', 'wing-attention', 'wing-loss')
TARGETS = ('loss', 'attention')   # pieces timed alone too, plain and wing
DECODE = ('plain', 'python-step', 'wing')
BATCH, SRC, TGT, OUT_LEN = 32, 20, 20, 72
STEPS = {'small': 3, 'base': 2}   # optimizer steps per training timing


def worker(tiny:bool):   # timings are keyed 'now/KIND/SIZE/VARIANT', as in the committed results
    "Answer 'train SIZE VARIANT' / 'decode SIZE VARIANT' lines with seconds, one line each"
    import torch
    torch.set_num_threads(int(os.environ.get('AB_THREADS', '2')))
    sizes = TINY if tiny else SIZES
    made = {}

    def batch(size):
        g, vocab = torch.Generator().manual_seed(1), sizes[size]['vocab_size']
        return (torch.randint(4, vocab, (BATCH, SRC), generator=g), torch.randint(4, vocab, (BATCH, TGT + 1), generator=g))

    from rope_lit.translation.model import Seq2SeqTransformer, greedy_decode, smoothed_loss
    from rope_lit.translation.fast import speed_up, decoding_options, PIECES, fast_smoothed_loss, FastDropoutAttention
    from rope_lit.attention import RotaryMultiHeadAttention
    from rope_lit.translation.train import make_config, make_optimizer, train_step
    from rope_lit.translation.data import BOS, EOS, PAD
    import torch.nn as nn

    def model(size, train):
        torch.manual_seed(0)
        s = sizes[size]
        return Seq2SeqTransformer(s['vocab_size'], s['N'], s['d_model'], s['d_ff'], s['h'], 0.1, 'rope', 128).train(train)

    def make(kind, size, variant):
        if kind == 'loss':
            torch.manual_seed(0)
            z = (torch.randn(BATCH, TGT, sizes[size]['vocab_size']) * 3).requires_grad_()
            tgt = batch(size)[1][:, 1:]
            fn = smoothed_loss if variant == 'plain' else fast_smoothed_loss
            def loss():
                z.grad = None
                (fn(z, tgt, 0.1) / tgt.numel()).backward()
            return loss
        if kind == 'attention':
            torch.manual_seed(0)
            s = sizes[size]
            att = RotaryMultiHeadAttention(s['d_model'], s['h'], dropout=0.1)
            if variant == 'wing': att.__class__ = FastDropoutAttention
            q, k, v = (torch.randn(BATCH, s['h'], SRC, s['d_model'] // s['h'], requires_grad=True) for _ in range(3))
            mask = torch.ones(BATCH, 1, 1, SRC, dtype=torch.bool); mask[::2, ..., SRC - 5:] = False
            g = torch.randn(BATCH, s['h'], SRC, s['d_model'] // s['h'])
            def core():
                for t in (q, k, v): t.grad = None
                att.attend(q, k, v, mask, False, 0.1, False)[0].backward(g)
            return core
        m = model(size, kind == 'train')
        if kind == 'train':
            pieces = {'plain': None, 'wing': PIECES}.get(variant)
            if variant.startswith('wing-'): pieces = tuple(p for p in PIECES if p != variant[5:])
            if pieces is not None: speed_up(m, pieces=pieces)
            cfg = make_config('tiny', **sizes[size], device='cpu')
            opt, sched = make_optimizer(m, cfg)
            data = [batch(size)]
            step = lambda: train_step(m, m, opt, sched, data, cfg, torch.device('cpu'))
            for _ in range(2): step()   # warm-up
            return lambda: [step() for _ in range(STEPS.get(size, 1))]
        src = batch(size)[0][:1]
        if variant == 'plain': return lambda: greedy_decode(m, src, OUT_LEN, min_len=OUT_LEN)
        speed_up(m)
        if variant == 'wing': return lambda: greedy_decode(m, src, OUT_LEN, min_len=OUT_LEN)   # the C++ step
        def steps():   # the same loop with the PyTorch step
            with decoding_options(m, native=False): greedy_decode(m, src, OUT_LEN, min_len=OUT_LEN)
        return steps

    print('ready', flush=True)
    for line in sys.stdin:
        kind, size, variant = line.split()
        if (kind, size, variant) not in made:
            made[kind, size, variant] = make(kind, size, variant)
            made[kind, size, variant]()   # a first call, not timed: builds, caches, first allocations
        fn = made[kind, size, variant]
        t0 = time.perf_counter(); fn(); dt = time.perf_counter() - t0
        per = dt / STEPS.get(size, 1) if kind == 'train' else dt
        print(f'{per:.6f}', flush=True)


def cpu_name()->str:
    "The CPU's model name and its vector extensions that matter here, from /proc/cpuinfo (Linux)"
    try: info = open('/proc/cpuinfo').read()
    except OSError: return platform.processor() or platform.machine()
    name = re.search(r'(?m)^model name\s*:\s*(.+)$', info)
    flags = set((re.search(r'(?m)^flags\s*:\s*(.+)$', info) or re.match('', '')).group(0).split())
    ext = [f for f in ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16') if f in flags]
    return ', '.join([name.group(1).strip() if name else platform.machine()] + ext)


def versions():
    import torch
    return dict(python=platform.python_version(), torch=torch.__version__, threads=int(os.environ.get('AB_THREADS', '2')))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('out'); ap.add_argument('--rounds', type=int, default=7)
    ap.add_argument('--tiny', action='store_true', help='tiny model, one round: a test of the script')
    ap.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker: return worker(a.tiny)
    sizes = TINY if a.tiny else SIZES
    rounds = 1 if a.tiny else a.rounds
    w = subprocess.Popen([sys.executable, os.path.abspath(__file__), 'x', '--worker'] + (['--tiny'] if a.tiny else []),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if w.stdout.readline().strip() != 'ready': raise RuntimeError('the worker did not start')
    tasks = [('now', k, s, v) for s in sizes for k, vs in (('train', TRAIN), ('decode', DECODE)) for v in vs]
    tasks += [('now', k, s, v) for s in sizes for k in TARGETS for v in ('plain', 'wing')]
    times = {t: [] for t in tasks}
    rng = random.Random(0)
    started = datetime.datetime.now(datetime.timezone.utc)
    for r in range(rounds):
        order = tasks[:]; rng.shuffle(order)
        for t in order:
            w.stdin.write(' '.join(t[1:]) + '\n'); w.stdin.flush()
            times[t].append(float(w.stdout.readline()))
        print(f'round {r + 1}/{rounds} done', file=sys.stderr)
    w.stdin.close(); w.wait()
    med = lambda xs: statistics.median(xs)
    gain = lambda slow, fast: med([a / b for a, b in zip(times[slow], times[fast])]) - 1
    pieces = []
    for s in sizes:
        for piece, step in (('loss', 'the loss, forward and backward'), ('attention', 'the attention core, forward and backward')):
            pieces.append(dict(piece=piece, step=step, size=s, without_s=med(times['now', piece, s, 'plain']),
                               with_s=med(times['now', piece, s, 'wing']),
                               gain=gain(('now', piece, s, 'plain'), ('now', piece, s, 'wing'))))
        for piece in ('dropout', 'attention', 'loss'):
            pieces.append(dict(piece=piece, step='training step', size=s, without_s=med(times['now', 'train', s, f'wing-{piece}']),
                               with_s=med(times['now', 'train', s, 'wing']),
                               gain=gain(('now', 'train', s, f'wing-{piece}'), ('now', 'train', s, 'wing'))))
        for piece, slow, fast in (('lean decoding step', 'plain', 'python-step'), ('decoding step in C++', 'python-step', 'wing')):
            pieces.append(dict(piece=piece, step='decoding a sentence', size=s, without_s=med(times['now', 'decode', s, slow]),
                               with_s=med(times['now', 'decode', s, fast]),
                               gain=gain(('now', 'decode', s, slow), ('now', 'decode', s, fast))))
    for p in pieces:   # a piece timed alone targets that step; its row on the whole training step shows its effect
        p['targeted'] = not (p['piece'] in TARGETS and p['step'] == 'training step')
        p['kept'] = p['gain'] >= 0.10 if p['targeted'] else None
    out = dict(date=started.strftime('%Y-%m-%d %H:%M UTC'), machine=cpu_name(),
               cpus=os.cpu_count(), versions=versions(), rounds=rounds, tiny=a.tiny,
               command=' '.join(['python mt_results/fast_ab.py OUT.json'] + sys.argv[2:]), sizes=sizes,
               times={'/'.join(k): v for k, v in times.items()}, pieces=pieces,
               whole=[dict(step=k, size=s, plain_s=med(times['now', k, s, 'plain']), wing_s=med(times['now', k, s, 'wing']),
                           gain=gain(('now', k, s, 'plain'), ('now', k, s, 'wing')))
                      for s in sizes for k in ('train', 'decode')])
    tmp = a.out + '.tmp'
    with open(tmp, 'w') as f: json.dump(out, f, indent=1)
    os.replace(tmp, a.out)


if __name__ == '__main__':
    main()
