/* The Perfetto writer's event loop in C (layerscope.trace._perfetto_packets), for perfetto_writer.py.
 *
 * perfetto_writer.py computes every byte piece of the trace in NumPy and Python first (descriptor
 * packets, template and layer annotations, flow-id records, dependency array elements, counter
 * TrackEvents); this loop only concatenates those pieces into one TracePacket per event, exactly as
 * the pure-Python loop (_write_events_python) does, and streams them through the file's `write` in
 * chunks of FLUSH_BYTES. It knows no field number: every key comes in as bytes from the Python side,
 * and the only thing it encodes itself is a varint (a length, a timestamp delta, a string iid), the
 * same base-128 encoding as protobuf_wire.varint. tests/trace/test_perfetto_native.py compares the
 * files of both loops byte for byte.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Chunks handed to `write`: the Python loop joins 50,000 packets (~19 MB at 1M ops); 4 MiB keeps the
 * buffer small and the copies into bytes cheap. */
#define FLUSH_BYTES ((Py_ssize_t)1 << 22)

/* ------------------------------------------------------------------ output buffer */

typedef struct {
    char *a;
    Py_ssize_t n, cap;
    PyObject *write;
} Out;

/* Room for `more` bytes; -1 with MemoryError set when out of memory. */
static int reserve(Out *o, Py_ssize_t more) {
    if (o->n + more <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : FLUSH_BYTES + 4096;
    while (cap < o->n + more) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *a = realloc(o->a, (size_t)cap);
    if (a == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    o->a = a;
    o->cap = cap;
    return 0;
}

/* Hands the buffered bytes to `write` and empties the buffer; -1 with the exception `write` raised. */
static int flush(Out *o) {
    if (o->n == 0) return 0;
    PyObject *chunk = PyBytes_FromStringAndSize(o->a, o->n);
    if (chunk == NULL) return -1;
    PyObject *r = PyObject_CallOneArg(o->write, chunk);
    Py_DECREF(chunk);
    if (r == NULL) return -1;
    Py_DECREF(r);
    o->n = 0;
    return 0;
}

static Py_ssize_t varint_len(uint64_t v) {
    Py_ssize_t k = 1;
    while (v >= 0x80) {
        v >>= 7;
        k++;
    }
    return k;
}

/* Unchecked appends: the caller reserved the packet's length first. */
static void put_varint(Out *o, uint64_t v) {
    unsigned char *p = (unsigned char *)o->a + o->n;
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    o->n = (Py_ssize_t)((char *)p - o->a);
}

static void put(Out *o, const char *s, Py_ssize_t len) {
    memcpy(o->a + o->n, s, (size_t)len);
    o->n += len;
}

/* ------------------------------------------------------------------ arguments */

typedef struct {
    const char *s;
    Py_ssize_t len;
} Piece;

/* A sequence of bytes as a tuple (the caller's reference: the items outlive any `write` callback) and
 * its pieces; -1 with TypeError/MemoryError set. */
static int pieces_of(PyObject *seq, const char *what, PyObject **tuple, Piece **out, Py_ssize_t *count) {
    PyObject *t = PySequence_Tuple(seq);
    if (t == NULL) return -1;
    *tuple = t;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    Piece *p = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Piece));
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *out = p;
    *count = n;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *b = PyTuple_GET_ITEM(t, j);
        if (!PyBytes_Check(b)) {
            PyErr_Format(PyExc_TypeError, "%s[%zd]: expected bytes, got %.100s", what, j, Py_TYPE(b)->tp_name);
            return -1;
        }
        p[j].s = PyBytes_AS_STRING(b);
        p[j].len = PyBytes_GET_SIZE(b);
    }
    return 0;
}

/* A C-contiguous buffer of `count` items of `itemsize` bytes (count < 0: any whole number of items). */
static int array_of(PyObject *obj, Py_buffer *view, Py_ssize_t count, Py_ssize_t itemsize, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if ((count >= 0 && view->len != count * itemsize) || view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd items of %zd bytes", what, view->len, count,
                     itemsize);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static int bytes_of(PyObject *obj, const char *what, Piece *p) {
    if (!PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s: expected bytes, got %.100s", what, Py_TYPE(obj)->tp_name);
        return -1;
    }
    p->s = PyBytes_AS_STRING(obj);
    p->len = PyBytes_GET_SIZE(obj);
    return 0;
}

/* Offsets [a, b) into a blob of `len` bytes, from an int64 offset array: checked, never trusted. */
static int span(const int64_t *off, Py_ssize_t j, Py_ssize_t len, const char *what, Py_ssize_t *a, Py_ssize_t *b) {
    *a = (Py_ssize_t)off[j];
    *b = (Py_ssize_t)off[j + 1];
    if (*a < 0 || *a > *b || *b > len) {
        PyErr_Format(PyExc_ValueError, "%s: span [%zd, %zd) outside %zd bytes", what, *a, *b, len);
        return -1;
    }
    return 0;
}

/* The wire pieces perfetto_writer.py passes in `keys`, in this order. */
enum {
    K_PACKET, /* key(Trace.packet, LEN) */
    K_HEAD,   /* key(timestamp, VARINT) */
    K_SEQ,    /* trusted_packet_sequence_id */
    K_SEQ_NEEDS,
    K_TE,        /* key(track_event, LEN) */
    K_BEGIN,     /* type = SLICE_BEGIN */
    K_NAME,      /* key(name, LEN) */
    K_DA,        /* key(debug_annotations, LEN) */
    K_DEPS,      /* name_iid of "dependencies" */
    K_INTERNED,  /* key(interned_data, LEN) */
    K_SVALS,     /* key(debug_annotation_string_values, LEN) */
    K_IID,       /* key(iid, VARINT) */
    K_STR,       /* key(str, LEN) */
    NKEYS
};

/* A TracePacket's start, `key(Trace.packet, LEN) len(body) head ts seq`, with room reserved for its whole body
 * (`body` counts from `head` on); `seq` is K_SEQ or K_SEQ_NEEDS. -1 with MemoryError set when out of memory. */
static int packet_start(Out *o, const Piece *K, Py_ssize_t body, uint64_t dts, int seq) {
    if (reserve(o, K[K_PACKET].len + varint_len((uint64_t)body) + body) < 0) return -1;
    put(o, K[K_PACKET].s, K[K_PACKET].len);
    put_varint(o, (uint64_t)body);
    put(o, K[K_HEAD].s, K[K_HEAD].len);
    put_varint(o, dts);
    put(o, K[seq].s, K[seq].len);
    return 0;
}

#define NARRAYS 12
enum { A_CODES, A_DELTA, A_COUNTER_OFF, A_ORDER, A_IS_END, A_ENGINE, A_TEMPLATE, A_LAYER, A_INDPTR, A_ELEM_OFF,
       A_OUT_PTR, A_IN_PTR };
#define NTUPLES 6
enum { T_NAMES, T_TEMPLATES, T_LAYERS, T_TRACKS, T_END_TAILS, T_MODULE };

PyDoc_STRVAR(write_events_doc,
             "write_events(write, codes, n_counters, delta, counter_blob, counter_off, order, is_end, engine, names,\n"
             "    template, template_pieces, layer_index, layer_pieces, module, module_pieces, indptr,\n"
             "    elem_blob, elem_off, out_blob, out_ptr, in_blob, in_ptr, str_iid, first_interned,\n"
             "    track_fields, end_tails, keys) -> None\n\n"
             "perfetto_writer.py's event loop: one TracePacket per merged event (codes below n_counters:\n"
             "counter values, the others begin/end events via `order` and `is_end`), written through\n"
             "`write` in chunks. Integer arrays are int64, is_end uint8; layer_index and module may be None.");

static PyObject *write_events(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *write, *arr_obj[NARRAYS], *tup_obj[NTUPLES], *module_pieces, *counter_obj, *elem_obj, *out_obj, *in_obj,
        *str_iid_obj, *first_obj, *keys_obj;
    Py_ssize_t n_c;
    if (!PyArg_ParseTuple(args, "OOnOOOOOOOOOOOOOOOOOOOOOOOOO", &write, &arr_obj[A_CODES], &n_c, &arr_obj[A_DELTA],
                          &counter_obj, &arr_obj[A_COUNTER_OFF], &arr_obj[A_ORDER], &arr_obj[A_IS_END],
                          &arr_obj[A_ENGINE],
                          &tup_obj[T_NAMES], &arr_obj[A_TEMPLATE], &tup_obj[T_TEMPLATES], &arr_obj[A_LAYER],
                          &tup_obj[T_LAYERS], &tup_obj[T_MODULE], &module_pieces, &arr_obj[A_INDPTR], &elem_obj,
                          &arr_obj[A_ELEM_OFF], &out_obj, &arr_obj[A_OUT_PTR], &in_obj, &arr_obj[A_IN_PTR],
                          &str_iid_obj, &first_obj, &tup_obj[T_TRACKS], &tup_obj[T_END_TAILS], &keys_obj))
        return NULL;
    if (!PyCallable_Check(write)) {
        PyErr_SetString(PyExc_TypeError, "write: not callable");
        return NULL;
    }
    if (!PyDict_Check(module_pieces)) {
        PyErr_SetString(PyExc_TypeError, "module_pieces: expected a dict");
        return NULL;
    }
    Py_buffer views[NARRAYS + 1];
    memset(views, 0, sizeof(views));
    Py_buffer *str_iid_view = &views[NARRAYS];
    PyObject *tuples[NTUPLES] = {NULL};
    Piece *pieces[NTUPLES] = {NULL};
    Py_ssize_t counts[NTUPLES] = {0};
    PyObject *keys_t = NULL, *result = NULL;
    Piece *keys = NULL;
    Py_ssize_t nkeys = 0;
    Out o = {NULL, 0, 0, write};
    int j;

    static const char *tup_names[NTUPLES] = {"names", "template_pieces", "layer_pieces", "track_fields", "end_tails",
                                             "module"};
    for (j = 0; j < NTUPLES; j++) {
        if (j == T_MODULE || j == T_NAMES) { /* str sequences: held as tuples, checked at use */
            if (j == T_MODULE && tup_obj[j] == Py_None) continue;
            if ((tuples[j] = PySequence_Tuple(tup_obj[j])) == NULL) goto done;
            counts[j] = PyTuple_GET_SIZE(tuples[j]);
            continue;
        }
        if (pieces_of(tup_obj[j], tup_names[j], &tuples[j], &pieces[j], &counts[j]) < 0) goto done;
    }
    if (pieces_of(keys_obj, "keys", &keys_t, &keys, &nkeys) < 0) goto done;
    if (nkeys != NKEYS) {
        PyErr_Format(PyExc_ValueError, "keys: %zd pieces, expected %d", nkeys, NKEYS);
        goto done;
    }
    Py_ssize_t n = counts[T_NAMES];
    if (tuples[T_MODULE] != NULL && counts[T_MODULE] != n) {
        PyErr_Format(PyExc_ValueError, "module: %zd entries for %zd ops", counts[T_MODULE], n);
        goto done;
    }
    static const char *arr_names[NARRAYS] = {"codes", "delta", "counter_off", "order", "is_end", "engine",
                                             "template", "layer_index", "indptr", "elem_off", "out_ptr", "in_ptr"};
    for (j = 0; j < NARRAYS; j++) {
        if (j == A_LAYER && arr_obj[j] == Py_None) continue;
        Py_ssize_t count = -1;
        if (j == A_ENGINE || j == A_TEMPLATE || j == A_LAYER) count = n;
        if (j == A_INDPTR || j == A_OUT_PTR || j == A_IN_PTR) count = n + 1;
        if (j == A_COUNTER_OFF) count = n_c >= 0 ? n_c + 1 : 0;
        if (array_of(arr_obj[j], &views[j], count, j == A_IS_END ? 1 : 8, arr_names[j]) < 0) goto done;
    }
    if (array_of(str_iid_obj, str_iid_view, n, 8, "str_iid") < 0) goto done;
    Py_ssize_t total = views[A_CODES].len / 8, n_ev = views[A_ORDER].len / 8;
    if (views[A_DELTA].len / 8 != total || views[A_IS_END].len != n_ev || n_c < 0 || views[A_ELEM_OFF].len < 8) {
        PyErr_SetString(PyExc_ValueError, "codes, delta, order, is_end or elem_off: inconsistent lengths");
        goto done;
    }
    Py_ssize_t n_edges = views[A_ELEM_OFF].len / 8 - 1;
    Piece counter_blob, elem, outb, inb, first;
    if (bytes_of(counter_obj, "counter_blob", &counter_blob) < 0 || bytes_of(elem_obj, "elem_blob", &elem) < 0 ||
        bytes_of(out_obj, "out_blob", &outb) < 0 ||
        bytes_of(in_obj, "in_blob", &inb) < 0 || bytes_of(first_obj, "first_interned", &first) < 0)
        goto done;
    const int64_t *codes = views[A_CODES].buf, *delta = views[A_DELTA].buf, *counter_off = views[A_COUNTER_OFF].buf,
                  *order = views[A_ORDER].buf,
                  *engine = views[A_ENGINE].buf, *template = views[A_TEMPLATE].buf, *layer = views[A_LAYER].buf,
                  *indptr = views[A_INDPTR].buf, *elem_off = views[A_ELEM_OFF].buf, *out_ptr = views[A_OUT_PTR].buf,
                  *in_ptr = views[A_IN_PTR].buf, *str_iid = str_iid_view->buf;
    const unsigned char *is_end = views[A_IS_END].buf;
    const Piece *tmpls = pieces[T_TEMPLATES], *layers = pieces[T_LAYERS],
                *tracks = pieces[T_TRACKS], *end_tails = pieces[T_END_TAILS];
    PyObject *names = tuples[T_NAMES], *module = tuples[T_MODULE];
    const Piece *K = keys;
    int first_pending = first.len > 0;

    for (Py_ssize_t m = 0; m < total; m++) {
        int64_t code = codes[m];
        uint64_t dts = (uint64_t)delta[m]; /* encode_varints casts to uint64 too */
        Py_ssize_t lts = varint_len(dts);
        if (code < 0 || code >= n_c + n_ev) {
            PyErr_Format(PyExc_ValueError, "codes[%zd] = %lld out of range", m, (long long)code);
            goto done;
        }
        if (code < n_c) { /* counter: head ts seq te len(ev) ev */
            Piece ev;
            Py_ssize_t ca, cb;
            if (span(counter_off, (Py_ssize_t)code, counter_blob.len, "counter_off", &ca, &cb) < 0) goto done;
            ev.s = counter_blob.s + ca;
            ev.len = cb - ca;
            Py_ssize_t body = K[K_HEAD].len + lts + K[K_SEQ].len + K[K_TE].len + varint_len((uint64_t)ev.len) + ev.len;
            if (packet_start(&o, K, body, dts, K_SEQ) < 0) goto done;
            put(&o, K[K_TE].s, K[K_TE].len);
            put_varint(&o, (uint64_t)ev.len);
            put(&o, ev.s, ev.len);
            goto next;
        }
        Py_ssize_t k = (Py_ssize_t)(code - n_c);
        int64_t i = order[k];
        if (i < 0 || i >= n) {
            PyErr_Format(PyExc_ValueError, "order[%zd] = %lld out of range", k, (long long)i);
            goto done;
        }
        int64_t e = engine[i];
        if (e < 0 || e >= counts[T_TRACKS] || e >= counts[T_END_TAILS]) {
            PyErr_Format(PyExc_ValueError, "engine[%lld] = %lld out of range", (long long)i, (long long)e);
            goto done;
        }
        if (is_end[k]) { /* end: head ts seq end_tail */
            Piece tail = end_tails[e];
            Py_ssize_t body = K[K_HEAD].len + lts + K[K_SEQ].len + tail.len;
            if (packet_start(&o, K, body, dts, K_SEQ) < 0) goto done;
            put(&o, tail.s, tail.len);
            goto next;
        }
        /* begin: the pieces of the Python loop's `ev`, `deps` and `interned`, lengths first */
        Piece nm;
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "names[%lld]: expected str", (long long)i);
            goto done;
        }
        if ((nm.s = PyUnicode_AsUTF8AndSize(name, &nm.len)) == NULL) goto done;
        int64_t t = template[i];
        if (t < 0 || t >= counts[T_TEMPLATES]) {
            PyErr_Format(PyExc_ValueError, "template[%lld] = %lld out of range", (long long)i, (long long)t);
            goto done;
        }
        Piece tb = tmpls[t], lay = {"", 0}, mod = {"", 0};
        if (layer != NULL) {
            int64_t l = layer[i];
            if (l < 0 || l >= counts[T_LAYERS]) {
                PyErr_Format(PyExc_ValueError, "layer_index[%lld] = %lld out of range", (long long)i, (long long)l);
                goto done;
            }
            lay = layers[l];
        }
        if (module != NULL) {
            PyObject *v = PyDict_GetItemWithError(module_pieces, PyTuple_GET_ITEM(module, i));
            if (v == NULL) {
                if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, PyTuple_GET_ITEM(module, i));
                goto done;
            }
            if (bytes_of(v, "module_pieces value", &mod) < 0) goto done;
        }
        Py_ssize_t da, db, oa, ob, ia, ib;
        if (indptr[i] < 0 || indptr[i] > indptr[i + 1] || indptr[i + 1] > n_edges) {
            PyErr_Format(PyExc_ValueError, "indptr[%lld]: out of range", (long long)i);
            goto done;
        }
        da = (Py_ssize_t)elem_off[indptr[i]];
        db = (Py_ssize_t)elem_off[indptr[i + 1]];
        if (da < 0 || da > db || db > elem.len) {
            PyErr_Format(PyExc_ValueError, "elem_off: span [%zd, %zd) outside %zd bytes", da, db, elem.len);
            goto done;
        }
        if (span(out_ptr, (Py_ssize_t)i, outb.len, "out_ptr", &oa, &ob) < 0 ||
            span(in_ptr, (Py_ssize_t)i, inb.len, "in_ptr", &ia, &ib) < 0)
            goto done;
        /* deps = da_key len(arr) arr, arr = deps_key elem_blob[elem_off[a]:elem_off[b]] (none without edges) */
        Py_ssize_t arr = indptr[i + 1] > indptr[i] ? K[K_DEPS].len + (db - da) : 0;
        Py_ssize_t deps = arr ? K[K_DA].len + varint_len((uint64_t)arr) + arr : 0;
        Py_ssize_t nm_len = varint_len((uint64_t)nm.len) + nm.len; /* len(nm) nm */
        Py_ssize_t ev = K[K_BEGIN].len + tracks[e].len + K[K_NAME].len + nm_len + tb.len + lay.len + mod.len + deps +
                        (ob - oa) + (ib - ia);
        /* interned = [first_interned] [id_svals len(entry) entry], entry = iid_key iid str_key len(nm) nm */
        uint64_t sid = (uint64_t)str_iid[i];
        Py_ssize_t entry = sid ? K[K_IID].len + varint_len(sid) + K[K_STR].len + nm_len : 0;
        Py_ssize_t interned = (first_pending ? first.len : 0) +
                              (sid ? K[K_SVALS].len + varint_len((uint64_t)entry) + entry : 0);
        Py_ssize_t body = K[K_HEAD].len + lts + K[K_SEQ_NEEDS].len +
                          (interned ? K[K_INTERNED].len + varint_len((uint64_t)interned) + interned : 0) + K[K_TE].len +
                          varint_len((uint64_t)ev) + ev;
        if (packet_start(&o, K, body, dts, K_SEQ_NEEDS) < 0) goto done;
        if (interned) {
            put(&o, K[K_INTERNED].s, K[K_INTERNED].len);
            put_varint(&o, (uint64_t)interned);
            if (first_pending) {
                put(&o, first.s, first.len);
                first_pending = 0;
            }
            if (sid) {
                put(&o, K[K_SVALS].s, K[K_SVALS].len);
                put_varint(&o, (uint64_t)entry);
                put(&o, K[K_IID].s, K[K_IID].len);
                put_varint(&o, sid);
                put(&o, K[K_STR].s, K[K_STR].len);
                put_varint(&o, (uint64_t)nm.len);
                put(&o, nm.s, nm.len);
            }
        }
        put(&o, K[K_TE].s, K[K_TE].len);
        put_varint(&o, (uint64_t)ev);
        put(&o, K[K_BEGIN].s, K[K_BEGIN].len);
        put(&o, tracks[e].s, tracks[e].len);
        put(&o, K[K_NAME].s, K[K_NAME].len);
        put_varint(&o, (uint64_t)nm.len);
        put(&o, nm.s, nm.len);
        put(&o, tb.s, tb.len);
        put(&o, lay.s, lay.len);
        put(&o, mod.s, mod.len);
        if (arr) {
            put(&o, K[K_DA].s, K[K_DA].len);
            put_varint(&o, (uint64_t)arr);
            put(&o, K[K_DEPS].s, K[K_DEPS].len);
            put(&o, elem.s + da, db - da);
        }
        put(&o, outb.s + oa, ob - oa);
        put(&o, inb.s + ia, ib - ia);
    next:
        if (o.n >= FLUSH_BYTES && flush(&o) < 0) goto done;
    }
    if (flush(&o) < 0) goto done;
    result = Py_NewRef(Py_None);
done:
    for (j = 0; j <= NARRAYS; j++)
        if (views[j].obj != NULL) PyBuffer_Release(&views[j]);
    for (j = 0; j < NTUPLES; j++) {
        Py_XDECREF(tuples[j]);
        PyMem_Free(pieces[j]);
    }
    Py_XDECREF(keys_t);
    PyMem_Free(keys);
    free(o.a);
    return result;
}

static PyMethodDef methods[] = {
    {"write_events", write_events, METH_VARARGS, write_events_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "layerscope.trace._perfetto_packets",
    "The Perfetto writer's event loop in C (see layerscope.trace.perfetto_writer).", -1, methods, NULL, NULL, NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__perfetto_packets(void) { return PyModule_Create(&module_def); }
