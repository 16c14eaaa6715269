#!/bin/sh
# kg's container entrypoint: check the settings a served container needs, apply the database
# migrations, then replace this shell with `kg serve` (so it receives the container's signals).
# Any other command runs as a kg command: `docker compose run kg backup /data/backups/today`.
# ENTRYPOINT_KG is the kg command (default `kg`; the tests point it at a checkout).
set -eu

KG="${ENTRYPOINT_KG:-kg}"

fail() {
    echo "error: $*" >&2
    exit 1
}

if [ "$#" -eq 0 ] || [ "$1" = "serve" ]; then
    [ "$#" -gt 0 ] && shift
    # A container listens on its network interface, so keys are on: kg refuses to serve a
    # network without them, and keys need the pepper.
    [ "${KG_AUTH:-}" = "true" ] || fail "KG_AUTH must be true in a container (it listens on ${KG_HOST:-0.0.0.0}): set KG_AUTH=true"
    [ -n "${KG_KEY_PEPPER:-}" ] || fail "KG_KEY_PEPPER is not set: give the container a long random secret (it keys every API key's hash)"
    if [ -z "${KG_DATABASE_URL:-}" ]; then
        [ -n "${KG_DATA_DIR:-}" ] || fail "neither KG_DATABASE_URL nor KG_DATA_DIR is set: say where the store lives"
    fi
    $KG db upgrade
    exec $KG serve --host "${KG_HOST:-0.0.0.0}" --port "${KG_PORT:-8765}" "$@"
fi

exec $KG "$@"
