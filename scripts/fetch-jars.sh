#!/usr/bin/env bash
# Fetch the JVM jars listed by include/jvm/*.pom.xml from Maven Central into .cache/jars/<set>/.
# Idempotent: a set is fetched again only when its pom changed (stamp = pom hash).
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${STREAMCORE_JARS:-$PWD/.cache/jars}"
mkdir -p "$cache"
for pom in include/jvm/*.pom.xml; do
  set_name="$(basename "$pom" .pom.xml)"
  dest="$cache/$set_name"
  stamp="$dest/.pom-sha256"
  want="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "jars: $set_name up to date ($(ls "$dest"/*.jar | wc -l) jars in $dest)"
    continue
  fi
  echo "jars: fetching $set_name from Maven Central into $dest ..."
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  # Maven 3.8 prints ANSI resets even in batch mode; strip them (pipefail keeps its status).
  mvn -B -q -s include/jvm/settings.xml -f "$pom" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$dest.tmp" 2>&1 | sed 's/\x1b\[[0-9;]*m//g' \
    || { echo "jars: Maven could not fetch $set_name (see output above); check network access to Maven Central" >&2; exit 1; }
  # Spark ships its own Jackson, Scala, Hadoop, Parquet, log4j... Two versions of one artifact on a
  # classpath break at run time, so drop every jar whose artifact the pyspark wheel already has.
  spark_jars="$(ls -d .venv/lib/python3*/site-packages/pyspark/jars 2>/dev/null | head -1)"
  if [[ "$set_name" == spark-* && -n "$spark_jars" ]]; then
    for jar in "$dest.tmp"/*.jar; do
      artifact="$(basename "$jar" .jar | sed -E 's/-[0-9][0-9A-Za-z.-]*$//')"
      if compgen -G "$spark_jars/${artifact}-[0-9]*.jar" >/dev/null; then rm -f "$jar"; fi
    done
  fi
  echo "$want" > "$dest.tmp/.pom-sha256"
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
  echo "jars: $set_name ready ($(ls "$dest"/*.jar | wc -l) jars)"
done
