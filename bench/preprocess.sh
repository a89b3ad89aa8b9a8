#!/usr/bin/env bash
# bench/preprocess.sh: `megatron-c preprocess` against Hugging Face `tokenizers` in Python on
# the same JSONL, with the same tokenizers, on 1 core and on all cores.
#
#   bench/preprocess.sh                  # ~200 MB of Jane Austen, GPT-2 and Llama 3
#   BENCH_MB=50 MC_BUILD_DIR=build-prep bench/preprocess.sh
#
# Environment:
#   MC_SHARED_DIR  shared data (default ../shared): data/corpus/austen.jsonl,
#                  data/gpt2/gpt2-{vocab.json,merges.txt}, data/llama3/tokenizer.json
#   MC_BUILD_DIR   where megatron-c was built (default build)
#   BENCH_MB       size of the generated JSONL in MB (default 200)
#   BENCH_WORKERS  the "all cores" worker count (default $(nproc))
#   BENCH_TMP      scratch directory (default a fresh mktemp -d, removed at the end)
#   PYTHON         python3 with `tokenizers` and numpy (pip install tokenizers numpy)
#
# Both sides do the whole job: read the JSONL, parse each line, tokenize the "text" value,
# append the EOD, write PREFIX_text_document.bin/.idx. The Python side uses
# Tokenizer.encode_batch on chunks of 1000 documents with RAYON_NUM_THREADS workers (the
# library's own parallelism, its fastest path). Its .bin is compared with ours, so the
# benchmark also checks that both tokenized the 200 MB identically. Throughput is input
# MB (2^20 bytes) per wall-clock second.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${MC_SHARED_DIR:-$ROOT/../shared}
BUILD=${MC_BUILD_DIR:-$ROOT/build}
BIN="$BUILD/megatron-c"
MB=${BENCH_MB:-200}
NCORES=${BENCH_WORKERS:-$(nproc)}
PY=${PYTHON:-python3}
CORPUS="$SHARED/data/corpus/austen.jsonl"
GPT2_VOCAB="$SHARED/data/gpt2/gpt2-vocab.json"
GPT2_MERGES="$SHARED/data/gpt2/gpt2-merges.txt"
LLAMA3="$SHARED/data/llama3/tokenizer.json"

for f in "$BIN" "$CORPUS" "$GPT2_VOCAB" "$GPT2_MERGES" "$LLAMA3"; do
    [ -e "$f" ] || { echo "bench/preprocess.sh: missing $f (set MC_SHARED_DIR / MC_BUILD_DIR)" >&2; exit 2; }
done
"$PY" -c "import tokenizers, numpy" 2>/dev/null ||
    { echo "bench/preprocess.sh: $PY cannot import tokenizers and numpy (pip install tokenizers numpy)" >&2; exit 2; }

if [ -n "${BENCH_TMP:-}" ]; then
    TMP=$BENCH_TMP
    mkdir -p "$TMP"
else
    TMP=$(mktemp -d)
    trap 'rm -rf "$TMP"' EXIT
fi

# ---- the input: austen.jsonl repeated up to BENCH_MB ----------------------------------------
INPUT="$TMP/austen_${MB}mb.jsonl"
if [ ! -s "$INPUT" ]; then
    want=$((MB * 1024 * 1024))
    size=$(stat -c %s "$CORPUS")
    reps=$(((want + size - 1) / size))
    : >"$INPUT"
    for _ in $(seq "$reps"); do cat "$CORPUS" >>"$INPUT"; done
fi
BYTES=$(stat -c %s "$INPUT")
DOCS=$(wc -l <"$INPUT")
INPUT_MB=$(awk -v b="$BYTES" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "input: $INPUT ($INPUT_MB MB, $DOCS documents); $NCORES cores for the parallel runs; $(nproc) online"

# ---- the Python side ---------------------------------------------------------------------
cat >"$TMP/hf_preprocess.py" <<'EOF'
import json, os, struct, sys
import numpy as np
from tokenizers import Tokenizer, pre_tokenizers
from tokenizers.models import BPE

kind, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "gpt2":
    tok = Tokenizer(BPE.from_file(sys.argv[4], sys.argv[5]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    eod, dtype = 50256, np.uint16
else:
    tok = Tokenizer.from_file(sys.argv[4])
    eod, dtype = tok.token_to_id("<|end_of_text|>"), np.int32
lengths = []
with open(out + ".bin", "wb") as fbin, open(path, "r", encoding="utf-8") as fin:
    chunk = []
    def flush():
        for enc in tok.encode_batch(chunk):
            ids = enc.ids
            if ids:
                ids.append(eod)
                fbin.write(np.array(ids, dtype=dtype).tobytes())
            lengths.append(len(ids))
        chunk.clear()
    for line in fin:
        chunk.append(json.loads(line)["text"])
        if len(chunk) == 1000:
            flush()
    flush()
seq = [n for n in lengths if n > 0]
doc_idx, count = [0], 0
for n in lengths:
    count += n > 0
    doc_idx.append(count)
ptr = np.zeros(len(seq), dtype=np.int64)
if seq:
    ptr[1:] = np.cumsum(np.array(seq[:-1], dtype=np.int64)) * np.dtype(dtype).itemsize
with open(out + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8 if dtype == np.uint16 else 4))
    f.write(struct.pack("<QQ", len(seq), len(doc_idx)))
    f.write(np.array(seq, dtype=np.int32).tobytes())
    f.write(ptr.tobytes())
    f.write(np.array(doc_idx, dtype=np.int64).tobytes())
EOF

now() { date +%s.%N; }
RESULTS=()

# run LABEL TOKENIZER WORKERS: both implementations, then the comparison line.
run() {
    local name=$1 workers=$2
    shift 2
    local tokargs pyargs
    if [ "$name" = gpt2 ]; then
        tokargs=(--tokenizer-type GPT2BPETokenizer --vocab-file "$GPT2_VOCAB" --merge-file "$GPT2_MERGES")
        pyargs=("$GPT2_VOCAB" "$GPT2_MERGES")
    else
        tokargs=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$LLAMA3")
        pyargs=("$LLAMA3")
    fi
    local t0 t1 t2 t3
    t0=$(now)
    "$BIN" preprocess --input "$INPUT" --output-prefix "$TMP/mc_${name}_$workers" --append-eod \
        --workers "$workers" --log-interval 1000000000 "${tokargs[@]}" 2>"$TMP/mc_${name}_$workers.log"
    t1=$(now)
    t2=$(now)
    RAYON_NUM_THREADS=$workers TOKENIZERS_PARALLELISM=true "$PY" "$TMP/hf_preprocess.py" "$name" "$INPUT" \
        "$TMP/hf_${name}_$workers" "${pyargs[@]}"
    t3=$(now)
    local same="identical"
    cmp -s "$TMP/mc_${name}_${workers}_text_document.bin" "$TMP/hf_${name}_$workers.bin" || same="DIFFERENT .bin"
    cmp -s "$TMP/mc_${name}_${workers}_text_document.idx" "$TMP/hf_${name}_$workers.idx" || same="$same, DIFFERENT .idx"
    local line
    line=$(awk -v n="$name" -v w="$workers" -v b="$BYTES" -v a="$t0" -v c="$t1" -v d="$t2" -v e="$t3" -v s="$same" 'BEGIN {
        mc = b / 1048576 / (c - a); hf = b / 1048576 / (e - d);
        printf "%-7s %3d workers | megatron-c %8.2f MB/s (%7.2f MB/s/core, %6.1f s) | HF tokenizers %8.2f MB/s (%7.2f MB/s/core, %6.1f s) | ratio %5.2fx | outputs %s",
               n, w, mc, mc / w, c - a, hf, hf / w, e - d, mc / hf, s }')
    echo "$line"
    RESULTS+=("$line")
    rm -f "$TMP/mc_${name}_${workers}_text_document."* "$TMP/hf_${name}_$workers".*
}

for name in gpt2 llama3; do
    run "$name" 1
    [ "$NCORES" -gt 1 ] && run "$name" "$NCORES"
done
echo
echo "summary ($INPUT_MB MB of JSONL; ratio = megatron-c / HF tokenizers throughput):"
printf '%s\n' "${RESULTS[@]}"
