#!/usr/bin/env bash
# Start the machine's local PostgreSQL if it is not accepting connections (trust auth,
# database `test` on 127.0.0.1:5432), then wait until it is up. Exit 1 if it cannot start.
set -u
ready() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
if ready; then exit 0; fi
if ls /etc/postgresql >/dev/null 2>&1; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi
for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
echo "PostgreSQL is not reachable on 127.0.0.1:5432" >&2
exit 1
