#include "data/index_cache.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"

/* ---- dataset descriptions --------------------------------------------------------- */

const char *const mc_split_names[3] = {"train", "valid", "test"};

static void write_tokenizer(mc_json_writer *w, const mc_tokenizer_identity *t) {
    if (!t) {
        mc_jw_null(w);
        return;
    }
    mc_jw_begin_object(w);
    mc_jw_key(w, "class");
    mc_jw_str(w, t->cls);
    mc_jw_key(w, "tokenizer_path");
    mc_jw_begin_list(w);
    for (int i = 0; i < t->npaths; i++) {
        mc_jw_elem(w);
        mc_jw_str(w, t->paths[i]);
    }
    mc_jw_end_list(w);
    for (int i = 0; i < t->noptions; i++) {
        mc_jw_key(w, t->option_keys[i]);
        mc_jw_str(w, t->option_values[i]);
    }
    mc_jw_end_object(w);
}

void mc_gpt_identity_write(mc_json_writer *w, const mc_gpt_identity *id) {
    mc_jw_begin_object(w);
    mc_jw_key(w, "class");
    mc_jw_str(w, "GPTDataset");
    mc_jw_key(w, "dataset_path");
    mc_jw_str(w, id->dataset_path);
    mc_jw_key(w, "num_samples");
    if (id->num_samples < 0)
        mc_jw_null(w);
    else
        mc_jw_int(w, id->num_samples);
    mc_jw_key(w, "index_split");
    mc_jw_str(w, mc_split_names[id->index_split]);
    mc_jw_key(w, "random_seed");
    mc_jw_int(w, (int64_t)id->random_seed);
    mc_jw_key(w, "sequence_length");
    mc_jw_int(w, id->sequence_length);
    mc_jw_key(w, "split");
    mc_jw_str(w, id->split);
    mc_jw_key(w, "split_matrix");
    if (!id->split_matrix) {
        mc_jw_null(w);
    } else {
        /* convert_split_vector_to_split_matrix: bookends of the running sum that starts at
         * the integer 0 (so the first bound prints as 0, the others as floats). */
        mc_jw_begin_list(w);
        for (int k = 0; k < 3; k++) {
            mc_jw_elem(w);
            if (!id->split_matrix->present[k]) {
                mc_jw_null(w);
                continue;
            }
            mc_jw_begin_list(w);
            mc_jw_elem(w);
            if (k == 0)
                mc_jw_int(w, 0);
            else
                mc_jw_float(w, id->split_matrix->lo[k]);
            mc_jw_elem(w);
            mc_jw_float(w, id->split_matrix->hi[k]);
            mc_jw_end_list(w);
        }
        mc_jw_end_list(w);
    }
    mc_jw_key(w, "tokenizer");
    write_tokenizer(w, id->tokenizer);
    mc_jw_end_object(w);
}

char *mc_gpt_description(const mc_gpt_identity *id) {
    mc_strbuf b = {0};
    mc_json_writer w;
    mc_jw_init(&w, &b);
    mc_gpt_identity_write(&w, id);
    return b.s;
}

char *mc_blended_description(const mc_gpt_identity *datasets, int n, int split, const double *weights,
                             const int64_t *int_weights, int64_t size) {
    mc_strbuf b = {0};
    mc_json_writer w;
    mc_jw_init(&w, &b);
    mc_jw_begin_object(&w);
    mc_jw_key(&w, "class");
    mc_jw_str(&w, "BlendedDataset");
    mc_jw_key(&w, "datasets");
    mc_jw_begin_list(&w);
    for (int i = 0; i < n; i++) {
        mc_jw_elem(&w);
        mc_gpt_identity_write(&w, &datasets[i]);
    }
    mc_jw_end_list(&w);
    mc_jw_key(&w, "split");
    mc_jw_str(&w, mc_split_names[split]);
    mc_jw_key(&w, "weights");
    mc_jw_begin_list(&w);
    for (int i = 0; i < n; i++) {
        mc_jw_elem(&w);
        if (size >= 0)
            mc_jw_float(&w, weights[i]);
        else
            mc_jw_int(&w, int_weights[i]);
    }
    mc_jw_end_list(&w);
    mc_jw_key(&w, "size");
    if (size >= 0)
        mc_jw_int(&w, size);
    else
        mc_jw_null(&w);
    mc_jw_end_object(&w);
    return b.s;
}

/* ---- cache files --------------------------------------------------------------------- */

char *mc_cache_path(const char *dir, const char *md5, const char *cls, const char *split, const char *affix) {
    mc_strbuf b = {0};
    mc_strbuf_printf(&b, "%s/%s-%s-%s-%s", dir, md5, cls, split, affix);
    return b.s;
}

int mc_cache_probe(const char *dir, const char *md5, const char *cls, const char *split, const char *description,
                   const char *const *affixes, int naffixes, bool *hit, mc_err *err) {
    *hit = false;
    char *desc_path = mc_cache_path(dir, md5, cls, split, "description.txt");
    struct stat st;
    bool have_desc = stat(desc_path, &st) == 0 && S_ISREG(st.st_mode);
    bool all = have_desc;
    for (int i = 0; i < naffixes && all; i++) {
        char *p = mc_cache_path(dir, md5, cls, split, affixes[i]);
        all = stat(p, &st) == 0 && S_ISREG(st.st_mode);
        free(p);
    }
    if (have_desc) {
        char *text;
        size_t n;
        if (mc_read_file(desc_path, &text, &n, err) != MC_OK) {
            free(desc_path);
            return MC_ERR;
        }
        bool same = n == strlen(description) && memcmp(text, description, n) == 0;
        free(text);
        if (!same) {
            mc_err_set(err,
                       "%s: the cached description does not match this dataset's (an md5 collision or an edited "
                       "file); delete the %s-%s-%s-* files to rebuild them",
                       desc_path, md5, cls, split);
            free(desc_path);
            return MC_ERR;
        }
    }
    free(desc_path);
    *hit = all;
    return MC_OK;
}
