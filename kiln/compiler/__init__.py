"""kiln's compiler: jaxpr passes, kernel IR, C renderer, build and cache."""
