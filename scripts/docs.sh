#!/usr/bin/env bash
# The docs site built with --strict into a temporary directory, then removed: a warning
# (a broken link or anchor, a page missing from the nav, a reference page the code can
# no longer generate) fails it. `make lint` and scripts/test.sh run it.
#   scripts/docs.sh [mkdocs build args...]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

site="$(mktemp -d)"
trap 'rm -rf "$site"' EXIT
# NO_MKDOCS_2_WARNING: mkdocs-material's notice about MkDocs 2, printed on every build.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet -f mkdocs.yml -d "$site" "$@"
