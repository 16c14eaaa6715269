"""Retrieval-augmented generation: ingestion lifecycle, hybrid fusion, ask, graph context."""
