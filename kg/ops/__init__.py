"""The use cases: every write, and the reads the adapters answer with.

A write takes a :class:`kg.context.UnitOfWork` (the write transaction and its caller) first
and never opens a transaction; an adapter calls it through :func:`kg.context.run`, which
commits, then runs its after-commit hooks. A read takes ``(services, caller, ...)``. The
common parameters (``uow``, ``services``, ``caller``, ``repo``, ``branch``, ``workspace``,
``path``, ``message``, ``actor``, ``at_revision``, ``limit``, ``cursor``, ``session``,
``view``) and errors are described once, in :mod:`kg.context`. Retrieval is :mod:`kg.rag`'s.
"""
