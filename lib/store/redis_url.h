/*
 * redis_url.h - the Redis store's URL: where Redis is and how to talk to it.
 *
 *   redis://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/DB][?QUERY]
 *   redis+cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][?QUERY]
 *   redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]
 *                    /MASTER_NAME[?QUERY]
 *   rediss://, rediss+cluster://, rediss+sentinel://: the same over TLS
 *
 * HOST is a name, an IPv4 address or an IPv6 address in brackets
 * ([::1]:6379); PORT defaults to 6379. Several addresses for redis:// are
 * one primary and its possible successors (the store follows a failover);
 * for redis+cluster:// they are seed nodes; for redis+sentinel:// they are
 * the Sentinels (PORT defaults to 26379), which name the primary of
 * MASTER_NAME (required: printable ASCII without spaces, at most 255
 * bytes). USER and PASSWORD are percent-decoded; with Sentinel they are
 * the data nodes' (the Sentinels' own are sentinel_username and
 * sentinel_password). DB is 0..15: the path of redis://, the query's db
 * with Sentinel (whose path is the master name), not allowed with
 * cluster, which has only db 0. QUERY is NAME=VALUE pairs joined by '&'.
 * These are read by the store's option table (option.h: a configuration's
 * store: section has the same names, grammar and ranges):
 *
 *   connect_timeout_ms  1..60000
 *   timeout_ms          1..60000
 *   pool                1..256 connections per node
 *   on_failure          open | closed | local
 *   mode                auto | module | function | lua
 *   deny_cache          0..1048576 entries (0: no deny cache)
 *
 * and these by the URL's own table (they belong with the address; in a
 * configuration they are written in store.url's query):
 *
 *   db                  0..15, redis+sentinel:// and rediss+sentinel://
 *   tls_ca_file         PEM file of the CAs that verify the server
 *                       (default: the system's CAs)
 *   tls_cert_file       PEM client certificate, with tls_key_file
 *   tls_key_file        its PEM private key (both or neither)
 *   tls_server_name     the name sent as SNI and checked in the server's
 *                       certificate (default: each address's host)
 *   tls_insecure        yes | no: yes does not verify the server's
 *                       certificate at all (a warning is logged at start)
 *   sentinel_username   the Sentinels' ACL user
 *   sentinel_password   the Sentinels' password (requirepass or ACL)
 *
 * The tls_ options need a rediss scheme, the sentinel_ ones and db a
 * sentinel scheme. String values are percent-decoded (%26 for '&').
 * Every error names the URL part that is wrong and says what is accepted;
 * no password is ever copied into a message.
 */
#ifndef RATEL_REDIS_URL_H
#define RATEL_REDIS_URL_H

#include "ratel.h"

#include <stddef.h>

#define RATEL_REDIS_MAX_ADDRS 16
#define RATEL_REDIS_HOST_MAX 255

typedef struct ratel_redis_addr_s {
    char host[RATEL_REDIS_HOST_MAX + 1]; /* no brackets for IPv6 */
    int port;                            /* 1..65535 */
} ratel_redis_addr_t;

#define RATEL_REDIS_PATH_MAX 1024 /* a tls_ file name, NUL included */
#define RATEL_REDIS_NAME_MAX 256  /* a master or server name, NUL included */

typedef struct ratel_redis_url_s {
    int cluster;  /* redis+cluster:// or rediss+cluster:// */
    int tls;      /* rediss://, rediss+cluster:// or rediss+sentinel:// */
    int sentinel; /* redis+sentinel:// or rediss+sentinel:// */
    char master_name[RATEL_REDIS_NAME_MAX]; /* Sentinel: the path */
    size_t naddrs;
    ratel_redis_addr_t addrs[RATEL_REDIS_MAX_ADDRS];
    char username[256]; /* "" when not given */
    char password[512]; /* "" when not given */
    int has_password;   /* a password was given (it may be empty) */
    int db;             /* 0 when not given */
    /* Query values; 0 (or -1 for deny_cache) when not given. */
    int connect_timeout_ms;
    int timeout_ms;
    unsigned pool;
    ratel_failure_t on_failure; /* RATEL_FAILURE_DEFAULT when not given */
    ratel_redis_mode_t mode;    /* RATEL_REDIS_AUTO when not given */
    long deny_cache;            /* -1 when not given */
    unsigned wait_replicas;
    /* The URL's own query values; "" or 0 when not given. */
    char tls_ca_file[RATEL_REDIS_PATH_MAX];
    char tls_cert_file[RATEL_REDIS_PATH_MAX];
    char tls_key_file[RATEL_REDIS_PATH_MAX];
    char tls_server_name[RATEL_REDIS_NAME_MAX];
    int tls_insecure; /* tls_insecure=yes */
    char sentinel_username[256];
    char sentinel_password[512];
} ratel_redis_url_t;

/*
 * Parses the NUL-terminated `url` into *out. Returns 0, or RATEL_EINVAL with
 * a message in errbuf (when not NULL) that quotes the offending part
 * (never the password) and says what is accepted.
 */
int ratel__redis_url_parse(const char *url, ratel_redis_url_t *out,
                           char *errbuf, size_t errlen);

/*
 * The query fields of `u` (as a URL's query or a configuration's store:
 * section gave them; others not given) as store options in *o: a value
 * given replaces o's, deny_cache 0 becomes "no deny cache" (negative).
 * The TLS and Sentinel strings given (not "") are pointers into *u, which
 * must outlive *o.
 */
void ratel__redis_query_to_options(const ratel_redis_url_t *u,
                                   ratel_redis_options_t *o);

/*
 * The one masking of credentials for anything a program prints (a
 * --check-config summary, a log line, an error): writes `url` (any
 * scheme: redis://, http://, ...) into out (outlen bytes, cut as snprintf
 * does) with the userinfo before the last '@' replaced by "***" (user
 * name included), and so the value of every query parameter whose name
 * holds key, token, secret, pass, pwd, auth, sig or cred in any case
 * (?api_key=***). Quotes, backslashes and bytes that are not printable
 * ASCII are escaped (\" \\ \xNN); past 1,024 bytes, "..." ends it.
 * Returns 1 when something was masked (the URL holds a secret), else 0.
 */
int ratel__url_mask(const char *url, char *out, size_t outlen);

/* The query fields of a ratel_redis_url_t with nothing given. */
void ratel__redis_query_init(ratel_redis_url_t *u);

#endif /* RATEL_REDIS_URL_H */
