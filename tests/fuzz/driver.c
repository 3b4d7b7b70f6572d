/*
 * driver.c - runs a libFuzzer-style target without libFuzzer.
 *
 *   fuzz_X [-seconds N] [-runs N] [-seed N] [-max_len N] [-dict FILE]
 *          [-artifact_prefix P] [FILE|DIR ...]
 *
 * Every FILE (and every regular file in every DIR) is run once through
 * LLVMFuzzerTestOneInput. Then, for -seconds seconds or -runs inputs,
 * whichever ends first (neither: 2000 runs), the driver feeds random inputs
 * and mutations of the corpus: bit flips, byte changes, inserted and deleted
 * bytes, interesting values, dictionary tokens, splices of two entries. Its
 * PRNG is seeded (-seed, default 1), so a run is deterministic apart from
 * where the time limit cuts it. Options also take the -name=value form, as
 * libFuzzer's do.
 *
 * A target reports a broken invariant by aborting. The driver then writes
 * the input that did it to P + "crash-" + a hash (P defaults to the current
 * directory) and dies of the same signal. A run that ends prints a summary
 * and the closing line "1 passed, 0 failed".
 *
 * This file is test code built with the normal compiler (see Makefile); it
 * reads the clock only to honour -seconds.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Sanitizer runtimes, when linked in, call this before dying. */
void __sanitizer_set_death_callback(void (*callback)(void))
    __attribute__((weak));

#define MAX_CORPUS 4096
#define MAX_TOKENS 256

typedef struct blob_s {
    uint8_t *data;
    size_t size;
} blob_t;

static blob_t corpus[MAX_CORPUS];
static size_t ncorpus;
static blob_t tokens[MAX_TOKENS];
static size_t ntokens;

/* The input being run, for the crash handler. */
static const uint8_t *volatile current_data;
static volatile size_t current_size;
static char crash_prefix[512] = "";

static uint64_t rng_state = 1;

/* splitmix64: tiny, fast and deterministic for a given seed. */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform below n (n > 0). */
static size_t below(size_t n)
{
    return (size_t)(rnd() % n);
}

static void die(const char *what)
{
    fprintf(stderr, "fuzz driver: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("malloc");
    return p;
}

/* ------------------------------------------------------------ crashes */

/* Appends s to buf at *pos (async-signal-safe). */
static void put_str(char *buf, size_t cap, size_t *pos, const char *s)
{
    while (*s && *pos + 1 < cap)
        buf[(*pos)++] = *s++;
    buf[*pos] = '\0';
}

/*
 * Saves the current input as PREFIX + "crash-" + FNV-1a hash in hex. Only
 * async-signal-safe calls: it runs from signal handlers.
 */
static void save_crash(void)
{
    static const char hex[] = "0123456789abcdef";
    const uint8_t *data = current_data;
    size_t size = current_size, pos = 0;
    uint64_t h = 0xcbf29ce484222325ull;
    char path[600], name[24];
    int fd;

    if (!data && size)
        return;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 0x100000001b3ull;
    for (int i = 0; i < 16; i++)
        name[i] = hex[(h >> (60 - 4 * i)) & 15];
    name[16] = '\0';
    put_str(path, sizeof path, &pos, crash_prefix);
    put_str(path, sizeof path, &pos, "crash-");
    put_str(path, sizeof path, &pos, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        size_t off = 0;
        while (off < size) {
            ssize_t w = write(fd, data + off, size - off);
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        close(fd);
        (void)!write(2, "fuzz driver: input saved to ", 28);
        (void)!write(2, path, strlen(path));
        (void)!write(2, "\n", 1);
    }
    current_data = NULL;
    current_size = 0;
}

static void on_signal(int sig)
{
    save_crash();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_crash_handlers(void)
{
    static const int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], on_signal);
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(save_crash);
}

static void run_one(const uint8_t *data, size_t size)
{
    current_data = data;
    current_size = size;
    LLVMFuzzerTestOneInput(data, size);
    current_data = NULL;
    current_size = 0;
}

/* ------------------------------------------------------------- corpus */

static void add_corpus(uint8_t *data, size_t size)
{
    if (ncorpus == MAX_CORPUS) {
        free(data);
        return;
    }
    corpus[ncorpus].data = data;
    corpus[ncorpus].size = size;
    ncorpus++;
}

static int read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    size_t cap = 4096, n = 0;
    uint8_t *buf;

    if (!f)
        return -1;
    buf = xmalloc(cap);
    for (;;) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap)
            break;
        cap *= 2;
        buf = realloc(buf, cap);
        if (!buf)
            die("realloc");
    }
    fclose(f);
    /* Exactly n bytes, so AddressSanitizer sees reads past the input. */
    buf = realloc(buf, n ? n : 1);
    if (!buf)
        die("realloc");
    *data = buf;
    *size = n;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Runs a corpus FILE, or every regular file of a DIR in name order, and
 * keeps each input for mutation. Returns the number of inputs run.
 */
static size_t load_and_run(const char *path)
{
    struct stat st;
    uint8_t *data;
    size_t size, count = 0;

    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz driver: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        char **names = NULL;
        size_t n = 0, cap = 0;
        if (!d)
            die(path);
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                names = realloc(names, cap * sizeof *names);
                if (!names)
                    die("realloc");
            }
            names[n] = xmalloc(strlen(path) + strlen(e->d_name) + 2);
            sprintf(names[n], "%s/%s", path, e->d_name);
            n++;
        }
        closedir(d);
        if (n)
            qsort(names, n, sizeof *names, by_name);
        for (size_t i = 0; i < n; i++) {
            if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode))
                count += load_and_run(names[i]);
            free(names[i]);
        }
        free(names);
        return count;
    }
    if (read_file(path, &data, &size) != 0)
        die(path);
    run_one(data, size);
    add_corpus(data, size);
    return 1;
}

/* --------------------------------------------------------- dictionary */

/*
 * Reads a libFuzzer dictionary: one "token" per line, optionally preceded
 * by name=; \\, \" and \xNN escapes; # starts a comment.
 */
static void load_dict(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[1024];

    if (!f)
        die(path);
    while (fgets(line, sizeof line, f) && ntokens < MAX_TOKENS) {
        char *q = strchr(line, '"');
        uint8_t tok[512];
        size_t n = 0;
        if (line[0] == '#' || !q)
            continue;
        for (q++; *q && *q != '"' && n < sizeof tok; q++) {
            if (*q == '\\' && q[1] == 'x' && q[2] && q[3]) {
                char h[3] = {q[2], q[3], 0};
                tok[n++] = (uint8_t)strtoul(h, NULL, 16);
                q += 3;
            } else if (*q == '\\' && q[1]) {
                tok[n++] = (uint8_t) * ++q;
            } else {
                tok[n++] = (uint8_t)*q;
            }
        }
        if (n == 0)
            continue;
        tokens[ntokens].data = xmalloc(n);
        memcpy(tokens[ntokens].data, tok, n);
        tokens[ntokens].size = n;
        ntokens++;
    }
    fclose(f);
}

/* ----------------------------------------------------------- mutation */

static const uint8_t interesting8[] = {0,   1,   2,   7,   8,   9,   16,
                                       31,  32,  64,  100, 127, 128, 200,
                                       255, '0', '9', '/', ':', ',', '='};
static const uint32_t interesting32[] = {
    0,           1,           2,           1000,        59999,
    60000,       86400000,    999999999,   1000000000,  1000000001,
    2592000000u, 2592000001u, 0x7fffffffu, 0x80000000u, 0xffffffffu};

/* One mutation of buf (size *size, capacity cap) in place. */
static void mutate_once(uint8_t *buf, size_t *size, size_t cap)
{
    size_t n = *size;

    switch (below(10)) {
    case 0: /* flip a bit */
        if (n)
            buf[below(n)] ^= (uint8_t)(1u << below(8));
        break;
    case 1: /* random byte */
        if (n)
            buf[below(n)] = (uint8_t)rnd();
        break;
    case 2: /* interesting byte */
        if (n)
            buf[below(n)] = interesting8[below(sizeof interesting8)];
        break;
    case 3: /* interesting little-endian 32-bit value */
        if (n >= 4) {
            uint32_t v = interesting32[below(sizeof interesting32 /
                                             sizeof interesting32[0])];
            size_t at = below(n - 3);
            for (int i = 0; i < 4; i++)
                buf[at + (size_t)i] = (uint8_t)(v >> (8 * i));
        }
        break;
    case 4: /* insert random bytes */
        if (n < cap) {
            size_t at = below(n + 1), k = 1 + below(cap - n < 8 ? cap - n : 8);
            memmove(buf + at + k, buf + at, n - at);
            for (size_t i = 0; i < k; i++)
                buf[at + i] = (uint8_t)rnd();
            *size = n + k;
        }
        break;
    case 5: /* delete bytes */
        if (n) {
            size_t at = below(n), k = 1 + below(n - at < 8 ? n - at : 8);
            memmove(buf + at, buf + at + k, n - at - k);
            *size = n - k;
        }
        break;
    case 6: /* duplicate a chunk */
        if (n && n < cap) {
            size_t from = below(n), k = 1 + below(n - from);
            size_t at = below(n + 1);
            uint8_t tmp[256];
            if (k > cap - n)
                k = cap - n;
            if (k > sizeof tmp)
                k = sizeof tmp;
            memcpy(tmp, buf + from, k);
            memmove(buf + at + k, buf + at, n - at);
            memcpy(buf + at, tmp, k);
            *size = n + k;
        }
        break;
    case 7: /* dictionary token, inserted or overwritten */
        if (ntokens) {
            const blob_t *t = &tokens[below(ntokens)];
            size_t at = below(n + 1);
            if (rnd() & 1) {
                if (n + t->size <= cap) {
                    memmove(buf + at + t->size, buf + at, n - at);
                    memcpy(buf + at, t->data, t->size);
                    *size = n + t->size;
                }
            } else if (at + t->size <= n) {
                memcpy(buf + at, t->data, t->size);
            }
        }
        break;
    case 8: /* splice: our head, another entry's tail */
        if (ncorpus) {
            const blob_t *o = &corpus[below(ncorpus)];
            size_t head = below(n + 1), from = below(o->size + 1);
            size_t k = o->size - from;
            if (head + k > cap)
                k = cap - head;
            memcpy(buf + head, o->data + from, k);
            *size = head + k;
        }
        break;
    default: /* truncate */
        if (n)
            *size = below(n);
        break;
    }
}

/* Fills buf with one generated input; returns its size. */
static size_t generate(uint8_t *buf, size_t cap)
{
    size_t size;

    if (ncorpus == 0 || below(8) == 0) {
        /* Fresh random bytes, often printable (parsers read text). */
        int text = (int)(rnd() & 1);
        size = below(cap < 64 ? cap + 1 : 65);
        for (size_t i = 0; i < size; i++)
            buf[i] = text ? (uint8_t)(32 + below(95)) : (uint8_t)rnd();
        return size;
    }
    {
        const blob_t *c = &corpus[below(ncorpus)];
        size_t k = 1 + below(4);
        size = c->size < cap ? c->size : cap;
        memcpy(buf, c->data, size);
        while (k--)
            mutate_once(buf, &size, cap);
    }
    return size;
}

/* -------------------------------------------------------------- main */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: fuzz_X [-seconds N] [-runs N] [-seed N] [-max_len N] "
            "[-dict FILE] [-artifact_prefix P] [FILE|DIR ...]\n");
    exit(2);
}

/*
 * Matches "-name value" or "-name=value" at argv[*i]; advances *i past the
 * value and returns it, or NULL if argv[*i] is another option.
 */
static const char *option(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t n = strlen(name);

    if (a[0] != '-' || strncmp(a + 1, name, n) != 0)
        return NULL;
    if (a[1 + n] == '=')
        return a + n + 2;
    if (a[1 + n] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        usage();
    return argv[++*i];
}

int main(int argc, char **argv)
{
    double seconds = 0, start;
    long long runs = -1, done = 0;
    size_t max_len = 4096, loaded = 0, new_units = 0;
    const char *v,
        *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    const char *paths[256];
    int npaths = 0;
    uint8_t *buf;

    for (int i = 1; i < argc; i++) {
        if ((v = option(argc, argv, &i, "seconds")) ||
            (v = option(argc, argv, &i, "max_total_time")))
            seconds = atof(v);
        else if ((v = option(argc, argv, &i, "runs")))
            runs = atoll(v);
        else if ((v = option(argc, argv, &i, "seed")))
            rng_state = strtoull(v, NULL, 0);
        else if ((v = option(argc, argv, &i, "max_len")))
            max_len = (size_t)atoll(v);
        else if ((v = option(argc, argv, &i, "dict")))
            load_dict(v);
        else if ((v = option(argc, argv, &i, "artifact_prefix")))
            snprintf(crash_prefix, sizeof crash_prefix, "%s", v);
        else if (argv[i][0] == '-')
            usage();
        else if (npaths < (int)(sizeof paths / sizeof paths[0]))
            paths[npaths++] = argv[i];
    }
    if (max_len < 1)
        max_len = 1;
    if (seconds <= 0 && runs < 0)
        runs = 2000;
    install_crash_handlers();

    start = now_seconds();
    for (int i = 0; i < npaths; i++)
        loaded += load_and_run(paths[i]);

    buf = xmalloc(max_len);
    for (;;) {
        size_t size;
        uint8_t *copy;
        if (runs >= 0 && done >= runs)
            break;
        if (seconds > 0 && (done & 63) == 0 && now_seconds() - start >= seconds)
            break;
        size = generate(buf, max_len);
        /* Run a heap copy of exactly `size` bytes: ASan sees overreads. */
        copy = xmalloc(size);
        memcpy(copy, buf, size);
        run_one(copy, size);
        /* Keep a few generated inputs so mutations can build on them. */
        if (below(64) == 0 && ncorpus < MAX_CORPUS) {
            add_corpus(copy, size);
            new_units++;
        } else {
            free(copy);
        }
        done++;
    }
    {
        double t = now_seconds() - start;
        printf("%s: %zu corpus inputs, %lld generated in %.1f s (%.0f/s), "
               "%zu kept\n",
               prog, loaded, done, t, t > 0 ? (double)done / t : 0.0,
               new_units);
    }
    for (size_t i = 0; i < ncorpus; i++)
        free(corpus[i].data);
    for (size_t i = 0; i < ntokens; i++)
        free(tokens[i].data);
    free(buf);
    printf("1 passed, 0 failed\n");
    return 0;
}
