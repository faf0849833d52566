/* Column scanner for the events array of Chrome/Kineto trace JSON (layerscope.trace._chrome_scan).
 *
 * One pass over the text between the array's brackets, with the GIL released: per event, the
 * thirteen fields layerscope's tables use are written to columns (a phase byte; type tags and
 * int64 values for pid/tid/id and the four times; Arrow string views for every string, pointing
 * into the text, or into a side buffer for strings with escapes; args as offset and length of
 * the raw value text). Everything else is validated as strict JSON and skipped.
 *
 * The scanner is deliberately narrow: whatever it does not reproduce exactly as the DuckDB path
 * in chrome_reader.py reads it (an escaped or duplicated key of interest, a value of an
 * unexpected JSON type, an int outside int64, a lone surrogate, invalid UTF-8 anywhere, nesting
 * deeper than 256, any JSON syntax error) makes scan() return a reason string instead of
 * columns, and the caller falls back to the DuckDB path, which reads everything.
 *
 * A chunk may be the whole array ("all"), its first part up to a split point ("head": it must
 * end with a comma after a complete event, which proves the split point starts an event), or
 * the rest from the split point ("tail"). Two chunks scan on two threads.
 */
#define _GNU_SOURCE /* memmem */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ an owned memory block */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t size;
} Block;

static int block_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Block *b = (Block *)self;
    return PyBuffer_FillInfo(view, self, b->data, b->size, 1, flags);
}

static void block_dealloc(PyObject *self) {
    free(((Block *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs block_as_buffer = {block_getbuffer, NULL};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "layerscope.trace._chrome_scan.Block",
    .tp_basicsize = sizeof(Block),
    .tp_dealloc = block_dealloc,
    .tp_as_buffer = &block_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Read-only memory owned by the scanner (a column or the side string buffer).",
};

/* Takes ownership of data (freed with the block, or here on failure). */
static PyObject *block_new(char *data, Py_ssize_t size) {
    Block *b = PyObject_New(Block, &BlockType);
    if (b == NULL) {
        free(data);
        return NULL;
    }
    b->data = data;
    b->size = size;
    return (PyObject *)b;
}

/* ------------------------------------------------------------------ columns */

enum { T_PID, T_TID, T_ID, T_TS, T_DUR, T_TTS, T_TDUR, NTAGGED };
enum { V_CAT, V_NAME, V_BP, V_S, V_PID, V_TID, V_ID, V_TS, V_DUR, V_TTS, V_TDUR, NVIEWS };
#define NSTRINGS 4 /* the views V_CAT..V_S are plain string fields */
/* value tags; TAG_NS: a time whose exact nanoseconds are in the int column (see exact_ns) */
enum { TAG_NONE = 0, TAG_INT = 1, TAG_FLOAT = 2, TAG_STR = 3, TAG_NS = 4 };
#define MAX_US (INT64_MAX / 1000)

typedef struct {
    int32_t length;
    union {
        char inline_data[12];
        struct {
            char prefix[4];
            int32_t buffer;
            int32_t offset;
        } ref;
    } u;
} View;

typedef struct {
    Py_ssize_t n, cap;
    uint8_t *ph;
    uint8_t *tag[NTAGGED];
    int64_t *ival[NTAGGED];
    View *view[NVIEWS];
    uint8_t *has[NSTRINGS]; /* cat/name/bp/s present (not absent, not null) */
    int32_t *args_off, *args_len;
    uint8_t *args_obj; /* args is an object with at least one member */
    /* side buffer: unescaped strings */
    char *side;
    Py_ssize_t side_len, side_cap;
    int32_t side_index;
} Columns;

static void columns_free(Columns *c) {
    free(c->ph);
    for (int i = 0; i < NTAGGED; i++) {
        free(c->tag[i]);
        free(c->ival[i]);
    }
    for (int i = 0; i < NVIEWS; i++) free(c->view[i]);
    for (int i = 0; i < NSTRINGS; i++) free(c->has[i]);
    free(c->args_off);
    free(c->args_len);
    free(c->args_obj);
    free(c->side);
    memset(c, 0, sizeof(*c));
}

#define GROW(ptr, type, cap) do { \
        void *grown_ = realloc((ptr), (size_t)(cap) * sizeof(type)); \
        if (grown_ == NULL) return -1; \
        (ptr) = grown_; \
    } while (0)

static int columns_reserve(Columns *c, Py_ssize_t need) {
    if (need <= c->cap) return 0;
    Py_ssize_t cap = c->cap ? c->cap : 1024;
    while (cap < need) cap *= 2;
    GROW(c->ph, uint8_t, cap);
    for (int i = 0; i < NTAGGED; i++) {
        GROW(c->tag[i], uint8_t, cap);
        GROW(c->ival[i], int64_t, cap);
    }
    for (int i = 0; i < NVIEWS; i++) GROW(c->view[i], View, cap);
    for (int i = 0; i < NSTRINGS; i++) GROW(c->has[i], uint8_t, cap);
    GROW(c->args_off, int32_t, cap);
    GROW(c->args_len, int32_t, cap);
    GROW(c->args_obj, uint8_t, cap);
    c->cap = cap;
    return 0;
}

static int side_reserve(Columns *c, Py_ssize_t extra) {
    if (c->side_len + extra <= c->side_cap) return 0;
    Py_ssize_t cap = c->side_cap ? c->side_cap : 4096;
    while (cap < c->side_len + extra) cap *= 2;
    if (cap > INT32_MAX) return -1;
    GROW(c->side, char, cap);
    c->side_cap = cap;
    return 0;
}

/* ------------------------------------------------------------------ the scanner */

typedef enum { OK = 0, E_SYNTAX, E_UNSUPPORTED, E_MEMORY, E_NOT_BOUNDARY } Status;

typedef struct {
    const uint8_t *base; /* the whole text (views hold offsets from here) */
    const uint8_t *end;  /* end of this chunk */
    int quoted;          /* ts floats arrive as their text */
    Columns *cols;
    const char *reason;
} Scanner;

#define FAIL(s, status, why) do { (s)->reason = (why); return (status); } while (0)

/* 1: ordinary string byte; 0: '"', '\\', control byte or >= 0x80 (looked at one by one) */
static uint8_t plain_byte[256];
/* bytes json_depth stops at: inside a string '"' and '\\', outside these and the four brackets */
static uint8_t string_stop[256], outside_stop[256];
static uint8_t hex_value[256]; /* 0..15, 255 = not hex */

static void init_tables(void) {
    for (int c = 0; c < 256; c++) {
        plain_byte[c] = (c >= 0x20 && c < 0x80 && c != '"' && c != '\\');
        string_stop[c] = (c == '"' || c == '\\');
        outside_stop[c] = (c == '"' || c == '\\' || c == '[' || c == ']' || c == '{' || c == '}');
        hex_value[c] = 255;
    }
    for (int c = '0'; c <= '9'; c++) hex_value[c] = (uint8_t)(c - '0');
    for (int c = 'a'; c <= 'f'; c++) hex_value[c] = (uint8_t)(c - 'a' + 10);
    for (int c = 'A'; c <= 'F'; c++) hex_value[c] = (uint8_t)(c - 'A' + 10);
}

static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* Length of the valid UTF-8 sequence at p (1..4), or 0 (overlong, surrogate, > U+10FFFF, cut). */
static int utf8_sequence(const uint8_t *p, const uint8_t *end) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        return (end - p >= 2 && (p[1] & 0xC0) == 0x80) ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (end - p < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (end - p < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* > U+10FFFF */
        return 4;
    }
    return 0;
}

/* The string whose opening quote is at *pp: validated, *pp moved past the closing quote.
 * body, length: the raw bytes between the quotes; escaped: whether it holds a backslash. */
static Status scan_string(Scanner *s, const uint8_t **pp, const uint8_t **body, Py_ssize_t *length, int *escaped) {
    const uint8_t *p = *pp + 1, *end = s->end;
    *body = p;
    *escaped = 0;
    for (;;) {
        while (end - p >= 4 && plain_byte[p[0]] && plain_byte[p[1]] && plain_byte[p[2]] && plain_byte[p[3]]) p += 4;
        while (p < end && plain_byte[*p]) p++;
        if (p >= end) FAIL(s, E_SYNTAX, "unterminated string");
        uint8_t c = *p;
        if (c == '"') break;
        if (c == '\\') {
            *escaped = 1;
            if (end - p < 2) FAIL(s, E_SYNTAX, "unterminated string");
            uint8_t e = p[1];
            if (e == 'u') {
                if (end - p < 6 || hex_value[p[2]] == 255 || hex_value[p[3]] == 255 || hex_value[p[4]] == 255 ||
                    hex_value[p[5]] == 255)
                    FAIL(s, E_SYNTAX, "bad \\u escape");
                p += 6;
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
            } else {
                FAIL(s, E_SYNTAX, "bad escape");
            }
            continue;
        }
        if (c < 0x20) FAIL(s, E_SYNTAX, "control character in a string");
        int k = utf8_sequence(p, end);
        if (k == 0) FAIL(s, E_UNSUPPORTED, "invalid UTF-8");
        p += k;
    }
    *length = p - *body;
    *pp = p + 1;
    return OK;
}

static int put_utf8(char *out, uint32_t cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static uint32_t hex4(const uint8_t *p) {
    return (uint32_t)(hex_value[p[0]] << 12 | hex_value[p[1]] << 8 | hex_value[p[2]] << 4 | hex_value[p[3]]);
}

static void view_set(View *v, const char *data, Py_ssize_t length, int32_t buffer, Py_ssize_t offset) {
    memset(v, 0, sizeof(*v));
    v->length = (int32_t)length;
    if (length <= 12) {
        memcpy(v->u.inline_data, data, (size_t)length);
    } else {
        memcpy(v->u.ref.prefix, data, 4);
        v->u.ref.buffer = buffer;
        v->u.ref.offset = (int32_t)offset;
    }
}

/* A validated string body (raw, between the quotes) as a view; escapes resolved into the side buffer. */
static Status store_string(Scanner *s, View *v, const uint8_t *body, Py_ssize_t length, int escaped) {
    if (!escaped) {
        view_set(v, (const char *)body, length, 0, body - s->base);
        return OK;
    }
    Columns *c = s->cols;
    if (side_reserve(c, length) < 0) FAIL(s, E_MEMORY, "out of memory");
    char *out = c->side + c->side_len;
    const uint8_t *p = body, *end = body + length;
    Py_ssize_t k = 0;
    while (p < end) {
        if (*p != '\\') {
            out[k++] = (char)*p++;
            continue;
        }
        uint8_t e = p[1];
        if (e != 'u') {
            char ch = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : (char)e;
            out[k++] = ch;
            p += 2;
            continue;
        }
        uint32_t cp = hex4(p + 2);
        p += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) FAIL(s, E_UNSUPPORTED, "lone low surrogate");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u') FAIL(s, E_UNSUPPORTED, "lone high surrogate");
            uint32_t low = hex4(p + 2);
            if (low < 0xDC00 || low > 0xDFFF) FAIL(s, E_UNSUPPORTED, "lone high surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            p += 6;
        }
        k += put_utf8(out + k, cp); /* never longer than the escape it replaces */
    }
    view_set(v, out, k, c->side_index, c->side_len);
    c->side_len += k;
    return OK;
}

/* A JSON number at *pp (strict grammar). *is_int: no fraction and no exponent; *value: its value
 * when it is an int that fits int64 (*fits). */
static Status scan_number(Scanner *s, const uint8_t **pp, int *is_int, int64_t *value, int *fits) {
    const uint8_t *p = *pp, *end = s->end;
    int negative = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    if (p >= end || *p < '0' || *p > '9') FAIL(s, E_SYNTAX, "bad number");
    uint64_t magnitude = 0;
    int overflow = 0;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            uint64_t d = (uint64_t)(*p - '0');
            if (magnitude > (UINT64_MAX - d) / 10) overflow = 1;
            else magnitude = magnitude * 10 + d;
            p++;
        }
    }
    *is_int = 1;
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') FAIL(s, E_SYNTAX, "bad number");
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') FAIL(s, E_SYNTAX, "bad number");
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    *fits = 0;
    if (*is_int && !overflow) {
        if (!negative && magnitude <= (uint64_t)INT64_MAX) {
            *value = (int64_t)magnitude;
            *fits = 1;
        } else if (negative && magnitude <= (uint64_t)INT64_MAX + 1) {
            *value = magnitude == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)magnitude;
            *fits = 1;
        }
    }
    *pp = p;
    return OK;
}

static int literal(const uint8_t *p, const uint8_t *end, const char *word, size_t n) {
    return (size_t)(end - p) >= n && memcmp(p, word, n) == 0;
}

#define MAX_DEPTH 256

static Status skip_value(Scanner *s, const uint8_t **pp, int depth) {
    const uint8_t *p = *pp, *end = s->end;
    if (p >= end) FAIL(s, E_SYNTAX, "missing value");
    const uint8_t *body;
    Py_ssize_t length;
    int escaped, is_int, fits;
    int64_t value;
    Status st;
    switch (*p) {
    case '"':
        st = scan_string(s, &p, &body, &length, &escaped);
        if (st) return st;
        break;
    case '{':
    case '[': {
        if (depth >= MAX_DEPTH) FAIL(s, E_UNSUPPORTED, "nesting too deep");
        uint8_t close = *p == '{' ? '}' : ']';
        int object = *p == '{';
        p = skip_ws(p + 1, end);
        if (p < end && *p == close) {
            p++;
            break;
        }
        for (;;) {
            if (object) {
                if (p >= end || *p != '"') FAIL(s, E_SYNTAX, "expected a key");
                st = scan_string(s, &p, &body, &length, &escaped);
                if (st) return st;
                p = skip_ws(p, end);
                if (p >= end || *p != ':') FAIL(s, E_SYNTAX, "expected ':'");
                p = skip_ws(p + 1, end);
            }
            st = skip_value(s, &p, depth + 1);
            if (st) return st;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            if (p < end && *p == close) {
                p++;
                break;
            }
            FAIL(s, E_SYNTAX, "expected ',' or a closing bracket");
        }
        break;
    }
    case 't':
        if (!literal(p, end, "true", 4)) FAIL(s, E_SYNTAX, "bad literal");
        p += 4;
        break;
    case 'f':
        if (!literal(p, end, "false", 5)) FAIL(s, E_SYNTAX, "bad literal");
        p += 5;
        break;
    case 'n':
        if (!literal(p, end, "null", 4)) FAIL(s, E_SYNTAX, "bad literal");
        p += 4;
        break;
    default:
        st = scan_number(s, &p, &is_int, &value, &fits);
        if (st) return st;
    }
    *pp = p;
    return OK;
}

/* fields of an event */
enum { K_OTHER = -1, K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ARGS, K_ID, K_BP, K_S, K_TTS, K_TDUR };

static int field_of(const uint8_t *k, Py_ssize_t n) {
    switch (n) {
    case 1:
        return k[0] == 's' ? K_S : K_OTHER;
    case 2:
        if (k[0] == 'p' && k[1] == 'h') return K_PH;
        if (k[0] == 't' && k[1] == 's') return K_TS;
        if (k[0] == 'i' && k[1] == 'd') return K_ID;
        if (k[0] == 'b' && k[1] == 'p') return K_BP;
        return K_OTHER;
    case 3:
        if (memcmp(k, "cat", 3) == 0) return K_CAT;
        if (memcmp(k, "pid", 3) == 0) return K_PID;
        if (memcmp(k, "tid", 3) == 0) return K_TID;
        if (memcmp(k, "dur", 3) == 0) return K_DUR;
        if (memcmp(k, "tts", 3) == 0) return K_TTS;
        return K_OTHER;
    case 4:
        if (memcmp(k, "name", 4) == 0) return K_NAME;
        if (memcmp(k, "args", 4) == 0) return K_ARGS;
        if (memcmp(k, "tdur", 4) == 0) return K_TDUR;
        return K_OTHER;
    default:
        return K_OTHER;
    }
}

/* where each field's value goes: the view of a string field, the tag/int slot of a tagged one
 * (whose view is V_PID + slot; times are the slots from T_TS on) */
_Static_assert(V_PID == NSTRINGS && V_TDUR - V_PID == T_TDUR - T_PID, "tagged views follow the tag slots");
static const int STRING_VIEW[] = {[K_CAT] = V_CAT, [K_NAME] = V_NAME, [K_BP] = V_BP, [K_S] = V_S};
static const int TAGGED_SLOT[] = {[K_PID] = T_PID, [K_TID] = T_TID, [K_ID] = T_ID, [K_TS] = T_TS,
                                  [K_DUR] = T_DUR, [K_TTS] = T_TTS, [K_TDUR] = T_TDUR};

static const char PHASES[] = "XBEiIRMCstfbenSTpFPNODVvc()";

/* A string field (cat/name/bp/s): a string or null. */
static Status string_field(Scanner *s, const uint8_t **pp, View *v, uint8_t *present) {
    const uint8_t *p = *pp;
    if (*p == 'n') {
        if (!literal(p, s->end, "null", 4)) FAIL(s, E_SYNTAX, "bad literal");
        *pp = p + 4;
        *present = 0;
        return OK;
    }
    if (*p != '"') FAIL(s, E_UNSUPPORTED, "a string field of another type");
    const uint8_t *body;
    Py_ssize_t length;
    int escaped;
    Status st = scan_string(s, pp, &body, &length, &escaped);
    if (st) return st;
    *present = 1;
    return store_string(s, v, body, length, escaped);
}

/* The exact nanoseconds of a time given as decimal microseconds text, where that is simple:
 * -?digits(.digits)? with at most 3 decimals, at most max_digits digits and no int64 overflow.
 * Then every reading of the text agrees (DuckDB's DECIMAL(38,6) cast and ROUND, the exact
 * decimal of chrome_fast._text_times; for a JSON float, max_digits = 15 makes the text the
 * shortest decimal of its double, which is what DuckDB rounds). Returns 0 where not simple. */
static int exact_ns(const uint8_t *p, Py_ssize_t n, int max_digits, int64_t *ns) {
    Py_ssize_t i = 0;
    int negative = 0;
    if (i < n && p[i] == '-') {
        negative = 1;
        i++;
    }
    uint64_t v = 0;
    int digits = 0, decimals = 0;
    if (i >= n || p[i] < '0' || p[i] > '9') return 0;
    /* at most 19 digits: < 10^19 < 2^64, no overflow of v */
    while (i < n && p[i] >= '0' && p[i] <= '9') {
        if (++digits > 19) return 0;
        v = v * 10 + (uint64_t)(p[i++] - '0');
    }
    if (i < n && p[i] == '.') {
        i++;
        if (i >= n || p[i] < '0' || p[i] > '9') return 0;
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            if (++digits > 19 || ++decimals > 3) return 0;
            v = v * 10 + (uint64_t)(p[i++] - '0');
        }
    }
    if (i != n || digits > max_digits || v > (uint64_t)INT64_MAX) return 0;
    for (; decimals < 3; decimals++) {
        if (v > (uint64_t)INT64_MAX / 10) return 0;
        v *= 10;
    }
    *ns = negative ? -(int64_t)v : (int64_t)v;
    return 1;
}

/* pid/tid/id (int or string) and the times (also float): the tag, int value, or text view.
 * Times (is_time) are TAG_NS with their exact ns where exact_ns applies, or a plain int fits. */
static Status tagged_field(Scanner *s, const uint8_t **pp, int is_time, int float_as_text, uint8_t *tag,
                           int64_t *ival, View *v) {
    const uint8_t *p = *pp;
    *tag = TAG_NONE;
    *ival = 0;
    if (*p == 'n') {
        if (!literal(p, s->end, "null", 4)) FAIL(s, E_SYNTAX, "bad literal");
        *pp = p + 4;
        return OK;
    }
    if (*p == '"') {
        const uint8_t *body;
        Py_ssize_t length;
        int escaped;
        Status st = scan_string(s, pp, &body, &length, &escaped);
        if (st) return st;
        if (is_time && !escaped && exact_ns(body, length, 19, ival)) {
            *tag = TAG_NS;
            return OK;
        }
        *tag = TAG_STR;
        return store_string(s, v, body, length, escaped);
    }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        int is_int, fits;
        int64_t value = 0;
        const uint8_t *start = p;
        Status st = scan_number(s, &p, &is_int, &value, &fits);
        if (st) return st;
        if (is_int) {
            if (!fits) FAIL(s, E_UNSUPPORTED, "an int outside int64");
            if (is_time && value <= MAX_US && value >= -MAX_US) {
                *tag = TAG_NS;
                *ival = value * 1000;
            } else {
                *tag = TAG_INT;
                *ival = value;
            }
        } else {
            if (!is_time) FAIL(s, E_UNSUPPORTED, "a float where an int or string is expected");
            if (exact_ns(start, p - start, float_as_text ? 19 : 15, ival)) {
                *tag = TAG_NS;
            } else {
                *tag = float_as_text ? TAG_STR : TAG_FLOAT;
                view_set(v, (const char *)start, p - start, 0, start - s->base);
            }
        }
        *pp = p;
        return OK;
    }
    FAIL(s, E_UNSUPPORTED, "a field of another type");
}

static Status scan_event(Scanner *s, const uint8_t **pp) {
    Columns *c = s->cols;
    const uint8_t *p = *pp, *end = s->end;
    if (p >= end || *p != '{') FAIL(s, E_UNSUPPORTED, "an event that is not an object");
    if (columns_reserve(c, c->n + 1) < 0) FAIL(s, E_MEMORY, "out of memory");
    Py_ssize_t i = c->n;
    c->ph[i] = 0;
    for (int k = 0; k < NTAGGED; k++) {
        c->tag[k][i] = TAG_NONE;
        c->ival[k][i] = 0;
    }
    /* The string fields' views are zeroed (Arrow reads them under its validity bitmap too); a
     * tagged field's view is written only for a string or float value and read only there, so
     * those columns stay untouched (never faulted in) for traces of numbers. */
    for (int k = 0; k < NSTRINGS; k++) memset(&c->view[k][i], 0, sizeof(View));
    for (int k = 0; k < NSTRINGS; k++) c->has[k][i] = 0;
    c->args_off[i] = 0;
    c->args_len[i] = 0;
    c->args_obj[i] = 0;
    unsigned seen = 0;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        goto done;
    }
    for (;;) {
        if (p >= end || *p != '"') FAIL(s, E_SYNTAX, "expected a key");
        const uint8_t *key;
        Py_ssize_t key_length;
        int escaped;
        Status st = scan_string(s, &p, &key, &key_length, &escaped);
        if (st) return st;
        if (escaped) FAIL(s, E_UNSUPPORTED, "an escaped key");
        int field = field_of(key, key_length);
        p = skip_ws(p, end);
        if (p >= end || *p != ':') FAIL(s, E_SYNTAX, "expected ':'");
        p = skip_ws(p + 1, end);
        if (p >= end) FAIL(s, E_SYNTAX, "missing value");
        if (field != K_OTHER) {
            if (seen & (1u << field)) FAIL(s, E_UNSUPPORTED, "a duplicated key");
            seen |= 1u << field;
        }
        switch (field) {
        case K_OTHER:
            st = skip_value(s, &p, 1);
            break;
        case K_PH:
            if (*p == 'n') {
                if (!literal(p, end, "null", 4)) FAIL(s, E_SYNTAX, "bad literal");
                p += 4;
                st = OK;
                break;
            }
            if (end - p < 3 || p[0] != '"' || p[2] != '"' || p[1] == 0 || strchr(PHASES, p[1]) == NULL)
                FAIL(s, E_UNSUPPORTED, "a phase that is not one character of the format");
            c->ph[i] = p[1];
            p += 3;
            st = OK;
            break;
        case K_CAT:
        case K_NAME:
        case K_BP:
        case K_S: {
            int v = STRING_VIEW[field];
            st = string_field(s, &p, &c->view[v][i], &c->has[v][i]);
            break;
        }
        case K_TS:
            if (s->quoted && *p != 'n' && *p != '"' && *p != '-' && (*p < '0' || *p > '9'))
                FAIL(s, E_UNSUPPORTED, "a ts of another type");
            /* fall through */
        case K_PID:
        case K_TID:
        case K_ID:
        case K_DUR:
        case K_TTS:
        case K_TDUR: {
            int t = TAGGED_SLOT[field], is_time = t >= T_TS;
            st = tagged_field(s, &p, is_time, field == K_TS && s->quoted, &c->tag[t][i], &c->ival[t][i],
                              &c->view[V_PID + t][i]);
            break;
        }
        case K_ARGS: {
            const uint8_t *start = p;
            st = skip_value(s, &p, 1);
            c->args_off[i] = (int32_t)(start - s->base);
            c->args_len[i] = (int32_t)(p - start);
            c->args_obj[i] = *start == '{' && *skip_ws(start + 1, end) != '}';
            break;
        }
        default:
            st = OK;
        }
        if (st) return st;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        FAIL(s, E_SYNTAX, "expected ',' or '}'");
    }
done:
    c->n = i + 1;
    *pp = p;
    return OK;
}

enum { MODE_ALL = 0, MODE_HEAD = 1, MODE_TAIL = 2 };

/* Events from p to the chunk's end, comma-separated, in the grammar of the mode (see the top). */
static Status scan_chunk(Scanner *s, const uint8_t *p, int mode) {
    const uint8_t *end = s->end;
    p = skip_ws(p, end);
    if (p == end) {
        if (mode == MODE_ALL) return OK; /* an empty array */
        FAIL(s, E_NOT_BOUNDARY, "an empty chunk");
    }
    for (;;) {
        Status st = scan_event(s, &p);
        if (st) return st;
        p = skip_ws(p, end);
        if (p == end) {
            if (mode == MODE_HEAD) FAIL(s, E_NOT_BOUNDARY, "the split point is inside an event");
            return OK;
        }
        if (*p != ',') FAIL(s, E_SYNTAX, "expected ',' between events");
        p = skip_ws(p + 1, end);
        if (p == end) {
            if (mode == MODE_HEAD) return OK;
            FAIL(s, E_SYNTAX, "a comma after the last event");
        }
    }
}

static PyObject *column_block(void **data, Py_ssize_t size) {
    PyObject *b = block_new((char *)*data, size);
    *data = NULL; /* owned by the block now (or freed) */
    return b;
}

PyDoc_STRVAR(scan_doc,
"scan(text, start, end, mode, quoted, side_index) -> tuple | str\n\n"
"Columns of the events in text[start:end] (the inside of the events array, or a chunk of it:\n"
"mode 0 = all, 1 = head up to a split point, 2 = tail from it), or a reason string when the\n"
"chunk needs the DuckDB path. The tuple: (n, ph, tags, ints, views, has, args_off,\n"
"args_len, side): ph a uint8 block; tags and ints 7 blocks each (pid, tid, id, ts, dur, tts,\n"
"tdur; tag 0 absent or null, 1 int, 2 float, 3 string, 4 a time's exact ns in ints); views 11\n"
"blocks of 16-byte Arrow string views (cat, name, bp, s, then the seven above; buffer 0 = text,\n"
"side_index = side); has 4 uint8 blocks (cat, name, bp, s present); args offsets and lengths as\n"
"int32 blocks; the side buffer; args_obj (uint8: args is an object with a member).");

static PyObject *scan(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer text;
    Py_ssize_t start, end;
    int mode, quoted, side_index;
    if (!PyArg_ParseTuple(args, "y*nnipi", &text, &start, &end, &mode, &quoted, &side_index)) return NULL;
    if (start < 0 || end < start || end > text.len || text.len > INT32_MAX || mode < 0 || mode > 2) {
        PyBuffer_Release(&text);
        PyErr_SetString(PyExc_ValueError, "scan: bad range, mode or a text over 2 GiB");
        return NULL;
    }
    Columns cols;
    memset(&cols, 0, sizeof(cols));
    cols.side_index = side_index;
    Scanner s = {(const uint8_t *)text.buf, (const uint8_t *)text.buf + end, quoted, &cols, NULL};
    Status st;
    Py_BEGIN_ALLOW_THREADS
    /* Room for one event per 64 bytes up front (Kineto writes 150-350 per event): large blocks
     * are mapped lazily, so what is not used costs no memory, and no realloc copies the rest. */
    st = columns_reserve(&cols, (end - start) / 64 + 1024) < 0 ? E_MEMORY
                                                              : scan_chunk(&s, (const uint8_t *)text.buf + start, mode);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    if (st == E_MEMORY) {
        columns_free(&cols);
        return PyErr_NoMemory();
    }
    if (st != OK) {
        columns_free(&cols);
        return PyUnicode_FromString(s.reason ? s.reason : "unsupported");
    }
    Py_ssize_t n = cols.n;
    PyObject *tags = PyTuple_New(NTAGGED), *ints = PyTuple_New(NTAGGED), *views = PyTuple_New(NVIEWS),
             *has = PyTuple_New(NSTRINGS);
    PyObject *result = NULL;
    if (tags == NULL || ints == NULL || views == NULL || has == NULL) goto fail;
    for (int k = 0; k < NTAGGED; k++) {
        PyObject *t = column_block((void **)&cols.tag[k], n), *v = column_block((void **)&cols.ival[k], n * 8);
        if (t == NULL || v == NULL) {
            Py_XDECREF(t);
            Py_XDECREF(v);
            goto fail;
        }
        PyTuple_SET_ITEM(tags, k, t);
        PyTuple_SET_ITEM(ints, k, v);
    }
    for (int k = 0; k < NVIEWS; k++) {
        PyObject *v = column_block((void **)&cols.view[k], n * (Py_ssize_t)sizeof(View));
        if (v == NULL) goto fail;
        PyTuple_SET_ITEM(views, k, v);
    }
    for (int k = 0; k < NSTRINGS; k++) {
        PyObject *v = column_block((void **)&cols.has[k], n);
        if (v == NULL) goto fail;
        PyTuple_SET_ITEM(has, k, v);
    }
    result = Py_BuildValue("(nNNNNNNNNN)", n, column_block((void **)&cols.ph, n), tags, ints, views, has,
                           column_block((void **)&cols.args_off, n * 4),
                           column_block((void **)&cols.args_len, n * 4),
                           column_block((void **)&cols.side, cols.side_len),
                           column_block((void **)&cols.args_obj, n));
    columns_free(&cols);
    return result; /* "N" steals the references, also when building fails */
fail:
    Py_XDECREF(tags);
    Py_XDECREF(ints);
    Py_XDECREF(views);
    Py_XDECREF(has);
    columns_free(&cols);
    return NULL;
}

PyDoc_STRVAR(object_tail_doc,
"object_tail(text, at) -> int\n\n"
"Whether text[at:] with its first byte read as '{' is one JSON object and nothing but whitespace\n"
"after it (how the fields after a trace's events array are parsed): 1 it is, 0 it is not\n"
"(a syntax error), -1 unknown (something the scanner leaves to a full parser: deep nesting,\n"
"invalid UTF-8, a lone surrogate).");

static PyObject *object_tail(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer text;
    Py_ssize_t at;
    if (!PyArg_ParseTuple(args, "y*n", &text, &at)) return NULL;
    if (at < 0 || at >= text.len) {
        PyBuffer_Release(&text);
        PyErr_SetString(PyExc_ValueError, "object_tail: position out of range");
        return NULL;
    }
    Columns unused;
    memset(&unused, 0, sizeof(unused));
    const uint8_t *base = (const uint8_t *)text.buf, *end = base + text.len;
    Scanner s = {base, end, 0, &unused, NULL};
    Status st;
    Py_BEGIN_ALLOW_THREADS
    /* skip_value needs the '{' itself: walk the members as skip_value does after it */
    const uint8_t *p = skip_ws(base + at + 1, end);
    st = OK;
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            const uint8_t *body;
            Py_ssize_t length;
            int escaped;
            if (p >= end || *p != '"') {
                s.reason = "expected a key";
                st = E_SYNTAX;
                break;
            }
            st = scan_string(&s, &p, &body, &length, &escaped);
            if (st) break;
            p = skip_ws(p, end);
            if (p >= end || *p != ':') {
                st = E_SYNTAX;
                break;
            }
            p = skip_ws(p + 1, end);
            st = skip_value(&s, &p, 1);
            if (st) break;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            if (p < end && *p == '}') {
                p++;
                break;
            }
            st = E_SYNTAX;
            break;
        }
    }
    if (st == OK && skip_ws(p, end) != end) st = E_SYNTAX;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&text);
    columns_free(&unused);
    return PyLong_FromLong(st == OK ? 1 : st == E_SYNTAX ? 0 : -1);
}

/* rows (int64) into the offsets/lengths (int32) columns, validated against the text. */
static int check_spans(const Py_buffer *text, const Py_buffer *off, const Py_buffer *len, const Py_buffer *rows) {
    Py_ssize_t n = off->len / 4, m = rows->len / 8;
    const int32_t *o = off->buf, *l = len->buf;
    const int64_t *r = rows->buf;
    if (len->len != off->len) {
        PyErr_SetString(PyExc_ValueError, "offsets and lengths differ in size");
        return -1;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        if (r[j] < 0 || r[j] >= n || o[r[j]] < 0 || l[r[j]] < 0 || (Py_ssize_t)o[r[j]] + l[r[j]] > text->len) {
            PyErr_SetString(PyExc_IndexError, "a row or a text span out of range");
            return -1;
        }
    }
    return 0;
}

#define ARGS_HEAD "{\"args\":"
#define ARGS_HEAD_BYTES 8

PyDoc_STRVAR(args_strings_doc,
"args_strings(text, offsets, lengths, rows) -> (bytes, bytes)\n\n"
"The Arrow string array of '{\"args\":' + text[offsets[r]:offsets[r] + lengths[r]] + '}' for r in\n"
"rows (offsets, lengths: int32 buffers; rows: int64): its int32 offsets and its data.");

static PyObject *args_strings(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer text, off, len, rows;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &text, &off, &len, &rows)) return NULL;
    PyObject *offsets = NULL, *data = NULL, *result = NULL;
    if (check_spans(&text, &off, &len, &rows) < 0) goto done;
    Py_ssize_t m = rows.len / 8, total = 0;
    const int32_t *o = off.buf, *l = len.buf;
    const int64_t *r = rows.buf;
    for (Py_ssize_t j = 0; j < m; j++) total += ARGS_HEAD_BYTES + l[r[j]] + 1;
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "args texts over 2 GiB");
        goto done;
    }
    offsets = PyBytes_FromStringAndSize(NULL, (m + 1) * 4);
    data = PyBytes_FromStringAndSize(NULL, total);
    if (offsets == NULL || data == NULL) goto done;
    int32_t *w_off = (int32_t *)PyBytes_AS_STRING(offsets);
    char *w = PyBytes_AS_STRING(data), *w0 = w;
    const char *t = text.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < m; j++) {
        w_off[j] = (int32_t)(w - w0);
        memcpy(w, ARGS_HEAD, ARGS_HEAD_BYTES);
        w += ARGS_HEAD_BYTES;
        memcpy(w, t + o[r[j]], (size_t)l[r[j]]);
        w += l[r[j]];
        *w++ = '}';
    }
    w_off[m] = (int32_t)(w - w0);
    Py_END_ALLOW_THREADS
    result = PyTuple_Pack(2, offsets, data);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    PyBuffer_Release(&text);
    PyBuffer_Release(&off);
    PyBuffer_Release(&len);
    PyBuffer_Release(&rows);
    return result;
}

PyDoc_STRVAR(args_contain_doc,
"args_contain(text, offsets, lengths, rows, needle) -> bool\n\n"
"Whether needle occurs in any of text[offsets[r]:offsets[r] + lengths[r]] for r in rows.");

static PyObject *args_contain(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer text, off, len, rows, needle;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*", &text, &off, &len, &rows, &needle)) return NULL;
    PyObject *result = NULL;
    if (check_spans(&text, &off, &len, &rows) < 0) goto done;
    if (needle.len == 0) {
        PyErr_SetString(PyExc_ValueError, "an empty needle");
        goto done;
    }
    Py_ssize_t m = rows.len / 8;
    const int32_t *o = off.buf, *l = len.buf;
    const int64_t *r = rows.buf;
    const char *t = text.buf;
    int found = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < m && !found; j++) {
        found = memmem(t + o[r[j]], (size_t)l[r[j]], needle.buf, (size_t)needle.len) != NULL;
    }
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(found);
done:
    PyBuffer_Release(&text);
    PyBuffer_Release(&off);
    PyBuffer_Release(&len);
    PyBuffer_Release(&rows);
    PyBuffer_Release(&needle);
    return result;
}

PyDoc_STRVAR(json_depth_doc,
"json_depth(data, depth, in_string, escaped, limit) -> (depth, in_string, escaped, over_at)\n\n"
"One chunk of a JSON text, walked from the state the previous chunk left: depth (brackets [ and\n"
"{ open outside strings; a closing one never takes it below 0), whether the chunk starts inside\n"
"a string, and whether the byte before it ends an odd run of backslashes. A quote after an odd\n"
"run of backslashes is escaped; every other quote opens or closes a string (on valid JSON,\n"
"exactly the strings; a backslash outside a string is a syntax error to every parser). Returns\n"
"the state at the chunk's end and over_at, the offset in the chunk of the bracket that opens\n"
"level limit + 1 (the walk stops there, returning the state just after it), or -1. It bounds the nesting a parser will meet; it\n"
"does not validate.");

static PyObject *json_depth(PyObject *module, PyObject *args) {
    (void)module;
    Py_buffer data;
    Py_ssize_t depth, limit, over = -1;
    int in_string, escaped;
    if (!PyArg_ParseTuple(args, "y*nppn", &data, &depth, &in_string, &escaped, &limit)) return NULL;
    if (depth < 0 || limit < 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "json_depth: a negative depth or limit");
        return NULL;
    }
    const uint8_t *base = (const uint8_t *)data.buf, *p = base, *end = base + data.len;
    Py_BEGIN_ALLOW_THREADS
    while (p < end) {
        const uint8_t *stop = in_string ? string_stop : outside_stop;
        if (!stop[*p]) {
            escaped = 0;
            p++;
            while (p < end && !stop[*p]) p++;
            if (p >= end) break;
        }
        uint8_t c = *p++;
        if (c == '\\') {
            escaped = !escaped;
            continue;
        }
        if (c == '"') {
            if (!escaped) in_string = !in_string;
        } else if (c == '[' || c == '{') {
            if (++depth > limit) {
                over = p - 1 - base;
                escaped = 0; /* the state after the bracket, as the numpy walk returns it */
                break;
            }
        } else if (depth > 0) {
            depth--;
        }
        escaped = 0;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    return Py_BuildValue("(nNNn)", depth, PyBool_FromLong(in_string), PyBool_FromLong(escaped), over);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"args_strings", args_strings, METH_VARARGS, args_strings_doc},
    {"args_contain", args_contain, METH_VARARGS, args_contain_doc},
    {"object_tail", object_tail, METH_VARARGS, object_tail_doc},
    {"json_depth", json_depth, METH_VARARGS, json_depth_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_chrome_scan",
    "Column scanner for Chrome/Kineto trace JSON (see layerscope.trace.chrome_fast).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__chrome_scan(void) {
    init_tables();
    if (PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "MODE_ALL", MODE_ALL) < 0 || PyModule_AddIntConstant(m, "MODE_HEAD", MODE_HEAD) < 0 ||
        PyModule_AddIntConstant(m, "MODE_TAIL", MODE_TAIL) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
