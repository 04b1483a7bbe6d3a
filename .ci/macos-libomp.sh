#!/usr/bin/env bash
# Install a pinned LLVM OpenMP runtime (libomp) for building bertembed on macOS.
#
# Apple clang has no OpenMP runtime of its own. We take libomp 21.1.8 from the
# `cmeel-libomp` wheels on PyPI (one per architecture, sha256-pinned below, so
# every build links the same bytes) and unpack them into
#
#     PREFIX/x86_64/{include,lib}    libomp.dylib with minos 10.13
#     PREFIX/arm64/{include,lib}     libomp.dylib with minos 11.0
#
# Both are installed, so an x86_64 build on an arm64 runner works as well.
# The build then needs (see [tool.cibuildwheel.macos] in pyproject.toml):
#
#     CPATH=PREFIX/ARCH/include  LIBRARY_PATH=PREFIX/ARCH/lib
#     CPPFLAGS=-IPREFIX/ARCH/include
#     LDFLAGS="-LPREFIX/ARCH/lib -Wl,-rpath,PREFIX/ARCH/lib"
#     MACOSX_DEPLOYMENT_TARGET >= the dylib's minos (10.13 / 11.0)
#
# LIBRARY_PATH matters: setup.py's OpenMP probe links a test program with
# `-lomp`, and setuptools does not pass LDFLAGS to that link step (only to the
# extension's). The install name is @rpath/libomp.dylib; delocate-wheel
# resolves it through the -rpath and vendors the dylib into the wheel.
#
# Usage: bash .ci/macos-libomp.sh [PREFIX]     (default /tmp/bertembed-libomp)
set -euo pipefail

prefix=${1:-/tmp/bertembed-libomp}
version=21.1.8
python=${PYTHON:-python3}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# pip checks these hashes itself (--require-hashes): a changed file fails here.
cat >"$tmp/requirements.txt" <<EOF
cmeel-libomp==$version \\
    --hash=sha256:74dd38d15da7ab1806d231b1f2be80a5fb6a1d404575678a0d75223aeb37f1f3 \\
    --hash=sha256:b8c1f76f32c097ec88cc9c1bb42680f54f67b4ae9977a86339f7babb5cf43650
EOF

for arch in x86_64 arm64; do
    case $arch in
        x86_64) platform=macosx_10_9_x86_64 ;;
        arm64) platform=macosx_11_0_arm64 ;;
    esac
    "$python" -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
        --platform "$platform" -r "$tmp/requirements.txt" -d "$tmp/$arch"
    "$python" -m zipfile -e "$tmp/$arch"/cmeel_libomp-*.whl "$tmp/$arch/x"
    rm -rf "${prefix:?}/$arch"
    mkdir -p "$prefix/$arch/include" "$prefix/$arch/lib"
    cp "$tmp/$arch"/x/cmeel.prefix/include/omp*.h "$prefix/$arch/include/"
    # Only libomp itself: the wheel's libgomp/libiomp5 copies are aliases we never link.
    cp "$tmp/$arch/x/cmeel.prefix/lib/libomp.dylib" "$prefix/$arch/lib/"
    echo "libomp $version ($arch) installed in $prefix/$arch"
    if command -v lipo >/dev/null; then
        lipo -info "$prefix/$arch/lib/libomp.dylib"
    fi
done
