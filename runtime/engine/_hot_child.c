/* A tracking BasicBolt's anchored child in C, and the edge ids it draws (the module:
 * _hot.c). */

#include "_hot.h"

/* -- edge ids ------------------------------------------------------------------------ */

/* xoshiro256** (Blackman and Vigna), seeded by seed() from os.urandom: edge ids
 * without a Python call, when the emits are given no ``bits``. */
static uint64_t rng[4] = {1, 2, 3, 4};

static uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t
next64(void)
{
    uint64_t result = rotl(rng[1] * 5, 7) * 9, t = rng[1] << 17;
    rng[2] ^= rng[0];
    rng[3] ^= rng[1];
    rng[1] ^= rng[2];
    rng[0] ^= rng[3];
    rng[2] ^= t;
    rng[3] = rotl(rng[3], 45);
    return result;
}

PyObject *
hot_seed(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (view.len != sizeof(rng)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "seed: 32 bytes");
        return NULL;
    }
    memcpy(rng, view.buf, sizeof(rng));
    PyBuffer_Release(&view);
    if (!(rng[0] | rng[1] | rng[2] | rng[3]))
        rng[0] = 1;  /* the one state it never leaves */
    Py_RETURN_NONE;
}

/* An edge id as new_id draws one (63 bits, nonzero), from the generator above. */
static PyObject *
next_edge(void)
{
    uint64_t v;
    while ((v = next64() >> 1) == 0)
        ;
    return PyLong_FromUnsignedLongLong(v);
}

PyObject *
hot_draw(PyObject *module, PyObject *unused)
{
    return next_edge();
}

/* ``bits(63) or new_id()``: an edge id from the generator of runtime/acking/_ids.py;
 * with ``bits`` None, from this module's own (~460 instructions a child less, the
 * Python call and the int built from bytes). */
static PyObject *
draw_edge(PyObject *bits, PyObject *new_id)
{
    if (bits == Py_None)
        return next_edge();
    PyObject *edge = PyObject_CallOneArg(bits, int_63);
    if (edge == NULL)
        return NULL;
    int truth = PyObject_IsTrue(edge);
    if (truth != 0) {
        if (truth < 0)
            Py_CLEAR(edge);
        return edge;
    }
    Py_DECREF(edge);
    return PyObject_CallNoArgs(new_id);
}

/* -- EmitChild and EmitKeyed: a tracking BasicBolt's anchored child -------------------- */

typedef struct {
    HOT_HEAD
    PyObject *current;   /* list: [the BasicBolt's input being processed, or None] */
    PyObject *last;      /* list: [the batch of the last child, its StreamOut] */
    PyObject *out;       /* the StreamOut */
    PyObject *tracked;   /* list: the tracked batch of each target task */
    PyObject *bits;      /* the bound getrandbits of runtime.acking._ids */
    PyObject *new_id;
    PyObject *deflt;     /* DEFAULT_STREAM, compared by identity as the closure does */
    PyObject *tuple_type, *one_type;
    PyObject *emit;      /* EmitChild: the checked emit, when the pick raised */
    PyObject *one;       /* EmitChild: the one task's batch, or NULL: tracked[pick(values)] */
    PyObject *pick;      /* EmitChild */
    Py_ssize_t ids_off, val_off, recorder_off;
    Py_ssize_t n, cap;
    int bare;
    Py_ssize_t key_at, tasks;  /* EmitKeyed: the key's field, and the tasks it hashes to */
} ChildObject;

/* The anchor (a new reference) and its root (borrowed from it) when the call may take
 * the fast way: the default stream, no anchors, an input of one root, no recorder.
 * NULL with no error: the closure's way. */
static PyObject *
child_anchor(ChildObject *self, PyObject *stream, PyObject *anchors, PyObject **root)
{
    if (stream != self->deflt || anchors != Py_None || PyList_GET_SIZE(self->current) < 1)
        return NULL;
    PyObject *anchor = PyList_GET_ITEM(self->current, 0);
    PyObject *tp = (PyObject *)Py_TYPE(anchor);
    if (tp != self->tuple_type && tp != self->one_type)
        return NULL;  /* None, or something else: the closure's way */
    PyObject *ids = *SLOT(anchor, self->ids_off);
    if (ids == NULL || !PyLong_CheckExact(ids))
        return NULL;
    PyObject *rec = get_field(self->out, self->recorder_off, str_recorder);
    if (rec == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(rec);
    if (rec != Py_None)
        return NULL;
    *root = ids;
    return Py_NewRef(anchor);
}

/* The child's tail, as the closures write it: an edge id, XORed into the input's
 * ``ack_val``; ``batch += (entry, root, edge)``; the batch noted as the last child's;
 * a full batch sent. Takes the reference to ``batch``. */
static PyObject *
child_tail(ChildObject *self, PyObject *anchor, PyObject *batch, PyObject *entry,
           PyObject *root)
{
    PyObject *edge = draw_edge(self->bits, self->new_id), *was = NULL;
    if (edge == NULL)
        goto fail;
    PyObject **val_slot = SLOT(anchor, self->val_off), *val = *val_slot;
    if (val == NULL) {
        PyErr_SetString(PyExc_AttributeError, "ack_val");
        goto fail;
    }
    PyObject *xored = PyNumber_InPlaceXor(val, edge);
    if (xored == NULL)
        goto fail;
    *val_slot = xored;
    Py_DECREF(val);
    if (PyList_CheckExact(batch)) {
        if (PyList_Append(batch, entry) < 0 || PyList_Append(batch, root) < 0
                || PyList_Append(batch, edge) < 0)
            goto fail;
    }
    else {
        PyObject *three = PyTuple_Pack(3, entry, root, edge);
        PyObject *sum = three == NULL ? NULL : PyNumber_InPlaceAdd(batch, three);
        Py_XDECREF(three);
        if (sum == NULL)
            goto fail;
        Py_SETREF(batch, sum);
    }
    Py_CLEAR(edge);
    if ((was = PySequence_GetItem(self->last, 0)) == NULL)
        goto fail;
    if (was != batch && (PySequence_SetItem(self->last, 0, batch) < 0
                         || PySequence_SetItem(self->last, 1, self->out) < 0))
        goto fail;
    Py_CLEAR(was);
    Py_ssize_t size = PyObject_Size(batch);
    Py_DECREF(batch);
    if (size < 0)
        return NULL;
    if (size >= self->cap)
        return PyObject_CallMethodNoArgs(self->out, str_flush_tracked);
    return Py_NewRef(Py_None);
fail:
    Py_XDECREF(was);
    Py_XDECREF(edge);
    Py_DECREF(batch);
    return NULL;
}

static PyObject *
child_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    ChildObject *self = (ChildObject *)op;
    PyObject *a[3], *root;
    if (parse_args(args, nargsf, kwnames, str_anchors, self->deflt, a) < 0
            || !PyList_CheckExact(a[0]) || PyList_GET_SIZE(a[0]) != self->n)
        return hot_spec((HotObject *)self, args, nargsf, kwnames);  /* (it picks, emits) */
    PyObject *anchor = child_anchor(self, a[1], a[2], &root);
    if (anchor == NULL)
        return PyErr_Occurred() ? NULL : hot_spec((HotObject *)self, args, nargsf, kwnames);
    PyObject *values = Py_NewRef(a[0]), *batch, *result;
    Py_INCREF(root);  /* the pick may run any code: hold what it could take away */
    PyObject *entry = Py_NewRef(self->bare ? PyList_GET_ITEM(values, 0) : values);
    if (self->one != NULL) {
        batch = Py_NewRef(self->one);
    }
    else {
        PyObject *i = PyObject_CallOneArg(self->pick, values);
        batch = i == NULL ? NULL : PyObject_GetItem(self->tracked, i);
        Py_XDECREF(i);
    }
    if (batch != NULL)
        result = child_tail(self, anchor, batch, entry, root);
    else if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();  /* the checked way reports it (a bad key), as the closure does */
        result = PyObject_Vectorcall(self->emit, a, 3, NULL);
    }
    else
        result = NULL;
    Py_DECREF(entry);
    Py_DECREF(values);
    Py_DECREF(root);
    Py_DECREF(anchor);
    return result;
}

/* CRC-32 as zlib.crc32 computes it (no zlib headers needed to build). */
static uint32_t crc_table[256];

void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t
crc32_of(const char *data, Py_ssize_t size)
{
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < size; i++)
        c = crc_table[(c ^ (unsigned char)data[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static PyObject *
keyed_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    ChildObject *self = (ChildObject *)op;
    PyObject *a[3], *root;
    if (parse_args(args, nargsf, kwnames, str_anchors, self->deflt, a) < 0
            || !PyList_CheckExact(a[0]) || PyList_GET_SIZE(a[0]) != self->n)
        return hot_spec((HotObject *)self, args, nargsf, kwnames);
    PyObject *key = PyList_GET_ITEM(a[0], self->key_at);
    Py_ssize_t size;
    const char *utf8 = PyUnicode_CheckExact(key) ? PyUnicode_AsUTF8AndSize(key, &size) : NULL;
    if (utf8 == NULL) {  /* not a str, or a lone surrogate: the closure's way */
        PyErr_Clear();
        return hot_spec((HotObject *)self, args, nargsf, kwnames);
    }
    PyObject *anchor = child_anchor(self, a[1], a[2], &root);
    if (anchor == NULL)
        return PyErr_Occurred() ? NULL : hot_spec((HotObject *)self, args, nargsf, kwnames);
    PyObject *entry = Py_NewRef(self->bare ? key : a[0]), *result = NULL;
    Py_INCREF(root);
    PyObject *batch = PySequence_GetItem(self->tracked,
                                         (Py_ssize_t)(crc32_of(utf8, size) % self->tasks));
    if (batch != NULL)
        result = child_tail(self, anchor, batch, entry, root);
    Py_DECREF(entry);
    Py_DECREF(root);
    Py_DECREF(anchor);
    return result;
}

/* The fields both child emits share, from their keywords; NULL with an error. */
static ChildObject *
child_alloc(PyTypeObject *type, vectorcallfunc call, PyObject **r, Py_ssize_t n,
            Py_ssize_t cap, int bare)
{
    Py_ssize_t off[TUPLE_SLOTS];
    /* r: spec current last out tracked bits new_id default tuple_type one_type ... */
    if (exact_lists(r + 1, 1) < 0 || exact_lists(r + 4, 1) < 0
            || tuple_slots(r[8], r[9], off) < 0)
        return NULL;
    if (bare && n != 1) {
        PyErr_SetString(PyExc_ValueError, "a bare stream has one field");
        return NULL;
    }
    ChildObject *self = (ChildObject *)hot_alloc(type, call, r, NREFS(ChildObject, pick));
    if (self == NULL)
        return NULL;
    self->ids_off = off[IDS];
    self->val_off = off[ACK_VAL];
    self->recorder_off = maybe_slot(self->out, "recorder");
    self->n = n;
    self->cap = cap;
    self->bare = bare;
    return self;
}

static PyObject *
child_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"spec", "current", "last", "out", "tracked", "bits", "new_id",
                            "default", "tuple_type", "one_type", "emit", "one", "pick",
                            "n", "cap", "bare", NULL};
    PyObject *r[13];
    Py_ssize_t n, cap;
    int bare;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOOOOOOOOOOOnnp:EmitChild", names,
                                     &r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6], &r[7],
                                     &r[8], &r[9], &r[10], &r[11], &r[12], &n, &cap, &bare))
        return NULL;
    if (r[11] == Py_None)
        r[11] = NULL;  /* several tasks: the pick chooses */
    return (PyObject *)child_alloc(type, child_vectorcall, r, n, cap, bare);
}

static PyObject *
keyed_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"spec", "current", "last", "out", "tracked", "bits", "new_id",
                            "default", "tuple_type", "one_type", "key_at", "tasks", "n",
                            "cap", "bare", NULL};
    PyObject *r[13] = {NULL};
    Py_ssize_t key_at, tasks, n, cap;
    int bare;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOOOOOOOOnnnnp:EmitKeyed", names,
                                     &r[0], &r[1], &r[2], &r[3], &r[4], &r[5], &r[6], &r[7],
                                     &r[8], &r[9], &key_at, &tasks, &n, &cap, &bare))
        return NULL;
    if (key_at < 0 || key_at >= n || tasks < 1) {
        PyErr_SetString(PyExc_ValueError, "EmitKeyed: key_at must be a field, tasks >= 1");
        return NULL;
    }
    ChildObject *self = child_alloc(type, keyed_vectorcall, r, n, cap, bare);
    if (self != NULL) {
        self->key_at = key_at;
        self->tasks = tasks;
    }
    return (PyObject *)self;
}

HOT_TYPE(EmitChildType, "EmitChild", ChildObject, child_new,
         "A tracking BasicBolt's emit of a child: the closure "
         "wiring._basic_default_first makes, in C.");

HOT_TYPE(EmitKeyedType, "EmitKeyed", ChildObject, keyed_new,
         "A tracking BasicBolt's emit of a child keyed on a str: the closure "
         "wiring._str_key_first makes, in C.");
