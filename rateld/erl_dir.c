/*
 * erl_dir.c - envoyproxy/ratelimit's configuration directory: every
 * *.yaml and *.yml file under it (subdirectories included, as ERL walks
 * them), read in path order into one loaded set (erl_load.c).
 */
#include "app/yaml.h"
#include "rateld/erl_private.h"
#include "ratel_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct file_list_s {
    char **paths;
    size_t n, cap;
} file_list_t;

static int yaml_name(const char *name)
{
    size_t n = strlen(name);

    return (n > 5 && strcmp(name + n - 5, ".yaml") == 0) ||
           (n > 4 && strcmp(name + n - 4, ".yml") == 0);
}

/* Adds path (taken) to the list; -1 with a message when full. */
static int list_add(file_list_t *list, char *path, const char *dir, char *err,
                    size_t errlen)
{
    if (list->n == RATELD_ERL_FILES_MAX) {
        snprintf(err, errlen,
                 "%s: more than %d configuration files (*.yaml, *.yml) "
                 "under it",
                 dir, RATELD_ERL_FILES_MAX);
        free(path);
        return -1;
    }
    if (list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 32;
        char **paths = realloc(list->paths, cap * sizeof *paths);
        if (!paths) {
            snprintf(err, errlen, "%s: out of memory", dir);
            free(path);
            return -1;
        }
        list->paths = paths;
        list->cap = cap;
    }
    list->paths[list->n++] = path;
    return 0;
}

/*
 * One directory entry: a *.yaml or *.yml file (links followed) is added,
 * a directory (not a link to one) walked, anything else left alone.
 */
static int walk_entry(const char *root, const char *path, int depth,
                      file_list_t *list, char *err, size_t errlen);

/* The files under `dir` (a walk `depth` levels below `root`). */
static int walk(const char *root, const char *dir, int depth, file_list_t *list,
                char *err, size_t errlen)
{
    struct dirent *e;
    DIR *d = opendir(dir);
    int rc = 0;

    if (!d) {
        snprintf(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    while (rc == 0 && (e = readdir(d)) != NULL) {
        char *path;
        if (e->d_name[0] == '.')
            continue;
        if (asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
            snprintf(err, errlen, "%s: out of memory", dir);
            rc = -1;
            break;
        }
        rc = walk_entry(root, path, depth, list, err, errlen);
        if (rc == 1) {
            rc = list_add(list, path, root, err, errlen);
            continue;
        }
        free(path);
    }
    closedir(d);
    return rc;
}

/* 1: a file to read; 0: done with; -1: an error. */
static int walk_entry(const char *root, const char *path, int depth,
                      file_list_t *list, char *err, size_t errlen)
{
    const char *base = strrchr(path, '/') + 1;
    struct stat st;

    if (lstat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        if (depth == RATELD_ERL_DIRS_DEPTH_MAX) {
            snprintf(err, errlen,
                     "%s: directories nested deeper than %d levels under %s",
                     path, RATELD_ERL_DIRS_DEPTH_MAX, root);
            return -1;
        }
        return walk(root, path, depth + 1, list, err, errlen);
    }
    if (!yaml_name(base))
        return 0;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return S_ISREG(st.st_mode) ? 1 : 0;
}

static int paths_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int rateld_erl_load_dir(const char *dir, const char *algorithm, int merge,
                        rateld_erl_t **out, char *err, size_t errlen)
{
    file_list_t list = {NULL, 0, 0};
    rateld_erl_t *erl = NULL;
    char scratch[1], *text = NULL;
    size_t len = 0;
    int rc = -1;

    if (!err || errlen == 0)
        err = scratch, errlen = sizeof scratch;
    *out = NULL;
    if (!rateld_erl_algorithm_ok(algorithm)) {
        char names[96];
        ratel__algo_list(RATEL_ALGO_RATE, "", ", ", names, sizeof names);
        snprintf(err, errlen, "algorithm: \"%s\" is not one of %s", algorithm,
                 names);
        return -1;
    }
    erl = rateld_erl_new(algorithm);
    if (!erl) {
        snprintf(err, errlen, "%s: out of memory", dir);
        return -1;
    }
    rateld_erl_merge_domains(erl, merge);
    if (walk(dir, dir, 0, &list, err, errlen) == 0) {
        if (list.n > 1)
            qsort(list.paths, list.n, sizeof *list.paths, paths_cmp);
        rc = 0;
        for (size_t i = 0; rc == 0 && i < list.n; i++) {
            rc = ratel__config_read_file(list.paths[i], &text, &len, err,
                                         errlen);
            if (rc == 0)
                rc = rateld_erl_parse(erl, text, len, list.paths[i], err,
                                      errlen);
            free(text);
            text = NULL;
        }
    }
    for (size_t i = 0; i < list.n; i++)
        free(list.paths[i]);
    free(list.paths);
    if (rc == 0)
        rc = rateld_erl_finish(erl, err, errlen);
    if (rc != 0) {
        rateld_erl_free(erl);
        return -1;
    }
    *out = erl;
    return 0;
}
