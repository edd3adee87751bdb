#!/usr/bin/env bash
# Builds the project image with no container registry and no network inside any build step.
#
#   scripts/build_images.sh [IMAGE_TAG]      (default IMAGE_TAG: flights-optimizer:latest)
#
# 1. base image: scripts/build_base_image.sh (skipped when it exists);
# 2. wheels for the runtime dependencies pinned in pyproject.toml, downloaded (and built, for
#    sdist-only packages like pyspark) on the host into build/wheels/ (skipped when the pins
#    have not changed since the last download);
# 3. runtime image (docker/runtime.Dockerfile, context build/wheels/): base + venv + Java home +
#    user (skipped when it exists for these wheels, this base and this Dockerfile);
# 4. project image (docker/Dockerfile, context the repo root): runtime + code, one layer.
# Layer order base -> deps -> code: a code edit rebuilds only step 4's single layer.
# One build at a time per checkout (a lock in build/): a second invocation waits for the first
# and then finds every step current (CI starts one beside the tests, the e2e fixture another).
# PYTHON picks the host interpreter for step 2 (default: .venv/bin/python, else python3); it
# must be CPython 3.11, the base image's Python, so the binary wheels fit the image.
set -euo pipefail

IMAGE_TAG="${1:-flights-optimizer:latest}"
BASE_IMAGE="${BASE_IMAGE:-flights-optimizer-base:bookworm}"
RUNTIME_IMAGE="${RUNTIME_IMAGE:-flights-optimizer-runtime:latest}"
RECIPE_LABEL="org.flights-optimizer.runtime-recipe"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEEL_DIR="$REPO_ROOT/build/wheels"
cd "$REPO_ROOT"

log() { printf '[build_images] %s\n' "$*" >&2; }

host_python() {
    if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"
    elif [[ -x .venv/bin/python ]]; then echo .venv/bin/python
    else echo python3
    fi
}

# Writes build/wheels/requirements.txt from pyproject's [project].dependencies and fills the
# directory with a wheel for each pin and transitive dependency.
download_wheels() {
    local py pins stamp
    py="$(host_python)"
    "$py" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' || {
        log "$py is not Python 3.11: wheels would not fit the image's interpreter"; exit 1; }
    pins="$("$py" -c 'import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))')"
    stamp="$(printf '%s\n' "$pins" "$("$py" -c 'import sysconfig; print(sysconfig.get_platform())')" |
        sha256sum | cut -c1-16)"
    if [[ -f "$WHEEL_DIR/.stamp" && "$(cat "$WHEEL_DIR/.stamp")" == "$stamp" ]]; then
        log "wheels in build/wheels are current (stamp $stamp)"
        return
    fi
    log "downloading wheels for the pinned runtime dependencies into build/wheels"
    rm -rf "$WHEEL_DIR"
    mkdir -p "$WHEEL_DIR"
    printf '%s\n' "$pins" >"$WHEEL_DIR/requirements.txt"
    "$py" -m pip wheel --quiet --disable-pip-version-check \
        --wheel-dir "$WHEEL_DIR" --requirement "$WHEEL_DIR/requirements.txt"
    echo "$stamp" >"$WHEEL_DIR/.stamp"
}

# The legacy builder is forced so a DOCKER_BUILDKIT=1 in the caller's environment cannot break
# the build where buildx is missing (as here); no step needs BuildKit.
docker_build() {
    DOCKER_BUILDKIT=0 docker build "$@"
}

build_runtime_image() {
    local recipe
    recipe="$(cat "$WHEEL_DIR/requirements.txt" "$WHEEL_DIR/.stamp" docker/runtime.Dockerfile \
        <(docker image inspect --format '{{.Id}}' "$BASE_IMAGE") | sha256sum | cut -c1-16)"
    if [[ "$(docker image inspect --format "{{ index .Config.Labels \"$RECIPE_LABEL\" }}" \
        "$RUNTIME_IMAGE" 2>/dev/null)" == "$recipe" ]]; then
        log "$RUNTIME_IMAGE is current (recipe $recipe)"
        return
    fi
    log "docker build -t $RUNTIME_IMAGE (deps layer)"
    docker_build --build-arg "BASE_IMAGE=$BASE_IMAGE" --label "$RECIPE_LABEL=$recipe" \
        -f docker/runtime.Dockerfile -t "$RUNTIME_IMAGE" "$WHEEL_DIR"
}

main() {
    local started_s=$SECONDS size_bytes
    mkdir -p "$REPO_ROOT/build"
    exec 9>"$REPO_ROOT/build/.build_images.lock"
    flock 9
    "$REPO_ROOT/scripts/build_base_image.sh" "$BASE_IMAGE"
    download_wheels
    build_runtime_image
    log "docker build -t $IMAGE_TAG (code layer)"
    docker_build --build-arg "RUNTIME_IMAGE=$RUNTIME_IMAGE" -f docker/Dockerfile -t "$IMAGE_TAG" .
    size_bytes="$(docker image inspect --format '{{.Size}}' "$IMAGE_TAG")"
    log "built $IMAGE_TAG in $((SECONDS - started_s)) s, $((size_bytes / 1000000)) MB"
}

main
