"""Embedders and LLMs behind small protocols."""
