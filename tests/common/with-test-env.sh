#!/bin/sh
# Runs a command in the environment every test run gets
# (tests/common/test-env.sh): with-test-env.sh CMD [ARGS...]
. "$(dirname "$0")/test-env.sh"
exec "$@"
