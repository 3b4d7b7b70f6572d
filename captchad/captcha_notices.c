/*
 * captcha_notices.c - the record of every message captchad sends, in
 * SQLite (Debian's libsqlite3-dev): one file, no server to run, durable
 * across restarts, and a real SQL table operators can query with the
 * sqlite3 shell. One connection behind a mutex serves the HTTP workers
 * (insert, list) and the sender (update); WAL lets a reader in another
 * process (an operator's shell) look while captchad writes.
 *
 *   notices(id, target, content, state, created_ms, sent_ms, attempts,
 *           provider_result, ip)
 *
 * content is the message with the code masked: the code itself is never
 * written to disk. ip is the client address that asked for the message,
 * kept so that a notice a crash stranded in INIT can have the address's
 * send permit refunded at the next start (captcha_sender_recover); a
 * database from before that column gets it added, NULL in old rows.
 *
 * States: INIT (written when the send is accepted, before it is queued)
 * becomes SUCCESS or FAILED when the sender has an answer, or FAILED at
 * once when the queue is full. INIT is the only state a crash strands.
 */
#include "captchad/captcha.h"

#include "app/file.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct captcha_notices_s {
    sqlite3 *db;
    pthread_mutex_t lock;
    sqlite3_stmt *insert, *finish, *list;
};

static const char schema[] =
    "PRAGMA journal_mode=WAL;"
    "PRAGMA synchronous=NORMAL;"
    "CREATE TABLE IF NOT EXISTS notices ("
    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  target TEXT NOT NULL,"
    "  content TEXT NOT NULL,"
    "  state TEXT NOT NULL DEFAULT 'INIT'"
    "    CHECK (state IN ('INIT', 'SUCCESS', 'FAILED')),"
    "  created_ms INTEGER NOT NULL,"
    "  sent_ms INTEGER,"
    "  attempts INTEGER NOT NULL DEFAULT 0,"
    "  provider_result TEXT,"
    "  ip TEXT);"
    "CREATE INDEX IF NOT EXISTS notices_by_target ON notices (target, id);";

/* Run after the schema: databases made before the ip column get it, and
   the start-up scan for stranded notices reads a small partial index. */
static const char migrate_ip[] = "ALTER TABLE notices ADD COLUMN ip TEXT;";
static const char index_init[] =
    "CREATE INDEX IF NOT EXISTS notices_init ON notices (id) "
    "WHERE state = 'INIT';";

/* Whether the notices table has column `name`. */
static int has_column(sqlite3 *db, const char *name)
{
    sqlite3_stmt *st = NULL;
    int found = 0;

    if (sqlite3_prepare_v2(db, "PRAGMA table_info(notices)", -1, &st, NULL) !=
        SQLITE_OK)
        return 0;
    while (!found && sqlite3_step(st) == SQLITE_ROW) {
        const unsigned char *col = sqlite3_column_text(st, 1);
        found = col && !strcmp((const char *)col, name);
    }
    sqlite3_finalize(st);
    return found;
}

int captcha_notices_open(captcha_notices_t **out, const char *path, char *err,
                         size_t errlen)
{
    captcha_notices_t *n = calloc(1, sizeof *n);
    char *msg = NULL;

    *out = NULL;
    if (!n) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_init(&n->lock, NULL);
    /* The table holds phone numbers and addresses: a new file is created
       0600 here, before SQLite opens it (SQLite gives its journal the
       database's mode), and neither open follows a symbolic link. */
    if (strcmp(path, ":memory:") != 0) {
        int fd = ratel__file_open_private(path, O_RDWR, "the notice database",
                                          err, errlen);
        if (fd < 0) {
            captcha_notices_close(n);
            return -1;
        }
        ratel__file_warn_readable(fd, path, "the notice database");
        close(fd);
    }
    if (sqlite3_open_v2(path, &n->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                            SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
                        NULL) != SQLITE_OK)
        goto fail;
    sqlite3_busy_timeout(n->db, 5000);
    if (sqlite3_exec(n->db, schema, NULL, NULL, &msg) != SQLITE_OK ||
        (!has_column(n->db, "ip") &&
         sqlite3_exec(n->db, migrate_ip, NULL, NULL, &msg) != SQLITE_OK) ||
        sqlite3_exec(n->db, index_init, NULL, NULL, &msg) != SQLITE_OK)
        goto fail;
    if (sqlite3_prepare_v2(n->db,
                           "INSERT INTO notices (target, content, state, "
                           "created_ms, ip) VALUES (?, ?, 'INIT', ?, ?)",
                           -1, &n->insert, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(n->db,
                           "UPDATE notices SET state = ?, sent_ms = ?, "
                           "attempts = attempts + 1, provider_result = ? "
                           "WHERE id = ?",
                           -1, &n->finish, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(n->db,
                           "SELECT id, target, content, state, created_ms, "
                           "sent_ms, attempts, provider_result FROM notices "
                           "WHERE target = ? ORDER BY id DESC LIMIT ?",
                           -1, &n->list, NULL) != SQLITE_OK)
        goto fail;
    *out = n;
    return 0;
fail:
    snprintf(err, errlen, "sqlite %s: %s", path,
             msg     ? msg
             : n->db ? sqlite3_errmsg(n->db)
                     : "cannot open");
    sqlite3_free(msg);
    captcha_notices_close(n);
    return -1;
}

int captcha_notices_add(captcha_notices_t *n, const char *target,
                        const char *ip, const char *content, int64_t now_ms,
                        int64_t *id)
{
    int rc;

    pthread_mutex_lock(&n->lock);
    sqlite3_bind_text(n->insert, 1, target, -1, SQLITE_STATIC);
    sqlite3_bind_text(n->insert, 2, content, -1, SQLITE_STATIC);
    sqlite3_bind_int64(n->insert, 3, now_ms);
    sqlite3_bind_text(n->insert, 4, ip, -1, SQLITE_STATIC);
    rc = sqlite3_step(n->insert);
    if (rc == SQLITE_DONE)
        *id = sqlite3_last_insert_rowid(n->db);
    else
        ratel__log("error", "sqlite insert failed", "reason=\"%s\"",
                   sqlite3_errmsg(n->db));
    sqlite3_reset(n->insert);
    sqlite3_clear_bindings(n->insert);
    pthread_mutex_unlock(&n->lock);
    return rc == SQLITE_DONE ? 0 : -1;
}

int captcha_notices_finish(captcha_notices_t *n, int64_t id, int ok,
                           const char *result, int64_t now_ms)
{
    int rc;

    pthread_mutex_lock(&n->lock);
    sqlite3_bind_text(n->finish, 1, ok ? "SUCCESS" : "FAILED", -1,
                      SQLITE_STATIC);
    sqlite3_bind_int64(n->finish, 2, now_ms);
    sqlite3_bind_text(n->finish, 3, result, -1, SQLITE_STATIC);
    sqlite3_bind_int64(n->finish, 4, id);
    rc = sqlite3_step(n->finish);
    if (rc != SQLITE_DONE)
        ratel__log("error", "sqlite update failed", "id=%lld reason=\"%s\"",
                   (long long)id, sqlite3_errmsg(n->db));
    sqlite3_reset(n->finish);
    sqlite3_clear_bindings(n->finish);
    pthread_mutex_unlock(&n->lock);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* Copies text column `col` of `st` into out (cap bytes); NULL reads "". */
static void column_copy(sqlite3_stmt *st, int col, char *out, size_t cap)
{
    const unsigned char *t = sqlite3_column_text(st, col);
    snprintf(out, cap, "%s", t ? (const char *)t : "");
}

int captcha_notices_stranded(captcha_notices_t *n, captcha_stranded_t **out,
                             size_t *count)
{
    sqlite3_stmt *st = NULL;
    captcha_stranded_t *list = NULL;
    size_t len = 0, cap = 0;
    int rc;

    *out = NULL;
    *count = 0;
    pthread_mutex_lock(&n->lock);
    if (sqlite3_prepare_v2(n->db,
                           "SELECT id, created_ms, target, ip FROM notices "
                           "WHERE state = 'INIT' ORDER BY id",
                           -1, &st, NULL) != SQLITE_OK)
        rc = SQLITE_ERROR;
    else
        rc = SQLITE_ROW;
    while (rc == SQLITE_ROW && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (len == cap) {
            size_t bigger = cap ? cap * 2 : 64;
            captcha_stranded_t *l = realloc(list, bigger * sizeof *l);
            if (!l) {
                rc = SQLITE_NOMEM;
                break;
            }
            list = l;
            cap = bigger;
        }
        list[len].id = sqlite3_column_int64(st, 0);
        list[len].created_ms = sqlite3_column_int64(st, 1);
        column_copy(st, 2, list[len].target, sizeof list[len].target);
        column_copy(st, 3, list[len].ip, sizeof list[len].ip);
        len++;
    }
    if (rc != SQLITE_DONE)
        ratel__log("error", "sqlite select failed", "reason=\"%s\"",
                   rc == SQLITE_NOMEM ? "out of memory"
                                      : sqlite3_errmsg(n->db));
    sqlite3_finalize(st);
    pthread_mutex_unlock(&n->lock);
    if (rc != SQLITE_DONE) {
        free(list);
        return -1;
    }
    *out = list;
    *count = len;
    return 0;
}

/* A column as a JSON string, or null. */
static void add_text(cJSON *o, const char *name, sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    if (t)
        cJSON_AddStringToObject(o, name, (const char *)t);
    else
        cJSON_AddNullToObject(o, name);
}

char *captcha_notices_json(captcha_notices_t *n, const char *target,
                           unsigned max)
{
    cJSON *list = cJSON_CreateArray();
    char *text = NULL;
    int rc;

    if (!list)
        return NULL;
    pthread_mutex_lock(&n->lock);
    sqlite3_bind_text(n->list, 1, target, -1, SQLITE_STATIC);
    sqlite3_bind_int(n->list, 2, (int)max);
    while ((rc = sqlite3_step(n->list)) == SQLITE_ROW) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddNumberToObject(o, "id",
                                (double)sqlite3_column_int64(n->list, 0));
        add_text(o, "target", n->list, 1);
        add_text(o, "content", n->list, 2);
        add_text(o, "state", n->list, 3);
        cJSON_AddNumberToObject(o, "created_ms",
                                (double)sqlite3_column_int64(n->list, 4));
        if (sqlite3_column_type(n->list, 5) == SQLITE_NULL)
            cJSON_AddNullToObject(o, "sent_ms");
        else
            cJSON_AddNumberToObject(o, "sent_ms",
                                    (double)sqlite3_column_int64(n->list, 5));
        cJSON_AddNumberToObject(o, "attempts", sqlite3_column_int(n->list, 6));
        add_text(o, "provider_result", n->list, 7);
        cJSON_AddItemToArray(list, o);
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        ratel__log("error", "sqlite select failed", "reason=\"%s\"",
                   sqlite3_errmsg(n->db));
    sqlite3_reset(n->list);
    sqlite3_clear_bindings(n->list);
    pthread_mutex_unlock(&n->lock);
    if (rc == SQLITE_DONE)
        text = cJSON_PrintUnformatted(list);
    cJSON_Delete(list);
    return text;
}

void captcha_notices_close(captcha_notices_t *n)
{
    if (!n)
        return;
    sqlite3_finalize(n->insert);
    sqlite3_finalize(n->finish);
    sqlite3_finalize(n->list);
    sqlite3_close(n->db);
    pthread_mutex_destroy(&n->lock);
    free(n);
}
