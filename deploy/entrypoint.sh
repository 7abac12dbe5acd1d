#!/bin/sh
# A per-container data dir (its lock, wake socket and relay files are per process) whose
# snapshots/ and worktrees/ live on the shared storage, next to the shared temp dir: servers show
# and merge what any worker made (docs/scale-out.md, "What lives where").
set -eu
shared="${SHARED_DIR:-/srv/malamar}"
mkdir -p "$MALAMAR_DATA_DIR" "$MALAMAR_TEMP_DIR" "$shared/snapshots" "$shared/worktrees"
for name in snapshots worktrees; do
    if [ ! -e "$MALAMAR_DATA_DIR/$name" ]; then
        ln -s "$shared/$name" "$MALAMAR_DATA_DIR/$name"
    fi
done
exec "$@"
