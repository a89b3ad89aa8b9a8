/* file.h: the file plumbing every writer shares: a file written under a temporary name,
 * fsynced and renamed into place (so that a crash leaves the old file or the new one,
 * never a torn one), whole-file reads, mkdir -p, and durable directory operations for
 * writers that publish a whole directory at once (checkpoints). */
#ifndef MC_BASE_FILE_H
#define MC_BASE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "base/error.h"

/* A file written under a temporary name in the target's directory and renamed over the
 * target by commit; abort (or a failed commit) removes the temporary file. */
typedef struct mc_atomic_file {
    FILE *f;
    char *path, *tmp;
    int cleanup; /* the temporary's mc_cleanup_register handle */
} mc_atomic_file;

int mc_atomic_file_open(mc_atomic_file *af, const char *path, mc_err *err);
int mc_atomic_file_write(mc_atomic_file *af, const void *data, size_t n, mc_err *err);
/* fflush + fsync + close + rename + fsync of the directory. */
int mc_atomic_file_commit(mc_atomic_file *af, mc_err *err);
/* Safe on a zeroed or already committed/aborted struct. */
void mc_atomic_file_abort(mc_atomic_file *af);
/* Finishes the temporary file (flush, fsync, close) without renaming it, for writers that
 * publish several files together: commit them with mc_atomic_file_rename afterwards. */
int mc_atomic_file_finish(mc_atomic_file *af, mc_err *err);
int mc_atomic_file_rename(mc_atomic_file *af, mc_err *err);

int mc_write_file_atomic(const char *path, const void *data, size_t n, mc_err *err);

/* Files to remove when the process is ended by SIGTERM or SIGINT. Every open atomic file's
 * temporary is listed here while it exists; a writer lists the intermediate files it makes
 * (a path may be listed before the file exists: removing a missing file is harmless), or a
 * temporary directory, removed with all it holds.
 * Register returns a handle for unregister (-1 when the list is full: nothing to undo). */
int mc_cleanup_register(const char *path);
void mc_cleanup_unregister(int handle);
/* From now on SIGTERM and SIGINT remove every listed file, then end the process as the
 * signal would have (its default action, so the exit status says which signal). Call it
 * before any thread starts: the signals are blocked in every thread and taken by one
 * thread of its own, so that the removal runs in ordinary code, not in a handler. A signal
 * that was ignored when the process started (SIGINT of a background job) stays ignored. */
void mc_cleanup_on_signals(void);
/* Reads a whole file (malloc'd, NUL-terminated); errors name the path. */
int mc_read_file(const char *path, char **data, size_t *n, mc_err *err);
/* mkdir -p. */
int mc_mkdirs(const char *dir, mc_err *err);
/* The directory part of path ("." when there is none), malloc'd. */
char *mc_path_dirname(const char *path);

/* fsync of a directory, so that the entries created or renamed in it are durable (best
 * effort: some filesystems refuse fsync on directories). */
void mc_fsync_dir(const char *dir);
/* rm -rf: removes a directory tree (or a file); a missing path is not an error. */
int mc_remove_tree(const char *path, mc_err *err);
/* Publishes directory `from` as `to`, atomically where the filesystem allows: when `to`
 * exists it is swapped with `from` in one step (renameat2 RENAME_EXCHANGE) and the old
 * tree removed afterwards, so that `to` is never missing; where the exchange is refused,
 * the old `to` is moved aside first. The parent directory is fsynced. */
int mc_publish_dir(const char *from, const char *to, mc_err *err);
/* Whether `dir` exists as a directory that this process can create files in (tested by
 * creating and removing a file). */
bool mc_dir_writable(const char *dir, mc_err *err);

#endif
