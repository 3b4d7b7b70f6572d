/*
 * tls.h - TLS for the Redis store's connections (rediss://): OpenSSL
 * contexts set up the way Redis's own clients expect, and messages that
 * say which certificate problem stopped a handshake.
 *
 * This file does no I/O: a transport (blocking, libevent, nginx) owns the
 * socket, drives SSL_connect / SSL_read / SSL_write on the SSL this file
 * makes, and calls ratel__tls_describe() when one of them fails.
 *
 *   SSL_CTX *ctx;                      once per store
 *   ratel__tls_ctx_new(&options, &ctx, err, sizeof err);
 *   SSL *ssl;                          once per connection
 *   ratel__tls_new(ctx, server_name_or_host, insecure, &ssl, err, ...);
 *   SSL_set_fd(ssl, fd) (or a BIO pair); SSL_connect(ssl) ...
 *   on failure: ratel__tls_describe(ssl, SSL_get_error(ssl, rc), msg, ...);
 *   SSL_free(ssl); ... SSL_CTX_free(ctx);
 *
 * Defaults are the safe ones: TLS 1.2 or later, the server's certificate
 * verified against the system's CAs (or tls_ca_file) and its name checked
 * against the host (or tls_server_name). Only tls_insecure turns that off.
 */
#ifndef RATEL_STORE_TLS_H
#define RATEL_STORE_TLS_H

#include "ratel.h"
/* Beside this file: programs reach it through lib/internal/. */
#include "redis_url.h"

#include <openssl/ssl.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a store's URL or options say about TLS (redis_url.h names them). */
typedef struct ratel__tls_options_s {
    const char *ca_file;   /* tls_ca_file: PEM CAs; NULL or "": the system's */
    const char *cert_file; /* tls_cert_file: PEM client certificate (chain);
                              NULL or "": none */
    const char *key_file;  /* tls_key_file: its unencrypted PEM key; needed
                              with cert_file and only with it */
    int insecure;          /* tls_insecure: 1 verifies nothing */
    const char *server_name; /* tls_server_name, or NULL: each address's
                                host (ratel__tls_new's server_name) */
} ratel__tls_options_t;

/* What a program says once at start when o->insecure is set (libratel
   does not log: rateld, captchad and the CLI, ratel__redis_tls_insecure). */
#define RATEL__TLS_INSECURE_WARNING                                            \
    "TLS certificate verification is off (tls_insecure=yes): the traffic "     \
    "is encrypted, but anyone on the path can pose as the server; set "        \
    "tls_ca_file instead"

/*
 * A store's TLS settings into *out: each of `o` (ratel_redis_options_t,
 * NULL or 0 when not set) over the URL's query value. Returns 0 (for a URL
 * without TLS, *out is all NULL and 0), or RATEL_EINVAL with a message in
 * err: a TLS setting in `o` for a URL that is not rediss ("use
 * rediss://"), a client certificate without its key or the reverse, or
 * Sentinel credentials in `o` for a URL that is not a Sentinel one. The
 * strings point into u and o.
 */
int ratel__tls_options_pick(const ratel_redis_url_t *u,
                            const ratel_redis_options_t *o,
                            ratel__tls_options_t *out, char *err,
                            size_t errlen);

/*
 * Makes a client SSL_CTX for *o into *out: TLS 1.2 at least; with
 * verification (unless o->insecure) against o->ca_file, or the system's CAs
 * (SSL_CTX_set_default_verify_paths) when there is none; the client
 * certificate and key loaded and checked to match. A key that needs a
 * passphrase is refused (nothing prompts on a terminal). Returns 0, or
 * RATEL_EINVAL (a file missing, unreadable, not PEM, a key that does not
 * match its certificate: the message names the setting and the file) or
 * RATEL_ENOMEM, with a message in err (errlen bytes). The caller frees
 * *out with SSL_CTX_free(); one context serves every connection of a
 * store, from any thread.
 */
int ratel__tls_ctx_new(const ratel__tls_options_t *o, SSL_CTX **out, char *err,
                       size_t errlen);

/*
 * Makes the SSL of one client connection into *out. `server_name` is
 * tls_server_name, or the host of the address connected to: sent as SNI
 * unless it is an IP address literal (RFC 6066 forbids those), and, unless
 * `insecure`, the name the server's certificate must carry (a DNS name
 * against its DNS names, wildcards of one whole label allowed; an IPv4 or
 * IPv6 literal against its IP addresses). Returns 0, RATEL_EINVAL (an
 * empty or NULL server_name when names are checked) or RATEL_ENOMEM with
 * a message in err. The caller attaches the socket or BIOs, puts it in
 * connect state (SSL_connect does) and frees it with SSL_free().
 */
int ratel__tls_new(SSL_CTX *ctx, const char *server_name, int insecure,
                   SSL **out, char *err, size_t errlen);

/*
 * ratel__tls_new() on an SSL a host made itself from the store's context
 * (the nginx module's, by ngx_ssl_create_connection): the same SNI, name
 * check and client certificate's note, and connect state. 0, or
 * RATEL_EINVAL with a message in err.
 */
int ratel__tls_setup(SSL *ssl, const char *server_name, int insecure, char *err,
                     size_t errlen);

/*
 * After SSL_connect, SSL_read, SSL_write or SSL_do_handshake failed on
 * `ssl` with `ssl_error_code` (what SSL_get_error() returned for it),
 * writes into buf (len bytes, cut as snprintf does) what went wrong, for a
 * person to act on, e.g.
 *
 *   certificate verify failed: unable to get local issuer certificate (is
 *     tls_ca_file the CA that signed the server's certificate?)
 *   the server's certificate has expired (notAfter Nov 25 08:11:52 2026
 *     GMT)
 *   the server's certificate is for localhost, 127.0.0.1, not
 *     redis.example.com (set tls_server_name?)
 *   the server asked for a client certificate (set tls_cert_file and
 *     tls_key_file)
 *   not TLS (is this a plain redis:// port?)
 *
 * It reads the verification result (SSL_get_verify_result) and OpenSSL's
 * error queue of this thread, which it then clears. Call it in the thread
 * that saw the failure, before any other OpenSSL call there.
 */
void ratel__tls_describe(SSL *ssl, int ssl_error_code, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_STORE_TLS_H */
