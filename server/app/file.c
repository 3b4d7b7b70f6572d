/*
 * file.c - private files (file.h).
 */
#include "app/file.h"

#include "app/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PRIVATE_MODE 0600

/* "WHAT PATH: reason" for the errno of a failed open. */
static int open_failed(const char *path, const char *what, int e, char *err,
                       size_t errlen)
{
    if (e == ELOOP)
        snprintf(err, errlen,
                 "%s %.300s: is a symbolic link, which is not followed "
                 "for a file holding private data (a link could point "
                 "the program at another file); give the real path",
                 what, path);
    else
        snprintf(err, errlen, "%s %.300s: %s", what, path, strerror(e));
    return -1;
}

int ratel__file_open_private(const char *path, int flags, const char *what,
                             char *err, size_t errlen)
{
    int base = flags | O_NOFOLLOW | O_CLOEXEC, fd;

    /* O_EXCL says whether this call created the file: only then is its
       mode ours to set. */
    fd = open(path, base | O_CREAT | O_EXCL, PRIVATE_MODE);
    if (fd >= 0) {
        if (fchmod(fd, PRIVATE_MODE) != 0) {
            int e = errno;
            close(fd);
            return open_failed(path, what, e, err, errlen);
        }
        return fd;
    }
    if (errno != EEXIST)
        return open_failed(path, what, errno, err, errlen);
    fd = open(path, base);
    if (fd < 0)
        return open_failed(path, what, errno, err, errlen);
    return fd;
}

void ratel__file_warn_readable(int fd, const char *path, const char *what)
{
    struct stat st;

    if (fstat(fd, &st) == 0 && (st.st_mode & S_IROTH))
        ratel__log("warn", "a file holding private data is readable by others",
                   "file=\"%s\" path=%s mode=%04o fix=\"chmod 600 %s\"", what,
                   path, (unsigned)(st.st_mode & 07777), path);
}
