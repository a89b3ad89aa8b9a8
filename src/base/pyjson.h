/* pyjson.h: JSON text exactly as Python's json.dumps(obj, indent=4, ensure_ascii=True)
 * writes it (float repr, escaping, separators), for descriptions whose md5 must equal
 * Megatron's. Reading JSON is cJSON's (base/json.h). */
#ifndef MC_BASE_PYJSON_H
#define MC_BASE_PYJSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mc_strbuf {
    char *s;
    size_t len, cap;
} mc_strbuf;

void mc_strbuf_append(mc_strbuf *b, const char *s, size_t n);
void mc_strbuf_printf(mc_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mc_strbuf_free(mc_strbuf *b);

/* Python's repr(float): the shortest digits that round-trip, fixed notation for decimal
 * exponents in [-4, 16), "1e-05"-style otherwise; "NaN", "Infinity" as json writes them. */
void mc_py_float_repr(double x, char out[32]);
/* A JSON string literal with Python's ensure_ascii escaping (\uXXXX, surrogate pairs). */
void mc_json_string(mc_strbuf *b, const char *s);

/* Writers for an indented JSON document: open/close a container at a nesting level, and
 * emit a key or a list element (the separators ",\n" and indentation are handled). */
typedef struct mc_json_writer {
    mc_strbuf *b;
    int depth;
    bool first[32]; /* per depth: no element written yet */
} mc_json_writer;

void mc_jw_init(mc_json_writer *w, mc_strbuf *b);
void mc_jw_begin_object(mc_json_writer *w);
void mc_jw_end_object(mc_json_writer *w);
void mc_jw_begin_list(mc_json_writer *w);
void mc_jw_end_list(mc_json_writer *w);
/* Starts the next member of the current object ("key": ) or the next list element. */
void mc_jw_key(mc_json_writer *w, const char *key);
void mc_jw_elem(mc_json_writer *w);
void mc_jw_str(mc_json_writer *w, const char *s); /* NULL: null */
void mc_jw_int(mc_json_writer *w, int64_t v);
void mc_jw_float(mc_json_writer *w, double v);
void mc_jw_null(mc_json_writer *w);

#endif
