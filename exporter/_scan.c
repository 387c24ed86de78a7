/* Native scanner for the steady state of a busy SGLang log (see exporter/scan.py).
 *
 * scan(lines, start, spec) walks lines[start:] while each line is one of
 *   [YYYY-MM-DD HH:MM:SS(.mmm)?TAGS] <decode head><k1>: v1, <k2>: v2, ...(, )?
 *   [YYYY-MM-DD HH:MM:SS(.mmm)?TAGS] <prefill head>...   (same, with the prefill keys)
 *   [YYYY-MM-DD HH:MM:SS(.mmm)?TAGS] INFO:...
 * i.e. exactly what the learned line templates of parsers/sglang.py accept (values are
 * [^,\n]*, the new/cached prefill values must be plain decimal integers), and stops at the
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
 * The pure-Python path (the multi-line regex in exporter/scan.py) gives the same result; tests
 * compare the two. Lines that are not one-byte (Latin-1) strings stop the scan, as does a prefill value
 * of more than 18 digits or one that would take the call's sum past 2**63 - 1: the line-by-line path handles them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define BUCKET_LEN 17 /* 'YYYY-MM-DD HH:MM' + tens digit of the seconds */
#define MAX_KEYS 64
#define MAX_DIGITS 18

typedef struct {
    const char *head;
    Py_ssize_t head_len;
    const char *keys[MAX_KEYS];
    Py_ssize_t key_lens[MAX_KEYS];
    int n_keys;
    int i_new, i_cached; /* indices of kept integer values, -1 = none */
} Template;

typedef struct {
    char kind;
    const char *tags;
    Py_ssize_t tags_len;
    const char *bucket; /* BUCKET_LEN bytes: ymdhm (16) + tens digit */
    char bucket_buf[BUCKET_LEN];
    Py_ssize_t count, first, last;
    long long new_sum, cached_sum;
} Group;

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

static int load_template(PyObject *t, Template *out)
{
    /* t = (head: str, keys: tuple[str, ...], i_new: int | None, i_cached: int | None) */
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
        PyErr_SetString(PyExc_TypeError, "template must be (head, keys, i_new, i_cached)");
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
    return 0;
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
        while (p < n && s[p] != ',' && s[p] != '\n')
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
        }
    }
    /* optional trailing ', ' then end of line */
    if (p == n)
        return 1;
    return p + 2 == n && s[p] == ',' && s[p + 1] == ' ';
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *lines, *spec;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!nO!:scan", &PyList_Type, &lines, &start, &PyTuple_Type, &spec))
        return NULL;
    if (PyTuple_GET_SIZE(spec) != 2) {
        PyErr_SetString(PyExc_TypeError, "spec must be (decode template, prefill template)");
        return NULL;
    }
    Template td, tp;
    if (load_template(PyTuple_GET_ITEM(spec, 0), &td) < 0 || load_template(PyTuple_GET_ITEM(spec, 1), &tp) < 0)
        return NULL;

    Py_ssize_t n_lines = PyList_GET_SIZE(lines);
    if (start < 0)
        start = 0;
    Py_ssize_t cap = 64, ng = 0;
    Group *groups = PyMem_Malloc(cap * sizeof(Group));
    if (groups == NULL)
        return PyErr_NoMemory();
    Py_ssize_t hint[2] = {-1, -1}; /* last group hit per kind */
    Py_ssize_t n_info = 0, i = start;
    long long total_new = 0, total_cached = 0;
    const char *top = NULL; /* header of the newest line: s + 1 .. s + 20, ms (or NULL) */
    const char *top_ms = NULL;
    PyObject *result = NULL;

    for (; i < n_lines; i++) {
        PyObject *o = PyList_GET_ITEM(lines, i);
        if (!PyUnicode_Check(o) || PyUnicode_KIND(o) != PyUnicode_1BYTE_KIND)
            break;
        const char *s = (const char *)PyUnicode_DATA(o);
        Py_ssize_t n = PyUnicode_GET_LENGTH(o);
        /* header: [YYYY-MM-DD HH:MM:SS */
        if (n < 22 || s[0] != '[' || !is_digit(s[1]) || !is_digit(s[2]) || !is_digit(s[3]) || !is_digit(s[4]) || s[5] != '-' ||
            !is_digit(s[6]) || !is_digit(s[7]) || s[8] != '-' || !is_digit(s[9]) || !is_digit(s[10]) || s[11] != ' ' ||
            !is_digit(s[12]) || !is_digit(s[13]) || s[14] != ':' || !is_digit(s[15]) || !is_digit(s[16]) || s[17] != ':' ||
            !is_digit(s[18]) || !is_digit(s[19]))
            break;
        Py_ssize_t p = 20;
        const char *ms = NULL;
        if (p + 3 < n && s[p] == '.' && is_digit(s[p + 1]) && is_digit(s[p + 2]) && is_digit(s[p + 3])) {
            ms = s + p + 1;
            p += 4;
        }
        Py_ssize_t tags_at = p;
        while (p < n && s[p] != ']' && s[p] != '[' && s[p] != '\n')
            p++;
        if (p + 1 >= n || s[p] != ']' || s[p + 1] != ' ')
            break;
        Py_ssize_t tags_len = p - tags_at;
        p += 2;
        char kind = s[p < n ? p : n - 1];
        long long new_v = 0, cached_v = 0;
        if (kind == 'D') {
            if (!match_body(s, n, p, &td, &new_v, &cached_v))
                break;
        }
        else if (kind == 'P') {
            if (!match_body(s, n, p, &tp, &new_v, &cached_v))
                break;
        }
        else if (kind == 'I' && n - p >= 5 && memcmp(s + p, "INFO:", 5) == 0 && memchr(s + p, '\n', n - p) == NULL) {
            n_info++;
        }
        else
            break;

        if (kind != 'I') {
            /* find or add the group (kind, tags, bucket) */
            int ki = kind == 'P';
            Py_ssize_t g = hint[ki];
            const char *tags = s + tags_at;
#define SAME(G)                                                                                                             \
    (groups[G].kind == kind && groups[G].tags_len == tags_len && memcmp(groups[G].bucket_buf, s + 1, 16) == 0 &&            \
     groups[G].bucket_buf[16] == s[18] && memcmp(groups[G].tags, tags, tags_len) == 0)
            if (g < 0 || !SAME(g)) {
                for (g = ng - 1; g >= 0; g--)
                    if (SAME(g))
                        break;
            }
#undef SAME
            Group *gr;
            if (g < 0) {
                if (ng == cap) {
                    Group *bigger = PyMem_Realloc(groups, 2 * cap * sizeof(Group));
                    if (bigger == NULL) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    groups = bigger;
                    cap *= 2;
                }
                g = ng++;
                gr = &groups[g];
                gr->kind = kind;
                gr->tags = tags;
                gr->tags_len = tags_len;
                memcpy(gr->bucket_buf, s + 1, 16);
                gr->bucket_buf[16] = s[18];
                gr->count = 0;
                gr->first = i;
                gr->new_sum = gr->cached_sum = 0;
            }
            else
                gr = &groups[g];
            if (kind == 'P') {
                /* every sum of this call is at most the call's total: stop before that overflows */
                long long a, b;
                if (__builtin_add_overflow(total_new, new_v, &a) || __builtin_add_overflow(total_cached, cached_v, &b)) {
                    if (gr->count == 0)
                        ng--; /* the group was made for this line */
                    break;
                }
                total_new = a;
                total_cached = b;
                gr->new_sum += new_v;
                gr->cached_sum += cached_v;
            }
            gr->count++;
            gr->last = i;
            hint[ki] = g;
        }
        /* newest header: (YYYY-MM-DD HH:MM, SS, ms or '') compared as strings, '' < any ms */
        if (top == NULL) {
            top = s + 1;
            top_ms = ms;
        }
        else {
            int c = memcmp(s + 1, top, 19);
            if (c > 0 || (c == 0 && ms != NULL && (top_ms == NULL || memcmp(ms, top_ms, 3) > 0))) {
                top = s + 1;
                top_ms = ms;
            }
        }
    }

    {
        PyObject *counts = PyDict_New(), *news = PyDict_New(), *cacheds = PyDict_New(), *first = PyDict_New(), *last = PyDict_New();
        PyObject *top_t = NULL;
        if (!counts || !news || !cacheds || !first || !last)
            goto out;
        for (Py_ssize_t g = 0; g < ng; g++) {
            Group *gr = &groups[g];
            PyObject *k = NULL, *tags = NULL, *bucket = NULL, *ck = NULL, *bk = NULL, *v = NULL;
            int bad = 1;
            k = PyUnicode_FromStringAndSize(&gr->kind, 1);
            tags = PyUnicode_DecodeLatin1(gr->tags, gr->tags_len, NULL);
            bucket = PyUnicode_DecodeLatin1(gr->bucket_buf, BUCKET_LEN, NULL);
            if (!k || !tags || !bucket)
                goto g_out;
            ck = PyTuple_Pack(2, k, tags);
            bk = PyTuple_Pack(3, k, tags, bucket);
            if (!ck || !bk)
                goto g_out;
            /* counts[(kind, tags)] += count */
            {
                Py_ssize_t c = gr->count;
                PyObject *old = PyDict_GetItemWithError(counts, ck);
                if (old == NULL && PyErr_Occurred())
                    goto g_out;
                if (old != NULL)
                    c += PyLong_AsSsize_t(old);
                v = PyLong_FromSsize_t(c);
                if (!v || PyDict_SetItem(counts, ck, v) < 0)
                    goto g_out;
                Py_CLEAR(v);
            }
            if (gr->kind == 'P') {
                PyObject *dicts[2] = {news, cacheds};
                long long sums[2] = {gr->new_sum, gr->cached_sum};
                int present[2] = {tp.i_new >= 0, tp.i_cached >= 0};
                for (int j = 0; j < 2; j++) {
                    if (!present[j])
                        continue;
                    PyObject *old = PyDict_GetItemWithError(dicts[j], tags);
                    if (old == NULL && PyErr_Occurred())
                        goto g_out;
                    v = PyLong_FromLongLong(sums[j]);
                    if (v && old != NULL) {
                        PyObject *sum = PyNumber_Add(old, v);
                        Py_SETREF(v, sum);
                    }
                    if (!v || PyDict_SetItem(dicts[j], tags, v) < 0)
                        goto g_out;
                    Py_CLEAR(v);
                }
            }
            v = PyLong_FromSsize_t(gr->first);
            if (!v || PyDict_SetItem(first, bk, v) < 0)
                goto g_out;
            Py_SETREF(v, PyLong_FromSsize_t(gr->last));
            if (!v || PyDict_SetItem(last, bk, v) < 0)
                goto g_out;
            bad = 0;
        g_out:
            Py_XDECREF(k);
            Py_XDECREF(tags);
            Py_XDECREF(bucket);
            Py_XDECREF(ck);
            Py_XDECREF(bk);
            Py_XDECREF(v);
            if (bad)
                goto out;
        }
        if (top != NULL)
            top_t = Py_BuildValue("(s#s#s#)", top, (Py_ssize_t)16, top + 17, (Py_ssize_t)2, top_ms ? top_ms : "", (Py_ssize_t)(top_ms ? 3 : 0));
        else
            top_t = Py_NewRef(Py_None);
        if (top_t == NULL)
            goto out;
        result = Py_BuildValue("(nnOOOOOO)", i, n_info, top_t, counts, news, cacheds, first, last);
    out:
        Py_XDECREF(top_t);
        Py_XDECREF(counts);
        Py_XDECREF(news);
        Py_XDECREF(cacheds);
        Py_XDECREF(first);
        Py_XDECREF(last);
    }
done:
    PyMem_Free(groups);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(lines, start, spec) -> (stop, n_info, top, counts, new_sums, cached_sums, first, last)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "exporter._scan", "Native scanner for busy SGLang logs.", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
