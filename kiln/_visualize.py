"""``jax.debug.visualize_sharding`` / ``visualize_array_sharding``: a table of which
devices hold which block of a 1-D or 2-D array, drawn with ``rich`` (as JAX does; ``rich``
is needed only when called).

Layout (JAX's): a grid of the sharding's blocks, one cell per block naming its devices
(``"CPU 0,1"``). A cell's width is ``block_fraction * base_width * 2.5`` characters (clamped
to ``[min_width, max_width]``) and its height ``block_fraction * base_height`` lines (1 for a
1-D array), where ``base_height = int(10 * scale)`` and ``base_width`` is ``base_height``
times the array's aspect ratio (columns / rows). Without a colour terminal (output
captured, ``use_color=False``) cells have square box lines; with one they are coloured
from ``color_map`` (default: matplotlib's ``tab20b`` when matplotlib is installed).
"""
from __future__ import annotations

import importlib.util

import numpy as np

__all__ = ["visualize_sharding"]


def _block_index(size: int, slc) -> int:
    """Which block along a dimension of length ``size`` the slice ``slc`` is."""
    if isinstance(slc, int):
        slc = slice(slc, slc + 1)
    start, stop = slc.start, slc.stop
    if start is None and stop is None:
        return 0
    return (start or 0) // ((size if stop is None else stop) - (start or 0))


def _extent(size: int, slc) -> int:
    if isinstance(slc, int):
        return 1
    start = slc.start or 0
    stop = size if slc.stop is None else slc.stop
    return stop - start


def _hex(color) -> str:
    if isinstance(color, str):
        return color
    r, g, b = (int(c * 255) for c in color[:3])
    return f"#{r:02X}{g:02X}{b:02X}"


def _text_on(background: str) -> str:
    r, g, b = (int(background[i:i + 2], 16) for i in (1, 3, 5))
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 186 else "#ffffff"


def _colors(color_map, n: int):
    """``n`` colours spread over the map, consecutive cells far apart (JAX's order)."""
    values = np.linspace(0, 1, n)
    step = n // 2 + (1 if n % 2 == 0 else 0)
    i = 0
    for _ in range(n):
        yield color_map(values[i])
        i = (i + step) % n


def visualize_sharding(shape, sharding, *, use_color: bool = True, scale: float = 1.,
                       min_width: int = 9, max_width: int = 80, color_map=None):
    """Print which devices hold which block of an array of ``shape`` (1-D or 2-D) laid
    out by ``sharding``."""
    if importlib.util.find_spec("rich") is None:
        raise ValueError("`visualize_sharding` requires `rich` to be installed.")
    import rich.align
    import rich.box
    import rich.console
    import rich.padding
    import rich.style
    import rich.table

    shape = tuple(shape)
    if len(shape) not in (1, 2):
        raise ValueError("`visualize_sharding` only works for shapes with 1 and 2 dimensions.")
    console = rich.console.Console(width=max_width)
    use_color = use_color and console.color_system is not None
    if use_color and not color_map:
        try:
            import matplotlib as mpl
            color_map = mpl.colormaps["tab20b"]
        except ModuleNotFoundError:
            use_color = False

    base_height = int(10 * scale)
    aspect = (shape[1] if len(shape) == 2 else 1) / shape[0]
    base_width = int(base_height * aspect)

    kind = next(iter(sharding.device_set)).platform.upper()
    devices: dict = {}      # (row, col) -> device ids
    fractions: dict = {}    # (row, col) -> (height fraction or None, width fraction)
    for dev, idx in sharding.devices_indices_map(shape).items():
        idx = tuple(idx)
        if len(shape) == 2:
            cell = (_block_index(shape[0], idx[0]), _block_index(shape[1], idx[1]))
            fractions[cell] = (_extent(shape[0], idx[0]) / shape[0],
                               _extent(shape[1], idx[1]) / shape[1])
        else:
            cell = (0, _block_index(shape[0], idx[0]))
            fractions[cell] = (None, _extent(shape[0], idx[0]) / shape[0])
        devices.setdefault(cell, set()).add(dev.id)
    rows = max(r for r, _ in devices) + 1
    cols = max(c for _, c in devices) + 1

    colors = _colors(color_map, rows * cols) if use_color else None
    table = rich.table.Table(show_header=False, show_lines=not use_color, padding=0,
                             highlight=not use_color, pad_edge=False,
                             box=None if use_color else rich.box.SQUARE)
    for r in range(rows):
        cells = []
        for c in range(cols):
            text = f"{kind} " + ",".join(str(i) for i in sorted(devices[r, c]))
            h_frac, w_frac = fractions[r, c]
            width = min(max(int(w_frac * base_width * 2.5), min_width), max_width)
            height = 1 if h_frac is None else int(h_frac * base_height)
            left, extra = divmod(width - len(text) - 2, 2)
            right = left + extra
            top, extra = divmod(height - 2, 2)
            bottom = top + extra
            bg = fg = None
            if use_color:
                bg = _hex(next(colors))
                fg = _text_on(bg)
                top, right, bottom, left = top + 1, right + 1, bottom + 1, left + 1
            cells.append(rich.padding.Padding(
                rich.align.Align(text, "center", vertical="middle"),
                (max(top, 0), max(right, 0), max(bottom, 0), max(left, 0)),
                style=rich.style.Style(bgcolor=bg, color=fg)))
        table.add_row(*cells)
    console.print(table, end="\n\n")
