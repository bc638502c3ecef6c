#!/usr/bin/env bash
# Random 16 KiB reads of this machine's disk at queue depth 1 with O_DIRECT
# (what a page-cache miss of a tablespace file costs when disk_direct_io is
# on): writes a 512 MiB file in the given directory, reads N random pages,
# prints reads/s and the mean, removes the file.
#
#   scripts/disk-random-read.sh [dir=target] [reads=3000]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-target}
N=${2:-3000}
FILE="$DIR/disk-random-read.$$"
trap 'rm -f "$FILE"' EXIT
mkdir -p "$DIR"
dd if=/dev/zero of="$FILE" bs=1M count=512 oflag=direct status=none
python3 - "$FILE" "$N" <<'PY'
import mmap, os, random, sys, time
path, n = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
page = mmap.mmap(-1, 16384)  # page-aligned, as O_DIRECT needs
pages = os.fstat(fd).st_size // 16384
start = time.time()
for _ in range(n):
    os.preadv(fd, [page], random.randrange(pages) * 16384)
elapsed = time.time() - start
print(f"{n} random 16 KiB O_DIRECT reads at queue depth 1: {n / elapsed:,.0f} reads/s, {elapsed / n * 1e6:.0f} us each")
PY
