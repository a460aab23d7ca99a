#!/bin/bash
# Build the agent's container image from a built durasync binary, with no
# base image from any registry: FROM scratch, holding the binary, exactly the
# shared libraries it loads (from `ldd`), any components asked for under
# /usr/lib/durasync/ (none by default: the DaemonSet pulls its plugin from a
# registry), an /etc/passwd naming root and `durasync` (65532), and OCI
# labels. The default user is 65532; a node whose roots are root-owned
# runs it as root without capabilities (contrib/kubernetes/daemonset.yaml).
#
#   cargo build --release
#   contrib/image/build.sh               # -> localhost/durasync:VERSION
#
# Environment (all optional):
#   DURASYNC    the binary          (default: target/release/durasync)
#   COMPONENTS  components to bake in, space-separated (default: none)
#   TAG         the image's name    (default: localhost/durasync:VERSION from Cargo.toml)
#   PODMAN      the podman command  (default: podman; e.g. "podman --root DIR --runroot DIR")
#   CONTEXT     keep the build context in this (new) directory instead of a temporary one
#
# Prints the image id on its last line. Layers carry the commit's time, not the
# build's (--timestamp), so two builds of the same files give the same image.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
DURASYNC=${DURASYNC:-$repo/target/release/durasync}
COMPONENTS=${COMPONENTS:-}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -1)
TAG=${TAG:-localhost/durasync:$version}
PODMAN=${PODMAN:-podman}

die() { echo "build.sh: $*" >&2; exit 1; }
[ -x "$DURASYNC" ] || die "no durasync binary at $DURASYNC (cargo build --release, or set DURASYNC)"
for c in $COMPONENTS; do
    [ -f "$c" ] || die "no component at $c (build it, or set COMPONENTS)"
done
command -v ldd >/dev/null || die "ldd is needed to find the binary's shared libraries"

if [ -n "${CONTEXT:-}" ]; then
    mkdir "$CONTEXT"
    ctx=$CONTEXT
else
    ctx=$(mktemp -d)
    trap 'rm -rf "$ctx"' EXIT
fi
rootfs=$ctx/rootfs
mkdir -p "$rootfs"/usr/local/bin "$rootfs"/etc/durasync/agent.d "$rootfs"/var/cache "$rootfs"/tmp
chmod 1777 "$rootfs"/tmp
install -m 0755 "$DURASYNC" "$rootfs"/usr/local/bin/durasync
for c in $COMPONENTS; do
    install -m 0644 -D -t "$rootfs"/usr/lib/durasync "$c"
done

# Every library the dynamic loader maps, at the path it maps it from (the
# interpreter included); a static binary has none. `ldd` prints
# `name => /path (addr)` or `/path (addr)`; linux-vdso has no file.
if ldd "$DURASYNC" >/dev/null 2>&1; then
    ldd "$DURASYNC" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | while read -r lib; do
        mkdir -p "$rootfs$(dirname "$lib")"
        cp -L "$lib" "$rootfs$lib"
    done
fi
# Check the copy is complete: the binary must resolve every library inside
# the tree (a library that loads another by dlopen would not be listed).
missing=$(ldd "$DURASYNC" 2>/dev/null | awk '/=> not found/ { print $1 }')
[ -z "$missing" ] || die "libraries not found: $missing"

printf 'root:x:0:0:root:/:/sbin/nologin\ndurasync:x:65532:65532:durasync:/:/sbin/nologin\n' >"$rootfs"/etc/passwd
printf 'root:x:0:\ndurasync:x:65532:\n' >"$rootfs"/etc/group
chown 65532:65532 "$rootfs"/var/cache

revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
epoch=$(git -C "$repo" log -1 --format=%ct 2>/dev/null || echo 0)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
cat >"$ctx"/Containerfile <<EOF
FROM scratch
COPY rootfs/ /
USER 65532:65532
ENV XDG_CACHE_HOME=/var/cache
ENTRYPOINT ["/usr/local/bin/durasync"]
CMD ["agent", "--config-dir=/etc/durasync/agent.d"]
LABEL org.opencontainers.image.title="durasync" \\
      org.opencontainers.image.description="durasync agent: atomic, crash-durable file sync by sandboxed WebAssembly plugins" \\
      org.opencontainers.image.version="$version" \\
      org.opencontainers.image.revision="$revision" \\
      org.opencontainers.image.created="$created" \\
      org.opencontainers.image.licenses="Apache-2.0" \\
      org.opencontainers.image.base.name="scratch"
EOF

# --network=none: a COPY-only build needs none (and podman's default bridge
# would change the host's firewall).
$PODMAN build --quiet --network=none --timestamp "$epoch" --format oci -t "$TAG" -f "$ctx"/Containerfile "$ctx"
