# Documentation checks.
TEST_SCRIPTS += tests/docs/env-table.sh
TEST_SCRIPTS += tests/docs/install-lines.sh
TEST_SCRIPTS += tests/docs/timeout-scale.sh
