"""kg: a knowledge-graph service with branching storage for AI agents."""

__version__ = "0.2.0"
