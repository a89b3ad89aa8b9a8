/* tok_unicode.c: UTF-8 helpers, the Unicode classes the pre-tokenizer regexes test
 * (\p{L}, \p{N}, \s, \w) and GPT-2's byte <-> unicode map. */
#include <pthread.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_unicode_table.h"

#define NRANGES (sizeof k_uc_ranges / sizeof k_uc_ranges[0])

uint8_t tok_uc_bmp[65536];

uint8_t tok_uc_class_slow(uint32_t cp) {
    size_t lo = 0, hi = NRANGES;
    while (lo < hi) { /* first range whose last >= cp */
        size_t mid = (lo + hi) / 2;
        if ((k_uc_ranges[mid][1] >> 4) < cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo < NRANGES && k_uc_ranges[lo][0] <= cp) return (uint8_t)(k_uc_ranges[lo][1] & 15);
    return 0;
}

static void uc_build(void) {
    for (size_t r = 0; r < NRANGES; r++) {
        uint32_t a = k_uc_ranges[r][0], b = k_uc_ranges[r][1] >> 4;
        for (uint32_t c = a; c <= b && c < 65536; c++) tok_uc_bmp[c] = (uint8_t)(k_uc_ranges[r][1] & 15);
    }
}

void tok_uc_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, uc_build);
}

size_t tok_utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the maximal prefix of s that starts a valid sequence (the W3C "maximal
 * subpart"): at least 1. */
static size_t invalid_subpart(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    uint8_t lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 1;
    size_t i = 1;
    if (i < n && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i < n && i <= need && (s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

void tok_utf8_lossy(tok_buf *b, const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t cp;
        while (i < n) {
            size_t l = tok_utf8_decode(s + i, n - i, &cp);
            if (cp == TOK_INVALID_CP) break;
            i += l;
        }
        tok_buf_put(b, s + start, i - start);
        if (i < n) {
            tok_buf_put(b, "\xEF\xBF\xBD", 3);
            i += invalid_subpart(s + i, n - i);
        }
    }
}

/* bytes_to_unicode() of GPT-2's encoder.py: printable bytes stand for themselves, the
 * others take the code points from 256 up, in byte order. */
const uint16_t tok_byte_to_cp[256] = {
    256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274,
    275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 33, 34, 35, 36, 37, 38,
    39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62,
    63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86,
    87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108,
    109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 289,
    290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305, 306, 307, 308,
    309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322, 161, 162, 163, 164, 165,
    166, 167, 168, 169, 170, 171, 172, 323, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184,
    185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203,
    204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222,
    223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241,
    242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255,
};

int tok_cp_to_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp < 256 || cp > 323) return -1;
    if (cp <= 288) return (int)cp - 256;        /* bytes 0..32 */
    if (cp <= 322) return (int)cp - 289 + 127;  /* bytes 127..160 */
    return 173;
}
