/*
 * options.c - the `limits:` table rateld and captchad share, and the
 * checks of their string options.
 */
#include "app/options.h"

#include "app/address.h"

#include <stdio.h>
#include <string.h>

#define LIMIT(f) RATEL__FIELD(ratel_http_limits_t, f)

/* The ranges bound what one connection or request may cost (http.h has
   the defaults and what each limit does). */
const ratel__option_t ratel__limits_options[] = {
    {"max_header_bytes", RATEL__OPTION_SIZE, 1024, 1048576, 1,
     LIMIT(max_header_bytes), NULL, NULL, NULL},
    {"max_body_bytes", RATEL__OPTION_SIZE, 1, 16777216, 1,
     LIMIT(max_body_bytes), NULL, NULL, NULL},
    {"max_connections", RATEL__OPTION_UINT, 1, 1000000, 1,
     LIMIT(max_connections), NULL, NULL, NULL},
    {"max_pipeline", RATEL__OPTION_UINT, 1, 1024, 1, LIMIT(max_pipeline), NULL,
     NULL, NULL},
    {"request_timeout_ms", RATEL__OPTION_MSEC, 1, 3600000, 1,
     LIMIT(request_timeout_ms), NULL, NULL, NULL},
    {"idle_timeout_ms", RATEL__OPTION_MSEC, 1, 86400000, 1,
     LIMIT(idle_timeout_ms), NULL, NULL, NULL},
    {"max_output_bytes", RATEL__OPTION_SIZE, 65536, 1073741824, 1,
     LIMIT(max_output_bytes), NULL, NULL, NULL},
};

const size_t ratel__limits_noptions = RATEL__COUNT(ratel__limits_options);

int ratel__check_listen(const char *text, char *why, size_t whylen)
{
    char q[96];

    if (ratel__listen_valid(text))
        return 0;
    ratel__yaml_quote(text, strlen(text), q, sizeof q);
    snprintf(why, whylen,
             "\"%s\" is not HOST:PORT, [IPV6]:PORT or :PORT (e.g. "
             "127.0.0.1:8080, [::1]:8080, :8080); port 0..65535",
             q);
    return -1;
}

int ratel__check_token(const char *text, char *why, size_t whylen)
{
    if (!strchr(text, ' '))
        return 0;
    snprintf(why, whylen,
             "contains a space; a token is sent in a header "
             "and must be one word");
    return -1;
}

int ratel__check_nonempty(const char *text, char *why, size_t whylen)
{
    if (text[0])
        return 0;
    snprintf(why, whylen, "is empty");
    return -1;
}
