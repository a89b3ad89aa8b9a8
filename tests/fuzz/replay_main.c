/* replay_main.c: the ctest side of a fuzz harness: feeds every file of the directories given
 * on the command line (the seed corpus and the saved findings) to LLVMFuzzerTestOneInput,
 * once each, with the normal compiler and no libFuzzer. A crash, an assertion or a
 * sanitizer report (in a sanitized build) fails the test; a directory that does not exist
 * holds nothing to replay, but the seed corpus (the first) must not be empty. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Replays the files of dir in name order; returns how many. */
static int replay_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) names = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "%s: cannot open\n", path);
            exit(1);
        }
        size_t len = 0, bcap = 4096;
        uint8_t *buf = malloc(bcap);
        size_t got;
        while ((got = fread(buf + len, 1, bcap - len, f)) > 0)
            if ((len += got) == bcap) buf = realloc(buf, bcap *= 2);
        fclose(f);
        fprintf(stderr, "replay %s (%zu bytes)\n", path, len);
        /* an exact-size copy, so that AddressSanitizer sees a read past the input */
        uint8_t *input = malloc(len ? len : 1);
        memcpy(input, buf, len);
        free(buf);
        LLVMFuzzerTestOneInput(input, len);
        free(input);
        free(names[i]);
    }
    free(names);
    return (int)n;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [FINDINGS_DIR...]\n", argv[0]);
        return 2;
    }
    int seeds = replay_dir(argv[1]), findings = 0;
    for (int i = 2; i < argc; i++) findings += replay_dir(argv[i]);
    printf("replayed %d corpus inputs and %d findings\n", seeds, findings);
    if (seeds == 0) {
        printf("0 passed, 1 failed (the corpus %s is empty or missing)\n", argv[1]);
        return 1;
    }
    printf("%d passed, 0 failed\n", seeds + findings);
    return 0;
}
