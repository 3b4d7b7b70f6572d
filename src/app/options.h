/*
 * options.h - descriptor tables (store/option.h) of the sections rateld
 * and captchad share, and the checks their string options use: one name,
 * one type and one range per option in both programs.
 */
#ifndef RATEL_APP_OPTIONS_H
#define RATEL_APP_OPTIONS_H

#include "http/http.h"
#include "store/option.h"

#include <stddef.h>

/* `limits:`: every field of ratel_http_limits_t; 0 (or absent) means
   src/http/http.h's default. */
extern const ratel__option_t ratel__limits_options[];
extern const size_t ratel__limits_noptions;

/* Checks of string options (ratel__option_t.check): 0, or -1 with why. */

/* A listen address: HOST:PORT, [IPV6]:PORT or :PORT (address.c). */
int ratel__check_listen(const char *text, char *why, size_t whylen);
/* An admin token: one word (it is sent in a header). */
int ratel__check_token(const char *text, char *why, size_t whylen);
/* Anything but "". */
int ratel__check_nonempty(const char *text, char *why, size_t whylen);

/* An option table's entry count. */
#define RATEL__COUNT(a) (sizeof(a) / sizeof((a)[0]))
/* offsetof and sizeof a field of `type`, for a table entry. */
#define RATEL__FIELD(type, f) offsetof(type, f), sizeof(((type *)0)->f)

#endif /* RATEL_APP_OPTIONS_H */
