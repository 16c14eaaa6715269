"""kg's HTTP API (FastAPI): routes, request and response models, error mapping. No logic."""
