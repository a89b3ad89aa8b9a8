/* convert.h: Hugging Face model directories <-> Megatron-C checkpoints (megatron-c convert).
 *
 * Import writes a checkpoint at iteration 0 holding the weights alone (no optimizer state,
 * no RNG state), which `train --load DIR --finetune` loads under any parallel layout. It is
 * made by the checkpoint saver itself, over a one-process model on the CPU that holds the
 * imported weights, so it is a checkpoint like any other (names, shapes, vocabulary
 * padding, checksums). The model config comes from config.json (io/hf_config.h); the
 * vocabulary is padded as training pads it (--make-vocab-size-divisible-by, default 128).
 *
 * Export reads the checkpoint's weights without a model (mc_ckpt_read_weights), strips the
 * vocabulary padding and writes GPT2LMHeadModel or LlamaForCausalLM: config.json,
 * generation_config.json, the weights in safetensors shards of at most 5 GB (with
 * model.safetensors.index.json when there are several) in the chosen dtype, and the
 * tokenizer files of --tokenizer-model when given.
 *
 * Both write into OUTPUT.tmp-PID and rename it to OUTPUT at the end, so a failure leaves no
 * partial directory; OUTPUT must not exist. */
#ifndef MC_TRAIN_CONVERT_H
#define MC_TRAIN_CONVERT_H

#include "base/error.h"
#include "megatron.h"
#include "tensor/tensor.h"

typedef struct mc_convert_opts {
    const char *input, *output;
    bool to_hf;
    mc_dtype dtype;               /* export: MC_BF16 (default), MC_F16 or MC_F32 */
    const char *tokenizer_model;  /* export: a tokenizer file or a directory of them */
    int make_vocab_size_divisible_by; /* import */
    int64_t shard_bytes;          /* export: the most bytes a weights file holds (5 GB) */
} mc_convert_opts;

int mc_convert(const mc_convert_opts *o, mc_err *err);

#endif
