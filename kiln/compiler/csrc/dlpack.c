/* kiln_dlpack: DLPack capsules for the dtypes NumPy's DLPack support lacks (bfloat16).
 *
 * The structures are DLPack's C ABI (dlpack.h, v1.0), declared here. Deleters and capsule
 * destructors run from whatever code frees the tensor (the consumer's, possibly while an
 * exception is being raised): they take the GIL and keep any pending exception as it is.
 *
 *   capsule(owner, data, shape, strides, code, bits, versioned, readonly) -> PyCapsule
 *       exports memory kept alive by `owner` (strides in elements)
 *   unpack(capsule) -> (data, shape, strides|None, code, bits, lanes, device_type,
 *                       readonly, handle)
 *       reads a CPU capsule and marks it used; `handle` calls the producer's deleter
 *       when it is collected
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data; DLDevice device; int32_t ndim; DLDataType dtype;
  int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
  DLPackVersion version; void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *); uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define FLAG_READ_ONLY 1ULL

/* What an export owns: the owner object, and room for shape and strides. */
typedef struct { PyObject *owner; int64_t dims[]; } export_ctx;

static void release_owner(export_ctx *ctx) {
  if (!Py_IsInitialized()) { free(ctx); return; }   /* the interpreter is gone: leak it */
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  Py_XDECREF(ctx->owner);
  PyErr_Restore(t, v, tb);
  PyGILState_Release(g);
  free(ctx);
}

static void delete_legacy(DLManagedTensor *m) {
  if (!m) return;
  release_owner((export_ctx *)m->manager_ctx);
  free(m);
}

static void delete_versioned(DLManagedTensorVersioned *m) {
  if (!m) return;
  release_owner((export_ctx *)m->manager_ctx);
  free(m);
}

/* Runs when the capsule dies: a capsule no consumer renamed still owns its tensor. */
static void destroy_legacy(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor"))
    delete_legacy((DLManagedTensor *)PyCapsule_GetPointer(cap, "dltensor"));
}

static void destroy_versioned(PyObject *cap) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned"))
    delete_versioned(
        (DLManagedTensorVersioned *)PyCapsule_GetPointer(cap, "dltensor_versioned"));
}

static int read_dims(PyObject *seq, int64_t *out, Py_ssize_t n) {
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PySequence_GetItem(seq, i);
    if (!o) return -1;
    out[i] = PyLong_AsLongLong(o);
    Py_DECREF(o);
    if (out[i] == -1 && PyErr_Occurred()) return -1;
  }
  return 0;
}

static PyObject *kd_capsule(PyObject *self, PyObject *args) {
  PyObject *owner, *shape, *strides;
  unsigned long long data;
  int code, bits, versioned, readonly;
  if (!PyArg_ParseTuple(args, "OKOOiipp", &owner, &data, &shape, &strides, &code, &bits,
                        &versioned, &readonly))
    return NULL;
  Py_ssize_t nd = PySequence_Size(shape);
  if (nd < 0 || PySequence_Size(strides) != nd) {
    PyErr_SetString(PyExc_ValueError, "shape and strides must have the same length");
    return NULL;
  }
  export_ctx *ctx = malloc(sizeof(export_ctx) + sizeof(int64_t) * (2 * nd + 1));
  if (!ctx) return PyErr_NoMemory();
  if (read_dims(shape, ctx->dims, nd) || read_dims(strides, ctx->dims + nd, nd)) {
    free(ctx);
    return NULL;
  }
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)(uintptr_t)data;
  t.device.device_type = 1; /* kDLCPU */
  t.ndim = (int32_t)nd;
  t.dtype.code = (uint8_t)code; t.dtype.bits = (uint8_t)bits; t.dtype.lanes = 1;
  t.shape = ctx->dims;
  t.strides = ctx->dims + nd;
  PyObject *cap;
  if (versioned) {
    DLManagedTensorVersioned *m = calloc(1, sizeof *m);
    if (!m) { free(ctx); return PyErr_NoMemory(); }
    m->version.major = 1; m->version.minor = 0;
    m->manager_ctx = ctx; m->deleter = delete_versioned;
    m->flags = readonly ? FLAG_READ_ONLY : 0;
    m->dl_tensor = t;
    ctx->owner = owner; Py_INCREF(owner);
    cap = PyCapsule_New(m, "dltensor_versioned", destroy_versioned);
    if (!cap) { Py_DECREF(owner); free(ctx); free(m); }
  } else {
    DLManagedTensor *m = calloc(1, sizeof *m);
    if (!m) { free(ctx); return PyErr_NoMemory(); }
    m->manager_ctx = ctx; m->deleter = delete_legacy;
    m->dl_tensor = t;
    ctx->owner = owner; Py_INCREF(owner);
    cap = PyCapsule_New(m, "dltensor", destroy_legacy);
    if (!cap) { Py_DECREF(owner); free(ctx); free(m); }
  }
  return cap;
}

/* The handle of an imported tensor: calls the producer's deleter when collected. */
typedef struct { void *managed; int versioned; } import_handle;

static void destroy_handle(PyObject *cap) {
  import_handle *h = (import_handle *)PyCapsule_GetPointer(cap, "kiln_dlpack_handle");
  if (!h) { PyErr_Clear(); return; }
  if (!h->managed) { free(h); return; }
  if (h->versioned) {
    DLManagedTensorVersioned *m = h->managed;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = h->managed;
    if (m->deleter) m->deleter(m);
  }
  free(h);
}

static PyObject *dims_tuple(const int64_t *d, int n) {
  PyObject *t = PyTuple_New(n);
  if (!t) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *v = PyLong_FromLongLong(d[i]);
    if (!v) { Py_DECREF(t); return NULL; }
    PyTuple_SET_ITEM(t, i, v);
  }
  return t;
}

static PyObject *kd_unpack(PyObject *self, PyObject *cap) {
  int versioned;
  void *managed;
  DLTensor *t;
  uint64_t flags = 0;
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    versioned = 1;
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
    if (m->version.major != 1) {
      PyErr_Format(PyExc_BufferError, "unsupported DLPack version %u.%u",
                   m->version.major, m->version.minor);
      return NULL;
    }
    managed = m; t = &m->dl_tensor; flags = m->flags;
  } else if (PyCapsule_IsValid(cap, "dltensor")) {
    versioned = 0;
    DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
    managed = m; t = &m->dl_tensor;
  } else {
    PyErr_SetString(PyExc_BufferError,
                    "expected a DLPack capsule that has not been consumed yet");
    return NULL;
  }
  PyObject *shape = dims_tuple(t->shape, t->ndim);
  if (!shape) return NULL;
  PyObject *strides = t->strides ? dims_tuple(t->strides, t->ndim) : (Py_INCREF(Py_None), Py_None);
  if (!strides) { Py_DECREF(shape); return NULL; }
  import_handle *h = malloc(sizeof *h);
  if (!h) { Py_DECREF(shape); Py_DECREF(strides); return PyErr_NoMemory(); }
  h->managed = managed; h->versioned = versioned;
  PyObject *handle = PyCapsule_New(h, "kiln_dlpack_handle", destroy_handle);
  if (!handle) { free(h); Py_DECREF(shape); Py_DECREF(strides); return NULL; }
  /* From here the handle owns the tensor: the capsule is marked used. */
  if (PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor")) {
    h->managed = NULL;
    Py_DECREF(handle); Py_DECREF(shape); Py_DECREF(strides);
    return NULL;
  }
  return Py_BuildValue("(KNNiiiiiN)",
                       (unsigned long long)(uintptr_t)((char *)t->data + t->byte_offset),
                       shape, strides, (int)t->dtype.code, (int)t->dtype.bits,
                       (int)t->dtype.lanes, (int)t->device.device_type,
                       (int)((flags & FLAG_READ_ONLY) != 0), handle);
}

static PyMethodDef kd_methods[] = {
  {"capsule", kd_capsule, METH_VARARGS,
   "capsule(owner, data, shape, strides, code, bits, versioned, readonly)"},
  {"unpack", kd_unpack, METH_O, "unpack(capsule) -> (data, shape, strides, code, bits, "
   "lanes, device_type, readonly, handle)"},
  {NULL, NULL, 0, NULL}
};

static struct PyModuleDef kd_module = {
  PyModuleDef_HEAD_INIT, "kiln_dlpack", "DLPack capsules for bfloat16", -1, kd_methods
};

PyMODINIT_FUNC PyInit_kiln_dlpack(void) { return PyModule_Create(&kd_module); }
