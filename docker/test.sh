#!/usr/bin/env bash
# docker/test.sh: build the signpost image and prove that it works, on a machine whose Docker
# Engine cannot pull from any registry.
#
# 1. Stand-ins for the Dockerfile's base images, made locally and tagged with the names the
#    Dockerfile uses, so that its FROM lines resolve without a pull:
#      debian:bookworm-slim  debootstrap --variant=minbase, then `docker import`
#      rust:1-bookworm       the same plus cmake/gcc/g++/make/perl and the host's Rust toolchain
#      python:3-slim         the rust stand-in, which has python3 (the demo origin)
#      redis:7               minbase plus Debian's redis-server (docker/fleet.yaml's Redis)
#    A tag that already exists is reused (a real image from a registry, or a stand-in of an earlier
#    run with the same recipe), so debootstrap runs only on a cold machine.
# 2. A build context under docker/.build/context: the repository's files plus `cargo vendor`ed
#    crates and a .cargo/config.toml that points crates.io at them, so that the Dockerfile's
#    unchanged `cargo build --locked` compiles offline.
# 3. `docker build` with the classic builder (DOCKER_BUILDKIT=0: local tags, no registry lookup).
# 4. Runs: an origin container and signpost with a mounted policy on a private network; a request
#    through the edge reaches the origin; /cdn-cgi/error/1015 in JSON and in Markdown; the process
#    is not root; the HEALTHCHECK turns healthy; the default policy loads; docker/compose.yaml.
# 5. docker/fleet.yaml (docker/fleet-test.sh): three edges share a fleet-scope rate limit in Redis;
#    one is cut off from Redis and falls back, the other two keep the shared count; it comes back.
#
# Knobs (environment):
#   SIGNPOST_DEBIAN_MIRROR   Debian mirror for debootstrap (default: the one apt uses here)
#   SIGNPOST_TEST_SOURCE     worktree (default: tracked and untracked, unignored files) or head
#                            (the last commit, with Dockerfile and .dockerignore of the work tree)
#   SIGNPOST_TEST_IMAGE      tag of the image under test (default signpost:test)
#   SIGNPOST_TEST_COMPOSE    auto (default: when docker-compose or `docker compose` exists), 1, 0
#                            (0 also leaves out the fleet stage, which runs docker/fleet.yaml)
#   SIGNPOST_TEST_FLEET      auto (default: when compose runs), 1, 0: the fleet stage
#   SIGNPOST_REDIS_IMAGE     the Redis image of the fleet stage (default redis:7, a stand-in when
#                            missing; valkey/valkey:8 works too when present)
#   SIGNPOST_REBUILD_BASE=1  remake the stand-in base images even when the tags exist
#   SIGNPOST_TEST_BUILD_ONLY=1  stop after `docker build`
#   SIGNPOST_TEST_QUICK_BUILD=1 build without LTO and with 16 codegen units (the same program,
#                            built minutes faster; CI sets it: a behaviour test needs no speed)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
work=$repo/docker/.build
suite=bookworm
image=${SIGNPOST_TEST_IMAGE:-signpost:test}
source_mode=${SIGNPOST_TEST_SOURCE:-worktree}
compose_mode=${SIGNPOST_TEST_COMPOSE:-auto}
run_id=signpost-test-$$
stand_in_label=org.signpost.stand-in
# Build packages in the rust stand-in: what rust:1-bookworm (buildpack-deps) has that the build
# needs, plus cmake, which the Dockerfile would otherwise apt-get, plus python3 for the origin.
rust_packages=ca-certificates,gcc,g++,make,cmake,perl,libc6-dev,pkg-config,python3

# Classic builder: FROM resolves local images and never pulls (BuildKit would ask the registry).
export DOCKER_BUILDKIT=0
# The rustup toolchain of a non-login shell.
if [[ -d ${CARGO_HOME:-$HOME/.cargo}/bin ]]; then PATH=${CARGO_HOME:-$HOME/.cargo}/bin:$PATH; fi

t0=$SECONDS
log() { printf '==> [%4ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }
ok() { printf '    ok: %s\n' "$*" >&2; }
die() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [[ $EUID -eq 0 ]]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root (or sudo) for: $*"
    fi
}

# ---------------------------------------------------------------------------------------------
# Clean-up of everything this run starts.
containers=()
networks=()
compose_cmd=()
compose_project=
cleanup() {
    local rc=$?
    set +e
    if ((rc != 0)); then
        for c in "${containers[@]}"; do
            printf -- '--- docker logs %s (last 40 lines)\n' "$c" >&2
            docker logs --tail 40 "$c" >&2
        done
    fi
    if [[ -n $compose_project ]] && ((rc != 0)); then
        "${compose_cmd[@]}" logs --tail 40 >&2
    fi
    for pid in "${root_pids[@]}"; do kill "$pid" 2>/dev/null; done
    # Containers before the compose project: its networks may have them attached.
    for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1; done
    if [[ -n $compose_project ]]; then
        "${compose_cmd[@]}" down --volumes --remove-orphans >/dev/null 2>&1
    fi
    for n in "${networks[@]}"; do docker network rm "$n" >/dev/null 2>&1; done
    if ((rc == 0)); then
        log "PASS ($((SECONDS - t0)) s)"
    else
        printf 'FAIL: docker/test.sh exited with %d after %d s\n' "$rc" "$((SECONDS - t0))" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
root_pids=()

# Containers and networks left by an earlier run that was killed (its pid is gone).
sweep_stale() {
    local name pid
    for name in $( (docker ps -a --format '{{.Names}}'; docker network ls --format '{{.Name}}') \
        | grep -E '^signpost-?test-?[0-9]+' || true); do
        pid=$(sed -E 's/^signpost-?test-?([0-9]+).*/\1/' <<<"$name")
        kill -0 "$pid" 2>/dev/null && continue
        docker rm -f "$name" >/dev/null 2>&1 || docker network rm "$name" >/dev/null 2>&1 || true
    done
}

# ---------------------------------------------------------------------------------------------
log "preflight"
docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info)"
sweep_stale
for tool in git cargo rustc curl python3 tar sha256sum; do
    command -v "$tool" >/dev/null || die "missing tool: $tool"
done
mkdir -p "$work"

# The Debian mirror apt uses on this machine (deb822 .sources first, then one-line lists).
debian_mirror() {
    if [[ -n ${SIGNPOST_DEBIAN_MIRROR:-} ]]; then
        echo "$SIGNPOST_DEBIAN_MIRROR"
        return
    fi
    local f url
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        url=$(awk -v suite="$suite" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uris != "")
                    { split(uris, u, " "); print u[1]; found = 1; exit }
                types = suites = uris = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            tolower($1) == "types:" { $1 = ""; types = $0 }
            tolower($1) == "suites:" { $1 = ""; suites = $0 }
            tolower($1) == "uris:" { $1 = ""; uris = $0 }
            END { if (!found) flush() }
        ' "$f")
        if [[ $url == http* ]]; then echo "${url%/}"; return; fi
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f $f ]] || continue
        url=$(awk -v suite="$suite" '
            $1 == "deb" {
                i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                if ($(i + 1) == suite) { print $i; exit }
            }' "$f")
        if [[ $url == http* ]]; then echo "${url%/}"; return; fi
    done
    echo "http://deb.debian.org/debian"
}

# Print the stand-in recipe key of an image tag, "real" for an image that is not a stand-in,
# nothing when the tag does not exist.
image_key() {
    local key
    key=$(docker image inspect -f "{{ index .Config.Labels \"$stand_in_label\" }}" "$1" 2>/dev/null) \
        || return 0
    [[ -n $key && $key != "<no value>" ]] && echo "$key" || echo real
}

ensure_debootstrap() {
    command -v debootstrap >/dev/null && return
    log "installing debootstrap (apt-get)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

# debootstrap a minbase root into $work/roots/$1 with the extra packages $2 (comma list), in the
# background; wait_roots waits for all of them. Each root has its own .deb cache, kept between
# runs, so that two debootstraps can run at once.
root_names=()
start_root() {
    local name=$1 include=$2 dir=$work/roots/$1
    as_root rm -rf "$dir"
    mkdir -p "$work/roots" "$work/debs/$name"
    log "debootstrap $suite --variant=minbase ($name${include:+, with $include}) from $mirror"
    as_root debootstrap --variant=minbase ${include:+--include="$include"} \
        --cache-dir="$work/debs/$name" "$suite" "$dir" "$mirror" >"$work/debootstrap-$name.log" 2>&1 &
    root_pids+=($!)
    root_names+=("$name")
}
wait_roots() {
    local i failed=0
    for i in "${!root_pids[@]}"; do
        if ! wait "${root_pids[$i]}"; then
            tail -n 30 "$work/debootstrap-${root_names[$i]}.log" >&2
            printf 'debootstrap %s failed (log: docker/.build/debootstrap-%s.log)\n' \
                "${root_names[$i]}" "${root_names[$i]}" >&2
            failed=1
        fi
    done
    root_pids=()
    root_names=()
    ((failed == 0)) || die "debootstrap failed"
    log "debootstrap done"
}

# docker import the root $work/roots/$1 as tag $2 with recipe key $3 and extra --change args.
import_root() {
    local name=$1 tag=$2 key=$3
    shift 3
    local changes=(--change "LABEL $stand_in_label=$key")
    local c
    for c in "$@"; do changes+=(--change "$c"); done
    log "docker import $name root as $tag"
    # Leave out what slim images leave out: apt lists and caches, docs, man pages, locales.
    as_root tar -C "$work/roots/$name" --numeric-owner \
        --exclude='./var/lib/apt/lists/*' --exclude='./var/cache/apt/*' \
        --exclude='./usr/share/doc/*' --exclude='./usr/share/man/*' \
        --exclude='./usr/share/locale/*' --exclude='./usr/share/info/*' \
        -c . | docker import "${changes[@]}" - "$tag" >/dev/null
    as_root rm -rf "$work/roots/$name"
}

# have_image TAG KEY: true when the tag can be used as is: an image that is not a stand-in (from a
# registry), or a stand-in made with the same recipe.
have_image() {
    local tag=$1 key=$2 have
    [[ ${SIGNPOST_REBUILD_BASE:-0} != 1 ]] || return 1
    have=$(image_key "$tag")
    if [[ $have == real ]]; then
        ok "$tag exists (not a stand-in): using it"
    elif [[ $have == "$key" ]]; then
        ok "$tag stand-in exists (recipe $key): using it"
    else
        return 1
    fi
}

# ---------------------------------------------------------------------------------------------
log "base images"
base_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The host's toolchain goes into the rust stand-in where rust:1-bookworm has it.
sysroot=$(cd "$repo" && rustc --print sysroot)
[[ -x $sysroot/bin/cargo && -x $sysroot/bin/rustc ]] \
    || die "expected a rustup toolchain with cargo and rustc in $sysroot/bin"
toolchain=$(basename "$sysroot")
rust_version=$("$sysroot/bin/rustc" -V | awk '{print $2}')

slim_key="$suite-minbase-1"
rust_key="$suite-minbase-1-$(printf '%s|%s|%s' "$rust_packages" "$toolchain" \
    "$("$sysroot/bin/rustc" -vV)" | sha256sum | cut -c1-16)"
# python:3-slim (the demo origin of compose.yaml and of this test) is the rust stand-in, which has
# python3: one debootstrap fewer on a cold machine.
python_key=$rust_key
# redis:7 (docker/fleet.yaml): minbase plus Debian's redis-server (7.0 in bookworm), run as the
# package's `redis` user like the official image. Only for the fleet stage.
redis_image=${SIGNPOST_REDIS_IMAGE:-redis:7}
redis_key="$suite-minbase-1-redis-server"
fleet_mode=${SIGNPOST_TEST_FLEET:-auto}
[[ $compose_mode != 0 && ${SIGNPOST_TEST_BUILD_ONLY:-0} != 1 ]] || fleet_mode=0

need_slim=0 need_rust=0 need_redis=0
have_image debian:bookworm-slim "$slim_key" || need_slim=1
have_image rust:1-bookworm "$rust_key" || need_rust=1
if [[ $fleet_mode != 0 ]]; then have_image "$redis_image" "$redis_key" || need_redis=1; fi
if ((need_slim || need_rust || need_redis)); then
    ensure_debootstrap
    mirror=$(debian_mirror)
    if ((need_slim)); then start_root slim ""; fi
    if ((need_rust)); then start_root rust "$rust_packages"; fi
    if ((need_redis)); then start_root redis redis-server; fi
    wait_roots
fi
if ((need_slim)); then
    import_root slim debian:bookworm-slim "$slim_key" "ENV PATH=$base_path" 'CMD ["bash"]'
fi
if ((need_redis)); then
    import_root redis "$redis_image" "$redis_key" "ENV PATH=$base_path" 'USER redis' \
        'WORKDIR /var/lib/redis' 'EXPOSE 6379' 'CMD ["redis-server", "--protected-mode", "no"]'
fi
if ((need_rust)); then
    log "copying the host toolchain $toolchain (rustc $rust_version) into the rust root"
    dest=$work/roots/rust/usr/local/rustup/toolchains/$toolchain
    as_root mkdir -p "$dest/bin" "$work/roots/rust/usr/local/cargo/bin"
    for b in cargo rustc rustdoc; do
        as_root cp -a "$sysroot/bin/$b" "$dest/bin/"
        as_root ln -sfn "../../rustup/toolchains/$toolchain/bin/$b" \
            "$work/roots/rust/usr/local/cargo/bin/$b"
    done
    as_root cp -a "$sysroot/lib" "$dest/"
    as_root chown -R 0:0 "$work/roots/rust/usr/local/rustup" "$work/roots/rust/usr/local/cargo"
    import_root rust rust:1-bookworm "$rust_key" \
        "ENV RUSTUP_HOME=/usr/local/rustup" "ENV CARGO_HOME=/usr/local/cargo" \
        "ENV RUST_VERSION=$rust_version" "ENV PATH=/usr/local/cargo/bin:$base_path" 'CMD ["bash"]'
fi
docker run --rm --network none rust:1-bookworm sh -c 'cargo -V && rustc -V && cmake --version | head -n1' \
    | sed 's/^/    rust:1-bookworm: /' >&2

if ! have_image python:3-slim "$python_key"; then
    [[ $(image_key rust:1-bookworm) == "$rust_key" ]] \
        || die "python:3-slim is missing and rust:1-bookworm is not this script's stand-in"
    docker tag rust:1-bookworm python:3-slim
    ok "python:3-slim: tagged the rust stand-in (it has python3)"
fi

# ---------------------------------------------------------------------------------------------
ctx=$work/context
log "build context ($source_mode) in docker/.build/context"
as_root rm -rf "$ctx"
mkdir -p "$ctx"
case $source_mode in
    head) # the committed tree, with the container files under test from the work tree
        git -C "$repo" archive HEAD | tar -x -C "$ctx"
        cp "$repo/Dockerfile" "$repo/.dockerignore" "$ctx/" ;;
    worktree)
        (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
            | while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done \
            | tar --null -T - -c) | tar -x -C "$ctx" ;;
    *) die "SIGNPOST_TEST_SOURCE must be worktree or head" ;;
esac
[[ -f $ctx/Dockerfile && -f $ctx/Cargo.lock ]] || die "no Dockerfile or Cargo.lock in the context"

# Vendored crates, made again only when Cargo.lock changes.
lock_sum=$(sha256sum "$ctx/Cargo.lock" | cut -d' ' -f1)
if [[ -f $work/vendor/.stamp && $(cat "$work/vendor/.stamp") == "$lock_sum" ]]; then
    ok "vendored crates up to date with Cargo.lock"
else
    log "cargo vendor (Cargo.lock changed or first run)"
    rm -rf "$work/vendor" "$work/vendor.tmp"
    (cd "$ctx" && cargo vendor --locked --versioned-dirs "$work/vendor.tmp" \
        >"$work/vendor.config.toml" 2>"$work/vendor.log") \
        || { tail -n 30 "$work/vendor.log" >&2; die "cargo vendor failed (log: docker/.build/vendor.log)"; }
    mv "$work/vendor.tmp" "$work/vendor"
    echo "$lock_sum" >"$work/vendor/.stamp"
fi
log "vendored crates: $(find "$work/vendor" -mindepth 1 -maxdepth 1 -type d | wc -l) ($(du -sh "$work/vendor" | cut -f1))"
# In .cargo-vendor: the repository has a vendor/ of its own (patched crates, [patch.crates-io]).
cp -al "$work/vendor" "$ctx/.cargo-vendor" 2>/dev/null || cp -a "$work/vendor" "$ctx/.cargo-vendor"
rm -f "$ctx/.cargo-vendor/.stamp"
mkdir -p "$ctx/.cargo"
{
    echo
    echo "# docker/test.sh: build offline from the vendored crates in ./.cargo-vendor"
    sed -E 's|^directory = .*|directory = ".cargo-vendor"|' "$work/vendor.config.toml"
    printf '\n[net]\noffline = true\n'
} >>"$ctx/.cargo/config.toml"

# ---------------------------------------------------------------------------------------------
log "docker build -t $image (classic builder; log: docker/.build/build.log)"
build_start=$SECONDS
build_args=()
if [[ ${SIGNPOST_TEST_QUICK_BUILD:-0} == 1 ]]; then
    build_args=(--build-arg CARGO_PROFILE_RELEASE_LTO=off --build-arg CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16)
fi
if ! docker build "${build_args[@]}" -t "$image" -f "$ctx/Dockerfile" "$ctx" 2>&1 | tee "$work/build.log" \
    | sed -u 's/\x1b\[[0-9;]*m//g' \
    | grep --line-buffered -E '^(Sending build context|Step [0-9]+/|Successfully (built|tagged)|error(\[|:)| +Finished )' \
    | sed -u 's/^/    /' >&2; then
    tail -n 40 "$work/build.log" >&2
    die "docker build failed"
fi
grep -q '^Successfully tagged' "$work/build.log" || { tail -n 40 "$work/build.log" >&2; die "docker build failed"; }
ok "built $image in $((SECONDS - build_start)) s: $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.1f MB", $1/1e6}')"

# Earlier builds leave untagged images (old signpost:test, old build stages, ~0.6 GB each). Remove
# those made from the stand-ins (they carry the stand-in label), but not the layers of this build,
# which are the cache of the next one.
keep=$(sed 's/\x1b\[[0-9;]*m//g' "$work/build.log" | grep -oE -- '---> [0-9a-f]{12}' | awk '{print $2}')
removed=0
for id in $(docker images -q -f dangling=true -f "label=$stand_in_label" | sort -u); do
    grep -qx "$id" <<<"$keep" && continue
    docker rmi "$id" >/dev/null 2>&1 && removed=$((removed + 1))
done
((removed == 0)) || ok "removed $removed untagged image(s) of earlier builds"

if [[ ${SIGNPOST_TEST_BUILD_ONLY:-0} == 1 ]]; then
    exit 0
fi

# ---------------------------------------------------------------------------------------------
log "image metadata"
user=$(docker image inspect -f '{{.Config.User}}' "$image")
[[ -n $user && ${user%%:*} != 0 && ${user%%:*} != root ]] || die "image User is '$user', want non-root"
ok "User $user"
docker image inspect -f '{{json .Config.Healthcheck}}' "$image" | grep -q '"signpost","health"' \
    || die "no HEALTHCHECK CMD [\"signpost\", \"health\"]"
ok "HEALTHCHECK $(docker image inspect -f '{{json .Config.Healthcheck.Test}}' "$image")"
docker run --rm --network none --entrypoint cat "$image" /etc/signpost/policy.toml \
    | cmp -s - "$ctx/config/default.toml" || die "/etc/signpost/policy.toml is not config/default.toml"
ok "/etc/signpost/policy.toml is config/default.toml"

# ---------------------------------------------------------------------------------------------
run=$work/run
rm -rf "$run"
mkdir -p "$run/site"
token="signpost-demo-origin-$(date +%s)-$$"
printf '<!doctype html><title>origin</title><p>%s</p>\n' "$token" >"$run/site/index.html"
cat >"$run/policy.toml" <<'EOF'
# docker/test.sh: every name goes to the origin container (network alias "origin").
listen = ["0.0.0.0:8080"]
admin = "127.0.0.1:9901"

[[zone]]
name = "demo"
hosts = ["*"]
origin = "origin:8000"
EOF
chmod 0755 "$run" "$run/site"
chmod 0644 "$run/site/index.html" "$run/policy.toml"

log "network, origin container and signpost container (mounted policy)"
net=$run_id
docker network create "$net" >/dev/null
networks+=("$net")
origin=$run_id-origin
containers+=("$origin")
docker run -d --name "$origin" --network "$net" --network-alias origin --user 65534:65534 \
    -v "$run/site:/srv:ro" python:3-slim python3 -m http.server 8000 --directory /srv >/dev/null
edge=$run_id-edge
containers+=("$edge")
docker run -d --name "$edge" --network "$net" -p 127.0.0.1::8080 \
    -v "$run/policy.toml:/etc/signpost/policy.toml:ro" "$image" >/dev/null
port=$(docker port "$edge" 8080/tcp | awk -F: 'NR == 1 {print $NF}')
[[ -n $port ]] || die "no published port for 8080"
base=http://localhost:$port
ok "signpost on $base (container $edge), origin container $origin"

log "GET $base/ through the edge to the origin"
body=
for _ in $(seq 60); do
    if body=$(curl -fsS --max-time 5 "$base/" 2>/dev/null) && [[ $body == *"$token"* ]]; then break; fi
    [[ $(docker inspect -f '{{.State.Running}}' "$edge") == true ]] || die "signpost exited"
    sleep 0.5
done
[[ $body == *"$token"* ]] || { curl -sS -i --max-time 5 "$base/" >&2 || true; die "the origin's page did not come through"; }
ok "origin body came through ($token)"

log "GET $base/cdn-cgi/error/1015 (Accept: application/json)"
curl -sS --max-time 5 -H 'Accept: application/json' -D "$run/1015.json.headers" \
    -o "$run/1015.json" "$base/cdn-cgi/error/1015"
python3 - "$run/1015.json" <<'EOF' || die "/cdn-cgi/error/1015 is not JSON with error_code 1015"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc.get("error_code") == 1015, doc
print("    ok: JSON error_code=%s %s" % (doc["error_code"], {k: doc[k] for k in list(doc)[:4]}), file=sys.stderr)
EOF
grep -i '^content-type:' "$run/1015.json.headers" | sed 's/^/    /' >&2

log "GET $base/cdn-cgi/error/1015 (Accept: text/markdown)"
curl -sS --max-time 5 -H 'Accept: text/markdown' -D "$run/1015.md.headers" \
    -o "$run/1015.md" "$base/cdn-cgi/error/1015"
head -n 1 "$run/1015.md" | grep -qx -- '---' || die "Markdown does not start with --- frontmatter"
awk 'NR > 1 && /^---$/ {exit} NR > 1' "$run/1015.md" | grep -qE '^error_code: *1015$' \
    || { head -n 20 "$run/1015.md" >&2; die "no 'error_code: 1015' in the Markdown frontmatter"; }
ok "Markdown frontmatter has error_code: 1015"
grep -i '^content-type:' "$run/1015.md.headers" | sed 's/^/    /' >&2

log "non-root process and HEALTHCHECK"
uid=$(docker exec "$edge" id -u)
[[ $uid != 0 ]] || die "signpost runs as root"
ok "id -u in the container: $uid"
status=
for _ in $(seq 60); do
    status=$(docker inspect -f '{{.State.Health.Status}}' "$edge")
    [[ $status == healthy || $status == unhealthy ]] && break
    sleep 1
done
[[ $status == healthy ]] || {
    docker inspect -f '{{json .State.Health}}' "$edge" >&2
    die "health status is '$status', want healthy"
}
ok "health status: healthy"

log "the image's default policy loads (no mount)"
default=$run_id-default
containers+=("$default")
docker run -d --name "$default" --network none "$image" >/dev/null
healthy=0
for _ in $(seq 40); do
    if docker exec "$default" signpost health >/dev/null 2>&1; then healthy=1; break; fi
    [[ $(docker inspect -f '{{.State.Running}}' "$default") == true ]] || die "signpost exited with the default policy"
    sleep 0.5
done
((healthy)) || die "signpost health fails with the default policy"
ok "signpost health answers with /etc/signpost/policy.toml from the image"

# ---------------------------------------------------------------------------------------------
if [[ $compose_mode != 0 ]]; then
    if command -v docker-compose >/dev/null; then
        compose_cmd=(docker-compose)
    elif docker compose version >/dev/null 2>&1; then
        compose_cmd=(docker compose)
    elif [[ $compose_mode == 1 ]]; then
        die "SIGNPOST_TEST_COMPOSE=1 but neither docker-compose nor docker compose is here"
    fi
fi
if ((${#compose_cmd[@]})); then
    log "docker/compose.yaml with ${compose_cmd[*]} (image $image, no build)"
    compose_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    compose_project=${run_id//-/}
    compose_cmd+=(-p "$compose_project" -f "$repo/docker/compose.yaml")
    export SIGNPOST_IMAGE=$image SIGNPOST_PORT=$compose_port
    "${compose_cmd[@]}" up -d --no-build >"$run/compose-up.log" 2>&1 \
        || { cat "$run/compose-up.log" >&2; die "compose up failed"; }
    body=
    for _ in $(seq 60); do
        if body=$(curl -fsS --max-time 5 "http://localhost:$compose_port/" 2>/dev/null) \
            && [[ $body == *"demo origin"* ]]; then break; fi
        sleep 0.5
    done
    [[ $body == *"demo origin"* ]] || die "compose: the demo origin's page did not come through"
    ok "compose: http://localhost:$compose_port/ served the demo origin's page"
    curl -sS --max-time 5 -H 'Accept: application/json' "http://localhost:$compose_port/cdn-cgi/error/1015" \
        | python3 -c 'import json, sys; assert json.load(sys.stdin)["error_code"] == 1015' \
        || die "compose: /cdn-cgi/error/1015 JSON"
    ok "compose: /cdn-cgi/error/1015 JSON"
fi

# ---------------------------------------------------------------------------------------------
if [[ $fleet_mode != 0 ]]; then
    if ((${#compose_cmd[@]})); then
        # shellcheck source=docker/fleet-test.sh
        source "$here/fleet-test.sh"
    elif [[ $fleet_mode == 1 ]]; then
        die "SIGNPOST_TEST_FLEET=1 but neither docker-compose nor docker compose is here"
    else
        log "SKIPPED: the fleet stage (docker/fleet.yaml) needs docker-compose or docker compose"
    fi
else
    log "fleet stage left out (SIGNPOST_TEST_FLEET=0 or SIGNPOST_TEST_COMPOSE=0)"
fi
