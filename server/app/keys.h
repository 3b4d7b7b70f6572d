/*
 * keys.h - key sources: the identity a policy limits, read from a request
 * the way the backend behind it reads it. One grammar and one reading,
 * shared by rateld (rateld/request.c builds the view from its HTTP
 * request), the nginx module (from nginx's request) and captchad.
 *
 * The grammar (docs/keys.md):
 *
 *   KEY       = SOURCE *("," SOURCE)            one key of several parts
 *   SOURCE    = KIND [":" NAME] *("|" TRANSFORM)
 *   KIND      = ip | global | path | host | header:NAME | query:NAME
 *             | form:NAME | cookie:NAME | json:FIELD
 *   TRANSFORM = phone[:REGION]                  E.164 ("+8613900000001")
 *             | range:DIGITS                    ... its last DIGITS digits
 *                                               as 'x' (a number range)
 *             | country                         ... its region ("CN")
 *
 * The rule for every reader: refuse what two backends could read
 * differently. A value is decoded once (%XX, '+' a space in a query or
 * form); a parameter given twice in any case of its name (or as NAME[..]),
 * a malformed escape, a control byte, a raw '#' in the query, a value
 * that still holds an escape after decoding, a query parameter when the
 * body carries form fields (which backends merge with the query's), or a
 * form field also in the query are refused (bad-key); an absent or empty
 * value is missing (missing-key), refused unless the configuration says
 * otherwise (on_missing).
 */
#ifndef RATEL_APP_KEYS_H
#define RATEL_APP_KEYS_H

#include <stddef.h>
#include <stdint.h>

struct cJSON;

#define RATEL__KEY_PARTS_MAX 8   /* sources of one key */
#define RATEL__KEY_NAME_MAX 128  /* header, parameter, cookie, field names */
#define RATEL__KEY_MAX 1024      /* longest value of a key (after "POLICY:") */
#define RATEL__KEY_TEXT_MAX 2048 /* longest key source text */

/* Where one part of a key comes from. */
#define RATEL__KEY_KINDS(X)                                                    \
    X(IP, "ip", 0)         /* the client address (an IPv6 client's /64) */     \
    X(GLOBAL, "global", 0) /* one bucket for everyone */                       \
    X(PATH, "path", 0)     /* the request path, without the query */           \
    X(HOST, "host", 0)     /* the Host, lower case, without the port */        \
    X(HEADER, "header", 1) /* a header's value, trimmed */                     \
    X(QUERY, "query", 1)   /* a query parameter, decoded */                    \
    X(FORM, "form", 1)     /* a field of an urlencoded body, decoded */        \
    X(COOKIE, "cookie", 1) /* a cookie's value */                              \
    X(JSON, "json", 1)     /* a top-level field of a JSON object body */

typedef enum ratel__key_kind_e {
#define RATEL__KEY_KIND_ENUM(name, word, named) RATEL__KEY_##name,
    RATEL__KEY_KINDS(RATEL__KEY_KIND_ENUM)
#undef RATEL__KEY_KIND_ENUM
        RATEL__KEY_SELF /* not a source: rateld's overrides read the key */
} ratel__key_kind_t;

/* What a part's value becomes (phone numbers: server/app/phone.h). */
typedef enum ratel__key_transform_e {
    RATEL__KEY_AS_IS = 0,
    RATEL__KEY_PHONE,        /* the number in E.164 */
    RATEL__KEY_PHONE_RANGE,  /* E.164 with the last `digits` digits 'x' */
    RATEL__KEY_PHONE_COUNTRY /* the number's region, "CN" */
} ratel__key_transform_t;

typedef struct ratel__key_part_s {
    ratel__key_kind_t kind;
    char name[RATEL__KEY_NAME_MAX]; /* "" for unnamed kinds */
    ratel__key_transform_t transform;
    char region[4]; /* phone: the default region ("CN"); "" none */
    int digits;     /* range: digits replaced by 'x' (1..6) */
} ratel__key_part_t;

/* A request whose key source is missing (absent or empty). */
typedef enum ratel__key_missing_e {
    RATEL__KEY_MISSING_REJECT = 0, /* refused: 400 missing-key (default) */
    RATEL__KEY_MISSING_SHARED,     /* one bucket, the part reading "-" */
    RATEL__KEY_MISSING_ALLOW       /* not limited (nginx's empty key) */
} ratel__key_missing_t;

/* A key: its parts and what a missing or differently cased one means. */
typedef struct ratel__key_s {
    ratel__key_part_t parts[RATEL__KEY_PARTS_MAX];
    size_t n;
    ratel__key_missing_t on_missing;
    int fold_case; /* the value in lower case (A-Z): "Alice" is "alice" */
} ratel__key_t;

/*
 * Parses one source ("query:telephone|phone:CN") of `len` bytes into
 * *part. Returns 0, or -1 with a message naming the text and saying what
 * is accepted in err.
 */
int ratel__key_part_parse(const char *text, size_t len, ratel__key_part_t *part,
                          char *err, size_t errlen);

/*
 * Parses a key of one or more comma-separated sources ("query:phone,ip")
 * into key->parts (on_missing and fold_case are left as they are).
 * Returns 0, or -1 with a message in err. A source given twice and
 * `global` beside another source are refused.
 */
int ratel__key_parse(const char *text, size_t len, ratel__key_t *key, char *err,
                     size_t errlen);

/* Checks key->parts (a source twice, global combined): 0 or -1 + err. */
int ratel__key_check(const ratel__key_t *key, char *err, size_t errlen);

/* Writes part's text ("query:telephone|phone:CN") into buf; its length. */
size_t ratel__key_part_format(const ratel__key_part_t *part, char *buf,
                              size_t len);

/* A byte string (not NUL-terminated). */
typedef struct ratel__key_str_s {
    const char *p;
    size_t n;
} ratel__key_str_t;

/* What the body of a request holds, as far as key sources care. */
typedef enum ratel__key_body_e {
    RATEL__KEY_BODY_NONE = 0,   /* none, or one that is not fields */
    RATEL__KEY_BODY_URLENCODED, /* application/x-www-form-urlencoded */
    RATEL__KEY_BODY_MULTIPART   /* multipart/form-data: fields not read */
} ratel__key_body_t;

/*
 * A request as key sources read it. The host fills what its sources
 * need (ratel__key_needs says which); strings point into the request.
 */
typedef struct ratel__key_view_s {
    /* Every value of header `name` (any case), in order, into out[0..max):
       the number there are (may be more than max). */
    size_t (*headers)(const void *ctx, const char *name, ratel__key_str_t *out,
                      size_t max);
    const void *ctx;
    ratel__key_str_t query;   /* after '?', not decoded; p NULL: none */
    ratel__key_str_t path;    /* not decoded */
    ratel__key_str_t host;    /* lower case, without the port */
    const char *client;       /* the client address (trusted proxies applied) */
    ratel__key_body_t body;   /* from Content-Type */
    ratel__key_str_t form;    /* the urlencoded body, when read */
    int form_unread;          /* a form body the host could not read whole */
    const struct cJSON *json; /* the body, when a JSON object */
    int json_error;           /* ... it is not one */
} ratel__key_view_t;

/* What a key's sources need of the request body. */
#define RATEL__KEY_NEEDS_FORM 1
#define RATEL__KEY_NEEDS_JSON 2
int ratel__key_needs(const ratel__key_t *key);

/*
 * The value part `part` reads from the view into *value / *n (pointing
 * into the request, or into buf, len bytes, for decoded and transformed
 * values). Returns 0 when present, 1 when missing (absent or empty), -1
 * when refused, with a short reason in *why (static text, e.g. "given
 * twice"). Spaces around a value are dropped.
 */
int ratel__key_part_value(const ratel__key_part_t *part,
                          const ratel__key_view_t *v, char *buf, size_t len,
                          const char **value, size_t *n, const char **why);

/*
 * Applies part's transform (|phone...) to the present value *value / *n:
 * the result into buf (len bytes) and *value / *n pointing at it. 0, or
 * -1 with a reason in *why (not a valid number, a premium-rate one).
 * Without a transform, 0 and the value as it is. For values a
 * configuration names (exemptions), which must read as requests do.
 */
int ratel__key_transform(const ratel__key_part_t *part, char *buf, size_t len,
                         const char **value, size_t *n, const char **why);

/*
 * The store key for `policy` (a NUL-terminated name) and the request seen
 * through `v`: "POLICY:" then each part's value, parts joined by '|', and
 * '|' and '\\' inside a value escaped with '\\' so that different parts
 * never give the same key. Returns the key's length (NUL-terminated in
 * buf); 0 when a part is missing and on_missing is reject or allow; -1
 * when a part is refused, the value (all after "POLICY:") would be longer
 * than RATEL__KEY_MAX or the key than len - 1 (reason in *why). With on_missing
 * shared, a missing part reads "-".
 */
long ratel__key_build(const ratel__key_t *key, const char *policy,
                      const ratel__key_view_t *v, char *buf, size_t len,
                      const char **why);

/*
 * Escapes `value` (n bytes) into a key as ratel__key_build does after
 * "POLICY:": into buf (len bytes, NUL-terminated); its length, or -1 when
 * it does not fit. For hosts that build a key from a value of their own
 * (nginx's $variables).
 */
long ratel__key_escape(const char *value, size_t n, char *buf, size_t len);

/*
 * The bucket of a client address: an IPv6 client's /64 ("2001:db8::/64"),
 * since one host holds a whole /64; IPv4 and anything else as it is.
 * Into buf (NUL-terminated); the length.
 */
size_t ratel__address_bucket(const char *addr, char *buf, size_t len);

#endif /* RATEL_APP_KEYS_H */
