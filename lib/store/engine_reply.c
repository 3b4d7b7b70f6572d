/*
 * engine_reply.c - the reply objects hiredis's reader builds for the
 * engine: hiredis's own, made with malloc() where hiredis 0.x calls
 * calloc().
 *
 * glibc's calloc() never takes a chunk from the thread's cache (tcache)
 * that free() fills, so with hiredis's defaults every reply object goes
 * through the allocator's bins, and an ACQUIRE's answer is nine objects
 * (the array, its vector, seven integers). These functions build the
 * very same objects, which freeReplyObject() frees as before, and those
 * the cache holds are taken from it: about 5 % of the instructions the
 * nginx module's worker spends on a request in Redis mode (callgrind).
 *
 * They mirror hiredis 0.x's redisReply and its default functions; with
 * another hiredis the reader keeps its own.
 */
#include "store/engine_private.h"

#include <stdlib.h>
#include <string.h>

#if HIREDIS_MAJOR == 0

static redisReply *reply_new(const redisReadTask *task, int type)
{
    redisReply *r = malloc(sizeof *r);

    if (!r)
        return NULL;
    memset(r, 0, sizeof *r);
    r->type = type;
    /* The reader fills an array's elements in order, each made before
       the next is read. */
    if (task->parent) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
    char *copy = malloc(len + 1);
    redisReply *r;

    if (!copy)
        return NULL;
    memcpy(copy, str, len);
    copy[len] = '\0';
    r = reply_new(task, task->type);
    if (!r) {
        free(copy);
        return NULL;
    }
    r->str = copy;
    r->len = len;
    return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
    redisReply **element = NULL;
    redisReply *r;

    if (elements > 0) {
        /* Zeroed: a reply cut short is freed with the elements made. */
        element = malloc((size_t)elements * sizeof *element);
        if (!element)
            return NULL;
        memset(element, 0, (size_t)elements * sizeof *element);
    }
    r = reply_new(task, REDIS_REPLY_ARRAY);
    if (!r) {
        free(element);
        return NULL;
    }
    r->element = element;
    r->elements = (size_t)elements;
    return r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
    redisReply *r = reply_new(task, REDIS_REPLY_INTEGER);

    if (r)
        r->integer = value;
    return r;
}

static void *create_nil(const redisReadTask *task)
{
    return reply_new(task, REDIS_REPLY_NIL);
}

static redisReplyObjectFunctions functions = {
    create_string, create_array, create_integer, create_nil, freeReplyObject,
};

void ratel__engine_reply_functions(redisReader *reader)
{
    reader->fn = &functions;
}

#else

void ratel__engine_reply_functions(redisReader *reader)
{
    (void)reader;
}

#endif
