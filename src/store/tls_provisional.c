/*
 * tls_provisional.c - PROVISIONAL stand-ins for store/tls.c's
 * ratel__tls_new and ratel__tls_describe, so that the transports build and
 * are tested before tls.c lands. Delete at the merge (tls_provisional.h
 * says how).
 */
#include "store/tls_provisional.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <string.h>

static int is_ip(const char *name)
{
    unsigned char buf[16];

    return inet_pton(AF_INET, name, buf) == 1 ||
           inet_pton(AF_INET6, name, buf) == 1;
}

int ratel__tls_new(SSL_CTX *ctx, const char *server_name, int insecure,
                   SSL **out, char *err, size_t errlen)
{
    SSL *ssl = SSL_new(ctx);
    int ok = 1;

    *out = NULL;
    if (!ssl) {
        snprintf(err, errlen, "cannot create a TLS session: out of memory");
        return -1;
    }
    if (server_name && !is_ip(server_name))
        ok = SSL_set_tlsext_host_name(ssl, server_name) == 1;
    if (ok && !insecure && server_name) {
        X509_VERIFY_PARAM *param = SSL_get0_param(ssl);

        ok = is_ip(server_name)
                 ? X509_VERIFY_PARAM_set1_ip_asc(param, server_name) == 1
                 : SSL_set1_host(ssl, server_name) == 1;
    }
    if (!ok) {
        snprintf(err, errlen, "cannot use '%s' as the TLS server name",
                 server_name);
        SSL_free(ssl);
        return -1;
    }
    SSL_set_verify(ssl, insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    *out = ssl;
    return 0;
}

void ratel__tls_describe(SSL *ssl, int ssl_error_code, char *buf, size_t len)
{
    long v = SSL_get_verify_result(ssl);
    unsigned long e = ERR_peek_last_error();

    if (v != X509_V_OK) {
        snprintf(buf, len, "certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
    } else if ((ssl_error_code == SSL_ERROR_SYSCALL ||
                ssl_error_code == SSL_ERROR_ZERO_RETURN) &&
               SSL_is_init_finished(ssl) && !e) {
        snprintf(buf, len,
                 "the server closed the TLS connection after the handshake "
                 "(does it require a client certificate?)");
    } else if (e) {
        char reason[200];

        ERR_error_string_n(e, reason, sizeof reason);
        snprintf(buf, len, "TLS handshake failed: %s", reason);
    } else {
        snprintf(buf, len, "TLS handshake failed (SSL error %d)",
                 ssl_error_code);
    }
}
