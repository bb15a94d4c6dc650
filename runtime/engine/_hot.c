/* The engine's hottest closures and loop in C (runtime/engine/wiring.py and bolt_side.py
 * make them; runtime/engine/hot.py chooses C or Python):
 *
 *   Ack        a bolt's ``ack``                        (Collector.bolt_ack's ``ack``)
 *   LeafRun    the leaves it acked in order, as a stretch (AckOut.stretch; new
 *                                                       2026-11-28, afternoon)
 *   Stride     a stride of a bolt's data loop          (bolt_side's ``_untracked``,
 *                                                       ``_tracked``, ``_run``; a
 *                                                       BasicBolt's: ``_basic`` of one,
 *                                                       new 2026-11-28)
 *                                                                        _hot_bolt.c
 *   EmitChild  a tracking BasicBolt's child            (_basic_default_first's ``emit_child``)
 *   EmitKeyed  the same, keyed on a str over tasks     (_str_key_first's ``emit_keyed``)
 *   seed, draw the edge ids they draw                                    _hot_child.c
 *   EmitRun    a tracking spout's one-field emit       (_one_field_run's ``emit_tracked``)
 *   EmitPicked a tracking spout's emit into the run its grouping picks
 *                                                      (_into_runs's ``emit_picked``)
 *   EmitOne    a spout's untracked one-field emit      (_one_field_first's ``emit_one``)
 *                                                                        _hot_spout.c
 *   consecutive  whether a bolt's leaves are one run   (acks.py's ``_consecutive``)
 *                                                                        here
 *
 * What they share is in _hot.h and defined here, with the module itself.
 *
 * Each Python closure is the spec and stays the fallback: the C type holds the same
 * captured objects and does exactly the same work on its fast path; any other call (a
 * keyword it does not know, another type, another stream, the wrong arity, the odd case)
 * is handed to the closure with the same arguments, untouched, so behaviour and error
 * messages are the closure's own. What the C saves is the closure's frame and bytecode:
 * ~500-1,000 instructions an ack, ~3,000-4,200 a child, ~1,300-1,600 a spout's tuple
 * (docs/internals/performance-log.md, "Issue 17, twelfth pass"), ~390-830 a tuple of the
 * bolt's loop and ~1,180 a spout's plain emit ("thirteenth pass"), ~880-1,250 a
 * BasicBolt's input ("fourteenth pass").
 *
 * Built by setup.py as an optional extension; where it is absent, or with
 * TUPLEFLOW_PURE_PYTHON=1, the engine uses the Python closures. */

#include "_hot.h"

/* -- what every closure here shares (declared, and documented, in _hot.h) ------------- */

PyObject *str_recorder, *str_flush_tracked, *str_stream, *str_anchors, *str_msg_id,
    *str_stamp, *int_63;

HotObject *
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

int
hot_traverse(HotObject *self, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < self->nrefs; i++)
        Py_VISIT((&self->spec)[i]);
    return 0;
}

int
hot_clear(HotObject *self)
{
    for (Py_ssize_t i = 0; i < self->nrefs; i++)
        Py_CLEAR((&self->spec)[i]);
    return 0;
}

void
hot_dealloc(HotObject *self)
{
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

PyMemberDef hot_members[] = {
    {"spec", T_OBJECT, offsetof(HotObject, spec), READONLY,
     "the Python closure this one hands every call off its fast path"},
    {NULL}
};

Py_ssize_t
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

Py_ssize_t
maybe_slot(PyObject *obj, const char *name)
{
    Py_ssize_t off = slot_offset((PyObject *)Py_TYPE(obj), name);
    if (off < 0)
        PyErr_Clear();
    return off;
}

int
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

int
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

/* -- the module ----------------------------------------------------------------------- */

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
    if (PyType_Ready(&AckType) < 0 || PyType_Ready(&LeafRunType) < 0
            || PyType_Ready(&EmitChildType) < 0
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
            || PyModule_AddObjectRef(m, "LeafRun", (PyObject *)&LeafRunType) < 0
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
