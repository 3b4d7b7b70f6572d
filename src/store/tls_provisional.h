/*
 * tls_provisional.h - PROVISIONAL: the two functions of store/tls.h that
 * the transports call, declared here until tls.c lands. At the merge,
 * delete tls_provisional.[ch] and include "store/tls.h" instead.
 */
#ifndef RATEL_STORE_TLS_PROVISIONAL_H
#define RATEL_STORE_TLS_PROVISIONAL_H

#include <openssl/ssl.h>
#include <stddef.h>

/*
 * A client SSL on ctx that sends server_name as SNI (unless it is an IP
 * address) and checks the certificate against it, or checks nothing when
 * insecure is 1. Returns 0 with *out set, or -1 with a message in err.
 */
int ratel__tls_new(SSL_CTX *ctx, const char *server_name, int insecure,
                   SSL **out, char *err, size_t errlen);

/*
 * A message naming what refused a failed handshake on ssl: the certificate
 * problem when verification failed, else OpenSSL's reason. ssl_error_code
 * is SSL_get_error()'s result for the failed call (SSL_ERROR_SSL when
 * only OpenSSL's error queue knows more).
 */
void ratel__tls_describe(SSL *ssl, int ssl_error_code, char *buf, size_t len);

#endif /* RATEL_STORE_TLS_PROVISIONAL_H */
