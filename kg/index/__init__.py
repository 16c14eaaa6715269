"""Search indexes behind one protocol: the embedded index (default), later Weaviate."""
