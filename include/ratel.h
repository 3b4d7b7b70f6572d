/*
 * ratel.h - the one public header of libratel, the ratel rate limiter.
 *
 * Layers, from the bottom:
 *
 *   rules      "10/1h", "100/1s:gcra,burst=200": parse, format, explain.
 *   policies   an ordered list of rules applied to one key all-or-nothing.
 *   state      all rules' states of one key in one versioned binary blob
 *              (docs/state-format.md). The pure core updates it in place.
 *   stores     where blobs live: the embedded memory store here, Redis later.
 *
 * The core (rules, policies, state) is pure: the caller reads its clock once
 * per request and passes `now_us`; nothing here reads a clock, allocates on
 * the decision path or does I/O. Being denied is a decision, not an error:
 * functions return 0 or a negative RATEL_E* code.
 */
#ifndef RATEL_H
#define RATEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* RATEL_HIDDEN: the core linked into another shared object (the Redis
   module) that must export nothing of it. */
#if defined(RATEL_HIDDEN)
#define RATEL_API
#elif defined(__GNUC__)
#define RATEL_API __attribute__((visibility("default")))
#else
#define RATEL_API
#endif

#define RATEL_VERSION "0.1.0"

/* ---------------------------------------------------------------- errors */

/*
 * X(NAME, value, message). One list generates the enum, ratel_strerror()
 * and ratel_err_name().
 */
#define RATEL_ERRNO_MAP(X)                                                     \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ERULE, -2, "malformed rule")                                             \
    X(ECOST, -3, "cost is larger than a rule can ever admit")                  \
    X(ENOMEM, -4, "out of memory")                                             \
    X(ECORRUPT, -5, "state is truncated, corrupt or not ratel state")          \
    X(EVERSION, -6, "state was written by an unsupported format version")      \
    X(ENOBUFS, -7, "state buffer too small")                                   \
    X(ERANGE, -8, "value out of range")                                        \
    X(ETOOMANY, -9, "too many rules in one policy")                            \
    X(EIO, -10, "the store could not be reached or did not answer in time")    \
    X(EPROTO, -11, "the store answered something unexpected")

typedef enum ratel_errno_e {
    RATEL_OK = 0,
#define RATEL_ERRNO_ENUM_(name, value, message) RATEL_##name = (value),
    RATEL_ERRNO_MAP(RATEL_ERRNO_ENUM_)
#undef RATEL_ERRNO_ENUM_
} ratel_errno_t;

/* Human text for a RATEL_E* code ("unknown error" for anything else). */
RATEL_API const char *ratel_strerror(int err);
/* The code's name without prefix, e.g. "ERULE"; "UNKNOWN" otherwise. */
RATEL_API const char *ratel_err_name(int err);

/* ------------------------------------------------------------ constants */

/* Largest LIMIT and burst a rule accepts. */
#define RATEL_LIMIT_MAX 1000000000u
/* Shortest and longest PERIOD, in milliseconds (1 ms .. 30 days). */
#define RATEL_PERIOD_MIN_MS 1u
#define RATEL_PERIOD_MAX_MS 2592000000u
/* Longest key a memory store / a Redis store takes (RATEL_ERANGE past). */
#define RATEL_MEMORY_KEY_MAX 4096u
#define RATEL_REDIS_KEY_MAX 65536u
/* Rules in one policy. */
#define RATEL_MAX_RULES 8
/*
 * Most (time, count) runs one sliding rule stores. The sliding window is
 * exact while the window holds no more distinct instants than this; past it
 * runs are coarsened (docs/algorithms.md gives the bound).
 */
#define RATEL_SLIDING_CAP 256
/*
 * Largest limit of a concurrent rule: the permits one key may hold at once.
 * Its state keeps 8 bytes per permit held (at most 2 KB, as a sliding
 * record at its cap), and every call reads them.
 */
#define RATEL_CONCURRENT_MAX 256
/*
 * No valid state blob is longer than this (16,580 bytes: eight sliding rules
 * at their run cap). A buffer this size never gets RATEL_ENOBUFS.
 */
#define RATEL_STATE_MAX (4 + RATEL_MAX_RULES * (24 + 8 * RATEL_SLIDING_CAP))
/* `now_us` must lie in [0, RATEL_TIME_MAX_US): 2^53 us, the year 2255. */
#define RATEL_TIME_MAX_US ((int64_t)1 << 53)

/* ---------------------------------------------------------------- rules */

/*
 * What a caller needs to know of an algorithm, as bits (the fourth column
 * of RATEL_ALGO_MAP; ratel_algo_facts()):
 *   DEFAULT   a rule without :ALGO has it
 *   BURST     takes burst=N, which is its capacity
 *   CALENDAR  its windows may follow a calendar: tz=, weeks, months
 *   RESERVES  can reserve: with a max wait, admits an over-limit request
 *             after a delay (MAXWAIT)
 *   LEASES    holds leases to release or renew (one such rule per policy)
 *   RATE      limits a rate: `ratel replay --svg` charts the rules under it
 */
#define RATEL_ALGO_DEFAULT 0x01u
#define RATEL_ALGO_BURST 0x02u
#define RATEL_ALGO_CALENDAR 0x04u
#define RATEL_ALGO_RESERVES 0x08u
#define RATEL_ALGO_LEASES 0x10u
#define RATEL_ALGO_RATE 0x20u

/*
 * The fields of ratel_rule_status_t that only some algorithms fill, which
 * RATEL.INFO and `ratel inspect` show after the common ones:
 * XX(NAME, member, bit), in the order they are shown. The fifth column of
 * RATEL_ALGO_MAP says which an algorithm has.
 */
#define RATEL_STATUS_FIELD_MAP(XX)                                             \
    XX(RUNS, runs, 0x01u)                                                      \
    XX(GRANULARITY, granularity_ms, 0x02u)                                     \
    XX(TAT, tat_us, 0x04u)                                                     \
    XX(WINDOW_START, window_start_ms, 0x08u)                                   \
    XX(LAST_LEASE, last_lease, 0x10u)

enum {
#define RATEL_STATUS_ENUM_(NAME, member, bit) RATEL_STATUS_##NAME = bit,
    RATEL_STATUS_FIELD_MAP(RATEL_STATUS_ENUM_)
#undef RATEL_STATUS_ENUM_
};

/*
 * The algorithms: XX(NAME, name, number, facts, fields) for each, the
 * number being the byte that marks its records in stored state
 * (docs/state-format.md), so it never changes; `facts` its RATEL_ALGO_*
 * bits, `fields` its RATEL_STATUS_* fields. The enum, the names, the
 * core's dispatch, the checks of rules and requests, what INFO shows, the
 * chart of `ratel replay` and the Lua scripts' constants
 * (scripts/lua-build.sh) are made from this list; an algorithm is an
 * entry here and its file in lib/core (and lua/).
 *   sliding     exact sliding window log (the default)
 *   fixed       counter per epoch-aligned window
 *   approx      two-window weighted counter
 *   gcra        token bucket as GCRA, with reservations
 *   concurrent  leases held at once, each expiring after the period
 */
#define RATEL_ALGO_MAP(XX)                                                     \
    XX(SLIDING, sliding, 0, RATEL_ALGO_DEFAULT | RATEL_ALGO_RATE,              \
       RATEL_STATUS_RUNS | RATEL_STATUS_GRANULARITY)                           \
    XX(FIXED, fixed, 1, RATEL_ALGO_CALENDAR | RATEL_ALGO_RATE,                 \
       RATEL_STATUS_WINDOW_START)                                              \
    XX(APPROX, approx, 2, RATEL_ALGO_CALENDAR | RATEL_ALGO_RATE,               \
       RATEL_STATUS_WINDOW_START)                                              \
    XX(GCRA, gcra, 3,                                                          \
       RATEL_ALGO_BURST | RATEL_ALGO_RESERVES | RATEL_ALGO_RATE,               \
       RATEL_STATUS_TAT)                                                       \
    XX(CONCURRENT, concurrent, 4, RATEL_ALGO_LEASES, RATEL_STATUS_LAST_LEASE)

typedef enum ratel_algo_e {
#define RATEL_ALGO_ENUM_(NAME, name, number, facts, fields)                    \
    RATEL_ALGO_##NAME = number,
    RATEL_ALGO_MAP(RATEL_ALGO_ENUM_)
#undef RATEL_ALGO_ENUM_
} ratel_algo_t;

/* How many algorithms there are: their numbers run from 0 to this - 1. */
#define RATEL_ALGO_COUNT_(NAME, name, number, facts, fields) +1
enum { RATEL_ALGOS = 0 RATEL_ALGO_MAP(RATEL_ALGO_COUNT_) };
#undef RATEL_ALGO_COUNT_

/*
 * A time zone of the system's database (tz=Area/City), loaded once per
 * process by ratel_rule_parse() and kept for its life. Opaque.
 */
typedef struct ratel_zone_s ratel_zone_t;

/* The zone's name, e.g. "Asia/Shanghai". */
RATEL_API const char *ratel_zone_name(const ratel_zone_t *zone);

/* ratel_rule_t.calendar: how the windows of fixed and approx are placed. */
#define RATEL_CALENDAR_TZ 0x01u     /* in a zone: tz_offset_s, or `zone` */
#define RATEL_CALENDAR_WEEKS 0x02u  /* period_ms is whole weeks from Monday */
#define RATEL_CALENDAR_MONTHS 0x04u /* `months` months; period_ms is 0 */
/* Offsets of tz=±HH:MM run from -14:00 to +14:00, as the world's do. */
#define RATEL_TZ_OFFSET_MAX_S 50400
/* Longest period in calendar months (tz=, 1mo .. 12mo). */
#define RATEL_MONTHS_MAX 12u

typedef struct ratel_rule_s {
    ratel_algo_t algo;
    uint32_t limit;     /* permits per period, 1..RATEL_LIMIT_MAX */
    uint32_t period_ms; /* RATEL_PERIOD_MIN_MS..RATEL_PERIOD_MAX_MS; 0 for a
                           period of months */
    uint32_t burst;     /* gcra bucket depth in permits (= limit unless set);
                           0 for the other algorithms */
    /*
     * Calendar windows (fixed and approx only; docs/algorithms.md). All zero:
     * windows aligned to the Unix epoch in UTC, as rules without them have.
     */
    uint32_t calendar;        /* RATEL_CALENDAR_* */
    uint32_t months;          /* RATEL_CALENDAR_MONTHS: 1..RATEL_MONTHS_MAX */
    int32_t tz_offset_s;      /* RATEL_CALENDAR_TZ, no zone: east of UTC */
    const ratel_zone_t *zone; /* RATEL_CALENDAR_TZ: tz=Area/City, else NULL */
} ratel_rule_t;

/*
 * Parses `text` (`len` bytes, no NUL needed) as
 * LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE] (docs/algorithms.md).
 * On error returns RATEL_ERULE and, when errbuf is not NULL, writes a message
 * that quotes the rule and says what is accepted.
 */
RATEL_API int ratel_rule_parse(const char *text, size_t len, ratel_rule_t *out,
                               char *errbuf, size_t errlen);

/*
 * Writes the canonical text of `rule` ("10/1h", "100/1s:gcra,burst=200") to
 * buf (NUL-terminated, truncated to buflen). Returns the full length, as
 * snprintf does. ratel_rule_parse() of the result gives back `rule`.
 */
RATEL_API int ratel_rule_format(const ratel_rule_t *rule, char *buf,
                                size_t buflen);

/*
 * Writes an English sentence describing `rule`, e.g. "at most 10 requests in
 * any 1-hour window". Returns the full length, as snprintf does.
 */
RATEL_API int ratel_rule_explain(const ratel_rule_t *rule, char *buf,
                                 size_t buflen);

/* Name of an algorithm: "sliding", "fixed", "approx", "gcra", "concurrent"
   ("unknown" for another number). */
RATEL_API const char *ratel_algo_name(ratel_algo_t algo);

/* The RATEL_ALGO_* facts of an algorithm (0 for another number). */
RATEL_API unsigned ratel_algo_facts(ratel_algo_t algo);

/* The RATEL_STATUS_* fields an algorithm fills (0 for another number). */
RATEL_API unsigned ratel_algo_fields(ratel_algo_t algo);

/*
 * The most permits one request may cost under `rule`: its burst when its
 * algorithm takes one (RATEL_ALGO_BURST), its limit otherwise. A request
 * costing more can never be admitted (ratel_policy_acquire() refuses it with
 * RATEL_EINVAL).
 */
RATEL_API uint64_t ratel_rule_capacity(const ratel_rule_t *rule);

/* ------------------------------------------------------------- policies */

/* An ordered list of rules applied to one key atomically. Plain data. */
typedef struct ratel_policy_s {
    uint32_t nrules;
    ratel_rule_t rules[RATEL_MAX_RULES];
} ratel_policy_t;

/*
 * Fills `policy` from `n` already-parsed rules after checking them (range,
 * duplicates, count). Errors: RATEL_EINVAL, RATEL_ERULE, RATEL_ETOOMANY, with
 * a message in errbuf.
 */
RATEL_API int ratel_policy_init(ratel_policy_t *policy,
                                const ratel_rule_t *rules, size_t n,
                                char *errbuf, size_t errlen);

/* Parses `n` NUL-terminated rule texts into `policy`; errors as above. */
RATEL_API int ratel_policy_parse(ratel_policy_t *policy,
                                 const char *const *texts, size_t n,
                                 char *errbuf, size_t errlen);

/*
 * Upper bound, in bytes, of the state blob of any key under `policy`. A
 * buffer this large never makes the state functions return RATEL_ENOBUFS.
 */
RATEL_API size_t ratel_policy_state_max(const ratel_policy_t *policy);

/* ------------------------------------------------------------ decisions */

/* Request flags. */
#define RATEL_PEEK 1u /* decide, charge nothing, leave the state as it is */

typedef struct ratel_lease_s ratel_lease_t;

typedef struct ratel_request_s {
    uint64_t cost;       /* permits, >= 1 */
    int64_t max_wait_ms; /* > 0: reserve (every rule RATEL_ALGO_RESERVES) */
    unsigned flags;      /* RATEL_PEEK */
    /* Not NULL: on a Redis store, the request may be answered from a
       slice of its key's permits this host holds (docs/leases.md), taken
       and spent under these settings. Ignored by the memory store, for a
       PEEK, a max wait or a policy with a concurrent rule. The caller's;
       it must stay valid until the store is freed. */
    ratel_lease_t *lease;
} ratel_request_t;

#define RATEL_REQUEST_INIT                                                     \
    {                                                                          \
        1, 0, 0, NULL                                                          \
    }

/* ------------------------------------------------------ request options */

/* The operations, as bits of RATEL_OPTION_MAP's `ops`. */
#define RATEL_OP_ACQUIRE 0x01u
#define RATEL_OP_REFUND 0x02u
#define RATEL_OP_RELEASE 0x04u
#define RATEL_OP_INFO 0x08u
#define RATEL_OP_SLICE 0x10u
#define RATEL_OP_UNSLICE 0x20u
/* The operations that take rules after their options (INFO does not), and
   which rateld's endpoints serve. */
#define RATEL_OP_RULES (RATEL_OP_ACQUIRE | RATEL_OP_REFUND | RATEL_OP_RELEASE)
/* A hot key's slices (docs/leases.md): the commands' operations only; they
   take rules after their options too. */
#define RATEL_OP_SLICES (RATEL_OP_SLICE | RATEL_OP_UNSLICE)

/* How an option is given (RATEL_OPTION_MAP's `kind`). */
#define RATEL_ARG_FLAG 0   /* its word alone: PEEK */
#define RATEL_ARG_VALUE 1  /* its word, then an integer: COST 3 */
#define RATEL_ARG_FIRST 2  /* the first argument, an integer, no word */
#define RATEL_ARG_NEEDED 3 /* as VALUE, and the operation needs it: TTL 250 */

/* The latest AT: the last millisecond before RATEL_TIME_MAX_US. */
#define RATEL_AT_MAX_MS 9007199254740
/* Lease ids run from 1 to this. */
#define RATEL_LEASE_MAX 4294967295u
/* The longest a slice may live: 1 hour. */
#define RATEL_SLICE_TTL_MAX_MS 3600000
/* Slice holders' ids run from 1 to this (2^53 - 1: exact in Lua). */
#define RATEL_HOLDER_MAX 9007199254740991

/*
 * The options of a request, each once: XX(NAME, name, kind, min, max, ops,
 * value, note). NAME is its word in the RATEL.* commands, FCALL and the EVAL
 * script (docs/commands.md); `name` its field in rateld's JSON body and query
 * (docs/rateld.md) and, with "-" for "_", the CLI's --option; an integer from
 * `min` to `max`; `ops` the RATEL_OP_* that take it; `value` what the lists
 * of options call its value, `note` what a message adds after its range.
 * One reader of it, ratel_options_read() below, serves the module, the CLI
 * and rateld; the Lua scripts mirror it (scripts/lua-build.sh writes their
 * copy of the table) and the Redis store's commands encode from it, so a
 * range and its message are written once. AT sets the decision's clock:
 * only the commands take it (for replays and tests), never a server's
 * caller.
 */
#define RATEL_OPTION_MAP(XX)                                                   \
    XX(COST, cost, RATEL_ARG_VALUE, 1, RATEL_LIMIT_MAX,                        \
       RATEL_OP_ACQUIRE | RATEL_OP_REFUND, "n", "")                            \
    XX(PEEK, peek, RATEL_ARG_FLAG, 0, 1, RATEL_OP_ACQUIRE, "", "")             \
    XX(MAXWAIT, max_wait, RATEL_ARG_VALUE, 0, RATEL_PERIOD_MAX_MS,             \
       RATEL_OP_ACQUIRE, "ms", "")                                             \
    XX(RENEW, renew, RATEL_ARG_FLAG, 0, 1, RATEL_OP_RELEASE, "", "")           \
    XX(LEASE, lease, RATEL_ARG_FIRST, 1, RATEL_LEASE_MAX, RATEL_OP_RELEASE,    \
       "id", " (the lease an ACQUIRE returned)")                               \
    XX(WANT, want, RATEL_ARG_FIRST, 1, RATEL_LIMIT_MAX, RATEL_OP_SLICE, "n",   \
       " (the permits the slice asks for)")                                    \
    XX(TTL, ttl, RATEL_ARG_NEEDED, 1, RATEL_SLICE_TTL_MAX_MS, RATEL_OP_SLICE,  \
       "ms", " (the lifetime of the slice in ms)")                             \
    XX(HOLDER, holder, RATEL_ARG_VALUE, 1, RATEL_HOLDER_MAX, RATEL_OP_SLICE,   \
       "id", " (the host asking for its fair share)")                          \
    XX(UNSPENT, unspent, RATEL_ARG_FIRST, 1, RATEL_LIMIT_MAX,                  \
       RATEL_OP_UNSLICE, "n", " (the permits of the slice not spent)")         \
    XX(UNTIL, until, RATEL_ARG_NEEDED, 1, RATEL_AT_MAX_MS, RATEL_OP_UNSLICE,   \
       "unix_ms", " (the expires_at_ms SLICE answered)")                       \
    XX(AT, at, RATEL_ARG_VALUE, 0, RATEL_AT_MAX_MS,                            \
       RATEL_OP_ACQUIRE | RATEL_OP_REFUND | RATEL_OP_RELEASE | RATEL_OP_INFO | \
           RATEL_OP_SLICES,                                                    \
       "unix_ms", "")

/* Each option's index: RATEL_OPTION_COST, ...; RATEL_OPTIONS of them. */
enum {
#define RATEL_OPTION_ENUM_(NAME, name, kind, min, max, ops, value, note)       \
    RATEL_OPTION_##NAME,
    RATEL_OPTION_MAP(RATEL_OPTION_ENUM_)
#undef RATEL_OPTION_ENUM_
        RATEL_OPTIONS
};

/* Which path made a decision. */
typedef enum ratel_source_e {
    RATEL_SOURCE_STORE = 0,  /* the key's state: the core, or Redis */
    RATEL_SOURCE_CACHE = 1,  /* the Redis store's local deny cache */
    RATEL_SOURCE_OPEN = 2,   /* Redis failed; failure policy `open` allowed */
    RATEL_SOURCE_CLOSED = 3, /* Redis failed; failure policy `closed` denied */
    RATEL_SOURCE_LOCAL = 4,  /* Redis failed; the embedded fallback decided */
    RATEL_SOURCE_LEASE = 5   /* a slice of the key's permits this host holds */
} ratel_source_t;

/* "store", "cache", "open", "closed", "local", "lease" ("unknown"
   otherwise). */
RATEL_API const char *ratel_source_name(int source);

typedef struct ratel_decision_s {
    int allowed;            /* 1 admitted (after wait_ms), 0 denied */
    int rule;               /* index of the binding rule in the policy */
    int64_t limit;          /* that rule's limit */
    int64_t remaining;      /* permits still available now, min over rules */
    int64_t retry_after_ms; /* 0 when allowed; else retrying then succeeds
                               if nothing else happens in between */
    int64_t reset_after_ms; /* until the key is back to full (state empty) */
    int64_t wait_ms;        /* reservations: sleep this long, then proceed */
    int64_t rule_reset_ms;  /* until the binding rule alone is back to full
                               (<= reset_after_ms; the Redis store, whose
                               reply has no such field, gives reset_after_ms) */
    ratel_source_t source;  /* which path decided (RATEL_SOURCE_STORE unless
                               a Redis store's cache or failure policy) */
    uint32_t lease;         /* a policy with a concurrent rule, admitted and
                               charged: the lease id to release (1..2^32-1,
                               per key); else 0 */
} ratel_decision_t;

/*
 * Whether `request` could ever be admitted under `policy`, before any state
 * is read: 0; RATEL_ECOST when its cost is above a rule's capacity (its
 * burst for gcra, else its limit); RATEL_EINVAL for cost 0, a max wait out
 * of range, or a max wait with a rule whose algorithm does not reserve
 * (RATEL_ALGO_RESERVES). `rule`, when not NULL, is the out-parameter for
 * the details: the index of the rule that refuses the request (ECOST, and
 * EINVAL for a max wait), left as it was for an error of the request
 * alone. ratel_policy_acquire() makes the same check; callers that answer
 * before it runs call this (or ratel_options_check(), which words its
 * result) to name the rule.
 */
RATEL_API int ratel_policy_check_request(const ratel_policy_t *policy,
                                         const ratel_request_t *request,
                                         size_t *rule);

/* ------------------------------------------------ reading request options */

/*
 * How a front end spells the options of RATEL_OPTION_MAP: its NAME in any
 * case (the RATEL.* commands, FCALL and EVAL), its `name` (rateld's query
 * and JSON body), or its `name` with "-" for "_", after "--" (the ratel
 * command's --max-wait; ratel_options_read() takes it without the "--").
 */
#define RATEL_SPELL_WORD 0
#define RATEL_SPELL_FIELD 1
#define RATEL_SPELL_FLAG 2

/*
 * The request options of one call as they are read, plain data. value[i]
 * is option i's (RATEL_OPTION_COST, ...): until it is read, its minimum
 * for an option with a value (COST 1, MAXWAIT 0, AT 0, HOLDER 1), else 0
 * (flags, LEASE, WANT, UNSPENT, and the needed TTL and UNTIL); a flag read
 * is 1 (0 when given as false). `given` and `takes` hold the bit
 * 1u << RATEL_OPTION_x of each option read and of each the call may have;
 * `first` is the option the call takes before any word (RATEL_ARG_FIRST:
 * RELEASE's LEASE, SLICE's WANT, UNSLICE's UNSPENT), or -1.
 */
typedef struct ratel_options_s {
    int64_t value[RATEL_OPTIONS];
    unsigned given;
    unsigned takes;
    unsigned op; /* RATEL_OP_* */
    int spell;   /* RATEL_SPELL_* */
    int first;
} ratel_options_t;

/*
 * Starts reading the options of operation `op` (one RATEL_OP_*) spelled
 * `spell`: every option the map gives `op`, except the ones in `refused`
 * (bits 1u << RATEL_OPTION_x: a server's caller never sets AT).
 */
RATEL_API void ratel_options_init(ratel_options_t *o, unsigned op, int spell,
                                  unsigned refused);

/*
 * The option `name` (`len` bytes) names in `spell`, or -1; its
 * RATEL_ARG_* in *kind when kind is not NULL. RATEL_SPELL_WORD ignores
 * case; the others do not.
 */
RATEL_API int ratel_option_find(int spell, const char *name, size_t len,
                                int *kind);

/*
 * Reads one option: `name` (`namelen` bytes, spelled o->spell; NULL for
 * o->first) and its value's text (`value`, `len` bytes; NULL when none
 * was given: a flag given by its word alone is 1). A value is a decimal
 * integer (digits only) within the option's range; a flag's is true,
 * false, 1, 0 or empty (false). Returns 0, or RATEL_EINVAL with one
 * sentence in err (when err is not NULL) for: a name that is not an
 * option of the call or was read before, a value that is missing or out of
 * range. The sentence names the option as the front end spells it and
 * quotes the value given, if any ("COST must be an integer from 1 to
 * 1000000000, not "0"").
 */
RATEL_API int ratel_options_read(ratel_options_t *o, const char *name,
                                 size_t namelen, const char *value, size_t len,
                                 char *err, size_t errlen);

/*
 * Writes the options a call takes, as its words and values would be
 * listed ("COST n, PEEK, MAXWAIT ms, AT unix_ms, then the rules"; the
 * field or flag names for the other spellings, without the rules).
 * Returns the full length, as snprintf does.
 */
RATEL_API int ratel_options_list(const ratel_options_t *o, char *buf,
                                 size_t len);

/* The request the options read make: COST, MAXWAIT and PEEK. */
RATEL_API void ratel_options_request(const ratel_options_t *o,
                                     ratel_request_t *request);

/*
 * The options of a call checked as a whole and against `policy`, with one
 * message in err naming the option as o->spell spells it. First an option
 * the operation needs (RATEL_ARG_NEEDED) that was not read ("TTL is
 * needed: an integer from 1 to 3600000 (the lifetime of the slice in ms)");
 * then a slice of a policy with a concurrent rule (RATEL_EINVAL, naming
 * the rule); then, for an ACQUIRE, ratel_policy_check_request() of the
 * options' request, naming the rule by number and text and what it admits
 * ("COST 11 is more than rule 1 ("10/1s") can ever admit (10)"). Returns
 * 0, RATEL_EINVAL or that function's code.
 */
RATEL_API int ratel_options_check(const ratel_options_t *o,
                                  const ratel_policy_t *policy, char *err,
                                  size_t errlen);

/*
 * Decides one request for one key at `now_us` (microseconds since the Unix
 * epoch, read once by the caller) and, unless denied or RATEL_PEEK, charges
 * every rule of `policy` (all-or-nothing).
 *
 * `state` holds the key's blob, `*state_len` bytes (0: a key never seen or
 * reset). It is updated in place; `state_cap` is the buffer's size. On
 * return `*state_len` is the new length (0 means the key carries no state
 * and may be deleted). If the update needs more than `state_cap` bytes,
 * nothing is changed, `*state_len` is set to the size needed and
 * RATEL_ENOBUFS is returned: grow the buffer and call again.
 *
 * A blob written under different rules is converted first (rules kept,
 * converted or started afresh: docs/state-format.md). Errors: RATEL_EINVAL
 * (cost 0, time out of range, bad max_wait), RATEL_ECOST, RATEL_ECORRUPT,
 * RATEL_EVERSION, RATEL_ENOBUFS. On error `decision` is unspecified.
 */
RATEL_API int ratel_policy_acquire(const ratel_policy_t *policy, uint8_t *state,
                                   size_t *state_len, size_t state_cap,
                                   int64_t now_us,
                                   const ratel_request_t *request,
                                   ratel_decision_t *decision);

/*
 * Gives `cost` permits back to every rule (e.g. the SMS provider failed),
 * never more than the rule has counted. `decision` reports the key after the
 * refund as a peek would. State handling and errors as ratel_policy_acquire.
 */
RATEL_API int ratel_policy_refund(const ratel_policy_t *policy, uint8_t *state,
                                  size_t *state_len, size_t state_cap,
                                  int64_t now_us, uint64_t cost,
                                  ratel_decision_t *decision);

/* Lease operations (ratel_policy_release). */
#define RATEL_RENEW 1u /* extend the lease to now + PERIOD, do not release */

/*
 * Releases the lease `lease` of the policy's concurrent rule (the id an
 * acquire's decision carried), or with RATEL_RENEW in `flags` extends it to
 * now + the rule's PERIOD. `*held` is set to 1 when the lease was held,
 * 0 when it is unknown or has expired: that is a result, not an error, and
 * leaves the other leases as they were. `decision` reports the key after it
 * as a peek would. State handling as ratel_policy_acquire. Errors:
 * RATEL_EINVAL (no concurrent rule in the policy, lease 0, unknown flags),
 * RATEL_ECORRUPT, RATEL_EVERSION, RATEL_ENOBUFS.
 */
RATEL_API int ratel_policy_release(const ratel_policy_t *policy, uint8_t *state,
                                   size_t *state_len, size_t state_cap,
                                   int64_t now_us, uint32_t lease,
                                   unsigned flags, int *held,
                                   ratel_decision_t *decision);

/*
 * Whether the policy has a concurrent rule (1) or not (0): its admitted
 * acquires then carry a lease to release, and the module's and the Lua
 * scripts' ACQUIRE replies an eighth integer, the lease.
 */
RATEL_API int ratel_policy_has_leases(const ratel_policy_t *policy);

/* --------------------------------------------------------------- slices */

/* The longest a slice may live (RATEL_SLICE_TTL_MAX_MS: 1 hour). */
#define RATEL_SLICE_TTL_MAX_US ((int64_t)RATEL_SLICE_TTL_MAX_MS * 1000)

/*
 * Hot keys: a host takes a slice of a policy's permits in one call and
 * spends them without asking again until the slice ends (docs/leases.md).
 *
 * Charges every rule with the most permits that all of them admit now, up
 * to `want` (and a rule's capacity), as that many requests at once would
 * be: `*granted` (0: nothing charged; `decision` then says when one
 * permit fits, as a denied acquire would). `*expires_us` is when the
 * slice ends: now + ttl_us, or sooner, the end of the current window of a
 * fixed or approx rule (its permits count in that window only), so that
 * a slice spent before it ends never exceeds such a rule. State handling
 * as ratel_policy_acquire. Errors: RATEL_EINVAL (want 0, ttl_us outside
 * 1..RATEL_SLICE_TTL_MAX_US, a concurrent rule: its permits are leases a
 * request holds, not a rate to slice), RATEL_ECORRUPT, RATEL_EVERSION,
 * RATEL_ENOBUFS.
 */
RATEL_API int ratel_policy_slice(const ratel_policy_t *policy, uint8_t *state,
                                 size_t *state_len, size_t state_cap,
                                 int64_t now_us, uint64_t want, int64_t ttl_us,
                                 uint64_t *granted, int64_t *expires_us,
                                 ratel_decision_t *decision);

/*
 * ratel_policy_slice() for one of several holders that share the key
 * fairly: `total` (>= want; at most RATEL_DEMAND_HOLDERS x
 * RATEL_LIMIT_MAX) is the sum of the wants the holders that asked
 * recently have, this one's included (ratel_slice_demand_note()). It
 * finds `avail`, the most all rules admit now up to `total` (and a rule's
 * capacity), and charges ratel_slice_share(want, total, avail): `want`
 * when every holder's want fits, else this holder's part of what is left.
 * With total == want it is ratel_policy_slice(). Errors as that function,
 * and RATEL_EINVAL for total < want.
 */
RATEL_API int ratel_policy_slice_shared(const ratel_policy_t *policy,
                                        uint8_t *state, size_t *state_len,
                                        size_t state_cap, int64_t now_us,
                                        uint64_t want, uint64_t total,
                                        int64_t ttl_us, uint64_t *granted,
                                        int64_t *expires_us,
                                        ratel_decision_t *decision);

/*
 * A holder's fair share of `avail` permits when the holders that asked
 * recently want `total` in all and this one `want` (1 <= want <= total):
 * `want` when avail >= total, else max(1, floor(avail x want / total)),
 * never more than avail (0 when avail is 0). Pure arithmetic.
 */
RATEL_API uint64_t ratel_slice_share(uint64_t want, uint64_t total,
                                     uint64_t avail);

/* A demand record holds at most this many holders; its bytes are at most
   RATEL_DEMAND_MAX (docs/state-format.md, "Demand records"). */
#define RATEL_DEMAND_HOLDERS 16
#define RATEL_DEMAND_ENTRY_SIZE 20
#define RATEL_DEMAND_MAX (4 + RATEL_DEMAND_HOLDERS * RATEL_DEMAND_ENTRY_SIZE)

/*
 * Notes in a demand record - the holders that asked a key for slices
 * recently, kept beside it (docs/state-format.md) - that `holder`
 * (1..RATEL_HOLDER_MAX) wants `want` permits (1..RATEL_LIMIT_MAX) at
 * now_ms, for slices of ttl_ms (1..RATEL_SLICE_TTL_MAX_MS).
 *
 * `record` holds `*len` bytes (0: none yet) in a buffer of `cap` bytes
 * (RATEL_DEMAND_MAX always suffices). Entries asked at or before
 * now_ms - 2 x ttl_ms are dropped; the holder's own entry, if any, is
 * removed and its new one appended (the entries run from the longest
 * asked to the latest); past RATEL_DEMAND_HOLDERS the first is dropped.
 * On return *len is the new length and *total the sum of the live
 * entries' wants, this one's included. The record expires, as a key, at
 * now_ms + 2 x ttl_ms. Pure: no clock, no allocation.
 *
 * Errors: RATEL_EINVAL (an argument out of its range), RATEL_ECORRUPT
 * (bytes that are no demand record), RATEL_EVERSION (a newer version),
 * RATEL_ENOBUFS (cap too small).
 */
RATEL_API int ratel_slice_demand_note(uint8_t *record, size_t *len, size_t cap,
                                      int64_t now_ms, int64_t ttl_ms,
                                      uint64_t holder, uint64_t want,
                                      uint64_t *total);

/*
 * Gives the `unspent` permits of a slice ending at `expires_us` back
 * (ratel_policy_refund) while it is alive: `*returned` is `unspent`. From
 * its end on nothing is given back (`*returned` 0): its permits were
 * spent, or are stranded, never counted twice. `decision` reports the key
 * after it as a peek would. Errors as ratel_policy_slice.
 */
RATEL_API int ratel_policy_slice_return(const ratel_policy_t *policy,
                                        uint8_t *state, size_t *state_len,
                                        size_t state_cap, int64_t now_us,
                                        uint64_t unspent, int64_t expires_us,
                                        uint64_t *returned,
                                        ratel_decision_t *decision);

/* ---------------------------------------------------------------- state */

/* What one rule of a stored key looks like at some instant. */
typedef struct ratel_rule_status_s {
    ratel_rule_t rule;
    int64_t used;            /* permits counted against the rule now */
    int64_t remaining;       /* permits available now */
    int64_t reset_after_ms;  /* until this rule's state is empty */
    int64_t window_start_ms; /* fixed, approx: current window; else 0 */
    int64_t tat_us;          /* gcra: theoretical arrival time; else 0 */
    uint32_t runs;           /* sliding: (time, count) runs stored */
    uint32_t granularity_ms; /* sliding: new events rounded up to this */
    uint32_t last_lease;     /* concurrent: the last lease id handed out */
} ratel_rule_status_t;

/*
 * Checks that `state` is a well-formed blob. 0, RATEL_ECORRUPT or
 * RATEL_EVERSION.
 */
RATEL_API int ratel_state_validate(const uint8_t *state, size_t len);

/*
 * Describes each rule stored in `state` as seen at `now_us`. Writes at most
 * `max` entries to `out` and the number of rules to `*n`. An empty state
 * (len 0) has no rules.
 */
RATEL_API int ratel_state_inspect(const uint8_t *state, size_t len,
                                  int64_t now_us, ratel_rule_status_t *out,
                                  size_t max, size_t *n);

/* --------------------------------------------------------------- stores */

typedef struct ratel_store_s ratel_store_t;

typedef struct ratel_memory_options_s {
    size_t max_bytes; /* bound on all memory the store holds; 0: 64 MiB;
                         else 64 KiB..1 TiB (RATEL_EINVAL outside: the
                         range YAML's store.max_bytes has too) */
    unsigned shards;  /* lock shards, rounded up to a power of two; 0: 4096
                         (fewer if max_bytes gives a shard under 16 KiB) */
} ratel_memory_options_t;

/* What ratel_store_memory_open() does with a snapshot it cannot read
   (corrupt, truncated, another format or version, unreadable). */
typedef enum ratel_bad_snapshot_e {
    RATEL_BAD_SNAPSHOT_REFUSE = 0, /* fail: the program does not start */
    RATEL_BAD_SNAPSHOT_EMPTY       /* start empty; the file is kept beside,
                                      renamed PATH.bad */
} ratel_bad_snapshot_t;

/*
 * A memory store's snapshot (docs/memory-store.md, "Snapshots"): the file
 * its keys are kept in across restarts, read when the store is made and
 * written every interval_ms while keys change and when it is freed. The
 * store's `now_us` must then be the wall clock (ratel_clock_now_us), as
 * rateld's and captchad's is: expiries are kept as absolute times.
 */
typedef struct ratel_snapshot_options_s {
    const char *path;     /* the file; NULL or "": no snapshot */
    uint32_t interval_ms; /* 0: 1000; else 10..3600000 */
    int on_bad;           /* a ratel_bad_snapshot_t */
} ratel_snapshot_options_t;

typedef struct ratel_store_stats_s {
    uint64_t keys;        /* keys held now */
    uint64_t bytes;       /* memory held now, bookkeeping included */
    uint64_t max_bytes;   /* the configured bound */
    uint64_t hits;        /* requests that found their key */
    uint64_t misses;      /* requests that created their key */
    uint64_t expirations; /* idle keys removed at their reset time */
    uint64_t evictions;   /* live keys dropped (least recently used) to stay
                             within max_bytes */
    /* Redis store only (0 for the memory store): */
    uint64_t round_trips;     /* pipelines written and read (one per batch) */
    uint64_t commands;        /* commands those round trips carried */
    uint64_t cache_hits;      /* denials answered by the local deny cache */
    uint64_t errors;          /* requests Redis did not decide (down, timeout,
                                 protocol): the failure policy decided them */
    uint64_t fallback_open;   /* of those: allowed (`open`) */
    uint64_t fallback_closed; /* denied (`closed`) */
    uint64_t fallback_local;  /* decided by the embedded store (`local`) */
    uint64_t redirects;       /* cluster MOVED / ASK answers followed */
    uint64_t reconnects;      /* connections made after the first */
    uint64_t breaker_open;    /* 1 while Redis is considered down */
    /* Memory store with a snapshot only (0 otherwise): */
    uint64_t snapshot_writes;      /* snapshots written */
    uint64_t snapshot_errors;      /* writes that failed (ratel_store_errstr
                                      says why until one succeeds) */
    uint64_t snapshot_bytes;       /* size of the last one written */
    uint64_t snapshot_write_us;    /* how long writing it took */
    uint64_t snapshot_lock_max_us; /* the longest a shard was locked while
                                      it was copied */
} ratel_store_stats_t;

/*
 * Creates the embedded in-process store: thread-safe, sharded, bounded by
 * `options->max_bytes` (NULL: defaults). Frees with ratel_store_free().
 * Returns 0, RATEL_EINVAL (max_bytes outside 64 KiB..1 TiB) or
 * RATEL_ENOMEM.
 */
RATEL_API int ratel_store_memory_new(ratel_store_t **out,
                                     const ratel_memory_options_t *options);

/*
 * ratel_store_memory_new() with a snapshot (NULL: none), saying why it
 * failed: the snapshot's directory is checked (a file is made there and
 * removed) and the snapshot, if there is one, loaded, keys expired
 * meanwhile left out. A missing file is a first start (empty store). A
 * file that cannot be read whole fails with "snapshot PATH: problem" in
 * why (RATEL_ECORRUPT: truncated or corrupt; RATEL_EVERSION: another
 * format or version; RATEL_EIO: unreadable; RATEL_EINVAL: bad options or
 * directory), unless snapshot->on_bad is RATEL_BAD_SNAPSHOT_EMPTY:
 * then it returns 0 with an empty store and the problem in why, for the
 * caller to log ("" otherwise). Then a thread writes the snapshot every
 * interval while keys change; ratel_store_free() writes a last one.
 */
RATEL_API int ratel_store_memory_open(ratel_store_t **out,
                                      const ratel_memory_options_t *options,
                                      const ratel_snapshot_options_t *snapshot,
                                      char *why, size_t whylen);

/*
 * Writes the memory store's snapshot now, when keys changed since the last
 * one (a program stopping calls it to log a failure; ratel_store_free()
 * writes one too, silently). Returns 0 (also for a store without a
 * snapshot), RATEL_EINVAL (not a memory store) or RATEL_EIO with
 * "snapshot PATH: reason" in why.
 */
RATEL_API int ratel_store_memory_snapshot(ratel_store_t *store, char *why,
                                          size_t whylen);

/* What a Redis store does when Redis cannot decide (down, timeout). */
typedef enum ratel_failure_e {
    RATEL_FAILURE_DEFAULT = 0, /* `local` */
    RATEL_FAILURE_OPEN,        /* allow, counted */
    RATEL_FAILURE_CLOSED,      /* deny, counted; retry after the breaker */
    RATEL_FAILURE_LOCAL        /* decide with an embedded memory store until
                                  Redis answers again */
} ratel_failure_t;

/*
 * How a Redis store runs the core inside Redis (docs/deployment.md), the
 * fastest way each server allows unless told otherwise. Values are kept
 * across versions (FUNCTION came last).
 */
typedef enum ratel_redis_mode_e {
    RATEL_REDIS_AUTO = 0, /* the module where loaded; else the Functions
                             library (loaded, or replaced when of another
                             version, by FUNCTION LOAD REPLACE); else, where
                             FUNCTION LOAD is refused, the EVAL script */
    RATEL_REDIS_MODULE,   /* RATEL.* commands only (error if not loaded) */
    RATEL_REDIS_LUA,      /* the EVAL script via EVALSHA, even if the module
                             or the library is there */
    RATEL_REDIS_FUNCTION  /* the library only (FCALL ratel_*): error where
                             it is absent and FUNCTION LOAD is refused */
} ratel_redis_mode_t;

/*
 * Options of a Redis store. Zero means "the URL's value, else the default".
 * The URL (docs/deployment.md) is `redis://[[user]:password@]host[:port]
 * [,host[:port]...][/db][?name=value&...]` for one primary (several
 * addresses: the store follows a failover to whichever is primary),
 * `redis+cluster://host:port[,host:port...]` for Redis Cluster, or
 * `redis+sentinel://host:port[,host:port...]/master_name` for the primary
 * that Sentinels name; `rediss://`, `rediss+cluster://` and
 * `rediss+sentinel://` are the same over TLS. Its query may set
 * connect_timeout_ms, timeout_ms, pool, on_failure (open|closed|local),
 * mode (auto|module|function|lua), deny_cache (entries), the tls_ and
 * sentinel_ settings below (by the same names) and, with Sentinel, db.
 */
typedef struct ratel_redis_options_s {
    const char *url;        /* required */
    int connect_timeout_ms; /* 1..60,000; 0: 250 ms */
    int command_timeout_ms; /* 1..60,000; 0: 250 ms. Each command's
                               deadline: one not answered by then fails
                               (and its connection with it) and the
                               failure policy decides */
    unsigned pool_size;     /* connections per node, 1..256; 0: 4 */
    ratel_failure_t on_failure;
    ratel_redis_mode_t mode;
    long deny_cache_entries;      /* 0: 16,384 (288 bytes each); negative:
                                     no deny cache; at most 1,048,576
                                     (more: RATEL_EINVAL, as the URL's
                                     deny_cache query refuses it) */
    int64_t deny_cache_max_ms;    /* longest a denial is answered locally
                                     (another process's refund is not seen);
                                     0: 10,000 ms */
    int64_t breaker_ms;           /* after a failure, Redis is not tried again
                                     for this long (caller's time), doubled
                                     after each failed probe up to 8x;
                                     0: 1,000 */
    ratel_memory_options_t local; /* the `local` fallback store's bounds */
    int client_time;              /* 1: send the caller's now_us as AT (tests,
                                     replays); 0: Redis's own clock decides */
    int lazy_connect; /* 1: start even if Redis is unreachable now */
    /* TLS, for a rediss scheme only (an error with a plain one). Strings
       are the caller's and read while ratel_store_redis_new runs; NULL:
       the URL's query value, else the default. */
    const char *tls_ca_file;     /* PEM file of the CAs that verify the
                                    server's certificate; default: the
                                    system's CAs */
    const char *tls_cert_file;   /* PEM client certificate, for servers
                                    with tls-auth-clients yes; needs
                                    tls_key_file */
    const char *tls_key_file;    /* the client certificate's private key */
    const char *tls_server_name; /* the name sent as SNI and checked in the
                                    server's certificate; default: the host
                                    of the address connected to */
    int tls_insecure;            /* 1: do not verify the server's certificate
                                    (anyone on the path can read and change
                                    the traffic); logs a warning at start */
    /* Sentinel (redis+sentinel://) only: the Sentinels' own credentials
       when they differ from the data nodes' (the URL's user and password).
       NULL: the URL's query value, else none. */
    const char *sentinel_username;
    const char *sentinel_password;
    /* Replicas that must acknowledge each write (WAIT after it) before its
       answer counts, 0..16; 0: the URL's wait_replicas, else none. A write
       not acknowledged within half of command_timeout_ms fails its node
       (the failure policy decides; a failover's new primary is asked), so
       a permit an old primary grants after a promotion is never answered
       as granted (docs/deployment.md, "Failover"). */
    unsigned wait_replicas;
} ratel_redis_options_t;

/*
 * Creates a store that keeps every key's state in Redis (docs/deployment.md):
 * pooled connections, requests of concurrent callers pipelined together,
 * the module, the Functions library or the EVAL script, cluster routing, a
 * failure policy and a local cache of denials. Connects before returning
 * (unless lazy_connect) so that a wrong address, password or a server that
 * is not Redis is reported here. On error returns RATEL_EINVAL (bad options
 * or URL), RATEL_EIO (unreachable), RATEL_EPROTO (not Redis, refused the
 * password, module or library required but absent) or RATEL_ENOMEM, with a
 * message in errbuf.
 *
 * `now_us` given to the store's calls drives only what is decided in this
 * process (the deny cache, the breaker, the `local` fallback); Redis decides
 * with its own clock unless client_time is set.
 */
RATEL_API int ratel_store_redis_new(ratel_store_t **out,
                                    const ratel_redis_options_t *options,
                                    char *errbuf, size_t errlen);

/*
 * ratel_policy_acquire() on the state the store holds for `key` (any bytes,
 * `keylen` long; the empty key is a key; the memory store refuses keys over
 * 4,096 bytes with RATEL_ERANGE). A key holds the state of one policy: give
 * each policy its own keys (e.g. prefix the key with the policy's name).
 * Denied and peeked requests for unknown keys store nothing.
 */
RATEL_API int ratel_store_acquire(ratel_store_t *store, const char *key,
                                  size_t keylen, const ratel_policy_t *policy,
                                  int64_t now_us,
                                  const ratel_request_t *request,
                                  ratel_decision_t *decision);

/*
 * ratel_policy_refund() on the state held for `key`. A Redis store with the
 * `local` failure policy refunds its fallback store too; when Redis did not
 * take the refund it returns RATEL_EIO (ratel_store_errstr() says why).
 */
RATEL_API int ratel_store_refund(ratel_store_t *store, const char *key,
                                 size_t keylen, const ratel_policy_t *policy,
                                 int64_t now_us, uint64_t cost,
                                 ratel_decision_t *decision);

/*
 * ratel_policy_release() on the state held for `key`: releases (or with
 * RATEL_RENEW extends) the lease an acquire under `policy` took. `*held`
 * is 0 when the lease is unknown or expired. The Redis store sends it as
 * RATEL.RELEASE, FCALL ratel_release or the script's RELEASE; when Redis
 * did not take it, it returns RATEL_EIO (ratel_store_errstr() says why),
 * and with the `local` failure policy its fallback store releases too.
 * RATEL_EINVAL, checked before any backend is asked: lease 0, unknown
 * flags, a policy without a concurrent rule.
 */
RATEL_API int ratel_store_release(ratel_store_t *store, const char *key,
                                  size_t keylen, const ratel_policy_t *policy,
                                  int64_t now_us, uint32_t lease,
                                  unsigned flags, int *held,
                                  ratel_decision_t *decision);

/* Forgets `key`: its next request starts from full. */
RATEL_API int ratel_store_reset(ratel_store_t *store, const char *key,
                                size_t keylen);

/* ratel_state_inspect() on the state held for `key` (n = 0 if none). */
RATEL_API int ratel_store_inspect(ratel_store_t *store, const char *key,
                                  size_t keylen, int64_t now_us,
                                  ratel_rule_status_t *out, size_t max,
                                  size_t *n);

RATEL_API void ratel_store_stats(ratel_store_t *store,
                                 ratel_store_stats_t *out);

/* Most items one all-or-nothing group of a batch may hold. */
#define RATEL_GROUP_MAX 16

/* One request of a batch: inputs, then what was decided. */
typedef struct ratel_batch_item_s {
    const char *key;
    size_t keylen;
    const ratel_policy_t *policy;
    ratel_request_t request;
    uint32_t group;            /* 0: on its own; else all-or-nothing with
                                  the consecutive items of the same group */
    ratel_decision_t decision; /* out */
    int rc;                    /* out: 0 or a RATEL_E* code for this item */
} ratel_batch_item_t;

/*
 * ratel_store_acquire() for `n` items at once, all at `now_us`; a Redis
 * store sends them in one pipelined round trip per node.
 *
 * Items with group 0 are independent. Consecutive items with the same
 * non-zero group (2..RATEL_GROUP_MAX of them; several keys and policies,
 * e.g. the policies of one gateway route) are all-or-nothing: when one is
 * denied or fails, none is charged. Each reports its own decision (a
 * member that alone would have been admitted says allowed; it was not
 * charged). The memory store decides a group atomically (its shards
 * locked together: nothing else sees a partial charge); the Redis store
 * charges the group with the rest of the batch and, when a member is
 * denied, gives the others back in a second round trip (another client
 * may see the charge in between; docs/deployment.md).
 *
 * Returns 0 when every item was looked at (see each item's rc),
 * RATEL_EINVAL for bad arguments (a group longer than RATEL_GROUP_MAX, or
 * with a bad member, marks all its items RATEL_EINVAL).
 */
RATEL_API int ratel_store_acquire_batch(ratel_store_t *store,
                                        ratel_batch_item_t *items, size_t n,
                                        int64_t now_us);

/*
 * Copies into buf a description of the store's last failure (a Redis
 * store's address and reason: "127.0.0.1:6379: Connection refused", an
 * error reply), "" when there was none or for a memory store. The text is
 * the store's latest, shared by all threads.
 */
RATEL_API void ratel_store_errstr(ratel_store_t *store, char *buf, size_t len);

/*
 * Whether the store can decide with its own state now: 0 for a memory
 * store, 0 for a Redis store whose every known node answered PING within
 * the timeout, else RATEL_EIO / RATEL_EPROTO with the reason in errbuf.
 */
RATEL_API int ratel_store_ping(ratel_store_t *store, char *errbuf,
                               size_t errlen);

/*
 * A store's health as this process last saw it, learnt without any I/O.
 *
 * A Redis store is down while a server it sends requests to is down: from
 * the round trip that failed (refused, reset, timed out, not Redis) and
 * opened that server's breaker, or a ratel_store_ping() that failed, until
 * a round trip or a ping on that server succeeds. Requests are what show a
 * failure or a recovery; without traffic only ratel_store_ping() does, so
 * a program that needs a right answer while idle (a readiness probe) pings
 * now and then from a thread of its own (rateld pings once a second). A
 * new store counts as up until a failure is seen. A memory store is
 * always up; one with a snapshot (ratel_store_memory_open()) has a
 * `warning` from a snapshot write that fails (its reason) until one
 * succeeds, and tells its watcher when the warning begins and ends.
 */
typedef struct ratel_store_health_s {
    int up;                 /* 1: the store decides with its own state */
    int64_t since_us;       /* when the store entered this state (wall clock,
                               us since the Unix epoch); 0: never changed */
    uint64_t transitions;   /* changes so far, up->down and down->up: a reader
                               that saw a smaller count missed the difference */
    int64_t last_outage_ms; /* how long the last outage that ended lasted
                               (0: none has ended) */
    char cause[256];        /* down: the latest failure, e.g. "127.0.0.1:6379:
                               Connection refused"; up: what the last outage's
                               was ("" if none) */
    /* What fails without stopping decisions, e.g. one Sentinel of three
       that does not answer: "" when nothing does. `warnings` counts the
       times a warning began. */
    uint64_t warnings;
    char warning[256];
} ratel_store_health_t;

/*
 * Copies the store's health into *out. Never blocks on the network: it
 * takes a short lock, so a readiness endpoint may call it on an event-loop
 * thread. Returns 0, or RATEL_EINVAL (out zeroed) when store or out is
 * NULL.
 */
RATEL_API int ratel_store_health(ratel_store_t *store,
                                 ratel_store_health_t *out);

/*
 * Told that a store's health changed; `ud` is what was registered. It runs
 * in the thread that noticed the change, inside a store call but outside
 * the store's locks: it must return quickly and must not call the store,
 * but for ratel_store_health(). One call may stand for several changes:
 * read ratel_store_health() (its `transitions`) to know what happened.
 */
typedef void (*ratel_store_health_fn)(void *ud);

/*
 * Registers fn(ud) to be called after every change of the store's health
 * (fn NULL: none); it replaces the previous one. A call that a store call
 * on another thread already started may still run the previous function:
 * register before sharing the store between threads, and clear it only
 * when no other thread uses the store. `ud` is the caller's and must live
 * until then. A memory store never calls it. Returns 0, or RATEL_EINVAL
 * for a NULL store.
 */
RATEL_API int ratel_store_watch_health(ratel_store_t *store,
                                       ratel_store_health_fn fn, void *ud);

/* Frees the store and everything it holds. NULL is a no-op. */
RATEL_API void ratel_store_free(ratel_store_t *store);

/* ------------------------------------------------------ leased keys */

/*
 * How a host takes and spends slices of a hot key's permits on a Redis
 * store (docs/leases.md): settings in, counters out. A request whose
 * `lease` points here may be answered from the slice its key holds,
 * without a round trip; the store takes the next slice ahead of need
 * (RATEL.SLICE), sized by the key's local rate, and gives unspent permits
 * back (RATEL.UNSLICE) when a slice ends and when the store is freed.
 * Zero settings take the defaults. PEEKs and reservations are decided by
 * the store, as are requests while no slice is held (exact, one round
 * trip each); in a group (several policies all-or-nothing) a leased
 * member refused by another gets its permit back into its slice.
 *
 * The counters are the store's to write (atomically); read them with
 * __atomic_load_n. One
 * ratel_lease_t per policy gives per-policy counts; it must stay valid
 * until the store is freed (slices in flight refer to it).
 */
struct ratel_lease_s {
    /* Settings (0: the default): */
    int64_t ttl_ms;     /* a slice's lifetime, 1..3,600,000; 250 */
    uint64_t max_slice; /* the most permits one slice asks for; 50 */
    uint64_t min_slice; /* the fewest it asks for (<= max_slice); 1 */
    int64_t margin_ms;  /* local spending stops this long before the
                           slice's end (clock rate error); 1 + ttl/100 */
    uint64_t hosts;     /* hosts sharing the key, for the bound; 1 */
    /* Counters (the store's): */
    uint64_t calls;    /* RATEL.SLICE calls made */
    uint64_t leased;   /* permits those calls granted */
    uint64_t spent;    /* permits admitted from slices */
    uint64_t returned; /* permits given back (RATEL.UNSLICE) */
    uint64_t stranded; /* permits of slices that ended unspent and
                          could not be given back */
    uint64_t local;    /* decisions answered from slices (admitted or
                          denied until the store's retry time) */
    uint64_t remote;   /* decisions of leased requests the store made */
};

/* The defaults of a ratel_lease_t's zero settings. */
#define RATEL_LEASE_TTL_MS 250
#define RATEL_LEASE_MAX_SLICE 50

/*
 * The most a leased policy can admit over its limit in any window of one
 * of its rules (docs/leases.md derives it), for `lease` with `hosts`
 * hosts: out[i] for rule i (0 for fixed and approx windows: a slice never
 * outlives its window). Writes a line such as "overshoot at most 200 over
 * 10000/1s in any window, with up to 4 hosts" into text (len bytes).
 * Returns 0, or RATEL_EINVAL for settings out of range (with why in text).
 */
RATEL_API int ratel_lease_bound(const ratel_policy_t *policy,
                                const ratel_lease_t *lease,
                                uint64_t out[RATEL_MAX_RULES], char *text,
                                size_t len);

/* ------------------------------------------------- asynchronous calls */

struct event_base;
typedef struct ratel_async_s ratel_async_t;

/*
 * A store's calls on a libevent loop (an event_base: rateld, captchad, any
 * program built on libevent). Each call completes through its callback,
 * on the loop's thread, exactly once and never inside the call that
 * started it. On a Redis store the commands a loop turn issues leave in
 * one write per connection (automatic pipelining: one thread keeps many
 * decisions in flight), and nothing waits for Redis: a hung server delays
 * only the calls that need it, each answered at its own deadline
 * (timeout_ms) by the failure policy, with the same decisions, sources and
 * counters as the synchronous calls. Other stores decide at once and tell
 * at the loop's next turn.
 *
 * One ratel_async_t serves one loop; several may share a store (each
 * keeps its own connections). libevent writes to sockets with writev()
 * and OpenSSL with write(): a program using these calls ignores SIGPIPE
 * (signal(SIGPIPE, SIG_IGN)), as servers built on libevent do. Returns 0,
 * RATEL_EINVAL or RATEL_ENOMEM (with a message in errbuf).
 */
RATEL_API int ratel_async_new(ratel_async_t **out, ratel_store_t *store,
                              struct event_base *base, char *errbuf,
                              size_t errlen);

/* Frees it on its loop's thread, before the store: calls still pending
   are told first (RATEL_EIO, or the failure policy's decision). NULL is a
   no-op. */
RATEL_API void ratel_async_free(ratel_async_t *async);

/* A decision, or why there is none (rc != 0: `decision` is NULL). */
typedef void (*ratel_decision_fn)(void *ud, int rc,
                                  const ratel_decision_t *decision);
/* A release's answer: `held` as ratel_store_release() sets it. */
typedef void (*ratel_release_fn)(void *ud, int rc, int held,
                                 const ratel_decision_t *decision);
/* A batch is decided: each item's rc and decision are set. */
typedef void (*ratel_batch_fn)(void *ud, ratel_batch_item_t *items, size_t n);

/*
 * ratel_store_acquire() on the loop. `key` and `policy` must stay valid
 * until `fn` runs (`request` is copied). Returns 0 (then `fn` follows) or,
 * without calling `fn`, RATEL_EINVAL for bad arguments (as the synchronous
 * call checks them) or RATEL_ENOMEM.
 */
RATEL_API int ratel_async_acquire(ratel_async_t *async, const char *key,
                                  size_t keylen, const ratel_policy_t *policy,
                                  int64_t now_us,
                                  const ratel_request_t *request,
                                  ratel_decision_fn fn, void *ud);

/* ratel_async_acquire() with RATEL_PEEK: decides, charges nothing. */
RATEL_API int ratel_async_peek(ratel_async_t *async, const char *key,
                               size_t keylen, const ratel_policy_t *policy,
                               int64_t now_us, const ratel_request_t *request,
                               ratel_decision_fn fn, void *ud);

/* ratel_store_refund() on the loop (as ratel_async_acquire()). */
RATEL_API int ratel_async_refund(ratel_async_t *async, const char *key,
                                 size_t keylen, const ratel_policy_t *policy,
                                 int64_t now_us, uint64_t cost,
                                 ratel_decision_fn fn, void *ud);

/* ratel_store_release() on the loop (as ratel_async_acquire()). */
RATEL_API int ratel_async_release(ratel_async_t *async, const char *key,
                                  size_t keylen, const ratel_policy_t *policy,
                                  int64_t now_us, uint32_t lease,
                                  unsigned flags, ratel_release_fn fn,
                                  void *ud);

/* A call that answers only whether it worked (0 or a RATEL_E* code). */
typedef void (*ratel_done_fn)(void *ud, int rc);

/* ratel_store_reset() on the loop: `key` must stay valid until `fn`. */
RATEL_API int ratel_async_reset(ratel_async_t *async, const char *key,
                                size_t keylen, ratel_done_fn fn, void *ud);

/*
 * ratel_store_acquire_batch() on the loop: `items` (and what they point
 * to) must stay valid until `fn` runs. Groups are all-or-nothing as in the
 * synchronous call.
 */
RATEL_API int ratel_async_acquire_batch(ratel_async_t *async,
                                        ratel_batch_item_t *items, size_t n,
                                        int64_t now_us, ratel_batch_fn fn,
                                        void *ud);

/* --------------------------------------------------------------- clocks */

/*
 * Wall-clock microseconds since the Unix epoch (CLOCK_REALTIME). For
 * programs; the core never calls it.
 */
RATEL_API int64_t ratel_clock_now_us(void);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_H */
