# shapes.sh: sourced by the GPU machine's A/B and profiling scripts (bench/gpu_ab.sh,
# trace.sh, profile.sh, ncu_kernels.sh, gemm_profile.sh): the bench shapes' megatron-c flags (as
# bench/gpu_train.sh runs them), the flags every profiling run shares (common_flags ITERS),
# the flags of a shape by name (shape_flags NAME), and Nsight Compute's binary.
LLAMA=(--num-layers 16 --hidden-size 2048 --num-attention-heads 32 --group-query-attention --num-query-groups 8
       --ffn-hidden-size 8192 --swiglu --normalization RMSNorm --position-embedding-type rope --rotary-base 500000
       --untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --seq-length 2048
       --micro-batch-size 4 --global-batch-size 4)
LLAMA_X8=("${LLAMA[@]:0:${#LLAMA[@]}-1}" 32) # the same with --global-batch-size 32: 8 micro-batches a step
# the long shapes of issue 21 (bench/gpu_train.sh's "long" group), one micro-batch a step
LLAMA_ARCH=(--swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights
            --disable-bias-linear)
L3_8B=("${LLAMA_ARCH[@]}" --num-layers 8 --hidden-size 4096 --num-attention-heads 32 --group-query-attention
       --num-query-groups 8 --ffn-hidden-size 14336 --rotary-base 500000 --vocab-size 128256 --seq-length 8192
       --micro-batch-size 1 --global-batch-size 1)
L2_7B=("${LLAMA_ARCH[@]}" --num-layers 8 --hidden-size 4096 --num-attention-heads 32
       --ffn-hidden-size 11008 --rotary-base 10000 --vocab-size 32000 --seq-length 4096
       --micro-batch-size 2 --global-batch-size 2)
L3_70B=("${LLAMA_ARCH[@]}" --num-layers 2 --hidden-size 8192 --num-attention-heads 64 --group-query-attention
        --num-query-groups 8 --ffn-hidden-size 28672 --rotary-base 500000 --vocab-size 128256 --seq-length 8192
        --micro-batch-size 1 --global-batch-size 1)
GPT2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
      --vocab-size 50257 --micro-batch-size 64 --global-batch-size 64 --openai-gelu)
shape_flags() { # shape name (llama, llama-x8, gpt2, llama3-8b-8l, llama2-7b-8l, llama3-70b-2l): sets FLAGS, or fails
    case $1 in
    llama) FLAGS=("${LLAMA[@]}") ;;
    llama-x8) FLAGS=("${LLAMA_X8[@]}") ;;
    gpt2) FLAGS=("${GPT2[@]}") ;;
    llama3-8b-8l) FLAGS=("${L3_8B[@]}") ;;
    llama2-7b-8l) FLAGS=("${L2_7B[@]}") ;;
    llama3-70b-2l) FLAGS=("${L3_70B[@]}") ;;
    *) echo "unknown shape '$1' (llama, llama-x8, gpt2, llama3-8b-8l, llama2-7b-8l or llama3-70b-2l)" >&2; return 2 ;;
    esac
}
common_flags() { # iterations: sets COMMON
    COMMON=(--train-iters "$1" --log-interval 1 --eval-iters 0 --lr 3e-4 --attention-dropout 0 --hidden-dropout 0
            --mock-data --tokenizer-type NullTokenizer --device cuda --bf16)
}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
