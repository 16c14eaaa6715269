"""Framework adapters over :mod:`kg.client`: retrievers and tools for agent frameworks.

Each lives in its own module and needs its framework, an optional extra (importing this
package imports none of them):

- :mod:`kg.adapters.langchain`: a LangChain retriever and tool set (``pip install 'kg[langchain]'``).
- :mod:`kg.adapters.llamaindex`: a LlamaIndex retriever (``pip install 'kg[llamaindex]'``).

Both talk to a kg server over HTTP through :class:`kg.client.Client` / :class:`kg.client.AsyncClient`;
:mod:`kg.adapters.hits` holds what they share (the search options, the hits' citation handles).
See docs/guides/frameworks.md.
"""
