"""The renderer's byte-identity harness (``tools/c_snapshot.py``): the corpus renders, the
same program twice gives the same C, and, with ``KILN_C_SNAPSHOT=DIR`` (a directory the
tool wrote before a change), every program's C equals the stored one byte for byte."""
from __future__ import annotations

import importlib.util
import os
import pathlib

import pytest

_TOOL = pathlib.Path(__file__).resolve().parents[2] / "tools" / "c_snapshot.py"


def _tool():
    spec = importlib.util.spec_from_file_location("c_snapshot", _TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def corpus():
    tool = _tool()
    return tool, tool.render_corpus()


def test_corpus_renders(corpus):
    _, texts = corpus
    assert len(texts) >= 15
    for name, text in texts.items():
        assert "void seg0(void **b)" in text, name


def test_render_is_deterministic(corpus):
    tool, texts = corpus
    again = tool.render_corpus(["logsumexp", "layer_norm", "conv", "loops"])
    for name, text in again.items():
        assert text == texts[name], name


def test_corpus_covers_the_loop_plans(corpus):
    """Each loop structure the planner decides appears somewhere in the corpus."""
    _, texts = corpus
    allc = "\n".join(texts.values())
    for needle in ("kiln_steal_next(", "acc_n", "part_n", "_fin(", "kiln_stream(",
                   "__builtin_prefetch(", ", 0, 3)", "j0 = jt *", "cols[", "reduction(+:part)",
                   "for (;;)", "switch (", "seg0_p0", "KILN_SMALL", "--) {"):
        assert needle in allc, needle


def test_tool_compare(corpus, tmp_path):
    tool, texts = corpus
    tool.write({"a": texts["sort"], "b": texts["cumsum"]}, str(tmp_path))
    assert tool.compare({"a": texts["sort"], "b": texts["cumsum"]}, str(tmp_path)) == []
    assert tool.compare({"a": texts["cumsum"]}, str(tmp_path)) == ["a"]


@pytest.mark.skipif(not os.environ.get("KILN_C_SNAPSHOT"),
                    reason="KILN_C_SNAPSHOT=DIR names a stored snapshot")
def test_matches_stored_snapshot(corpus):
    tool, texts = corpus
    assert tool.compare(texts, os.environ["KILN_C_SNAPSHOT"], show=60) == []
