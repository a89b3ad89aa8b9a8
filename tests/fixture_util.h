/* fixture_util.h: small file helpers shared by the data-pipeline tests (temporary
 * directories, whole-file reads and comparisons, directory listings). */
#ifndef MC_TESTS_FIXTURE_UTIL_H
#define MC_TESTS_FIXTURE_UTIL_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"

/* Whole file into a malloc'd buffer (NULL if it cannot be read). */
static inline unsigned char *fu_read(const char *path, size_t *n) { return (unsigned char *)check_read_file(path, n); }

static inline bool fu_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static inline bool fu_write_str(const char *path, const char *s) { return fu_write(path, s, strlen(s)); }

/* Byte-for-byte equality of two files. */
static inline bool fu_same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *x = fu_read(a, &na), *y = fu_read(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static inline bool fu_copy(const char *from, const char *to) {
    size_t n = 0;
    unsigned char *d = fu_read(from, &n);
    if (!d) return false;
    bool ok = fu_write(to, d, n);
    free(d);
    return ok;
}

static inline bool fu_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* A fresh directory under /tmp (or $TMPDIR); the caller removes it with fu_rmtree. */
static inline char *fu_tmpdir(const char *tag) {
    const char *base = getenv("TMPDIR");
    char *p = malloc(512);
    snprintf(p, 512, "%s/mc-%s-XXXXXX", base ? base : "/tmp", tag);
    if (!mkdtemp(p)) {
        perror("mkdtemp");
        exit(1);
    }
    return p;
}

static inline void fu_rmtree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        unlink(dir);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *p = malloc(len);
        snprintf(p, len, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            fu_rmtree(p);
        else
            unlink(p);
        free(p);
    }
    closedir(d);
    rmdir(dir);
}

/* Number of entries in a directory (not . and ..); names joined by spaces into `names`. */
static inline int fu_list(const char *dir, char *names, size_t cap) {
    DIR *d = opendir(dir);
    if (names && cap) names[0] = 0;
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        if (names && strlen(names) + strlen(e->d_name) + 2 < cap) {
            if (names[0]) strcat(names, " ");
            strcat(names, e->d_name);
        }
    }
    closedir(d);
    return n;
}

#endif
