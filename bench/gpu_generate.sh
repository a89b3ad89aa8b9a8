#!/usr/bin/env bash
# Generation speed on the GPU machine (issue 22, acceptance 5), side by side in one call:
# Megatron-C's `generate` (bf16, its key/value cache) and Hugging Face transformers'
# generate (shared/bench/hf_generate.py: bf16, SDPA, its KV cache) on the same model shape
# with random weights, prompt 512 tokens, 128 new ones, greedy, batch 1 (BATCH=32: 32
# prompts decoded together, ours through --prompts-file). Prints both decode speeds (ours
# also with MC_DECODE_GRAPHS=0, each step op by op instead of a CUDA graph's replay: "ours
# eager", unless GEN_EAGER=0; and the line saying why, should our graphs have been off), their ratio and the
# memory-bandwidth bound (every weight read once a decode step at about
# 4 TB/s, a token for each of the batch's sequences). Our model is the same random Llama
# written by transformers (so both read the same weights), imported with --load-hf.
# (transformers' figure counts its prefill in its time, ours does not.)
# GEN_ALSO="VAR=value ..." runs ours once more with that environment (MC_GEMV=0: cuBLASLt for
# the decode GEMVs) and prints its speed too.
# With GEN_TRACE=1 on the GPU machine (scripts/gpu/carried_env.sh sourced), also a kernel trace of
# our decode steps (tools/decode_trace_summary.py).
#   [LAYERS=16 HIDDEN=2048 HEADS=32 KV=8 FFN=8192 VOCAB=128256 PROMPT=512 NEW=128 BATCH=1 GEN_TRACE=0 GEN_ALSO= GEN_EAGER=1]
#   bench/gpu_generate.sh BUILD_DIR [SHARED_BENCH_DIR]
set -uo pipefail
BUILD=${1:-build}
SHARED_BENCH=${2:-${MC_SHARED_DIR:-../shared}/bench}
OUTDIR=${OUT:-$(mktemp -d)}/gpu_generate
mkdir -p "$OUTDIR"
L=${LAYERS:-16} H=${HIDDEN:-2048} NH=${HEADS:-32} KV=${KV:-8} F=${FFN:-8192} V=${VOCAB:-128256}
P=${PROMPT:-512} N=${NEW:-128} B=${BATCH:-1}
MODEL=$(mktemp -d)/hf
trap 'rm -rf "$(dirname "$MODEL")"' EXIT
python3 - "$MODEL" "$L" "$H" "$NH" "$KV" "$F" "$V" "$((P + N))" <<'PY' || exit 1
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
out, L, H, NH, KV, F, V, pos = sys.argv[1], *map(int, sys.argv[2:])
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=V, hidden_size=H, intermediate_size=F, num_hidden_layers=L, num_attention_heads=NH,
                  num_key_value_heads=KV, max_position_embeddings=pos, rope_theta=500000.0, tie_word_embeddings=False)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)
PY
python3 -c "import json, random; random.seed(1)
for _ in range($B): print(json.dumps({'prompt': ' '.join(str(random.randrange($V)) for _ in range($P))}))" \
    > "$OUTDIR/prompts.jsonl"
"$BUILD/megatron-c" generate --load-hf "$MODEL" --prompts-file "$OUTDIR/prompts.jsonl" --max-new-tokens "$N" \
    --device cuda --bf16 --tokenizer-type NullTokenizer --vocab-size "$V" > "$OUTDIR/ours.log" 2>&1
grep -o 'decode [0-9.]* tok/s' "$OUTDIR/ours.log" | tail -1 | sed 's/^/ours: /' || echo "ours: FAILED (see $OUTDIR/ours.log)"
if [ "${GEN_EAGER:-1}" = 1 ]; then
    MC_DECODE_GRAPHS=0 "$BUILD/megatron-c" generate --load-hf "$MODEL" --prompts-file "$OUTDIR/prompts.jsonl" \
        --max-new-tokens "$N" --device cuda --bf16 --tokenizer-type NullTokenizer --vocab-size "$V" \
        > "$OUTDIR/ours_eager.log" 2>&1
    grep -o 'decode [0-9.]* tok/s' "$OUTDIR/ours_eager.log" | tail -1 | sed 's/^/ours eager: /' ||
        echo "ours eager: FAILED (see $OUTDIR/ours_eager.log)"
fi
grep -h 'decode graphs off' "$OUTDIR/ours.log"
if [ -n "${GEN_ALSO:-}" ]; then # one more of ours with GEN_ALSO's environment (e.g. MC_GEMV=0): an A/B
    env $GEN_ALSO "$BUILD/megatron-c" generate --load-hf "$MODEL" --prompts-file "$OUTDIR/prompts.jsonl" \
        --max-new-tokens "$N" --device cuda --bf16 --tokenizer-type NullTokenizer --vocab-size "$V" \
        > "$OUTDIR/ours_also.log" 2>&1
    grep -o 'decode [0-9.]* tok/s' "$OUTDIR/ours_also.log" | tail -1 | sed "s/^/ours $GEN_ALSO: /" ||
        echo "ours $GEN_ALSO: FAILED (see $OUTDIR/ours_also.log)"
fi
if [ "${GEN_TRACE:-0}" = 1 ] && [ -n "${C:-}" ] && [ -e "$C/lib/trace/libmc_kernel_trace.so" ]; then
    # where a decode step's time goes: our run again under the CUPTI kernel tracer (carried by
    # scripts/gpu/carry_build.sh), kernels by name over its steps (each ends at argmax_rows)
    LD_LIBRARY_PATH="$C/lib/trace:$LD_LIBRARY_PATH" CUDA_INJECTION64_PATH="$C/lib/trace/libmc_kernel_trace.so" \
        MC_TRACE_OUT="$OUTDIR/trace.csv" "$BUILD/megatron-c" generate --load-hf "$MODEL" \
        --prompts-file "$OUTDIR/prompts.jsonl" --max-new-tokens "$N" --device cuda --bf16 --tokenizer-type NullTokenizer \
        --vocab-size "$V" > "$OUTDIR/ours_traced.log" 2>&1
    python3 "$(dirname "$0")/../tools/decode_trace_summary.py" "$OUTDIR/trace.csv" $((B + 3)) || echo "trace: no summary"
fi
python3 "$SHARED_BENCH/hf_generate.py" --layers "$L" --hidden "$H" --heads "$NH" --kv-heads "$KV" --ffn "$F" \
    --vocab "$V" --prompt "$P" --new "$N" --batches "$B" > "$OUTDIR/hf.log" 2>&1
grep '^RESULT' "$OUTDIR/hf.log" | sed 's/^RESULT/hf:/' || echo "hf: FAILED (see $OUTDIR/hf.log)"
python3 - "$OUTDIR/ours.log" "$OUTDIR/hf.log" "$L" "$H" "$NH" "$KV" "$F" "$V" "$B" <<'PY'
import json, re, sys
ours_log, hf_log, L, H, NH, KV, F, V, B = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
m = re.findall(r"decode ([0-9.]+) tok/s", open(ours_log).read())
hf = [json.loads(l.split(" ", 1)[1]) for l in open(hf_log) if l.startswith("RESULT")]
d = H // NH
params = L * (H * (NH + 2 * KV) * d + NH * d * H + 3 * H * F + 2 * H) + 2 * V * H + H
bound = B * 4.0e12 / (2 * params)
o = float(m[-1]) if m else float("nan")
h = hf[0]["new_tok_s"] if hf else float("nan")
print(f"decode tok/s, batch {B}: ours {o:.1f}, transformers {h:.1f}, ours/transformers {o / h:.2f}; "
      f"bandwidth bound ~{bound:.0f} ({params / 1e9:.2f}B params in bf16 at 4 TB/s), ours at {o / bound:.0%} of it")
PY
