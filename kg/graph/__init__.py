"""The relation index viewed as networkx graphs: NEIGHBORS, walks, budgets."""
