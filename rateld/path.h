/*
 * path.h - the normal form of a request's path: the path a backend
 * behind the gateway serves, which rateld matches routes against and the
 * `path` key source reads.
 *
 * A client can write one path in many ways (//sendCaptcha,
 * /%73endCaptcha, /api/../sendCaptcha, /sendCaptcha;jsessionid=1) and a
 * backend (nginx's location matching, Caddy, a servlet container) serves
 * them all as /sendCaptcha. If rateld matched the spelling, a client
 * could leave a route by spelling its path otherwise. So rateld matches
 * the normal form, and refuses a path it cannot normalise safely, whose
 * meaning differs from one backend to another.
 */
#ifndef RATELD_PATH_H
#define RATELD_PATH_H

#include <stddef.h>
#include <sys/types.h>

/* Longest normal form (with its NUL): longer paths are refused. */
#define RATELD_PATH_MAX 8192

/*
 * Writes the normal form of path in[0..n) (which starts with '/', the
 * query already split off) into out (cap bytes, NUL-terminated):
 *
 *   - a %XX escape of a letter, digit, "-._~", a sub-delimiter other than
 *     ';' ("!$&'()*+,="), ':' or '@' is decoded: a backend decodes it
 *     to that character, which has the same meaning written plainly;
 *   - every other escape stays one, with upper-case hex digits: decoded,
 *     '?' '#' ';' '%' would change where the path, a parameter or an
 *     escape ends (%252F stays %252F), and bytes above 0x7F are not
 *     decoded (no overlong UTF-8 turns into '.' or '/'); bytes a URI
 *     never holds plainly (above 0x7F, "<>[]^`{|}) are escaped likewise;
 *   - a ';' starts a path parameter, left out up to the segment's end
 *     (/sendCaptcha;jsessionid=1 is /sendCaptcha, as servlet containers
 *     map it; /api/..;/x is /x);
 *   - "." and ".." segments are removed (RFC 3986 5.2.4) after decoding
 *     (%2e%2e is ".."), and repeated slashes merged; a final '/' stays.
 *
 * Letter case is kept: nginx, Caddy and Spring match paths
 * case-sensitively.
 *
 * Refused: an encoded '/' (%2F), '\' (%5C) or NUL (%00), a '%' without
 * two hex digits, a plain '\', '#', '?', space or control byte, a ".."
 * above the root, a path that needs more than cap - 1 bytes on the way
 * (a segment a later ".." removes counts; 3 bytes per input byte always
 * suffice). Returns the
 * normal form's length, or -1 with *why set to a fixed noun phrase
 * naming what was refused ("an encoded '/' (%2F): ..."), never holding
 * the input.
 */
ssize_t rateld_path_normalize(const char *in, size_t n, char *out, size_t cap,
                              const char **why);

#endif /* RATELD_PATH_H */
