/* The scheduler's event loop in C (layerscope.schedule._event_loop), for core.py's _run_loop.
 *
 * The same simulation as the pure-Python loop in core.py, step for step: the same heaps keyed by
 * the same (double, int64) pairs, popped in the same order (keys are distinct, or identical
 * entries), and the same floating-point operations in the same order, so both loops give
 * bit-identical schedules (tests/schedule/test_native.py checks them against each other).
 * Compiled without floating-point contraction (setup.py) so that no a*b+c becomes a fused
 * multiply-add that Python would round twice. core.py's module docstring holds the model; the
 * comments here only map the code to the Python it mirrors.
 *
 * It knows no policy by name: a policy object (core.py's SchedulingPolicy) declares a dispatch
 * discipline and an engine choice (the enums below, core.py's Dispatch and EngineChoice) and gives
 * one priority key per op; a new policy expressible through those hooks needs no edit here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { KIND_FINISH = 0, KIND_ENTER = 1, KIND_MEM = 2 };
/* core.py: Dispatch and EngineChoice (same values) */
enum { DISPATCH_RESERVE = 0, DISPATCH_READY = 1 };
enum { ENGINE_EARLIEST_FREE = 0, ENGINE_FASTEST = 1 };

/* ------------------------------------------------------------------ growable arrays and a min-heap */

/* data (n items of itemsize, capacity *cap) with room for one more: data itself, a reallocation
 * (*cap updated), or NULL when out of memory (data is then still valid and owned by the caller). */
static void *grow(void *data, Py_ssize_t n, Py_ssize_t *cap, size_t itemsize) {
    if (n < *cap) return data;
    Py_ssize_t grown = *cap ? 2 * *cap : 64;
    void *a = realloc(data, (size_t)grown * itemsize);
    if (a != NULL) *cap = grown;
    return a;
}

typedef struct {
    double key;
    int64_t value;
} Entry;

typedef struct {
    Entry *a;
    Py_ssize_t n, cap;
} Heap;

static int less(Entry x, Entry y) { return x.key < y.key || (x.key == y.key && x.value < y.value); }

static int heap_push(Heap *h, double key, int64_t value) {
    Entry *a = grow(h->a, h->n, &h->cap, sizeof(Entry));
    if (a == NULL) return -1;
    h->a = a;
    Py_ssize_t i = h->n++;
    Entry e = {key, value};
    while (i > 0) {
        Py_ssize_t parent = (i - 1) / 2;
        if (!less(e, h->a[parent])) break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = e;
    return 0;
}

static Entry heap_pop(Heap *h) {
    Entry top = h->a[0];
    Entry last = h->a[--h->n];
    Py_ssize_t i = 0, n = h->n;
    for (;;) {
        Py_ssize_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && less(h->a[child + 1], h->a[child])) child++;
        if (!less(h->a[child], last)) break;
        h->a[i] = h->a[child];
        i = child;
    }
    if (n > 0) h->a[i] = last;
    return top;
}

typedef struct {
    int64_t *a;
    Py_ssize_t n, cap;
} Ints;

static int ints_push(Ints *v, int64_t x) {
    int64_t *a = grow(v->a, v->n, &v->cap, sizeof(int64_t));
    if (a == NULL) return -1;
    v->a = a;
    v->a[v->n++] = x;
    return 0;
}

typedef struct {
    double *a;
    Py_ssize_t n, cap;
} Doubles;

static int doubles_push(Doubles *v, double x) {
    double *a = grow(v->a, v->n, &v->cap, sizeof(double));
    if (a == NULL) return -1;
    v->a = a;
    v->a[v->n++] = x;
    return 0;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* ------------------------------------------------------------------ the simulation */

typedef struct {
    Py_ssize_t n, m;
    int reserve, earliest, share, uniform;
    double bw;
    const double *ovh, *main_ns, *demand, *compute_ns, *bytes, *fraction, *priority;
    const int64_t *succ_ptr, *succ_idx, *order;
    int64_t *indeg; /* owned copy */
    int32_t *eng;
    double *start, *end;
    double *proj, *rate, *dem_of;
    Heap events, free_, ready;
    Ints sharing, entering, stay;
    Doubles bw_t, bw_v, sorted;
} Sim;

/* core.py: start_op */
static int start_op(Sim *s, Py_ssize_t i, int32_t e, double t) {
    double mt, d;
    s->eng[i] = e;
    s->start[i] = t;
    if (s->uniform) {
        mt = s->main_ns[i];
        d = s->demand[i];
    } else {
        double a = s->compute_ns[i] / s->fraction[e], b = s->bytes[i] / s->bw;
        mt = b > a ? b : a; /* Python's max(a, b) */
        d = mt > 0 ? s->bytes[i] / mt : 0.0;
    }
    if (!s->share || d == 0.0) return heap_push(&s->events, t + s->ovh[i] + mt, (int64_t)i * 4 + KIND_FINISH);
    s->dem_of[i] = d;
    s->proj[i] = mt;
    if (s->ovh[i] > 0) return heap_push(&s->events, t + s->ovh[i], (int64_t)i * 4 + KIND_ENTER);
    return ints_push(&s->entering, i);
}

/* core.py: _reshare (water filling at `now`) */
static int reshare(Sim *s, double now) {
    Py_ssize_t j;
    double total = 0.0;
    s->stay.n = 0;
    for (j = 0; j < s->sharing.n; j++) {
        int64_t i = s->sharing.a[j];
        if (s->rate[i] > 0) {
            if (ints_push(&s->stay, i) < 0) return -1;
            total += s->dem_of[i];
        }
    }
    for (j = 0; j < s->entering.n; j++) total += s->dem_of[s->entering.a[j]];
    double level = INFINITY;
    if (total > s->bw) {
        double left = s->bw;
        Py_ssize_t k = s->stay.n + s->entering.n;
        level = left / (double)k;
        s->sorted.n = 0;
        for (j = 0; j < s->stay.n; j++)
            if (doubles_push(&s->sorted, s->dem_of[s->stay.a[j]]) < 0) return -1;
        for (j = 0; j < s->entering.n; j++)
            if (doubles_push(&s->sorted, s->dem_of[s->entering.a[j]]) < 0) return -1;
        qsort(s->sorted.a, (size_t)s->sorted.n, sizeof(double), cmp_double);
        for (j = 0; j < s->sorted.n; j++) {
            double d = s->sorted.a[j];
            if (d > level) break;
            left -= d;
            k -= 1;
            level = k ? left / (double)k : INFINITY;
        }
    }
    Py_ssize_t kept = s->stay.n;
    for (j = 0; j < kept; j++) {
        int64_t i = s->stay.a[j];
        double d = s->dem_of[i];
        double r_new = d > level ? level / d : 1.0;
        double r = s->rate[i];
        if (r_new != r) {
            double left_ns = s->proj[i] - now;
            if (0.0 > left_ns) left_ns = 0.0; /* Python's max(proj - now, 0.0) */
            s->proj[i] = now + left_ns * r / r_new;
            s->rate[i] = r_new;
            if (heap_push(&s->events, s->proj[i], i * 4 + KIND_MEM) < 0) return -1;
        }
    }
    for (j = 0; j < s->entering.n; j++) {
        int64_t i = s->entering.a[j];
        double d = s->dem_of[i];
        double r_new = d > level ? level / d : 1.0;
        s->proj[i] = now + s->proj[i] / r_new; /* proj held the standalone main time */
        s->rate[i] = r_new;
        if (heap_push(&s->events, s->proj[i], i * 4 + KIND_MEM) < 0) return -1;
        if (ints_push(&s->stay, i) < 0) return -1;
    }
    /* sharing[:] = stay */
    Ints swap = s->sharing;
    s->sharing = s->stay;
    s->stay = swap;
    double used = total > s->bw ? s->bw : total;
    if (s->bw_v.a[s->bw_v.n - 1] != used) {
        if (doubles_push(&s->bw_t, now) < 0 || doubles_push(&s->bw_v, used) < 0) return -1;
    }
    return 0;
}

/* core.py: _run_loop's while loop. 0: done; -1: out of memory; 1: no event pending but ops remain. */
static int simulate(Sim *s) {
    Py_ssize_t n = s->n, next_op = 0, done = 0, j;
    double now = 0.0;
    int leaving = 0;
    if (doubles_push(&s->bw_t, 0.0) < 0 || doubles_push(&s->bw_v, 0.0) < 0) return -1;
    for (j = 0; j < s->m; j++)
        if (heap_push(&s->free_, s->earliest ? 0.0 : -s->fraction[j], j) < 0) return -1;
    if (!s->reserve)
        for (j = 0; j < n; j++)
            if (s->indeg[j] == 0 && heap_push(&s->ready, s->priority[j], j) < 0) return -1;
    for (;;) {
        /* 1. Dispatch at `now`. */
        if (s->reserve) {
            while (next_op < n && s->free_.n) {
                int32_t e = (int32_t)heap_pop(&s->free_).value;
                Py_ssize_t i = (Py_ssize_t)s->order[next_op++];
                if (s->indeg[i] == 0) {
                    if (start_op(s, i, e, now) < 0) return -1;
                } else {
                    s->eng[i] = e; /* reserved; starts when its last dependency ends */
                }
            }
        } else {
            while (s->ready.n && s->free_.n) {
                Py_ssize_t i = (Py_ssize_t)heap_pop(&s->ready).value;
                if (start_op(s, i, (int32_t)heap_pop(&s->free_).value, now) < 0) return -1;
            }
        }
        /* 2. Re-split the bandwidth if the set of ops in their main phase changed. */
        if (s->entering.n || leaving) {
            if (reshare(s, now) < 0) return -1;
            s->entering.n = 0;
            leaving = 0;
        }
        if (done == n) return 0;
        if (!s->events.n) return 1;
        /* 3. Advance to the next event time and process every event at it. */
        now = s->events.a[0].key;
        while (s->events.n && s->events.a[0].key == now) {
            int64_t code = heap_pop(&s->events).value;
            int64_t i = code >> 2, kind = code & 3;
            if (kind == KIND_ENTER) {
                if (ints_push(&s->entering, i) < 0) return -1;
                continue;
            }
            if (kind == KIND_MEM) {
                if (s->proj[i] != now || s->rate[i] <= 0) continue; /* stale projection */
                s->rate[i] = -1.0;                                 /* leaves the sharing set */
                leaving = 1;
            }
            s->end[i] = now;
            done++;
            int32_t e = s->eng[i];
            if (heap_push(&s->free_, s->earliest ? now : -s->fraction[e], e) < 0) return -1;
            for (int64_t k = s->succ_ptr[i]; k < s->succ_ptr[i + 1]; k++) {
                int64_t t = s->succ_idx[k];
                if (--s->indeg[t] == 0) {
                    if (s->reserve) {
                        if (s->eng[t] >= 0 && start_op(s, t, s->eng[t], now) < 0) return -1;
                    } else if (heap_push(&s->ready, s->priority[t], t) < 0) {
                        return -1;
                    }
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ the Python entry point */

static int get(PyObject *obj, Py_buffer *view, Py_ssize_t count, Py_ssize_t itemsize, int writable,
               const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (view->len != count * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", what, view->len, count * itemsize);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(run_doc,
             "run(dispatch, engine_choice, share_bandwidth, n, m, bw_per_ns, overhead_ns, main_ns, demand,\n"
             "    compute_ns, bytes, fraction, succ_ptr, succ_idx, indegree, priority, order, engine_out,\n"
             "    start_out, end_out)\n"
             "-> (status, bandwidth_time_ns, bandwidth_bytes_per_ns)\n\n"
             "core.py's event loop over contiguous float64/int64 arrays. dispatch: 0 reserve (ops in `order`),\n"
             "1 ready (ready ops by `priority`); engine_choice: 0 earliest free, 1 fastest. main_ns and demand\n"
             "None for per-engine rates; priority may be None for dispatch 0, order for dispatch 1. Writes\n"
             "the engine (int32), start and end (float64 ns) of each op into the *_out arrays.\n"
             "status 1: no event pending but ops remain.");

#define NARRAYS 14

static PyObject *run(PyObject *self, PyObject *args) {
    (void)self;
    int dispatch, engine_choice, share;
    Py_ssize_t n, m;
    double bw;
    PyObject *objs[NARRAYS];
    if (!PyArg_ParseTuple(args, "iipnndOOOOOOOOOOOOOO", &dispatch, &engine_choice, &share, &n, &m, &bw,
                          &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &objs[6], &objs[7],
                          &objs[8], &objs[9], &objs[10], &objs[11], &objs[12], &objs[13]))
        return NULL;
    if (n < 0 || m < 1) {
        PyErr_SetString(PyExc_ValueError, "n must be >= 0 and m >= 1");
        return NULL;
    }
    if ((dispatch != DISPATCH_RESERVE && dispatch != DISPATCH_READY) ||
        (engine_choice != ENGINE_EARLIEST_FREE && engine_choice != ENGINE_FASTEST)) {
        PyErr_Format(PyExc_ValueError, "unknown dispatch %d or engine_choice %d", dispatch, engine_choice);
        return NULL;
    }
    /* overhead, main, demand, compute, bytes, fraction, succ_ptr, succ_idx, indeg, priority, order,
     * eng, start, end */
    static const char *names[NARRAYS] = {"overhead_ns", "main_ns", "demand", "compute_ns", "bytes",
                                         "fraction", "succ_ptr", "succ_idx", "indegree", "priority", "order",
                                         "engine_out", "start_out", "end_out"};
    Py_buffer views[NARRAYS];
    memset(views, 0, sizeof(views));
    PyObject *result = NULL;
    Sim s;
    memset(&s, 0, sizeof(s));
    int i;
    for (i = 0; i < NARRAYS; i++) {
        if (objs[i] == Py_None && (i == 1 || i == 2 || i == 9 || i == 10)) continue;
        Py_ssize_t count = i == 5 ? m : i == 6 ? n + 1 : n, itemsize = 8;
        if (i == 7) {
            if (PyObject_GetBuffer(objs[i], &views[i], PyBUF_C_CONTIGUOUS) < 0) goto done;
            if (views[i].len % 8) {
                PyErr_SetString(PyExc_ValueError, "succ_idx: not int64");
                goto done;
            }
            continue;
        }
        if (i == 11) itemsize = 4;
        if (get(objs[i], &views[i], count, itemsize, i >= 11, names[i]) < 0) goto done;
    }
    if ((views[1].obj == NULL) != (views[2].obj == NULL)) {
        PyErr_SetString(PyExc_ValueError, "main_ns and demand: both arrays or both None");
        goto done;
    }
    if (dispatch == DISPATCH_READY && views[9].obj == NULL) {
        PyErr_SetString(PyExc_ValueError, "priority: required by the ready dispatch");
        goto done;
    }
    if (dispatch == DISPATCH_RESERVE) {
        if (views[10].obj == NULL) {
            PyErr_SetString(PyExc_ValueError, "order: required by the reserve dispatch");
            goto done;
        }
        const int64_t *order = views[10].buf;
        for (Py_ssize_t j = 0; j < n; j++)
            if (order[j] < 0 || order[j] >= n) {
                PyErr_Format(PyExc_ValueError, "order: op %lld out of range", (long long)order[j]);
                goto done;
            }
    }
    s.n = n;
    s.m = m;
    s.reserve = dispatch == DISPATCH_RESERVE;
    s.earliest = engine_choice == ENGINE_EARLIEST_FREE;
    s.share = share;
    s.uniform = views[1].obj != NULL;
    s.bw = bw;
    s.ovh = views[0].buf;
    s.main_ns = views[1].buf;
    s.demand = views[2].buf;
    s.compute_ns = views[3].buf;
    s.bytes = views[4].buf;
    s.fraction = views[5].buf;
    s.succ_ptr = views[6].buf;
    s.succ_idx = views[7].buf;
    s.priority = views[9].buf;
    s.order = views[10].buf;
    s.eng = views[11].buf;
    s.start = views[12].buf;
    s.end = views[13].buf;
    size_t cells = (size_t)(n ? n : 1);
    s.indeg = malloc(cells * sizeof(int64_t));
    s.proj = calloc(cells, sizeof(double));
    s.rate = malloc(cells * sizeof(double));
    s.dem_of = calloc(cells, sizeof(double));
    if (!s.indeg || !s.proj || !s.rate || !s.dem_of) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(s.indeg, views[8].buf, (size_t)n * sizeof(int64_t));
    for (Py_ssize_t j = 0; j < n; j++) {
        s.rate[j] = 1.0;
        s.eng[j] = -1;
        s.start[j] = 0.0;
        s.end[j] = 0.0;
    }
    int status = simulate(&s);
    if (status < 0) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_BuildValue("(iy#y#)", status, (const char *)s.bw_t.a, s.bw_t.n * (Py_ssize_t)sizeof(double),
                           (const char *)s.bw_v.a, s.bw_v.n * (Py_ssize_t)sizeof(double));
done:
    for (i = 0; i < NARRAYS; i++)
        if (views[i].obj != NULL) PyBuffer_Release(&views[i]);
    free(s.indeg);
    free(s.proj);
    free(s.rate);
    free(s.dem_of);
    free(s.events.a);
    free(s.free_.a);
    free(s.ready.a);
    free(s.sharing.a);
    free(s.entering.a);
    free(s.stay.a);
    free(s.bw_t.a);
    free(s.bw_v.a);
    free(s.sorted.a);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "layerscope.schedule._event_loop",
    "The scheduler's event loop in C (see layerscope.schedule.core).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__event_loop(void) { return PyModule_Create(&module); }
