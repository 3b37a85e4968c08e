#!/usr/bin/env bash
# GPU check, for a machine with a CUDA GPU (a few minutes): the gpu-marked tests, then a short training of the
# default model in fp32 and in bf16, printing training target tokens/s and translation sentences/s (greedy and
# beam 5 on test_2016_flickr). CPU figures for comparison: bench/README.md and docs/results.md.
#   NMT_DATA_DIR=../shared/corpora bash bench/gpu_check.sh [STEPS]
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-600}
OUT=${OUT:-bench/runs/gpu_check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
python -m pytest -q -m gpu tests/test_gpu.py 2>&1 | tail -5
for precision in fp32 bf16; do
  run="$OUT/train_$precision"
  rm -rf "$run"
  python train.py device=cuda train.precision=$precision train.max_steps=$STEPS train.valid_every=$((STEPS / 2)) \
    train.keep_best=0 eval.plots=0 hydra.run.dir="$run" > "$run.log" 2>&1 || { tail -20 "$run.log"; continue; }
  python - "$run" "$precision" <<'PY'
import json, sys
records = [json.loads(line) for line in open(f"{sys.argv[1]}/metrics.jsonl")]
scores = json.load(open(f"{sys.argv[1]}/eval/test.scores.json"))
print(f"{sys.argv[2]}: training {records[-1]['tokens_per_sec']:.0f} target tok/s (last window, step "
      f"{records[-1]['step']}), valid ppl {records[-1]['valid_ppl']:.2f}, test BLEU beam {scores['bleu']:.2f}")
PY
  src="${NMT_DATA_DIR:-data}/multi30k/test_2016_flickr.de.gz"
  zcat "$src" > "$OUT/test.de"
  for beam in 1 5; do
    python translate.py checkpoint="$run/checkpoints/best.pt" input="$OUT/test.de" output="$OUT/test.$beam.en" \
      beam_size=$beam device=cuda precision=$precision 2>&1 | grep -o "translated .*sentences/s" \
      | sed "s/^/$precision beam $beam: /"
  done
done
