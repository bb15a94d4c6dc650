/* A bolt's ack and the strides of its data loop in C (the module: _hot.c). */

#include "_hot.h"

/* -- LeafRun: the leaves a bolt acked in order, as a stretch ---------------------- */

/* AckOut.stretch: while AckOut.leaves is empty, the leaves the C Ack takes in order are
 * kept here as the first root (its int) and a count, not an int each on the list. A
 * RUN frame's roots, acked as they came (the word count's count), then cost no append
 * and no int held until the flush (so the stride may make the next root in the last
 * one's int), and the flush sends the stretch as it is, ``first, count``
 * (AckOut._send_stretch). A leaf that does not carry the stretch on goes on the list,
 * and so does every leaf after it until the flush: the stretch's roots were all acked
 * before the list's, and the flush puts them first, so the leaves go in the order they
 * were acked, as the Python ack's list has them (docs/internals/performance-log.md,
 * "Issue 17, fifteenth pass"). */
typedef struct {
    PyObject_HEAD
    PyObject *first;      /* the stretch's first root (NULL: no stretch) */
    uint64_t base;        /* its value */
    Py_ssize_t count;     /* roots in the stretch: base, base + 1, ... */
} LeafRunObject;

/* A leaf ``root`` acked while AckOut.leaves is empty: 1 when the stretch took it (started
 * with it, or carried on by it), 0 when it goes on the list. Only an exact int in
 * [0, 2**64 - 1) is taken. */
static inline Py_ALWAYS_INLINE int
leafrun_take(LeafRunObject *run, PyObject *root)
{
    if (!PyLong_CheckExact(root))
        return 0;
    uint64_t r = as_u64(root);
    if (r == (uint64_t)-1) {  /* negative or too large (an error), or 2**64 - 1 */
        PyErr_Clear();
        return 0;
    }
    if (run->count == 0) {
        run->first = Py_NewRef(root);
        run->base = r;
        run->count = 1;
        return 1;
    }
    if (r != run->base + (uint64_t)run->count)
        return 0;
    run->count++;
    return 1;
}

static PyObject *
leafrun_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":LeafRun", names))
        return NULL;
    return type->tp_alloc(type, 0);
}

static void
leafrun_dealloc(LeafRunObject *run)
{
    Py_CLEAR(run->first);
    Py_TYPE(run)->tp_free((PyObject *)run);
}

static Py_ssize_t
leafrun_len(LeafRunObject *run)
{
    return run->count;
}

/* ``take()``: the stretch as ``(first, count)``, now empty; None when there is none. */
static PyObject *
leafrun_take_all(LeafRunObject *run, PyObject *unused)
{
    if (run->count == 0)
        Py_RETURN_NONE;
    PyObject *result = Py_BuildValue("(On)", run->first, run->count);
    if (result != NULL) {
        run->count = 0;
        Py_CLEAR(run->first);
    }
    return result;
}

static PyMethodDef leafrun_methods[] = {
    {"take", (PyCFunction)leafrun_take_all, METH_NOARGS,
     "take(): the stretch as (first root, count), emptied; None when empty"},
    {NULL}
};

static PySequenceMethods leafrun_as_sequence = {
    .sq_length = (lenfunc)leafrun_len,
};

PyTypeObject LeafRunType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runtime.engine._hot.LeafRun",
    .tp_doc = PyDoc_STR("LeafRun(): the leaves a bolt's C Ack took in order, kept as their "
                        "first root and count (AckOut.stretch); len() is the count."),
    .tp_basicsize = sizeof(LeafRunObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = leafrun_new,
    .tp_dealloc = (destructor)leafrun_dealloc,
    .tp_as_sequence = &leafrun_as_sequence,
    .tp_methods = leafrun_methods,
};

/* -- Ack: a bolt's ``ack`` --------------------------------------------------------- */

typedef struct {
    HOT_HEAD
    PyObject *leaves;     /* list: the roots of whole trees acked (AckOut.leaves) */
    PyObject *combined;   /* list: the roots of combined one-root acks (AckOut.combined) */
    PyObject *acked;      /* dict: root -> XOR of this task's acks of it (AckOut.acked) */
    PyObject *tuple_type, *one_type;
    PyObject *slow;       /* BoltSide.ack: several roots, untracked, acked already */
    PyObject *stretch;    /* a LeafRun (AckOut.stretch), or None: every leaf on ``leaves`` */
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
        int bad = (self->stretch == Py_None || PyList_GET_SIZE(self->leaves) > 0
                   || !leafrun_take((LeafRunObject *)self->stretch, ids))
                  && PyList_Append(self->leaves, ids) < 0;
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
                            "one_type", "slow", "stretch", NULL};
    PyObject *r[8] = {NULL};
    Py_ssize_t off[TUPLE_SLOTS];
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO!OOO|O:Ack", names, &r[0], &r[1],
                                     &r[2], &PyDict_Type, &r[3], &r[4], &r[5], &r[6], &r[7])
            || exact_lists(r + 1, 2) < 0 || tuple_slots(r[4], r[5], off) < 0)
        return NULL;
    if (r[7] == NULL)
        r[7] = Py_None;
    if (r[7] != Py_None && !Py_IS_TYPE(r[7], &LeafRunType)) {
        PyErr_SetString(PyExc_TypeError, "stretch must be a LeafRun or None");
        return NULL;
    }
    if (!PyDict_CheckExact(r[3])) {  /* a subclass's get or __setitem__ would be skipped */
        PyErr_SetString(PyExc_TypeError, "acked must be exactly a dict");
        return NULL;
    }
    AckObject *self = (AckObject *)hot_alloc(type, ack_vectorcall, r,
                                             NREFS(AckObject, stretch));
    if (self != NULL) {
        self->ids_off = off[IDS];
        self->val_off = off[ACK_VAL];
    }
    return (PyObject *)self;
}

HOT_TYPE(AckType, "Ack", AckObject, ack_new,
         "Ack(spec, leaves, combined, acked, tuple_type, one_type, slow, stretch=None): a "
         "bolt's ack, the closure Collector.bolt_ack makes, in C (its leaves taken in order "
         "kept in the LeafRun ``stretch`` while ``leaves`` is empty).");

/* -- Stride: the bolt's data loop ---------------------------------------------------- */

/* What a stride's rows are: bare entries; ``entry, ids, ack_val`` tuples (zip's); or a
 * RUN frame's entries, whose ids and ack_val are one int counted from a root given. */
enum { UNTRACKED, TRACKED, RUN };

typedef struct {
    HOT_HEAD
    PyObject *tuple_type, *one_type;
    /* a BasicBolt's (all NULL for a plain bolt's): the list whose item 0 is the input
     * being processed, BoltSide's ack_basic and fail, and FailedException */
    PyObject *current, *ack, *fail, *failed;
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

/* Whether ``v``, an exact int nobody else holds, was made ``value`` in place: when it has
 * as many digits (a RUN's roots all have bit 63 set: three). Its reader cannot tell it
 * from a new int, as nobody can read it; CPython 3.11's layout only (elsewhere, never). */
static inline Py_ALWAYS_INLINE int
root_in_place(PyObject *v, uint64_t value)
{
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    digit d[(64 + PyLong_SHIFT - 1) / PyLong_SHIFT];
    Py_ssize_t n = 0;
    for (uint64_t x = value; x; x >>= PyLong_SHIFT)
        d[n++] = (digit)(x & PyLong_MASK);
    if (n == 0 || n != Py_SIZE(v))
        return 0;
    memcpy(((PyLongObject *)v)->ob_digit, d, (size_t)n * sizeof(digit));
    return 1;
#else
    return 0;
#endif
}

/* The next row's entry, and for a tracked row its ids and ack_val (new references);
 * 1, 0 when the rows ran out, -1 with an error. ``root``: a RUN's next root; ``spare``:
 * the last row's root int when nobody but the reused Tuple holds it (else NULL), which
 * becomes this one's in place instead of an int made and the old one freed. */
static inline Py_ALWAYS_INLINE int
next_row(int kind, PyObject *rows, uint64_t root, PyObject *spare, PyObject **entry,
         PyObject **ids, PyObject **val)
{
    PyObject *row = PyIter_Next(rows);
    if (row == NULL)
        return PyErr_Occurred() ? -1 : 0;
    if (kind == UNTRACKED) {
        *entry = row;
        return 1;
    }
    if (kind == RUN) {  /* a spout tuple's only copy: its root is its own edge id */
        if (spare != NULL && root_in_place(spare, root))
            *ids = Py_NewRef(spare);
        else if ((*ids = PyLong_FromUnsignedLongLong(root)) == NULL) {
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

/* A BasicBolt's ``process(tup)``, as bolt_side._basic's ``one``: ``tup`` is current[0]
 * while it runs and while it is acked (``ack``, after a return) or failed (``fail``,
 * after a FailedException, which is then the exception being handled, as in an
 * ``except`` clause), and None after, also after a raise; the result or NULL. */
static PyObject *
call_basic(StrideObject *self, PyObject *process, PyObject **call)
{
    PyObject *tup = call[1], *current = self->current;
    if (PyList_SetItem(current, 0, Py_NewRef(tup)) < 0)
        return NULL;
    PyObject *r = PyObject_Vectorcall(process, call + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                      NULL);
    if (r != NULL) {
        Py_DECREF(r);
        r = PyObject_Vectorcall(self->ack, call + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                NULL);
    }
    else if (PyErr_ExceptionMatches(self->failed)) {
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        PyErr_NormalizeException(&type, &value, &trace);
        if (trace != NULL)
            PyException_SetTraceback(value, trace);
        PyObject *handled = PyErr_GetHandledException();
        PyErr_SetHandledException(value);
        r = PyObject_Vectorcall(self->fail, call + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                NULL);
        PyErr_SetHandledException(handled);
        Py_XDECREF(handled);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(trace);
    }
    /* current[0] = None, also after a raise (its old item, tup, the caller holds) */
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    if (PyList_SetItem(current, 0, Py_NewRef(Py_None)) < 0) {
        Py_XDECREF(r);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(trace);
        return NULL;
    }
    PyErr_Restore(type, value, trace);
    return r;
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
            || (kind == RUN && !PyLong_CheckExact(args[6]))
            || (self->current != NULL && !PyList_CheckExact(self->current)))
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
        PyObject *entry, *ids = NULL, *val = NULL, *spare = NULL;
        if (kind == RUN && i > 0 && Py_REFCNT(tup) == alone) {  /* the Tuple is reused */
            PyObject *last = *SLOT(tup, self->off[ACK_VAL]);  /* (its ids: the same, or
                                                               * None once acked) */
            if (last != NULL && PyLong_CheckExact(last)
                    && Py_REFCNT(last) == 1 + (*SLOT(tup, self->off[IDS]) == last))
                spare = last;
        }
        int got = next_row(kind, rows, root + (uint64_t)i, spare, &entry, &ids, &val);
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
        PyObject *r = self->current != NULL ? call_basic(self, process, call)
            : PyObject_Vectorcall(process, call + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                  NULL);
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
    static char *names[] = {"spec", "tuple_type", "one_type", "rows", "current", "ack",
                            "fail", "failed", NULL};
    static const char *kinds[] = {"untracked", "tracked", "run"};
    PyObject *r[7] = {NULL};
    const char *rows = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOsO!OOO:Stride", names, &r[0], &r[1],
                                     &r[2], &rows, &PyList_Type, &r[3], &r[4], &r[5], &r[6]))
        return NULL;
    if (r[0] == NULL || r[1] == NULL || r[2] == NULL || rows == NULL) {
        PyErr_SetString(PyExc_TypeError, "Stride: spec, tuple_type, one_type and rows");
        return NULL;
    }
    if ((r[3] == NULL) != (r[4] == NULL) || (r[3] == NULL) != (r[5] == NULL)
            || (r[3] == NULL) != (r[6] == NULL)) {
        PyErr_SetString(PyExc_TypeError,
                        "Stride: a BasicBolt's takes current, ack, fail and failed, all four");
        return NULL;
    }
    if (r[6] != NULL && !PyExceptionClass_Check(r[6])) {
        PyErr_SetString(PyExc_TypeError, "Stride: failed is an exception class");
        return NULL;
    }
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
                                                   NREFS(StrideObject, failed));
    if (self != NULL) {
        memcpy(self->off, off, sizeof(off));
        self->rows = kind;
    }
    return (PyObject *)self;
}

HOT_TYPE(StrideType, "Stride", StrideObject, stride_new,
         "Stride(spec, tuple_type, one_type, rows[, current, ack, fail, failed]): a "
         "stride of the bolt's data loop, bolt_side._untracked, _tracked or _run (rows "
         "'untracked', 'tracked', 'run'), in C; with the four last, a BasicBolt's "
         "(bolt_side._basic of one of them).");
