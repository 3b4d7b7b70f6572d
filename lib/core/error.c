/*
 * error.c - text for the RATEL_E* codes, generated from RATEL_ERRNO_MAP.
 */
#include "ratel.h"

const char *ratel_strerror(int err)
{
    switch (err) {
    case RATEL_OK:
        return "success";
#define RATEL_ERRNO_TEXT_(name, value, message)                                \
    case RATEL_##name:                                                         \
        return message;
        RATEL_ERRNO_MAP(RATEL_ERRNO_TEXT_)
#undef RATEL_ERRNO_TEXT_
    }
    return "unknown error";
}

const char *ratel_err_name(int err)
{
    switch (err) {
    case RATEL_OK:
        return "OK";
#define RATEL_ERRNO_NAME_(name, value, message)                                \
    case RATEL_##name:                                                         \
        return #name;
        RATEL_ERRNO_MAP(RATEL_ERRNO_NAME_)
#undef RATEL_ERRNO_NAME_
    }
    return "UNKNOWN";
}

const char *ratel_source_name(int source)
{
    static const char *const names[] = {"store",  "cache", "open",
                                        "closed", "local", "lease"};
    if (source < 0 || source >= (int)(sizeof names / sizeof names[0]))
        return "unknown";
    return names[source];
}
