/* convert.c: megatron-c convert (convert.h). */
#include "train/convert.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/json.h"
#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "io/hf_config.h"
#include "io/hf_convert.h"
#include "model/model.h"
#include "optim/optimizer.h"
#include "train/model_options.h"

static int join(char *out, size_t cap, const char *dir, const char *name, mc_err *err) {
    if ((size_t)snprintf(out, cap, "%s/%s", dir, name) >= cap) return mc_err_set(err, "%s/%s: path too long", dir, name);
    return MC_OK;
}

/* Copies every Megatron-C tensor of w into the model's parameters; each parameter must be
 * there with its element count. */
static int fill_params(mc_model *m, const mc_host_params *w, mc_err *err) {
    for (int i = 0; i < m->nparams; i++) {
        const mc_param *p = &m->params[i];
        mc_host_tensor *t = mc_host_params_find(w, p->name);
        if (!t) return mc_err_set(err, "convert: the import made no tensor %s", p->name);
        if (t->numel != p->numel)
            return mc_err_set(err, "convert: %s has %lld elements, the model %lld", p->name, (long long)t->numel,
                              (long long)p->numel);
        m->be->copy_h2d(m->be, (float *)m->param_buf + p->offset, t->data, (size_t)p->numel * sizeof(float));
    }
    return MC_OK;
}

/* ---- Hugging Face -> checkpoint ---- */

static int import_hf(const mc_convert_opts *o, const char *out_dir, mc_err *err) {
    char path[4096];
    MC_TRY(join(path, sizeof path, o->input, "config.json", err));
    mc_config cfg;
    mc_config_init(&cfg);
    mc_hf_arch arch;
    mc_hf_tokens tok;
    int rc = mc_hf_config_read(path, &arch, &cfg.model, &tok, err);
    if (rc != MC_OK) {
        mc_config_free(&cfg);
        return rc;
    }
    /* A one-process CPU model that only holds the weights: the shortest sequence that the
     * positions allow (activations are planned for it, never used). */
    cfg.model.make_vocab_size_divisible_by = o->make_vocab_size_divisible_by;
    cfg.model.seq_length = cfg.model.max_position_embeddings < 16 ? cfg.model.max_position_embeddings : 16;
    cfg.train.micro_batch_size = cfg.train.global_batch_size = 1;
    cfg.train.train_iters = 1;
    cfg.optim.lr = 1e-4; /* the schedule it records is not used by --finetune */
    cfg.train.device = MC_DEVICE_CPU_ONLY;
    cfg.data.mock_data = true;
    rc = mc_config_validate(&cfg, 1, err);
    mc_comm comm;
    memset(&comm, 0, sizeof comm);
    if (rc == MC_OK) rc = mc_comm_init(&comm, 1, 0, 0, 1, 1, 1, 1, err);
    mc_backend *be = rc == MC_OK ? mc_backend_cpu_create() : NULL;
    mc_model model;
    memset(&model, 0, sizeof model);
    mc_optimizer opt;
    memset(&opt, 0, sizeof opt);
    mc_host_params hf, w;
    mc_host_params_init(&hf);
    mc_host_params_init(&w);
    if (rc == MC_OK) {
        mc_model_options mo = mc_model_options_from_config(&cfg, 1, MC_F32, MC_F32, MC_F32, 1, NULL);
        rc = mc_model_plan(&model, &mo, be, &comm, err);
    }
    if (rc == MC_OK) rc = mc_optimizer_plan(&opt, &model, &cfg, err);
    if (rc == MC_OK) {
        size_t params, grads, acts, need, have = be->memory_available(be);
        mc_model_bytes(&model, &params, &grads, &acts);
        need = params + grads + acts + mc_optimizer_state_bytes(&opt);
        if (need > have)
            rc = mc_err_set(err, "convert: the model needs %.1f GiB of host memory here (16 bytes a parameter) and %.1f "
                                 "GiB are available",
                            need / 1073741824.0, have / 1073741824.0);
    }
    if (rc == MC_OK) {
        mc_model_alloc(&model);
        mc_optimizer_alloc(&opt);
        rc = mc_host_params_load_hf(&hf, o->input, err);
    }
    if (rc == MC_OK && mc_hf_import(arch, &cfg.model, model.padded_vocab, &hf, &w, err) != MC_OK)
        rc = mc_err_prefix(err, "%s: ", o->input);
    if (rc == MC_OK) rc = fill_params(&model, &w, err);
    mc_host_params_free(&hf);
    mc_host_params_free(&w);
    if (rc == MC_OK) {
        mc_lr_schedule sched;
        mc_lr_schedule_init(&sched, &cfg);
        mc_ckpt_state st = {.model = &model, .opt = &opt, .sched = &sched, .comm = &comm, .cfg = &cfg};
        mc_ckpt_save_opts so = {.dir = out_dir, .save_optim = false, .save_rng = false, .async = false};
        mc_ckpt_saver *saver = mc_ckpt_saver_create(&st, &so, err);
        if (!saver) rc = MC_ERR;
        mc_ckpt_progress pr = {.iteration = 0, .rng_seed = cfg.train.seed};
        mc_loss_scaler_init_constant(&pr.scaler, 1.0);
        if (rc == MC_OK) rc = mc_ckpt_save(saver, &pr, err);
        if (rc == MC_OK) rc = mc_ckpt_saver_wait(saver, NULL, err);
        mc_ckpt_saver_free(saver);
    }
    if (opt.be) mc_optimizer_free(&opt);
    if (model.be) mc_model_free(&model);
    if (be) be->destroy(be);
    if (comm.world_size) mc_comm_free(&comm);
    mc_config_free(&cfg);
    return rc;
}

/* ---- checkpoint -> Hugging Face ---- */

static const char *torch_dtype(mc_dtype dt) {
    return dt == MC_F32 ? "float32" : dt == MC_F16 ? "float16" : "bfloat16";
}

static int write_text(const char *dir, const char *name, char *text, mc_err *err) {
    char path[4096];
    int rc = join(path, sizeof path, dir, name, err);
    if (rc == MC_OK) rc = mc_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* The weights in shards of at most o->shard_bytes (a tensor larger than that alone in its
 * own), named as transformers names them, with the index when there are several. */
static int write_shards(const mc_convert_opts *o, const mc_host_params *hf, const char *dir, mc_err *err) {
    size_t esz = mc_dtype_size(o->dtype);
    int *first = mc_xcalloc((size_t)hf->count + 1, sizeof(int)), nshards = 0;
    int64_t bytes = 0, total = 0;
    for (int i = 0; i < hf->count; i++) {
        int64_t b = hf->items[i].numel * (int64_t)esz;
        if (i == 0 || bytes + b > o->shard_bytes) {
            first[nshards++] = i;
            bytes = 0;
        }
        bytes += b;
        total += b;
    }
    first[nshards] = hf->count;
    cJSON *index = cJSON_CreateObject(), *map = NULL;
    cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
    cJSON_AddItemToObject(meta, "total_size", mc_json_number((double)total));
    map = cJSON_AddObjectToObject(index, "weight_map");
    int rc = MC_OK;
    for (int s = 0; s < nshards && rc == MC_OK; s++) {
        char name[96], path[4096];
        if (nshards == 1) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards);
        mc_host_params slice = {.items = hf->items + first[s], .count = first[s + 1] - first[s]};
        slice.cap = slice.count;
        for (int i = first[s]; i < first[s + 1]; i++) cJSON_AddStringToObject(map, hf->items[i].name, name);
        rc = join(path, sizeof path, dir, name, err);
        if (rc == MC_OK) rc = mc_host_params_save_safetensors(&slice, path, o->dtype, err);
    }
    if (rc == MC_OK && nshards > 1) rc = write_text(dir, "model.safetensors.index.json", cJSON_Print(index), err);
    cJSON_Delete(index);
    free(first);
    return rc;
}

/* --tokenizer-model: a file (copied under its name) or a directory (its tokenizer files). */
static int copy_tokenizer(const char *src, const char *dir, mc_err *err) {
    static const char *const k_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                          "tokenizer.model", "vocab.json", "merges.txt"};
    struct stat sb;
    if (stat(src, &sb) != 0) return mc_err_set(err, "--tokenizer-model %s: %s", src, strerror(errno));
    int copied = 0;
    for (size_t i = 0; i < (S_ISDIR(sb.st_mode) ? sizeof k_files / sizeof k_files[0] : 1); i++) {
        char from[4096], to[4096];
        const char *base = S_ISDIR(sb.st_mode) ? k_files[i] : strrchr(src, '/') ? strrchr(src, '/') + 1 : src;
        if (S_ISDIR(sb.st_mode)) MC_TRY(join(from, sizeof from, src, base, err));
        else snprintf(from, sizeof from, "%s", src);
        if (S_ISDIR(sb.st_mode) && access(from, R_OK) != 0) continue;
        MC_TRY(join(to, sizeof to, dir, base, err));
        char *data;
        size_t n;
        MC_TRY(mc_read_file(from, &data, &n, err));
        int rc = mc_write_file_atomic(to, data, n, err);
        free(data);
        MC_TRY(rc);
        copied++;
    }
    if (!copied) return mc_err_set(err, "--tokenizer-model %s: a directory without tokenizer files (tokenizer.json, "
                                        "tokenizer.model, vocab.json + merges.txt, ...)", src);
    return MC_OK;
}

static int export_hf(const mc_convert_opts *o, const char *out_dir, mc_err *err) {
    mc_config defaults;
    mc_config_init(&defaults);
    mc_model_config m = defaults.model;
    mc_config_free(&defaults);
    mc_host_params w, hf;
    mc_host_params_init(&w);
    mc_host_params_init(&hf);
    int padded = 0;
    int64_t iteration = 0;
    mc_hf_arch arch = MC_HF_LLAMA;
    int rc = mc_ckpt_read_weights(o->input, &m, &padded, &iteration, &w, err);
    if (rc == MC_OK) rc = mc_hf_arch_of(&m, &arch, err);
    if (rc == MC_OK) rc = mc_hf_export(arch, &m, padded, &w, &hf, err);
    mc_host_params_free(&w);
    if (rc == MC_OK) rc = mc_mkdirs(out_dir, err);
    if (rc == MC_OK) rc = write_shards(o, &hf, out_dir, err);
    mc_host_params_free(&hf);
    mc_hf_tokens tok = {-1, -1};
    if (rc == MC_OK) rc = write_text(out_dir, "config.json", mc_hf_config_text(arch, &m, &tok, torch_dtype(o->dtype)), err);
    if (rc == MC_OK) rc = write_text(out_dir, "generation_config.json", mc_hf_generation_config_text(&tok), err);
    if (rc == MC_OK && o->tokenizer_model) rc = copy_tokenizer(o->tokenizer_model, out_dir, err);
    if (rc == MC_OK)
        fprintf(stderr, "convert: iteration %lld of %s -> %s (%s, %s)\n", (long long)iteration, o->input, o->output,
                mc_hf_arch_name(arch), torch_dtype(o->dtype));
    return rc;
}

int mc_convert(const mc_convert_opts *o, mc_err *err) {
    struct stat sb;
    if (stat(o->output, &sb) == 0)
        return mc_err_set(err, "--output %s already exists (convert writes a new directory and never overwrites)",
                          o->output);
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-%ld", o->output, (long)getpid()) >= sizeof tmp)
        return mc_err_set(err, "--output %s: path too long", o->output);
    int handle = mc_cleanup_register(tmp);
    int rc = o->to_hf ? export_hf(o, tmp, err) : import_hf(o, tmp, err);
    if (rc == MC_OK && rename(tmp, o->output) != 0)
        rc = mc_err_set(err, "--output %s: cannot rename %s to it: %s", o->output, tmp, strerror(errno));
    if (rc != MC_OK) {
        mc_err ignored;
        mc_remove_tree(tmp, &ignored);
    } else {
        char *parent = mc_path_dirname(o->output);
        mc_fsync_dir(parent);
        free(parent);
    }
    mc_cleanup_unregister(handle);
    return rc;
}
