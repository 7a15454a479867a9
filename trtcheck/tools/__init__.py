"""Tools over the library: the ``trtcheck`` command and what only it needs.

``cli`` parses the command line; ``loading`` loads the model a command names (a zoo name, a factory in a
file or module, a ``.pt2``); ``compare`` runs every partitioner on one graph; ``coverage`` measures which
core-ATen ops convert; ``graph_html`` draws a partition; ``gpu_check`` is what the nightly GPU job runs.
"""
