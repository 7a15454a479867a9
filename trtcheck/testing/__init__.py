"""For test suites: hypothesis strategies of random graphs, and the pytest plugin.

``random_graphs`` draws ATen graphs to partition and compile (composable hypothesis strategies);
``pytest_plugin`` is the ``pytest11`` entry point: ``--trtcheck``, the matrix and the fixtures.
"""
