/* A bolt's ack and the strides of its data loop in C (the module: _hot.c). */

#include "_hot.h"

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
