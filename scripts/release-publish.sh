#!/usr/bin/env bash
# The release's build-push-sign-record sequence, one target after another, with the appliance's
# own commands: what .github/workflows/release.yml runs on a version tag, and what
# tests/integration/test_release_publish.py runs against a registry on 127.0.0.1.
#
#   scripts/release-publish.sh REGISTRY KEY OUT TARGET...
#
# REGISTRY  host[:port][/namespace] the images are pushed to (ghcr.io/OWNER in the workflow)
# KEY       the release's private key file (or key directory); its public half must be pinned
#           in the lock (`appliance image pin-key`), or nothing is pushed
# OUT       a directory that gets TARGET.json per target: reference, digest, bytes to pull
# Each target's image is built (or reused while its inputs are unchanged), pushed by digest,
# and its record, signed by KEY, written to the lock's published_images. Environment:
# APPLIANCE (the command, default `python3 -m appliance`), LOCK (default: the checkout's),
# SOURCE (default canonical), JOBS (compile jobs, default the build's own).
set -euo pipefail
if [ "$#" -lt 4 ]; then
  echo "usage: $0 REGISTRY KEY OUT TARGET..." >&2
  exit 2
fi
registry=$1 key=$2 out=$3
shift 3
read -r -a appliance <<<"${APPLIANCE:-python3 -m appliance}"
lock_args=()
if [ -n "${LOCK:-}" ]; then lock_args=(--lock "$LOCK"); fi
build_args=(--source "${SOURCE:-canonical}")
if [ -n "${JOBS:-}" ]; then build_args+=(--jobs "$JOBS"); fi
mkdir -p "$out"

for target in "$@"; do
  echo "release: $target: build"
  "${appliance[@]}" image build --target "$target" "${build_args[@]}" "${lock_args[@]}" --json >"$out/$target.build.json"
  tag=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["tag"])' "$out/$target.build.json")
  echo "release: $target: push $tag to $registry, sign its record"
  "${appliance[@]}" image push --target "$target" --registry "$registry" --image "$tag" --key "$key" \
    "${lock_args[@]}" --json >"$out/$target.json"
  python3 - "$out/$target.json" <<'EOF'
import json, sys
entry = json.load(open(sys.argv[1]))
name, _, digest = entry["reference"].partition("@")
entry.update(name=name, digest=digest)
json.dump(entry, open(sys.argv[1], "w"), indent=2)
print(f"release: published {entry['reference']} ({entry['transfer_bytes']} bytes to pull)")
EOF
done
