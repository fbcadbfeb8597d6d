#!/bin/sh
# Run the far-memory DataFrame example with the fmem package of this build
# tree (after make); writes dataframe.png into the current directory.
#   examples/dataframe/run.sh [--rows N] [--cache-mib M] [--out FILE]
here=$(cd "$(dirname "$0")" && pwd)
exec "$here/../../bindings/python/pyrun" "$here/dataframe.py" "$@"
