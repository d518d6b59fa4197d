#!/bin/sh
# Turns a file into a C source defining `const unsigned char NAME[]` (its bytes and a
# final NUL) and `const size_t NAME_len`, so the binary carries it without
# needing it at run time.  Uses only od and sed, which every system has.
# usage: scripts/embed.sh NAME INPUT OUTPUT
set -eu
name=$1 in=$2 out=$3
tmp="$out.tmp"
{
  echo "/* Generated from $in by scripts/embed.sh; do not edit. */"
  echo "#include <stddef.h>"
  echo "const unsigned char $name[] = {"
  od -An -v -tx1 "$in" | sed -e 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g' -e 's/^/    /'
  echo "    0x00};"
  echo "const size_t ${name}_len = sizeof $name - 1;"
} > "$tmp"
mv "$tmp" "$out"
