"""Use cases that write: nodes, relations, branches, repositories, merge and file ingest.

Each function is one write transaction (one revision), all or nothing. Every surface (HTTP,
CLI, the RAG node) calls these; retrieval lives in :mod:`kg.rag`, derived index state in
:mod:`kg.indexing`.
"""
