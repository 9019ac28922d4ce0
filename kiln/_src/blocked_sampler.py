"""``jax._src.blocked_sampler``: random samples that do not depend on how an array is
cut into blocks.

The array of ``total_size`` is tiled by ``tile_size`` (a divisor of every block size
in use). Tile ``t`` (its row-major number in the grid of tiles, the grid rounded up
to cover the array) is sampled with ``fold_in(global_key, t)``, so a block's samples
are the same whatever block size cuts the array. ``blocked_fold_in`` gives the keys
of one block's tiles (a nested list, one level per axis); ``sample_block`` draws the
block from them and joins the tiles.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from kiln import numpy as jnp
from kiln import random

NdKeyList = Any
Shape = Sequence[int]


class SampleFn(Protocol):
    """A sampler called as ``fn(key, *args, shape=tile_size, **kwargs)``."""

    def __call__(self, key, *args, shape: Shape, **kwargs) -> Any:
        ...


def _tiles_per(sizes: Shape, tile_size: Shape, *, round_up: bool) -> tuple:
    if round_up:
        return tuple(-(-s // t) for s, t in zip(sizes, tile_size))
    return tuple(s // t for s, t in zip(sizes, tile_size))


def _tile_number(block_index, block_tiles, grid_tiles, tile_in_block):
    """The row-major number, in the grid ``grid_tiles``, of tile ``tile_in_block`` of the
    block ``block_index`` (a block spans ``block_tiles`` tiles). The index may be
    traced; it is accumulated from the last axis with Python/array arithmetic."""
    number: Any = 0
    stride = 1
    for axis in reversed(range(len(block_index))):
        pos = tile_in_block[axis] + block_index[axis] * block_tiles[axis]
        number = number + pos * stride
        stride = stride * grid_tiles[axis]
    return number


def blocked_fold_in(global_key, total_size: Shape, block_size: Shape, tile_size: Shape,
                    block_index: Sequence[Any]) -> NdKeyList:
    """The keys of the tiles of one block, for block-size-invariant sampling.

    Args:
      global_key: the key shared by every block.
      total_size: the shape of the whole array being sampled.
      block_size: the shape of one block.
      tile_size: the shape of a tile, the unit each key samples; it should divide every
        block size the samples must not depend on.
      block_index: which block (one index per axis; ints or traced integers).

    Returns:
      A nested list (one level per axis, ``block_size[i] // tile_size[i]`` entries at
      level ``i``) of keys: tile ``t`` of the array (row-major over the grid of tiles,
      rounded up to cover ``total_size``) gets ``fold_in(global_key, t)``.
    """
    block_tiles = _tiles_per(block_size, tile_size, round_up=False)
    grid_tiles = _tiles_per(total_size, tile_size, round_up=True)

    def build(prefix: tuple):
        axis = len(prefix)
        if axis == len(block_tiles):
            t = _tile_number(block_index, block_tiles, grid_tiles, prefix)
            return random.fold_in(global_key, t)
        return [build(prefix + (i,)) for i in range(block_tiles[axis])]
    return build(())


def sample_block(sampler_fn: SampleFn, keys: NdKeyList, block_size: Shape, tile_size: Shape,
                 *args, **kwargs):
    """Draw one block's samples from the tile keys ``blocked_fold_in`` gave.

    Args:
      sampler_fn: a sampler such as ``jax.random.uniform``, called as
        ``sampler_fn(key, *args, shape=tile_size, **kwargs)`` for every tile.
      keys: the nested list of tile keys of the block.
      block_size: the shape of one block.
      tile_size: the shape of a tile.
      *args, **kwargs: passed on to ``sampler_fn``.

    Returns:
      The block's samples (shape ``block_size``): the tiles' samples joined along
      every axis.
    """
    block_tiles = _tiles_per(block_size, tile_size, round_up=False)

    def draw(prefix: tuple):
        axis = len(prefix)
        if axis == len(block_tiles):
            k = keys
            for i in prefix:
                k = k[i]
            return sampler_fn(k, *args, shape=tile_size, **kwargs)
        parts = [draw(prefix + (i,)) for i in range(block_tiles[axis])]
        return jnp.concatenate(parts, axis=axis)
    return draw(())


__all__ = ["blocked_fold_in", "sample_block", "NdKeyList", "SampleFn", "Shape"]
