#!/bin/sh
# tls_certs.sh DIR - makes the certificates the TLS tests use, with
# openssl, in DIR (created if missing). Fast (P-256 keys: a few
# milliseconds each) and fixed names, so a test refers to them directly:
#
#   ca.crt ca.key                 the test CA: it signs every certificate
#                                 below but other-client
#   other-ca.crt other-ca.key     a second CA that signs none of the
#                                 servers' certificates (a "wrong CA")
#   server.crt server.key         a server certificate for 127.0.0.1,
#                                 ::1 and localhost (serverAuth and
#                                 clientAuth: redis-server presents it on
#                                 the replication and cluster links too)
#   expired.crt expired.key       the same names, expired yesterday
#   wrong-name.crt wrong-name.key a server certificate for
#                                 redis.example.com only
#   client.crt client.key         a client certificate (CN ratel-client)
#   other-client.crt other-client.key
#                                 a client certificate signed by other-ca,
#                                 which a server trusting ca.crt refuses
#
# Keys are unencrypted PEM, readable by the owner only. Certificates are
# valid for 10 days from now (expired.crt: until yesterday). Exits non-zero
# with openssl's message when openssl fails.
set -eu

dir=${1:?usage: tls_certs.sh DIR}
mkdir -p "$dir"
cd "$dir"
umask 077

key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 \
        -out "$1.key" 2>/dev/null
}

# A self-signed CA: ca NAME CN.
ca() {
    key "$1"
    openssl req -x509 -new -key "$1.key" -subj "/CN=$2" -days 10 \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -out "$1.crt" 2>/dev/null
}

# A leaf: leaf NAME ISSUER CN DAYS EKU [SAN].
leaf() {
    key "$1"
    ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=$5"
    if [ -n "${6:-}" ]; then
        ext="$ext
subjectAltName=$6"
    fi
    printf '%s\n' "$ext" >"$1.ext"
    openssl req -new -key "$1.key" -subj "/CN=$3" -out "$1.csr" 2>/dev/null
    openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" \
        -set_serial "0x$(openssl rand -hex 8)" -days "$4" \
        -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
}

ca ca "ratel test CA"
ca other-ca "ratel other CA"
names="DNS:localhost,IP:127.0.0.1,IP:::1"
leaf server ca localhost 10 serverAuth,clientAuth "$names"
leaf expired ca localhost -1 serverAuth,clientAuth "$names"
leaf wrong-name ca redis.example.com 10 serverAuth,clientAuth \
    "DNS:redis.example.com"
leaf client ca ratel-client 10 clientAuth
leaf other-client other-ca ratel-client 10 clientAuth
chmod 644 ./*.crt
