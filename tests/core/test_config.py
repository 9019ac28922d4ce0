"""Tests of kiln.config: flags, update/read, env parsing, callbacks, context managers."""

from __future__ import annotations

import sys

import pytest

from kiln.config import (
    Config,
    config,
    config_context,
    debug_infs,
    debug_nans,
    disable_jit,
    enable_x64,
    explain_cache_misses,
)

# ``kiln.config`` the attribute is the Config object (as ``jax.config``); the module is here.
config_module = sys.modules["kiln.config"]

DEFAULTS = {
    "jax_enable_x64": False,
    "jax_disable_jit": False,
    "jax_debug_nans": False,
    "jax_debug_infs": False,
    "jax_num_cpu_devices": -1,
    "jax_cpu_enable_async_dispatch": True,
    "jax_explain_cache_misses": False,
    "jax_threefry_partitionable": True,
    "jax_default_matmul_precision": None,
    "jax_numpy_rank_promotion": "allow",
    "jax_numpy_dtype_promotion": "standard",
    "jax_explicit_x64_dtypes": "warn",
    "jax_platforms": None,
    "jax_platform_name": "",
    "jax_default_prng_impl": "threefry2x32",
    "jax_enable_custom_prng": False,
    "jax_legacy_prng_key": "allow",
    "jax_log_compiles": False,
    "jax_check_tracer_leaks": False,
    "jax_enable_checks": False,
    "jax_disable_bwd_checks": False,
    "jax_traceback_filtering": "auto",
    "jax_dynamic_shapes": False,
    "jax_check_static_indices": False,
    "jax_ragged_dot_use_ragged_dot_instruction": True,
    "jax_random_seed_offset": 0,
    "jax_debug_key_reuse": False,
    "jax_no_execution": False,
    "jax_default_device": None,
    "jax_transfer_guard": None,
    "jax_transfer_guard_host_to_device": None,
    "jax_transfer_guard_device_to_device": None,
    "jax_transfer_guard_device_to_host": None,
    "jax_remove_size_one_mesh_axis_from_type": False,
    "jax_auto_pcast": True,
    "jax_error_checking_behavior_nan": "ignore",
    "jax_error_checking_behavior_divide": "ignore",
    "jax_error_checking_behavior_oob": "ignore",
    "kiln_backend": "cpu",
    "kiln_compile": "sync",
    "kiln_warn_retrace": False,
    "kiln_retrace_warning_threshold": 10,
}


@pytest.fixture
def cfg():
    return Config()


def test_defaults_are_plain_attributes(cfg):
    assert cfg.values == DEFAULTS
    for name, value in DEFAULTS.items():
        assert getattr(cfg, name) == value
        assert cfg.read(name) == value
        assert name in vars(cfg)  # plain instance attribute: no property on the read path
    assert set(cfg.flag_names) == set(DEFAULTS)


def test_global_config_has_defaults_unless_env_set(monkeypatch):
    # The test process may run with JAX_*/KILN_* set; compare against a fresh read.
    fresh = Config()
    fresh._read_env()
    # tests/conftest.py turns on jax_enable_checks for the whole suite.
    fresh.update("jax_enable_checks", True)
    # ... and compiles jitted programs before their first call returns.
    fresh.update("kiln_compile", "sync")
    # ... and runs over 8 virtual devices (pmap/shard_map tests).
    fresh.update("jax_num_cpu_devices", 8)
    assert config.values == fresh.values


def test_update_and_read(cfg):
    cfg.update("jax_enable_x64", True)
    assert cfg.jax_enable_x64 is True and cfg.read("jax_enable_x64") is True
    cfg.update("jax_num_cpu_devices", 8)
    assert cfg.jax_num_cpu_devices == 8
    cfg.update("jax_numpy_rank_promotion", "raise")
    assert cfg.jax_numpy_rank_promotion == "raise"
    cfg.update("jax_numpy_dtype_promotion", "strict")
    assert cfg.values["jax_numpy_dtype_promotion"] == "strict"
    cfg.update("jax_default_matmul_precision", "highest")
    assert cfg.jax_default_matmul_precision == "highest"
    cfg.update("jax_platforms", "cpu")
    assert cfg.jax_platforms == "cpu"


def test_values_is_a_snapshot(cfg):
    v = cfg.values
    v["jax_enable_x64"] = True
    assert cfg.jax_enable_x64 is False


def test_unknown_flag(cfg):
    with pytest.raises(AttributeError, match="Unrecognized config option: jax_nope"):
        cfg.update("jax_nope", True)
    with pytest.raises(AttributeError, match="jax_nope"):
        cfg.read("jax_nope")
    with pytest.raises(AttributeError, match="jax_nope"):
        cfg.on_change("jax_nope", lambda v: None)
    with pytest.raises(AttributeError):
        cfg.jax_nope = 1
    with pytest.raises(AttributeError):
        config_context(jax_nope=1)


def test_value_validation(cfg):
    cfg.update("jax_enable_x64", 1)
    assert cfg.jax_enable_x64 is True
    cfg.update("jax_enable_x64", "false")
    assert cfg.jax_enable_x64 is False
    import numpy as np

    cfg.update("jax_debug_nans", np.bool_(True))
    assert cfg.jax_debug_nans is True
    with pytest.raises(TypeError):
        cfg.update("jax_enable_x64", 2)
    with pytest.raises(TypeError):
        cfg.update("jax_enable_x64", None)
    with pytest.raises(ValueError):
        cfg.update("jax_enable_x64", "maybe")
    with pytest.raises(TypeError):
        cfg.update("jax_num_cpu_devices", 2.5)
    with pytest.raises(TypeError):
        cfg.update("jax_num_cpu_devices", True)
    cfg.update("jax_num_cpu_devices", "3")
    assert cfg.jax_num_cpu_devices == 3
    with pytest.raises(ValueError, match="allow"):
        cfg.update("jax_numpy_rank_promotion", "sometimes")
    with pytest.raises(ValueError, match="strict"):
        cfg.update("jax_numpy_dtype_promotion", "loose")
    with pytest.raises(ValueError):
        cfg.update("jax_default_prng_impl", "mt19937")
    with pytest.raises(ValueError):
        cfg.update("jax_traceback_filtering", "everything")
    # A failed update leaves the old value.
    assert cfg.jax_numpy_rank_promotion == "allow"
    assert cfg.jax_enable_x64 is False


def test_attribute_assignment_goes_through_update(cfg):
    seen = []
    cfg.on_change("jax_debug_infs", seen.append)
    cfg.jax_debug_infs = True
    assert cfg.jax_debug_infs is True and seen == [True]
    with pytest.raises(ValueError):
        cfg.jax_numpy_rank_promotion = "bad"


def test_on_change_callbacks(cfg):
    seen = []
    fn = cfg.on_change("jax_enable_x64", lambda v: seen.append(("a", v)))
    cfg.on_change("jax_enable_x64", lambda v: seen.append(("b", v)))
    other = []
    cfg.on_change("jax_debug_nans", other.append)
    cfg.update("jax_enable_x64", True)
    cfg.update("jax_enable_x64", "0")  # the callback receives the coerced value
    assert seen == [("a", True), ("b", True), ("a", False), ("b", False)]
    assert other == []
    cfg.remove_on_change("jax_enable_x64", fn)
    cfg.update("jax_enable_x64", True)
    assert seen[-1] == ("b", True) and len(seen) == 5


def test_callback_runs_after_value_is_set(cfg):
    seen = []
    cfg.on_change("jax_num_cpu_devices", lambda v: seen.append(cfg.jax_num_cpu_devices))
    cfg.update("jax_num_cpu_devices", 4)
    assert seen == [4]


# ---------------------------------------------------------------------------
# environment variables
# ---------------------------------------------------------------------------


def _clear_env(monkeypatch):
    import os

    for var in list(os.environ):
        if var.startswith(("JAX_", "KILN_")):
            monkeypatch.delenv(var)


@pytest.mark.parametrize("raw,expected", [
    ("1", True), ("true", True), ("True", True), ("yes", True), ("on", True), ("t", True),
    ("0", False), ("false", False), ("FALSE", False), ("no", False), ("off", False),
])
def test_env_bool(monkeypatch, raw, expected):
    _clear_env(monkeypatch)
    monkeypatch.setenv("JAX_ENABLE_X64", raw)
    cfg = Config()
    cfg._read_env()
    assert cfg.jax_enable_x64 is expected


def test_env_all_flag_kinds(monkeypatch):
    _clear_env(monkeypatch)
    monkeypatch.setenv("JAX_DISABLE_JIT", "1")
    monkeypatch.setenv("KILN_DEBUG_NANS", "true")
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "4")
    monkeypatch.setenv("JAX_NUMPY_RANK_PROMOTION", "warn")
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("JAX_DEFAULT_MATMUL_PRECISION", "highest")
    monkeypatch.setenv("JAX_THREEFRY_PARTITIONABLE", "0")
    cfg = Config()
    cfg._read_env()
    assert cfg.jax_disable_jit is True
    assert cfg.jax_debug_nans is True
    assert cfg.jax_num_cpu_devices == 4
    assert cfg.jax_numpy_rank_promotion == "warn"
    assert cfg.jax_platforms == "cpu"
    assert cfg.jax_default_matmul_precision == "highest"
    assert cfg.jax_threefry_partitionable is False
    assert cfg.jax_enable_x64 is False


def test_env_kiln_prefix_wins(monkeypatch):
    _clear_env(monkeypatch)
    monkeypatch.setenv("JAX_ENABLE_X64", "1")
    monkeypatch.setenv("KILN_ENABLE_X64", "0")
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "2")
    monkeypatch.setenv("KILN_NUM_CPU_DEVICES", "6")
    cfg = Config()
    cfg._read_env()
    assert cfg.jax_enable_x64 is False
    assert cfg.jax_num_cpu_devices == 6


def test_env_explicit_mapping_and_errors():
    cfg = Config()
    cfg._read_env({"KILN_ENABLE_X64": "y", "JAX_DEBUG_INFS": "on"})
    assert cfg.jax_enable_x64 is True and cfg.jax_debug_infs is True
    with pytest.raises(ValueError, match="JAX_ENABLE_X64"):
        Config()._read_env({"JAX_ENABLE_X64": "perhaps"})
    with pytest.raises(ValueError, match="JAX_NUM_CPU_DEVICES"):
        Config()._read_env({"JAX_NUM_CPU_DEVICES": "many"})
    with pytest.raises(ValueError):
        Config()._read_env({"JAX_NUMPY_DTYPE_PROMOTION": "loose"})


def test_reload_reads_env(monkeypatch):
    import importlib

    _clear_env(monkeypatch)
    monkeypatch.setenv("KILN_ENABLE_CHECKS", "1")
    spec = importlib.util.find_spec("kiln.config")
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)  # a separate module object: the global config is untouched
    assert fresh.config.jax_enable_checks is True
    assert fresh.config is not config
    assert config_module.config is config


# ---------------------------------------------------------------------------
# context managers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("cm,flag", [
    (disable_jit, "jax_disable_jit"),
    (enable_x64, "jax_enable_x64"),
    (debug_nans, "jax_debug_nans"),
    (debug_infs, "jax_debug_infs"),
    (explain_cache_misses, "jax_explain_cache_misses"),
])
def test_context_managers_restore(cm, flag):
    before = getattr(config, flag)
    with cm():
        assert getattr(config, flag) is True
        with cm(False):
            assert getattr(config, flag) is False
        assert getattr(config, flag) is True
    assert getattr(config, flag) is before


def test_context_manager_restores_on_error():
    with pytest.raises(RuntimeError):
        with enable_x64(True):
            assert config.jax_enable_x64
            raise RuntimeError("boom")
    assert config.jax_enable_x64 is False


def test_context_managers_as_decorators():
    @debug_nans()
    def f():
        return config.jax_debug_nans

    assert f() is True
    assert config.jax_debug_nans is False

    @config_context(jax_numpy_rank_promotion="raise")
    def g(depth):
        assert config.jax_numpy_rank_promotion == "raise"
        return g(depth - 1) if depth else depth  # re-entrant

    assert g(3) == 0
    assert config.jax_numpy_rank_promotion == "allow"


def test_config_context_several_flags_and_short_names():
    with config_context(jax_enable_x64=True, debug_infs=True, numpy_dtype_promotion="strict"):
        assert config.jax_enable_x64 and config.jax_debug_infs
        assert config.jax_numpy_dtype_promotion == "strict"
    assert config.values["jax_enable_x64"] is False
    assert config.jax_debug_infs is False
    assert config.jax_numpy_dtype_promotion == "standard"


def test_config_context_bad_value_restores_earlier_flags():
    with pytest.raises(ValueError):
        with config_context(jax_enable_x64=True, jax_numpy_rank_promotion="bad"):
            pass
    assert config.jax_enable_x64 is False


def test_context_manager_callbacks_run_on_enter_and_exit():
    cfg = Config()
    seen = []
    cfg.on_change("jax_disable_jit", seen.append)
    with config_context(cfg, jax_disable_jit=True):
        pass
    assert seen == [True, False]
