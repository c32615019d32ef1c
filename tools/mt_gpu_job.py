#!/usr/bin/env python
"""One run of `tools/gpu_translate.sh`: `rope-lit-translate train ...` (which ends by decoding and scoring val and
test_2016_flickr), then the German sources of the blind test sets decoded greedily and with beam search into the
same run folder, `hyp.<set>.<greedy|beam>.en`, one line per source line (their English references are kept outside
the project, so nothing here scores them), and the mean attention entropy per layer and kind over test_2016_flickr,
teacher-forced on its references, into `entropy.json` (the weights do not leave the GPU machine, so it is measured
there). Last, with --average-last K, the mean of the weights kept after the last K epochs (train --keep-epochs K)
decodes test_2016_flickr and the blind sets again, into `hyp.<set>.<decoding>.avgK.en`, `results.avgK.json` and
`attention.avgK.json`: a run stopped while doing so has lost only those.

  python tools/mt_gpu_job.py --blind DIR --device cuda --average-last 5 -- train --run-dir runs/x --keep-epochs 5 ...

One process per run, so that the script's deadline stops a run with one signal.
"""
import argparse, gzip, json
from pathlib import Path

def read_sources(path:Path)->list:
    "The lines of a (gzipped) source file, empty ones kept: one hypothesis per source line"
    text = (gzip.open(path, 'rt', encoding='utf-8') if path.suffix == '.gz' else open(path, encoding='utf-8')).read()
    return text.split('\n')[:-1] if text.endswith('\n') else text.split('\n')

def translate_blind(model, tok, cfg, files:list, run_dir:Path, tag:str=''):
    "Each German-only file in `files`, decoded greedily and with beam search into `hyp.<set>.<decoding><tag>.en`"
    from rope_lit.translation.train import translate
    from rope_lit.cli_args import atomic_write
    for f in files:
        name, sources = f.name.split('.de')[0], read_sources(f)
        for decoding, beam in (('greedy', 1), ('beam', cfg.beam_size)):
            hyps = translate(model, tok, sources, beam, cfg.length_penalty, cfg.max_len, cfg.eval_batch)
            atomic_write(run_dir / f'hyp.{name}.{decoding}{tag}.en', ''.join(h + '\n' for h in hyps))
        print(f"{run_dir.name}: translated {name} ({len(sources)} sentences), greedy and beam"
              f"{' (averaged weights)' if tag else ''}", flush=True)

def gpu_memory(run_dir:Path, stage:str):
    """Print the most GPU memory this process allocated during `stage` and what it holds cached, then hand the cache
    back: ten runs share one GPU, and a run that finished training must not keep its training's cached blocks while
    it decodes (a first ten-run command on an H200 lost a run to that, out of memory while decoding)"""
    import torch
    if not torch.cuda.is_available() or not torch.cuda.is_initialized(): return
    gib = 2**30
    print(f"{run_dir.name}: GPU memory during {stage}: at most {torch.cuda.max_memory_allocated() / gib:.1f} GiB "
          f"allocated, {torch.cuda.memory_reserved() / gib:.1f} GiB held", flush=True)
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--blind', help='folder of <set>.de or <set>.de.gz files to translate (none: skip)')
    ap.add_argument('--device', default='cpu')
    ap.add_argument('--average-last', type=int, default=0, help='also decode with the mean of the last K epochs\' weights')
    ap.add_argument('train', nargs=argparse.REMAINDER, help='-- then the `rope-lit-translate train` arguments')
    args = ap.parse_args()
    train_args = args.train[1:] if args.train[:1] == ['--'] else args.train
    from rope_lit.translation.cli import main as translate_cli
    from rope_lit.translation.train import load_model, load_splits, evaluate, epoch_weights, epoch_number
    from rope_lit.translation.data import encode_pairs
    from rope_lit.translation.results import attention_entropy
    from rope_lit.cli_args import atomic_write
    translate_cli(train_args)
    run_dir = Path(train_args[train_args.index('--run-dir') + 1])
    gpu_memory(run_dir, 'training and its final decoding')
    model, tok, cfg = load_model(run_dir, args.device)
    files = sorted(Path(args.blind).glob('*.de*')) if args.blind else []
    if args.blind and not files: print(f"{run_dir.name}: no German sources (*.de, *.de.gz) in {args.blind}: "
                                       "no blind test set translated", flush=True)
    translate_blind(model, tok, cfg, files, run_dir)
    splits = load_splits(cfg)
    test = encode_pairs(tok, splits['test_2016_flickr'], cfg.max_len)             # after the translations: a
    entropy = attention_entropy(model, test)                                      # failure here loses none of them
    atomic_write(run_dir / 'entropy.json', json.dumps(dict(entropy, split='test_2016_flickr')))
    print(f"{run_dir.name}: attention entropy over test_2016_flickr ({len(test)} sentences)", flush=True)
    gpu_memory(run_dir, 'the blind sets and the entropy')
    if args.average_last:                                       # last of all: a stop here loses only these files
        k, tag = args.average_last, f'.avg{args.average_last}'
        epochs = [epoch_number(f) for f in epoch_weights(run_dir)[-k:]]
        try: model, tok, cfg = load_model(run_dir, args.device, average_last=k)
        except ValueError as e:                                 # fewer epochs kept than asked: the run is whole
            print(f"{run_dir.name}: not averaged: {e}", flush=True); return
        results = evaluate(model, tok, cfg, run_dir, {'test_2016_flickr': splits['test_2016_flickr']},
                           tag=tag, example_file=f'attention{tag}.json')
        translate_blind(model, tok, cfg, files, run_dir, tag)
        atomic_write(run_dir / f'results{tag}.json', json.dumps(dict(config=json.loads((run_dir / 'config.json').read_text()),
            averaged_epochs=epochs, results=results), indent=1, ensure_ascii=False))
        gpu_memory(run_dir, 'the averaged weights\' decoding')
        print(f"{run_dir.name}: the mean of epochs {epochs[0]}-{epochs[-1]}: test_2016_flickr BLEU "
              f"{results['test_2016_flickr']['greedy']['bleu']:.2f} greedy, {results['test_2016_flickr']['beam']['bleu']:.2f} beam", flush=True)

if __name__ == '__main__': main()
