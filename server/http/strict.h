/*
 * strict.h - byte checks parse.c adds to http-parser's (strict.c says
 * which and why). Pure functions; nothing is allocated.
 */
#ifndef RATEL_HTTP_STRICT_H
#define RATEL_HTTP_STRICT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if p[0..n) is made of token characters only (RFC 9110 tchar: no
   space, no control byte, none of the separators "(),/:;<=>?@[\]{}). */
int ratel__http_is_token(const char *p, size_t n);

/* 1 if the request target p[0..n) holds no space, control byte or DEL
   (the parser takes a TAB there). */
int ratel__http_target_ok(const char *p, size_t n);

/* 1 if the header value p[0..n) holds no control byte but HTAB (RFC
   9110 5.5; the parser checks most of a value, but not its first byte). */
int ratel__http_value_ok(const char *p, size_t n);

/*
 * The length of the request head at p (n bytes buffered): the request
 * line and the header lines through the empty line that ends them, after
 * any empty lines before the request line. Returns -1 if a line of it
 * ends in a bare LF (one without a CR before it), 0 if its end is not in
 * p[0..n).
 */
long ratel__http_head_length(const char *p, size_t n);

/* Where the chunk framing of a body is (see ratel__http_framing). */
enum {
    RATEL__FRAME_LINE,    /* in a chunk-size, extension or trailer line */
    RATEL__FRAME_LINE_LF, /* a CR was seen: an LF must follow */
    RATEL__FRAME_DATA_CR, /* a chunk's data ended: a CR must follow */
    RATEL__FRAME_DATA_LF  /* then an LF */
};

/*
 * Checks framing bytes of a chunked body (everything but the chunks'
 * data), fed in order and in any pieces; *state carries what is expected
 * across calls (start at RATEL__FRAME_LINE after the head; set
 * RATEL__FRAME_DATA_CR after each piece of data). Returns 0, or -1 for a
 * line ending in a bare LF or a chunk's data not followed by CR LF.
 */
int ratel__http_framing(unsigned char *state, const char *p, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_HTTP_STRICT_H */
