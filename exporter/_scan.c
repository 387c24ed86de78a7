/* Native scanner for the steady state of a busy SGLang log (see exporter/state/scan.py).
 *
 * scan(lines, start, spec) walks lines[start:] while each line is one of
 *   [YYYY-MM-DD HH:MM:SS(.mmm)?TAGS] <decode head><k1>: v1, <k2>: v2, ...(, )?
 *   [YYYY-MM-DD HH:MM:SS(.mmm)?TAGS] <prefill head>...   (same, with the prefill keys)
 *   [YYYY-MM-DD HH:MM:SS(.mmm)?TAGS] INFO:...
 * i.e. exactly what the learned line templates of parsers/shapes.py accept (values are
 * [^,\n]*, or what their VALUE_PATTERNS code admits: a ratio 0..1, a count or rate that is not
 * negative; the new/cached prefill values must be plain decimal integers), and stops at the
 * first line that is anything else. It returns aggregates, never one object per line:
 *
 *   (stop, n_info, top, counts, new_sums, cached_sums, first, last)
 *
 *   stop         index of the first line not consumed (len(lines) when all were)
 *   n_info       consumed INFO lines
 *   top          (ymdhm, sec, ms or '') of the newest header among consumed lines, or None
 *   counts       {(kind, tags): batch lines}              kind is 'D' or 'P'
 *   new_sums     {tags: sum of the prefill new-token values}     (empty if no such key)
 *   cached_sums  {tags: sum of the prefill cached-token values}  (empty if no such key)
 *   first, last  {(kind, tags, bucket): index of the first / last line}, bucket = 'YYYY-MM-DD HH:MM' + tens of seconds
 *
 * spec may carry a third element, the header templates of the source's header stage
 * (parsers/header/templates.py: a tuple of (checks, items)); then only lines one of them reads are
 * consumed; the first template in order that reads it (header items, then a batch or INFO:
 * message) takes it (parsers.header.Stage.scanner orders them: the most particular ending first), its time item gives the time and the bucket, and its tags are the template's
 * index ('0' + k) followed by the text from its first rank item to its last.
 *
 * The pure-Python twin (exporter/state/scan.py, one fullmatch per line) gives the same result; tests
 * compare the two. A line with a character past U+00FF stops the scan, as does a prefill value
 * of more than 9 digits (parsers.numbers.MAX_COUNT) or one that would take the call's sum past 2**63 - 1: the line-by-line path handles them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define BUCKET_LEN 17 /* 'YYYY-MM-DD HH:MM' + tens digit of the seconds */
#define MAX_KEYS 64
#define MAX_DIGITS 9 /* parsers.numbers.MAX_COUNT_DIGITS: longer counts go to the line path */
#define RECENT_GROUPS 16 /* groups searched for a line's (kind, tags, bucket) */

typedef struct {
    const char *head;
    Py_ssize_t head_len;
    const char *keys[MAX_KEYS];
    Py_ssize_t key_lens[MAX_KEYS];
    int n_keys;
    int i_new, i_cached; /* indices of kept integer values, -1 = none */
    char codes[MAX_KEYS]; /* value check per key: 'r' ratio, 'n' count, 'f' rate, '-' none */
} Template;

#define MAX_ENVS 8
#define MAX_ITEMS 48
#define MAX_LOGFMT 65536 /* parsers.header.templates.MAX_LOGFMT */
#define MAX_PREAMBLE 320 /* parsers.header.preamble.MAX_PREAMBLE */

/* one item of a header template (parsers/header/templates.py) */
typedef struct {
    char op; /* L T G R S M B */
    char kind; /* G, R, S: the hole's kind; M: the region's mode (E, J, Q) */
    const char *text; /* L: the literal; T: the zone */
    Py_ssize_t len;
    char sep, fsep; /* T */
    int fd, use; /* T: fraction digits (-1: an optional .mmm), whether it is the line's time */
} Item;

typedef struct {
    Item items[MAX_ITEMS];
    int n;
    char checks; /* 'l': a logfmt line, at most MAX_LOGFMT long; 'p': the message starts within MAX_PREAMBLE */
    int lo, hi; /* first and last rank item (G, R), -1 when none */
    int raw; /* a '\r' or an escape code in the line can reach the message: such lines are not read */
    const char *tail; /* the last item's literal, when the template ends in one: a line that does not end in it is not tried */
    Py_ssize_t tail_len;
} Env;

/* what a template read of a line */
typedef struct {
    const char *date, *hm, *sec, *frac;
    Py_ssize_t frac_len;
    Py_ssize_t tags_at, tags_len;
    Py_ssize_t body, body_end;
    int backslash;
    int clean; /* the line holds no byte below 0x20 (set by the caller) */
} Peeled;

typedef struct {
    char kind;
    signed char env; /* the template that read the group's lines, -1: SGLang's default header */
    const char *tags;
    Py_ssize_t tags_len;
    char bucket_buf[BUCKET_LEN]; /* ymdhm (16) + tens digit of the seconds */
    Py_ssize_t count, first, last;
    long long new_sum, cached_sum;
} Group;

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

static int load_template(PyObject *t, Template *out)
{
    /* t = (head: str, keys: tuple[str, ...], i_new: int | None, i_cached: int | None[, codes: str]) */
    if (!PyTuple_Check(t) || (PyTuple_GET_SIZE(t) != 4 && PyTuple_GET_SIZE(t) != 5)) {
        PyErr_SetString(PyExc_TypeError, "template must be (head, keys, i_new, i_cached[, codes])");
        return -1;
    }
    PyObject *head = PyTuple_GET_ITEM(t, 0), *keys = PyTuple_GET_ITEM(t, 1);
    if (!PyUnicode_Check(head) || !PyTuple_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "template head must be str, keys a tuple");
        return -1;
    }
    out->head = PyUnicode_AsUTF8AndSize(head, &out->head_len);
    if (out->head == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    if (n > MAX_KEYS) {
        PyErr_SetString(PyExc_ValueError, "too many template keys");
        return -1;
    }
    out->n_keys = (int)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i);
        if (!PyUnicode_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "template keys must be str");
            return -1;
        }
        out->keys[i] = PyUnicode_AsUTF8AndSize(k, &out->key_lens[i]);
        if (out->keys[i] == NULL)
            return -1;
    }
    for (int j = 0; j < 2; j++) {
        PyObject *o = PyTuple_GET_ITEM(t, 2 + j);
        long v = -1;
        if (o != Py_None) {
            v = PyLong_AsLong(o);
            if (v == -1 && PyErr_Occurred())
                return -1;
        }
        if (j == 0)
            out->i_new = (int)v;
        else
            out->i_cached = (int)v;
    }
    memset(out->codes, '-', sizeof out->codes);
    if (PyTuple_GET_SIZE(t) == 5) {
        PyObject *c = PyTuple_GET_ITEM(t, 4);
        Py_ssize_t cl;
        const char *cs = PyUnicode_Check(c) ? PyUnicode_AsUTF8AndSize(c, &cl) : NULL;
        if (cs == NULL || cl != n) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "template codes must be a str with one code per key");
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (cs[i] != 'r' && cs[i] != 'n' && cs[i] != 'f' && cs[i] != '-') {
                PyErr_SetString(PyExc_ValueError, "template codes must be r, n, f or -");
                return -1;
            }
            out->codes[i] = cs[i];
        }
    }
    return 0;
}

/* Whether s[v:p] is a value of check `code` (parsers/shapes.py VALUE_PATTERNS, one optional
 * trailing '\r'): 'r' 0 | 1 | 0.ddd | 1.000 | .ddd; 'n' 1-18 digits; 'f' 1-15 digits[.ddd]. */
static int value_ok(char code, const char *s, Py_ssize_t v, Py_ssize_t p)
{
    if (code == '-')
        return 1;
    if (p > v && s[p - 1] == '\r')
        p--;
    Py_ssize_t len = p - v, i = v;
    if (len <= 0)
        return 0;
    if (code == 'n') {
        if (len > 18)
            return 0;
        for (; i < p; i++)
            if (!is_digit(s[i]))
                return 0;
        return 1;
    }
    if (code == 'f') {
        while (i < p && is_digit(s[i]))
            i++;
        if (i == v || i - v > 15)
            return 0;
        if (i == p)
            return 1;
        if (s[i] != '.')
            return 0;
        for (i++; i < p; i++)
            if (!is_digit(s[i]))
                return 0;
        return 1;
    }
    /* 'r' */
    if (s[v] == '.') {
        if (len < 2)
            return 0;
        for (i = v + 1; i < p; i++)
            if (!is_digit(s[i]))
                return 0;
        return 1;
    }
    if (s[v] != '0' && s[v] != '1')
        return 0;
    if (len == 1)
        return 1;
    if (s[v + 1] != '.')
        return 0;
    for (i = v + 2; i < p; i++)
        if (s[v] == '0' ? !is_digit(s[i]) : s[i] != '0')
            return 0;
    return 1;
}


static int load_env(PyObject *t, Env *out)
{
    /* t = (checks: str, items: tuple of tuples) */
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(t, 0)) ||
        !PyTuple_Check(PyTuple_GET_ITEM(t, 1))) {
        PyErr_SetString(PyExc_TypeError, "an envelope template must be (checks, items)");
        return -1;
    }
    const char *checks = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0));
    if (checks == NULL)
        return -1;
    out->checks = checks[0];
    PyObject *items = PyTuple_GET_ITEM(t, 1);
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    if (n > MAX_ITEMS) {
        PyErr_SetString(PyExc_ValueError, "too many template items");
        return -1;
    }
    out->n = (int)n;
    out->lo = out->hi = -1;
    out->raw = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(items, i);
        Item *x = &out->items[i];
        memset(x, 0, sizeof *x);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(it, 0)))
            goto bad;
        const char *op = PyUnicode_AsUTF8(PyTuple_GET_ITEM(it, 0));
        if (op == NULL)
            return -1;
        x->op = op[0];
        Py_ssize_t k = PyTuple_GET_SIZE(it);
        const char *a = k > 1 && PyUnicode_Check(PyTuple_GET_ITEM(it, 1)) ? PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(it, 1), &x->len) : NULL;
        switch (x->op) {
        case 'L':
            if (a == NULL)
                goto bad;
            for (Py_ssize_t j = 0; j < x->len; j++)
                if ((unsigned char)a[j] > 0x7f)
                    goto bad; /* literals are ASCII: the lines are read as Latin-1 */
            x->text = a;
            break;
        case 'T': {
            if (k != 6 || a == NULL || x->len != 1)
                goto bad;
            x->sep = a[0];
            Py_ssize_t fl, zl;
            const char *fs = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(it, 2), &fl);
            const char *z = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(it, 4), &zl);
            if (fs == NULL || z == NULL)
                return -1;
            x->fsep = fl ? fs[0] : 0;
            x->fd = (int)PyLong_AsLong(PyTuple_GET_ITEM(it, 3));
            x->use = (int)PyLong_AsLong(PyTuple_GET_ITEM(it, 5));
            if (PyErr_Occurred())
                return -1;
            if (x->fd < -1 || x->fd > 9)
                goto bad;
            x->text = z;
            x->len = zl;
            break;
        }
        case 'G':
        case 'R':
            if (out->lo < 0)
                out->lo = (int)i;
            out->hi = (int)i;
            /* fall through */
        case 'S':
        case 'M':
            if (a == NULL || x->len != 1)
                goto bad;
            x->kind = a[0];
            x->len = 0;
            break;
        case 'B':
            break;
        default:
            goto bad;
        }
        if (x->op == 'M' && x->kind == 'J')
            out->raw = 0; /* a JSON string holds no control character: every hole and literal rejects them */
    }
    out->tail = NULL;
    out->tail_len = 0;
    if (n > 0 && out->items[n - 1].op == 'L') {
        out->tail = out->items[n - 1].text;
        out->tail_len = out->items[n - 1].len;
    }
    return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "a template item the scanner does not know");
    return -1;
}

static inline int is_upper(char c) { return c >= 'A' && c <= 'Z'; }

/* s[0:n] == t[0:n], for the short literals of templates and keys: a word or two at a time (a call
 * of memcmp costs more than the comparison); both must hold n bytes. */
static inline int same_bytes(const char *s, const char *t, Py_ssize_t n)
{
    if (n >= 8) {
        if (n > 16)
            return memcmp(s, t, n) == 0;
        unsigned long long a, b, c, d;
        memcpy(&a, s, 8);
        memcpy(&b, t, 8);
        memcpy(&c, s + n - 8, 8);
        memcpy(&d, t + n - 8, 8);
        return a == b && c == d;
    }
    if (n >= 4) {
        unsigned int a, b, c, d;
        memcpy(&a, s, 4);
        memcpy(&b, t, 4);
        memcpy(&c, s + n - 4, 4);
        memcpy(&d, t + n - 4, 4);
        return a == b && c == d;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] != t[i])
            return 0;
    return 1;
}

/* A date and time YYYY-MM-DD<sep>HH:MM:SS[<fsep>digits][zone] at *pp. */
static int match_time(const char *s, Py_ssize_t lim, Py_ssize_t *pp, const Item *it, Peeled *pe)
{
    Py_ssize_t p = *pp;
    if (lim - p < 19)
        return 0;
    const char *t = s + p;
    if (!is_digit(t[0]) || !is_digit(t[1]) || !is_digit(t[2]) || !is_digit(t[3]) || t[4] != '-' || !is_digit(t[5]) ||
        !is_digit(t[6]) || t[7] != '-' || !is_digit(t[8]) || !is_digit(t[9]) || t[10] != it->sep || !is_digit(t[11]) ||
        !is_digit(t[12]) || t[13] != ':' || !is_digit(t[14]) || !is_digit(t[15]) || t[16] != ':' || !is_digit(t[17]) ||
        !is_digit(t[18]))
        return 0;
    p += 19;
    const char *frac = NULL;
    Py_ssize_t fl = 0;
    if (it->fd == -1) {
        if (p + 3 < lim + 0 && s[p] == '.' && is_digit(s[p + 1]) && is_digit(s[p + 2]) && is_digit(s[p + 3])) {
            frac = s + p + 1;
            fl = 3;
            p += 4;
        }
    }
    else if (it->fd > 0) {
        if (lim - p < 1 + it->fd || s[p] != it->fsep)
            return 0;
        for (int j = 1; j <= it->fd; j++)
            if (!is_digit(s[p + j]))
                return 0;
        frac = s + p + 1;
        fl = it->fd;
        p += 1 + it->fd;
    }
    if (it->len) {
        if (lim - p < it->len || !same_bytes(s + p, it->text, it->len))
            return 0;
        p += it->len;
    }
    if (it->use) {
        pe->date = t;
        pe->hm = t + 11;
        pe->sec = t + 17;
        pe->frac = frac;
        pe->frac_len = fl;
    }
    *pp = p;
    return 1;
}

/* the bytes a bracket group's text (a template's 'b' / 'B' hole) is looked at more closely at */
static unsigned char BRACKET_STOP[256], BRACKET_STOP_B[256];

static void init_tables(void)
{
    BRACKET_STOP['['] = BRACKET_STOP[']'] = BRACKET_STOP['\n'] = BRACKET_STOP['P'] = BRACKET_STOP['p'] = 1;
    memcpy(BRACKET_STOP_B, BRACKET_STOP, sizeof BRACKET_STOP);
    for (int c = '0'; c <= '9'; c++)
        BRACKET_STOP_B[c] = 1;
}

/* The value of the four hex digits at h (a JSON \\u escape's), -1 when they are not four. */
static int hex4(const char *h)
{
    int code = 0;
    for (int j = 0; j < 4; j++) {
        char c = h[j];
        int d = is_digit(c) ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        code = code * 16 + d;
    }
    return code;
}

/* Whether s[p:q] holds a byte below 0x20 (a byte of 0x80 or more is none): sixteen bytes a step
 * with SSE2 (every x86-64 has it), else eight by a word's arithmetic; the last few one by one. */
static int has_control(const char *s, Py_ssize_t p, Py_ssize_t q)
{
#ifdef __SSE2__
    const __m128i top = _mm_set1_epi8(0x1f);
    for (; p + 16 <= q; p += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(s + p));
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(v, top), top)))
            return 1; /* a byte whose unsigned maximum with 0x1f is 0x1f: at most 0x1f */
    }
#else
    for (; p + 8 <= q; p += 8) {
        unsigned long long x;
        memcpy(&x, s + p, 8);
        if ((x - 0x2020202020202020ULL) & ~x & 0x8080808080808080ULL)
            break; /* maybe: the bytes from here are looked at one by one */
    }
#endif
    for (; p < q; p++)
        if ((unsigned char)s[p] < 0x20)
            return 1;
    return 0;
}

/* The end of a string's content from p (the index of its closing quote), -1 when it is not one:
 * mode 'J' a JSON string (no control byte, escapes as JSON has them; ``clean``: the line holds no
 * control byte), 'Q' a logfmt quoted value (a backslash and any character but a newline). *bs
 * counts the escapes. From one escape to the next with memchr: many bytes a step. */
static Py_ssize_t string_end(const char *s, Py_ssize_t lim, Py_ssize_t p, int *bs, char mode, int clean)
{
    for (;;) {
        const char *quote = memchr(s + p, '"', lim - p);
        if (quote == NULL)
            return -1;
        Py_ssize_t q = quote - s;
        const char *esc = memchr(s + p, '\\', q - p);
        Py_ssize_t e = esc == NULL ? q : esc - s;
        if (mode == 'J' ? !clean && has_control(s, p, e) : memchr(s + p, '\n', e - p) != NULL)
            return -1;
        if (esc == NULL)
            return q;
        (*bs)++;
        if (e + 1 >= lim)
            return -1;
        char c = s[e + 1];
        if (mode == 'Q')
            p = c == '\n' ? -1 : e + 2;
        else if (c == 'u')
            p = e + 5 < lim && hex4(s + e + 2) >= 0 ? e + 6 : -1;
        else if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
            p = e + 2;
        else
            p = -1;
        if (p < 0)
            return -1;
    }
}

static inline int word_char(char c)
{
    return is_digit(c) || is_upper(c) || (c >= 'a' && c <= 'z') || c == '_' || c == '.' || c == ':' || c == '/' || c == '@' ||
           c == '+' || c == '-';
}

static const char *const LEVELS[] = {"DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL", "TRACE", "NOTICE"};

/* A hole (G, R, S) at *pp, as parsers/header/templates.py's _HOLES patterns read it. */
static int match_hole(const char *s, Py_ssize_t lim, Py_ssize_t *pp, const Item *it, int clean)
{
    Py_ssize_t p = *pp, q = p;
    char k = it->kind;
    if (it->op == 'G') {
        if (k == 'h') { /* SGLang's header tags */
            while (q < lim && s[q] != ']' && s[q] != '[' && s[q] != '\n')
                q++;
        }
        else if (k == 'H') { /* the same inside a record's string */
            while (q < lim && s[q] != ']' && s[q] != '[' && s[q] != '"' && s[q] != '\\' && (unsigned char)s[q] >= 0x20)
                q++;
        }
        else if (k == 'b') {
            while (q < lim && (is_upper(s[q]) || is_digit(s[q]) || s[q] == '_' || s[q] == ' '))
                q++;
        }
        else if (k == 't') {
            while (q < lim && (is_upper(s[q]) || is_digit(s[q]) || s[q] == '_'))
                q++;
            if (q == p)
                return 0;
        }
        else
            return 0;
    }
    else if (it->op == 'R') {
        if (k == 'i') { /* a JSON integer */
            if (q < lim && s[q] == '0')
                q++;
            else if (q < lim && s[q] >= '1' && s[q] <= '9')
                while (q < lim && is_digit(s[q]))
                    q++;
            else
                return 0;
        }
        else if (k == 'd') {
            while (q < lim && is_digit(s[q]))
                q++;
            if (q == p)
                return 0;
        }
        else if (k == 'q') {
            while (q < lim && s[q] != '"' && s[q] != '\\' && (unsigned char)s[q] >= 0x20)
                q++;
        }
        else if (k == 'w') {
            while (q < lim && word_char(s[q]))
                q++;
        }
        else
            return 0;
    }
    else if (k == 'b' || k == 'B') { /* a bracket group's text that names no rank or process (nor a time: 'B') */
        if (q < lim && s[q] == 'u' && lim - q >= 19 && memcmp(s + q, "unified-memory-pool", 19) == 0)
            return 0;
        const unsigned char *stop = k == 'B' ? BRACKET_STOP_B : BRACKET_STOP;
        Py_ssize_t cap = lim - p < 160 ? lim : p + 160;
        while (q < cap) {
            char c = s[q];
            if (!stop[(unsigned char)c]) {
                q++;
                continue;
            }
            if (c == '[' || c == ']' || c == '\n')
                break;
            if (c == 'P' && q + 1 < lim && is_digit(s[q + 1]))
                break;
            if (c == 'p' && lim - q >= 4 && memcmp(s + q, "pid=", 4) == 0)
                break;
            if (k == 'B' && is_digit(c) && q + 4 < lim && is_digit(s[q + 1]) && s[q + 2] == ':' && is_digit(s[q + 3]) && is_digit(s[q + 4]))
                break;
            q++;
        }
    }
    else if (k == 'v') { /* a level word */
        while (q < lim && is_upper(s[q]))
            q++;
        int ok = 0;
        for (size_t j = 0; j < sizeof LEVELS / sizeof LEVELS[0]; j++)
            if ((Py_ssize_t)strlen(LEVELS[j]) == q - p && memcmp(s + p, LEVELS[j], q - p) == 0)
                ok = 1;
        if (!ok)
            return 0;
    }
    else if (k == 'j' || k == 'q') { /* a JSON string's, a logfmt quoted value's content */
        int bs = 0;
        q = string_end(s, lim, p, &bs, k == 'j' ? 'J' : 'Q', clean);
        if (q < 0)
            return 0;
    }
    else if (k == 'w') {
        while (q < lim && word_char(s[q]))
            q++;
    }
    else if (k == 'n') { /* a JSON number */
        if (q < lim && s[q] == '-')
            q++;
        if (q < lim && s[q] == '0')
            q++;
        else if (q < lim && s[q] >= '1' && s[q] <= '9')
            while (q < lim && is_digit(s[q]))
                q++;
        else
            return 0;
        if (q + 1 < lim && s[q] == '.' && is_digit(s[q + 1])) {
            q += 2;
            while (q < lim && is_digit(s[q]))
                q++;
        }
        if (q + 1 < lim && (s[q] == 'e' || s[q] == 'E')) {
            Py_ssize_t e = q + 1;
            if (e < lim && (s[e] == '+' || s[e] == '-'))
                e++;
            if (e < lim && is_digit(s[e])) {
                while (e < lim && is_digit(s[e]))
                    e++;
                q = e;
            }
        }
    }
    else
        return 0;
    *pp = q;
    return 1;
}

/* Read the header of line s[0:n] by template e: 1 and *pe filled, or 0. */
static int match_env(const Env *e, const char *s, Py_ssize_t n, Peeled *pe)
{
    Py_ssize_t p = 0, lim = n, region_end = n;
    char mode = 'E';
    pe->tags_at = pe->tags_len = 0;
    pe->backslash = 0;
    pe->date = NULL;
    Py_ssize_t lo = -1;
    for (int i = 0; i < e->n; i++) {
        const Item *it = &e->items[i];
        if (i == e->lo)
            lo = p;
        switch (it->op) {
        case 'L':
            if (lim - p < it->len || !same_bytes(s + p, it->text, it->len))
                return 0;
            p += it->len;
            break;
        case 'T':
            if (!match_time(s, lim, &p, it, pe))
                return 0;
            break;
        case 'M':
            mode = it->kind;
            if (mode == 'J' || mode == 'Q')
                region_end = string_end(s, n, p, &pe->backslash, mode, pe->clean);
            if (region_end < 0)
                return 0;
            lim = region_end;
            break;
        case 'B':
            pe->body = p;
            pe->body_end = region_end;
            /* a record's message loses its trailing newline (structured.py: rstrip): one escaped
             * '\n' before the closing quote, the string's only escape, is not part of the message */
            if (pe->backslash == 1 && region_end - p >= 2 && s[region_end - 2] == '\\' && s[region_end - 1] == 'n' &&
                !(region_end - p >= 3 && s[region_end - 3] == '\\')) {
                pe->body_end = region_end - 2;
                pe->backslash = 0;
            }
            p = region_end;
            lim = n;
            break;
        default:
            if (!match_hole(s, lim, &p, it, pe->clean))
                return 0;
        }
        if (i == e->hi) {
            pe->tags_at = lo;
            pe->tags_len = p - lo;
        }
    }
    (void)mode;
    return p == n && pe->date != NULL;
}

/* Match the body of a batch line against a template from position p; store the kept integer
 * values. Returns 1 on a match, 0 otherwise. */
static int match_body(const char *s, Py_ssize_t n, Py_ssize_t p, const Template *t, long long *new_v, long long *cached_v)
{
    if (n - p < t->head_len || !same_bytes(s + p, t->head, t->head_len))
        return 0;
    p += t->head_len;
    for (int k = 0; k < t->n_keys; k++) {
        if (k > 0) {
            if (p + 1 >= n || s[p] != ',' || s[p + 1] != ' ')
                return 0;
            p += 2;
        }
        Py_ssize_t kl = t->key_lens[k];
        if (n - p < kl + 2 || !same_bytes(s + p, t->keys[k], kl) || s[p + kl] != ':' || s[p + kl + 1] != ' ')
            return 0;
        p += kl + 2;
        Py_ssize_t v = p;
        /* the value runs to the next comma (lines hold no \n here, see scan_line): values are a few
         * bytes, which a loop reads faster than a call of memchr */
        while (p < n && s[p] != ',')
            p++;
        if (k == t->i_new || k == t->i_cached) {
            Py_ssize_t len = p - v;
            if (len == 0 || len > MAX_DIGITS)
                return 0;
            long long x = 0;
            for (Py_ssize_t i = v; i < p; i++) {
                if (!is_digit(s[i]))
                    return 0;
                x = x * 10 + (s[i] - '0');
            }
            if (k == t->i_new)
                *new_v = x;
            else
                *cached_v = x;
        } else if (!value_ok(t->codes[k], s, v, p)) {
            return 0;
        }
    }
    /* optional trailing ', ' then end of line */
    if (p == n)
        return 1;
    return p + 2 == n && s[p] == ',' && s[p + 1] == ' ';
}

typedef struct {
    Template td, tp;
    Env *envs; /* the header templates, or NULL: SGLang's default header */
    int n_envs;
    Group *groups;
    Py_ssize_t cap, ng;
    Py_ssize_t hint[2]; /* last group hit per kind */
    Py_ssize_t n_info;
    long long total_new, total_cached;
    /* the newest line's time: date (10), HH:MM (5), SS (2), fraction (or NULL) */
    const char *top, *top_hm, *top_sec, *top_frac;
    Py_ssize_t top_frac_len;
} Scan;

static int scan_init(Scan *sc, PyObject *spec)
{
    memset(sc, 0, sizeof *sc);
    Py_ssize_t k = PyTuple_GET_SIZE(spec);
    if (k != 2 && k != 3) {
        PyErr_SetString(PyExc_TypeError, "spec must be (decode template, prefill template[, envelope templates])");
        return -1;
    }
    if (load_template(PyTuple_GET_ITEM(spec, 0), &sc->td) < 0 || load_template(PyTuple_GET_ITEM(spec, 1), &sc->tp) < 0)
        return -1;
    if (k == 3) {
        PyObject *envs = PyTuple_GET_ITEM(spec, 2);
        if (!PyTuple_Check(envs) || PyTuple_GET_SIZE(envs) < 1 || PyTuple_GET_SIZE(envs) > MAX_ENVS) {
            PyErr_SetString(PyExc_ValueError, "envelope templates: a tuple of 1 to 8");
            return -1;
        }
        sc->n_envs = (int)PyTuple_GET_SIZE(envs);
        sc->envs = PyMem_Malloc(sc->n_envs * sizeof(Env));
        if (sc->envs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (int e = 0; e < sc->n_envs; e++)
            if (load_env(PyTuple_GET_ITEM(envs, e), &sc->envs[e]) < 0)
                return -1;
    }
    sc->cap = 64;
    sc->groups = malloc(sc->cap * sizeof(Group)); /* raw: grown by scan_line without the GIL (scan_text) */
    if (sc->groups == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    sc->hint[0] = sc->hint[1] = -1;
    return 0;
}

static void scan_free(Scan *sc)
{
    free(sc->groups);
    PyMem_Free(sc->envs);
}

/* The message at s[p:end] of kind 'D', 'P' or 'I' (0 when it is none of them); the batch line's
 * kept values in *new_v, *cached_v. A record's string with an escape is never a batch line here. */
static char message_kind(Scan *sc, const char *s, Py_ssize_t p, Py_ssize_t end, int backslash, long long *new_v, long long *cached_v)
{
    char kind = p < end ? s[p] : 0;
    if (kind == 'D') {
        if (backslash || !match_body(s, end, p, &sc->td, new_v, cached_v))
            return 0;
    }
    else if (kind == 'P') {
        if (backslash || !match_body(s, end, p, &sc->tp, new_v, cached_v))
            return 0;
    }
    else if (!(kind == 'I' && end - p >= 5 && memcmp(s + p, "INFO:", 5) == 0))
        return 0;
    return kind;
}

/* Take one line (s, n) that has index/offset `at` into the run. Returns 1 if it belongs to the
 * run, 0 if it ends the run, -1 when out of memory (no exception set: it calls no Python API, so
 * scan_text runs it without the GIL). The line must not contain '\n' (no
 * line the templates accept does): callers cut text at newlines and stop at list items with one. */
static int scan_line(Scan *sc, const char *s, Py_ssize_t n, Py_ssize_t at)
{
    Peeled pe;
    long long new_v = 0, cached_v = 0;
    char kind = 0;
    int env = -1;
    if (sc->envs != NULL) {
        /* one pass over the line for control bytes: none (the usual line) spares the templates
         * their own looks for them ('\r', escape codes, a JSON string's control characters) */
        pe.clean = !has_control(s, 0, n);
        int raw = pe.clean ? 0 : -1; /* whether the line holds a '\r' or an escape code: looked at once, when needed */
        for (int e = 0; e < sc->n_envs && !kind; e++) {
            const Env *en = &sc->envs[e];
            if (en->tail_len && (n < en->tail_len || !same_bytes(s + n - en->tail_len, en->tail, en->tail_len)))
                continue;
            if (en->raw) {
                if (raw < 0)
                    raw = memchr(s, '\r', n) != NULL || memchr(s, '\x1b', n) != NULL;
                if (raw)
                    continue;
            }
            if (en->checks == 'l' && n > MAX_LOGFMT)
                continue;
            if (!match_env(en, s, n, &pe))
                continue;
            if (en->checks == 'p' && pe.body > MAX_PREAMBLE)
                continue;
            new_v = cached_v = 0;
            kind = message_kind(sc, s, pe.body, pe.body_end, pe.backslash, &new_v, &cached_v);
            env = e;
        }
        if (!kind)
            return 0;
    }
    else {
        /* header: [YYYY-MM-DD HH:MM:SS */
        if (n < 22 || s[0] != '[' || !is_digit(s[1]) || !is_digit(s[2]) || !is_digit(s[3]) || !is_digit(s[4]) || s[5] != '-' ||
            !is_digit(s[6]) || !is_digit(s[7]) || s[8] != '-' || !is_digit(s[9]) || !is_digit(s[10]) || s[11] != ' ' ||
            !is_digit(s[12]) || !is_digit(s[13]) || s[14] != ':' || !is_digit(s[15]) || !is_digit(s[16]) || s[17] != ':' ||
            !is_digit(s[18]) || !is_digit(s[19]))
            return 0;
        Py_ssize_t p = 20;
        pe.frac = NULL;
        pe.frac_len = 0;
        if (p + 3 < n && s[p] == '.' && is_digit(s[p + 1]) && is_digit(s[p + 2]) && is_digit(s[p + 3])) {
            pe.frac = s + p + 1;
            pe.frac_len = 3;
            p += 4;
        }
        pe.tags_at = p;
        while (p < n && s[p] != ']' && s[p] != '[')
            p++;
        if (p + 1 >= n || s[p] != ']' || s[p + 1] != ' ')
            return 0;
        pe.tags_len = p - pe.tags_at;
        pe.date = s + 1;
        pe.hm = s + 12;
        pe.sec = s + 18;
        kind = message_kind(sc, s, p + 2, n, 0, &new_v, &cached_v);
        if (!kind)
            return 0;
    }
    /* every sum of this call is at most the call's total: stop before that overflows */
    if (kind == 'P' && (new_v > LLONG_MAX - sc->total_new || cached_v > LLONG_MAX - sc->total_cached))
        return 0;
    if (kind == 'I')
        sc->n_info++;
    else {
        /* find or add the group (kind, tags, bucket) */
        int ki = kind == 'P';
        Py_ssize_t g = sc->hint[ki];
        Group *groups = sc->groups;
        const char *tags = s + pe.tags_at;
        Py_ssize_t tags_len = pe.tags_len;
#define SAME(G)                                                                                                             \
    (groups[G].kind == kind && groups[G].env == env && groups[G].tags_len == tags_len &&                                  \
     memcmp(groups[G].bucket_buf, pe.date, 10) == 0 && memcmp(groups[G].bucket_buf + 11, pe.hm, 5) == 0 &&                 \
     groups[G].bucket_buf[16] == pe.sec[0] && memcmp(groups[G].tags, tags, tags_len) == 0)
        if (g < 0 || !SAME(g)) {
            /* only the newest groups: buckets come in time order, so an older match is rare, and a
             * duplicate group it causes is merged by scan_result (a sparse log, one line per
             * bucket, would otherwise make every new group search them all) */
            Py_ssize_t floor = sc->ng > RECENT_GROUPS ? sc->ng - RECENT_GROUPS : 0;
            for (g = sc->ng - 1; g >= floor; g--)
                if (SAME(g))
                    break;
            if (g < floor)
                g = -1;
        }
#undef SAME
        Group *gr;
        if (g < 0) {
            if (sc->ng == sc->cap) {
                Group *bigger = realloc(sc->groups, 2 * sc->cap * sizeof(Group));
                if (bigger == NULL)
                    return -1; /* out of memory: the caller raises, holding the GIL */
                sc->groups = groups = bigger;
                sc->cap *= 2;
            }
            g = sc->ng++;
            gr = &groups[g];
            gr->kind = kind;
            gr->env = (signed char)env;
            gr->tags = tags;
            gr->tags_len = tags_len;
            memcpy(gr->bucket_buf, pe.date, 10);
            gr->bucket_buf[10] = ' ';
            memcpy(gr->bucket_buf + 11, pe.hm, 5);
            gr->bucket_buf[16] = pe.sec[0];
            gr->count = 0;
            gr->first = at;
            gr->new_sum = gr->cached_sum = 0;
        }
        else
            gr = &groups[g];
        if (kind == 'P') {
            sc->total_new += new_v;
            sc->total_cached += cached_v;
            gr->new_sum += new_v;
            gr->cached_sum += cached_v;
        }
        gr->count++;
        gr->last = at;
        sc->hint[ki] = g;
    }
    /* newest time: (YYYY-MM-DD, HH:MM, SS, fraction) compared as strings, no fraction < any */
    int c = 1;
    if (sc->top != NULL) {
        c = memcmp(pe.date, sc->top, 10);
        if (c == 0)
            c = memcmp(pe.hm, sc->top_hm, 5);
        if (c == 0)
            c = memcmp(pe.sec, sc->top_sec, 2);
        if (c == 0 && pe.frac != NULL) {
            if (sc->top_frac == NULL)
                c = 1;
            else {
                Py_ssize_t m = pe.frac_len < sc->top_frac_len ? pe.frac_len : sc->top_frac_len;
                c = memcmp(pe.frac, sc->top_frac, m);
                if (c == 0)
                    c = pe.frac_len > sc->top_frac_len;
            }
        }
    }
    if (c > 0) {
        sc->top = pe.date;
        sc->top_hm = pe.hm;
        sc->top_sec = pe.sec;
        sc->top_frac = pe.frac;
        sc->top_frac_len = pe.frac_len;
    }
    return 1;
}

/* counts[key] += v for an int value */
static int dict_add(PyObject *d, PyObject *key, long long v)
{
    PyObject *old = PyDict_GetItemWithError(d, key);
    if (old == NULL && PyErr_Occurred())
        return -1;
    PyObject *x = PyLong_FromLongLong(v);
    if (x != NULL && old != NULL)
        Py_SETREF(x, PyNumber_Add(old, x));
    if (x == NULL)
        return -1;
    int r = PyDict_SetItem(d, key, x);
    Py_DECREF(x);
    return r;
}

/* d[key] = v, or (keep_first) only if key is not there yet */
static int dict_set_index(PyObject *d, PyObject *key, Py_ssize_t v, int keep_first)
{
    PyObject *x = PyLong_FromSsize_t(v);
    if (x == NULL)
        return -1;
    int r = keep_first ? (PyDict_SetDefault(d, key, x) == NULL ? -1 : 0) : PyDict_SetItem(d, key, x);
    Py_DECREF(x);
    return r;
}

/* (stop, n_info, top, counts, new_sums, cached_sums, first, last) */
static PyObject *scan_result(Scan *sc, Py_ssize_t stop)
{
    PyObject *result = NULL, *top_t = NULL;
    PyObject *counts = PyDict_New(), *news = PyDict_New(), *cacheds = PyDict_New(), *first = PyDict_New(), *last = PyDict_New();
    if (!counts || !news || !cacheds || !first || !last)
        goto out;
    for (Py_ssize_t g = 0; g < sc->ng; g++) {
        Group *gr = &sc->groups[g];
        int ok = 0;
        PyObject *k = PyUnicode_FromStringAndSize(&gr->kind, 1);
        PyObject *tags = NULL;
        if (gr->env < 0)
            tags = PyUnicode_DecodeLatin1(gr->tags, gr->tags_len, NULL);
        else {
            char *buf = PyMem_Malloc(gr->tags_len + 1);
            if (buf != NULL) {
                buf[0] = (char)('0' + gr->env);
                memcpy(buf + 1, gr->tags, gr->tags_len);
                tags = PyUnicode_DecodeLatin1(buf, gr->tags_len + 1, NULL);
                PyMem_Free(buf);
            }
            else
                PyErr_NoMemory();
        }
        PyObject *bucket = PyUnicode_DecodeLatin1(gr->bucket_buf, BUCKET_LEN, NULL);
        PyObject *ck = (k && tags) ? PyTuple_Pack(2, k, tags) : NULL;
        PyObject *bk = (k && tags && bucket) ? PyTuple_Pack(3, k, tags, bucket) : NULL;
        /* groups are in order of their first line: for a key with two groups the earlier one
         * holds its first line and the later one its last */
        if (ck && bk && dict_add(counts, ck, gr->count) == 0 && dict_set_index(first, bk, gr->first, 1) == 0 &&
            dict_set_index(last, bk, gr->last, 0) == 0) {
            ok = 1;
            if (gr->kind == 'P')
                ok = (sc->tp.i_new < 0 || dict_add(news, tags, gr->new_sum) == 0) &&
                     (sc->tp.i_cached < 0 || dict_add(cacheds, tags, gr->cached_sum) == 0);
        }
        Py_XDECREF(k);
        Py_XDECREF(tags);
        Py_XDECREF(bucket);
        Py_XDECREF(ck);
        Py_XDECREF(bk);
        if (!ok)
            goto out;
    }
    if (sc->top != NULL) {
        char ymdhm[16];
        memcpy(ymdhm, sc->top, 10);
        ymdhm[10] = ' ';
        memcpy(ymdhm + 11, sc->top_hm, 5);
        top_t = Py_BuildValue("(s#s#s#)", ymdhm, (Py_ssize_t)16, sc->top_sec, (Py_ssize_t)2, sc->top_frac ? sc->top_frac : "",
                              sc->top_frac ? sc->top_frac_len : (Py_ssize_t)0);
    }
    else
        top_t = Py_NewRef(Py_None);
    if (top_t != NULL)
        result = Py_BuildValue("(nnOOOOOO)", stop, sc->n_info, top_t, counts, news, cacheds, first, last);
out:
    Py_XDECREF(top_t);
    Py_XDECREF(counts);
    Py_XDECREF(news);
    Py_XDECREF(cacheds);
    Py_XDECREF(first);
    Py_XDECREF(last);
    return result;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *lines, *spec;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!nO!:scan", &PyList_Type, &lines, &start, &PyTuple_Type, &spec))
        return NULL;
    Scan sc;
    if (scan_init(&sc, spec) < 0) {
        scan_free(&sc);
        return NULL;
    }
    Py_ssize_t i = start < 0 ? 0 : start, n_lines = PyList_GET_SIZE(lines);
    PyObject *result = NULL;
    for (; i < n_lines; i++) {
        PyObject *o = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_Check(o) || PyUnicode_KIND(o) != PyUnicode_1BYTE_KIND)
            break;
        const char *line = (const char *)PyUnicode_DATA(o);
        Py_ssize_t len = PyUnicode_GET_LENGTH(o);
        if (memchr(line, '\n', len) != NULL)
            break;
        int r = scan_line(&sc, line, len, i);
        if (r < 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (r == 0)
            break;
    }
    result = scan_result(&sc, i);
done:
    scan_free(&sc);
    return result;
}

static PyObject *scan_text(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *text, *spec;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "UnO!:scan_text", &text, &pos, &PyTuple_Type, &spec))
        return NULL;
    Scan sc;
    if (scan_init(&sc, spec) < 0) {
        scan_free(&sc);
        return NULL;
    }
    Py_ssize_t len = PyUnicode_GET_LENGTH(text), p = pos < 0 ? 0 : pos;
    PyObject *result = NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    const char *s = (const char *)data;
    char *copy = NULL;
    Py_ssize_t base = p; /* copy[i] is the character at base + i */
    if (kind != PyUnicode_1BYTE_KIND && p < len) {
        /* a block with a wider character somewhere: read its Latin-1 lines through a one-byte copy
         * (made line by line, so the run costs what it consumes); the first line with a wider
         * character ends the run, as in a list of lines */
        copy = PyMem_Malloc(len - p);
        if (copy == NULL) {
            PyErr_NoMemory();
            goto done;
        }
    }
    int oom = 0;
    /* the lines are read without the GIL (the text is immutable and held by the caller; scan_line calls no Python
     * API): replay's reader thread reads and decodes the next block meanwhile (exporter/reading/offline.py) */
    Py_BEGIN_ALLOW_THREADS
    while (p < len) {
        Py_ssize_t end = p;
        if (copy == NULL) {
            const char *e = memchr(s + p, '\n', len - p);
            end = e ? e - s : len;
        }
        else {
            int wide = 0;
            for (; end < len; end++) {
                Py_UCS4 c = PyUnicode_READ(kind, data, end);
                if (c == '\n')
                    break;
                if (c > 0xff)
                    wide = 1;
                copy[end - base] = (char)c;
            }
            if (wide)
                break;
        }
        int r = scan_line(&sc, copy ? copy + (p - base) : s + p, end - p, p);
        if (r < 0) {
            oom = 1;
            break;
        }
        if (r == 0)
            break;
        p = end < len ? end + 1 : len;
    }
    Py_END_ALLOW_THREADS
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    result = scan_result(&sc, p > len ? len : p);
done:
    PyMem_Free(copy);
    scan_free(&sc);
    return result;
}


/* ------------------------------------------------------------------------------------------
 * Container records (exporter/reading/container.py, exporter/reading/reader.py): unwrap(data, start, end, fmt,
 * max_line) reads the complete lines of data[start:end] (each ending in '\n') while each is a
 * record the reading layer would hand on as one line without joining or cutting anything (a
 * final Docker json-file record in the driver's own layout, a CRI 'F' record, or a line that is
 * no record of the format), all of it ASCII, and returns (the lines it hands on, each ending in
 * '\n', the offset of the first line it did not read). The Reader reads that one itself (a split
 * record, an escape outside ASCII, a record longer than max_line, another layout) and calls
 * again after it. tests/sources/test_container_unwrap.py compares the two on every kind of record. */

/* SGLang's default header at the start of m[0:n] (parsers/header/prefix.py SGLANG_HEADER_RE.match) */
static int sglang_header_at(const char *m, Py_ssize_t n)
{
    if (n < 22 || m[0] != '[' || !is_digit(m[1]) || !is_digit(m[2]) || !is_digit(m[3]) || !is_digit(m[4]) || m[5] != '-' ||
        !is_digit(m[6]) || !is_digit(m[7]) || m[8] != '-' || !is_digit(m[9]) || !is_digit(m[10]) || m[11] != ' ' ||
        !is_digit(m[12]) || !is_digit(m[13]) || m[14] != ':' || !is_digit(m[15]) || !is_digit(m[16]) || m[17] != ':' ||
        !is_digit(m[18]) || !is_digit(m[19]))
        return 0;
    Py_ssize_t p = 20;
    while (p < n && m[p] != ']' && m[p] != '[')
        p++;
    return p + 1 < n && m[p] == ']' && m[p + 1] == ' ';
}

static int all_ascii(const char *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
#ifdef __SSE2__
    for (; i + 16 <= n; i += 16)
        if (_mm_movemask_epi8(_mm_loadu_si128((const __m128i *)(s + i))))
            return 0; /* a byte with its top bit set */
#endif
    for (; i + 8 <= n; i += 8) {
        unsigned long long x;
        memcpy(&x, s + i, 8);
        if (x & 0x8080808080808080ULL)
            return 0;
    }
    for (; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return 0;
    return 1;
}

/* Emit one message as the reading layer does (Reader._emit): as it is when it has no time, is
 * empty or starts with SGLang's header, else behind '<time> <stream> F '. Returns bytes written. */
static Py_ssize_t emit(char *o, const char *msg, Py_ssize_t ml, const char *t, Py_ssize_t tl, const char *stream)
{
    Py_ssize_t k = 0;
    if (t != NULL && ml > 0 && !sglang_header_at(msg, ml)) {
        memcpy(o, t, tl);
        k = tl;
        o[k++] = ' ';
        memcpy(o + k, stream, 6);
        k += 6;
        memcpy(o + k, " F ", 3);
        k += 3;
    }
    memcpy(o + k, msg, ml);
    k += ml;
    o[k++] = '\n';
    return k;
}

/* One Docker json-file line s[0:n]: bytes written to o, or -1 when the Reader must read it. */
static Py_ssize_t docker_line(const char *s, Py_ssize_t n, char *o, char *scratch, Py_ssize_t max_line)
{
    if (n == 0 || s[0] != '{')
        return n <= max_line ? emit(o, s, n, NULL, 0, NULL) : -1; /* no record: a plain line */
    if (n < 8 || memcmp(s, "{\"log\":\"", 8) != 0)
        return -1;
    Py_ssize_t p = 8, ml = 0;
    for (;;) {
        /* the plain bytes up to the next quote or backslash in one copy (memchr: many bytes a step) */
        const char *quote = memchr(s + p, '"', n - p);
        if (quote == NULL)
            return -1;
        Py_ssize_t q = quote - s;
        const char *esc = memchr(s + p, '\\', q - p);
        Py_ssize_t r = esc == NULL ? q : esc - s;
        if (has_control(s, p, r))
            return -1;
        memcpy(scratch + ml, s + p, r - p);
        ml += r - p;
        p = r;
        if (esc == NULL)
            break;
        if (p + 1 >= n)
            return -1;
        char e = s[p + 1], d;
        switch (e) {
        case '"': d = '"'; break;
        case '\\': d = '\\'; break;
        case '/': d = '/'; break;
        case 'b': d = '\b'; break;
        case 'f': d = '\f'; break;
        case 'n': d = '\n'; break;
        case 'r': d = '\r'; break;
        case 't': d = '\t'; break;
        case 'u': {
            int code = p + 5 < n ? hex4(s + p + 2) : -1;
            if (code < 0 || code >= 0x80)
                return -1; /* not an escape, or outside ASCII: the Reader decodes it */
            scratch[ml++] = (char)code;
            p += 6;
            continue;
        }
        default:
            return -1;
        }
        scratch[ml++] = d;
        p += 2;
    }
    /* a final record: its message ends in the one newline it holds */
    if (ml == 0 || scratch[ml - 1] != '\n' || memchr(scratch, '\n', ml - 1) != NULL || ml - 1 > max_line)
        return -1;
    ml--;
    p++; /* the closing quote */
    if (n - p < 11 || memcmp(s + p, ",\"stream\":\"", 11) != 0)
        return -1;
    p += 11;
    if (n - p < 6 || (memcmp(s + p, "stdout", 6) != 0 && memcmp(s + p, "stderr", 6) != 0))
        return -1;
    const char *stream = s + p;
    p += 6;
    if (n - p < 10 || memcmp(s + p, "\",\"time\":\"", 10) != 0)
        return -1;
    p += 10;
    const char *t = s + p;
    while (p < n && s[p] != '"' && s[p] != '\\' && (unsigned char)s[p] >= 0x20)
        p++;
    Py_ssize_t tl = s + p - t;
    if (n - p != 2 || s[p] != '"' || s[p + 1] != '}')
        return -1;
    /* the record's time is used when it starts with a year and holds no blank */
    int timed = tl >= 4 && is_digit(t[0]) && is_digit(t[1]) && is_digit(t[2]) && is_digit(t[3]) && memchr(t, ' ', tl) == NULL;
    return emit(o, scratch, ml, timed ? t : NULL, tl, stream);
}

/* One CRI line s[0:n]: bytes written to o, or -1 when the Reader must read it. */
static Py_ssize_t cri_line(const char *s, Py_ssize_t n, char *o, Py_ssize_t max_line)
{
    /* <YYYY-MM-DD>T<not a blank>+ <stdout|stderr> <P|F>[ <message>] */
    Py_ssize_t p = 0;
    int record = n >= 12 && is_digit(s[0]) && is_digit(s[1]) && is_digit(s[2]) && is_digit(s[3]) && s[4] == '-' && is_digit(s[5]) &&
                 is_digit(s[6]) && s[7] == '-' && is_digit(s[8]) && is_digit(s[9]) && s[10] == 'T' && s[11] != ' ';
    Py_ssize_t tl = 0, m = 0;
    if (record) {
        p = 11;
        while (p < n && s[p] != ' ')
            p++;
        tl = p;
        record = p + 9 <= n && s[p] == ' ' && (memcmp(s + p + 1, "stdout", 6) == 0 || memcmp(s + p + 1, "stderr", 6) == 0) &&
                 s[p + 7] == ' ' && (s[p + 8] == 'F' || s[p + 8] == 'P') && (p + 9 == n || s[p + 9] == ' ');
        m = p + 10;
    }
    if (!record)
        return n <= max_line ? emit(o, s, n, NULL, 0, NULL) : -1; /* no record: a plain line */
    if (s[p + 8] == 'P')
        return -1; /* a partial record: the Reader joins it with the next */
    if (m > n)
        m = n; /* 'F' and nothing after it: an empty message */
    if (n - m > max_line)
        return -1;
    return emit(o, s + m, n - m, s, tl, s + p + 1);
}

static PyObject *unwrap(PyObject *self, PyObject *args)
{
    (void)self;
    Py_buffer buf;
    Py_ssize_t start, end, max_line;
    int fmt;
    if (!PyArg_ParseTuple(args, "y*nnCn:unwrap", &buf, &start, &end, &fmt, &max_line))
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || end > buf.len || start > end || (fmt != 'd' && fmt != 'c') || max_line < 0) {
        PyErr_SetString(PyExc_ValueError, "unwrap(data, start, end, 'd' | 'c', max_line)");
        PyBuffer_Release(&buf);
        return NULL;
    }
    const char *data = (const char *)buf.buf;
    /* the lines are written straight into the str handed back (never longer than the records),
     * which is cut to its length at the end */
    PyObject *text = PyUnicode_New(end - start, 127);
    char *scratch = fmt == 'd' ? PyMem_Malloc(end - start + 1) : NULL;
    if (text == NULL || (fmt == 'd' && scratch == NULL)) {
        if (text != NULL)
            PyErr_NoMemory();
        goto done;
    }
    char *out = (char *)PyUnicode_DATA(text);
    Py_ssize_t p = start, o = 0;
    while (p < end) {
        const char *nl = memchr(data + p, '\n', end - p);
        if (nl == NULL)
            break;
        Py_ssize_t n = nl - (data + p);
        if (!all_ascii(data + p, n))
            break;
        Py_ssize_t k = fmt == 'd' ? docker_line(data + p, n, out + o, scratch, max_line) : cri_line(data + p, n, out + o, max_line);
        if (k < 0)
            break;
        o += k;
        p += n + 1;
    }
    if (PyUnicode_Resize(&text, o) == 0) {
        result = Py_BuildValue("(On)", text, p);
    }
done:
    Py_XDECREF(text);
    PyMem_Free(scratch);
    PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(lines, start, spec) -> (stop, n_info, top, counts, new_sums, cached_sums, first, last)"},
    {"scan_text", scan_text, METH_VARARGS, "scan_text(text, pos, spec): scan over the lines of one string; indices are offsets"},
    {"unwrap", unwrap, METH_VARARGS, "unwrap(data, start, end, 'd' | 'c', max_line) -> (lines, offset): container records read in bulk"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "exporter._scan", "Native scanner for busy SGLang logs, and container records unwrapped in bulk.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void)
{
    init_tables();
    return PyModule_Create(&module);
}
