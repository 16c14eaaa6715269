"""The RAG node (``POST /api/rag``): its spec, embedded and Weaviate backends."""
