#!/usr/bin/env bash
# The app's files in the image (deploy/container/build.sh): the files git tracks under the app's
# directories, as they are in the working tree (a changed one makes the revision -dirty), tests left
# out. Never a file git does not track, ignored or not: a stray .env, key or data directory beside the
# sources stays out of the image.
#
# Usage: deploy/container/app-files.sh SOURCE            prints the files, one per line, sorted
#        deploy/container/app-files.sh SOURCE DEST       copies them, with package.json and
#                                                        package-lock.json, under DEST (made if missing)
# SOURCE is a git checkout; the paths are relative to it.
set -euo pipefail
export LC_ALL=C

fail() { echo "deploy/container/app-files.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] || [ $# -eq 2 ] || { echo "usage: $0 SOURCE [DEST]" >&2; exit 2; }
SOURCE=$1
DEST=${2:+$(realpath -m "$2")}
APP_DIRS=(bin lib proxy policy storage-adapter migrations client)

cd "$SOURCE"
tracked=$(git -c core.quotePath=false ls-files --cached -- "${APP_DIRS[@]}") ||
  fail "$SOURCE is not a git checkout: the image holds the files git tracks there"
# A tracked file deleted in the working tree is not packed.
mapfile -t files < <(printf '%s\n' "$tracked" | grep -v -E '\.test\.ts$' | sort -u |
  while IFS= read -r f; do [ -n "$f" ] && [ -f "$f" ] && printf '%s\n' "$f"; done)
[ ${#files[@]} -gt 0 ] || fail "no tracked app files under ${APP_DIRS[*]} in $SOURCE"

if [ -z "$DEST" ]; then
  printf '%s\n' "${files[@]}"
else
  mkdir -p "$DEST"
  cp --parents -t "$DEST" package.json package-lock.json "${files[@]}"
fi
