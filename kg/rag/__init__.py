"""Retrieval and the agent functions: search, rank fusion, graph context, ask, entities."""
