/* kiln_rt: the CPython extension that calls generated segment functions (run, and a
   plan of several in one call: make_plan, run_plan), queues plans for its native
   dispatch thread (submit_plan, completed, wait), allocates large arrays (alloc_large,
   pool_stats) and keys the cached-jit fast path (tree_sig); kiln/compiler/runtime.py
   builds it with build.build_extension. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

/* ---- plans: several segments in one call -------------------------------------------
   make_plan(segments: list of (fnptr, buffer ids)) -> capsule; run_plan(plan, bufs: list)
   reads the data pointer of every buffer the segments take (each must be an ndarray:
   TypeError before any segment runs otherwise), releases the GIL once and calls the
   segments in order. The segments of a plan with no host islands between them so run
   with no trip back to the interpreter: a thread running a program (the asynchronous
   dispatch thread) needs the GIL once at the end, not between segments, and does not
   wait for a busy main thread's switch interval (5 ms) at each boundary. */
typedef struct {
  Py_ssize_t nseg, nids;
  kiln_seg_fn *fns;
  Py_ssize_t *starts;     /* nseg + 1 offsets into ids */
  Py_ssize_t *ids;
} kiln_plan;

static void plan_release(PyObject *cap) {
  kiln_plan *p = (kiln_plan *)PyCapsule_GetPointer(cap, "kiln_plan");
  if (p == NULL) return;
  PyMem_Free(p->fns); PyMem_Free(p->starts); PyMem_Free(p->ids); PyMem_Free(p);
}

static PyObject *kiln_make_plan(PyObject *self, PyObject *segs) {
  if (!PyList_Check(segs)) { PyErr_SetString(PyExc_TypeError, "make_plan(segments: list)"); return NULL; }
  Py_ssize_t n = PyList_GET_SIZE(segs), total = 0;
  for (Py_ssize_t k = 0; k < n; k++) {
    PyObject *e = PyList_GET_ITEM(segs, k);
    if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(e, 1))) {
      PyErr_SetString(PyExc_TypeError, "make_plan: each segment is (fnptr, tuple of buffer ids)");
      return NULL;
    }
    total += PyTuple_GET_SIZE(PyTuple_GET_ITEM(e, 1));
  }
  kiln_plan *p = (kiln_plan *)PyMem_Calloc(1, sizeof(kiln_plan));
  if (p == NULL) return PyErr_NoMemory();
  p->nseg = n; p->nids = total;
  p->fns = (kiln_seg_fn *)PyMem_Calloc((size_t)(n ? n : 1), sizeof(kiln_seg_fn));
  p->starts = (Py_ssize_t *)PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
  p->ids = (Py_ssize_t *)PyMem_Calloc((size_t)(total ? total : 1), sizeof(Py_ssize_t));
  if (!p->fns || !p->starts || !p->ids) {
    PyMem_Free(p->fns); PyMem_Free(p->starts); PyMem_Free(p->ids); PyMem_Free(p);
    return PyErr_NoMemory();
  }
  Py_ssize_t at = 0;
  for (Py_ssize_t k = 0; k < n; k++) {
    PyObject *e = PyList_GET_ITEM(segs, k);
    void *fp = PyLong_AsVoidPtr(PyTuple_GET_ITEM(e, 0));
    if (fp == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "make_plan: null function");
      goto fail;
    }
    p->fns[k] = (kiln_seg_fn)fp;
    p->starts[k] = at;
    PyObject *ids = PyTuple_GET_ITEM(e, 1);
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ids); j++) {
      Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(ids, j));
      if (i == -1 && PyErr_Occurred()) goto fail;
      if (i < 0) { PyErr_SetString(PyExc_ValueError, "make_plan: buffer id"); goto fail; }
      p->ids[at++] = i;
    }
  }
  p->starts[n] = at;
  PyObject *cap = PyCapsule_New(p, "kiln_plan", plan_release);
  if (cap == NULL) goto fail;
  return cap;
fail:
  PyMem_Free(p->fns); PyMem_Free(p->starts); PyMem_Free(p->ids); PyMem_Free(p);
  return NULL;
}

static PyObject *kiln_run_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyList_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "run_plan(plan, bufs: list)");
    return NULL;
  }
  kiln_plan *p = (kiln_plan *)PyCapsule_GetPointer(args[0], "kiln_plan");
  if (p == NULL) return NULL;
  PyObject *bufs = args[1];
  Py_ssize_t nb = PyList_GET_SIZE(bufs);
  void *small[128];
  void **ptrs = small;
  if (p->nids > 128) {
    ptrs = (void **)PyMem_Malloc(sizeof(void *) * (size_t)p->nids);
    if (!ptrs) return PyErr_NoMemory();
  }
  for (Py_ssize_t j = 0; j < p->nids; j++) {
    Py_ssize_t i = p->ids[j];
    PyObject *a = i < nb ? PyList_GET_ITEM(bufs, i) : NULL;
    if (a == NULL || !PyArray_Check(a)) {
      if (ptrs != small) PyMem_Free(ptrs);
      PyErr_Format(PyExc_TypeError, "run_plan: buffer %zd is not an ndarray", i);
      return NULL;
    }
    ptrs[j] = PyArray_DATA((PyArrayObject *)a);
  }
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t k = 0; k < p->nseg; k++) p->fns[k](ptrs + p->starts[k]);
  Py_END_ALLOW_THREADS
  if (ptrs != small) PyMem_Free(ptrs);
  Py_RETURN_NONE;
}

/* ---- the dispatch queue: plans run by a native thread ---------------------------------
   submit_plan(plan, bufs) -> seq queues a plan (its buffers' data pointers read now) for
   one native worker thread, started on first use, which runs the jobs in order without
   ever taking the GIL; completed() is the sequence number of the last job run,
   wait(seq) blocks (GIL released) until job seq has run. The caller keeps the buffers
   and the plan alive until then (kiln._async_dispatch). A Python thread would need the
   GIL to wake up and again after each native call: a main thread busy in Python holds
   it for the switch interval (5 ms) each time. after_fork() resets the queue in a
   child of fork (the caller drains it before forking, so it is empty). */
/* the huge-page block pool (below): also used by the dispatch thread */
static void *block_get(size_t n);
static void block_put(void *p, size_t n);
#define HUGE_BYTES ((size_t)1 << 22)

/* A queued program's output buffer: allocated by the dispatch thread when the program
   runs (outputs of queued programs cost no memory until then), read through array()
   once it has run; its memory goes when the object does. obuf(nbytes) makes one. */
typedef struct {
  PyObject_HEAD
  void *p;
  size_t nbytes;
  size_t block;       /* > 0: a pool block of that size; 0: malloc */
  int failed;         /* no memory for it, or for an input of its program */
  PyObject *owner;    /* the ndarray its malloc'd memory was handed to (array()), if any */
} kiln_obuf;

static void obuf_dealloc(kiln_obuf *o) {
  if (o->owner != NULL) Py_DECREF(o->owner);       /* the array frees the memory */
  else if (o->p != NULL) {
    if (o->block) block_put(o->p, o->block);
    else free(o->p);
  }
  Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyObject *obuf_array(kiln_obuf *o, PyObject *args) {
  PyObject *shape_obj; PyArray_Descr *descr = NULL;
  if (!PyArg_ParseTuple(args, "OO&", &shape_obj, PyArray_DescrConverter, &descr)) return NULL;
  if (o->failed || o->p == NULL) {
    Py_DECREF(descr);
    PyErr_Format(PyExc_MemoryError, "Unable to allocate %zu bytes for an output of a "
                 "queued program (or for an input it takes)", o->nbytes);
    return NULL;
  }
  PyArray_Dims dims = {NULL, 0};
  if (!PyArray_IntpConverter(shape_obj, &dims)) { Py_DECREF(descr); return NULL; }
  PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, descr, dims.len, dims.ptr, NULL, o->p,
                                       NPY_ARRAY_CARRAY, NULL);
  PyDimMem_FREE(dims.ptr);
  if (arr == NULL) return NULL;
#if NPY_API_VERSION >= 0x00000010      /* NumPy >= 1.22: memory handlers */
  if (!o->block && o->owner == NULL) {
    /* malloc'd: the array owns it, freed by NumPy's default handler (free()), as an
       np.empty array's: kiln's donation can reuse it. The obuf keeps the array alive
       while queued programs may still read the memory. */
    PyObject *handler = PyDataMem_GetHandler();
    if (handler == NULL) { Py_DECREF(arr); return NULL; }
    ((PyArrayObject_fields *)arr)->mem_handler = handler;     /* the reference */
    PyArray_ENABLEFLAGS((PyArrayObject *)arr, NPY_ARRAY_OWNDATA);
    Py_INCREF(arr);
    o->owner = arr;
    return arr;
  }
#endif
  Py_INCREF(o);
  if (PyArray_SetBaseObject((PyArrayObject *)arr, (PyObject *)o) < 0) {
    Py_DECREF(arr);
    return NULL;
  }
  return arr;
}

static PyObject *obuf_failed(kiln_obuf *o, PyObject *noargs) {
  return PyBool_FromLong(o->failed);
}

static PyMethodDef obuf_methods[] = {
  {"array", (PyCFunction)obuf_array, METH_VARARGS, "array(shape, dtype) once its job ran"},
  {"failed", (PyCFunction)obuf_failed, METH_NOARGS, "failed() -> bool"},
  {NULL, NULL, 0, NULL}
};

static PyTypeObject ObufType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "kiln_rt.obuf",
  .tp_basicsize = sizeof(kiln_obuf),
  .tp_dealloc = (destructor)obuf_dealloc,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "an output buffer of a queued program",
  .tp_methods = obuf_methods,
};

static PyObject *kiln_obuf_new(PyObject *self, PyObject *arg) {
  Py_ssize_t n = PyLong_AsSsize_t(arg);
  if (n == -1 && PyErr_Occurred()) return NULL;
  if (n < 0) { PyErr_SetString(PyExc_ValueError, "obuf: negative size"); return NULL; }
  kiln_obuf *o = PyObject_New(kiln_obuf, &ObufType);
  if (o == NULL) return NULL;
  o->p = NULL; o->nbytes = (size_t)n; o->block = 0; o->failed = 0; o->owner = NULL;
  return (PyObject *)o;
}

/* On the dispatch thread (no GIL): the memory of o. */
static void obuf_alloc(kiln_obuf *o) {
  size_t n = o->nbytes;
  if (n >= HUGE_BYTES) {
    size_t b = (n + ((size_t)1 << 21) - 1) & ~(((size_t)1 << 21) - 1);
    o->p = block_get(b);
    if (o->p != NULL) o->block = b;
  } else {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? (n + 63) & ~(size_t)63 : 64) == 0) o->p = p;
  }
  if (o->p == NULL) o->failed = 1;
}

typedef struct kiln_job {
  struct kiln_job *next;
  kiln_plan *plan;
  void **ptrs;
  kiln_obuf **late;      /* per pointer: the output buffer it is (read when run), or NULL */
  kiln_obuf **outs;      /* the job's own outputs, allocated when it runs */
  Py_ssize_t nouts;
  long long seq;
} kiln_job;

static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t q_done = PTHREAD_COND_INITIALIZER;
static kiln_job *q_head = NULL, *q_tail = NULL;
static long long q_submitted = 0, q_completed = 0;
static int q_started = 0;

static void *q_worker(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&q_mu);
    while (q_head == NULL) pthread_cond_wait(&q_work, &q_mu);
    kiln_job *j = q_head;
    q_head = j->next;
    if (q_head == NULL) q_tail = NULL;
    pthread_mutex_unlock(&q_mu);
    kiln_plan *p = j->plan;
    int failed = 0;
    for (Py_ssize_t k = 0; k < j->nouts; k++) {
      obuf_alloc(j->outs[k]);
      failed |= j->outs[k]->failed;
    }
    for (Py_ssize_t k = 0; k < p->nids; k++) {
      kiln_obuf *o = j->late[k];
      if (o == NULL) continue;
      if (o->failed || o->p == NULL) failed = 1;
      else j->ptrs[k] = o->p;
    }
    if (failed) {
      for (Py_ssize_t k = 0; k < j->nouts; k++) j->outs[k]->failed = 1;
    } else {
      for (Py_ssize_t k = 0; k < p->nseg; k++) p->fns[k](j->ptrs + p->starts[k]);
    }
    pthread_mutex_lock(&q_mu);
    __atomic_store_n(&q_completed, j->seq, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&q_done);
    pthread_mutex_unlock(&q_mu);
    free(j->ptrs);
    free(j->late);
    free(j->outs);
    free(j);
  }
  return NULL;
}

static PyObject *kiln_submit_plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3 || !PyList_Check(args[1]) || !PyList_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "submit_plan(plan, bufs: list, outs: list of obuf)");
    return NULL;
  }
  kiln_plan *p = (kiln_plan *)PyCapsule_GetPointer(args[0], "kiln_plan");
  if (p == NULL) return NULL;
  PyObject *bufs = args[1], *outs = args[2];
  Py_ssize_t nb = PyList_GET_SIZE(bufs), no = PyList_GET_SIZE(outs);
  kiln_job *j = (kiln_job *)calloc(1, sizeof(kiln_job));
  size_t m = (size_t)(p->nids ? p->nids : 1);
  if (j != NULL) {
    j->ptrs = (void **)calloc(m, sizeof(void *));
    j->late = (kiln_obuf **)calloc(m, sizeof(kiln_obuf *));
    j->outs = (kiln_obuf **)calloc((size_t)(no ? no : 1), sizeof(kiln_obuf *));
  }
  if (j == NULL || !j->ptrs || !j->late || !j->outs) {
    if (j) { free(j->ptrs); free(j->late); free(j->outs); free(j); }
    return PyErr_NoMemory();
  }
  j->nouts = no;
  for (Py_ssize_t k = 0; k < no; k++) {
    PyObject *o = PyList_GET_ITEM(outs, k);
    if (Py_TYPE(o) != &ObufType) {
      PyErr_SetString(PyExc_TypeError, "submit_plan: outs must be obuf objects");
      goto fail;
    }
    j->outs[k] = (kiln_obuf *)o;
  }
  for (Py_ssize_t k = 0; k < p->nids; k++) {
    Py_ssize_t i = p->ids[k];
    PyObject *a = i < nb ? PyList_GET_ITEM(bufs, i) : NULL;
    if (a != NULL && Py_TYPE(a) == &ObufType) {
      j->late[k] = (kiln_obuf *)a;
    } else if (a != NULL && PyArray_Check(a)) {
      j->ptrs[k] = PyArray_DATA((PyArrayObject *)a);
    } else {
      PyErr_Format(PyExc_TypeError, "submit_plan: buffer %zd is not an ndarray or obuf", i);
      goto fail;
    }
  }
  if (!q_started) {
    pthread_attr_t attr;
    pthread_t tid;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);     /* signals stay with Python's threads */
    int rc = pthread_create(&tid, &attr, q_worker, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      PyErr_SetString(PyExc_RuntimeError, "submit_plan: cannot start the dispatch thread");
      goto fail;
    }
    q_started = 1;
  }
  j->next = NULL; j->plan = p;
  pthread_mutex_lock(&q_mu);       /* held only briefly by the worker: no GIL wait */
  j->seq = ++q_submitted;
  if (q_tail) q_tail->next = j; else q_head = j;
  q_tail = j;
  pthread_cond_signal(&q_work);
  pthread_mutex_unlock(&q_mu);
  return PyLong_FromLongLong(j->seq);
fail:
  free(j->ptrs); free(j->late); free(j->outs); free(j);
  return NULL;
}

static PyObject *kiln_completed(PyObject *self, PyObject *noargs) {
  return PyLong_FromLongLong(__atomic_load_n(&q_completed, __ATOMIC_ACQUIRE));
}

static PyObject *kiln_wait(PyObject *self, PyObject *arg) {
  long long seq = PyLong_AsLongLong(arg);
  if (seq == -1 && PyErr_Occurred()) return NULL;
  if (__atomic_load_n(&q_completed, __ATOMIC_ACQUIRE) >= seq) Py_RETURN_NONE;
  Py_BEGIN_ALLOW_THREADS
  pthread_mutex_lock(&q_mu);
  while (q_completed < seq && q_completed < q_submitted) pthread_cond_wait(&q_done, &q_mu);
  pthread_mutex_unlock(&q_mu);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyObject *kiln_submitted(PyObject *self, PyObject *noargs) {
  return PyLong_FromLongLong(q_submitted);
}

static pthread_mutex_t pool_mu;

static PyObject *kiln_after_fork(PyObject *self, PyObject *noargs) {
  pthread_mutex_init(&pool_mu, NULL);
  pthread_mutex_init(&q_mu, NULL);
  pthread_cond_init(&q_work, NULL);
  pthread_cond_init(&q_done, NULL);
  q_head = q_tail = NULL;
  q_completed = q_submitted;
  q_started = 0;
  Py_RETURN_NONE;
}

/* ---- large buffers: huge-page backed, recycled --------------------------------------
   A fresh 100 MB output costs ~10 ms of page faults (the kernel zeroes every page)
   before the program writes a byte. Blocks of dead arrays go back to a small pool and
   the next output of that size takes one, already mapped: what an allocator like XLA's
   gives JAX. Sizes are rounded to 2 MiB; the pool holds at most POOL_MAX blocks and
   POOL_BYTES bytes, oldest first (a block returned to a full pool replaces the oldest);
   pool_mu guards it (the dispatch thread takes blocks for queued programs' outputs). */
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

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;   /* (declared above) */

static void block_release(PyObject *cap) {
  void *p = PyCapsule_GetPointer(cap, "kiln_block");
  size_t n = (size_t)(uintptr_t)PyCapsule_GetContext(cap);
  block_put(p, n);
}

static void block_put(void *p, size_t n) {
  if (n > POOL_BYTES) { munmap(p, n); return; }
  pthread_mutex_lock(&pool_mu);
  /* full: the oldest blocks make room (the sizes in use now are the likely next ones) */
  while (pool_n > 0 && (pool_n == POOL_MAX || pool_total + n > POOL_BYTES)) {
    munmap(pool_ptr[0], pool_size[0]);
    pool_total -= pool_size[0];
    pool_n--;
    memmove(pool_ptr, pool_ptr + 1, sizeof(void *) * (size_t)pool_n);
    memmove(pool_size, pool_size + 1, sizeof(size_t) * (size_t)pool_n);
  }
  pool_ptr[pool_n] = p; pool_size[pool_n] = n; pool_n++; pool_total += n;
  pthread_mutex_unlock(&pool_mu);
}

static void *block_get(size_t n) {
  pthread_mutex_lock(&pool_mu);
  for (int i = pool_n - 1; i >= 0; i--) {
    if (pool_size[i] == n) {
      void *p = pool_ptr[i];
      pool_n--; pool_total -= n;
      /* keep the rest oldest first */
      memmove(pool_ptr + i, pool_ptr + i + 1, sizeof(void *) * (size_t)(pool_n - i));
      memmove(pool_size + i, pool_size + i + 1, sizeof(size_t) * (size_t)(pool_n - i));
      pool_hits++;
      pthread_mutex_unlock(&pool_mu);
      return p;
    }
  }
  pthread_mutex_unlock(&pool_mu);
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
  madvise(p, n, MADV_HUGEPAGE);
#endif
  __atomic_add_fetch(&pool_maps, 1, __ATOMIC_RELAXED);
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
   tree_sig(tree, array_type, namedtuple_types, markers[, host]) walks tuples, lists, dicts
   (keys sorted), None, the namedtuple types given (a dict: type -> anything) and leaves of
   exactly array_type, and returns (sig, values): sig a flat tuple in preorder, a node a
   2-tuple (kind marker or namedtuple type, arity or sorted keys), None a marker, a leaf a
   3-tuple (shape, dtype, weak_type); values the leaves' raw values (slot `_v`): ndarrays,
   or, when markers has a fifth item, objects of exactly that type (values still being
   computed: kiln._async_dispatch.Pending, whose `shape` and `dtype` attributes are read).
   With `host` (a dict), host leaves are taken as well, as jit's tracing types them: an
   exact ndarray whose dtype is a key of host (its value: the canonical dtype; the leaf is
   (shape, canonical dtype, False)) and Python int (in int32's range), float and bool (keys
   int, float, bool; values (canonical dtype, weak_type)); the result is then (sig, values,
   borrowed): an ndarray already canonical, C-contiguous and aligned is its own value and
   its index is in the list `borrowed` (the caller copies it when the program may run
   after the call returns); any other host leaf's value is a fresh C-contiguous array of
   the canonical dtype (NumPy's unsafe cast, as np.array(x, dtype) does).
   Anything else (another leaf or node type, keys that do not sort, another value type,
   nesting deeper than 64) returns None with no error set: the caller takes its general
   path, which also raises the errors Python's flattening raises. Preorder with arities is
   unambiguous, so equal sigs mean equal tree structures and leaf avals. */
static PyObject *s_value = NULL, *s_weak = NULL;

typedef struct {
  PyObject *atype, *nts, *mk, *host, *sig, *vals, *borrowed;
} walk_ctx;

/* A shape tuple of an ndarray (new reference). */
static PyObject *shape_of(PyArrayObject *a) {
  int nd = PyArray_NDIM(a);
  PyObject *shape = PyTuple_New(nd);
  if (shape == NULL) return NULL;
  for (int i = 0; i < nd; i++) {
    PyObject *d = PyLong_FromSsize_t((Py_ssize_t)PyArray_DIM(a, i));
    if (d == NULL) { Py_DECREF(shape); return NULL; }
    PyTuple_SET_ITEM(shape, i, d);
  }
  return shape;
}

static int push_leaf(walk_ctx *c, PyObject *shape, PyObject *dtype, PyObject *weak,
                     PyObject *v) {
  PyObject *leaf = PyTuple_Pack(3, shape, dtype, weak);
  if (leaf == NULL) return -1;
  int rc = PyList_Append(c->sig, leaf);
  Py_DECREF(leaf);
  if (rc == 0) rc = PyList_Append(c->vals, v);
  return rc < 0 ? -1 : 1;
}

static PyObject *empty_tuple = NULL;

/* A host leaf (exact ndarray, int, float, bool) when c->host is set: 1 taken, 0 not this
   path, -1 error. */
static int host_leaf(walk_ctx *c, PyObject *x, PyTypeObject *t) {
  if (c->host == NULL) return 0;
  if (t == &PyArray_Type) {
    PyArrayObject *a = (PyArrayObject *)x;
    PyObject *canon = PyDict_GetItemWithError(c->host, (PyObject *)PyArray_DESCR(a));
    if (canon == NULL) return PyErr_Occurred() ? -1 : 0;
    if (!PyArray_DescrCheck(canon)) return 0;
    PyObject *v;
    int borrow = ((PyObject *)PyArray_DESCR(a) == canon ||
                  PyArray_EquivTypes(PyArray_DESCR(a), (PyArray_Descr *)canon)) &&
                 PyArray_IS_C_CONTIGUOUS(a) && PyArray_ISALIGNED(a);
    if (borrow) {
      v = x;
      Py_INCREF(v);
    } else {
      Py_INCREF(canon);      /* stolen */
      v = PyArray_FromAny(x, (PyArray_Descr *)canon, 0, 0,
                          NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST | NPY_ARRAY_ENSURECOPY,
                          NULL);
      if (v == NULL) return -1;
    }
    PyObject *shape = shape_of(a);
    if (shape == NULL) { Py_DECREF(v); return -1; }
    Py_ssize_t idx = PyList_GET_SIZE(c->vals);
    int rc = push_leaf(c, shape, canon, Py_False, v);
    Py_DECREF(shape); Py_DECREF(v);
    if (rc == 1 && borrow) {
      PyObject *i = PyLong_FromSsize_t(idx);
      if (i == NULL) return -1;
      if (PyList_Append(c->borrowed, i) < 0) { Py_DECREF(i); return -1; }
      Py_DECREF(i);
    }
    return rc;
  }
  if (t != &PyLong_Type && t != &PyFloat_Type && t != &PyBool_Type) return 0;
  if (t == &PyLong_Type) {
    int overflow = 0;
    long long n = PyLong_AsLongLongAndOverflow(x, &overflow);
    if (n == -1 && PyErr_Occurred()) return -1;
    if (overflow || n < -2147483648LL || n > 2147483647LL) return 0;
  }
  PyObject *info = PyDict_GetItemWithError(c->host, (PyObject *)t);   /* borrowed */
  if (info == NULL) return PyErr_Occurred() ? -1 : 0;
  if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 2 ||
      !PyArray_DescrCheck(PyTuple_GET_ITEM(info, 0)))
    return 0;
  PyObject *dt = PyTuple_GET_ITEM(info, 0);
  Py_INCREF(dt);            /* stolen */
  PyObject *v = PyArray_FromAny(x, (PyArray_Descr *)dt, 0, 0,
                                NPY_ARRAY_CARRAY | NPY_ARRAY_FORCECAST, NULL);
  if (v == NULL) return -1;
  int rc = push_leaf(c, empty_tuple, dt, PyTuple_GET_ITEM(info, 1), v);
  Py_DECREF(v);
  return rc;
}

/* 1: walked; 0: not this path (no error set); -1: error set */
static int sig_walk(walk_ctx *c, PyObject *x, int depth) {
  PyObject *atype = c->atype, *nts = c->nts, *mk = c->mk, *sig = c->sig;
  if (depth > 64) return 0;
  PyTypeObject *t = Py_TYPE(x);
  if ((PyObject *)t == atype) {
    PyObject *v = PyObject_GetAttr(x, s_value);
    if (v == NULL) { PyErr_Clear(); return 0; }
    PyObject *shape = NULL, *dtype = NULL;
    if (PyArray_CheckExact(v)) {
      PyArrayObject *a = (PyArrayObject *)v;
      shape = shape_of(a);
      if (shape == NULL) { Py_DECREF(v); return -1; }
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
    int rc = push_leaf(c, shape, dtype, w, v);
    Py_DECREF(shape); Py_DECREF(dtype); Py_DECREF(w); Py_DECREF(v);
    return rc;
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
      PyObject *ch = PyDict_GetItemWithError(x, PyList_GET_ITEM(keys, i));   /* borrowed */
      if (ch == NULL) {
        Py_DECREF(keys);
        if (PyErr_Occurred()) return -1;
        return 0;
      }
      Py_INCREF(ch);
      int rc = sig_walk(c, ch, depth + 1);
      Py_DECREF(ch);
      if (rc != 1) { Py_DECREF(keys); return rc; }
    }
    Py_DECREF(keys);
    return 1;
  } else if (PyTuple_Check(x)) {
    PyObject *hit = PyDict_GetItemWithError(nts, (PyObject *)t);   /* borrowed */
    if (hit == NULL) return PyErr_Occurred() ? -1 : 0;
    kind = (PyObject *)t;
  } else {
    return host_leaf(c, x, t);
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
    PyObject *ch = is_list ? PyList_GET_ITEM(x, i) : PyTuple_GET_ITEM(x, i);
    Py_INCREF(ch);
    int rc = sig_walk(c, ch, depth + 1);
    Py_DECREF(ch);
    if (rc != 1) return rc;
  }
  return 1;
}

static PyObject *kiln_tree_sig(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 4 || nargs > 5 || !PyDict_Check(args[2]) || !PyTuple_Check(args[3]) ||
      PyTuple_GET_SIZE(args[3]) < 4 || PyTuple_GET_SIZE(args[3]) > 5 ||
      (nargs == 5 && args[4] != Py_None && !PyDict_Check(args[4]))) {
    PyErr_SetString(PyExc_TypeError,
                    "tree_sig(tree, array_type, namedtuple_types: dict, markers: 4- or 5-tuple"
                    "[, host: dict | None])");
    return NULL;
  }
  if (s_value == NULL) {
    s_value = PyUnicode_InternFromString("_v");
    s_weak = PyUnicode_InternFromString("weak_type");
    empty_tuple = PyTuple_New(0);
    if (s_value == NULL || s_weak == NULL || empty_tuple == NULL) return NULL;
  }
  walk_ctx c = {args[1], args[2], args[3], NULL, PyList_New(0), PyList_New(0), NULL};
  int with_host = nargs == 5;
  if (with_host) {
    c.host = args[4] == Py_None ? NULL : args[4];
    c.borrowed = PyList_New(0);
  }
  if (c.sig == NULL || c.vals == NULL || (with_host && c.borrowed == NULL)) {
    Py_XDECREF(c.sig); Py_XDECREF(c.vals); Py_XDECREF(c.borrowed);
    return NULL;
  }
  int rc = sig_walk(&c, args[0], 0);
  if (rc != 1) {
    Py_DECREF(c.sig); Py_DECREF(c.vals); Py_XDECREF(c.borrowed);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
  }
  PyObject *st = PyList_AsTuple(c.sig);
  Py_DECREF(c.sig);
  if (st == NULL) { Py_DECREF(c.vals); Py_XDECREF(c.borrowed); return NULL; }
  PyObject *out = with_host ? PyTuple_Pack(3, st, c.vals, c.borrowed)
                            : PyTuple_Pack(2, st, c.vals);
  Py_DECREF(st); Py_DECREF(c.vals); Py_XDECREF(c.borrowed);
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
  {"make_plan", kiln_make_plan, METH_O, "make_plan(segments) -> plan"},
  {"run_plan", (PyCFunction)(void (*)(void))kiln_run_plan, METH_FASTCALL,
   "run_plan(plan, bufs)"},
  {"submit_plan", (PyCFunction)(void (*)(void))kiln_submit_plan, METH_FASTCALL,
   "submit_plan(plan, bufs, outs) -> seq"},
  {"obuf", kiln_obuf_new, METH_O, "obuf(nbytes) -> an output buffer of a queued program"},
  {"completed", kiln_completed, METH_NOARGS, "completed() -> seq of the last job run"},
  {"submitted", kiln_submitted, METH_NOARGS, "submitted() -> seq of the last job queued"},
  {"wait", kiln_wait, METH_O, "wait(seq): until job seq has run"},
  {"after_fork", kiln_after_fork, METH_NOARGS, "after_fork(): reset the queue in a child"},
  {"alloc_large", kiln_alloc_large, METH_VARARGS, "alloc_large(shape, dtype)"},
  {"pool_stats", kiln_pool_stats, METH_NOARGS, "pool_stats()"},
  {"place", (PyCFunction)(void (*)(void))kiln_place, METH_FASTCALL,
   "place(bufs, ids, args, dtypes) -> bool"},
  {"tree_sig", (PyCFunction)(void (*)(void))kiln_tree_sig, METH_FASTCALL,
   "tree_sig(tree, array_type, namedtuple_types, markers[, host]) -> (sig, values[, borrowed]) | None"},
  {NULL, NULL, 0, NULL}
};

static struct PyModuleDef kiln_module = {
  PyModuleDef_HEAD_INIT, "kiln_rt", "kiln native call runtime", -1, kiln_methods
};

PyMODINIT_FUNC PyInit_kiln_rt(void) {
  import_array();
  if (PyType_Ready(&ObufType) < 0) return NULL;
  return PyModule_Create(&kiln_module);
}
