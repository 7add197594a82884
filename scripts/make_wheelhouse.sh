#!/usr/bin/env bash
# A wheelhouse for an air-gapped GPU node: every dependency of translate (pyproject.toml, with
# the dev and slurm extras, and the build backend for `pip install -e .`) except torch, as
# binary wheels for the node's Python and platform. See docs/gpu.md.
#
#   scripts/make_wheelhouse.sh [--python 3.12] [--platform manylinux_2_28_x86_64] DIR
#   scripts/make_wheelhouse.sh --list          # the requirements it would fetch, then exit
#
# Run it on any machine with PyPI access (the Python running it may differ from --python), copy
# DIR and the checkout to the node, install the CUDA build of torch there, then:
#   pip install --no-index --find-links DIR -e ".[dev,slurm]"
#
# antlr4-python3-runtime 4.9.3 (omegaconf's dependency) is published only as an sdist: it is
# built here into a pure-Python wheel (pip wheel --no-deps), which then satisfies the resolver.
set -euo pipefail

usage() {
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

python_version=3.12
platform=manylinux_2_28_x86_64
list_only=0
dir=""
while [ $# -gt 0 ]; do
    case "$1" in
        --python) python_version="${2:?--python needs a version, e.g. 3.12}"; shift 2 ;;
        --platform) platform="${2:?--platform needs a tag, e.g. manylinux_2_28_x86_64}"; shift 2 ;;
        --list) list_only=1; shift ;;
        -h|--help) usage 0 ;;
        -*) echo "error: unknown option $1" >&2; usage 2 ;;
        *) [ -z "$dir" ] || { echo "error: one DIR only" >&2; exit 2; }; dir="$1"; shift ;;
    esac
done

root="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
abi="cp${python_version//./}"

# pip matches --platform exactly; a manylinux_2_Y node also runs wheels for older glibc
# (manylinux_2_17 = manylinux2014 is what most projects publish), so list those too.
platform_args=(--platform "$platform")
if [[ "$platform" =~ ^manylinux_2_([0-9]+)_(.+)$ ]]; then
    glibc="${BASH_REMATCH[1]}"
    arch="${BASH_REMATCH[2]}"
    for ((minor = glibc - 1; minor >= 17; minor--)); do
        platform_args+=(--platform "manylinux_2_${minor}_${arch}")
    done
    platform_args+=(--platform "manylinux2014_${arch}")
fi

# pyproject.toml's requirements, torch left out (the node installs its own CUDA build).
requirements="$("$py" - "$root/pyproject.toml" <<'EOF'
import re
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    from pip._vendor import tomli as tomllib

with open(sys.argv[1], "rb") as f:
    doc = tomllib.load(f)
project = doc["project"]
reqs = [*doc["build-system"]["requires"], "wheel", *project["dependencies"]]
for extra in ("dev", "slurm"):
    reqs += project["optional-dependencies"][extra]
seen = []
for req in reqs:
    name = re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0].lower()
    if name != "torch" and req not in seen:
        seen.append(req)
print("\n".join(seen))
EOF
)"

if [ "$list_only" = 1 ]; then
    echo "$requirements"
    exit 0
fi
[ -n "$dir" ] || { echo "error: give the wheelhouse DIR" >&2; usage 2; }
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
echo "$requirements" > "$dir/requirements-wheelhouse.txt"

echo "== building antlr4-python3-runtime 4.9.3 (sdist only) into a pure-Python wheel"
"$py" -m pip wheel --no-deps --wheel-dir "$dir" "antlr4-python3-runtime==4.9.3"

echo "== downloading wheels for Python $python_version ($abi) on $platform into $dir"
"$py" -m pip download \
    --only-binary=:all: \
    --python-version "$python_version" \
    --implementation cp \
    --abi "$abi" \
    "${platform_args[@]}" \
    --find-links "$dir" \
    --dest "$dir" \
    -r "$dir/requirements-wheelhouse.txt"

count="$(find "$dir" -maxdepth 1 -name '*.whl' | wc -l)"
echo "== $count wheels in $dir (torch not included: install the node's CUDA build first)"
echo "On the node, in the checkout:"
echo "pip install --no-index --find-links $dir -e ."
echo "(with the test and SLURM extras: pip install --no-index --find-links $dir -e \".[dev,slurm]\")"
