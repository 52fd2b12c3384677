#!/usr/bin/env bash
# chatgate's release binaries: static (CGO_ENABLED=0: the SQLite engine is
# pure Go), stripped (-s -w), free of the builder's paths (-trimpath), with
# the version and the commit stamped into `gateway version` — one per
# platform, and their SHA-256 sums. The Containerfile builds with it too.
#
#   scripts/release.sh                        dist/gateway-linux-amd64, dist/gateway-linux-arm64
#   VERSION=v1.2.0 scripts/release.sh
#   PLATFORMS=linux/amd64 OUT=/tmp/rel scripts/release.sh
#
# VERSION defaults to `git describe --tags --dirty` (else "dev"); COMMIT to
# `git rev-parse HEAD`, with "-dirty" when the work tree has changes —
# the form the binary falls back to when it was built unstamped. Set
# either, even empty, and git is not asked.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${VERSION+set}" ]; then
  VERSION=$(git describe --tags --dirty 2>/dev/null || echo dev)
fi
if [ -z "${COMMIT+set}" ]; then
  COMMIT=$(git rev-parse HEAD 2>/dev/null || true)
  if [ -n "$COMMIT" ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then
    COMMIT+=-dirty
  fi
fi
case "$VERSION$COMMIT" in
*[[:space:]\'\"]*)
  echo "release.sh: VERSION and COMMIT may not contain spaces or quotes" >&2
  exit 2
  ;;
esac
out=${OUT:-dist}
mkdir -p "$out"

built=()
for platform in ${PLATFORMS:-linux/amd64 linux/arm64}; do
  goos=${platform%/*} goarch=${platform#*/}
  bin=gateway-$goos-$goarch
  # -buildvcs=false: the commit is stamped, so the binary does not depend
  # on the state of a checkout (and builds where git is absent).
  CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X main.version=$VERSION -X main.commit=$COMMIT" \
    -o "$out/$bin" ./cmd/gateway
  built+=("$bin")
  echo "$out/$bin: $(wc -c <"$out/$bin") bytes (version $VERSION, commit ${COMMIT:-none})"
done
(cd "$out" && sha256sum "${built[@]}" >SHA256SUMS)
