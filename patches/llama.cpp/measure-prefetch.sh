#!/bin/sh
# Route-aware prefetch vs demand paging alone, under a cgroup v1 memory limit (run as root).
# usage: measure-prefetch.sh BIN_DIR MODEL.gguf LIMIT_MIB REPEATS OUT_DIR
# Each trial evicts the model from the page cache, then runs llama-moe-trace with
# LLAMA_MMAP_DEMAND=1 --no-repack in a fresh memory cgroup; variants alternate (A B A B ...).
# Prints one line per trial: variant, prompt t/s, decode t/s, major faults, prefetch bytes.
set -eu
bin=$1 model=$2 limit_mib=$3 repeats=$4 out=$5
cg=/sys/fs/cgroup/memory/appliance-prefetch-$$
mkdir -p "$out"
prompt="The quick brown fox jumps over the lazy dog while the cat watches from the warm window sill."
trial() {  # variant index extra-args
    python3 -c 'import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)' "$model"
    mkdir "$cg"
    echo $((limit_mib * 1024 * 1024)) > "$cg/memory.limit_in_bytes"
    echo $((limit_mib * 1024 * 1024)) > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
    sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cg" \
        env LLAMA_MMAP_DEMAND=1 /usr/bin/time -f "%F %R" -o "$out/$1-$2.time" \
        "$bin/llama-moe-trace" -m "$model" -p "$prompt" -n 64 --ignore-eos --no-repack -t 2 \
        -o "$out/$1-$2.moetrace" --timings "$out/$1-$2.json" --text "$out/$1-$2.txt" $3 > /dev/null
    rmdir "$cg"
    python3 - "$out/$1-$2.json" "$out/$1-$2.time" "$1" <<'PY'
import json, sys
t = json.load(open(sys.argv[1])); major, minor = open(sys.argv[2]).read().split()[-2:]
print(f"{sys.argv[3]:<9} prompt {t['prompt_tokens_per_s']:8.2f} t/s  decode {t['decode_tokens_per_s']:8.2f} t/s"
      f"  major faults {major:>7}  prefetch {t.get('prefetch_bytes', 0) / 2**20:8.1f} MiB")
PY
}
i=0
while [ "$i" -lt "$repeats" ]; do
    trial demand "$i" ""
    trial prefetch "$i" "--prefetch-experts"
    i=$((i + 1))
done
