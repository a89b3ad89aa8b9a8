# shapes.sh: sourced by the GPU machine's A/B and profiling scripts (bench/gpu_ab.sh,
# trace.sh, profile.sh, ncu_kernels.sh, gemm_profile.sh): the bench shapes' megatron-c flags (as
# bench/gpu_train.sh runs them), the flags every profiling run shares (common_flags ITERS),
# the flags of a shape by name (shape_flags NAME), and Nsight Compute's binary.
LLAMA=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8
       --ffn-hidden-size 8192 --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000
       --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 2048
       --micro-batch-size 4 --global-batch-size 4)
LLAMA_X8=("${LLAMA[@]:0:${#LLAMA[@]}-1}" 32) # the same with --global-batch-size 32: 8 micro-batches a step
GPT2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
      --vocab-size 50257 --micro-batch-size 64 --global-batch-size 64 --openai-gelu)
shape_flags() { # shape name (llama, llama-x8, gpt2): sets FLAGS, or says what is known and fails
    case $1 in
    llama) FLAGS=("${LLAMA[@]}") ;;
    llama-x8) FLAGS=("${LLAMA_X8[@]}") ;;
    gpt2) FLAGS=("${GPT2[@]}") ;;
    *) echo "unknown shape '$1' (llama, llama-x8 or gpt2)" >&2; return 2 ;;
    esac
}
common_flags() { # iterations: sets COMMON
    COMMON=(--train-iters "$1" --log-interval 1 --eval-iters 0 --lr 3e-4 --attention-dropout 0 --hidden-dropout 0
            --mock-data --tokenizer-type NullTokenizer --device cuda --bf16)
}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
