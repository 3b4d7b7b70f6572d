/*
 * strict.c - the checks http-parser leaves out. Debian builds
 * libhttp-parser without HTTP_PARSER_STRICT, so the parser takes a space
 * inside a header name ("X A: b"), ends a line at a bare LF (in the
 * request line, the headers and the chunk framing) and does not look at
 * the two bytes that must follow a chunk's data; it lets a control byte
 * through as the first byte of a header value, and a TAB in the request
 * target. A front proxy that reads
 * such bytes differently from us sees other requests than we do (request
 * smuggling: "X-A: a\nContent-Length: 34" hides the next request in a
 * body), so these are refused with 400 (RFC 9112 allows a server to
 * refuse a bare LF, and requires 400 for an invalid field name).
 *
 * Pure functions over bytes; parse.c calls them from the parser's
 * callbacks.
 */
#include "http/strict.h"

#include <string.h>

/* RFC 9110 5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" /
   "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA. */
static int is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
        (c >= 'A' && c <= 'Z'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

int ratel__http_is_token(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)p[i]))
            return 0;
    return 1;
}

int ratel__http_target_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= ' ' || c == 0x7f)
            return 0;
    }
    return 1;
}

int ratel__http_value_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if ((c < ' ' && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

long ratel__http_head_length(const char *p, size_t n)
{
    size_t i = 0, line;

    /* Empty lines before a request line are skipped, as the parser does
       (RFC 9112 2.2): they carry nothing another reader could take for
       a header. */
    while (i < n && (p[i] == '\r' || p[i] == '\n'))
        i++;
    line = i;
    while (i < n) {
        const char *lf = memchr(p + i, '\n', n - i);
        size_t at;
        if (!lf)
            return 0;
        at = (size_t)(lf - p);
        if (at == line || p[at - 1] != '\r')
            return -1;
        if (at - 1 == line)
            return (long)(at + 1); /* the empty line: the end of the head */
        line = i = at + 1;
    }
    return 0;
}

/* The chunk framing, one state per byte: the byte a state requires
   (0: any byte but LF, a CR then requires the LF) and the next state. */
static const struct {
    char want;
    unsigned char next;
} frame_steps[] = {
    [RATEL__FRAME_LINE] = {0, RATEL__FRAME_LINE},
    [RATEL__FRAME_LINE_LF] = {'\n', RATEL__FRAME_LINE},
    [RATEL__FRAME_DATA_CR] = {'\r', RATEL__FRAME_DATA_LF},
    [RATEL__FRAME_DATA_LF] = {'\n', RATEL__FRAME_LINE},
};

int ratel__http_framing(unsigned char *state, const char *p, size_t n)
{
    unsigned char s = *state;

    for (size_t i = 0; i < n; i++) {
        char want = frame_steps[s].want;
        if (want) {
            if (p[i] != want)
                return -1;
            s = frame_steps[s].next;
        } else if (p[i] == '\n') {
            return -1;
        } else if (p[i] == '\r') {
            s = RATEL__FRAME_LINE_LF;
        }
    }
    *state = s;
    return 0;
}
