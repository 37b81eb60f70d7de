#!/bin/sh
# Tracing overhead of llama-moe-trace: the same binary and model, tracing on and off, alternating.
# usage: measure-trace-overhead.sh BIN_DIR MODEL.gguf REPEATS OUT_DIR [N_PREDICT]
# The model is read once first so every run starts with it in the page cache.
set -eu
bin=$1 model=$2 repeats=$3 out=$4 n=${5:-128}
mkdir -p "$out"
cat "$model" > /dev/null
prompt="The quick brown fox jumps over the lazy dog while the cat watches from the warm window sill."
i=0
while [ "$i" -lt "$repeats" ]; do
    for variant in on off; do
        flag=""; [ "$variant" = off ] && flag="--no-trace"
        "$bin/llama-moe-trace" -m "$model" -p "$prompt" -n "$n" --ignore-eos -t 2 $flag \
            -o "$out/$variant-$i.moetrace" --timings "$out/$variant-$i.json" > /dev/null
    done
    i=$((i + 1))
done
python3 - "$out" "$repeats" <<'PY'
import json, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
for variant in ("on", "off"):
    runs = [json.load(open(f"{out}/{variant}-{i}.json")) for i in range(repeats)]
    dec = [r["decode_tokens_per_s"] for r in runs]
    pre = [r["prompt_tokens_per_s"] for r in runs]
    print(f"tracing {variant:<3}  decode t/s median {statistics.median(dec):8.1f}  "
          f"[{', '.join(f'{x:.1f}' for x in dec)}]  prompt t/s median {statistics.median(pre):8.1f}")
PY
