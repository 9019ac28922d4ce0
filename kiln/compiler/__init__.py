"""kiln's compiler: jaxpr passes, kernel IR, C renderer, build and cache."""

# C text that layers above the compiler own and the rendered programs include, by name:
# ``kiln.random`` registers its Threefry (``"threefry"``) and XLA-math (``"xla_math"``)
# kernels when it is imported (the compiler does not import it).
c_sources: dict[str, str] = {}


def register_c_source(name: str, text: str) -> None:
    """Make ``text`` the C source that ``name`` stands for in the compiler's preludes."""
    c_sources[name] = text
