"""What tests share, each defined once: fixtures (``fixtures``: a local Ray), runners (``cli``:
the ``trinity`` command), engines and configs (``engine_helpers``), ports, PostgreSQL clusters,
generated tasks and models, and the house's readers (``house``)."""
