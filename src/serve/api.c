/* api.c: serve's request bodies read and checked, and its answers written (api.h). */
#include "serve/api.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fields ------------------------------------------------------------------------------- */

/* The value as the client wrote it, cut short, for messages. */
static void show(const cJSON *v, char *buf, size_t cap) {
    char *s = cJSON_PrintUnformatted(v);
    if (!s) {
        snprintf(buf, cap, "?");
        return;
    }
    if (strlen(s) > 40) snprintf(buf, cap, "%.37s...", s);
    else snprintf(buf, cap, "%s", s);
    free(s);
}

/* The field, or NULL when it is absent or null. */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return cJSON_IsNull(v) ? NULL : v;
}

static int refuse(mc_err *err, const char *name, const char *expected, const cJSON *v) {
    char got[64];
    show(v, got, sizeof got);
    return mc_err_set(err, "%s: expected %s, got %s", name, expected, got);
}

static int get_bool(const cJSON *o, const char *name, bool *out, mc_err *err) {
    const cJSON *v = field(o, name);
    if (!v) return MC_OK;
    if (!cJSON_IsBool(v)) return refuse(err, name, "true or false", v);
    *out = cJSON_IsTrue(v);
    return MC_OK;
}

/* An integer in [lo, hi] (JSON numbers are doubles: 2^53 is the largest exact one). */
static int get_int(const cJSON *o, const char *name, double lo, double hi, int64_t *out, mc_err *err) {
    const cJSON *v = field(o, name);
    if (!v) return MC_OK;
    char expected[96];
    if (hi >= 9007199254740992.0) snprintf(expected, sizeof expected, "an integer >= %.0f", lo);
    else snprintf(expected, sizeof expected, "an integer in [%.0f, %.0f]", lo, hi);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return refuse(err, name, expected, v);
    *out = (int64_t)v->valuedouble;
    return MC_OK;
}

/* A number in [lo, hi], or (lo, hi] with lo_open. */
static int get_num(const cJSON *o, const char *name, double lo, double hi, bool lo_open, double *out, mc_err *err) {
    const cJSON *v = field(o, name);
    if (!v) return MC_OK;
    char expected[96];
    snprintf(expected, sizeof expected, "a number in %c%g, %g]", lo_open ? '(' : '[', lo, hi);
    if (!cJSON_IsNumber(v) || !(lo_open ? v->valuedouble > lo : v->valuedouble >= lo) || !(v->valuedouble <= hi))
        return refuse(err, name, expected, v);
    *out = v->valuedouble;
    return MC_OK;
}

/* A field given that this server cannot honour unless it has its neutral value. */
static int only(const cJSON *o, const char *name, bool ok, const char *why, mc_err *err) {
    const cJSON *v = field(o, name);
    if (!v || ok) return MC_OK;
    char got[64];
    show(v, got, sizeof got);
    return mc_err_set(err, "%s: %s is not supported: %s", name, got, why);
}

static int check_known(const cJSON *o, const char *const *known, mc_err *err) {
    for (const cJSON *v = o->child; v; v = v->next) {
        bool found = false;
        for (int i = 0; known[i] && !found; i++) found = !strcmp(v->string, known[i]);
        if (found) continue;
        char list[512] = "";
        for (int i = 0; known[i]; i++) {
            if (i) strncat(list, ", ", sizeof list - strlen(list) - 1);
            strncat(list, known[i], sizeof list - strlen(list) - 1);
        }
        return mc_err_set(err, "unknown field \"%.64s\" (known: %s)", v->string, list);
    }
    return MC_OK;
}

/* ---- prompts ------------------------------------------------------------------------------ */

/* An integer id list, e.g. [1, 2, 3] */
static bool is_id_list(const cJSON *v) {
    if (!cJSON_IsArray(v) || !v->child) return false;
    for (const cJSON *e = v->child; e; e = e->next)
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble)) return false;
    return true;
}

/* Prompt i's ids: its text encoded (after the end of document with add_bos) or its ids. */
static int prompt_ids(const cJSON *p, int i, bool add_bos, const mc_tokenizer *tok, mc_tokenizer_scratch *scratch,
                      const mc_api_limits *lim, mc_ids *ids, mc_err *err) {
    if (add_bos) {
        if (lim->eod < 0) return mc_err_set(err, "add_BOS: the tokenizer has no end-of-document token");
        mc_ids_push(ids, lim->eod);
    }
    if (cJSON_IsString(p)) {
        mc_err why;
        if (mc_tokenizer_encode(tok, scratch, p->valuestring, strlen(p->valuestring), ids, &why) != MC_OK)
            return mc_err_set(err, "prompt %d: %s", i + 1, why.msg);
    } else {
        for (const cJSON *e = p->child; e; e = e->next) {
            if (e->valuedouble < 0 || e->valuedouble >= lim->vocab)
                return mc_err_set(err, "prompt %d: token id %.0f is outside the model's vocabulary [0, %d)", i + 1,
                                  e->valuedouble, lim->vocab);
            mc_ids_push(ids, (int32_t)e->valuedouble);
        }
    }
    if (ids->len == 0)
        return mc_err_set(err, "prompt %d is empty%s", i + 1,
                          cJSON_IsString(p) ? " (an empty prompt needs add_BOS true)" : "");
    for (int64_t k = 0; k < ids->len; k++)
        if (ids->data[k] < 0 || ids->data[k] >= lim->vocab)
            return mc_err_set(err, "prompt %d: token id %d is outside the model's vocabulary [0, %d)", i + 1,
                              ids->data[k], lim->vocab);
    return MC_OK;
}

/* The prompts field as a list of prompt values (strings or id lists). */
static int prompt_list(const cJSON *o, mc_api_kind api, const cJSON ***out, int *n, mc_err *err) {
    const char *name = api == MC_API_MEGATRON ? "prompts" : "prompt";
    const cJSON *v = field(o, name);
    if (!v) return mc_err_set(err, "%s: required", name);
    const char *expected = api == MC_API_MEGATRON ? "a list of strings"
                                                  : "a string, a list of strings, a list of ids or a list of id lists";
    if (api == MC_API_COMPLETIONS && (cJSON_IsString(v) || is_id_list(v))) { /* a single prompt */
        *out = mc_xmalloc(sizeof **out);
        (*out)[0] = v;
        *n = 1;
        return MC_OK;
    }
    if (!cJSON_IsArray(v)) return refuse(err, name, expected, v);
    *n = cJSON_GetArraySize(v);
    if (*n == 0) return mc_err_set(err, "%s: the list is empty", name);
    if (*n > MC_API_MAX_PROMPTS)
        return mc_err_set(err, "%s: %d prompts, at most %d a request", name, *n, MC_API_MAX_PROMPTS);
    *out = mc_xmalloc(sizeof **out * (size_t)*n);
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        bool ok = cJSON_IsString(e) || (api == MC_API_COMPLETIONS && is_id_list(e));
        if (!ok) {
            char what[32];
            snprintf(what, sizeof what, "%s[%d]", name, i);
            return refuse(err, what, api == MC_API_MEGATRON ? "a string" : "a string or a list of ids", e);
        }
        (*out)[i] = e;
    }
    return MC_OK;
}

/* ---- the two request kinds ---------------------------------------------------------------- */

typedef struct parsed {
    int64_t max_new;
    double temperature, top_p;
    int64_t top_k, seed;
    bool add_bos;
} parsed;

static const char *const k_megatron_fields[] = {
    "prompts", "tokens_to_generate", "logprobs", "temperature", "top_k", "top_p", "top_p_decay", "top_p_bound",
    "add_BOS", "stop_on_double_eol", "stop_on_eol", "prevent_newline_after_colon", "random_seed", "no_log",
    "beam_width", "stop_token", "length_penalty", "max_len", "sentences", NULL};

static int parse_megatron(const cJSON *o, int64_t positions, parsed *p, mc_serve_request *r, mc_err *err) {
    if (cJSON_GetObjectItemCaseSensitive(o, "max_len"))
        return mc_err_set(err, "max_len is no longer used: replace it with tokens_to_generate");
    if (cJSON_GetObjectItemCaseSensitive(o, "sentences"))
        return mc_err_set(err, "sentences is no longer used: replace it with prompts");
    MC_TRY(check_known(o, k_megatron_fields, err));
    const cJSON *lp = field(o, "logprobs");
    if (lp && !cJSON_IsBool(lp)) return refuse(err, "logprobs", "true or false", lp);
    MC_TRY(only(o, "logprobs", cJSON_IsFalse(lp), "this server returns tokens, not their log probabilities", err));
    p->max_new = 64;
    MC_TRY(get_int(o, "tokens_to_generate", 1, (double)positions - 1, &p->max_new, err));
    p->temperature = 1.0;
    MC_TRY(get_num(o, "temperature", 0, 100, false, &p->temperature, err));
    MC_TRY(get_int(o, "top_k", 0, 1000, &p->top_k, err));
    p->top_p = 0.0;
    MC_TRY(get_num(o, "top_p", 0, 1, false, &p->top_p, err));
    if (p->top_p == 0.0) p->top_p = 1.0; /* Megatron's 0: no nucleus cut */
    const cJSON *decay = field(o, "top_p_decay"), *bound = field(o, "top_p_bound");
    MC_TRY(only(o, "top_p_decay", cJSON_IsNumber(decay) && decay->valuedouble == 0, "top_p is the same for every token here", err));
    MC_TRY(only(o, "top_p_bound", cJSON_IsNumber(bound) && bound->valuedouble == 0, "top_p is the same for every token here", err));
    MC_TRY(get_bool(o, "add_BOS", &p->add_bos, err));
    MC_TRY(get_bool(o, "stop_on_eol", &r->stops.on_eol, err));
    MC_TRY(get_bool(o, "stop_on_double_eol", &r->stops.on_double_eol, err));
    bool colon = false;
    MC_TRY(get_bool(o, "prevent_newline_after_colon", &colon, err));
    MC_TRY(only(o, "prevent_newline_after_colon", !colon, "no token is ever forbidden here", err));
    MC_TRY(get_int(o, "random_seed", 0, 9007199254740992.0, &p->seed, err));
    MC_TRY(get_bool(o, "no_log", &r->no_log, err));
    const char *beam = "beam search is not supported by this server";
    MC_TRY(only(o, "beam_width", false, beam, err));
    MC_TRY(only(o, "stop_token", false, beam, err));
    MC_TRY(only(o, "length_penalty", false, beam, err));
    return MC_OK;
}

static const char *const k_completions_fields[] = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "echo", "n", "stream",
    "logprobs", "presence_penalty", "frequency_penalty", "user", NULL};

static int parse_stop(const cJSON *o, mc_serve_stops *s, mc_err *err) {
    const cJSON *v = field(o, "stop");
    if (!v) return MC_OK;
    const char *expected = "a non-empty string or a list of at most 4 of them";
    if (!cJSON_IsString(v) && (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > 4)) return refuse(err, "stop", expected, v);
    for (const cJSON *e = cJSON_IsString(v) ? v : v->child; e; e = cJSON_IsString(v) ? NULL : e->next) {
        if (!cJSON_IsString(e) || !e->valuestring[0]) return refuse(err, "stop", expected, v);
        s->strings = mc_xrealloc(s->strings, sizeof(char *) * (size_t)(s->nstrings + 1));
        s->strings[s->nstrings++] = mc_xstrdup(e->valuestring);
    }
    return MC_OK;
}

static int parse_completions(const cJSON *o, int64_t positions, parsed *p, mc_serve_request *r, mc_err *err) {
    MC_TRY(check_known(o, k_completions_fields, err));
    const cJSON *model = field(o, "model"), *user = field(o, "user");
    if (model && !cJSON_IsString(model)) return refuse(err, "model", "a string", model);
    if (user && !cJSON_IsString(user)) return refuse(err, "user", "a string", user);
    p->max_new = 16;
    MC_TRY(get_int(o, "max_tokens", 1, (double)positions - 1, &p->max_new, err));
    p->temperature = 1.0;
    MC_TRY(get_num(o, "temperature", 0, 2, false, &p->temperature, err));
    p->top_p = 1.0;
    MC_TRY(get_num(o, "top_p", 0, 1, true, &p->top_p, err));
    MC_TRY(get_int(o, "top_k", 0, 2147483647.0, &p->top_k, err));
    MC_TRY(get_int(o, "seed", 0, 9007199254740992.0, &p->seed, err));
    MC_TRY(parse_stop(o, &r->stops, err));
    MC_TRY(get_bool(o, "echo", &r->echo, err));
    int64_t n = 1;
    MC_TRY(get_int(o, "n", 1, 9007199254740992.0, &n, err));
    MC_TRY(only(o, "n", n == 1, "one completion a prompt here", err));
    bool stream = false;
    MC_TRY(get_bool(o, "stream", &stream, err));
    MC_TRY(only(o, "stream", !stream, "the answer comes whole", err));
    MC_TRY(only(o, "logprobs", false, "this server returns tokens, not their log probabilities", err));
    const cJSON *pp = field(o, "presence_penalty"), *fp = field(o, "frequency_penalty");
    MC_TRY(only(o, "presence_penalty", cJSON_IsNumber(pp) && pp->valuedouble == 0, "no penalties here", err));
    MC_TRY(only(o, "frequency_penalty", cJSON_IsNumber(fp) && fp->valuedouble == 0, "no penalties here", err));
    return MC_OK;
}

mc_serve_request *mc_api_parse(mc_api_kind api, const char *body, size_t len, const mc_tokenizer *tok,
                               const mc_api_limits *lim, mc_err *err) {
    if (strlen(body) != len) {
        mc_err_set(err, "the body holds a NUL byte: expected a JSON object");
        return NULL;
    }
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithOpts(body, &end, true);
    if (!o) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        mc_err_set(err, len ? "malformed JSON at byte %zu" : "the body is empty: expected a JSON object", at);
        return NULL;
    }
    mc_serve_request *r = mc_xcalloc(1, sizeof *r);
    r->api = api;
    parsed p = {.seed = -1};
    const cJSON **prompts = NULL;
    mc_tokenizer_scratch *scratch = NULL;
    int rc = MC_OK, n = 0;
    if (!cJSON_IsObject(o)) {
        rc = mc_err_set(err, "expected a JSON object, got %s", cJSON_IsArray(o) ? "a list" : "a single value");
        goto done;
    }
    rc = api == MC_API_MEGATRON ? parse_megatron(o, lim->max_positions, &p, r, err)
                                : parse_completions(o, lim->max_positions, &p, r, err);
    if (rc == MC_OK) rc = prompt_list(o, api, &prompts, &n, err);
    if (rc != MC_OK) goto done;
    r->seqs = mc_xcalloc((size_t)n, sizeof *r->seqs);
    scratch = mc_tokenizer_scratch_new(tok);
    for (int i = 0; i < n && rc == MC_OK; i++) {
        mc_serve_seq *s = &r->seqs[r->n++];
        s->req = r;
        s->stops = &r->stops;
        rc = prompt_ids(prompts[i], i, p.add_bos, tok, scratch, lim, &s->prompt, err);
        if (rc == MC_OK && s->prompt.len + p.max_new > lim->max_positions)
            rc = mc_err_set(err, "prompt %d: its %lld tokens and %s %lld exceed the model's %lld positions", i + 1,
                            (long long)s->prompt.len, api == MC_API_MEGATRON ? "tokens_to_generate" : "max_tokens",
                            (long long)p.max_new, (long long)lim->max_positions);
        s->params = (mc_gen_params){.max_new_tokens = (int)p.max_new,
                                    .temperature = p.temperature,
                                    .top_k = (int)p.top_k,
                                    .top_p = p.top_p,
                                    .seed = p.seed >= 0 ? (uint64_t)p.seed : lim->seed,
                                    .stop_at_eod = lim->eod >= 0};
        if (rc == MC_OK) s->out = mc_xmalloc(sizeof(int32_t) * (size_t)p.max_new);
    }
done:
    mc_tokenizer_scratch_free(scratch);
    free(prompts);
    cJSON_Delete(o);
    if (rc != MC_OK) {
        mc_serve_request_free(r);
        return NULL;
    }
    return r;
}

/* ---- answers ------------------------------------------------------------------------------ */

/* JSON strings must be UTF-8: a byte that begins no valid sequence becomes U+FFFD (a token
 * may end inside a character). */
static char *valid_utf8(const char *s, size_t n) {
    char *out = mc_xmalloc(3 * n + 1), *w = out;
    for (size_t i = 0; i < n;) {
        const unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        bool ok = k > 0 && i + k <= n;
        for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)s[i + j] & 0xC0) == 0x80;
        if (ok && k == 3) { /* no overlong forms, no surrogates */
            const unsigned char d = (unsigned char)s[i + 1];
            ok = !(c == 0xE0 && d < 0xA0) && !(c == 0xED && d >= 0xA0);
        }
        if (ok && k == 4) {
            const unsigned char d = (unsigned char)s[i + 1];
            ok = !(c == 0xF0 && d < 0x90) && !(c == 0xF4 && d >= 0x90);
        }
        if (ok) {
            memcpy(w, s + i, k);
            w += k;
            i += k;
        } else {
            memcpy(w, "\xEF\xBF\xBD", 3);
            w += 3;
            i++;
        }
    }
    *w = 0;
    return out;
}

static void add_text(cJSON *to, const char *name, const char *s, size_t n) {
    char *v = valid_utf8(s, n);
    cJSON *item = cJSON_CreateString(v);
    if (name) cJSON_AddItemToObject(to, name, item);
    else cJSON_AddItemToArray(to, item);
    free(v);
}

static char *megatron_answer(const mc_serve_request *r, const mc_tokenizer *tok) {
    cJSON *o = cJSON_CreateObject();
    cJSON *text = cJSON_AddArrayToObject(o, "text"), *segments = cJSON_AddArrayToObject(o, "segments");
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < r->n; i++) {
        const mc_serve_seq *s = &r->seqs[i];
        const int64_t n = s->prompt.len + s->produced;
        int32_t *all = mc_xmalloc(sizeof(int32_t) * (size_t)n);
        memcpy(all, s->prompt.data, sizeof(int32_t) * (size_t)s->prompt.len);
        memcpy(all + s->prompt.len, s->out, sizeof(int32_t) * (size_t)s->produced);
        size_t len;
        char *whole = mc_tokenizer_decode(tok, all, n, &len);
        add_text(text, NULL, whole, len);
        free(whole);
        cJSON *seg = cJSON_CreateArray(), *ids = cJSON_CreateArray();
        for (int64_t k = 0; k < n; k++) {
            char *piece = mc_tokenizer_decode(tok, &all[k], 1, &len);
            add_text(seg, NULL, piece, len);
            free(piece);
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(all[k]));
        }
        cJSON_AddItemToArray(segments, seg);
        cJSON_AddItemToArray(tokens, ids);
        free(all);
    }
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return json;
}

static char *completions_answer(const mc_serve_request *r, const mc_tokenizer *tok, const char *model, const char *id,
                                int64_t created) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", model);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (int i = 0; i < r->n; i++) {
        const mc_serve_seq *s = &r->seqs[i];
        prompt_tokens += s->prompt.len;
        completion_tokens += s->produced;
        size_t len, cut, head_len = 0;
        char *cont = mc_serve_continuation_text(tok, s->prompt.data, s->prompt.len, s->out, s->produced, &len);
        mc_serve_stops_hit(s->stops, cont, len, &cut);
        char *head = r->echo ? mc_tokenizer_decode(tok, s->prompt.data, s->prompt.len, &head_len) : NULL;
        char *text = mc_xmalloc(head_len + cut + 1);
        if (head) memcpy(text, head, head_len);
        memcpy(text + head_len, cont, cut);
        cJSON *c = cJSON_CreateObject();
        add_text(c, "text", text, head_len + cut);
        cJSON_AddNumberToObject(c, "index", i);
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddStringToObject(c, "finish_reason", mc_serve_seq_finish(s) == MC_FINISH_STOP ? "stop" : "length");
        cJSON_AddItemToArray(choices, c);
        free(text);
        free(head);
        free(cont);
    }
    cJSON *usage = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", (double)prompt_tokens);
    cJSON_AddNumberToObject(usage, "completion_tokens", (double)completion_tokens);
    cJSON_AddNumberToObject(usage, "total_tokens", (double)(prompt_tokens + completion_tokens));
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return json;
}

char *mc_api_answer(const mc_serve_request *r, const mc_tokenizer *tok, const char *model, const char *id,
                    int64_t created) {
    return r->api == MC_API_MEGATRON ? megatron_answer(r, tok) : completions_answer(r, tok, model, id, created);
}

char *mc_api_error(const char *msg) {
    cJSON *o = cJSON_CreateObject();
    char *v = valid_utf8(msg, strlen(msg));
    cJSON_AddStringToObject(o, "error", v);
    free(v);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return json;
}
