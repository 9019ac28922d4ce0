"""kiln.profiler (issue 13): traces that TensorBoard's profile plugin and Perfetto read,
per-kernel times of compiled programs, the summary, annotations, JAX's start/stop errors,
device_memory_profile (pprof) and kiln.live_arrays."""
import gc
import glob
import gzip
import json
import os
import struct
import threading
import urllib.request

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.profiler as prof
from kiln.compiler.build import executable
from kiln.profiler import _kernels

# ---- a minimal protobuf decoder of the test's own (independent of kiln's) ------------


def _varint(b, i):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _fields(b):
    i, out = 0, []
    while i < len(b):
        k, i = _varint(b, i)
        f, t = k >> 3, k & 7
        if t == 0:
            v, i = _varint(b, i)
        elif t == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif t == 1:
            v, i = b[i:i + 8], i + 8
        elif t == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise AssertionError(f"wire type {t}")
        out.append((f, v))
    return out


def _packed(b):
    out, i = [], 0
    while i < len(b):
        v, i = _varint(b, i)
        out.append(v)
    return out


# ---- the MLP training step ------------------------------------------------------------

SIZES = (784, 512, 512, 10)


def _mlp_loss(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = kiln.nn.relu(h @ w + b)
    w, b = params[-1]
    logits = h @ w + b
    return -jnp.mean(jnp.sum(kiln.nn.log_softmax(logits) * y, axis=1))


def _train_step(params, x, y):
    loss, grads = kiln.value_and_grad(_mlp_loss)(params, x, y)
    return loss, kiln.tree_util.tree_map(lambda p, g: p - 0.05 * g, params, grads)


TRAIN_STEP_LINE = _train_step.__code__.co_firstlineno
LOSS_LINE = _mlp_loss.__code__.co_firstlineno
HIDDEN_LINE = LOSS_LINE + 3       # h = kiln.nn.relu(h @ w + b)
LOGITS_LINE = LOSS_LINE + 5       # logits = h @ w + b (its backward pass too)
UPDATE_LINE = TRAIN_STEP_LINE + 2  # tree_map(lambda p, g: p - 0.05 * g, ...)


def _mlp_data(batch=8):
    rng = np.random.default_rng(0)
    params = [(jnp.asarray(rng.normal(size=(m, n)).astype(np.float32) * 0.05),
               jnp.zeros(n, jnp.float32)) for m, n in zip(SIZES[:-1], SIZES[1:])]
    x = jnp.asarray(rng.normal(size=(batch, SIZES[0])).astype(np.float32))
    y = kiln.nn.one_hot(jnp.arange(batch) % 10, 10)
    return params, x, y


@pytest.fixture(scope="module")
def mlp_trace(tmp_path_factory):
    """Profile three steps of a freshly jitted MLP step (so tracing and compiling happen
    inside the trace); returns the log dir, the losses, and the unprofiled losses."""
    log = str(tmp_path_factory.mktemp("mlp_trace"))
    params, x, y = _mlp_data()
    ref_step = kiln.jit(lambda p, x, y: _train_step(p, x, y))
    p_ref, ref_losses = params, []
    for _ in range(3):
        loss, p_ref = ref_step(p_ref, x, y)
        ref_losses.append(float(loss))
    step = kiln.jit(_train_step)
    losses = []
    with prof.trace(log, create_perfetto_trace=True):
        assert executable.PROFILING
        for i in range(3):
            with prof.StepTraceAnnotation("train", step_num=i):
                loss, params = step(params, x, y)
                losses.append(float(loss.block_until_ready()))
    assert not executable.PROFILING
    return log, losses, ref_losses


def _run_dir(log):
    runs = glob.glob(os.path.join(log, "plugins", "profile", "*"))
    assert len(runs) == 1, runs
    return runs[0]


def _host_events(log):
    path = glob.glob(os.path.join(_run_dir(log), "*.xplane.pb"))[0]
    plane = prof.ProfileData.from_file(path).find_plane_with_name("/host:CPU")
    return [e for line in plane.lines for e in line.events]


def test_mlp_profile_files_and_results(mlp_trace):
    log, losses, ref_losses = mlp_trace
    run = _run_dir(log)
    names = sorted(os.listdir(run))
    assert "perfetto_trace.json.gz" in names
    assert any(n.endswith(".xplane.pb") for n in names)
    # Profiling changes no result (the per-kernel build runs the same kernels).
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    assert losses[2] < losses[0]


def test_mlp_profile_spans_and_kernels(mlp_trace):
    log = mlp_trace[0]
    events = _host_events(log)
    cats = {}
    for e in events:
        cats.setdefault(dict(e.stats)["category"], []).append(e)
    for c in ("step", "trace", "compile", "execute", "kernel"):
        assert c in cats, (c, sorted(cats))
    names = {e.name for e in events}
    assert "trace _train_step" in names and "compile jit(_train_step)" in names
    assert "build" in names and "lower" in names and "render_c" in names
    assert any(n.startswith("pass ") for n in names)
    assert [dict(e.stats)["step_num"] for e in cats["step"]] == [0, 1, 2]
    assert len([e for e in cats["execute"] if e.name == "jit(_train_step)"]) == 3
    # 3 forward and 5 backward matrix products per step (the input's gradient is unused).
    gemms = [e for e in cats["kernel"] if dict(e.stats)["kind"] == "gemm"]
    assert len(gemms) == 3 * 8, len(gemms)
    shapes = {e.name for e in gemms}
    assert "dot_general 8x784@784x512" in shapes and "dot_general 8x512@512x10" in shapes
    # Kernels run inside their execution, which runs inside its step.
    ex = [e for e in cats["execute"] if e.name == "jit(_train_step)"]
    for k in cats["kernel"]:
        assert any(x.start_ns <= k.start_ns and k.end_ns <= x.end_ns + 1 for x in ex)
    for x in ex:
        assert any(s.start_ns <= x.start_ns and x.end_ns <= s.end_ns + 1 for s in cats["step"])
    st = dict(gemms[0].stats)
    assert st["program"] == "_train_step" and st["primitives"] == "dot_general"
    # Each kernel names the user's lines of the equations it computes.
    first = {dict(e.stats)["source"] for e in gemms if e.name == "dot_general 8x784@784x512"}
    assert first == {f"{__file__}:{HIDDEN_LINE} (_mlp_loss)"}
    back = {dict(e.stats)["source"] for e in gemms if e.name == "dot_general 8x10@10x512"}
    assert back == {f"{__file__}:{LOGITS_LINE} (_mlp_loss)"}
    # p - 0.05 * g: one fma (XLA's contraction, kiln/compiler/passes/xla_fma.py)
    upd = [dict(e.stats) for e in cats["kernel"] if dict(e.stats)["primitives"] == "fma"]
    assert upd and all(u["source"] == f"{__file__}:{UPDATE_LINE} (<lambda>)" for u in upd)


def test_mlp_summary_names_matmul_kernels_and_lines(mlp_trace, capsys):
    log = mlp_trace[0]
    s = prof.summary(log)
    gemm_rows = [r for r in s.kernels if r.kind == "gemm"]
    assert len(gemm_rows) == 8 and all(r.calls == 3 for r in gemm_rows)
    assert all(r.name.startswith("dot_general ") for r in gemm_rows)
    lines = {f"test_profiler.py:{n}" for n in range(LOSS_LINE, UPDATE_LINE + 1)}
    assert all(r.source.split("/")[-1].split(" ")[0] in lines for r in s.kernels), \
        [r.source for r in s.kernels]
    assert abs(sum(r.percent for r in s.kernels) - 100.0) < 1e-6
    ops = {r.name: r for r in s.ops}
    assert ops["dot_general"].calls == 24
    assert ops["dot_general"].total_ns == pytest.approx(sum(r.total_ns for r in gemm_rows))
    text = str(s)
    assert "dot_general 8x784@784x512" in text and f"test_profiler.py:{HIDDEN_LINE}" in text
    assert "compile jit(_train_step)" in text
    from kiln.profiler.__main__ import main
    assert main([log, "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "Kernels" in out and "dot_general" in out and out.count("\n") < 40


def test_mlp_perfetto_json(mlp_trace):
    log = mlp_trace[0]
    with gzip.open(os.path.join(_run_dir(log), "perfetto_trace.json.gz")) as f:
        doc = json.load(f)
    evs = doc["traceEvents"]
    meta = [e for e in evs if e["ph"] == "M"]
    assert {"process_name", "thread_name"} <= {e["name"] for e in meta}
    spans = [e for e in evs if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    by_name = {}
    for e in spans:
        by_name.setdefault(e["name"], []).append(e)
    assert len(by_name["jit(_train_step)"]) == 3 and len(by_name["train"]) == 3
    assert by_name["dot_general 8x784@784x512"][0]["args"]["kind"] == "gemm"
    # The same events as the XSpace.
    xs = _host_events(log)
    assert sorted(e["name"] for e in spans) == sorted(e.name for e in xs)


def test_mlp_xplane_read_by_jax(mlp_trace):
    jax = pytest.importorskip("jax")
    log = mlp_trace[0]
    path = glob.glob(os.path.join(_run_dir(log), "*.xplane.pb"))[0]
    theirs = jax.profiler.ProfileData.from_file(path)
    plane = theirs.find_plane_with_name("/host:CPU")
    jevs = [e for line in plane.lines for e in line.events]
    kevs = _host_events(log)
    assert len(jevs) == len(kevs)
    for a, b in zip(jevs, kevs):
        assert a.name == b.name and a.duration_ns == b.duration_ns
        assert abs(a.start_ns - b.start_ns) < 1e3
        assert list(a.stats) == list(b.stats)
    assert [p.name for p in theirs.planes] == [p.name for p in
                                               prof.ProfileData.from_file(path).planes]


def test_mlp_xplane_read_by_tensorboard_profile_plugin(mlp_trace):
    pytest.importorskip("xprof")
    from xprof.convert import raw_to_tool_data
    log = mlp_trace[0]
    path = glob.glob(os.path.join(_run_dir(log), "*.xplane.pb"))[0]
    data, content_type = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
    assert content_type == "application/json" and data
    doc = json.loads(data)
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    names = [e["name"] for e in spans]
    assert names.count("jit(_train_step)") == 3
    assert names.count("dot_general 8x784@784x512") == 3
    assert "compile jit(_train_step)" in names and "trace _train_step" in names
    # The plugin recognises the step markers (StepTraceAnnotation's step_num).
    steps = [e for e in spans if e["name"].startswith("train")]
    assert sorted(e["args"]["step_num"] for e in steps) == ["0", "1", "2"]
    threads = [e for e in doc["traceEvents"] if e.get("name") == "thread_name"]
    assert threads and threads[0]["args"]["name"] == threading.main_thread().name


# ---- annotations, sessions, errors -----------------------------------------------------

def test_annotations(tmp_path):
    @prof.annotate_function
    def work(a):
        return a + 1

    @prof.annotate_function
    def other():
        return 2

    from functools import partial

    @partial(prof.annotate_function, name="named_event", tag="t")
    def named():
        return 3

    assert work.__name__ == "work" and work(1) == 2    # no trace: just calls
    with prof.TraceAnnotation("outside"):
        pass
    assert not prof.TraceAnnotation.is_enabled()
    with prof.trace(str(tmp_path)):
        assert prof.TraceAnnotation.is_enabled()
        with prof.TraceAnnotation("outer", color="red") as t:
            t.set_metadata(items=3)
            with prof.TraceAnnotation("inner"):
                work(1)
        assert other() == 2 and named() == 3
        with prof.StepTraceAnnotation("train", step_num=7):
            pass
    evs = {e.name: e for e in _host_events(str(tmp_path))}
    assert "outside" not in evs
    assert dict(evs["outer"].stats) == {"category": "annotation", "color": "red", "items": 3}
    inner, outer = evs["inner"], evs["outer"]
    assert outer.start_ns <= inner.start_ns and inner.end_ns <= outer.end_ns
    w = evs["test_annotations.<locals>.work"]         # default name: the qualified name
    assert inner.start_ns <= w.start_ns and w.end_ns <= inner.end_ns
    assert "test_annotations.<locals>.other" in evs
    assert dict(evs["named_event"].stats) == {"category": "annotation", "tag": "t"}
    assert dict(evs["train"].stats) == {"category": "step", "_r": 1, "step_num": 7}


def test_annotate_function_default_name_is_qualname(tmp_path):
    class C:
        @staticmethod
        def f():
            return 1

    g = prof.annotate_function(C.f)
    with prof.trace(str(tmp_path)):
        g()
    names = [e.name for e in _host_events(str(tmp_path))]
    assert names == [C.f.__qualname__]


def test_start_stop_errors(tmp_path):
    with pytest.raises(RuntimeError, match="^No profile started$"):
        prof.stop_trace()
    prof.start_trace(str(tmp_path / "a"))
    try:
        with pytest.raises(RuntimeError, match=r"^Profile has already been started\. Only "
                                               r"one profile may be run at a time\.$"):
            prof.start_trace(str(tmp_path / "b"))
        with pytest.raises(RuntimeError, match="already been started"):
            with prof.trace(str(tmp_path / "c")):
                pass
    finally:
        prof.stop_trace()
    with pytest.raises(RuntimeError, match="No profile started"):
        prof.stop_trace()
    assert os.path.isdir(tmp_path / "a" / "plugins" / "profile")
    assert not os.path.exists(tmp_path / "b") and not os.path.exists(tmp_path / "c")
    # The context manager stops (and writes) when its body raises.
    with pytest.raises(ZeroDivisionError):
        with prof.trace(str(tmp_path / "d")):
            raise ZeroDivisionError
    assert not prof.TraceAnnotation.is_enabled()
    assert glob.glob(str(tmp_path / "d" / "plugins" / "profile" / "*" / "*.xplane.pb"))


def test_server_functions():
    with pytest.raises(NotImplementedError, match="start_server"):
        prof.start_server(9999)
    with pytest.raises(ValueError, match="^No active profiler server.$"):
        prof.stop_server()
    with pytest.raises(NotImplementedError, match="register_subprocess"):
        prof.register_subprocess(1, 2)


def test_api_surface_matches_jax():
    jax = pytest.importorskip("jax")
    import inspect
    for name in ("trace", "start_trace", "stop_trace", "device_memory_profile",
                 "save_device_memory_profile", "annotate_function", "start_server"):
        ours = inspect.signature(getattr(prof, name))
        theirs = inspect.signature(getattr(jax.profiler, name))
        assert list(ours.parameters) == list(theirs.parameters), name
        assert [p.default for p in ours.parameters.values()] == \
            [p.default for p in theirs.parameters.values()], name
    assert {n for n in dir(jax.profiler) if not n.startswith("_")} <= set(dir(prof))
    o = prof.ProfileOptions()
    j = jax.profiler.ProfileOptions()
    for k in ("host_tracer_level", "python_tracer_level", "duration_ms", "session_id"):
        assert getattr(o, k) == getattr(j, k), k


def test_runs_get_their_own_directories_and_threads_their_lines(tmp_path):
    f = kiln.jit(lambda x: jnp.sin(x) * 2.0)
    x = jnp.ones((4,))
    f(x)

    def worker():
        f(x).block_until_ready()

    for _ in range(2):
        with prof.trace(str(tmp_path)):
            t = threading.Thread(target=worker, name="kiln-test-worker")
            t.start()
            t.join()
            f(x)
    runs = glob.glob(str(tmp_path / "plugins" / "profile" / "*"))
    assert len(runs) == 2
    path = glob.glob(os.path.join(runs[0], "*.xplane.pb"))[0]
    plane = prof.ProfileData.from_file(path).find_plane_with_name("/host:CPU")
    lines = {ln.name: ln for ln in plane.lines}
    assert set(lines) == {"kiln-test-worker", threading.main_thread().name}
    for ln in lines.values():
        assert [e.name for e in ln.events].count("jit(<lambda>)") == 1


def test_island_and_reference_events(tmp_path):
    # sort is a host island between native kernels; a program of islands only runs on
    # the reference backend.
    f = kiln.jit(lambda x: jnp.sort(x * 2.0) + 1.0)
    g = kiln.jit(lambda x: jnp.sort(x))
    x = jnp.asarray(np.arange(6, 0, -1, dtype=np.float32))
    np.testing.assert_array_equal(f(x), np.sort(np.asarray(x) * 2) + 1)
    with prof.trace(str(tmp_path)):
        y = f(x)
        z = g(x)
    np.testing.assert_array_equal(y, np.sort(np.asarray(x) * 2) + 1)
    np.testing.assert_array_equal(z, np.sort(np.asarray(x)))
    evs = _host_events(str(tmp_path))
    isl = [e for e in evs if dict(e.stats)["category"] == "island"]
    assert [e.name for e in isl] == ["sort 6 (host)"]
    assert dict(isl[0].stats)["primitives"] == "sort"
    kernels = [e.name for e in evs if dict(e.stats)["category"] == "kernel"]
    assert kernels == ["mul 6", "add 6"]
    refs = [e.name for e in evs if dict(e.stats)["category"] == "reference"]
    assert refs == ["jit(<lambda>) on the reference backend"]
    assert "sort 6 (host)" in str(prof.summary(str(tmp_path)))


def test_loop_body_steps_are_timed_inside_the_loop(tmp_path):
    # A fori_loop compiled as one native loop: its body's GEMM and fused kernels get
    # their own events (aggregated per call, inside the loop's event), with run counts.
    from kiln import lax

    @kiln.jit
    def f(x, w):
        def body(i, c):
            x, h = c
            return jnp.tanh(x * 0.5 + 0.1), jnp.tanh(h @ w)
        return lax.fori_loop(0, 7, body, (x, jnp.ones((16, 16), jnp.float32)))

    x = jnp.asarray(np.linspace(-1, 1, 256, dtype=np.float32))
    w = jnp.asarray(np.full((16, 16), 0.01, np.float32))
    want = f(x, w)
    with prof.trace(str(tmp_path)):
        got = f(x, w)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))   # same bits
    evs = _host_events(str(tmp_path))
    loops = [e for e in evs if dict(e.stats)["category"] == "loop kernel"]
    names = sorted(e.name for e in loops)
    assert any(n.startswith("dot_general 16x16@16x16 (loop body, 7 runs)") for n in names)
    assert any("tanh" in n and "(loop body, 7 runs)" in n for n in names)
    assert all(dict(e.stats)["runs"] == 7 for e in loops)
    (scan,) = [e for e in evs if dict(e.stats)["category"] == "kernel"
               and "iterations" in e.name]
    for e in loops:        # inside the loop's own event
        assert scan.start_ns <= e.start_ns and e.end_ns <= scan.end_ns + 1000
    text = str(prof.summary(str(tmp_path)))
    assert "Steps of native loop bodies" in text and "dot_general 16x16@16x16" in text


def test_segment_granularity(tmp_path, monkeypatch):
    monkeypatch.setattr(_kernels, "granularity", "segment")
    f = kiln.jit(lambda a, b: jnp.tanh(a @ b).sum(axis=0))
    a = jnp.ones((64, 64))
    with prof.trace(str(tmp_path)):
        out = f(a, a)
    np.testing.assert_allclose(out, np.full(64, 64 * np.tanh(64.0)), rtol=1e-6)
    kernels = [e for e in _host_events(str(tmp_path)) if dict(e.stats)["category"] == "kernel"]
    assert len(kernels) == 1                     # one C function, timed whole
    st = dict(kernels[0].stats)
    assert st["kind"] == "segment" and st["steps"] >= 2
    assert st["primitives"].startswith("dot_general") and "tanh" in st["primitives"]


def test_profiling_off_records_nothing(tmp_path):
    from kiln.profiler import _recorder
    f = kiln.jit(lambda x: x + 1.0)
    x = jnp.ones(3)
    assert _recorder.session is None and not _recorder.active
    assert not executable.PROFILING
    f(x)
    assert _recorder.span("x") is _recorder.span("y")      # the shared no-op
    with prof.trace(str(tmp_path)):
        f(x)
    assert _recorder.session is None and not executable.PROFILING


def test_perfetto_link_serves_the_file(tmp_path, monkeypatch, capsys):
    from kiln.profiler import _perfetto
    with prof.trace(str(tmp_path)):
        pass
    path = glob.glob(str(tmp_path / "plugins" / "profile" / "*" / "perfetto_trace.json.gz"))[0]
    got = {}

    def fetch(url):
        def run():
            with urllib.request.urlopen(url, timeout=10) as r:
                got["body"] = r.read()
                got["cors"] = r.headers.get("Access-Control-Allow-Origin")
        got["thread"] = threading.Thread(target=run)
        got["thread"].start()

    _perfetto.serve_for_perfetto_ui(path, port=0, ready=fetch)
    got["thread"].join(10)
    with open(path, "rb") as f:
        assert got["body"] == f.read() and got["cors"] == "*"
    assert "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:" in capsys.readouterr().out
    calls = []
    monkeypatch.setattr(_perfetto, "serve_for_perfetto_ui", lambda p: calls.append(p))
    with prof.trace(str(tmp_path / "link"), create_perfetto_link=True):
        pass
    assert len(calls) == 1 and calls[0].endswith("perfetto_trace.json.gz")


def test_summary_errors(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="xplane"):
        prof.summary(str(tmp_path))
    from kiln.profiler.__main__ import main
    assert main([str(tmp_path)]) == 1
    assert "no .xplane.pb" in capsys.readouterr().err


# ---- device memory profile, live arrays ------------------------------------------------

def _decode_pprof(blob):
    prof_bytes = gzip.decompress(blob)
    fs = _fields(prof_bytes)
    strings = [v.decode() for f, v in fs if f == 6]
    st = lambda i: strings[i]  # noqa: E731
    sample_types = []
    for f, v in fs:
        if f == 1:
            d = dict(_fields(v))
            sample_types.append((st(d[1]), st(d[2])))
    funcs = {}
    for f, v in fs:
        if f == 5:
            d = dict(_fields(v))
            funcs[d[1]] = st(d[2])
    locs = {}
    for f, v in fs:
        if f == 4:
            d = _fields(v)
            lid = dict(d)[1]
            lines = [dict(_fields(x)) for g, x in d if g == 4]
            locs[lid] = [funcs[ln[1]] for ln in lines]
    samples = []
    for f, v in fs:
        if f == 2:
            d = _fields(v)
            loc_ids = [x for g, w in d if g == 1 for x in _packed(w)]
            values = [x for g, w in d if g == 2 for x in _packed(w)]
            labels = {st(dict(_fields(w))[1]): st(dict(_fields(w))[2]) for g, w in d if g == 3}
            samples.append(([fn for lid in loc_ids for fn in locs[lid]], values, labels))
    return strings, sample_types, samples


def test_device_memory_profile_parses():
    x = jnp.asarray(np.arange(12 * 34, dtype=np.float32).reshape(12, 34))
    h = kiln.jit(lambda a: a * 3.0)
    h(x)
    strings, sample_types, samples = _decode_pprof(prof.device_memory_profile())
    assert strings[0] == ""
    assert sample_types == [("allocations", "count"), ("space", "bytes")]
    mine = [s for s in samples if s[0] == ["float32[12,34]"]]
    assert mine and mine[0][1] == [1, 12 * 34 * 4]
    assert mine[0][2] == {"kind": "buffer", "device": "cpu:0"}
    buffers = [s for s in samples if s[2].get("kind") == "buffer"]
    assert len(buffers) >= len(kiln.live_arrays())
    exes = [s for s in samples if s[2].get("kind") == "executable"]
    assert any(s[0] == ["jit(<lambda>)"] and s[1] == [1, 0] for s in exes)


def test_device_memory_profile_like_jax():
    jax = pytest.importorskip("jax")
    keep = jax.numpy.ones((5, 7))
    _, jtypes, jsamples = _decode_pprof(jax.profiler.device_memory_profile())
    _, ktypes, ksamples = _decode_pprof(prof.device_memory_profile())
    assert ktypes == jtypes
    jb = [s for s in jsamples if s[2].get("kind") == "buffer"]
    kb = [s for s in ksamples if s[2].get("kind") == "buffer"]
    assert jb and kb and set(jb[0][2]) == set(kb[0][2]) == {"kind", "device"}
    assert keep.shape == (5, 7)


def test_device_memory_profile_bytes_per_device(tmp_path):
    from kiln.sharding import NamedSharding, P
    mesh = kiln.make_mesh((4,), ("d",), devices=kiln.devices()[:4])
    s = kiln.device_put(jnp.zeros((8, 16), jnp.float32), NamedSharding(mesh, P("d")))
    _, _, samples = _decode_pprof(prof.device_memory_profile("cpu"))
    mine = [x for x in samples if x[0] == ["float32[8,16]"] and x[1] == [1, 2 * 16 * 4]]
    assert sorted(x[2]["device"] for x in mine)[:4] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    path = tmp_path / "mem.prof"
    prof.save_device_memory_profile(str(path))
    assert _decode_pprof(path.read_bytes())[1] == [("allocations", "count"), ("space", "bytes")]
    assert s.shape == (8, 16)
    with pytest.raises(RuntimeError, match="Unknown backend"):
        prof.device_memory_profile("gpu")


def test_live_arrays():
    gc.collect()
    before = {id(a) for a in kiln.live_arrays()}
    a = jnp.arange(5.0)
    b = kiln.jit(lambda v: v * 2)(a)
    c = a + b
    live = kiln.live_arrays()
    ids = {id(x) for x in live}
    assert {id(a), id(b), id(c)} <= ids
    assert all(type(x) is type(a) for x in live)
    new = ids - before
    assert len(new) >= 3
    e = jnp.zeros((7, 13, 3))
    assert any(x.shape == (7, 13, 3) for x in kiln.live_arrays())
    del live, e
    gc.collect()
    assert not any(x.shape == (7, 13, 3) for x in kiln.live_arrays())
    d = jnp.ones(3)
    d.delete()
    assert id(d) not in {id(x) for x in kiln.live_arrays("cpu")}
    with pytest.raises(RuntimeError, match="Unknown backend"):
        kiln.live_arrays("gpu")
    assert isinstance(kiln.live_arrays(), list)


def test_live_arrays_matches_jax_semantics():
    jax = pytest.importorskip("jax")
    x = jax.numpy.ones(4)
    y = jnp.ones(4)
    jl, kl = jax.live_arrays(), kiln.live_arrays()
    assert any(a is x for a in jl) and any(a is y for a in kl)
    x.delete()
    y.delete()
    assert not any(a is x for a in jax.live_arrays())
    assert not any(a is y for a in kiln.live_arrays())


def test_protowire_roundtrip():
    from kiln.profiler import _protowire as W
    buf = bytearray()
    W.put_varint(buf, 1, 300)
    W.put_varint(buf, 2, -5)
    W.put_bytes(buf, 3, "héllo")
    W.put_double(buf, 4, 2.5)
    W.put_packed(buf, 5, [1, 2 ** 40, 0])
    fs = W.fields(bytes(buf))
    assert [f for f, _, _ in fs] == [1, 2, 3, 4, 5]
    assert fs[0][2] == 300 and W.as_int64(fs[1][2]) == -5
    assert fs[2][2].decode() == "héllo" and W.as_double(fs[3][2]) == 2.5
    assert W.unpack_varints(fs[4][2]) == [1, 2 ** 40, 0]
    assert _fields(bytes(buf))[3] == (4, struct.pack("<d", 2.5))
    with pytest.raises(ValueError):
        W.fields(b"\x0a\x05ab")
