/* egmstore._egmstore: thin CPython binding of the egmstore client library.
 *
 * Built for the stable ABI (one .abi3.so for CPython 3.11 and later) and not
 * linked to libpython. Every method answers raw egm status values (and values)
 * so that the pure-Python layers decide between exceptions (egmstore.Store)
 * and Mooncake ErrorCodes (egmstore.mooncake). Only bad Python arguments raise
 * here (TypeError/ValueError naming the argument).
 *
 * The GIL is released around every library call that can block (RPCs,
 * transfers, close). Arguments are converted to C arrays first, and the Python
 * objects whose memory those arrays borrow (key strings, buffers) stay
 * referenced for the whole call. A per-client rwlock lets calls run in
 * parallel while close waits for them, so close never frees a client in use;
 * close first sets `closing`, which new calls check before they take the read
 * lock, so a stream of callers cannot starve it. */
#define Py_LIMITED_API 0x030B0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <egmstore/egmstore.h>

/* Most replicas per object: the range of the `replica_num` configuration key
 * and the master's placement limit (src/common/config.c, EGM_MASTER_REPLICA_MAX);
 * the public headers do not name it. */
#define REPLICA_MAX 16

enum { INIT_NONE, INIT_RUNNING, INIT_DONE };

typedef struct {
    PyObject_HEAD egm_client_t *client; /* NULL until initialised and once closed; written
                                           under the write lock */
    int init_state;                     /* INIT_*, read and written with the GIL held */
    atomic_int closing;                 /* set once by close(): every later call answers
                                           CLOSED without waiting for the lock */
    atomic_int cleanup_pending;         /* the last close() failed a teardown step */
    pthread_rwlock_t lock;              /* read: a call in flight; write: close, init */
} client_object;

/* Raised by Client() when the config or the connection fails: args are
 * (status, message). egmstore maps it to its exception classes. */
static PyObject *status_error;
/* A ValueError: a key's list of addresses and its list of sizes differ in
 * length (the *_parts calls). The Mooncake facade answers INVALID_PARAMS for
 * every key then, as Mooncake does, without checking the lists itself first. */
static PyObject *parts_mismatch_error;

/* ---- argument conversion ------------------------------------------------ */

/* TypeError "<what>, not <type name>" (the limited API hides tp_name). */
__attribute__((format(printf, 2, 3))) static void type_error(PyObject *obj, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    PyObject *name = PyType_GetName(Py_TYPE(obj));
    if (name != NULL)
        PyErr_Format(PyExc_TypeError, "%s, not %U", what, name);
    Py_XDECREF(name);
}

/* A key: str without NUL. The UTF-8 text lives as long as the str object. */
static const char *key_arg(PyObject *obj, const char *what)
{
    Py_ssize_t len = 0;
    if (!PyUnicode_Check(obj)) {
        type_error(obj, "%s must be a str", what);
        return NULL;
    }
    const char *text = PyUnicode_AsUTF8AndSize(obj, &len);
    if (text == NULL)
        return NULL;
    if (strlen(text) != (size_t)len) {
        PyErr_Format(PyExc_ValueError, "%s must not contain NUL characters", what);
        return NULL;
    }
    return text;
}

/* An address (an int such as tensor.data_ptr() or ctypes.addressof()). */
static int addr_arg(PyObject *obj, const char *what, Py_ssize_t index, void **addr_p)
{
    if (!PyLong_Check(obj)) {
        if (index >= 0)
            type_error(obj, "%s[%zd] must be an int address", what, index);
        else
            type_error(obj, "%s must be an int address", what);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(obj);
    if (PyErr_Occurred() || v > UINTPTR_MAX) {
        PyErr_Clear();
        if (index >= 0)
            PyErr_Format(PyExc_ValueError, "%s[%zd] is not a valid address (0..2**64-1)", what,
                         index);
        else
            PyErr_Format(PyExc_ValueError, "%s is not a valid address (0..2**64-1)", what);
        return -1;
    }
    *addr_p = (void *)(uintptr_t)v;
    return 0;
}

static int size_arg(PyObject *obj, const char *what, Py_ssize_t index, size_t *size_p)
{
    if (!PyLong_Check(obj)) {
        if (index >= 0)
            type_error(obj, "%s[%zd] must be an int", what, index);
        else
            type_error(obj, "%s must be an int", what);
        return -1;
    }
    size_t v = PyLong_AsSize_t(obj);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        if (index >= 0)
            PyErr_Format(PyExc_ValueError, "%s[%zd] must be a size >= 0", what, index);
        else
            PyErr_Format(PyExc_ValueError, "%s must be a size >= 0", what);
        return -1;
    }
    *size_p = v;
    return 0;
}

/* An int (not a bool) in min..max; the ValueError names the argument and the
 * accepted range (`low` overrides how its lower end reads, or NULL). */
static int int_arg(PyObject *obj, const char *what, long min, long max, const char *low,
                   int *value_p)
{
    int overflow = 0;
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        type_error(obj, "%s must be an int", what);
        return -1;
    }
    long v = PyLong_AsLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0 || v < min || v > max) {
        if (low != NULL)
            PyErr_Format(PyExc_ValueError, "%s must be %s..%ld, not %R", what, low, max, obj);
        else
            PyErr_Format(PyExc_ValueError, "%s must be %ld..%ld, not %R", what, min, max, obj);
        return -1;
    }
    *value_p = (int)v;
    return 0;
}

/* A list or tuple as a new tuple (immutable while the GIL is released). */
static PyObject *seq_arg(PyObject *obj, const char *what)
{
    if (!PyList_Check(obj) && !PyTuple_Check(obj)) {
        type_error(obj, "%s must be a list", what);
        return NULL;
    }
    return PySequence_Tuple(obj);
}

/* Size and items of a list or a tuple (borrowed references). */
static Py_ssize_t seq_size(PyObject *seq)
{
    return PyList_Check(seq) ? PyList_Size(seq) : PyTuple_Size(seq);
}

static PyObject *seq_item(PyObject *seq, Py_ssize_t i)
{
    return PyList_Check(seq) ? PyList_GetItem(seq, i) : PyTuple_GetItem(seq, i);
}

static int same_len(Py_ssize_t n, Py_ssize_t m, const char *what)
{
    if (n == m)
        return 0;
    PyErr_Format(PyExc_ValueError, "%s has %zd items but keys has %zd", what, m, n);
    return -1;
}

/* Converted batch arguments; every array has n entries (parts: total entries). */
typedef struct {
    size_t n;
    PyObject *keys_tuple;
    const char **keys;
    void **addrs;
    size_t *lens;
    size_t *counts; /* parts: parts per key */
    size_t total;   /* parts: sum of counts */
    size_t *sizes;
    egm_status_t *results;
} batch_args;

static void batch_free(batch_args *b)
{
    Py_XDECREF(b->keys_tuple);
    PyMem_Free(b->keys);
    PyMem_Free(b->addrs);
    PyMem_Free(b->lens);
    PyMem_Free(b->counts);
    PyMem_Free(b->sizes);
    PyMem_Free(b->results);
    memset(b, 0, sizeof(*b));
}

static void *alloc_array(size_t n, size_t elem)
{
    void *p = PyMem_Calloc(n > 0 ? n : 1, elem);
    if (p == NULL)
        PyErr_NoMemory();
    return p;
}

/* The conversions of a batch's items without their error texts (a batch of
 * 256 keys x 64 parts has 16k items: formatting their names costs more than the
 * copy of a piece). NULL / -1 with no exception set: the caller reconverts the
 * item with key_arg / addr_arg / size_arg, which raise the error naming it. */
static const char *fast_key(PyObject *obj)
{
    Py_ssize_t len = 0;
    if (!PyUnicode_Check(obj))
        return NULL;
    const char *text = PyUnicode_AsUTF8AndSize(obj, &len);
    if (text == NULL) {
        PyErr_Clear();
        return NULL;
    }
    return strlen(text) == (size_t)len ? text : NULL;
}

static int fast_u64(PyObject *obj, unsigned long long *v)
{
    /* No PyLong_Check first: in the limited API each check is a call
     * (PyType_GetFlags), and the conversion refuses a non-int itself. Where
     * long has 64 bits (Linux on x86-64 and arm64), PyLong_AsUnsignedLong
     * reads the digits directly where PyLong_AsUnsignedLongLong goes through
     * the generic byte-array conversion: an address of 47 bits took 2x longer. */
#if ULONG_MAX == ULLONG_MAX
    *v = PyLong_AsUnsignedLong(obj);
#else
    *v = PyLong_AsUnsignedLongLong(obj);
#endif
    if (*v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* An address and a size, or -1 (nothing set, no exception) for the caller to
 * convert again with addr_arg / size_arg, which name the item. */
static int fast_addr_len(PyObject *addr, PyObject *size, void **addr_p, size_t *size_p)
{
    unsigned long long a, l;
    if (fast_u64(addr, &a) != 0 || a > UINTPTR_MAX || fast_u64(size, &l) != 0 || l > SIZE_MAX)
        return -1;
    *addr_p = (void *)(uintptr_t)a;
    *size_p = (size_t)l;
    return 0;
}

static int batch_keys(batch_args *b, PyObject *keys)
{
    memset(b, 0, sizeof(*b));
    b->keys_tuple = seq_arg(keys, "keys");
    if (b->keys_tuple == NULL)
        return -1;
    b->n = (size_t)PyTuple_Size(b->keys_tuple);
    b->keys = alloc_array(b->n, sizeof(*b->keys));
    b->sizes = alloc_array(b->n, sizeof(*b->sizes));
    b->results = alloc_array(b->n, sizeof(*b->results));
    if (b->keys == NULL || b->sizes == NULL || b->results == NULL)
        return -1;
    for (size_t i = 0; i < b->n; i++) {
        PyObject *item = PyTuple_GetItem(b->keys_tuple, (Py_ssize_t)i);
        if (item == NULL)
            return -1;
        b->keys[i] = fast_key(item);
        if (b->keys[i] != NULL)
            continue;
        char what[48]; /* the error names the key: formatted only then */
        snprintf(what, sizeof(what), "keys[%zu]", i);
        b->keys[i] = key_arg(item, what);
        if (b->keys[i] == NULL)
            return -1;
    }
    return 0;
}

/* One address and one size per key. */
static int batch_flat(batch_args *b, PyObject *ptrs, PyObject *sizes, const char *ptrs_name,
                      const char *sizes_name)
{
    int rc = -1;
    PyObject *pt = seq_arg(ptrs, ptrs_name);
    PyObject *st = pt != NULL ? seq_arg(sizes, sizes_name) : NULL;
    if (st == NULL)
        goto out;
    if (same_len((Py_ssize_t)b->n, PyTuple_Size(pt), ptrs_name) != 0 ||
        same_len((Py_ssize_t)b->n, PyTuple_Size(st), sizes_name) != 0)
        goto out;
    b->addrs = alloc_array(b->n, sizeof(*b->addrs));
    b->lens = alloc_array(b->n, sizeof(*b->lens));
    if (b->addrs == NULL || b->lens == NULL)
        goto out;
    for (size_t i = 0; i < b->n; i++) {
        PyObject *ip = PyTuple_GetItem(pt, (Py_ssize_t)i), *is = PyTuple_GetItem(st, (Py_ssize_t)i);
        if (fast_addr_len(ip, is, &b->addrs[i], &b->lens[i]) == 0)
            continue;
        if (addr_arg(ip, ptrs_name, (Py_ssize_t)i, &b->addrs[i]) != 0 ||
            size_arg(is, sizes_name, (Py_ssize_t)i, &b->lens[i]) != 0)
            goto out;
    }
    rc = 0;
out:
    Py_XDECREF(pt);
    Py_XDECREF(st);
    return rc;
}

/* A list of address lists and a list of size lists, one pair per key, of equal
 * lengths, flattened in key order. */
static int batch_parts(batch_args *b, PyObject *ptrs, PyObject *sizes)
{
    int rc = -1;
    PyObject *pt = seq_arg(ptrs, "ptrs");
    PyObject *st = pt != NULL ? seq_arg(sizes, "sizes") : NULL;
    PyObject **inner_p = NULL, **inner_s = NULL;
    if (st == NULL)
        goto out;
    if (same_len((Py_ssize_t)b->n, PyTuple_Size(pt), "ptrs") != 0 ||
        same_len((Py_ssize_t)b->n, PyTuple_Size(st), "sizes") != 0)
        goto out;
    b->counts = alloc_array(b->n, sizeof(*b->counts));
    inner_p = alloc_array(b->n, sizeof(*inner_p));
    inner_s = alloc_array(b->n, sizeof(*inner_s));
    if (b->counts == NULL || inner_p == NULL || inner_s == NULL)
        goto out;
    b->total = 0;
    for (size_t i = 0; i < b->n; i++) {
        PyObject *ip = PyTuple_GetItem(pt, (Py_ssize_t)i);
        PyObject *is = PyTuple_GetItem(st, (Py_ssize_t)i);
        if (!PyList_Check(ip) && !PyTuple_Check(ip)) {
            type_error(ip, "ptrs[%zu] must be a list of int addresses", i);
            goto out;
        }
        if (!PyList_Check(is) && !PyTuple_Check(is)) {
            type_error(is, "sizes[%zu] must be a list of int", i);
            goto out;
        }
        /* Held as they are (no copy): nothing below runs Python code, so a list
         * cannot change while its items are read; the C arrays are what the
         * call uses once the GIL is released. */
        Py_INCREF(ip);
        inner_p[i] = ip;
        Py_INCREF(is);
        inner_s[i] = is;
        Py_ssize_t np = seq_size(ip), ns = seq_size(is);
        if (np != ns) {
            PyErr_Format(parts_mismatch_error, "ptrs[%zu] has %zd items but sizes[%zu] has %zd", i,
                         np, i, ns);
            goto out;
        }
        b->counts[i] = (size_t)np;
        b->total += (size_t)np;
    }
    b->addrs = alloc_array(b->total, sizeof(*b->addrs));
    b->lens = alloc_array(b->total, sizeof(*b->lens));
    if (b->addrs == NULL || b->lens == NULL)
        goto out;
    size_t f = 0;
    for (size_t i = 0; i < b->n; i++) {
        /* Each list's kind looked up once, not per item (a call in the limited API). */
        PyObject *(*item_p)(PyObject *, Py_ssize_t) =
            PyList_Check(inner_p[i]) ? PyList_GetItem : PyTuple_GetItem;
        PyObject *(*item_s)(PyObject *, Py_ssize_t) =
            PyList_Check(inner_s[i]) ? PyList_GetItem : PyTuple_GetItem;
        for (size_t j = 0; j < b->counts[i]; j++, f++) {
            if (fast_addr_len(item_p(inner_p[i], (Py_ssize_t)j), item_s(inner_s[i], (Py_ssize_t)j),
                              &b->addrs[f], &b->lens[f]) == 0)
                continue;
            char pname[48], sname[48]; /* the error names the item: formatted only then */
            snprintf(pname, sizeof(pname), "ptrs[%zu]", i);
            snprintf(sname, sizeof(sname), "sizes[%zu]", i);
            if (addr_arg(seq_item(inner_p[i], (Py_ssize_t)j), pname, (Py_ssize_t)j, &b->addrs[f]) !=
                    0 ||
                size_arg(seq_item(inner_s[i], (Py_ssize_t)j), sname, (Py_ssize_t)j, &b->lens[f]) !=
                    0)
                goto out;
        }
    }
    rc = 0;
out:
    for (size_t i = 0; inner_p != NULL && i < b->n; i++) {
        Py_XDECREF(inner_p[i]);
        Py_XDECREF(inner_s[i]);
    }
    PyMem_Free(inner_p);
    PyMem_Free(inner_s);
    Py_XDECREF(pt);
    Py_XDECREF(st);
    return rc;
}

static PyObject *status_list(const egm_status_t *results, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *v = PyLong_FromLong(results[i]);
        if (v == NULL || PyList_SetItem(list, (Py_ssize_t)i, v) != 0) {
            Py_CLEAR(list);
        }
    }
    return list;
}

static PyObject *size_list(const size_t *sizes, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list != NULL && i < n; i++) {
        PyObject *v = PyLong_FromSize_t(sizes[i]);
        if (v == NULL || PyList_SetItem(list, (Py_ssize_t)i, v) != 0) {
            Py_CLEAR(list);
        }
    }
    return list;
}

/* Replicate config: None, or (replica_num, with_soft_pin, with_hard_pin,
 * [preferred segment names]). The names borrow from `holder`. */
typedef struct {
    egm_replicate_config_t rc;
    PyObject *holder;
    const char **names;
} rc_args;

static void rc_free(rc_args *r)
{
    Py_XDECREF(r->holder);
    PyMem_Free(r->names);
}

static int rc_arg(PyObject *obj, rc_args *r, const egm_replicate_config_t **rc_p)
{
    memset(r, 0, sizeof(*r));
    *rc_p = NULL;
    if (obj == NULL || obj == Py_None)
        return 0;
    PyObject *num = NULL, *segs = NULL;
    int soft = 0, hard = 0, replica_num = 0;
    if (!PyTuple_Check(obj) || !PyArg_ParseTuple(obj, "OppO:rc", &num, &soft, &hard, &segs)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "rc must be None or a tuple (replica_num, with_soft_pin, "
                                         "with_hard_pin, [preferred segment names])");
        return -1;
    }
    /* 0 means the configuration's replica_num; anything else is the count itself. */
    if (int_arg(num, "replica_num", 0, REPLICA_MAX, "0 (the replica_num configuration key) or 1",
                &replica_num) != 0)
        return -1;
    r->holder = seq_arg(segs, "rc.preferred_segments");
    if (r->holder == NULL)
        return -1;
    size_t n = (size_t)PyTuple_Size(r->holder);
    r->names = alloc_array(n, sizeof(*r->names));
    if (r->names == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        r->names[i] = key_arg(PyTuple_GetItem(r->holder, (Py_ssize_t)i), "rc.preferred_segments");
        if (r->names[i] == NULL)
            return -1;
    }
    r->rc.replica_num = (uint32_t)replica_num;
    r->rc.with_soft_pin = soft;
    r->rc.with_hard_pin = hard;
    r->rc.preferred_segments = n > 0 ? r->names : NULL;
    r->rc.preferred_segments_count = n;
    *rc_p = &r->rc;
    return 0;
}

/* ---- calls without the GIL --------------------------------------------- */

static int is_closing(client_object *self)
{
    return atomic_load_explicit(&self->closing, memory_order_acquire);
}

/* Runs `expr` (an egm status expression using `c`, the client) without the
 * GIL and under the read lock; a closed (or closing, or not initialised)
 * client answers EGM_ERR_CLOSED. `closing` is checked before the read lock so
 * that close(), which sets it before taking the write lock, waits only for the
 * calls already in flight; it is checked again under the lock for a caller
 * that passed the first check just before close() set it. */
#define CALL_UNLOCKED(self, st, expr)                                                              \
    do {                                                                                           \
        if (is_closing(self)) {                                                                    \
            (st) = EGM_ERR_CLOSED;                                                                 \
            break;                                                                                 \
        }                                                                                          \
        PyThreadState *ts_ = PyEval_SaveThread();                                                  \
        pthread_rwlock_rdlock(&(self)->lock);                                                      \
        egm_client_t *c = is_closing(self) ? NULL : (self)->client;                                \
        (st) = c == NULL ? EGM_ERR_CLOSED : (expr);                                                \
        pthread_rwlock_unlock(&(self)->lock);                                                      \
        PyEval_RestoreThread(ts_);                                                                 \
    } while (0)

/* ---- BufferHandle: an object's bytes as egm_get allocated them ---------- */

/* What get_buffer / batch_get_buffer answer: the library's allocation from
 * egm_get, handed to Python without a copy and freed with egm_buffer_free when
 * the last reference (the handle, or a memoryview of it) goes. It has the
 * buffer protocol (writable bytes, format "b", as Mooncake's BufferHandle),
 * len(), and Mooncake's ptr() and size(). Not constructible from Python. */
typedef struct {
    PyObject_HEAD void *data; /* egm_get's buffer; NULL only for an empty object */
    Py_ssize_t len;
} buffer_handle_object;

static PyTypeObject *buffer_handle_type;

/* Takes ownership of data (freed here on failure). */
static PyObject *buffer_handle_new(void *data, size_t len)
{
    allocfunc alloc = (allocfunc)PyType_GetSlot(buffer_handle_type, Py_tp_alloc);
    buffer_handle_object *h = (buffer_handle_object *)alloc(buffer_handle_type, 0);
    if (h == NULL) {
        egm_buffer_free(data);
        return NULL;
    }
    h->data = data;
    h->len = (Py_ssize_t)len;
    return (PyObject *)h;
}

static void buffer_handle_dealloc(PyObject *op)
{
    buffer_handle_object *h = (buffer_handle_object *)op;
    PyTypeObject *type = Py_TYPE(op);
    egm_buffer_free(h->data);
    h->data = NULL;
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(op);
    Py_DECREF(type);
}

static int buffer_handle_getbuffer(PyObject *op, Py_buffer *view, int flags)
{
    buffer_handle_object *h = (buffer_handle_object *)op;
    /* view->obj keeps the handle (so the memory) alive as long as the view. */
    if (PyBuffer_FillInfo(view, op, h->data, h->len, 0, flags) != 0)
        return -1;
    if (flags & PyBUF_FORMAT)
        view->format = "b";
    return 0;
}

static Py_ssize_t buffer_handle_length(PyObject *op)
{
    return ((buffer_handle_object *)op)->len;
}

static PyObject *buffer_handle_ptr(PyObject *op, PyObject *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(((buffer_handle_object *)op)->data);
}

static PyObject *buffer_handle_size(PyObject *op, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(((buffer_handle_object *)op)->len);
}

static PyMethodDef buffer_handle_methods[] = {
    {"ptr", buffer_handle_ptr, METH_NOARGS, "ptr() -> address of the bytes"},
    {"size", buffer_handle_size, METH_NOARGS, "size() -> number of bytes"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot buffer_handle_slots[] = {
    {Py_tp_dealloc, (void *)buffer_handle_dealloc},
    {Py_tp_methods, buffer_handle_methods},
    {Py_bf_getbuffer, (void *)buffer_handle_getbuffer},
    {Py_mp_length, (void *)buffer_handle_length},
    {Py_tp_doc, "An object's bytes, held without a copy (get_buffer, batch_get_buffer): "
                "the buffer protocol (memoryview, bytes(), numpy/torch frombuffer), len(), "
                "ptr() and size(). The memory lives as long as the handle or a view of it."},
    {0, NULL},
};

static PyType_Spec buffer_handle_spec = {
    .name = "egmstore._egmstore.BufferHandle",
    .basicsize = sizeof(buffer_handle_object),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = buffer_handle_slots,
};

/* ---- Client type --------------------------------------------------------- */

static int config_from_dict(PyObject *dict, egm_config_t **config_p, egm_status_t *st_p)
{
    egm_config_t *config = NULL;
    PyObject *key, *value;
    Py_ssize_t pos = 0;

    *st_p = EGM_OK;
    if (dict != NULL && dict != Py_None && !PyDict_Check(dict)) {
        type_error(dict, "config must be a dict of str to str");
        return -1;
    }
    *st_p = egm_config_create(&config);
    if (*st_p != EGM_OK)
        return 0;
    while (dict != NULL && dict != Py_None && PyDict_Next(dict, &pos, &key, &value)) {
        const char *k = key_arg(key, "config key");
        if (k == NULL)
            goto err;
        if (!PyUnicode_Check(value)) {
            type_error(value, "config[\"%s\"] must be a str", k);
            goto err;
        }
        const char *v = key_arg(value, "config value");
        if (v == NULL)
            goto err;
        *st_p = egm_config_set(config, k, v);
        if (*st_p != EGM_OK) {
            egm_config_destroy(config);
            return 0;
        }
    }
    *config_p = config;
    return 0;
err:
    egm_config_destroy(config);
    return -1;
}

static void raise_status(egm_status_t st)
{
    const char *detail = egm_last_error();
    PyObject *args = Py_BuildValue(
        "(is)", (int)st, detail != NULL && detail[0] != '\0' ? detail : egm_status_string(st));
    if (args != NULL) {
        PyErr_SetObject(status_error, args);
        Py_DECREF(args);
    }
}

static int client_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    client_object *self = (client_object *)op;
    static char *kwlist[] = {"config", NULL};
    PyObject *dict = NULL;
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    egm_status_t st;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:Client", kwlist, &dict))
        return -1;
    /* Checked and set with the GIL held: a second __init__ (from this thread or
     * another, during or after the first, or after close) never replaces or
     * revives the client. */
    if (self->init_state != INIT_NONE || is_closing(self)) {
        PyErr_SetString(PyExc_RuntimeError,
                        is_closing(self)
                            ? "Client.__init__: this Client is closed; create a new one"
                        : self->init_state == INIT_RUNNING
                            ? "Client.__init__: this Client is being initialised by another call"
                            : "Client.__init__: this Client is already initialised; __init__ may "
                              "run only once (create a new Client)");
        return -1;
    }
    if (config_from_dict(dict, &config, &st) != 0)
        return -1;
    if (st != EGM_OK) {
        raise_status(st);
        return -1;
    }
    self->init_state = INIT_RUNNING;
    PyThreadState *ts = PyEval_SaveThread();
    st = egm_client_create(config, &client);
    egm_config_destroy(config);
    if (st == EGM_OK) {
        int installed = 0;
        pthread_rwlock_wrlock(&self->lock);
        if (!is_closing(self)) {
            self->client = client;
            installed = 1;
        }
        pthread_rwlock_unlock(&self->lock);
        if (!installed) { /* close() ran meanwhile: it wins */
            egm_client_destroy(client);
            st = EGM_ERR_CLOSED;
        }
    }
    PyEval_RestoreThread(ts);
    if (st == EGM_ERR_CLOSED) {
        self->init_state = INIT_DONE;
        PyObject *err = Py_BuildValue("(is)", (int)st, "the Client was closed during __init__");
        if (err != NULL) {
            PyErr_SetObject(status_error, err);
            Py_DECREF(err);
        }
        return -1;
    }
    if (st != EGM_OK) {
        self->init_state = INIT_NONE; /* nothing was created: __init__ may be retried */
        raise_status(st);
        return -1;
    }
    self->init_state = INIT_DONE;
    return 0;
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)args;
    (void)kwargs;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    client_object *self = (client_object *)alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->client = NULL;
    self->init_state = INIT_NONE;
    atomic_init(&self->closing, 0);
    atomic_init(&self->cleanup_pending, 0);
    if (pthread_rwlock_init(&self->lock, NULL) != 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void client_dealloc(PyObject *op)
{
    client_object *self = (client_object *)op;
    PyTypeObject *type = Py_TYPE(op);
    /* No call can be in flight: each holds a reference to self. */
    if (self->client != NULL) {
        egm_client_t *client = self->client;
        self->client = NULL;
        PyThreadState *ts = PyEval_SaveThread();
        egm_client_destroy(client);
        PyEval_RestoreThread(ts);
    }
    pthread_rwlock_destroy(&self->lock);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(op);
    Py_DECREF(type);
}

static PyObject *client_close(PyObject *op, PyObject *unused)
{
    client_object *self = (client_object *)op;
    egm_status_t st = EGM_OK;
    (void)unused;
    /* Before the write lock: new calls now answer CLOSED instead of queueing
     * for the read lock, so only the calls in flight delay close. */
    atomic_store_explicit(&self->closing, 1, memory_order_release);
    PyThreadState *ts = PyEval_SaveThread();
    pthread_rwlock_wrlock(&self->lock);
    if (self->client != NULL) {
        st = egm_client_close(self->client);
        /* A failed close keeps what it could not release; close() retries. */
        if (st == EGM_OK) {
            egm_client_destroy(self->client);
            self->client = NULL;
        }
        atomic_store_explicit(&self->cleanup_pending, st != EGM_OK, memory_order_release);
    }
    pthread_rwlock_unlock(&self->lock);
    PyEval_RestoreThread(ts);
    return PyLong_FromLong(st);
}

static PyObject *client_closed(PyObject *op, void *unused)
{
    client_object *self = (client_object *)op;
    (void)unused;
    return PyBool_FromLong(is_closing(self));
}

static egm_health_t closed_health(client_object *self)
{
    return atomic_load_explicit(&self->cleanup_pending, memory_order_acquire)
               ? EGM_HEALTH_CLEANUP_PENDING
               : EGM_HEALTH_NOT_INITIALIZED;
}

static PyObject *client_health(PyObject *op, PyObject *unused)
{
    client_object *self = (client_object *)op;
    egm_health_t h;
    (void)unused;
    /* Closing or closed answers as closed, as every other call does, without
     * waiting behind close() for the lock: NOT_INITIALIZED, or CLEANUP_PENDING
     * while a failed close() waits to be retried. */
    if (is_closing(self))
        return PyLong_FromLong(closed_health(self));
    PyThreadState *ts = PyEval_SaveThread();
    pthread_rwlock_rdlock(&self->lock);
    h = is_closing(self) ? closed_health(self)
                         : egm_client_health(self->client); /* NULL -> NOT_INITIALIZED */
    pthread_rwlock_unlock(&self->lock);
    PyEval_RestoreThread(ts);
    return PyLong_FromLong((long)h);
}

static PyObject *client_metrics(PyObject *op, PyObject *unused)
{
    client_object *self = (client_object *)op;
    (void)unused;
    size_t cap = 4096, need = 0;
    if (is_closing(self))
        return PyUnicode_FromString("");
    for (int attempt = 0; attempt < 4; attempt++) {
        char *buf = PyMem_Malloc(cap);
        if (buf == NULL)
            return PyErr_NoMemory();
        int closed = 0;
        PyThreadState *ts = PyEval_SaveThread();
        pthread_rwlock_rdlock(&self->lock);
        if (self->client == NULL || is_closing(self))
            closed = 1;
        else
            need = egm_client_metrics(self->client, buf, cap);
        pthread_rwlock_unlock(&self->lock);
        PyEval_RestoreThread(ts);
        if (closed) {
            PyMem_Free(buf);
            return PyUnicode_FromString("");
        }
        if (need < cap) {
            PyObject *text = PyUnicode_FromStringAndSize(buf, (Py_ssize_t)need);
            PyMem_Free(buf);
            return text;
        }
        PyMem_Free(buf);
        cap = need + 1024; /* the text may grow between two calls */
    }
    PyErr_SetString(PyExc_RuntimeError, "metrics text kept growing");
    return NULL;
}

/* The transports, best first: fixed when the client was created, so a short
 * text (the longest today is "nvlink shm tcp"). */
static PyObject *client_transports(PyObject *op, PyObject *unused)
{
    client_object *self = (client_object *)op;
    (void)unused;
    char buf[256];
    size_t need = 0;
    if (is_closing(self))
        return PyList_New(0);
    PyThreadState *ts = PyEval_SaveThread();
    pthread_rwlock_rdlock(&self->lock);
    if (self->client != NULL && !is_closing(self))
        need = egm_client_transports(self->client, buf, sizeof(buf));
    pthread_rwlock_unlock(&self->lock);
    PyEval_RestoreThread(ts);
    if (need >= sizeof(buf)) {
        PyErr_SetString(PyExc_RuntimeError, "transports: the names do not fit 256 bytes");
        return NULL;
    }
    PyObject *text = PyUnicode_FromStringAndSize(buf, (Py_ssize_t)need);
    if (text == NULL)
        return NULL;
    PyObject *names = PyUnicode_Split(text, NULL, -1); /* "" -> [] */
    Py_DECREF(text);
    return names;
}

static PyObject *client_register_buffer(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *ptr, *size;
    void *addr;
    size_t len;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "OO:register_buffer", &ptr, &size) ||
        addr_arg(ptr, "ptr", -1, &addr) != 0 || size_arg(size, "size", -1, &len) != 0)
        return NULL;
    CALL_UNLOCKED(self, st, egm_register_buffer(c, addr, len));
    return PyLong_FromLong(st);
}

static PyObject *client_unregister_buffer(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *ptr;
    void *addr;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "O:unregister_buffer", &ptr) ||
        addr_arg(ptr, "ptr", -1, &addr) != 0)
        return NULL;
    CALL_UNLOCKED(self, st, egm_unregister_buffer(c, addr));
    return PyLong_FromLong(st);
}

static PyObject *client_put(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *key_obj, *value, *rc_obj = Py_None;
    Py_buffer view;
    rc_args r;
    const egm_replicate_config_t *rc;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "OO|O:put", &key_obj, &value, &rc_obj))
        return NULL;
    const char *key = key_arg(key_obj, "key");
    if (key == NULL)
        return NULL;
    if (PyObject_GetBuffer(value, &view, PyBUF_CONTIG_RO) != 0) {
        PyErr_Clear();
        type_error(value, "value must be a contiguous bytes-like object");
        return NULL;
    }
    if (rc_arg(rc_obj, &r, &rc) != 0) {
        PyBuffer_Release(&view);
        rc_free(&r);
        return NULL;
    }
    CALL_UNLOCKED(self, st, egm_put(c, key, view.buf, (size_t)view.len, rc));
    PyBuffer_Release(&view);
    rc_free(&r);
    return PyLong_FromLong(st);
}

static PyObject *client_put_from(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *key_obj, *ptr, *size, *rc_obj = Py_None;
    void *addr;
    size_t len;
    rc_args r;
    const egm_replicate_config_t *rc;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "OOO|O:put_from", &key_obj, &ptr, &size, &rc_obj))
        return NULL;
    const char *key = key_arg(key_obj, "key");
    if (key == NULL || addr_arg(ptr, "ptr", -1, &addr) != 0 || size_arg(size, "size", -1, &len))
        return NULL;
    if (rc_arg(rc_obj, &r, &rc) != 0) {
        rc_free(&r);
        return NULL;
    }
    CALL_UNLOCKED(self, st, egm_put_from(c, key, addr, len, rc));
    rc_free(&r);
    return PyLong_FromLong(st);
}

/* A library buffer as bytes (a copy; the buffer is freed). */
static PyObject *bytes_of_buffer(void *data, size_t len)
{
    PyObject *bytes = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
    egm_buffer_free(data);
    return bytes;
}

/* get and get_buffer: egm_get of the key argument, its bytes handed to
 * `wrap` (which owns them), answered as (status, wrapped or None). */
static PyObject *get_wrapped(PyObject *op, PyObject *args, const char *format,
                             PyObject *(*wrap)(void *data, size_t len))
{
    client_object *self = (client_object *)op;
    PyObject *key_obj;
    void *data = NULL;
    size_t len = 0;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, format, &key_obj))
        return NULL;
    const char *key = key_arg(key_obj, "key");
    if (key == NULL)
        return NULL;
    CALL_UNLOCKED(self, st, egm_get(c, key, &data, &len));
    if (st != EGM_OK) {
        egm_buffer_free(data);
        return Py_BuildValue("(iO)", (int)st, Py_None);
    }
    PyObject *out = wrap(data, len);
    if (out == NULL)
        return NULL;
    return Py_BuildValue("(iN)", (int)st, out);
}

static PyObject *client_get(PyObject *op, PyObject *args)
{
    return get_wrapped(op, args, "O:get", bytes_of_buffer);
}

static PyObject *client_get_into(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *key_obj, *ptr, *size;
    void *addr;
    size_t cap, len = 0;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "OOO:get_into", &key_obj, &ptr, &size))
        return NULL;
    const char *key = key_arg(key_obj, "key");
    if (key == NULL || addr_arg(ptr, "ptr", -1, &addr) != 0 || size_arg(size, "size", -1, &cap))
        return NULL;
    CALL_UNLOCKED(self, st, egm_get_into(c, key, addr, cap, &len));
    return Py_BuildValue("(in)", (int)st, (Py_ssize_t)len);
}

static PyObject *client_batch_put_from(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *keys, *ptrs, *sizes, *rc_obj = Py_None, *out = NULL;
    batch_args b;
    rc_args r;
    const egm_replicate_config_t *rc;
    egm_status_t st;
    memset(&r, 0, sizeof(r));
    if (!PyArg_ParseTuple(args, "OOO|O:batch_put_from", &keys, &ptrs, &sizes, &rc_obj))
        return NULL;
    if (batch_keys(&b, keys) != 0 || batch_flat(&b, ptrs, sizes, "ptrs", "sizes") != 0 ||
        rc_arg(rc_obj, &r, &rc) != 0)
        goto out;
    if (b.n == 0)
        CALL_UNLOCKED(self, st, EGM_OK);
    else
        CALL_UNLOCKED(self, st,
                      egm_batch_put_from(c, b.n, b.keys, (const void *const *)b.addrs, b.lens, rc,
                                         b.results));
    out = Py_BuildValue("(iN)", (int)st, status_list(b.results, b.n));
out:
    rc_free(&r);
    batch_free(&b);
    return out;
}

static PyObject *client_batch_get_into(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *keys, *ptrs, *sizes, *out = NULL;
    batch_args b;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "OOO:batch_get_into", &keys, &ptrs, &sizes))
        return NULL;
    if (batch_keys(&b, keys) != 0 || batch_flat(&b, ptrs, sizes, "ptrs", "sizes") != 0)
        goto out;
    if (b.n == 0)
        CALL_UNLOCKED(self, st, EGM_OK);
    else
        CALL_UNLOCKED(self, st,
                      egm_batch_get_into(c, b.n, b.keys, b.addrs, b.lens, b.sizes, b.results));
    out = Py_BuildValue("(iNN)", (int)st, status_list(b.results, b.n), size_list(b.sizes, b.n));
out:
    batch_free(&b);
    return out;
}

static PyObject *client_batch_put_from_parts(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *keys, *ptrs, *sizes, *rc_obj = Py_None, *out = NULL;
    batch_args b;
    rc_args r;
    const egm_replicate_config_t *rc;
    egm_status_t st;
    memset(&r, 0, sizeof(r));
    if (!PyArg_ParseTuple(args, "OOO|O:batch_put_from_parts", &keys, &ptrs, &sizes, &rc_obj))
        return NULL;
    if (batch_keys(&b, keys) != 0 || batch_parts(&b, ptrs, sizes) != 0 ||
        rc_arg(rc_obj, &r, &rc) != 0)
        goto out;
    if (b.n == 0)
        CALL_UNLOCKED(self, st, EGM_OK);
    else
        CALL_UNLOCKED(self, st,
                      egm_batch_put_from_parts(c, b.n, b.keys, b.counts,
                                               (const void *const *)b.addrs, b.lens, rc,
                                               b.results));
    out = Py_BuildValue("(iN)", (int)st, status_list(b.results, b.n));
out:
    rc_free(&r);
    batch_free(&b);
    return out;
}

static PyObject *client_batch_get_into_parts(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *keys, *ptrs, *sizes, *out = NULL;
    batch_args b;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "OOO:batch_get_into_parts", &keys, &ptrs, &sizes))
        return NULL;
    if (batch_keys(&b, keys) != 0 || batch_parts(&b, ptrs, sizes) != 0)
        goto out;
    if (b.n == 0)
        CALL_UNLOCKED(self, st, EGM_OK);
    else
        CALL_UNLOCKED(self, st,
                      egm_batch_get_into_parts(c, b.n, b.keys, b.counts, b.addrs, b.lens, b.sizes,
                                               b.results));
    out = Py_BuildValue("(iNN)", (int)st, status_list(b.results, b.n), size_list(b.sizes, b.n));
out:
    batch_free(&b);
    return out;
}

static PyObject *client_exist(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *key_obj;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "O:exist", &key_obj))
        return NULL;
    const char *key = key_arg(key_obj, "key");
    if (key == NULL)
        return NULL;
    CALL_UNLOCKED(self, st, egm_exist(c, key));
    return PyLong_FromLong(st);
}

static PyObject *client_batch_exist(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *keys, *out = NULL;
    batch_args b;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "O:batch_exist", &keys))
        return NULL;
    if (batch_keys(&b, keys) != 0)
        goto out;
    if (b.n == 0)
        CALL_UNLOCKED(self, st, EGM_OK);
    else
        CALL_UNLOCKED(self, st, egm_batch_exist(c, b.n, b.keys, b.results));
    out = Py_BuildValue("(iN)", (int)st, status_list(b.results, b.n));
out:
    batch_free(&b);
    return out;
}

static PyObject *client_size(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *key_obj;
    uint64_t size = 0;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "O:size", &key_obj))
        return NULL;
    const char *key = key_arg(key_obj, "key");
    if (key == NULL)
        return NULL;
    CALL_UNLOCKED(self, st, egm_size(c, key, &size));
    return Py_BuildValue("(iK)", (int)st, (unsigned long long)size);
}

static PyObject *client_remove(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *key_obj;
    int force = 0;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "O|p:remove", &key_obj, &force))
        return NULL;
    const char *key = key_arg(key_obj, "key");
    if (key == NULL)
        return NULL;
    CALL_UNLOCKED(self, st, egm_remove(c, key, force));
    return PyLong_FromLong(st);
}

static PyObject *client_batch_remove(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *keys, *out = NULL;
    int force = 0;
    batch_args b;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "O|p:batch_remove", &keys, &force))
        return NULL;
    if (batch_keys(&b, keys) != 0)
        goto out;
    if (b.n == 0)
        CALL_UNLOCKED(self, st, EGM_OK);
    else
        CALL_UNLOCKED(self, st, egm_batch_remove(c, b.n, b.keys, force, b.results));
    out = Py_BuildValue("(iN)", (int)st, status_list(b.results, b.n));
out:
    batch_free(&b);
    return out;
}

static PyObject *client_remove_all(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    int force = 0;
    uint64_t removed = 0;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "|p:remove_all", &force))
        return NULL;
    CALL_UNLOCKED(self, st, egm_remove_all(c, force, &removed));
    return Py_BuildValue("(iK)", (int)st, (unsigned long long)removed);
}

static PyObject *client_get_buffer(PyObject *op, PyObject *args)
{
    return get_wrapped(op, args, "O:get_buffer", buffer_handle_new);
}

/* egm_get for each key in turn, under one release of the GIL. */
static egm_status_t get_each(egm_client_t *c, size_t n, const char *const *keys, void **datas,
                             size_t *lens, egm_status_t *results)
{
    for (size_t i = 0; i < n; i++)
        results[i] = egm_get(c, keys[i], &datas[i], &lens[i]);
    return EGM_OK;
}

static PyObject *client_batch_get_buffer(PyObject *op, PyObject *args)
{
    client_object *self = (client_object *)op;
    PyObject *keys, *out = NULL, *handles = NULL;
    void **datas = NULL;
    batch_args b;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "O:batch_get_buffer", &keys))
        return NULL;
    if (batch_keys(&b, keys) != 0 || (datas = alloc_array(b.n, sizeof(*datas))) == NULL)
        goto out;
    CALL_UNLOCKED(self, st, get_each(c, b.n, b.keys, datas, b.sizes, b.results));
    if (st != EGM_OK) {
        out = Py_BuildValue("(i[]N)", (int)st, PyList_New(0));
        goto out;
    }
    handles = PyList_New((Py_ssize_t)b.n);
    for (size_t i = 0; handles != NULL && i < b.n; i++) {
        PyObject *h;
        if (b.results[i] == EGM_OK) {
            h = buffer_handle_new(datas[i], b.sizes[i]);
            datas[i] = NULL; /* the handle owns it, or freed it */
        } else {
            h = Py_NewRef(Py_None);
        }
        if (h == NULL || PyList_SetItem(handles, (Py_ssize_t)i, h) != 0)
            Py_CLEAR(handles);
    }
    if (handles != NULL)
        out = Py_BuildValue("(iNN)", (int)st, status_list(b.results, b.n), handles);
out:
    for (size_t i = 0; datas != NULL && i < b.n; i++)
        egm_buffer_free(datas[i]);
    PyMem_Free(datas);
    batch_free(&b);
    return out;
}

static PyMethodDef client_methods[] = {
    {"close", client_close, METH_NOARGS,
     "close() -> status. Withdraws contributed capacity; retry on error."},
    {"health", client_health, METH_NOARGS, "health() -> egm health code (0 healthy)."},
    {"metrics", client_metrics, METH_NOARGS, "metrics() -> Prometheus text (\"\" once closed)."},
    {"transports", client_transports, METH_NOARGS,
     "transports() -> the transport names this client may use, best first ([] once closed)."},
    {"register_buffer", client_register_buffer, METH_VARARGS,
     "register_buffer(ptr, size) -> status"},
    {"unregister_buffer", client_unregister_buffer, METH_VARARGS,
     "unregister_buffer(ptr) -> status"},
    {"put", client_put, METH_VARARGS, "put(key, bytes_like, rc=None) -> status"},
    {"put_from", client_put_from, METH_VARARGS, "put_from(key, ptr, size, rc=None) -> status"},
    {"get", client_get, METH_VARARGS, "get(key) -> (status, bytes or None)"},
    {"get_into", client_get_into, METH_VARARGS,
     "get_into(key, ptr, size) -> (status, object size)"},
    {"get_buffer", client_get_buffer, METH_VARARGS,
     "get_buffer(key) -> (status, BufferHandle or None): the bytes without a copy"},
    {"batch_get_buffer", client_batch_get_buffer, METH_VARARGS,
     "batch_get_buffer(keys) -> (status, [status per key], [BufferHandle or None per key])"},
    {"batch_put_from", client_batch_put_from, METH_VARARGS,
     "batch_put_from(keys, ptrs, sizes, rc=None) -> (status, [status per key])"},
    {"batch_get_into", client_batch_get_into, METH_VARARGS,
     "batch_get_into(keys, ptrs, sizes) -> (status, [status per key], [size per key])"},
    {"batch_put_from_parts", client_batch_put_from_parts, METH_VARARGS,
     "batch_put_from_parts(keys, [[ptr]], [[size]], rc=None) -> (status, [status per key])"},
    {"batch_get_into_parts", client_batch_get_into_parts, METH_VARARGS,
     "batch_get_into_parts(keys, [[ptr]], [[size]]) -> (status, [status], [size])"},
    {"exist", client_exist, METH_VARARGS, "exist(key) -> status (OK or NOT_FOUND)"},
    {"batch_exist", client_batch_exist, METH_VARARGS,
     "batch_exist(keys) -> (status, [status per key])"},
    {"size", client_size, METH_VARARGS, "size(key) -> (status, size)"},
    {"remove", client_remove, METH_VARARGS, "remove(key, force=False) -> status"},
    {"batch_remove", client_batch_remove, METH_VARARGS,
     "batch_remove(keys, force=False) -> (status, [status per key])"},
    {"remove_all", client_remove_all, METH_VARARGS,
     "remove_all(force=False) -> (status, removed count)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef client_getset[] = {
    {"closed", client_closed, NULL, "True once close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot client_slots[] = {
    {Py_tp_new, (void *)client_new},
    {Py_tp_init, (void *)client_init},
    {Py_tp_dealloc, (void *)client_dealloc},
    {Py_tp_methods, client_methods},
    {Py_tp_getset, client_getset},
    {Py_tp_doc, "Client(config: dict[str, str] = None): an egmstore client connected to the "
                "master named by config[\"master_server_addr\"]. Raises StatusError(status, "
                "message) when the config or the connection fails."},
    {0, NULL},
};

static PyType_Spec client_spec = {
    .name = "egmstore._egmstore.Client",
    .basicsize = sizeof(client_object),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = client_slots,
};

/* ---- module functions ----------------------------------------------------- */

static PyObject *mod_status_name(PyObject *mod, PyObject *arg)
{
    (void)mod;
    int st;
    if (int_arg(arg, "status", INT_MIN, INT_MAX, NULL, &st) != 0)
        return NULL;
    return PyUnicode_FromString(egm_status_name(st));
}

static PyObject *mod_status_string(PyObject *mod, PyObject *arg)
{
    (void)mod;
    int st;
    if (int_arg(arg, "status", INT_MIN, INT_MAX, NULL, &st) != 0)
        return NULL;
    return PyUnicode_FromString(egm_status_string(st));
}

static PyObject *mod_status_to_mooncake(PyObject *mod, PyObject *arg)
{
    (void)mod;
    int st;
    if (int_arg(arg, "status", INT_MIN, INT_MAX, NULL, &st) != 0)
        return NULL;
    return PyLong_FromLong(egm_status_to_mooncake(st));
}

static PyObject *mod_last_error(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    const char *detail = egm_last_error();
    return PyUnicode_FromString(detail != NULL ? detail : "");
}

static PyObject *mod_health_string(PyObject *mod, PyObject *arg)
{
    (void)mod;
    int h;
    if (int_arg(arg, "health", INT_MIN, INT_MAX, NULL, &h) != 0)
        return NULL;
    return PyUnicode_FromString(egm_health_string((egm_health_t)h));
}

/* config_get(key, config=None) -> str or None: the value `key` would have with
 * `config` applied over the defaults (raises StatusError for a bad config). */
static PyObject *mod_config_get(PyObject *mod, PyObject *args)
{
    (void)mod;
    PyObject *key_obj, *dict = Py_None;
    egm_config_t *config = NULL;
    egm_status_t st;
    if (!PyArg_ParseTuple(args, "O|O:config_get", &key_obj, &dict))
        return NULL;
    const char *key = key_arg(key_obj, "key");
    if (key == NULL || config_from_dict(dict, &config, &st) != 0)
        return NULL;
    if (st != EGM_OK) {
        raise_status(st);
        return NULL;
    }
    const char *value = egm_config_get(config, key);
    PyObject *out = value != NULL ? PyUnicode_FromString(value) : Py_NewRef(Py_None);
    egm_config_destroy(config);
    return out;
}

static PyMethodDef module_methods[] = {
    {"status_name", mod_status_name, METH_O, "status_name(status) -> e.g. \"NOT_FOUND\""},
    {"status_string", mod_status_string, METH_O, "status_string(status) -> description"},
    {"status_to_mooncake", mod_status_to_mooncake, METH_O,
     "status_to_mooncake(status) -> Mooncake ErrorCode"},
    {"health_string", mod_health_string, METH_O, "health_string(code) -> e.g. \"healthy\""},
    {"last_error", mod_last_error, METH_NOARGS,
     "last_error() -> detail of the last error on this thread"},
    {"config_get", mod_config_get, METH_VARARGS,
     "config_get(key, config=None) -> value of key with config applied, None if unknown"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_egmstore",
    .m_doc = "egmstore client library binding (raw status values)",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__egmstore(void);
PyMODINIT_FUNC PyInit__egmstore(void)
{
    PyObject *mod = PyModule_Create(&module_def);
    if (mod == NULL)
        return NULL;
    /* PyModule_AddObjectRef never steals: our references are dropped here on
     * every path, the module keeps its own (status_error keeps ours too). */
    PyObject *type = PyType_FromSpec(&client_spec);
    if (type == NULL || PyModule_AddObjectRef(mod, "Client", type) != 0)
        goto err;
    buffer_handle_type = (PyTypeObject *)PyType_FromSpec(&buffer_handle_spec);
    if (buffer_handle_type == NULL ||
        PyModule_AddObjectRef(mod, "BufferHandle", (PyObject *)buffer_handle_type) != 0)
        goto err;
    status_error = PyErr_NewException("egmstore._egmstore.StatusError", PyExc_RuntimeError, NULL);
    if (status_error == NULL || PyModule_AddObjectRef(mod, "StatusError", status_error) != 0)
        goto err;
    parts_mismatch_error =
        PyErr_NewException("egmstore._egmstore.PartsMismatchError", PyExc_ValueError, NULL);
    if (parts_mismatch_error == NULL ||
        PyModule_AddObjectRef(mod, "PartsMismatchError", parts_mismatch_error) != 0)
        goto err;
    if (PyModule_AddStringConstant(mod, "VERSION", EGMSTORE_VERSION) != 0 ||
        PyModule_AddIntConstant(mod, "STATUS_MIN", EGM_STATUS_MIN) != 0 ||
        PyModule_AddIntConstant(mod, "KEY_MAX", EGM_KEY_MAX) != 0 ||
        PyModule_AddIntConstant(mod, "REPLICA_MAX", REPLICA_MAX) != 0)
        goto err;
    Py_DECREF(type);
    return mod;
err:
    Py_XDECREF(type);
    Py_CLEAR(buffer_handle_type);
    Py_CLEAR(status_error);
    Py_CLEAR(parts_mismatch_error);
    Py_DECREF(mod);
    return NULL;
}
