#!/usr/bin/env bash
# The test suite, as `make test` runs it. With arguments: `pytest ARGS` as given. Without: the
# whole suite in two passes on two pytest-xdist workers: the unit and fault tests (about 1,800
# fast tests, 3 minutes instead of 10 on 2 cores), then the integration and browser tests with
# `--dist loadfile`: a module's tests stay in one worker, so its module-scoped servers, Airflow
# homes and clusters start once, and each worker shares one Spark session across its modules.
# Much of an integration test is waiting (JVM and Airflow start-ups, task polling), which is
# why two workers pay off on two cores.
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
"$pytest" -n 2 --dist loadfile tests/integration tests/browser || status=$?
exit "$status"
