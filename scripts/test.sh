#!/usr/bin/env bash
# The test suite, as `make test` runs it. With arguments: `pytest ARGS` as given. Without: the
# whole suite in two passes, unit and fault tests on two workers (pytest-xdist: about 1,800 fast
# tests, 3 minutes instead of 10 on 2 cores), then the integration and browser tests in one
# process (they share one Spark session and start servers, Airflows and clusters of their own).
# The Kafka broker and PostgreSQL are started here for both passes, and stopped at the end if
# this script started them: a pytest worker must not stop a server another worker still uses.
set -euo pipefail
cd "$(dirname "$0")/.."
pytest=.venv/bin/pytest
if (($#)); then
  exec "$pytest" "$@"
fi

started=()
cleanup() {
  for script in "${started[@]}"; do "scripts/$script.sh" stop || true; done
}
trap cleanup EXIT
for script in kafka postgres; do
  if ! "scripts/$script.sh" status >/dev/null; then
    "scripts/$script.sh" start
    started+=("$script")
  fi
done

status=0
"$pytest" -n 2 tests/unit tests/faults || status=$?
"$pytest" tests/integration tests/browser || status=$?
exit "$status"
