/* kiln_rt: the CPython extension that calls generated segment functions (run) and
   allocates large arrays (alloc_large, pool_stats) and keys the cached-jit fast path
   (tree_sig); kiln/compiler/runtime.py builds it
   with build.build_extension. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

typedef void (*kiln_seg_fn)(void **);

static PyObject *kiln_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 1) { PyErr_SetString(PyExc_TypeError, "run(fnptr, *arrays)"); return NULL; }
  void *fp = PyLong_AsVoidPtr(args[0]);
  if (fp == NULL && PyErr_Occurred()) return NULL;
  void *small[64];
  void **ptrs = small;
  if (nargs - 1 > 64) {
    ptrs = (void **)PyMem_Malloc(sizeof(void *) * (size_t)(nargs - 1));
    if (!ptrs) return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 1; i < nargs; i++) {
    PyObject *a = args[i];
    if (!PyArray_Check(a)) {
      if (ptrs != small) PyMem_Free(ptrs);
      PyErr_Format(PyExc_TypeError, "run: argument %zd is not an ndarray", i);
      return NULL;
    }
    ptrs[i - 1] = PyArray_DATA((PyArrayObject *)a);
  }
  Py_BEGIN_ALLOW_THREADS
  ((kiln_seg_fn)fp)(ptrs);
  Py_END_ALLOW_THREADS
  if (ptrs != small) PyMem_Free(ptrs);
  Py_RETURN_NONE;
}

/* ---- large buffers: huge-page backed, recycled --------------------------------------
   A fresh 100 MB output costs ~10 ms of page faults (the kernel zeroes every page)
   before the program writes a byte. Blocks of dead arrays go back to a small pool and
   the next output of that size takes one, already mapped: what an allocator like XLA's
   gives JAX. Sizes are rounded to 2 MiB; the pool holds at most POOL_MAX blocks and
   POOL_BYTES bytes; the GIL guards it (capsule destructors run with the GIL held). */
#include <sys/mman.h>
#if NPY_ABI_VERSION < 0x02000000      /* NumPy 1.x headers */
#define PyDataType_ELSIZE(d) ((d)->elsize)
#endif
#define POOL_MAX 8
#define POOL_BYTES ((size_t)1 << 30)
static void *pool_ptr[POOL_MAX];
static size_t pool_size[POOL_MAX];
static int pool_n = 0;
static size_t pool_total = 0;
static unsigned long long pool_hits = 0, pool_maps = 0;

static void block_release(PyObject *cap) {
  void *p = PyCapsule_GetPointer(cap, "kiln_block");
  size_t n = (size_t)(uintptr_t)PyCapsule_GetContext(cap);
  if (pool_n < POOL_MAX && pool_total + n <= POOL_BYTES) {
    pool_ptr[pool_n] = p; pool_size[pool_n] = n; pool_n++; pool_total += n;
  } else {
    munmap(p, n);
  }
}

static void *block_get(size_t n) {
  for (int i = pool_n - 1; i >= 0; i--) {
    if (pool_size[i] == n) {
      void *p = pool_ptr[i];
      pool_n--; pool_total -= n;
      pool_ptr[i] = pool_ptr[pool_n]; pool_size[i] = pool_size[pool_n];
      pool_hits++;
      return p;
    }
  }
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, n, MADV_HUGEPAGE);
#endif
  pool_maps++;
  return p;
}

/* alloc_large(shape: tuple, dtype) -> uninitialized C-contiguous ndarray */
static PyObject *kiln_alloc_large(PyObject *self, PyObject *args) {
  PyObject *shape_obj; PyArray_Descr *descr = NULL;
  if (!PyArg_ParseTuple(args, "OO&", &shape_obj, PyArray_DescrConverter, &descr)) return NULL;
  PyArray_Dims dims = {NULL, 0};
  if (!PyArray_IntpConverter(shape_obj, &dims)) { Py_DECREF(descr); return NULL; }
  size_t count = 1;
  for (int i = 0; i < dims.len; i++) count *= (size_t)dims.ptr[i];
  size_t bytes = count * (size_t)PyDataType_ELSIZE(descr);
  size_t n = (bytes + ((size_t)1 << 21) - 1) & ~(((size_t)1 << 21) - 1);
  if (n == 0) n = (size_t)1 << 21;
  void *p = block_get(n);
  if (p == NULL) { PyDimMem_FREE(dims.ptr); Py_DECREF(descr); return PyErr_NoMemory(); }
  PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, descr, dims.len, dims.ptr, NULL, p,
                                       NPY_ARRAY_CARRAY, NULL);
  PyDimMem_FREE(dims.ptr);
  if (arr == NULL) { munmap(p, n); return NULL; }
  PyObject *cap = PyCapsule_New(p, "kiln_block", block_release);
  if (cap == NULL) { Py_DECREF(arr); munmap(p, n); return NULL; }
  PyCapsule_SetContext(cap, (void *)(uintptr_t)n);
  if (PyArray_SetBaseObject((PyArrayObject *)arr, cap) < 0) { Py_DECREF(arr); return NULL; }
  return arr;
}

static PyObject *kiln_pool_stats(PyObject *self, PyObject *noargs) {
  return Py_BuildValue("{s:i,s:n,s:K,s:K}", "blocks", pool_n, "bytes", (Py_ssize_t)pool_total,
                       "hits", pool_hits, "maps", pool_maps);
}

/* ---- tree_sig: the cached-jit fast path's key ----------------------------------------
   tree_sig(tree, array_type, namedtuple_types, markers) walks tuples, lists, dicts
   (keys sorted), None, the namedtuple types given (a dict: type -> anything) and leaves of
   exactly array_type, and returns (sig, values): sig a flat tuple in preorder, a node a
   2-tuple (kind marker or namedtuple type, arity or sorted keys), None a marker, a leaf a
   3-tuple (shape, dtype, weak_type); values the leaves' raw values (slot `_v`): ndarrays,
   or, when markers has a fifth item, objects of exactly that type (values still being
   computed: kiln._async_dispatch.Pending, whose `shape` and `dtype` attributes are read).
   Anything else (another leaf or node type, keys that do not sort, another value type,
   nesting deeper than 64) returns None with no error set: the caller takes its general
   path, which also raises the errors Python's flattening raises. Preorder with arities is
   unambiguous, so equal sigs mean equal tree structures and leaf avals. */
static PyObject *s_value = NULL, *s_weak = NULL;

/* 1: walked; 0: not this path (no error set); -1: error set */
static int sig_walk(PyObject *x, PyObject *atype, PyObject *nts, PyObject *mk,
                    PyObject *sig, PyObject *vals, int depth) {
  if (depth > 64) return 0;
  PyTypeObject *t = Py_TYPE(x);
  if ((PyObject *)t == atype) {
    PyObject *v = PyObject_GetAttr(x, s_value);
    if (v == NULL) { PyErr_Clear(); return 0; }
    PyObject *shape = NULL, *dtype = NULL;
    if (PyArray_CheckExact(v)) {
      PyArrayObject *a = (PyArrayObject *)v;
      int nd = PyArray_NDIM(a);
      shape = PyTuple_New(nd);
      if (shape == NULL) { Py_DECREF(v); return -1; }
      for (int i = 0; i < nd; i++) {
        PyObject *d = PyLong_FromSsize_t((Py_ssize_t)PyArray_DIM(a, i));
        if (d == NULL) { Py_DECREF(shape); Py_DECREF(v); return -1; }
        PyTuple_SET_ITEM(shape, i, d);
      }
      dtype = (PyObject *)PyArray_DESCR(a);
      Py_INCREF(dtype);
    } else if (PyTuple_GET_SIZE(mk) > 4 && (PyObject *)Py_TYPE(v) == PyTuple_GET_ITEM(mk, 4)) {
      shape = PyObject_GetAttrString(v, "shape");
      dtype = shape == NULL ? NULL : PyObject_GetAttrString(v, "dtype");
      if (dtype == NULL) { Py_XDECREF(shape); Py_DECREF(v); PyErr_Clear(); return 0; }
    } else {
      Py_DECREF(v);
      return 0;
    }
    PyObject *w = PyObject_GetAttr(x, s_weak);
    if (w == NULL) { PyErr_Clear(); Py_DECREF(v); Py_DECREF(shape); Py_DECREF(dtype); return 0; }
    PyObject *leaf = PyTuple_Pack(3, shape, dtype, w);
    Py_DECREF(shape); Py_DECREF(dtype); Py_DECREF(w);
    if (leaf == NULL) { Py_DECREF(v); return -1; }
    int rc = PyList_Append(sig, leaf);
    Py_DECREF(leaf);
    if (rc == 0) rc = PyList_Append(vals, v);
    Py_DECREF(v);
    return rc < 0 ? -1 : 1;
  }
  if (x == Py_None) return PyList_Append(sig, PyTuple_GET_ITEM(mk, 0)) < 0 ? -1 : 1;
  PyObject *kind = NULL;
  if (t == &PyTuple_Type) kind = PyTuple_GET_ITEM(mk, 1);
  else if (t == &PyList_Type) kind = PyTuple_GET_ITEM(mk, 2);
  else if (t == &PyDict_Type) {
    PyObject *keys = PyDict_Keys(x);
    if (keys == NULL) return -1;
    if (PyList_Sort(keys) < 0) { PyErr_Clear(); Py_DECREF(keys); return 0; }
    PyObject *kt = PyList_AsTuple(keys);
    if (kt == NULL) { Py_DECREF(keys); return -1; }
    PyObject *node = PyTuple_Pack(2, PyTuple_GET_ITEM(mk, 3), kt);
    Py_DECREF(kt);
    if (node == NULL || PyList_Append(sig, node) < 0) {
      Py_XDECREF(node); Py_DECREF(keys); return -1;
    }
    Py_DECREF(node);
    Py_ssize_t n = PyList_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *c = PyDict_GetItemWithError(x, PyList_GET_ITEM(keys, i));   /* borrowed */
      if (c == NULL) {
        Py_DECREF(keys);
        if (PyErr_Occurred()) return -1;
        return 0;
      }
      Py_INCREF(c);
      int rc = sig_walk(c, atype, nts, mk, sig, vals, depth + 1);
      Py_DECREF(c);
      if (rc != 1) { Py_DECREF(keys); return rc; }
    }
    Py_DECREF(keys);
    return 1;
  } else if (PyTuple_Check(x)) {
    PyObject *hit = PyDict_GetItemWithError(nts, (PyObject *)t);   /* borrowed */
    if (hit == NULL) return PyErr_Occurred() ? -1 : 0;
    kind = (PyObject *)t;
  } else {
    return 0;
  }
  int is_list = (t == &PyList_Type);
  Py_ssize_t n = is_list ? PyList_GET_SIZE(x) : PyTuple_GET_SIZE(x);
  PyObject *arity = PyLong_FromSsize_t(n);
  if (arity == NULL) return -1;
  PyObject *node = PyTuple_Pack(2, kind, arity);
  Py_DECREF(arity);
  if (node == NULL || PyList_Append(sig, node) < 0) { Py_XDECREF(node); return -1; }
  Py_DECREF(node);
  for (Py_ssize_t i = 0; i < n; i++) {
    /* a list can change under a __getattr__ of a child: re-check its size */
    if (is_list && i >= PyList_GET_SIZE(x)) return 0;
    PyObject *c = is_list ? PyList_GET_ITEM(x, i) : PyTuple_GET_ITEM(x, i);
    Py_INCREF(c);
    int rc = sig_walk(c, atype, nts, mk, sig, vals, depth + 1);
    Py_DECREF(c);
    if (rc != 1) return rc;
  }
  return 1;
}

static PyObject *kiln_tree_sig(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 4 || !PyDict_Check(args[2]) || !PyTuple_Check(args[3]) ||
      PyTuple_GET_SIZE(args[3]) < 4 || PyTuple_GET_SIZE(args[3]) > 5) {
    PyErr_SetString(PyExc_TypeError,
                    "tree_sig(tree, array_type, namedtuple_types: dict, markers: 4- or 5-tuple)");
    return NULL;
  }
  if (s_value == NULL) {
    s_value = PyUnicode_InternFromString("_v");
    s_weak = PyUnicode_InternFromString("weak_type");
    if (s_value == NULL || s_weak == NULL) return NULL;
  }
  PyObject *sig = PyList_New(0), *vals = PyList_New(0);
  if (sig == NULL || vals == NULL) { Py_XDECREF(sig); Py_XDECREF(vals); return NULL; }
  int rc = sig_walk(args[0], args[1], args[2], args[3], sig, vals, 0);
  if (rc != 1) {
    Py_DECREF(sig); Py_DECREF(vals);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
  }
  PyObject *st = PyList_AsTuple(sig);
  Py_DECREF(sig);
  if (st == NULL) { Py_DECREF(vals); return NULL; }
  PyObject *out = PyTuple_Pack(2, st, vals);
  Py_DECREF(st); Py_DECREF(vals);
  return out;
}

/* place(bufs: list, ids: list[int], args: list, dtypes: list[np.dtype]) -> bool: when every
   args[k] is an ndarray (exactly), C-contiguous, of dtype dtypes[k], store it at
   bufs[ids[k]] and return True; otherwise change nothing and return False (the caller
   converts). One call instead of a Python loop of attribute checks per input. */
static PyObject *kiln_place(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 4 || !PyList_Check(args[0]) || !PyList_Check(args[1]) ||
      !PyList_Check(args[2]) || !PyList_Check(args[3])) {
    PyErr_SetString(PyExc_TypeError, "place(bufs, ids, args, dtypes): lists");
    return NULL;
  }
  PyObject *bufs = args[0], *ids = args[1], *xs = args[2], *dts = args[3];
  Py_ssize_t n = PyList_GET_SIZE(ids);
  if (PyList_GET_SIZE(xs) != n || PyList_GET_SIZE(dts) != n) Py_RETURN_FALSE;
  Py_ssize_t nb = PyList_GET_SIZE(bufs);
  for (Py_ssize_t k = 0; k < n; k++) {
    PyObject *x = PyList_GET_ITEM(xs, k);
    if (!PyArray_CheckExact(x) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)x))
      Py_RETURN_FALSE;
    PyArray_Descr *have = PyArray_DESCR((PyArrayObject *)x);
    PyObject *want = PyList_GET_ITEM(dts, k);
    if ((PyObject *)have != want &&
        (!PyArray_DescrCheck(want) || !PyArray_EquivTypes(have, (PyArray_Descr *)want)))
      Py_RETURN_FALSE;
    Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(ids, k));
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0 || i >= nb) { PyErr_SetString(PyExc_IndexError, "place: buffer id"); return NULL; }
  }
  for (Py_ssize_t k = 0; k < n; k++) {
    Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(ids, k));
    PyObject *x = PyList_GET_ITEM(xs, k);
    Py_INCREF(x);
    PyList_SetItem(bufs, i, x);     /* steals x, releases the old item */
  }
  Py_RETURN_TRUE;
}

static PyMethodDef kiln_methods[] = {
  {"run", (PyCFunction)(void (*)(void))kiln_run, METH_FASTCALL, "run(fnptr, *arrays)"},
  {"alloc_large", kiln_alloc_large, METH_VARARGS, "alloc_large(shape, dtype)"},
  {"pool_stats", kiln_pool_stats, METH_NOARGS, "pool_stats()"},
  {"place", (PyCFunction)(void (*)(void))kiln_place, METH_FASTCALL,
   "place(bufs, ids, args, dtypes) -> bool"},
  {"tree_sig", (PyCFunction)(void (*)(void))kiln_tree_sig, METH_FASTCALL,
   "tree_sig(tree, array_type, namedtuple_types, markers) -> (sig, values) | None"},
  {NULL, NULL, 0, NULL}
};

static struct PyModuleDef kiln_module = {
  PyModuleDef_HEAD_INIT, "kiln_rt", "kiln native call runtime", -1, kiln_methods
};

PyMODINIT_FUNC PyInit_kiln_rt(void) {
  import_array();
  return PyModule_Create(&kiln_module);
}
