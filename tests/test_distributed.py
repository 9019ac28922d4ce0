"""Multi-process kiln over MPI: a 2-process `mpiexec` run of tests/mpi/prog_pmap.py."""
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


@pytest.mark.skipif(_mpiexec() is None,
                    reason="needs mpi4py and an MPI launcher: pip install 'kiln[mpi]'")
def test_pmap_across_two_mpi_processes(tmp_path):
    env = dict(os.environ)
    env["KILN_MPI_OUT"] = str(tmp_path)
    env.pop("KILN_NUM_CPU_DEVICES", None)
    env["KILN_COMPILE"] = "sync"
    r = subprocess.run([_mpiexec(), "-n", "2", sys.executable,
                        os.path.join(HERE, "mpi", "prog_pmap.py")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    results = {p: ast.literal_eval((tmp_path / f"result{p}.txt").read_text()) for p in (0, 1)}
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
