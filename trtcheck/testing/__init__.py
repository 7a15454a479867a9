"""For test suites: hypothesis strategies of random graphs, and the pytest plugin.

``random_graphs`` draws ATen graphs to partition and compile (composable hypothesis strategies);
``pytest_plugin`` is the ``pytest11`` entry point (``--trtcheck`` and its options, the hooks), over ``fixtures``
(``trtcheck_verify``, ``trtcheck_compile``, ``trtcheck_benchmark``, ...), ``session`` (the run's resolved options
and what its tests collect) and ``summary`` (the header and the terminal summary); ``timing`` times benchmarks.
"""
