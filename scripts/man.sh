#!/bin/sh
# man.sh OUTDIR - the man pages, generated from the docs with go-md2man:
#
#   OUTDIR/rateld.8        docs/rateld.md
#   OUTDIR/ratel.1         docs/cli.md
#   OUTDIR/rateld.yaml.5   docs/config.md
#   OUTDIR/captchad.8      captchad/README.md
#
# Each page is a small generated head (the title line, NAME, the heading
# DESCRIPTION) followed by the document's body, then a generated SEE ALSO.
# The documents are never copied into a second text by hand: this script
# holds only each page's name, section and one-line NAME summary.
#
# go-md2man (Debian's go-md2man, 1.8 MB installed) was chosen over pandoc
# (169 MB installed on bookworm, one Haskell binary and its data): it does
# only Markdown to roff, which is all this needs. Links inside the tree are
# written as their text before it runs; its 2.0.2 output is corrected after
# (fix_roff_awk below; docs/install.md, "Man pages").
#
# The output is deterministic: the version comes from include/ratel.h and
# the date from SOURCE_DATE_EPOCH (set by dpkg-buildpackage), else from
# the last commit that changed the document, else it is left empty.
set -eu

out=${1:-}
if [ -z "$out" ] || [ $# -ne 1 ]; then
    echo "usage: scripts/man.sh OUTDIR" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)

if ! command -v go-md2man >/dev/null 2>&1; then
    echo "man.sh: go-md2man not found; scripts/setup.sh installs it (Debian package go-md2man)" >&2
    exit 1
fi
version=$(sed -n 's/^#define RATEL_VERSION "\(.*\)"$/\1/p' "$root/include/ratel.h")
if [ -z "$version" ]; then
    echo "man.sh: no RATEL_VERSION in $root/include/ratel.h" >&2
    exit 1
fi
mkdir -p "$out"

# The pages: name, section, source, NAME summary (what whatis(1) shows).
pages='rateld|8|docs/rateld.md|the ratel rate-limit daemon (HTTP decisions, gateway auth, metrics)
ratel|1|docs/cli.md|try rate-limit rules, replay traces and query a ratel store
rateld.yaml|5|docs/config.md|the configuration file of rateld(8)
captchad|8|captchad/README.md|SMS verification codes, rate-limited with ratel'

# page_date SOURCE: YYYY-MM-DD, or nothing.
page_date() {
    if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
        date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d
    elif command -v git >/dev/null 2>&1 && git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
        git -C "$root" log -1 --format=%cs -- "$1" 2>/dev/null || true
    fi
}

# see_also NAME: the other pages, as "**name**(section)", comma separated.
see_also() {
    printf '%s\n' "$pages" | awk -F'|' -v self="$1" '
        $1 != self { printf "%s**%s**(%s)", sep, $1, $2; sep = ", " }
        END { print "" }'
}

# The Markdown go-md2man reads: the generated head, the document without
# its own title line and its one-line HTML comments (the docs test's marks,
# which go-md2man would warn about), links inside the tree as their text
# (an anchor or a file name means nothing in a man page; http links are
# kept), SEE ALSO.
markdown() { # name section source summary date
    upper=$(printf '%s' "$1" | tr '[:lower:]' '[:upper:]')
    printf '%% %s %s "%s" "ratel %s" "ratel manual"\n\n' "$upper" "$2" "$5" "$version"
    printf '# NAME\n\n%s \\- %s\n\n# DESCRIPTION\n\n' "$1" "$4"
    sed -e '1{/^# /d;}' -e '/^<!--.*-->[[:space:]]*$/d' \
        -e 's/\[\([^]]*\)\](\([^):]*\))/\1/g' "$root/$3"
    printf '\n# SEE ALSO\n\n%s\n\nThe documents under docs/ in the ratel source tree.\n' "$(see_also "$1")"
}

# go-md2man 2.0.2's roff, corrected (awk, POSIX and mawk alike):
# - the first line asks man(1) for tbl, which the tables need;
# - a text line starting with "." or "'" (a code span wrapped in the
#   document) that is not one of go-md2man's requests gets "\&" in front,
#   else troff reads it as a request;
# - tables: a row is put back on one line (go-md2man ends a text block
#   "T}" with a newline where tbl wants the next cell after a tab), "\|"
#   becomes "|", and the columns are laid out to fit an 80-column terminal
#   (water-filling: the widest cap at which they fit; a column wider than
#   it wraps in text blocks), left-adjusted, without hyphenation;
# - a word longer than 30 characters (JSON, URLs, label sets) gets break
#   points after its commas and before "[" and "{", so no line overflows.
fix_roff_awk=$(cat <<'AWK'
function vislen(s,    t) {
    t = s
    gsub(/\\f(\[[^]]*\]|\(..|.)/, "", t)   # font changes
    gsub(/\\&/, "", t)
    gsub(/\\\[[^]]*\]|\\\(..|\\./, "x", t) # one glyph each
    return length(t)
}
function longest_word(s,    n, i, w, m, words) {
    n = split(s, words, / +|\\:/)
    m = 0
    for (i = 1; i <= n; i++) {
        w = vislen(words[i])
        if (w > m)
            m = w
    }
    return m
}
# breakable(line): break points (\:) in a long word, after a comma and
# before a "[" or "{" (an escape sequence such as \[la] is copied whole).
function breakable(s,    n, i, out, words, sep) {
    n = split(s, words, / /)
    out = ""; sep = ""
    for (i = 1; i <= n; i++) {
        if (vislen(words[i]) > 30)
            words[i] = break_word(words[i])
        out = out sep words[i]; sep = " "
    }
    return out
}
function break_word(w,    i, ch, out, esc) {
    out = ""
    for (i = 1; i <= length(w); i++) {
        ch = substr(w, i, 1)
        if (ch == "\\") {
            esc = substr(w, i, 2)
            if (esc ~ /^\\[\[(f]/) { # \[xx], \(xx, \fX, \f[X]
                if (substr(w, i + 1, 1) == "(") esc = substr(w, i, 4)
                else if (match(substr(w, i), /^\\f?\[[^]]*\]/)) esc = substr(w, i, RLENGTH)
                else if (substr(w, i + 1, 1) == "f") esc = substr(w, i, 3)
            }
            out = out esc; i += length(esc) - 1
            continue
        }
        if ((ch == "[" || ch == "{") && i > 1 && substr(out, length(out)) !~ /[[{]/) out = out "\\:"
        out = out ch
        if (ch == ",") out = out "\\:"
    }
    return out
}
function escape_line(s) {
    if (s ~ /^[.']/ && s !~ /^\.(TH|SH|SS|PP|RS|RE|nf|fi|IP|TS|TE|nh|ad|sp|br|EX|EE|in|ti|LP|TP)( |$)/)
        return "\\&" s
    return s
}
# The table in rows[1..nrows] x cells[r, c]: laid out to fit `width`.
function emit_table(    r, c, natural, minw, w, fixed, budget, top, cap, total, fmt, line, cell) {
    for (c = 1; c <= ncols; c++) {
        natural[c] = 0; minw[c] = 0
        for (r = 1; r <= nrows; r++) {
            if (vislen(cells[r, c]) > natural[c]) natural[c] = vislen(cells[r, c])
            if (longest_word(cells[r, c]) > minw[c]) minw[c] = longest_word(cells[r, c])
        }
    }
    budget = width - 3 * (ncols - 1) - 2
    # Water-filling: the widest cap T at which the columns fit; a column
    # narrower than T keeps its width, a wider one wraps at T (never below
    # its longest word).
    top = 0
    for (c = 1; c <= ncols; c++) if (natural[c] > top) top = natural[c]
    for (cap = top; cap > 1; cap--) {
        total = 0
        for (c = 1; c <= ncols; c++)
            total += natural[c] <= cap ? natural[c] : (minw[c] > cap ? minw[c] : cap)
        if (total <= budget) break
    }
    for (c = 1; c <= ncols; c++) {
        fixed[c] = natural[c] <= cap
        w[c] = fixed[c] ? natural[c] : (minw[c] > cap ? minw[c] : cap)
    }
    print ".ad l"
    print ".nh"
    print ".TS"
    print tableopts
    fmt = ""
    for (c = 1; c <= ncols; c++)
        fmt = fmt (c > 1 ? " " : "") (fixed[c] ? "l" : "lw(" w[c] "n)")
    print fmt " ."
    for (r = 1; r <= nrows; r++) {
        line = ""
        for (c = 1; c <= ncols; c++) {
            cell = cells[r, c]
            if (c > 1) line = line "\t"
            if (!fixed[c] && vislen(cell) > w[c])
                line = line "T{\n" escape_line(cell) "\nT}"
            else
                line = line cell
        }
        print line
    }
    print ".TE"
    print ".ad b"
}
# Collects one data line of a table (go-md2man writes a cell's text block
# as "T{", its lines, "T}", and the rest of the row on the next line after
# a tab: tbl needs them on the T} line).
function table_line(s,    n, i, f) {
    if (inblock) {
        if (s == "T}") { inblock = 0; return }
        cells[nrows, col] = cells[nrows, col] (cells[nrows, col] == "" ? "" : " ") breakable(s)
        return
    }
    if (s !~ /^\t/ || nrows == 0) { nrows++; col = 0 }
    else s = substr(s, 2)
    n = split(s, f, /\t/)
    for (i = 1; i <= n; i++) {
        col++
        if (f[i] == "T{") { inblock = 1; cells[nrows, col] = ""; continue }
        cells[nrows, col] = breakable(f[i])
    }
    if (col > ncols) ncols = col
}
BEGIN { print "'\\\" t"; intable = 0; nofill = 0 }
/^\.TS$/ { intable = 1; informat = 1; nrows = 0; ncols = 0; inblock = 0; tableopts = ""; split("", cells); next }
intable && informat {
    if (tableopts == "") { tableopts = $0; next }
    if ($0 ~ /\.[ \t]*$/) informat = 0
    next
}
intable && /^\.TE$/ { emit_table(); intable = 0; next }
intable { gsub(/\\\\\|/, "|"); table_line($0); next }
/^\.nf/ { nofill = 1 }
/^\.fi/ { nofill = 0 }
{
    line = $0
    if (!nofill && line !~ /^\./) line = breakable(line)
    print escape_line(line)
}
AWK
)

printf '%s\n' "$pages" | while IFS='|' read -r name section source summary; do
    if [ ! -r "$root/$source" ]; then
        echo "man.sh: $source not found under $root" >&2
        exit 1
    fi
    date=$(page_date "$source")
    markdown "$name" "$section" "$source" "$summary" "$date" | go-md2man |
        awk -v width=70 "$fix_roff_awk" \
        >"$out/$name.$section.tmp"
    # A failed go-md2man leaves no NAME section (the pipeline's status is awk's).
    if ! grep -q '^\.SH NAME$' "$out/$name.$section.tmp"; then
        echo "man.sh: go-md2man made no page of $source" >&2
        rm -f "$out/$name.$section.tmp"
        exit 1
    fi
    mv "$out/$name.$section.tmp" "$out/$name.$section"
done
