#!/usr/bin/env bash
# Builds the base image every project image starts FROM, without needing a container registry.
#
#   scripts/build_base_image.sh [TAG]        (default TAG: flights-optimizer-base:bookworm)
#
# 1. TAG already exists and was made from this recipe: nothing to do (idempotent, ~0.1 s).
# 2. The upstream base (python:3.11-slim-bookworm) can be pulled: derive TAG from it
#    (docker/base-from-slim.Dockerfile adds Java 17, tini, procps, Prometheus and kcat with apt
#    inside the build; that path only runs where a registry answers, so the network is there
#    anyway).
# 3. Otherwise: debootstrap a minimal Debian bookworm from the apt mirror this host is configured
#    with (read from /etc/apt at run time), tar it and `docker import` it as TAG.
# Needs root (debootstrap, chroot) and a Docker engine.
set -euo pipefail

TAG="${1:-flights-optimizer-base:bookworm}"
UPSTREAM_IMAGE="${UPSTREAM_IMAGE:-python:3.11-slim-bookworm}"
SUITE="bookworm"
# kcat: Kafka's command-line client, for operators inside the Compose network (docs/kafka.md).
PACKAGES="python3,python3-venv,openjdk-17-jre-headless,tini,procps,ca-certificates,prometheus,kcat"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RECIPE_LABEL="org.flights-optimizer.base-recipe"
# The label ties the image to what it was built from: changing the package list rebuilds it.
RECIPE="$(printf '%s\n' "$SUITE" "$PACKAGES" "$UPSTREAM_IMAGE" \
    "$(cat "$REPO_ROOT/docker/base-from-slim.Dockerfile")" | sha256sum | cut -c1-16)"

log() { printf '[build_base_image] %s\n' "$*" >&2; }

image_recipe() {
    docker image inspect --format "{{ index .Config.Labels \"$RECIPE_LABEL\" }}" "$1" 2>/dev/null
}

report() {
    local started_s="$1" size_bytes
    size_bytes="$(docker image inspect --format '{{.Size}}' "$TAG")"
    log "built $TAG in $((SECONDS - started_s)) s, $((size_bytes / 1000000)) MB"
}

# Prints the URI of the host's Debian archive: the stanza for $SUITE if there is one, else the
# first main-archive stanza (a suite without -security/-updates/-backports). Reads deb822
# (*.sources) and one-line (*.list) files; comments and disabled files are ignored.
host_debian_mirror() {
    local files=() file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
        /etc/apt/sources.list.d/*.list; do
        [[ -f "$file" ]] && files+=("$file")
    done
    ((${#files[@]})) || return 1
    awk -v suite="$SUITE" '
        function consider(types, uris, suites,   n, i, s, u) {
            if (types !~ /(^|[ \t])deb([ \t]|$)/ || uris == "") return
            split(uris, u, /[ \t]+/)
            n = split(suites, s, /[ \t]+/)
            for (i = 1; i <= n; i++) {
                if (s[i] == suite && exact == "") exact = u[1]
                if (s[i] != "" && s[i] !~ /-/ && fallback == "") fallback = u[1]
            }
        }
        function flush() { consider(types, uris, suites); types = uris = suites = "" }
        FNR == 1 { flush() }
        /^[ \t]*#/ { next }
        FILENAME ~ /\.sources$/ {
            if ($0 ~ /^[ \t]*$/) { flush(); next }
            if (tolower($1) == "types:") { $1 = ""; types = $0 }
            if (tolower($1) == "uris:") { $1 = ""; sub(/^[ \t]+/, ""); uris = $0 }
            if (tolower($1) == "suites:") { $1 = ""; suites = $0 }
            next
        }
        $1 == "deb" {
            i = 2
            if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
            consider("deb", $i, $(i + 1))
        }
        END {
            flush()
            if (exact != "") print exact; else if (fallback != "") print fallback; else exit 1
        }
    ' "${files[@]}"
}

ensure_debootstrap() {
    command -v debootstrap >/dev/null && return
    log "installing debootstrap with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

# Unmounts whatever debootstrap left mounted under the chroot, then deletes it without ever
# crossing into another file system (a leftover bind mount of /dev must not be emptied).
remove_chroot() {
    local dir="$1" mount_point
    [[ -d "$dir" ]] || return 0
    while read -r mount_point; do
        umount -l "$mount_point" || log "could not unmount $mount_point"
    done < <(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
    rm -rf --one-file-system "$dir"
}

build_by_pull() {
    log "deriving $TAG from $UPSTREAM_IMAGE"
    DOCKER_BUILDKIT=0 docker build --quiet \
        --build-arg "UPSTREAM_IMAGE=$UPSTREAM_IMAGE" \
        --label "$RECIPE_LABEL=$RECIPE" \
        -t "$TAG" -f "$REPO_ROOT/docker/base-from-slim.Dockerfile" "$REPO_ROOT/docker" >/dev/null
}

build_by_debootstrap() {
    local mirror chroot_dir
    mirror="$(host_debian_mirror)" || { log "no Debian mirror found in /etc/apt"; exit 1; }
    ensure_debootstrap
    chroot_dir="$(mktemp -d "${TMPDIR:-/var/tmp}/flights-base.XXXXXX")"
    # shellcheck disable=SC2064  # expand now: the trap must remove this very directory
    trap "remove_chroot '$chroot_dir'" EXIT
    log "debootstrap $SUITE from $mirror into $chroot_dir"
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$chroot_dir" "$mirror" \
        >"$chroot_dir.log" 2>&1 || { tail -n 30 "$chroot_dir.log" >&2; exit 1; }
    rm -f "$chroot_dir.log"
    # Package caches, docs and the host's identity do not belong in an image.
    rm -rf "$chroot_dir"/var/cache/apt/archives/*.deb "$chroot_dir"/var/cache/apt/*.bin \
        "$chroot_dir"/var/lib/apt/lists/* "$chroot_dir"/usr/share/doc/* \
        "$chroot_dir"/usr/share/man/* "$chroot_dir"/usr/share/info/* \
        "$chroot_dir"/var/log/*.log "$chroot_dir"/etc/hostname "$chroot_dir"/etc/resolv.conf
    log "importing into docker as $TAG"
    tar --numeric-owner --one-file-system -C "$chroot_dir" \
        --exclude='./proc/*' --exclude='./sys/*' --exclude='./dev/*' -cf - . |
        docker import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change "LABEL $RECIPE_LABEL=$RECIPE" \
            --change 'CMD ["/bin/bash"]' \
            - "$TAG" >/dev/null
    remove_chroot "$chroot_dir"
    trap - EXIT
}

main() {
    if [[ "$(image_recipe "$TAG")" == "$RECIPE" ]]; then
        log "$TAG already exists (recipe $RECIPE)"
        return
    fi
    local started_s=$SECONDS
    if docker pull --quiet "$UPSTREAM_IMAGE" >/dev/null 2>&1; then
        build_by_pull
    else
        log "$UPSTREAM_IMAGE cannot be pulled (no registry): building from the host's apt mirror"
        build_by_debootstrap
    fi
    report "$started_s"
}

main
