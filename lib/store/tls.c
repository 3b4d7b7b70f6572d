/*
 * tls.c - TLS contexts, connections and failure messages for the Redis
 * store (tls.h). OpenSSL 3 (Debian's libssl-dev); no I/O here.
 *
 * A handshake that fails says why in words a user can act on: the verify
 * result names the certificate problem (a CA we do not know, an expired
 * certificate, another name), and the error queue names what the server
 * answered (an alert asking for a client certificate, or bytes that are
 * not TLS at all because the port speaks plain RESP).
 */
#include "store/tls.h"

#include "ratel.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/*
 * Whether the server asked this connection for a client certificate, kept
 * on the SSL (ex_data). A TLS 1.3 server refuses a missing or unknown
 * client certificate only after the client has finished its handshake;
 * when the client's first command is already on its way, the server's
 * close turns into a reset that discards its alert, and only this mark
 * is left to say why.
 */
static int asked_index = -1;
static pthread_once_t asked_once = PTHREAD_ONCE_INIT;

static void asked_init(void)
{
    asked_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/* OpenSSL calls this on a client when the server requests a certificate;
   the certificate (if any) is the context's, so nothing to choose. */
static int note_certificate_request(SSL *ssl, void *arg)
{
    (void)arg;
    SSL_set_ex_data(ssl, asked_index, (void *)1);
    return 1;
}

/* ------------------------------------------------------------- context */

/* Writes "SETTING \"FILE\": REASON (OpenSSL's reason)" and clears the
   error queue; returns RATEL_EINVAL. */
static int file_error(char *err, size_t errlen, const char *setting,
                      const char *file, const char *reason)
{
    unsigned long e = ERR_peek_last_error();
    const char *why = e ? ERR_reason_error_string(e) : NULL;

    snprintf(err, errlen, "%s \"%s\": %s%s%s%s", setting, file, reason,
             why ? " (" : "", why ? why : "", why ? ")" : "");
    ERR_clear_error();
    return RATEL_EINVAL;
}

/* Whether `file` can be opened for reading; else the reason in err. */
static int readable(const char *setting, const char *file, char *err,
                    size_t errlen)
{
    FILE *f = fopen(file, "r");

    if (f) {
        fclose(f);
        return 1;
    }
    snprintf(err, errlen, "%s \"%s\": %s", setting, file, strerror(errno));
    return 0;
}

/* A key that needs a passphrase is an error, never a prompt on a terminal
   (the store runs in daemons). */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

/* The client certificate and its key into ctx, checked to match. */
static int load_client_cert(SSL_CTX *ctx, const ratel__tls_options_t *o,
                            char *err, size_t errlen)
{
    if (!readable("tls_cert_file", o->cert_file, err, errlen) ||
        !readable("tls_key_file", o->key_file, err, errlen))
        return RATEL_EINVAL;
    if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1)
        return file_error(err, errlen, "tls_cert_file", o->cert_file,
                          "not a PEM certificate");
    if (SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1) {
        unsigned long e = ERR_peek_last_error();
        if (ERR_GET_REASON(e) == X509_R_KEY_VALUES_MISMATCH) {
            ERR_clear_error();
            snprintf(err, errlen,
                     "tls_key_file \"%s\" is not the key of tls_cert_file "
                     "\"%s\"",
                     o->key_file, o->cert_file);
            return RATEL_EINVAL;
        }
        return file_error(err, errlen, "tls_key_file", o->key_file,
                          "not an unencrypted PEM private key");
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ERR_clear_error();
        snprintf(err, errlen,
                 "tls_key_file \"%s\" is not the key of tls_cert_file \"%s\"",
                 o->key_file, o->cert_file);
        return RATEL_EINVAL;
    }
    return 0;
}

/* What the context trusts: o->ca_file, else the system's CAs. */
static int load_trust(SSL_CTX *ctx, const ratel__tls_options_t *o, char *err,
                      size_t errlen)
{
    if (o->ca_file && o->ca_file[0]) {
        if (!readable("tls_ca_file", o->ca_file, err, errlen))
            return RATEL_EINVAL;
        if (SSL_CTX_load_verify_locations(ctx, o->ca_file, NULL) != 1)
            return file_error(err, errlen, "tls_ca_file", o->ca_file,
                              "holds no PEM CA certificate");
        return 0;
    }
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        ERR_clear_error();
        snprintf(err, errlen,
                 "the system's CA certificates cannot be loaded (install "
                 "ca-certificates, or set tls_ca_file)");
        return RATEL_EINVAL;
    }
    return 0;
}

int ratel__tls_ctx_new(const ratel__tls_options_t *o, SSL_CTX **out, char *err,
                       size_t errlen)
{
    int has_cert = o->cert_file && o->cert_file[0];
    int has_key = o->key_file && o->key_file[0];
    SSL_CTX *ctx;
    int rc;

    *out = NULL;
    if (has_cert != has_key) {
        snprintf(err, errlen,
                 "%s is given without %s: give tls_cert_file and "
                 "tls_key_file together, or neither",
                 has_cert ? "tls_cert_file" : "tls_key_file",
                 has_cert ? "tls_key_file" : "tls_cert_file");
        return RATEL_EINVAL;
    }
    ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        ERR_clear_error();
        snprintf(err, errlen, "TLS: out of memory");
        return RATEL_ENOMEM;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    SSL_CTX_set_verify(ctx, o->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                       NULL);
    rc = o->insecure ? 0 : load_trust(ctx, o, err, errlen);
    if (rc == 0 && has_cert)
        rc = load_client_cert(ctx, o, err, errlen);
    if (rc != 0) {
        SSL_CTX_free(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

/* ------------------------------------------------------- the settings */

/* The option's string when set, else the URL's when given, else NULL. */
static const char *pick(const char *option, const char *from_url)
{
    if (option && option[0])
        return option;
    return from_url[0] ? from_url : NULL;
}

int ratel__tls_options_pick(const ratel_redis_url_t *u,
                            const ratel_redis_options_t *o,
                            ratel__tls_options_t *out, char *err, size_t errlen)
{
    static const char *const names[] = {"tls_ca_file", "tls_cert_file",
                                        "tls_key_file", "tls_server_name",
                                        "tls_insecure"};
    const int given[] = {o->tls_ca_file && o->tls_ca_file[0],
                         o->tls_cert_file && o->tls_cert_file[0],
                         o->tls_key_file && o->tls_key_file[0],
                         o->tls_server_name && o->tls_server_name[0],
                         o->tls_insecure != 0};

    memset(out, 0, sizeof *out);
    for (size_t i = 0; !u->tls && i < sizeof names / sizeof names[0]; i++) {
        if (given[i]) {
            snprintf(err, errlen,
                     "redis store: %s is a TLS setting and the URL is plain "
                     "TCP: use rediss:// (rediss+cluster://, "
                     "rediss+sentinel://) for TLS",
                     names[i]);
            return RATEL_EINVAL;
        }
    }
    if (!u->sentinel && ((o->sentinel_username && o->sentinel_username[0]) ||
                         (o->sentinel_password && o->sentinel_password[0]))) {
        snprintf(err, errlen,
                 "redis store: sentinel_username and sentinel_password are "
                 "for redis+sentinel:// and rediss+sentinel:// URLs only");
        return RATEL_EINVAL;
    }
    if (!u->tls)
        return 0;
    out->ca_file = pick(o->tls_ca_file, u->tls_ca_file);
    out->cert_file = pick(o->tls_cert_file, u->tls_cert_file);
    out->key_file = pick(o->tls_key_file, u->tls_key_file);
    out->server_name = pick(o->tls_server_name, u->tls_server_name);
    out->insecure = o->tls_insecure != 0 || u->tls_insecure != 0;
    if (!out->cert_file != !out->key_file) {
        snprintf(err, errlen,
                 "redis store: %s is given without %s: give tls_cert_file "
                 "and tls_key_file together, or neither",
                 out->cert_file ? "tls_cert_file" : "tls_key_file",
                 out->cert_file ? "tls_key_file" : "tls_cert_file");
        memset(out, 0, sizeof *out);
        return RATEL_EINVAL;
    }
    return 0;
}

/* ---------------------------------------------------------- connection */

/* Whether name is an IPv4 or IPv6 address literal. */
static int is_ip_literal(const char *name)
{
    unsigned char addr[16];

    return inet_pton(AF_INET, name, addr) == 1 ||
           inet_pton(AF_INET6, name, addr) == 1;
}

int ratel__tls_setup(SSL *ssl, const char *server_name, int insecure, char *err,
                     size_t errlen)
{
    int ip = server_name && is_ip_literal(server_name);
    X509_VERIFY_PARAM *param;
    int ok = 1;

    if (!insecure && (!server_name || !server_name[0])) {
        snprintf(err, errlen,
                 "TLS: no server name to check the certificate against");
        return RATEL_EINVAL;
    }
    /* RFC 6066: SNI carries host names, never address literals. */
    if (server_name && server_name[0] && !ip)
        ok = SSL_set_tlsext_host_name(ssl, server_name) == 1;
    if (ok && !insecure) {
        param = SSL_get0_param(ssl);
        X509_VERIFY_PARAM_set_hostflags(param,
                                        X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(param, server_name) == 1
                : X509_VERIFY_PARAM_set1_host(param, server_name, 0) == 1;
    }
    if (!ok) {
        ERR_clear_error();
        snprintf(err, errlen, "TLS: the server name \"%s\" is not accepted",
                 server_name);
        return RATEL_EINVAL;
    }
    pthread_once(&asked_once, asked_init);
    if (asked_index >= 0)
        SSL_set_cert_cb(ssl, note_certificate_request, NULL);
    SSL_set_connect_state(ssl);
    return 0;
}

int ratel__tls_new(SSL_CTX *ctx, const char *server_name, int insecure,
                   SSL **out, char *err, size_t errlen)
{
    SSL *ssl;
    int rc;

    *out = NULL;
    ssl = SSL_new(ctx);
    if (!ssl) {
        ERR_clear_error();
        snprintf(err, errlen, "TLS: out of memory");
        return RATEL_ENOMEM;
    }
    rc = ratel__tls_setup(ssl, server_name, insecure, err, errlen);
    if (rc != 0) {
        SSL_free(ssl);
        return rc;
    }
    *out = ssl;
    return 0;
}

/* ------------------------------------------------------------ messages */

/* The server's own certificate, verified or not (NULL if none came). The
   chain is kept even when verification failed; the peer is set only when
   it passed. */
static X509 *server_certificate(SSL *ssl)
{
    STACK_OF(X509) *chain = SSL_get_peer_cert_chain(ssl);

    if (chain && sk_X509_num(chain) > 0)
        return sk_X509_value(chain, 0);
    return NULL;
}

/* An ASN1 time as text ("Nov 25 08:11:52 2026 GMT"), or "?". */
static void time_text(const ASN1_TIME *t, char *out, size_t cap)
{
    BIO *b = BIO_new(BIO_s_mem());
    int n = 0;

    if (b && t && ASN1_TIME_print(b, t))
        n = BIO_read(b, out, (int)cap - 1);
    out[n > 0 ? n : 0] = '\0';
    if (n <= 0)
        snprintf(out, cap, "?");
    BIO_free(b);
}

/* The names a certificate is for: its DNS and IP subject alternative
   names ("localhost, 127.0.0.1"), else its common name. */
static void certificate_names(X509 *cert, char *out, size_t cap)
{
    GENERAL_NAMES *names =
        cert ? X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL) : NULL;
    size_t q = 0;

    out[0] = '\0';
    for (int i = 0; names && i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(names, i);
        char ip[INET6_ADDRSTRLEN] = "";
        const char *text = NULL;
        if (g->type == GEN_DNS) {
            text = (const char *)ASN1_STRING_get0_data(g->d.dNSName);
        } else if (g->type == GEN_IPADD) {
            int len = ASN1_STRING_length(g->d.iPAddress);
            const unsigned char *a = ASN1_STRING_get0_data(g->d.iPAddress);
            if (inet_ntop(len == 16 ? AF_INET6 : AF_INET, a, ip, sizeof ip))
                text = ip;
        }
        if (text && q + 3 < cap)
            q +=
                (size_t)snprintf(out + q, cap - q, "%s%s", q ? ", " : "", text);
    }
    GENERAL_NAMES_free(names);
    if (q == 0 && cert &&
        X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName,
                                  out, (int)cap) < 0)
        snprintf(out, cap, "(no name)");
    if (!cert)
        snprintf(out, cap, "(no certificate)");
}

/* The name this connection checks: the host set on it, or its IP. */
static void checked_name(SSL *ssl, char *out, size_t cap)
{
    X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
    const char *host = X509_VERIFY_PARAM_get0_host(param, 0);
    char *ip;

    if (host) {
        snprintf(out, cap, "%s", host);
        return;
    }
    ip = X509_VERIFY_PARAM_get1_ip_asc(param);
    snprintf(out, cap, "%s", ip ? ip : "?");
    OPENSSL_free(ip);
}

/* The certificate has expired: the server's own, or a CA's above it. */
static void expired_text(SSL *ssl, X509 *cert, long result, char *buf,
                         size_t len)
{
    char when[64];

    (void)ssl;
    (void)result;
    if (!cert || X509_cmp_current_time(X509_get0_notAfter(cert)) >= 0) {
        snprintf(buf, len,
                 "a CA certificate in the server's chain has "
                 "expired");
        return;
    }
    time_text(X509_get0_notAfter(cert), when, sizeof when);
    snprintf(buf, len, "the server's certificate has expired (notAfter %s)",
             when);
}

/* Not valid yet: most often this machine's clock. */
static void not_yet_valid_text(SSL *ssl, X509 *cert, long result, char *buf,
                               size_t len)
{
    char when[64];

    (void)ssl;
    (void)result;
    time_text(cert ? X509_get0_notBefore(cert) : NULL, when, sizeof when);
    snprintf(buf, len,
             "the server's certificate is not valid yet (notBefore %s; is "
             "this machine's clock right?)",
             when);
}

/* Another name: the names it carries and the one checked. */
static void name_mismatch_text(SSL *ssl, X509 *cert, long result, char *buf,
                               size_t len)
{
    char names[400], name[300];

    (void)result;
    certificate_names(cert, names, sizeof names);
    checked_name(ssl, name, sizeof name);
    snprintf(buf, len,
             "the server's certificate is for %s, not %s (set "
             "tls_server_name?)",
             names, name);
}

/* A chain that ends at no CA we trust: most often the wrong tls_ca_file. */
static void untrusted_text(SSL *ssl, X509 *cert, long result, char *buf,
                           size_t len)
{
    (void)ssl;
    (void)cert;
    snprintf(buf, len,
             "certificate verify failed: %s (is tls_ca_file the CA that "
             "signed the server's certificate?)",
             X509_verify_cert_error_string(result));
}

/* A failed verification of the server's certificate, in words: the
   verify results that have more to say than OpenSSL's own text. */
static void describe_verify(SSL *ssl, long result, char *buf, size_t len)
{
    static const struct {
        long result;
        void (*text)(SSL *ssl, X509 *cert, long result, char *buf, size_t len);
    } texts[] = {
        {X509_V_ERR_CERT_HAS_EXPIRED, expired_text},
        {X509_V_ERR_CERT_NOT_YET_VALID, not_yet_valid_text},
        {X509_V_ERR_HOSTNAME_MISMATCH, name_mismatch_text},
        {X509_V_ERR_IP_ADDRESS_MISMATCH, name_mismatch_text},
        {X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, untrusted_text},
        {X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT, untrusted_text},
        {X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT, untrusted_text},
        {X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN, untrusted_text},
        {X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE, untrusted_text},
        {X509_V_ERR_CERT_UNTRUSTED, untrusted_text},
        {X509_V_ERR_CERT_SIGNATURE_FAILURE, untrusted_text},
    };

    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        if (texts[i].result == result) {
            texts[i].text(ssl, server_certificate(ssl), result, buf, len);
            return;
        }
    }
    snprintf(buf, len, "certificate verify failed: %s",
             X509_verify_cert_error_string(result));
}

/* What an OpenSSL reason from the error queue means here; NULL when it
   has no more to say than OpenSSL's own text. */
static const char *reason_text(int reason)
{
    static const struct {
        int reason;
        const char *text;
    } reasons[] = {
        {SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED,
         "the server asked for a client certificate (set tls_cert_file and "
         "tls_key_file)"},
        {SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE,
         "the server refused the handshake (a handshake_failure alert: does "
         "it need a client certificate, tls_cert_file and tls_key_file?)"},
        {SSL_R_TLSV1_ALERT_UNKNOWN_CA,
         "the server does not trust our client certificate (an unknown_ca "
         "alert: tls_cert_file must be signed by a CA in the server's "
         "tls-ca-cert-file)"},
        {SSL_R_SSLV3_ALERT_BAD_CERTIFICATE,
         "the server refused our client certificate (a bad_certificate "
         "alert)"},
        {SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED,
         "the server refused our client certificate: it has expired"},
        {SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE,
         "the server refused our client certificate (an "
         "unsupported_certificate alert: is it made for client "
         "authentication?)"},
        {SSL_R_WRONG_VERSION_NUMBER,
         "not TLS (is this a plain redis:// port?)"},
        {SSL_R_PACKET_LENGTH_TOO_LONG,
         "not TLS (is this a plain redis:// port?)"},
        {SSL_R_UNKNOWN_PROTOCOL, "not TLS (is this a plain redis:// port?)"},
        {SSL_R_TLSV1_ALERT_PROTOCOL_VERSION,
         "the server speaks no TLS version we accept (TLS 1.2 or later)"},
        {SSL_R_UNSUPPORTED_PROTOCOL,
         "the server speaks no TLS version we accept (TLS 1.2 or later)"},
    };

    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].reason == reason)
            return reasons[i].text;
    return NULL;
}

/* A connection the server cut right after a handshake in which it asked
   for a client certificate: what it most likely refused; NULL otherwise. */
static const char *refused_client_certificate(SSL *ssl)
{
    if (asked_index < 0 || !SSL_get_ex_data(ssl, asked_index) ||
        !SSL_is_init_finished(ssl))
        return NULL;
    if (!SSL_get_certificate(ssl))
        return "the server asked for a client certificate (set "
               "tls_cert_file and tls_key_file)";
    return "the server closed the connection after the handshake: it "
           "refused our client certificate (is tls_cert_file signed by a CA "
           "in the server's tls-ca-cert-file?)";
}

/* A failure without a verify result: from the error queue, else from the
   SSL error code and errno. */
static void describe_queue(SSL *ssl, int code, char *buf, size_t len)
{
    int in_handshake = !SSL_is_init_finished(ssl), saved = errno;
    unsigned long e, first = 0;
    const char *text = NULL;

    while ((e = ERR_get_error()) != 0) {
        if (!first)
            first = e;
        if (!text && ERR_GET_LIB(e) == ERR_LIB_SSL)
            text = reason_text(ERR_GET_REASON(e));
    }
    if (text) {
        snprintf(buf, len, "%s", text);
    } else if ((code == SSL_ERROR_SYSCALL || code == SSL_ERROR_SSL ||
                code == SSL_ERROR_ZERO_RETURN) &&
               (text = refused_client_certificate(ssl)) != NULL) {
        snprintf(buf, len, "%s", text);
    } else if (first &&
               ERR_GET_REASON(first) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
        snprintf(buf, len,
                 in_handshake ? "the server closed the connection during the "
                                "TLS handshake (is this a plain redis:// "
                                "port, or does it need a client "
                                "certificate?)"
                              : "the server closed the connection without a "
                                "TLS close_notify");
    } else if (first) {
        const char *r = ERR_reason_error_string(first);
        snprintf(buf, len, "TLS %s failed: %s",
                 in_handshake ? "handshake" : "connection", r ? r : "?");
    } else if (code == SSL_ERROR_WANT_READ || code == SSL_ERROR_WANT_WRITE) {
        snprintf(buf, len,
                 in_handshake ? "no TLS answer from the server in time (is "
                                "this a plain redis:// port?)"
                              : "the TLS connection timed out");
    } else if (code == SSL_ERROR_ZERO_RETURN) {
        snprintf(buf, len, "the server closed the TLS connection");
    } else if (code == SSL_ERROR_SYSCALL && saved) {
        snprintf(buf, len, "TLS %s failed: %s",
                 in_handshake ? "handshake" : "connection", strerror(saved));
    } else {
        snprintf(buf, len, "the server closed the connection%s",
                 in_handshake ? " during the TLS handshake (is this a plain "
                                "redis:// port?)"
                              : "");
    }
}

void ratel__tls_describe(SSL *ssl, int ssl_error_code, char *buf, size_t len)
{
    long result = SSL_get_verify_result(ssl);

    if (len == 0)
        return;
    /* The verify result is set only by a verification that ran: X509_V_OK
       otherwise (and when it passed), so a failure after it is the
       queue's. */
    if (result != X509_V_OK && SSL_get_verify_mode(ssl) != SSL_VERIFY_NONE) {
        ERR_clear_error();
        describe_verify(ssl, result, buf, len);
        return;
    }
    describe_queue(ssl, ssl_error_code, buf, len);
}
