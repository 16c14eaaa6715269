"""The MCP server: kg's use cases as Model Context Protocol tools and resources.

An adapter like the HTTP routes and the CLI, and nothing of its own: every tool parses its
arguments, makes one call to a use case (:mod:`kg.ops`, :mod:`kg.rag`, :mod:`kg.context`) with
the caller its request carries, and answers what that call returned. Who may do what is decided
there, never here.

- :mod:`kg.mcp.server` builds the :class:`mcp.server.mcpserver.MCPServer` (tools, the node
  resource template, the per-caller tool list);
- :mod:`kg.mcp.changes` serves a branch's change feed as a resource and notifies the sessions
  subscribed to it;
- :mod:`kg.mcp.auth` checks the API keys of a streamable HTTP request through the SDK's token
  verification.

The HTTP transport is mounted by ``api/app.py`` under ``/mcp/{repo}/{branch}``; ``kg mcp``
(:mod:`kg.cli`) runs the same server over stdio.
"""
