/*
 * svg.c - drawing a chart_t as one self-contained SVG document.
 *
 * Layout, top to bottom: a title naming the rules, a subtitle (trace,
 * requests, keys, span, bucket width), a legend, then one panel per
 * algorithm on a shared time axis. A panel has two strips:
 *
 *   bars   requests per time bucket, green admitted under red rejected.
 *          Every variant sees every request, so the bar heights are the
 *          same in all panels and only the split differs; one scale.
 *   line   the most permits any one key had admitted within the trailing
 *          window of the first rule (a step line, drawn where admissions
 *          happened), against the limit as a dashed line. Stretches above
 *          the limit are drawn again in orange. One scale for all panels,
 *          reaching at least 2 x limit: a fixed window's boundary burst
 *          shows as the line climbing to the top of its strip.
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
#define LINE_H 64.0 /* peak line strip */
#define PANEL_GAP 26.0
#define PANEL_H (HEAD_H + BARS_H + GAP_H + LINE_H + PANEL_GAP)
#define FOOT_H 110.0    /* time axis and notes below the panels */
#define MAX_DISPLAY 200 /* displayed buckets, at most */

#define GREEN "#2e9e4f"
#define RED "#d6403a"
#define BLUE "#2457c5"
#define ORANGE "#f08a00"
#define GRID "#e3e3e3"
#define INK "#222222"
#define MUTED "#666666"

/* Displayed bucket widths a reader can name, in ms. */
static const int64_t display_widths[] = {
    1,         2,         5,         10,         20,        50,       100,
    200,       500,       1000,      2000,       5000,      10000,    15000,
    20000,     30000,     60000,     120000,     300000,    600000,   900000,
    1800000,   3600000,   7200000,   10800000,   21600000,  43200000, 86400000,
    172800000, 604800000, 864000000, 1728000000, 8640000000};

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
    uint64_t bar_max; /* top of the bar scale */
    double line_max;  /* top of the line scale */
    int unix_time;    /* label ticks as UTC clock times */
} view_t;

/* Writes `s` with XML's special characters escaped; other bytes outside
   printable ASCII become '?', so the document stays valid UTF-8. */
static void put_escaped(FILE *out, const char *s)
{
    for (; *s; s++) {
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
 * Chooses the displayed bucket width: the smallest nameable width that is
 * a multiple of the internal one and shows at most MAX_DISPLAY buckets,
 * then merges the internal counters into it. Returns 0 or -1 (memory).
 */
static int make_view(view_t *v, const chart_t *c)
{
    int64_t first = c->base * c->width_ms; /* start of internal bucket 0 */
    int64_t end =
        (c->base + (int64_t)(c->nbuckets ? c->nbuckets : 1)) * c->width_ms;
    int64_t d = 0;

    memset(v, 0, sizeof *v);
    v->chart = c;
    for (size_t i = 0; i < sizeof display_widths / sizeof *display_widths;
         i++) {
        int64_t w = display_widths[i];
        if (w % c->width_ms == 0 &&
            (end + w - 1) / w - first / w <= MAX_DISPLAY) {
            d = w;
            break;
        }
    }
    if (d == 0) { /* beyond every nameable width: merge evenly */
        int64_t k = ((int64_t)c->nbuckets + MAX_DISPLAY - 1) / MAX_DISPLAY;
        d = c->width_ms * (k ? k : 1);
    }
    v->width_ms = d;
    v->start_ms = first / d * d;
    v->n = (size_t)((end + d - 1) / d - first / d);
    for (int a = 0; a < CHART_NALGOS; a++) {
        v->buckets[a] = calloc(v->n, sizeof(chart_bucket_t));
        if (!v->buckets[a])
            return -1;
        for (size_t i = 0; i < c->nbuckets; i++) {
            const chart_bucket_t *from = &c->buckets[a][i];
            int64_t t = (c->base + (int64_t)i) * c->width_ms;
            chart_bucket_t *to = &v->buckets[a][(t - v->start_ms) / d];
            to->admitted += from->admitted;
            to->rejected += from->rejected;
            if (from->peak > to->peak)
                to->peak = from->peak;
        }
    }
    for (size_t i = 0; i < v->n; i++) {
        /* Totals per bucket are the same in every panel. */
        uint64_t total = v->buckets[0][i].admitted + v->buckets[0][i].rejected;
        if (total > v->bar_max)
            v->bar_max = total;
    }
    v->bar_max = nice_ceil(v->bar_max);
    v->line_max = 2.0 * c->limit;
    for (int a = 0; a < CHART_NALGOS; a++)
        if ((double)c->peak[a] > v->line_max)
            v->line_max = (double)c->peak[a];
    v->line_max *= 1.08; /* headroom: a line at the top stays visible */
    v->unix_time = c->origin_ms >= UNIX_TIME_FROM_MS;
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
    char rules[512], span[32], width[32], window[32], first[64] = "";
    int64_t height = (int64_t)(TOP + CHART_NALGOS * PANEL_H + FOOT_H);

    format_rules(&c->policy, rules, sizeof rules);
    format_duration(c->started ? c->end_ms - c->origin_ms : 0, span,
                    sizeof span);
    format_duration(v->width_ms, width, sizeof width);
    format_duration(c->window_ms, window, sizeof window);
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
                 "most permits one key had in a trailing %s", window);
        snprintf(text[3], sizeof text[3], "limit %u", c->limit);
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

/* Two lines below the axis on how to read the chart. */
static void put_notes(FILE *out, const view_t *v, double y)
{
    char width[32], window[32];

    format_duration(v->width_ms, width, sizeof width);
    format_duration(v->chart->window_ms, window, sizeof window);
    fprintf(out,
            "<g font-size=\"11\" fill=\"" MUTED "\">\n"
            "<text x=\"%.1f\" y=\"%.1f\">Bars: requests per %s, admitted "
            "and rejected. Line: the most permits one key had admitted within "
            "a trailing %s</text>\n"
            "<text x=\"%.1f\" y=\"%.1f\">(the first rule's period), at its "
            "admissions. sliding never crosses the limit; fixed counts per "
            "clock-aligned window,</text>\n"
            "<text x=\"%.1f\" y=\"%.1f\">so a burst straddling a window "
            "boundary can reach 2x the limit; approx estimates; gcra lets its "
            "burst add to the steady rate.</text>\n"
            "</g>\n",
            LEFT, y, width, window, LEFT, y + 15, LEFT, y + 30);
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
    /* Left axis: 0, the middle when it is a whole number, the top. */
    for (int k = 0; k <= 2; k++) {
        char label[32];
        if (k == 1 && v->bar_max % 2 != 0)
            continue;
        format_count(v->bar_max * (uint64_t)k / 2, label, sizeof label);
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                "fill=\"" MUTED "\">%s</text>\n",
                LEFT - 6, base - BARS_H * k / 2.0 + 4, label);
    }
    fprintf(out,
            "<path stroke=\"" INK "\" d=\"M%.1f %.1f H%.1f\"/>\n"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
            "fill=\"" MUTED "\" font-size=\"10\" "
            "transform=\"rotate(-90 %.1f %.1f)\">requests</text>\n",
            LEFT, base, LEFT + PLOT_W, 14.0, y0 + BARS_H / 2, 14.0,
            y0 + BARS_H / 2);
}

static double line_y(const view_t *v, double y0, double value)
{
    return y0 + LINE_H - LINE_H * value / v->line_max;
}

/*
 * The step path of panel `a`'s peaks in `colour`, clipped to the clip path
 * "over-CLIP" when clip >= 0.
 */
static void put_peak_path(FILE *out, const view_t *v, int a, double y0,
                          const char *colour, double width, int clip)
{
    fprintf(out, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"",
            colour, width);
    if (clip >= 0)
        fprintf(out, " clip-path=\"url(#over-%d)\"", clip);
    fprintf(out, " d=\"");
    for (size_t i = 0; i < v->n; i++) {
        const chart_bucket_t *b = &v->buckets[a][i];
        double y;
        if (b->peak == 0)
            continue;
        y = line_y(v, y0, (double)b->peak);
        if (i == 0 || v->buckets[a][i - 1].peak == 0)
            fprintf(out, "M%.2f %.2f ", x_of_bucket(v, (double)i), y);
        else
            fprintf(out, "V%.2f ", y);
        fprintf(out, "H%.2f ", x_of_bucket(v, (double)i + 1));
    }
    fprintf(out, "\"/>\n");
}

/*
 * One panel's peak line: a step line over the buckets with admissions,
 * broken where a bucket admitted nothing, then the same path in orange
 * clipped to the region above the limit.
 */
static void put_line(FILE *out, const view_t *v, int a, double y0)
{
    const chart_t *c = v->chart;
    double y_limit = line_y(v, y0, c->limit);

    fprintf(out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"#f7f7f7\"/>\n",
            LEFT, y0, PLOT_W, LINE_H);
    fprintf(out,
            "<clipPath id=\"over-%d\"><rect x=\"%.1f\" y=\"%.1f\" "
            "width=\"%.1f\" height=\"%.1f\"/></clipPath>\n",
            a, LEFT, y0 - 4, PLOT_W, y_limit - 1.5 - (y0 - 4));
    fprintf(out,
            "<path stroke=\"" INK "\" stroke-dasharray=\"5 3\" "
            "d=\"M%.1f %.2f H%.1f\"/>\n",
            LEFT, y_limit, LEFT + PLOT_W);
    put_peak_path(out, v, a, y0, BLUE, 1.6, -1);
    put_peak_path(out, v, a, y0, ORANGE, 3, a);
    /* Left axis: 0, the limit, twice the limit. */
    for (int k = 0; k <= 2; k++) {
        char label[32];
        format_count((uint64_t)c->limit * (uint64_t)k, label, sizeof label);
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" "
                "fill=\"" MUTED "\">%s</text>\n",
                LEFT - 6, line_y(v, y0, (double)c->limit * k) + 4, label);
    }
    fprintf(out,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
            "fill=\"" MUTED "\" font-size=\"10\" "
            "transform=\"rotate(-90 %.1f %.1f)\">per key</text>\n",
            14.0, y0 + LINE_H / 2, 14.0, y0 + LINE_H / 2);
}

static void put_panel(FILE *out, const view_t *v, int a, double top)
{
    const chart_t *c = v->chart;
    char rules[512];
    double bars_y = top + HEAD_H, line_y0 = bars_y + BARS_H + GAP_H;
    uint64_t total = c->admitted[a] + c->rejected[a];

    format_rules(&c->variants[a], rules, sizeof rules);
    fprintf(out,
            "<g>\n<text x=\"%.1f\" y=\"%.1f\"><tspan font-weight=\"bold\" "
            "font-size=\"15\">%s</tspan><tspan fill=\"" MUTED "\" dx=\"10\">",
            LEFT, top + 14, ratel_algo_name((ratel_algo_t)a));
    put_escaped(out, rules);
    fprintf(out, "%s</tspan></text>\n",
            same_policy(&c->variants[a], &c->policy) ? "  (your policy)" : "");
    fprintf(out,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">"
            "<tspan fill=\"" GREEN "\" font-weight=\"bold\">admitted %" PRIu64
            "</tspan>  <tspan fill=\"" RED "\" font-weight=\"bold\" "
            "dx=\"8\">rejected %" PRIu64 "</tspan><tspan dx=\"8\" fill=\"" MUTED
            "\">(%.1f%%)  peak %" PRIu64 " per key, limit %u</tspan></text>\n",
            LEFT + PLOT_W, top + 14, c->admitted[a], c->rejected[a],
            total ? 100.0 * (double)c->rejected[a] / (double)total : 0.0,
            c->peak[a], c->limit);
    put_grid(out, v, bars_y, bars_y + BARS_H);
    put_bars(out, v, a, bars_y);
    put_grid(out, v, line_y0, line_y0 + LINE_H);
    put_line(out, v, a, line_y0);
    fprintf(out, "</g>\n");
}

int svg_write(const chart_t *chart, const char *source, FILE *out)
{
    view_t v;
    double bottom = TOP + CHART_NALGOS * PANEL_H - PANEL_GAP;
    int rc = 0;

    if (make_view(&v, chart) < 0) {
        free_view(&v);
        return -1;
    }
    put_header(out, &v, source);
    for (int a = 0; a < CHART_NALGOS; a++)
        put_panel(out, &v, a, TOP + a * PANEL_H);
    put_time_axis(out, &v, bottom + 4);
    fprintf(out, "</svg>\n");
    free_view(&v);
    if (fflush(out) != 0 || ferror(out))
        rc = -1;
    return rc;
}
