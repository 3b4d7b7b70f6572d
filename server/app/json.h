/*
 * json.h - strict JSON request bodies and JSON error bodies, for every
 * program that reads JSON from a client (rateld, captchad).
 *
 * "Strict" means the body is exactly one JSON value (RFC 8259) and
 * nothing a C program could misread:
 *
 *   - only whitespace may follow the value ({"a":1}xyz is refused);
 *   - every byte is valid UTF-8: no overlong forms, no UTF-16 surrogates
 *     (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence;
 *   - no raw NUL byte anywhere, and no \u0000 escape: either would cut
 *     a string short in C, so "13811110001\u0000evil" could be checked
 *     as one number and used as another;
 *   - no unpaired surrogate escape (\ud800 alone, or \udc00 first);
 *   - no raw control character inside a string (RFC 8259 requires them
 *     escaped), numbers in RFC 8259's grammar (no 01, 1., +1, .5) and
 *     within +-1e308, so that they print back as numbers (1e999 is
 *     refused);
 *   - no key given twice in one object, at any depth: parsers disagree
 *     on which copy wins (the first, the last), so a body could mean one
 *     thing to a proxy and another to us;
 *   - arrays and objects nested at most RATEL__JSON_DEPTH_MAX deep.
 *
 * Why cJSON underneath: it is already a dependency (Debian's
 * libcjson-dev) and builds a convenient tree. cJSON_ParseWithLengthOpts
 * can report trailing data, but cJSON does not check UTF-8, copies raw
 * NULs and control characters into strings, turns \u0000 into a
 * terminator, keeps both copies of a repeated key (and
 * cJSON_GetObjectItem returns the first), and accepts 01 and 1. as
 * numbers. So a validator runs first over the bytes, reporting the first
 * problem with its byte offset, and cJSON only ever sees text that
 * passed; the duplicate-key and number-range checks then walk cJSON's
 * tree.
 */
#ifndef RATEL_APP_JSON_H
#define RATEL_APP_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Deepest nesting of arrays and objects a strict body may have. Request
   bodies are flat objects; 16 leaves room and bounds the recursion. */
#define RATEL__JSON_DEPTH_MAX 16

/*
 * Parses the `len` bytes at `text` (no NUL terminator needed) as a strict
 * JSON body. Returns 0 with the tree in *out (free with cJSON_Delete);
 * RATEL_EINVAL when the text is refused, with a message naming the problem
 * and its byte offset in err ("trailing data after the JSON value at
 * offset 26") and the offset in *offset (may be NULL); RATEL_ENOMEM.
 * *out is NULL on error. Thread-safe apart from cJSON's own global error
 * position, which cJSON writes on every parse and nothing here reads.
 */
int ratel__json_parse_strict(const char *text, size_t len, cJSON **out,
                             size_t *offset, char *err, size_t errlen);

/*
 * The text of `value` without spaces, followed by a newline, malloc'd
 * (free with free()); its length without the NUL in *len. NULL when out
 * of memory.
 */
char *ratel__json_print(const cJSON *value, size_t *len);

/*
 * The error body {"error":"MESSAGE"} and a newline, built with cJSON so
 * that quotes, backslashes and control characters in `message` are
 * escaped; bytes of `message` that are not valid UTF-8 become '?', so
 * the body is always valid JSON. malloc'd (free()), length in *len; NULL
 * when out of memory.
 */
char *ratel__json_error_body(const char *message, size_t *len);

/*
 * Makes `message` (NUL-terminated) valid UTF-8 in place of itself: each
 * byte that does not start a valid sequence becomes '?'. For building
 * other bodies that carry text of uncertain origin.
 */
void ratel__json_sanitize_utf8(char *message);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_APP_JSON_H */
