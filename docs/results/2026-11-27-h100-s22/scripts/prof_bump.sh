#!/bin/sh
BUMP=1 exec "$(dirname "$0")/prof_base" "$@"
