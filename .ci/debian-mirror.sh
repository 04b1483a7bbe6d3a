#!/usr/bin/env bash
# Print the base URI of the Debian archive this machine's apt already uses
# (its main archive, then its security archive with `security`), so that the
# CI scripts fetch from wherever the machine is set up to fetch, and name no
# host of their own.
#
#   bash .ci/debian-mirror.sh            # e.g. the archive of "bookworm main"
#   bash .ci/debian-mirror.sh security   # the archive of "bookworm-security"
set -euo pipefail
want="${1:-main}"
uris() {
    # deb822 files (URIs: lines) and one-line lists (deb URI suite ...).
    { cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}'
      cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
          | awk '$1 == "deb" || $1 == "deb-src" {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; break}}'
    } | grep -E '/debian(-security)?/?$' | sed 's#/$##' | awk '!seen[$0]++'
}
if [[ "$want" == security ]]; then
    uri="$(uris | grep -E -- '-security$' | head -n1 || true)"
else
    uri="$(uris | grep -vE -- '-security$' | head -n1 || true)"
fi
if [[ -z "$uri" ]]; then
    echo "debian-mirror.sh: no Debian archive ($want) in this machine's apt sources" >&2
    exit 1
fi
echo "$uri"
