#!/bin/bash
# Push the agent's image (built by contrib/image/build.sh) to a registry and
# print the reference pinned by digest, for the DaemonSet's `image:`:
#
#   contrib/image/push.sh localhost/durasync:0.1.0 registry.example.com/durasync:0.1.0
#   # -> registry.example.com/durasync@sha256:…
#   ref=$(contrib/image/push.sh localhost/durasync:0.1.0 registry.example.com/durasync:0.1.0)
#   sed "s#image: registry.example.com/durasync:.*#image: $ref#" contrib/kubernetes/daemonset.yaml \
#       | kubectl apply -f -
#
# Environment (optional): PODMAN (default: podman), PUSH_FLAGS (extra flags
# for `podman push`, e.g. --tls-verify=false for a registry on loopback
# without TLS, or --creds USER:PASS).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: push.sh LOCAL-IMAGE REGISTRY/REPOSITORY:TAG" >&2; exit 2; }
image=$1
dest=$2
PODMAN=${PODMAN:-podman}
case $dest in
*@*) echo "push.sh: $dest already names a digest; give a tag" >&2; exit 2 ;;
esac
digestfile=$(mktemp)
trap 'rm -f "$digestfile"' EXIT
# shellcheck disable=SC2086 # PODMAN and PUSH_FLAGS are word lists
$PODMAN push --quiet ${PUSH_FLAGS:-} --digestfile "$digestfile" "$image" "docker://$dest" >&2
digest=$(cat "$digestfile")
case $digest in
sha256:????????????????????????????????????????????????????????????????) ;;
*) echo "push.sh: podman push gave no sha256 digest: $digest" >&2; exit 1 ;;
esac
# The repository without its tag (a registry's :port stays).
repo=$dest
last=${dest##*/}
case $last in
*:*) repo=${dest%:*} ;;
esac
echo "$repo@$digest"
