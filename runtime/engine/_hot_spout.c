/* A spout's emits in C (the module: _hot.c). */

#include "_hot.h"

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
