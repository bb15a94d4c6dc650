/* What the files of runtime.engine._hot share (the module's overview: _hot.c's head).
 *
 * Every symbol here that is not static is hidden outside the extension (setup.py builds
 * it with -fvisibility=hidden); only PyInit__hot is exported. */

#ifndef TUPLEFLOW_HOT_H
#define TUPLEFLOW_HOT_H

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

/* Interned names and a constant, made by PyInit__hot. */
extern PyObject *str_recorder, *str_flush_tracked, *str_stream, *str_anchors, *str_msg_id,
    *str_stamp, *int_63;

/* The call handed to the Python closure, untouched. */
static inline PyObject *
hot_spec(HotObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(self->spec, args, nargsf, kwnames);
}

HotObject *hot_alloc(PyTypeObject *type, vectorcallfunc call, PyObject **refs,
                     Py_ssize_t n);
int hot_traverse(HotObject *self, visitproc visit, void *arg);
int hot_clear(HotObject *self);
void hot_dealloc(HotObject *self);
extern PyMemberDef hot_members[];

/* The type object ``var`` of the closure type ``name``, whose objects are ``Struct``s. */
#define HOT_TYPE(var, name, Struct, new_fn, doc)                                     \
    PyTypeObject var = {                                                             \
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

extern PyTypeObject AckType, LeafRunType, StrideType;     /* _hot_bolt.c */
extern PyTypeObject EmitChildType, EmitKeyedType;         /* _hot_child.c */
extern PyTypeObject EmitRunType, EmitPickedType, EmitOneType;  /* _hot_spout.c */

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

/* -- the objects the closures capture ---------------------------------------------------- */

/* The byte offset of the writable object slot ``name`` (``__slots__``) of ``type``;
 * -1 with a TypeError when it is none. */
Py_ssize_t slot_offset(PyObject *type, const char *name);

/* The same, -1 and no error when it is none (then read by name). */
Py_ssize_t maybe_slot(PyObject *obj, const char *name);

/* ``obj.<name>``, read through its slot when it is one (a new reference). */
static inline PyObject *
get_field(PyObject *obj, Py_ssize_t off, PyObject *name)
{
    if (off >= 0 && *SLOT(obj, off) != NULL)
        return Py_NewRef(*SLOT(obj, off));
    return PyObject_GetAttr(obj, name);
}

/* The slots of runtime.model.api.Tuple, which its subclass OneFieldTuple shares, at
 * these indexes of ``off``: */
enum { VALUES, IDS, ACK_VAL, TUPLE_SLOTS };

/* Their offsets into ``off``: 0, or -1 with an error. */
int tuple_slots(PyObject *tuple_type, PyObject *one_type, Py_ssize_t *off);

/* 0 when each of the ``n`` objects is exactly a list, or -1 with a TypeError. */
int exact_lists(PyObject **lists, Py_ssize_t n);

/* -- the emits' arguments ------------------------------------------------------------ */

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

/* -- the module's functions, defined beside what they serve ------------------------- */

PyObject *hot_seed(PyObject *module, PyObject *arg);      /* _hot_child.c: edge ids */
PyObject *hot_draw(PyObject *module, PyObject *unused);   /* _hot_child.c */
void crc_init(void);                                      /* _hot_child.c: EmitKeyed's hash */

#endif
