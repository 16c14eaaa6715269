"""kg's typed contract: the request and result models every surface derives from."""
