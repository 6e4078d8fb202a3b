#!/usr/bin/env bash
# Installs what the test suites need beyond npm on a Debian machine of this kind, and only what is
# missing: Debian packages, Go tools built from the Go module proxy (toxiproxy, SeaweedFS, MinIO, Jaeger, syft, h2spec) and
# Python tools from PyPI (schemathesis). `npm test` runs it before vitest, and so does .ci/run
# through `npm test`. It says what it installs; with everything present it only checks (well under
# two seconds). Go and Python tools go to ${ARKVORY_TOOLS_DIR:-/root/.cache/arkvory-tools}, outside
# the clone, so every clone and run reuses them; vitest.config.ts puts its bin/ on PATH.
# Without the rights to install what is missing (Debian packages need root; the tools dir must be
# writable) it names what is missing and the command to run, and exits 1 before any test starts.
set -uo pipefail
cd "$(dirname "$0")/.."

TOOLS_DIR=${ARKVORY_TOOLS_DIR:-/root/.cache/arkvory-tools}
export PATH="$TOOLS_DIR/bin:$PATH"
# This machine kind ships Go in /usr/local/go; a login shell may not have it on PATH.
[ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"

TOXIPROXY_VERSION=v2.12.0
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
SYFT_VERSION=v1.57.1
# h2spec: HTTP/2 conformance (proxy/server/http2.int.test.ts). Its module predates Go modules, hence +incompatible.
H2SPEC_VERSION=v2.2.1+incompatible
# Jaeger all-in-one: the trace backend of proxy/tracing/tracing-jaeger.int.test.ts (OTLP/HTTP in, query API out).
JAEGER_VERSION=v1.76.0
# Keep in step with SCHEMATHESIS_VERSION in test/contract/schemathesis.test.ts.
SCHEMATHESIS_VERSION=4.32.5

# `retrying COMMAND…`: runs it up to three times, 15 s apart. The registries are reached over a
# network that drops a connection now and then (go's checksum lookups, pip, apt); a build that
# fails for its own reasons fails three times, which costs a little time and says the same.
retrying() {
  local attempt
  for attempt in 1 2 3; do
    "$@" && return 0
    [ "$attempt" -lt 3 ] && { echo "test tools: '$1' failed (attempt $attempt of 3); retrying in 15 s" >&2; sleep 15; }
  done
  return 1
}

# ================================= what is missing (checks only) =================================

# --- Debian packages: `need COMMAND PACKAGE` queues PACKAGE when COMMAND is missing ---------------
debian_missing=()
need() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ] || debian_missing+=("$2"); }
need redis-server redis-server        # the test harness starts its own on a free port
need redis-cli redis-tools
need curl curl
need wget wget
need aria2c aria2
need systemd-analyze systemd          # test/contract/deploy.test.ts verifies the units
need nginx nginx-light                # the router test boots the shipped nginx example
need haproxy haproxy                  # the router test boots the shipped HAProxy example
need chromium chromium                # the console browser test (playwright-core drives /usr/bin/chromium)
need mvn maven                        # proxy/content/presign-and-basic.int.test.ts runs the documented Maven example
need dpkg-deb dpkg                    # proxy/content/apt.int.test.ts builds a .deb,
need dpkg-scanpackages dpkg-dev       # writes its Packages index,
need apt-ftparchive apt-utils         # and its Release, then runs apt-get (apt) against a gateway
need wrk wrk                          # bench/
need openssl openssl                  # test/harness/tls-certs.ts makes the test CA and certificates
need testssl testssl.sh               # proxy/tls/tls.int.test.ts checks the TLS listener's protocols, ciphers, vulnerabilities
need h2load nghttp2-client            # HTTP/2 load and conformance (h2load, nghttp) against the TLS listener
need ip iproute2
need strace strace                    # proxy/content/slice-cache-disk-errors.int.test.ts fails a gateway's disk reads (-e inject)
need umoci umoci                      # deploy/container/build.sh packs the image; test/image unpacks it
need skopeo skopeo                    # test/image reads the image archive as podman load would
need strip binutils                   # the image's Node loses its debug sections
need go golang-go                     # only where no Go is installed (this kind has one in /usr/local/go)
# schemathesis runs in a venv of its own; Debian's python3 has neither venv (ensurepip) nor pip.
if ! command -v python3 >/dev/null; then
  debian_missing+=(python3 python3-venv python3-pip)
else
  # venv for schemathesis; pip because proxy/content/presign-and-basic.int.test.ts downloads with it
  # (Basic credentials in the URL). One interpreter start answers both; ensurepip is imported, as
  # Debian's python3 ships a stub of it that refuses to import without python3-venv.
  case $(python3 -c '
import importlib.util
try:
    import ensurepip
    venv = True
except Exception:
    venv = False
print(venv, importlib.util.find_spec("pip") is not None)' 2>/dev/null) in
    'True True') ;;
    'True False') debian_missing+=(python3-pip) ;;
    'False True') debian_missing+=(python3-venv) ;;
    *) debian_missing+=(python3-venv python3-pip) ;;
  esac
fi

# --- Go tools: `go_tool_current NAME VERSION [go install flags…]` ---------------------------------
# A binary in $TOOLS_DIR/bin is reused when its build info says it was built from that module
# version with the same flags (go install names a binary after its package, e.g. cmd/server →
# server, hence NAME).
go_tool_current() {
  local bin="$TOOLS_DIR/bin/$1" version=$2 info
  shift 2
  [ -x "$bin" ] || return 1
  info=$(go version -m "$bin" 2>/dev/null) || return 1
  awk -v v="$version" '$1 == "mod" && $3 == v { found = 1 } END { exit !found }' <<<"$info" && grep -qF -- "$*" <<<"$info"
}
# weed cannot be `go install`ed (its go.mod has replace directives): it is built inside its
# downloaded module directory, and its build info says only "(devel)", so a stamp file beside it
# records the version it was built from; a matching stamp skips the build (many minutes on 2 cores).
weed_current() {
  [ -x "$TOOLS_DIR/bin/weed" ] && [ "$(cat "$TOOLS_DIR/bin/weed.version" 2>/dev/null)" = "$SEAWEEDFS_VERSION" ]
}
# jaeger cannot be `go install`ed either (a replace directive), so its build info says "(devel)";
# the build stamps the version into the binary with -X instead (as Jaeger's release build does, so
# `jaeger version` tells it), and a binary whose build info carries that flag is reused.
JAEGER_FLAGS=-ldflags=-X=github.com/jaegertracing/jaeger/internal/version.latestVersion=$JAEGER_VERSION
jaeger_current() {
  local info
  [ -x "$TOOLS_DIR/bin/jaeger" ] && info=$(go version -m "$TOOLS_DIR/bin/jaeger" 2>/dev/null) || return 1
  grep -qE '^\s+path\s+github.com/jaegertracing/jaeger/cmd/jaeger$' <<<"$info" && grep -qF -- "${JAEGER_FLAGS#-ldflags=}" <<<"$info"
}
# A venv of its own under $TOOLS_DIR (nothing installed into the system Python), its command linked
# into $TOOLS_DIR/bin; complete once the .installed marker is there (written last).
py_tool_current() {
  local command=$1 venv="$TOOLS_DIR/$2-$3"
  [ -f "$venv/.installed" ] && [ "$(readlink "$TOOLS_DIR/bin/$command" 2>/dev/null)" = "$venv/bin/$command" ]
}

TOXIPROXY_FLAGS=-ldflags=-X=github.com/Shopify/toxiproxy/v2.Version=${TOXIPROXY_VERSION#v}
tools_missing=()
# toxiproxy: the chaos suite (chaos/support/toxiproxy.ts) starts it from PATH. The release build
# stamps the version with -X; so does this one, so /version and -version say 2.12.0.
go_tool_current toxiproxy-server "$TOXIPROXY_VERSION" "$TOXIPROXY_FLAGS" || tools_missing+=(toxiproxy)
# S3 servers for the S3 store's tests, at pinned versions.
weed_current || tools_missing+=(seaweedfs)
go_tool_current minio "$MINIO_VERSION" || tools_missing+=(minio)
jaeger_current || tools_missing+=(jaeger)
# syft: the image's SBOM (deploy/container/build.sh).
go_tool_current syft "$SYFT_VERSION" || tools_missing+=(syft)
# h2spec: the HTTP/2 conformance suite run against the TLS listener.
go_tool_current h2spec "$H2SPEC_VERSION" || tools_missing+=(h2spec)
# schemathesis: API contract fuzzing (test/contract/schemathesis.test.ts).
py_tool_current schemathesis schemathesis "$SCHEMATHESIS_VERSION" || tools_missing+=(schemathesis)

if [ ${#debian_missing[@]} -eq 0 ] && [ ${#tools_missing[@]} -eq 0 ]; then
  exit 0
fi

# ============================ may we install it? If not, say who can ==============================

# The directory, or the nearest of its parents that exists, is searchable by this user.
can_enter() { [ -x "$1" ] || { [ ! -e "$1" ] && [ "$1" != / ] && can_enter "$(dirname "$1")"; }; }
refusals=()
needs_root=0
if [ ${#debian_missing[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    refusals+=("Debian packages missing, and there is no apt-get here to install them: ${debian_missing[*]}")
  elif [ "$(id -u)" -ne 0 ]; then
    refusals+=("Debian packages missing (installing them needs root): ${debian_missing[*]}")
    needs_root=1
  fi
fi
own_tools_dir=0
if [ ${#tools_missing[@]} -gt 0 ] && ! { mkdir -p "$TOOLS_DIR/bin" 2>/dev/null && [ -w "$TOOLS_DIR/bin" ]; }; then
  refusals+=("not in $TOOLS_DIR/bin, which this user cannot write: ${tools_missing[*]}")
  # A tools dir this user cannot even enter (the default, under /root) would not help after a
  # root install: the Go and Python tools need no root, only a directory of this user's own.
  if can_enter "$TOOLS_DIR"; then needs_root=1; else own_tools_dir=1; fi
fi
if [ ${#refusals[@]} -gt 0 ]; then
  {
    echo "scripts/test-tools.sh: the tests need what this user cannot install:"
    printf '  - %s\n' "${refusals[@]}"
    if [ "$own_tools_dir" -eq 1 ]; then
      echo "$TOOLS_DIR is not readable by this user; keep the Go and Python tools in a directory of your own:"
      echo "  export ARKVORY_TOOLS_DIR=\$HOME/.cache/arkvory-tools"
    fi
    if [ "$needs_root" -eq 1 ] && [ "$own_tools_dir" -eq 1 ]; then
      echo "and install the Debian packages as root:"
      echo "  sudo apt-get update && sudo apt-get install -y ${debian_missing[*]}"
    elif [ "$needs_root" -eq 1 ]; then
      env_prefix=""
      [ -n "${ARKVORY_TOOLS_DIR:-}" ] && env_prefix="ARKVORY_TOOLS_DIR=$ARKVORY_TOOLS_DIR "
      echo "Run once as root:"
      echo "  sudo ${env_prefix}bash $PWD/scripts/test-tools.sh"
    fi
    echo "then npm test again."
  } >&2
  exit 1
fi

# ======================================= install =================================================

if [ ${#debian_missing[@]} -gt 0 ]; then
  echo "test tools: installing from Debian: ${debian_missing[*]}"
  retrying apt-get update -qq && DEBIAN_FRONTEND=noninteractive retrying apt-get install -y -qq "${debian_missing[@]}" >/dev/null || exit 1
fi

# `go_install NAME PACKAGE VERSION [go install flags…]`: PACKAGE@VERSION as $TOOLS_DIR/bin/NAME,
# built in a temporary directory and moved in whole, so a failed build leaves no half binary.
go_install() {
  local name=$1 package=$2 version=$3
  shift 3
  local bin="$TOOLS_DIR/bin/$name" tmp
  echo "test tools: installing $package@$version as $bin"
  tmp=$(mktemp -d "$TOOLS_DIR/.go-install.XXXXXX") || return 1
  if GOBIN="$tmp" retrying go install "$@" "$package@$version" && mv "$tmp"/* "$bin"; then
    rm -rf "$tmp"
  else
    rm -rf "$tmp"
    return 1
  fi
}

# `py_install COMMAND DISTRIBUTION VERSION`
py_install() {
  local command=$1 dist=$2 version=$3
  local venv="$TOOLS_DIR/$dist-$version"
  if [ ! -f "$venv/.installed" ]; then
    echo "test tools: installing $dist==$version into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" && retrying "$venv/bin/pip" install -q --disable-pip-version-check "$dist==$version" && touch "$venv/.installed" || {
      rm -rf "$venv"
      return 1
    }
  fi
  ln -sfn "$venv/bin/$command" "$TOOLS_DIR/bin/$command"
}

for tool in "${tools_missing[@]}"; do
  case $tool in
    toxiproxy)
      go_install toxiproxy-server github.com/Shopify/toxiproxy/v2/cmd/server "$TOXIPROXY_VERSION" "$TOXIPROXY_FLAGS" || exit 1
      toxiproxy-server -version || exit 1
      ;;
    seaweedfs)
      echo "test tools: building SeaweedFS $SEAWEEDFS_VERSION into $TOOLS_DIR/bin (several minutes)"
      retrying go mod download "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" || exit 1
      (cd "$(go env GOMODCACHE)/github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" && retrying go build -o "$TOOLS_DIR/bin/weed" ./weed) || exit 1
      echo "$SEAWEEDFS_VERSION" >"$TOOLS_DIR/bin/weed.version"
      ;;
    jaeger)
      echo "test tools: building Jaeger $JAEGER_VERSION into $TOOLS_DIR/bin (several minutes)"
      retrying go mod download "github.com/jaegertracing/jaeger@$JAEGER_VERSION" || exit 1
      (cd "$(go env GOMODCACHE)/github.com/jaegertracing/jaeger@$JAEGER_VERSION" &&
        retrying go build "$JAEGER_FLAGS" -o "$TOOLS_DIR/bin/.jaeger.tmp" ./cmd/jaeger) &&
        mv "$TOOLS_DIR/bin/.jaeger.tmp" "$TOOLS_DIR/bin/jaeger" || { rm -f "$TOOLS_DIR/bin/.jaeger.tmp"; exit 1; }
      ;;
    minio)
      go_install minio github.com/minio/minio "$MINIO_VERSION" || exit 1
      ;;
    syft)
      go_install syft github.com/anchore/syft/cmd/syft "$SYFT_VERSION" || exit 1
      ;;
    h2spec)
      go_install h2spec github.com/summerwind/h2spec/cmd/h2spec "$H2SPEC_VERSION" || exit 1
      ;;
    schemathesis)
      py_install schemathesis schemathesis "$SCHEMATHESIS_VERSION" || exit 1
      schemathesis --version || exit 1
      ;;
  esac
done
echo "test tools: ready in $TOOLS_DIR/bin"
