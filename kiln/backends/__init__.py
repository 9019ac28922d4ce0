"""Backends run jaxprs on buffers. ``reference`` interprets with NumPy impls."""
