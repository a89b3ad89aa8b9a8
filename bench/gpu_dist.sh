#!/usr/bin/env bash
# Distributed training on two GPUs of one host (Distributed training I, acceptance 3), in one
# call on a machine of kind nvidia-h200-x2 (scripts/gpu/run_x2.sh sets up mpirun there):
#   1. NCCL bus bandwidth: `megatron-c bench comm` (all-reduce, all-gather, reduce-scatter);
#   2. the 1.5B bench shape with 8 micro-batches per step: one GPU, DP2 with the distributed
#      optimizer (overlapped grad reduce and param gather), TP2 and TP2+SP; PyTorch compiled on
#      one GPU and with DDP over two (torchrun, no_sync between micro-batches);
#   3. loss agreement: a tiny Llama in bf16 for 30 steps on one GPU, DP2, TP2 and TP2+SP, and in
#      fp32 on the CPU: the largest relative difference of any iteration's lm loss.
# Prints tokens/s per GPU with the ratios to one GPU, and PASS/FAIL lines for the targets
# (DP2 >= 97% of one GPU per GPU; losses within the bf16 tolerance of 2%).
#   bench/gpu_dist.sh BUILD_DIR [SHARED_BENCH_DIR]
# Environment: MPIRUN (the launcher prefix, default "mpirun --allow-run-as-root"), DEVICE
# (cuda; cpu runs the same plumbing on tiny shapes, to check this script without GPUs),
# MC_BENCH_ITERS (steady iterations, default 8), AGREEMENT_ONLY=1 (step 3 alone) and
# DIST_FLAGS (added to its multi-rank runs): with "--distributed-backend mpi" both ranks
# share the one GPU of an nvidia-h200 machine, their device memory over MPI through the host.
set -uo pipefail
BUILD=${1:-build}
SHARED_BENCH=${2:-${MC_SHARED_DIR:-../shared}/bench}
BIN="$BUILD/megatron-c"
OUTDIR=${OUT:-$(mktemp -d)}/gpu_dist
mkdir -p "$OUTDIR"
read -r -a MPI <<< "${MPIRUN:-mpirun --allow-run-as-root}"
DEVICE=${DEVICE:-cuda}
ITERS=${MC_BENCH_ITERS:-8}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
MPI+=(-x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x LD_LIBRARY_PATH)
[ -n "${OPAL_PREFIX:-}" ] && MPI+=(-x OPAL_PREFIX)

if [ "$DEVICE" = cuda ]; then
    PREC=(--device cuda --bf16)
    SHAPE=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8
           --ffn-hidden-size 8192 --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000
           --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 2048
           --micro-batch-size 4)
    COMM_SIZES=1MB-2GB
else
    PREC=(--device cpu)
    SHAPE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention --num-query-groups 2
           --ffn-hidden-size 128 --swiglu --normalization RMSNorm --position-embedding-type rope
           --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 256 --seq-length 32
           --micro-batch-size 4)
    COMM_SIZES=1KB-1MB
fi
COMMON=(--log-interval 1 --eval-iters 0 --lr 3e-4 --attention-dropout 0 --hidden-dropout 0 --mock-data
        --tokenizer-type NullTokenizer)

# name, ranks, flags...: one training run; prints a RESULT line (median steady tokens/s per GPU)
run() {
    local name=$1 np=$2
    shift 2
    local dir="$OUTDIR/$name"
    rm -rf "$dir"
    local launch=("$BIN")
    [ "$np" -gt 1 ] && launch=("${MPI[@]}" -np "$np" "$BIN")
    timeout 300 "${launch[@]}" train "$@" --log-dir "$dir" > "$dir.log" 2>&1
    local rc=$?
    python3 - "$dir/metrics.jsonl" "$name" "$rc" "$dir.log" <<'PY'
import json, re, statistics, sys
path, name, rc, log = sys.argv[1:5]
try:
    rows = [json.loads(l) for l in open(path)]
except OSError:
    print(f"RESULT ours {name} FAILED rc {rc} (see {log})"); sys.exit(0)
steady = rows[3:] if len(rows) > 5 else rows[1:]
m = re.search(r"max allocated: ([0-9.]+)", open(log).read())
print("RESULT ours " + json.dumps(dict(
    name=name, tok_s_per_gpu=statistics.median(r["tokens_per_sec_per_gpu"] for r in steady),
    tflops=statistics.median(r["tflops_per_gpu"] for r in steady), mem_gib=float(m.group(1)) / 1024 if m else None,
    losses=[r["lm_loss"] for r in rows])))
PY
}

{
if [ "${AGREEMENT_ONLY:-0}" != 1 ]; then
echo "== NCCL / MPI collectives, 2 ranks"
timeout 300 "${MPI[@]}" -np 2 "$BIN" bench comm --device "$DEVICE" --sizes "$COMM_SIZES" > "$OUTDIR/comm.log" 2>&1
tail -40 "$OUTDIR/comm.log"

echo "== throughput, 8 micro-batches per step"
run one "1" "${SHAPE[@]}" "${COMMON[@]}" "${PREC[@]}" --global-batch-size 32 --train-iters "$ITERS"
run dp2 2 "${SHAPE[@]}" "${COMMON[@]}" "${PREC[@]}" --global-batch-size 64 --train-iters "$ITERS" \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
run tp2 2 "${SHAPE[@]}" "${COMMON[@]}" "${PREC[@]}" --global-batch-size 32 --train-iters "$ITERS" \
    --tensor-model-parallel-size 2
run tp2sp 2 "${SHAPE[@]}" "${COMMON[@]}" "${PREC[@]}" --global-batch-size 32 --train-iters "$ITERS" \
    --tensor-model-parallel-size 2 --sequence-parallel
if [ "$DEVICE" = cuda ]; then
    T=(--layers 16 --hidden 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 128256 --seq 2048 --mbs 4 --accum 8
       --steps 10 --warmup 3 --compile 1)
    timeout 300 python3 "$SHARED_BENCH/torch_llama.py" "${T[@]}" --tag one > "$OUTDIR/torch_one.log" 2>&1
    grep '^RESULT' "$OUTDIR/torch_one.log" | head -1 | sed 's/^RESULT/RESULT torch/'
    timeout 400 torchrun --standalone --nproc_per_node 2 "$SHARED_BENCH/torch_llama.py" "${T[@]}" --tag ddp2 \
        > "$OUTDIR/torch_ddp2.log" 2>&1
    grep '^RESULT' "$OUTDIR/torch_ddp2.log" | sed 's/^RESULT/RESULT torch/'
fi
fi # AGREEMENT_ONLY

echo "== loss agreement: tiny Llama, 30 steps ${DIST_FLAGS:-}"
TINY=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --group-query-attention --num-query-groups 2
      --ffn-hidden-size 256 --swiglu --normalization RMSNorm --position-embedding-type rope
      --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 512 --seq-length 64
      --micro-batch-size 2 --global-batch-size 8 --train-iters 30 --lr 1e-3 --seed 7 "${COMMON[@]}")
run eq_cpu 1 "${TINY[@]}" --device cpu
run eq_one 1 "${TINY[@]}" "${PREC[@]}"
read -r -a DIST <<< "${DIST_FLAGS:-}"
run eq_dp2 2 "${TINY[@]}" "${PREC[@]}" "${DIST[@]}" --use-distributed-optimizer
run eq_tp2 2 "${TINY[@]}" "${PREC[@]}" "${DIST[@]}" --tensor-model-parallel-size 2
run eq_tp2sp 2 "${TINY[@]}" "${PREC[@]}" "${DIST[@]}" --tensor-model-parallel-size 2 --sequence-parallel
} 2>&1 | tee "$OUTDIR/results.txt"

python3 - "$OUTDIR/results.txt" <<'PY'
import json, sys
ours, torch = {}, {}
for line in open(sys.argv[1]):
    if line.startswith("RESULT ours {"):
        r = json.loads(line[len("RESULT ours "):]); ours[r["name"]] = r
    elif line.startswith("RESULT torch {"):
        r = json.loads(line[len("RESULT torch "):])
        if "tag" in r: torch[r["tag"]] = r
print()
one = ours.get("one")
print(f"{'run':8s} {'tok/s/GPU':>10s} {'/ one GPU':>9s} {'TFLOP/s':>8s} {'GiB':>6s}")
for k in ["one", "dp2", "tp2", "tp2sp"] if one else []:  # (none with AGREEMENT_ONLY=1)
    o = ours.get(k)
    if not o: print(f"{k:8s} FAILED"); continue
    ratio = o["tok_s_per_gpu"] / one["tok_s_per_gpu"] if one else float("nan")
    mem = f"{o['mem_gib']:6.1f}" if o["mem_gib"] is not None else "     -"
    print(f"{k:8s} {o['tok_s_per_gpu']:10.0f} {ratio:9.3f} {o['tflops']:8.1f} {mem}")
if torch.get("one") and torch.get("ddp2"):
    t1, t2 = torch["one"]["tok_s_per_gpu"], torch["ddp2"]["tok_s_per_gpu"]
    print(f"PyTorch: one GPU {t1:.0f}, DDP2 {t2:.0f} tok/s/GPU ({t2 / t1:.3f})")
if one and ours.get("dp2"):
    r = ours["dp2"]["tok_s_per_gpu"] / one["tok_s_per_gpu"]
    print(f"{'PASS' if r >= 0.97 else 'FAIL'} DP2 keeps {r:.3f} of one GPU's tokens/s per GPU (target 0.97)")
ref_cpu, ref_one = ours.get("eq_cpu"), ours.get("eq_one")
for k in ["eq_one", "eq_dp2", "eq_tp2", "eq_tp2sp"]:
    o = ours.get(k)
    if not o or not ref_cpu: print(f"FAIL {k}: no losses"); continue
    vs_cpu = max(abs(a - b) / abs(b) for a, b in zip(o["losses"], ref_cpu["losses"]))
    vs_one = max(abs(a - b) / abs(b) for a, b in zip(o["losses"], ref_one["losses"])) if ref_one else float("nan")
    ok = vs_cpu < 0.02 and len(o["losses"]) == len(ref_cpu["losses"])
    print(f"{'PASS' if ok else 'FAIL'} {k}: lm loss within {100 * vs_cpu:.3f}% of the fp32 CPU run "
          f"({100 * vs_one:.3f}% of one GPU) at every one of {len(o['losses'])} iterations")
PY
