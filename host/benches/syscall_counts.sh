#!/usr/bin/env bash
# The system calls of the native CLI's three hot paths, counted for two
# durasync binaries (BEFORE, AFTER): a refactoring must leave them equal.
#
#   host/benches/syscall_counts.sh BEFORE_BINARY AFTER_BINARY
#
# Each case runs on a fresh tree of 1000 x 4 KiB files under $TMPDIR (or
# /var/tmp), `--flush fsync`, under `strace -f -c`:
#   replace   a target whose 1000 files all differ from the source;
#   one-file  a target that differs from the source in one file;
#   unchanged a target equal to the source.
# Prints one line per case and binary: the total of file-system calls and
# the calls per name (the most frequent of RUNS=5 runs), then whether
# BEFORE and AFTER agree. Thread and memory
# calls (futex, mmap, clone, …) vary from run to run and are left out.
# Needs strace.
set -euo pipefail
before=$(realpath "$1")
after=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/var/tmp}/durasync-syscalls.XXXXXX")
trap 'rm -rf "$work"' EXIT

fill() { # DIR TEXT: 1000 files of 4 KiB in 10 subdirectories
    local dir=$1 text=$2
    python3 - "$dir" "$text" <<'PY'
import os, sys
d, t = sys.argv[1], sys.argv[2]
for i in range(1000):
    sub = os.path.join(d, f"d{i % 10}")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"f{i}"), "w") as f:
        f.write((t + str(i)).ljust(4096, "."))
PY
}

count() { # BINARY CASE -> "name:calls ..." sorted
    local bin=$1 case=$2 dir="$work/$2-$(basename "$(dirname "$1")")-$RANDOM"
    mkdir -p "$dir"
    fill "$dir/src" new
    case $case in
        replace) fill "$dir/target" old ;;
        one-file) fill "$dir/target" new; printf changed > "$dir/target/d3/f3" ;;
        unchanged) fill "$dir/target" new ;;
    esac
    sync
    strace -f -c -o "$dir/strace.out" "$bin" sync "$dir/target" --from "$dir/src" --flush fsync >/dev/null
    awk -v fs_calls="$FS_CALLS" 'BEGIN { n = split(fs_calls, l, " "); for (i = 1; i <= n; i++) want[l[i]] = 1 }
         $NF in want && $1 ~ /^[0-9.]+$/ { print $NF ":" $4 }' "$dir/strace.out" | sort | tr '\n' ' '
    rm -rf "$dir"
}

FS_CALLS="openat openat2 open mkdirat mkdir write pwrite64 writev read pread64 fchmod fchmodat fsync fdatasync \
syncfs linkat link renameat renameat2 rename unlinkat unlink rmdir flock getdents64 newfstatat fstat statx fstatfs \
statfs close lseek readlinkat fcntl ioctl"
status=0
runs=${RUNS:-5}
for case in replace one-file unchanged; do
    # Each binary several times, interleaved: a few calls vary from run to
    # run (the thread pool's timing, which small files a sync samples), so
    # the most frequent vector of counts is compared.
    : >"$work/b" ; : >"$work/a"
    for _ in $(seq "$runs"); do
        count "$before" "$case" >>"$work/b"; echo >>"$work/b"
        count "$after" "$case" >>"$work/a"; echo >>"$work/a"
    done
    b=$(sort "$work/b" | uniq -c | sort -rn | head -1 | sed 's/^ *[0-9]* //')
    a=$(sort "$work/a" | uniq -c | sort -rn | head -1 | sed 's/^ *[0-9]* //')
    tb=$(echo "$b" | tr ' ' '\n' | awk -F: '{s += $2} END {print s}')
    ta=$(echo "$a" | tr ' ' '\n' | awk -F: '{s += $2} END {print s}')
    totals() { sort -u "$1" | while read -r l; do echo "$l" | tr ' ' '\n' | awk -F: '{s += $2} END {print s}'; done | sort -n | tr '\n' ' '; }
    echo "$case before: most often $tb calls: $b(totals seen: $(totals "$work/b"))"
    echo "$case after:  most often $ta calls: $a(totals seen: $(totals "$work/a"))"
    if [ "$b" = "$a" ]; then
        echo "$case: equal"
    elif [ "$(sort -u "$work/b")" = "$(sort -u "$work/a")" ]; then
        echo "$case: equal (the same vectors seen, in other proportions)"
    else
        echo "$case: DIFFERENT"; status=1
    fi
done
exit $status
