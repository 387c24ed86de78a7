/* Native scanner for the steady state of a busy SGLang log (see exporter/scan.py).
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
 * The pure-Python twin (exporter/scan.py, one fullmatch per line) gives the same result; tests
 * compare the two. A line with a character past U+00FF stops the scan, as does a prefill value
 * of more than 9 digits (parsers.numbers.MAX_COUNT) or one that would take the call's sum past 2**63 - 1: the line-by-line path handles them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <string.h>

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

typedef struct {
    char kind;
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

/* Match the body of a batch line against a template from position p; store the kept integer
 * values. Returns 1 on a match, 0 otherwise. */
static int match_body(const char *s, Py_ssize_t n, Py_ssize_t p, const Template *t, long long *new_v, long long *cached_v)
{
    if (n - p < t->head_len || memcmp(s + p, t->head, t->head_len) != 0)
        return 0;
    p += t->head_len;
    for (int k = 0; k < t->n_keys; k++) {
        if (k > 0) {
            if (p + 1 >= n || s[p] != ',' || s[p + 1] != ' ')
                return 0;
            p += 2;
        }
        Py_ssize_t kl = t->key_lens[k];
        if (n - p < kl + 2 || memcmp(s + p, t->keys[k], kl) != 0 || s[p + kl] != ':' || s[p + kl + 1] != ' ')
            return 0;
        p += kl + 2;
        Py_ssize_t v = p;
        const char *comma = memchr(s + p, ',', n - p); /* lines hold no \n here (see scan_line) */
        p = comma ? comma - s : n;
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
    Group *groups;
    Py_ssize_t cap, ng;
    Py_ssize_t hint[2]; /* last group hit per kind */
    Py_ssize_t n_info;
    long long total_new, total_cached;
    const char *top; /* header of the newest line: s + 1 .. s + 20 */
    const char *top_ms; /* its milliseconds, or NULL */
} Scan;

static int scan_init(Scan *sc, PyObject *spec)
{
    memset(sc, 0, sizeof *sc);
    if (PyTuple_GET_SIZE(spec) != 2) {
        PyErr_SetString(PyExc_TypeError, "spec must be (decode template, prefill template)");
        return -1;
    }
    if (load_template(PyTuple_GET_ITEM(spec, 0), &sc->td) < 0 || load_template(PyTuple_GET_ITEM(spec, 1), &sc->tp) < 0)
        return -1;
    sc->cap = 64;
    sc->groups = PyMem_Malloc(sc->cap * sizeof(Group));
    if (sc->groups == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    sc->hint[0] = sc->hint[1] = -1;
    return 0;
}

/* Take one line (s, n) that has index/offset `at` into the run. Returns 1 if it belongs to the
 * run, 0 if it ends the run, -1 on error (exception set). The line must not contain '\n' (no
 * line the templates accept does): callers cut text at newlines and stop at list items with one. */
static int scan_line(Scan *sc, const char *s, Py_ssize_t n, Py_ssize_t at)
{
    /* header: [YYYY-MM-DD HH:MM:SS */
    if (n < 22 || s[0] != '[' || !is_digit(s[1]) || !is_digit(s[2]) || !is_digit(s[3]) || !is_digit(s[4]) || s[5] != '-' ||
        !is_digit(s[6]) || !is_digit(s[7]) || s[8] != '-' || !is_digit(s[9]) || !is_digit(s[10]) || s[11] != ' ' ||
        !is_digit(s[12]) || !is_digit(s[13]) || s[14] != ':' || !is_digit(s[15]) || !is_digit(s[16]) || s[17] != ':' ||
        !is_digit(s[18]) || !is_digit(s[19]))
        return 0;
    Py_ssize_t p = 20;
    const char *ms = NULL;
    if (p + 3 < n && s[p] == '.' && is_digit(s[p + 1]) && is_digit(s[p + 2]) && is_digit(s[p + 3])) {
        ms = s + p + 1;
        p += 4;
    }
    Py_ssize_t tags_at = p;
    while (p < n && s[p] != ']' && s[p] != '[')
        p++;
    if (p + 1 >= n || s[p] != ']' || s[p + 1] != ' ')
        return 0;
    Py_ssize_t tags_len = p - tags_at;
    p += 2;
    char kind = p < n ? s[p] : 0;
    long long new_v = 0, cached_v = 0;
    if (kind == 'D') {
        if (!match_body(s, n, p, &sc->td, &new_v, &cached_v))
            return 0;
    }
    else if (kind == 'P') {
        if (!match_body(s, n, p, &sc->tp, &new_v, &cached_v))
            return 0;
    }
    else if (kind == 'I' && n - p >= 5 && memcmp(s + p, "INFO:", 5) == 0)
        sc->n_info++;
    else
        return 0;
    /* every sum of this call is at most the call's total: stop before that overflows */
    if (kind == 'P' && (new_v > LLONG_MAX - sc->total_new || cached_v > LLONG_MAX - sc->total_cached))
        return 0;

    if (kind != 'I') {
        /* find or add the group (kind, tags, bucket) */
        int ki = kind == 'P';
        Py_ssize_t g = sc->hint[ki];
        Group *groups = sc->groups;
        const char *tags = s + tags_at;
#define SAME(G)                                                                                                             \
    (groups[G].kind == kind && groups[G].tags_len == tags_len && memcmp(groups[G].bucket_buf, s + 1, 16) == 0 &&            \
     groups[G].bucket_buf[16] == s[18] && memcmp(groups[G].tags, tags, tags_len) == 0)
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
                Group *bigger = PyMem_Realloc(sc->groups, 2 * sc->cap * sizeof(Group));
                if (bigger == NULL) {
                    PyErr_NoMemory();
                    return -1;
                }
                sc->groups = groups = bigger;
                sc->cap *= 2;
            }
            g = sc->ng++;
            gr = &groups[g];
            gr->kind = kind;
            gr->tags = tags;
            gr->tags_len = tags_len;
            memcpy(gr->bucket_buf, s + 1, 16);
            gr->bucket_buf[16] = s[18];
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
    /* newest header: (YYYY-MM-DD HH:MM, SS, ms or '') compared as strings, '' < any ms */
    if (sc->top == NULL) {
        sc->top = s + 1;
        sc->top_ms = ms;
    }
    else {
        int c = memcmp(s + 1, sc->top, 19);
        if (c > 0 || (c == 0 && ms != NULL && (sc->top_ms == NULL || memcmp(ms, sc->top_ms, 3) > 0))) {
            sc->top = s + 1;
            sc->top_ms = ms;
        }
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
        PyObject *tags = PyUnicode_DecodeLatin1(gr->tags, gr->tags_len, NULL);
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
    if (sc->top != NULL)
        top_t = Py_BuildValue("(s#s#s#)", sc->top, (Py_ssize_t)16, sc->top + 17, (Py_ssize_t)2, sc->top_ms ? sc->top_ms : "",
                              (Py_ssize_t)(sc->top_ms ? 3 : 0));
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
    if (scan_init(&sc, spec) < 0)
        return NULL;
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
        if (r < 0)
            goto done;
        if (r == 0)
            break;
    }
    result = scan_result(&sc, i);
done:
    PyMem_Free(sc.groups);
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
    if (scan_init(&sc, spec) < 0)
        return NULL;
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
        if (r < 0)
            goto done;
        if (r == 0)
            break;
        p = end < len ? end + 1 : len;
    }
    result = scan_result(&sc, p > len ? len : p);
done:
    PyMem_Free(copy);
    PyMem_Free(sc.groups);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(lines, start, spec) -> (stop, n_info, top, counts, new_sums, cached_sums, first, last)"},
    {"scan_text", scan_text, METH_VARARGS, "scan_text(text, pos, spec): scan over the lines of one string; indices are offsets"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "exporter._scan", "Native scanner for busy SGLang logs.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
