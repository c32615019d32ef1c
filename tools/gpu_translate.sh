#!/usr/bin/env bash
# Train and evaluate the `base` translation preset for several position schemes and seeds, all in ONE command
# of at most 10 minutes on the device machine, all runs sharing its GPU at once.
#
#   On a GPU machine, from the repository root:
#     bash tools/gpu_translate.sh
#   On a leased GPU that hands back only a few files (data and wheels carried there):
#     bash tools/gpu_translate.sh --pack --out DIR
#   Locally, a dry run of the same script (tiny preset, synthetic data, CPU, seconds):
#     bash tools/gpu_translate.sh --dry
#
# Before calling the device tool, on this machine:
#     mkdir -p .data && cp -r ../shared/data/multi30k ../shared/data/multi30k_blind .data/   # data (git-ignored)
#     (elsewhere: rope-lit-translate download --dir .data/multi30k, and the German test_2017_flickr.de.gz and
#      test_2018_flickr.de.gz of the same Multi30k repository into .data/multi30k_blind: see the GPU how-to page)
#     pip download --no-deps -d .whl fastcore                                # if .whl/ has no fastcore wheel yet
# and pass carry: [".data", ".whl"].
#
# Options (or the environment variables of the same names): --runs (space-separated position:seed list; default five
# seeds each of sinusoidal and rope), --epochs (epochs per run, default 18: every run the same length), --average (K:
# each run keeps its last K epochs' weights and, after everything else, decodes test_2016_flickr and the blind sets
# again with their mean, into hyp.<set>.<decoding>.avgK.en, results.avgK.json and attention.avgK.json; default 5,
# 0 = none, at most --epochs), --at-once (N: at most N runs at a time, the next starting when one ends; default 0,
# all at once; no run starts after the deadline), --budget
# (training seconds per run instead, as the first GPU runs used), --deadline (seconds from the script's start after
# which unfinished runs are stopped, default 560), --max-tokens, --blind (folder of German-only test sets, default .data/multi30k_blind: each
# run translates them, greedy and beam, into hyp.<set>.<decoding>.en), --out (default runs/gpu_out), --pack.
# Writes $OUT/mt/<position>_s<seed>/{config.json,tokenizer.json,metrics.jsonl,results*.json,attention*.json,
# entropy.json,hyp.*.en,train.log} (no checkpoints) and $OUT/mt/env.txt. With --pack, the same tree goes into ONE
# archive, $OUT/mt.tar.gz (unpack with `tar xzf mt.tar.gz`), beside $OUT/summary.txt (the summary lines printed
# last), and nothing else is written under $OUT: a machine that returns at most 8 files (16 MiB each) returns all.
# Memory: a `base` run allocated at most 9.4 GiB of GPU memory in any stage but held up to 19.6 GiB (PyTorch's cache),
# plus about 0.8 GiB outside PyTorch (the CUDA context), and ten at once ran out of memory in one or two runs on an
# NVIDIA H200 (141 GB) in both ten-run commands of 2026-11-28; six at once ran through on 2026-11-30. Run at most six
# at once on such a GPU and three on an 80 GB one (--at-once 6, --at-once 3). Each run's train.log says how much it
# allocated and held in each stage.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
DRY=0
while [ $# -gt 0 ]; do            # flags; each also reads from the environment variable of the same name
  case "$1" in
    --dry) DRY=1 ;;
    --pack) PACK=1 ;;
    --budget) BUDGET=$2; shift ;;
    --deadline) DEADLINE=$2; shift ;;
    --out) OUT=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --max-tokens) MAX_TOKENS=$2; shift ;;
    --epochs) EPOCHS=$2; shift ;;
    --average) AVERAGE=$2; shift ;;
    --blind) BLIND=$2; shift ;;
    --at-once) AT_ONCE=$2; shift ;;
    *) echo "gpu_translate: unknown option $1 (--dry, --epochs N, --average K, --budget S, --deadline S, --out DIR, --runs LIST, --max-tokens N, --blind DIR, --at-once N, --pack)"; exit 2 ;;
  esac; shift
done
if [ -n "${BUDGET:-}" ] && [ -n "${EPOCHS:-}" ]; then
  echo "gpu_translate: --budget and --epochs exclude each other: give one run length"; exit 2
fi
OUT=${OUT:-$root/runs/gpu_out}
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
work="$root/runs/gpu_work"; PACK=${PACK:-0}
if [ "$PACK" = 1 ]; then dest="$work/packed/mt"; rm -rf "$work/packed"; else dest="$OUT/mt"; fi
mkdir -p "$work" "$dest" "$OUT"

# rope_lit.attention needs fastcore: install it from carried wheels when the machine lacks it (no internet there).
if ! $PY -c "import fastcore" 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/rope_lit_site "$root"/.whl/fastcore-*.whl \
    || { echo "gpu_translate: fastcore missing and no fastcore wheel in .whl/"; exit 1; }
  export PYTHONPATH="/tmp/rope_lit_site:$PYTHONPATH"
fi

if [ "$DRY" = 1 ]; then
  RUNS=${RUNS:-"sinusoidal:0 rope:0 rope+cross:0 hexu:0"}
  common=(--preset tiny --device cpu --threads 1 --n-eval 20); device=cpu
  [ -n "${BUDGET:-}" ] || EPOCHS=${EPOCHS:-2}; DEADLINE=${DEADLINE:-120}; AVERAGE=${AVERAGE:-2}
  BLIND=${BLIND:-$work/blind}                    # two made-up "blind" sets, so that their decoding is tested too
  mkdir -p "$BLIND"
  printf 'Ein Hund rennt im Schnee.\n\nZwei Männer spielen Fußball.\n' | gzip > "$BLIND/test_2017_flickr.de.gz"
  printf 'Eine Frau liest ein Buch.\n' | gzip > "$BLIND/test_2018_flickr.de.gz"
else
  # The decisive comparison: five seeds each, every run trained for the same number of epochs (not the same time).
  RUNS=${RUNS:-"sinusoidal:0 sinusoidal:1 sinusoidal:2 sinusoidal:3 sinusoidal:4 rope:0 rope:1 rope:2 rope:3 rope:4"}
  [ -f "$root/.data/multi30k/train.de.gz" ] || { echo "gpu_translate: .data/multi30k missing: copy the Multi30k files there (rope-lit-translate download --dir .data/multi30k) and carry .data"; exit 1; }
  common=(--preset base --data "$root/.data/multi30k" --device cuda --threads 2 --epoch-checkpoints 0 ${MAX_TOKENS:+--max-tokens $MAX_TOKENS}); device=cuda
  [ -n "${BUDGET:-}" ] || EPOCHS=${EPOCHS:-18}   # an explicit --budget alone: training time, as the first GPU runs
  DEADLINE=${DEADLINE:-560}; BLIND=${BLIND:-$root/.data/multi30k_blind}; AVERAGE=${AVERAGE:-5}
fi
# A fixed number of epochs skips the greedy validation BLEU after each epoch (validation loss is still logged): with
# ten runs sharing the GPU it would cost about 125 s of the 560 (the plan is on the GPU translation results page).
# A time budget keeps it, as the first GPU runs had it.
case "$DEADLINE" in ''|*[!0-9]*) echo "gpu_translate: --deadline must be a whole number of seconds, got '$DEADLINE'"; exit 2 ;; esac
AT_ONCE=${AT_ONCE:-0}
case "$AT_ONCE" in ''|*[!0-9]*) echo "gpu_translate: --at-once must be a whole number of runs (0: all at once), got '$AT_ONCE'"; exit 2 ;; esac
AT_ONCE=$((10#$AT_ONCE))
case "$AVERAGE" in ''|*[!0-9]*) echo "gpu_translate: --average must be a whole number of epochs (0: none), got '$AVERAGE'"; exit 2 ;; esac
AVERAGE=$((10#$AVERAGE))                        # 05 -> 5: the job's file names and the summary's must agree
if [ -n "${EPOCHS:-}" ] && [ "$AVERAGE" -gt "$EPOCHS" ]; then
  echo "gpu_translate: --average $AVERAGE exceeds --epochs $EPOCHS: a run cannot average more epochs than it trains"; exit 2
fi
if [ -n "${EPOCHS:-}" ]; then length=(--epochs "$EPOCHS" --no-val-bleu); else length=(--time-budget "$BUDGET"); fi

pids=(); fail=0
pidlist=$(mktemp "$work/pids.XXXXXX"); stop="$pidlist.deadline"   # this invocation's own (others may run beside it)
for r in $RUNS; do name=${r%%:*}; name="${name/+/_}_s${r##*:}"; rm -rf "${work:?}/$name" "$work/$name.log"; done
# The hardware and settings, while the first runs start (importing torch and starting CUDA takes seconds).
{ date -u; $PY -c "import torch, sacrebleu, tokenizers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'sacrebleu', sacrebleu.__version__, 'tokenizers', tokenizers.__version__); print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA')"; nproc; nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null; echo "RUNS=$RUNS EPOCHS=${EPOCHS:-} BUDGET=${BUDGET:-} DEADLINE=$DEADLINE AVERAGE=$AVERAGE AT_ONCE=$AT_ONCE"; } > "$dest/env.txt" 2>&1 &
envjob=$!
# Stop whatever is still running at the deadline, counted from the script's start, so that the copy below always
# happens within the command's limit: no run starts after it, a TERM (a run then stops after its current step), and a
# KILL 5 s later. The watchdog reads the runs' process ids from a file, so it also stops runs started after it.
left=$(( DEADLINE - SECONDS )); [ "$left" -gt 0 ] || left=1
( trap 'kill "$sp" 2>/dev/null; exit 0' TERM
  sleep "$left" & sp=$!; wait "$sp"
  touch "$stop"
  for p in $(cat "$pidlist"); do kill "$p" 2>/dev/null; done
  sleep 5 & sp=$!; wait "$sp"
  for p in $(cat "$pidlist"); do kill -9 "$p" 2>/dev/null; done ) >/dev/null 2>&1 &
watchdog=$!
running() { local n=0 p; for p in ${pids[@]+"${pids[@]}"}; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done; echo "$n"; }
for r in $RUNS; do
  pos=${r%%:*}; seed=${r##*:}; name="${pos/+/_}_s$seed"
  # --at-once N: start a run only while fewer than N are running (bash reaps a finished run at once, so it no
  # longer answers kill -0)
  while [ "$AT_ONCE" -gt 0 ] && [ "$(running)" -ge "$AT_ONCE" ] && [ ! -e "$stop" ]; do sleep 1; done
  if [ -e "$stop" ]; then echo "gpu_translate: $name not started: the deadline came first" > "$work/$name.log"; fail=1; continue; fi
  $PY "$root/tools/mt_gpu_job.py" --blind "$BLIND" --device "$device" --average-last "$AVERAGE" -- train "${common[@]}" \
      --position "$pos" --seed "$seed" --run-dir "$work/$name" "${length[@]}" --keep-epochs "$AVERAGE" --no-progress \
      > "$work/$name.log" 2>&1 &
  pids+=($!); echo $! >> "$pidlist"
done
wait "$envjob"
for p in ${pids[@]+"${pids[@]}"}; do wait "$p" || fail=1; done
kill "$watchdog" 2>/dev/null
rm -f "$pidlist" "$stop"

summarise() {
for r in $RUNS; do
  pos=${r%%:*}; seed=${r##*:}; name="${pos/+/_}_s$seed"
  rm -rf "${dest:?}/$name"; mkdir -p "$dest/$name"           # nothing left from an earlier command's run
  cp "$work/$name.log" "$dest/$name/train.log" 2>/dev/null
  for f in config.json tokenizer.json metrics.jsonl entropy.json; do cp "$work/$name/$f" "$dest/$name/" 2>/dev/null; done
  cp "$work/$name"/hyp.*.en "$work/$name"/results*.json "$work/$name"/attention*.json "$dest/$name/" 2>/dev/null
  if [ -f "$dest/$name/results.json" ]; then
    $PY -c "import json,sys,pathlib; r=json.load(open(sys.argv[1])); t=r['results']['test_2016_flickr']
a = pathlib.Path(sys.argv[1]).with_name(f'results.avg{sys.argv[3]}.json')
m = json.load(open(a))['results']['test_2016_flickr'] if a.is_file() else None
print(sys.argv[2], 'tok/s', r['tokens_per_s'], 'epochs', r['epochs'], 'test BLEU greedy', t['greedy']['bleu'], 'beam', t['beam']['bleu'],
      *(('averaged: greedy', m['greedy']['bleu'], 'beam', m['beam']['bleu']) if m else
        ('averaged: none (stopped or skipped: see train.log)',) if sys.argv[3] != '0' else ()))" \
      "$dest/$name/results.json" "$name" "$AVERAGE"
  else echo "$name: no results.json (the end of its train.log follows)"; tail -3 "$dest/$name/train.log"; fi
done
[ "$fail" = 0 ] && echo "gpu_translate: all runs finished" || echo "gpu_translate: some runs failed or were stopped"
}
# When the runs ended, counted from the script's start, so that the wall time is on record beside the runs.
echo "runs ended: $(date -u), ${SECONDS} s after the script started" >> "$dest/env.txt"
if [ "$PACK" = 1 ]; then
  summarise | tee "$OUT/summary.txt"
  tar czf "$OUT/mt.tar.gz" -C "$(dirname "$dest")" mt || { echo "gpu_translate: packing failed"; exit 1; }
  echo "gpu_translate: packed $(du -k "$OUT/mt.tar.gz" | cut -f1) KiB into mt.tar.gz"
else
  summarise
fi
exit $fail
