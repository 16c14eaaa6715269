"""The use cases: every write, and the reads the adapters answer with.

A write use case takes a :class:`kg.context.UnitOfWork` (the write transaction and its caller)
as its first argument and never opens a transaction itself; an adapter calls it through
:func:`kg.context.run`, which commits and then runs its after-commit hooks. A read takes the
services and the caller. Every surface (HTTP, CLI, the RAG node, the agent functions) calls
these; retrieval lives in :mod:`kg.rag`, derived index state in :mod:`kg.indexing`.

Every use case takes ``(uow, ...)`` or ``(services, caller, ...)``; these and the other common
parameters (``repo``, ``branch``, ``workspace``, ``path``, ``message``, ``actor``,
``at_revision``, ``limit``, ``cursor``; ``session`` and ``view`` in the helpers) are described
once, in :mod:`kg.context` ("Common parameters"), and not again in each docstring.
"""
