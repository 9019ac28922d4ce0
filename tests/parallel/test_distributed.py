"""Multi-process kiln over MPI: a 2-process `mpiexec` run of tests/parallel/mpi/prog_pmap.py."""
import ast
import os
import shutil
import subprocess
import sys

import pytest

import kiln

HERE = os.path.dirname(os.path.abspath(__file__))


def _mpiexec():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    return shutil.which("mpiexec") or shutil.which("mpirun")


def test_single_process_defaults():
    assert kiln.process_count() == 1 and kiln.process_index() == 0
    assert not kiln.distributed.is_initialized()
    from kiln.experimental import multihost_utils as mhu
    assert mhu.process_allgather(kiln.numpy.ones(2)).shape == (1, 2)
    assert mhu.process_allgather(kiln.numpy.ones(2), tiled=True).shape == (2,)
    mhu.sync_global_devices("x")
    kiln.devices()
    with pytest.raises(RuntimeError, match="before any kiln computation"):
        kiln.distributed.initialize()


needs_mpi = pytest.mark.skipif(
    _mpiexec() is None, reason="needs mpi4py and an MPI launcher: pip install 'kiln[mpi]'")


def _run_mpi(tmp_path, prog: str, stem: str) -> dict:
    env = dict(os.environ)
    env["KILN_MPI_OUT"] = str(tmp_path)
    env.pop("KILN_NUM_CPU_DEVICES", None)
    env["KILN_COMPILE"] = "sync"
    r = subprocess.run([_mpiexec(), "-n", "2", sys.executable, os.path.join(HERE, "mpi", prog)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return {p: ast.literal_eval((tmp_path / f"{stem}{p}.txt").read_text()) for p in (0, 1)}


def test_single_process_global_array_helpers():
    import numpy as np

    from kiln.experimental import multihost_utils as mhu
    from kiln.sharding import Mesh, NamedSharding
    from kiln.sharding import PartitionSpec as P
    mesh = Mesh(np.array(kiln.devices()[:2]), ("x",))
    x = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    a = kiln.make_array_from_process_local_data(NamedSharding(mesh, P("x")), x)
    assert a.is_fully_addressable and a.shape == (4, 2)
    assert [s.data.tolist() for s in a.addressable_shards] == [x[:2].tolist(), x[2:].tolist()]
    with pytest.raises(ValueError, match="global_shape should be None or equal to"):
        kiln.make_array_from_process_local_data(NamedSharding(mesh, P("x")), x, (8, 2))
    g = mhu.host_local_array_to_global_array(x, mesh, P("x"))
    assert g.sharding == NamedSharding(mesh, P("x")) and np.asarray(g).tolist() == x.tolist()
    assert mhu.global_array_to_host_local_array(g, mesh, P("x")) is g
    with pytest.raises(ValueError, match="not a valid input to the pspecs"):
        mhu.host_local_array_to_global_array(x, mesh, None)
    assert mesh.local_mesh is mesh and mesh.local_devices == list(mesh.devices.flat)


@needs_mpi
def test_pmap_across_two_mpi_processes(tmp_path):
    results = _run_mpi(tmp_path, "prog_pmap.py", "result")
    for p in (0, 1):
        res = results[p]
        assert res["psum"] == [6.0, 6.0]
        assert res["pmax"] == [3.0, 3.0]
        assert res["pmean"] == [1.5, 1.5]
        assert res["index"] == [2 * p, 2 * p + 1]
        assert res["gather"] == [[0.0, 1.0, 2.0, 3.0]] * 2
        assert res["perm"] == [float((2 * p - 1) % 4), float(2 * p)]
        assert res["norm"] == pytest.approx([(2 * p) / 6, (2 * p + 1) / 6])
        assert res["big"] == [[6.0] * 3] * 2
        assert res["ints"] == [2, 2]
        assert res["allgather"] == [0.0, 1.0]
        assert res["bcast"] == [10.0]


def _rows(lo, hi):
    return [[3.0 * r, 3.0 * r + 1, 3.0 * r + 2] for r in range(lo, hi)]


def _add(a, b):
    return [[u + v for u, v in zip(x, y)] for x, y in zip(a, b)]


@needs_mpi
def test_global_arrays_and_shard_map_across_two_mpi_processes(tmp_path):
    """Mesh ('p': 2 processes, 'l': 2 local devices); the global value is rows 0..7 of
    arange(24).reshape(8, 3); device (p, l) holds rows 2(2p+l), 2(2p+l)+1."""
    from kiln.parallel.global_array import FETCH_ERROR
    results = _run_mpi(tmp_path, "prog_shard_map.py", "shard")
    whole = _rows(0, 8)
    blk = {(p, q): _rows(2 * (2 * p + q), 2 * (2 * p + q) + 2) for p in (0, 1) for q in (0, 1)}
    for p in (0, 1):
        res = results[p]
        assert res["x_shape"] == (8, 3) and res["x_addressable"] is False
        assert res["x_shards"] == [(2 * p + q, 2 * (2 * p + q), blk[p, q]) for q in (0, 1)]
        assert res["fetch"] == FETCH_ERROR
        assert res["repr"] == "Array(shape=(8, 3), dtype=float32)"
        assert res["rows_blocks"] == [_rows(4 * p, 4 * p + 4)] * 2
        assert res["rep"] == ((8, 3), whole, False)
        assert res["gather_x"] == whole and res["single"] == whole
        assert res["gather_untiled"] == ("Gathering global non-fully-addressable arrays only "
                                         "supports tiled=True")
        assert res["callback"] == [[10 * v for v in r] for r in whole]
        # collectives over 'p' cross processes; over 'l' they stay inside one
        assert res["sm_psum_p"] == ((4, 3), _add(blk[0, 0], blk[1, 0]) + _add(blk[0, 1], blk[1, 1]))
        assert res["sm_psum_l"] == ((4, 3), _add(blk[0, 0], blk[0, 1]) + _add(blk[1, 0], blk[1, 1]))
        assert res["sm_gather_p"] == ((8, 3), blk[0, 0] + blk[1, 0] + blk[0, 1] + blk[1, 1])
        assert res["sm_perm_p"] == ((8, 3), blk[1, 0] + blk[1, 1] + blk[0, 0] + blk[0, 1])
        total = _add(_add(blk[0, 0], blk[0, 1]), _add(blk[1, 0], blk[1, 1]))
        assert res["sm_psum_all"] == ((2, 3), total) and res["psum_all_local"] == total
        assert res["sm_pmax_p"] == ((4, 3), blk[1, 0] + blk[1, 1])
        assert res["sm_gather_l"] == ((8, 3), whole)
        assert res["sm_perm_l"] == ((8, 3), blk[0, 1] + blk[0, 0] + blk[1, 1] + blk[1, 0])
        assert res["sm_index"] == ((4,), [0, 1, 2, 3])
        assert res["jit_sm_equal"] is True
        # jit(in_shardings/out_shardings) data-parallel steps equal the unsharded ones
        assert res["dp"] == (True, True, True, True, False, "P()")
        assert res["dp_jaxpr_has_psum"] is True
        assert res["hl_global"] == ((8,), [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0])
        assert res["hl_back"] == ((4,), [10.0 * p + i for i in range(4)])
        assert res["hl_global2"] == ((8,), [[10.0 * p, 10.0 * p + 1], [10.0 * p + 2,
                                                                       10.0 * p + 3]])
        assert res["reshard"] == [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0]
        assert res["pmap_groups"] == [2.0, 4.0]
