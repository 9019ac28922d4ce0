"""Renderings of kiln's optimised program in XLA's HLO and StableHLO syntax, used only by
``Lowered.compiler_ir()``.
"""
