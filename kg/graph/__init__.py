"""The relation index viewed as networkx graphs: NEIGHBORS, walks, budgets. Pure: no session.

- :mod:`kg.graph.neighbors`: the stable edge order, NEIGHBORS over a ``MultiDiGraph``.
- :mod:`kg.graph.traverse`: bounded breadth-first traversal over any neighbor lookup.
- :mod:`kg.graph.rows`: NEIGHBORS rows made when read, from the view's columns.
- :mod:`kg.graph.view`: one branch's graph, brought forward by applying newer versions.
- :mod:`kg.graph.cache`: the process's views, least-recently-used within a memory estimate and a count.
"""
