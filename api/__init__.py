"""kg's HTTP API (FastAPI): routes, request and response models, error mapping. No logic."""

from starlette.convertors import CONVERTOR_TYPES, PathConvertor


class _AnyPath(PathConvertor):
    """Starlette's ``path`` convertor, matching a newline too (``.*`` does not): a node path
    holding one (``%0A``) reaches its route and gets the path checks' 422 (control
    characters), not a 404 of no route."""

    regex = "(?s:.*)"


# Before any route is declared (their patterns are compiled then): this package's modules do.
CONVERTOR_TYPES["path"] = _AnyPath()
