# Shell functions shared by the CI scripts (source it: . "$CHECKOUT/.ci/lib.sh").

# What every build-and-test venv holds: the build tools and the test
# requirements (the optional ones, safetensors and ml_dtypes, are installed
# by each script as it can).
CI_REQUIREMENTS=(numpy pytest hypothesis threadpoolctl "Cython>=3.1" "setuptools>=77" wheel)
CI_OPTIONAL=(safetensors ml_dtypes)

# ci_venv PYTHON DIR [PIP_ARGS...]: a venv at DIR made by PYTHON (kept when
# it exists), with pip upgraded and CI_REQUIREMENTS installed.
ci_venv() {
    local python="$1" dir="$2"
    shift 2
    # A cached venv that a stopped run left half made is made again.
    if [[ ! -e "$dir/.complete" ]]; then
        rm -rf "$dir"
        "$python" -m venv "$dir"
        touch "$dir/.complete"
    fi
    "$dir/bin/python" -m pip install -q --upgrade pip
    "$dir/bin/python" -m pip install -q "$@" "${CI_REQUIREMENTS[@]}"
}

# ci_copy_package CHECKOUT DEST: the files a build needs, no build products.
ci_copy_package() {
    local from="$1" to="$2" f
    rm -rf "$to"
    mkdir -p "$to"
    for f in setup.py pyproject.toml README.md LICENSE MANIFEST.in; do
        [[ -e "$from/$f" ]] && cp "$from/$f" "$to/"
    done
    cp -r "$from/src" "$to/src"
    find "$to/src" \( -name '*.so' -o -name '*.pyd' -o -name '_kernel.c' \
        -o -name '__pycache__' \) -prune -exec rm -rf {} +
}

# ci_copy_tests CHECKOUT DEST: the tests and what they read, to run them
# against an installed package (not the checkout's sources).
ci_copy_tests() {
    local from="$1" to="$2" d
    mkdir -p "$to"
    for d in tests docs examples benchmarks .ci README.md pyproject.toml; do
        [[ -e "$from/$d" ]] && cp -r "$from/$d" "$to/"
    done
    rm -rf "$to/docs/_build" "$to/docs/reference/generated"
    find "$to" -name '__pycache__' -prune -exec rm -rf {} +
}
