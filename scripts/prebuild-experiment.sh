#!/usr/bin/env bash
# Prebuilds a kernel experiment kept as a patch (bench/experiments/*.patch, see its README) for an A/B
# on the GPU machine: applies the patch to a throwaway worktree of HEAD and runs scripts/prebuild.sh
# there, so the working tree is untouched and the patch never lands by accident.
#   scripts/prebuild-experiment.sh PATCH OUT-FOLDER
# Then, on the GPU machine (one call): PREBUILT=OUT-FOLDER BASE_PREBUILT=<prebuild.sh of HEAD>
# AB_ARGS="..." scripts/gpu-check.sh ab. The patch must apply to HEAD; one that no longer does is
# reported and nothing is built.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 2 ] || { echo "usage: $0 PATCH OUT-FOLDER" >&2; exit 2; }
PATCH=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
NAME=$(basename "$PATCH" .patch)
TREE=$(mktemp -d "${TMPDIR:-/tmp}/normkit-exp-$NAME.XXXXXX")
cleanup() { git -C "$ROOT" worktree remove --force "$TREE" >/dev/null 2>&1 || rm -rf "$TREE"; }
trap cleanup EXIT
git -C "$ROOT" worktree add --detach "$TREE" HEAD >/dev/null
git -C "$TREE" apply --check "$PATCH" || { echo "prebuild-experiment: $NAME does not apply to HEAD" >&2; exit 1; }
git -C "$TREE" apply "$PATCH"
bash "$TREE/scripts/prebuild.sh" "$OUT" "$TREE/build-prebuilt"
echo "$NAME on $(git -C "$ROOT" rev-parse --short HEAD): $OUT"
