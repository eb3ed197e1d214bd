"""Local copies of the CSS/JS that Great Expectations' Data Docs load from public CDNs.

GX's page templates link bootstrap, jQuery, font-awesome, bootstrap-table, vega... on CDN hosts, so
on a machine without internet the Data Docs render unstyled and their tables and charts do not
work. Each CDN URL names an npm package and a file in it; `scripts/browser.sh assets` fetches the
pinned packages below with `npm pack` into the assets folder (STREAMCORE_UI_ASSETS, default
`.cache/datadocs-assets`), and the plugin rewrites the URLs of served pages to its own routes.

Run as a script, it prints the package specs to fetch (one per line) for scripts/browser.sh.
"""

from __future__ import annotations

import html
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from streamcore.config import project_root

# Every package@version the GX templates link (great_expectations/render/view/templates, GX
# 1.24.1). Range URLs (`vega@5`) resolve to what the CDN served when pinned: a stable page across
# machines rather than whatever is newest.
PACKAGES: dict[str, str] = {
    "bootstrap@4.3.1": "4.3.1",
    "jquery@3.7.1": "3.7.1",
    "popper.js@1.12.9": "1.12.9",
    "bootstrap-datepicker@1.9.0": "1.9.0",
    "bootstrap-table@1.19.0": "1.19.0",
    "bootstrap-table@1.19.1": "1.19.1",
    "@fortawesome/fontawesome-free@6.6.0": "6.6.0",
    "@forevolve/bootstrap-dark@1.1.0": "1.1.0",
    "vega@5": "5.33.1",
    "vega-lite@5": "5.23.0",
    "vega-embed@6": "6.29.0",
}

# CDN URL -> (package, file in the package). `{path}` is the rest of the URL; an empty file means
# the package's own entry point (its `jsdelivr`/`unpkg` field, what those CDNs serve for a bare
# package URL).
_RULES: list[tuple[re.Pattern[str], str, str]] = [
    (
        re.compile(
            r"https://(?:maxcdn|stackpath)\.bootstrapcdn\.com/bootstrap/(?P<v>[^/]+)/(?P<path>.+)"
        ),
        "bootstrap",
        "dist/{path}",
    ),
    (
        re.compile(r"https://code\.jquery\.com/jquery-(?P<v>\d[\d.]*?)(?P<min>\.min)?\.js"),
        "jquery",
        "dist/jquery{min}.js",
    ),
    (
        re.compile(
            r"https://cdnjs\.cloudflare\.com/ajax/libs/popper\.js/(?P<v>[^/]+)/(?P<path>.+)"
        ),
        "popper.js",
        "dist/{path}",
    ),
    (
        re.compile(
            r"https://cdnjs\.cloudflare\.com/ajax/libs/bootstrap-datepicker/(?P<v>[^/]+)/(?P<path>.+)"
        ),
        "bootstrap-datepicker",
        "dist/{path}",
    ),
    (
        re.compile(
            r"https://cdnjs\.cloudflare\.com/ajax/libs/font-awesome/(?P<v>[^/]+)/(?P<path>.+)"
        ),
        "@fortawesome/fontawesome-free",
        "{path}",
    ),
    (
        re.compile(
            r"https://(?:unpkg\.com|cdn\.jsdelivr\.net/npm)/"
            r"(?P<pkg>(?:@[^/@\s]+/)?[^/@\s]+)@(?P<v>[^/\s\"']+)(?:/(?P<path>[^\s\"'?#]*))?"
        ),
        "{pkg}",
        "{path}",
    ),
]

# GX's logo, which its pages load from its own web-assets bucket; GX ships the same files.
_GX_ASSETS = re.compile(
    r"https://great-expectations-web-assets\.s3\.[a-z0-9-]+\.amazonaws\.com/(?P<file>[\w.-]+)"
    r"(?:\?[^\"'\s)]*)?"
)
# find_spec locates the package without importing it (GX takes seconds to import).
_GX_SPEC = importlib.util.find_spec("great_expectations")
GX_STATIC = Path(_GX_SPEC.origin if _GX_SPEC and _GX_SPEC.origin else ".").parent
GX_STATIC = GX_STATIC / "render" / "view" / "static" / "images"

# URLs of assets in served HTML: src/href of script/link/img tags and url(...) in inline CSS.
# Plain <a href> links to websites are navigation, not assets, and stay as they are.
_ASSET_URL = re.compile(
    r"""(?P<pre><(?:script|link|img)\b[^>]*?\b(?:src|href)\s*=\s*["'])(?P<url>https?://[^"']+)"""
    r"""|(?P<css>url\(\s*['"]?)(?P<cssurl>https?://[^'")\s]+)""",
    re.IGNORECASE,
)
_INTEGRITY = re.compile(r"""\s(?:integrity|crossorigin)\s*=\s*["'][^"']*["']""", re.IGNORECASE)


def assets_dir() -> Path:
    """Where `scripts/browser.sh assets` puts the packages (STREAMCORE_UI_ASSETS overrides)."""
    default = project_root() / ".cache" / "datadocs-assets"
    return Path(os.environ.get("STREAMCORE_UI_ASSETS") or default)


def package_dir_name(spec: str) -> str:
    """The folder (and URL segment) of a pinned package: `@scope/name@1.0` -> `scope+name@1.0`."""
    return spec.removeprefix("@").replace("/", "+")


@dataclass(frozen=True)
class Asset:
    """A CDN URL's local file: package folder name and the file's path in it."""

    package: str
    path: str


def resolve(url: str, root: Path | None = None) -> Asset | None:
    """The local asset of a CDN `url`, or None when no pinned package provides it. `root`: the
    assets folder, read for a package's entry point when the URL names no file."""
    for pattern, package_template, path_template in _RULES:
        m = pattern.fullmatch(url)
        if m is None:
            continue
        groups = {k: v or "" for k, v in m.groupdict().items()}
        package = package_template.format(**groups)
        spec = f"{package}@{groups['v']}"
        version = PACKAGES.get(spec)
        if version is None:
            return None
        folder = package_dir_name(f"{package}@{version}")
        path = path_template.format(**groups)
        if not path:
            path = _entry_point(root or assets_dir(), folder)
            if path is None:
                return None
        return Asset(folder, path)
    return None


# Entry points found, by (assets folder, package folder): a fetched package does not change, so
# a page view reads no package.json twice; a package not fetched yet is looked for again.
_ENTRY_POINTS: dict[tuple[Path, str], str] = {}


def _entry_point(root: Path, folder: str) -> str | None:
    found = _ENTRY_POINTS.get((root, folder))
    if found is not None:
        return found
    manifest = root / folder / "package.json"
    if not manifest.is_file():
        return None
    meta = json.loads(manifest.read_text())
    entry = meta.get("jsdelivr") or meta.get("unpkg") or meta.get("browser") or meta.get("main")
    if not isinstance(entry, str):
        return None
    _ENTRY_POINTS[root, folder] = entry.removeprefix("./")
    return _ENTRY_POINTS[root, folder]


def rewrite(page: str, assets_route: str, root: Path | None = None) -> tuple[str, list[str]]:
    """`page` with every CDN asset URL replaced by its local route under `assets_route` (npm
    packages at `<route>/npm/<package>/<file>`, GX's logo at `<route>/gx/<file>`), and the
    external asset URLs left as they were because no local copy exists (fetched packages are
    checked on disk: a package not fetched yet counts as missing)."""
    root = root or assets_dir()
    missing: list[str] = []

    def local(url: str) -> str | None:
        url = html.unescape(url)
        gx = _GX_ASSETS.fullmatch(url)
        if gx:
            return f"{assets_route}/gx/{gx['file']}" if (GX_STATIC / gx["file"]).is_file() else None
        asset = resolve(url, root)
        if asset is None or not (root / asset.package / asset.path).is_file():
            return None
        return f"{assets_route}/npm/{asset.package}/{asset.path}"

    def replace(m: re.Match[str]) -> str:
        url = m["url"] or m["cssurl"]
        found = local(url)
        if found is None:
            missing.append(url)
            return m[0]
        return (m["pre"] or m["css"]) + found

    rewritten = _ASSET_URL.sub(replace, page)
    # Subresource integrity hashes name the CDN's bytes; the local copies are the same files,
    # but a hash over another build would block them, and same-origin files need no CORS mode.
    rewritten = re.sub(
        r"<(script|link)\b[^>]*>",
        lambda m: _INTEGRITY.sub("", m[0]) if "/npm/" in m[0] else m[0],
        rewritten,
    )
    return rewritten, sorted(set(missing))


if __name__ == "__main__":
    # The specs to fetch: `npm pack` takes `name@version`.
    for spec, version in PACKAGES.items():
        name = spec.rsplit("@", 1)[0]
        print(f"{name}@{version}\t{package_dir_name(f'{name}@{version}')}")
