/*
 * svg.c - drawing a chart_t as one self-contained SVG document.
 *
 * Layout, top to bottom: a title naming the rules, a subtitle (trace,
 * requests, keys, span, bucket width), a legend, then one panel per
 * algorithm and a panel of distinct keys on a shared time axis, then the
 * keys denied most. An algorithm's panel has strips:
 *
 *   bars   requests per time bucket, green admitted under red rejected.
 *          Every variant sees every request, so the bar heights are the
 *          same in all panels and only the split differs; one scale.
 *   lines  one strip per rule: the most permits any one key had admitted
 *          within the trailing window of that rule (a step line, drawn
 *          where admissions happened), against the rule's limit as a
 *          dashed line. Stretches above the limit are drawn again in
 *          orange. One scale per rule for all panels, reaching at least
 *          2 x limit: a fixed window's boundary burst shows as the line
 *          climbing to the top of its strip.
 *
 * The distinct-keys panel shows how many keys sent requests in each time
 * bucket (an area under a step line): traffic spread over ever new keys,
 * such as an SMS pump rotating phone numbers, rises there while each key's
 * own line stays low. The last panel lists the keys the given policy
 * denied most, with their denied and allowed requests as bars.
 *
 * Only generic font families, no scripts, no external references: the
 * file renders the same in a browser, an image viewer or rsvg-convert.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SVG_WIDTH 960
#define LEFT 78.0
#define RIGHT 24.0
#define PLOT_W (SVG_WIDTH - LEFT - RIGHT)
#define TOP 112.0   /* first panel */
#define HEAD_H 24.0 /* panel header line */
#define BARS_H 96.0 /* bar strip */
#define GAP_H 10.0  /* between the strips */
#define LINE_H 64.0 /* peak line strip, one per rule */
#define PANEL_GAP 26.0
#define DISTINCT_H 80.0 /* the distinct keys' strip */
#define FOOT_H 110.0    /* time axis and notes below the panels */
#define ROW_H 18.0      /* a row of the keys denied most */
#define KEY_CHARS 40    /* longest key shown there, in characters */

#define GREEN "#2e9e4f"
#define RED "#d6403a"
#define BLUE "#2457c5"
#define ORANGE "#f08a00"
#define GRID "#e3e3e3"
#define INK "#222222"
#define MUTED "#666666"
#define AREA "#cfdcf5"

/* Tick steps of the time axis, in ms. */
static const int64_t tick_steps[] = {
    1,         2,          5,         10,       20,       50,       100,
    200,       500,        1000,      2000,     5000,     10000,    15000,
    30000,     60000,      120000,    300000,   600000,   900000,   1800000,
    3600000,   7200000,    10800000,  21600000, 43200000, 86400000, 172800000,
    604800000, 1209600000, 2592000000};

/* Traces whose first t_ms is past this (about 115 days) use Unix time. */
#define UNIX_TIME_FROM_MS 10000000000LL

typedef struct view_s {
    const chart_t *chart;
    int64_t width_ms; /* displayed bucket */
    int64_t start_ms; /* left end of the axis: a multiple of width_ms */
    size_t n;         /* displayed buckets */
    chart_bucket_t *buckets[CHART_NALGOS];
    uint64_t bar_max;                 /* top of the bar scale */
    double line_max[RATEL_MAX_RULES]; /* top of each rule's line scale */
    const uint64_t *distinct;         /* per displayed bucket; NULL: not
                                         counted at this width */
    uint64_t distinct_max;            /* top of the distinct keys' scale */
    int unix_time;                    /* label ticks as UTC clock times */
    /* Layout, in px from the top. */
    double panel_h;    /* one algorithm's panel */
    double distinct_y; /* the distinct keys' panel */
    double axis_y;     /* the time axis */
    double denied_y;   /* the keys denied most */
    double height;
} view_t;

/* Writes `s` with XML's special characters escaped; other bytes outside
   printable ASCII become '?', so the document stays valid UTF-8. Past
   `max` characters the rest is "...". */
static void put_escaped_max(FILE *out, const char *s, size_t max)
{
    for (size_t n = 0; *s; s++, n++) {
        if (n == max) {
            fputs("...", out);
            return;
        }
        switch (*s) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        default:
            fputc((*s >= 0x20 && *s < 0x7f) ? *s : '?', out);
        }
    }
}

static void put_escaped(FILE *out, const char *s)
{
    put_escaped_max(out, s, SIZE_MAX);
}

/* A duration as "5 s", "250 ms", "1.5 min", "2 h", "1 d". */
static void format_duration(int64_t ms, char *buf, size_t len)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"},
                 {3600000, "h"},
                 {60000, "min"},
                 {1000, "s"},
                 {1, "ms"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (ms >= units[i].ms || units[i].ms == 1) {
            snprintf(buf, len, "%.4g %s", (double)ms / (double)units[i].ms,
                     units[i].unit);
            return;
        }
    }
}

/* An axis label for a count: "40", "2500", "25k", "1.5M". */
static void format_count(uint64_t v, char *buf, size_t len)
{
    if (v >= 1000000)
        snprintf(buf, len, "%.3gM", (double)v / 1e6);
    else if (v >= 10000)
        snprintf(buf, len, "%.3gk", (double)v / 1e3);
    else
        snprintf(buf, len, "%" PRIu64, v);
}

/* The policy's rules as "1/60s + 10/1h". */
static void format_rules(const ratel_policy_t *p, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (uint32_t i = 0; i < p->nrules && used < len; i++) {
        char rule[64];
        ratel_rule_format(&p->rules[i], rule, sizeof rule);
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " + " : "",
                                 rule);
    }
}

static int same_policy(const ratel_policy_t *a, const ratel_policy_t *b)
{
    if (a->nrules != b->nrules)
        return 0;
    for (uint32_t i = 0; i < a->nrules; i++)
        if (a->rules[i].algo != b->rules[i].algo ||
            a->rules[i].limit != b->rules[i].limit ||
            a->rules[i].period_ms != b->rules[i].period_ms ||
            a->rules[i].burst != b->rules[i].burst)
            return 0;
    return 1;
}

/* 1, 2 or 5 times a power of ten, at least v (and at least 1). */
static uint64_t nice_ceil(uint64_t v)
{
    for (uint64_t p = 1;; p *= 10) {
        if (v <= p)
            return p;
        if (v <= 2 * p)
            return 2 * p;
        if (v <= 5 * p)
            return 5 * p;
        if (p > UINT64_MAX / 100)
            return v;
    }
}

/*
 * Merges the chart's internal buckets into the displayed ones of `v` and
 * sets the scales of the bars and of each rule's lines. Returns 0 or -1
 * (memory).
 */
static int merge_buckets(view_t *v, const chart_t *c)
{
    for (int a = 0; a < CHART_NALGOS; a++) {
        v->buckets[a] = calloc(v->n, sizeof(chart_bucket_t));
        if (!v->buckets[a])
            return -1;
        for (size_t i = 0; i < c->nbuckets; i++) {
            const chart_bucket_t *from = &c->buckets[a][i];
            int64_t t = (c->base + (int64_t)i) * c->width_ms;
            chart_bucket_t *to =
                &v->buckets[a][(t - v->start_ms) / v->width_ms];
            to->admitted += from->admitted;
            to->rejected += from->rejected;
            for (int r = 0; r < RATEL_MAX_RULES; r++)
                if (from->peak[r] > to->peak[r])
                    to->peak[r] = from->peak[r];
        }
    }
    for (size_t i = 0; i < v->n; i++) {
        /* Totals per bucket are the same in every panel. */
        uint64_t total = v->buckets[0][i].admitted + v->buckets[0][i].rejected;
        if (total > v->bar_max)
            v->bar_max = total;
    }
    v->bar_max = nice_ceil(v->bar_max);
    for (uint32_t r = 0; r < c->policy.nrules; r++) {
        v->line_max[r] = 2.0 * c->policy.rules[r].limit;
        for (int a = 0; a < CHART_NALGOS; a++)
            if ((double)c->peak[a][r] > v->line_max[r])
                v->line_max[r] = (double)c->peak[a][r];
        v->line_max[r] *= 1.08; /* headroom: a line at the top stays visible */
    }
    return 0;
}

/* Where each part goes, top to bottom. */
static void make_layout(view_t *v)
{
    size_t rows = v->chart->nmost_denied ? v->chart->nmost_denied : 1;

    v->panel_h = HEAD_H + BARS_H + v->chart->policy.nrules * (GAP_H + LINE_H) +
                 PANEL_GAP;
    v->distinct_y = TOP + CHART_NALGOS * v->panel_h;
    v->axis_y = v->distinct_y + HEAD_H + DISTINCT_H + 4;
    v->denied_y = v->axis_y + FOOT_H;
    v->height = v->denied_y + HEAD_H + 8 + (double)rows * ROW_H + 24;
}

/*
 * Chooses the displayed bucket width: the smallest nameable width that is
 * a multiple of the internal one and shows at most CHART_DISPLAY_MAX
 * buckets, then merges the internal counters into it. Returns 0 or -1
 * (memory).
 */
static int make_view(view_t *v, const chart_t *c)
{
    int64_t first = c->base * c->width_ms; /* start of internal bucket 0 */
    int64_t end =
        (c->base + (int64_t)(c->nbuckets ? c->nbuckets : 1)) * c->width_ms;
    int64_t d = 0;

    memset(v, 0, sizeof *v);
    v->chart = c;
    for (int i = 0; i < CHART_NWIDTHS; i++) {
        int64_t w = chart_display_widths[i];
        if (w % c->width_ms == 0 &&
            (end + w - 1) / w - first / w <= CHART_DISPLAY_MAX) {
            d = w;
            v->distinct = c->distinct[i];
            break;
        }
    }
    if (d == 0) { /* beyond every nameable width: merge evenly */
        int64_t k =
            ((int64_t)c->nbuckets + CHART_DISPLAY_MAX - 1) / CHART_DISPLAY_MAX;
        d = c->width_ms * (k ? k : 1);
    }
    v->width_ms = d;
    v->start_ms = first / d * d;
    v->n = (size_t)((end + d - 1) / d - first / d);
    if (merge_buckets(v, c) < 0)
        return -1;
    for (size_t i = 0; v->distinct && i < v->n; i++)
        if (v->distinct[i] > v->distinct_max)
            v->distinct_max = v->distinct[i];
    v->distinct_max = nice_ceil(v->distinct_max);
    v->unix_time = c->origin_ms >= UNIX_TIME_FROM_MS;
    make_layout(v);
    return 0;
}

static void free_view(view_t *v)
{
    for (int a = 0; a < CHART_NALGOS; a++)
        free(v->buckets[a]);
}

static double x_of_bucket(const view_t *v, double i)
{
    return LEFT + PLOT_W * i / (double)v->n;
}

static double x_of_time(const view_t *v, int64_t t_ms)
{
    double span = (double)v->n * (double)v->width_ms;
    return LEFT + PLOT_W * (double)(t_ms - v->start_ms) / span;
}

/* The tick step: the smallest that puts at most 12 ticks on the axis. */
static int64_t tick_step(const view_t *v)
{
    int64_t span = (int64_t)v->n * v->width_ms;
    for (size_t i = 0; i < sizeof tick_steps / sizeof *tick_steps; i++)
        if (span / tick_steps[i] <= 12)
            return tick_steps[i];
    return span / 12 + 1;
}

/*
 * A tick's label. Relative traces: the time in the step's unit ("90 s",
 * "3 min"). Unix-time traces: the UTC clock ("14:05", "14:05:30",
 * "14:05:30.250").
 */
static void tick_label(const view_t *v, int64_t t_ms, int64_t step, char *buf,
                       size_t len)
{
    if (v->unix_time) {
        time_t secs = (time_t)(t_ms / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        if (step % 60000 == 0)
            snprintf(buf, len, "%02d:%02d", tm.tm_hour, tm.tm_min);
        else if (step % 1000 == 0)
            snprintf(buf, len, "%02d:%02d:%02d", tm.tm_hour, tm.tm_min,
                     tm.tm_sec);
        else
            snprintf(buf, len, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(t_ms % 1000));
        return;
    }
    if (t_ms == 0) {
        snprintf(buf, len, "0");
        return;
    }
    if (step < 1000)
        snprintf(buf, len, "%" PRId64 " ms", t_ms);
    else if (step < 60000)
        snprintf(buf, len, "%.4g s", (double)t_ms / 1e3);
    else if (step < 3600000)
        snprintf(buf, len, "%.4g min", (double)t_ms / 6e4);
    else if (step < 86400000)
        snprintf(buf, len, "%.4g h", (double)t_ms / 3.6e6);
    else
        snprintf(buf, len, "%.4g d", (double)t_ms / 8.64e7);
}

/* The first tick on the axis: a multiple of the step. */
static int64_t first_tick(const view_t *v, int64_t step)
{
    return (v->start_ms + step - 1) / step * step;
}

static void put_header(FILE *out, const view_t *v, const char *source)
{
    const chart_t *c = v->chart;
    char rules[512], span[32], width[32], first[64] = "";
    int64_t height = (int64_t)v->height;

    format_rules(&c->policy, rules, sizeof rules);
    format_duration(c->started ? c->end_ms - c->origin_ms : 0, span,
                    sizeof span);
    format_duration(v->width_ms, width, sizeof width);
    if (v->unix_time) {
        time_t secs = (time_t)(c->origin_ms / 1000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        strftime(first, sizeof first, ", from %Y-%m-%d %H:%M:%S UTC", &tm);
    }

    fprintf(out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
            "height=\"%" PRId64 "\" viewBox=\"0 0 %d %" PRId64 "\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            SVG_WIDTH, height, SVG_WIDTH, height);
    fprintf(out, "<title>ratel replay: ");
    put_escaped(out, rules);
    fprintf(out, " under each algorithm</title>\n"
                 "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(out,
            "<text x=\"%.1f\" y=\"30\" font-size=\"19\" font-weight=\"bold\" "
            "fill=\"" INK "\">What each algorithm would have done with ",
            LEFT);
    put_escaped(out, rules);
    fprintf(out, "</text>\n<text x=\"%.1f\" y=\"52\" fill=\"" MUTED "\">",
            LEFT);
    put_escaped(out, source);
    fprintf(out,
            ": %" PRIu64 " request%s from %" PRIu64 " key%s over %s%s. "
            "One bar per %s.</text>\n",
            c->requests, c->requests == 1 ? "" : "s", c->keys,
            c->keys == 1 ? "" : "s", span, first, width);

    /* Legend: each entry placed after the previous one's estimated text
       width (about 7 px per character at 12 px sans-serif). */
    {
        char text[5][96];
        double x = 0;
        snprintf(text[0], sizeof text[0], "admitted");
        snprintf(text[1], sizeof text[1], "rejected");
        snprintf(text[2], sizeof text[2],
                 "most permits one key had in a rule's trailing period");
        snprintf(text[3], sizeof text[3], "the rule's limit");
        snprintf(text[4], sizeof text[4], "over the limit");
        fprintf(out, "<g transform=\"translate(%.1f,68)\">\n", LEFT);
        for (int i = 0; i < 5; i++) {
            if (i < 2)
                fprintf(out,
                        "<rect x=\"%.1f\" y=\"0\" width=\"12\" "
                        "height=\"12\" fill=\"%s\"/>",
                        x, i ? RED : GREEN);
            else
                fprintf(out,
                        "<path d=\"M%.1f 6 h22\" stroke=\"%s\" "
                        "stroke-width=\"%s\"%s/>",
                        x,
                        i == 2   ? BLUE
                        : i == 3 ? INK
                                 : ORANGE,
                        i == 2   ? "2"
                        : i == 3 ? "1"
                                 : "3",
                        i == 3 ? " stroke-dasharray=\"5 3\"" : "");
            x += i < 2 ? 17 : 27;
            fprintf(out, "<text x=\"%.1f\" y=\"10.5\">%s</text>\n", x, text[i]);
            x += 7.0 * (double)strlen(text[i]) + 16;
        }
        fprintf(out, "</g>\n");
    }
}

/* Vertical grid lines at the time ticks, from y0 to y1. */
static void put_grid(FILE *out, const view_t *v, double y0, double y1)
{
    int64_t step = tick_step(v);
    int64_t end = v->start_ms + (int64_t)v->n * v->width_ms;

    fprintf(out, "<path stroke=\"" GRID "\" d=\"");
    for (int64_t t = first_tick(v, step); t <= end; t += step)
        fprintf(out, "M%.1f %.1f V%.1f ", x_of_time(v, t), y0, y1);
    fprintf(out, "\"/>\n");
}

/* Three lines below the axis on how to read the chart. */
static void put_notes(FILE *out, const view_t *v, double y)
{
    char width[32];

    format_duration(v->width_ms, width, sizeof width);
    fprintf(out,
            "<g font-size=\"11\" fill=\"" MUTED "\">\n"
            "<text x=\"%.1f\" y=\"%.1f\">Bars: requests per %s, admitted "
            "and rejected. Lines, one per rule: the most permits one key had "
            "admitted within a trailing</text>\n"
            "<text x=\"%.1f\" y=\"%.1f\">period of that rule, at its "
            "admissions. sliding never crosses the limit; fixed counts per "
            "clock-aligned window,</text>\n"
            "<text x=\"%.1f\" y=\"%.1f\">so a burst straddling a window "
            "boundary can reach 2x the limit; approx estimates; gcra lets its "
            "burst add to the steady rate.</text>\n"
            "</g>\n",
            LEFT, y, width, LEFT, y + 15, LEFT, y + 30);
}

/* The shared time axis below the last panel. */
static void put_time_axis(FILE *out, const view_t *v, double y)
{
    int64_t step = tick_step(v);
    int64_t end = v->start_ms + (int64_t)v->n * v->width_ms;

    fprintf(out, "<path stroke=\"" INK "\" d=\"M%.1f %.1f H%.1f\"/>\n", LEFT, y,
            LEFT + PLOT_W);
    for (int64_t t = first_tick(v, step); t <= end; t += step) {
        char label[48];
        double x = x_of_time(v, t);
        tick_label(v, t, step, label, sizeof label);
        fprintf(out,
                "<path stroke=\"" INK "\" d=\"M%.1f %.1f v5\"/>"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s"
                "</text>\n",
                x, y, x, y + 18, label);
    }
    fprintf(out,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"" MUTED
            "\">%s</text>\n",
            LEFT + PLOT_W / 2, y + 38,
            v->unix_time ? "time (UTC), from the trace's t_ms"
                         : "time (the trace's t_ms)");
    put_notes(out, v, y + 60);
}

/* A strip's rotated title at the left edge, centred on its height. */
static void put_strip_title(FILE *out, double y0, double h, const char *title)
{
    fprintf(out,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
            "fill=\"" MUTED "\" font-size=\"10\" "
            "transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n",
            14.0, y0 + h / 2, 14.0, y0 + h / 2, title);
}

/*
 * The left axis of a strip of counts from y0, h high, scale 0..max: 0,
 * the middle when it is a whole number, the top; the base line; the
 * strip's title.
 */
static void put_count_axis(FILE *out, double y0, double h, uint64_t max,
                           const char *title)
{
    for (int k = 0; k <= 2; k++) {
        char label[32];
        if (k == 1 && max % 2 != 0)
            continue;
        format_count(max * (uint64_t)k / 2, label, sizeof label);
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                "fill=\"" MUTED "\">%s</text>\n",
                LEFT - 6, y0 + h - h * k / 2.0 + 4, label);
    }
    fprintf(out, "<path stroke=\"" INK "\" d=\"M%.1f %.1f H%.1f\"/>\n", LEFT,
            y0 + h, LEFT + PLOT_W);
    put_strip_title(out, y0, h, title);
}

/* One panel's bars: green admitted at the bottom, red rejected on top. */
static void put_bars(FILE *out, const view_t *v, int a, double y0)
{
    double bw = PLOT_W / (double)v->n;
    double gap = bw >= 3 ? 1 : 0;
    double base = y0 + BARS_H;

    for (int pass = 0; pass < 2; pass++) {
        fprintf(out, "<path fill=\"%s\" d=\"", pass ? RED : GREEN);
        for (size_t i = 0; i < v->n; i++) {
            const chart_bucket_t *b = &v->buckets[a][i];
            double h0 = BARS_H * (double)b->admitted / (double)v->bar_max;
            double h1 = BARS_H * (double)b->rejected / (double)v->bar_max;
            double h = pass ? h1 : h0, bottom = pass ? base - h0 : base;
            if (h <= 0)
                continue;
            if (h < 0.75)
                h = 0.75; /* one request must still show */
            fprintf(out, "M%.2f %.2f h%.2f v%.2f h%.2f z ",
                    x_of_bucket(v, (double)i), bottom, bw - gap, -h,
                    -(bw - gap));
        }
        fprintf(out, "\"/>\n");
    }
    put_count_axis(out, y0, BARS_H, v->bar_max, "requests");
}

/* The y of `value` in rule r's line strip starting at y0. */
static double line_y(const view_t *v, int r, double y0, double value)
{
    return y0 + LINE_H - LINE_H * value / v->line_max[r];
}

/*
 * The step path of panel `a`'s peaks for rule `r` in `colour`, clipped to
 * the clip path "over-A-R" when `clip`.
 */
static void put_peak_path(FILE *out, const view_t *v, int a, int r, double y0,
                          const char *colour, double width, int clip)
{
    fprintf(out, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"",
            colour, width);
    if (clip)
        fprintf(out, " clip-path=\"url(#over-%d-%d)\"", a, r);
    fprintf(out, " d=\"");
    for (size_t i = 0; i < v->n; i++) {
        uint64_t peak = v->buckets[a][i].peak[r];
        double y;
        if (peak == 0)
            continue;
        y = line_y(v, r, y0, (double)peak);
        if (i == 0 || v->buckets[a][i - 1].peak[r] == 0)
            fprintf(out, "M%.2f %.2f ", x_of_bucket(v, (double)i), y);
        else
            fprintf(out, "V%.2f ", y);
        fprintf(out, "H%.2f ", x_of_bucket(v, (double)i + 1));
    }
    fprintf(out, "\"/>\n");
}

/*
 * Panel `a`'s line for rule `r`: a step line over the buckets with
 * admissions, broken where a bucket admitted nothing, then the same path
 * in orange clipped to the region above the rule's limit. A label names
 * the rule's period, the panel's peak and the limit.
 */
static void put_line(FILE *out, const view_t *v, int a, int r, double y0)
{
    const chart_t *c = v->chart;
    const ratel_rule_t *rule = &c->policy.rules[r];
    double y_limit = line_y(v, r, y0, rule->limit);
    char period[32];

    format_duration(rule->period_ms, period, sizeof period);
    fprintf(out,
            "<g class=\"window\">\n<rect x=\"%.1f\" y=\"%.1f\" "
            "width=\"%.1f\" height=\"%.1f\" fill=\"#f7f7f7\"/>\n",
            LEFT, y0, PLOT_W, LINE_H);
    fprintf(out,
            "<clipPath id=\"over-%d-%d\"><rect x=\"%.1f\" y=\"%.1f\" "
            "width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
            a, r, LEFT, y0 - 4, PLOT_W, y_limit - 1.5 - (y0 - 4));
    fprintf(out,
            "<path stroke=\"" INK "\" stroke-dasharray=\"5 3\" "
            "d=\"M%.1f %.2f H%.1f\"/>\n",
            LEFT, y_limit, LEFT + PLOT_W);
    put_peak_path(out, v, a, r, y0, BLUE, 1.6, 0);
    put_peak_path(out, v, a, r, y0, ORANGE, 3, 1);
    /* Left axis: 0, the limit, twice the limit. */
    for (int k = 0; k <= 2; k++) {
        char label[32];
        format_count((uint64_t)rule->limit * (uint64_t)k, label, sizeof label);
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                "fill=\"" MUTED "\">%s</text>\n",
                LEFT - 6, line_y(v, r, y0, (double)rule->limit * k) + 4, label);
    }
    fprintf(out,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"" MUTED
            "\">trailing %s: peak %" PRIu64 " per key, limit %u</text>\n",
            LEFT + 4, y0 + 11, period, c->peak[a][r], rule->limit);
    put_strip_title(out, y0, LINE_H, "per key");
    fprintf(out, "</g>\n");
}

static void put_panel(FILE *out, const view_t *v, int a, double top)
{
    const chart_t *c = v->chart;
    char rules[512];
    double y = top + HEAD_H;
    uint64_t total = c->admitted[a] + c->rejected[a];

    format_rules(&c->variants[a], rules, sizeof rules);
    fprintf(out,
            "<g>\n<text x=\"%.1f\" y=\"%.1f\"><tspan font-weight=\"bold\" "
            "font-size=\"15\">%s</tspan><tspan fill=\"" MUTED "\" dx=\"10\">",
            LEFT, top + 14, ratel_algo_name(c->algos[a]));
    put_escaped(out, rules);
    fprintf(out, "%s</tspan></text>\n",
            same_policy(&c->variants[a], &c->policy) ? "  (your policy)" : "");
    fprintf(out,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">"
            "<tspan fill=\"" GREEN "\" font-weight=\"bold\">admitted %" PRIu64
            "</tspan>  <tspan fill=\"" RED "\" font-weight=\"bold\" "
            "dx=\"8\">rejected %" PRIu64 "</tspan><tspan dx=\"8\" fill=\"" MUTED
            "\">(%.1f%%)</tspan></text>\n",
            LEFT + PLOT_W, top + 14, c->admitted[a], c->rejected[a],
            total ? 100.0 * (double)c->rejected[a] / (double)total : 0.0);
    put_grid(out, v, y, y + BARS_H);
    put_bars(out, v, a, y);
    y += BARS_H;
    for (uint32_t r = 0; r < c->policy.nrules; r++) {
        y += GAP_H;
        put_grid(out, v, y, y + LINE_H);
        put_line(out, v, a, (int)r, y);
        y += LINE_H;
    }
    fprintf(out, "</g>\n");
}

/*
 * Distinct keys per displayed bucket: an area under a step line, and per
 * bucket with requests an invisible rectangle whose tooltip gives the
 * count and the bucket's span.
 */
static void put_distinct(FILE *out, const view_t *v, double top)
{
    const uint64_t *d = v->distinct;
    double y0 = top + HEAD_H, base = y0 + DISTINCT_H;
    char width[32];

    format_duration(v->width_ms, width, sizeof width);
    fprintf(out,
            "<g class=\"distinct\">\n<text x=\"%.1f\" y=\"%.1f\">"
            "<tspan font-weight=\"bold\" font-size=\"15\">distinct keys"
            "</tspan><tspan fill=\"" MUTED "\" dx=\"10\">per %s: how many keys "
            "sent requests in each bar's time</tspan></text>\n",
            LEFT, top + 14, width);
    put_grid(out, v, y0, base);
    if (!d) {
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" fill=\"" MUTED "\">not "
                "counted: the trace spans too long for %d bars of a nameable "
                "width</text>\n</g>\n",
                LEFT + 8, y0 + DISTINCT_H / 2, CHART_DISPLAY_MAX);
        return;
    }
    fprintf(out,
            "<path fill=\"" AREA "\" stroke=\"" BLUE "\" stroke-width=\"1.2\" "
            "d=\"M%.1f %.1f ",
            LEFT, base);
    for (size_t i = 0; i < v->n; i++)
        fprintf(out, "V%.2f H%.2f ",
                base - DISTINCT_H * (double)d[i] / (double)v->distinct_max,
                x_of_bucket(v, (double)i + 1));
    fprintf(out, "V%.1f Z\"/>\n", base);
    for (size_t i = 0; i < v->n; i++) {
        int64_t from = v->start_ms + (int64_t)i * v->width_ms;
        if (d[i] == 0)
            continue;
        fprintf(
            out,
            "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
            "height=\"%.1f\" fill=\"transparent\"><title>%" PRIu64
            " distinct key%s, t_ms %" PRId64 " to %" PRId64 "</title></rect>\n",
            x_of_bucket(v, (double)i), y0, PLOT_W / (double)v->n, DISTINCT_H,
            d[i], d[i] == 1 ? "" : "s", from, from + v->width_ms - 1);
    }
    put_count_axis(out, y0, DISTINCT_H, v->distinct_max, "keys");
    fprintf(out, "</g>\n");
}

/*
 * The keys the given policy denied most: per key its name, a bar of its
 * denied (red) and allowed (green) requests, one scale for all rows, and
 * the two counts.
 */
static void put_most_denied(FILE *out, const view_t *v, double top)
{
    const chart_t *c = v->chart;
    const double bar_x = LEFT + 7.0 * (KEY_CHARS + 3), bar_w = 300;
    char rules[512];
    uint64_t max = 1;

    format_rules(&c->policy, rules, sizeof rules);
    fprintf(out,
            "<g class=\"most-denied\">\n<text x=\"%.1f\" y=\"%.1f\">"
            "<tspan font-weight=\"bold\" font-size=\"15\">keys denied most"
            "</tspan><tspan fill=\"" MUTED "\" dx=\"10\">under your policy, ",
            LEFT, top + 14);
    put_escaped(out, rules);
    fprintf(out, "</tspan></text>\n");
    if (c->nmost_denied == 0)
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" fill=\"" MUTED "\">No request "
                "was denied.</text>\n",
                LEFT, top + HEAD_H + 8 + ROW_H - 5);
    for (size_t i = 0; i < c->nmost_denied; i++) {
        const key_record_t *k = c->most_denied[i];
        if (k->denied + k->allowed > max)
            max = k->denied + k->allowed;
    }
    for (size_t i = 0; i < c->nmost_denied; i++) {
        const key_record_t *k = c->most_denied[i];
        double y = top + HEAD_H + 8 + (double)i * ROW_H;
        double wd = bar_w * (double)k->denied / (double)max;
        double wa = bar_w * (double)k->allowed / (double)max;
        fprintf(out, "<text class=\"denied-key\" x=\"%.1f\" y=\"%.1f\">", LEFT,
                y + ROW_H - 5);
        put_escaped_max(out, k->key, KEY_CHARS);
        fprintf(out,
                "</text><rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" "
                "height=\"%.1f\" fill=\"" RED "\"/><rect x=\"%.2f\" "
                "y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"" GREEN
                "\"/><text x=\"%.1f\" y=\"%.1f\">denied %" PRIu64
                ", allowed %" PRIu64 "</text>\n",
                bar_x, y + 3, wd, ROW_H - 6, bar_x + wd, y + 3, wa, ROW_H - 6,
                bar_x + bar_w + 10, y + ROW_H - 5, k->denied, k->allowed);
    }
    fprintf(out, "</g>\n");
}

int svg_write(const chart_t *chart, const char *source, FILE *out)
{
    view_t v;
    int rc = 0;

    if (make_view(&v, chart) < 0) {
        free_view(&v);
        return -1;
    }
    put_header(out, &v, source);
    for (int a = 0; a < CHART_NALGOS; a++)
        put_panel(out, &v, a, TOP + a * v.panel_h);
    put_distinct(out, &v, v.distinct_y);
    put_time_axis(out, &v, v.axis_y);
    put_most_denied(out, &v, v.denied_y);
    fprintf(out, "</svg>\n");
    free_view(&v);
    if (fflush(out) != 0 || ferror(out))
        rc = -1;
    return rc;
}
