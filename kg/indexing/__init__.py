"""Derived state: embedding settings, chunk plans, the durable queue, the indexer, re-embed.

The SQL store is the source of truth; everything here brings the search indexes up to date
from it. Imported by the use cases above (:mod:`kg.ops`, :mod:`kg.rag`, :mod:`kg.ragnode`),
never the other way round.
"""
