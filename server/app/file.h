/*
 * file.h - files a program creates for data that is nobody else's
 * business (phone numbers, live verification codes): created 0600
 * whatever the umask, and never through a symbolic link.
 */
#ifndef RATEL_APP_FILE_H
#define RATEL_APP_FILE_H

#include <stddef.h>

/*
 * Opens `path` for `flags` (O_RDONLY, O_WRONLY or O_RDWR, and O_APPEND),
 * creating it with mode 0600 when it does not exist (fchmod'ed after the
 * create, so the umask cannot widen or narrow it); a file that exists
 * keeps its mode (ratel__file_warn_readable says when others may read it). A
 * symbolic link is refused (O_NOFOLLOW: a link planted there could point the
 * program at another file). The descriptor is close-on-exec. `what` names the
 * file in messages ("the SMS log"). Returns the descriptor, or -1 with "WHAT
 * PATH: reason" in err.
 */
int ratel__file_open_private(const char *path, int flags, const char *what,
                             char *err, size_t errlen);

/*
 * Logs a warning when the file open at `fd` (`path`, named `what`) is
 * readable by every user: a file made before, or by someone else, keeps
 * its mode. For a program's start, not for every write.
 */
void ratel__file_warn_readable(int fd, const char *path, const char *what);

#endif /* RATEL_APP_FILE_H */
