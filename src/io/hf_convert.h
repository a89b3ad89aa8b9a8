/* hf_convert.h: Hugging Face <-> Megatron-C parameter names and layouts, on host float arrays.
 *
 * Families: GPT-2 (GPT2LMHeadModel) and Llama (LlamaForCausalLM: GQA, tied or untied head,
 * optional attention/MLP biases). Megatron-C's names and layouts (TP = 1), all weights
 * row-major [out, in]:
 *
 *   embedding.word_embeddings.weight              [Vp, h]  rows >= V are zero
 *   embedding.position_embeddings.weight          [max_pos, h]   (learned_absolute only)
 *   decoder.layers.{i}.input_layernorm.weight     [h]  (+ .bias with LayerNorm)
 *   decoder.layers.{i}.self_attention.linear_qkv.weight  [(n + 2g) d, h]  (+ .bias)
 *       per query group j: its n/g query heads (d rows each), key head j, value head j
 *   decoder.layers.{i}.self_attention.linear_proj.weight [h, n d]  (+ .bias)
 *   decoder.layers.{i}.pre_mlp_layernorm.weight   [h]  (+ .bias)
 *   decoder.layers.{i}.mlp.linear_fc1.weight      [f, h], or [2f, h] = [gate; up] with swiglu
 *   decoder.layers.{i}.mlp.linear_fc2.weight      [h, f]  (+ .bias)
 *   decoder.final_layernorm.weight                [h]  (+ .bias)
 *   output_layer.weight                           [Vp, h]  (untied only)
 *
 * HF GPT-2 stores Conv1D weights [in, out]; c_attn's columns are [q | k | v], head j's at
 * j*d. HF Llama's rotate-half RoPE is Megatron-C's as is (no permutation of q/k rows).
 * The conversions are pure re-indexings, so they apply to gradients as well as weights.
 *
 * Import accepts names with or without the "transformer." / "model." prefix (the official
 * GPT-2 files have none), ignores HF's non-parameter buffers (attn.bias, attn.masked_bias,
 * rotary_emb.inv_freq) and a tied model's lm_head.weight, and fails on any other tensor it
 * did not use (a layer-count or family mismatch). Export writes GPT2LMHeadModel /
 * LlamaForCausalLM state_dict names (tied models: no lm_head.weight). */
#ifndef MC_IO_HF_CONVERT_H
#define MC_IO_HF_CONVERT_H

#include <stdint.h>

#include "base/error.h"
#include "io/safetensors.h"
#include "megatron.h"
#include "tensor/tensor.h"

/* ---- named host tensors --------------------------------------------------- */

/* One float32 host tensor, owned by its mc_host_params. */
typedef struct mc_host_tensor {
    char *name;
    int ndim;
    int64_t shape[MC_MAX_DIMS];
    int64_t numel;
    float *data;
} mc_host_tensor;

/* A list of named host tensors in insertion order. */
typedef struct mc_host_params {
    mc_host_tensor *items;
    int count, cap;
} mc_host_params;

void mc_host_params_init(mc_host_params *p);
void mc_host_params_free(mc_host_params *p);
/* Appends a zero-filled tensor and returns its storage. The name must be new (aborts
 * otherwise: a duplicate is a bug of the caller). */
float *mc_host_params_add(mc_host_params *p, const char *name, int ndim, const int64_t *shape);
/* NULL when absent. */
mc_host_tensor *mc_host_params_find(const mc_host_params *p, const char *name);
/* Appends every float tensor (F32, F64, BF16, F16) of an open file, converted to float32;
 * other dtypes are skipped. Fails on a name already present (e.g. in two shards). */
int mc_host_params_load_safetensors(mc_host_params *p, const mc_safetensors *st, mc_err *err);
/* Loads a Hugging Face checkpoint: a .safetensors file, or a directory holding
 * model.safetensors or model.safetensors.index.json (sharded). */
int mc_host_params_load_hf(mc_host_params *p, const char *path, mc_err *err);
/* Writes all tensors to `path` (atomically) as `dtype`: MC_F32, MC_BF16 or MC_F64. */
int mc_host_params_save_safetensors(const mc_host_params *p, const char *path, mc_dtype dtype, mc_err *err);

/* ---- conversion ---------------------------------------------------------- */

typedef enum { MC_HF_GPT2 = 0, MC_HF_LLAMA } mc_hf_arch;

/* "GPT2LMHeadModel"/"gpt2" -> MC_HF_GPT2, "LlamaForCausalLM"/"llama" -> MC_HF_LLAMA; -1 otherwise. */
int mc_hf_arch_parse(const char *s);
const char *mc_hf_arch_name(mc_hf_arch arch);

/* Checks that cfg describes a model of this family that the conversion can represent
 * (GPT-2: LayerNorm, learned positions, GELU, biases, tied; Llama: RMSNorm, RoPE, SwiGLU)
 * and that the sizes are consistent. `padded_vocab` >= cfg->vocab_size. */
int mc_hf_check_config(mc_hf_arch arch, const mc_model_config *cfg, int padded_vocab, mc_err *err);

/* HF tensors -> Megatron-C tensors appended to `out` (which may hold others, not these). */
int mc_hf_import(mc_hf_arch arch, const mc_model_config *cfg, int padded_vocab, const mc_host_params *hf,
                 mc_host_params *out, mc_err *err);
/* Megatron-C tensors -> HF tensors appended to `out`; padded vocabulary rows are dropped. */
int mc_hf_export(mc_hf_arch arch, const mc_model_config *cfg, int padded_vocab, const mc_host_params *mc,
                 mc_host_params *out, mc_err *err);

#endif
