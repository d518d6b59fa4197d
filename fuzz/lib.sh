# fuzz/lib.sh: what the fuzz scripts fuzz/run_NAME.sh share: finding clang
# with libFuzzer, building a target with ASan/UBSan, and running it over its
# corpus for a bounded time.  Sourced, not run.
OUT=fuzz/out   # gitignored

# FUZZ_SEED_ONLY=DIR: write the script's seeds to DIR/corpus-NAME and stop,
# with no clang, build or search (scripts/run-tests.sh replays them).
if [ -n "${FUZZ_SEED_ONLY:-}" ]; then
    OUT=$FUZZ_SEED_ONLY
    fuzz_find_cc() { :; }
    fuzz_build() { :; }
    fuzz_run() { exit 0; }
    return 0
fi

# Sets CC to a clang, or exits; $1 names the calling script for the message.
fuzz_find_cc() {
    CC=${FUZZ_CC:-}
    if [ -z "$CC" ]; then
        for c in clang clang-14 clang-15 clang-16; do
            if command -v "$c" >/dev/null; then CC=$c; break; fi
        done
    fi
    [ -n "$CC" ] || { echo "$1: no clang (run fuzz/run.sh once to install it)" >&2; exit 2; }
}

# fuzz_build NAME "SOURCES" "PKG-CONFIG PACKAGES" [EXTRA LIBS]: fuzz/fuzz_NAME.c -> $OUT/fuzz_NAME
fuzz_build() {
    mkdir -p "$OUT"
    local flags="-std=c17 -D_GNU_SOURCE -g -O1 -Isrc -fno-omit-frame-pointer $(pkg-config --cflags $3)"
    # shellcheck disable=SC2086
    "$CC" $flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        "fuzz/fuzz_$1.c" $2 -o "$OUT/fuzz_$1" $(pkg-config --libs $3) ${4:-}
}

# fuzz_run NAME CORPUS SECONDS: crashes land in $OUT/NAME-crash-*.
fuzz_run() {
    echo "fuzz/run_$1.sh: fuzzing for ${3}s with $CC" >&2
    "$OUT/fuzz_$1" "$2" -max_total_time="$3" -rss_limit_mb=1024 -max_len=65536 \
        -artifact_prefix="$OUT/$1-" -print_final_stats=1
}
