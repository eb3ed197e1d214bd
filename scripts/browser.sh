#!/usr/bin/env bash
# What the Airflow UI's browser test and the offline Data Docs need, installed when missing
# (idempotent; `make test` runs it first).
#
#   scripts/browser.sh            both of the below
#   scripts/browser.sh chromium   Debian's `chromium` (apt-get when /usr/bin/chromium is missing);
#                                 prints its path. Playwright drives this browser: it never
#                                 downloads one (`playwright install` is not used).
#   scripts/browser.sh assets     the CSS/JS packages that Great Expectations' Data Docs load from
#                                 CDNs (plugins/streamcore_ui_assets.py pins them), with `npm pack`
#                                 into STREAMCORE_UI_ASSETS (default .cache/datadocs-assets)
#
# Environment: STREAMCORE_CHROMIUM (the browser binary, default /usr/bin/chromium),
# STREAMCORE_UI_ASSETS.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
chromium="${STREAMCORE_CHROMIUM:-/usr/bin/chromium}"
assets="${STREAMCORE_UI_ASSETS:-$root/.cache/datadocs-assets}"

say() { echo "browser: $*"; }
fail() { echo "browser: $*" >&2; exit 1; }

install_chromium() {
  if [[ ! -x "$chromium" ]]; then
    [[ "$chromium" == /usr/bin/chromium ]] \
      || fail "STREAMCORE_CHROMIUM=$chromium is not an executable; unset it to install Debian's chromium"
    command -v apt-get >/dev/null \
      || fail "no $chromium and no apt-get to install it; install Chromium and set STREAMCORE_CHROMIUM"
    ((EUID == 0)) || fail "no $chromium; install it as root: apt-get install chromium"
    say "installing Debian's chromium (apt-get, about a minute)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
    [[ -x "$chromium" ]] || fail "apt-get installed chromium but $chromium is still missing"
  fi
  "$chromium" --version >/dev/null 2>&1 || fail "$chromium does not run: $("$chromium" --version 2>&1 | tail -n 1)"
  echo "$chromium"
}

# One folder per package@version, unpacked from the npm tarball; a folder exists only once
# complete (unpacked beside it, then renamed), so an interrupted fetch is redone.
fetch_assets() {
  command -v npm >/dev/null || fail "npm is needed to fetch the Data Docs assets: apt-get install npm"
  [[ -x "$root/.venv/bin/python" ]] || fail "no .venv; run \`make venv\` first"
  mkdir -p "$assets"
  local spec folder tmp tarball fetched=0
  while IFS=$'\t' read -r spec folder; do
    [[ -d "$assets/$folder" ]] && continue
    tmp="$(mktemp -d "$assets/.fetch-XXXXXX")"
    tarball="$(cd "$tmp" && npm pack --silent --loglevel=error "$spec" 2>"$tmp/npm.log" | tail -n 1)" \
      || { cat "$tmp/npm.log" >&2; rm -rf "$tmp"; fail "npm pack $spec failed (above); is the npm registry reachable?"; }
    mkdir "$tmp/unpacked"
    tar -xzf "$tmp/$tarball" -C "$tmp/unpacked" --strip-components=1
    mv "$tmp/unpacked" "$assets/$folder"
    rm -rf "$tmp"
    fetched=$((fetched + 1))
  done < <("$root/.venv/bin/python" "$root/plugins/streamcore_ui_assets.py")
  say "Data Docs assets in $assets ($fetched fetched now)"
}

case "${1:-all}" in
  chromium) install_chromium ;;
  assets) fetch_assets ;;
  all)
    install_chromium
    fetch_assets
    ;;
  *)
    echo "usage: $0 [chromium|assets]" >&2
    exit 2
    ;;
esac
