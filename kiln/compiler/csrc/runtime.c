/* kiln_rt: the CPython extension that calls generated segment functions (run) and
   allocates large arrays (alloc_large, pool_stats); kiln/compiler/runtime.py builds it
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

static PyMethodDef kiln_methods[] = {
  {"run", (PyCFunction)(void (*)(void))kiln_run, METH_FASTCALL, "run(fnptr, *arrays)"},
  {"alloc_large", kiln_alloc_large, METH_VARARGS, "alloc_large(shape, dtype)"},
  {"pool_stats", kiln_pool_stats, METH_NOARGS, "pool_stats()"},
  {NULL, NULL, 0, NULL}
};

static struct PyModuleDef kiln_module = {
  PyModuleDef_HEAD_INIT, "kiln_rt", "kiln native call runtime", -1, kiln_methods
};

PyMODINIT_FUNC PyInit_kiln_rt(void) {
  import_array();
  return PyModule_Create(&kiln_module);
}
