/*
 * main.c - runs the unit tests listed in suites.def.
 *
 *   test_unit            run everything
 *   test_unit NAME...    run the tests whose name starts with NAME
 *   test_unit --list     print every test name
 *
 * Ends with "N passed, N failed"; exits 1 if anything failed.
 */
#include "test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SUITE(file) extern const ratel_test_case_t ratel_suite_##file[];
#include "suites.def"
#undef SUITE

static const ratel_test_case_t *const suites[] = {
#define SUITE(file) ratel_suite_##file,
#include "suites.def"
#undef SUITE
};

static int current_failures;
static const char *current_name;
static uint64_t rng_state;

void ratel_test_fail(const char *file, int line, const char *what)
{
    if (current_failures < 10)
        fprintf(stderr, "  %s: %s:%d: %s\n", current_name, file, line, what);
    current_failures++;
}

long ratel_test_iterations(long base)
{
    const char *s = getenv("RATEL_TEST_SCALE");
    double scale = s ? atof(s) : 1.0;
    long n = (long)(base * scale);
    return n < 1 ? 1 : n;
}

uint64_t ratel_test_rand(void)
{
    /* splitmix64: small, fast, good enough for test traces. */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int64_t ratel_test_between(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(ratel_test_rand() % (uint64_t)(hi - lo + 1));
}

void ratel_test_capture_stderr(void (*call)(void *), void *arg, char *out,
                               size_t cap)
{
    FILE *f = tmpfile();
    int saved = dup(2);
    size_t n;

    out[0] = '\0';
    if (!f || saved < 0) {
        if (f)
            fclose(f);
        if (saved >= 0)
            close(saved);
        return;
    }
    fflush(stderr);
    dup2(fileno(f), 2);
    call(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(f);
    n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

static int selected(const char *name, int argc, char **argv)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strncmp(name, argv[i], strlen(argv[i])) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    const char *seed = getenv("RATEL_TEST_SEED");
    int passed = 0, failed = 0;
    int list = argc > 1 && strcmp(argv[1], "--list") == 0;

    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++) {
        for (const ratel_test_case_t *t = suites[s]; t->name; t++) {
            if (list) {
                printf("%s\n", t->name);
                continue;
            }
            if (!selected(t->name, argc, argv))
                continue;
            rng_state = seed ? strtoull(seed, NULL, 0) : 20261121;
            current_name = t->name;
            current_failures = 0;
            t->fn();
            if (current_failures) {
                printf("FAIL %s (%d checks failed)\n", t->name,
                       current_failures);
                failed++;
            } else {
                printf("ok   %s\n", t->name);
                passed++;
            }
        }
    }
    if (!list)
        printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
