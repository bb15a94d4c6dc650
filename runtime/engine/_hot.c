/* The engine's hottest closures and loop in C (runtime/engine/wiring.py and bolt_side.py
 * make them; runtime/engine/hot.py chooses C or Python):
 *
 *   Ack        a bolt's ``ack``                        (Collector.bolt_ack's ``ack``)
 *   EmitChild  a tracking BasicBolt's child            (_basic_default_first's ``emit_child``)
 *   EmitKeyed  the same, keyed on a str over tasks     (_str_key_first's ``emit_keyed``)
 *   EmitRun    a tracking spout's one-field emit       (_one_field_run's ``emit_tracked``)
 *   EmitPicked a tracking spout's emit into the run its grouping picks
 *                                                      (_into_runs's ``emit_picked``)
 *   EmitOne    a spout's untracked one-field emit      (_one_field_first's ``emit_one``)
 *   Stride     a stride of a plain bolt's data loop    (bolt_side's ``_untracked``,
 *                                                       ``_tracked``)
 *   consecutive  whether a bolt's leaves are one run   (acks.py's ``_consecutive``)
 *
 * Each Python closure is the spec and stays the fallback: the C type holds the same
 * captured objects and does exactly the same work on its fast path; any other call (a
 * keyword it does not know, another type, another stream, the wrong arity, the odd case)
 * is handed to the closure with the same arguments, untouched, so behaviour and error
 * messages are the closure's own. What the C saves is the closure's frame and bytecode:
 * ~500-1,000 instructions an ack, ~3,000-4,200 a child, ~1,300-1,600 a spout's tuple
 * (docs/internals/performance-log.md, "Issue 17, twelfth pass"), ~390-830 a tuple of the
 * bolt's loop and ~1,180 a spout's plain emit ("thirteenth pass").
 *
 * Built by setup.py as an optional extension; where it is absent, or with
 * TUPLEFLOW_PURE_PYTHON=1, the engine uses the Python closures. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* -- what every closure here shares ---------------------------------------------------- */

/* Each object starts with this head: its vectorcall, then ``nrefs`` object references
 * from ``spec`` (the Python closure) on, which one traverse, clear and dealloc serve; its
 * plain fields follow them. */
#define HOT_HEAD          \
    PyObject_HEAD         \
    vectorcallfunc vectorcall; \
    Py_ssize_t nrefs;     \
    PyObject *spec;

typedef struct {
    HOT_HEAD
} HotObject;

/* How many references a struct holds from ``spec`` to ``last``, both included. */
#define NREFS(type, last) \
    ((Py_ssize_t)((offsetof(type, last) - offsetof(type, spec)) / sizeof(PyObject *) + 1))

#define SLOT(obj, off) ((PyObject **)((char *)(obj) + (off)))

static PyObject *str_recorder, *str_flush_tracked, *str_stream, *str_anchors, *str_msg_id,
    *str_stamp, *int_63;

static PyObject *
hot_spec(HotObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(self->spec, args, nargsf, kwnames);
}

/* A new object of ``type`` holding ``refs`` (NULLs allowed), or NULL. */
static HotObject *
hot_alloc(PyTypeObject *type, vectorcallfunc call, PyObject **refs, Py_ssize_t n)
{
    HotObject *self = (HotObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = call;
    self->nrefs = n;
    for (Py_ssize_t i = 0; i < n; i++)
        (&self->spec)[i] = Py_XNewRef(refs[i]);
    return self;
}

static int
hot_traverse(HotObject *self, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < self->nrefs; i++)
        Py_VISIT((&self->spec)[i]);
    return 0;
}

static int
hot_clear(HotObject *self)
{
    for (Py_ssize_t i = 0; i < self->nrefs; i++)
        Py_CLEAR((&self->spec)[i]);
    return 0;
}

static void
hot_dealloc(HotObject *self)
{
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef hot_members[] = {
    {"spec", T_OBJECT, offsetof(HotObject, spec), READONLY,
     "the Python closure this one hands every call off its fast path"},
    {NULL}
};

#define HOT_TYPE(var, name, Struct, new_fn, doc)                                     \
    static PyTypeObject var = {                                                      \
        PyVarObject_HEAD_INIT(NULL, 0)                                               \
        .tp_name = "runtime.engine._hot." name,                                      \
        .tp_doc = PyDoc_STR(doc),                                                    \
        .tp_basicsize = sizeof(Struct),                                              \
        .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL, \
        .tp_new = new_fn,                                                            \
        .tp_traverse = (traverseproc)hot_traverse,                                   \
        .tp_clear = (inquiry)hot_clear,                                              \
        .tp_dealloc = (destructor)hot_dealloc,                                       \
        .tp_vectorcall_offset = offsetof(Struct, vectorcall),                        \
        .tp_call = PyVectorcall_Call,                                                \
        .tp_members = hot_members,                                                   \
    }

/* The byte offset of the writable object slot ``name`` (``__slots__``) of ``type``;
 * -1 with a TypeError when it is none. */
static Py_ssize_t
slot_offset(PyObject *type, const char *name)
{
    PyObject *descr = PyObject_GetAttrString(type, name);
    if (descr == NULL)
        return -1;
    Py_ssize_t off = -1;
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
            off = m->offset;
    }
    Py_DECREF(descr);
    if (off < 0)
        PyErr_Format(PyExc_TypeError, "%R.%s is not a writable slot", type, name);
    return off;
}

/* The same, -1 and no error when it is none (then read by name). */
static Py_ssize_t
maybe_slot(PyObject *obj, const char *name)
{
    Py_ssize_t off = slot_offset((PyObject *)Py_TYPE(obj), name);
    if (off < 0)
        PyErr_Clear();
    return off;
}

/* ``obj.<name>``, read through its slot when it is one (a new reference). */
static PyObject *
get_field(PyObject *obj, Py_ssize_t off, PyObject *name)
{
    if (off >= 0 && *SLOT(obj, off) != NULL)
        return Py_NewRef(*SLOT(obj, off));
    return PyObject_GetAttr(obj, name);
}

/* The slots of runtime.model.api.Tuple, which its subclass OneFieldTuple shares, at
 * these indexes of ``off``: */
enum { VALUES, IDS, ACK_VAL, TUPLE_SLOTS };

/* 0, or -1 with an error. */
static int
tuple_slots(PyObject *tuple_type, PyObject *one_type, Py_ssize_t *off)
{
    static const char *names[TUPLE_SLOTS] = {"values", "ids", "ack_val"};
    if (!PyType_Check(tuple_type) || !PyType_Check(one_type)) {
        PyErr_SetString(PyExc_TypeError, "tuple_type and one_type must be types");
        return -1;
    }
    for (int i = 0; i < TUPLE_SLOTS; i++) {
        if ((off[i] = slot_offset(tuple_type, names[i])) < 0)
            return -1;
        if (slot_offset(one_type, names[i]) != off[i]) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "one_type must share tuple_type's slots");
            return -1;
        }
    }
    return 0;
}

static int
exact_lists(PyObject **lists, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyList_CheckExact(lists[i])) {  /* a subclass's append would be skipped */
            PyErr_SetString(PyExc_TypeError, "expected exactly a list");
            return -1;
        }
    }
    return 0;
}

/* -- Ack: a bolt's ``ack`` --------------------------------------------------------- */

typedef struct {
    HOT_HEAD
    PyObject *leaves;     /* list: the roots of whole trees acked (AckOut.leaves) */
    PyObject *combined;   /* list: the roots of combined one-root acks (AckOut.combined) */
    PyObject *acked;      /* dict: root -> XOR of this task's acks of it (AckOut.acked) */
    PyObject *tuple_type, *one_type;
    PyObject *slow;       /* BoltSide.ack: several roots, untracked, acked already */
    Py_ssize_t ids_off, val_off;
} AckObject;

static PyObject *
ack_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    AckObject *self = (AckObject *)op;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL)
        return hot_spec((HotObject *)self, args, nargsf, kwnames);
    PyObject *tup = args[0];
    PyObject *tp = (PyObject *)Py_TYPE(tup);
    if (tp != self->tuple_type && tp != self->one_type)
        return hot_spec((HotObject *)self, args, nargsf, kwnames);
    PyObject **ids_slot = SLOT(tup, self->ids_off);
    PyObject *ids = *ids_slot, *val = *SLOT(tup, self->val_off);
    if (ids == NULL || val == NULL)  /* an unset slot: the closure raises its error */
        return hot_spec((HotObject *)self, args, nargsf, kwnames);
    if (ids == val) {  /* a spout tuple's only copy, untouched: a leaf */
        *ids_slot = Py_NewRef(Py_None);  /* the slot's reference to ids is ours now */
        int bad = PyList_Append(self->leaves, ids);
        Py_DECREF(ids);
        return bad ? NULL : Py_NewRef(Py_None);
    }
    if (!PyLong_CheckExact(ids))  /* several roots, untracked, acked already */
        return PyObject_Vectorcall(self->slow, args, nargsf, NULL);
    /* one root: its ack value is ack_val, XORed into the task's other acks of it */
    *ids_slot = Py_NewRef(Py_None);
    Py_INCREF(val);  /* (held: the dict's compare of a key could run code) */
    PyObject *result = NULL, *sum = NULL;
    if (PyList_Append(self->combined, ids) < 0)
        goto done;
    PyObject *prev = PyDict_GetItemWithError(self->acked, ids);  /* borrowed */
    if (prev == NULL && PyErr_Occurred())
        goto done;
    if (prev == NULL) {
        PyObject *zero = PyLong_FromLong(0);
        sum = PyNumber_Xor(zero, val);
        Py_DECREF(zero);
    }
    else {
        sum = PyNumber_Xor(prev, val);
    }
    if (sum == NULL || PyDict_SetItem(self->acked, ids, sum) < 0)
        goto done;
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(sum);
    Py_DECREF(val);
    Py_DECREF(ids);
    return result;
}

static PyObject *
ack_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"spec", "leaves", "combined", "acked", "tuple_type",
                            "one_type", "slow", NULL};
    PyObject *r[7];
    Py_ssize_t off[TUPLE_SLOTS];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!OOO:Ack", names, &r[0], &r[1], &r[2],
                                     &PyDict_Type, &r[3], &r[4], &r[5], &r[6])
            || exact_lists(r + 1, 2) < 0 || tuple_slots(r[4], r[5], off) < 0)
        return NULL;
    if (!PyDict_CheckExact(r[3])) {  /* a subclass's get or __setitem__ would be skipped */
        PyErr_SetString(PyExc_TypeError, "acked must be exactly a dict");
        return NULL;
    }
    AckObject *self = (AckObject *)hot_alloc(type, ack_vectorcall, r,
                                             NREFS(AckObject, slow));
    if (self != NULL) {
        self->ids_off = off[IDS];
        self->val_off = off[ACK_VAL];
    }
    return (PyObject *)self;
}

HOT_TYPE(AckType, "Ack", AckObject, ack_new,
         "Ack(spec, leaves, combined, acked, tuple_type, one_type, slow): a bolt's ack, the "
         "closure Collector.bolt_ack makes, in C.");

/* -- the emits' arguments and edge ids ------------------------------------------------ */

/* ``(values, stream=DEFAULT_STREAM, third=None)`` by position or by name (``third``: a
 * bolt's ``anchors``, a spout's ``msg_id``) into ``out``. 0 when parsed; -1 (no error)
 * for anything else, an unknown or repeated name, too many: the closure reports it. */
static inline Py_ALWAYS_INLINE int
parse_args(PyObject *const *args, size_t nargsf, PyObject *kwnames, PyObject *third_name,
           PyObject *deflt, PyObject **out)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs < 1 || nargs > 3)
        return -1;
    out[0] = args[0];
    out[1] = nargs > 1 ? args[1] : NULL;
    out[2] = nargs > 2 ? args[2] : NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, i);  /* (interned when written in code) */
        int at = name == str_stream ? 1 : name == third_name ? 2 : -1;
        if (at < 0 || out[at] != NULL)
            return -1;
        out[at] = args[nargs + i];
    }
    if (out[1] == NULL)
        out[1] = deflt;
    if (out[2] == NULL)
        out[2] = Py_None;
    return 0;
}

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

static PyObject *
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

static PyObject *
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

static void
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

static PyTypeObject EmitRunType;

/* -- EmitRun and EmitPicked: a tracking spout's tracked emit into a run --------------- */

typedef struct {
    HOT_HEAD
    PyObject *entries, *ids, *stamps;  /* EmitRun: the one run's entries, msg_ids and
                                        * emit times; EmitPicked: a list of each per task */
    PyObject *runs;      /* the Runs: its ``stamp`` is read at each emit */
    PyObject *out;       /* the StreamOut */
    PyObject *deflt;
    PyObject *pick;      /* EmitPicked: the grouping's pick, values -> the task's index */
    PyObject *emit;      /* EmitPicked: the closure's emit_default, when the pick raised */
    Py_ssize_t recorder_off, stamp_off, n, size;
    int bare;
} RunObject;

/* The tracked values when the call may take the fast way: by position or name, the
 * default stream, a msg_id, a list of the stream's arity, no recorder on. NULL with no
 * error: the closure's way. */
static inline Py_ALWAYS_INLINE PyObject *
run_values(RunObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames,
           PyObject **a)
{
    if (parse_args(args, nargsf, kwnames, str_msg_id, self->deflt, a) < 0
            || a[1] != self->deflt || a[2] == Py_None || !PyList_CheckExact(a[0])
            || PyList_GET_SIZE(a[0]) != self->n)
        return NULL;  /* (a wrong arity: the closure, which picks first, as it does) */
    PyObject *rec = get_field(self->out, self->recorder_off, str_recorder);
    if (rec == NULL)
        return NULL;
    Py_DECREF(rec);
    return rec == Py_None ? a[0] : NULL;
}

/* ``run.append(item)`` of ``parts[i]`` (``i`` NULL: of ``parts`` itself, a list). */
static inline Py_ALWAYS_INLINE int
append_to(PyObject *parts, PyObject *i, PyObject *item)
{
    if (i == NULL)
        return PyList_Append(parts, item);
    PyObject *part = PyObject_GetItem(parts, i);
    if (part == NULL)
        return -1;
    int bad;
    if (PyList_CheckExact(part)) {
        bad = PyList_Append(part, item);
    }
    else {
        PyObject *r = PyObject_CallMethod(part, "append", "O", item);
        bad = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_DECREF(part);
    return bad;
}

/* The closures' three appends, and a full run sent: msg_id, emit time, entry. */
static inline Py_ALWAYS_INLINE PyObject *
run_tail(RunObject *self, PyObject *i, PyObject *msg_id, PyObject *entry)
{
    if (append_to(self->ids, i, msg_id) < 0)
        return NULL;
    PyObject *stamp = get_field(self->runs, self->stamp_off, str_stamp);
    if (stamp == NULL)
        return NULL;
    int bad = append_to(self->stamps, i, stamp);
    Py_DECREF(stamp);
    if (bad || append_to(self->entries, i, entry) < 0)
        return NULL;
    Py_ssize_t size = PyList_GET_SIZE(self->entries);  /* (EmitRun: the run itself) */
    if (i != NULL) {
        PyObject *run = PyObject_GetItem(self->entries, i);
        size = run == NULL ? -1 : PyObject_Size(run);
        Py_XDECREF(run);
        if (size < 0)
            return NULL;
    }
    if (size >= self->size)
        return PyObject_CallMethodNoArgs(self->out, str_flush_tracked);
    return Py_NewRef(Py_None);
}

static PyObject *
run_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RunObject *self = (RunObject *)op;
    PyObject *a[3], *values = run_values(self, args, nargsf, kwnames, a);
    if (values == NULL)
        return PyErr_Occurred() ? NULL : hot_spec((HotObject *)self, args, nargsf, kwnames);
    return run_tail(self, NULL, a[2], PyList_GET_ITEM(values, 0));
}

static PyObject *
picked_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RunObject *self = (RunObject *)op;
    PyObject *a[3], *values = run_values(self, args, nargsf, kwnames, a), *result = NULL;
    if (values == NULL)
        return PyErr_Occurred() ? NULL : hot_spec((HotObject *)self, args, nargsf, kwnames);
    Py_INCREF(values);  /* the pick may run any code: hold what it could take away */
    PyObject *msg_id = Py_NewRef(a[2]);
    PyObject *entry = Py_NewRef(self->bare ? PyList_GET_ITEM(values, 0) : values);
    PyObject *i = PyObject_CallOneArg(self->pick, values);
    if (i != NULL)
        result = run_tail(self, i, msg_id, entry);
    else if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();  /* the checked way reports it (a bad key), as the closure does */
        result = PyObject_Vectorcall(self->emit, a, 3, NULL);
    }
    Py_XDECREF(i);
    Py_DECREF(entry);
    Py_DECREF(msg_id);
    Py_DECREF(values);
    return result;
}

static PyObject *
run_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"spec", "entries", "ids", "stamps", "runs", "out", "default",
                            "pick", "emit", "n", "size", "bare", NULL};
    PyObject *r[9] = {NULL};
    Py_ssize_t n = 1, size = 0;
    int bare = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOOOOOOOnnp:EmitRun", names, &r[0],
                                     &r[1], &r[2], &r[3], &r[4], &r[5], &r[6], &r[7], &r[8],
                                     &n, &size, &bare))
        return NULL;
    int picked = type != &EmitRunType;
    for (int k = 0; k < 7; k++)
        if (r[k] == NULL)
            return PyErr_Format(PyExc_TypeError, "%s: missing %s", type->tp_name, names[k]);
    if (exact_lists(r + 1, 3) < 0)
        return NULL;
    if (size < 1 || (bare && n != 1) || (picked && (r[7] == NULL || r[8] == NULL))
            || (!picked && (r[7] != NULL || !bare))) {
        PyErr_SetString(PyExc_ValueError, "a size >= 1; EmitRun: one bare field; "
                        "EmitPicked: a pick and an emit");
        return NULL;
    }
    RunObject *self = (RunObject *)hot_alloc(
        type, picked ? picked_vectorcall : run_vectorcall, r, NREFS(RunObject, emit));
    if (self != NULL) {
        self->recorder_off = maybe_slot(self->out, "recorder");
        self->stamp_off = maybe_slot(self->runs, "stamp");
        self->n = n;
        self->size = size;
        self->bare = bare;
    }
    return (PyObject *)self;
}

HOT_TYPE(EmitRunType, "EmitRun", RunObject, run_new,
         "A tracking spout's tracked emit of one field into its one target's run: the "
         "closure wiring._one_field_run makes, in C.");

HOT_TYPE(EmitPickedType, "EmitPicked", RunObject, run_new,
         "A tracking spout's tracked emit into the run of the target its grouping picks: "
         "the closure wiring._into_runs makes, in C.");

/* -- EmitOne: a spout's plain emit of one field ------------------------------------- */

typedef struct {
    HOT_HEAD
    PyObject *items;     /* list: the default stream's batch, of bare values */
    PyObject *flush;     /* its StreamOut's flush */
    PyObject *deflt;
    Py_ssize_t size;
} OneObject;

static PyObject *
one_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    OneObject *self = (OneObject *)op;
    PyObject *a[3];
    if (parse_args(args, nargsf, kwnames, str_msg_id, self->deflt, a) < 0
            || a[1] != self->deflt || a[2] != Py_None || !PyList_CheckExact(a[0])
            || PyList_GET_SIZE(a[0]) != 1)
        return hot_spec((HotObject *)self, args, nargsf, kwnames);
    if (PyList_Append(self->items, PyList_GET_ITEM(a[0], 0)) < 0)
        return NULL;
    if (PyList_GET_SIZE(self->items) >= self->size) {
        PyObject *r = PyObject_CallNoArgs(self->flush);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);  /* (the closure returns None, whatever flush returned) */
    }
    return Py_NewRef(Py_None);
}

static PyObject *
one_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"spec", "items", "flush", "default", "size", NULL};
    PyObject *r[4];
    Py_ssize_t size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOOn:EmitOne", names, &r[0], &r[1],
                                     &r[2], &r[3], &size)
            || exact_lists(r + 1, 1) < 0)
        return NULL;
    if (size < 1) {
        PyErr_SetString(PyExc_ValueError, "EmitOne: a size >= 1");
        return NULL;
    }
    OneObject *self = (OneObject *)hot_alloc(type, one_vectorcall, r, NREFS(OneObject, deflt));
    if (self != NULL)
        self->size = size;
    return (PyObject *)self;
}

HOT_TYPE(EmitOneType, "EmitOne", OneObject, one_new,
         "EmitOne(spec, items, flush, default, size): a spout's untracked emit of one field "
         "on the default stream, the closure wiring._one_field_first makes, in C.");

/* -- Stride: the bolt's data loop ---------------------------------------------------- */

/* What a stride's rows are: bare entries; ``entry, ids, ack_val`` tuples (zip's); or a
 * RUN frame's entries, whose ids and ack_val are one int counted from a root given. */
enum { UNTRACKED, TRACKED, RUN };

typedef struct {
    HOT_HEAD
    PyObject *tuple_type, *one_type;
    Py_ssize_t off[TUPLE_SLOTS];
    int rows;            /* UNTRACKED, TRACKED or RUN */
} StrideObject;

/* Sets the slot at ``off`` of ``obj`` to ``value``, whose reference it takes. */
static inline Py_ALWAYS_INLINE void
set_slot(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    PyObject **slot = SLOT(obj, off), *old = *slot;
    *slot = value;
    Py_XDECREF(old);
}

/* ``make(entry, source)``, a new reference or NULL. */
static inline Py_ALWAYS_INLINE PyObject *
make_tuple(PyObject *make, PyObject *entry, PyObject *source)
{
    PyObject *a[2] = {entry, source};
    return PyObject_Vectorcall(make, a, 2, NULL);
}

/* The next row's entry, and for a tracked row its ids and ack_val (new references);
 * 1, 0 when the rows ran out, -1 with an error. ``root``: a RUN's next root. */
static inline Py_ALWAYS_INLINE int
next_row(int kind, PyObject *rows, uint64_t root, PyObject **entry, PyObject **ids,
         PyObject **val)
{
    PyObject *row = PyIter_Next(rows);
    if (row == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (kind == UNTRACKED) {
        *entry = row;
        return 1;
    }
    if (kind == RUN) {  /* a spout tuple's only copy: its root is its own edge id */
        if ((*ids = PyLong_FromUnsignedLongLong(root)) == NULL) {
            Py_DECREF(row);
            return -1;
        }
        *entry = row;
        *val = Py_NewRef(*ids);  /* the same int: BoltSide's ack tells it by ``is`` */
        return 1;
    }
    if (!PyTuple_CheckExact(row) || PyTuple_GET_SIZE(row) != 3) {
        Py_DECREF(row);
        PyErr_SetString(PyExc_ValueError, "a tracked row is entry, ids, ack_val");
        return -1;
    }
    *entry = Py_NewRef(PyTuple_GET_ITEM(row, 0));
    *ids = Py_NewRef(PyTuple_GET_ITEM(row, 1));
    *val = Py_NewRef(PyTuple_GET_ITEM(row, 2));
    Py_DECREF(row);  /* (zip reuses it when this was the last reference) */
    return 1;
}

/* ``tup`` (a reference this takes) made ready for ``entry`` (taken too): its values set
 * when nobody kept it (its reference count is ``*alone``), else a new Tuple; NULL with
 * an error. */
static inline Py_ALWAYS_INLINE PyObject *
ready_tuple(StrideObject *self, PyObject *tup, Py_ssize_t *alone, PyObject *entry,
            PyObject *make, PyObject *source)
{
    if (Py_REFCNT(tup) != *alone) {  /* kept (to ack later, in a window): a new one */
        PyObject *fresh = make_tuple(make, entry, source);
        Py_DECREF(entry);
        Py_DECREF(tup);
        if (fresh != NULL)
            *alone = Py_REFCNT(fresh);
        return fresh;
    }
    PyObject *values = entry;
    if (make == self->one_type) {  /* a one-field stream's bare value, in a new list */
        if ((values = PyList_New(1)) == NULL) {
            Py_DECREF(entry);
            Py_DECREF(tup);
            return NULL;
        }
        PyList_SET_ITEM(values, 0, entry);
    }
    set_slot(tup, self->off[VALUES], values);
    return tup;
}

/* ``stride(rows, k, process, make, source, waiting[, root])``, as bolt_side's
 * _untracked, _tracked and _run: up to k rows, each a Tuple reused while nothing but
 * this loop holds it, ``process`` called on each, ``waiting``'s truth tested after
 * each call; True when the k were done (or the rows ran out), False when output waits;
 * the user's exception as it came. Every row is drawn from ``rows`` before it is
 * processed, and none after, so a stop or a raise leaves them where the Python leaves
 * them (BoltSide.execute_data reads how far it got from them). */
static PyObject *
stride_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    StrideObject *self = (StrideObject *)op;
    int kind = self->rows;
    if (PyVectorcall_NARGS(nargsf) != (kind == RUN ? 7 : 6) || kwnames != NULL
            || !PyLong_CheckExact(args[1]) || !PyIter_Check(args[0])
            || (args[3] != self->tuple_type && args[3] != self->one_type)
            || (kind == RUN && !PyLong_CheckExact(args[6])))
        return hot_spec((HotObject *)self, args, nargsf, kwnames);
    Py_ssize_t k = PyLong_AsSsize_t(args[1]);
    uint64_t root = kind == RUN ? PyLong_AsUnsignedLongLong(args[6]) : 0;
    if (PyErr_Occurred() || k < 0 || root + (uint64_t)(k > 0 ? k - 1 : 0) < root) {
        /* a k or a root out of range, or roots past 2**64 - 1: the spec's way (its
         * islice refuses a negative k; its count goes on past 2**64) */
        PyErr_Clear();
        return hot_spec((HotObject *)self, args, nargsf, kwnames);
    }
    PyObject *rows = args[0], *process = args[2], *make = args[3], *source = args[4],
        *waiting = args[5];
    PyObject *tup = make_tuple(make, Py_None, source);
    if (tup == NULL)
        return NULL;
    Py_ssize_t alone = Py_REFCNT(tup);
    PyObject *call[2] = {NULL, NULL};  /* (a slot before the argument: the bound method's) */
    for (Py_ssize_t i = 0; i < k; i++) {
        PyObject *entry, *ids = NULL, *val = NULL;
        int got = next_row(kind, rows, root + (uint64_t)i, &entry, &ids, &val);
        if (got <= 0) {
            if (got == 0)
                break;
            goto fail;
        }
        if ((tup = ready_tuple(self, tup, &alone, entry, make, source)) == NULL) {
            Py_XDECREF(ids);
            Py_XDECREF(val);
            return NULL;
        }
        if (kind != UNTRACKED) {
            set_slot(tup, self->off[IDS], ids);
            set_slot(tup, self->off[ACK_VAL], val);
        }
        call[1] = tup;
        PyObject *r = PyObject_Vectorcall(process, call + 1,
                                          1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            goto fail;
        Py_DECREF(r);
        int stop = PyList_CheckExact(waiting) ? PyList_GET_SIZE(waiting) > 0
                                              : PyObject_IsTrue(waiting);
        if (stop < 0)
            goto fail;
        if (stop) {
            Py_DECREF(tup);
            return Py_NewRef(Py_False);
        }
    }
    Py_DECREF(tup);
    return Py_NewRef(Py_True);
fail:
    Py_DECREF(tup);
    return NULL;
}

static PyObject *
stride_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"spec", "tuple_type", "one_type", "rows", NULL};
    static const char *kinds[] = {"untracked", "tracked", "run"};
    PyObject *r[3];
    const char *rows;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$OOOs:Stride", names, &r[0], &r[1], &r[2],
                                     &rows))
        return NULL;
    int kind = 0;
    while (kind < 3 && strcmp(rows, kinds[kind]) != 0)
        kind++;
    if (kind == 3) {
        PyErr_SetString(PyExc_ValueError, "Stride: rows is untracked, tracked or run");
        return NULL;
    }
    Py_ssize_t off[TUPLE_SLOTS];
    if (tuple_slots(r[1], r[2], off) < 0)
        return NULL;
    StrideObject *self = (StrideObject *)hot_alloc(type, stride_vectorcall, r,
                                                   NREFS(StrideObject, one_type));
    if (self != NULL) {
        memcpy(self->off, off, sizeof(off));
        self->rows = kind;
    }
    return (PyObject *)self;
}

HOT_TYPE(StrideType, "Stride", StrideObject, stride_new,
         "Stride(spec, tuple_type, one_type, rows): a stride of the bolt's data loop, "
         "bolt_side._untracked, _tracked or _run (rows 'untracked', 'tracked', 'run'), "
         "in C.");

/* -- the module ----------------------------------------------------------------------- */

/* An exact int as a uint64_t, as PyLong_AsUnsignedLongLong: through PyLong_AsUnsignedLong
 * where that is 64 bits, a loop over the int's three digits, where CPython 3.11's
 * PyLong_AsUnsignedLongLong goes through a byte array (~230 instructions a root against
 * ~30 in the word count's count). */
static inline uint64_t
as_u64(PyObject *v)
{
#if ULONG_MAX == UINT64_MAX
    return PyLong_AsUnsignedLong(v);
#else
    return PyLong_AsUnsignedLongLong(v);
#endif
}

/* -- consecutive: a bolt's leaves, one run acked in order? ---------------------------- */

/* ``consecutive(leaves)``, acks.py's ``_consecutive`` in C: whether ``leaves`` (a list)
 * holds exact ints, each one more than the one before (a spout's run acked in order, which
 * goes as one ``first, count`` stretch). The Python's ``all(map(lt, ...))`` cost the word
 * count's count ~320 instructions a word at least once, this ~10
 * (docs/internals/performance-log.md, "Issue 17, thirteenth pass"). Both are asked of
 * roots only, ints in [0, 2**64), where they agree; anything else makes this False (and
 * AckOut then sends the leaves root by root, as it does any leaves out of order). */
static PyObject *
hot_consecutive(PyObject *module, PyObject *leaves)
{
    if (!PyList_CheckExact(leaves)) {
        PyErr_SetString(PyExc_TypeError, "consecutive: a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(leaves);
    uint64_t prev = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(leaves, i);
        if (!PyLong_CheckExact(item))
            Py_RETURN_FALSE;
        uint64_t v = as_u64(item);
        if (v == (uint64_t)-1 && PyErr_Occurred()) {  /* negative, or past 2**64 - 1 */
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        if (i > 0 && v != prev + 1)
            Py_RETURN_FALSE;
        prev = v;
    }
    return PyBool_FromLong(n > 0);
}

static PyMethodDef hot_methods[] = {
    {"seed", hot_seed, METH_O, "seed(32 bytes): the emits' own edge-id generator"},
    {"draw", hot_draw, METH_NOARGS, "draw(): an edge id from that generator"},
    {"consecutive", hot_consecutive, METH_O,
     "consecutive(leaves): whether a list of ints counts up by one from its first"},
    {NULL}
};

static struct PyModuleDef hot_module = {
    PyModuleDef_HEAD_INIT,
    .m_methods = hot_methods,
    .m_name = "runtime.engine._hot",
    .m_doc = PyDoc_STR("The acking path's hottest closures in C (runtime/engine/_hot.c)."),
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__hot(void)
{
    crc_init();
    if (PyType_Ready(&AckType) < 0 || PyType_Ready(&EmitChildType) < 0
            || PyType_Ready(&EmitKeyedType) < 0 || PyType_Ready(&EmitRunType) < 0
            || PyType_Ready(&EmitPickedType) < 0 || PyType_Ready(&StrideType) < 0
            || PyType_Ready(&EmitOneType) < 0)
        return NULL;
    if ((str_recorder = PyUnicode_InternFromString("recorder")) == NULL
            || (str_flush_tracked = PyUnicode_InternFromString("flush_tracked")) == NULL
            || (str_stream = PyUnicode_InternFromString("stream")) == NULL
            || (str_anchors = PyUnicode_InternFromString("anchors")) == NULL
            || (str_msg_id = PyUnicode_InternFromString("msg_id")) == NULL
            || (str_stamp = PyUnicode_InternFromString("stamp")) == NULL
            || (int_63 = PyLong_FromLong(63)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&hot_module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Ack", (PyObject *)&AckType) < 0
            || PyModule_AddObjectRef(m, "EmitChild", (PyObject *)&EmitChildType) < 0
            || PyModule_AddObjectRef(m, "EmitKeyed", (PyObject *)&EmitKeyedType) < 0
            || PyModule_AddObjectRef(m, "EmitRun", (PyObject *)&EmitRunType) < 0
            || PyModule_AddObjectRef(m, "EmitPicked", (PyObject *)&EmitPickedType) < 0
            || PyModule_AddObjectRef(m, "Stride", (PyObject *)&StrideType) < 0
            || PyModule_AddObjectRef(m, "EmitOne", (PyObject *)&EmitOneType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
